//! The ledger: takes and observations against the state files in the slot directory, each
//! under the budget's lock, with the robustness rules of the design: the ledger never stops a
//! call because of its own trouble (a busy lock, an unwritable file), only because the budget
//! is spent or paused.

use crate::key::CredentialKey;
use crate::observe::Observation;
use crate::state::{Decision, State, WaitWhy};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use worklane_lease::{
    Acquired, Clock, Lease, Options, Refusal, Request, SystemClock, acquire, rfc3339_ms,
};
use worklane_slotfile::{SHARED_MODE, SlotDir, SlotPath};

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

/// A call may go.
#[derive(Debug)]
pub struct Grant {
    /// Whether a unit was taken from a known window.
    pub counted: bool,
    /// Calls left in the resource's window after this one, when known.
    pub left: Option<u64>,
    /// Why the call goes without being accounted, when the ledger could not do its part (its
    /// lock busy for 0.5 s, its state unreadable or not writable). The call goes all the same;
    /// the caller should say so where a person sees it.
    pub unaccounted: Option<Trouble>,
    /// A model provider's take: the reservation its response's observation (or its release,
    /// if the call ends without one) names.
    pub reservation: Option<String>,
}

/// Why the ledger could not do its part for one take or observation: the call goes all the
/// same (a take, with [`Grant::unaccounted`]), or the response is not recorded (an
/// observation, [`Observed::Skipped`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Trouble {
    /// The budget's lock stayed busy: for [`LOCK_PATIENCE_MS`] (a take) or at its one try (an
    /// observation).
    #[error("the budget lock {lock} stayed busy for {waited_ms} ms: {refusal}")]
    LockBusy {
        /// The lock's file name.
        lock: String,
        /// How long the ledger tried.
        waited_ms: u64,
        /// The lease layer's refusal at the last try: the holder's record as it was read (pid,
        /// host, owner, since when), and why it counts as live (boxed: a large value).
        refusal: Box<Refusal>,
    },
    /// The budget's lock could not be taken at all.
    #[error("cannot take the budget lock {lock}")]
    Lock {
        /// The lock's file name.
        lock: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::acquire::Error>,
    },
    /// The state file exists but this process cannot read it (permissions, an I/O error). It
    /// is left exactly as it is: a process that could not read the counts never replaces them.
    #[error(
        "the budget state exists but this process cannot read it; it was left as it is: give \
         it the slot directory's group and mode 0660, or run as a member of that group"
    )]
    StateUnreadable {
        /// The read error.
        #[source]
        source: worklane_slotfile::read::Error,
    },
    /// The state could not be written.
    #[error("cannot record the {what}")]
    NotWritten {
        /// `call` (a take) or `response` (an observation).
        what: &'static str,
        /// The write error.
        #[source]
        source: worklane_slotfile::write::Error,
    },
    /// The credential's state file name is refused by the slot directory.
    #[error("cannot name the budget state {name}")]
    Name {
        /// The name.
        name: String,
        /// Why.
        #[source]
        source: worklane_slotfile::name::Error,
    },
}

/// A call must not be made: the budget is spent or paused, and stayed so for 10 s. Both are
/// the provider's own kinds of error, status 429.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// The resource's window has no calls left.
    #[error(
        "rate_limited (429): no {resource} calls are left for this credential until {} \
         (waited {waited_ms} ms); the call was not made: retry after the reset",
        rfc3339_ms(*.reset_at)
    )]
    RateLimited {
        /// The resource.
        resource: String,
        /// When its window resets (ms since the Unix epoch).
        reset_at: u64,
        /// How long the take waited.
        waited_ms: u64,
    },
    /// A secondary limit paused every call on this credential.
    #[error(
        "secondary_rate_limited (429): every call on this credential is paused until {} \
         after a secondary rate limit (waited {waited_ms} ms); the call was not made: retry \
         after the pause",
        rfc3339_ms(*.until)
    )]
    SecondaryRateLimited {
        /// When the pause ends (ms since the Unix epoch).
        until: u64,
        /// How long the take waited.
        waited_ms: u64,
    },
}

impl Refused {
    /// The provider's error kind: `rate_limited` or `secondary_rate_limited`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Refused::RateLimited { .. } => "rate_limited",
            Refused::SecondaryRateLimited { .. } => "secondary_rate_limited",
        }
    }

    /// The HTTP status the refusal stands for: 429.
    #[must_use]
    pub fn status(&self) -> u16 {
        429
    }
}

/// What became of an observation.
#[derive(Debug)]
pub enum Observed {
    /// The state now reflects it.
    Recorded,
    /// Not recorded: the lock was busy (an observation tries it once and never waits), the
    /// state exists but could not be read (it is left as it is), or it could not be written.
    /// Nothing else follows from it.
    Skipped(Trouble),
}

/// What [`Ledger::peek`] found.
#[derive(Debug)]
pub enum Peek {
    /// A take would go now; `left` calls in the resource's window, when known.
    Go {
        /// Calls left, when the window is known.
        left: Option<u64>,
    },
    /// A take would wait until `until` (ms), for `why`, and fail if that is over 10 s away.
    Wait {
        /// When the wait would end.
        until: u64,
        /// Spent window or pause.
        why: WaitWhy,
    },
    /// The state exists but cannot be read by this process: a take would go, unaccounted
    /// ([`Trouble::StateUnreadable`]).
    Unaccounted(Trouble),
}

/// One step of a take, under the lock.
enum Attempt {
    Go(Grant),
    Wait { until: u64, why: WaitWhy },
}

mod model;

pub use model::Need;

/// A new reservation's id: 16 random lowercase hex digits (`/dev/urandom`; without it, the
/// time, the pid and a counter, mixed).
pub(crate) fn reservation_id() -> String {
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

/// The budget ledger of one slot directory.
pub struct Ledger {
    dir: SlotDir,
    clock: Arc<dyn Clock>,
    sleep: Arc<dyn Sleep>,
    owner: String,
}

/// When this process last swept for stale state files (whichever ledger did it).
static LAST_SWEEP: Mutex<Option<u64>> = Mutex::new(None);

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
        let started = Instant::now();
        loop {
            let waited = started.elapsed();
            let (until, why) = match self.peek(key, resource) {
                Peek::Wait { until, why } => (until, why),
                _ => match self.take_journaled(key, resource, consumer, false) {
                    Err(_) if started.elapsed() < wait_max => continue,
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
        let lease = match self.lock(&key.lock_name(), LOCK_PATIENCE_MS) {
            Ok(lease) => lease,
            Err(why) => {
                return Attempt::Go(Grant {
                    counted: false,
                    left: None,
                    unaccounted: Some(why),
                    reservation: None,
                });
            }
        };
        let unaccounted = |trouble| {
            Attempt::Go(Grant {
                counted: false,
                left: None,
                unaccounted: Some(trouble),
                reservation: None,
            })
        };
        let path = match self.dir.file(&key.state_name()) {
            Ok(path) => path,
            Err(e) => {
                let _ = lease.release();
                return unaccounted(Trouble::Name {
                    name: key.state_name(),
                    source: e,
                });
            }
        };
        let now = self.clock.now_ms();
        let mut state = match read_state(&path) {
            Ok(state) => state,
            Err(trouble) => {
                let _ = lease.release();
                return unaccounted(trouble);
            }
        };
        let attempt = match state.decide(resource, consumer, now) {
            Decision::Wait { until, why } => Attempt::Wait { until, why },
            Decision::Go { counted: false } => Attempt::Go(Grant {
                counted: false,
                left: None,
                unaccounted: None,
                reservation: None,
            }),
            Decision::Go { counted: true } => {
                let left = state.window(resource, now).map(crate::state::Window::left);
                match path.replace(&state.to_bytes(now), SHARED_MODE) {
                    Ok(()) => Attempt::Go(Grant {
                        counted: true,
                        left,
                        unaccounted: None,
                        reservation: None,
                    }),
                    Err(e) => Attempt::Go(Grant {
                        counted: false,
                        left,
                        unaccounted: Some(Trouble::NotWritten {
                            what: "call",
                            source: e,
                        }),
                        reservation: None,
                    }),
                }
            }
        };
        let _ = lease.release();
        attempt
    }

    /// Records what a response said. Tries the lock once and never waits.
    pub fn observe(&self, key: &CredentialKey, observation: &Observation) -> Observed {
        let lease = match self.lock(&key.lock_name(), 0) {
            Ok(lease) => lease,
            Err(why) => return Observed::Skipped(why),
        };
        let path = match self.dir.file(&key.state_name()) {
            Ok(path) => path,
            Err(e) => {
                let _ = lease.release();
                return Observed::Skipped(Trouble::Name {
                    name: key.state_name(),
                    source: e,
                });
            }
        };
        let now = self.clock.now_ms();
        // A state this process cannot read is never replaced: that would wipe the counts of
        // every other user of the credential.
        let mut state = match read_state(&path) {
            Ok(state) => state,
            Err(trouble) => {
                let _ = lease.release();
                return Observed::Skipped(trouble);
            }
        };
        let paused = state.pause(now);
        state.apply(observation, now);
        let observed = match path.replace(&state.to_bytes(now), SHARED_MODE) {
            Ok(()) => {
                self.journal_paused("github", key, paused, state.pause(now));
                Observed::Recorded
            }
            Err(e) => Observed::Skipped(Trouble::NotWritten {
                what: "response",
                source: e,
            }),
        };
        let _ = lease.release();
        observed
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

    fn sweep_if_due(&self) {
        let now = self.clock.now_ms();
        {
            let mut last = LAST_SWEEP
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // A clock now behind the last sweep (set back) sweeps rather than waits.
            if last.is_some_and(|at| now >= at && now - at < SWEEP_EVERY_MS) {
                return;
            }
            *last = Some(now);
        }
        let _ = self.remove_stale();
    }

    /// Removes every budget state file unchanged for more than [`STALE_MS`], each under its
    /// lock (tried once: a busy budget is in use) and only if its bytes did not change.
    /// Returns how many were removed. [`Ledger::take`] calls this at most every
    /// [`SWEEP_EVERY_MS`] per process.
    pub fn remove_stale(&self) -> Result<usize, worklane_slotfile::open::Error> {
        let now = self.clock.now_ms();
        let mut removed = 0;
        for path in self.dir.list()? {
            let Some((provider, key)) = crate::key::parse_state_name(path.name()) else {
                continue;
            };
            if !unchanged_for(&path, now) {
                continue;
            }
            let Ok(lease) = self.lock(&key.lock_name_of(&provider), 0) else {
                continue;
            };
            if unchanged_for(&path, now)
                && let Ok(Some(bytes)) = path.read()
                && matches!(
                    path.remove_if_unchanged(&bytes),
                    Ok(worklane_slotfile::Removal::Removed)
                )
            {
                removed += 1;
            }
            let _ = lease.release();
        }
        Ok(removed)
    }

    /// The health view: without taking any lock, the newest [`HEALTH_SHOWN`] readable state
    /// files (at most [`HEALTH_TRIED`] tried), numbered from 1, newest first. Credentials are
    /// never named by their key here. Each shows what a take would count now: the pause only
    /// while in force, and only windows that have not ended (within the bounds of a read).
    pub fn health(&self) -> Result<Vec<CredentialView>, worklane_slotfile::open::Error> {
        Ok(self.health_report()?.views)
    }

    /// [`Ledger::health`], with the state files it could not show and why (a directory, FIFO
    /// or link at a state's name, a file this user cannot read, one over 64 KiB, one that is
    /// not a state): at most [`HEALTH_TRIED`] of them. None of them stops a take (PROTOCOL.md
    /// section 13), but a view that left them out without a word would hide a budget.
    pub fn health_report(&self) -> Result<Health, worklane_slotfile::open::Error> {
        let now = self.clock.now_ms();
        let mut unshown = Vec::new();
        let mut files: Vec<(u64, SlotPath)> = Vec::new();
        for path in self.dir.list()? {
            if crate::key::parse_state_name(path.name()).is_none() {
                continue;
            }
            match path.modified_ms() {
                Ok(Some(at)) => files.push((at, path)),
                // Removed since the listing.
                Ok(None) => {}
                Err(source) => unshown.push(UnshownState {
                    file: path.name().to_owned(),
                    why: StateProblem::Unreadable(source),
                }),
            }
        }
        files.sort_by_key(|f| std::cmp::Reverse(f.0));
        let mut states = Vec::new();
        for (updated_ms, path) in files.into_iter().take(HEALTH_TRIED) {
            if states.len() == HEALTH_SHOWN {
                break;
            }
            match path.read() {
                Ok(Some(bytes)) => match State::parse(&bytes) {
                    Ok(state) => states.push((
                        updated_ms,
                        crate::key::parse_state_name(path.name())
                            .map_or_else(|| "github".to_owned(), |(p, _)| p),
                        state,
                    )),
                    Err(source) => unshown.push(UnshownState {
                        file: path.name().to_owned(),
                        why: StateProblem::NotAState(source),
                    }),
                },
                Ok(None) => {}
                Err(source) => unshown.push(UnshownState {
                    file: path.name().to_owned(),
                    why: StateProblem::Unreadable(source),
                }),
            }
        }
        unshown.truncate(HEALTH_TRIED);
        let views = states
            .into_iter()
            .enumerate()
            .map(|(i, (updated_ms, provider, state))| CredentialView {
                number: i + 1,
                provider,
                updated_ms,
                paused_until: state.pause(now),
                resources: state
                    .resources
                    .clone()
                    .into_iter()
                    .filter(|(name, _)| state.window(name, now).is_some())
                    .map(|(name, w)| ResourceView {
                        left: w.left(),
                        name,
                        limit: w.limit,
                        remaining: w.remaining,
                        reset_at: w.reset_at,
                        granted: w.granted,
                        by_consumer: w.by_consumer.into_iter().collect(),
                    })
                    .collect(),
            })
            .collect();
        Ok(Health { views, unshown })
    }
}

/// The health view and the state files it could not show ([`Ledger::health_report`]).
#[derive(Debug)]
pub struct Health {
    /// The credentials shown, newest first.
    pub views: Vec<CredentialView>,
    /// The state files left out, and why.
    pub unshown: Vec<UnshownState>,
}

/// A budget state file the health view could not show.
#[derive(Debug)]
pub struct UnshownState {
    /// Its file name in the slot directory (`github-budget-<key>.json`).
    pub file: String,
    /// Why it was left out.
    pub why: StateProblem,
}

/// Why a budget state file was left out of the health view. A take treats the second kind
/// (and the first, but for a file this user may not read) as no state: it starts afresh and
/// replaces it; a state this user cannot read it neither counts against nor replaces.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateProblem {
    /// It cannot be read as a state file: not a regular file (a directory, FIFO or link),
    /// not readable by this user, or over 64 KiB.
    #[error("cannot read the budget state")]
    Unreadable(#[source] worklane_slotfile::read::Error),
    /// It was read but is not a budget state.
    #[error("the file is not a budget state")]
    NotAState(#[source] crate::state::Unreadable),
}

/// One credential in the health view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialView {
    /// Its number in this view (1 is the most recently updated); never its key.
    pub number: usize,
    /// The provider whose budget it is (`github`, `anthropic`, `openai`, or a configured
    /// name).
    pub provider: String,
    /// When its state file last changed (ms).
    pub updated_ms: u64,
    /// The pause in force, if any (ms).
    pub paused_until: Option<u64>,
    /// Its resources' windows that have not ended.
    pub resources: Vec<ResourceView>,
}

/// One resource's window in the health view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceView {
    /// The resource (`core`, `graphql`, ...).
    pub name: String,
    /// `X-RateLimit-Limit`, if seen.
    pub limit: Option<u64>,
    /// The remaining seen.
    pub remaining: u64,
    /// Calls left: remaining less those granted since.
    pub left: u64,
    /// When the window resets (ms).
    pub reset_at: u64,
    /// Calls granted since the window was seen.
    pub granted: u64,
    /// Calls granted in the window, by consumer (unusual names as `(other)`).
    pub by_consumer: Vec<(String, u64)>,
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

/// Whether `path` exists and last changed more than [`STALE_MS`] before `now`.
fn unchanged_for(path: &SlotPath, now: u64) -> bool {
    matches!(path.modified_ms(), Ok(Some(at)) if now.saturating_sub(at) > STALE_MS)
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
