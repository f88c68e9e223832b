//! Acquisition: take the guard, read the record, publish ours, refuse, or take over.

use crate::clock::{Now, rfc3339_ms};
use crate::error::Error;
use crate::lease::Lease;
use crate::liveness::{GuardHold, Judgement, LiveWhy};
#[cfg(feature = "test-seams")]
use crate::options::Control;
use crate::options::{Options, Step};
use crate::record::{RESERVED_FIELDS, Record};
use crate::take::take_guard;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use worklane_guard::Guard;
use worklane_identity::{Place, ProcessIdentity, Recorded};
use worklane_slotfile::{Publish, RECORD_MODE, Removal, SlotDir, SlotPath};

/// Acquisition reached `step`: asks the test seam's hook (feature `test-seams`) whether to go
/// on.
#[cfg(feature = "test-seams")]
fn at(options: &Options, step: Step) -> Result<(), Error> {
    match options.hook_at(step) {
        Control::Continue => Ok(()),
        Control::Crash => Err(Error::Crashed(step)),
    }
}

/// Acquisition reached `step`: without the test seams, it always goes on.
#[cfg(not(feature = "test-seams"))]
#[inline]
fn at(_options: &Options, _step: Step) -> Result<(), Error> {
    Ok(())
}

/// What the acquirer writes about itself beside the core fields.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Who takes it (a harness name, a user), shown to those refused.
    pub owner: String,
    /// Further fields: `role`, `profile`, `agentIdentity`, `limit_ms`... Names the core writes
    /// itself ([`RESERVED_FIELDS`]) are refused.
    pub fields: Map<String, Value>,
}

impl Request {
    /// A request by `owner` with no further fields.
    #[must_use]
    pub fn new(owner: impl Into<String>) -> Request {
        Request {
            owner: owner.into(),
            fields: Map::new(),
        }
    }

    /// Adds a field.
    #[must_use]
    pub fn field(mut self, name: &str, value: impl Into<Value>) -> Request {
        self.fields.insert(name.to_owned(), value.into());
        self
    }
}

/// A refused acquisition: who holds the resource and why that counts as held.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The resource's file name.
    pub resource: String,
    /// The holder's record, when it could be read and parsed.
    pub holder: Option<Record>,
    /// Why the holder counts as live.
    pub why: LiveWhy,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is held", self.resource)?;
        if let Some(h) = &self.holder {
            if let Some(pid) = h.pid() {
                write!(f, " by pid {pid}")?;
            }
            if let Some(owner) = &h.owner {
                write!(f, " ({owner})")?;
            }
            for key in ["role", "profile", "agentIdentity"] {
                if let Some(v) = h.extra_str(key) {
                    write!(f, ", {key} {v}")?;
                }
            }
            if let Some(at) = &h.acquired_at {
                write!(f, ", since {at}")?;
            }
            if let Some(pulse) = h.last_pulse {
                write!(f, ", last pulse {}", rfc3339_ms(pulse))?;
            }
        }
        write!(f, ": {}", self.why)
    }
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
        let path = dir.file(name)?;
        match take_guard(&path, hold)? {
            Some(guard) => {
                at(options, Step::GuardTaken)?;
                taken.push(Ok((path, guard, request)));
            }
            None => taken.push(Err(guard_held(&path))),
        }
    }
    // Sorted by name (`list` sorts), so each resource's files are one range of it.
    let listed = dir.list()?;
    let mut acquired = Vec::with_capacity(each.len());
    for one in taken {
        acquired.push(match one {
            Ok((path, guard, request)) => {
                let name = path.name().to_owned();
                let from = listed.partition_point(|p| p.name() < name.as_str());
                let to = from + listed[from..].partition_point(|p| p.name().starts_with(&name));
                acquire_under(path, guard, &listed[from..to], request, options)?
            }
            Err(refused) => refused,
        });
    }
    Ok(acquired)
}

fn check_request(request: &Request) -> Result<(), Error> {
    match request
        .fields
        .keys()
        .find(|k| RESERVED_FIELDS.contains(&k.as_str()))
    {
        Some(key) => Err(Error::ReservedField(key.clone())),
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
) -> Result<Acquired, Error> {
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
        Judgement::Dead(_) => take_over(path, guard, listed, &raw, record, request, options),
    }
}

/// Reads and parses the record, `Ok(None)` when absent.
fn read_record(path: &SlotPath) -> Result<Option<Record>, Error> {
    Ok(path.read()?.and_then(|raw| Record::parse(&raw).ok()))
}

fn refusal(resource: &str, holder: Option<Record>, why: LiveWhy) -> Refusal {
    Refusal {
        resource: resource.to_owned(),
        holder,
        why,
    }
}

/// Reads a file that anyone in the directory's group may have put there: a symbolic link, a
/// FIFO, a directory or a file over 64 KiB where a record or claim belongs is not an error of
/// ours but a hostile or broken file, returned as `Ok(Err(why))`; only a failing system call
/// is an error.
fn read_hostile(path: &SlotPath) -> Result<Result<Option<Vec<u8>>, LiveWhy>, Error> {
    use worklane_slotfile::read::Error as ReadError;
    match path.read() {
        Ok(raw) => Ok(Ok(raw)),
        Err(
            e @ (ReadError::Symlink { .. }
            | ReadError::NotRegular { .. }
            | ReadError::TooLarge { .. }),
        ) => Ok(Err(LiveWhy::Malformed {
            detail: e.to_string(),
        })),
        Err(e) => Err(e.into()),
    }
}

/// The claim file name for a stale record: `<lock>.<first 16 hex of SHA-256(record)>.claim`.
#[must_use]
pub fn claim_name(lock: &str, stale_record: &[u8]) -> String {
    let digest = Sha256::digest(stale_record);
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{lock}.{hex}.claim")
}

pub(crate) fn is_claim_of(lock: &str, name: &str) -> bool {
    name.strip_prefix(lock)
        .and_then(|rest| rest.strip_prefix('.'))
        .and_then(|rest| rest.strip_suffix(".claim"))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Clears every takeover claim on `path` that cannot stand for a taker still at work, and
/// refuses us if one may. Called with the guard held, so every claim found belongs to a taker
/// that no longer holds it. A claim is cleared when:
/// - it is not a record at all (claims are published whole, so garbage is never a taker's);
/// - its name is not the hash of the record now at `path` (`record`, absent: `None`): it was
///   made for a record that is gone, so no taker of the current record made it;
/// - it declares that its taker held the guard (every worklane taker does), or the liveness
///   judges its taker dead.
///
/// A claim that is not a regular file of at most 64 KiB is never a taker's: it is unlinked
/// (a FIFO, a symbolic link, an oversized file), or skipped when it cannot be (a directory);
/// `worklane slots` reports it, and a takeover whose own claim name it occupies goes on
/// without a claim.
fn clear_claims(
    path: &SlotPath,
    listed: &[SlotPath],
    record: Option<&[u8]>,
    options: &Options,
) -> Result<Option<Refusal>, Error> {
    let current = record.map(|raw| claim_name(path.name(), raw));
    for claim in listed.iter().filter(|p| is_claim_of(path.name(), p.name())) {
        let raw = match read_hostile(claim)? {
            Ok(Some(raw)) => raw,
            Ok(None) => continue,
            Err(_) => {
                // Not a regular file of at most 64 KiB: never a taker's claim. A FIFO, a link
                // or an oversized file is unlinked; a directory cannot be, and is skipped.
                let _ = claim.remove();
                continue;
            }
        };
        let judged = match Record::parse(&raw) {
            Ok(_) if current.as_deref() != Some(claim.name()) => None,
            Ok(record) => Some((
                options
                    .liveness
                    .judge_claim(&record, &Now::of(&*options.clock)),
                record.pid(),
            )),
            Err(_) => None,
        };
        match judged {
            None | Some((Judgement::Dead(_), _)) => {
                // Changed means it was replaced under us by a writer outside the protocol.
                let _ = claim.remove_if_unchanged(&raw)?;
            }
            Some((Judgement::Live(_), claimant)) => {
                return Ok(Some(Refusal {
                    resource: path.name().to_owned(),
                    holder: record.and_then(|raw| Record::parse(raw).ok()),
                    why: LiveWhy::TakeoverInProgress {
                        claim: claim.name().to_owned(),
                        claimant,
                    },
                }));
            }
        }
    }
    Ok(None)
}

/// This process's place and identity, as written into records and claims.
///
/// Read once per process and cached by pid: a forked child (another pid) reads its own.
pub(crate) fn me() -> Result<Recorded, Error> {
    static ME: std::sync::Mutex<Option<(u32, Recorded)>> = std::sync::Mutex::new(None);
    let pid = std::process::id();
    let mut cached = ME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, me)) = cached.as_ref()
        && *at == pid
    {
        return Ok(me.clone());
    }
    let place = Place::current().map_err(|e| Error::Identity(e.to_string()))?;
    let process = ProcessIdentity::of_self().map_err(|e| Error::Identity(e.to_string()))?;
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
) -> Result<Acquired, Error> {
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
    if let Err(Error::Crashed(_)) = outcome {
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
) -> Result<Acquired, Error> {
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
fn our_record(
    request: &Request,
    epoch: u64,
    options: &Options,
) -> Result<(Record, Vec<u8>, Now), Error> {
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
) -> Result<Acquired, Error> {
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
    check_request(request)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_names_use_the_first_16_hex_of_sha256() {
        // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223...
        assert_eq!(
            claim_name("agent-0.lock", b"abc"),
            "agent-0.lock.ba7816bf8f01cfea.claim"
        );
        assert!(is_claim_of(
            "agent-0.lock",
            "agent-0.lock.ba7816bf8f01cfea.claim"
        ));
        assert!(
            !is_claim_of("agent-0.lock", "agent-0.lock.ba7816bf8f01cfe.claim"),
            "15 hex"
        );
        assert!(!is_claim_of(
            "agent-0.lock",
            "agent-1.lock.ba7816bf8f01cfea.claim"
        ));
        assert!(!is_claim_of("agent-0.lock", "agent-0.lock.epoch.1"));
    }
}
