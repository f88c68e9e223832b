//! The processes one test starts, found by a mark in their environment.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The environment variable that carries a scope's mark.
pub const SCOPE_VAR: &str = "WORKLANE_TEST_SCOPE";

/// The processes of one test: every command given to [`Scope::mark`] carries the scope's
/// mark in its environment, and so does everything it starts (children inherit the
/// environment, whatever group, session or parent they end up in). When the scope ends,
/// every live process that carries the mark is SIGKILLed, until none is left.
///
/// For tests whose processes leave their process group or session on purpose, ignore SIGTERM
/// and SIGHUP, or are orphaned: killing the direct child does not reach them. Linux only
/// (it reads `/proc`).
#[derive(Debug)]
pub struct Scope {
    mark: String,
}

impl Scope {
    /// A new scope, with a mark no other scope of any process has.
    #[allow(
        clippy::new_without_default,
        reason = "each scope is new; a default one would read as a shared one"
    )]
    pub fn new() -> Scope {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Scope {
            mark: format!(
                "{}-{}-{nanos}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// Puts the scope's mark in `command`'s environment.
    pub fn mark<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command.env(SCOPE_VAR, &self.mark)
    }

    /// The pids of the live (not zombie) processes that carry the mark now. A process in the
    /// middle of an `execve` shows no environment for a moment, so one look can miss it.
    pub fn survivors(&self) -> Vec<u32> {
        let needle = format!("{SCOPE_VAR}={}", self.mark);
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != std::process::id())
            .filter(|&pid| carries(pid, &needle) && !is_zombie(pid))
            .collect()
    }

    /// SIGKILLs every live process that carries the mark, again until none is left, and
    /// returns the pids killed. Done only when three looks 10 ms apart find none: a process may
    /// start another before it dies, and one in the middle of an `execve` hides its mark for a
    /// moment. Gives up after about 10 s (a process stuck in the kernel).
    pub fn end(&self) -> Vec<u32> {
        let needle = format!("{SCOPE_VAR}={}", self.mark);
        let mut killed = Vec::new();
        let mut quiet_looks = 0;
        for _ in 0..1000 {
            let survivors = self.survivors();
            if survivors.is_empty() {
                quiet_looks += 1;
                if quiet_looks == 3 {
                    break;
                }
            } else {
                quiet_looks = 0;
            }
            for pid in survivors {
                if kill(pid, &needle) && !killed.contains(&pid) {
                    killed.push(pid);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        killed
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        self.end();
    }
}

/// Whether `/proc/PID/environ` holds `needle` as one entry.
fn carries(pid: u32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
        env.split(|&b| b == 0)
            .any(|entry| entry == needle.as_bytes())
    })
}

/// Whether `/proc/PID/stat` shows a zombie (or the process is already gone).
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

/// SIGKILLs `pid` if it still carries the mark, through a pidfd so that a pid reused after
/// the check is never hit. Returns whether the signal was sent.
fn kill(pid: u32, needle: &str) -> bool {
    use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
    let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    let Ok(pidfd) = pidfd_open(raw, PidfdFlags::empty()) else {
        return false;
    };
    // The pidfd names one process from now on: check that it is (still) ours.
    carries(pid, needle) && pidfd_send_signal(&pidfd, Signal::KILL).is_ok()
}
