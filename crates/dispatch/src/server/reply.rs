//! Replies: the one place where a request's answer becomes a [`Reply`]. Each of the service's
//! outcomes is said as its operation's success, each of its refusals by its code (PROTOCOL.md
//! 14.2) with its text as the message; the server's own refusals (a line that is no request,
//! the dispatcher's own failure) are made here too.

use crate::lane::lane_lock;
use crate::service::{
    CancelRefused, Cancelled, ClaimRefused, Claimed, EnqueueRefused, Enqueued, RetryRefused,
};
use crate::wire::{AttemptView, EndedView, Reply, code};
use worklane_guard::Guard;

/// A refusal of the service's, as the wire names it: its code, and its text as the message.
pub(super) trait Refusal: std::fmt::Display {
    /// Its code (PROTOCOL.md 14.2).
    fn code(&self) -> &'static str;

    /// The reply that says it.
    fn reply(&self) -> Reply {
        Reply::refused(self.code(), self.to_string())
    }
}

impl Refusal for EnqueueRefused {
    fn code(&self) -> &'static str {
        match self {
            EnqueueRefused::Descriptors { .. } => code::DESCRIPTORS,
            EnqueueRefused::WaiterMode => code::WAITER_MODE,
            EnqueueRefused::OtherUser { .. } => code::PERMISSION,
            EnqueueRefused::BadLane { .. }
            | EnqueueRefused::ReservedLane { .. }
            | EnqueueRefused::NotOwnLane { .. }
            | EnqueueRefused::BadOwner { .. }
            | EnqueueRefused::Unfit { .. } => code::BAD_REQUEST,
            EnqueueRefused::MissingField => code::MISSING_FIELD,
            EnqueueRefused::TooManyRows { .. } | EnqueueRefused::NoDescriptorsToSpare { .. } => {
                code::LIMIT
            }
            EnqueueRefused::Unexaminable { .. }
            | EnqueueRefused::NotAFile { .. }
            | EnqueueRefused::NotTheLane { .. } => code::NOT_THE_LANE,
            EnqueueRefused::LockFree { .. } | EnqueueRefused::NotHeld { .. } => code::NOT_HELD,
            EnqueueRefused::NoDescriptorToCheck { .. } => code::INTERNAL,
            EnqueueRefused::LaneQueued { .. } => code::LANE_QUEUED,
        }
    }
}

impl Refusal for ClaimRefused {
    fn code(&self) -> &'static str {
        match self {
            ClaimRefused::NoAdmittedRow => code::NO_ADMITTED_ROW,
            ClaimRefused::Permission { .. } => code::PERMISSION,
        }
    }
}

impl Refusal for CancelRefused {
    fn code(&self) -> &'static str {
        match self {
            CancelRefused::NoSuchAttempt { .. } => code::NO_SUCH_ATTEMPT,
            CancelRefused::Permission { .. } => code::PERMISSION,
        }
    }
}

impl Refusal for RetryRefused {
    fn code(&self) -> &'static str {
        match self {
            RetryRefused::NoSuchAttempt { .. } => code::NO_SUCH_ATTEMPT,
            RetryRefused::Damaged { .. } => code::BAD_REQUEST,
            RetryRefused::NotFailed { .. } => code::NOT_FAILED,
            RetryRefused::Permission { .. } | RetryRefused::OtherUser { .. } => code::PERMISSION,
        }
    }
}

/// An accepted enqueue: the new attempt.
pub(super) fn enqueued(enqueued: &Enqueued) -> Reply {
    with_attempt(&enqueued.attempt)
}

/// A claim: the attempt, its lane's lock and slot (the descriptors' order), its command and
/// environment; and the descriptors to send with it.
pub(super) fn claimed(claimed: Claimed) -> (Reply, Vec<Guard>) {
    let mut reply = Reply::ok();
    reply.attempt = Some(claimed.attempt);
    reply.lane = Some(lane_lock(&claimed.lane));
    reply.slot = Some(claimed.slot);
    reply.args = Some(claimed.args);
    reply.env = Some(claimed.env);
    (reply, claimed.fds)
}

/// A cancel of `attempt`: a running one's says that its driver is being halted.
pub(super) fn cancelled(attempt: &str, cancelled: Cancelled) -> Reply {
    let mut reply = with_attempt(attempt);
    if let Cancelled::Halting { grace_ms } = cancelled {
        reply.message = Some(format!(
            "its driver is being halted (SIGTERM, then SIGKILL after {} s)",
            grace_ms / 1000
        ));
    }
    reply
}

/// A retry of `attempt`: queued again.
pub(super) fn retried(attempt: &str) -> Reply {
    with_attempt(attempt)
}

/// A success naming `attempt`.
fn with_attempt(attempt: &str) -> Reply {
    let mut reply = Reply::ok();
    reply.attempt = Some(attempt.to_owned());
    reply
}

/// A prune: the ended attempts that went.
pub(super) fn pruned(history: Vec<EndedView>) -> Reply {
    let mut reply = Reply::ok();
    reply.history = Some(history);
    reply
}

/// A list: the attempts, the dispatcher's pid, with `all` the history, and what a person
/// should know of the dispatcher's own trouble and of damage found at its start.
pub(super) fn listed(
    attempts: Vec<AttemptView>,
    history: Option<Vec<EndedView>>,
    trouble: Option<String>,
    damage: Option<String>,
) -> Reply {
    let mut reply = Reply::ok();
    reply.attempts = Some(attempts);
    reply.pid = Some(std::process::id());
    reply.history = history;
    reply.trouble = trouble;
    reply.damage = damage;
    reply
}

/// A request of a protocol version this dispatcher does not speak (`version` as written).
pub(super) fn unknown_version(version: &str) -> Reply {
    Reply::refused(
        code::BAD_REQUEST,
        format!(
            "protocol version {version} is not known here (this dispatcher speaks version {})",
            crate::wire::VERSION
        ),
    )
}

/// A line that is not a request.
pub(super) fn not_a_request(error: &serde_json::Error) -> Reply {
    Reply::refused(code::BAD_REQUEST, format!("not a request: {error}"))
}

/// Descriptors with a request (`op`) that carries none.
pub(super) fn no_descriptor(op: &str) -> Reply {
    Reply::refused(code::DESCRIPTORS, format!("a {op} carries no descriptor"))
}

/// The dispatcher's own failure (its database, the directory), `chain` its causes in words.
pub(super) fn failed(chain: &str) -> Reply {
    Reply::refused(code::INTERNAL, format!("the dispatcher failed: {chain}"))
}

/// In place of a reply longer than one message may be.
pub(super) fn too_long() -> Reply {
    Reply::refused(
        code::INTERNAL,
        "the reply is longer than a message may be (64 KiB); ask for less",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::State;

    /// The reply as it goes on the wire.
    fn wire(reply: &Reply) -> String {
        serde_json::to_string(reply).expect("json")
    }

    /// A refusal's line: its code and message, nothing else.
    fn refusal(code: &str, message: &str) -> String {
        let text = |s: &str| serde_json::to_string(s).expect("json");
        format!(
            r#"{{"version":1,"ok":false,"error":{},"message":{}}}"#,
            text(code),
            text(message)
        )
    }

    #[test]
    fn each_enqueue_refusal_keeps_its_code_and_words() {
        let lock = || "lane-a.lock".to_owned();
        let fstat = format!(
            "the descriptor sent cannot be examined (fstat: {})",
            rustix::io::Errno::BADF
        );
        let no_fd = format!(
            "the dispatcher cannot open lane-a.lock's guard to check it: it has no descriptor \
             left ({}); raise its limit of open files (LimitNOFILE= under systemd)",
            std::io::Error::from_raw_os_error(24)
        );
        let cases: Vec<(EnqueueRefused, &str, &str)> = vec![
            (
                EnqueueRefused::Descriptors { count: 2 },
                "descriptors",
                "an enqueue carries exactly one descriptor (the lane's guard), not 2",
            ),
            (
                EnqueueRefused::WaiterMode,
                "waiter-mode",
                "this host admits in waiter mode (\"admission\": \"waiter\" in its config): run \
                 the work with `worklane run` instead of queueing it",
            ),
            (
                EnqueueRefused::OtherUser {
                    euid: 1000,
                    uid: 1001,
                },
                "permission",
                "this dispatcher runs as uid 1000 and starts drivers only as itself, so it queues \
                 no work of uid 1001: run the work with `worklane run`, or have the operator run \
                 the dispatcher as root (contrib/systemd), which starts each driver as the one \
                 who enqueued it",
            ),
            (
                EnqueueRefused::BadLane { lane: "a b".into() },
                "bad-request",
                "lane \"a b\": 1 to 64 letters, digits, `-`, `_` or `.`",
            ),
            (
                EnqueueRefused::ReservedLane {
                    lane: "q-0123456789abcdef".into(),
                },
                "bad-request",
                "lane q-0123456789abcdef: names of `q-` and 16 hex digits are reserved for lanes \
                 of their own, which are removed when their attempt ends; choose another name, \
                 or say \"own_lane\": true for a lane made for this attempt alone",
            ),
            (
                EnqueueRefused::NotOwnLane {
                    lane: "docs".into(),
                },
                "bad-request",
                "lane docs: a lane of its own is named `q-` and 16 lowercase hex digits",
            ),
            (
                EnqueueRefused::MissingField,
                "missing-field",
                "an enqueue must carry its queue start (start_ms) and priority",
            ),
            (
                EnqueueRefused::BadOwner {
                    owner: "two words".into(),
                },
                "bad-request",
                "owner \"two words\": a tag is 1 to 128 bytes without white space or control \
                 characters",
            ),
            (
                EnqueueRefused::Unfit {
                    error: Box::new(worklane_admission::take::Error::Weight {
                        kind: "agent",
                        weight: 5,
                        cap: 4,
                    }),
                },
                "bad-request",
                "a take of weight 5 cannot be admitted: the weight of a take of kind agent is \
                 from 1 to its cap, 4 units",
            ),
            (
                EnqueueRefused::TooManyRows {
                    uid: 1000,
                    waiting: 64,
                    max: 64,
                },
                "limit",
                "uid 1000 has 64 attempts waiting, the most one user may have (the dispatcher's \
                 --max-rows-per-user 64): enqueue again when some have run, or cancel some \
                 (`worklane queue ls`)",
            ),
            (
                EnqueueRefused::NoDescriptorsToSpare { left: 12 },
                "limit",
                "the dispatcher has 12 descriptors left and keeps 320 for root and for listing \
                 (each waiting attempt holds its lane's): enqueue again when fewer wait, or have \
                 the operator raise its limit of open files (LimitNOFILE= under systemd)",
            ),
            (
                EnqueueRefused::Unexaminable {
                    errno: rustix::io::Errno::BADF,
                },
                "not-the-lane",
                &fstat,
            ),
            (
                EnqueueRefused::NotAFile {
                    kind: rustix::fs::FileType::Fifo,
                    lock: lock(),
                },
                "not-the-lane",
                "the descriptor sent is a pipe (FIFO), not a lane's guard: send the descriptor \
                 of .lane-a.lock.flock on which you hold the lock",
            ),
            (
                EnqueueRefused::NotAFile {
                    kind: rustix::fs::FileType::Symlink,
                    lock: lock(),
                },
                "not-the-lane",
                "the descriptor sent is not a regular file, not a lane's guard: send the \
                 descriptor of .lane-a.lock.flock on which you hold the lock",
            ),
            (
                EnqueueRefused::LockFree { lock: lock() },
                "not-held",
                "nobody holds lane-a.lock's lock, so the descriptor sent does not hold it: take \
                 the lane (flock LOCK_EX on .lane-a.lock.flock, or acquire it as PROTOCOL.md \
                 says) before you enqueue it",
            ),
            (
                EnqueueRefused::NotHeld { lock: lock() },
                "not-held",
                "the descriptor is lane-a.lock's guard but does not hold its lock: another \
                 process does",
            ),
            (
                EnqueueRefused::NoDescriptorToCheck {
                    lock: lock(),
                    error: std::io::Error::from_raw_os_error(24),
                },
                "internal",
                &no_fd,
            ),
            (
                EnqueueRefused::NotTheLane {
                    lock: lock(),
                    error: Box::new(worklane_guard::acquire::Error::Symlink {
                        path: "/d/.lane-a.lock.flock".into(),
                    }),
                },
                "not-the-lane",
                "the descriptor is not the guard of lane-a.lock: guard /d/.lane-a.lock.flock is \
                 a symbolic link and is never followed; remove the link during a quiescent \
                 maintenance window (worklane recreates the guard)",
            ),
            (
                EnqueueRefused::LaneQueued {
                    lane: "docs".into(),
                },
                "lane-queued",
                "lane docs is already queued",
            ),
        ];
        for (refused, code, message) in cases {
            assert_eq!(
                wire(&refused.reply()),
                refusal(code, message),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn each_claim_cancel_and_retry_refusal_keeps_its_code_and_words() {
        let a = || "a-1".to_owned();
        let cases: Vec<(Box<dyn Refusal>, &str, &str)> = vec![
            (
                Box::new(ClaimRefused::NoAdmittedRow),
                "no-admitted-row",
                "no admitted row for this token",
            ),
            (
                Box::new(ClaimRefused::Permission {
                    attempt: a(),
                    enqueuer: Some(7),
                    uid: 8,
                }),
                "permission",
                "attempt a-1 was enqueued by uid 7: only that user (or root) may claim it, and \
                 uid 8 is neither",
            ),
            (
                Box::new(ClaimRefused::Permission {
                    attempt: a(),
                    enqueuer: None,
                    uid: 8,
                }),
                "permission",
                "attempt a-1 was enqueued by uid (unknown): only that user (or root) may claim \
                 it, and uid 8 is neither",
            ),
            (
                Box::new(CancelRefused::NoSuchAttempt { attempt: a() }),
                "no-such-attempt",
                "no attempt a-1 is queued, starting, failed or running",
            ),
            (
                Box::new(CancelRefused::Permission {
                    attempt: a(),
                    enqueuer: Some(7),
                }),
                "permission",
                "attempt a-1 is uid 7's: only that user, root or the slot directory's owner may \
                 cancel it",
            ),
            (
                Box::new(CancelRefused::Permission {
                    attempt: a(),
                    enqueuer: None,
                }),
                "permission",
                "attempt a-1 is uid (unknown)'s: only that user, root or the slot directory's \
                 owner may cancel it",
            ),
            (
                Box::new(RetryRefused::NoSuchAttempt { attempt: a() }),
                "no-such-attempt",
                "no attempt a-1 is queued or failed",
            ),
            (
                Box::new(RetryRefused::Damaged {
                    attempt: a(),
                    damage: Some("bad args".into()),
                }),
                "bad-request",
                "attempt a-1's row is damaged (bad args): it cannot be run; `worklane queue \
                 cancel a-1` drops it, then enqueue the work again",
            ),
            (
                Box::new(RetryRefused::Damaged {
                    attempt: a(),
                    damage: None,
                }),
                "bad-request",
                "attempt a-1's row is damaged (?): it cannot be run; `worklane queue cancel a-1` \
                 drops it, then enqueue the work again",
            ),
            (
                Box::new(RetryRefused::NotFailed {
                    attempt: a(),
                    state: State::Running,
                }),
                "not-failed",
                "attempt a-1 is running, not failed: only a failed attempt is retried",
            ),
            (
                Box::new(RetryRefused::Permission { attempt: a() }),
                "permission",
                "attempt a-1 is another user's: only that user, root or the slot directory's \
                 owner may retry it",
            ),
            (
                Box::new(RetryRefused::OtherUser { euid: 1000 }),
                "permission",
                "this dispatcher runs as uid 1000 and starts drivers only as itself",
            ),
        ];
        for (refused, code, message) in cases {
            assert_eq!(wire(&refused.reply()), refusal(code, message), "{refused}");
        }
    }

    #[test]
    fn successes_say_what_they_did_and_no_more() {
        assert_eq!(
            wire(&enqueued(&Enqueued {
                attempt: "a-1".into()
            })),
            r#"{"version":1,"ok":true,"attempt":"a-1"}"#
        );
        let (reply, fds) = claimed(Claimed {
            attempt: "a-1".into(),
            lane: "docs".into(),
            slot: "agent-0.lock".into(),
            args: vec!["driver".into()],
            env: [("LANE_X".to_owned(), "1".to_owned())]
                .into_iter()
                .collect(),
            fds: Vec::new(),
        });
        assert!(fds.is_empty());
        assert_eq!(
            wire(&reply),
            r#"{"version":1,"ok":true,"attempt":"a-1","lane":"lane-docs.lock","slot":"agent-0.lock","args":["driver"],"env":{"LANE_X":"1"}}"#
        );
        assert_eq!(
            wire(&cancelled("a-1", Cancelled::Dropped)),
            r#"{"version":1,"ok":true,"attempt":"a-1"}"#
        );
        assert_eq!(
            wire(&cancelled("a-1", Cancelled::Halting { grace_ms: 10_999 })),
            r#"{"version":1,"ok":true,"message":"its driver is being halted (SIGTERM, then SIGKILL after 10 s)","attempt":"a-1"}"#
        );
        assert_eq!(
            wire(&retried("a-1")),
            r#"{"version":1,"ok":true,"attempt":"a-1"}"#
        );
        assert_eq!(
            wire(&pruned(Vec::new())),
            r#"{"version":1,"ok":true,"history":[]}"#
        );
    }

    #[test]
    fn the_server_s_own_refusals_keep_their_words() {
        assert_eq!(
            wire(&unknown_version("2")),
            refusal(
                "bad-request",
                "protocol version 2 is not known here (this dispatcher speaks version 1)"
            )
        );
        assert_eq!(
            wire(&no_descriptor("list")),
            refusal("descriptors", "a list carries no descriptor")
        );
        assert_eq!(
            wire(&failed("cannot read the queue")),
            refusal("internal", "the dispatcher failed: cannot read the queue")
        );
        assert_eq!(
            wire(&too_long()),
            refusal(
                "internal",
                "the reply is longer than a message may be (64 KiB); ask for less"
            )
        );
        let error = serde_json::from_str::<serde_json::Value>("{").expect_err("not json");
        assert_eq!(
            wire(&not_a_request(&error)),
            refusal("bad-request", &format!("not a request: {error}"))
        );
    }
}
