//! Claim, cancel and retry: a driver takes its admitted attempt; its user (or root, or the
//! directory's owner) drops one, or queues a failed one again.

use super::*;

impl Dispatcher {
    /// Claims a starting attempt with its token, for `caller` (who must be the one who
    /// enqueued it, or root): the row leaves the queue (it runs now, holding nothing of the
    /// dispatcher's) and the lane's and slot's guards are returned to be sent. A wrong token,
    /// a queued row, an expired or absent one is refused ([`ClaimRefused`]), and the row and
    /// its descriptors stay.
    pub fn claim(
        &mut self,
        id: &str,
        token: &str,
        caller: &Caller,
    ) -> Result<Result<Claimed, ClaimRefused>, Error> {
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
    ) -> Result<Result<Claimed, ClaimRefused>, Error> {
        self.expire()?;
        let Some(attempt) = self.store.get(id).map_err(Error::read_attempt(id))? else {
            return Ok(Err(ClaimRefused::NoAdmittedRow));
        };
        if attempt.state != State::Starting || attempt.token.as_deref() != Some(token) {
            return Ok(Err(ClaimRefused::NoAdmittedRow));
        }
        if caller.uid != 0
            && attempt
                .enqueuer
                .as_ref()
                .is_none_or(|e| e.uid != caller.uid)
        {
            return Ok(Err(ClaimRefused::Permission {
                attempt: id.to_owned(),
                enqueuer: attempt.enqueuer.as_ref().map(|e| e.uid),
                uid: caller.uid,
            }));
        }
        let Some(held) = self.held.remove(id) else {
            return Ok(Err(ClaimRefused::NoAdmittedRow));
        };
        let Some(slot) = held.slot else {
            self.held.insert(id.to_owned(), held);
            return Ok(Err(ClaimRefused::NoAdmittedRow));
        };
        let now = self.now();
        self.store
            .running(id, caller.pid.or(attempt.driver_pid), now)
            .map_err(Error::set_state(id, State::Running))?;
        let slot_name = slot.name().to_owned();
        let Some(slot_guard) = slot.hand_over() else {
            return Ok(Err(ClaimRefused::NoAdmittedRow));
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
        Ok(Ok(Claimed {
            attempt: attempt.id,
            lane: attempt.lane,
            slot: slot_name,
            args: attempt.args,
            env: attempt.env,
            fds: vec![held.lane, slot_guard],
        }))
    }

    /// Cancels attempt `id` for `caller`. A queued, starting or failed one is dropped (its
    /// row, its lane and its reserved slot; a lane of its own is retired) and kept in the
    /// history as cancelled; a running one's driver is halted as STOP halts
    /// a command (its cancel marker, then SIGTERM, then SIGKILL). [`Cancelled`] says which,
    /// [`CancelRefused`] why not.
    pub fn cancel(
        &mut self,
        id: &str,
        caller: &Caller,
    ) -> Result<Result<Cancelled, CancelRefused>, Error> {
        let Some(attempt) = self.store.get(id).map_err(Error::read_attempt(id))? else {
            return Ok(Err(CancelRefused::NoSuchAttempt {
                attempt: id.to_owned(),
            }));
        };
        if !self.may_manage(caller, attempt.enqueuer.as_ref()) {
            return Ok(Err(CancelRefused::Permission {
                attempt: id.to_owned(),
                enqueuer: attempt.enqueuer.as_ref().map(|e| e.uid),
            }));
        }
        self.pool.journal().emit(Event::DispatchCancelled {
            attempt: id.to_owned(),
            lane: attempt.lane.clone(),
            state: attempt.state.word().to_owned(),
            uid: caller.uid,
        });
        if attempt.state == State::Running {
            self.halt(&attempt, caller.uid)?;
            return Ok(Ok(Cancelled::Halting {
                grace_ms: self.settings.cancel_grace_ms,
            }));
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
        Ok(Ok(Cancelled::Dropped))
    }

    /// Queues a failed attempt again from the start (no failures counted, no backoff), for
    /// `caller`. A row queued before worklane recorded who enqueued (it has no enqueuer) may be
    /// retried by root or the directory's owner only, and then runs as the one who retried it.
    pub fn retry(&mut self, id: &str, caller: &Caller) -> Result<Result<(), RetryRefused>, Error> {
        let Some(attempt) = self.store.get(id).map_err(Error::read_attempt(id))? else {
            return Ok(Err(RetryRefused::NoSuchAttempt {
                attempt: id.to_owned(),
            }));
        };
        if attempt.damaged {
            return Ok(Err(RetryRefused::Damaged {
                attempt: id.to_owned(),
                damage: attempt.last_error,
            }));
        }
        if attempt.state != State::Failed {
            return Ok(Err(RetryRefused::NotFailed {
                attempt: id.to_owned(),
                state: attempt.state,
            }));
        }
        if !self.may_manage(caller, attempt.enqueuer.as_ref()) {
            return Ok(Err(RetryRefused::Permission {
                attempt: id.to_owned(),
            }));
        }
        if attempt.enqueuer.is_none() && self.euid != 0 && caller.uid != self.euid {
            return Ok(Err(RetryRefused::OtherUser { euid: self.euid }));
        }
        let enqueuer = attempt.enqueuer.is_none().then(|| caller.enqueuer());
        let now = self.now();
        self.store
            .retry(id, enqueuer.as_ref(), now)
            .map_err(Error::set_state(id, State::Queued))?;
        Ok(Ok(()))
    }
}
