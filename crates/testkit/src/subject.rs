//! A test that runs its own binary again, running only itself, as the subject of what it
//! checks (a process whose standard input is closed, whose environment names a broken slot
//! directory, a process that reaps or kills every descendant of its own): what a test cannot
//! do to the harness's own process.

use crate::Gated;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The longest a subject may run: one that has not ended by then is SIGKILLed and its test
/// fails, naming the bound, rather than hanging the suite.
pub const SUBJECT_BOUND: Duration = Duration::from_secs(120);

/// Runs this test binary again with `--exact test --test-threads=1`, `configure` setting what
/// the subject is given (its environment: the variable that tells the test it is the
/// subject), and asserts that the subject passed within [`SUBJECT_BOUND`], with its output
/// when it did not.
pub fn run_again_as_subject(test: &str, configure: impl FnOnce(&mut Command)) {
    run_again_as_subject_through(&[], test, configure);
}

/// [`run_again_as_subject`], the test binary started through `wrapper` (a program and its
/// arguments that end by executing the command after them, as `unshare --pid --fork --`).
pub fn run_again_as_subject_through(
    wrapper: &[&str],
    test: &str,
    configure: impl FnOnce(&mut Command),
) {
    let binary = std::env::current_exe().expect("this test binary");
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(binary);
            command
        }
        None => Command::new(binary),
    };
    command.args(["--exact", test, "--test-threads=1"]);
    configure(&mut command);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn_gated().expect("start the subject");
    let pid = child.id();
    let (tell, told) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tell.send(child.wait_with_output());
    });
    let (out, ended) = match told.recv_timeout(SUBJECT_BOUND) {
        Ok(out) => (out, true),
        Err(_) => {
            // Not reaped yet (its waiter has not returned): the pid is still the subject's.
            if let Some(pid) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            // Its output ends when the last holder of its pipes has gone: a descendant left
            // holding them would keep it, so it is waited for a while only.
            let Ok(out) = told.recv_timeout(Duration::from_secs(10)) else {
                panic!(
                    "the subject did not end within {SUBJECT_BOUND:?} (killed; its output is held by what it left)"
                );
            };
            (out, false)
        }
    };
    let out = out.expect("wait for the subject");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        ended,
        "the subject did not end within {SUBJECT_BOUND:?}\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the subject must pass\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
}
