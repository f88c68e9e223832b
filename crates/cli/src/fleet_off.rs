//! `--fleet` and `worklane fleet` in a worklane built without its `fleet` feature (no etcd
//! client): each says so and exits 69.

use crate::cli::{FleetArgs, FleetAt, FleetRoleArgs};
use crate::exit::{self, Failure};
use std::process::ExitCode;
use std::time::Duration;

/// No place can be held without the feature.
pub(crate) enum Place {}

fn off() -> Failure {
    Failure::new(
        exit::UNAVAILABLE,
        "this worklane was built without the fleet (cargo feature `fleet`, which needs protoc to \
         build); rebuild it with `--features fleet`",
    )
}

/// Without `--fleet`, nothing to take; with it, the refusal of a build without the fleet.
pub(crate) fn take(
    args: &FleetArgs,
    _owner: &str,
    _command: &str,
    _no_wait: bool,
    _timeout: Option<Duration>,
    _conflict: u8,
) -> Result<Option<Place>, Failure> {
    if args.lease.endpoints.is_empty() {
        Ok(None)
    } else {
        Err(off())
    }
}

impl Place {
    pub(crate) fn epoch(&self) -> i64 {
        match *self {}
    }

    pub(crate) fn key(&self) -> &str {
        match *self {}
    }

    pub(crate) fn ttl(&self) -> Duration {
        match *self {}
    }

    pub(crate) fn check(&mut self) -> Option<String> {
        match *self {}
    }

    pub(crate) fn release(self) -> Result<(), String> {
        match self {}
    }
}

pub(crate) fn set_cap(_: &FleetArgs, _: u32) -> Result<ExitCode, Failure> {
    Err(off())
}

pub(crate) fn status(_: &FleetArgs, _: bool) -> Result<ExitCode, Failure> {
    Err(off())
}

/// Without `--fleet`, nothing to claim; with it, the refusal of a build without the fleet.
pub(crate) fn claim_role(
    args: &FleetRoleArgs,
    _role: &str,
    _owner: &str,
    _command: &str,
    _wait: bool,
    _timeout: Option<Duration>,
) -> Result<Option<Place>, Failure> {
    if args.endpoints.is_empty() {
        Ok(None)
    } else {
        Err(off())
    }
}

pub(crate) fn budget_take(
    _: &FleetAt,
    _: &worklane_budget::CredentialKey,
    _: &str,
    _: &str,
    _: Duration,
) -> Result<Result<(bool, Option<u64>), worklane_budget::Refused>, Failure> {
    Err(off())
}

pub(crate) fn budget_observe(
    _: &FleetAt,
    _: &worklane_budget::CredentialKey,
    _: &worklane_budget::Observation,
) -> Result<(), Failure> {
    Err(off())
}

pub(crate) fn budget_views(_: &FleetAt) -> Result<Vec<worklane_budget::CredentialView>, Failure> {
    Err(off())
}

/// What the fleet says to `worklane why`.
pub(crate) struct Question {
    pub(crate) blocks: bool,
    pub(crate) why: String,
    pub(crate) code: u8,
}

/// Without `--fleet`, no question; with it, a build without the fleet blocks.
pub(crate) fn question(args: &FleetArgs) -> Option<Question> {
    (!args.lease.endpoints.is_empty()).then(|| Question {
        blocks: true,
        why: off().message,
        code: exit::UNAVAILABLE,
    })
}

/// `slots --fleet` in a build without the fleet: says so.
pub(crate) fn slots_section(args: &FleetArgs) -> Option<crate::json::SlotsFleet> {
    (!args.lease.endpoints.is_empty()).then(|| crate::json::SlotsFleet {
        status: None,
        error: Some(off().message),
    })
}

pub(crate) fn print_section(section: &crate::json::SlotsFleet) -> Result<(), Failure> {
    if let Some(error) = &section.error {
        crate::out::outln!("fleet: {error}")?;
    }
    Ok(())
}
