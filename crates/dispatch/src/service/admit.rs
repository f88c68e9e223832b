//! Admission and starts: the next row admitted under the slot pool, its driver's start, a
//! start that failed or expired (halted, counted, backed off, parked).

use super::*;

impl Dispatcher {
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
    pub(super) fn old_driver_alive(&self, id: &str) -> bool {
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
            Err(e @ (TakeError::Weight { .. } | TakeError::WeightOverShare { .. })) => {
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
}

/// Why a failed start is the host's trouble rather than the attempt's: resources of the
/// machine that run out for every attempt alike.
pub(super) fn is_host_trouble(error: &std::io::Error) -> bool {
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
pub(super) fn errno_of(error: &std::io::Error) -> Option<rustix::io::Errno> {
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
}
