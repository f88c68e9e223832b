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
/// A model provider's 429 without `retry-after` (optional at OpenAI) pauses until the latest
/// reset of the windows its own headers say are spent; with none spent, for this long.
pub const NO_WAIT_SAID_PAUSE_MS: u64 = 5 * 1000;
/// The first backoff after a model provider says it is overloaded (Anthropic's 529: its
/// capacity, not the key's quota); it doubles with each overload in a row, up to
/// [`MAX_OVERLOAD_BACKOFF_MS`], and a response that is not an overload starts it again.
pub const OVERLOAD_BACKOFF_MS: u64 = 1000;
/// The longest backoff after overloads in a row.
pub const MAX_OVERLOAD_BACKOFF_MS: u64 = 16 * 1000;
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
    /// The last seen window of each resource (GitHub's `core`, `graphql`...; a model
    /// provider's dimensions, `requests`, `tokens`, `input-tokens`, `output-tokens`).
    pub resources: BTreeMap<String, Window>,
    /// A model provider's calls in flight: what each take reserved, until its response is
    /// observed or it is released (at most [`RESERVATION_TTL_MS`]).
    pub in_flight: BTreeMap<String, Reservation>,
    /// How many responses in a row said the provider is overloaded (its backoff grows with
    /// them).
    pub overloads: u32,
    /// Calls waiting for this budget in a process that waits in its own way (a proxy), by
    /// that process's own random id: how many, and when it last said so.
    pub waiting: BTreeMap<String, Waiting>,
    /// Top-level fields this version does not know, written back unchanged.
    pub extra: Map<String, Value>,
}

/// How long a reservation counts without its response being observed or released: 10 min (a
/// caller killed mid-call frees what it reserved by then at the latest).
pub const RESERVATION_TTL_MS: u64 = 10 * 60 * 1000;
/// At most this many reservations are kept; the oldest go first.
pub const MAX_IN_FLIGHT: usize = 256;

/// A model provider's reports of one dimension whose resets are less than this apart describe
/// the same window: 0.5 s. A reset said as a duration from the response (OpenAI's `6m0s`) is
/// read a little differently from each response, by how long each took to arrive; resets
/// said as times (RFC 3339, whole seconds) of two windows are a second apart or more. A
/// report whose reset is this much earlier than the window's, and not this much later than
/// when the window was seen, is of the window before (a response overtaken by one of the
/// next window) and is not taken as the window now.
pub const SAME_WINDOW_MS: u64 = 500;
/// The shortest period a window carried over is taken to last (see [`State::carry`]): 1 s.
pub const MIN_PERIOD_MS: u64 = 1000;

/// A waiting process's word that it holds calls waiting for the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    /// How many calls wait.
    pub calls: u64,
    /// When it said so (ms); it says so again at least every second while calls wait.
    pub at_ms: u64,
}

/// A word of waiting older than this is not counted (its process stopped saying it, or was
/// killed): 5 s.
pub const WAITING_FRESH_MS: u64 = 5_000;
/// At most this many waiting processes are kept; the stalest go first.
pub const MAX_WAITERS: usize = 64;

/// What one call in flight reserved of each dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// When it was taken (ms).
    pub at_ms: u64,
    /// Units reserved, by dimension name.
    pub units: BTreeMap<String, u64>,
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
    /// Not seen: carried over from the window before it, which ended ([`State::carry`]), its
    /// limit as the remaining, until a response reports this window.
    pub assumed: bool,
}

impl Window {
    /// Calls left: the remaining seen, less those granted since.
    #[must_use]
    pub fn left(&self) -> u64 {
        self.remaining.saturating_sub(self.granted)
    }

    /// How long the provider's period of this window is taken to be, for the window carried
    /// over after it: at least from when it was seen to its reset; for a window seen with
    /// `remaining` below its `limit`, as long as refilling the whole limit takes at the rate
    /// the used part refills by the reset (a token bucket's, as Anthropic's: it refills
    /// continuously and its reset is when it is full again). From [`MIN_PERIOD_MS`] to
    /// [`MAX_WINDOW_MS`].
    #[must_use]
    pub fn period_ms(&self) -> u64 {
        let span = self.reset_at.saturating_sub(self.seen_at);
        let whole = match self.limit {
            Some(limit) if !self.assumed && limit > self.remaining => {
                let whole =
                    u128::from(span) * u128::from(limit) / u128::from(limit - self.remaining);
                u64::try_from(whole).unwrap_or(MAX_WINDOW_MS)
            }
            _ => span,
        };
        whole.max(span).clamp(MIN_PERIOD_MS, MAX_WINDOW_MS)
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
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Unreadable {
    /// It is not JSON.
    #[error("the budget state is not JSON")]
    Json(#[source] serde_json::Error),
    /// It is JSON, but not an object.
    #[error("the budget state is not a JSON object")]
    NotAnObject,
}

impl State {
    /// Reads a state file. Anything but a JSON object is [`Unreadable`]; inside it, each part
    /// that is malformed (a count that is not a whole safe number, a window without its
    /// reset) is left out, so it is "not known".
    pub fn parse(bytes: &[u8]) -> Result<State, Unreadable> {
        let value: Value = serde_json::from_slice(bytes).map_err(Unreadable::Json)?;
        let Value::Object(top) = value else {
            return Err(Unreadable::NotAnObject);
        };
        let paused_until = top.get("pausedUntil").and_then(safe);
        let extra = top
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "pausedUntil"
                        | "resources"
                        | "updatedAt"
                        | "inFlight"
                        | "overloads"
                        | "waiting"
                )
            })
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
        let mut in_flight = BTreeMap::new();
        if let Some(Value::Object(map)) = top.get("inFlight") {
            for (id, r) in map.iter().take(MAX_IN_FLIGHT) {
                if let Some(reservation) = parse_reservation(r)
                    && is_resource_name(id)
                {
                    in_flight.insert(id.clone(), reservation);
                }
            }
        }
        let overloads = top
            .get("overloads")
            .and_then(safe)
            .and_then(|n| u32::try_from(n.min(64)).ok())
            .unwrap_or(0);
        let mut waiting = BTreeMap::new();
        if let Some(Value::Object(map)) = top.get("waiting") {
            for (id, w) in map.iter().take(MAX_WAITERS) {
                let calls = w.get("calls").and_then(safe);
                let at_ms = w.get("at").and_then(safe);
                if let (Some(calls), Some(at_ms), true) = (calls, at_ms, is_resource_name(id)) {
                    waiting.insert(id.clone(), Waiting { calls, at_ms });
                }
            }
        }
        Ok(State {
            paused_until,
            resources,
            in_flight,
            overloads,
            waiting,
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
            if w.assumed
                && let Some(Value::Object(window)) = resources.get_mut(name)
            {
                window.insert("assumed".to_owned(), true.into());
            }
        }
        let mut top = self.extra.clone();
        if let Some(until) = self.paused_until {
            top.insert("pausedUntil".to_owned(), until.into());
        }
        top.insert("resources".to_owned(), Value::Object(resources));
        if !self.in_flight.is_empty() {
            let in_flight: Map<String, Value> = self
                .in_flight
                .iter()
                .map(|(id, r)| (id.clone(), json!({"at": r.at_ms, "units": r.units})))
                .collect();
            top.insert("inFlight".to_owned(), Value::Object(in_flight));
        }
        if self.overloads > 0 {
            top.insert("overloads".to_owned(), self.overloads.into());
        }
        if !self.waiting.is_empty() {
            let waiting: Map<String, Value> = self
                .waiting
                .iter()
                .map(|(id, w)| (id.clone(), json!({"calls": w.calls, "at": w.at_ms})))
                .collect();
            top.insert("waiting".to_owned(), Value::Object(waiting));
        }
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
            log::info!("secondary rate limit: every caller of this credential pauses {wait} ms");
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
                assumed: false,
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

fn in_flight_units(in_flight: &BTreeMap<String, Reservation>, dimension: &str) -> u64 {
    in_flight
        .values()
        .filter_map(|r| r.units.get(dimension))
        .fold(0, |a, b| add_safe(a, *b))
}

/// `a + b`, never beyond 2^53 - 1 (a count must stay one every JSON reader keeps exactly).
fn add_safe(a: u64, b: u64) -> u64 {
    a.saturating_add(b).min(MAX_SAFE)
}

/// A whole JSON number from 0 to 2^53 - 1.
fn safe(value: &Value) -> Option<u64> {
    value.as_u64().filter(|&n| n <= MAX_SAFE)
}

fn parse_reservation(value: &Value) -> Option<Reservation> {
    let Value::Object(r) = value else {
        return None;
    };
    let at_ms = r.get("at").and_then(safe)?;
    let mut units = BTreeMap::new();
    if let Some(Value::Object(map)) = r.get("units") {
        for (name, n) in map {
            if is_resource_name(name) {
                units.insert(name.clone(), safe(n)?);
            }
        }
    }
    Some(Reservation { at_ms, units })
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
        assumed: w.get("assumed") == Some(&Value::Bool(true)),
    })
}

mod units;

#[cfg(test)]
mod tests;
