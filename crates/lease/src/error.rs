//! Why an acquisition failed ([`acquire::Error`](crate::acquire::Error)), and the failure its
//! steps pass up before it is said of which lease.

use crate::epoch;
#[cfg(feature = "test-seams")]
use crate::options::Step;
use worklane_identity::{place, process};
use worklane_slotfile::{name, open, read, remove, write};

/// Why [`acquire`](crate::acquire()) or [`acquire_each`](crate::acquire_each) failed (a refusal
/// is not a failure: it is [`Acquired::Refused`](crate::Acquired::Refused)). Each variant says
/// which step failed and of which lease; the cause is its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lease's name cannot be a slot file.
    #[error("cannot acquire lease {resource:?}: its name is refused")]
    Name {
        /// The name given.
        resource: String,
        /// Why it is refused.
        #[source]
        source: name::Error,
    },
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
    #[error("the lease request sets `{field}`, which worklane writes itself; rename the field")]
    ReservedField {
        /// The field.
        field: String,
    },
    /// The lease's guard could not be taken (not busy: broken).
    #[error("cannot take the guard of lease {resource}")]
    Guard {
        /// The lease.
        resource: String,
        /// Why.
        #[source]
        source: worklane_guard::acquire::Error,
    },
    /// The slot directory could not be listed for the lease's record and claims.
    #[error("cannot list the files of lease {resource}")]
    List {
        /// The lease.
        resource: String,
        /// Why.
        #[source]
        source: open::Error,
    },
    /// The lease's record or a claim could not be read.
    #[error("cannot read the record or a claim of lease {resource}")]
    Read {
        /// The lease.
        resource: String,
        /// Why.
        #[source]
        source: read::Error,
    },
    /// Our record or claim could not be written.
    #[error("cannot write the record or claim of lease {resource}")]
    Write {
        /// The lease.
        resource: String,
        /// Why.
        #[source]
        source: write::Error,
    },
    /// A stale record or claim of the lease could not be removed.
    #[error("cannot remove a stale record or claim of lease {resource}")]
    Remove {
        /// The lease.
        resource: String,
        /// Why (boxed: the largest cause).
        #[source]
        source: Box<remove::Error>,
    },
    /// This process's place (host, boot, namespaces) could not be read for its record.
    #[error("cannot read where this process runs, for the record of lease {resource}")]
    Place {
        /// The lease.
        resource: String,
        /// Why.
        #[source]
        source: place::Error,
    },
    /// This process's identity (its start) could not be read for its record.
    #[error("cannot read this process's identity, for the record of lease {resource}")]
    Process {
        /// The lease.
        resource: String,
        /// Why.
        #[source]
        source: process::Error,
    },
    /// The lease's epoch files are there but the epoch cannot be advanced (a stray file, or
    /// the largest epoch reached): this index of a resource cannot be taken again until an
    /// operator tidies its epoch files.
    #[error(
        "cannot advance the epoch of lease {resource} at {}: {stuck}; remove stray epoch files \
         by hand during a quiescent window",
        path.display()
    )]
    Epoch {
        /// The lease.
        resource: String,
        /// The epoch file.
        path: std::path::PathBuf,
        /// Why.
        stuck: epoch::Stuck,
    },
    /// The lease's epoch files could not be read or changed.
    #[error("cannot advance the epoch of lease {resource}")]
    EpochFiles {
        /// The lease.
        resource: String,
        /// Why (boxed: the rarest of these, and the largest).
        #[source]
        source: Box<epoch::Error>,
    },
    /// A hook stopped acquisition at this step (test seam, feature `test-seams`).
    #[cfg(feature = "test-seams")]
    #[error("acquisition stopped at {0:?} by a test hook")]
    Crashed(Step),
}

/// Why this process's own place or identity could not be read for a record.
#[derive(Debug)]
pub(crate) enum Unknown {
    Place(place::Error),
    Process(process::Error),
}

impl From<Unknown> for Failure {
    fn from(unknown: Unknown) -> Failure {
        match unknown {
            Unknown::Place(source) => Failure::Place(source),
            Unknown::Process(source) => Failure::Process(source),
        }
    }
}

/// What failed in a step of acquisition, before the lease it was for is added
/// ([`Failure::of`]).
#[derive(Debug)]
pub(crate) enum Failure {
    Name(name::Error),
    Guard(worklane_guard::acquire::Error),
    List(open::Error),
    Read(read::Error),
    Write(write::Error),
    Remove(remove::Error),
    Place(place::Error),
    Process(process::Error),
    Epoch(epoch::Error),
    EpochStuck(std::path::PathBuf, epoch::Stuck),
    /// Already said in full.
    Said(Box<Error>),
}

macro_rules! failure_from {
    ($($variant:ident($source:ty)),* $(,)?) => {
        $(impl From<$source> for Failure {
            fn from(source: $source) -> Failure {
                Failure::$variant(source)
            }
        })*
    };
}

failure_from!(
    Name(name::Error),
    Guard(worklane_guard::acquire::Error),
    List(open::Error),
    Read(read::Error),
    Write(write::Error),
    Remove(remove::Error),
    Place(place::Error),
    Process(process::Error),
    Epoch(epoch::Error),
    Said(Box<Error>),
);

impl From<epoch::Advance> for Failure {
    fn from(advance: epoch::Advance) -> Failure {
        match advance {
            epoch::Advance::Failed(error) => Failure::Epoch(error),
            epoch::Advance::Stuck { path, stuck } => Failure::EpochStuck(path, stuck),
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::Said(Box::new(error))
    }
}

impl Failure {
    /// The failure as an error of acquiring `resource`.
    pub(crate) fn of(self, resource: &str) -> Error {
        let resource = resource.to_owned();
        match self {
            Failure::Name(source) => Error::Name { resource, source },
            Failure::Guard(source) => Error::Guard { resource, source },
            Failure::List(source) => Error::List { resource, source },
            Failure::Read(source) => Error::Read { resource, source },
            Failure::Write(source) => Error::Write { resource, source },
            Failure::Remove(source) => Error::Remove {
                resource,
                source: Box::new(source),
            },
            Failure::Place(source) => Error::Place { resource, source },
            Failure::Process(source) => Error::Process { resource, source },
            Failure::Epoch(source) => Error::EpochFiles {
                resource,
                source: Box::new(source),
            },
            Failure::EpochStuck(path, stuck) => Error::Epoch {
                resource,
                path,
                stuck,
            },
            Failure::Said(error) => *error,
        }
    }
}
