//! What `list` shows: the waiting and running attempts, and the history of the ended ones.

use super::*;

impl Dispatcher {
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

    pub(super) fn view_of(&self, a: Attempt) -> AttemptView {
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
    pub(super) fn ended_of(&self, attempt: &Attempt, outcome: Outcome, now: u64) -> Ended {
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
pub(super) fn ended_view(e: Ended) -> EndedView {
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
