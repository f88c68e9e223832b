//! Taking over a lease whose held guard another process handed to this one.

use crate::acquire::our_record;
use crate::epoch;
use crate::error::Unknown;
use crate::lease::Lease;
use crate::liveness::GuardHold;
use crate::options::Options;
use crate::request::Request;
use worklane_guard::Guard;
use worklane_identity::{place, process};
use worklane_slotfile::{RECORD_MODE, SlotDir, name, write};

/// Why [`adopt`] failed. Each variant says which step failed and of which lease; the cause is
/// its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lease's name cannot be a slot file.
    #[error("cannot adopt lease {resource:?}: its name is refused")]
    Name {
        /// The name given.
        resource: String,
        /// Why it is refused.
        #[source]
        source: name::Error,
    },
    /// The request sets a field the core writes itself.
    #[error("the lease request sets `{field}`, which worklane writes itself; rename the field")]
    ReservedField {
        /// The field.
        field: String,
    },
    /// The lease's epoch could not be read.
    #[error("cannot read the epoch of lease {resource}, to adopt it")]
    Epoch {
        /// The lease.
        resource: String,
        /// Why (boxed: the largest cause).
        #[source]
        source: Box<epoch::Error>,
    },
    /// This process's place (host, boot, namespaces) could not be read for its record.
    #[error("cannot read where this process runs, to adopt lease {resource}")]
    Place {
        /// The lease.
        resource: String,
        /// Why.
        #[source]
        source: place::Error,
    },
    /// This process's identity (its start) could not be read for its record.
    #[error("cannot read this process's identity, to adopt lease {resource}")]
    Process {
        /// The lease.
        resource: String,
        /// Why.
        #[source]
        source: process::Error,
    },
    /// The record naming this process could not be written.
    #[error("cannot rewrite the record of lease {resource}, to adopt it")]
    Write {
        /// The lease.
        resource: String,
        /// Why.
        #[source]
        source: write::Error,
    },
}

/// Takes over a lease whose guard was handed to this process by its holder (a descriptor
/// received over `SCM_RIGHTS` and checked with `Guard::from_received`, which re-asserts the
/// lock): under that guard, the record is rewritten to name this process, keeping the
/// resource's epoch (a hand-over is no new acquisition: nobody else held it in between). The
/// lease must be of a liveness that holds its guard for life.
///
/// From then the lease is this process's as if it had acquired it: a SIGKILL frees it at once
/// (the record declares the held guard), and release removes the record.
pub fn adopt(
    dir: &SlotDir,
    name: &str,
    guard: Guard,
    request: &Request,
    options: &Options,
) -> Result<Lease, Error> {
    if let Some(field) = request.reserved_field() {
        return Err(Error::ReservedField {
            field: field.to_owned(),
        });
    }
    let resource = || name.to_owned();
    let path = dir.file(name).map_err(|source| Error::Name {
        resource: resource(),
        source,
    })?;
    // The record the guard's last holder wrote names the epoch it advanced to; trusted only
    // when the epoch files agree (else the directory is listed).
    let claimed = crate::read::read_record(&path)
        .ok()
        .flatten()
        .and_then(|r| r.epoch);
    let epoch = epoch::current_claimed(&path, claimed).map_err(|source| Error::Epoch {
        resource: resource(),
        source: Box::new(source),
    })?;
    let (record, bytes, now) = our_record(request, epoch, options).map_err(|e| match e {
        Unknown::Place(source) => Error::Place {
            resource: resource(),
            source,
        },
        Unknown::Process(source) => Error::Process {
            resource: resource(),
            source,
        },
    })?;
    path.rewrite(&bytes, RECORD_MODE)
        .map_err(|source| Error::Write {
            resource: resource(),
            source,
        })?;
    let guard = match options.liveness.guard_hold() {
        GuardHold::ForLife => Some(guard),
        GuardHold::WhileChanging => {
            drop(guard);
            None
        }
    };
    Ok(Lease::new(
        path,
        guard,
        bytes,
        record,
        epoch,
        options.clone(),
        now,
    ))
}
