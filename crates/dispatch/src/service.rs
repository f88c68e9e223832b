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

use crate::env::EnvFilter;
use crate::lane::is_own_lane;
pub use crate::lane::{lane_lock, valid_lane};
use crate::store::{Attempt, Ended, Enqueuer, Outcome, State, Store, db};
use crate::wire::{AttemptView, EndedView, Enqueue, Reply, code};
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use worklane_admission::{Error as PoolError, Kind, Pool, Slot, Take};
use worklane_guard::Guard;
use worklane_journal::Event;
use worklane_lease::{Clock, Request};

mod procs;
mod recover;
mod runs;
mod weights;

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
    /// an enqueue beyond is refused ([`wire::code::LIMIT`](crate::wire::code::LIMIT)).
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

/// A successful claim: what to send (the lane's guard, then the slot's).
#[derive(Debug)]
pub struct Claimed {
    /// The reply to send.
    pub reply: Reply,
    /// The descriptors to send with it, lane first.
    pub fds: Vec<Guard>,
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

/// Errors of the dispatcher's own state (a refusal of a request is a [`Reply`]). Each variant
/// says which step failed and for which attempt; the cause (the queue database, the slot pool,
/// the lease layer, the socket) is its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The queue database could not be opened (or a damaged one moved aside).
    #[error("cannot open the queue")]
    OpenQueue {
        /// Why.
        #[source]
        source: Box<db::Error>,
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
        source: Box<db::Error>,
    },
    /// One attempt's row could not be read.
    #[error("cannot read attempt {attempt} from the queue")]
    ReadAttempt {
        /// The attempt.
        attempt: String,
        /// Why.
        #[source]
        source: Box<db::Error>,
    },
    /// Whether a lane is queued already could not be looked up.
    #[error("cannot look up whether lane {lane} is queued")]
    LookUpLane {
        /// The lane.
        lane: String,
        /// Why.
        #[source]
        source: Box<db::Error>,
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
        source: Box<db::Error>,
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
        source: Box<db::Error>,
    },
    /// An attempt's row could not be removed (claimed, cancelled, or its lane held by another
    /// at recovery), or its end kept in the history.
    #[error("cannot remove attempt {attempt} from the queue")]
    Remove {
        /// The attempt.
        attempt: String,
        /// Why.
        #[source]
        source: Box<db::Error>,
    },
    /// The history of ended attempts could not be read or pruned.
    #[error("cannot {op} the history of ended attempts")]
    History {
        /// `read` or `prune`.
        op: &'static str,
        /// Why.
        #[source]
        source: Box<db::Error>,
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
        source: Box<PoolError>,
    },
    /// The dispatcher could not stand in the agents' line for its first queued attempt.
    #[error("cannot stand in the agents' line for attempt {attempt}")]
    JoinLine {
        /// The attempt at the head of the queue.
        attempt: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<PoolError>,
    },
    /// What each owner holds of the agents' units could not be counted, to choose the next
    /// attempt among owners.
    #[error("cannot count each owner's agent units to choose the next attempt")]
    CountShares {
        /// Why (boxed: a large cause).
        #[source]
        source: Box<PoolError>,
    },
    /// The dispatcher's old place in the agents' line could not be left.
    #[error("cannot leave the dispatcher's place in the agents' line")]
    LeaveLine {
        /// Why (boxed: a large cause).
        #[source]
        source: Box<PoolError>,
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
    fn read_queue(purpose: &'static str) -> impl FnOnce(db::Error) -> Error {
        move |source| Error::ReadQueue {
            purpose,
            source: Box::new(source),
        }
    }

    fn read_attempt(attempt: &str) -> impl FnOnce(db::Error) -> Error + '_ {
        move |source| Error::ReadAttempt {
            attempt: attempt.to_owned(),
            source: Box::new(source),
        }
    }

    fn set_state(attempt: &str, state: State) -> impl FnOnce(db::Error) -> Error + '_ {
        move |source| Error::SetState {
            attempt: attempt.to_owned(),
            state,
            source: Box::new(source),
        }
    }

    fn remove(attempt: &str) -> impl FnOnce(db::Error) -> Error + '_ {
        move |source| Error::Remove {
            attempt: attempt.to_owned(),
            source: Box::new(source),
        }
    }

    fn history(op: &'static str) -> impl FnOnce(db::Error) -> Error {
        move |source| Error::History {
            op,
            source: Box::new(source),
        }
    }

    fn leave_line(source: PoolError) -> Error {
        Error::LeaveLine {
            source: Box::new(source),
        }
    }
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

/// How many more descriptors this process may open (its soft limit less those open, counted
/// in `/proc/self/fd`); `None` where that cannot be told.
fn descriptors_left() -> Option<u64> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current?;
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count();
    Some(limit.saturating_sub(u64::try_from(open).unwrap_or(u64::MAX)))
}

/// Why a failed start is the host's trouble rather than the attempt's: resources of the
/// machine that run out for every attempt alike.
fn is_host_trouble(error: &std::io::Error) -> bool {
    use rustix::io::Errno;
    matches!(
        errno_of(error),
        Some(
            Errno::NOSPC
                | Errno::DQUOT
                | Errno::MFILE
                | Errno::NFILE
                | Errno::AGAIN
                | Errno::NOMEM
                | Errno::IO
        )
    )
}

/// The system error number of `error`, or of the first I/O error among its causes (a launch
/// may wrap the error of the step that failed, such as its log's creation).
fn errno_of(error: &std::io::Error) -> Option<rustix::io::Errno> {
    if let Some(errno) = rustix::io::Errno::from_io_error(error) {
        return Some(errno);
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = error.get_ref().map(|e| e as _);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && let Some(errno) = rustix::io::Errno::from_io_error(io)
        {
            return Some(errno);
        }
        cause = c.source();
    }
    None
}

/// The wait after the `failures`-th failed start: `base`, doubled for each further failure, at
/// most [`MAX_START_BACKOFF_MS`].
#[must_use]
pub fn start_backoff_ms(base: u64, failures: u32) -> u64 {
    let doublings = failures.saturating_sub(1).min(32);
    base.saturating_mul(1u64 << doublings)
        .min(MAX_START_BACKOFF_MS)
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
                Err(e @ (PoolError::Weight { .. } | PoolError::WeightOverShare { .. })) => {
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

    /// Handles an enqueue from `caller` with the descriptors that came with it. Every refusal
    /// closes every descriptor (they are dropped); an accepted row is committed before the
    /// reply.
    pub fn enqueue(
        &mut self,
        entry: Enqueue,
        mut fds: Vec<OwnedFd>,
        caller: &Caller,
    ) -> Result<Reply, Error> {
        if fds.len() != 1 {
            return Ok(Reply::refused(
                code::DESCRIPTORS,
                format!(
                    "an enqueue carries exactly one descriptor (the lane's guard), not {}",
                    fds.len()
                ),
            ));
        }
        if self.settings.mode == Mode::Waiter {
            return Ok(Reply::refused(
                code::WAITER_MODE,
                "this host admits in waiter mode (\"admission\": \"waiter\" in its config): run \
                 the work with `worklane run` instead of queueing it",
            ));
        }
        if self.euid != 0 && caller.uid != self.euid {
            return Ok(Reply::refused(
                code::PERMISSION,
                format!(
                    "this dispatcher runs as uid {} and starts drivers only as itself, so it \
                     queues no work of uid {}: run the work with `worklane run`, or have the \
                     operator run the dispatcher as root (contrib/systemd), which starts each \
                     driver as the one who enqueued it",
                    self.euid, caller.uid
                ),
            ));
        }
        if !valid_lane(&entry.lane) {
            return Ok(Reply::refused(
                code::BAD_REQUEST,
                format!(
                    "lane {:?}: 1 to 64 letters, digits, `-`, `_` or `.`",
                    entry.lane
                ),
            ));
        }
        match (is_own_lane(&entry.lane), entry.own_lane) {
            (true, false) => {
                return Ok(Reply::refused(
                    code::BAD_REQUEST,
                    format!(
                        "lane {}: names of `q-` and 16 hex digits are reserved for lanes of their \
                         own, which are removed when their attempt ends; choose another name, or \
                         say \"own_lane\": true for a lane made for this attempt alone",
                        entry.lane
                    ),
                ));
            }
            (false, true) => {
                return Ok(Reply::refused(
                    code::BAD_REQUEST,
                    format!(
                        "lane {}: a lane of its own is named `q-` and 16 lowercase hex digits",
                        entry.lane
                    ),
                ));
            }
            _ => {}
        }
        let (Some(start_ms), Some(priority)) = (entry.start_ms, entry.priority) else {
            return Ok(Reply::refused(
                code::MISSING_FIELD,
                "an enqueue must carry its queue start (start_ms) and priority",
            ));
        };
        if let Some(refused) = self.refuse_ask(&entry, caller) {
            return Ok(refused);
        }
        if let Some(refused) = self.refuse_over_bounds(caller)? {
            return Ok(refused);
        }
        let lock = lane_lock(&entry.lane);
        let fd = fds.remove(0);
        if let Some(refused) = self.refuse_descriptor(&fd, &lock) {
            return Ok(refused);
        }
        let dir = self.pool.dir();
        let lane = match Guard::from_received(fd, dir, dir.path(), &lock) {
            Ok(guard) => guard,
            Err(worklane_guard::acquire::Error::NotHeld { .. }) => {
                return Ok(Reply::refused(
                    code::NOT_HELD,
                    format!(
                        "the descriptor is {lock}'s guard but does not hold its lock: another process does"
                    ),
                ));
            }
            // The dispatcher's own trouble (no descriptor left to open the guard with) is not
            // the sender's: said as the dispatcher's failure.
            Err(worklane_guard::acquire::Error::Io { source, .. })
                if matches!(
                    rustix::io::Errno::from_io_error(&source),
                    Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)
                ) =>
            {
                return Ok(Reply::refused(
                    code::INTERNAL,
                    format!(
                        "the dispatcher cannot open {lock}'s guard to check it: it has no \
                         descriptor left ({source}); raise its limit of open files \
                         (LimitNOFILE= under systemd)"
                    ),
                ));
            }
            Err(e) => {
                return Ok(Reply::refused(
                    code::NOT_THE_LANE,
                    format!("the descriptor is not the guard of {lock}: {e}"),
                ));
            }
        };
        // A run of the lane that ended a moment ago (we hold its lock now, so it did) is
        // finished first; any other row of the lane makes this one a second.
        if let Some(previous) =
            self.store
                .lane_row(&entry.lane)
                .map_err(|source| Error::LookUpLane {
                    lane: entry.lane.clone(),
                    source: Box::new(source),
                })?
        {
            if previous.state == State::Running {
                self.finish(&previous, None)?;
            } else {
                return Ok(Reply::refused(
                    code::LANE_QUEUED,
                    format!("lane {} is already queued", entry.lane),
                ));
            }
        }
        let now = self.now();
        // The launcher's record names the epoch it acquired the lane at (read under the guard
        // we now hold); recovery compares it with the lane's epoch then.
        let lane_epoch = self
            .pool
            .dir()
            .file(&lock)
            .ok()
            .and_then(|path| path.read().ok().flatten())
            .and_then(|raw| worklane_lease::Record::parse(&raw).ok())
            .and_then(|r| r.epoch);
        let attempt = Attempt {
            placement: entry.placement,
            args: entry.args,
            stage: entry.stage,
            env: self
                .settings
                .env
                .keep(entry.env.into_iter().map(|(k, v)| (k.into(), v.into()))),
            lane_epoch,
            enqueuer: Some(caller.enqueuer()),
            own_lane: entry.own_lane,
            weight: entry.weight.unwrap_or(1),
            owner: entry.owner,
            ..Attempt::queued(
                format!("a-{}", random_hex()),
                entry.lane,
                start_ms,
                priority,
                now,
            )
        };
        self.store
            .insert(&attempt)
            .map_err(|source| Error::Insert {
                attempt: attempt.id.clone(),
                lane: attempt.lane.clone(),
                source: Box::new(source),
            })?;
        self.pool.journal().emit(Event::DispatchEnqueued {
            attempt: attempt.id.clone(),
            lane: attempt.lane.clone(),
            priority: attempt.priority,
            uid: caller.uid,
        });
        let mut reply = Reply::ok();
        reply.attempt = Some(attempt.id.clone());
        self.held.insert(attempt.id, Held { lane, slot: None });
        Ok(reply)
    }

    /// A refusal of an enqueue by `caller` (not root: root is never bounded) past the bounds
    /// that keep one user from starving the others: its rows waiting
    /// ([`Settings::max_rows_per_user`]), and the descriptors left to the process (each row
    /// holds one; [`DESCRIPTOR_RESERVE`] are kept for root and for every other request).
    fn refuse_over_bounds(&self, caller: &Caller) -> Result<Option<Reply>, Error> {
        if caller.uid == 0 {
            return Ok(None);
        }
        let waiting = self
            .store
            .waiting_of(caller.uid)
            .map_err(Error::read_queue("count a user's waiting attempts"))?;
        if waiting >= self.settings.max_rows_per_user {
            return Ok(Some(Reply::refused(
                code::LIMIT,
                format!(
                    "uid {} has {waiting} attempts waiting, the most one user may have (the \
                     dispatcher's --max-rows-per-user {}): enqueue again when some have run, \
                     or cancel some (`worklane queue ls`)",
                    caller.uid, self.settings.max_rows_per_user
                ),
            )));
        }
        if let Some(left) = descriptors_left()
            && left < DESCRIPTOR_RESERVE
        {
            return Ok(Some(Reply::refused(
                code::LIMIT,
                format!(
                    "the dispatcher has {left} descriptors left and keeps {DESCRIPTOR_RESERVE} \
                     for root and for listing (each waiting attempt holds its lane's): enqueue \
                     again when fewer wait, or have the operator raise its limit of open files \
                     (LimitNOFILE= under systemd)"
                ),
            )));
        }
        Ok(None)
    }

    /// A refusal for a descriptor that cannot be the lane's guard, named by what it is (a
    /// pipe, a directory, a socket), or for a guard whose lock nobody holds: a launcher must
    /// hold the lane it hands over.
    fn refuse_descriptor(&self, fd: &OwnedFd, lock: &str) -> Option<Reply> {
        use rustix::fs::FileType;
        let kind = match rustix::fs::fstat(fd) {
            Ok(stat) => FileType::from_raw_mode(stat.st_mode),
            Err(e) => {
                return Some(Reply::refused(
                    code::NOT_THE_LANE,
                    format!("the descriptor sent cannot be examined (fstat: {e})"),
                ));
            }
        };
        if kind != FileType::RegularFile {
            let what = match kind {
                FileType::Fifo => "a pipe (FIFO)",
                FileType::Directory => "a directory",
                FileType::Socket => "a socket",
                FileType::CharacterDevice => "a character device",
                FileType::BlockDevice => "a block device",
                _ => "not a regular file",
            };
            return Some(Reply::refused(
                code::NOT_THE_LANE,
                format!(
                    "the descriptor sent is {what}, not a lane's guard: send the descriptor of \
                     .{lock}.flock on which you hold the lock"
                ),
            ));
        }
        // The lane's guard (device and inode as the name's), but free (a fresh description
        // of it takes its lock): nobody holds the lane, so neither does the sender. (Another
        // file is refused by the guard's own check, naming it.)
        let path = self.pool.dir().file(lock).ok()?;
        let sent = rustix::fs::fstat(fd).ok()?;
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let same = path
            .guard_id()
            .is_some_and(|id| (id.dev, id.ino) == (sent.st_dev as u64, sent.st_ino as u64));
        if !same {
            return None;
        }
        if let Ok(Some(free)) = path.try_guard() {
            drop(free);
            return Some(Reply::refused(
                code::NOT_HELD,
                format!(
                    "nobody holds {lock}'s lock, so the descriptor sent does not hold it: take \
                     the lane (flock LOCK_EX on .{lock}.flock, or acquire it as PROTOCOL.md \
                     says) before you enqueue it"
                ),
            ));
        }
        None
    }

    /// Ends every starting attempt older than the claim interval (strictly greater, so at
    /// exactly the interval it is still starting): its unclaimed driver's whole session is
    /// halted through the pidfd kept since its start (SIGTERM now, SIGKILL after
    /// [`EXPIRED_DRIVER_GRACE_MS`]), its slot released and its token cleared (a late claim is
    /// refused), and the expiry counts as a failed start of the attempt
    /// ([`Dispatcher::start_failed`]: queued again after the backoff, never before its old
    /// driver is gone, or parked as `failed` after [`Settings::start_attempts`]). While it
    /// backs off, the rows behind it are admitted.
    pub fn expire(&mut self) -> Result<Vec<String>, Error> {
        let now = self.now();
        let mut expired = Vec::new();
        let starting = self
            .store
            .starting()
            .map_err(Error::read_queue("find the starting attempts"))?;
        for attempt in starting {
            if now.saturating_sub(attempt.state_at_ms) <= self.settings.claim_interval_ms {
                continue;
            }
            if let Some(procs) = self.procs.remove(&attempt.id) {
                procs.signal(rustix::process::Signal::TERM, true);
                self.halting.push(Halting {
                    attempt: attempt.id.clone(),
                    procs,
                    kill_at_ms: now.saturating_add(EXPIRED_DRIVER_GRACE_MS),
                    killed: false,
                });
            }
            let why = format!(
                "its driver{} did not claim it within the claim interval ({} ms), so it was \
                 halted",
                attempt
                    .driver_pid
                    .map_or(String::new(), |pid| format!(" (pid {pid})")),
                self.settings.claim_interval_ms
            );
            self.start_failed(&attempt.id, &why, false)?;
            self.pool.journal().emit(Event::DispatchExpired {
                attempt: attempt.id.clone(),
                lane: attempt.lane.clone(),
                starting_ms: now.saturating_sub(attempt.state_at_ms),
            });
            expired.push(attempt.id);
        }
        Ok(expired)
    }

    /// Moves on the halts of expired attempts' drivers: SIGKILL to the session of one still
    /// alive after its grace; one gone is forgotten.
    pub fn halt_expired(&mut self) {
        let now = self.now();
        self.halting.retain_mut(|h| {
            if !h.procs.driver_alive() {
                return false;
            }
            if !h.killed && now >= h.kill_at_ms {
                h.procs.signal(rustix::process::Signal::KILL, true);
                h.killed = true;
            }
            true
        });
    }

    /// Whether attempt `id`'s driver of an earlier, expired start is still alive.
    fn old_driver_alive(&self, id: &str) -> bool {
        self.halting
            .iter()
            .any(|h| h.attempt == id && h.procs.driver_alive())
    }

    /// Admits the next queued attempt if the pool has room (STOP, drain and `max_agents` as for
    /// `worklane run`): it takes an agent slot for it and makes it `starting` with a fresh
    /// token. `None` when nothing may be admitted now or the pool is full or refusing.
    pub fn admit_next(&mut self) -> Result<Option<Admitted>, Error> {
        let now = self.now();
        let Some(attempt) = self.next_row(now, "choose the next attempt")? else {
            return Ok(None);
        };
        // Never two drivers of one attempt: while the one of an expired start is still being
        // halted, the row waits a moment more (and the rows behind it go on).
        if self.old_driver_alive(&attempt.id) {
            self.store
                .defer(&attempt.id, now.saturating_add(DEFER_MS))
                .map_err(Error::set_state(&attempt.id, State::Queued))?;
            return self.admit_next();
        }
        let request = Request::new("worklane dispatcher")
            .field("attempt", attempt.id.clone())
            .field("lane", attempt.lane.clone());
        // Its weight, counted against its enqueuer's share (a row without an enqueuer is
        // never admitted: recovery parks it).
        let ask = attempt.ask().unwrap_or_default();
        // The row it stands for may have changed since it last stood (with shares, what the
        // owners hold decides which row is next): its entry must be this row's, or the entry
        // would stand in the row's own way.
        if self.place.as_ref().is_some_and(|(_, id)| *id != attempt.id) {
            self.stand()?;
        }
        // In the line of agents at the row's own place: a waiting `worklane run` before it
        // (higher priority, or the same and an earlier start) goes first.
        // A refusal here is no take refused (the row stays queued): not journaled.
        // A look first, taking no lock and writing nothing: a pass at the cap changes no file
        // (no epoch of slots.lock published for a take that could take nothing).
        let fits = self
            .pool
            .may_fit(Kind::Agent, attempt.weight)
            .map_err(|source| Error::TakeSlot {
                attempt: attempt.id.clone(),
                source: Box::new(source),
            })?;
        if !fits {
            return Ok(None);
        }
        let own = match self.place.as_ref() {
            Some((own, id)) if *id == attempt.id => Some(own.entry()),
            _ => None,
        };
        let taken = self.pool.admit(
            Kind::Agent,
            &request,
            &ask,
            attempt.priority,
            attempt.queued_at_ms,
            own,
        );
        let taken = match taken {
            Ok(taken) => taken,
            Err(e @ (PoolError::Weight { .. } | PoolError::WeightOverShare { .. })) => {
                // It can never be admitted under this cap or share: parked, and the next row
                // stands in its place.
                self.park_unfit(&attempt.id, &e, now)?;
                self.stand()?;
                return Ok(None);
            }
            Err(source) => {
                return Err(Error::TakeSlot {
                    attempt: attempt.id.clone(),
                    source: Box::new(source),
                });
            }
        };
        let slot = match taken {
            Take::Held(slot) => slot,
            Take::Blocked(_) => return Ok(None),
        };
        let token = random_hex();
        self.store
            .set_state(&attempt.id, State::Starting, Some(&token), now)
            .map_err(Error::set_state(&attempt.id, State::Starting))?;
        let name = slot.name().to_owned();
        if let Some(held) = self.held.get_mut(&attempt.id) {
            held.slot = Some(slot);
        }
        self.pool.journal().emit(Event::DispatchAdmitted {
            attempt: attempt.id.clone(),
            lane: attempt.lane.clone(),
            slot: name.clone(),
            waited_ms: now.saturating_sub(attempt.queued_at_ms),
        });
        // The next queued row stands in line now (before the admitted row's entry goes).
        self.stand()?;
        Ok(Some(Admitted {
            attempt: Attempt {
                state: State::Starting,
                token: Some(token.clone()),
                state_at_ms: now,
                ..attempt
            },
            token,
            slot: name,
        }))
    }

    /// An admitted attempt's driver started as `pid` (a child of this process, whose end the
    /// caller reports through [`Dispatcher::exited`]), with a pidfd of it where the launcher
    /// could open one (the only handle the dispatcher signals it by).
    pub fn started(&mut self, id: &str, started: impl Into<Started>) -> Result<(), Error> {
        let Started { pid, pidfd } = started.into();
        self.children.insert(pid);
        self.procs.insert(
            id.to_owned(),
            procs::Procs {
                driver: pidfd.map(|fd| procs::Proc::new(pid, fd)),
                claimer: None,
            },
        );
        self.store
            .started(id, pid)
            .map_err(Error::set_state(id, State::Starting))?;
        Ok(())
    }

    /// An admitted attempt's driver could not be started (`error`): its slot is released, and
    /// it is queued again after a backoff that doubles with each failure, or parked as
    /// `failed` after [`Settings::start_attempts`] of them. The host's own trouble (no space,
    /// memory, processes or descriptors) is not counted against it: it is queued again and
    /// the caller backs off every admission.
    pub fn start_failed(
        &mut self,
        id: &str,
        error: &str,
        host: bool,
    ) -> Result<StartFailure, Error> {
        if let Some(held) = self.held.get_mut(id) {
            held.slot = None;
        }
        let now = self.now();
        let Some(attempt) = self.store.get(id).map_err(Error::read_attempt(id))? else {
            return Ok(StartFailure::Host);
        };
        let (state, failures, retry_at_ms, outcome) = if host {
            (State::Queued, attempt.failures, now, StartFailure::Host)
        } else {
            let failures = attempt.failures.saturating_add(1);
            if failures >= self.settings.start_attempts.max(1) {
                (
                    State::Failed,
                    failures,
                    0,
                    StartFailure::Parked { failures },
                )
            } else {
                let retry_at_ms =
                    now.saturating_add(start_backoff_ms(self.settings.start_backoff_ms, failures));
                (
                    State::Queued,
                    failures,
                    retry_at_ms,
                    StartFailure::Retry {
                        failures,
                        retry_at_ms,
                    },
                )
            }
        };
        self.store
            .start_failed(id, state, failures, error, retry_at_ms, now)
            .map_err(Error::set_state(id, state))?;
        Ok(outcome)
    }

    /// [`Dispatcher::start_failed`] for the error a launch returned, its kind decided by
    /// its error number (no space, memory, processes or descriptors: the host's).
    pub fn launch_failed(
        &mut self,
        id: &str,
        error: &std::io::Error,
    ) -> Result<StartFailure, Error> {
        let text = chain(error);
        self.start_failed(id, &text, is_host_trouble(error))
    }

    /// Claims a starting attempt with its token, for `caller` (who must be the one who
    /// enqueued it, or root): the row leaves the queue (it runs now, holding nothing of the
    /// dispatcher's) and the lane's and slot's guards are returned to be sent. A wrong token,
    /// a queued row, an expired or absent one is refused, and the row and its descriptors
    /// stay.
    pub fn claim(
        &mut self,
        id: &str,
        token: &str,
        caller: &Caller,
    ) -> Result<Result<Claimed, Reply>, Error> {
        self.claim_by(id, token, caller, None)
    }

    /// [`Dispatcher::claim`] by a claimer whose connection gave a pidfd of it (`SO_PEERPIDFD`):
    /// kept, so that a cancel can signal exactly that process.
    pub fn claim_by(
        &mut self,
        id: &str,
        token: &str,
        caller: &Caller,
        claimer: Option<OwnedFd>,
    ) -> Result<Result<Claimed, Reply>, Error> {
        self.expire()?;
        let refused = || Reply::refused(code::NO_ADMITTED_ROW, "no admitted row for this token");
        let Some(attempt) = self.store.get(id).map_err(Error::read_attempt(id))? else {
            return Ok(Err(refused()));
        };
        if attempt.state != State::Starting || attempt.token.as_deref() != Some(token) {
            return Ok(Err(refused()));
        }
        if caller.uid != 0
            && attempt
                .enqueuer
                .as_ref()
                .is_none_or(|e| e.uid != caller.uid)
        {
            return Ok(Err(Reply::refused(
                code::PERMISSION,
                format!(
                    "attempt {id} was enqueued by uid {}: only that user (or root) may claim it, \
                     and uid {} is neither",
                    attempt
                        .enqueuer
                        .as_ref()
                        .map_or("(unknown)".to_owned(), |e| e.uid.to_string()),
                    caller.uid
                ),
            )));
        }
        let Some(held) = self.held.remove(id) else {
            return Ok(Err(refused()));
        };
        let Some(slot) = held.slot else {
            self.held.insert(id.to_owned(), held);
            return Ok(Err(refused()));
        };
        let now = self.now();
        self.store
            .running(id, caller.pid.or(attempt.driver_pid), now)
            .map_err(Error::set_state(id, State::Running))?;
        let slot_name = slot.name().to_owned();
        let Some(slot_guard) = slot.hand_over() else {
            return Ok(Err(refused()));
        };
        if let (Some(pid), Some(fd)) = (caller.pid, claimer) {
            self.procs.entry(id.to_owned()).or_default().claimer = Some(procs::Proc::new(pid, fd));
        }
        self.pool.journal().emit(Event::DispatchClaimed {
            attempt: attempt.id.clone(),
            lane: attempt.lane.clone(),
            slot: slot_name.clone(),
            admitted_ms: now.saturating_sub(attempt.state_at_ms),
        });
        let mut reply = Reply::ok();
        reply.attempt = Some(attempt.id);
        reply.lane = Some(lane_lock(&attempt.lane));
        reply.slot = Some(slot_name);
        reply.args = Some(attempt.args);
        reply.env = Some(attempt.env);
        Ok(Ok(Claimed {
            reply,
            fds: vec![held.lane, slot_guard],
        }))
    }

    /// Cancels attempt `id` for `caller`. A queued, starting or failed one is dropped (its
    /// row, its lane and its reserved slot; a lane of its own is retired) and kept in the
    /// history as cancelled; a running one's driver is halted as STOP halts
    /// a command (its cancel marker, then SIGTERM, then SIGKILL). The
    /// reply says which, or why not.
    pub fn cancel(&mut self, id: &str, caller: &Caller) -> Result<Reply, Error> {
        let Some(attempt) = self.store.get(id).map_err(Error::read_attempt(id))? else {
            return Ok(Reply::refused(
                code::NO_SUCH_ATTEMPT,
                format!("no attempt {id} is queued, starting, failed or running"),
            ));
        };
        if !self.may_manage(caller, attempt.enqueuer.as_ref()) {
            return Ok(Reply::refused(
                code::PERMISSION,
                format!(
                    "attempt {id} is uid {}'s: only that user, root or the slot directory's owner \
                     may cancel it",
                    attempt
                        .enqueuer
                        .as_ref()
                        .map_or("(unknown)".to_owned(), |e| e.uid.to_string())
                ),
            ));
        }
        self.pool.journal().emit(Event::DispatchCancelled {
            attempt: id.to_owned(),
            lane: attempt.lane.clone(),
            state: attempt.state.word().to_owned(),
            uid: caller.uid,
        });
        let mut reply = Reply::ok();
        reply.attempt = Some(id.to_owned());
        if attempt.state == State::Running {
            self.halt(&attempt, caller.uid)?;
            reply.message = Some(format!(
                "its driver is being halted (SIGTERM, then SIGKILL after {} s)",
                self.settings.cancel_grace_ms / 1000
            ));
            return Ok(reply);
        }
        drop(self.held.remove(id));
        let now = self.now();
        // A starting attempt's driver, which would claim in vain, is halted as an expired
        // one's is.
        if let Some(procs) = self.procs.remove(id) {
            procs.signal(rustix::process::Signal::TERM, true);
            self.halting.push(Halting {
                attempt: id.to_owned(),
                procs,
                kill_at_ms: now.saturating_add(EXPIRED_DRIVER_GRACE_MS),
                killed: false,
            });
        }
        let ended = Ended {
            detail: format!(
                "cancelled by uid {} while {}",
                caller.uid,
                attempt.state.word()
            ),
            ..self.ended_of(&attempt, Outcome::Cancelled, now)
        };
        self.store.end(&ended).map_err(Error::remove(id))?;
        if attempt.own_lane {
            let _ = crate::lane::retire_own_lane(self.pool.dir(), &attempt.lane);
        }
        Ok(reply)
    }

    /// Queues a failed attempt again from the start (no failures counted, no backoff), for
    /// `caller`. A row queued before worklane recorded who enqueued (it has no enqueuer) may be
    /// retried by root or the directory's owner only, and then runs as the one who retried it.
    pub fn retry(&mut self, id: &str, caller: &Caller) -> Result<Reply, Error> {
        let Some(attempt) = self.store.get(id).map_err(Error::read_attempt(id))? else {
            return Ok(Reply::refused(
                code::NO_SUCH_ATTEMPT,
                format!("no attempt {id} is queued or failed"),
            ));
        };
        if attempt.damaged {
            return Ok(Reply::refused(
                code::BAD_REQUEST,
                format!(
                    "attempt {id}'s row is damaged ({}): it cannot be run; `worklane queue cancel \
                     {id}` drops it, then enqueue the work again",
                    attempt.last_error.as_deref().unwrap_or("?")
                ),
            ));
        }
        if attempt.state != State::Failed {
            return Ok(Reply::refused(
                code::NOT_FAILED,
                format!(
                    "attempt {id} is {}, not failed: only a failed attempt is retried",
                    attempt.state.word()
                ),
            ));
        }
        if !self.may_manage(caller, attempt.enqueuer.as_ref()) {
            return Ok(Reply::refused(
                code::PERMISSION,
                format!(
                    "attempt {id} is another user's: only that user, root or the slot \
                     directory's owner may retry it"
                ),
            ));
        }
        if attempt.enqueuer.is_none() && self.euid != 0 && caller.uid != self.euid {
            return Ok(Reply::refused(
                code::PERMISSION,
                format!(
                    "this dispatcher runs as uid {} and starts drivers only as itself",
                    self.euid
                ),
            ));
        }
        let enqueuer = attempt.enqueuer.is_none().then(|| caller.enqueuer());
        let now = self.now();
        self.store
            .retry(id, enqueuer.as_ref(), now)
            .map_err(Error::set_state(id, State::Queued))?;
        let mut reply = Reply::ok();
        reply.attempt = Some(id.to_owned());
        Ok(reply)
    }

    /// Every attempt, in admission order.
    pub fn list(&self) -> Result<Vec<AttemptView>, Error> {
        Ok(self
            .store
            .all()
            .map_err(Error::read_queue("list the attempts"))?
            .into_iter()
            .map(|a| self.view_of(a))
            .collect())
    }

    /// The history of ended attempts, newest first.
    pub fn history(&self) -> Result<Vec<EndedView>, Error> {
        Ok(self
            .store
            .history(crate::store::MAX_ENDED)
            .map_err(Error::history("read"))?
            .into_iter()
            .map(ended_view)
            .collect())
    }

    /// The attempt `id` as [`Dispatcher::list`] shows it, if stored.
    pub fn view(&self, id: &str) -> Result<Option<AttemptView>, Error> {
        Ok(self
            .store
            .get(id)
            .map_err(Error::read_attempt(id))?
            .map(|a| self.view_of(a)))
    }

    fn view_of(&self, a: Attempt) -> AttemptView {
        AttemptView {
            slot: self
                .held
                .get(&a.id)
                .and_then(|h| h.slot.as_ref())
                .map(|s| s.name().to_owned()),
            log: a.log_name(),
            attempt: a.id,
            lane: a.lane,
            state: a.state.word().to_owned(),
            start_ms: a.queued_at_ms,
            priority: a.priority,
            stage: a.stage,
            placement: a.placement,
            state_at_ms: a.state_at_ms,
            args: a.args,
            uid: a.enqueuer.map(|e| e.uid),
            failures: a.failures,
            last_error: a.last_error,
            retry_at_ms: (a.retry_at_ms > 0 && a.state == State::Queued).then_some(a.retry_at_ms),
            driver_pid: a.driver_pid,
            starts: a.starts,
            cancel_at_ms: a.cancel.map(|c| c.at_ms),
            weight: a.weight,
            owner: a.owner,
        }
    }

    /// The history row of `attempt` ending `now` with `outcome` (detail and status left for
    /// the caller).
    fn ended_of(&self, attempt: &Attempt, outcome: Outcome, now: u64) -> Ended {
        Ended {
            id: attempt.id.clone(),
            lane: attempt.lane.clone(),
            args: attempt.args.clone(),
            uid: attempt.enqueuer.as_ref().map(|e| e.uid),
            queued_at_ms: attempt.queued_at_ms,
            started_at_ms: (attempt.state == State::Running).then_some(attempt.state_at_ms),
            ended_at_ms: now,
            outcome,
            status: None,
            signal: None,
            detail: String::new(),
            log: (attempt.starts > 0).then(|| attempt.log_name()),
        }
    }

    /// The end of `attempt` as the history tells it, if it has ended.
    pub fn ended(&self, id: &str) -> Result<Option<EndedView>, Error> {
        Ok(self
            .store
            .ended(id)
            .map_err(Error::history("read"))?
            .map(ended_view))
    }
}

/// An ended attempt as a reply shows it.
fn ended_view(e: Ended) -> EndedView {
    EndedView {
        attempt: e.id,
        lane: e.lane,
        outcome: e.outcome.word().to_owned(),
        status: e.status,
        signal: e.signal,
        detail: e.detail,
        start_ms: e.queued_at_ms,
        started_at_ms: e.started_at_ms,
        ended_at_ms: e.ended_at_ms,
        uid: e.uid,
        args: e.args,
        log: e.log,
    }
}

/// An error and its causes, `outer: inner: innermost`.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_backoff_doubles_from_its_base_up_to_a_minute() {
        assert_eq!(start_backoff_ms(1_000, 1), 1_000);
        assert_eq!(start_backoff_ms(1_000, 2), 2_000);
        assert_eq!(start_backoff_ms(1_000, 3), 4_000);
        assert_eq!(start_backoff_ms(1_000, 7), MAX_START_BACKOFF_MS, "capped");
        assert_eq!(
            start_backoff_ms(1_000, u32::MAX),
            MAX_START_BACKOFF_MS,
            "no overflow"
        );
        assert_eq!(
            start_backoff_ms(u64::MAX, 2),
            MAX_START_BACKOFF_MS,
            "no overflow"
        );
        assert_eq!(start_backoff_ms(10, 0), 10, "a zeroth failure is the first");
    }

    #[test]
    fn the_host_s_own_exhaustion_is_not_the_attempt_s_fault() {
        use rustix::io::Errno;
        for errno in [
            Errno::NOSPC,
            Errno::DQUOT,
            Errno::MFILE,
            Errno::NFILE,
            Errno::AGAIN,
            Errno::NOMEM,
            Errno::IO,
        ] {
            assert!(is_host_trouble(&errno.into()), "{errno:?}");
        }
        for errno in [
            Errno::NOENT,
            Errno::ACCESS,
            Errno::NOEXEC,
            Errno::EXIST,
            Errno::PERM,
        ] {
            assert!(!is_host_trouble(&errno.into()), "{errno:?}");
        }
        assert!(!is_host_trouble(&std::io::Error::other("no errno")));
        #[derive(Debug, thiserror::Error)]
        #[error("cannot create the log")]
        struct Wrapped(#[source] std::io::Error);
        assert!(
            is_host_trouble(&std::io::Error::other(Wrapped(Errno::NOSPC.into()))),
            "a cause's errno counts"
        );
        assert!(!is_host_trouble(&std::io::Error::other(Wrapped(
            Errno::EXIST.into()
        ))));
    }

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
