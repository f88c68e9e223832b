//! A queued full run's runner, below its command line: the log kept in a directory of the
//! user's own ([`runner_log`]), and the wait in the full-run line ([`wait_turn`]): STOP or a
//! drain lifted, no other full run, no waiter before it, the idle probe passing, then
//! `full-run.lock` taken; a SIGTERM (`queue cancel`) seen within a quarter second.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use worklane_admission::line::Place;
use worklane_admission::{Kind, LOOK_AGAIN_AT_MOST, Pool, Slot, Take, look, take};
use worklane_lease::Request;

/// How often a runner looks again while STOP or a drain is in force.
pub const OPERATOR_RETRY: Duration = Duration::from_secs(1);
/// How often a runner runs its idle probe again while it says busy.
pub const PROBE_RETRY: Duration = Duration::from_secs(5);

/// Why a runner's log could not be created ([`runner_log`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The user's own directory could not be opened or created as one.
    #[error("cannot keep the queued run's log")]
    Dir(#[source] worklane_slotfile::private::Error),
    /// The log could not be created in it.
    #[error("cannot create log {}", path.display())]
    Create {
        /// The log.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A new log for a runner started at `now_ms` by process `pid`: `worklane-full-run-<time>-<pid>.log`
/// in `worklane-<euid>` of the temporary directory (0700, created if missing, owner and mode
/// checked, no link on its path), created anew with mode 0600: the command's output is for
/// its user alone, and no other user can put a link or a file at the log's name first.
pub fn runner_log(now_ms: u64, pid: u32) -> Result<(PathBuf, std::fs::File), LogError> {
    let euid = rustix::process::geteuid().as_raw();
    let logs = std::env::temp_dir().join(format!("worklane-{euid}"));
    let logs = worklane_slotfile::PrivateDir::open(&logs, true).map_err(LogError::Dir)?;
    let name = format!(
        "worklane-full-run-{}-{pid}.log",
        worklane_lease::rfc3339_ms(now_ms).replace(':', "")
    );
    let path = logs.join(&name);
    match logs.create_new(&name, 0o600) {
        Ok(file) => Ok((path, file)),
        Err(source) => Err(LogError::Create { path, source }),
    }
}

/// Why a runner's wait failed: a look at the directory or the take itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    /// STOP, the drain flag, `full-run.lock` or the line could not be looked at.
    #[error(transparent)]
    Look(#[from] look::Error),
    /// `full-run.lock` could not be tried.
    #[error(transparent)]
    Take(#[from] take::Error),
}

/// What a runner's wait ended with; its place in line is left either way.
#[derive(Debug)]
#[must_use]
// Returned once per wait and moved straight into a binding, as admission's `Take`.
#[allow(clippy::large_enum_variant)]
pub enum Turn {
    /// `full-run.lock` is held.
    Held(Slot),
    /// `cancelled` was set (a SIGTERM) while it waited: the command never ran.
    Cancelled,
}

/// Waits at `place` in the full-run line for its turn and takes `full-run.lock` for
/// `request`: each time something stands in the way (STOP or a drain, another full run, a
/// waiter before it, `idle_probe` saying busy, run by `sh -c` only when nothing else does),
/// `waiting` is told what, and it looks again after a pause. The place is left once the lock
/// is held or `cancelled` is set.
pub fn wait_turn(
    pool: &Pool,
    place: Place,
    request: &Request,
    idle_probe: Option<&str>,
    cancelled: &AtomicBool,
    mut waiting: impl FnMut(String),
) -> Result<Turn, WaitError> {
    let slot = loop {
        if cancelled.load(Ordering::Relaxed) {
            let _ = place.leave();
            return Ok(Turn::Cancelled);
        }
        let entry = place.entry();
        let (what, pause) = if let Some(blocker) = pool.operator_blocker()? {
            (blocker.to_string(), OPERATOR_RETRY)
        } else if !pool.idle()? {
            (
                "another full run holds full-run.lock".to_owned(),
                LOOK_AGAIN_AT_MOST,
            )
        } else if let ahead @ 1.. = pool
            .standing(Kind::FullRun, entry.priority, entry.start_ms, Some(entry))?
            .ahead
        {
            (
                format!("{ahead} waiter(s) before it in the full-run line"),
                LOOK_AGAIN_AT_MOST,
            )
        } else if let Some(probe) = idle_probe
            && !crate::process::shell_says_yes(probe)
        {
            (format!("idle probe `{probe}` says busy"), PROBE_RETRY)
        } else {
            match pool.try_take_as(Kind::FullRun, request, entry)? {
                Take::Held(slot) => break slot,
                Take::Blocked(blocker) => (blocker.to_string(), LOOK_AGAIN_AT_MOST),
            }
        };
        waiting(what);
        nap(pause, cancelled);
    };
    // Out of the line the moment the slot is held; a file left behind is litter only.
    let _ = place.leave();
    Ok(Turn::Held(slot))
}

/// Sleeps `total`, in steps short enough to see `cancelled` within a quarter second.
fn nap(total: Duration, cancelled: &AtomicBool) {
    let until = Instant::now() + total;
    while !cancelled.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(250)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nap_ends_at_its_time_or_at_once_when_cancelled() {
        let started = Instant::now();
        nap(Duration::from_millis(30), &AtomicBool::new(false));
        assert!(started.elapsed() >= Duration::from_millis(30));
        let started = Instant::now();
        nap(Duration::from_secs(60), &AtomicBool::new(true));
        assert!(started.elapsed() < Duration::from_secs(1), "cancelled");
    }
}
