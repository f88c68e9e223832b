//! What `queue ls` and `queue cancel` say of queued work, shared by the queued full runs
//! (`queue`) and the dispatcher's attempts (`dispatch`), so that neither needs the other's
//! output.

use crate::exit::Failure;
use crate::out::{outln, sayln};

/// The dispatcher's part of `queue ls`: JSON fields and lines for a person.
pub(crate) struct Listing {
    pub(crate) json: crate::json::DispatcherList,
    pub(crate) lines: Vec<String>,
}

/// What `queue cancel` of a running attempt says: its driver is being halted (`halting`, the
/// dispatcher's words).
#[cfg_attr(not(feature = "dispatcher"), allow(dead_code))]
pub(crate) fn halting(id: &str, halting: &str, as_json: bool) -> Result<(), Failure> {
    if as_json {
        return outln!(
            "{}",
            crate::json::line(&crate::json::Cancelled {
                version: crate::json::VERSION,
                id,
                kind: "attempt",
                log: None,
                halting: Some(halting.to_owned()),
            })
        );
    }
    sayln!("{id} is running: {halting}; `worklane queue ls --all` shows how it ended")
}

/// Says that `id` was cancelled: an attempt (`kind` `attempt`: its row is gone, its lane and
/// slot free) or a queued full run (`full-run`: its runner left the line, `log` its log).
pub(crate) fn cancelled(
    id: &str,
    kind: &'static str,
    log: Option<String>,
    as_json: bool,
) -> Result<(), Failure> {
    if as_json {
        return outln!(
            "{}",
            crate::json::line(&crate::json::Cancelled {
                version: crate::json::VERSION,
                id,
                kind,
                log,
                halting: None,
            })
        );
    }
    match kind {
        "attempt" => sayln!("{id} cancelled: its row is gone, its lane and slot are free"),
        _ => sayln!(
            "{id} cancelled: its runner left the line{}",
            log.map(|l| format!(" (log {l})")).unwrap_or_default()
        ),
    }
}
