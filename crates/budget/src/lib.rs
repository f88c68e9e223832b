//! `worklane-budget`: one API rate-limit budget per credential, shared by every process on the
//! machine that uses that credential.
//!
//! Before each API call a process takes one unit ([`Ledger::take`]); after the response it
//! records what the response said ([`Ledger::observe`]). The budget of a credential lives in
//! the slot directory as `github-budget-<key>.json`, where `<key>` is the first 16 hex digits of
//! the token's SHA-256 ([`CredentialKey`]); the token itself is never stored or printed. Each
//! change happens under `github-budget-<key>.lock`, a process-liveness lease of
//! `worklane-lease`, and replaces the file whole (mode 0660), never writing it in place.
//!
//! - **Take**: counted against the resource's last seen window (remaining less the calls
//!   granted since). With none left, or with the credential paused by a secondary limit, it
//!   waits up to 10 s, then fails with [`Refused`] (`rate_limited` or
//!   `secondary_rate_limited`, status 429) without the call being made.
//! - **Observe**: reads `X-RateLimit-Limit/-Remaining/-Reset/-Resource` and `Retry-After`
//!   ([`Observation::from_headers`], HTTP-client agnostic; with the `http` feature also
//!   `Observation::from_http` and `from_response` for the `http` crate's types); tries the lock
//!   once, never waits.
//! - **Bounds**: a pause counts at most 15 min ahead, a window at most 1 h 5 min ahead; a reset
//!   too far or missing, or a remaining that is not a whole number >= 0, is "not known" and
//!   the call goes.
//! - **Robustness**: a state that is not valid JSON starts afresh; a state that exists but
//!   cannot be read by this process, a state that cannot be written, or a lock busy for 0.5 s,
//!   lets the call go, reported as a typed [`Trouble`] in [`Grant::unaccounted`] (and an
//!   observation is skipped, [`Observed::Skipped`]). A state that could not be read is never
//!   replaced. A state file
//!   unchanged for 2 h is removed by the next take in any budget, at most every 10 min per
//!   process.
//! - **Health**: [`Ledger::health`] reads without the lock the 8 newest readable states (at
//!   most 32 tried), whole safe counts only, credentials numbered, never named by key.
//!
//! ```no_run
//! # use worklane_budget::{CredentialKey, Ledger, Observation};
//! # use worklane_slotfile::SlotDir;
//! let ledger = Ledger::new(SlotDir::resolve()?.dir).owner("backlog");
//! let key = CredentialKey::of_token(&std::env::var("GITHUB_TOKEN")?);
//! match ledger.take(&key, "core", "backlog") {
//!     Ok(_grant) => {
//!         // make the call, then:
//!         let observation = Observation::from_headers(200, |name| match name {
//!             "x-ratelimit-remaining" => Some("4999"),
//!             _ => None,
//!         });
//!         ledger.observe(&key, &observation);
//!     }
//!     Err(refused) => eprintln!("{refused}"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod key;
pub mod ledger;
pub mod observe;
pub mod state;

pub use key::CredentialKey;
pub use ledger::{
    CredentialView, Grant, Health, Ledger, Observed, Peek, RealSleep, Refused, ResourceView, Sleep,
    StateProblem, Trouble, UnshownState,
};
pub use observe::Observation;
pub use state::State;
pub use state::WaitWhy;
