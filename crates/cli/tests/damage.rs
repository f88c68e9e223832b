use super::ownership::{SHARED, as_member, root_only};
use super::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Root,
    Member,
}

const BOTH: [Who; 2] = [Who::Root, Who::Member];

/// How a file is damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// Not JSON (a typo).
    NotJson,
    /// JSON of the right shape with a value out of range (for the config).
    OutOfRange,
    /// A key written twice.
    Duplicated,
    /// An empty directory at the name.
    Directory,
    /// A directory with a file in it.
    FullDirectory,
    /// A FIFO (a read must not block on it).
    Fifo,
    /// A symbolic link to a good file (never followed).
    Symlink,
    /// Over 64 KiB.
    Oversized,
    /// A good file only root can read (mode 0600).
    Unreadable,
}

/// A slot directory shared with the group `SHARED` (setgid 2770), reachable by the member.
fn shared_site(config: Option<&str>) -> Site {
    root_only();
    let site = Site::new(config);
    std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
        .expect("chmod the temp dir");
    std::os::unix::fs::chown(site.slots(), Some(0), Some(SHARED)).expect("chown");
    std::fs::set_permissions(site.slots(), std::fs::Permissions::from_mode(0o2770))
        .expect("chmod the slot directory");
    site
}

/// Puts `damage` at `path`; `good` is what a good file there holds.
fn damage(site: &Site, path: &Path, how: Damage, good: &str) {
    let _ = std::fs::remove_dir_all(path);
    let _ = std::fs::remove_file(path);
    match how {
        Damage::NotJson => std::fs::write(path, r#"{"max_agents": "4""#).expect("write"),
        Damage::OutOfRange => std::fs::write(path, r#"{"max_test_runs": 9}"#).expect("write"),
        Damage::Duplicated => {
            std::fs::write(path, r#"{"max_agents": 1, "max_agents": 8}"#).expect("write")
        }
        Damage::Directory => std::fs::create_dir(path).expect("mkdir"),
        Damage::FullDirectory => {
            std::fs::create_dir(path).expect("mkdir");
            std::fs::write(path.join("kept"), b"an operator's file").expect("write");
        }
        Damage::Fifo => rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o666),
            0,
        )
        .expect("mkfifo"),
        Damage::Symlink => {
            let target = site.file(&format!(
                "link-target-{}",
                path.file_name().expect("name").to_string_lossy()
            ));
            std::fs::write(&target, good).expect("write the target");
            std::os::unix::fs::symlink(&target, path).expect("symlink");
        }
        Damage::Oversized => {
            std::fs::write(path, format!("{}{good}", " ".repeat(70 * 1024))).expect("write")
        }
        Damage::Unreadable => {
            std::fs::write(path, good).expect("write");
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
    }
}

fn run(site: &Site, who: Who, args: &[&str]) -> Output {
    match who {
        Who::Root => site.output(args),
        Who::Member => as_member(site, args),
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `ARGS` exits `code`; returns its stdout.
fn expect(site: &Site, who: Who, args: &[&str], code: i32, case: &str) -> String {
    let out = run(site, who, args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{case}, {who:?}: `worklane {}`: {}",
        args.join(" "),
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(site: &Site, who: Who, args: &[&str], code: i32, case: &str) -> Value {
    let out = expect(site, who, args, code, case);
    serde_json::from_str(&out).unwrap_or_else(|e| {
        panic!(
            "{case}, {who:?}: `worklane {}` prints JSON ({e}): {out}",
            args.join(" ")
        )
    })
}

/// The problem named `name` in `doc["problems"]`, if any.
fn problem<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
    doc["problems"]
        .as_array()
        .expect("problems is an array")
        .iter()
        .find(|p| p["name"] == name)
}

/// A problem's `what` and `fix` say something.
fn said(p: &Value, case: &str) {
    for key in ["what", "fix"] {
        assert!(
            p[key].as_str().is_some_and(|s| s.len() > 10),
            "{case}: the problem's {key} says what: {p}"
        );
    }
}

// ---- the config ---------------------------------------------------------------------

/// Every operator command and view with the config damaged so that `who` cannot use it.
fn config_cannot_be_used(site: &Site, who: Who, case: &str) {
    let file = site.slots().join("config.json");
    let shown = file.display().to_string();
    let stop = site.slots().join("STOP");
    let flag = site.slots().join("update-drain.json");
    let config_problem = |doc: &Value, what: &str| {
        let p = &doc["config_problem"];
        assert_eq!(p["file"], shown.as_str(), "{case}, {who:?}, {what}: {doc}");
        for key in ["what", "fix"] {
            assert!(
                p[key].as_str().is_some_and(|s| s.len() > 10),
                "{case}, {who:?}, {what}: config_problem.{key}: {doc}"
            );
        }
    };
    let says_problem = |out: &str, what: &str| {
        assert!(
            out.contains("config problem: ") && out.contains(&shown) && out.contains("fix: "),
            "{case}, {who:?}: `{what}` shows the config's problem: {out}"
        );
    };

    let out = expect(site, who, &["stop-all", "incident"], 0, case);
    assert!(out.contains("STOP written"), "{case}, {who:?}: {out}");
    assert!(stop.is_file(), "{case}, {who:?}: STOP is written");
    says_problem(&expect(site, who, &["slots"], 0, case), "slots");
    let doc = json(site, who, &["slots", "--json"], 0, case);
    config_problem(&doc, "slots --json");
    assert_eq!(
        doc["max_agents"], 0,
        "{case}, {who:?}: no cap in force: {doc}"
    );
    assert!(
        doc["stop"].is_object(),
        "{case}, {who:?}: STOP in force: {doc}"
    );
    let doc = json(site, who, &["why", "--json"], 69, case);
    config_problem(&doc, "why --json");
    says_problem(&expect(site, who, &["why"], 69, case), "why");
    let doc = json(site, who, &["queue", "ls", "--json"], 0, case);
    config_problem(&doc, "queue ls --json");
    says_problem(&expect(site, who, &["queue", "ls"], 0, case), "queue ls");
    let doc = json(site, who, &["budget", "show", "--json"], 0, case);
    config_problem(&doc, "budget show --json");
    says_problem(
        &expect(site, who, &["budget", "show"], 0, case),
        "budget show",
    );
    expect(site, who, &["idle"], 0, case);
    expect(
        site,
        who,
        &["reconcile", "a-00000000000000000000000000000000"],
        64,
        case,
    );
    let out = expect(site, who, &["resume-all"], 0, case);
    assert!(out.contains("STOP removed"), "{case}, {who:?}: {out}");
    assert!(!stop.exists(), "{case}, {who:?}: STOP is gone");
    // Without STOP, the config is what blocks a take, and `why` says so with 78.
    let doc = json(site, who, &["why", "--json"], 78, case);
    assert_eq!(
        doc["blocked_by"], "resource_admission",
        "{case}, {who:?}: {doc}"
    );
    assert!(
        doc["resource_admission"]["why"]
            .as_str()
            .is_some_and(|w| w.contains(&shown)),
        "{case}, {who:?}: names the file: {doc}"
    );
    expect(site, who, &["drain", "--until", "30m"], 0, case);
    assert!(flag.is_file(), "{case}, {who:?}: the drain flag is written");
    expect(site, who, &["undrain"], 0, case);
    assert!(!flag.exists(), "{case}, {who:?}: the drain flag is gone");
    // `config get` is the config's own reader: 78, with the same problem and fix.
    let out = run(site, who, &["config", "get"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(78),
        "{case}, {who:?}: {}",
        text(&out)
    );
    assert!(
        err.contains(&shown) && err.contains("fix: "),
        "{case}, {who:?}: config get names the file and the fix: {err}"
    );
    // Takes still refuse, naming the file and the fix.
    for take in [
        &["run", "--", "true"][..],
        &["run", "--kind", "full-run", "--", "true"],
        &["lease", "run", "--role", "r", "--", "true"],
        &["queue", "full-run", "--", "true"],
        &["enqueue", "--", "true"],
    ] {
        let out = run(site, who, take);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(78),
            "{case}, {who:?}: {take:?}: {}",
            text(&out)
        );
        assert!(
            err.contains(&shown) && err.contains("fix: "),
            "{case}, {who:?}: {take:?} names the file and the fix: {err}"
        );
    }
}

/// The same commands when the config is good for `who`.
fn config_is_good(site: &Site, who: Who, case: &str) {
    let doc = json(site, who, &["slots", "--json"], 0, case);
    assert!(doc["config_problem"].is_null(), "{case}, {who:?}: {doc}");
    expect(site, who, &["run", "--", "true"], 0, case);
}

fn broken_config(how: Damage) {
    let site = shared_site(None);
    let case = format!("config {how:?}");
    damage(
        &site,
        &site.slots().join("config.json"),
        how,
        r#"{"max_agents": 4}"#,
    );
    for who in BOTH {
        if how == Damage::Unreadable && who == Who::Root {
            // Root reads a file of mode 0600: for root it is a good config.
            config_is_good(&site, who, &case);
        } else {
            config_cannot_be_used(&site, who, &case);
        }
    }
}

#[test]
fn a_config_that_is_not_json() {
    broken_config(Damage::NotJson);
}

#[test]
fn a_config_with_a_value_out_of_range() {
    broken_config(Damage::OutOfRange);
}

#[test]
fn a_config_with_a_key_written_twice() {
    broken_config(Damage::Duplicated);
}

#[test]
fn a_directory_at_the_config() {
    broken_config(Damage::Directory);
}

#[test]
fn a_fifo_at_the_config() {
    broken_config(Damage::Fifo);
}

#[test]
fn a_symlink_at_the_config() {
    broken_config(Damage::Symlink);
}

#[test]
fn an_oversized_config() {
    broken_config(Damage::Oversized);
}

#[test]
fn a_config_only_root_can_read() {
    broken_config(Damage::Unreadable);
}

#[test]
fn a_config_named_by_agent_slots_config_outside_the_directory() {
    // AGENT_SLOTS_CONFIG names the file: the problem names that file, the rest works.
    let site = shared_site(None);
    let file = site.file("caps.json");
    std::fs::write(&file, "{").expect("write");
    let out = site
        .worklane()
        .env("AGENT_SLOTS_CONFIG", &file)
        .args(["slots", "--json"])
        .output_gated()
        .expect("slots");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        doc["config_problem"]["file"],
        file.display().to_string(),
        "{doc}"
    );
    let out = site
        .worklane()
        .env("AGENT_SLOTS_CONFIG", &file)
        .args(["stop-all", "x"])
        .output_gated()
        .expect("stop-all");
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn a_run_waiting_when_the_config_breaks_exits_78_with_the_fix() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let waiter = Running::new(
        site.worklane()
            .args(["run", "--", "true"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn the waiter"),
    );
    wait_until("the waiter in line", || {
        std::fs::read_dir(site.slots())
            .expect("list")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("line-agent."))
    });
    std::fs::write(site.slots().join("config.json"), r#"{"max_agents": "1""#).expect("break");
    let out = waiter.wait_with_output().expect("the waiter");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("config.json") && err.contains("fix: correct the JSON"),
        "names the file and the fix: {err}"
    );
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
}

// ---- STOP ---------------------------------------------------------------------------

const GOOD_STOP: &str =
    r#"{"by": "alice@build1", "at": "2026-11-30T04:55:19.924Z", "reason": "kept"}"#;

fn broken_stop(how: Damage) {
    let site = shared_site(None);
    let stop = site.slots().join("STOP");
    for who in BOTH {
        let case = format!("STOP {how:?}");
        damage(&site, &stop, how, GOOD_STOP);
        // Root reads a STOP only root may read: it is a good STOP to root.
        let readable = how == Damage::Unreadable && who == Who::Root;
        let doc = json(&site, who, &["slots", "--json"], 0, &case);
        assert!(
            doc["stop"].is_object(),
            "{case}, {who:?}: a STOP in force: {doc}"
        );
        match problem(&doc, "STOP") {
            Some(p) if !readable => said(p, &case),
            None if readable => {}
            other => panic!("{case}, {who:?}: STOP's problem: {other:?} in {doc}"),
        }
        let out = expect(&site, who, &["slots"], 0, &case);
        assert!(out.contains("STOP in force"), "{case}, {who:?}: {out}");
        if !readable {
            assert!(
                out.contains("STOP: the STOP file"),
                "{case}, {who:?}: {out}"
            );
        }
        let doc = json(&site, who, &["why", "--json"], 69, &case);
        assert_eq!(
            doc["blocked_by"], "resource_admission",
            "{case}, {who:?}: {doc}"
        );
        expect(&site, who, &["run", "--", "true"], 69, &case);
        expect(&site, who, &["queue", "ls"], 0, &case);
        expect(&site, who, &["budget", "show"], 0, &case);
        expect(&site, who, &["drain", "--until", "30m"], 0, &case);
        expect(&site, who, &["undrain"], 0, &case);

        // resume-all lifts it, whatever it is, but a directory with files in it.
        let out = run(&site, who, &["resume-all"]);
        if how == Damage::FullDirectory {
            let err = String::from_utf8_lossy(&out.stderr);
            assert_ne!(
                out.status.code(),
                Some(0),
                "{case}, {who:?}: {}",
                text(&out)
            );
            assert!(
                err.contains("stays in force") && err.contains("rm -r"),
                "{case}, {who:?}: says STOP stays and the fix: {err}"
            );
            assert!(
                stop.join("kept").exists(),
                "{case}, {who:?}: nothing deleted"
            );
        } else {
            assert_eq!(
                out.status.code(),
                Some(0),
                "{case}, {who:?}: {}",
                text(&out)
            );
            assert!(
                std::fs::symlink_metadata(&stop).is_err(),
                "{case}, {who:?}: resume-all removed it"
            );
            expect(&site, who, &["run", "--", "true"], 0, &case);
        }

        // stop-all replaces it, whatever it is, but a directory with files in it, which is
        // a STOP in force all the same: it says so and halts what runs, exit 0.
        damage(&site, &stop, how, GOOD_STOP);
        let doc = json(&site, who, &["stop-all", "--json", "replaced"], 0, &case);
        if how == Damage::FullDirectory {
            assert_eq!(doc["written"], false, "{case}, {who:?}: {doc}");
            said(problem(&doc, "STOP").expect("STOP's problem"), &case);
            let out = expect(&site, who, &["stop-all", "again"], 0, &case);
            assert!(out.contains("already in force"), "{case}, {who:?}: {out}");
            std::fs::remove_dir_all(&stop).expect("clean up");
        } else {
            assert_eq!(doc["written"], true, "{case}, {who:?}: {doc}");
            let written: Value =
                serde_json::from_slice(&std::fs::read(&stop).expect("a STOP file")).expect("JSON");
            assert_eq!(written["reason"], "replaced", "{case}, {who:?}");
            expect(&site, who, &["resume-all"], 0, &case);
        }
    }
}

#[test]
fn a_stop_that_is_not_json() {
    broken_stop(Damage::NotJson);
}

#[test]
fn an_empty_directory_at_stop() {
    broken_stop(Damage::Directory);
}

#[test]
fn a_directory_with_files_at_stop() {
    broken_stop(Damage::FullDirectory);
}

#[test]
fn a_fifo_at_stop() {
    broken_stop(Damage::Fifo);
}

#[test]
fn a_symlink_at_stop() {
    broken_stop(Damage::Symlink);
}

#[test]
fn an_oversized_stop() {
    broken_stop(Damage::Oversized);
}

#[test]
fn a_stop_only_root_can_read() {
    broken_stop(Damage::Unreadable);
}

// ---- the drain flag -----------------------------------------------------------------

/// A drain flag in force for an hour.
fn good_drain() -> String {
    let now = worklane_lease::Clock::now_ms(&worklane_lease::SystemClock);
    format!(
        r#"{{"since": "{}", "until": "{}", "to": "9.9"}}"#,
        worklane_lease::rfc3339_ms(now),
        worklane_lease::rfc3339_ms(now + 3_600_000)
    )
}

fn broken_drain(how: Damage) {
    let site = shared_site(None);
    let flag = site.slots().join("update-drain.json");
    for who in BOTH {
        let case = format!("drain flag {how:?}");
        damage(&site, &flag, how, &good_drain());
        // Root reads a flag only root may read: a drain in force for root.
        let readable = how == Damage::Unreadable && who == Who::Root;
        let doc = json(&site, who, &["slots", "--json"], 0, &case);
        if readable {
            assert_eq!(doc["drain"]["state"], "in-force", "{case}, {who:?}: {doc}");
            assert!(problem(&doc, "update-drain.json").is_none(), "{doc}");
        } else {
            assert_eq!(
                doc["drain"]["state"], "unreadable",
                "{case}, {who:?}: {doc}"
            );
            said(
                problem(&doc, "update-drain.json").expect("the flag's problem"),
                &case,
            );
            let out = expect(&site, who, &["slots"], 0, &case);
            assert!(
                out.contains("update-drain.json: "),
                "{case}, {who:?}: {out}"
            );
        }
        let admitted = if readable { 69 } else { 0 };
        expect(&site, who, &["run", "--", "true"], admitted, &case);
        expect(&site, who, &["why", "--json"], admitted, &case);
        expect(&site, who, &["stop-all", "x"], 0, &case);
        expect(&site, who, &["resume-all"], 0, &case);

        let out = run(&site, who, &["undrain", "--json"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{case}, {who:?}: {}",
            text(&out)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).expect("undrain --json");
        if how == Damage::FullDirectory {
            assert_eq!(doc["removed"], false, "{case}, {who:?}: {doc}");
            said(
                problem(&doc, "update-drain.json").expect("what stays"),
                &case,
            );
            assert!(
                flag.join("kept").exists(),
                "{case}, {who:?}: nothing deleted"
            );
        } else {
            assert_eq!(doc["removed"], true, "{case}, {who:?}: {doc}");
            assert!(std::fs::symlink_metadata(&flag).is_err(), "{case}, {who:?}");
        }

        damage(&site, &flag, how, &good_drain());
        let out = run(&site, who, &["drain", "--until", "30m"]);
        if how == Damage::FullDirectory {
            let err = String::from_utf8_lossy(&out.stderr);
            assert_ne!(
                out.status.code(),
                Some(0),
                "{case}, {who:?}: {}",
                text(&out)
            );
            assert!(
                err.contains("no drain is in force") && err.contains("rm -r"),
                "{case}, {who:?}: {err}"
            );
            std::fs::remove_dir_all(&flag).expect("clean up");
        } else {
            assert_eq!(
                out.status.code(),
                Some(0),
                "{case}, {who:?}: {}",
                text(&out)
            );
            let doc = json(&site, who, &["slots", "--json"], 0, &case);
            assert_eq!(doc["drain"]["state"], "in-force", "{case}, {who:?}: {doc}");
            expect(&site, who, &["undrain"], 0, &case);
        }
    }
}

#[test]
fn a_drain_flag_that_is_not_json() {
    broken_drain(Damage::NotJson);
}

#[test]
fn an_empty_directory_at_the_drain_flag() {
    broken_drain(Damage::Directory);
}

#[test]
fn a_directory_with_files_at_the_drain_flag() {
    broken_drain(Damage::FullDirectory);
}

#[test]
fn a_fifo_at_the_drain_flag() {
    broken_drain(Damage::Fifo);
}

#[test]
fn a_symlink_at_the_drain_flag() {
    broken_drain(Damage::Symlink);
}

#[test]
fn an_oversized_drain_flag() {
    broken_drain(Damage::Oversized);
}

#[test]
fn a_drain_flag_only_root_can_read() {
    broken_drain(Damage::Unreadable);
}

// ---- a budget state -----------------------------------------------------------------

fn broken_budget(how: Damage) {
    let site = shared_site(None);
    // A real state first, to learn its file name and what a good one holds.
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 600;
    let out = site
        .worklane()
        .args(["budget", "observe", "--status", "200"])
        .args(["--header", "X-RateLimit-Remaining: 10"])
        .args(["--header", &format!("X-RateLimit-Reset: {reset}")])
        .env("GITHUB_TOKEN", "ghp_damage_test_token_not_real")
        .output_gated()
        .expect("observe");
    assert!(out.status.success(), "{}", text(&out));
    let state = std::fs::read_dir(site.slots())
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("a budget state");
    let name = state
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let good = String::from_utf8(std::fs::read(&state).expect("read")).expect("utf-8");
    damage(&site, &state, how, &good);
    let case = format!("budget state {how:?}");
    for who in BOTH {
        let readable = how == Damage::Unreadable && who == Who::Root;
        let doc = json(&site, who, &["budget", "show", "--json"], 0, &case);
        assert_eq!(doc["version"], 1, "{case}, {who:?}: {doc}");
        if readable {
            assert_eq!(doc["budgets"].as_array().map(Vec::len), Some(1), "{doc}");
            assert!(problem(&doc, &name).is_none(), "{case}, {who:?}: {doc}");
            continue;
        }
        assert_eq!(
            doc["budgets"],
            serde_json::json!([]),
            "{case}, {who:?}: {doc}"
        );
        said(problem(&doc, &name).expect("the state's problem"), &case);
        let out = expect(&site, who, &["budget", "show"], 0, &case);
        assert!(out.contains(&name), "{case}, {who:?}: {out}");
        for view in [&["slots", "--json"][..], &["why", "--json"]] {
            let doc = json(&site, who, view, 0, &case);
            said(problem(&doc, &name).expect("the state's problem"), &case);
        }
        expect(&site, who, &["stop-all", "x"], 0, &case);
        expect(&site, who, &["resume-all"], 0, &case);
        expect(&site, who, &["drain", "--until", "30m"], 0, &case);
        expect(&site, who, &["undrain"], 0, &case);
    }
}

#[test]
fn a_budget_state_that_is_not_json() {
    broken_budget(Damage::NotJson);
}

#[test]
fn a_directory_at_a_budget_state() {
    broken_budget(Damage::Directory);
}

#[test]
fn a_fifo_at_a_budget_state() {
    broken_budget(Damage::Fifo);
}

#[test]
fn a_symlink_at_a_budget_state() {
    broken_budget(Damage::Symlink);
}

#[test]
fn an_oversized_budget_state() {
    broken_budget(Damage::Oversized);
}

#[test]
fn a_budget_state_only_root_can_read() {
    broken_budget(Damage::Unreadable);
}

// ---- a dispatcher status entry --------------------------------------------------------

#[test]
fn a_dispatcher_status_entry_that_is_not_one() {
    let site = shared_site(None);
    for (how, name) in [
        (Damage::NotJson, "queue-garbled.json"),
        (Damage::Directory, "queue-dir.json"),
        (Damage::Fifo, "queue-fifo.json"),
        (Damage::Symlink, "queue-link.json"),
    ] {
        damage(&site, &site.slots().join(name), how, "{}");
    }
    for who in BOTH {
        let case = "status entries";
        for view in [&["slots", "--json"][..], &["why", "--json"]] {
            let doc = json(&site, who, view, 0, case);
            for name in [
                "queue-garbled.json",
                "queue-dir.json",
                "queue-fifo.json",
                "queue-link.json",
            ] {
                said(
                    problem(&doc, name).unwrap_or_else(|| panic!("{name}: {doc}")),
                    case,
                );
            }
        }
        expect(&site, who, &["stop-all", "x"], 0, case);
        expect(&site, who, &["resume-all"], 0, case);
    }
}

// ---- the dispatcher's answer --------------------------------------------------------

/// What a process at the dispatcher's socket does with `queue ls`'s request.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// A line that is not a reply.
    Garbage,
    /// A refusal.
    Refusal,
    /// Nothing: it accepts and never answers.
    Silence,
}

fn dispatcher_answers(answer: Answer) {
    let site = shared_site(None);
    let socket = site.slots().join("dispatcher.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777))
        .expect("chmod the socket");
    let serving = listener.try_clone().expect("clone the listener");
    std::thread::spawn(move || {
        for stream in serving.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = String::new();
            let _ = std::io::BufReader::new(&stream).read_line(&mut request);
            let reply = match answer {
                Answer::Garbage => "this is no reply\n",
                Answer::Refusal => {
                    "{\"version\":1,\"ok\":false,\"error\":\"permission\",\"message\":\"not you\"}\n"
                }
                // Held open and unanswered until the test's process ends.
                Answer::Silence => {
                    std::mem::forget(stream);
                    continue;
                }
            };
            let _ = std::io::Write::write_all(&mut stream, reply.as_bytes());
        }
    });
    let case = format!("dispatcher {answer:?}");
    for who in BOTH {
        let doc = json(&site, who, &["queue", "ls", "--json"], 0, &case);
        said(
            problem(&doc, "dispatcher.sock").expect("the dispatcher's problem"),
            &case,
        );
        assert!(
            doc["dispatcher"]
                .as_str()
                .is_some_and(|d| d.contains("did not answer")),
            "{case}, {who:?}: {doc}"
        );
        let out = expect(&site, who, &["queue", "ls"], 0, &case);
        assert!(out.contains("dispatcher.sock: "), "{case}, {who:?}: {out}");
    }
    drop(listener);
}

#[test]
fn a_dispatcher_that_answers_garbage() {
    dispatcher_answers(Answer::Garbage);
}

#[test]
fn a_dispatcher_that_refuses_to_list() {
    dispatcher_answers(Answer::Refusal);
}

#[test]
fn a_dispatcher_that_never_answers() {
    dispatcher_answers(Answer::Silence);
}
