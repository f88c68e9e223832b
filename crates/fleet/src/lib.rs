//! Fleet-wide caps, role leases and budgets for worklane, kept in etcd v3.
//!
//! worklane decides for one host; a fleet of hosts needs an authority outside any of them.
//! This crate does not build one: it keeps its state in etcd, with etcd's leases (a TTL kept
//! alive) and transactions (compare on revisions), with the vocabulary of the lease core:
//! claim, refuse, release.
//!
//! - A **pool** has a cap (`worklane fleet set-cap`) and holders: each holder is a key
//!   attached to its own etcd lease; the first `cap` keys by creation hold, later ones wait in
//!   order ([`decide::standing`]). A holder's fencing epoch is its key's create revision,
//!   which grows across the fleet.
//! - A **role** has one key, created only if absent; a refusal names the holder's host, pid,
//!   role and since when.
//! - A credential's **budget** (module `budget`, feature `etcd`) is the local ledger's state, kept in etcd and
//!   changed only by compare-and-swap, so hosts sharing a token share its calls.
//! - A holder that cannot confirm its lease for half its TTL must stop
//!   ([`decide::must_halt`]): losing the fleet never makes two owners.
//!
//! The key layout and values are in PROTOCOL.md section 15 ([`keys`], [`value`]), so that a
//! harness in another language can join with any etcd client.
//!
//! # Limitations
//! - The etcd client is behind the cargo feature `etcd` (building it needs `protoc`); without
//!   it this crate holds the layout and the decisions only.
//! - Time: the halt rule assumes this host's monotonic clock and etcd's run at the same rate;
//!   a holder suspended (SIGSTOP) past half its TTL halts when it resumes, before anything
//!   else; a waiting take so suspended fails, even if its place came free meanwhile.
//! - A waiter watches its pool's keys (or its role's key) and reads them again when one
//!   changes; it also reads them every `RECHECK_EVERY` whatever the watch says, and falls
//!   back to reading every `POLL_EVERY` if etcd refuses to open the watch. A watch that
//!   breaks (its member died) is opened again from the same revision, without reading: a
//!   read or claim then could fall in a new leader's election and fail.
//!
//! # Example
//! ```no_run
//! # #[cfg(feature = "etcd")] {
//! use std::time::Duration;
//! use worklane_fleet::{Fleet, Holder, Taken, Wait};
//! let fleet = Fleet::connect(&["http://127.0.0.1:2379".to_owned()], Duration::from_secs(15))?;
//! fleet.set_cap("agents", 4)?;
//! let me = Holder::this_process("my-agent", "2026-12-01T00:00:00.000Z".into());
//! match fleet.take("agents", &me, Wait { timeout: Some(Duration::ZERO), on_wait: &mut |_| {} })? {
//!     Taken::Held(mut hold) => {
//!         println!("epoch {}", hold.epoch());
//!         hold.pulse()?; // every 250 ms while working
//!         hold.release()?;
//!     }
//!     Taken::Refused(why) => println!("refused: {why}"),
//! }
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! Owns the fleet's state in etcd v3 (PROTOCOL.md section 15): pools with a cap, roles, and (to
//! come) the shared budget. It sits beside `lease`, not below it: it does not know the slot
//! directory, and the host's own slot is taken first by `admission`, then a fleet place.
//!
//! - `keys.rs`: the key layout (`/worklane/v1/...`) and `check_name`, plain functions.
//! - `value.rs`: `Holder`, the JSON value of a holder's key (`version` 1), and `host_name`.
//! - `decide.rs`: the pure decisions, boundaries unit-tested: `standing` (the first `cap` keys by
//!   create revision hold), `holders`, `pulse_every` (TTL/6, at least 250 ms), `must_halt`
//!   (unconfirmed since TTL/2, counted from the *send* of the last confirmed keepalive, or of
//!   the grant before any: `Hold::new` takes the grant's send time),
//!   `halt_grace` (at most TTL/4).
//! - `client.rs` (feature `etcd`), the connection and the table of contents of `client/`:
//!   `Fleet::connect`, `set_cap`, `status`, and the grant of a place's lease. One
//!   current-thread tokio runtime per `Fleet`; every request has a `REQUEST_TIMEOUT` deadline
//!   and is retried every 50 ms within it (a dead member's endpoint fails fast; the client
//!   balances over the others).
//! - `client/error.rs`: `connect::Error`, `Error` (taking, claiming, the pool's
//!   administration), `Lost`, and `Unavailable`, which names the step as a typed `Doing`.
//! - `client/take.rs`: `take`, `claim_role` and their outcomes (`Taken`, `Refusal`). A waiter
//!   (`take` with a timeout, `claim_role`) does not poll: it waits on `client/watch.rs`; the
//!   take's waiter also wakes every `KEEP_EVERY` to pulse its place's lease, and every waiter
//!   reads again at least every `RECHECK_EVERY` (a watch that stalls without an error;
//!   `Fleet::with_recheck` sets it, never below `POLL_EVERY`). A take whose read says it
//!   holds first applies the halt rule (`Hold::check`, the network-free part of `pulse`): a
//!   waiter suspended past TTL/2 fails instead of reporting a place its lease may lose any
//!   moment. A take's or claim's transaction sent again after its answer was lost finds its
//!   own key (under its own lease, `own_key_created`): held, with that key's create revision
//!   as the epoch, never the later header's.
//! - `client/watch.rs`: `Changes` watches the pool's prefix (`keys::pool_root`) or the role's
//!   key from the revision after its last read, and `wait_for_change` wakes the waiter on an
//!   event, or after `POLL_EVERY` while etcd refuses a watch. A watch that breaks, or whose
//!   member cannot be reached (`unreachable`: no answer came from etcd, a gRPC status the
//!   client made from its own connection's failure included), is opened again after
//!   `POLL_EVERY` from the same revision,
//!   without reading (a claim sent as its member, the leader, dies would fall in the election
//!   and fail after `REQUEST_TIMEOUT`).
//! - `client/hold.rs`: `Hold` (`epoch` = the key's create revision, `pulse`, `release`;
//!   dropped: revoked), its keepalive, and the halt rule measured on identity's boot clock
//!   (`Place::boot_clock_ms`).

#![deny(unsafe_code)]

#[cfg(feature = "etcd")]
pub mod budget;
#[cfg(feature = "etcd")]
mod client;
pub mod decide;
pub mod keys;
pub mod value;

#[cfg(feature = "etcd")]
pub use client::{
    Doing, Error, Fleet, Hold, KEEP_EVERY, Lost, POLL_EVERY, PoolStatus, RECHECK_EVERY,
    REQUEST_TIMEOUT, Refusal, Taken, Unavailable, Wait, Waiting, connect,
};
pub use value::Holder;
