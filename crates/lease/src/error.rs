//! Why acquisition failed.

#[cfg(feature = "test-seams")]
use crate::options::Step;

/// Why acquisition failed (a refusal is not a failure: it is [`Acquired::Refused`](crate::Acquired::Refused)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The resource name cannot be a slot file.
    #[error(transparent)]
    Name(#[from] worklane_slotfile::name::Error),
    /// The lock name leaves no room for its epoch marker and claim names.
    #[error(
        "lock name {name:?} is {len} bytes; a lock name may have at most {max} so that its \
         epoch marker and takeover claims fit the filesystem's name limit: use a shorter name"
    )]
    NameTooLong {
        /// The name given.
        name: String,
        /// Its length in bytes.
        len: usize,
        /// The longest accepted.
        max: usize,
    },
    /// The request sets a field the core writes itself.
    #[error("the lease request sets `{0}`, which worklane writes itself; rename the field")]
    ReservedField(String),
    /// The guard could not be taken (not busy: broken).
    #[error(transparent)]
    Guard(#[from] worklane_guard::acquire::Error),
    /// The record or a claim could not be read.
    #[error(transparent)]
    Read(#[from] worklane_slotfile::read::Error),
    /// The record, a claim or the epoch could not be written.
    #[error(transparent)]
    Write(#[from] worklane_slotfile::write::Error),
    /// The slot directory could not be listed for claims.
    #[error(transparent)]
    List(#[from] worklane_slotfile::open::Error),
    /// A stale record or claim could not be removed.
    #[error(transparent)]
    Remove(#[from] worklane_slotfile::remove::Error),
    /// This process's own place or identity could not be read.
    #[error("cannot read this process's identity for the lock record: {0}")]
    Identity(String),
    /// The epoch file could not be advanced.
    #[error(
        "cannot advance the epoch at {path}: {found}; remove stray epoch files by hand during a quiescent window"
    )]
    Epoch {
        /// The epoch file.
        path: String,
        /// What it holds.
        found: String,
    },
    /// A hook stopped acquisition at this step (test seam, feature `test-seams`).
    #[cfg(feature = "test-seams")]
    #[error("acquisition stopped at {0:?} by a test hook")]
    Crashed(Step),
}
