//! Taking a slot without waiting: STOP and drain, the weight asked, the units counted under
//! `slots.lock`, the first free index. (Whose turn it is, from that count: `turn.rs`.)

use super::blocker::Blocker;
use super::count::{broken_guard, units_of};
use super::turn::{Asked, Decided};
use super::{FULL_RUN_LOCK, Kind, Pool, SLOTS_LOCK, SWEEP_EVERY_MS, Slot, slot_index};
use crate::drain::DRAIN_FILE;
use crate::error::take::Error;
use crate::look;
use crate::protocol;
use crate::share::Ask;
use crate::weight::{SHARE_OWNER_FIELD, WEIGHT_FIELD};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use worklane_journal::Event;
use worklane_lease::acquire::Error as LeaseError;
use worklane_lease::{Acquired, Backoff, Lease, LiveWhy, Request, acquire};
use worklane_slotfile::Shares;

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
    /// priority). Its weight is 1, for this process ([`Ask::default`]).
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
        self.try_take_for(kind, request, &Ask::default(), priority, start_ms)
    }

    /// [`Pool::try_take_at`] for `ask`: a take of `ask.weight()` units of the kind's cap, all
    /// at once or none, counted against the share of `ask.owner()` (agents, when the config
    /// gives shares). A weight of 0 or above the cap is [`Error::Weight`]; above the owner's
    /// share, [`Error::WeightOverShare`]. Blocked by the cap, it is [`Blocker::AtCap`]
    /// (weight 1) or [`Blocker::NoRoom`]; by its owner's share, [`Blocker::Share`].
    pub fn try_take_for(
        &self,
        kind: Kind,
        request: &Request,
        ask: &Ask,
        priority: i64,
        start_ms: u64,
    ) -> Result<Take, Error> {
        let taken = self.try_take_until(
            kind,
            request,
            ask,
            None,
            Some((priority, start_ms, None)),
            0,
        )?;
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
        self.try_take_as_for(kind, request, &Ask::default(), own)
    }

    /// [`Pool::try_take_as`] for `ask` (see [`Pool::try_take_for`]).
    pub fn try_take_as_for(
        &self,
        kind: Kind,
        request: &Request,
        ask: &Ask,
        own: &crate::line::Entry,
    ) -> Result<Take, Error> {
        let taken = self.admit(kind, request, ask, own.priority, own.start_ms, Some(own))?;
        self.journal_refused(kind, request, &taken, 0);
        Ok(taken)
    }

    /// The dispatcher's take for a row, at the row's place (its own entry `own`, if it stands
    /// in line): a refusal is no take refused (the row stays queued), so it is not journaled.
    pub fn admit(
        &self,
        kind: Kind,
        request: &Request,
        ask: &Ask,
        priority: i64,
        start_ms: u64,
        own: Option<&crate::line::Entry>,
    ) -> Result<Take, Error> {
        self.try_take_until(kind, request, ask, None, Some((priority, start_ms, own)), 0)
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
    fn taken(
        &self,
        kind: Kind,
        lease: Lease,
        weight: u32,
        share_owner: Option<String>,
        waited_ms: u64,
    ) -> Slot {
        self.journal.emit(Event::SlotTaken {
            slot: lease.resource().to_owned(),
            slot_kind: kind.label().to_owned(),
            owner: lease.record().owner.clone().unwrap_or_default(),
            epoch: lease.epoch(),
            waited_ms,
        });
        Slot::new(kind, lease, weight, share_owner, &self.journal)
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

    /// Whether `ask` could ever be admitted as `kind` under the config in force (read now):
    /// `Error::Weight` when its weight is above the kind's cap, `Error::WeightOverShare`
    /// when above its owner's share. The dispatcher refuses such an enqueue at once.
    pub fn check_ask(&self, kind: Kind, ask: &Ask) -> Result<(), Error> {
        self.asked(kind, ask).map(drop)
    }

    /// The weight of `ask` checked against `kind`'s cap, and the share it counts against,
    /// from the config in force (read now).
    pub(crate) fn asked(&self, kind: Kind, ask: &Ask) -> Result<Asked, Error> {
        let weight = ask.weight();
        let weight_error = |cap| Error::Weight {
            kind: kind.label(),
            weight,
            cap,
        };
        let (cap, shares) = match kind {
            Kind::FullRun => (1, Shares::default()),
            Kind::Agent => {
                let config = self.config()?;
                (config.max_agents, config.shares)
            }
            Kind::Test { .. } => (self.config()?.max_test_runs, Shares::default()),
            Kind::Job => (self.config()?.max_jobs, Shares::default()),
        };
        if weight == 0 || weight > cap {
            return Err(weight_error(cap));
        }
        let share = crate::share::resolve(&shares, ask.owner());
        if let Some(ceiling) = share.ceiling
            && weight > ceiling
        {
            return Err(Error::WeightOverShare {
                owner: share.owner.to_string(),
                weight,
                share: ceiling,
            });
        }
        Ok(Asked {
            weight,
            share,
            shares,
            cap,
        })
    }

    /// [`Blocker::InLine`] for `ahead` entries: the kind's cap and the units of its records as
    /// listed (each record's weight read; `held`, when the caller counted them already).
    pub(super) fn in_line(
        &self,
        kind: Kind,
        ahead: u32,
        held: Option<u32>,
    ) -> Result<Blocker, Error> {
        let cap = match kind.prefix() {
            Some(_) => self.cap(kind)?,
            None => 1,
        };
        let held = match held {
            Some(held) => held,
            None => self.listed_units(kind, cap)?,
        };
        Ok(Blocker::InLine { ahead, held, cap })
    }

    /// The units of `kind`'s records present (as listed, not probed; each record's weight
    /// as written, at most `cap`, 1 when it cannot be read).
    fn listed_units(&self, kind: Kind, cap: u32) -> Result<u32, look::Error> {
        let names = self.dir.list().map_err(self.listing())?;
        let units = match kind.prefix() {
            Some(prefix) => names
                .iter()
                .filter(|p| slot_index(prefix, p.name()).is_some())
                .map(|p| {
                    p.read()
                        .ok()
                        .flatten()
                        .and_then(|raw| crate::weight::peek(&raw))
                        .map_or(1, |(weight, _)| weight.units(cap))
                })
                .fold(0u32, u32::saturating_add),
            None => u32::try_from(names.iter().filter(|p| p.name() == FULL_RUN_LOCK).count())
                .unwrap_or(u32::MAX),
        };
        Ok(units)
    }

    /// Whether a change to `name` may let a waiter of `kind` on: a slot of its kind released,
    /// a place in its line left, STOP, the drain flag or the config changed.
    pub fn wakes(kind: Kind, name: &str) -> bool {
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
    /// made under `slots.lock` from the count's own listing; for the full run, before. With
    /// shares (agents), the line's order depends on what each owner holds, so it is decided
    /// from the count (`fair_turn`).
    pub(super) fn try_take_until(
        &self,
        kind: Kind,
        request: &Request,
        ask: &Ask,
        deadline: Option<Instant>,
        line: Option<(i64, u64, Option<&crate::line::Entry>)>,
        waited_ms: u64,
    ) -> Result<Take, Error> {
        // A directory whose protocol this worklane cannot keep is not acted in at all.
        protocol::check_dir(&self.dir).map_err(|why| Error::Protocol {
            dir: self.dir.path().to_owned(),
            why,
        })?;
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
        let asked = self.asked(kind, ask)?;
        let Some(prefix) = kind.prefix() else {
            if let Some((priority, start_ms, own)) = line {
                let listed = self
                    .dir
                    .list_prefixed(crate::line::LINE_PREFIX)
                    .map_err(self.listing())?;
                let ahead = self.ahead_in(kind, &listed, priority, start_ms, own)?;
                if ahead > 0 {
                    return Ok(Take::Blocked(self.in_line(kind, ahead, None)?));
                }
            }
            let taken = self
                .acquire_settled(FULL_RUN_LOCK, &request)
                .map_err(|source| Error::Take {
                    kind: kind.label(),
                    source: Box::new(source),
                })?;
            return match taken {
                Acquired::Held(lease) => {
                    Ok(Take::Held(self.taken(kind, lease, 1, None, waited_ms)))
                }
                Acquired::Refused(refusal) => {
                    Ok(Take::Blocked(Blocker::FullRunHeld(Box::new(refusal))))
                }
            };
        };
        let request = request
            .field(WEIGHT_FIELD, asked.weight)
            .field(SHARE_OWNER_FIELD, asked.share.owner.to_string());
        let counted = |source| Error::Counted {
            kind: kind.label(),
            source,
        };
        let counting = self
            .hold_slots_lock(deadline)
            .map_err(|source| Error::Count {
                kind: kind.label(),
                source: Box::new(source),
            })?;
        let Some(counting) = counting else {
            return Ok(Take::Blocked(Blocker::Counting));
        }; // Re-check under slots.lock: a STOP written a moment ago wins.
        if let Some(blocker) = self.operator_blocker()? {
            return Ok(Take::Blocked(blocker));
        }
        // A slot of more than one unit, or units bounded by shares, is what an implementation
        // that does not count weights would break: said in protocol.json before it is taken.
        if (asked.weight > 1 || !asked.shares.is_empty())
            && let Err(e) = self.declare_held(crate::protocol::WEIGHTS)
        {
            counting.release().map_err(counted)?;
            return Err(e.into());
        }
        let (files, hidden) = self.dir.list_with_hidden().map_err(self.listing())?;
        let fair = !asked.shares.is_empty();
        if let (false, Some((priority, start_ms, own))) = (fair, line) {
            let ahead = self.ahead_in(kind, &files, priority, start_ms, own)?;
            if ahead > 0 {
                counting.release().map_err(counted)?;
                return Ok(Take::Blocked(self.in_line(kind, ahead, None)?));
            }
        }
        let entries: Vec<crate::line::Entry> = if fair && line.is_some() {
            crate::line::entries_of(kind.label(), &files)
        } else {
            Vec::new()
        };
        let slots = self.kind_slots_in(
            prefix,
            files,
            &hidden,
            self.weighed(asked.weight, !asked.shares.is_empty()),
        )?;
        let (held, by_owner) = units_of(&slots, asked.cap);
        let decided = Decided { held, by_owner };
        if let Some(blocker) = self.blocker_of(kind, &asked, &decided, &slots, line, &entries)? {
            counting.release().map_err(counted)?;
            return Ok(Take::Blocked(blocker));
        }
        let live: Vec<u32> = slots
            .iter()
            .filter(|c| c.state.is_held())
            .map(|c| c.index)
            .collect();
        let mut index = 0u32;
        let taken = loop {
            if !live.contains(&index) {
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
            // Past the last index (never in practice: every index up to it taken or broken).
            let Some(next) = index.checked_add(1) else {
                counting.release().map_err(counted)?;
                return Err(Error::NoFreeIndex { kind: kind.label() });
            };
            index = next;
        };
        self.sweep();
        counting.release().map_err(counted)?;
        let owner = asked.share.owner.to_string();
        Ok(Take::Held(self.taken(
            kind,
            taken,
            asked.weight,
            Some(owner),
            waited_ms,
        )))
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

    /// Takes `slots.lock` for an operator's change (waiting up to about 2 s for a counter):
    /// [`protocol::Error::SlotsLockBusy`] when it stays busy.
    pub(super) fn hold_slots_lock_for_change(&self) -> Result<Lease, protocol::Error> {
        self.hold_slots_lock(None)
            .map_err(|source| protocol::Error::Count {
                kind: Kind::Agent.label(),
                source: Box::new(source),
            })?
            .ok_or_else(|| protocol::Error::SlotsLockBusy {
                dir: self.dir.path().to_owned(),
            })
    }

    /// Takes `slots.lock`, waiting up to about 2 s (or until `deadline`, if sooner) for another
    /// counter to finish (counting takes microseconds to milliseconds). It is always tried at
    /// least once. `None` only if it stays busy that long.
    fn hold_slots_lock(&self, deadline: Option<Instant>) -> Result<Option<Lease>, LeaseError> {
        let request = Request::new("counting slots");
        // 2000 tries, 1 ms apart.
        let mut backoff = Backoff::new(Duration::from_millis(1)).retries(1999);
        loop {
            if let Acquired::Held(lease) =
                acquire(&self.dir, SLOTS_LOCK, &request, &self.options())?
            {
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

    pub(crate) fn cap(&self, kind: Kind) -> Result<u32, Error> {
        let config = self.config()?;
        Ok(match kind {
            Kind::Agent => config.max_agents,
            Kind::Test { .. } => config.max_test_runs,
            Kind::FullRun => 1,
            Kind::Job => config.max_jobs,
        })
    }
}

use worklane_stdx::chain;

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
