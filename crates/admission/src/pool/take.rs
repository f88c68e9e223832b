//! Taking a slot without waiting: STOP and drain, the cap counted under `slots.lock`, the
//! first free index, and what blocks a take.

use super::{FULL_RUN_LOCK, Kind, Pool, SLOTS_LOCK, SWEEP_EVERY_MS, Slot, slot_index};
use crate::Error;
use crate::drain::DRAIN_FILE;
use crate::stop::Stop;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use worklane_journal::Event;
use worklane_lease::acquire::Error as LeaseError;
use worklane_lease::{Acquired, Backoff, Lease, LiveWhy, Refusal, Request, acquire};

/// What keeps a slot from being taken now.
#[derive(Debug, Clone, PartialEq)]
pub enum Blocker {
    /// An emergency STOP is in force.
    Stop(Stop),
    /// An update drain is in force.
    Drain(crate::drain::Drain),
    /// The kind's cap is reached.
    AtCap {
        /// Live slots of the kind.
        held: u32,
        /// The cap.
        cap: u32,
    },
    /// Another full run holds the full-run lock.
    FullRunHeld(Box<Refusal>),
    /// Another process has held `slots.lock` for over 2 s (counting takes milliseconds: it
    /// may be stopped, and the machine's pool with it, until it continues or dies).
    Counting,
    /// Waiters of the kind stand in line before this place (the line, `crate::line`).
    InLine {
        /// Live entries before it (the first proved live, the rest as listed).
        ahead: u32,
        /// Records of the kind's slots present (as listed, not probed).
        held: u32,
        /// The kind's cap.
        cap: u32,
    },
}

impl Blocker {
    /// Whether this is a refusal by an operator (STOP or drain) rather than contention.
    #[must_use]
    pub fn is_operator_refusal(&self) -> bool {
        matches!(self, Blocker::Stop(_) | Blocker::Drain(_))
    }

    /// Its name, as the journal says it: `stop`, `drain`, `at-cap`, `full-run-held`,
    /// `counting` or `in-line`.
    #[must_use]
    pub fn label(&self) -> &'static str {
        match self {
            Blocker::Stop(_) => "stop",
            Blocker::Drain(_) => "drain",
            Blocker::AtCap { .. } => "at-cap",
            Blocker::FullRunHeld(_) => "full-run-held",
            Blocker::Counting => "counting",
            Blocker::InLine { .. } => "in-line",
        }
    }
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocker::Stop(stop) => write!(f, "{stop} (worklane resume-all lifts it)"),
            Blocker::Drain(drain) => write!(
                f,
                "an update is draining the machine: {drain} (worklane undrain ends it early)"
            ),
            Blocker::AtCap { held, cap } => write!(f, "at cap: {held} of {cap} held"),
            Blocker::FullRunHeld(refusal) => write!(f, "a full run is in progress: {refusal}"),
            Blocker::InLine { ahead, held, cap } => {
                write!(f, "{ahead} waiting in line before it, {held} of {cap} held")
            }
            Blocker::Counting => f.write_str(
                "slots.lock has been held for over 2 s (is its holder stopped? `worklane slots` \
                 names it)",
            ),
        }
    }
}

/// The outcome of a nonblocking take.
#[derive(Debug)]
#[must_use]
// Returned once per take and moved straight into a binding: boxing the held slot would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Take {
    /// The slot is ours.
    Held(Slot),
    /// It cannot be taken now.
    Blocked(Blocker),
}

impl Pool {
    /// Tries once to take a slot of `kind` for `request`. It waits only for another counter
    /// to release `slots.lock` (milliseconds; at most about 2 s before [`Blocker::Counting`]).
    ///
    /// It takes its turn in the line too: while a live waiter of its kind stands in line at
    /// priority 0 or above, it is [`Blocker::InLine`] ([`Pool::try_take_at`] for another
    /// priority).
    pub fn try_take(&self, kind: Kind, request: &Request) -> Result<Take, Error> {
        self.try_take_at(kind, request, 0, self.clock.now_ms())
    }

    /// [`Pool::try_take`] for a place of `priority` that started waiting at `start_ms` (the
    /// dispatcher's rows keep their original start): refused while a live entry of the line
    /// stands before it.
    pub fn try_take_at(
        &self,
        kind: Kind,
        request: &Request,
        priority: i64,
        start_ms: u64,
    ) -> Result<Take, Error> {
        let taken =
            self.try_take_until(kind, request, None, Some((priority, start_ms, None)), 0)?;
        self.journal_refused(kind, request, &taken, 0);
        Ok(taken)
    }

    /// [`Pool::try_take`] for the holder of the place `own` in line: refused while a live entry
    /// stands before that place (its own entry does not count).
    pub fn try_take_as(
        &self,
        kind: Kind,
        request: &Request,
        own: &crate::line::Entry,
    ) -> Result<Take, Error> {
        let taken = self.admit(kind, request, own.priority, own.start_ms, Some(own))?;
        self.journal_refused(kind, request, &taken, 0);
        Ok(taken)
    }

    /// The dispatcher's take for a row, at the row's place (its own entry `own`, if it stands
    /// in line): a refusal is no take refused (the row stays queued), so it is not journaled.
    pub(crate) fn admit(
        &self,
        kind: Kind,
        request: &Request,
        priority: i64,
        start_ms: u64,
        own: Option<&crate::line::Entry>,
    ) -> Result<Take, Error> {
        self.try_take_until(kind, request, None, Some((priority, start_ms, own)), 0)
    }

    /// Journals a refused take (`slot-refused`), after `waited_ms` of waiting.
    pub(super) fn journal_refused(
        &self,
        kind: Kind,
        request: &Request,
        taken: &Take,
        waited_ms: u64,
    ) {
        if let Take::Blocked(blocker) = taken {
            self.journal.emit(Event::SlotRefused {
                slot_kind: kind.label().to_owned(),
                owner: request.owner.clone(),
                blocker: blocker.label().to_owned(),
                why: blocker.to_string(),
                waited_ms,
            });
        }
    }

    /// The slot `lease` holds, its taking journaled (`slot-taken`).
    fn taken(&self, kind: Kind, lease: Lease, waited_ms: u64) -> Slot {
        self.journal.emit(Event::SlotTaken {
            slot: lease.resource().to_owned(),
            slot_kind: kind.label().to_owned(),
            owner: lease.record().owner.clone().unwrap_or_default(),
            epoch: lease.epoch(),
            waited_ms,
        });
        Slot::held(kind, lease, &self.journal)
    }

    /// Journals, once per pool, a stray file where the guard of `name` belongs, which takes
    /// skip (`broken-file`).
    fn journal_broken_guard(&self, name: &str, error: &worklane_guard::acquire::Error) {
        let guard = worklane_guard::guard_name(name);
        let first = self
            .broken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(guard.clone());
        if first {
            let path = self.dir.path().join(&guard).display().to_string();
            self.journal.emit(Event::BrokenFile {
                what: format!(
                    "the guard of {name} cannot be held ({}): takes skip that index",
                    chain(error)
                ),
                fix: format!(
                    "rm -r -- '{}' (nobody can hold it; worklane recreates the guard)",
                    path.replace('\'', r"'\''")
                ),
                name: guard,
                fixed: false,
            });
        }
    }

    /// [`Blocker::InLine`] for `ahead` entries: the kind's cap and its records as listed.
    pub(super) fn in_line(&self, kind: Kind, ahead: u32) -> Result<Blocker, Error> {
        let names = self.dir.list().map_err(self.listing())?;
        let (held, cap) = match kind.prefix() {
            Some(prefix) => (
                names
                    .iter()
                    .filter(|p| slot_index(prefix, p.name()).is_some())
                    .count(),
                self.cap(kind)?,
            ),
            None => (
                names.iter().filter(|p| p.name() == FULL_RUN_LOCK).count(),
                1,
            ),
        };
        Ok(Blocker::InLine {
            ahead,
            held: u32::try_from(held).unwrap_or(u32::MAX),
            cap,
        })
    }

    /// Whether a change to `name` may let a waiter of `kind` on: a slot of its kind released,
    /// a place in its line left, STOP, the drain flag or the config changed.
    pub(crate) fn wakes(kind: Kind, name: &str) -> bool {
        let slot = match kind.prefix() {
            Some(prefix) => slot_index(prefix, name).is_some(),
            None => name == FULL_RUN_LOCK,
        };
        slot || crate::line::Entry::parse(name).is_some_and(|e| e.kind == kind.label())
            || matches!(name, crate::STOP_FILE | DRAIN_FILE | "config.json")
    }

    /// [`Pool::try_take`] that also gives up on a busy `slots.lock` at `deadline`.
    ///
    /// `line`: the place (priority, start, own entry) whose turn in the waiting line it checks,
    /// or `None` for a waiter already found at the head. For agents and test runs the check is
    /// made under `slots.lock` from the count's own listing; for the full run, before.
    pub(super) fn try_take_until(
        &self,
        kind: Kind,
        request: &Request,
        deadline: Option<Instant>,
        line: Option<(i64, u64, Option<&crate::line::Entry>)>,
        waited_ms: u64,
    ) -> Result<Take, Error> {
        if let Some(blocker) = self.operator_blocker()? {
            return Ok(Take::Blocked(blocker));
        }
        let mut request = request.clone();
        if let Kind::Test {
            limit_ms: Some(limit),
        } = kind
        {
            request = request.field("limit_ms", limit);
        }
        let Some((prefix, cap)) = kind.prefix().map(|p| (p, self.cap(kind))) else {
            if let Some((priority, start_ms, own)) = line {
                let listed = self
                    .dir
                    .list_prefixed(crate::line::LINE_PREFIX)
                    .map_err(self.listing())?;
                let ahead = self.ahead_in(kind, &listed, priority, start_ms, own)?;
                if ahead > 0 {
                    return Ok(Take::Blocked(self.in_line(kind, ahead)?));
                }
            }
            let taken = self
                .acquire_settled(FULL_RUN_LOCK, &request)
                .map_err(|source| Error::Take {
                    kind: kind.label(),
                    source: Box::new(source),
                })?;
            return match taken {
                Acquired::Held(lease) => Ok(Take::Held(self.taken(kind, lease, waited_ms))),
                Acquired::Refused(refusal) => {
                    Ok(Take::Blocked(Blocker::FullRunHeld(Box::new(refusal))))
                }
            };
        };
        let cap = cap?;
        let counted = |source| Error::Counted {
            kind: kind.label(),
            source,
        };
        let Some(counting) = self.hold_slots_lock(kind, deadline)? else {
            return Ok(Take::Blocked(Blocker::Counting));
        }; // Re-check under slots.lock: a STOP written a moment ago wins.
        if let Some(blocker) = self.operator_blocker()? {
            return Ok(Take::Blocked(blocker));
        }
        let (files, hidden) = self.dir.list_with_hidden().map_err(self.listing())?;
        if let Some((priority, start_ms, own)) = line {
            let ahead = self.ahead_in(kind, &files, priority, start_ms, own)?;
            if ahead > 0 {
                counting.release().map_err(counted)?;
                return Ok(Take::Blocked(self.in_line(kind, ahead)?));
            }
        }
        let slots = self.kind_slots_in(prefix, files, &hidden)?;
        let held: Vec<u32> = slots
            .iter()
            .filter(|(_, _, state)| state.is_held())
            .map(|(i, _, _)| *i)
            .collect();
        let live = u32::try_from(held.len()).unwrap_or(u32::MAX);
        if live >= cap {
            log::debug!("{prefix} slots at cap: {live} of {cap} live");
            counting.release().map_err(counted)?;
            return Ok(Take::Blocked(Blocker::AtCap { held: live, cap }));
        }
        let mut index = 0u32;
        let taken = loop {
            if !held.contains(&index) {
                let name = format!("{prefix}-{index}.lock");
                match self.acquire_settled(&name, &request) {
                    Ok(Acquired::Held(lease)) => break lease,
                    Ok(Acquired::Refused(_)) => {}
                    // A stray file where this index's guard belongs: nobody can hold this
                    // index, so it is skipped (and counted only if a record stands there);
                    // `worklane slots` names the file.
                    Err(LeaseError::Guard { source, .. }) if broken_guard(&source) => {
                        self.journal_broken_guard(&name, &source);
                    }
                    // An epoch that cannot grow: that index cannot be taken again (never
                    // reused with the same epoch); `worklane slots` names the file.
                    Err(LeaseError::Epoch { .. }) => {}
                    Err(source) => {
                        return Err(Error::Take {
                            kind: kind.label(),
                            source: Box::new(source),
                        });
                    }
                }
            }
            index += 1;
        };
        self.sweep();
        counting.release().map_err(counted)?;
        Ok(Take::Held(self.taken(kind, taken, waited_ms)))
    }

    /// Removes temp files that killed writers left (older than a minute, held by nobody), so
    /// the directory cannot grow without bound. Best effort: what it cannot remove stays for
    /// the next take, and `worklane slots` reports it.
    ///
    /// At most once per [`SWEEP_EVERY_MS`] per pool; a clock that went back sweeps at once.
    fn sweep(&self) {
        let now = self.clock.now_ms();
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        if last != 0 && now >= last && now - last < SWEEP_EVERY_MS {
            return;
        }
        self.last_sweep_ms.store(now.max(1), Ordering::Relaxed);
        let Ok(swept) = self
            .dir
            .sweep_temps(now, worklane_slotfile::TEMP_MIN_AGE_MS)
        else {
            return;
        };
        for name in swept.removed {
            self.journal.emit(Event::BrokenFile {
                name,
                what: "a temp file a killed writer left (over a minute old, held by nobody)"
                    .to_owned(),
                fix: "removed".to_owned(),
                fixed: true,
            });
        }
    }

    /// Takes `slots.lock`, waiting up to about 2 s (or until `deadline`, if sooner) for another
    /// counter to finish (counting takes microseconds to milliseconds). It is always tried at
    /// least once. `None` only if it stays busy that long.
    fn hold_slots_lock(
        &self,
        kind: Kind,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>, Error> {
        let request = Request::new("counting slots");
        // 2000 tries, 1 ms apart.
        let mut backoff = Backoff::new(Duration::from_millis(1)).retries(1999);
        loop {
            let counting =
                acquire(&self.dir, SLOTS_LOCK, &request, &self.options()).map_err(|source| {
                    Error::Count {
                        kind: kind.label(),
                        source: Box::new(source),
                    }
                })?;
            if let Acquired::Held(lease) = counting {
                return Ok(Some(lease));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) || !backoff.sleep() {
                return Ok(None);
            }
        }
    }

    /// Acquires `name`, retrying for a few milliseconds while its guard is held with no record
    /// behind it: that is a momentary probe (`worklane slots`, the idle probe, a child being
    /// forked by another thread), never a holder, which always has a record.
    fn acquire_settled(&self, name: &str, request: &Request) -> Result<Acquired, LeaseError> {
        // 50 tries, 1 ms apart.
        let mut backoff = Backoff::new(Duration::from_millis(1)).retries(49);
        loop {
            let got = acquire(&self.dir, name, request, &self.options())?;
            match &got {
                Acquired::Refused(r) if r.why == LiveWhy::GuardHeld && r.holder.is_none() => {
                    if !backoff.sleep() {
                        return Ok(got);
                    }
                }
                _ => return Ok(got),
            }
        }
    }

    pub(super) fn cap(&self, kind: Kind) -> Result<u32, Error> {
        let config = self.config()?;
        Ok(match kind {
            Kind::Agent => config.max_agents,
            Kind::Test { .. } => config.max_test_runs,
            Kind::FullRun => 1,
        })
    }
}

/// An error with its causes, as one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

/// Whether a guard error means a stray file sits where the guard belongs (a directory, FIFO,
/// symbolic link or non-empty file), which no process following the protocol can hold.
fn broken_guard(e: &worklane_guard::acquire::Error) -> bool {
    use worklane_guard::acquire::Error as G;
    match e {
        G::Symlink { .. } | G::NotRegular { .. } | G::NotEmpty { .. } => true,
        // A guard this user may not open (its mode, or a group it is not in).
        G::Io { source, .. } => source.kind() == std::io::ErrorKind::PermissionDenied,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_wakes_for_its_kinds_slots_its_line_stop_drain_and_config() {
        let test = Kind::Test { limit_ms: None };
        for (kind, name, wakes) in [
            (Kind::Agent, "agent-3.lock", true),
            (Kind::Agent, "test-3.lock", false),
            (test, "test-0.lock", true),
            (Kind::FullRun, "full-run.lock", true),
            (Kind::Agent, "full-run.lock", false),
            (Kind::Agent, "line-agent.0.5.0123456789abcdef", true),
            (Kind::Agent, "line-test.0.5.0123456789abcdef", false),
            (test, "line-test.0.5.0123456789abcdef", true),
            (
                Kind::Agent,
                "line-agent.0.5.0123456789abcdef.epoch.1",
                false,
            ),
            (Kind::FullRun, "STOP", true),
            (Kind::Agent, "update-drain.json", true),
            (Kind::Agent, "config.json", true),
            (Kind::Agent, "slots.lock", false),
            (Kind::Agent, ".agent-0.lock.tmp-0123456789abcdef", false),
            (Kind::Agent, "queue-x.json", false),
        ] {
            assert_eq!(Pool::wakes(kind, name), wakes, "{} {name}", kind.label());
        }
    }

    #[test]
    fn only_a_stray_file_or_a_forbidden_guard_is_a_broken_guard() {
        use std::path::PathBuf;
        use worklane_guard::acquire::Error as G;
        let path = PathBuf::from("/slots/.agent-0.lock.flock");
        let io = |kind: std::io::ErrorKind| G::Io {
            op: "open",
            path: path.clone(),
            source: std::io::Error::from(kind),
        };
        let broken = [
            G::Symlink { path: path.clone() },
            G::NotRegular {
                path: path.clone(),
                kind: "directory",
            },
            G::NotEmpty {
                path: path.clone(),
                size: 3,
            },
            io(std::io::ErrorKind::PermissionDenied),
        ];
        for e in &broken {
            assert!(broken_guard(e), "skipped: {e}");
        }
        let not = [
            G::StdStreamClosed {
                path: path.clone(),
                fd: 0,
            },
            G::NotHeld { path: path.clone() },
            io(std::io::ErrorKind::OutOfMemory),
        ];
        for e in &not {
            assert!(!broken_guard(e), "an error, not a skip: {e}");
        }
    }
}
