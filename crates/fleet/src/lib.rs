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
