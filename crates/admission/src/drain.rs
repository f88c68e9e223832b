//! The update drain flag: `update-drain.json`, `{"since", "until", "to"}`.

use serde::{Deserialize, Serialize};
use worklane_lease::parse_rfc3339_ms;

/// The drain flag's file name (in the slot directory, or in `/var/lib/worklane` with the
/// system layout).
pub const DRAIN_FILE: &str = "update-drain.json";

/// How far ahead `until` may lie before the flag is ignored: 4 hours.
pub const MAX_DRAIN_AHEAD_MS: u64 = 4 * 3600 * 1000;

/// A drain flag as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    /// When the drain began, RFC 3339 UTC.
    #[serde(default)]
    pub since: String,
    /// Until when no new slot is taken, RFC 3339.
    pub until: String,
    /// The version being installed, if said. Always written (`null` when not said), so the
    /// flag has the same three fields whoever wrote it; read as absent when missing.
    #[serde(default)]
    pub to: Option<String>,
}

/// Why a drain flag that exists is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    /// `until` has passed.
    Expired {
        /// The flag.
        drain: Drain,
    },
    /// `until` lies more than 4 hours ahead: a mistake or a forgotten flag, not a drain.
    TooFarAhead {
        /// The flag.
        drain: Drain,
    },
    /// The flag cannot be read or parsed.
    Unreadable {
        /// What is wrong.
        detail: String,
    },
}

/// Whether a drain is in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainState {
    /// No drain flag.
    None,
    /// A drain is in force: no new slot of any kind.
    InForce(Drain),
    /// A flag exists but is ignored.
    Ignored(Ignored),
}

impl DrainState {
    /// Decides from the flag's bytes (`None`: no file; `Err`: unreadable) at `now_ms`.
    ///
    /// In force while `now < until` and `until - now <= 4 h`; at `until` it has ended.
    #[must_use]
    pub fn decide(raw: Option<Result<Vec<u8>, String>>, now_ms: u64) -> DrainState {
        let raw = match raw {
            None => return DrainState::None,
            Some(Err(detail)) => return DrainState::Ignored(Ignored::Unreadable { detail }),
            Some(Ok(raw)) => raw,
        };
        let drain: Drain = match serde_json::from_slice(&raw) {
            Ok(d) => d,
            Err(e) => {
                return DrainState::Ignored(Ignored::Unreadable {
                    detail: e.to_string(),
                });
            }
        };
        let Some(until) = parse_rfc3339_ms(&drain.until) else {
            return DrainState::Ignored(Ignored::Unreadable {
                detail: format!("until {:?} is not an RFC 3339 time", drain.until),
            });
        };
        if until <= now_ms {
            DrainState::Ignored(Ignored::Expired { drain })
        } else if until - now_ms > MAX_DRAIN_AHEAD_MS {
            DrainState::Ignored(Ignored::TooFarAhead { drain })
        } else {
            DrainState::InForce(drain)
        }
    }
}

impl std::fmt::Display for Drain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "drain until {}", self.until)?;
        if let Some(to) = &self.to {
            write!(f, " (updating to {to})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use worklane_lease::rfc3339_ms;

    const NOW: u64 = 1_796_012_839_000;

    fn flag(until_ms: u64) -> Option<Result<Vec<u8>, String>> {
        let d = Drain {
            since: rfc3339_ms(NOW),
            until: rfc3339_ms(until_ms),
            to: Some("1.2.3".into()),
        };
        Some(Ok(serde_json::to_vec(&d).expect("json")))
    }

    #[test]
    fn in_force_until_its_until_exactly() {
        assert!(matches!(
            DrainState::decide(flag(NOW + 1), NOW),
            DrainState::InForce(_)
        ));
        assert!(matches!(
            DrainState::decide(flag(NOW), NOW),
            DrainState::Ignored(Ignored::Expired { .. })
        ));
    }

    #[test]
    fn four_hours_ahead_is_the_limit() {
        assert!(matches!(
            DrainState::decide(flag(NOW + MAX_DRAIN_AHEAD_MS), NOW),
            DrainState::InForce(_)
        ));
        assert!(matches!(
            DrainState::decide(flag(NOW + MAX_DRAIN_AHEAD_MS + 1), NOW),
            DrainState::Ignored(Ignored::TooFarAhead { .. })
        ));
    }

    #[test]
    fn unreadable_flags_are_ignored() {
        assert_eq!(DrainState::decide(None, NOW), DrainState::None);
        for raw in [
            &b"{"[..],
            b"[]",
            br#"{"until": "tomorrow"}"#,
            br#"{"since": "x"}"#,
        ] {
            assert!(
                matches!(
                    DrainState::decide(Some(Ok(raw.to_vec())), NOW),
                    DrainState::Ignored(Ignored::Unreadable { .. })
                ),
                "{raw:?}"
            );
        }
        assert!(matches!(
            DrainState::decide(Some(Err("a FIFO".into())), NOW),
            DrainState::Ignored(Ignored::Unreadable { .. })
        ));
    }

    #[test]
    fn to_is_always_written_null_when_not_given() {
        let d = Drain {
            since: rfc3339_ms(NOW),
            until: rfc3339_ms(NOW + 1),
            to: None,
        };
        let text = serde_json::to_string(&d).expect("json");
        assert!(text.contains(r#""to":null"#), "to written as null: {text}");
        let back: Drain = serde_json::from_str(&text).expect("read back");
        assert_eq!(back, d, "null reads as not given");
        let without: Drain =
            serde_json::from_str(r#"{"until":"2026-11-30T05:25:59.008Z"}"#).expect("old flag");
        assert_eq!(without.to, None, "a flag without `to` is still read");
    }
}
