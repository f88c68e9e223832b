//! The state's calls in flight and their units, and the windows of several dimensions a model
//! provider reports: expiry, carry-over of ended windows, waiting requests, decisions in units
//! and what a provider's response says.

use super::*;

impl State {
    /// Forgets reservations older than [`RESERVATION_TTL_MS`] at `now`, and gives their units
    /// back to the windows that still count them.
    pub fn expire(&mut self, now: u64) {
        let old: Vec<String> = self
            .in_flight
            .iter()
            .filter(|(_, r)| {
                now.saturating_sub(r.at_ms) > RESERVATION_TTL_MS
                    || r.at_ms > now.saturating_add(MAX_PAUSE_MS)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in old {
            self.release(&id);
        }
    }

    /// Carries each model provider's window that has ended at `now` over into the window of
    /// the same period that holds `now`, assumed until a response reports it: its limit as
    /// its remaining (so at most the limit goes after a reset, not every waiter at once), less
    /// what the reservations in flight hold of that dimension (a call taken before the reset
    /// may reach the provider after it). Its period is [`Window::period_ms`]. A window
    /// without a limit stays as it is: "not known" once ended.
    pub fn carry(&mut self, now: u64) {
        for (name, window) in &mut self.resources {
            let Some(limit) = window.limit else {
                continue;
            };
            if window.reset_at > now {
                continue;
            }
            let period = window.period_ms();
            let behind = (now - window.reset_at) / period;
            let start = window
                .reset_at
                .saturating_add(behind.saturating_mul(period));
            let in_flight = in_flight_units(&self.in_flight, name);
            *window = Window {
                limit: Some(limit),
                remaining: limit,
                reset_at: start.saturating_add(period),
                seen_at: start,
                granted: in_flight,
                by_consumer: BTreeMap::new(),
                assumed: true,
            };
        }
    }

    /// Records that process `id` holds `calls` calls waiting for this budget at `now` (0: none
    /// any more), dropping every word older than [`WAITING_FRESH_MS`] and, past
    /// [`MAX_WAITERS`], the stalest.
    pub fn note_waiting(&mut self, id: &str, calls: u64, now: u64) {
        self.waiting
            .retain(|_, w| now.saturating_sub(w.at_ms) <= WAITING_FRESH_MS && w.at_ms <= now);
        if calls == 0 {
            self.waiting.remove(id);
            return;
        }
        self.waiting.insert(
            id.to_owned(),
            Waiting {
                calls: calls.min(MAX_SAFE),
                at_ms: now,
            },
        );
        while self.waiting.len() > MAX_WAITERS {
            let stalest = self
                .waiting
                .iter()
                .min_by_key(|(_, w)| w.at_ms)
                .map(|(id, _)| id.clone());
            match stalest {
                Some(stalest) => {
                    self.waiting.remove(&stalest);
                }
                None => break,
            }
        }
    }

    /// The calls waiting at `now`, by every process whose word is fresh (at most
    /// [`WAITING_FRESH_MS`] old, and not from the future).
    #[must_use]
    pub fn waiting_at(&self, now: u64) -> u64 {
        self.waiting
            .values()
            .filter(|w| w.at_ms <= now && now - w.at_ms <= WAITING_FRESH_MS)
            .fold(0, |a, w| add_safe(a, w.calls))
    }

    /// The units the calls in flight hold of `dimension`.
    #[must_use]
    pub fn in_flight_units(&self, dimension: &str) -> u64 {
        in_flight_units(&self.in_flight, dimension)
    }

    /// Gives back what reservation `id` took (its call ended without a response to observe:
    /// its caller went away); `false` if there is none.
    pub fn release(&mut self, id: &str) -> bool {
        let Some(reservation) = self.in_flight.remove(id) else {
            return false;
        };
        for (dimension, units) in reservation.units {
            if let Some(window) = self.resources.get_mut(&dimension) {
                window.granted = window.granted.saturating_sub(units);
            }
        }
        true
    }

    /// Decides one call of a model provider that needs `units` of each dimension, for
    /// `consumer` at `now`, as [`State::decide`] decides one unit: it waits while paused or
    /// while a known window has fewer left than it needs (unless it needs more than the whole
    /// window's limit: waiting would never help, so it goes), else it counts the units in
    /// every known window and keeps them as reservation `id` until its response is observed.
    pub fn decide_units(
        &mut self,
        units: &[(String, u64)],
        consumer: &str,
        now: u64,
        id: &str,
    ) -> Decision {
        self.expire(now);
        self.carry(now);
        if let Some(until) = self.pause(now) {
            return Decision::Wait {
                until,
                why: WaitWhy::Paused,
            };
        }
        let mut spent_until = None;
        for (dimension, needed) in units {
            let Some(window) = self.window(dimension, now) else {
                continue;
            };
            let hopeless = window.limit.is_some_and(|limit| *needed > limit);
            if window.left() < *needed && !hopeless {
                spent_until = Some(spent_until.unwrap_or(0).max(window.reset_at));
            }
        }
        if let Some(until) = spent_until {
            return Decision::Wait {
                until,
                why: WaitWhy::Spent,
            };
        }
        for (dimension, needed) in units {
            if self.window(dimension, now).is_none() {
                continue;
            }
            let window = self.resources.get_mut(dimension).expect("known window");
            window.granted = add_safe(window.granted, *needed);
            let mut name = consumer_name(consumer);
            if !window.by_consumer.contains_key(name) && window.by_consumer.len() >= MAX_CONSUMERS {
                name = OTHER_CONSUMER;
            }
            let count = window.by_consumer.entry(name.to_owned()).or_insert(0);
            *count = add_safe(*count, *needed);
        }
        while self.in_flight.len() >= MAX_IN_FLIGHT {
            let oldest = self
                .in_flight
                .iter()
                .min_by_key(|(_, r)| r.at_ms)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(oldest) => {
                    self.release(&oldest);
                }
                None => break,
            }
        }
        self.in_flight.insert(
            id.to_owned(),
            Reservation {
                at_ms: now,
                units: units.iter().cloned().collect(),
            },
        );
        Decision::Go { counted: true }
    }

    /// Takes in a model provider's response at `now`, for reservation `id` (if it was taken
    /// with one). A pause status pauses every caller of the credential for its `retry-after`,
    /// else until the latest reset of the windows its headers say are spent, else for
    /// [`NO_WAIT_SAID_PAUSE_MS`] (at most [`MAX_PAUSE_MS`]); an overload status (the
    /// provider's capacity) backs every caller off for [`OVERLOAD_BACKOFF_MS`], doubling with
    /// each overload in a row up to [`MAX_OVERLOAD_BACKOFF_MS`] (a shorter `retry-after` wins). Each window it reports
    /// replaces that dimension's (never with more left than a window of the same reset had:
    /// an overtaken response gives nothing back), and counts as granted what the other calls
    /// still in flight reserved; a dimension whose headers were not readable is not known any
    /// more. Reports whose resets are less than [`SAME_WINDOW_MS`] apart are of the same
    /// window: the smaller remaining and the later reset are kept, whichever order the
    /// responses were recorded in, and so they are for a report whose reset is earlier than a
    /// seen window's (an older state of it: a token bucket's reset moves later with each call
    /// it counts); a report of the window before, recorded late, is ignored. In a dimension it did not report, the reservation's estimate is replaced by what
    /// the response's usage says it used. So what is in flight is counted, and nothing twice.
    pub fn apply_provider(
        &mut self,
        observation: &crate::ProviderObservation,
        id: Option<&str>,
        now: u64,
    ) {
        self.expire(now);
        self.carry(now);
        let reserved = id.and_then(|id| self.in_flight.remove(id));
        if observation.overloaded {
            // The provider's capacity, not the key's quota: a brief backoff, growing with
            // overloads in a row (the client's own retry is right; a minute for the whole key
            // is not).
            self.overloads = self.overloads.saturating_add(1).min(64);
            let backoff = OVERLOAD_BACKOFF_MS
                .saturating_mul(1 << (self.overloads - 1).min(16))
                .min(MAX_OVERLOAD_BACKOFF_MS);
            let wait = observation
                .retry_after_ms
                .map_or(backoff, |asked| asked.min(MAX_OVERLOAD_BACKOFF_MS));
            let until = now.saturating_add(wait);
            let kept = self.pause(now).unwrap_or(0);
            log::info!(
                "the provider is overloaded: every caller of this credential backs off {wait} ms"
            );
            self.paused_until = Some(until.max(kept));
        } else if observation.status != 0 {
            self.overloads = 0;
        }
        if observation.pause {
            // Without a wait asked (optional at OpenAI), the response's own headers say when:
            // the latest reset of the windows it reports spent, else a short pause.
            let spent_until = observation
                .windows
                .iter()
                .filter(|w| w.remaining == 0)
                .map(|w| w.reset_at.saturating_sub(now))
                .max();
            let wait = observation
                .retry_after_ms
                .or(spent_until)
                .unwrap_or(NO_WAIT_SAID_PAUSE_MS)
                .min(MAX_PAUSE_MS);
            let until = now.saturating_add(wait);
            let kept = self.pause(now).unwrap_or(0);
            log::info!("rate limited: every caller of this credential pauses {wait} ms");
            self.paused_until = Some(until.max(kept));
        }
        let reported: Vec<String> = observation
            .windows
            .iter()
            .map(|w| w.dimension.name().to_owned())
            .collect();
        for seen in &observation.windows {
            let name = seen.dimension.name().to_owned();
            if seen.reset_at <= now {
                // A window that ended while its response was on its way (a stream that
                // outlived it) says nothing of a later one another response reported.
                if self
                    .resources
                    .get(&name)
                    .is_some_and(|w| w.reset_at <= seen.reset_at)
                {
                    self.resources.remove(&name);
                }
                continue;
            }
            if seen.reset_at - now > MAX_WINDOW_MS {
                self.resources.remove(&name);
                continue;
            }
            let in_flight = self.in_flight_units(&name);
            let stored = self.resources.get(&name);
            if stored.is_some_and(|w| {
                !w.assumed
                    && seen.reset_at.saturating_add(SAME_WINDOW_MS) <= w.reset_at
                    && seen.reset_at < w.seen_at.saturating_add(SAME_WINDOW_MS)
            }) {
                // A report of an earlier window, recorded after the window that followed it
                // was seen (its reset, read from a duration, is still ahead): it says nothing
                // of the window now.
                continue;
            }
            let (remaining, reset_at, by_consumer) = match self.resources.remove(&name) {
                Some(same) if same.reset_at.abs_diff(seen.reset_at) < SAME_WINDOW_MS => (
                    seen.remaining.min(same.remaining),
                    seen.reset_at.max(same.reset_at),
                    same.by_consumer,
                ),
                // A reset before the one known, not of the window before: an older state of
                // the same window (a token bucket's reset moves later with every call it
                // counts; two answers recorded in the other order than the provider counted
                // them). It never loosens what the later one said.
                Some(later) if !later.assumed && seen.reset_at < later.reset_at => (
                    seen.remaining.min(later.remaining),
                    later.reset_at,
                    later.by_consumer,
                ),
                _ => (seen.remaining, seen.reset_at, BTreeMap::new()),
            };
            self.resources.insert(
                name,
                Window {
                    limit: seen.limit,
                    remaining,
                    reset_at,
                    seen_at: now,
                    granted: in_flight,
                    by_consumer,
                    assumed: false,
                },
            );
        }
        for dimension in &observation.unknown {
            self.resources.remove(dimension.name());
        }
        let Some(reserved) = reserved else {
            return;
        };
        for (name, estimate) in reserved.units {
            if reported.contains(&name) {
                continue;
            }
            // What the response's usage says it used replaces the estimate; a response that
            // says nothing of it (no window, no usage) gives the estimate back.
            let used = match observation.usage {
                Some(usage) => crate::Dimension::parse(&name).map_or(estimate, |d| usage.units(d)),
                None => 0,
            };
            if let Some(window) = self.resources.get_mut(&name) {
                window.granted = add_safe(window.granted.saturating_sub(estimate), used);
            }
        }
    }

    /// Takes in the head of reservation `id`'s response as it arrives (a stream, whose body
    /// may last minutes): each window it reports counts the request already (the provider
    /// counts it before it answers), so that dimension of the reservation is settled now;
    /// the others stay reserved until the body's usage settles them ([`State::apply_provider`]
    /// with `id`). Otherwise as [`State::apply_provider`] without a reservation.
    pub fn apply_provider_head(
        &mut self,
        observation: &crate::ProviderObservation,
        id: &str,
        now: u64,
    ) {
        if let Some(reservation) = self.in_flight.get_mut(id) {
            for window in &observation.windows {
                reservation.units.remove(window.dimension.name());
            }
        }
        self.apply_provider(observation, None, now);
    }
}
