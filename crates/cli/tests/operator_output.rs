use super::*;
use serde_json::Value;

/// A record that names a command but that `stop-all` will not act on (group-writable: it
/// proves nothing), so the run counts as still running until `stop-all` gives up.
fn unprovable_record(site: &Site, from: &str) {
    let mut record: Value = serde_json::from_slice(
        &std::fs::read(site.slots().join(from)).expect("a live run's record"),
    )
    .expect("JSON");
    record["pid"] = Value::from(4242);
    record["command"] = Value::from("make unprovable");
    record["commandProcess"] = serde_json::json!({"pid": 4243, "start": 1, "group": false});
    let path = site.slots().join("agent-7.lock");
    std::fs::write(&path, record.to_string()).expect("write");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o664))
        .expect("chmod");
}

fn ok_stdout(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn stop_all_names_each_run_it_halted_and_each_one_still_running() {
    let site = Site::new(Some(r#"{"max_agents": 8}"#));
    let mut polite = site.spawn(&["run"], HOLD, "0");
    wait_until("the run", || site.file("up.0").exists());
    unprovable_record(&site, "agent-0.lock");
    let out = ok_stdout(&site.output(&["stop-all", "incident"]), "stop-all");
    assert!(out.contains("STOP written"), "{out}");
    assert!(
        out.contains("halted agent-0.lock (pid ")
            && out.contains("`sh -c touch")
            && out.contains("(by its supervisor)"),
        "names the run it halted, with its command: {out}"
    );
    assert!(
        out.contains("still running after")
            && out.contains("agent-7.lock (pid 4243, `make unprovable`)")
            && out.contains("written by others"),
        "names what still runs and why: {out}"
    );
    assert_eq!(wait_exit(&mut polite, "the halted run").code(), Some(143));
    assert_eq!(site.code(&["resume-all"]), 0);

    // --json: the same, as one object.
    let mut polite = site.spawn(&["run"], HOLD, "1");
    wait_until("the run", || site.file("up.1").exists());
    let out = ok_stdout(
        &site.output(&["stop-all", "--json", "again"]),
        "stop-all --json",
    );
    let doc: Value = serde_json::from_str(&out).expect("one JSON object");
    let halted = doc["halted"].as_array().expect("halted");
    assert_eq!(halted.len(), 1, "{doc}");
    assert_eq!(halted[0]["resource"], "agent-0.lock", "{doc}");
    assert_eq!(halted[0]["by"], "supervisor", "{doc}");
    let left = doc["still_running"].as_array().expect("still_running");
    assert_eq!(left.len(), 1, "{doc}");
    assert_eq!(left[0]["resource"], "agent-7.lock", "{doc}");
    assert_eq!(left[0]["pid"], 4243, "{doc}");
    assert!(
        left[0]["why"]
            .as_str()
            .is_some_and(|w| w.contains("written by others")),
        "{doc}"
    );
    assert_eq!(wait_exit(&mut polite, "the halted run").code(), Some(143));
    assert_eq!(site.code(&["resume-all"]), 0);

    // -q: what was halted goes unsaid; what still runs is said all the same.
    let out = ok_stdout(&site.output(&["-q", "stop-all", "quiet"]), "stop-all -q");
    assert!(
        !out.contains("STOP written") && !out.contains("halted"),
        "no success line under -q: {out}"
    );
    assert!(out.contains("agent-7.lock (pid 4243"), "{out}");
}

#[test]
fn quiet_drops_the_success_lines_but_never_data_json_or_errors() {
    let site = Site::new(None);
    for args in [
        &["-q", "stop-all", "x"][..],
        &["--quiet", "resume-all"],
        &["drain", "-q", "--until", "30m"],
        &["undrain", "--quiet"],
        &["-q", "set-test-slots", "3"],
        &["-q", "config", "set", "max_agents", "3"],
    ] {
        let out = site.output(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout.is_empty(),
            "{args:?} prints nothing under -q: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let out = site.output(&["-q", "undrain"]);
    assert!(out.stdout.is_empty() && out.status.success(), "{out:?}");
    let out = site.output(&["-q", "undrain", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("--json is data");
    assert_eq!(doc["removed"], false, "{doc}");
    let out = site.output(&["-q", "slots"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("slot directory:"),
        "a view is data: {out:?}"
    );
    let out = site.output(&["-q", "drain", "--until", "5h"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("4 h"),
        "errors still go to stderr: {out:?}"
    );
    let queued = site
        .worklane()
        .env("TMPDIR", site.temp.path())
        .args(["-q", "queue", "full-run", "--", "true"])
        .output_gated()
        .expect("queue");
    assert!(queued.status.success(), "{queued:?}");
    assert!(queued.stdout.is_empty(), "{queued:?}");
    // Its log: in a directory of root's own under TMPDIR, 0700, the log 0600.
    let logs = site.temp.path().join("worklane-0");
    wait_until("the queued run's end", || {
        std::fs::read_dir(&logs)
            .expect("list")
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("worklane-full-run-")
            })
            .any(|e| {
                std::fs::read_to_string(e.path())
                    .is_ok_and(|log| log.contains("exited with status 0"))
            })
    });
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode(&logs), 0o700, "the logs' directory is root's alone");
    for log in std::fs::read_dir(&logs).expect("list").flatten() {
        assert_eq!(
            mode(&log.path()),
            0o600,
            "{}: the log is root's alone",
            log.path().display()
        );
    }
}

#[test]
fn slots_names_dispatched_work_by_its_command_and_a_queued_lane_by_lane_and_attempt() {
    let site = Site::new(Some(r#"{"max_agents": 2}"#));
    let _dispatcher = super::dispatcher::start(&site, &[]);
    // The driver gets the launcher's filtered environment alone (no `K`, no `T`): the key
    // is written into the script, `T` comes from `LANE_T`.
    let enqueue = |lane: &str, key: &str| {
        let out = site
            .worklane()
            .args(["enqueue", "--lane", lane, "--", "sh", "-c"])
            .arg(super::driven(&HOLD.replace("$K", key)))
            .output_gated()
            .expect("enqueue");
        ok_stdout(&out, "enqueue").trim().to_owned()
    };
    let running = enqueue("one", "1");
    wait_until("the first attempt's command", || site.file("up.1").exists());
    let mut holder = site.spawn(&["run", "--owner", "holder"], HOLD, "h");
    wait_until("the holder", || site.file("up.h").exists());
    let queued = enqueue("two", "2");
    let text = ok_stdout(&site.output(&["slots"]), "slots");
    let row = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("a row for {name}: {text}"))
            .to_owned()
    };
    assert!(
        row("lane-one.lock").contains(r#"sh -c export T="$LANE_T"; touch"#),
        "a claimed lane is named by its command: {text}"
    );
    assert!(
        row("lane-two.lock").contains(&format!("lane two, attempt {queued}")),
        "a queued lane by its lane and attempt: {text}"
    );
    assert!(
        !text.contains("worklane claim") && !text.contains("worklane enqueue"),
        "no row is named after worklane's own commands: {text}"
    );
    let doc: Value = serde_json::from_str(&ok_stdout(
        &site.output(&["slots", "--json"]),
        "slots --json",
    ))
    .expect("json");
    let slot = |name: &str| {
        doc["slots"]
            .as_array()
            .expect("slots")
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {doc}"))
    };
    assert_eq!(slot("lane-one.lock")["attempt"], running.as_str(), "{doc}");
    assert_eq!(slot("lane-two.lock")["attempt"], queued.as_str(), "{doc}");
    assert_eq!(
        slot("lane-one.lock")["owner"],
        "worklane claim",
        "the record's own owner is kept in JSON: {doc}"
    );
    for key in ["1", "h"] {
        std::fs::write(site.file(&format!("release.{key}")), b"").expect("release");
    }
    assert!(wait_exit(&mut holder, "the holder").success());
    wait_until("the queued attempt's command", || {
        site.file("up.2").exists()
    });
    std::fs::write(site.file("release.2"), b"").expect("release");
}
