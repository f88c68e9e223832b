//! The processes the dispatcher may signal, each held by a pidfd: the driver it started
//! (opened by the launcher before the driver could be reaped) and the process that claimed the
//! attempt (`SO_PEERPIDFD` of the claim's connection). A pidfd names one process and no other,
//! even after that process has exited and its pid is used again, so a signal sent through it
//! cannot reach a stranger; the dispatcher never signals a pid it read from a file.

use rustix::fd::{AsFd, OwnedFd};
use rustix::process::Signal;

/// How close a process's start must be to the moment its attempt was admitted for it to be
/// taken for that attempt's driver after a restart ([`Proc::proven`]).
pub(super) const PROVEN_WITHIN_MS: u64 = 2_000;

/// A driver the caller started: its pid and, where the platform has them, a pidfd of it.
#[derive(Debug)]
pub struct Started {
    /// The driver's pid.
    pub pid: u32,
    /// A pidfd of the driver (Linux), opened before anyone could reap it.
    pub pidfd: Option<OwnedFd>,
}

impl From<u32> for Started {
    /// A driver known by its pid alone: the dispatcher can then never signal it.
    fn from(pid: u32) -> Started {
        Started { pid, pidfd: None }
    }
}

/// One process held by a pidfd.
#[derive(Debug)]
pub(super) struct Proc {
    pub(super) pid: u32,
    fd: OwnedFd,
}

impl Proc {
    pub(super) fn new(pid: u32, fd: OwnedFd) -> Proc {
        Proc { pid, fd }
    }

    /// The driver a dead dispatcher started as `pid` for an attempt of `uid` that it made
    /// `starting` at `started_ms` (wall clock, ms since the epoch), if the process at that pid
    /// now is provably it: a process of `uid` that started within [`PROVEN_WITHIN_MS`] of
    /// that moment (its start from `/proc/<pid>/stat`, in boot-clock ticks, against the boot
    /// clock now), checked while a pidfd holds it, and still alive after the check (so the
    /// pid named the pidfd's process throughout). `None` when it cannot be proved (a pid
    /// reused since, a clock stepped, another platform): such a process is left alone.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) fn proven(pid: u32, uid: u32, started_ms: u64) -> Option<Proc> {
        use std::os::unix::fs::MetadataExt;
        let raw = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
        let fd = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()).ok()?;
        let start_ticks = worklane_identity::ProcessIdentity::of(pid).ok()?.start;
        let owner = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
        let proc = Proc::new(pid, fd);
        if !proc.alive() || owner != uid {
            return None;
        }
        // /proc gives a start in USER_HZ ticks (100 a second) of the boot clock.
        let since_boot_ms = start_ticks.saturating_mul(10);
        let boot_now_ms = worklane_identity::Place::boot_clock_ms();
        let wall_now_ms = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_millis(),
        )
        .ok()?;
        let started_at = wall_now_ms.checked_sub(boot_now_ms.checked_sub(since_boot_ms)?)?;
        (started_at.abs_diff(started_ms) <= PROVEN_WITHIN_MS).then_some(proc)
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(super) fn proven(_pid: u32, _uid: u32, _started_ms: u64) -> Option<Proc> {
        None
    }

    /// Whether it has not exited yet (a pidfd turns readable when its process exits).
    pub(super) fn alive(&self) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            &self.fd,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match rustix::event::poll(&mut fds, Some(&zero)) {
            Ok(0) => true,
            Ok(_) => false,
            Err(_) => false,
        }
    }

    /// Sends `signal` to exactly this process; `false` if it is gone.
    pub(super) fn signal(&self, signal: Signal) -> bool {
        rustix::process::pidfd_send_signal(self.fd.as_fd(), signal).is_ok()
    }

    /// Sends `signal` to its process group (it leads one: a driver starts a session of its
    /// own), but only while it is alive, when its pid, and so the group's id, cannot have
    /// been given to anyone else; else to nothing. `false` if nothing was signalled.
    pub(super) fn signal_group(&self, signal: Signal) -> bool {
        if !self.alive() {
            return false;
        }
        let Some(pid) = i32::try_from(self.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        else {
            return false;
        };
        rustix::process::kill_process_group(pid, signal).is_ok() || self.signal(signal)
    }
}

/// The processes of one attempt.
#[derive(Debug, Default)]
pub(super) struct Procs {
    /// The driver this dispatcher started.
    pub(super) driver: Option<Proc>,
    /// The process that claimed the attempt (often the driver itself).
    pub(super) claimer: Option<Proc>,
}

impl Procs {
    /// Sends `signal` to the claimer, and to the driver (its whole group with `group`).
    pub(super) fn signal(&self, signal: Signal, group: bool) {
        if let Some(claimer) = &self.claimer {
            claimer.signal(signal);
        }
        if let Some(driver) = &self.driver {
            if group {
                driver.signal_group(signal);
            } else {
                driver.signal(signal);
            }
        }
    }

    /// Whether the driver is still alive (`false` without one).
    pub(super) fn driver_alive(&self) -> bool {
        self.driver.as_ref().is_some_and(Proc::alive)
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_tells_a_live_process_from_an_ended_one_and_signals_only_it() {
        #[allow(
            clippy::disallowed_methods,
            reason = "a unit test's own child, reaped below"
        )]
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        let fd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid"),
            rustix::process::PidfdFlags::empty(),
        )
        .expect("pidfd_open");
        let proc = Proc::new(pid, fd);
        assert!(proc.alive(), "running");
        assert!(proc.signal(Signal::KILL), "signalled");
        let status = child.wait().expect("reap");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "by our signal"
        );
        assert!(!proc.alive(), "gone, and its pid free for anyone");
        assert!(
            !proc.signal(Signal::KILL),
            "a reaped process is signalled no more"
        );
        assert!(!proc.signal_group(Signal::KILL), "nor its old group");
    }
}
