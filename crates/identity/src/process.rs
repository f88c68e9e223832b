//! Who a process is: its pid and the start identity that tells it from a later process that
//! reuses the pid.

use crate::parse::Malformed;
use std::io;
use std::path::PathBuf;

use rustix::process::Pid;

/// A process: its pid and its start identity.
///
/// `start` is what the platform records when the process starts and never changes afterwards:
///
/// - Linux: field 22 of `/proc/<pid>/stat`, clock ticks since boot (as seen from the reader's
///   time namespace, which is why [`Place`](crate::Place) records the time namespace);
/// - Darwin: the start time printed by `ps -o lstart`, as whole seconds since the Unix epoch (UTC).
///
/// Two processes with the same pid and the same start (and the same [`Place`](crate::Place))
/// are the same process. On Darwin a pid reused within the same second keeps the same start;
/// such a process is taken for the recorded one, which errs on the side of "alive".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessIdentity {
    /// The process id, in the pid namespace of the [`Place`](crate::Place) it was read in.
    pub pid: u32,
    /// The start identity (see the type's documentation for its unit per platform).
    pub start: u64,
}

impl ProcessIdentity {
    /// Reads the identity of the process `pid`.
    ///
    /// On Linux this reads `/proc/<pid>/stat`; on Darwin it runs `/bin/ps`.
    ///
    /// # Errors
    ///
    /// The pid is not a process id, no such process is visible, its entry cannot be read or
    /// parsed, (Darwin) `ps` cannot run, or the platform is neither Linux nor macOS
    /// ([`Error::Unsupported`]).
    pub fn of(pid: u32) -> Result<Self, Error> {
        if to_pid(pid).is_none() {
            return Err(Error::InvalidPid { pid });
        }
        match crate::sys::snapshot(pid)? {
            Snapshot {
                start: Some(start), ..
            } => Ok(Self { pid, start }),
            Snapshot { start: None, .. } => Err(Error::NoStart { pid }),
        }
    }

    /// Reads the identity of the current process.
    ///
    /// Not cached: after a `fork` the child is another process.
    ///
    /// # Errors
    ///
    /// As [`ProcessIdentity::of`].
    pub fn of_self() -> Result<Self, Error> {
        Self::of(std::process::id())
    }
}

/// A process id as rustix takes it: 1 to `i32::MAX`.
pub(crate) fn to_pid(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

/// What one read of a process shows: its start and whether it has exited, from the same read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// The start identity; `None` only when `exited` and the platform no longer shows it.
    pub(crate) start: Option<u64>,
    /// The state proves the process has exited (a zombie, not yet reaped by its parent).
    pub(crate) exited: bool,
}

/// Why the identity of a process could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The number cannot be a process id (0, or above the largest signed 32-bit integer).
    #[error("{pid} is not a process id")]
    InvalidPid {
        /// The number given.
        pid: u32,
    },
    /// No process with this pid is visible: it exited, or `/proc` hides it from this user.
    #[error("no process {pid} is visible")]
    NotFound {
        /// The pid.
        pid: u32,
    },
    /// The process's entry exists but cannot be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The pid.
        pid: u32,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A helper program (Darwin `ps`) could not be run.
    #[error("cannot run {program} to read the identity of process {pid}")]
    Spawn {
        /// The pid.
        pid: u32,
        /// The program.
        program: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// What was read does not have the expected shape.
    #[error("the identity of process {pid} read from {} is malformed", from.display())]
    Malformed {
        /// The pid.
        pid: u32,
        /// The file read (Linux) or the program run (Darwin `ps`).
        from: PathBuf,
        /// Which part was wrong.
        #[source]
        source: Malformed,
    },
    /// The process's entry names another process than the one asked for: it is never taken
    /// for it.
    #[error("{} names process {named}, not {pid}", path.display())]
    OtherProcess {
        /// The pid asked for.
        pid: u32,
        /// The file read.
        path: PathBuf,
        /// The pid the file names.
        named: u32,
    },
    /// The process has exited and the platform no longer shows its start (a zombie under
    /// Darwin `ps`): it has no identity left to read.
    #[error("process {pid} has exited and its start time is gone")]
    NoStart {
        /// The pid.
        pid: u32,
    },
    /// This platform is neither Linux nor macOS: a process's identity cannot be read.
    #[error("cannot read the identity of process {pid} on {os}: worklane supports Linux and macOS")]
    Unsupported {
        /// The pid.
        pid: u32,
        /// The platform (`std::env::consts::OS`).
        os: &'static str,
    },
}
