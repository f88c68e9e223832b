//! The ledger of model providers (Anthropic, OpenAI, a configured one): a take reserves one
//! request and an estimate of tokens in every dimension the provider reports, and the
//! response's observation (or the call's release) settles the reservation. The same files,
//! lock, bounds and robustness as GitHub's budget, named `<provider>-budget-<key>.*`.

use super::{
    Attempt, Grant, Ledger, Observed, Save, Trouble, attempt_of, millis, observed, read_state,
};
use crate::key::CredentialKey;
use crate::provider::{Dimension, Provider, ProviderObservation};
use crate::state::{Decision, WaitWhy};
use crate::{Refused, ledger::LOCK_PATIENCE_MS};
use std::time::{Duration, Instant};

/// What a model call needs: one request, and the tokens the caller estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Need {
    /// Input tokens the call will send (estimated).
    pub input_tokens: u64,
    /// Output tokens it may receive (its `max_tokens`).
    pub output_tokens: u64,
}

impl Need {
    /// The units of each of `dimensions` this call needs.
    #[must_use]
    pub fn units(self, dimensions: &[Dimension]) -> Vec<(String, u64)> {
        let usage = crate::Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
        };
        dimensions
            .iter()
            .map(|d| (d.name().to_owned(), usage.units(*d)))
            .collect()
    }
}

impl Ledger {
    /// Takes what one call to `provider` on credential `key` needs, for `consumer`: goes at
    /// once when every known window has that much left (or is not known, or the ledger
    /// cannot do its part); while the credential is paused or a window is short, waits up to
    /// [`super::MAX_WAIT_MS`], then refuses without the call being made. A take that went
    /// returns a reservation ([`Grant::reservation`]) for [`Ledger::observe_model`] or
    /// [`Ledger::release`].
    pub fn take_model(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        need: Need,
        consumer: &str,
    ) -> Result<Grant, Refused> {
        self.take_model_within(provider, key, need, consumer, super::MAX_WAIT_MS)
    }

    /// [`Ledger::take_model`], waiting at most `wait_max_ms` (at most
    /// [`super::MAX_WAIT_MS`]; 0 refuses at once).
    pub fn take_model_within(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        need: Need,
        consumer: &str,
        wait_max_ms: u64,
    ) -> Result<Grant, Refused> {
        self.take_model_journaled(provider, key, need, consumer, wait_max_ms, true)
    }

    /// One try of [`Ledger::take_model`], without waiting and without a `budget-refused`
    /// event: for a caller that waits in its own way and tries again (the proxy), and
    /// journals the one refusal its client gets with [`Ledger::journal_model_refusal`].
    pub fn try_take_model(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        need: Need,
        consumer: &str,
    ) -> Result<Grant, Refused> {
        self.take_model_journaled(provider, key, need, consumer, 0, false)
    }

    /// A refusal its caller's client got after trying with [`Ledger::try_take_model`], in the
    /// journal (`budget-refused`, with how long the client waited in `refused`).
    pub fn journal_model_refusal(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        consumer: &str,
        refused: &Refused,
    ) {
        let resource = match refused {
            Refused::RateLimited { resource, .. } if !resource.is_empty() => resource.as_str(),
            _ => "requests",
        };
        self.journal_refused(provider.name(), key, resource, consumer, refused);
    }

    fn take_model_journaled(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        need: Need,
        consumer: &str,
        wait_max_ms: u64,
        journal: bool,
    ) -> Result<Grant, Refused> {
        self.sweep_if_due();
        let wait_max_ms = wait_max_ms.min(super::MAX_WAIT_MS);
        let units = need.units(&provider.dimensions());
        let start = self.clock.now_ms();
        let deadline = start.saturating_add(wait_max_ms);
        let started = Instant::now();
        let id = reservation_id();
        loop {
            let (until, why, dimension) =
                match self.attempt_model(provider, key, &units, consumer, &id) {
                    (Attempt::Go(grant), _) => return Ok(grant),
                    (Attempt::Wait { until, why }, dimension) => (until, why, dimension),
                };
            let now = self.clock.now_ms();
            let elapsed = millis(started.elapsed());
            if now >= deadline || elapsed >= wait_max_ms {
                let waited_ms = now.saturating_sub(start).max(elapsed);
                let asked = if dimension.is_empty() {
                    "requests".to_owned()
                } else {
                    dimension.clone()
                };
                let refused = refusal(until, why, dimension, waited_ms);
                if journal {
                    self.journal_refused(provider.name(), key, &asked, consumer, &refused);
                }
                return Err(refused);
            }
            let wake = until
                .min(deadline)
                .min(now.saturating_add(super::WAIT_POLL_MS));
            self.sleep
                .sleep(Duration::from_millis(wake.saturating_sub(now).max(1)));
        }
    }

    fn attempt_model(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        units: &[(String, u64)],
        consumer: &str,
        id: &str,
    ) -> (Attempt, String) {
        let mut short = String::new();
        let changed = self.with_state(
            provider.name(),
            key,
            LOCK_PATIENCE_MS,
            "call",
            |state, now| {
                let (decided, save, dimension) = decide_take(state, units, consumer, now, id);
                short = dimension;
                (decided, save)
            },
        );
        (attempt_of(changed, Some(id)), short)
    }

    /// Makes `changes` to `provider`'s budget of `key` in order, under one take of its lock,
    /// one read and (when any of them changed it) one write of its state: what
    /// [`Ledger::try_take_model`], [`Ledger::observe_model`], [`Ledger::observe_model_head`]
    /// and [`Ledger::release`] would each do in turn, for the cost of one of them. For a
    /// caller with several calls queued at once (the proxy's lane of a key: a response's
    /// settlement and the next request's take), whose requests would otherwise each wait
    /// for the calls before them.
    ///
    /// Returns what became of each take, in order (each of `changes` that is not a take was
    /// recorded). `Err` when nothing was recorded: the lock busy for
    /// [`LOCK_PATIENCE_MS`] (or, with only observations that settle nothing, at its one
    /// try), the state unreadable, or the write failed; the caller then makes the calls one at
    /// a time, each with its own handling of that trouble.
    pub fn change_model_batch(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        changes: &[ModelChange<'_>],
    ) -> Result<Vec<Result<Grant, Refused>>, Trouble> {
        let takes = changes
            .iter()
            .filter(|c| matches!(c, ModelChange::Take { .. }))
            .count();
        if takes > 0 {
            self.sweep_if_due();
        }
        // As each call alone would: only observations settling nothing never wait.
        let patience = if changes.iter().all(|c| {
            matches!(
                c,
                ModelChange::Observe {
                    reservation: None,
                    ..
                }
            )
        }) {
            0
        } else {
            LOCK_PATIENCE_MS
        };
        let dimensions = provider.dimensions();
        let what = if takes > 0 { "call" } else { "response" };
        let changed = self.with_state(provider.name(), key, patience, what, |state, now| {
            let mut save = Save::Leave;
            let mut decided = Vec::with_capacity(takes);
            for change in changes {
                match change {
                    ModelChange::Take { need, consumer } => {
                        let id = reservation_id();
                        let units = need.units(&dimensions);
                        let (decision, saved, dimension) =
                            decide_take(state, &units, consumer, now, &id);
                        if saved == Save::Replace {
                            save = Save::Replace;
                        }
                        decided.push((decision, dimension, id));
                    }
                    ModelChange::Observe {
                        reservation: Some(id),
                        observation,
                        head: true,
                    } => {
                        state.apply_provider_head(observation, id, now);
                        save = Save::Replace;
                    }
                    ModelChange::Observe {
                        reservation,
                        observation,
                        ..
                    } => {
                        state.apply_provider(observation, *reservation, now);
                        save = Save::Replace;
                    }
                    ModelChange::Release { reservation } => {
                        state.release(reservation);
                        save = Save::Replace;
                    }
                }
            }
            (decided, save)
        })?;
        changed.written?;
        Ok(changed
            .value
            .into_iter()
            .map(|((decision, left), dimension, id)| match decision {
                Decision::Go { counted } => Ok(Grant {
                    counted,
                    left,
                    unaccounted: None,
                    reservation: counted.then_some(id),
                }),
                Decision::Wait { until, why } => Err(refusal(until, why, dimension, 0)),
            })
            .collect())
    }

    /// What a take of `need` from `provider` would meet now, without taking anything, waiting
    /// or taking the lock (for `worklane why`): `left` is the requests left, when known.
    #[must_use]
    pub fn peek_model(&self, provider: &Provider, key: &CredentialKey, need: Need) -> super::Peek {
        let Ok(path) = self.dir.file(&key.state_name_of(provider.name())) else {
            return super::Peek::Go { left: None };
        };
        let now = self.clock.now_ms();
        let mut state = match read_state(&path) {
            Ok(state) => state,
            Err(trouble) => return super::Peek::Unaccounted(trouble),
        };
        state.carry(now);
        let left = state
            .window(Dimension::Requests.name(), now)
            .map(crate::state::Window::left);
        match state.decide_units(&need.units(&provider.dimensions()), "(peek)", now, "peek") {
            Decision::Go { .. } => super::Peek::Go { left },
            Decision::Wait { until, why } => super::Peek::Wait { until, why },
        }
    }

    /// Records what a response of `provider` said (and, with `reservation`, settles what its
    /// take reserved). Without a reservation it tries the lock once and never waits; with one
    /// it tries for up to 0.5 s, as a release does: a settlement lost to a busy lock would
    /// leave the call counted in flight until its reservation expires (10 min).
    pub fn observe_model(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        reservation: Option<&str>,
        observation: &ProviderObservation,
    ) -> Observed {
        let patience = if reservation.is_some() {
            LOCK_PATIENCE_MS
        } else {
            0
        };
        self.change_model(provider, key, "response", patience, |state, now| {
            state.apply_provider(observation, reservation, now);
        })
    }

    /// Records the head of `reservation`'s response as it arrives (a stream's): the windows it
    /// reports settle those dimensions of the reservation at once, the rest waits for the
    /// body ([`crate::State::apply_provider_head`]). Tries the lock for up to 0.5 s, as a
    /// settlement does.
    pub fn observe_model_head(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        reservation: &str,
        observation: &ProviderObservation,
    ) -> Observed {
        self.change_model(provider, key, "response", LOCK_PATIENCE_MS, |state, now| {
            state.apply_provider_head(observation, reservation, now);
        })
    }

    /// Gives back what `reservation` took: its call ended without a response to observe (the
    /// client went away, the connection failed). Tries the lock for up to 0.5 s.
    pub fn release(&self, provider: &Provider, key: &CredentialKey, reservation: &str) -> Observed {
        self.change_model(provider, key, "release", LOCK_PATIENCE_MS, |state, _| {
            state.release(reservation);
        })
    }

    /// Records that the process known by `waiter` (a random id of its own, as
    /// [`Ledger::waiter_id`] makes) holds `calls` calls waiting for this budget (0: none any
    /// more), for the health view. Tries the lock once and never waits; a word not written is
    /// said again by the next one (a waiting process says it at least every second, and a
    /// word older than 5 s is not counted).
    pub fn note_waiting(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        waiter: &str,
        calls: u64,
    ) -> Observed {
        self.change_model(provider, key, "waiting", 0, |state, now| {
            state.note_waiting(waiter, calls, now);
        })
    }

    /// A new random id for [`Ledger::note_waiting`]: 16 lowercase hex digits.
    #[must_use]
    pub fn waiter_id() -> String {
        reservation_id()
    }

    fn change_model(
        &self,
        provider: &Provider,
        key: &CredentialKey,
        what: &'static str,
        patience: u64,
        change: impl FnOnce(&mut crate::State, u64),
    ) -> Observed {
        observed(
            self.with_state(provider.name(), key, patience, what, |state, now| {
                change(state, now);
                ((), Save::Replace)
            }),
        )
    }
}

/// One change of [`Ledger::change_model_batch`].
#[derive(Debug, Clone, Copy)]
pub enum ModelChange<'a> {
    /// One try of a take, as [`Ledger::try_take_model`] (no waiting, no journaled refusal).
    Take {
        /// What the call needs.
        need: Need,
        /// Who takes it.
        consumer: &'a str,
    },
    /// A response, as [`Ledger::observe_model`], or with `head` and a reservation as
    /// [`Ledger::observe_model_head`].
    Observe {
        /// The reservation the response settles, if any.
        reservation: Option<&'a str>,
        /// What the response said.
        observation: &'a ProviderObservation,
        /// Only the response's head.
        head: bool,
    },
    /// A reservation given back, as [`Ledger::release`].
    Release {
        /// The reservation.
        reservation: &'a str,
    },
}

/// A take's step under the lock: the decision with the requests left when it goes, whether
/// the state must be written, and the dimension a refusal names.
fn decide_take(
    state: &mut crate::State,
    units: &[(String, u64)],
    consumer: &str,
    now: u64,
    id: &str,
) -> ((Decision, Option<u64>), Save, String) {
    // A window that ended is carried over first, so the words name the right one.
    state.carry(now);
    // The dimension that is short, for the refusal's words.
    let short = units
        .iter()
        .find(|(d, n)| state.window(d, now).is_some_and(|w| w.left() < *n))
        .map(|(d, _)| d.clone())
        .unwrap_or_else(|| "requests".to_owned());
    match state.decide_units(units, consumer, now, id) {
        wait @ Decision::Wait { .. } => ((wait, None), Save::Leave, short),
        go @ Decision::Go { .. } => {
            let left = state
                .window(Dimension::Requests.name(), now)
                .map(crate::state::Window::left);
            ((go, left), Save::Replace, short)
        }
    }
}

/// The refusal of a take that met a wait it could not make.
fn refusal(until: u64, why: WaitWhy, dimension: String, waited_ms: u64) -> Refused {
    match why {
        WaitWhy::Paused => Refused::SecondaryRateLimited { until, waited_ms },
        WaitWhy::Spent => Refused::RateLimited {
            resource: dimension,
            reset_at: until,
            waited_ms,
        },
    }
}

/// A new reservation's id: 16 random lowercase hex digits (`/dev/urandom`; without it, the
/// time, the pid and a counter, mixed).
fn reservation_id() -> String {
    use std::io::Read;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_err()
    {
        let mut x = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32)
            ^ COUNTER
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        bytes = x.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
