//! One claim / refuse / reclaim / release core for every lock in worklane, with the holder's
//! liveness injected.
//!
//! - [`acquire()`] takes a resource's kernel guard, reads its JSON record and either publishes
//!   ours, refuses us with a [`Refusal`] naming the holder and why it counts as live, or takes
//!   over a dead holder's record by the claim protocol.
//! - [`Liveness`] decides "live or dead": [`ProcessLiveness`] (the guard is held for the
//!   lease's life; a free guard's record is dead only on proof from `worklane-identity`,
//!   never by age) or [`TtlLiveness`] (heartbeat: `lastPulse` within `ttlMs` is held whatever
//!   the pid shows; older is stale). Tests inject their own.
//! - [`Lease`] is the held value: [`Lease::pulse`], [`Lease::ensure_held`] before each
//!   mutating action (a lost lease is an error, never silent), [`Lease::release`], and a
//!   fencing [`Lease::epoch`] that grows with every acquisition of the resource.
//! - Time comes from a [`Clock`], so every boundary is tested exactly. A TTL pulse records the
//!   wall clock and the boot clock ([`BootTime`]); a contender on the same boot and time
//!   namespace judges the age by the boot clock, so a step of the wall clock changes nothing.
//!
//! The on-disk protocol (record fields, claim names, TTL boundary, epoch file) is in the
//! workspace's `PROTOCOL.md`.
//!
//! # Limitations
//!
//! - Advisory: it excludes only processes that follow the protocol (guard, then record).
//! - Process liveness needs the holder on this host, boot and pid namespace to ever be proved
//!   gone; a record from elsewhere stays busy until an operator removes it. Use TTL liveness
//!   for holders across namespaces or VMs.
//! - A TTL lease is only as good as its holder's discipline: a paused holder can be replaced,
//!   which it learns at its next [`Lease::ensure_held`]. Protect effects with the epoch.
//!
//! # Example
//!
//! ```
//! use worklane_lease::{Acquired, Options, Request, acquire};
//! use worklane_slotfile::SlotDir;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let temp = tempfile::tempdir()?;
//! let dir = SlotDir::open(temp.path())?;
//! let Acquired::Held(lease) = acquire(&dir, "full-run.lock", &Request::new("ci"), &Options::process())? else {
//!     panic!("nobody else holds it");
//! };
//! // A second contender is refused while the first holds it.
//! let Acquired::Refused(refusal) = acquire(&dir, "full-run.lock", &Request::new("me"), &Options::process())? else {
//!     panic!("held twice");
//! };
//! assert!(refusal.to_string().contains("(ci)"), "{refusal}");
//! let epoch = lease.epoch();
//! lease.release()?;
//! let Acquired::Held(again) = acquire(&dir, "full-run.lock", &Request::new("me"), &Options::process())? else {
//!     panic!("released");
//! };
//! assert!(again.epoch() > epoch, "epochs only grow");
//! # Ok(()) }
//! ```
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! Owns the one claim / refuse / reclaim / release core that every lock of worklane uses (seed
//! 004 forbids a second one). `acquire(&SlotDir, name, &Request, &Options) -> Result<Acquired,
//! acquire::Error>` takes the guard, lists the names starting with `name` once (`list_prefixed`: claims,
//! the record's presence, the epoch), reads the JSON `Record` (a record that is a directory,
//! FIFO, link or over 64 KiB is a `Malformed` refusal, not an error), clears the takeover claims
//! that cannot stand (garbage, made for another record, or declaring `holdsGuard`; a live
//! undeclared taker refuses us), and publishes ours, refuses with a `Refusal {resource, holder, why: LiveWhy}`, or takes over a dead
//! holder (claim `F.<sha256-16>.claim`, byte-identical recheck, remove, publish, unclaim). `Lease`
//! is the held value: `epoch()`, `pulse()`, `ensure_held()`, `release()`, and `Drop` releases.
//! `acquire_each(&SlotDir, &[(name, Request)], &Options)` is the same decision for many
//! resources at once: every guard it can take first, then one listing of the directory under all
//! of them, each resource decided from its own range of that sorted listing (the dispatcher's
//! recovery of thousands of lanes; one listing per lane made it quadratic in the directory's size).
//!
//! The seam is the `Liveness` trait: `guard_hold()` (`ForLife` or `WhileChanging`), `stamp()`
//! (fields it writes), `judge()` and `judge_claim()` (`Judgement::Live(LiveWhy)` or
//! `Dead(DeadWhy)`), `ttl_ms()`. `ProcessLiveness` holds the guard for the lease's life, stamps
//! `holdsGuard: true`, judges a declaring record dead (`DeadWhy::GuardReleased`: it is only ever
//! judged with the guard free) and any other by `worklane_identity::probe`; `TtlLiveness` holds
//! the guard only while changing the record and judges the pulse (`judge_pulse`: by the boot
//! clock when the record's `pulseBoot` is of this boot and time namespace, else `judge_ttl` on
//! wall time, a pure function: age `== ttlMs` held, `ttlMs + 1` stale, a future pulse beyond
//! `MAX_SKEW_MS` unknown). Time comes only from the `Clock` trait (`now_ms`, `boot_ms`;
//! `SystemClock`, `ManualClock` whose `set` steps the wall clock alone and `advance` moves both),
//! read as a `Now {wall_ms, boot: Option<BootTime>}`; `rfc3339_ms` and `parse_rfc3339_ms` are the
//! protocol's text form of a time (a record's `acquiredAt`), which admission, budget and the CLI
//! use for every other time they write or read in the slot directory (the grammar of PROTOCOL.md
//! 12.6 is scanned by hand, the calendar is `jiff`'s civil arithmetic; no crate does its own
//! calendar math); `Options::with_hook` is the test seam that
//! stops acquisition at a `Step` (`acquire::Error::Crashed`), present only with the `test-seams` feature. `Lease::annotate` adds fields to a held record (the command a
//! supervisor started) the way a pulse rewrites it. An epoch that cannot grow past `u64::MAX`
//! fails the acquisition (`acquire::Error::Epoch` with `epoch::Stuck::Exhausted`; a stray first
//! epoch file is `Stuck::Stray`).
//!
//! Errors are named by operation: `acquire::Error` (`acquire`, `acquire_each`), `adopt::Error`,
//! `epoch::Error` (`current_epoch`, `current_epoch_claimed`) and `held::Error` (a held lease's
//! pulse, check, annotation and release). Each variant says which step failed and of which lease,
//! with the typed cause (slotfile's, guard's or identity's error) as its source, never repeated
//! in its own message. `error.rs` holds `acquire::Error` and the `Failure` that acquisition's
//! steps pass up until the lease they were for is added.
//!
//! A lock name is at most `MAX_LOCK_NAME` (200) bytes, so that its epoch marker and claims are
//! valid slot names; a longer one is refused before anything is touched (`acquire::Error::NameTooLong`).

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod acquire;
pub mod adopt;
mod claim;
mod clock;
pub mod epoch;
mod error;
mod lease;
mod liveness;
mod options;
mod read;
mod record;
mod refusal;
mod request;
mod retire;
mod retry;
mod take;

pub use acquire::{Acquired, MAX_LOCK_NAME, acquire, acquire_each};
pub use adopt::adopt;
pub use claim::claim_name;
pub use clock::{BootTime, Clock, ManualClock, Now, SystemClock, parse_rfc3339_ms, rfc3339_ms};
pub use epoch::{
    current as current_epoch, current_claimed as current_epoch_claimed, epoch_prefix,
    parse_epoch_name,
};
pub use lease::{Lease, held};
pub use liveness::{
    DEFAULT_PULSE, DEFAULT_TTL, DeadWhy, GuardHold, Judgement, LiveWhy, Liveness, MAX_SKEW_MS,
    ProcessLiveness, TtlLiveness, judge_pulse, judge_ttl,
};
pub use options::Options;
#[cfg(feature = "test-seams")]
pub use options::{Control, Step};
pub use read::read_record;
pub use record::{RECORD_VERSION, RESERVED_FIELDS, Record, Version};
pub use refusal::Refusal;
pub use request::Request;
pub use retire::retire;
pub use retry::Backoff;
