//! The dispatcher commands of a worklane built without its `dispatcher` feature (no SQLite):
//! each says so and exits 69.

use crate::cli::{ClaimArgs, DispatcherArgs, EnqueueArgs};
use crate::exit::{self, Failure};
use std::process::ExitCode;

fn off() -> Result<ExitCode, Failure> {
    Err(Failure::new(
        exit::UNAVAILABLE,
        "this worklane was built without the dispatcher (cargo feature `dispatcher`); rebuild \
         it with default features",
    ))
}

pub(crate) fn serve(_: &DispatcherArgs) -> Result<ExitCode, Failure> {
    off()
}

pub(crate) fn enqueue(_: &EnqueueArgs) -> Result<ExitCode, Failure> {
    off()
}

pub(crate) fn claim(_: &ClaimArgs) -> Result<ExitCode, Failure> {
    off()
}

pub(crate) fn reconcile(_: &str, _: bool) -> Result<ExitCode, Failure> {
    off()
}

/// No attempts: this build has no dispatcher.
pub(crate) fn listing(
    _: &worklane_admission::Pool,
    _: bool,
) -> Result<crate::queue_say::Listing, Failure> {
    let why = "attempts: none (this worklane was built without the dispatcher)";
    Ok(crate::queue_say::Listing {
        json: crate::json::DispatcherList::none(why.to_owned()),
        lines: vec![why.to_owned()],
    })
}

pub(crate) fn cancel(_: &str, _: bool) -> Result<ExitCode, Failure> {
    off()
}

pub(crate) fn retry(_: &str) -> Result<ExitCode, Failure> {
    off()
}

pub(crate) fn prune(_: Option<std::time::Duration>) -> Result<ExitCode, Failure> {
    off()
}

/// No dispatcher, no trouble of its own.
pub(crate) fn trouble(_: &worklane_admission::Pool) -> Option<String> {
    None
}
