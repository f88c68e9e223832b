//! The client's errors, one per operation: connecting ([`connect::Error`]), a request etcd
//! did not answer ([`Unavailable`], naming the step as a [`Doing`]), taking, claiming and the
//! pool's administration ([`Error`]), and a held place that must be given up ([`Lost`]).

use crate::keys;

/// Errors of [`Fleet::connect`](crate::Fleet::connect).
pub mod connect {
    /// Why no client could be made.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// No endpoint given.
        #[error("no etcd endpoint given: name at least one, as http://HOST:PORT")]
        NoEndpoint,
        /// The runtime could not start.
        #[error("cannot start the fleet client's runtime")]
        Runtime(#[source] std::io::Error),
        /// The endpoints did not answer.
        #[error("cannot reach etcd at {endpoints}")]
        Unreachable {
            /// The endpoints, comma-separated.
            endpoints: String,
            /// The client's error.
            #[source]
            source: etcd_client::Error,
        },
    }
}

/// What the fleet client was doing when etcd did not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Doing {
    /// Setting a pool's cap.
    SettingCap {
        /// The pool.
        pool: String,
    },
    /// Reading a pool's cap and keys.
    ReadingPool {
        /// The pool.
        pool: String,
    },
    /// Granting the lease of a place (`pool agents`, `role coordinator`).
    GrantingLease {
        /// The place.
        what: String,
    },
    /// Revoking a lease no longer needed.
    RevokingLease,
    /// Putting a waiter's key into a pool.
    JoiningPool {
        /// The pool.
        pool: String,
    },
    /// Claiming a role.
    ClaimingRole {
        /// The role.
        role: String,
    },
    /// Giving a held place up.
    Releasing {
        /// The place.
        what: String,
    },
    /// Reading a credential's budget.
    ReadingBudget {
        /// Its key.
        key: String,
    },
    /// Writing a credential's budget.
    WritingBudget {
        /// Its key.
        key: String,
    },
    /// Reading every credential's budget.
    ReadingBudgets,
}

impl std::fmt::Display for Doing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Doing::SettingCap { pool } => write!(f, "setting the cap of pool {pool:?}"),
            Doing::ReadingPool { pool } => write!(f, "reading pool {pool:?}"),
            Doing::GrantingLease { what } => write!(f, "granting a lease for {what}"),
            Doing::RevokingLease => f.write_str("revoking a lease"),
            Doing::JoiningPool { pool } => write!(f, "joining pool {pool:?}"),
            Doing::ClaimingRole { role } => write!(f, "claiming role {role:?}"),
            Doing::Releasing { what } => write!(f, "releasing {what}"),
            Doing::ReadingBudget { key } => write!(f, "reading the budget {key}"),
            Doing::WritingBudget { key } => write!(f, "writing the budget {key}"),
            Doing::ReadingBudgets => f.write_str("reading the fleet's budgets"),
        }
    }
}

/// A request etcd did not answer, or refused: what was being done, where.
#[derive(Debug, thiserror::Error)]
#[error("etcd at {endpoints} {} while {doing}", if self.refused() { "refused" } else { "did not answer" })]
pub struct Unavailable {
    /// The endpoints, comma-separated.
    pub endpoints: String,
    /// What was being done.
    pub doing: Doing,
    /// The client's error, or `None` on a timeout.
    #[source]
    pub source: Option<etcd_client::Error>,
}

impl Unavailable {
    /// Whether etcd answered, with a refusal (its reason is the source), rather than not at
    /// all.
    #[must_use]
    pub fn refused(&self) -> bool {
        self.source
            .as_ref()
            .is_some_and(|e| !crate::client::unreachable(e))
    }
}

/// Errors of taking or claiming ([`Fleet::take`](crate::Fleet::take),
/// [`Fleet::claim_role`](crate::Fleet::claim_role)), of the pool's administration
/// ([`Fleet::set_cap`](crate::Fleet::set_cap), [`Fleet::status`](crate::Fleet::status)) and of
/// the shared budgets ([`Fleet::budget_take`](crate::Fleet::budget_take) and the rest).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A pool or role name that cannot be part of a key.
    #[error(transparent)]
    Name(#[from] keys::NameError),
    /// etcd did not answer.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    /// The cap stored in etcd is not a whole number.
    #[error(
        "the cap of pool {pool:?} in etcd ({key}) is {value:?}, not a whole number: set it again with `worklane fleet set-cap`"
    )]
    BadCap {
        /// The pool.
        pool: String,
        /// Its cap's key.
        key: String,
        /// What the key holds.
        value: String,
    },
    /// The place's lease went unconfirmed for half its TTL before the take or claim could
    /// report it held (etcd did not answer in time, or this process was stopped): it was
    /// given up, since etcd may expire the lease before the holder would know.
    #[error("the place was given up before it could be used")]
    GivenUp(#[source] Lost),
    /// A budget's take or observation lost [`MAX_LOST_WRITES`](crate::budget::MAX_LOST_WRITES)
    /// compare-and-swaps in a row: other hosts wrote the key between each of its reads and
    /// its write. Nothing was taken or recorded.
    #[error(
        "the fleet budget at {key} changed under each of this host's last {lost} writes (other \
         hosts take from it faster than this one can get a write in): nothing was taken or \
         recorded; try again"
    )]
    Contended {
        /// The budget's key.
        key: String,
        /// How many writes were lost in a row.
        lost: u32,
    },
    /// A waiting take's own key vanished: its lease expired while it waited.
    #[error("the place taken in pool {pool:?} was lost while waiting (its etcd lease expired)")]
    LostWhileWaiting {
        /// The pool.
        pool: String,
    },
}

/// Why a held place must be given up (see [`Hold::pulse`](crate::Hold::pulse)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Lost {
    /// No keepalive was confirmed for half the TTL: the lease may lapse before long.
    #[error(
        "the fleet lease of {what} has gone unconfirmed for {unconfirmed_ms} ms, half its TTL \
         of {ttl_ms} ms or more (etcd at {endpoints} did not answer in time, or this process \
         was stopped)"
    )]
    Unconfirmed {
        /// The place (`pool agents`, `role coordinator`).
        what: String,
        /// How long since the last confirmed keepalive was sent.
        unconfirmed_ms: u128,
        /// The TTL.
        ttl_ms: u128,
        /// The endpoints.
        endpoints: String,
    },
    /// etcd says the lease is gone (it expired, or was revoked).
    #[error("the fleet lease of {what} has expired in etcd: another holder may hold it now")]
    Expired {
        /// The place.
        what: String,
    },
}
