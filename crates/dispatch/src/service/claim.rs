//! Claim, cancel and retry: a driver takes its admitted attempt; its user (or root, or the
//! directory's owner) drops one, or queues a failed one again.

use super::*;

impl Dispatcher {
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
}
