//! One credential's budget state and the decisions made from it: plain functions of the state
//! and the time, so every boundary is tested exactly.
//!
//! Whoever wrote the file, its numbers are bounded when read: a pause counts at most
//! [`MAX_PAUSE_MS`] ahead, a window only when its reset is at most [`MAX_WINDOW_MS`] ahead, and
//! a count that is not a whole safe number is "not known", which lets calls go.

use crate::observe::{MAX_SAFE, Observation, is_resource_name};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The furthest ahead a pause counts: 15 minutes (a longer `Retry-After` is cut to this).
pub const MAX_PAUSE_MS: u64 = 15 * 60 * 1000;
/// The furthest ahead a window's reset counts: 1 h 5 min.
pub const MAX_WINDOW_MS: u64 = 65 * 60 * 1000;
/// The pause after a secondary limit without `Retry-After`: one minute, as GitHub advises.
pub const DEFAULT_PAUSE_MS: u64 = 60 * 1000;
/// The name under which grants by an unnamed or oddly named consumer are counted and shown.
pub const OTHER_CONSUMER: &str = "(other)";
/// At most this many consumers are named in one window; grants by further ones are counted
/// as [`OTHER_CONSUMER`], so the file stays far below the 64 KiB every reader accepts.
pub const MAX_CONSUMERS: usize = 64;

/// The budget of one credential.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct State {
    /// Every call on this credential waits until then (ms since the Unix epoch), set by a
    /// secondary limit.
    pub paused_until: Option<u64>,
    /// The last seen window of each resource.
    pub resources: BTreeMap<String, Window>,
    /// Top-level fields this version does not know, written back unchanged.
    pub extra: Map<String, Value>,
}

/// The last seen rate-limit window of one resource, less the calls granted since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// `X-RateLimit-Limit`, if seen.
    pub limit: Option<u64>,
    /// `X-RateLimit-Remaining` when seen.
    pub remaining: u64,
    /// When the window ends (ms since the Unix epoch).
    pub reset_at: u64,
    /// When it was seen (ms).
    pub seen_at: u64,
    /// Calls granted since it was seen.
    pub granted: u64,
    /// Calls granted in this window, by consumer.
    pub by_consumer: BTreeMap<String, u64>,
}

impl Window {
    /// Calls left: the remaining seen, less those granted since.
    #[must_use]
    pub fn left(&self) -> u64 {
        self.remaining.saturating_sub(self.granted)
    }
}

/// What to do about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The call may go; `counted` when it was counted against a known window (the state
    /// changed and must be written).
    Go {
        /// Whether a unit was taken from a known window.
        counted: bool,
    },
    /// The call must wait until `until` (ms), for `why`.
    Wait {
        /// When waiting may end.
        until: u64,
        /// Why it waits.
        why: WaitWhy,
    },
}

/// Why a call waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitWhy {
    /// A secondary limit paused the credential.
    Paused,
    /// The resource's window has no calls left.
    Spent,
}

/// The state file could not be used; the ledger starts afresh.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the budget state is not a JSON object: {0}")]
pub struct Unreadable(pub String);

impl State {
    /// Reads a state file. Anything but a JSON object is [`Unreadable`]; inside it, each part
    /// that is malformed (a count that is not a whole safe number, a window without its
    /// reset) is left out, so it is "not known".
    pub fn parse(bytes: &[u8]) -> Result<State, Unreadable> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| Unreadable(e.to_string()))?;
        let Value::Object(top) = value else {
            return Err(Unreadable("not an object".to_owned()));
        };
        let paused_until = top.get("pausedUntil").and_then(safe);
        let extra = top
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "pausedUntil" | "resources" | "updatedAt"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut resources = BTreeMap::new();
        if let Some(Value::Object(map)) = top.get("resources") {
            for (name, window) in map {
                if let (true, Some(window)) = (is_resource_name(name), parse_window(window)) {
                    resources.insert(name.clone(), window);
                }
            }
        }
        Ok(State {
            paused_until,
            resources,
            extra,
        })
    }

    /// The state as written: a JSON object with `updatedAt` (ms) beside the fields.
    #[must_use]
    pub fn to_bytes(&self, now: u64) -> Vec<u8> {
        let mut resources = Map::new();
        for (name, w) in &self.resources {
            resources.insert(
                name.clone(),
                json!({
                    "limit": w.limit,
                    "remaining": w.remaining,
                    "resetAt": w.reset_at,
                    "seenAt": w.seen_at,
                    "granted": w.granted,
                    "byConsumer": w.by_consumer,
                }),
            );
        }
        let mut top = self.extra.clone();
        if let Some(until) = self.paused_until {
            top.insert("pausedUntil".to_owned(), until.into());
        }
        top.insert("resources".to_owned(), Value::Object(resources));
        top.insert("updatedAt".to_owned(), now.into());
        let mut bytes = serde_json::to_vec(&Value::Object(top)).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// The pause in force at `now`: `Some(end)` while `now < end <= now + 15 min`. A pause
    /// ending exactly at `now` is over; one further ahead than [`MAX_PAUSE_MS`] was not written
    /// by these rules (every writer cuts a pause to 15 min) and is not known, so it holds
    /// nobody back.
    #[must_use]
    pub fn pause(&self, now: u64) -> Option<u64> {
        self.paused_until
            .filter(|&until| until > now && until - now <= MAX_PAUSE_MS)
    }

    /// The known window of `resource` at `now`: its reset is after `now` and at most
    /// [`MAX_WINDOW_MS`] ahead. A window whose reset is exactly `now` has ended.
    #[must_use]
    pub fn window(&self, resource: &str, now: u64) -> Option<&Window> {
        self.resources
            .get(resource)
            .filter(|w| w.reset_at > now && w.reset_at - now <= MAX_WINDOW_MS)
    }

    /// Decides one call on `resource` by `consumer` at `now`, counting it when it goes against
    /// a known window.
    pub fn decide(&mut self, resource: &str, consumer: &str, now: u64) -> Decision {
        if let Some(until) = self.pause(now) {
            return Decision::Wait {
                until,
                why: WaitWhy::Paused,
            };
        }
        let Some(left) = self.window(resource, now).map(Window::left) else {
            return Decision::Go { counted: false };
        };
        if left == 0 {
            let until = self.resources[resource].reset_at;
            return Decision::Wait {
                until,
                why: WaitWhy::Spent,
            };
        }
        let window = self.resources.get_mut(resource).expect("known window");
        window.granted = add_safe(window.granted, 1);
        let mut name = consumer_name(consumer);
        if !window.by_consumer.contains_key(name) && window.by_consumer.len() >= MAX_CONSUMERS {
            name = OTHER_CONSUMER;
        }
        let count = window.by_consumer.entry(name.to_owned()).or_insert(0);
        *count = add_safe(*count, 1);
        Decision::Go { counted: true }
    }

    /// Takes in what a response said, at `now`. A secondary limit pauses every call on the
    /// credential for `Retry-After` (default [`DEFAULT_PAUSE_MS`]), at most [`MAX_PAUSE_MS`];
    /// a pause already further ahead stays. A response without rate-limit headers leaves the
    /// windows alone. Otherwise a window with a whole `remaining` and a reset after `now`, at
    /// most [`MAX_WINDOW_MS`] ahead, replaces the resource's window; with the same reset as
    /// the window it replaces, it keeps that window's grants by consumer and never more calls
    /// left than that window had (a response that was overtaken by later ones, or calls
    /// granted while it was in flight, must not give calls back). Any other window leaves the
    /// resource "not known", as does a resource header that is not a resource name.
    pub fn apply(&mut self, observation: &Observation, now: u64) {
        if observation.is_secondary_limit() {
            let wait = observation
                .retry_after_s
                .map_or(DEFAULT_PAUSE_MS, |s| s.saturating_mul(1000))
                .min(MAX_PAUSE_MS);
            let until = now.saturating_add(wait);
            let kept = self.pause(now).unwrap_or(0);
            self.paused_until = Some(until.max(kept));
        }
        if !observation.window_seen {
            return;
        }
        let Some(resource) = observation.resource().map(str::to_owned) else {
            return;
        };
        let window = match (observation.remaining, observation.reset_s) {
            (Some(remaining), Some(reset_s)) => {
                let reset_at = reset_s.saturating_mul(1000);
                (reset_at > now && reset_at - now <= MAX_WINDOW_MS).then_some((remaining, reset_at))
            }
            _ => None,
        };
        let Some((remaining, reset_at)) = window else {
            self.resources.remove(&resource);
            return;
        };
        let (remaining, by_consumer) = match self.resources.remove(&resource) {
            Some(same) if same.reset_at == reset_at => {
                (remaining.min(same.left()), same.by_consumer)
            }
            _ => (remaining, BTreeMap::new()),
        };
        self.resources.insert(
            resource,
            Window {
                limit: observation.limit,
                remaining,
                reset_at,
                seen_at: now,
                granted: 0,
                by_consumer,
            },
        );
    }
}

/// The name a consumer's grants are counted under: its own when plain (1 to 32 ASCII
/// letters, digits, `-`, `_`, `.`), else [`OTHER_CONSUMER`].
#[must_use]
pub fn consumer_name(consumer: &str) -> &str {
    let plain = !consumer.is_empty()
        && consumer.len() <= 32
        && consumer
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if plain { consumer } else { OTHER_CONSUMER }
}

/// `a + b`, never beyond 2^53 - 1 (a count must stay one every JSON reader keeps exactly).
fn add_safe(a: u64, b: u64) -> u64 {
    a.saturating_add(b).min(MAX_SAFE)
}

/// A whole JSON number from 0 to 2^53 - 1.
fn safe(value: &Value) -> Option<u64> {
    value.as_u64().filter(|&n| n <= MAX_SAFE)
}

fn parse_window(value: &Value) -> Option<Window> {
    let Value::Object(w) = value else {
        return None;
    };
    let mut by_consumer = BTreeMap::new();
    if let Some(Value::Object(map)) = w.get("byConsumer") {
        for (name, count) in map {
            if let Some(count) = safe(count) {
                let mut name = consumer_name(name);
                if !by_consumer.contains_key(name) && by_consumer.len() >= MAX_CONSUMERS {
                    name = OTHER_CONSUMER;
                }
                let total = by_consumer.entry(name.to_owned()).or_insert(0);
                *total = add_safe(*total, count);
            }
        }
    }
    Some(Window {
        limit: w.get("limit").and_then(safe),
        remaining: w.get("remaining").and_then(safe)?,
        reset_at: w.get("resetAt").and_then(safe)?,
        seen_at: w.get("seenAt").and_then(safe).unwrap_or(0),
        granted: match w.get("granted") {
            None => 0,
            Some(granted) => safe(granted)?,
        },
        by_consumer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_480_000_000;

    fn seen(status: u16, remaining: Option<u64>, reset_s: Option<u64>) -> Observation {
        Observation {
            status,
            resource: None,
            window_seen: true,
            secondary_limit: false,
            limit: Some(5000),
            remaining,
            reset_s,
            retry_after_s: None,
            retry_after_seen: false,
        }
    }

    fn with_window(remaining: u64, reset_at: u64) -> State {
        let mut state = State::default();
        state.apply(&seen(200, Some(remaining), Some(reset_at / 1000)), NOW);
        state
    }

    #[test]
    fn calls_are_counted_until_none_is_left_then_wait_for_the_reset() {
        let reset = NOW + 60_000;
        let mut state = with_window(2, reset);
        assert_eq!(
            state.decide("core", "backlog", NOW),
            Decision::Go { counted: true }
        );
        assert_eq!(
            state.decide("core", "triage", NOW),
            Decision::Go { counted: true }
        );
        assert_eq!(
            state.decide("core", "backlog", NOW),
            Decision::Wait {
                until: reset,
                why: WaitWhy::Spent
            }
        );
        let w = state.window("core", NOW).expect("known");
        assert_eq!((w.granted, w.left()), (2, 0));
        assert_eq!(w.by_consumer["backlog"], 1);
        assert_eq!(w.by_consumer["triage"], 1);
        assert_eq!(
            state.decide("graphql", "backlog", NOW),
            Decision::Go { counted: false },
            "another resource is not known, so its call goes"
        );
    }

    #[test]
    fn a_window_ends_exactly_at_its_reset() {
        let reset = NOW + 60_000;
        let mut state = with_window(0, reset);
        assert!(matches!(
            state.decide("core", "c", reset - 1),
            Decision::Wait { .. }
        ));
        assert_eq!(
            state.decide("core", "c", reset),
            Decision::Go { counted: false }
        );
    }

    #[test]
    fn a_window_counts_only_up_to_65_minutes_ahead() {
        let state = with_window(5, NOW + MAX_WINDOW_MS);
        assert!(
            state.window("core", NOW).is_some(),
            "exactly 1 h 5 min ahead"
        );
        let mut far = State::default();
        far.apply(
            &seen(200, Some(5), Some((NOW + MAX_WINDOW_MS + 1000) / 1000)),
            NOW,
        );
        assert!(
            far.window("core", NOW).is_none(),
            "one second further is not known"
        );
        assert!(far.resources.is_empty(), "and is not kept");
        // Written by another process with a far reset: bounded when read too.
        let mut state = with_window(0, NOW + 60_000);
        state.resources.get_mut("core").expect("w").reset_at = NOW + MAX_WINDOW_MS + 1;
        assert_eq!(
            state.decide("core", "c", NOW),
            Decision::Go { counted: false }
        );
    }

    #[test]
    fn a_missing_or_past_reset_or_remaining_is_not_known() {
        let mut state = with_window(3, NOW + 60_000);
        state.apply(&seen(200, None, Some((NOW + 60_000) / 1000)), NOW);
        assert!(state.window("core", NOW).is_none(), "no remaining");
        let mut state = with_window(3, NOW + 60_000);
        state.apply(&seen(200, Some(3), None), NOW);
        assert!(state.window("core", NOW).is_none(), "no reset");
        let mut state = State::default();
        state.apply(&seen(200, Some(3), Some(NOW / 1000)), NOW);
        assert!(state.window("core", NOW).is_none(), "a reset that is now");
        assert!(
            state.resources.is_empty(),
            "a window ending exactly now is not kept (it would count again on a clock set back)"
        );
        let mut state = with_window(3, NOW + 60_000);
        state.apply(&seen(200, Some(3), Some(NOW / 1000)), NOW);
        assert!(
            state.resources.is_empty(),
            "a response whose window ends now drops the window it replaces"
        );
    }

    #[test]
    fn a_secondary_limit_pauses_every_resource_for_retry_after_at_most_15_minutes() {
        let mut state = with_window(100, NOW + 60_000);
        let mut limited = seen(403, Some(50), Some((NOW + 60_000) / 1000));
        limited.retry_after_s = Some(30);
        state.apply(&limited, NOW);
        assert_eq!(state.pause(NOW), Some(NOW + 30_000));
        assert_eq!(
            state.decide("graphql", "c", NOW + 29_999),
            Decision::Wait {
                until: NOW + 30_000,
                why: WaitWhy::Paused
            }
        );
        assert_eq!(
            state.decide("core", "c", NOW + 30_000),
            Decision::Go { counted: true },
            "the pause is over exactly at its end"
        );

        let mut state = State::default();
        limited.retry_after_s = Some(3600);
        state.apply(&limited, NOW);
        assert_eq!(state.pause(NOW), Some(NOW + MAX_PAUSE_MS), "cut to 15 min");
        let mut state = State::default();
        limited.retry_after_s = Some(u64::MAX);
        state.apply(&limited, NOW);
        assert_eq!(
            state.pause(NOW),
            Some(NOW + MAX_PAUSE_MS),
            "even from a huge value"
        );

        let mut state = State::default();
        let mut bare = seen(429, None, None);
        bare.window_seen = false;
        state.apply(&bare, NOW);
        assert_eq!(
            state.pause(NOW),
            Some(NOW + DEFAULT_PAUSE_MS),
            "one minute by default"
        );

        // Written by another process further ahead than any writer may: not known.
        let state = State {
            paused_until: Some(NOW + MAX_PAUSE_MS),
            ..State::default()
        };
        assert_eq!(
            state.pause(NOW),
            Some(NOW + MAX_PAUSE_MS),
            "15 min ahead counts"
        );
        let state = State {
            paused_until: Some(NOW + MAX_PAUSE_MS + 1),
            ..State::default()
        };
        assert_eq!(state.pause(NOW), None, "one ms further is not known");
        assert_eq!(
            state.pause(NOW + 1),
            Some(NOW + MAX_PAUSE_MS + 1),
            "until it is near"
        );
    }

    #[test]
    fn a_shorter_secondary_limit_never_shortens_a_pause_in_force() {
        let mut state = State::default();
        let mut limited = seen(429, None, None);
        limited.retry_after_s = Some(600);
        state.apply(&limited, NOW);
        limited.retry_after_s = Some(10);
        state.apply(&limited, NOW + 1000);
        assert_eq!(state.pause(NOW + 1000), Some(NOW + 600_000));
    }

    #[test]
    fn grants_by_consumer_carry_over_within_one_window_only() {
        let reset = NOW + 60_000;
        let mut state = with_window(10, reset);
        let _ = state.decide("core", "backlog", NOW);
        state.apply(&seen(200, Some(8), Some(reset / 1000)), NOW + 1);
        let w = state.window("core", NOW + 1).expect("known");
        assert_eq!(
            (w.remaining, w.granted),
            (8, 0),
            "the new remaining counts the call"
        );
        assert_eq!(w.by_consumer["backlog"], 1, "same window: kept");
        state.apply(
            &seen(200, Some(5000), Some((reset + 3_600_000) / 1000)),
            reset + 1,
        );
        let w = state.window("core", reset + 1).expect("known");
        assert!(
            w.by_consumer.is_empty(),
            "a new window starts its own count"
        );
    }

    #[test]
    fn odd_consumer_names_are_counted_as_other() {
        assert_eq!(consumer_name("backlog"), "backlog");
        assert_eq!(consumer_name(""), OTHER_CONSUMER);
        assert_eq!(consumer_name("a b"), OTHER_CONSUMER);
        assert_eq!(consumer_name(&"x".repeat(33)), OTHER_CONSUMER);
        assert_eq!(consumer_name("ghp_secret/../x"), OTHER_CONSUMER);
    }

    #[test]
    fn the_file_round_trips_and_bad_parts_are_not_known() {
        let mut state = with_window(7, NOW + 60_000);
        let _ = state.decide("core", "backlog", NOW);
        state.paused_until = Some(NOW + 5000);
        let back = State::parse(&state.to_bytes(NOW)).expect("parse");
        assert_eq!(back, state);

        assert!(State::parse(b"").is_err());
        assert!(State::parse(b"[1]").is_err());
        assert!(State::parse(b"{\"resources\":").is_err());
        let odd = br#"{"pausedUntil": -5, "resources": {
            "core": {"remaining": 1.5, "resetAt": 1764480060000},
            "graphql": {"remaining": 3, "resetAt": 1764480060000, "granted": "2"},
            "search": {"remaining": 3, "resetAt": 1764480060000, "byConsumer": {"a": 1, "b": -1}},
            "bad name": {"remaining": 3, "resetAt": 1764480060000}
        }}"#;
        let state = State::parse(odd).expect("an object");
        assert_eq!(state.paused_until, None, "a negative pause is not known");
        assert!(
            !state.resources.contains_key("core"),
            "a fractional remaining"
        );
        assert!(
            !state.resources.contains_key("graphql"),
            "a granted that is a string"
        );
        assert!(!state.resources.contains_key("bad name"));
        let search = &state.resources["search"];
        assert_eq!(search.by_consumer.get("a"), Some(&1));
        assert_eq!(
            search.by_consumer.get("b"),
            None,
            "a negative count is dropped"
        );
    }

    #[test]
    fn a_response_without_rate_limit_headers_keeps_the_window() {
        let mut state = with_window(0, NOW + 60_000);
        let mut bad_gateway = seen(502, None, None);
        bad_gateway.window_seen = false;
        state.apply(&bad_gateway, NOW + 1);
        assert!(
            matches!(state.decide("core", "c", NOW + 1), Decision::Wait { .. }),
            "a 502 without headers says nothing about the spent window"
        );
    }

    #[test]
    fn an_overtaken_response_never_gives_calls_back() {
        let reset = NOW + 60_000;
        let mut state = with_window(10, reset);
        for _ in 0..3 {
            let _ = state.decide("core", "c", NOW);
        }
        state.apply(&seen(200, Some(9), Some(reset / 1000)), NOW + 1);
        assert_eq!(
            state.window("core", NOW + 1).map(Window::left),
            Some(7),
            "an older response (9 left) does not undo 3 grants"
        );
        state.apply(&seen(200, Some(5), Some(reset / 1000)), NOW + 2);
        assert_eq!(
            state.window("core", NOW + 2).map(Window::left),
            Some(5),
            "a response showing fewer left than counted wins"
        );
        state.apply(
            &seen(200, Some(5000), Some((reset + 3_600_000) / 1000)),
            reset,
        );
        assert_eq!(
            state.window("core", reset).map(Window::left),
            Some(5000),
            "a new window starts from what it says"
        );
    }

    #[test]
    fn an_invalid_resource_header_leaves_every_window_alone() {
        let mut state = with_window(10, NOW + 60_000);
        let mut odd = seen(200, Some(0), Some((NOW + 60_000) / 1000));
        odd.resource = Some("../core".to_owned());
        state.apply(&odd, NOW);
        assert_eq!(state.window("core", NOW).map(Window::left), Some(10));
        assert_eq!(
            state.resources.len(),
            1,
            "nothing recorded under another name"
        );
    }

    #[test]
    fn counts_stay_safe_and_consumers_bounded() {
        let mut state = with_window(100, NOW + 60_000);
        for i in 0..MAX_CONSUMERS + 5 {
            let _ = state.decide("core", &format!("c{i}"), NOW);
        }
        let w = state.window("core", NOW).expect("known");
        assert_eq!(
            w.by_consumer.len(),
            MAX_CONSUMERS + 1,
            "64 named, the rest as (other)"
        );
        assert_eq!(w.by_consumer[OTHER_CONSUMER], 5);
        let huge = MAX_SAFE;
        let text = format!(
            r#"{{"resources": {{"core": {{"remaining": {huge}, "resetAt": {}, "granted": 1,
                "byConsumer": {{"a b": {huge}, "c d": {huge}}}}}}}}}"#,
            NOW + 60_000
        );
        let mut state = State::parse(text.as_bytes()).expect("parse");
        assert_eq!(
            state.resources["core"].by_consumer[OTHER_CONSUMER], MAX_SAFE,
            "two huge counts merged stay at 2^53 - 1"
        );
        let _ = state.decide("core", "a b", NOW);
        assert_eq!(
            state.resources["core"].by_consumer[OTHER_CONSUMER],
            MAX_SAFE
        );
        let back = State::parse(&state.to_bytes(NOW)).expect("written back");
        assert_eq!(back.resources["core"].by_consumer[OTHER_CONSUMER], MAX_SAFE);
    }

    #[test]
    fn fields_of_other_writers_survive_a_rewrite() {
        let mut state =
            State::parse(br#"{"resources": {}, "writer": {"lang": "go"}}"#).expect("parse");
        state.apply(&seen(200, Some(5), Some((NOW + 60_000) / 1000)), NOW);
        let back: Value = serde_json::from_slice(&state.to_bytes(NOW)).expect("json");
        assert_eq!(back["writer"]["lang"], "go");
        assert_eq!(back["updatedAt"], NOW);
    }

    // The bounds of the design, written as plain numbers (not through the constants, so that a
    // wrong constant fails here): each exactly at, one below and one above.

    #[test]
    fn a_pause_read_counts_up_to_exactly_15_minutes_ahead() {
        for (ahead, counts) in [(899_999, true), (900_000, true), (900_001, false)] {
            let state = State {
                paused_until: Some(NOW + ahead),
                ..State::default()
            };
            assert_eq!(
                state.pause(NOW),
                counts.then_some(NOW + ahead),
                "a pause {ahead} ms ahead: counts {counts}"
            );
        }
        let state = State {
            paused_until: Some(NOW),
            ..State::default()
        };
        assert_eq!(state.pause(NOW), None, "a pause ending now is over");
        assert_eq!(
            state.pause(NOW - 1),
            Some(NOW),
            "and in force one ms before its end"
        );
    }

    #[test]
    fn retry_after_is_cut_to_exactly_15_minutes_and_defaults_to_one() {
        for (retry_after_s, pause_ms) in [
            (Some(0), 0),
            (Some(1), 1_000),
            (Some(899), 899_000),
            (Some(900), 900_000),
            (Some(901), 900_000),
            (None, 60_000),
        ] {
            let mut limited = seen(429, None, None);
            limited.window_seen = false;
            limited.retry_after_s = retry_after_s;
            limited.retry_after_seen = true;
            let mut state = State::default();
            state.apply(&limited, NOW);
            assert_eq!(
                state.paused_until,
                Some(NOW + pause_ms),
                "Retry-After {retry_after_s:?} pauses {pause_ms} ms"
            );
        }
    }

    #[test]
    fn a_window_read_counts_up_to_exactly_65_minutes_ahead() {
        for (ahead, counts) in [(3_899_999, true), (3_900_000, true), (3_900_001, false)] {
            let mut state = with_window(5, NOW + 60_000);
            state.resources.get_mut("core").expect("window").reset_at = NOW + ahead;
            assert_eq!(
                state.window("core", NOW).is_some(),
                counts,
                "a window resetting {ahead} ms ahead: counts {counts}"
            );
            let expected = if counts {
                Decision::Go { counted: true }
            } else {
                Decision::Go { counted: false }
            };
            assert_eq!(
                state.decide("core", "c", NOW),
                expected,
                "a take {ahead} ms before the reset"
            );
        }
    }

    #[test]
    fn a_response_window_is_kept_up_to_exactly_65_minutes_ahead() {
        // Resets come in whole seconds: one second below, at, and one above the bound.
        for (ahead, kept) in [
            (1_000, true),
            (3_899_000, true),
            (3_900_000, true),
            (3_901_000, false),
        ] {
            let mut state = State::default();
            state.apply(&seen(200, Some(5), Some((NOW + ahead) / 1000)), NOW);
            assert_eq!(
                state.resources.contains_key("core"),
                kept,
                "a response whose window resets {ahead} ms ahead: kept {kept}"
            );
        }
    }

    #[test]
    fn consumer_names_are_1_to_32_plain_characters() {
        for name in [
            "a",
            "Z9",
            "backlog-2.x_y",
            "abcdefghijklmnopqrstuvwxyz012345",
        ] {
            assert_eq!(consumer_name(name), name, "{name:?} is a consumer name");
        }
        for name in [
            "",
            "abcdefghijklmnopqrstuvwxyz0123456",
            "a b",
            "a/b",
            "caf\u{e9}",
            "a\u{0}",
            "(other)",
        ] {
            assert_eq!(
                consumer_name(name),
                OTHER_CONSUMER,
                "{name:?} is counted as (other)"
            );
        }
    }

    #[test]
    fn the_first_64_consumers_of_a_window_are_named_and_the_rest_are_other() {
        let mut state = with_window(1000, NOW + 60_000);
        for i in 0..64 {
            let _ = state.decide("core", &format!("c{i:02}"), NOW);
        }
        let w = state.window("core", NOW).expect("known");
        assert_eq!(w.by_consumer.len(), 64, "64 consumers are named");
        assert!(
            !w.by_consumer.contains_key(OTHER_CONSUMER),
            "the 64th is still named"
        );
        let _ = state.decide("core", "c64", NOW);
        let _ = state.decide("core", "c00", NOW);
        let w = state.window("core", NOW).expect("known");
        assert_eq!(
            w.by_consumer.get(OTHER_CONSUMER),
            Some(&1),
            "the 65th is counted as (other)"
        );
        assert_eq!(
            w.by_consumer.get("c00"),
            Some(&2),
            "a consumer already named keeps its name past 64"
        );
        assert_eq!(w.by_consumer.get("c64"), None, "the 65th is not named");
    }

    #[test]
    fn a_file_with_more_than_64_consumers_is_read_as_64_and_other() {
        let consumers: Vec<String> = (0..70).map(|i| format!("\"c{i:02}\": 1")).collect();
        let text = format!(
            r#"{{"resources": {{"core": {{"remaining": 100, "resetAt": {}, "byConsumer": {{{}}}}}}}}}"#,
            NOW + 60_000,
            consumers.join(", ")
        );
        let state = State::parse(text.as_bytes()).expect("parse");
        let by_consumer = &state.resources["core"].by_consumer;
        assert_eq!(
            by_consumer.len(),
            65,
            "64 named and (other): {by_consumer:?}"
        );
        assert_eq!(by_consumer.get("c63"), Some(&1), "the 64th is named");
        assert_eq!(by_consumer.get("c64"), None, "the 65th is not");
        assert_eq!(
            by_consumer.get(OTHER_CONSUMER),
            Some(&6),
            "the 6 beyond the first 64 are counted as (other)"
        );
    }

    #[test]
    fn counts_in_the_file_are_whole_numbers_up_to_2_pow_53_minus_1() {
        let window = |remaining: &str, granted: &str| {
            let text = format!(
                r#"{{"resources": {{"core": {{"remaining": {remaining}, "resetAt": {},
                    "granted": {granted}}}}}}}"#,
                NOW + 60_000
            );
            State::parse(text.as_bytes())
                .expect("an object")
                .resources
                .get("core")
                .map(|w| (w.remaining, w.granted))
        };
        assert_eq!(
            window("9007199254740991", "9007199254740991"),
            Some((MAX_SAFE, MAX_SAFE)),
            "2^53 - 1 is kept exactly"
        );
        assert_eq!(window("9007199254740992", "0"), None, "2^53 is not known");
        assert_eq!(window("0", "9007199254740992"), None, "nor as granted");
        assert_eq!(window("0", "0"), Some((0, 0)), "0 is a count");
        assert_eq!(window("-1", "0"), None, "a negative remaining is not known");
        let paused = |until: &str| {
            State::parse(format!(r#"{{"pausedUntil": {until}}}"#).as_bytes())
                .expect("an object")
                .paused_until
        };
        assert_eq!(paused("9007199254740991"), Some(MAX_SAFE), "2^53 - 1");
        assert_eq!(paused("9007199254740992"), None, "2^53 is not known");
        assert_eq!(paused("1.0"), None, "a fraction is not known");
    }
}
