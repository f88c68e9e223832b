//! Who holds a role, as its lease record names them, and what a caller refused the role can
//! do, true to why the record counts as held.

use std::path::Path;
use std::time::Duration;
use worklane_lease::{LiveWhy, Record, rfc3339_ms};

/// The holder of a role as its lease record names it: the record's fields, named and typed as
/// in the record (PROTOCOL.md section 10), each absent when the record lacks it. Shown for
/// people by its `Display` (`pid 12 (agentIdentity a@b, profile p, entrypoint `cmd`, since T,
/// last pulse T)`), serialized as the record's fields.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// The holder's pid.
    pub pid: Option<u32>,
    /// The role.
    pub role: Option<String>,
    /// The holder's `agentIdentity`.
    pub agent_identity: Option<String>,
    /// The holder's `profile`.
    pub profile: Option<String>,
    /// The record's owner.
    pub owner: Option<String>,
    /// The holder's command line.
    pub entrypoint: Option<String>,
    /// When the lease was acquired.
    pub acquired_at: Option<String>,
    /// When its holder started.
    pub started_at: Option<String>,
    /// Its last pulse, milliseconds since the epoch.
    pub last_pulse: Option<u64>,
    /// Its TTL in milliseconds.
    pub ttl_ms: Option<u64>,
    /// Its epoch.
    pub epoch: Option<u64>,
}

impl Holder {
    /// The holder `record` names.
    #[must_use]
    pub fn of(record: &Record) -> Holder {
        let text = |key| record.extra_str(key).map(str::to_owned);
        Holder {
            pid: record.pid(),
            role: text("role"),
            agent_identity: text("agentIdentity"),
            profile: text("profile"),
            owner: record.owner.clone(),
            entrypoint: text("entrypoint"),
            acquired_at: record.acquired_at.clone(),
            started_at: record.started_at.clone(),
            last_pulse: record.last_pulse,
            ttl_ms: record.ttl_ms,
            epoch: record.epoch,
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pid = self
            .pid
            .map_or_else(|| "an unknown pid".to_owned(), |p| format!("pid {p}"));
        let mut details = Vec::new();
        if let Some(v) = &self.agent_identity {
            details.push(format!("agentIdentity {v}"));
        }
        if let Some(v) = &self.profile {
            details.push(format!("profile {v}"));
        }
        details.push(match &self.entrypoint {
            Some(e) => format!("entrypoint `{e}`"),
            None => "entrypoint not recorded".to_owned(),
        });
        if let Some(at) = &self.acquired_at {
            details.push(format!("since {at}"));
        }
        details.push(match self.last_pulse {
            Some(pulse) => format!("last pulse {}", rfc3339_ms(pulse)),
            None => "no pulse recorded".to_owned(),
        });
        write!(f, "{pid} ({})", details.join(", "))
    }
}

/// `d` in seconds, without trailing zeros (`60`, `0.5`).
fn seconds(d: Duration) -> String {
    let ms = d.as_millis();
    let (whole, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:03}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// What a caller refused a role can do, true to why its record at `path` counts as held: only
/// a lease that pulses lapses by itself.
#[must_use]
pub fn advice(why: &LiveWhy, path: &Path) -> String {
    // The verdicts already say to remove the record once its holder is gone; what they leave
    // out is that nothing else will, and where the file is.
    let path = path.display();
    match why {
        LiveWhy::Fresh { ttl_ms, .. } => format!(
            "try again once it ends (if its holder died, the lease lapses by itself {} s after \
             its last pulse)",
            seconds(Duration::from_millis(*ttl_ms))
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
        let half = advice(
            &LiveWhy::Fresh {
                age_ms: 5,
                ttl_ms: 2_500,
            },
            path,
        );
        assert!(half.contains("lapses by itself 2.5 s"), "{half}");
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
        // A moment's state, not a holder's: try again soon.
        assert_eq!(
            advice(&LiveWhy::GuardHeld, path),
            "another process is changing the lease at this moment: try again"
        );
        for why in [
            LiveWhy::TakeoverInProgress {
                claim: "role-r.lease.0123456789abcdef.claim".into(),
                claimant: Some(7),
            },
            LiveWhy::Changed,
        ] {
            assert_eq!(
                advice(&why, path),
                "another process is taking it over: try again in a moment",
                "{why:?}"
            );
        }
        assert_eq!(advice(&LiveWhy::Alive, path), "try again once it ends");
    }

    #[test]
    fn the_holder_is_named_by_pid_identity_profile_and_entrypoint() {
        let r = record(
            r#"{"pid":7,"agentIdentity":"a@h","profile":"p","entrypoint":"sh -c x",
                "acquiredAt":"2026-11-30T00:00:00.000Z","lastPulse":0}"#,
        );
        let words = Holder::of(&r).to_string();
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
        let bare = Holder::of(&record("{}")).to_string();
        assert!(bare.contains("an unknown pid"), "{bare}");
        assert!(bare.contains("entrypoint not recorded"), "{bare}");
        assert!(bare.contains("no pulse recorded"), "{bare}");
        let json = serde_json::to_value(Holder::of(&r)).expect("json");
        assert_eq!(json["agentIdentity"], "a@h", "{json}");
        assert_eq!(json["lastPulse"], 0, "{json}");
    }
}
