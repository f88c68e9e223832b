//! The probe: is the process a record names still running?
//!
//! [`probe`] gathers facts from the system; [`decide`] turns them into a [`Verdict`] and is pure
//! apart from the [`Observe`] seam, so every rule and its order is unit-tested with a fake.

use std::io;

use rustix::io::Errno;
use rustix::process::Pid;

use crate::process::{self, Snapshot, to_pid};
use crate::verdict::{GoneReason, UnknownReason};
use crate::{Field, Place, Recorded, Verdict, place};

/// Judges whether the process a lock record names is still running.
///
/// The rules, in order; the first that applies answers:
///
/// 1. a record without `place` or `identity` (legacy), or with a field of the wrong shape:
///    [`Unknown`](Verdict::Unknown);
/// 2. another host: `Unknown`;
/// 3. this host, another boot id: [`Gone`](Verdict::Gone) (the machine rebooted);
/// 4. another pid namespace or time namespace: `Unknown`;
/// 5. signal 0 answers `ESRCH`: `Gone`; `EPERM` (a process of another user) counts as existing,
///    and rule 6 still applies to it;
/// 6. the process with that pid is a zombie: `Gone`; it started at another time: `Gone` (the pid
///    was reused); its identity is hidden or unreadable: `Unknown`; otherwise
///    [`Alive`](Verdict::Alive).
///
/// No pid is signalled or read before rules 1 to 4 pass: a pid from another host or namespace
/// names some unrelated process here.
///
/// On Linux this costs one `kill(pid, 0)` and one read of `/proc/<pid>/stat` (the place is read
/// once per process); on Darwin it runs `/bin/ps` once.
pub fn probe(recorded: &Recorded) -> Verdict {
    decide(recorded, Place::current(), &mut System)
}

/// What signal 0 (`kill(pid, 0)`, see [kill(2)]) says about a pid.
///
/// [kill(2)]: https://man7.org/linux/man-pages/man2/kill.2.html
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// A process has the pid: the call succeeded, or failed with `EPERM` (it belongs to another
    /// user, which does not make it less alive).
    Exists,
    /// `ESRCH`: no process has the pid.
    NoSuchProcess,
    /// Any other error, which proves nothing.
    Failed(Errno),
}

/// Maps the result of `kill(pid, 0)` to what it proves.
pub(crate) fn signal_outcome(result: rustix::io::Result<()>) -> Signal {
    match result {
        Ok(()) | Err(Errno::PERM) => Signal::Exists,
        Err(Errno::SRCH) => Signal::NoSuchProcess,
        Err(errno) => Signal::Failed(errno),
    }
}

/// The facts [`decide`] asks for, in the order it needs them.
pub(crate) trait Observe {
    /// Sends signal 0 to `pid`.
    fn signal(&mut self, pid: Pid) -> Signal;
    /// Reads the start and state of `pid` in one read.
    fn snapshot(&mut self, pid: u32) -> Result<Snapshot, process::Error>;
}

/// The real system.
struct System;

impl Observe for System {
    fn signal(&mut self, pid: Pid) -> Signal {
        signal_outcome(rustix::process::test_kill_process(pid))
    }

    fn snapshot(&mut self, pid: u32) -> Result<Snapshot, process::Error> {
        crate::sys::snapshot(pid)
    }
}

/// The decision of [`probe`], given this process's place and a source of facts.
pub(crate) fn decide(
    recorded: &Recorded,
    here: Result<&Place, place::Error>,
    observe: &mut impl Observe,
) -> Verdict {
    match check_record(recorded, here) {
        Ok((pid, target, start)) => check_process(pid, target, start, observe),
        Err(verdict) => verdict,
    }
}

/// Rules 1 to 4: everything that can be decided without looking at any process.
/// `Ok` carries the pid and the recorded start to look for.
fn check_record(
    recorded: &Recorded,
    here: Result<&Place, place::Error>,
) -> Result<(u32, Pid, u64), Verdict> {
    let pid = *field(&recorded.pid, "pid", false)?;
    let target =
        to_pid(pid).ok_or_else(|| malformed("pid", format!("{pid} is not a process id")))?;
    let place = field(&recorded.place, "place", true)?;
    let identity = field(&recorded.identity, "identity", true)?;
    if place.boot.is_empty() {
        return Err(malformed("place.boot", "it is empty".to_owned()));
    }
    // Compared as written, a boot id with a trailing newline (read from /proc and not
    // trimmed) would differ from ours and prove a reboot that never happened: a live holder
    // taken over. Only a well-formed boot id is compared.
    if !is_boot_id(&place.boot) {
        return Err(malformed(
            "place.boot",
            format!(
                "{:?} is not a boot id (36 characters: hex digits with `-` at 8, 13, 18 and \
                 23; no newline)",
                place.boot
            ),
        ));
    }
    if identity.boot != place.boot {
        return Err(malformed(
            "identity.boot",
            format!(
                "{:?} differs from place.boot {:?}",
                identity.boot, place.boot
            ),
        ));
    }

    let here = here.map_err(|error| {
        unknown(UnknownReason::PlaceUnavailable {
            detail: chain(&error),
        })
    })?;
    if place.host != here.host {
        return Err(unknown(UnknownReason::ForeignHost {
            recorded: place.host.clone(),
            current: here.host.clone(),
        }));
    }
    if place.boot != here.boot {
        return Err(Verdict::Gone(GoneReason::Rebooted {
            recorded: place.boot.clone(),
            current: here.boot.clone(),
        }));
    }
    if place.pidns != here.pidns {
        return Err(unknown(UnknownReason::OtherPidNamespace {
            recorded: place.pidns,
            current: here.pidns,
        }));
    }
    if place.timens != here.timens {
        return Err(unknown(UnknownReason::OtherTimeNamespace {
            recorded: place.timens,
            current: here.timens,
        }));
    }
    Ok((pid, target, identity.start))
}

/// Whether `text` has the shape of a boot id: a UUID as Linux prints it in
/// `/proc/sys/kernel/random/boot_id` (lowercase) or macOS's `kern.bootsessionuuid` (uppercase),
/// without the newline.
pub(crate) fn is_boot_id(text: &str) -> bool {
    text.len() == 36
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// Rules 5 and 6: signal 0, then one read of the process's start and state.
fn check_process(pid: u32, target: Pid, recorded: u64, observe: &mut impl Observe) -> Verdict {
    match observe.signal(target) {
        Signal::Exists => {}
        Signal::NoSuchProcess => return Verdict::Gone(GoneReason::NoSuchProcess { pid }),
        Signal::Failed(errno) => {
            let detail = io::Error::from(errno).to_string();
            return unknown(UnknownReason::SignalFailed { pid, detail });
        }
    }
    match observe.snapshot(pid) {
        // Whatever process holds the pid has exited: no running process has it.
        Ok(Snapshot { exited: true, .. }) => Verdict::Gone(GoneReason::Zombie { pid }),
        Ok(Snapshot {
            start: Some(current),
            ..
        }) if current != recorded => Verdict::Gone(GoneReason::PidReused {
            pid,
            recorded,
            current,
        }),
        Ok(Snapshot { start: Some(_), .. }) => Verdict::Alive,
        Ok(Snapshot {
            start: None,
            exited: false,
        }) => unknown(UnknownReason::UnreadableIdentity {
            pid,
            detail: "no start time is shown for it".to_owned(),
        }),
        // The entry vanished after signal 0: either the process just ended, or /proc hides it.
        Err(error @ process::Error::NotFound { .. }) => match observe.signal(target) {
            Signal::NoSuchProcess => Verdict::Gone(GoneReason::NoSuchProcess { pid }),
            Signal::Exists | Signal::Failed(_) => unknown(UnknownReason::Hidden {
                pid,
                detail: chain(&error),
            }),
        },
        Err(error @ process::Error::Read { .. }) => unknown(UnknownReason::Hidden {
            pid,
            detail: chain(&error),
        }),
        Err(
            error @ (process::Error::InvalidPid { .. }
            | process::Error::Spawn { .. }
            | process::Error::Malformed { .. }
            | process::Error::OtherProcess { .. }
            | process::Error::NoStart { .. }
            | process::Error::Unsupported { .. }),
        ) => unknown(UnknownReason::UnreadableIdentity {
            pid,
            detail: chain(&error),
        }),
    }
}

/// A present field, or the verdict for a missing or malformed one. A missing field marks a
/// legacy record when `missing_is_legacy` (older harnesses wrote no `place` or `identity`);
/// otherwise it is malformed (every record has a `pid`).
fn field<'a, T>(
    field: &'a Field<T>,
    name: &'static str,
    missing_is_legacy: bool,
) -> Result<&'a T, Verdict> {
    match field {
        Field::Present(value) => Ok(value),
        Field::Missing if missing_is_legacy => {
            Err(unknown(UnknownReason::Legacy { missing: name }))
        }
        Field::Missing => Err(malformed(name, "it is missing".to_owned())),
        Field::Malformed { error, .. } => Err(malformed(name, error.clone())),
    }
}

fn malformed(field: &'static str, detail: String) -> Verdict {
    unknown(UnknownReason::Malformed { field, detail })
}

fn unknown(reason: UnknownReason) -> Verdict {
    Verdict::Unknown(reason)
}

use worklane_stdx::chain;

#[cfg(test)]
mod tests;
