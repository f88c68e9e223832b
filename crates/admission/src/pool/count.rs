//! Counting slots: the verdict on each slot's holder, and guards held with no record.

use super::{Pool, slot_index};
use crate::error::take;
use crate::look::Error;
use crate::weight::Weight;
use std::collections::HashMap;
use std::time::Duration;
use worklane_lease::{Backoff, Judgement, LiveWhy, Liveness, ProcessLiveness, Record};
use worklane_slotfile::SlotPath;

/// The verdict on a slot's holder.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotState {
    /// Its kernel guard is held: a live process owns it.
    GuardHeld,
    /// Judged live or unknown from its record (guard free); counts as held.
    Live(LiveWhy),
    /// Its holder is dead: free to take over.
    Dead(worklane_lease::DeadWhy),
}

impl SlotState {
    /// Whether the slot counts as held.
    #[must_use]
    pub fn is_held(&self) -> bool {
        !matches!(self, SlotState::Dead(_))
    }

    /// The verdict in one word, as `worklane slots` and a refused role show it: `held`,
    /// `alive`, `fresh`, `unknown`, `malformed`, `busy` (another live verdict) or `dead`.
    #[must_use]
    pub fn word(&self) -> &'static str {
        match self {
            SlotState::GuardHeld => "held",
            SlotState::Live(LiveWhy::Alive) => "alive",
            SlotState::Live(LiveWhy::Fresh { .. }) => "fresh",
            SlotState::Live(LiveWhy::Unknown(_)) => "unknown",
            SlotState::Live(LiveWhy::Malformed { .. }) => "malformed",
            SlotState::Live(_) => "busy",
            SlotState::Dead(_) => "dead",
        }
    }
}

/// One slot of a kind, as a take counts it.
#[derive(Debug)]
pub(crate) struct Counted {
    /// Its index (`<prefix>-<index>.lock`).
    pub index: u32,
    /// Its file.
    pub path: SlotPath,
    /// The verdict on its holder.
    pub state: SlotState,
    /// Its record's `weight` (absent when there is no record to read).
    pub weight: Weight,
    /// Its record's `shareOwner`.
    pub owner: Option<String>,
}

impl Counted {
    /// The units it holds under `cap` (see [`crate::weight::counted`]).
    pub(crate) fn units(&self, cap: u32) -> u32 {
        crate::weight::counted(&self.state, &self.weight, cap)
    }
}

/// The units held of a kind under `cap`, in all and by owner (`shareOwner`).
pub(crate) fn units_of(slots: &[Counted], cap: u32) -> (u32, HashMap<String, u32>) {
    let mut all = 0u32;
    let mut by_owner: HashMap<String, u32> = HashMap::new();
    for slot in slots {
        let units = slot.units(cap);
        all = all.saturating_add(units);
        if let (Some(owner), true) = (&slot.owner, units > 0) {
            let held = by_owner.entry(owner.clone()).or_default();
            *held = held.saturating_add(units);
        }
    }
    (all, by_owner)
}

impl Pool {
    /// Slots of one kind: every `<prefix>-<i>.lock` with its verdict, weight and owner, and
    /// every guard of the kind held with no record behind it.
    ///
    /// A held guard's record is read after the probe, for its weight and owner only (the
    /// holder may replace it meanwhile, never with another weight: a weight is written once,
    /// at the take, and kept by every rewrite), and only when `weighed`: else every held
    /// guard counts one unit and no owner (see [`Pool::weighed`]). A free guard's record is
    /// the one its verdict was judged from.
    pub(crate) fn kind_slots_in(
        &self,
        prefix: &str,
        files: Vec<SlotPath>,
        hidden: &[String],
        weighed: bool,
    ) -> Result<Vec<Counted>, Error> {
        let mut out = Vec::new();
        for path in files {
            let Some(index) = slot_index(prefix, path.name()) else {
                continue;
            };
            let (state, raw) = self.observe(&path, &ProcessLiveness)?;
            let raw = match (&state, raw) {
                (_, Some(raw)) => Some(raw),
                (SlotState::GuardHeld, None) if weighed => path.read().ok().flatten(),
                _ => None,
            };
            let (weight, owner) = raw
                .as_deref()
                .and_then(crate::weight::peek)
                .unwrap_or((Weight::Absent, None));
            out.push(Counted {
                index,
                path,
                state,
                weight,
                owner,
            });
        }
        let listed: Vec<u32> = out.iter().map(|c| c.index).collect();
        for (index, path) in self.recordless_held(prefix, hidden, &listed)? {
            out.push(Counted {
                index,
                path,
                state: SlotState::GuardHeld,
                weight: Weight::Absent,
                owner: None,
            });
        }
        Ok(out)
    }

    /// Whether `weight` more units of `kind` fit under its cap now, counted as a take counts
    /// them (a held guard is live, a free one judged by its record) but without `slots.lock`
    /// and writing nothing: the dispatcher's look before a take, so that a pass that can admit
    /// nothing takes no lock and publishes no epoch. `true` may still be refused by the take
    /// itself (the line, a share, another taker first); `false` holds for this moment only. The
    /// full run, which has no units, always says `true`.
    pub fn may_fit(&self, kind: crate::Kind, weight: u32) -> Result<bool, take::Error> {
        let Some(prefix) = kind.prefix() else {
            return Ok(true);
        };
        let cap = self.cap(kind)?;
        let (files, hidden) = self.dir.list_with_hidden().map_err(self.listing())?;
        let slots = self.kind_slots_in(prefix, files, &hidden, true)?;
        let held = units_of(&slots, cap).0;
        Ok(u64::from(held) + u64::from(weight.clamp(1, cap.max(1))) <= u64::from(cap))
    }

    /// What each owner holds now of `kind`'s units (counted as a take counts them, without
    /// `slots.lock`): the dispatcher's fair choice among its own rows.
    pub fn held_by_owner(&self, prefix: &str, cap: u32) -> Result<HashMap<String, u32>, Error> {
        let (files, hidden) = self.dir.list_with_hidden().map_err(self.listing())?;
        let slots = self.kind_slots_in(prefix, files, &hidden, true)?;
        Ok(units_of(&slots, cap).1)
    }

    /// Whether a count under `slots.lock` for a take of `weight` (`shares`: the config has
    /// shares for its kind) must read the records of slots whose guard is held, for their
    /// weight and share owner: when the take itself has a weight above one or counts shares,
    /// or when `protocol.json` names `weights`. Read under `slots.lock`
    /// (the caller holds it), the answer holds for the count: a take of weight above one, or
    /// under shares, declares `weights` under the same lock before it takes, and an operator
    /// drops it only while no live slot counts for more than one unit and the config has no
    /// shares (PROTOCOL.md section 0, "Declaring" and "Dropping"). So where it is not named,
    /// every held slot counts one unit and no share is counted, and the reads (four system
    /// calls a held slot) are skipped. A `protocol.json` that cannot be read means read them.
    pub(crate) fn weighed(&self, weight: u32, shares: bool) -> bool {
        weight > 1
            || shares
            || crate::protocol::read(&self.dir).map_or(true, |p| {
                p.extensions.iter().any(|e| e == crate::protocol::WEIGHTS)
            })
    }

    /// The slots of `prefix` whose guard is held with no record behind it: the holder's record
    /// is released, but processes of its run (which inherited the guard's descriptor, such as
    /// a daemon the command left running) still hold it. They count as live until they exit.
    ///
    /// A guard found busy is probed again twice, a millisecond apart: a reader's momentary
    /// probe (`worklane slots`, the idle probe) lasts microseconds.
    ///
    /// `listed`: the indexes whose record the same listing showed: they have a record, so
    /// they are skipped without reading it (their verdict comes from the record's own probe).
    pub(super) fn recordless_held(
        &self,
        prefix: &str,
        hidden: &[String],
        listed: &[u32],
    ) -> Result<Vec<(u32, SlotPath)>, Error> {
        let mut held = Vec::new();
        for name in hidden {
            let Some(worklane_guard::reclaim::Entry::Guard { resource }) =
                worklane_guard::reclaim::classify(name)
            else {
                continue;
            };
            let Some(index) = slot_index(prefix, &resource) else {
                continue;
            };
            if listed.contains(&index) {
                continue;
            }
            let path = self.file(&resource)?;
            if path.read().is_ok_and(|r| r.is_some()) {
                continue;
            }
            // 3 probes, 1 ms apart.
            let mut backoff = Backoff::new(Duration::from_millis(1)).retries(2);
            let busy = loop {
                if !matches!(path.try_guard(), Ok(None)) {
                    break false;
                }
                if !backoff.sleep() {
                    break true;
                }
            };
            if busy {
                held.push((index, path));
            }
        }
        Ok(held)
    }

    /// Judges one slot: a held guard is live; with the guard free, the record decides.
    ///
    /// A slot whose own files are broken (its record a symbolic link, a FIFO or over 64 KiB,
    /// its guard not an empty regular file) cannot be judged, so it counts as held and is
    /// reported; it never fails the count of every other slot.
    pub(super) fn state_of(
        &self,
        path: &SlotPath,
        liveness: &dyn Liveness,
    ) -> Result<SlotState, Error> {
        Ok(self.observe(path, liveness)?.0)
    }

    /// The state of one slot file and, when its guard was free, the record bytes that state
    /// was judged from (read under the guard, so the two belong together).
    pub(super) fn observe(
        &self,
        path: &SlotPath,
        liveness: &dyn Liveness,
    ) -> Result<(SlotState, Option<Vec<u8>>), Error> {
        self.observe_retiring(path, liveness, None)
    }

    /// [`Pool::observe`] that, for a slot of `retire`'s kind whose record proves its holder
    /// dead, also removes that record while it holds the guard, and journals `holder-gone`:
    /// the first look after a holder's death says so, whether or not anyone takes the slot
    /// over. The state returned is the one judged (`Dead`); the next look finds the slot free.
    /// A record this user may not remove stays (a taker's takeover says it later).
    pub(super) fn observe_retiring(
        &self,
        path: &SlotPath,
        liveness: &dyn Liveness,
        retire: Option<&'static str>,
    ) -> Result<(SlotState, Option<Vec<u8>>), Error> {
        use worklane_slotfile::read::Error as ReadError;
        let guard = match path.try_guard() {
            Ok(Some(guard)) => guard,
            Ok(None) => return Ok((SlotState::GuardHeld, None)),
            // A stray at the guard's name, or a guard this user may not open (its mode): the
            // slot cannot be judged, so it counts as held and the count goes on (PROTOCOL.md
            // section 3, "Errors"); one such file never fails every take.
            Err(e) if broken_guard(&e) => {
                return Ok((
                    SlotState::Live(LiveWhy::Other(format!(
                        "its guard is broken or cannot be opened: {e}"
                    ))),
                    None,
                ));
            }
            Err(source) => {
                return Err(Error::Probe {
                    slot: path.name().to_owned(),
                    source,
                });
            }
        };
        let raw = match path.read() {
            Ok(raw) => raw,
            Err(
                e @ (ReadError::Symlink { .. }
                | ReadError::NotRegular { .. }
                | ReadError::TooLarge { .. }),
            ) => {
                return Ok((
                    SlotState::Live(LiveWhy::Malformed {
                        detail: e.to_string(),
                    }),
                    None,
                ));
            }
            Err(source) => {
                return Err(Error::Judge {
                    slot: path.name().to_owned(),
                    source,
                });
            }
        };
        let state = match &raw {
            None => SlotState::Dead(worklane_lease::DeadWhy::Other("no record".into())),
            Some(raw) => match Record::parse(raw) {
                Err(e) => SlotState::Live(LiveWhy::Malformed {
                    detail: e.to_string(),
                }),
                Ok(record) => match liveness.judge(&record, &worklane_lease::Now::of(&*self.clock))
                {
                    Judgement::Live(why) => SlotState::Live(why),
                    Judgement::Dead(why) => {
                        // A run whose processes outlived its supervisor and command, in the
                        // cgroup its record names, holds its slot until they end, whether or
                        // not they kept the guard (PROTOCOL.md 12.7).
                        if let Some(n) = cgroup_still_running(&self.dir, path.name(), &record) {
                            SlotState::Live(LiveWhy::Other(format!(
                                "its run's cgroup still holds {n} process(es)"
                            )))
                        } else {
                            if let Some(kind) = retire {
                                self.retire_dead(path, raw, &record, &why, kind);
                            }
                            SlotState::Dead(why)
                        }
                    }
                },
            },
        };
        drop(guard);
        Ok((state, raw))
    }

    /// Removes the dead holder's `record` (still `raw`, byte for byte) of slot `path`, under
    /// its guard (held by the caller), and journals it.
    fn retire_dead(
        &self,
        path: &SlotPath,
        raw: &[u8],
        record: &Record,
        why: &worklane_lease::DeadWhy,
        kind: &'static str,
    ) {
        match path.remove_if_unchanged(raw) {
            Ok(worklane_slotfile::Removal::Removed) => {
                log::info!(
                    "{}: its holder (pid {}) is gone and nobody took it over: {why}; its record \
                     is removed",
                    path.name(),
                    record
                        .pid()
                        .map_or_else(|| "?".to_owned(), |p| p.to_string())
                );
                self.journal.emit(worklane_journal::Event::HolderGone {
                    slot: path.name().to_owned(),
                    slot_kind: kind.to_owned(),
                    stale_pid: record.pid(),
                    stale_owner: record.owner.clone(),
                    stale_since: record.acquired_at.clone(),
                    proof: why.to_string(),
                });
            }
            Ok(_) => {}
            Err(e) => log::debug!("{}: its dead holder's record stays: {e}", path.name()),
        }
    }
}

/// Whether a guard error means a stray file sits where the guard belongs (a directory, FIFO,
/// symbolic link or non-empty file), which no process following the protocol can hold.
pub(super) fn broken_guard(e: &worklane_guard::acquire::Error) -> bool {
    use worklane_guard::acquire::Error as G;
    match e {
        G::Symlink { .. } | G::NotRegular { .. } | G::NotEmpty { .. } => true,
        // A guard this user may not open (its mode, or a group it is not in).
        G::Io { source, .. } => source.kind() == std::io::ErrorKind::PermissionDenied,
        _ => false,
    }
}

/// How many processes the cgroup `record` names still holds, when it names its own run's
/// cgroup ([`worklane_identity::cgroup::names_run`]) and that has any.
fn cgroup_still_running(
    dir: &worklane_slotfile::SlotDir,
    resource: &str,
    record: &Record,
) -> Option<usize> {
    use worklane_identity::cgroup;
    let path = record.extra_str(cgroup::RECORD_FIELD)?;
    let key = cgroup::dir_key_of(dir).ok()?;
    if !cgroup::names_run(path, &key, resource, record.epoch?) {
        return None;
    }
    let n = cgroup::usage(path)?.procs.len();
    (n > 0).then_some(n)
}
