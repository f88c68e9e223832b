//! Counting slots: the verdict on each slot's holder, and guards held with no record.

use super::{Pool, slot_index};
use crate::Error;
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
}

impl Pool {
    /// Slots of one kind: `(index, path, state)` for every `<prefix>-<i>.lock`.
    pub(super) fn kind_slots_in(
        &self,
        prefix: &str,
        files: Vec<SlotPath>,
        hidden: &[String],
    ) -> Result<Vec<(u32, SlotPath, SlotState)>, Error> {
        let mut out = Vec::new();
        for path in files {
            let Some(index) = slot_index(prefix, path.name()) else {
                continue;
            };
            let state = self.state_of(&path, &ProcessLiveness)?;
            out.push((index, path, state));
        }
        for (index, path) in self.recordless_held(prefix, hidden)? {
            if !out.iter().any(|(i, _, _)| *i == index) {
                out.push((index, path, SlotState::GuardHeld));
            }
        }
        Ok(out)
    }

    /// The slots of `prefix` whose guard is held with no record behind it: the holder's record
    /// is released, but processes of its run (which inherited the guard's descriptor, such as
    /// a daemon the command left running) still hold it. They count as live until they exit.
    ///
    /// A guard found busy is probed again twice, a millisecond apart: a reader's momentary
    /// probe (`worklane slots`, the idle probe) lasts microseconds.
    pub(super) fn recordless_held(
        &self,
        prefix: &str,
        hidden: &[String],
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
        use worklane_guard::acquire::Error as GuardError;
        use worklane_slotfile::read::Error as ReadError;
        let guard = match path.try_guard() {
            Ok(Some(guard)) => guard,
            Ok(None) => return Ok((SlotState::GuardHeld, None)),
            Err(
                e @ (GuardError::Symlink { .. }
                | GuardError::NotRegular { .. }
                | GuardError::NotEmpty { .. }),
            ) => {
                return Ok((
                    SlotState::Live(LiveWhy::Other(format!("its guard is broken: {e}"))),
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
                    Judgement::Dead(why) => SlotState::Dead(why),
                },
            },
        };
        drop(guard);
        Ok((state, raw))
    }
}
