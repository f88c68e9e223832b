use super::*;
use std::io::Read;

/// Every command that prints, with the exit code it has on an idle machine.
const PRINTING: &[&[&str]] = &[
    &["slots"],
    &["slots", "--json"],
    &["why"],
    &["why", "--json"],
    &["budget", "show"],
    &["budget", "show", "--json"],
    &["resume-all"],
    &["undrain"],
    &["completions", "bash"],
    &["man"],
    &["--help"],
    &["--version"],
];

/// A pipe whose reader is already closed: every write to it fails with EPIPE.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Stdio::from(writer)
}

fn dev_full() -> Stdio {
    Stdio::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full"),
    )
}

fn assert_no_panic(out: &Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(101), "{what}: a Rust panic: {err}");
    assert!(!err.contains("panicked"), "{what}: a Rust panic: {err}");
}

#[test]
fn a_closed_pipe_ends_every_command_quietly() {
    let site = Site::new(None);
    for args in PRINTING {
        let out = site
            .worklane()
            .args(*args)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .spawn_gated()
            .and_then(|c| c.wait_with_output())
            .expect("run worklane");
        let what = args.join(" ");
        assert_no_panic(&out, &what);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{what}: a closed pipe is a normal end: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{what}: nothing to say about a reader that left: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_closed_pipe_keeps_the_commands_own_status() {
    let site = Site::new(None);
    let out = site
        .worklane()
        .args(["run", "--", "sh", "-c", "exit 3"])
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .spawn_gated()
        .and_then(|c| c.wait_with_output())
        .expect("run");
    assert_no_panic(&out, "run");
    assert_eq!(out.status.code(), Some(3), "the command's status");
    assert_eq!(site.code(&["stop-all", "test"]), 0, "STOP written");
    for args in [&["why"][..], &["why", "--json"]] {
        let out = site
            .worklane()
            .args(args)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .spawn_gated()
            .and_then(|c| c.wait_with_output())
            .expect("why");
        assert_no_panic(&out, "why");
        assert_eq!(
            out.status.code(),
            Some(69),
            "{args:?}: the answer's code survives a reader that left"
        );
    }
}

#[test]
fn a_reader_that_leaves_after_one_byte_never_causes_a_panic() {
    // As `worklane slots | head -c1`: the reader goes away while worklane still writes.
    let site = Site::new(None);
    let held = site.spawn(&["run"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    for round in 0..40 {
        let args: &[&str] = if round % 2 == 0 {
            &["slots"]
        } else {
            &["slots", "--json"]
        };
        let mut child = site
            .worklane()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn slots");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut byte = [0_u8; 1];
        stdout.read_exact(&mut byte).expect("one byte");
        drop(stdout);
        let out = child.wait_with_output().expect("wait");
        assert_no_panic(&out, &format!("round {round}"));
        assert_eq!(
            out.status.code(),
            Some(0),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::write(site.file("release.0"), b"").expect("release");
    drop(held);
}

#[test]
fn a_failed_write_is_a_message_and_exit_74() {
    let site = Site::new(None);
    for args in PRINTING {
        let out = site
            .worklane()
            .args(*args)
            .stdout(dev_full())
            .stderr(Stdio::piped())
            .spawn_gated()
            .and_then(|c| c.wait_with_output())
            .expect("run worklane");
        let what = args.join(" ");
        assert_no_panic(&out, &what);
        assert_eq!(out.status.code(), Some(74), "{what}: a failed write");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cannot write to stdout"),
            "{what}: the message names stdout: {err}"
        );
    }
}

#[test]
fn a_failed_write_to_stderr_never_panics() {
    let site = Site::new(None);
    let out = site
        .worklane()
        .args(["set-test-slots", "99"])
        .stderr(dev_full())
        .stdout(Stdio::piped())
        .spawn_gated()
        .and_then(|c| c.wait_with_output())
        .expect("set-test-slots");
    assert_eq!(
        out.status.code(),
        Some(64),
        "the usage error's code, though its message could not be written"
    );
    let out = site
        .worklane()
        .arg("--no-such-flag")
        .stderr(dev_full())
        .stdout(Stdio::piped())
        .spawn_gated()
        .and_then(|c| c.wait_with_output())
        .expect("bad flag");
    assert_eq!(out.status.code(), Some(64), "clap's usage error");
    let out = site
        .worklane()
        .args(["slots"])
        .stdout(dev_full())
        .stderr(dev_full())
        .stdin(Stdio::null())
        .spawn_gated()
        .and_then(|c| c.wait_with_output())
        .expect("slots");
    assert_eq!(out.status.code(), Some(74), "both streams full");
}
