use super::*;
use std::io::{Read, Write};

#[test]
fn ctrl_c_on_a_terminal_stops_a_shell_loop_of_runs() {
    // Started with SIGINT ignored (a non-interactive shell's `&`), everything below keeps it
    // ignored, Ctrl-C included: by design, and nothing to try then.
    if ignored_on_entry(rustix::process::Signal::INT) {
        return;
    }
    let site = Site::new(None);
    // A script's loop, on a pseudo-terminal: Ctrl-C reaches the shell, worklane and the
    // command (the terminal's foreground group); the shell stops the loop only if its job
    // died of SIGINT.
    let inner = format!(
        r#"bash -c 'for i in 1 2 3; do {wl} run -- sh -c "touch \"$T/up.\$0\"; exec sleep 100" $i; echo next-$i; done; echo loop-done'"#,
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
        .stdout(Stdio::piped())
        .spawn_gated()
        .expect("spawn script");
    let mut stdin = shell.stdin.take().expect("stdin");
    wait_until("the first command", || site.file("up.1").exists());
    stdin.write_all(b"\x03").expect("Ctrl-C");
    stdin.flush().expect("flush");
    let mut stdout = shell.stdout.take().expect("stdout");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = shell.try_wait().expect("try_wait") {
            break status;
        }
        // What each process of the loop catches, ignores and blocks, if it never ends (it
        // failed so once in a full suite under load, never when run alone).
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting for the shell: {}",
            signal_states(shell.id())
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    let mut text = String::new();
    let _ = stdout.read_to_string(&mut text);
    assert!(
        !text.contains("next-1") && !text.contains("loop-done"),
        "the loop stopped at the first Ctrl-C: {text:?} ({status})"
    );
    assert!(!site.file("up.2").exists(), "no second run: {text:?}");
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "the slot was let go"
    );
}

#[test]
fn a_run_waiting_on_a_terminal_shows_what_blocks_it() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    // script(1) gives the waiting run a pseudo-terminal as stdin, stdout and stderr.
    let inner = format!("{} run -- true", worklane_bin());
    let mut waiter = site
        .command("script")
        .args(["-qfec", &inner, "/dev/null"])
        .env("AGENT_SLOTS_DIR", site.slots())
        .env("WORKLANE_STATE_DIR", site.state())
        .env_remove("AGENT_SLOTS_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn_gated()
        .expect("spawn script");
    let _keep_stdin_open = waiter.stdin.take();
    let mut stdout = waiter.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    wait_until("the waiting line", || {
        while let Ok(chunk) = rx.try_recv() {
            seen.extend(chunk);
        }
        String::from_utf8_lossy(&seen).contains("1st in line, 1 of 1 held")
    });
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(
        text.contains("waiting for an agent slot"),
        "says what it waits for: {text:?}"
    );
    assert!(text.contains("waited"), "and for how long: {text:?}");
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    let status = wait_exit(&mut waiter, "the waiting run");
    assert!(
        status.success(),
        "the waiting run gets the slot and runs: {status}"
    );
}

#[test]
fn a_run_waiting_without_a_terminal_is_silent() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let out = site.output(&["run", "--timeout", "300ms", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "timed out");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("waiting for"),
        "no live line without a terminal: {err:?}"
    );
    assert!(err.contains("timed out"), "only the final refusal: {err:?}");
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
}
