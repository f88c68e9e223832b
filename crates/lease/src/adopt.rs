//! Taking over a lease whose held guard another process handed to this one.

use crate::acquire::our_record;
use crate::error::Error;
use crate::lease::Lease;
use crate::liveness::GuardHold;
use crate::options::Options;
use crate::record::Record;
use crate::request::Request;
use worklane_guard::Guard;
use worklane_slotfile::{RECORD_MODE, SlotDir};

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
        return Err(Error::ReservedField(field.to_owned()));
    }
    let path = dir.file(name)?;
    // The record the guard's last holder wrote names the epoch it advanced to; trusted only
    // when the epoch files agree (else the directory is listed).
    let claimed = path
        .read()
        .ok()
        .flatten()
        .and_then(|raw| Record::parse(&raw).ok())
        .and_then(|r| r.epoch);
    let epoch = crate::epoch::current_claimed(&path, claimed)?;
    let (record, bytes, now) = our_record(request, epoch, options)?;
    path.replace(&bytes, RECORD_MODE)?;
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
