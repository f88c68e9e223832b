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
pub use record::{RECORD_VERSION, RESERVED_FIELDS, Record, Version};
pub use refusal::Refusal;
pub use request::Request;
pub use retire::retire;
pub use retry::Backoff;
