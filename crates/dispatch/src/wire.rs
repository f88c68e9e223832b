//! The dispatcher's messages (PROTOCOL.md, "The dispatcher socket"). Each is one JSON object
//! on one line; see [`worklane_transport`] for the framing and descriptors.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The protocol version every message carries (a request may leave it out: version 1).
pub const VERSION: u32 = 1;

/// A request's `version` when it is present and not [`VERSION`] (shown as written): such a
/// request is refused whole, whatever else it says. `None` when it is absent or 1, or the
/// line is not a JSON object at all (the request's own parse says why).
#[must_use]
pub fn unknown_version(line: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Versioned {
        #[serde(default)]
        version: Option<serde_json::Value>,
    }
    let version = serde_json::from_slice::<Versioned>(line).ok()?.version?;
    (version != VERSION).then(|| version.to_string())
}

/// A request's line as a client sends it: the request with `"version": 1`.
#[must_use]
pub fn request_line(request: &Request) -> Vec<u8> {
    let mut value = serde_json::to_value(request).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.insert("version".to_owned(), VERSION.into());
    }
    serde_json::to_vec(&value).unwrap_or_default()
}

/// A request, by its `op`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    /// Hand a held lane over to the queue (exactly one descriptor: the lane's guard).
    Enqueue(Enqueue),
    /// Claim an admitted attempt with its token (no descriptor; two come back).
    Claim {
        /// The attempt id.
        attempt: String,
        /// The admitted-start token.
        token: String,
    },
    /// Every attempt the dispatcher holds (and, with `all`, the history of ended ones).
    List {
        /// Whether the reply carries the history of ended attempts too.
        #[serde(default)]
        all: bool,
    },
    /// Drop a queued, starting or failed attempt (its lane and slot are freed), or halt a
    /// running one's driver as STOP would.
    Cancel {
        /// The attempt id.
        attempt: String,
    },
    /// Queue a failed attempt again from the start (no failures counted, no backoff).
    Retry {
        /// The attempt id.
        attempt: String,
    },
    /// Forget the ended attempts older than `older_than_ms` (all when absent) and remove their
    /// logs: the caller's own, or everyone's for root and the directory's owner.
    Prune {
        /// How old (ms since it ended) an ended attempt must be to go.
        #[serde(default)]
        older_than_ms: Option<u64>,
    },
}

impl Request {
    /// The request's `op`, as replies and the log name it.
    #[must_use]
    pub fn op(&self) -> &'static str {
        match self {
            Request::Enqueue(_) => "enqueue",
            Request::Claim { .. } => "claim",
            Request::List { .. } => "list",
            Request::Cancel { .. } => "cancel",
            Request::Retry { .. } => "retry",
            Request::Prune { .. } => "prune",
        }
    }
}

/// An enqueue: the row's fields as the launcher prepared them. Any other field (stale slot or
/// pre-claimed start metadata) is ignored and never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueue {
    /// The lane's name: its lock is `lane-<lane>.lock`.
    pub lane: String,
    /// When the work was first queued, ms since the Unix epoch (required; kept as given).
    #[serde(default)]
    pub start_ms: Option<u64>,
    /// Higher goes first (required; kept as given).
    #[serde(default)]
    pub priority: Option<i64>,
    /// Where the launcher placed the work.
    #[serde(default)]
    pub placement: String,
    /// The stage it is at.
    #[serde(default)]
    pub stage: String,
    /// The driver command.
    pub args: Vec<String>,
    /// The environment for the driver (filtered again by the dispatcher).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The lane is one of its own (`q-` and 16 lowercase hex digits), used once: its files are
    /// removed when the attempt ends. A lane of that shape is refused without it, and this is
    /// refused for a lane of any other shape.
    #[serde(default)]
    pub own_lane: bool,
    /// How many units of the agents' cap the attempt takes when admitted, all at once (1 to
    /// `max_agents`; absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// The tag of the owner it runs for, which the config's shares may name (`owner:<tag>`);
    /// otherwise its share is its enqueuer's (uid and groups, from the peer credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// An attempt as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptView {
    /// The attempt id.
    pub attempt: String,
    /// The lane.
    pub lane: String,
    /// `queued`, `starting`, `running` or `failed`.
    pub state: String,
    /// Original queue start, ms since the Unix epoch.
    pub start_ms: u64,
    /// Priority.
    pub priority: i64,
    /// Stage.
    pub stage: String,
    /// Placement.
    pub placement: String,
    /// When it entered its state, ms.
    pub state_at_ms: u64,
    /// The slot reserved for it while starting.
    pub slot: Option<String>,
    /// The driver command.
    pub args: Vec<String>,
    /// Who enqueued it (uid), where recorded.
    #[serde(default)]
    pub uid: Option<u32>,
    /// Its driver's failed starts since it was queued or retried.
    #[serde(default)]
    pub failures: u32,
    /// The last failed start's error.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Not admitted before this time (ms), after a failed start.
    #[serde(default)]
    pub retry_at_ms: Option<u64>,
    /// The pid of its driver (starting: the one started; running: the claimer).
    #[serde(default)]
    pub driver_pid: Option<u32>,
    /// How many times its driver was started.
    #[serde(default)]
    pub starts: u32,
    /// Running: when a cancel was asked (its driver is being halted).
    #[serde(default)]
    pub cancel_at_ms: Option<u64>,
    /// Its driver's log, by name in the slot directory.
    #[serde(default)]
    pub log: String,
    /// The units of the agents' cap it takes (1 when a dispatcher before weights says none).
    #[serde(default = "one")]
    pub weight: u32,
    /// The tag of the owner it runs for (`enqueue --owner`), if it has one.
    #[serde(default)]
    pub owner: Option<String>,
}

fn one() -> u32 {
    1
}

/// An ended attempt, as `list` with `all` shows the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedView {
    /// The attempt id.
    pub attempt: String,
    /// Its lane.
    pub lane: String,
    /// How it ended: `exited`, `killed`, `ended` (status unknown: in its log), `cancelled` or
    /// `lost` (its row was in a damaged queue database).
    pub outcome: String,
    /// The driver's exit status, if it exited.
    #[serde(default)]
    pub status: Option<i32>,
    /// The signal that killed the driver, if one did.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Who or what ended it.
    #[serde(default)]
    pub detail: String,
    /// When it was first queued, ms.
    pub start_ms: u64,
    /// When its driver claimed it, ms, if it ran.
    #[serde(default)]
    pub started_at_ms: Option<u64>,
    /// When it ended, ms.
    pub ended_at_ms: u64,
    /// Who enqueued it (uid), where known.
    #[serde(default)]
    pub uid: Option<u32>,
    /// Its driver command.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its log's name in the slot directory (removed after the retention period).
    #[serde(default)]
    pub log: Option<String>,
}

/// A reply. `ok` tells success; a refusal carries `error` (a code) and `message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Reply {
    /// The protocol version.
    pub version: u32,
    /// Whether the request was done.
    pub ok: bool,
    /// On refusal, a stable code (PROTOCOL.md lists them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// On refusal, what a person should know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The attempt (enqueue, claim, cancel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<String>,
    /// Claim: the lane lock's name (first descriptor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<String>,
    /// Claim: the slot's name (second descriptor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// Claim: the driver command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Claim: the driver's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// List: every attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptView>>,
    /// The dispatcher's pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// List with `all`, and prune: ended attempts, newest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<EndedView>>,
    /// List: the dispatcher's own trouble (a step that keeps failing, such as a full disk),
    /// while it lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trouble: Option<String>,
    /// List: the damaged queue database this dispatcher found at its start and moved aside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
}

impl Reply {
    /// A success.
    #[must_use]
    pub fn ok() -> Reply {
        Reply {
            version: VERSION,
            ok: true,
            ..Reply::default()
        }
    }

    /// A refusal with its code and message.
    #[must_use]
    pub fn refused(code: &str, message: impl Into<String>) -> Reply {
        Reply {
            version: VERSION,
            ok: false,
            error: Some(code.to_owned()),
            message: Some(message.into()),
            ..Reply::default()
        }
    }
}

/// The refusal codes.
pub mod code {
    /// Not exactly one descriptor came with an enqueue (or any with another request).
    pub const DESCRIPTORS: &str = "descriptors";
    /// The descriptor is not the lane's guard (device and inode compared).
    pub const NOT_THE_LANE: &str = "not-the-lane";
    /// The descriptor is the lane's guard, but another open file description holds its lock.
    pub const NOT_HELD: &str = "not-held";
    /// The host admits by waiting, not through the dispatcher.
    pub const WAITER_MODE: &str = "waiter-mode";
    /// The entry has no start or no priority.
    pub const MISSING_FIELD: &str = "missing-field";
    /// The request is not a valid message.
    pub const BAD_REQUEST: &str = "bad-request";
    /// The lane is already queued.
    pub const LANE_QUEUED: &str = "lane-queued";
    /// The peer may not use this dispatcher (not root, the directory's owner or its group).
    pub const PERMISSION: &str = "permission";
    /// Claim: no starting row with this attempt and token (the seed's error).
    pub const NO_ADMITTED_ROW: &str = "no-admitted-row";
    /// Cancel, retry: no such attempt.
    pub const NO_SUCH_ATTEMPT: &str = "no-such-attempt";
    /// Retry: the attempt is not failed (queued, starting or running).
    pub const NOT_FAILED: &str = "not-failed";
    /// The dispatcher failed (its database, the directory).
    pub const INTERNAL: &str = "internal";
    /// Enqueue: a bound is reached (the caller's rows waiting, or the descriptors the
    /// dispatcher keeps in reserve for root and for listing); try again when fewer wait.
    pub const LIMIT: &str = "limit";
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn a_request_of_another_version_is_told_apart() {
        assert_eq!(
            unknown_version(br#"{"op":"list"}"#),
            None,
            "absent: version 1"
        );
        assert_eq!(unknown_version(br#"{"op":"list","version":1}"#), None);
        assert_eq!(
            unknown_version(br#"{"op":"list","version":2}"#).as_deref(),
            Some("2")
        );
        assert_eq!(
            unknown_version(br#"{"op":"list","version":"1"}"#).as_deref(),
            Some("\"1\"")
        );
        assert_eq!(
            unknown_version(b"garbage"),
            None,
            "the request's parse reports it"
        );
        let line = request_line(&Request::List { all: false });
        let back: serde_json::Value = serde_json::from_slice(&line).expect("json");
        assert_eq!(back["version"], 1, "{back}");
        assert_eq!(back["op"], "list", "{back}");
        assert_eq!(unknown_version(&line), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_carry_the_protocol_version() {
        let ok = Reply::ok();
        assert_eq!((ok.version, ok.ok, ok.error), (VERSION, true, None));
        let refused = Reply::refused(code::PERMISSION, "no");
        assert_eq!(refused.version, VERSION);
        assert!(!refused.ok);
        assert_eq!(refused.error.as_deref(), Some(code::PERMISSION));
        assert_eq!(refused.message.as_deref(), Some("no"));
    }

    /// A row's view from a dispatcher before weights has no `weight`: it takes one unit.
    #[test]
    fn an_attempt_without_a_weight_takes_one_unit() {
        let text = r#"{"attempt":"a1","lane":"docs","state":"queued","start_ms":5,
            "priority":0,"stage":"","placement":"","state_at_ms":5,"slot":null,"args":["x"]}"#;
        let view: AttemptView = serde_json::from_str(text).expect("parse");
        assert_eq!(view.weight, 1);
        assert_eq!(view.owner, None);
    }

    #[test]
    fn requests_parse_by_op_and_ignore_stale_fields() {
        let text = r#"{"op":"enqueue","lane":"docs","start_ms":5,"priority":2,"args":["x"],"slot":"agent-3.lock","claimed_start":7}"#;
        let Request::Enqueue(e) = serde_json::from_str(text).expect("parse") else {
            panic!("an enqueue")
        };
        assert_eq!(
            (e.lane.as_str(), e.start_ms, e.priority),
            ("docs", Some(5), Some(2))
        );
        let again = serde_json::to_string(&Request::Enqueue(e)).expect("json");
        assert!(
            !again.contains("claimed_start") && !again.contains("agent-3"),
            "stripped: {again}"
        );
        let claim: Request =
            serde_json::from_str(r#"{"op":"claim","attempt":"a-1","token":"t"}"#).expect("claim");
        assert_eq!(
            claim,
            Request::Claim {
                attempt: "a-1".into(),
                token: "t".into()
            }
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"nope"}"#).is_err());
        let missing: Request = serde_json::from_str(r#"{"op":"enqueue","lane":"d","args":[]}"#)
            .expect("start and priority are checked by the dispatcher, not the parser");
        assert!(matches!(
            missing,
            Request::Enqueue(Enqueue {
                start_ms: None,
                priority: None,
                weight: None,
                owner: None,
                ..
            })
        ));
        let weighted: Request = serde_json::from_str(
            r#"{"op":"enqueue","lane":"d","args":["x"],"weight":3,"owner":"nightly"}"#,
        )
        .expect("weight and owner");
        let Request::Enqueue(e) = weighted else {
            panic!("an enqueue")
        };
        assert_eq!((e.weight, e.owner.as_deref()), (Some(3), Some("nightly")));
        let plain = Enqueue {
            weight: None,
            owner: None,
            ..e
        };
        let line = serde_json::to_string(&Request::Enqueue(plain)).expect("json");
        assert!(
            !line.contains("weight") && !line.contains("owner"),
            "an older dispatcher never sees the new fields unless they are used: {line}"
        );
    }

    #[test]
    fn replies_say_only_what_applies() {
        let text = serde_json::to_string(&Reply::refused(
            code::NO_ADMITTED_ROW,
            "no admitted row for this token",
        ))
        .expect("json");
        assert_eq!(
            text,
            r#"{"version":1,"ok":false,"error":"no-admitted-row","message":"no admitted row for this token"}"#
        );
    }
}
