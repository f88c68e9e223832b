//! The answer of a probe, and its reasons, worded for the person who reads them.

use std::fmt;

/// Whether the process a record names is still running.
///
/// Only [`Verdict::Gone`] permits taking over what the process held: it is given only with proof.
/// [`Verdict::Alive`] and [`Verdict::Unknown`] both mean "leave it alone"; they differ in what a
/// person can do about it.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The recorded process is running: its pid exists with the recorded start identity.
    Alive,
    /// The recorded process has provably ended.
    Gone(GoneReason),
    /// Nothing can be proved from here.
    Unknown(UnknownReason),
}

impl Verdict {
    /// Whether the verdict is [`Verdict::Gone`]: the only one that permits a takeover.
    #[must_use]
    pub fn is_gone(&self) -> bool {
        matches!(self, Self::Gone(_))
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Alive => f.write_str("alive"),
            Self::Gone(reason) => write!(f, "gone: {reason}"),
            Self::Unknown(reason) => write!(f, "unknown: {reason}"),
        }
    }
}

/// The proof that a recorded process has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoneReason {
    /// Same host, another boot id: the machine rebooted since the record was written.
    Rebooted {
        /// The boot id in the record.
        recorded: String,
        /// The boot id now.
        current: String,
    },
    /// Signal 0 answered `ESRCH`: no process has this pid.
    NoSuchProcess {
        /// The pid.
        pid: u32,
    },
    /// The pid belongs to a process that started at another time: the recorded one ended and
    /// its pid was reused.
    PidReused {
        /// The pid.
        pid: u32,
        /// The start identity in the record.
        recorded: u64,
        /// The start identity of the process that has the pid now.
        current: u64,
    },
    /// The process with this pid has exited and waits for its parent to reap it (a zombie).
    Zombie {
        /// The pid.
        pid: u32,
    },
}

impl fmt::Display for GoneReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rebooted { recorded, current } => write!(
                f,
                "this host has rebooted since the record was written (boot id {recorded} then, \
                 {current} now), so its process has ended"
            ),
            Self::NoSuchProcess { pid } => {
                write!(f, "no process {pid} exists (signal 0 answered ESRCH)")
            }
            Self::PidReused {
                pid,
                recorded,
                current,
            } => write!(
                f,
                "pid {pid} now belongs to another process (start {current}, recorded {recorded}): \
                 the recorded process ended and its pid was reused"
            ),
            Self::Zombie { pid } => write!(
                f,
                "process {pid} has exited and is a zombie waiting for its parent to reap it"
            ),
        }
    }
}

/// Why nothing can be proved about a recorded process from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownReason {
    /// The record lacks `place` or `identity`: it was written by an older harness and carries
    /// no proof of who held it.
    Legacy {
        /// The first missing field.
        missing: &'static str,
    },
    /// A field of the record does not have the expected shape.
    Malformed {
        /// The field (`pid`, `place`, `identity`, `identity.boot`, ...).
        field: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The record was written on another host.
    ForeignHost {
        /// The host in the record.
        recorded: String,
        /// This host.
        current: String,
    },
    /// The record was written in another pid namespace: its pid means another process here.
    OtherPidNamespace {
        /// The pid namespace in the record.
        recorded: Option<u64>,
        /// The pid namespace of this process.
        current: Option<u64>,
    },
    /// The record was written in another time namespace: start times read differently here.
    OtherTimeNamespace {
        /// The time namespace in the record.
        recorded: Option<u64>,
        /// The time namespace of this process.
        current: Option<u64>,
    },
    /// The place of this process could not be read, so the record's place cannot be compared.
    PlaceUnavailable {
        /// The error, with its causes.
        detail: String,
    },
    /// Signal 0 failed with an error that proves nothing.
    SignalFailed {
        /// The pid.
        pid: u32,
        /// The error.
        detail: String,
    },
    /// The process exists (signal 0 succeeded or was refused) but its identity cannot be read:
    /// `/proc` hides it (`hidepid`) or refuses it, or `ps` shows nothing.
    Hidden {
        /// The pid.
        pid: u32,
        /// The error, with its causes.
        detail: String,
    },
    /// The process exists but what `/proc` or `ps` shows of it cannot be parsed.
    UnreadableIdentity {
        /// The pid.
        pid: u32,
        /// The error.
        detail: String,
    },
}

impl fmt::Display for UnknownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Legacy { missing } => write!(
                f,
                "the record has no {missing} (written by an older harness), so it cannot prove \
                 its holder ended; remove it by hand once that holder has stopped"
            ),
            Self::Malformed { field, detail } => write!(
                f,
                "the record's {field} is malformed ({detail}); remove the record by hand once \
                 its holder has stopped"
            ),
            Self::ForeignHost { recorded, current } => write!(
                f,
                "the record was written on host {recorded:?}, this is {current:?}; only a \
                 process on {recorded:?} can judge it"
            ),
            Self::OtherPidNamespace { recorded, current } => write!(
                f,
                "the record was written in pid namespace {}, this process is in {}; judge it \
                 from the holder's pid namespace (container)",
                namespace(*recorded),
                namespace(*current)
            ),
            Self::OtherTimeNamespace { recorded, current } => write!(
                f,
                "the record was written in time namespace {}, this process is in {}, where \
                 start times read differently; judge it from the holder's time namespace",
                namespace(*recorded),
                namespace(*current)
            ),
            Self::PlaceUnavailable { detail } => write!(
                f,
                "cannot tell where this process runs, so the record cannot be compared: {detail}"
            ),
            Self::SignalFailed { pid, detail } => {
                write!(f, "signal 0 to process {pid} failed: {detail}")
            }
            Self::Hidden { pid, detail } => write!(
                f,
                "process {pid} exists (signal 0 succeeded) but its identity is hidden or \
                 unreadable ({detail}); check as root or as the holder's user (a /proc mounted \
                 with hidepid hides other users' processes)"
            ),
            Self::UnreadableIdentity { pid, detail } => write!(
                f,
                "process {pid} exists but its identity cannot be read: {detail}"
            ),
        }
    }
}

/// A namespace for people: its inode, or "none" when not recorded.
fn namespace(inode: Option<u64>) -> String {
    inode.map_or_else(|| "none".to_owned(), |inode| inode.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_gone_permits_a_takeover() {
        assert!(
            Verdict::Gone(GoneReason::NoSuchProcess { pid: 7 }).is_gone(),
            "gone is gone"
        );
        assert!(!Verdict::Alive.is_gone(), "alive is not gone");
        assert!(
            !Verdict::Unknown(UnknownReason::Legacy { missing: "place" }).is_gone(),
            "unknown is not gone"
        );
    }
}
