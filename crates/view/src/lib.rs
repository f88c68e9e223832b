//! What a worklane machine looks like now, as `worklane slots`, `why`, `top` and `metrics`
//! show it: the slots document built from a pool's snapshot and what is around it, and the
//! Prometheus exposition built from that document and the event journal.
//!
//! A Rust program that watches a machine (a dashboard, an orchestrator that wants the line's
//! length before it starts work) links this crate instead of running `worklane slots --json`:
//! it gets the same document, with the same types.
//!
//! - [`doc`]: the document's types, serialized as `slots --json` prints them (the schema,
//!   with examples checked against the CLI's output, is `docs/json.md`).
//! - [`context`]: what a view reads beside the pool's snapshot ([`context::Around`]: the
//!   dispatcher's queue as its files show it, the waiting line, the config file, the budgets)
//!   and the problems of each.
//! - [`slots`]: the document built from a snapshot and its context ([`slots::to_json`]), and
//!   the words a slot is shown with (its reason, its holder's name).
//! - [`budget`]: the budgets' health view as the document shows it.
//! - [`config_problem`]: a config that cannot be used, with the command that fixes it.
//! - [`metrics`]: the Prometheus text exposition ([`metrics::exposition`]).
//! - [`why`]: the answers of `worklane why`, which of the four permission questions blocks
//!   work now.
//!
//! Nothing here writes to the slot directory but what a look writes anyway: a snapshot
//! probes every lock's guard (taking a free one for a moment), and the metrics' snapshot
//! retires the records of holders that are gone (`Pool::snapshot_retiring`).

pub mod budget;
pub mod config_problem;
pub mod context;
pub mod doc;
pub mod metrics;
pub mod slots;
pub mod why;
