//! Weights and shares in the dispatcher (PROTOCOL.md 12.10): an enqueue no cap could admit
//! is refused, a row a lowered cap can no longer admit is parked, and with shares the next row
//! is the first of the owner with the smallest use of its share.

use super::{Attempt, Caller, Dispatcher, Enqueue, EnqueueRefused, Error, State, TakeError, chain};
use worklane_admission::Kind;

impl Dispatcher {
    /// A refusal for an enqueue whose weight or owner tag the pool could never admit: a weight
    /// of 0 or above `max_agents` or its owner's share, a tag no config could name. (A config
    /// that cannot be used is no reason to refuse: every admission waits for it to be fixed,
    /// and a row it then cannot admit is parked.)
    pub(super) fn refuse_ask(&self, entry: &Enqueue, caller: &Caller) -> Option<EnqueueRefused> {
        if let Some(tag) = &entry.owner
            && worklane_slotfile::ShareKey::parse(&format!("owner:{tag}")).is_none()
        {
            return Some(EnqueueRefused::BadOwner { owner: tag.clone() });
        }
        let attempt = Attempt {
            enqueuer: Some(caller.enqueuer()),
            weight: entry.weight.unwrap_or(1),
            owner: entry.owner.clone(),
            ..Attempt::queued(String::new(), entry.lane.clone(), 0, 0, 0)
        };
        let ask = attempt.ask()?;
        match self.pool.check_ask(Kind::Agent, &ask) {
            Err(e @ (TakeError::Weight { .. } | TakeError::WeightOverShare { .. })) => {
                Some(EnqueueRefused::Unfit { error: Box::new(e) })
            }
            _ => None,
        }
    }

    /// Parks the attempt `id` as `failed`, its lane still held, because the pool can never
    /// admit it (`error`: its weight is above the cap or its owner's share, which an operator
    /// may raise; `queue retry` then queues it again).
    pub(super) fn park_unfit(
        &mut self,
        id: &str,
        error: &TakeError,
        now: u64,
    ) -> Result<(), Error> {
        log::warn!("attempt {id} parked: {}", chain(error));
        self.store
            .start_failed(id, State::Failed, 0, &chain(error), 0, now)
            .map_err(Error::set_state(id, State::Failed))?;
        Ok(())
    }

    /// The next queued row to admit at `now`: the store's first (priority, then original
    /// start), or, when the config gives shares, the first of each owner's first rows in the
    /// fair order of the pool's line (the owner with the smallest use of its share first,
    /// within a priority), skipping owners whose share has no room for their row.
    pub(super) fn next_row(
        &self,
        now: u64,
        purpose: &'static str,
    ) -> Result<Option<Attempt>, Error> {
        let config = match self.pool.config() {
            Ok(config) if !config.shares.is_empty() => config,
            // No shares (or a broken config, which refuses every take anyway): one order.
            _ => {
                return self
                    .store
                    .next_queued(now)
                    .map_err(Error::read_queue(purpose));
            }
        };
        let heads = self
            .store
            .queued_heads(now)
            .map_err(Error::read_queue(purpose))?;
        if heads.len() <= 1 {
            return Ok(heads.into_iter().next());
        }
        let cap = config.max_agents;
        let held = self
            .pool
            .held_by_owner("agent", cap)
            .map_err(|source| Error::CountShares {
                source: Box::new(source),
            })?;
        let use_ = worklane_admission::share::Use {
            held: &held,
            shares: &config.shares,
            cap,
        };
        let mut ranked: Vec<(worklane_admission::share::Waiter, Attempt)> = heads
            .into_iter()
            .map(|attempt| {
                let owner = attempt.ask().map(|ask| {
                    worklane_admission::share::resolve(&config.shares, ask.owner())
                        .owner
                        .to_string()
                });
                let waiter = worklane_admission::share::Waiter {
                    priority: attempt.priority,
                    start_ms: attempt.queued_at_ms,
                    token: attempt.id.clone(),
                    owner,
                    weight: attempt.weight.clamp(1, cap),
                    me: false,
                };
                (waiter, attempt)
            })
            .collect();
        ranked.sort_by(|(a, _), (b, _)| use_.order(a, b));
        let fits = ranked
            .iter()
            .position(|(w, _)| w.owner.as_deref().is_none_or(|o| use_.fits(o, w.weight)));
        // None fits: the first stands anyway, and its take says whose share is used.
        Ok(Some(ranked.swap_remove(fits.unwrap_or(0)).1))
    }
}
