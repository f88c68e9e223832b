//! What the service's operations decide, as types: each operation's outcome, and each of its
//! refusals with the data it names. A refusal's text (its `Display`) is what a person is told;
//! which code it goes by on the wire, and the reply itself, are the server's to say
//! (`server/reply.rs`, the one place replies are made).

use super::{DESCRIPTOR_RESERVE, State, TakeError, chain};
use rustix::fs::FileType;
use std::collections::BTreeMap;
use worklane_guard::Guard;

/// An accepted enqueue: its row is committed, and the dispatcher holds its lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The new attempt's id.
    pub attempt: String,
}

/// Why an enqueue was refused. Every refusal closes every descriptor that came with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnqueueRefused {
    /// Not exactly one descriptor came with it.
    #[error("an enqueue carries exactly one descriptor (the lane's guard), not {count}")]
    Descriptors {
        /// How many came.
        count: usize,
    },
    /// The host admits in waiter mode: nothing is queued.
    #[error(
        "this host admits in waiter mode (\"admission\": \"waiter\" in its config): run the work \
         with `worklane run` instead of queueing it"
    )]
    WaiterMode,
    /// A dispatcher that is not root starts drivers only as itself, and the caller is another
    /// uid.
    #[error(
        "this dispatcher runs as uid {euid} and starts drivers only as itself, so it queues no \
         work of uid {uid}: run the work with `worklane run`, or have the operator run the \
         dispatcher as root (contrib/systemd), which starts each driver as the one who \
         enqueued it"
    )]
    OtherUser {
        /// The uid the dispatcher runs as.
        euid: u32,
        /// The caller's uid.
        uid: u32,
    },
    /// The lane's name cannot name a lane.
    #[error("lane {lane:?}: 1 to 64 letters, digits, `-`, `_` or `.`")]
    BadLane {
        /// The name as sent.
        lane: String,
    },
    /// A name of a lane of its own, not said to be one.
    #[error(
        "lane {lane}: names of `q-` and 16 hex digits are reserved for lanes of their own, which \
         are removed when their attempt ends; choose another name, or say \"own_lane\": true \
         for a lane made for this attempt alone"
    )]
    ReservedLane {
        /// The lane.
        lane: String,
    },
    /// Said to be a lane of its own, but not named as one.
    #[error("lane {lane}: a lane of its own is named `q-` and 16 lowercase hex digits")]
    NotOwnLane {
        /// The lane.
        lane: String,
    },
    /// No queue start or no priority.
    #[error("an enqueue must carry its queue start (start_ms) and priority")]
    MissingField,
    /// An owner tag no config could name.
    #[error(
        "owner {owner:?}: a tag is 1 to {} bytes without white space or control characters",
        worklane_slotfile::config::MAX_OWNER_NAME
    )]
    BadOwner {
        /// The tag as sent.
        owner: String,
    },
    /// A weight the pool could never admit: 0, above `max_agents`, or above its owner's share.
    #[error("{}", chain(.error))]
    Unfit {
        /// The pool's word on it (its whole chain is the message).
        error: Box<TakeError>,
    },
    /// The caller (not root) has as many rows waiting as one user may.
    #[error(
        "uid {uid} has {waiting} attempts waiting, the most one user may have (the dispatcher's \
         --max-rows-per-user {max}): enqueue again when some have run, or cancel some \
         (`worklane queue ls`)"
    )]
    TooManyRows {
        /// The caller's uid.
        uid: u32,
        /// Its rows waiting (queued, starting or failed).
        waiting: u64,
        /// The most one user may have.
        max: u64,
    },
    /// The descriptors left to the process are those kept for root and for listing.
    #[error(
        "the dispatcher has {left} descriptors left and keeps {DESCRIPTOR_RESERVE} for root and \
         for listing (each waiting attempt holds its lane's): enqueue again when fewer wait, or \
         have the operator raise its limit of open files (LimitNOFILE= under systemd)"
    )]
    NoDescriptorsToSpare {
        /// How many the process may still open.
        left: u64,
    },
    /// The descriptor sent could not be examined (`fstat` failed).
    #[error("the descriptor sent cannot be examined (fstat: {errno})")]
    Unexaminable {
        /// Why.
        errno: rustix::io::Errno,
    },
    /// The descriptor sent is not a regular file, so no lane's guard.
    #[error(
        "the descriptor sent is {}, not a lane's guard: send the descriptor of .{lock}.flock on \
         which you hold the lock",
        kind_words(*.kind)
    )]
    NotAFile {
        /// What it is.
        kind: FileType,
        /// The lane's lock.
        lock: String,
    },
    /// The descriptor is the lane's guard, but nobody holds its lock.
    #[error(
        "nobody holds {lock}'s lock, so the descriptor sent does not hold it: take the lane \
         (flock LOCK_EX on .{lock}.flock, or acquire it as PROTOCOL.md says) before you enqueue \
         it"
    )]
    LockFree {
        /// The lane's lock.
        lock: String,
    },
    /// The descriptor is the lane's guard, but another open file description holds its lock.
    #[error("the descriptor is {lock}'s guard but does not hold its lock: another process does")]
    NotHeld {
        /// The lane's lock.
        lock: String,
    },
    /// The dispatcher has no descriptor left to open the lane's guard with: its own trouble,
    /// not the sender's.
    #[error(
        "the dispatcher cannot open {lock}'s guard to check it: it has no descriptor left \
         ({error}); raise its limit of open files (LimitNOFILE= under systemd)"
    )]
    NoDescriptorToCheck {
        /// The lane's lock.
        lock: String,
        /// The system's word (`EMFILE`, `ENFILE`), part of the message.
        error: std::io::Error,
    },
    /// The descriptor is not the lane's guard (another file).
    #[error("the descriptor is not the guard of {lock}: {error}")]
    NotTheLane {
        /// The lane's lock.
        lock: String,
        /// The guard's check, part of the message (boxed: a large value).
        error: Box<worklane_guard::acquire::Error>,
    },
    /// Another row of the lane waits (queued, starting or failed).
    #[error("lane {lane} is already queued")]
    LaneQueued {
        /// The lane.
        lane: String,
    },
}

/// What a descriptor that is not a regular file is, in words.
fn kind_words(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "a pipe (FIFO)",
        FileType::Directory => "a directory",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "not a regular file",
    }
}

/// A successful claim: the attempt now runs, and its lane's and slot's guards go to the
/// claimer.
#[derive(Debug)]
pub struct Claimed {
    /// The attempt.
    pub attempt: String,
    /// Its lane's name (its lock is [`super::lane_lock`] of it).
    pub lane: String,
    /// The agent slot's name.
    pub slot: String,
    /// The driver command.
    pub args: Vec<String>,
    /// The driver's environment, as the row kept it.
    pub env: BTreeMap<String, String>,
    /// The descriptors to send, lane first, then the slot.
    pub fds: Vec<Guard>,
}

/// Why a claim was refused. The row and its descriptors stay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimRefused {
    /// No starting attempt of this id has this token (a wrong token, a queued, expired or
    /// absent row): the seed's refusal, which says no more.
    #[error("no admitted row for this token")]
    NoAdmittedRow,
    /// The caller is neither the attempt's enqueuer nor root.
    #[error(
        "attempt {attempt} was enqueued by uid {}: only that user (or root) may claim it, and uid \
         {uid} is neither",
        uid_words(*.enqueuer)
    )]
    Permission {
        /// The attempt.
        attempt: String,
        /// Who enqueued it, where recorded.
        enqueuer: Option<u32>,
        /// The caller's uid.
        uid: u32,
    },
}

/// What became of a cancelled attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// Queued, starting or failed: dropped (its row, its lane, its reserved slot), and kept in
    /// the history as cancelled.
    Dropped,
    /// Running: its driver is being halted (its cancel marker, SIGTERM, then SIGKILL after
    /// `grace_ms`).
    Halting {
        /// SIGTERM to SIGKILL ([`super::Settings::cancel_grace_ms`]).
        grace_ms: u64,
    },
}

/// Why a cancel was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CancelRefused {
    /// No such attempt waits or runs.
    #[error("no attempt {attempt} is queued, starting, failed or running")]
    NoSuchAttempt {
        /// The attempt asked for.
        attempt: String,
    },
    /// The caller is not the enqueuer, root or the slot directory's owner.
    #[error(
        "attempt {attempt} is uid {}'s: only that user, root or the slot directory's owner may \
         cancel it",
        uid_words(*.enqueuer)
    )]
    Permission {
        /// The attempt.
        attempt: String,
        /// Who enqueued it, where recorded.
        enqueuer: Option<u32>,
    },
}

/// Why a retry was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetryRefused {
    /// No such attempt is stored.
    #[error("no attempt {attempt} is queued or failed")]
    NoSuchAttempt {
        /// The attempt asked for.
        attempt: String,
    },
    /// Its row is damaged: it cannot be run, only cancelled.
    #[error(
        "attempt {attempt}'s row is damaged ({}): it cannot be run; `worklane queue cancel \
         {attempt}` drops it, then enqueue the work again",
        .damage.as_deref().unwrap_or("?")
    )]
    Damaged {
        /// The attempt.
        attempt: String,
        /// What is wrong with the row, as recorded.
        damage: Option<String>,
    },
    /// Only a failed attempt is retried.
    #[error(
        "attempt {attempt} is {}, not failed: only a failed attempt is retried",
        .state.word()
    )]
    NotFailed {
        /// The attempt.
        attempt: String,
        /// Where it is.
        state: State,
    },
    /// The caller is not the enqueuer, root or the slot directory's owner.
    #[error(
        "attempt {attempt} is another user's: only that user, root or the slot directory's owner \
         may retry it"
    )]
    Permission {
        /// The attempt.
        attempt: String,
    },
    /// A row with no enqueuer runs as the one who retries it, and a dispatcher that is not
    /// root starts drivers only as itself.
    #[error("this dispatcher runs as uid {euid} and starts drivers only as itself")]
    OtherUser {
        /// The uid the dispatcher runs as.
        euid: u32,
    },
}

/// A uid as a refusal names it (`(unknown)` for a row that recorded none).
fn uid_words(uid: Option<u32>) -> String {
    uid.map_or("(unknown)".to_owned(), |uid| uid.to_string())
}
