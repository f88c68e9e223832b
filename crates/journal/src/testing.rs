//! What the unit tests share: a bound on every wait, and on every test that reads or writes
//! files.

use std::io::Write;
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::time::Duration;

/// How long a test waits for what comes at once (a follower's wake, a line read, a string
/// cut): ample on a loaded machine, and short enough that a change which stops it fails the
/// test well within cargo-mutants' 20 s timeout instead of hanging it.
pub(crate) const BOUND: Duration = Duration::from_secs(5);

/// How long a test may run at all (the longest take about a second) before [`deadline`] ends
/// the test run: more than a test that fails on a [`BOUND`]ed wait takes, so that one is
/// reported as it is.
const HANG: Duration = Duration::from_secs(10);

/// `work`'s result, done on a thread of its own: the test fails when it takes more than
/// [`BOUND`] (the thread is left behind, and ends with the test process).
pub(crate) fn within<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, result) = channel();
    std::thread::spawn(move || {
        let _ = done.send(work());
    });
    result
        .recv_timeout(BOUND)
        .unwrap_or_else(|e| panic!("{what}: not done within {BOUND:?} ({e})"))
}

/// Held for the whole of a test: a test still running [`HANG`] after it began hangs (a loop
/// that never ends, in the test's own thread), and ends the test process, failed. A hung
/// test cannot be failed by a panic, and the harness waits for every test before it reports
/// any: without this, one loop without end (a line reader that never moves on, say, which
/// every test that reads meets) would hang the whole run instead of failing it.
#[must_use]
pub(crate) fn deadline() -> Deadline {
    let (alive, ended) = channel::<()>();
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    std::thread::spawn(move || {
        if ended.recv_timeout(HANG) == Err(RecvTimeoutError::Timeout) {
            // Straight to the descriptor: the harness captures what a test's threads print,
            // and would never show it.
            let _ = writeln!(
                std::io::stderr(),
                "{test}: still running after {HANG:?}: it hangs; the test run ends, failed"
            );
            std::process::exit(101);
        }
    });
    Deadline(alive)
}

/// A running test's [`deadline`]: dropped when the test ends (passed or failed).
pub(crate) struct Deadline(#[allow(dead_code, reason = "held for its drop")] Sender<()>);
