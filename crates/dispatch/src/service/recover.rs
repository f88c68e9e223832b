//! Recovery at the dispatcher's start: the stored rows' lanes are probed and taken back or
//! dropped (seed 000), running attempts whose lane is free are ended, rows queued before the
//! enqueuer was recorded are parked, and the status entries that no row backs (a damaged or
//! emptied database) are reported as lost and removed.

use super::{Dispatcher, Error, Held, Settings};
use crate::lane::{lane_lock, retire_own_lane};
use crate::state::Legacy;
use crate::status;
use crate::store::{Attempt, Damage, Ended, Outcome, State, Store};
use crate::wire::EndedView;
use std::collections::{HashMap, HashSet};
use worklane_admission::Pool;
use worklane_guard::Guard;
use worklane_journal::Event;
use worklane_lease::{Acquired, Options, Request};
use worklane_slotfile::PrivateDir;

/// The error a row queued before worklane recorded who enqueued gets when it is parked.
pub(crate) const NO_ENQUEUER: &str = "queued by an older worklane that did not record who \
    enqueued it, so it is not started (its driver would run as the dispatcher's user): \
    `worklane queue retry` by root or the slot directory's owner runs it as that user, \
    `worklane queue cancel` drops it";

/// What recovery found, for the dispatcher's log and `queue ls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The damaged database moved aside, if there was one.
    pub damage: Option<Damage>,
    /// Attempts named by status entries that no stored row holds: their rows were lost (a
    /// damaged, emptied or replaced database). Kept in the history as `lost`.
    pub lost: Vec<EndedView>,
    /// Running attempts whose lane was free: they ended while no dispatcher watched.
    pub ended: Vec<EndedView>,
    /// Rows whose lane another process holds now: dropped, the holder left alone.
    pub dropped: Vec<String>,
    /// Rows without a recorded enqueuer, parked as `failed`.
    pub parked: Vec<String>,
    /// What became of a database an older worklane kept in the slot directory.
    pub legacy: Legacy,
}

impl Default for Recovery {
    fn default() -> Recovery {
        Recovery {
            damage: None,
            lost: Vec::new(),
            ended: Vec::new(),
            dropped: Vec::new(),
            parked: Vec::new(),
            legacy: Legacy::None,
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

impl Dispatcher {
    /// Opens the queue database in the dispatcher's private state directory `state` (a
    /// database an older worklane kept in the slot directory taken over first, if it is the
    /// dispatcher's own: [`crate::state::adopt_legacy`]; the files judged and a damaged one
    /// moved aside: [`Store::open_private`]) and recovers it ([`Dispatcher::recover`]); the
    /// damage and the takeover, if any, are in [`Dispatcher::recovery`].
    pub fn open(pool: Pool, state: &PrivateDir, settings: Settings) -> Result<Dispatcher, Error> {
        let now = pool.clock().now_ms();
        let legacy = crate::state::adopt_legacy(pool.dir(), state, now)
            .map_err(|source| Error::AdoptLegacy { source })?;
        let (store, damage) =
            Store::open_private(state, now).map_err(|source| Error::OpenQueue {
                source: Box::new(source),
            })?;
        let mut dispatcher = Dispatcher::recover(pool, store, settings)?;
        dispatcher.recovery.damage = damage;
        dispatcher.recovery.legacy = legacy;
        // Said again for every lost row: where the old database went.
        if let Some(damage) = &dispatcher.recovery.damage {
            for lost in &mut dispatcher.recovery.lost {
                lost.detail = format!(
                    "{}; the damaged database was moved to {}",
                    lost.detail,
                    damage.moved_to.display()
                );
            }
        }
        Ok(dispatcher)
    }

    /// A dispatcher over `pool` and `store`, recovering the rows the store already holds:
    /// each waiting row's lane lock is probed; free, the dispatcher retakes it and keeps the
    /// row (a starting row is queued again, its token cleared); held by someone else, the row
    /// is dropped and the holder left alone. A running row whose lane is free has ended; one
    /// whose lane is held runs on. Then every status entry that no row backs is reported lost.
    pub fn recover(pool: Pool, store: Store, settings: Settings) -> Result<Dispatcher, Error> {
        let owner = rustix::fs::fstat(pool.dir()).map_or(0, |s| s.st_uid);
        let mut dispatcher = Dispatcher {
            pool,
            store,
            settings,
            held: HashMap::new(),
            place: None,
            euid: rustix::process::geteuid().as_raw(),
            owner,
            children: HashSet::new(),
            procs: HashMap::new(),
            halting: Vec::new(),
            exits: HashMap::new(),
            probed: HashMap::new(),
            termed: HashSet::new(),
            killed: HashSet::new(),
            recovery: Recovery::default(),
        };
        let now = dispatcher.now();
        let mut attempts = Vec::new();
        let stored = dispatcher
            .store
            .all()
            .map_err(Error::read_queue("recover its attempts"))?;
        for attempt in stored {
            if attempt.state == State::Running {
                dispatcher.recover_running(&attempt, now)?;
                continue;
            }
            match dispatcher.resume(&attempt)? {
                Resumed::Held(lane) => dispatcher.keep(attempt, lane, now)?,
                Resumed::Busy => dispatcher.drop_row(&attempt)?,
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
                Acquired::Refused(_) => dispatcher.drop_row(&attempt)?,
            }
        }
        dispatcher.report_lost(now)?;
        dispatcher.stand()?;
        Ok(dispatcher)
    }

    /// What recovery found.
    #[must_use]
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// A stored row whose lane another process holds: dropped (recovery leaves the holder
    /// alone).
    fn drop_row(&mut self, attempt: &Attempt) -> Result<(), Error> {
        let id = attempt.id.as_str();
        self.store.remove(id).map_err(Error::remove(id))?;
        self.recovery.dropped.push(id.to_owned());
        self.pool.journal().emit(Event::DispatchRecovered {
            attempt: id.to_owned(),
            lane: attempt.lane.clone(),
            kept: false,
            why: "another process holds its lane: the row is dropped, the holder left alone"
                .to_owned(),
        });
        Ok(())
    }

    /// A running row at recovery: ended if its lane is free (its driver is no child of this
    /// dispatcher, so its status is in its log), else it runs on.
    fn recover_running(&mut self, attempt: &Attempt, now: u64) -> Result<(), Error> {
        let Some(lane) = crate::lane::take_if_free(self.pool.dir(), &attempt.lane) else {
            return Ok(());
        };
        let ended = Ended {
            detail: format!(
                "its lane was free when dispatcher {} started: its driver's status is in its log",
                std::process::id()
            ),
            ..self.ended_of(attempt, Outcome::Ended, now)
        };
        self.store.end(&ended).map_err(Error::remove(&attempt.id))?;
        drop(lane);
        if attempt.own_lane {
            let _ = retire_own_lane(self.pool.dir(), &attempt.lane);
        }
        self.recovery.ended.push(super::ended_view(ended));
        Ok(())
    }

    /// Keeps a recovered row whose lane it holds: a starting row is queued again; a row
    /// without a recorded enqueuer is parked as failed (it must never run as this process's
    /// user by default).
    fn keep(&mut self, attempt: Attempt, lane: Guard, now: u64) -> Result<(), Error> {
        let why = if attempt.enqueuer.is_none() && attempt.state != State::Failed {
            "its lane was free, but it names no enqueuer: parked as failed"
        } else {
            match attempt.state {
                State::Starting => "its lane was free: it was starting, and is queued again",
                State::Failed => "its lane was free: kept as failed",
                _ => "its lane was free: kept queued",
            }
        };
        self.pool.journal().emit(Event::DispatchRecovered {
            attempt: attempt.id.clone(),
            lane: attempt.lane.clone(),
            kept: true,
            why: why.to_owned(),
        });
        if attempt.enqueuer.is_none() && attempt.state != State::Failed {
            self.store
                .start_failed(
                    &attempt.id,
                    State::Failed,
                    attempt.failures,
                    NO_ENQUEUER,
                    0,
                    now,
                )
                .map_err(Error::set_state(&attempt.id, State::Failed))?;
            self.recovery.parked.push(attempt.id.clone());
        } else if attempt.state == State::Starting {
            self.store
                .set_state(&attempt.id, State::Queued, None, now)
                .map_err(Error::set_state(&attempt.id, State::Queued))?;
            self.halt_old_driver(&attempt, now);
        }
        self.held.insert(attempt.id, Held { lane, slot: None });
        Ok(())
    }

    /// Halts the driver a dead dispatcher started for starting `attempt`, which can no longer
    /// claim (its token is gone), if the process at its pid is provably that driver
    /// ([`super::procs::Proc::proven`]): its session is sent SIGTERM now and SIGKILL after
    /// [`super::EXPIRED_DRIVER_GRACE_MS`], as for an expiry, and the row is not admitted again
    /// while it lives. A process that cannot be proved the driver is left alone.
    fn halt_old_driver(&mut self, attempt: &Attempt, now: u64) {
        let Some(pid) = attempt.driver_pid else {
            return;
        };
        let uid = if self.euid == 0 {
            attempt.enqueuer.as_ref().map(|e| e.uid)
        } else {
            Some(self.euid)
        };
        let Some(driver) =
            uid.and_then(|uid| super::procs::Proc::proven(pid, uid, attempt.state_at_ms))
        else {
            return;
        };
        let procs = super::procs::Procs {
            driver: Some(driver),
            claimer: None,
        };
        procs.signal(rustix::process::Signal::TERM, true);
        self.halting.push(super::Halting {
            attempt: attempt.id.clone(),
            procs,
            kill_at_ms: now.saturating_add(super::EXPIRED_DRIVER_GRACE_MS),
            killed: false,
        });
    }

    /// Every status entry (`queue-<lane>.json`) that no stored row backs: if the history has
    /// its attempt, a leftover removed; else, if this dispatcher's user (or root) alone can
    /// have written it, its row was lost (a damaged, emptied or replaced database), kept in
    /// the history as `lost` with the arguments the entry names, and the entry removed. An
    /// entry anyone else may have written (a member of the group can put one at any lane's
    /// name) is removed and believed in nothing: it never ends a stored attempt, nor adds one
    /// to the history.
    fn report_lost(&mut self, now: u64) -> Result<(), Error> {
        for found in status::read_entries(self.pool.dir()) {
            let ours = (found.written.uid == self.euid || found.written.uid == 0)
                && found.written.only_by_owner();
            let backed = self
                .store
                .lane_row(&found.lane)
                .map_err(Error::read_queue(
                    "compare the status entries with the queue",
                ))?
                .is_some();
            if backed {
                continue;
            }
            let known = match &found.attempt {
                Some(id) => {
                    self.store
                        .ended(id)
                        .map_err(Error::history("read"))?
                        .is_some()
                        || self
                            .store
                            .get(id)
                            .map_err(Error::read_attempt(id))?
                            .is_some()
                }
                None => false,
            };
            if !ours {
                let _ = status::remove_entry(self.pool.dir(), &found.lane);
                continue;
            }
            if !known && let Some(id) = &found.attempt {
                let ended = Ended {
                    id: id.clone(),
                    lane: found.lane.clone(),
                    args: found.args.clone(),
                    uid: None,
                    queued_at_ms: found.start_ms.unwrap_or(0),
                    started_at_ms: None,
                    ended_at_ms: now,
                    outcome: Outcome::Lost,
                    status: None,
                    signal: None,
                    detail: format!(
                        "its status entry (written by dispatcher {}) names it, but the queue \
                         database has no row for it: enqueue lane {} again",
                        found
                            .dispatcher_pid
                            .map_or("?".to_owned(), |p| p.to_string()),
                        found.lane
                    ),
                    log: None,
                };
                self.store.end(&ended).map_err(Error::remove(id))?;
                self.recovery.lost.push(super::ended_view(ended));
            }
            let _ = status::remove_entry(self.pool.dir(), &found.lane);
        }
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
        let recorded = worklane_lease::read_record(&path)
            .ok()
            .flatten()
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
}
