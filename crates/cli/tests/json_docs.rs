use super::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// The examples of docs/json.md by name: each `<!-- example: NAME -->` and the documents
/// of the fenced block that follows it (one, or one per line for a stream of events).
pub(super) fn examples() -> BTreeMap<String, Vec<Value>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/json.md");
    let text = std::fs::read_to_string(path).expect("docs/json.md");
    let mut out = BTreeMap::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("<!-- example: ") {
        rest = &rest[at + "<!-- example: ".len()..];
        let end = rest.find(" -->").expect("an example's name ends with -->");
        let name = rest[..end].to_owned();
        let open = rest
            .find("```json\n")
            .expect("a ```json block after the name");
        let body = &rest[open + "```json\n".len()..];
        let close = body.find("\n```").expect("the block closes");
        let docs: Vec<Value> = serde_json::Deserializer::from_str(&body[..close])
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("example {name:?} is JSON: {e}"));
        assert!(!docs.is_empty(), "example {name:?} has a document");
        assert!(
            out.insert(name.clone(), docs).is_none(),
            "example {name:?} is documented once"
        );
        rest = &body[close..];
    }
    out
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `real` has the shape of `example`: the same keys, the same types, recursively.
fn same_shape(example: &Value, real: &Value, at: &str) -> Result<(), String> {
    match (example, real) {
        (Value::Object(e), Value::Object(r)) => {
            let missing: Vec<_> = e.keys().filter(|k| !r.contains_key(*k)).collect();
            let extra: Vec<_> = r.keys().filter(|k| !e.contains_key(*k)).collect();
            if !missing.is_empty() || !extra.is_empty() {
                return Err(format!(
                    "{at}: documented but not printed {missing:?}, printed but not \
                         documented {extra:?}"
                ));
            }
            e.iter()
                .try_for_each(|(k, v)| same_shape(v, &r[k], &format!("{at}.{k}")))
        }
        (Value::Array(e), Value::Array(r)) => all_match(e, r, &format!("{at}[]")),
        _ if kind(example) == kind(real) => Ok(()),
        _ => Err(format!(
            "{at}: documented as {} ({example}), printed as {} ({real})",
            kind(example),
            kind(real)
        )),
    }
}

/// Every printed element has the shape of some documented one, and every documented one
/// is printed in some element (so an example cannot drift unseen).
fn all_match(examples: &[Value], reals: &[Value], at: &str) -> Result<(), String> {
    for real in reals {
        let errors: Vec<String> = examples
            .iter()
            .filter_map(|e| same_shape(e, real, at).err())
            .collect();
        if errors.len() == examples.len() {
            return Err(format!(
                "{at}: {real} matches no documented element: {}",
                if errors.is_empty() {
                    "the example is empty".to_owned()
                } else {
                    errors.join("; ")
                }
            ));
        }
    }
    for example in examples {
        if !reals.iter().any(|r| same_shape(example, r, at).is_ok()) {
            return Err(format!(
                "{at}: the documented {example} is not printed here: {reals:?}"
            ));
        }
    }
    Ok(())
}

/// Checks `reals` against the example `name`.
pub(super) fn check(examples: &BTreeMap<String, Vec<Value>>, name: &str, reals: &[Value]) {
    let example = examples
        .get(name)
        .unwrap_or_else(|| panic!("docs/json.md documents {name:?}"));
    if let Err(e) = all_match(example, reals, name) {
        panic!("docs/json.md drifted from `worklane {name}`: {e}");
    }
}

fn doc(out: &Output, what: &str) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what} prints one JSON document ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn lines(text: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(text)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

const TOKEN: &str = "ghp_json_docs_token_not_real";

/// `worklane ARGS` with the status on descriptor 3, read back as the events.
fn status_events(site: &Site, args: &[&str]) -> Vec<Value> {
    let out = site
        .command("sh")
        .args(["-c", r#"exec "$0" "$@" 3>&1 1>&2"#])
        .arg(worklane_bin())
        .args(args)
        .env("AGENT_SLOTS_DIR", site.slots())
        .env("WORKLANE_STATE_DIR", site.state())
        .env_remove("AGENT_SLOTS_CONFIG")
        .output_gated()
        .expect("worklane");
    lines(&out.stdout)
}

#[test]
fn every_documented_example_has_the_shape_of_the_real_output() {
    let examples = examples();
    let mut checked = Vec::new();
    let mut check = |name: &str, reals: Vec<Value>| {
        check(&examples, name, &reals);
        checked.push(name.to_owned());
    };
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    // A stray directory where the first agent guard belongs: a problem, skipped.
    std::fs::create_dir(site.slots().join(".agent-0.lock.flock")).expect("stray");
    let mut holder = site.spawn(&["run", "--owner", "harness"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let mut role = site.spawn(&["lease", "run", "--role", "reviewer"], HOLD, "r");
    wait_until("the role holder", || site.file("up.r").exists());
    let budget = |args: &[&str]| {
        site.worklane()
            .arg("budget")
            .args(args)
            .env("GITHUB_TOKEN", TOKEN)
            .output_gated()
            .expect("budget")
    };
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 600;
    let observed = budget(&[
        "observe",
        "--status",
        "200",
        "--header",
        "X-RateLimit-Limit: 5000",
        "--header",
        "X-RateLimit-Remaining: 4999",
        "--header",
        &format!("X-RateLimit-Reset: {reset}"),
    ]);
    assert!(observed.status.success(), "{observed:?}");
    let taken = budget(&["take", "--consumer", "ci", "--json"]);
    assert!(taken.status.success(), "{taken:?}");
    check("budget take --json", vec![doc(&taken, "budget take")]);
    // A waiter in line, its events on descriptor 3 in a file.
    let mut waiter = Running::new(
        site.command("sh")
            .args(["-c", r#"exec "$0" "$@" 3>"$T/events""#])
            .arg(worklane_bin())
            .args(["run", "--owner", "waiter", "--status-fd", "3", "--", "true"])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .env("T", site.temp.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("spawn the waiter"),
    );
    wait_until("the waiter in line", || {
        std::fs::read(site.file("events")).is_ok_and(|e| !e.is_empty())
    });

    let slots = site.output(&["slots", "--json"]);
    check("slots --json", vec![doc(&slots, "slots --json")]);
    let why = site
        .worklane()
        .args(["why", "--role", "reviewer", "--json"])
        .env("GITHUB_TOKEN", TOKEN)
        .output_gated()
        .expect("why");
    assert_eq!(why.status.code(), Some(75), "{why:?}");
    check("why --json", vec![doc(&why, "why --json")]);
    let refused = site.output(&["lease", "run", "--role", "reviewer", "--json", "--", "true"]);
    assert_eq!(refused.status.code(), Some(75), "{refused:?}");
    check("lease run --json", vec![doc(&refused, "lease run --json")]);
    let shown = budget(&["show", "--json"]);
    check(
        "budget show --json",
        vec![doc(&shown, "budget show --json")],
    );
    let config = site.output(&["config", "get", "--json"]);
    check("config get --json", vec![doc(&config, "config get --json")]);
    std::fs::write(
        site.slots().join("protocol.json"),
        r#"{"version": 1, "level": 1, "extensions": ["weights"]}"#,
    )
    .expect("protocol.json");
    let protocol = site.output(&["protocol", "show", "--json"]);
    check(
        "protocol show --json",
        vec![doc(&protocol, "protocol show --json")],
    );
    let reconciled = site.output(&["reconcile", "a-00000000000000000000000000000000", "--json"]);
    check(
        "reconcile --json",
        vec![doc(&reconciled, "reconcile --json")],
    );
    let mut events = status_events(&site, &["run", "-n", "--status-fd", "3", "--", "true"]);
    events.extend(status_events(
        &site,
        &["run", "--limit", "1m", "--status-fd", "3", "--", "true"],
    ));

    // A credential paused by a secondary limit: its take is refused.
    let paused = site
        .worklane()
        .args([
            "budget",
            "observe",
            "--status",
            "429",
            "--header",
            "Retry-After: 60",
        ])
        .env("GITHUB_TOKEN", "ghp_json_docs_paused_not_real")
        .output_gated()
        .expect("observe");
    assert!(paused.status.success(), "{paused:?}");
    let refused_take = site
        .worklane()
        .args([
            "budget",
            "take",
            "--consumer",
            "ci",
            "--wait-max",
            "0",
            "--json",
        ])
        .env("GITHUB_TOKEN", "ghp_json_docs_paused_not_real")
        .output_gated()
        .expect("take");
    assert_eq!(refused_take.status.code(), Some(75), "{refused_take:?}");
    check(
        "budget take --json (refused)",
        vec![doc(&refused_take, "budget take --json")],
    );

    // The holder goes: the waiter takes the slot, runs and ends.
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    assert!(wait_exit(&mut waiter, "the waiter").success());
    let mut all = lines(&std::fs::read(site.file("events")).expect("events"));
    all.extend(events);
    check("run --status-fd", all);
    std::fs::write(site.file("release.r"), b"").expect("release");
    assert!(wait_exit(&mut role, "the role holder").success());

    // A queued full run, running.
    let queued = site
        .worklane()
        .env("TMPDIR", site.temp.path())
        .env("K", "1")
        .args(["queue", "full-run", "--", "sh", "-c", HOLD])
        .output_gated()
        .expect("queue");
    assert!(queued.status.success(), "{queued:?}");
    wait_until("the queued run", || site.file("up.1").exists());
    let listed = site.output(&["queue", "ls", "--json"]);
    check("queue ls --json", vec![doc(&listed, "queue ls --json")]);
    std::fs::write(site.file("release.1"), b"").expect("release");
    wait_until("the queued run's end", || site.code(&["idle"]) == 0);

    // The operator's commands: a drain, a full run queued behind it and cancelled, the
    // drain ended; a STOP that halts a run, lifted.
    let drained = site.output(&["drain", "--json", "--until", "30m", "--to", "1.2.3"]);
    check("drain --json", vec![doc(&drained, "drain --json")]);
    let queued = site
        .worklane()
        .env("TMPDIR", site.temp.path())
        .args(["queue", "full-run", "--json", "--", "true"])
        .output_gated()
        .expect("queue");
    let queued = doc(&queued, "queue full-run --json");
    check("queue full-run --json", vec![queued.clone()]);
    let id = queued["id"].as_str().expect("an id").to_owned();
    wait_until("the queued run in line", || {
        doc(&site.output(&["queue", "ls", "--json"]), "queue ls")["full_runs"]
            .as_array()
            .is_some_and(|runs| runs.iter().any(|r| r["id"] == id.as_str()))
    });
    let cancelled = site.output(&["queue", "cancel", "--json", &id]);
    check(
        "queue cancel --json",
        vec![doc(&cancelled, "queue cancel --json")],
    );
    let undrained = site.output(&["undrain", "--json"]);
    check("undrain --json", vec![doc(&undrained, "undrain --json")]);
    let mut halted = site.spawn(&["run", "--owner", "harness"], HOLD, "s");
    wait_until("the run to halt", || site.file("up.s").exists());
    let stopped = site.output(&["stop-all", "--json", "maintenance", "window"]);
    check("stop-all --json", vec![doc(&stopped, "stop-all --json")]);
    assert_eq!(wait_exit(&mut halted, "the halted run").code(), Some(143));
    let resumed = site.output(&["resume-all", "--json"]);
    check(
        "resume-all --json",
        vec![doc(&resumed, "resume-all --json")],
    );
    // What happened, from the journal: the runs, the STOP that halted one, its lifting,
    // the refused budget take.
    let journal = site.output(&[
        "events",
        "--json",
        "--kind",
        "slot-taken",
        "--kind",
        "slot-released",
        "--kind",
        "stop",
        "--kind",
        "halt",
        "--kind",
        "resume",
        "--kind",
        "budget-refused",
    ]);
    assert!(journal.status.success(), "{journal:?}");
    check("events --json", lines(&journal.stdout));

    // A budget state that is not JSON and a config that is not JSON either.
    let broken = Site::new(Some(r#"{"max_agents": "4""#));
    std::fs::write(
        broken.slots().join("github-budget-5e1d2a4c9b7f3e60.json"),
        b"not json",
    )
    .expect("write");
    let shown = broken.output(&["budget", "show", "--json"]);
    check(
        "budget show --json (problems)",
        vec![doc(&shown, "budget show --json")],
    );

    // Every documented example is checked here, but the fleet's (`fleet::`, with etcd).
    let mut documented: Vec<String> = examples.keys().cloned().collect();
    documented.retain(|name| name != "fleet status --json");
    checked.sort();
    assert_eq!(
        checked, documented,
        "each example of docs/json.md is checked"
    );
}
