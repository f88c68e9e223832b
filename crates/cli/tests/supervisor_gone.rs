//! The slot lives exactly as long as any process of the run (the command inherits the
//! slot's guard), a holder killed in another pid namespace frees it at once, the command
//! learns its fencing epoch, and STOP reaches a command whose supervisor cannot act.
use super::*;
use rustix::process::{Pid, Signal};
use std::os::unix::process::ExitStatusExt;

fn pid_of(path: &Path) -> i32 {
    let mut text = String::new();
    wait_until("a pid file", || {
        text = std::fs::read_to_string(path).unwrap_or_default();
        text.ends_with('\n')
    });
    text.trim().parse().expect("a pid")
}

/// Whether `pid` is gone or a zombie.
fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
    })
}

fn signal(pid: i32, signal: Signal) {
    let _ = rustix::process::kill_process(Pid::from_raw(pid).expect("pid"), signal);
}

/// Kills `pid` when dropped (a test that fails midway leaves nothing behind).
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        signal(self.0, Signal::CONT);
        signal(self.0, Signal::KILL);
    }
}

#[test]
fn killing_the_supervisor_does_not_free_the_slot_its_command_uses() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    // The command ignores SIGTERM, so it outlives the parent-death signal.
    let mut run = site.spawn(
        &["run"],
        r#"trap '' TERM; echo $$ > "$T/cmd.pid"; exec sleep 60"#,
        "0",
    );
    let command = pid_of(&site.file("cmd.pid"));
    let _cleanup = KillOnDrop(command);
    run.kill().expect("SIGKILL the supervisor only");
    run.wait().expect("reap");
    assert!(!gone(command), "the command runs on");
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        75,
        "its slot is still held: two agents never run at cap 1"
    );
    let out = site.output(&["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["agents_held"], 1, "slots counts it: {doc}");
    signal(command, Signal::KILL);
    wait_until("the command's end", || gone(command));
    let mut code = 0;
    wait_until("the slot free once the command is gone", || {
        code = site.code(&["run", "--no-wait", "--", "true"]);
        code == 0
    });
}

#[test]
fn a_command_whose_supervisor_dies_is_told_with_sigterm() {
    let site = Site::new(None);
    let mut run = site.spawn(&["run"], r#"echo $$ > "$T/cmd.pid"; exec sleep 60"#, "0");
    let command = pid_of(&site.file("cmd.pid"));
    let _cleanup = KillOnDrop(command);
    run.kill().expect("SIGKILL the supervisor");
    run.wait().expect("reap");
    wait_until("the parent-death signal to end the command", || {
        gone(command)
    });
}

#[test]
fn a_run_killed_in_another_pid_namespace_frees_its_slot_at_once() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut contained = Running::new(
        site.command("unshare")
            .args(["--pid", "--fork", "--kill-child", "--mount-proc"])
            .arg(worklane_bin())
            .args(["run", "--", "sh", "-c", r#"touch "$T/up"; exec sleep 60"#])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env("T", site.temp.path())
            .stdin(Stdio::null())
            .spawn_gated()
            .expect("spawn unshare"),
    );
    wait_until("the contained run", || site.file("up").exists());
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        75,
        "held from the other namespace"
    );
    contained.kill().expect("SIGKILL the namespace");
    contained.wait().expect("reap");
    let mut code = 0;
    wait_until("the slot taken over", || {
        code = site.code(&["run", "--no-wait", "--", "true"]);
        code != 75
    });
    assert_eq!(
        code, 0,
        "a dead holder's record from another namespace is taken over"
    );
}

#[test]
fn the_command_gets_its_resource_and_epoch() {
    let site = Site::new(None);
    for _ in 0..2 {
        let out = site.output(&[
            "run",
            "--",
            "sh",
            "-c",
            r#"echo "$WORKLANE_RESOURCE $WORKLANE_EPOCH" >> "$T/fencing""#,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = site.output(&[
        "lease",
        "run",
        "--role",
        "deployer",
        "--",
        "sh",
        "-c",
        r#"echo "$WORKLANE_RESOURCE $WORKLANE_EPOCH" >> "$T/fencing""#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(site.file("fencing")).expect("written");
    assert_eq!(
        text, "agent-0.lock 1\nagent-0.lock 2\nrole-deployer.lease 1\n",
        "each run sees its own resource and a growing epoch"
    );
}

fn record(site: &Site, name: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(site.slots().join(name)).expect("record"))
        .expect("a JSON record")
}

#[test]
fn the_record_names_the_command_process() {
    let site = Site::new(None);
    let _run = site.spawn(&["run"], r#"echo $$ > "$T/cmd.pid"; exec sleep 60"#, "0");
    let command = pid_of(&site.file("cmd.pid"));
    let mut named = serde_json::Value::Null;
    wait_until("the record to name the command", || {
        named = record(&site, "agent-0.lock")["commandProcess"].clone();
        !named.is_null()
    });
    assert_eq!(named["pid"], command, "{named}");
    assert_eq!(named["group"], true, "no terminal: a group of its own");
    assert!(named["start"].as_u64().is_some(), "{named}");
    assert_eq!(record(&site, "agent-0.lock")["holdsGuard"], true);
}

#[test]
fn stop_all_halts_a_command_whose_supervisor_is_stopped() {
    let site = Site::new(None);
    let mut run = site.spawn(&["run"], r#"echo $$ > "$T/cmd.pid"; exec sleep 60"#, "0");
    let command = pid_of(&site.file("cmd.pid"));
    let _cleanup = KillOnDrop(command);
    wait_until("the record to name the command", || {
        !record(&site, "agent-0.lock")["commandProcess"].is_null()
    });
    let supervisor = i32::try_from(run.id()).expect("pid");
    signal(supervisor, Signal::STOP);
    let out = site.output(&["stop-all", "incident"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        gone(command),
        "stop-all returns once the command is halted: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Continued by stop-all (it holds a copy of the slot's guard): it lets go and exits
    // with nobody resuming it by hand.
    let status = wait_exit(&mut run, "the supervisor");
    assert_eq!(
        status.code().or(status.signal().map(|s| 128 + s)),
        Some(128 + 15),
        "the command died of SIGTERM, and the supervisor says so as a shell shows it"
    );
    assert_eq!(site.code(&["resume-all"]), 0);
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "the slot is free once the supervisor has gone"
    );
}

/// The state letter of `/proc/<pid>/stat` (`T`: stopped).
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

#[test]
fn stop_all_continues_a_supervisor_stopped_before_it_named_its_command() {
    let site = Site::new(None);
    // A supervisor stopped between starting its command and writing `commandProcess`
    // into its record: stop-all knows no command to halt, and the supervisor cannot act.
    let sleeper = site
        .command("sleep")
        .arg("100")
        .spawn_gated()
        .expect("spawn sleep");
    let pid = i32::try_from(sleeper.id()).expect("pid");
    let _cleanup = KillOnDrop(pid);
    signal(pid, Signal::STOP);
    wait_until("the supervisor stopped", || state(pid) == Some('T'));
    let record = worklane_lease::Record {
        holder: worklane_identity::Recorded::new(
            worklane_identity::ProcessIdentity::of(sleeper.id()).expect("identity"),
            worklane_identity::Place::current().expect("place").clone(),
        ),
        owner: Some("sh".into()),
        ..worklane_lease::Record::default()
    };
    std::fs::write(site.slots().join("agent-0.lock"), record.to_bytes()).expect("record");
    let out = site.output(&["stop-all", "incident"]);
    assert!(out.status.success(), "{out:?}");
    wait_until("the supervisor continued", || state(pid) != Some('T'));
    assert_eq!(site.code(&["resume-all"]), 0);
}

#[test]
fn stop_all_halts_a_run_suspended_with_ctrl_z_on_a_terminal() {
    use std::io::Write;
    let site = Site::new(None);
    // On a pseudo-terminal, under a shell with job control (as at a prompt): the run is a
    // job, a foreground process group of its own; Ctrl-Z stops that group, worklane and its
    // command (which stays in it so that it can read the terminal), and the shell goes
    // on. (Without job control the group would be orphaned, and the kernel drops a
    // terminal's stop signals to orphaned groups.)
    let inner = format!(
        r#"bash -c 'set -m; {wl} run -- sh -c "echo \$PPID > \"$T/wl.pid\"; echo \$\$ > \"$T/cmd.pid\"; exec sleep 100"; sleep 100'"#,
        wl = worklane_bin()
    );
    let mut shell = site
        .command("script")
        .args(["-qfec", &inner, "/dev/null"])
        .env("AGENT_SLOTS_DIR", site.slots())
        .env("WORKLANE_STATE_DIR", site.state())
        .env("T", site.temp.path())
        .env_remove("AGENT_SLOTS_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn_gated()
        .expect("spawn script");
    let mut stdin = shell.stdin.take().expect("stdin");
    let command = pid_of(&site.file("cmd.pid"));
    let supervisor = pid_of(&site.file("wl.pid"));
    let _cleanup = (KillOnDrop(command), KillOnDrop(supervisor));
    stdin.write_all(b"\x1a").expect("Ctrl-Z");
    stdin.flush().expect("flush");
    wait_until("Ctrl-Z to stop the run", || {
        state(supervisor) == Some('T') && state(command) == Some('T')
    });
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "cap 2: one slot is held by the suspended run, one is free"
    );
    let out = site.output(&["stop-all", "incident"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // stop-all waits about 5 s for the halt; on a loaded machine the continued
    // supervisor may still be at it then, so the halt itself is awaited here (bounded).
    wait_until("the suspended command to be halted", || gone(command));
    // The supervisor, continued by stop-all, lets go of its slot and exits by itself.
    wait_until("the suspended supervisor to exit", || gone(supervisor));
    assert_eq!(site.code(&["resume-all"]), 0);
    let snapshot = site.output(&["slots", "--json"]);
    let snapshot: serde_json::Value = serde_json::from_slice(&snapshot.stdout).expect("slots json");
    assert_eq!(snapshot["agents_held"], 0, "{snapshot}");
    drop(stdin);
    let _ = shell.kill();
    let _ = shell.wait();
}

#[test]
fn stop_all_halts_an_orphaned_command_that_ignores_sigterm() {
    let site = Site::new(None);
    let mut run = site.spawn(
        &["run"],
        r#"trap '' TERM; echo $$ > "$T/cmd.pid"; exec sleep 60"#,
        "0",
    );
    let command = pid_of(&site.file("cmd.pid"));
    let _cleanup = KillOnDrop(command);
    wait_until("the record to name the command", || {
        !record(&site, "agent-0.lock")["commandProcess"].is_null()
    });
    run.kill().expect("SIGKILL the supervisor");
    run.wait().expect("reap");
    let out = site.output(&["stop-all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(gone(command), "SIGKILLed after the grace");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("halted"), "says what it did: {text}");
    assert_eq!(site.code(&["resume-all"]), 0);
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "the slot is free"
    );
}

#[test]
fn stop_all_never_signals_a_process_a_record_names_falsely() {
    let site = Site::new(None);
    // A process of root's, and a record that an unprivileged writer (uid 65534) planted,
    // naming it as its command.
    let mut victim = site
        .command("sleep")
        .arg("60")
        .spawn_gated()
        .expect("sleep");
    let victim_pid = victim.id();
    let start = std::fs::read_to_string(format!("/proc/{victim_pid}/stat"))
        .expect("stat")
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split(' ').nth(19).map(str::to_owned))
        .expect("field 22");
    let place = record_place(&site);
    let forged = format!(
        r#"{{"pid":{victim_pid},"owner":"x","acquiredAt":"2026-01-01T00:00:00.000Z","place":{place},"identity":{{"boot":"{}","start":{start}}},"commandProcess":{{"pid":{victim_pid},"start":{start},"group":false}}}}"#,
        serde_json::from_str::<serde_json::Value>(&place).expect("place")["boot"]
            .as_str()
            .expect("boot")
    );
    let path = site.slots().join("agent-5.lock");
    std::fs::write(&path, &forged).expect("plant");
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
    let out = site.output(&["stop-all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        victim.try_wait().expect("try_wait"),
        None,
        "a process of another user than the record's writer is never signalled: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A root-owned file the group may write (as STOP, epoch markers and budgets are,
    // mode 0660), rewritten in place by a member and renamed to a lock's name: root owns
    // it, but anyone in the group wrote its bytes.
    std::fs::remove_file(&path).expect("rm");
    assert_eq!(site.code(&["resume-all"]), 0);
    std::fs::write(&path, &forged).expect("plant");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o660))
        .expect("chmod 0660");
    let out = site.output(&["stop-all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        victim.try_wait().expect("try_wait"),
        None,
        "a record others than its owner could write proves nothing: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = victim.kill();
    let _ = victim.wait();
}

#[test]
fn stop_all_halts_what_is_left_of_a_run_whose_leader_and_supervisor_died() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    // The leader dies of the parent-death signal; its background child, in its group and
    // holding the inherited guard, ignores SIGTERM and runs on.
    let mut run = site.spawn(
            &["run"],
            r#"sh -c 'trap "" TERM; exec sleep 60' & echo $! > "$T/child.pid"; echo $$ > "$T/cmd.pid"; wait"#,
            "0",
        );
    let leader = pid_of(&site.file("cmd.pid"));
    let child = pid_of(&site.file("child.pid"));
    let _cleanup = KillOnDrop(child);
    wait_until("the record to name the command", || {
        !record(&site, "agent-0.lock")["commandProcess"].is_null()
    });
    run.kill().expect("SIGKILL the supervisor");
    run.wait().expect("reap");
    wait_until("the leader to die of the parent-death signal", || {
        gone(leader)
    });
    assert!(!gone(child), "the child runs on");
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        75,
        "the child keeps the slot"
    );
    let out = site.output(&["stop-all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        gone(child),
        "the guard's holder is halted: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(site.code(&["resume-all"]), 0);
}

#[test]
fn what_a_finished_run_leaves_running_keeps_its_slot_until_it_exits() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    // The command exits at once, leaving a background process with its inherited guard.
    let out = site.output(&[
        "run",
        "--",
        "sh",
        "-c",
        r#"sleep 60 >/dev/null 2>&1 & echo $! > "$T/left.pid""#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = pid_of(&site.file("left.pid"));
    let _cleanup = KillOnDrop(left);
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        75,
        "the leftover still runs in the slot: at cap 1"
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("json");
    assert_eq!(doc["agents_held"], 1, "{doc}");
    let slot = &doc["slots"][0];
    assert_eq!(slot["name"], "agent-0.lock", "{doc}");
    assert_eq!(slot["state"], "held", "{doc}");
    if doc["containment"]["on"] == true {
        // The run's record stays, naming the cgroup the leftover runs in (PROTOCOL.md 12.7).
        assert!(
            slot["cgroup"]["procs"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p.as_i64() == Some(i64::from(left)))),
            "the leftover listed in the run's cgroup: {doc}"
        );
    } else {
        assert_eq!(slot["pid"], serde_json::Value::Null, "no record: {doc}");
    }
    signal(left, Signal::KILL);
    wait_until("the leftover's end", || gone(left));
    let mut code = 75;
    wait_until("the slot free once the leftover is gone", || {
        code = site.code(&["run", "--no-wait", "--", "true"]);
        code == 0
    });
}

/// This process's place as a record writes it (from a real run's record).
fn record_place(site: &Site) -> String {
    let out = site.output(&[
        "run",
        "--",
        "sh",
        "-c",
        r#"cat "$AGENT_SLOTS_DIR/agent-0.lock""#,
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the record");
    doc["place"].to_string()
}
