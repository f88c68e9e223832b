use super::*;
use rustix::process::{Pid, Signal};
use std::os::unix::process::CommandExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The state letter of `/proc/PID/stat` (`T` stopped, `D` in the kernel, ...).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// `pid`'s children and their states, for a message.
fn children(pid: u32) -> String {
    let listed =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    listed
        .split_whitespace()
        .map(|c| format!("{c} {:?}", c.parse().ok().and_then(state)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The child between clone and exec shares worklane's memory: every signal worklane
/// catches must be one whose handler the child puts back to its default first (the list
/// in `sys::spawn`), or a signal arriving there would run worklane's handler in the
/// child. The command itself starts with no handler (the child's own, for job-control
/// stops, is reset by the exec).
#[test]
fn worklane_catches_only_signals_its_child_resets_and_the_command_none() {
    let site = Site::new(None);
    let out = site.output(&[
        "run",
        "--",
        "sh",
        "-c",
        "grep SigCgt /proc/$PPID/status; exec cat /proc/self/status",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let masks: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("SigCgt:"))
        .map(|h| u64::from_str_radix(h.trim(), 16).expect("hex"))
        .collect();
    let [worklane, command] = masks[..] else {
        panic!("two SigCgt lines: {text}");
    };
    let reset = [
        Signal::PIPE,
        Signal::SEGV,
        Signal::BUS,
        Signal::CHILD,
        Signal::TERM,
        Signal::INT,
        Signal::HUP,
        Signal::QUIT,
        Signal::USR1,
        Signal::USR2,
        Signal::ALARM,
    ]
    .iter()
    .fold(0u64, |m, s| m | 1 << (s.as_raw() - 1));
    assert_eq!(
        worklane & !reset,
        0,
        "worklane catches signals its child leaves caught: {worklane:#x}"
    );
    assert_eq!(command, 0, "the command starts with no handler: {text}");
}

/// The child's stack holds what execvp(3) puts on it: a path buffer per entry of `PATH`
/// tried, and for a file without `#!` an argument vector for `/bin/sh` as long as the
/// command's. A name found after hundreds of entries of a `PATH` longer than `PATH_MAX`,
/// a script without a shebang, fifty thousand arguments: all arrive.
#[test]
fn a_long_argument_list_reaches_a_script_found_late_in_a_long_path() {
    let site = Site::new(None);
    let bin = site.file("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let script = bin.join("count-args");
    std::fs::write(&script, "echo \"$# $1 ${50000}\"\n").expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let mut path: String = (0..400)
        .map(|i| format!("{}/missing-{i:04}:", site.temp.path().display()))
        .collect();
    path.push_str(bin.to_str().expect("utf-8"));
    path.push_str(":/usr/bin:/bin");
    assert!(path.len() > 4096, "longer than PATH_MAX");
    let args: Vec<String> = (1..=50_000).map(|i| i.to_string()).collect();
    let out = site
        .worklane()
        .args(["run", "--", "count-args"])
        .args(&args)
        .env("PATH", &path)
        .output_gated()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "50000 1 50000");
}

/// An entry of `PATH` of `PATH_MAX` bytes or more is passed over, as execvp(3) (glibc)
/// passes over it for `env` and `flock`: the program is found in the entries after it.
/// Tried, it failed with ENAMETOOLONG, which ended the search: 126.
#[test]
fn an_entry_of_path_longer_than_path_max_is_passed_over() {
    let site = Site::new(None);
    let long = format!("/{}", "d".repeat(5000));
    let out = site
        .worklane()
        .args(["run", "--", "sh", "-c", "echo found"])
        .env("PATH", format!("{long}:/usr/bin:/bin"))
        .output_gated()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "found");
}

/// The search stops, as execvp(3) does, at an error other than "not here" or "not ours
/// to run": a symbolic-link loop in the first directory of `PATH` is the answer (126),
/// and the program of the same name in the next one never runs.
#[test]
fn the_search_stops_at_a_link_loop_as_execvp_does() {
    let site = Site::new(None);
    let first = site.file("first");
    let second = site.file("second");
    std::fs::create_dir(&first).expect("mkdir");
    std::fs::create_dir(&second).expect("mkdir");
    std::os::unix::fs::symlink("tool", first.join("tool")).expect("a link to itself");
    let tool = second.join("tool");
    std::fs::write(&tool, "#!/bin/sh\necho ran > \"$T/ran\"\n").expect("script");
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let out = site
        .worklane()
        .args(["run", "--", "tool"])
        .env(
            "PATH",
            format!("{}:{}:/usr/bin:/bin", first.display(), second.display()),
        )
        .output_gated()
        .expect("run");
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        !site.file("ran").exists(),
        "the second directory's tool ran"
    );
}

/// A directory is no command, named by its path or found in `PATH` (where execvp(3)
/// goes on past it): 126, as a shell says, and the slot let go.
#[test]
fn a_directory_as_the_command_exits_126() {
    let site = Site::new(None);
    let bin = site.file("bin");
    std::fs::create_dir_all(bin.join("tool")).expect("mkdir");
    let out = site.output(&["run", "--", bin.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    let out = site
        .worklane()
        .args(["run", "--", "tool"])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output_gated()
        .expect("run");
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tool: permission denied"),
        "{out:?}"
    );
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "released"
    );
}

/// SIGUSR1 to worklane again and again from the moment its handler is in place, across
/// the start of the command: blocked in worklane while the child shares its memory,
/// never handled there, then forwarded. Every run ends, its command having got the
/// signal (its trap's status, or killed by it before the trap was set).
#[test]
fn a_signal_storm_across_the_start_is_forwarded_and_never_hangs() {
    use std::os::unix::process::ExitStatusExt;
    let site = Site::new(None);
    let caught = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
        Some(u64::from_str_radix(mask.trim(), 16).ok()? & (1 << 9) != 0)
    };
    for round in 0..30 {
        let mut run = site
            .worklane()
            .args(["run", "--", "sh", "-c"])
            .arg(r#"trap 'exit 5' USR1; while :; do sleep 0.01; done"#)
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn worklane");
        let pid = run.id();
        // Until the handler is in place, SIGUSR1 would end worklane by its default.
        while caught(pid) == Some(false) {
            std::thread::yield_now();
        }
        let done = Arc::new(AtomicBool::new(false));
        let storm = {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let target = Pid::from_raw(pid as i32).expect("pid");
                while !done.load(Ordering::SeqCst) {
                    if rustix::process::kill_process(target, Signal::USR1).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = run.try_wait().expect("try_wait") {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        done.store(true, Ordering::SeqCst);
        storm.join().expect("the storm");
        let status = status.unwrap_or_else(|| panic!("run {round} hung: {:?}", state(pid)));
        assert!(
            status.code() == Some(5) || status.signal() == Some(Signal::USR1.as_raw()),
            "run {round}: the command got SIGUSR1: {status}"
        );
    }
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "released"
    );
}

/// A caller that starts worklane with signals blocked (the mask is inherited through exec,
/// as from a thread that blocked them to wait for them itself): the command starts with
/// none blocked, and worklane still passes SIGTERM on and sees its command end at once.
/// A blocked signal never reached worklane's handler, so SIGTERM was never forwarded and
/// the command ran on.
#[test]
fn signals_the_caller_blocked_are_still_forwarded_and_the_command_starts_unblocked() {
    let site = Site::new(None);
    let mut run = Running::new(
            site.command("python3")
                .args([
                    "-c",
                    "import os, signal, sys\n\
                     signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, \
                     signal.SIGCHLD, signal.SIGHUP})\n\
                     os.execv(sys.argv[1], sys.argv[1:])",
                    worklane_bin(),
                    "run",
                    "--",
                    "sh",
                    "-c",
                    r#"grep SigBlk /proc/self/status > "$T/blocked"; trap 'echo got-term > "$T/term"; exit 9' TERM; touch "$T/up"; while :; do sleep 0.02; done"#,
                ])
                .env("AGENT_SLOTS_DIR", site.slots())
                .env("WORKLANE_STATE_DIR", site.state())
                .env_remove("AGENT_SLOTS_CONFIG")
                .env("T", site.temp.path())
                .stdin(Stdio::null())
                .spawn_gated()
                .expect("spawn python3"),
        );
    wait_until("the command", || site.file("up").exists());
    let blocked = std::fs::read_to_string(site.file("blocked")).expect("blocked");
    assert_eq!(
        blocked.trim().strip_prefix("SigBlk:").map(str::trim),
        Some("0000000000000000"),
        "the command starts with nothing blocked: {blocked}"
    );
    let pid = Pid::from_raw(run.id() as i32).expect("pid");
    rustix::process::kill_process(pid, Signal::TERM).expect("TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = run.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "SIGTERM to worklane never reached its command (term file: {})",
            site.file("term").exists()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(9),
        "the command's status after its trap"
    );
    assert_eq!(
        std::fs::read_to_string(site.file("term"))
            .expect("the trap ran")
            .trim(),
        "got-term"
    );
}

/// Ctrl-Z at the moment `worklane run` starts its command, again and again, with a
/// job-control shell's answer: the job (worklane's group) is sent SIGTSTP, and SIGCONT
/// once the shell sees worklane stopped. A SIGTSTP that reached the child before its exec
/// used to stop it there (blocked across the clone, pending, acted on at the unmask, and,
/// without a terminal, after the child had left the job's group for its own): worklane,
/// waiting for the exec, never stopped, so the shell never continued anything, and the
/// run hung for good (SIGTERM and SIGINT are blocked there; only SIGKILL ended it). Now
/// a stop meant for the job stops worklane, and the command runs or stops after its exec.
#[test]
fn ctrl_z_at_the_moment_of_the_start_never_hangs_the_run() {
    let site = Site::new(None);
    for interactive in [false, true] {
        for round in 0..60 {
            let mut cmd = site.worklane();
            cmd.args(["run", "--", "true"]).process_group(0);
            if interactive {
                // A terminal on stdin (a pty's master side is one): the command stays in
                // worklane's group, as in a shell's foreground job.
                let tty = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/ptmx")
                    .expect("open a pty");
                cmd.stdin(tty);
            }
            let mut run = cmd.spawn_gated().expect("spawn worklane");
            let pid = run.id();
            let group = Pid::from_raw(pid as i32).expect("pid");
            let done = Arc::new(AtomicBool::new(false));
            let shell = {
                let done = Arc::clone(&done);
                std::thread::spawn(move || {
                    // Stops at varied moments, each followed by time to run.
                    let mut pause = u64::from(pid);
                    while !done.load(Ordering::SeqCst) {
                        if rustix::process::kill_process_group(group, Signal::TSTP).is_err() {
                            return;
                        }
                        std::thread::sleep(Duration::from_micros(200));
                        if state(pid) == Some('T') {
                            let _ = rustix::process::kill_process_group(group, Signal::CONT);
                        }
                        pause = (pause * 1_103_515_245 + 12_345) % (1 << 31);
                        std::thread::sleep(Duration::from_micros(100 + pause % 1_500));
                    }
                })
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            let status = loop {
                if let Some(status) = run.try_wait().expect("try_wait") {
                    break Some(status);
                }
                if Instant::now() > deadline {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            done.store(true, Ordering::SeqCst);
            shell.join().expect("the shell thread");
            let Some(status) = status else {
                let seen = format!("worklane {:?}, its children: {}", state(pid), children(pid));
                let _ = rustix::process::kill_process(group, Signal::KILL);
                panic!(
                    "run {round} (terminal: {interactive}) hung after a stop at its start: \
                         {seen}"
                );
            };
            assert!(
                status.success(),
                "run {round} (terminal: {interactive}): {status}"
            );
        }
    }
}
