//! Host admission for worklane: may this process start work now?
//!
//! The slot pool of one machine (SPEC section 7):
//!
//! - [`Pool::try_take`] / [`Pool::take`] take an agent slot (`agent-<i>.lock`, at most
//!   `max_agents` live), a test-run slot (`test-<i>.lock`, at most `max_test_runs`), or the one
//!   full-run lock, refusing while an emergency [`Stop`] or an update [`Drain`] is in force.
//!   Agents and test runs are counted under `slots.lock`; the first free index is taken, and
//!   files may be numbered past the cap, so lowering the cap never strands a running agent.
//! - A slot whose guard is held is live; with its guard free, its record decides by process
//!   identity: provably gone is free (and taken over), anything else counts as held.
//! - [`Pool::snapshot`] is what `worklane slots` shows; [`Pool::idle`] is the idle probe.
//!
//! Every lock here is a `worklane-lease` lease with process liveness; the files are written
//! only through `worklane-slotfile`.
//!
//! # Limitations
//!
//! - STOP and drain are observed, not enforced by the kernel: a holder must poll
//!   [`Pool::stop`] (the `worklane run` supervisor does, every 250 ms) and halt its agent.
//! - A slot belongs to the open file description of its guard: every process holding a copy of
//!   the guard descriptor ([`Slot::lease`]) keeps it held. Give the agent a copy (as
//!   `worklane run` does) so that a killed supervisor cannot free a slot its agent still uses.
//!   [`Pool::recorded_commands`] lists the commands records name, for STOP's enforcement.
//!
//! # Example
//!
//! ```
//! use worklane_admission::{Kind, Pool, Take};
//! use worklane_lease::Request;
//! use worklane_slotfile::{Environment, SlotDir};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let temp = tempfile::tempdir()?;
//! let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
//! let pool = Pool::new(SlotDir::resolve_in(&env)?);
//! let Take::Held(first) = pool.try_take(Kind::Agent, &Request::new("harness"))? else { panic!() };
//! let Take::Held(second) = pool.try_take(Kind::Agent, &Request::new("harness"))? else { panic!() };
//! // The embedded default cap is 2.
//! assert!(matches!(pool.try_take(Kind::Agent, &Request::new("harness"))?, Take::Blocked(_)));
//! assert_eq!((first.name(), second.name()), ("agent-0.lock", "agent-1.lock"));
//! # Ok(()) }
//! ```

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod dispatch;
pub mod drain;
pub mod line;
mod pool;
mod problems;
pub mod stop;
mod watch;

pub use drain::{Drain, DrainState, MAX_DRAIN_AHEAD_MS};
pub use pool::{
    Blocker, FULL_RUN_LOCK, Kind, LOOK_AGAIN_AT_MOST, Pool, RecordedCommand, SLOTS_LOCK,
    SWEEP_EVERY_MS, Slot, SlotState, SlotView, Snapshot, Take, Wait, Waiting, slot_index,
};
pub use problems::Problem;
pub use stop::{STOP_FILE, Stop};

/// Why the pool could not do what was asked (being blocked is not an error: it is
/// [`Take::Blocked`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A slot file name was refused.
    #[error(transparent)]
    Name(#[from] worklane_slotfile::name::Error),
    /// The slot directory (or the drain directory) could not be opened or listed.
    #[error(transparent)]
    Open(#[from] worklane_slotfile::open::Error),
    /// The config is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] worklane_slotfile::config::Error),
    /// A file could not be read.
    #[error(transparent)]
    Read(#[from] worklane_slotfile::read::Error),
    /// A file could not be written.
    #[error(transparent)]
    Write(#[from] worklane_slotfile::write::Error),
    /// A file could not be removed.
    #[error(transparent)]
    Remove(#[from] worklane_slotfile::remove::Error),
    /// A guard could not be probed.
    #[error(transparent)]
    Guard(#[from] worklane_guard::acquire::Error),
    /// A lease could not be acquired.
    #[error(transparent)]
    Lease(#[from] worklane_lease::acquire::Error),
    /// A handed-over slot could not be adopted.
    #[error(transparent)]
    Adopt(#[from] worklane_lease::adopt::Error),
    /// A held lease failed.
    #[error(transparent)]
    Held(worklane_lease::held::Error),
    /// A waiter's entry could not be retired, or a dead one's removed.
    #[error(transparent)]
    Reclaim(#[from] worklane_guard::reclaim::Error),
    /// No place in line could be taken: every random entry name tried was taken already.
    #[error(
        "cannot take a place in the waiting line: 4 random entry names were taken (a writer \
         outside the protocol is making line-* files?)"
    )]
    LineFull,
    /// A name handed over as a slot is none (`agent-<i>.lock`, `test-<i>.lock`,
    /// `full-run.lock`).
    #[error("{name:?} is not a slot's name (agent-<i>.lock, test-<i>.lock or full-run.lock)")]
    NotASlot {
        /// The name given.
        name: String,
    },
}
