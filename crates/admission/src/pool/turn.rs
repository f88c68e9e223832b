//! Whose turn it is, decided under `slots.lock` from one count: the take's owner's share,
//! then its place in line (with shares: the fair order of `crate::share`), then the cap.

use super::blocker::{Blocker, Holding, ShareUsed};
use super::count::Counted;
use super::{Kind, Pool};
use crate::error::take::Error;
use crate::look;
use crate::share::{ShareOf, Turn, Use, Waiter};
use std::collections::HashMap;
use worklane_slotfile::Shares;

/// What a counting take decided from one listing under `slots.lock`, before it takes an index.
pub(super) struct Decided {
    /// Units of the kind held.
    pub(super) held: u32,
    /// Units held by each owner.
    pub(super) by_owner: HashMap<String, u32>,
}

/// The share a take counts against, and the units it asks for, checked against the cap.
pub(crate) struct Asked {
    /// Its weight (1 to the cap).
    pub weight: u32,
    /// Its owner's share (agents only; other kinds have no shares).
    pub share: ShareOf,
    /// The config's shares of its kind (empty for test runs and the full run).
    pub shares: Shares,
    /// The kind's cap.
    pub cap: u32,
}

impl Pool {
    /// What blocks a counted take, in this order: its owner's share, then the line (with
    /// shares: the fair order, decided from this count), then the cap. `None`: it may take.
    pub(super) fn blocker_of(
        &self,
        kind: Kind,
        asked: &Asked,
        decided: &Decided,
        slots: &[Counted],
        line: Option<(i64, u64, Option<&crate::line::Entry>)>,
        entries: &[crate::line::Entry],
    ) -> Result<Option<Blocker>, Error> {
        let owner = asked.share.owner.to_string();
        let owner_held = decided.by_owner.get(&owner).copied().unwrap_or(0);
        if let Some(share) = asked.share.ceiling
            && u64::from(owner_held) + u64::from(asked.weight) > u64::from(share)
        {
            return Ok(Some(Blocker::Share(Box::new(ShareUsed {
                holdings: holdings_of(slots, &owner, asked.cap),
                owner,
                held: owner_held,
                share,
                need: asked.weight,
            }))));
        }
        if let (false, Some((priority, start_ms, own))) = (asked.shares.is_empty(), line) {
            let use_ = Use {
                held: &decided.by_owner,
                shares: &asked.shares,
                cap: asked.cap,
            };
            match self.fair_turn(entries, &use_, asked, priority, start_ms, own)? {
                Turn::Go => {}
                Turn::Behind { ahead } => {
                    return Ok(Some(self.in_line(kind, ahead, Some(decided.held))?));
                }
                // Checked above from the same count; kept for a ceiling read differently.
                Turn::ShareUsed => {
                    return Ok(Some(Blocker::Share(Box::new(ShareUsed {
                        holdings: holdings_of(slots, &owner, asked.cap),
                        owner,
                        held: owner_held,
                        share: asked.share.ceiling.unwrap_or(asked.cap),
                        need: asked.weight,
                    }))));
                }
            }
        }
        let room = u64::from(decided.held) + u64::from(asked.weight) <= u64::from(asked.cap);
        if room {
            return Ok(None);
        }
        log::debug!(
            "{} slots at cap: {} of {} units held, {} asked",
            kind.label(),
            decided.held,
            asked.cap,
            asked.weight
        );
        Ok(Some(if asked.weight == 1 {
            Blocker::AtCap {
                held: decided.held,
                cap: asked.cap,
            }
        } else {
            Blocker::NoRoom {
                held: decided.held,
                cap: asked.cap,
                need: asked.weight,
            }
        }))
    }

    /// The turn of a take (its place, `own` entry if it stands in line) in the fair order of
    /// `entries` (the kind's line as listed), each entry's weight and owner read from its
    /// record; dead entries met are retired.
    fn fair_turn(
        &self,
        entries: &[crate::line::Entry],
        use_: &Use<'_>,
        asked: &Asked,
        priority: i64,
        start_ms: u64,
        own: Option<&crate::line::Entry>,
    ) -> Result<Turn, look::Error> {
        let mut waiters: Vec<Waiter> = entries
            .iter()
            .map(|entry| {
                let (weight, owner) = self
                    .file(&entry.name())
                    .ok()
                    .and_then(|path| path.read().ok().flatten())
                    .and_then(|raw| crate::weight::peek(&raw))
                    .unwrap_or((crate::weight::Weight::Absent, None));
                Waiter {
                    priority: entry.priority,
                    start_ms: entry.start_ms,
                    token: entry.token.clone(),
                    owner,
                    weight: weight.units(asked.cap),
                    me: own == Some(entry),
                }
            })
            .collect();
        if own.is_none_or(|own| !entries.contains(own)) {
            waiters.push(Waiter {
                priority,
                start_ms,
                token: own.map(|e| e.token.clone()).unwrap_or_default(),
                owner: Some(asked.share.owner.to_string()),
                weight: asked.weight,
                me: true,
            });
        }
        // The take's own weight and owner are its ask's, whatever its entry's record says.
        for waiter in waiters.iter_mut().filter(|w| w.me) {
            waiter.owner = Some(asked.share.owner.to_string());
            waiter.weight = asked.weight;
        }
        let label = entries.first().map(|e| e.kind.clone()).unwrap_or_default();
        crate::share::turn(&mut waiters, use_, &mut |w: &Waiter| {
            self.is_live(&crate::line::Entry {
                kind: label.clone(),
                priority: w.priority,
                start_ms: w.start_ms,
                token: w.token.clone(),
            })
        })
    }
}

/// The live slots of `owner` among `slots`, each with the units it counts for and its holder
/// as its record names it (read now: only a take blocked by its share asks).
fn holdings_of(slots: &[Counted], owner: &str, cap: u32) -> Vec<Holding> {
    slots
        .iter()
        .filter(|c| c.owner.as_deref() == Some(owner) && c.units(cap) > 0)
        .map(|c| {
            let record = worklane_lease::read_record(&c.path).ok().flatten();
            Holding {
                slot: c.path.name().to_owned(),
                units: c.units(cap),
                pid: record
                    .as_ref()
                    .and_then(|r| r.holder.pid.present().copied()),
                holder: record.and_then(|r| r.owner),
            }
        })
        .collect()
}
