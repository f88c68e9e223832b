//! Errors of [`Guard::try_acquire`](crate::Guard::try_acquire) and
//! [`Guard::from_received`](crate::Guard::from_received).

use crate::file::FileId;
use crate::filesystem::Refused;
use crate::name::NameProblem;
use std::path::PathBuf;

/// Why a guard could not be acquired. Busy is not among them: it is `Ok(None)`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The resource name cannot carry a guard.
    #[error("cannot guard resource {resource:?} in {dir}: {problem}")]
    InvalidName {
        /// Directory the resource lives in.
        dir: PathBuf,
        /// The name given.
        resource: String,
        /// What is wrong with it.
        problem: NameProblem,
    },
    /// A symbolic link sits at the guard name.
    #[error(
        "guard {path} is a symbolic link and is never followed; remove the link during a \
         quiescent maintenance window (worklane recreates the guard)"
    )]
    Symlink {
        /// The guard's path.
        path: PathBuf,
    },
    /// Something other than a regular file sits at the guard name.
    #[error(
        "guard {path} is a {kind}, not an empty regular file; remove it during a quiescent \
         maintenance window (worklane recreates the guard)"
    )]
    NotRegular {
        /// The guard's path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// The guard file has contents.
    #[error(
        "guard {path} holds {size} bytes but a guard is always empty; move it aside during a \
         quiescent maintenance window (worklane recreates the guard)"
    )]
    NotEmpty {
        /// The guard's path.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
    },
    /// Opening the guard landed on a closed standard stream.
    #[error(
        "guard {path} opened as descriptor {fd}, a closed standard stream, and was closed \
         again; keep descriptors 0, 1 and 2 open (redirect unused ones to /dev/null)"
    )]
    StdStreamClosed {
        /// The guard's path.
        path: PathBuf,
        /// The descriptor number it landed on.
        fd: i32,
    },
    /// The guard's filesystem does not give local `flock` semantics.
    #[error("guard {path} is on a filesystem where worklane does not lock")]
    Filesystem {
        /// The guard's path.
        path: PathBuf,
        /// The filesystem verdict.
        #[source]
        refused: Refused,
    },
    /// A received descriptor refers to another file than the expected guard.
    #[error(
        "the received descriptor is not guard {path}: it is device {} inode {}, the guard is \
         device {} inode {}",
        got.dev, got.ino, want.dev, want.ino
    )]
    NotTheGuard {
        /// The guard's path.
        path: PathBuf,
        /// What the descriptor refers to.
        got: FileId,
        /// What the guard at the path is.
        want: FileId,
    },
    /// A received descriptor is the guard, but another open file description holds it.
    #[error(
        "the received descriptor for guard {path} does not hold its lock: another process \
         does, so the sender never held it"
    )]
    NotHeld {
        /// The guard's path.
        path: PathBuf,
    },
    /// A system call failed.
    #[error("cannot {op} guard {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The guard's (or its temp alias's) path.
        path: PathBuf,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
}
