//! The dispatcher's decisions: enqueue, admit, claim, expire, cancel and recover, on the
//! store, the slot pool and the held lane descriptors. No socket here (see
//! [`super::server`]); time comes from the pool's clock, and starting a driver is the caller's
//! callback.

use super::env::EnvFilter;
pub use super::lane::{lane_lock, valid_lane};
use super::store::{Attempt, State, Store, db};
use super::wire::{AttemptView, Enqueue, Reply, code};
use crate::{Error as PoolError, Kind, Pool, Slot, Take};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use worklane_guard::Guard;
use worklane_lease::{Acquired, Clock, Options, Request};

/// The default claim interval: a starting attempt not claimed within it is queued again.
pub const DEFAULT_CLAIM_INTERVAL_MS: u64 = 60_000;

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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            claim_interval_ms: DEFAULT_CLAIM_INTERVAL_MS,
            env: EnvFilter::default(),
            mode: Mode::Dispatcher,
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

/// Errors of the dispatcher's own state (a refusal of a request is a [`Reply`]). Each variant
/// says which step failed and for which attempt; the cause (the queue database, the slot pool,
/// the lease layer, the socket) is its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
    /// at recovery).
    #[error("cannot remove attempt {attempt} from the queue")]
    Remove {
        /// The attempt.
        attempt: String,
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

    fn leave_line(source: PoolError) -> Error {
        Error::LeaveLine {
            source: Box::new(source),
        }
    }
}

/// What [`Dispatcher::resume`] found for a stored row's lane.
enum Resumed {
    /// Nobody acquired it since the row was queued: held again by its guard.
    Held(Guard),
    /// Its guard is held by someone else.
    Busy,
    /// Taken by someone in between, or not known: acquire it as any taker would.
    Acquire,
}

/// The dispatcher.
pub struct Dispatcher {
    pool: Pool,
    store: Store,
    settings: Settings,
    held: HashMap<String, Held>,
    /// Its place in the agents' line: the entry of its first queued row (`stand`).
    place: Option<crate::line::Place>,
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
fn random_hex() -> String {
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
    /// A dispatcher over `pool` and `store`, recovering the rows the store already holds:
    /// each stored row's lane lock is probed; free, the dispatcher retakes it and keeps the row
    /// (a starting row is queued again, its token cleared); held by someone else, the row is
    /// dropped and the holder left alone.
    pub fn recover(pool: Pool, store: Store, settings: Settings) -> Result<Dispatcher, Error> {
        let mut dispatcher = Dispatcher {
            pool,
            store,
            settings,
            held: HashMap::new(),
            place: None,
        };
        let now = dispatcher.now();
        let mut attempts = Vec::new();
        let stored = dispatcher
            .store
            .all()
            .map_err(Error::read_queue("recover its attempts"))?;
        for attempt in stored {
            match dispatcher.resume(&attempt)? {
                Resumed::Held(lane) => dispatcher.keep(attempt, lane, now)?,
                Resumed::Busy => {
                    dispatcher
                        .store
                        .remove(&attempt.id)
                        .map_err(Error::remove(&attempt.id))?;
                }
                Resumed::Acquire => attempts.push(attempt),
            }
        }
        let locks: Vec<String> = attempts.iter().map(|a| lane_lock(&a.lane)).collect();
        let each: Vec<(&str, Request)> = locks
            .iter()
            .zip(&attempts)
            .map(|(lock, a)| {
                let request = Request::new("worklane dispatcher").field("attempt", a.id.clone());
                (lock.as_str(), request)
            })
            .collect();
        // All lanes at once: one listing of the directory, not one per row.
        let acquired =
            worklane_lease::acquire_each(dispatcher.pool.dir(), &each, &Options::process())
                .map_err(|source| Error::RetakeLanes {
                    count: each.len(),
                    source: Box::new(source),
                })?;
        for (attempt, acquired) in attempts.into_iter().zip(acquired) {
            match acquired {
                Acquired::Held(lease) => {
                    let Some(lane) = lease.hand_over() else {
                        continue;
                    };
                    dispatcher.keep(attempt, lane, now)?;
                }
                Acquired::Refused(_) => {
                    dispatcher
                        .store
                        .remove(&attempt.id)
                        .map_err(Error::remove(&attempt.id))?;
                }
            }
        }
        dispatcher.stand()?;
        Ok(dispatcher)
    }

    /// Stands in the agents' line for its first queued row: an entry at that row's priority
    /// and original start, moved as rows are admitted, queued or cancelled (the new entry is
    /// made before the old is left, so no run slips in between), none when nothing is queued.
    ///
    /// One entry stands for all the rows: they are admitted in the line's own order, so the
    /// first row's place is where the next of them stands, and a run behind it waits for it,
    /// while a run before it goes first. (An entry per row would make the directory that many
    /// files longer for every take's listings.)
    pub fn stand(&mut self) -> Result<(), Error> {
        let Some(head) = self
            .store
            .next_queued()
            .map_err(Error::read_queue("find where to stand in the agents' line"))?
        else {
            if let Some(place) = self.place.take() {
                place.leave().map_err(Error::leave_line)?;
            }
            return Ok(());
        };
        if self.place.as_ref().is_some_and(|p| {
            p.entry().priority == head.priority && p.entry().start_ms == head.queued_at_ms
        }) {
            return Ok(());
        }
        let request = Request::new("worklane dispatcher")
            .field("attempt", head.id.clone())
            .field("lane", head.lane.clone());
        let place = self
            .pool
            .join_line_at(Kind::Agent, head.priority, head.queued_at_ms, &request)
            .map_err(|source| Error::JoinLine {
                attempt: head.id.clone(),
                source: Box::new(source),
            })?;
        if let Some(old) = self.place.replace(place) {
            old.leave().map_err(Error::leave_line)?;
        }
        Ok(())
    }

    /// Keeps a recovered row whose lane it holds: a starting row is queued again.
    fn keep(&mut self, attempt: Attempt, lane: Guard, now: u64) -> Result<(), Error> {
        if attempt.state == State::Starting {
            self.store
                .set_state(&attempt.id, State::Queued, None, now)
                .map_err(Error::set_state(&attempt.id, State::Queued))?;
        }
        self.held.insert(attempt.id, Held { lane, slot: None });
        Ok(())
    }

    /// Takes a stored row's lane back without a new acquisition when nobody acquired it since
    /// the row was queued: its guard is free, and its record (the launcher's) still names the
    /// epoch the row was queued at, which is still the lane's newest (`<lock>.epoch.<n>` there,
    /// `<lock>.epoch.<n+1>` not; every acquisition advances it). The chain of hands (launcher,
    /// dispatcher, this dispatcher) is then unbroken, so the lane is held as the dead
    /// dispatcher held it: by its guard, the record untouched. Anything else is left to a full
    /// acquisition ([`Resumed::Acquire`]), or the row dropped if the guard is held.
    fn resume(&self, attempt: &Attempt) -> Result<Resumed, Error> {
        let Some(epoch) = attempt.lane_epoch.filter(|e| *e > 0 && *e < u64::MAX) else {
            return Ok(Resumed::Acquire);
        };
        let dir = self.pool.dir();
        let Ok(path) = dir.file(&lane_lock(&attempt.lane)) else {
            return Ok(Resumed::Acquire);
        };
        // A guard that is not there yet, or broken, is the full acquisition's to report.
        let Ok(taken) = path.try_guard() else {
            return Ok(Resumed::Acquire);
        };
        let Some(guard) = taken else {
            return Ok(Resumed::Busy);
        };
        let recorded = path
            .read()
            .ok()
            .flatten()
            .and_then(|raw| worklane_lease::Record::parse(&raw).ok())
            .and_then(|r| r.epoch);
        // The lane's epoch, as `adopt` reads it: the record's claim where the epoch files
        // agree (two lookups), the largest epoch file otherwise.
        if recorded == Some(epoch)
            && worklane_lease::current_epoch_claimed(&path, recorded).is_ok_and(|e| e == epoch)
        {
            return Ok(Resumed::Held(guard));
        }
        drop(guard);
        Ok(Resumed::Acquire)
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

    /// Handles an enqueue with the descriptors that came with it. Every refusal closes every
    /// descriptor (they are dropped); an accepted row is committed before the reply.
    pub fn enqueue(&mut self, entry: Enqueue, mut fds: Vec<OwnedFd>) -> Result<Reply, Error> {
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
        if !valid_lane(&entry.lane) {
            return Ok(Reply::refused(
                code::BAD_REQUEST,
                format!(
                    "lane {:?}: 1 to 64 letters, digits, `-`, `_` or `.`",
                    entry.lane
                ),
            ));
        }
        let (Some(start_ms), Some(priority)) = (entry.start_ms, entry.priority) else {
            return Ok(Reply::refused(
                code::MISSING_FIELD,
                "an enqueue must carry its queue start (start_ms) and priority",
            ));
        };
        let lock = lane_lock(&entry.lane);
        let dir = self.pool.dir();
        let lane = match Guard::from_received(fds.remove(0), dir, dir.path(), &lock) {
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
        let queued = self
            .store
            .lane_queued(&entry.lane)
            .map_err(|source| Error::LookUpLane {
                lane: entry.lane.clone(),
                source: Box::new(source),
            })?;
        if queued {
            return Ok(Reply::refused(
                code::LANE_QUEUED,
                format!("lane {} is already queued", entry.lane),
            ));
        }
        let now = self.now();
        // The launcher's record names the epoch it acquired the lane at (read under the guard
        // we now hold); recovery compares it with the lane's epoch then.
        let lane_epoch = dir
            .file(&lock)
            .ok()
            .and_then(|path| path.read().ok().flatten())
            .and_then(|raw| worklane_lease::Record::parse(&raw).ok())
            .and_then(|r| r.epoch);
        let attempt = Attempt {
            id: format!("a-{}", random_hex()),
            lane: entry.lane,
            state: State::Queued,
            token: None,
            queued_at_ms: start_ms,
            priority,
            placement: entry.placement,
            args: entry.args,
            stage: entry.stage,
            env: self
                .settings
                .env
                .keep(entry.env.into_iter().map(|(k, v)| (k.into(), v.into()))),
            state_at_ms: now,
            lane_epoch,
        };
        self.store
            .insert(&attempt)
            .map_err(|source| Error::Insert {
                attempt: attempt.id.clone(),
                lane: attempt.lane.clone(),
                source: Box::new(source),
            })?;
        let mut reply = Reply::ok();
        reply.attempt = Some(attempt.id.clone());
        self.held.insert(attempt.id, Held { lane, slot: None });
        Ok(reply)
    }

    /// Returns every starting attempt older than the claim interval to the queue (its slot
    /// released, its token cleared, its start and priority kept): strictly greater, so at
    /// exactly the interval it is still starting.
    pub fn expire(&mut self) -> Result<Vec<String>, Error> {
        let now = self.now();
        let mut expired = Vec::new();
        let starting = self
            .store
            .starting()
            .map_err(Error::read_queue("find the starting attempts"))?;
        for attempt in starting {
            if now.saturating_sub(attempt.state_at_ms) > self.settings.claim_interval_ms {
                self.store
                    .set_state(&attempt.id, State::Queued, None, now)
                    .map_err(Error::set_state(&attempt.id, State::Queued))?;
                if let Some(held) = self.held.get_mut(&attempt.id) {
                    held.slot = None;
                }
                expired.push(attempt.id);
            }
        }
        Ok(expired)
    }

    /// Admits the next queued attempt if the pool has room (STOP, drain and `max_agents` as for
    /// `worklane run`): it takes an agent slot for it and makes it `starting` with a fresh
    /// token. `None` when nothing is queued or the pool is full or refusing.
    pub fn admit_next(&mut self) -> Result<Option<Admitted>, Error> {
        let Some(attempt) = self
            .store
            .next_queued()
            .map_err(Error::read_queue("choose the next attempt"))?
        else {
            return Ok(None);
        };
        let request = Request::new("worklane dispatcher")
            .field("attempt", attempt.id.clone())
            .field("lane", attempt.lane.clone());
        // In the line of agents at the row's own place: a waiting `worklane run` before it
        // (higher priority, or the same and an earlier start) goes first.
        let taken = match self.place.as_ref().map(crate::line::Place::entry) {
            Some(own)
                if own.priority == attempt.priority && own.start_ms == attempt.queued_at_ms =>
            {
                self.pool.try_take_as(Kind::Agent, &request, own)
            }
            _ => self.pool.try_take_at(
                Kind::Agent,
                &request,
                attempt.priority,
                attempt.queued_at_ms,
            ),
        }
        .map_err(|source| Error::TakeSlot {
            attempt: attempt.id.clone(),
            source: Box::new(source),
        })?;
        let slot = match taken {
            Take::Held(slot) => slot,
            Take::Blocked(_) => return Ok(None),
        };
        let token = random_hex();
        let now = self.now();
        self.store
            .set_state(&attempt.id, State::Starting, Some(&token), now)
            .map_err(Error::set_state(&attempt.id, State::Starting))?;
        let name = slot.name().to_owned();
        if let Some(held) = self.held.get_mut(&attempt.id) {
            held.slot = Some(slot);
        }
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

    /// A start that failed (its driver could not be started): the attempt is queued again at
    /// once, its slot released.
    pub fn unadmit(&mut self, id: &str) -> Result<(), Error> {
        let now = self.now();
        self.store
            .set_state(id, State::Queued, None, now)
            .map_err(Error::set_state(id, State::Queued))?;
        if let Some(held) = self.held.get_mut(id) {
            held.slot = None;
        }
        Ok(())
    }

    /// Claims a starting attempt with its token: only then does the row leave the queue, and the
    /// lane's and slot's guards are returned to be sent. A wrong token, a queued row, an expired
    /// or absent one is refused, and the row and its descriptors stay.
    pub fn claim(&mut self, id: &str, token: &str) -> Result<Result<Claimed, Reply>, Error> {
        self.expire()?;
        let refused = || Reply::refused(code::NO_ADMITTED_ROW, "no admitted row for this token");
        let Some(attempt) = self.store.get(id).map_err(Error::read_attempt(id))? else {
            return Ok(Err(refused()));
        };
        if attempt.state != State::Starting || attempt.token.as_deref() != Some(token) {
            return Ok(Err(refused()));
        }
        let Some(held) = self.held.remove(id) else {
            return Ok(Err(refused()));
        };
        let Some(slot) = held.slot else {
            self.held.insert(id.to_owned(), held);
            return Ok(Err(refused()));
        };
        self.store.remove(id).map_err(Error::remove(id))?;
        let slot_name = slot.name().to_owned();
        let Some(slot_guard) = slot.hand_over() else {
            return Ok(Err(refused()));
        };
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

    /// Drops an attempt: its row, its lane and its reserved slot. `false` if there is none.
    ///
    /// A lane of its own is then retired (its files removed, see
    /// [`super::lane::retire_own_lane`]): nothing will ever take it again.
    pub fn cancel(&mut self, id: &str) -> Result<bool, Error> {
        let lane = self
            .store
            .get(id)
            .map_err(Error::read_attempt(id))?
            .map(|a| a.lane);
        drop(self.held.remove(id));
        let removed = self.store.remove(id).map_err(Error::remove(id))?;
        if let Some(lane) = lane {
            let _ = super::lane::retire_own_lane(self.pool.dir(), &lane);
        }
        Ok(removed)
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
            attempt: a.id,
            lane: a.lane,
            state: a.state.word().to_owned(),
            start_ms: a.queued_at_ms,
            priority: a.priority,
            stage: a.stage,
            placement: a.placement,
            state_at_ms: a.state_at_ms,
            args: a.args,
        }
    }
}
