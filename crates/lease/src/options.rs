//! How a lease is judged and timed, and the test seam that interrupts acquisition.

use crate::clock::{Clock, SystemClock};
use crate::liveness::{Liveness, ProcessLiveness, TtlLiveness};
use std::sync::Arc;
use std::time::Duration;
use worklane_journal::Journal;
use worklane_slotfile::SlotDir;

/// A step of acquisition, reported to the test seam [`Options::with_hook`] (feature
/// `test-seams`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[cfg_attr(
    not(feature = "test-seams"),
    allow(unreachable_pub, reason = "exported with the test-seams feature")
)]
pub enum Step {
    /// The resource's guard is held.
    GuardTaken,
    /// The record has been read (or found absent) and not yet acted on.
    RecordInspected,
    /// The epoch file has been advanced for this acquisition.
    EpochAdvanced,
    /// Takeover: our claim on the stale record is published.
    ClaimTaken,
    /// Takeover: the stale record has been removed.
    StaleRemoved,
    /// Our record is published (on takeover, the claim is still there).
    Published,
}

/// What a hook tells acquisition to do next (feature `test-seams`).
#[cfg(feature = "test-seams")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Go on.
    Continue,
    /// Stop here as if the process died: return [`Error::Crashed`](crate::Error::Crashed), leaving every file as it
    /// is and closing the guard, as the kernel would.
    Crash,
}

#[cfg(feature = "test-seams")]
type Hook = Arc<dyn Fn(Step) -> Control + Send + Sync>;

/// How a lease is judged, timed and (in tests) interrupted.
#[derive(Clone)]
pub struct Options {
    pub(crate) liveness: Arc<dyn Liveness>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Where its events go (`None`: the directory's journal, [`Journal::of`]).
    journal: Option<Journal>,
    /// The role a role lease is for: its taking, refusal and loss are journaled as the role's.
    pub(crate) role: Option<Arc<str>>,
    /// Whether a role lease's refusal is journaled (not while a waiter tries again).
    pub(crate) journal_refusals: bool,
    #[cfg(feature = "test-seams")]
    hook: Option<Hook>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut f = f.debug_struct("Options");
        f.field("guard_hold", &self.liveness.guard_hold())
            .field("ttl_ms", &self.liveness.ttl_ms())
            .field("role", &self.role);
        #[cfg(feature = "test-seams")]
        f.field("hooked", &self.hook.is_some());
        f.finish()
    }
}

impl Options {
    /// Process liveness on the system clock: the lock of an agent slot, `slots.lock`, a run.
    #[must_use]
    pub fn process() -> Options {
        Options::with_liveness(Arc::new(ProcessLiveness))
    }

    /// TTL liveness with `ttl` on the system clock: a role lease.
    #[must_use]
    pub fn ttl(ttl: Duration) -> Options {
        Options::with_liveness(Arc::new(TtlLiveness::new(ttl)))
    }

    /// Any liveness on the system clock.
    #[must_use]
    pub fn with_liveness(liveness: Arc<dyn Liveness>) -> Options {
        Options {
            liveness,
            clock: Arc::new(SystemClock),
            journal: None,
            role: None,
            journal_refusals: true,
            #[cfg(feature = "test-seams")]
            hook: None,
        }
    }

    /// Journals this lease's events (a takeover; a role's taking, refusal and loss) in
    /// `journal` instead of the directory's own ([`Journal::of`]): a pool passes the one it
    /// carries, [`Journal::off`] writes none.
    #[must_use]
    pub fn journal(mut self, journal: Journal) -> Options {
        self.journal = Some(journal);
        self
    }

    /// Marks a role lease: its taking, refusal and loss are journaled (`role-taken`,
    /// `role-refused`, `role-lost`) as `role`'s.
    #[must_use]
    pub fn role(mut self, role: impl Into<String>) -> Options {
        self.role = Some(Arc::from(role.into()));
        self
    }

    /// A role lease's refusals are not journaled: for a waiter that tries again (its first
    /// refusal is journaled with the options it started with; a wait that gives up says so).
    #[must_use]
    pub fn unjournaled_refusals(mut self) -> Options {
        self.journal_refusals = false;
        self
    }

    /// The journal this lease's events go to in `dir`.
    pub(crate) fn journal_in(&self, dir: &SlotDir) -> Journal {
        self.journal.clone().unwrap_or_else(|| Journal::of(dir))
    }

    /// Uses `clock` for every time decision.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Options {
        self.clock = clock;
        self
    }

    /// Test seam (feature `test-seams`): calls `hook` at each [`Step`] of acquisition.
    #[cfg(feature = "test-seams")]
    #[must_use]
    pub fn with_hook(mut self, hook: impl Fn(Step) -> Control + Send + Sync + 'static) -> Options {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Acquisition reached `step`: what the test seam's hook says to do.
    #[cfg(feature = "test-seams")]
    pub(crate) fn hook_at(&self, step: Step) -> Control {
        self.hook.as_ref().map_or(Control::Continue, |h| h(step))
    }
}
