//! The ledger: takes and observations against the state files in the slot directory, each
//! under the budget's lock, with the robustness rules of the design: the ledger never stops a
//! call because of its own trouble (a busy lock, an unwritable file), only because the budget
//! is spent or paused. Every change goes through one sequence, `Ledger::with_state`: lock,
//! read, change, replace, release.

use crate::key::CredentialKey;
use crate::observe::Observation;
use crate::state::{Decision, State, WaitWhy, Window};
use std::sync::Arc;
use std::time::{Duration, Instant};
use worklane_lease::{Acquired, Clock, Lease, Options, Request, SystemClock, acquire, rfc3339_ms};
use worklane_slotfile::{SHARED_MODE, SlotDir, SlotPath};

mod health;
mod outcome;
mod providers;
mod sweep;

pub use health::{CredentialView, Health, ResourceView, StateProblem, UnshownState};
pub use outcome::{Grant, Observed, Peek, Refused, Trouble};
pub use providers::{ModelChange, Need};

/// How long a take waits for calls to be left or a pause to end before it fails: 10 s.
pub const MAX_WAIT_MS: u64 = 10_000;
/// How long a take waits for the budget's lock before it lets the call go unaccounted: 0.5 s.
pub const LOCK_PATIENCE_MS: u64 = 500;
/// How often a waiting take looks again (another process may have seen a new window).
pub const WAIT_POLL_MS: u64 = 1_000;
/// How often a busy lock is tried again within [`LOCK_PATIENCE_MS`].
pub const LOCK_POLL_MS: u64 = 10;
/// A state file unchanged for longer than this is removed by the next take: 2 h.
pub const STALE_MS: u64 = 2 * 60 * 60 * 1000;
/// At most one sweep for stale state files per process in this long: 10 min.
pub const SWEEP_EVERY_MS: u64 = 10 * 60 * 1000;
/// The health view shows at most this many credentials (the newest readable ones).
pub const HEALTH_SHOWN: usize = 8;
/// The health view tries at most this many files.
pub const HEALTH_TRIED: usize = 32;

/// How the ledger waits; injected so tests advance a manual clock instead of sleeping.
pub trait Sleep: Send + Sync {
    /// Waits `duration`.
    fn sleep(&self, duration: Duration);
}

/// Real sleeping.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealSleep;

impl Sleep for RealSleep {
    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// One step of a take, under the lock.
enum Attempt {
    Go(Grant),
    Wait { until: u64, why: WaitWhy },
}

/// What a change made under the budget's lock asks of the state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Save {
    /// Replace it with the changed state.
    Replace,
    /// Leave it as it is (nothing changed that must be kept).
    Leave,
}

/// A change made under the budget's lock ([`Ledger::with_state`]): what it decided, and how
/// the write it asked for went (`Ok` also when it asked for none).
struct Changed<T> {
    value: T,
    written: Result<(), Trouble>,
}

/// A grant for a call that goes unaccounted, because the ledger could not do its part.
fn unaccounted(trouble: Trouble) -> Grant {
    Grant {
        counted: false,
        left: None,
        unaccounted: Some(trouble),
        reservation: None,
    }
}

/// The step of a take under the lock ([`Ledger::with_state`]): the decision made there, with
/// the calls left (when the take was counted against a known window) and the reservation
/// that names it, if any. A take that could not be recorded goes, unaccounted.
fn attempt_of(
    changed: Result<Changed<(Decision, Option<u64>)>, Trouble>,
    reservation: Option<&str>,
) -> Attempt {
    match changed {
        Err(trouble) => Attempt::Go(unaccounted(trouble)),
        Ok(Changed {
            value: (Decision::Wait { until, why }, _),
            ..
        }) => Attempt::Wait { until, why },
        Ok(Changed {
            value: (Decision::Go { counted }, left),
            written: Ok(()),
        }) => Attempt::Go(Grant {
            counted,
            left,
            unaccounted: None,
            reservation: reservation.filter(|_| counted).map(str::to_owned),
        }),
        Ok(Changed {
            value: (Decision::Go { .. }, left),
            written: Err(trouble),
        }) => Attempt::Go(Grant {
            counted: false,
            left,
            unaccounted: Some(trouble),
            reservation: None,
        }),
    }
}

/// What became of an observation or a release made under the lock.
fn observed(changed: Result<Changed<()>, Trouble>) -> Observed {
    match changed.and_then(|changed| changed.written) {
        Ok(()) => Observed::Recorded,
        Err(trouble) => Observed::Skipped(trouble),
    }
}

/// The budget ledger of one slot directory.
pub struct Ledger {
    dir: SlotDir,
    clock: Arc<dyn Clock>,
    sleep: Arc<dyn Sleep>,
    owner: String,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("dir", &self.dir.path())
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// The ledger of `dir` (a slot directory from `SlotDir::resolve`, or a test's), on the
    /// system clock.
    #[must_use]
    pub fn new(dir: SlotDir) -> Ledger {
        Ledger {
            dir,
            clock: Arc::new(SystemClock),
            sleep: Arc::new(RealSleep),
            owner: "worklane-budget".to_owned(),
        }
    }

    /// Uses `clock` for every time decision.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Ledger {
        self.clock = clock;
        self
    }

    /// Uses `sleep` for every wait.
    #[must_use]
    pub fn sleeper(mut self, sleep: Arc<dyn Sleep>) -> Ledger {
        self.sleep = sleep;
        self
    }

    /// Names this process in the budget lock's record (default `worklane-budget`).
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Ledger {
        self.owner = owner.into();
        self
    }

    /// The directory.
    #[must_use]
    pub fn dir(&self) -> &SlotDir {
        &self.dir
    }

    /// Takes one unit of `resource` for `consumer` before a call. Goes at once when calls are
    /// left, when the window is not known, or when the ledger cannot do its part; when none
    /// is left or the credential is paused, waits up to [`MAX_WAIT_MS`] for that to change,
    /// then refuses without the call being made.
    pub fn take(
        &self,
        key: &CredentialKey,
        resource: &str,
        consumer: &str,
    ) -> Result<Grant, Refused> {
        self.take_journaled(key, resource, consumer, true)
    }

    fn take_journaled(
        &self,
        key: &CredentialKey,
        resource: &str,
        consumer: &str,
        journaled: bool,
    ) -> Result<Grant, Refused> {
        self.sweep_if_due();
        let start = self.clock.now_ms();
        let deadline = start.saturating_add(MAX_WAIT_MS);
        // The clock decides the boundaries (and is what tests drive); a monotonic bound also
        // ends the wait, so a wall clock stepped back cannot stretch it.
        let started = Instant::now();
        loop {
            let (until, why) = match self.attempt(key, resource, consumer) {
                Attempt::Go(grant) => return Ok(grant),
                Attempt::Wait { until, why } => (until, why),
            };
            let now = self.clock.now_ms();
            let elapsed = millis(started.elapsed());
            if now >= deadline || elapsed >= MAX_WAIT_MS {
                let waited_ms = now.saturating_sub(start).max(elapsed);
                let refused = match why {
                    WaitWhy::Paused => Refused::SecondaryRateLimited { until, waited_ms },
                    WaitWhy::Spent => Refused::RateLimited {
                        resource: resource.to_owned(),
                        reset_at: until,
                        waited_ms,
                    },
                };
                if journaled {
                    self.journal_refused("github", key, resource, consumer, &refused);
                }
                return Err(refused);
            }
            let wake = until.min(deadline).min(now.saturating_add(WAIT_POLL_MS));
            self.sleep
                .sleep(Duration::from_millis(wake.saturating_sub(now).max(1)));
        }
    }

    /// [`Ledger::take`] that waits at most `wait_max` (shorter or longer than its own 10 s)
    /// for calls to be left or a pause to end. The wait is decided from [`Ledger::peek`] (no
    /// lock is taken while waiting), and `take` is called once a call would go: it then goes
    /// at once, unless another process took the last call in between, when `take` waits as it
    /// always does (at most 10 s).
    pub fn take_within(
        &self,
        key: &CredentialKey,
        resource: &str,
        consumer: &str,
        wait_max: Duration,
    ) -> Result<Grant, Refused> {
        // Counted by the ledger's clock as well as the monotonic one, as `take`'s own wait is
        // (a test's manual clock makes each wait exact).
        let (started, start_ms) = (Instant::now(), self.clock.now_ms());
        let elapsed = || {
            Duration::from_millis(self.clock.now_ms().saturating_sub(start_ms))
                .max(started.elapsed())
        };
        loop {
            let waited = elapsed();
            let (until, why) = match self.peek(key, resource) {
                Peek::Wait { until, why } => (until, why),
                _ => match self.take_journaled(key, resource, consumer, false) {
                    Err(_) if elapsed() < wait_max => continue,
                    Err(refused) => {
                        self.journal_refused("github", key, resource, consumer, &refused);
                        return Err(refused);
                    }
                    taken => return taken,
                },
            };
            if waited >= wait_max {
                let waited_ms = millis(waited);
                let refused = match why {
                    WaitWhy::Paused => Refused::SecondaryRateLimited { until, waited_ms },
                    WaitWhy::Spent => Refused::RateLimited {
                        resource: resource.to_owned(),
                        reset_at: until,
                        waited_ms,
                    },
                };
                self.journal_refused("github", key, resource, consumer, &refused);
                return Err(refused);
            }
            let to_until = Duration::from_millis(until.saturating_sub(self.clock.now_ms()).max(1));
            self.sleep.sleep(
                to_until
                    .min(Duration::from_millis(WAIT_POLL_MS))
                    .min(wait_max - waited),
            );
        }
    }

    fn attempt(&self, key: &CredentialKey, resource: &str, consumer: &str) -> Attempt {
        let changed = self.with_state("github", key, LOCK_PATIENCE_MS, "call", |state, now| {
            let decision = state.decide(resource, consumer, now);
            if decision == (Decision::Go { counted: true }) {
                let left = state.window(resource, now).map(Window::left);
                ((decision, left), Save::Replace)
            } else {
                ((decision, None), Save::Leave)
            }
        });
        attempt_of(changed, None)
    }

    /// Records what a response said. Tries the lock once and never waits.
    pub fn observe(&self, key: &CredentialKey, observation: &Observation) -> Observed {
        observed(self.with_state("github", key, 0, "response", |state, now| {
            state.apply(observation, now);
            ((), Save::Replace)
        }))
    }

    /// The one lock-read-change-write sequence of every take, observation and release: takes
    /// the lock of `provider`'s budget of `key` (trying for up to `patience_ms`), reads its
    /// state (a fresh one when there is none or what is there is not a state), runs `change`
    /// on it at the clock's now, replaces the file whole (mode 0660) if `change` asks to,
    /// journals a pause that write set or moved (`budget-paused`), and releases the lock.
    ///
    /// `Err` when the ledger could not do its part before `change` ran: the lock busy or
    /// broken, the file's name refused, or a state that exists but that this process cannot
    /// read, which is then never replaced (that would wipe the counts of every other user of
    /// the credential). A write that failed is [`Changed::written`]:
    /// [`Trouble::NotWritten`] with `what` (`call`, `response` or `release`).
    fn with_state<T>(
        &self,
        provider: &str,
        key: &CredentialKey,
        patience_ms: u64,
        what: &'static str,
        change: impl FnOnce(&mut State, u64) -> (T, Save),
    ) -> Result<Changed<T>, Trouble> {
        let lease = self.lock(&key.lock_name_of(provider), patience_ms)?;
        let changed = self.change_locked(provider, key, what, change);
        let _ = lease.release();
        changed
    }

    /// [`Ledger::with_state`]'s steps once the lock is held.
    fn change_locked<T>(
        &self,
        provider: &str,
        key: &CredentialKey,
        what: &'static str,
        change: impl FnOnce(&mut State, u64) -> (T, Save),
    ) -> Result<Changed<T>, Trouble> {
        let name = key.state_name_of(provider);
        let path = self
            .dir
            .file(&name)
            .map_err(|source| Trouble::Name { name, source })?;
        let now = self.clock.now_ms();
        let mut state = read_state(&path)?;
        let paused = state.pause(now);
        let (value, save) = change(&mut state, now);
        let written = match save {
            Save::Leave => Ok(()),
            Save::Replace => match path.rewrite(&state.to_bytes(now), SHARED_MODE) {
                Ok(()) => {
                    self.journal_paused(provider, key, paused, state.pause(now));
                    Ok(())
                }
                Err(source) => Err(Trouble::NotWritten { what, source }),
            },
        };
        Ok(Changed { value, written })
    }

    /// A take refused, in the journal (`budget-refused`; the credential by its key).
    fn journal_refused(
        &self,
        provider: &str,
        key: &CredentialKey,
        resource: &str,
        consumer: &str,
        refused: &Refused,
    ) {
        let (resource, retry_at, waited_ms) = match refused {
            Refused::RateLimited {
                resource,
                reset_at,
                waited_ms,
            } => (resource.as_str(), *reset_at, *waited_ms),
            Refused::SecondaryRateLimited { until, waited_ms } => (resource, *until, *waited_ms),
        };
        worklane_journal::emit(
            &self.dir,
            worklane_journal::Event::BudgetRefused {
                provider: provider.to_owned(),
                credential: key.as_str().to_owned(),
                resource: resource.to_owned(),
                refusal: refused.kind().to_owned(),
                retry_at: (retry_at > 0).then(|| rfc3339_ms(retry_at)),
                consumer: consumer.to_owned(),
                waited_ms,
            },
        );
    }

    /// A pause set (or moved) by an observation, in the journal (`budget-paused`).
    fn journal_paused(
        &self,
        provider: &str,
        key: &CredentialKey,
        before: Option<u64>,
        after: Option<u64>,
    ) {
        if let Some(until) = after
            && before != after
        {
            worklane_journal::emit(
                &self.dir,
                worklane_journal::Event::BudgetPaused {
                    provider: provider.to_owned(),
                    credential: key.as_str().to_owned(),
                    until: rfc3339_ms(until),
                },
            );
        }
    }

    /// What a take of `resource` would meet now, without taking anything, waiting, or taking
    /// the lock (for diagnostics such as `worklane why`): the state is read as a take reads
    /// it and decided on a copy.
    #[must_use]
    pub fn peek(&self, key: &CredentialKey, resource: &str) -> Peek {
        let Ok(path) = self.dir.file(&key.state_name()) else {
            return Peek::Go { left: None };
        };
        let now = self.clock.now_ms();
        let mut state = match read_state(&path) {
            Ok(state) => state,
            Err(trouble) => return Peek::Unaccounted(trouble),
        };
        let left = state.window(resource, now).map(crate::state::Window::left);
        match state.decide(resource, "(peek)", now) {
            Decision::Go { .. } => Peek::Go { left },
            Decision::Wait { until, why } => Peek::Wait { until, why },
        }
    }

    /// Takes the budget's lock, trying for up to `patience_ms`; `Err` says why not.
    fn lock(&self, lock: &str, patience_ms: u64) -> Result<Lease, Trouble> {
        let request = Request::new(self.owner.clone());
        let options = Options::process().clock(Arc::clone(&self.clock));
        let start = self.clock.now_ms();
        let started = Instant::now();
        loop {
            match acquire(&self.dir, lock, &request, &options) {
                Ok(Acquired::Held(lease)) => return Ok(lease),
                Ok(Acquired::Refused(refusal)) => {
                    let waited = self
                        .clock
                        .now_ms()
                        .saturating_sub(start)
                        .max(millis(started.elapsed()));
                    if waited >= patience_ms {
                        return Err(Trouble::LockBusy {
                            lock: lock.to_owned(),
                            waited_ms: patience_ms,
                            refusal: Box::new(refusal),
                        });
                    }
                }
                Err(e) => {
                    return Err(Trouble::Lock {
                        lock: lock.to_owned(),
                        source: Box::new(e),
                    });
                }
            }
            self.sleep.sleep(Duration::from_millis(LOCK_POLL_MS));
        }
    }
}

/// A duration in whole milliseconds.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The state of `path`: a fresh one when there is none or what is there is not a state (not
/// JSON, too large, not a regular file: it is replaced by the next write). A state that is
/// there but cannot be read (permissions, I/O) is [`Trouble::StateUnreadable`]: the caller
/// neither counts against it nor replaces it.
fn read_state(path: &SlotPath) -> Result<State, Trouble> {
    match path.read() {
        Ok(None) => Ok(State::default()),
        Ok(Some(bytes)) => Ok(State::parse(&bytes).unwrap_or_default()),
        Err(source @ worklane_slotfile::read::Error::Io { .. }) => {
            Err(Trouble::StateUnreadable { source })
        }
        Err(_) => Ok(State::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::{RealSleep, Sleep, millis};
    use std::time::{Duration, Instant};

    #[test]
    fn real_sleep_sleeps_at_least_the_time_asked() {
        // A lower bound the platform guarantees (`std::thread::sleep` never returns early), not
        // a measure of speed: the ledger's waits on the real clock depend on it.
        let asked = Duration::from_millis(20);
        let started = Instant::now();
        RealSleep.sleep(asked);
        assert!(
            started.elapsed() >= asked,
            "RealSleep returned before {asked:?} had passed"
        );
    }

    #[test]
    fn millis_are_whole_and_saturate() {
        assert_eq!(millis(Duration::from_micros(1_999)), 1, "whole ms, cut");
        assert_eq!(millis(Duration::from_secs(10)), 10_000, "10 s");
        assert_eq!(millis(Duration::MAX), u64::MAX, "saturates");
    }
}
