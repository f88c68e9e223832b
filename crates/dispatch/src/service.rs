//! The dispatcher's decisions: enqueue, admit, claim, expire, cancel, retry and recover, on the
//! store, the slot pool and the held lane descriptors. No socket here (see
//! [`super::server`]); time comes from the pool's clock, and starting a driver is the caller's
//! callback.
//!
//! Who may do what is decided here from the caller's peer credentials ([`Caller`]), never from
//! anything a message says: a row records its enqueuer's uid, gid and groups, its driver runs
//! as them, only that uid (or root) claims it, and only it, root or the directory's owner
//! cancels or retries it. A dispatcher that is not root starts drivers only as itself, so it
//! refuses an enqueue from any other uid.
//!
//! An operation decides, and says what it decided as a type: its outcome ([`Enqueued`],
//! [`Claimed`], [`Cancelled`]) or its refusal ([`EnqueueRefused`], [`ClaimRefused`],
//! [`CancelRefused`], [`RetryRefused`]), each refusal with the data it names and its words for
//! a person. It builds no reply: the server maps each to its reply and code (PROTOCOL.md 14.2).
//! An [`Error`] is the dispatcher's own failure, never a refusal.
//!
//! By operation: `enqueue` (a launcher's held lane taken in, within the per-user bounds),
//! `admit` (the next row under the slot pool, its driver's start, failed and expired starts),
//! `claim` (claim, cancel, retry), `runs` (running attempts' ends and halts), `recover` (the
//! start of a dispatcher), `views` (what `list` shows), `weights` (fair choice among owners),
//! `procs` (the pidfds of drivers and claimers, the only processes it signals), `outcome` (what
//! the operations decide: outcomes and refusals), `error`.

use crate::env::EnvFilter;
use crate::lane::is_own_lane;
pub use crate::lane::{lane_lock, valid_lane};
use crate::store::{Attempt, Ended, Enqueuer, Error as StoreError, Outcome, State, Store};
use crate::wire::{AttemptView, EndedView, Enqueue};
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use worklane_admission::take::Error as TakeError;
use worklane_admission::{Kind, Pool, Slot, Take};
use worklane_guard::Guard;
use worklane_journal::Event;
use worklane_lease::{Clock, Request};

mod admit;
mod claim;
mod enqueue;
mod error;
mod outcome;
mod procs;
mod recover;
mod runs;
mod views;
mod weights;

pub use admit::start_backoff_ms;
pub use error::Error;
pub use outcome::{
    CancelRefused, Cancelled, ClaimRefused, Claimed, EnqueueRefused, Enqueued, RetryRefused,
};
use views::ended_view;

pub use procs::Started;

pub use recover::Recovery;
pub use runs::{DriverEnded, cancel_marker};

/// The default claim interval: a starting attempt not claimed within it is queued again.
pub const DEFAULT_CLAIM_INTERVAL_MS: u64 = 60_000;
/// How many times a driver that cannot be started is tried before its attempt is parked as
/// `failed`.
pub const DEFAULT_START_ATTEMPTS: u32 = 5;
/// The wait after a driver's first failed start; it doubles with each further failure, up to
/// [`MAX_START_BACKOFF_MS`].
pub const DEFAULT_START_BACKOFF_MS: u64 = 1_000;
/// The longest wait between two starts of one attempt's driver.
pub const MAX_START_BACKOFF_MS: u64 = 60_000;
/// How long a running attempt's driver has, after `queue cancel` sent it SIGTERM, before its
/// process group is sent SIGKILL.
pub const DEFAULT_CANCEL_GRACE_MS: u64 = 10_000;
/// The most rows one user other than root may have waiting, by default.
pub const DEFAULT_MAX_ROWS_PER_USER: u64 = 64;
/// The descriptors the dispatcher keeps for root's enqueues and for every other request:
/// another user's enqueue (each row holds its lane's descriptor) is refused within this many
/// of the process's limit. Room for a full table of connections
/// ([`crate::server::MAX_CONNECTIONS`]) and 64 more, so that rows never take what root's and
/// every listing's connections need.
pub const DESCRIPTOR_RESERVE: u64 = 256 + 64;
/// How long an expired attempt's unclaimed driver has, after SIGTERM to its session, before
/// SIGKILL.
pub const EXPIRED_DRIVER_GRACE_MS: u64 = 3_000;
/// How long a row whose earlier driver is still being halted waits before it is looked at
/// again.
const DEFER_MS: u64 = 100;
/// How long the history keeps an ended attempt, and its log stays, by default (7 days).
pub const DEFAULT_RETENTION_MS: u64 = 7 * 24 * 3_600_000;

/// How the host admits work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Waiting work is queued with the dispatcher (the default).
    Dispatcher,
    /// Each launcher waits for itself; the dispatcher refuses enqueues.
    Waiter,
}

/// The dispatcher's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a starting attempt waits for its claim (strictly greater expires).
    pub claim_interval_ms: u64,
    /// Which variables a row keeps.
    pub env: EnvFilter,
    /// Dispatcher or waiter mode.
    pub mode: Mode,
    /// How many failed starts park an attempt as `failed` (at least 1).
    pub start_attempts: u32,
    /// The wait after a first failed start (doubling, at most [`MAX_START_BACKOFF_MS`]).
    pub start_backoff_ms: u64,
    /// SIGTERM to SIGKILL of a cancelled running attempt's driver.
    pub cancel_grace_ms: u64,
    /// How long ended attempts and their logs are kept.
    pub retention_ms: u64,
    /// The most rows one uid other than root may have waiting (queued, starting or failed);
    /// an enqueue beyond is refused ([`EnqueueRefused::TooManyRows`], code
    /// [`wire::code::LIMIT`](crate::wire::code::LIMIT) on the wire).
    pub max_rows_per_user: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            claim_interval_ms: DEFAULT_CLAIM_INTERVAL_MS,
            env: EnvFilter::default(),
            mode: Mode::Dispatcher,
            start_attempts: DEFAULT_START_ATTEMPTS,
            start_backoff_ms: DEFAULT_START_BACKOFF_MS,
            cancel_grace_ms: DEFAULT_CANCEL_GRACE_MS,
            retention_ms: DEFAULT_RETENTION_MS,
            max_rows_per_user: DEFAULT_MAX_ROWS_PER_USER,
        }
    }
}

/// Who sent a request: its connection's peer credentials, as the kernel tells them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Its pid, where the platform tells.
    pub pid: Option<u32>,
    /// Its effective uid.
    pub uid: u32,
    /// Its effective gid.
    pub gid: u32,
    /// Its supplementary groups.
    pub groups: Vec<u32>,
}

impl Caller {
    fn enqueuer(&self) -> Enqueuer {
        Enqueuer {
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
        }
    }
}

/// A driver process that ended, as the dispatcher's reaper saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Its pid.
    pub pid: u32,
    /// Its exit status, if it exited.
    pub status: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.status, self.signal) {
            (_, Some(signal)) => write!(f, "killed by signal {signal}"),
            (Some(status), None) => write!(f, "exit status {status}"),
            (None, None) => f.write_str("an unknown status"),
        }
    }
}

/// What the dispatcher holds for one attempt besides its row.
struct Held {
    /// The lane's guard, received from the launcher (or retaken at recovery).
    lane: Guard,
    /// The agent slot reserved while the attempt is starting.
    slot: Option<Slot>,
}

/// An expired start's driver being halted.
struct Halting {
    attempt: String,
    procs: procs::Procs,
    kill_at_ms: u64,
    killed: bool,
}

/// An admitted attempt whose driver the caller starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The attempt (state `starting`).
    pub attempt: Attempt,
    /// Its token.
    pub token: String,
    /// The slot reserved for it.
    pub slot: String,
}

/// What became of an attempt whose driver could not be started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartFailure {
    /// Queued again, not admitted before `retry_at_ms`; `failures` counted so far.
    Retry {
        /// Failed starts counted.
        failures: u32,
        /// The end of its backoff, ms since the Unix epoch.
        retry_at_ms: u64,
    },
    /// Failed `failures` times: parked as `failed`, its lane still held.
    Parked {
        /// Failed starts counted.
        failures: u32,
    },
    /// The host's own trouble (no space, no memory, no process or descriptor left): queued
    /// again without counting it against the attempt; the caller backs off all admissions.
    Host,
}

/// The dispatcher.
pub struct Dispatcher {
    pool: Pool,
    store: Store,
    settings: Settings,
    held: HashMap<String, Held>,
    /// Its place in the agents' line: the entry of its first queued row (`stand`), and that
    /// row's attempt id.
    place: Option<(worklane_admission::line::Place, String)>,
    /// The uid it runs as: only root starts drivers as others.
    euid: u32,
    /// The slot directory's owner, who may cancel, retry and prune anyone's attempts.
    owner: u32,
    /// The drivers it started and has not yet seen end (their exits come from the caller's
    /// reaper, [`Dispatcher::exited`]).
    children: HashSet<u32>,
    /// The drivers and claimers of the starting and running attempts, by pidfd: the only
    /// processes it ever signals.
    procs: HashMap<String, procs::Procs>,
    /// The unclaimed drivers of expired starts being halted.
    halting: Vec<Halting>,
    /// Drivers that ended while their attempt's lane was still held (handed to a process of
    /// theirs): kept until the lane is free.
    exits: HashMap<u32, Exit>,
    /// When each running attempt's lane was last probed (ms), so that it is not probed on
    /// every round.
    probed: HashMap<String, u64>,
    /// The cancelled running attempts whose driver was sent SIGTERM.
    termed: HashSet<String>,
    /// The running attempts whose driver's group was sent SIGKILL after the cancel's grace.
    killed: HashSet<String>,
    /// What recovery found at the start.
    recovery: Recovery,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("pool", &self.pool)
            .field("attempts", &self.held.len())
            .finish_non_exhaustive()
    }
}

/// 128 random bits as 32 lowercase hex digits, from the system's random source.
pub(crate) fn random_hex() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_err()
    {
        // No /dev/urandom: fall back to the guard crate's token twice (not for secrets, but a
        // token only has to be unguessable by the cooperating processes of one machine).
        let a = worklane_guard::random_token();
        let b = worklane_guard::random_token();
        return format!("{a}{b}");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Dispatcher {
    /// Stands in the agents' line for its first queued row that may be admitted now: an entry
    /// at that row's priority and original start, moved as rows are admitted, queued or
    /// cancelled (the new entry is made before the old is left, so no run slips in between),
    /// none when nothing is queued. A row waiting out a backoff after a failed start does not
    /// stand: a failing head never holds the machine's line.
    ///
    /// One entry stands for all the rows: they are admitted in the line's own order, so the
    /// first row's place is where the next of them stands, and a run behind it waits for it,
    /// while a run before it goes first. (An entry per row would make the directory that many
    /// files longer for every take's listings.)
    ///
    /// The entry says the row's weight and the owner whose share it counts against, as a
    /// waiting take's does (PROTOCOL.md 12.10); a new first row is a new entry, even at the
    /// same place. A first row that could never be admitted (its weight above the cap or its
    /// owner's share) is parked as `failed` instead, and the next one stands.
    pub fn stand(&mut self) -> Result<(), Error> {
        let now = self.now();
        let head = loop {
            let Some(head) = self.next_row(now, "find where to stand in the agents' line")? else {
                if let Some((place, _)) = self.place.take() {
                    place.leave().map_err(Error::leave_line)?;
                }
                return Ok(());
            };
            if self.place.as_ref().is_some_and(|(p, attempt)| {
                *attempt == head.id
                    && p.entry().priority == head.priority
                    && p.entry().start_ms == head.queued_at_ms
            }) {
                return Ok(());
            }
            let request = Request::new("worklane dispatcher")
                .field("attempt", head.id.clone())
                .field("lane", head.lane.clone());
            let ask = head.ask().unwrap_or_default();
            match self.pool.join_line_for(
                Kind::Agent,
                head.priority,
                head.queued_at_ms,
                &request,
                &ask,
            ) {
                Ok(place) => break (place, head.id),
                Err(e @ (TakeError::Weight { .. } | TakeError::WeightOverShare { .. })) => {
                    self.park_unfit(&head.id, &e, now)?;
                }
                Err(source) => {
                    return Err(Error::JoinLine {
                        attempt: head.id.clone(),
                        source: Box::new(source),
                    });
                }
            }
        };
        if let Some((old, _)) = self.place.replace(head) {
            old.leave().map_err(Error::leave_line)?;
        }
        Ok(())
    }

    fn now(&self) -> u64 {
        self.pool_clock().now_ms()
    }

    fn pool_clock(&self) -> std::sync::Arc<dyn Clock> {
        self.pool.clock()
    }

    /// The pool it admits into.
    #[must_use]
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Its settings.
    #[must_use]
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether `caller` may act on an attempt enqueued by `enqueuer`: root, the directory's
    /// owner, or the same uid.
    fn may_manage(&self, caller: &Caller, enqueuer: Option<&Enqueuer>) -> bool {
        caller.uid == 0 || caller.uid == self.owner || enqueuer.is_some_and(|e| e.uid == caller.uid)
    }
}

pub(crate) use worklane_stdx::chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_says_how_the_driver_ended() {
        let exit = |status, signal| {
            Exit {
                pid: 1,
                status,
                signal,
            }
            .to_string()
        };
        assert_eq!(exit(Some(3), None), "exit status 3");
        assert_eq!(exit(None, Some(9)), "killed by signal 9");
        assert_eq!(exit(None, None), "an unknown status");
    }
}
