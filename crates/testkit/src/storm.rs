//! A fork storm, to check that a test binary's releases all go through the gate.
//!
//! With `WORKLANE_TEST_FORK_STORM=MS` (or `MSxTHREADS`; 4 threads by default) in the
//! environment, the first use of the gate starts threads that start `true` through the gate
//! without end, each child lingering MS milliseconds between fork and exec with copies of
//! every descriptor of the test process. A release that should have been quiet and was not
//! then shows as a held lock in most runs, instead of one run in twenty:
//!
//! ```text
//! WORKLANE_TEST_FORK_STORM=5x4 cargo test -p worklane-guard --test all
//! ```

use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::Duration;

/// The variable that asks for a storm, in milliseconds of linger per child.
const STORM_VAR: &str = "WORKLANE_TEST_FORK_STORM";

/// How the storm starts a child: the gate's own start, without starting a storm again (passed
/// in by the gate, so that this file needs nothing of it).
pub(crate) type Start = fn(&mut Command) -> std::io::Result<std::process::Child>;

/// Starts the storm threads once, if the environment asks for them, each starting its
/// children with `start`.
pub(crate) fn start_if_asked(start: Start) {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let Some((linger, threads)) = std::env::var(STORM_VAR).ok().and_then(|v| parse(&v)) else {
            return;
        };
        let (running, under_way) = std::sync::mpsc::channel();
        for i in 0..threads {
            let running = running.clone();
            let storm = std::thread::Builder::new()
                .name(format!("fork storm {i}"))
                .spawn(move || {
                    loop {
                        let mut command = Command::new("true");
                        command
                            .stdin(Stdio::null())
                            .stdout(Stdio::null())
                            .stderr(Stdio::null());
                        lingering(&mut command, linger);
                        if let Ok(mut child) = start(&mut command) {
                            let _ = child.wait();
                        }
                        let _ = running.send(());
                    }
                });
            assert!(
                storm.is_ok(),
                "{STORM_VAR} asks for storm threads: {storm:?}"
            );
        }
        // Return once the storm is under way, so that the test that started it meets it.
        let _ = under_way.recv();
    });
}

/// `MS` or `MSxTHREADS` (default 4 threads): how long each child lingers, and how many
/// threads start children.
fn parse(value: &str) -> Option<(Duration, usize)> {
    let (ms, threads) = value.split_once('x').unwrap_or((value, "4"));
    Some((
        Duration::from_millis(ms.parse().ok()?),
        threads.parse().ok().filter(|&n| n > 0)?,
    ))
}

/// Makes the child sleep `linger` between fork and exec.
#[allow(unsafe_code)]
fn lingering(command: &mut Command, linger: Duration) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed. It calls nothing but nanosleep (through `thread::sleep`, which neither
    // allocates nor takes a lock), which is.
    unsafe {
        command.pre_exec(move || {
            std::thread::sleep(linger);
            Ok(())
        });
    }
}
