//! Acquisition: take the guard, read the record, publish ours, refuse, or take over.

use crate::claim::{claim_name, clear_claims};
use crate::clock::{Now, rfc3339_ms};
pub use crate::error::Error;
use crate::error::{Failure, Unknown};
use crate::lease::Lease;
use crate::liveness::{GuardHold, Judgement, LiveWhy};
#[cfg(feature = "test-seams")]
use crate::options::Control;
use crate::options::{Options, Step};
use crate::read::{read_hostile, read_record};
use crate::record::Record;
use crate::refusal::Refusal;
use crate::request::Request;
use crate::take::take_guard;
use worklane_guard::Guard;
use worklane_identity::{Place, ProcessIdentity, Recorded};
use worklane_journal::Event;
use worklane_slotfile::{Publish, RECORD_MODE, Removal, SlotDir, SlotPath};

/// Acquisition reached `step`: asks the test seam's hook (feature `test-seams`) whether to go
/// on.
#[cfg(feature = "test-seams")]
fn at(options: &Options, step: Step) -> Result<(), Failure> {
    match options.hook_at(step) {
        Control::Continue => Ok(()),
        Control::Crash => Err(Error::Crashed(step).into()),
    }
}

/// Acquisition reached `step`: without the test seams, it always goes on.
#[cfg(not(feature = "test-seams"))]
#[inline]
fn at(_options: &Options, _step: Step) -> Result<(), Failure> {
    Ok(())
}

/// The outcome of [`acquire`].
#[derive(Debug)]
#[must_use]
pub enum Acquired {
    /// We hold it.
    Held(Lease),
    /// Someone else does.
    Refused(Refusal),
}

/// The longest lock name: its epoch marker `<name>.epoch.<20 digits>` (the longest of the
/// names derived from it; a claim adds 23 bytes) must itself be a valid slot file name.
pub const MAX_LOCK_NAME: usize = worklane_guard::RESOURCE_NAME_MAX - ".epoch.".len() - 20;

/// Acquires the lease on the resource file `name` in `dir`.
///
/// Under the resource's guard: no record, ours is published; a record judged live or unknown
/// refuses us with the holder's details; a record judged dead is taken over by the claim
/// protocol (PROTOCOL.md): claim named by the stale record's hash, byte-identical recheck,
/// remove, publish ours, remove the claim. Every acquisition gets a fencing epoch larger than
/// any before it for this resource.
pub fn acquire(
    dir: &SlotDir,
    name: &str,
    request: &Request,
    options: &Options,
) -> Result<Acquired, Error> {
    check_request(request)?;
    check_name(name)?;
    let acquired = acquire_one(dir, name, request, options).map_err(|failure| failure.of(name))?;
    if let Some(role) = &options.role {
        journal_role(dir, role, request, &acquired, options);
    }
    Ok(acquired)
}

/// A role lease's taking or refusal, in the journal.
fn journal_role(
    dir: &SlotDir,
    role: &str,
    request: &Request,
    acquired: &Acquired,
    options: &Options,
) {
    let event = match acquired {
        Acquired::Held(lease) => Event::RoleTaken {
            role: role.to_owned(),
            resource: lease.resource().to_owned(),
            owner: request.owner.clone(),
            ttl_ms: options.liveness.ttl_ms(),
            epoch: lease.epoch(),
        },
        Acquired::Refused(_) if !options.journal_refusals => return,
        Acquired::Refused(refusal) => Event::RoleRefused {
            role: role.to_owned(),
            resource: refusal.resource.clone(),
            owner: request.owner.clone(),
            holder_pid: refusal.holder.as_ref().and_then(Record::pid),
            holder_owner: refusal.holder.as_ref().and_then(|h| h.owner.clone()),
            why: refusal.why.to_string(),
        },
    };
    options.journal_in(dir).emit(event);
}

/// [`acquire`] once the request and name are checked.
fn acquire_one(
    dir: &SlotDir,
    name: &str,
    request: &Request,
    options: &Options,
) -> Result<Acquired, Failure> {
    let path = dir.file(name)?;
    let Some(guard) = take_guard(&path, options.liveness.guard_hold())? else {
        return Ok(guard_held(&path));
    };
    at(options, Step::GuardTaken)?;
    // One listing under the guard serves the record's presence, the claim scan and the epoch.
    let listed = path.dir().list_prefixed(name)?;
    acquire_under(path, guard, &listed, request, options)
}

/// [`acquire`] of many resources of one directory at once, each `(name, request)` in turn, one
/// result per pair in order,
/// with one listing of the directory instead of one per resource: every guard that can be
/// taken is taken first, the directory is listed once under all of them, and each resource
/// is then acquired as [`acquire`] does, from its part of that listing. For a process that
/// takes back thousands of leases at a start (the dispatcher's recovery), this turns a cost
/// that grows with the square of the directory's size into one that grows with its size.
///
/// The listing is as good as [`acquire`]'s own: each resource's files change only under its
/// guard (PROTOCOL.md), which this process holds from before the listing until it has acted.
/// A name given twice is refused the second time (its guard is ours already).
pub fn acquire_each(
    dir: &SlotDir,
    each: &[(&str, Request)],
    options: &Options,
) -> Result<Vec<Acquired>, Error> {
    for (name, request) in each {
        check_request(request)?;
        check_name(name)?;
    }
    let hold = options.liveness.guard_hold();
    let mut taken = Vec::with_capacity(each.len());
    for (name, request) in each {
        let of = |failure: Failure| failure.of(name);
        let path = dir.file(name).map_err(|e| of(e.into()))?;
        match take_guard(&path, hold).map_err(|e| of(e.into()))? {
            Some(guard) => {
                at(options, Step::GuardTaken).map_err(of)?;
                taken.push(Ok((path, guard, request)));
            }
            None => taken.push(Err(guard_held(&path))),
        }
    }
    // Sorted by name (`list` sorts), so each resource's files are one range of it.
    let listed = dir
        .list()
        .map_err(|e| Failure::from(e).of(each.first().map_or("", |(name, _)| name)))?;
    let mut acquired = Vec::with_capacity(each.len());
    for one in taken {
        acquired.push(match one {
            Ok((path, guard, request)) => {
                let name = path.name().to_owned();
                let from = listed.partition_point(|p| p.name() < name.as_str());
                let to = from + listed[from..].partition_point(|p| p.name().starts_with(&name));
                acquire_under(path, guard, &listed[from..to], request, options)
                    .map_err(|failure| failure.of(&name))?
            }
            Err(refused) => refused,
        });
    }
    Ok(acquired)
}

pub(crate) fn check_request(request: &Request) -> Result<(), Error> {
    match request.reserved_field() {
        Some(field) => Err(Error::ReservedField {
            field: field.to_owned(),
        }),
        None => Ok(()),
    }
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.len() > MAX_LOCK_NAME {
        return Err(Error::NameTooLong {
            name: name.to_owned(),
            len: name.len(),
            max: MAX_LOCK_NAME,
        });
    }
    Ok(())
}

/// The refusal when the resource's guard is held by someone else.
fn guard_held(path: &SlotPath) -> Acquired {
    Acquired::Refused(Refusal {
        resource: path.name().to_owned(),
        holder: read_record(path).ok().flatten(),
        why: LiveWhy::GuardHeld,
    })
}

/// The rest of [`acquire`], under the resource's guard, with `listed` (the directory's entries
/// that start with its name, sorted, listed after the guard was taken).
fn acquire_under(
    path: SlotPath,
    guard: Guard,
    listed: &[SlotPath],
    request: &Request,
    options: &Options,
) -> Result<Acquired, Failure> {
    let name = path.name().to_owned();
    let name = name.as_str();
    // Nobody following the protocol can create the record while we hold the guard, so a
    // record absent from the listing is absent.
    let raw = match listed.iter().any(|p| p.name() == name) {
        true => match read_hostile(&path)? {
            Ok(raw) => raw,
            Err(why) => return Ok(Acquired::Refused(refusal(name, None, why))),
        },
        false => None,
    };
    if let Some(refusal) = clear_claims(&path, listed, raw.as_deref(), options)? {
        return Ok(Acquired::Refused(refusal));
    }
    at(options, Step::RecordInspected)?;
    let Some(raw) = raw else {
        return publish_ours(path, guard, listed, request, options);
    };
    let record = match Record::parse(&raw) {
        Ok(record) => record,
        Err(e) => {
            return Ok(Acquired::Refused(Refusal {
                resource: name.to_owned(),
                holder: None,
                why: LiveWhy::Malformed {
                    detail: e.to_string(),
                },
            }));
        }
    };
    let now = Now::of(&*options.clock);
    match options.liveness.judge(&record, &now) {
        Judgement::Live(why) => Ok(Acquired::Refused(Refusal {
            resource: name.to_owned(),
            holder: Some(record),
            why,
        })),
        Judgement::Dead(why) => {
            log::info!(
                "taking over {name}: its holder (pid {}, {}) is gone: {why}",
                record
                    .pid()
                    .map_or_else(|| "?".to_owned(), |p| p.to_string()),
                record.owner.as_deref().unwrap_or("no owner named")
            );
            let proof = why.to_string();
            let dir = path.dir().clone();
            let stale = (
                record.pid(),
                record.owner.clone(),
                record.acquired_at.clone(),
            );
            let taken = take_over(path, guard, listed, &raw, record, request, options)?;
            if matches!(taken, Acquired::Held(_)) {
                options.journal_in(&dir).emit(Event::Takeover {
                    resource: name.to_owned(),
                    owner: request.owner.clone(),
                    stale_pid: stale.0,
                    stale_owner: stale.1,
                    stale_since: stale.2,
                    claim: claim_name(name, &raw),
                    proof,
                });
            }
            Ok(taken)
        }
    }
}

fn refusal(resource: &str, holder: Option<Record>, why: LiveWhy) -> Refusal {
    Refusal {
        resource: resource.to_owned(),
        holder,
        why,
    }
}

/// This process's place and identity, as written into records and claims.
///
/// Read once per process and cached by pid: a forked child (another pid) reads its own.
pub(crate) fn me() -> Result<Recorded, Unknown> {
    static ME: std::sync::Mutex<Option<(u32, Recorded)>> = std::sync::Mutex::new(None);
    let pid = std::process::id();
    let mut cached = ME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, me)) = cached.as_ref()
        && *at == pid
    {
        return Ok(me.clone());
    }
    let place = Place::current().map_err(Unknown::Place)?;
    let process = ProcessIdentity::of_self().map_err(Unknown::Process)?;
    let me = Recorded::new(process, place.clone());
    *cached = Some((pid, me.clone()));
    Ok(me)
}

/// The takeover: claim, recheck, remove, publish, unclaim.
fn take_over(
    path: SlotPath,
    guard: Guard,
    listed: &[SlotPath],
    stale: &[u8],
    stale_record: Record,
    request: &Request,
    options: &Options,
) -> Result<Acquired, Failure> {
    let claim = path.dir().file(&claim_name(path.name(), stale))?;
    let now = Now::of(&*options.clock);
    let mut claim_record = Record {
        holder: me()?,
        acquired_at: Some(rfc3339_ms(now.wall_ms)),
        last_pulse: Some(now.wall_ms),
        pulse_boot: now.boot.clone(),
        // Every taker holds the guard from its claim to its end: a claim found by someone
        // else under the guard is a crashed taker's.
        holds_guard: Some(true),
        ..Record::default()
    };
    claim_record.owner = Some(request.owner.clone());
    let claim_bytes = claim_record.to_bytes();
    if claim.publish(&claim_bytes, RECORD_MODE)? == Publish::AlreadyExists {
        // Claims were cleared under this guard a moment ago, so what stands at our claim's
        // name is a directory (which no unlink removes) or a writer outside the protocol is
        // at work. A directory is no taker's claim: the takeover goes on without one (we hold
        // the guard; the claim only tells a crashed takeover's leftovers apart). Anything else:
        // refuse rather than guess.
        if read_hostile(&claim)?.is_ok() {
            return Ok(Acquired::Refused(Refusal {
                resource: path.name().to_owned(),
                holder: Some(stale_record),
                why: LiveWhy::TakeoverInProgress {
                    claim: claim.name().to_owned(),
                    claimant: None,
                },
            }));
        }
        at(options, Step::ClaimTaken)?;
        return claimed_takeover(path, guard, listed, stale, request, options);
    }
    at(options, Step::ClaimTaken)?;
    let outcome = claimed_takeover(path, guard, listed, stale, request, options);
    #[cfg(feature = "test-seams")]
    if let Err(Failure::Said(error)) = &outcome
        && matches!(**error, Error::Crashed(_))
    {
        // The test seam stands for a process that died here: its claim stays, for the next
        // contender to clear.
        return outcome;
    }
    // Every other way out withdraws the claim. A claim left by a failed takeover names this
    // process, which is alive, so it would block the resource (for us too) until we exit.
    let unclaimed = claim.remove_if_unchanged(&claim_bytes);
    let acquired = outcome?;
    // Changed or absent: only a writer outside the protocol touches a claim under our guard.
    let _: Removal = unclaimed?;
    Ok(acquired)
}

/// The takeover after our claim is published: recheck, remove the stale record, publish ours.
/// The caller withdraws the claim whatever happens.
fn claimed_takeover(
    path: SlotPath,
    guard: Guard,
    listed: &[SlotPath],
    stale: &[u8],
    request: &Request,
    options: &Options,
) -> Result<Acquired, Failure> {
    // The byte-identical recheck and the removal in one: remove-if-unchanged reads the record
    // and unlinks it only if it still holds exactly the stale bytes. Changed or gone since we
    // judged it: someone else acted, so we refuse rather than guess.
    if path.remove_if_unchanged(stale)? != Removal::Removed {
        return Ok(Acquired::Refused(Refusal {
            resource: path.name().to_owned(),
            holder: read_record(&path).ok().flatten(),
            why: LiveWhy::Changed,
        }));
    }
    at(options, Step::StaleRemoved)?;
    publish_ours(path, guard, listed, request, options)
}

/// This process's record for `request` at `epoch`, stamped by the liveness, with its bytes and
/// the time it was made.
pub(crate) fn our_record(
    request: &Request,
    epoch: u64,
    options: &Options,
) -> Result<(Record, Vec<u8>, Now), Unknown> {
    let now = Now::of(&*options.clock);
    let mut record = Record {
        holder: me()?,
        owner: Some(request.owner.clone()),
        acquired_at: Some(rfc3339_ms(now.wall_ms)),
        epoch: Some(epoch),
        extra: request.fields.clone(),
        ..Record::default()
    };
    options.liveness.stamp(&mut record, &now);
    let bytes = record.to_bytes();
    Ok((record, bytes, now))
}

/// Advances the epoch and publishes our record; on success the lease is held.
fn publish_ours(
    path: SlotPath,
    guard: Guard,
    listed: &[SlotPath],
    request: &Request,
    options: &Options,
) -> Result<Acquired, Failure> {
    let epoch = crate::epoch::advance(&path, listed)?;
    at(options, Step::EpochAdvanced)?;
    let (record, bytes, now) = our_record(request, epoch, options)?;
    match path.publish(&bytes, RECORD_MODE)? {
        Publish::Published => {}
        Publish::AlreadyExists => {
            return Ok(Acquired::Refused(Refusal {
                resource: path.name().to_owned(),
                holder: read_record(&path).ok().flatten(),
                why: LiveWhy::Changed,
            }));
        }
    }
    at(options, Step::Published)?;
    let guard = match options.liveness.guard_hold() {
        GuardHold::ForLife => Some(guard),
        GuardHold::WhileChanging => {
            drop(guard);
            None
        }
    };
    Ok(Acquired::Held(Lease::new(
        path,
        guard,
        bytes,
        record,
        epoch,
        options.clone(),
        now,
    )))
}
