//! A refused `lease run`: the message for people and, with `--json`, one JSON object on
//! stdout (schema in docs/json.md). Seed 004: a refusal names the holder's pid, role,
//! agentIdentity and profile, and both entrypoints: the holder's and the refused caller's.

use crate::exit::{self, Failure};
use crate::json::VERSION;
use crate::out::outln;
use serde::Serialize;
use std::path::Path;
use worklane_admission::{SlotState, Stop};
use worklane_lease::{LiveWhy, Record, Refusal, rfc3339_ms};

/// What refused the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Refuser {
    /// Someone else holds the role (or a record at its name counts as held).
    Held,
    /// An emergency STOP is in force.
    Stop,
}

/// The holder as its record names it: field names and types as in the record (PROTOCOL.md).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Holder<'a> {
    pid: Option<u32>,
    role: Option<&'a str>,
    agent_identity: Option<&'a str>,
    profile: Option<&'a str>,
    owner: Option<&'a str>,
    entrypoint: Option<&'a str>,
    acquired_at: Option<&'a str>,
    started_at: Option<&'a str>,
    last_pulse: Option<u64>,
    ttl_ms: Option<u64>,
    epoch: Option<u64>,
}

impl<'a> Holder<'a> {
    fn of(record: &'a Record) -> Holder<'a> {
        Holder {
            pid: record.pid(),
            role: record.extra_str("role"),
            agent_identity: record.extra_str("agentIdentity"),
            profile: record.extra_str("profile"),
            owner: record.owner.as_deref(),
            entrypoint: record.extra_str("entrypoint"),
            acquired_at: record.acquired_at.as_deref(),
            started_at: record.started_at.as_deref(),
            last_pulse: record.last_pulse,
            ttl_ms: record.ttl_ms,
            epoch: record.epoch,
        }
    }
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
    holder: Option<Holder<'a>>,
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
            Some(record) => holder_words(record),
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
            state: Some(crate::slots::state_word(&SlotState::Live(
                refusal.why.clone(),
            ))),
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

/// `pid 12 (agentIdentity a@b, profile p, entrypoint `cmd`, since T, last pulse T)`.
fn holder_words(record: &Record) -> String {
    let pid = record
        .pid()
        .map_or_else(|| "an unknown pid".to_owned(), |p| format!("pid {p}"));
    let mut details = Vec::new();
    for (label, key) in [("agentIdentity", "agentIdentity"), ("profile", "profile")] {
        if let Some(v) = record.extra_str(key) {
            details.push(format!("{label} {v}"));
        }
    }
    details.push(match record.extra_str("entrypoint") {
        Some(e) => format!("entrypoint `{e}`"),
        None => "entrypoint not recorded".to_owned(),
    });
    if let Some(at) = &record.acquired_at {
        details.push(format!("since {at}"));
    }
    details.push(match record.last_pulse {
        Some(pulse) => format!("last pulse {}", rfc3339_ms(pulse)),
        None => "no pulse recorded".to_owned(),
    });
    format!("{pid} ({})", details.join(", "))
}

/// What the refused caller can do, true to why the record counts as held: only a lease that
/// pulses can lapse by itself.
fn advice(why: &LiveWhy, path: &Path) -> String {
    // The verdicts below already say to remove the record once its holder is gone; what they
    // leave out is that nothing else will, and where the file is.
    let path = path.display();
    match why {
        LiveWhy::Fresh { ttl_ms, .. } => format!(
            "try again once it ends (if its holder died, the lease lapses by itself {} s after \
             its last pulse)",
            crate::out::seconds(std::time::Duration::from_millis(*ttl_ms))
        ),
        LiveWhy::NoPulse => {
            format!("a record without a pulse never lapses by itself (it is {path})")
        }
        LiveWhy::Malformed { .. } => {
            format!("a record that is not a lease never lapses by itself (it is {path})")
        }
        LiveWhy::FromTheFuture { .. } => {
            format!("it lapses only one TTL after that future pulse (it is {path})")
        }
        LiveWhy::GuardHeld => {
            "another process is changing the lease at this moment: try again".to_owned()
        }
        LiveWhy::TakeoverInProgress { .. } | LiveWhy::Changed => {
            "another process is taking it over: try again in a moment".to_owned()
        }
        _ => "try again once it ends".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(text: &str) -> Record {
        Record::parse(text.as_bytes()).expect("record")
    }

    #[test]
    fn only_a_pulsing_lease_is_said_to_lapse() {
        let path = Path::new("/d/role-r.lease");
        let fresh = advice(
            &LiveWhy::Fresh {
                age_ms: 5,
                ttl_ms: 60_000,
            },
            path,
        );
        assert!(fresh.contains("lapses by itself 60 s"), "{fresh}");
        for why in [LiveWhy::NoPulse, LiveWhy::Malformed { detail: "x".into() }] {
            let text = advice(&why, path);
            assert!(text.contains("never lapses by itself"), "{why:?}: {text}");
            assert!(
                text.contains("/d/role-r.lease"),
                "{why:?}: how to remove it: {text}"
            );
        }
        let future = advice(&LiveWhy::FromTheFuture { ahead_ms: 9 }, path);
        assert!(
            future.contains("one TTL after that future pulse"),
            "{future}"
        );
    }

    #[test]
    fn the_holder_is_named_by_pid_identity_profile_and_entrypoint() {
        let r = record(
            r#"{"pid":7,"agentIdentity":"a@h","profile":"p","entrypoint":"sh -c x",
                "acquiredAt":"2026-11-30T00:00:00.000Z","lastPulse":0}"#,
        );
        let words = holder_words(&r);
        for part in [
            "pid 7",
            "agentIdentity a@h",
            "profile p",
            "entrypoint `sh -c x`",
            "since 2026-11-30T00:00:00.000Z",
            "last pulse 1970-01-01T00:00:00.000Z",
        ] {
            assert!(words.contains(part), "missing {part:?}: {words}");
        }
        let bare = holder_words(&record("{}"));
        assert!(bare.contains("an unknown pid"), "{bare}");
        assert!(bare.contains("entrypoint not recorded"), "{bare}");
        assert!(bare.contains("no pulse recorded"), "{bare}");
    }
}
