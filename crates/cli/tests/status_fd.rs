use super::*;

/// `sh -c 'exec worklane ARGS 3>&1 1>&2'`: descriptor 3 is the pipe the test reads as
/// stdout; worklane's (and the command's) stdout goes to stderr.
fn through_fd_3(site: &Site) -> Command {
    let mut cmd = site.command("sh");
    cmd.args(["-c", r#"exec "$0" "$@" 3>&1 1>&2"#])
        .arg(worklane_bin())
        .env("AGENT_SLOTS_DIR", site.slots())
        .env("WORKLANE_STATE_DIR", site.state())
        .env_remove("AGENT_SLOTS_CONFIG")
        .env("T", site.temp.path())
        .stdin(Stdio::null());
    cmd
}

/// Runs worklane with the status on descriptor 3: its exit status, the events, stderr.
fn with_status(site: &Site, args: &[&str]) -> (ExitStatus, Vec<serde_json::Value>, String) {
    let out = through_fd_3(site)
        .args(args)
        .output_gated()
        .expect("worklane");
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    (
        out.status,
        events,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether the command found descriptor 3 open (printed on its stdout, here stderr).
const PROBE: &str =
    r#"if { true >&3; } 2>/dev/null; then echo "fd3=open"; else echo "fd3=closed"; fi"#;

#[test]
fn a_run_says_taken_then_end_and_its_command_never_gets_the_descriptor() {
    let site = Site::new(None);
    let script = format!("{PROBE}; exit 7");
    let (status, events, err) = with_status(
        &site,
        &["run", "--status-fd", "3", "--", "sh", "-c", &script],
    );
    assert_eq!(status.code(), Some(7), "the command's status: {err}");
    assert_eq!(events.len(), 2, "taken and end: {events:?}");
    assert_eq!(events[0]["version"], 1);
    assert_eq!(events[0]["event"], "taken");
    assert_eq!(events[0]["kind"], "agent");
    assert_eq!(events[0]["slot"], "agent-0.lock");
    assert!(events[0]["epoch"].as_u64().is_some(), "{events:?}");
    assert_eq!(
        events[1],
        serde_json::json!({"version": 1, "event": "end", "exit": 7, "halted_by": null})
    );
    assert!(err.contains("fd3=closed"), "not passed on: {err}");

    // A command ended by a signal: worklane ends by it too, and says so first.
    let (status, events, _) = with_status(
        &site,
        &[
            "run",
            "--kind",
            "test",
            "--status-fd",
            "3",
            "--",
            "sh",
            "-c",
            "kill -TERM $$",
        ],
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15), "ends by the command's signal");
    assert_eq!(events[0]["kind"], "test");
    assert_eq!(
        events.last(),
        Some(
            &serde_json::json!({"version": 1, "event": "end", "exit": 143, "halted_by": "signal"})
        )
    );
}

#[test]
fn refusals_and_errors_are_told_apart_from_the_commands_status() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    for (args, code) in [
        (&["run", "-n", "--status-fd", "3", "--", "true"][..], 75),
        (
            &["run", "-n", "-E", "1", "--status-fd", "3", "--", "true"],
            1,
        ),
    ] {
        let (status, events, err) = with_status(&site, args);
        assert_eq!(status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["event"], "refused", "{events:?}");
        assert_eq!(events[0]["exit"], code, "{events:?}");
        assert!(
            events[0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("at cap")),
            "{events:?}"
        );
    }
    // A usage error after the descriptor was claimed is worklane's, not the command's.
    let (status, events, _) = with_status(
        &site,
        &["run", "--limit", "1m", "--status-fd", "3", "--", "true"],
    );
    assert_eq!(status.code(), Some(64));
    assert_eq!(events[0]["event"], "error", "{events:?}");
    assert_eq!(events[0]["exit"], 64, "{events:?}");
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    assert_eq!(site.code(&["stop-all", "test"]), 0);
    let (status, events, _) = with_status(&site, &["run", "--status-fd", "3", "--", "true"]);
    assert_eq!(status.code(), Some(69));
    assert_eq!(events[0]["event"], "refused");
    assert_eq!(events[0]["exit"], 69);
}

#[test]
fn a_descriptor_that_is_not_open_for_writing_is_a_usage_error_naming_it() {
    let site = Site::new(None);
    for (args, says) in [
        (
            &["run", "--status-fd", "9", "--", "true"][..],
            "--status-fd 9: it is not open",
        ),
        (&["run", "--status-fd", "1", "--", "true"], "--status-fd 1"),
        (
            &[
                "lease",
                "run",
                "--role",
                "r",
                "--status-fd",
                "7",
                "--",
                "true",
            ],
            "--status-fd 7: it is not open",
        ),
    ] {
        let out = site.output(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = site
        .command("sh")
        .args(["-c", r#"exec "$0" "$@" 3</dev/null"#])
        .arg(worklane_bin())
        .args(["run", "--status-fd", "3", "--", "true"])
        .env("AGENT_SLOTS_DIR", site.slots())
        .env("WORKLANE_STATE_DIR", site.state())
        .output_gated()
        .expect("worklane");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("for reading only"), "{err}");
    assert!(
        !site.slots().join("agent-0.lock").exists(),
        "nothing was taken"
    );
}

#[test]
fn a_lease_run_says_taken_refused_and_halted_by_stop() {
    let site = Site::new(None);
    let (status, events, err) = with_status(
        &site,
        &[
            "lease",
            "run",
            "--role",
            "r",
            "--status-fd",
            "3",
            "--",
            "sh",
            "-c",
            PROBE,
        ],
    );
    assert!(status.success(), "{err}");
    assert_eq!(events[0]["event"], "taken");
    assert_eq!(events[0]["kind"], "role");
    assert_eq!(events[0]["slot"], "role-r.lease");
    assert_eq!(events[1]["exit"], 0);
    assert!(err.contains("fd3=closed"), "not passed on: {err}");

    let mut holder = Running::new(
        through_fd_3(&site)
            .args([
                "lease",
                "run",
                "--role",
                "r",
                "--status-fd",
                "3",
                "--",
                "sh",
                "-c",
            ])
            .arg(r#"touch "$T/up.0"; exec sleep 600"#)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("spawn"),
    );
    wait_until("the role holder", || site.file("up.0").exists());
    let (status, events, _) = with_status(
        &site,
        &[
            "lease",
            "run",
            "--role",
            "r",
            "--status-fd",
            "3",
            "--",
            "true",
        ],
    );
    assert_eq!(status.code(), Some(75));
    assert_eq!(events[0]["event"], "refused", "{events:?}");
    assert_eq!(events[0]["exit"], 75, "{events:?}");
    assert_eq!(site.code(&["stop-all", "test"]), 0);
    let status = wait_exit(&mut holder, "the halted holder");
    assert_eq!(status.code(), Some(143));
    let mut out = String::new();
    std::io::Read::read_to_string(&mut holder.stdout.take().expect("stdout"), &mut out)
        .expect("read");
    let last: serde_json::Value =
        serde_json::from_str(out.lines().last().expect("an event")).expect("json");
    assert_eq!(
        last,
        serde_json::json!({"version": 1, "event": "end", "exit": 143, "halted_by": "stop"})
    );
}

#[test]
fn a_waiting_run_says_so_once_then_taken() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let file = site.file("status");
    let mut waiter = Running::new(
        site.command("sh")
            .args(["-c", r#"exec "$0" "$@" 3>"$T/status""#])
            .arg(worklane_bin())
            .args(["run", "--status-fd", "3", "--", "true"])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env("T", site.temp.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("spawn"),
    );
    let read = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    wait_until("the waiting event", || !read().is_empty());
    let first = read();
    assert_eq!(first[0]["event"], "waiting", "{first:?}");
    assert_eq!(first[0]["kind"], "agent", "{first:?}");
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    assert!(wait_exit(&mut waiter, "the waiter").success());
    let all: Vec<String> = read()
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("?").to_owned())
        .collect();
    assert_eq!(all, ["waiting", "taken", "end"], "waiting is said once");
}
