//! What the ledger answers: a call that may go ([`Grant`]), one that must not ([`Refused`]),
//! what became of an observation ([`Observed`]), what a take would meet ([`Peek`]), and the
//! typed reason the ledger could not do its part ([`Trouble`]), which never stops a call.

use crate::state::WaitWhy;
use worklane_lease::{Refusal, rfc3339_ms};

/// A call may go.
#[derive(Debug)]
pub struct Grant {
    /// Whether a unit was taken from a known window.
    pub counted: bool,
    /// Calls left in the resource's window after this one, when known.
    pub left: Option<u64>,
    /// Why the call goes without being accounted, when the ledger could not do its part (its
    /// lock busy for 0.5 s, its state unreadable or not writable). The call goes all the same;
    /// the caller should say so where a person sees it.
    pub unaccounted: Option<Trouble>,
    /// A model provider's take: the reservation its response's observation (or its release,
    /// if the call ends without one) names.
    pub reservation: Option<String>,
}

/// Why the ledger could not do its part for one take or observation: the call goes all the
/// same (a take, with [`Grant::unaccounted`]), or the response is not recorded (an
/// observation, [`Observed::Skipped`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Trouble {
    /// The budget's lock stayed busy: for [`LOCK_PATIENCE_MS`](super::LOCK_PATIENCE_MS) (a
    /// take) or at its one try (an observation).
    #[error("the budget lock {lock} stayed busy for {waited_ms} ms: {refusal}")]
    LockBusy {
        /// The lock's file name.
        lock: String,
        /// How long the ledger tried.
        waited_ms: u64,
        /// The lease layer's refusal at the last try: the holder's record as it was read (pid,
        /// host, owner, since when), and why it counts as live (boxed: a large value).
        refusal: Box<Refusal>,
    },
    /// The budget's lock could not be taken at all.
    #[error("cannot take the budget lock {lock}")]
    Lock {
        /// The lock's file name.
        lock: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::acquire::Error>,
    },
    /// The state file exists but this process cannot read it (permissions, an I/O error). It
    /// is left exactly as it is: a process that could not read the counts never replaces them.
    #[error(
        "the budget state exists but this process cannot read it; it was left as it is: give \
         it the slot directory's group and mode 0660, or run as a member of that group"
    )]
    StateUnreadable {
        /// The read error.
        #[source]
        source: worklane_slotfile::read::Error,
    },
    /// The state could not be written.
    #[error("cannot record the {what}")]
    NotWritten {
        /// `call` (a take) or `response` (an observation).
        what: &'static str,
        /// The write error.
        #[source]
        source: worklane_slotfile::write::Error,
    },
    /// The credential's state file name is refused by the slot directory.
    #[error("cannot name the budget state {name}")]
    Name {
        /// The name.
        name: String,
        /// Why.
        #[source]
        source: worklane_slotfile::name::Error,
    },
}

/// A call must not be made: the budget is spent or paused, and stayed so for 10 s. Both are
/// the provider's own kinds of error, status 429.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// The resource's window has no calls left.
    #[error(
        "rate_limited (429): no {resource} calls are left for this credential until {} \
         (waited {waited_ms} ms); the call was not made: retry after the reset",
        rfc3339_ms(*.reset_at)
    )]
    RateLimited {
        /// The resource.
        resource: String,
        /// When its window resets (ms since the Unix epoch).
        reset_at: u64,
        /// How long the take waited.
        waited_ms: u64,
    },
    /// A secondary limit paused every call on this credential.
    #[error(
        "secondary_rate_limited (429): every call on this credential is paused until {} \
         after a secondary rate limit (waited {waited_ms} ms); the call was not made: retry \
         after the pause",
        rfc3339_ms(*.until)
    )]
    SecondaryRateLimited {
        /// When the pause ends (ms since the Unix epoch).
        until: u64,
        /// How long the take waited.
        waited_ms: u64,
    },
}

impl Refused {
    /// The provider's error kind: `rate_limited` or `secondary_rate_limited`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Refused::RateLimited { .. } => "rate_limited",
            Refused::SecondaryRateLimited { .. } => "secondary_rate_limited",
        }
    }

    /// The HTTP status the refusal stands for: 429.
    #[must_use]
    pub fn status(&self) -> u16 {
        429
    }
}

/// What became of an observation.
#[derive(Debug)]
pub enum Observed {
    /// The state now reflects it.
    Recorded,
    /// Not recorded: the lock was busy (an observation tries it once and never waits), the
    /// state exists but could not be read (it is left as it is), or it could not be written.
    /// Nothing else follows from it.
    Skipped(Trouble),
}

/// What [`Ledger::peek`](crate::Ledger::peek) found.
#[derive(Debug)]
pub enum Peek {
    /// A take would go now; `left` calls in the resource's window, when known.
    Go {
        /// Calls left, when the window is known.
        left: Option<u64>,
    },
    /// A take would wait until `until` (ms), for `why`, and fail if that is over 10 s away.
    Wait {
        /// When the wait would end.
        until: u64,
        /// Spent window or pause.
        why: WaitWhy,
    },
    /// The state exists but cannot be read by this process: a take would go, unaccounted
    /// ([`Trouble::StateUnreadable`]).
    Unaccounted(Trouble),
}
