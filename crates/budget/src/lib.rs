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
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! Owns the per-credential API budget (PROTOCOL.md section 13).
//!
//! - `dump.rs`: a response's status and headers as a caller saved them (`parse_header_dump`, a
//!   `curl -D` dump, its last response; `header_lines`; `header_arg`, one `Name: value`), for
//!   `worklane budget observe --headers-file/--header`.
//! - `key.rs`: `CredentialKey::of_token` (first 16 hex of the SHA-256; `Debug` shows the key,
//!   never the token), `parse`, the file names.
//! - `observe.rs`: `Observation::from_headers(status, lookup)`, HTTP-client agnostic (a closure
//!   from lowercase header name to value), and behind the `http` feature `from_http(StatusCode,
//!   &HeaderMap)` / `from_response(&Response<B>)` (the crate's own tests turn the feature on
//!   through a self dev-dependency, so CI covers it); `whole` (plain digits, at most 2^53 - 1);
//!   `is_secondary_limit` (the caller's `secondary_limit` flag, a 403 or 429 with `Retry-After`,
//!   or a 429 whose remaining is not 0; a 403 with calls left and no `Retry-After` is not one).
//! - `state.rs`: `State` and `Window`, `parse` (not JSON is `Unreadable::Json` with serde_json's error as
//!   its source, a non-object `Unreadable::NotAnObject`; malformed parts are left out) and `to_bytes`; the pure decisions, every boundary unit-tested: `pause(now)` (over
//!   at `pausedUntil`, at most `MAX_PAUSE_MS` ahead), `window(resource, now)` (`now < resetAt <=
//!   now + MAX_WINDOW_MS`), `decide(resource, consumer, now) -> Go {counted} | Wait {until, why}`, `apply(obs,
//!   now)`; `consumer_name`. `state/units.rs`: the calls in flight and their units, and a model
//!   provider's windows of several dimensions (`expire`, `carry`, `note_waiting`,
//!   `decide_units`, `apply_provider`).
//! - `ledger.rs`: `Ledger::new(SlotDir)` with injectable `Clock` and `Sleep`; `with_state`, the
//!   one lock-read-change-write sequence every take, observation and release goes through (lock
//!   with the caller's patience, read, change, replace 0660 if asked, journal a pause the write
//!   set or moved, release; a state it cannot read is never replaced); `take` (lock with
//!   `LOCK_PATIENCE_MS` patience, decide; waits up to `MAX_WAIT_MS`, looking again every
//!   `WAIT_POLL_MS`; both waits also end on a monotonic bound, so a clock set back cannot stretch
//!   them), `observe` (lock tried once), `peek` (what a take would meet, read without the lock
//!   and decided on a copy, for `worklane why`).
//!   - `ledger/outcome.rs`: `Grant`, `Refused` (`kind()`, `status()`), `Observed`, `Peek`, and
//!     `Trouble`, the typed reason the ledger could not do its part (`LockBusy`, `Lock`,
//!     `StateUnreadable`, `NotWritten`, `Name`) carried by `Grant::unaccounted`,
//!     `Observed::Skipped` and `Peek::Unaccounted`. Each carries its typed cause (lease's
//!     acquire error, slotfile's read, write or name error) as its source, not as text, and
//!     `LockBusy` the lease's `Refusal` (the holder as read, and why it is live); so `Trouble`,
//!     `Grant`, `Observed` and `Peek` are neither `Clone` nor `PartialEq`, and whoever shows one
//!     shows its chain. Reading the state tells "not a state" (absent, not JSON, too large, not
//!     a regular file: afresh, replaced by the next write) from "there but unreadable"
//!     (`read::Error::Io`: `StateUnreadable`, never replaced).
//!   - `ledger/providers.rs`: the model providers' budgets: `take_model` (a reservation of one
//!     request and the tokens estimated, `Need`), `observe_model`, `release`, `peek_model`.
//!   - `ledger/health.rs`: `health` (no lock, 32 tried, 8 shown, numbered) and `health_report`
//!     (the same, with the state files it could not show: `Health {views, unshown:
//!     Vec<UnshownState {file, why: StateProblem}>}`, `Unreadable` or `NotAState` with the
//!     typed cause).
//!   - `ledger/sweep.rs`: `remove_stale` (mtime older than `STALE_MS`, under the lock,
//!     remove-if-unchanged) run by `take` at most every `SWEEP_EVERY_MS` per process (a
//!     static).
//! - `provider.rs`: `Provider` (GitHub, Anthropic, OpenAI, or a generic one by its profile),
//!   `default_token_env` (the variable a built-in provider's key is usually in).
//!   - `provider/profile.rs`: `Profile`, `Dimension`, `ResetFormat` (`duration_ms` for
//!     OpenAI's `6m0s`), the built-in profiles, `Profile::from_json` (the config's
//!     `budget_providers.<name>`, refused with a `profile::Error` naming the field).
//!   - `provider/observation.rs`: `ProviderObservation::from_headers(profile, status, now,
//!     lookup)`, the windows seen and those not known any more, the pause and `retry-after`.
//!   - `provider/usage.rs`: `Usage::of_body` (a body's or one event's `usage`, Anthropic's
//!     `message.usage`, the Responses API's `response.usage`) and `StreamUsage` (a stream's
//!     events, fed in chunks cut anywhere, an optional line bound; `Usage::of_stream` for a
//!     whole one; `Usage::of_saved` for a saved body or stream, `NotAResponse` for neither):
//!     the one reading of the proxy and of `worklane budget observe --usage-json`,
//!     tested on each provider's real event shapes.
//!   - `provider/resolve.rs`: `Provider::resolve` (a built-in name, or the config's
//!     `budget_providers.<name>`; `from_config` is the pure part), refused with a
//!     `resolve::Error` (the config not located or not read, the name not described, a profile
//!     refused).

pub mod dump;
pub mod key;
pub mod ledger;
pub mod observe;
pub mod provider;
pub mod state;

pub use key::CredentialKey;
pub use ledger::{
    CredentialView, Grant, Health, Ledger, ModelChange, Need, Observed, Peek, RealSleep, Refused,
    ResourceView, Sleep, StateProblem, Trouble, UnshownState,
};
pub use observe::Observation;
pub use provider::{
    Dimension, GENERATION_PATHS, NotAResponse, Profile, Provider, ProviderObservation, ResetFormat,
    StreamUsage, Usage, default_token_env, is_generation,
};
pub use state::State;
pub use state::WaitWhy;
