//! A refused `lease run`: the message for people and, with `--json`, one JSON object on
//! stdout (schema in docs/json.md); the holder and the advice are `worklane_admission::role`'s. Seed 004: a refusal names the holder's pid, role,
//! agentIdentity and profile, and both entrypoints: the holder's and the refused caller's.

use crate::exit::{self, Failure};
use crate::json::VERSION;
use crate::out::outln;
use serde::Serialize;
use std::path::Path;
use worklane_admission::role::{Holder, advice};
use worklane_admission::{SlotState, Stop};
use worklane_lease::Refusal;

/// What refused the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Refuser {
    /// Someone else holds the role (or a record at its name counts as held).
    Held,
    /// An emergency STOP is in force.
    Stop,
}

/// A refused `lease run`, as printed by `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct Refused<'a> {
    version: u32,
    refused: Refuser,
    role: &'a str,
    resource: &'a str,
    /// The refused caller's own entrypoint (its command line).
    entrypoint: &'a str,
    holder: Option<Holder>,
    /// The verdict on the record, in the words of `slots` (`fresh`, `malformed`, `busy`...).
    state: Option<&'static str>,
    why: String,
    message: String,
}

impl<'a> Refused<'a> {
    /// The role is held: `refusal` names the holder, `dir` is the slot directory.
    pub(crate) fn held(
        role: &'a str,
        dir: &Path,
        refusal: &'a Refusal,
        ours: &'a str,
    ) -> Refused<'a> {
        let by = match &refusal.holder {
            Some(record) => Holder::of(record).to_string(),
            None => "a record that is not a lease".to_owned(),
        };
        let path = dir.join(&refusal.resource);
        let message = format!(
            "role {role} is held by {by}: {}; refused `{ours}`: a role has one owner per \
             machine; {}",
            refusal.why,
            advice(&refusal.why, &path)
        );
        Refused {
            version: VERSION,
            refused: Refuser::Held,
            role,
            resource: &refusal.resource,
            entrypoint: ours,
            holder: refusal.holder.as_ref().map(Holder::of),
            state: Some(SlotState::Live(refusal.why.clone()).word()),
            why: refusal.why.to_string(),
            message,
        }
    }

    /// An emergency STOP is in force: no role is taken until `resume-all`.
    pub(crate) fn stop(
        role: &'a str,
        resource: &'a str,
        ours: &'a str,
        stop: &Stop,
    ) -> Refused<'a> {
        Refused {
            version: VERSION,
            refused: Refuser::Stop,
            role,
            resource,
            entrypoint: ours,
            holder: None,
            state: None,
            why: stop.to_string(),
            message: format!(
                "refused the role {role} lease for `{ours}`: {stop} (worklane resume-all lifts it)"
            ),
        }
    }

    /// The failure to exit with (75 held, 69 STOP), after printing the JSON object first when
    /// `json` is set.
    pub(crate) fn fail(self, json: bool) -> Failure {
        let code = match self.refused {
            Refuser::Held => exit::TEMP_FAIL,
            Refuser::Stop => exit::UNAVAILABLE,
        };
        if json {
            // Plain data of strings and numbers: serializing it cannot fail.
            let text = serde_json::to_string(&self).unwrap_or_default();
            if let Err(failure) = outln!("{text}") {
                return Failure::new(
                    failure.code,
                    format!("{}; {}", failure.message, self.message),
                );
            }
        }
        Failure::new(code, self.message)
    }
}
