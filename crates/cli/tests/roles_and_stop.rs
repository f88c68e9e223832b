use super::*;

#[test]
fn a_role_must_be_a_plain_name() {
    let site = Site::new(None);
    for bad in ["", ".hidden", "a/b", "a b"] {
        let out = site.output(&["lease", "run", "--role", bad, "--", "true"]);
        assert_eq!(
            out.status.code(),
            Some(64),
            "--role {bad:?} is a usage error"
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("--role"));
    }
    assert!(
        std::fs::read_dir(site.slots())
            .expect("list")
            .next()
            .is_none(),
        "nothing written for a refused role"
    );
}

#[test]
fn a_halt_takes_the_commands_whole_group_with_it() {
    let site = Site::new(None);
    // The command's child ignores SIGTERM and records its pid; the command itself exits
    // on SIGTERM, leaving the child behind in its process group.
    let script = r#"sh -c 'trap "" TERM; echo $$ > "$T/straggler"; exec sleep 600' &
touch "$T/up.$K"; wait"#;
    let mut run = site.spawn(&["run"], script, "0");
    wait_until("the straggler", || {
        std::fs::read_to_string(site.file("straggler")).is_ok_and(|s| s.ends_with('\n'))
            && site.file("up.0").exists()
    });
    let straggler: i32 = std::fs::read_to_string(site.file("straggler"))
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    assert_eq!(site.code(&["stop-all", "drill"]), 0);
    wait_exit(&mut run, "the halted run");
    let pid = rustix::process::Pid::from_raw(straggler).expect("pid");
    wait_until("the straggler to be gone", || {
        let stat = std::fs::read_to_string(format!("/proc/{straggler}/stat"));
        // Gone, or a zombie waiting for init to reap it.
        stat.map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
        })
    });
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    assert_eq!(site.code(&["resume-all"]), 0);
}

/// Whether `/proc/PID` is gone or a zombie (waiting for a parent to reap it).
fn gone_or_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
    })
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid")
}

#[test]
fn a_halt_reaches_a_descendant_that_left_the_group_and_was_orphaned() {
    let site = Site::new(None);
    // `setsid -f` forks a process into a session (and group) of its own whose parent exits
    // at once: out of the command's group, and orphaned. It ignores SIGTERM.
    // It waits (at most 5 s) until setsid, its first parent, has exited before it records
    // its parent.
    let script = r#"setsid -f sh -c 'trap "" TERM; i=0; while [ "$(cat /proc/$(cut -d" " -f4 /proc/$$/stat)/comm)" = setsid ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; cut -d" " -f4 /proc/$$/stat > "$T/escapee.ppid"; echo $$ > "$T/escapee"; exec sleep 600'
touch "$T/up.$K"; exec sleep 600"#;
    let mut run = site.spawn(&["run"], script, "0");
    wait_until("the escapee", || {
        std::fs::read_to_string(site.file("escapee")).is_ok_and(|s| s.ends_with('\n'))
            && site.file("up.0").exists()
    });
    let escapee = read_pid(&site.file("escapee"));
    let runner = i32::try_from(run.id()).expect("pid");
    let adopted = read_pid(&site.file("escapee.ppid"));
    assert_eq!(
        adopted, runner,
        "the orphan is re-parented to worklane, its subreaper, not to init"
    );
    assert_eq!(site.code(&["stop-all", "drill"]), 0);
    wait_exit(&mut run, "the halted run");
    wait_until("the escapee to be gone", || gone_or_zombie(escapee));
    if let Some(pid) = rustix::process::Pid::from_raw(escapee) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    assert_eq!(site.code(&["resume-all"]), 0);
}

#[test]
fn orphans_that_exit_during_a_run_are_reaped_at_once() {
    let site = Site::new(None);
    // A background job whose shell exits: the job is orphaned to worklane, records its
    // parent, and exits; its zombie must not wait for the run to end.
    let script = r#"sh -c 'sh -c "i=0; while [ \"\$(cat /proc/\$(cut -d\" \" -f4 /proc/\$\$/stat)/comm)\" = sh ] && [ \$i -lt 500 ]; do sleep 0.01; i=\$((i+1)); done; cut -d\" \" -f4 /proc/\$\$/stat > \"\$T/orphan.ppid\"; echo \$\$ > \"\$T/orphan\"" &'
touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#;
    let mut run = site.spawn(&["run"], script, "0");
    wait_until("the orphan", || {
        std::fs::read_to_string(site.file("orphan")).is_ok_and(|s| s.ends_with('\n'))
    });
    let orphan = read_pid(&site.file("orphan"));
    let runner = i32::try_from(run.id()).expect("pid");
    assert_eq!(
        read_pid(&site.file("orphan.ppid")),
        runner,
        "adopted by worklane"
    );
    wait_until("the orphan to be reaped while the run goes on", || {
        !Path::new(&format!("/proc/{orphan}")).exists()
    });
    assert!(run.try_wait().expect("try_wait").is_none(), "still running");
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut run, "the run").success());
}

#[test]
fn a_halt_with_a_terminal_reaches_the_commands_children() {
    let site = Site::new(None);
    // With a terminal on stdin the command shares worklane's process group, so the halt
    // must find its child by descent. The child ignores SIGTERM, and SIGHUP too, so the
    // terminal's hangup when the session ends cannot do the halt's work.
    let inner = format!(
        "{} run -- sh -c {}",
        worklane_bin(),
        r#"'sh -c "trap \"\" TERM HUP; echo \$\$ > \"\$T/straggler\"; exec sleep 600" & touch "$T/up.0"; wait'"#
    );
    let mut run = site
        .command("script")
        .args(["-qfec", &inner, "/dev/null"])
        .env("AGENT_SLOTS_DIR", site.slots())
        .env("WORKLANE_STATE_DIR", site.state())
        .env_remove("AGENT_SLOTS_CONFIG")
        .env("T", site.file(""))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn_gated()
        .expect("spawn script");
    let _keep_stdin_open = run.stdin.take();
    wait_until("the straggler", || {
        std::fs::read_to_string(site.file("straggler")).is_ok_and(|s| s.ends_with('\n'))
            && site.file("up.0").exists()
    });
    let straggler = read_pid(&site.file("straggler"));
    assert_eq!(site.code(&["stop-all", "drill"]), 0);
    wait_exit(&mut run, "the halted run");
    wait_until("the straggler to be gone", || gone_or_zombie(straggler));
    if let Some(pid) = rustix::process::Pid::from_raw(straggler) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    assert_eq!(site.code(&["resume-all"]), 0);
}

#[test]
fn stop_halts_a_role_holder_too() {
    let site = Site::new(None);
    let mut holder = site.spawn(
        &["lease", "run", "--role", "planner"],
        r#"touch "$T/up.$K"; exec sleep 600"#,
        "0",
    );
    wait_until("the role holder", || site.file("up.0").exists());
    assert_eq!(site.code(&["stop-all", "everything"]), 0);
    let status = wait_exit(&mut holder, "the halted role holder");
    assert_eq!(status.code(), Some(128 + 15), "halted by SIGTERM");
    assert!(
        !site.slots().join("role-planner.lease").exists(),
        "its lease is released"
    );
    let out = site.output(&[
        "lease",
        "run",
        "--role",
        "planner",
        "--",
        "sh",
        "-c",
        r#"touch "$T/ran""#,
    ]);
    assert_eq!(
        out.status.code(),
        Some(69),
        "a new role holder is refused under STOP"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("everything") && err.contains("resume-all"),
        "names the STOP and what lifts it: {err}"
    );
    assert!(
        !site.file("ran").exists(),
        "the refused command never started"
    );
    assert!(
        !site.slots().join("role-planner.lease").exists(),
        "and no lease was taken"
    );
    assert_eq!(site.code(&["resume-all"]), 0);
    assert_eq!(
        site.code(&["lease", "run", "--role", "planner", "--", "true"]),
        0,
        "admitted after resume"
    );
}

#[test]
fn a_lost_role_lease_halts_the_command_and_exits_69() {
    let site = Site::new(None);
    let mut holder = site.spawn(
        &["lease", "run", "--role", "keeper", "--ttl", "2s"],
        r#"touch "$T/up.$K"; exec sleep 600"#,
        "0",
    );
    wait_until("the role holder", || site.file("up.0").exists());
    // An operator removes the record: the holder's next pulse finds the lease is not its
    // own any more, and must stop its command rather than go on.
    std::fs::remove_file(site.slots().join("role-keeper.lease")).expect("remove the lease");
    let status = wait_exit(&mut holder, "the holder of a lost lease");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut holder.stderr.take().expect("stderr"), &mut err)
        .expect("read stderr");
    assert_eq!(status.code(), Some(69), "a lost lease exits 69: {err}");
    assert!(err.contains("lost"), "says the lease was lost: {err}");
    assert!(
        err.contains("SIGKILL after 0.5 s"),
        "a 2 s lease's command gets a grace of TTL/4, so it is gone before the lease \
             could lapse: {err}"
    );
    assert!(
        !site.slots().join("role-keeper.lease").exists(),
        "nothing was written back"
    );
}

#[test]
fn a_ttl_below_the_pulse_interval_is_a_usage_error() {
    let site = Site::new(None);
    let out = site.output(&[
        "lease", "run", "--role", "r", "--ttl", "100ms", "--", "true",
    ]);
    assert_eq!(out.status.code(), Some(64), "too short to keep pulsed");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("use at least 2 s"),
        "says what to use"
    );
    let out = site.output(&[
        "lease", "run", "--role", "r", "--ttl", "1999ms", "--", "true",
    ]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "too short to halt the command before the lease lapses"
    );
    let out = site.output(&["lease", "run", "--role", "r", "--ttl", "2s", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "2 s is the shortest TTL accepted"
    );
}
