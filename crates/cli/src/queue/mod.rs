//! `worklane queue full-run`: a detached runner that waits for its turn and survives the
//! shell that queued it (`runner.rs`); and `queue ls` / `queue cancel`, which show and cancel
//! both the queued full runs and the dispatcher's attempts (`list.rs`).
//!
//! A runner stands in the full-run line (PROTOCOL.md 12.9) from the moment it starts until it
//! takes `full-run.lock`, through STOP, a drain and a busy idle probe: its entry keeps its
//! place, and its record (owner `QUEUED_OWNER`, `command`, `log`) is what `slots` and
//! `queue ls` show (`worklane_run::queued`). `queue cancel fr-<pid>` sends it SIGTERM, when its
//! record proves the process is its runner: waiting, it leaves the line and
//! logs why; if it has just started its command, that command is halted as by STOP.

mod list;
mod runner;

pub(crate) use list::{cancel, list};
pub(crate) use runner::{queue_full_run, runner};

pub(crate) use worklane_run::queued::{ID_PREFIX, QUEUED_OWNER};
