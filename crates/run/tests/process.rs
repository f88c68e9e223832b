//! What a caller's process gets from `worklane_run::process` and the command's start, each in
//! a `run-holder` of its own (descriptors, limits, dispositions and masks are the whole
//! process's): inherited descriptors taken once, systemd's socket, the descriptor limit, a
//! detached start, the dispositions and mask the command starts with, and the environment.

use super::*;

/// Runs `sh -c SCRIPT` (where `$H` is run-holder) and returns its stdout's lines.
fn shell(site: &Site, script: &str) -> Vec<String> {
    let out = Command::new("sh")
        .args(["-c", script])
        .env("H", env!("CARGO_BIN_EXE_run-holder"))
        .env("T", site.temp.path())
        .env("AGENT_SLOTS_DIR", site.temp.path().join("slots"))
        .env("WORKLANE_TEST_ROOT", site.temp.path())
        .output_gated()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| l.trim_end().to_owned())
        .collect()
}

#[test]
fn an_inherited_descriptor_is_taken_once_if_open_for_writing_and_closed_at_exec() {
    let site = Site::new();
    std::fs::write(site.path("in"), "").expect("in");
    let lines = shell(&site, r#"exec "$H" fds 5 6 7 5 5>"$T/out" 6<"$T/in" 7>&-"#);
    assert_eq!(
        lines,
        [
            "fd 5 ok cloexec true",
            "fd 6 read-only",
            "fd 7 closed",
            "fd 5 taken"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(site.path("out")).expect("out"),
        "taken 5\n",
        "the one taken is written to"
    );
}

#[test]
fn systemds_socket_is_taken_once_and_only_when_passed_to_this_process() {
    let site = Site::new();
    let taken = ["listener 3 cloexec true", "listener none"];
    let none = ["listener none", "listener none"];
    assert_eq!(
        shell(
            &site,
            r#"LISTEN_PID=$$ LISTEN_FDS=1 exec "$H" listener 3<&0"#
        ),
        taken,
        "ours: descriptor 3, once"
    );
    assert_eq!(
        shell(
            &site,
            r#"LISTEN_PID=$$ LISTEN_FDS=2 exec "$H" listener 3<&0"#
        ),
        taken,
        "the first of several"
    );
    assert_eq!(
        shell(
            &site,
            r#"LISTEN_PID=1 LISTEN_FDS=1 exec "$H" listener 3<&0"#
        ),
        none,
        "another process's"
    );
    assert_eq!(
        shell(
            &site,
            r#"LISTEN_PID=$$ LISTEN_FDS=0 exec "$H" listener 3<&0"#
        ),
        none,
        "none passed"
    );
}

#[test]
fn the_soft_descriptor_limit_is_raised_to_the_hard_one_once() {
    let site = Site::new();
    let lines = shell(
        &site,
        r#"ulimit -Sn 512 && ulimit -Hn 4096 && exec "$H" nofile"#,
    );
    assert_eq!(
        lines,
        [
            "raised from Some(512)",
            "not raised",
            "now Some(4096) Some(4096)"
        ]
    );
}

#[test]
fn a_detached_start_has_a_session_of_its_own_and_none_of_the_callers_descriptors() {
    a_detached_start_is_alone("detach");
}

/// The same on a kernel before 5.11 (RHEL 8's 4.18): no close_range(2), so each descriptor up
/// to the process's limit is marked close-on-exec by fcntl(2).
#[test]
fn a_detached_start_gets_none_of_the_callers_descriptors_without_close_range() {
    a_detached_start_is_alone("detach-by-fcntl");
}

fn a_detached_start_is_alone(how: &str) {
    let site = Site::new();
    let out = site.path("detached");
    let lines = shell(&site, &format!(r#"exec "$H" {how} {}"#, out.display()));
    let said: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!((said[0], said[2]), ("detached", "open"), "{lines:?}");
    let (pid, open): (u32, String) = (said[1].parse().expect("pid"), said[3].to_owned());
    assert!(
        eventually(|| site.path("detached.stat").exists()),
        "the detached shell ran"
    );
    let stat = std::fs::read_to_string(site.path("detached.stat")).expect("stat");
    let fields: Vec<&str> = stat[stat.rfind(')').expect(")") + 2..]
        .split_whitespace()
        .collect();
    assert_eq!(
        stat.split_whitespace().next(),
        Some(pid.to_string().as_str()),
        "the pid returned is the process started"
    );
    assert_eq!(fields[3], pid.to_string(), "it leads a session of its own");
    let fds = std::fs::read_to_string(site.path("detached.fds")).expect("fds");
    assert!(
        !fds.split_whitespace().any(|fd| fd == open),
        "the caller's descriptor {open} did not reach it: {fds}"
    );
}

/// The signals in a `SigIgn:` mask of `/proc/<pid>/status`, by number.
fn ignored(mask: &str) -> Vec<u32> {
    let bits = u64::from_str_radix(mask.trim(), 16).expect("a mask");
    (1..=64).filter(|n| bits & (1 << (n - 1)) != 0).collect()
}

#[test]
fn the_command_keeps_what_the_caller_ignores_and_gets_sigpipe_at_its_default() {
    let site = Site::new();
    // Started with TSTP, TTIN, TTOU and USR1 ignored (a caller's `nohup`-like wrapper); std
    // ignores SIGPIPE in run-holder itself.
    let mut cmd = Command::new("env");
    cmd.args([
        "--ignore-signal=TSTP,TTIN,TTOU,USR1",
        env!("CARGO_BIN_EXE_run-holder"),
        "slot",
        "--",
        "sh",
        "-c",
        r#"grep SigIgn /proc/$$/status | cut -f2 > "$T/ignored""#,
    ])
    .env("AGENT_SLOTS_DIR", site.temp.path().join("slots"))
    .env("WORKLANE_TEST_ROOT", site.temp.path())
    .env("T", site.temp.path())
    .stdin(Stdio::null())
    .stdout(Stdio::piped());
    let mut holder = Holder::start(&mut cmd);
    assert_eq!(holder.line(), "held agent-0.lock");
    assert_eq!(holder.line(), "outcome 0 - - false");
    let mask = std::fs::read_to_string(site.path("ignored")).expect("ignored");
    let got = ignored(&mask);
    for (signal, name) in [
        (20, "SIGTSTP"),
        (21, "SIGTTIN"),
        (22, "SIGTTOU"),
        (10, "SIGUSR1"),
    ] {
        assert!(got.contains(&signal), "{name} stays ignored: {got:?}");
    }
    assert!(!got.contains(&13), "SIGPIPE at its default: {got:?}");
}

#[test]
fn a_callers_blocked_signals_are_unblocked_for_the_handlers() {
    let site = Site::new();
    // Started with every forwarded signal blocked (a mask survives exec): the supervisor
    // unblocks each it catches, so SIGUSR2 still reaches the command.
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import os, signal, sys\n\
         signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR2, signal.SIGCHLD})\n\
         os.execv(sys.argv[1], sys.argv[1:])",
        env!("CARGO_BIN_EXE_run-holder"),
        "slot",
        "--",
        "sh",
        "-c",
        r#"trap 'exit 9' USR2; touch "$T/ready"; while :; do sleep 0.05; done"#,
    ])
    .env("AGENT_SLOTS_DIR", site.temp.path().join("slots"))
    .env("WORKLANE_TEST_ROOT", site.temp.path())
    .env("T", site.temp.path())
    .stdin(Stdio::null())
    .stdout(Stdio::piped());
    let mut holder = Holder::start(&mut cmd);
    assert_eq!(holder.line(), "held agent-0.lock");
    assert!(
        eventually(|| site.path("ready").exists()),
        "the command runs"
    );
    holder.signal(rustix::process::Signal::USR2);
    assert_eq!(holder.line(), "outcome 9 - - false");
}

#[test]
fn the_command_learns_its_slot_its_epoch_and_what_the_caller_sets() {
    let site = Site::new();
    let tell = r#"printf '%s %s %s' "$WORKLANE_RESOURCE" "$WORKLANE_EPOCH" "${RUN_HOLDER_SET:-unset}" > "$T/env""#;
    let mut holder = site.build(&["--env-epoch=99"], tell);
    assert_eq!(holder.line(), "held agent-0.lock");
    assert_eq!(holder.line(), "outcome 0 - - false");
    assert!(
        holder.end().success(),
        "it lets go of the slot after its outcome"
    );
    assert_eq!(
        std::fs::read_to_string(site.path("env")).expect("env"),
        "agent-0.lock 99 yes",
        "a value set replaces the supervisor's own of that name, and only it"
    );
    let mut build = site.build(&["--jobs"], tell);
    assert_eq!(build.line(), "held agent-0.lock");
    assert_eq!(build.line(), "outcome 0 - - false");
    let said = std::fs::read_to_string(site.path("env")).expect("env");
    assert!(
        said.starts_with("agent-0.lock ")
            && said.ends_with(" unset")
            && said
                .split(' ')
                .nth(1)
                .is_some_and(|e| e.parse::<u64>().is_ok()),
        "a build's jobserver variables leave the slot's own: {said}"
    );
}
