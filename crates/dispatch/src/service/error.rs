//! Errors of the dispatcher's own state: which step failed and for which attempt, the cause
//! (the queue database, the slot pool, the lease layer, the socket) as its source.

use super::*;

/// Errors of the dispatcher's own state (a refused request is no error: it is its operation's
/// refusal, such as [`EnqueueRefused`]). Each variant says which step failed and for which
/// attempt; the cause (the queue database, the slot pool, the lease layer, the socket) is its
/// source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The queue database could not be opened (or a damaged one moved aside).
    #[error("cannot open the queue")]
    OpenQueue {
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// A database an older worklane kept in the slot directory could not be taken over (it
    /// is left where it was, and tried again at the next start).
    #[error("cannot take over the queue database an older worklane kept in the slot directory")]
    AdoptLegacy {
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The queue's rows could not be read.
    #[error("cannot read the queue to {purpose}")]
    ReadQueue {
        /// What the rows were read for (`recover its attempts`, `choose the next attempt`...).
        purpose: &'static str,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// One attempt's row could not be read.
    #[error("cannot read attempt {attempt} from the queue")]
    ReadAttempt {
        /// The attempt.
        attempt: String,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// Whether a lane is queued already could not be looked up.
    #[error("cannot look up whether lane {lane} is queued")]
    LookUpLane {
        /// The lane.
        lane: String,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// An accepted enqueue's row could not be stored.
    #[error("cannot queue attempt {attempt} of lane {lane}")]
    Insert {
        /// The attempt.
        attempt: String,
        /// Its lane.
        lane: String,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// An attempt's row could not be moved to a new state.
    #[error("cannot mark attempt {attempt} {}", state.word())]
    SetState {
        /// The attempt.
        attempt: String,
        /// The state it was to enter.
        state: State,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// An attempt's row could not be removed (claimed, cancelled, or its lane held by another
    /// at recovery), or its end kept in the history.
    #[error("cannot remove attempt {attempt} from the queue")]
    Remove {
        /// The attempt.
        attempt: String,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// The history of ended attempts could not be read or pruned.
    #[error("cannot {op} the history of ended attempts")]
    History {
        /// `read` or `prune`.
        op: &'static str,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
    /// At recovery, the lanes of the stored rows could not be acquired again (not busy:
    /// broken).
    #[error("cannot take back the lanes of {count} stored attempt(s)")]
    RetakeLanes {
        /// How many lanes were asked for.
        count: usize,
        /// Why; it names the lane (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::acquire::Error>,
    },
    /// An agent slot could not be taken for a queued attempt (not full: broken).
    #[error("cannot take an agent slot for attempt {attempt}")]
    TakeSlot {
        /// The attempt.
        attempt: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<TakeError>,
    },
    /// The dispatcher could not stand in the agents' line for its first queued attempt.
    #[error("cannot stand in the agents' line for attempt {attempt}")]
    JoinLine {
        /// The attempt at the head of the queue.
        attempt: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<TakeError>,
    },
    /// What each owner holds of the agents' units could not be counted, to choose the next
    /// attempt among owners.
    #[error("cannot count each owner's agent units to choose the next attempt")]
    CountShares {
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_admission::look::Error>,
    },
    /// The dispatcher's old place in the agents' line could not be left.
    #[error("cannot leave the dispatcher's place in the agents' line")]
    LeaveLine {
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_admission::line::Error>,
    },
    /// The listening socket failed.
    #[error("cannot {op}")]
    Socket {
        /// What was being done (`make the dispatcher's socket nonblocking`, `wait for
        /// connections on the dispatcher's socket`).
        op: &'static str,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(super) fn read_queue(purpose: &'static str) -> impl FnOnce(StoreError) -> Error {
        move |source| Error::ReadQueue {
            purpose,
            source: Box::new(source),
        }
    }

    pub(super) fn read_attempt(attempt: &str) -> impl FnOnce(StoreError) -> Error + '_ {
        move |source| Error::ReadAttempt {
            attempt: attempt.to_owned(),
            source: Box::new(source),
        }
    }

    pub(super) fn set_state(attempt: &str, state: State) -> impl FnOnce(StoreError) -> Error + '_ {
        move |source| Error::SetState {
            attempt: attempt.to_owned(),
            state,
            source: Box::new(source),
        }
    }

    pub(super) fn remove(attempt: &str) -> impl FnOnce(StoreError) -> Error + '_ {
        move |source| Error::Remove {
            attempt: attempt.to_owned(),
            source: Box::new(source),
        }
    }

    pub(super) fn history(op: &'static str) -> impl FnOnce(StoreError) -> Error {
        move |source| Error::History {
            op,
            source: Box::new(source),
        }
    }

    pub(super) fn leave_line(source: worklane_admission::line::Error) -> Error {
        Error::LeaveLine {
            source: Box::new(source),
        }
    }
}
