//! The supervision loop as a caller sees it (`run-holder slot`): each forwarded signal, a
//! signal the caller ignores, a terminal's Ctrl-C, the checks and their pace, a halt's grace
//! and its SIGKILL, what a command leaves behind (run on, or ended), orphans re-parented and
//! reaped, with a cgroup and without one (the test seam), and the caller ending by its
//! command's signal.

use super::*;

/// A process of `pid`'s children, with its state, name.
fn children(pid: u32) -> Vec<(u32, char, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid: u32 = rest.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if ppid == pid {
            found.push((child, state, stat[open + 1..close].to_owned()));
        }
    }
    found
}

fn signal_pid(pid: u32, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid");
    rustix::process::kill_process(pid, signal).expect("signal");
}

#[test]
fn every_forwarded_signal_reaches_the_command() {
    use rustix::process::Signal;
    let site = Site::with_caps(8, 1);
    let signals = [
        (Signal::TERM, "TERM", 41),
        (Signal::HUP, "HUP", 42),
        (Signal::INT, "INT", 43),
        (Signal::QUIT, "QUIT", 44),
        (Signal::USR1, "USR1", 45),
        (Signal::USR2, "USR2", 46),
        (Signal::ALARM, "ALRM", 47),
    ];
    let mut holders: Vec<(Holder, Signal, u8)> = signals
        .iter()
        .map(|&(signal, name, code)| {
            let script = format!(
                "trap 'exit {code}' {name}; touch \"$T/ready.{name}\"; while :; do sleep 0.05; done"
            );
            let mut holder = site.build(&[], &script);
            assert!(holder.line().starts_with("held agent-"));
            assert!(
                eventually(|| site.path(&format!("ready.{name}")).exists()),
                "{name}'s command traps it"
            );
            (holder, signal, code)
        })
        .collect();
    for (holder, signal, code) in &mut holders {
        holder.signal(*signal);
        assert_eq!(
            holder.line(),
            format!("outcome {code} - - false"),
            "{signal:?} was forwarded to the command, whose trap exited {code}"
        );
    }
}

#[test]
fn a_signal_the_caller_ignores_stays_ignored() {
    let site = Site::new();
    // SIGUSR1 ignored by the caller (as under `nohup`-like wrappers): not forwarded, and the
    // command inherits the disposition; SIGUSR2 is forwarded after it, and its trap ends the
    // command.
    let mut cmd = Command::new("env");
    cmd.args([
        "--ignore-signal=USR1",
        env!("CARGO_BIN_EXE_run-holder"),
        "slot",
        "--",
    ])
    .args([
        "sh",
        "-c",
        r#"trap 'exit 7' USR2; touch "$T/ready"; while :; do sleep 0.05; done"#,
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
    holder.signal(rustix::process::Signal::USR1);
    holder.signal(rustix::process::Signal::USR2);
    assert_eq!(
        holder.line(),
        "outcome 7 - - false",
        "SIGUSR1 never reached the command (its default would have ended it first)"
    );
}

#[test]
fn with_a_terminal_the_command_stays_in_the_foreground_group_and_ctrl_c_is_the_terminals() {
    let site = Site::new();
    // Under script(1) the holder's stdin is a terminal. SIGINT and SIGQUIT sent to the holder
    // alone are not forwarded (the terminal sends them to the whole foreground group); SIGTERM
    // is.
    let script = r#"trap 'exit 42' INT; trap 'exit 44' QUIT; trap 'exit 43' TERM; echo "$PPID $(ps -o pgid= $$) $(ps -o pgid= $PPID)" > "$T/ids.tmp"; mv "$T/ids.tmp" "$T/ids"; while :; do sleep 0.05; done"#;
    let line = format!(
        "exec env --default-signal=INT,QUIT AGENT_SLOTS_DIR='{}' WORKLANE_TEST_ROOT='{}' T='{}' '{}' slot --watch=1000 -- sh -c '{}'",
        site.temp.path().join("slots").display(),
        site.temp.path().display(),
        site.temp.path().display(),
        env!("CARGO_BIN_EXE_run-holder"),
        script.replace('\'', r"'\''"),
    );
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut holder = Holder::start(&mut cmd);
    assert_eq!(holder.line(), "held agent-0.lock");
    assert_eq!(holder.line(), "starting");
    assert_eq!(holder.line(), "started group false", "no group of its own");
    assert!(eventually(|| site.path("ids").exists()), "the command runs");
    let ids = std::fs::read_to_string(site.path("ids")).expect("ids");
    let ids: Vec<u32> = ids
        .split_whitespace()
        .map(|n| n.parse().expect("a number"))
        .collect();
    let (run_holder, command_group, holder_group) = (ids[0], ids[1], ids[2]);
    assert_eq!(
        command_group, holder_group,
        "in the terminal's foreground group"
    );
    let recorded = site.pool.recorded_commands().expect("records");
    assert_eq!(recorded.len(), 1);
    assert!(!recorded[0].group, "recorded as leading no group");
    signal_pid(run_holder, rustix::process::Signal::INT);
    signal_pid(run_holder, rustix::process::Signal::QUIT);
    signal_pid(run_holder, rustix::process::Signal::TERM);
    // Its watch says a check every 250 ms meanwhile: at most 20 s of them.
    let mut outcome = holder.line();
    for _ in 0..80 {
        if !outcome.starts_with("check ") {
            break;
        }
        outcome = holder.line();
    }
    assert_eq!(
        outcome, "outcome 43 - - false",
        "SIGINT and SIGQUIT were not forwarded, SIGTERM was"
    );
}

#[test]
fn a_program_that_may_not_be_executed_is_said_so() {
    let site = Site::new();
    let file = site.path("not-executable");
    std::fs::write(&file, "#!/bin/sh\nexit 0\n").expect("write");
    let mut holder = site.build_of(&[], &[file.to_str().expect("utf-8")]);
    assert_eq!(holder.line(), "held agent-0.lock");
    assert_eq!(
        holder.line(),
        format!(
            "error {}: permission denied (is it executable?)",
            file.display()
        )
    );
}

#[test]
fn the_callers_watch_is_asked_every_check_and_its_reason_halts_the_command() {
    let site = Site::new();
    let mut holder = site.build(&["--watch=3", "--log"], "exec sleep 60");
    assert_eq!(holder.line(), "held agent-0.lock");
    assert_eq!(
        holder.line(),
        "starting",
        "the caller's watch is told before the command starts"
    );
    assert_eq!(holder.line(), "started group true");
    for k in 1..=3u128 {
        let line = holder.line();
        let ms: u128 = line
            .strip_prefix(&format!("check {k} at "))
            .unwrap_or_else(|| panic!("check {k}: {line}"))
            .parse()
            .expect("ms");
        assert!(
            ms >= k * 250,
            "check {k} came {ms} ms after the start: one every CHECK_EVERY at most"
        );
    }
    assert_eq!(
        holder.line(),
        "log WARN watch 3: halting the command (SIGTERM, then SIGKILL after 3000 ms)",
        "a watch that does not say the halt itself gets the default line"
    );
    assert_eq!(holder.line(), "outcome 143 watch_3 - false");
}

#[test]
fn stop_gives_the_command_its_grace_and_says_the_halt() {
    let site = Site::new();
    let mut holder = site.build(
        &["--log"],
        // The trap takes a moment (a SIGKILL sent with the SIGTERM would end it first).
        r#"trap 'sleep 0.3; exit 42' TERM; touch "$T/ready"; while :; do sleep 0.05; done"#,
    );
    assert_eq!(holder.line(), "held agent-0.lock");
    assert!(
        eventually(|| site.path("ready").exists()),
        "the command runs"
    );
    site.write_stop();
    let said = holder.line();
    assert!(
        said.starts_with("log WARN STOP")
            && said.ends_with(": halting the command (SIGTERM, then SIGKILL after 3000 ms)"),
        "{said}"
    );
    let outcome = holder.line();
    assert!(
        outcome.starts_with("outcome 42 STOP_by_test"),
        "its SIGTERM trap ran within the grace: {outcome}"
    );
}

#[test]
fn a_command_that_outlives_its_grace_is_killed() {
    let site = Site::new();
    let mut holder = site.build_of(
        &["--grace-ms=300"],
        &[
            "env",
            "--ignore-signal=TERM",
            "sh",
            "-c",
            r#"touch "$T/ready"; exec sleep 60"#,
        ],
    );
    assert_eq!(holder.line(), "held agent-0.lock");
    assert!(
        eventually(|| site.path("ready").exists()),
        "the command runs"
    );
    site.write_stop();
    let outcome = holder.line();
    assert!(
        outcome.starts_with("outcome 137 STOP_by_test"),
        "SIGKILLed after its grace: {outcome}"
    );
}

/// The supervisor sleeps between its looks, while the command runs and through a halt's
/// grace: a command that runs a second, then ignores SIGTERM through a grace of 1.5 s, costs
/// the supervising process a small part of those 2.5 s in CPU (a loop that woke at once
/// would spend most of them).
#[test]
fn the_supervisor_sleeps_between_its_looks_and_through_a_grace() {
    let site = Site::new();
    let mut holder = site.build_of(
        &["--grace-ms=1500", "--say-cpu"],
        &[
            "env",
            "--ignore-signal=TERM",
            "sh",
            "-c",
            r#"touch "$T/ready"; exec sleep 60"#,
        ],
    );
    assert_eq!(holder.line(), "held agent-0.lock");
    assert!(
        eventually(|| site.path("ready").exists()),
        "the command runs"
    );
    std::thread::sleep(Duration::from_secs(1));
    site.write_stop();
    let cpu: u64 = holder
        .line()
        .strip_prefix("cpu ")
        .expect("the supervisor's CPU time")
        .parse()
        .expect("ms");
    let outcome = holder.line();
    assert!(
        outcome.starts_with("outcome 137 STOP_by_test"),
        "SIGKILLed after its grace: {outcome}"
    );
    assert!(
        cpu < 300,
        "{cpu} ms of CPU in about 2.5 s: the supervisor spun instead of sleeping"
    );
}

/// A process the command leaves (out of its group and session) that ends on SIGTERM, after
/// a moment, writing `left-done` as it goes.
const SLOW_LEFTOVER: &str = r#"setsid sh -c 'trap "sleep 0.3; : > \"$T/left-done\"; exit 0" TERM; echo $$ > "$T/daemon.tmp"; mv "$T/daemon.tmp" "$T/daemon"; while :; do sleep 0.05; done' < /dev/null > /dev/null 2>&1 &
while [ ! -e "$T/daemon" ]; do sleep 0.01; done"#;

/// The tree a command leaves, ended at its exit (`--kill-tree-on-exit`), gets the grace
/// first: SIGTERM, and SIGKILL only for what outlives it. A leftover whose SIGTERM trap
/// takes 300 ms finishes it, with a cgroup or without.
#[test]
fn a_tree_ended_at_the_command_s_exit_is_given_its_grace_first() {
    for options in [
        &["--kill-tree-on-exit"][..],
        &["--kill-tree-on-exit", "--no-cgroup"],
    ] {
        let site = Site::new();
        let mut holder = site.build(options, SLOW_LEFTOVER);
        assert_eq!(holder.line(), "held agent-0.lock");
        assert_eq!(holder.line(), "outcome 0 - - false", "{options:?}");
        assert!(
            !alive(daemon(&site)),
            "{options:?}: ended before the outcome"
        );
        assert!(
            site.path("left-done").exists(),
            "{options:?}: its SIGTERM trap ran to its end, within the grace"
        );
    }
}

/// With nothing left behind, `--kill-tree-on-exit` signals nothing and waits no grace: the
/// outcome comes at once after the command's exit, not the grace ([`GRACE`], 3 s) later,
/// with a cgroup or without. (A bound, not a timing: a grace waited is the whole grace.)
#[test]
fn a_command_that_leaves_nothing_behind_is_not_given_a_grace_at_its_exit() {
    for options in [
        &["--kill-tree-on-exit"][..],
        &["--kill-tree-on-exit", "--no-cgroup"],
    ] {
        let site = Site::new();
        let mut holder = site.build(options, "exit 0");
        assert_eq!(holder.line(), "held agent-0.lock");
        let held = Instant::now();
        assert_eq!(holder.line(), "outcome 0 - - false", "{options:?}");
        assert!(
            held.elapsed() < worklane_run::GRACE,
            "{options:?}: no grace waited for a tree that left nothing: {:?}",
            held.elapsed()
        );
    }
}

/// A daemon the command leaves: out of its group and session, SIGTERM at its default.
const DAEMON: &str = r#"setsid sh -c 'echo $$ > "$T/daemon.tmp"; mv "$T/daemon.tmp" "$T/daemon"; exec sleep 60' < /dev/null > /dev/null 2>&1 &
while [ ! -e "$T/daemon" ]; do sleep 0.01; done"#;

fn daemon(site: &Site) -> u32 {
    pid_in(&site.path("daemon"))
}

#[test]
fn what_a_command_leaves_runs_on_unless_the_tree_is_ended_with_a_cgroup_or_without() {
    for options in [&["--say-left"][..], &["--say-left", "--no-cgroup"]] {
        let site = Site::new();
        let mut holder = site.build(options, DAEMON);
        assert_eq!(holder.line(), "held agent-0.lock");
        let contained = !options.contains(&"--no-cgroup");
        assert_eq!(
            holder.line(),
            if contained { "left 1" } else { "left 0" },
            "{options:?}: the cgroup counts what the command left"
        );
        assert_eq!(holder.line(), "outcome 0 - - false");
        let left = daemon(&site);
        assert!(alive(left), "{options:?}: by default it runs on");
        sigkill(left);
        assert!(
            eventually(|| site.slot_is_free()),
            "{options:?}: the slot is free once it has gone"
        );
        std::fs::remove_file(site.path("daemon")).expect("a new daemon file");
        let mut ended = site.build(&[options, &["--kill-tree-on-exit"][..]].concat(), DAEMON);
        assert_eq!(ended.line(), "held agent-0.lock");
        assert_eq!(ended.line(), "left 0", "{options:?}");
        assert_eq!(ended.line(), "outcome 0 - - false");
        let ended_daemon = daemon(&site);
        assert!(
            !alive(ended_daemon),
            "{options:?}: --kill-tree-on-exit ended it before the outcome"
        );
    }
}

#[test]
fn a_halt_reaches_what_left_the_group_with_a_cgroup_or_without() {
    for options in [&["--say-left"][..], &["--say-left", "--no-cgroup"]] {
        let site = Site::new();
        // An escapee of the command's group and session that ignores SIGTERM.
        let script = r#"setsid sh -c 'trap "" TERM; echo $$ > "$T/daemon.tmp"; mv "$T/daemon.tmp" "$T/daemon"; while :; do sleep 0.05; done' < /dev/null > /dev/null 2>&1 &
            while :; do sleep 0.05; done"#;
        let mut holder = site.build(options, script);
        assert_eq!(holder.line(), "held agent-0.lock");
        let escapee = daemon(&site);
        site.write_stop();
        assert_eq!(
            holder.line(),
            "left 0",
            "{options:?}: nothing of a halted run is left at its outcome"
        );
        let outcome = holder.line();
        assert!(outcome.starts_with("outcome 143 STOP_by_test"), "{outcome}");
        assert!(
            !alive(escapee),
            "{options:?}: what the halted command left is killed before its outcome"
        );
    }
}

#[test]
fn orphans_of_the_tree_are_adopted_and_reaped_while_the_command_runs() {
    let site = Site::new();
    // Three orphans (the subshell that started each has exited by the time the loop goes
    // on), re-parented to the supervisor; the test ends them.
    let script = r#"for i in 1 2 3; do (sleep 30 &); done; touch "$T/ready"; while [ ! -e "$T/release" ]; do sleep 0.02; done"#;
    let mut holder = site.build(&["--no-cgroup"], script);
    assert_eq!(holder.line(), "held agent-0.lock");
    assert!(
        eventually(|| site.path("ready").exists()),
        "the orphans are made"
    );
    let supervisor = holder.pid();
    let adopted: Vec<u32> = children(supervisor)
        .into_iter()
        .filter(|(_, _, name)| name == "sleep")
        .map(|(pid, _, _)| pid)
        .collect();
    assert_eq!(adopted.len(), 3, "adopted by the supervisor (a subreaper)");
    for pid in adopted {
        sigkill(pid);
    }
    assert!(
        eventually(|| children(supervisor)
            .iter()
            .all(|(_, state, name)| name != "sleep" && *state != 'Z')),
        "reaped once they exit, while the command runs: {:?}",
        children(supervisor)
    );
    std::fs::write(site.path("release"), "").expect("release");
    assert_eq!(holder.line(), "outcome 0 - - false");
}

#[test]
fn the_caller_can_end_by_the_signal_that_ended_its_command() {
    let site = Site::new();
    let mut holder = site.build(&["--die-by"], "kill -USR1 $$");
    assert_eq!(holder.line(), "held agent-0.lock");
    assert_eq!(holder.line(), "outcome 138 - 10 false");
    let status = holder.end();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(10),
        "run-holder ended by SIGUSR1, as its command did: {status:?}"
    );
}
