//! Running attempts: how the dispatcher learns that one ended (its driver reaped, its lane
//! found free), halts one that is cancelled, and keeps the history and the logs within their
//! retention.

use super::{Caller, Dispatcher, Error, Exit, StartFailure};
use crate::lane::retire_own_lane;
use crate::store::{Attempt, Cancel, Ended, Outcome, State, log_name};
use crate::wire::EndedView;
use worklane_guard::Guard;

/// How often a running attempt's lane is probed when nothing says it ended (ms).
const PROBE_EVERY_MS: u64 = 1_000;
/// How long a cancelled attempt's driver has to act on the cancel marker (as `worklane claim`
/// does within a quarter second) before it is sent SIGTERM itself (ms).
const MARKER_GRACE_MS: u64 = 1_000;

/// The marker `queue cancel` leaves for a running attempt's driver: `worklane claim` halts its
/// command when it appears, as it does on STOP (PROTOCOL.md).
#[must_use]
pub fn cancel_marker(attempt: &str) -> String {
    format!("queue-{attempt}.cancel")
}

/// What a driver's end meant for its attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverEnded {
    /// Not a driver of a starting or running attempt (an expired attempt's old driver, say).
    Unknown,
    /// A running attempt's driver: its end is recorded once its lane is free.
    Running(String),
    /// A starting attempt's driver ended before it claimed: a failed start.
    BeforeClaim {
        /// The attempt.
        attempt: String,
        /// What became of it.
        failure: StartFailure,
        /// How the driver ended, in words.
        why: String,
    },
}

impl Dispatcher {
    /// A driver this dispatcher started ended (`exit`, from the caller's reaper). A starting
    /// attempt's driver that ends before it claims is a failed start; a running one's end is
    /// recorded when its lane is free (at once, usually, at the next [`Dispatcher::runs`]).
    pub fn exited(&mut self, exit: Exit) -> Result<DriverEnded, Error> {
        self.children.remove(&exit.pid);
        let starting = self
            .store
            .starting()
            .map_err(Error::read_queue("find the starting attempts"))?;
        if let Some(attempt) = starting.iter().find(|a| a.driver_pid == Some(exit.pid)) {
            let why = format!(
                "its driver (pid {}) ended with {exit} before it claimed the attempt",
                exit.pid
            );
            let failure = self.start_failed(&attempt.id, &why, false)?;
            return Ok(DriverEnded::BeforeClaim {
                attempt: attempt.id.clone(),
                failure,
                why,
            });
        }
        let running = self
            .store
            .in_state(State::Running)
            .map_err(Error::read_queue("find the running attempts"))?;
        match running.iter().find(|a| a.driver_pid == Some(exit.pid)) {
            Some(attempt) => {
                self.exits.insert(exit.pid, exit);
                self.probed.remove(&attempt.id);
                Ok(DriverEnded::Running(attempt.id.clone()))
            }
            None => Ok(DriverEnded::Unknown),
        }
    }

    /// Looks at the running attempts: one whose lane is free has ended (kept in the history,
    /// its row removed); one cancelled whose driver outlived the grace gets SIGKILL. A lane
    /// is probed at most every second unless its driver was just reaped; a driver still
    /// running as this process's child is waited for first, so its status is known.
    pub fn runs(&mut self) -> Result<Vec<EndedView>, Error> {
        let now = self.now();
        let running = self
            .store
            .in_state(State::Running)
            .map_err(Error::read_queue("find the running attempts"))?;
        let mut ended = Vec::new();
        for attempt in running {
            let child = attempt
                .driver_pid
                .is_some_and(|pid| self.children.contains(&pid));
            if let Some(cancel) = attempt.cancel {
                let since = now.saturating_sub(cancel.at_ms);
                if since > MARKER_GRACE_MS && self.termed.insert(attempt.id.clone()) {
                    self.signal_driver(&attempt, rustix::process::Signal::TERM, false);
                }
                if since > self.settings.cancel_grace_ms && self.killed.insert(attempt.id.clone()) {
                    self.signal_driver(&attempt, rustix::process::Signal::KILL, true);
                }
            }
            if child {
                continue;
            }
            let due = self
                .probed
                .get(&attempt.id)
                .is_none_or(|at| now.saturating_sub(*at) >= PROBE_EVERY_MS);
            if !due {
                continue;
            }
            self.probed.insert(attempt.id.clone(), now);
            if let Some(lane) = crate::lane::take_if_free(self.pool.dir(), &attempt.lane) {
                ended.push(self.finish(&attempt, Some(lane))?);
            }
        }
        Ok(ended)
    }

    /// Records the end of running `attempt` (its lane free: `lane` is its guard, held a moment
    /// to be sure, or the caller holds it): from its driver's exit where this dispatcher reaped
    /// it, else as `ended` with its status in its log.
    pub(super) fn finish(
        &mut self,
        attempt: &Attempt,
        lane: Option<Guard>,
    ) -> Result<EndedView, Error> {
        let now = self.now();
        let exit = attempt.driver_pid.and_then(|pid| self.exits.remove(&pid));
        let outcome = match (attempt.cancel, exit) {
            (Some(_), _) => Outcome::Cancelled,
            (
                None,
                Some(Exit {
                    signal: Some(_), ..
                }),
            ) => Outcome::Killed,
            (None, Some(_)) => Outcome::Exited,
            (None, None) => Outcome::Ended,
        };
        let how = match exit {
            Some(exit) => format!("its driver (pid {}) ended with {exit}", exit.pid),
            None => "its lane is free; its driver was not this dispatcher's to reap, so its \
                     status is in its log"
                .to_owned(),
        };
        let detail = match attempt.cancel {
            Some(cancel) => format!("halted by queue cancel (uid {}); {how}", cancel.by),
            None => how,
        };
        let ended = Ended {
            status: exit.and_then(|e| e.status),
            signal: exit.and_then(|e| e.signal),
            detail,
            ..self.ended_of(attempt, outcome, now)
        };
        self.store.end(&ended).map_err(Error::remove(&attempt.id))?;
        drop(lane);
        if let Ok(marker) = self.pool.dir().file(&cancel_marker(&attempt.id)) {
            let _ = marker.remove();
        }
        if attempt.own_lane {
            let _ = retire_own_lane(self.pool.dir(), &attempt.lane);
        }
        self.probed.remove(&attempt.id);
        self.killed.remove(&attempt.id);
        self.termed.remove(&attempt.id);
        self.procs.remove(&attempt.id);
        Ok(super::ended_view(ended))
    }

    /// Halts running `attempt`'s driver for uid `by`, as STOP halts a command: the cancel is
    /// recorded and the marker [`cancel_marker`] written (`worklane claim` halts its command on
    /// it, as on STOP: SIGTERM, SIGKILL after its grace); a driver still there a second later
    /// is sent SIGTERM, and after [`super::Settings::cancel_grace_ms`] its process group gets
    /// SIGKILL ([`Dispatcher::runs`]).
    pub(super) fn halt(&mut self, attempt: &Attempt, by: u32) -> Result<(), Error> {
        let now = self.now();
        let cancel = attempt.cancel.unwrap_or(Cancel { at_ms: now, by });
        self.store
            .cancel_asked(&attempt.id, cancel)
            .map_err(Error::set_state(&attempt.id, State::Running))?;
        let marker = serde_json::json!({
            "version": 1,
            "attempt": attempt.id,
            "by": by,
            "at": worklane_lease::rfc3339_ms(cancel.at_ms),
            "reason": "queue cancel",
        });
        if let Ok(path) = self.pool.dir().file(&cancel_marker(&attempt.id)) {
            let mut bytes = marker.to_string().into_bytes();
            bytes.push(b'\n');
            // Not writable by the group: `worklane claim` obeys a marker only the dispatcher (or
            // root) can have written.
            let _ = path.replace(&bytes, worklane_slotfile::RECORD_MODE);
        }
        self.probed.remove(&attempt.id);
        Ok(())
    }

    /// Sends `signal` to running `attempt`'s claimer and driver (the driver's whole process
    /// group with `group`: a driver leads a session of its own), through the pidfds kept since
    /// its start and its claim: never a pid read from a file. An attempt this dispatcher did
    /// not start or see claimed (it ran across a restart) has none: its cancel marker is all.
    fn signal_driver(&self, attempt: &Attempt, signal: rustix::process::Signal, group: bool) {
        if let Some(procs) = self.procs.get(&attempt.id) {
            procs.signal(signal, group);
        }
    }

    /// Forgets the ended attempts that ended more than `older_than_ms` ago (all without it)
    /// and removes their logs, for `caller`: root and the directory's owner prune everyone's,
    /// anyone else their own. Returns what went (the reply's history).
    pub fn prune(
        &mut self,
        caller: &Caller,
        older_than_ms: Option<u64>,
    ) -> Result<Vec<EndedView>, Error> {
        let now = self.now();
        let before = now
            .saturating_sub(older_than_ms.unwrap_or(0))
            .saturating_add(1);
        let whose = (caller.uid != 0 && caller.uid != self.owner).then_some(caller.uid);
        let pruned = self
            .store
            .prune(before, whose)
            .map_err(Error::history("prune"))?;
        self.remove_logs(&pruned);
        Ok(pruned.into_iter().map(super::ended_view).collect())
    }

    /// Keeps the history and the logs within the retention period: ended attempts older than
    /// it are forgotten and their logs removed, and a driver's log that no attempt, queued or
    /// ended, names any more is removed once it is that old. Returns how many logs went.
    pub fn sweep(&mut self) -> Result<usize, Error> {
        let now = self.now();
        let before = now.saturating_sub(self.settings.retention_ms);
        let pruned = self
            .store
            .prune(before, None)
            .map_err(Error::history("prune"))?;
        let mut removed = self.remove_logs(&pruned);
        let Ok(logs) = self.pool.dir().list_prefixed("queue-a-") else {
            return Ok(removed);
        };
        for path in logs {
            let Some(id) = path
                .name()
                .strip_prefix("queue-")
                .and_then(|n| n.strip_suffix(".log"))
            else {
                continue;
            };
            let old = path
                .modified_ms()
                .ok()
                .flatten()
                .is_some_and(|at| at < before);
            if !old {
                continue;
            }
            let named = self.store.get(id).ok().flatten().is_some()
                || self.store.ended(id).ok().flatten().is_some();
            if !named && path.remove().is_ok_and(|gone| gone) {
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn remove_logs(&self, ended: &[Ended]) -> usize {
        ended
            .iter()
            .filter_map(|e| {
                let name = e.log.clone().unwrap_or_else(|| log_name(&e.id));
                self.pool.dir().file(&name).ok()
            })
            .filter(|path| path.remove().is_ok_and(|gone| gone))
            .count()
    }
}
