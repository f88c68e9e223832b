//! The waiting line: one order for every waiter of a kind, by priority (higher first), then
//! original start (earlier first), then token.
//!
//! A waiter stands in line with an *entry*, the lock `line-<kind>.<priority>.<start>.<token>`
//! held under process liveness like any lock (its guard held for the waiter's life, its record
//! naming the waiter). The entry's name carries its place, so one listing orders the line. A
//! waiter takes a slot only when no live entry of its kind stands before it; a take that does
//! not wait (`--no-wait`) is refused while a live entry of its kind stands before the place it
//! would take (its priority, now). An entry whose guard is free is a dead waiter's: whoever
//! finds it retires it (record, epoch and guard removed) and looks on.

use crate::error::take;
use crate::look;
use crate::{Kind, Pool};
use worklane_guard::reclaim::Removal;
use worklane_lease::{Acquired, Lease, Options, Request};
use worklane_slotfile::SlotDir;

/// The prefix of every entry's name.
pub const LINE_PREFIX: &str = "line-";

/// A place in line, as an entry's name spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The kind waited for ([`Kind::label`]).
    pub kind: String,
    /// Higher goes first.
    pub priority: i64,
    /// When the waiter started waiting, milliseconds since the Unix epoch.
    pub start_ms: u64,
    /// 16 lowercase hex digits, random: ties are broken by it, and it makes the name unique.
    pub token: String,
}

impl Entry {
    /// The entry's file name: `line-<kind>.<priority>.<start_ms>.<token>`.
    #[must_use]
    pub fn name(&self) -> String {
        format!(
            "{LINE_PREFIX}{}.{}.{}.{}",
            self.kind, self.priority, self.start_ms, self.token
        )
    }

    /// Reads an entry's name; `None` for any other name (its epoch files and claims too).
    /// Numbers are plain decimal (a `-` before a negative priority), without leading zeros.
    #[must_use]
    pub fn parse(name: &str) -> Option<Entry> {
        let rest = name.strip_prefix(LINE_PREFIX)?;
        let mut parts = rest.split('.');
        let (kind, priority, start, token) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || !matches!(kind, "agent" | "test" | "full-run" | "job") {
            return None;
        }
        let plain = |digits: &str| {
            !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'))
        };
        let magnitude = priority.strip_prefix('-').unwrap_or(priority);
        if !plain(magnitude) || priority == "-0" || !plain(start) {
            return None;
        }
        let token_ok = token.len() == 16
            && token
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !token_ok {
            return None;
        }
        Some(Entry {
            kind: kind.to_owned(),
            priority: priority.parse().ok()?,
            start_ms: start.parse().ok()?,
            token: token.to_owned(),
        })
    }

    /// The line's order: higher priority, then earlier start, then smaller token.
    fn key(&self) -> (std::cmp::Reverse<i64>, u64, &str) {
        (std::cmp::Reverse(self.priority), self.start_ms, &self.token)
    }

    /// Whether this entry stands before a place of `priority` taken at `start_ms` (ties go to
    /// whoever was there first: an entry at the same priority and start stands before).
    #[must_use]
    pub fn before(&self, priority: i64, start_ms: u64) -> bool {
        (std::cmp::Reverse(self.priority), self.start_ms) <= (std::cmp::Reverse(priority), start_ms)
    }
}

/// The entries of `label` among `listed`, in line order.
pub(crate) fn entries_of(label: &str, listed: &[worklane_slotfile::SlotPath]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = listed
        .iter()
        .filter_map(|p| Entry::parse(p.name()))
        .filter(|e| e.kind == label)
        .collect();
    entries.sort();
    entries
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// Why a place could not leave the line ([`Place::leave`]). Each variant names the step that
/// failed and the entry; the cause is its source. (Joining the line is part of a take:
/// [`Pool::join_line`] fails with `take::Error`.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A place in line could not be left: its entry's record could not be released.
    #[error("cannot leave the line: the record of entry {entry} cannot be released")]
    LeaveLine {
        /// The entry's file name.
        entry: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::held::Error>,
    },
    /// A line entry (a place left, or a dead waiter's) could not be retired.
    #[error("cannot retire line entry {entry}")]
    Retire {
        /// The entry's file name.
        entry: String,
        /// Why.
        #[source]
        source: worklane_guard::reclaim::Error,
    },
}

/// A waiter's place in line. Leaving the line ([`Place::leave`], or dropping it) removes the
/// entry; a killed waiter's entry is dead at once (its guard free) and retired by whoever
/// finds it.
#[derive(Debug)]
#[must_use = "the place is left as soon as it is dropped"]
pub struct Place {
    dir: SlotDir,
    entry: Entry,
    lease: Option<Lease>,
}

impl Place {
    /// Where it stands.
    #[must_use]
    pub fn entry(&self) -> &Entry {
        &self.entry
    }

    /// Leaves the line: the record released, then the entry retired (its epoch file and guard
    /// removed). Nothing of the entry is left in the directory.
    pub fn leave(mut self) -> Result<(), Error> {
        self.leave_now()
    }

    fn leave_now(&mut self) -> Result<(), Error> {
        let Some(lease) = self.lease.take() else {
            return Ok(());
        };
        let entry = self.entry.name();
        lease.release().map_err(|source| Error::LeaveLine {
            entry: entry.clone(),
            source: Box::new(source),
        })?;
        // A reader's momentary probe of the entry's guard (`worklane slots`, stop-all's look
        // at the directory, another waiter judging it) makes the retire find it busy; it lasts
        // microseconds, so try again for up to 50 ms before leaving the entry to the next
        // waiter (its record is gone already: it no longer stands in line).
        let mut backoff =
            worklane_lease::Backoff::new(std::time::Duration::from_millis(1)).retries(49);
        loop {
            match worklane_lease::retire(&self.dir, &entry) {
                Ok(Removal::Busy) if backoff.sleep() => {}
                Ok(_) => return Ok(()),
                Err(source) => return Err(Error::Retire { entry, source }),
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = self.leave_now();
    }
}

/// Where a place stands, seen at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// Entries of its kind before it; the first of them is live (proved by its held guard),
    /// the rest are as listed. 0: it is at the head.
    pub ahead: u32,
    /// Every entry of its kind in line, itself included if it stands in it.
    pub in_line: u32,
}

/// An entry as `worklane slots` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LineView {
    /// Its place.
    pub entry: Entry,
    /// Its waiter's record, if readable.
    pub record: Option<worklane_lease::Record>,
    /// Who may have written that record (its file's owner, mode and links): any member of the
    /// directory's group may have put an entry in the line, so a record proves something of a
    /// process only if its owner alone can have written it and the process is that owner's.
    pub writer: Option<worklane_slotfile::Written>,
    /// Whether its guard was held when probed (a free one is a dead waiter's, retired by the
    /// next waiter).
    pub live: bool,
    /// The units its waiter asks for (its record's `weight`; 1 when absent or bad).
    pub weight: u32,
    /// The owner whose share it waits on (its record's `shareOwner`), if it names one.
    pub share_owner: Option<String>,
}

impl Pool {
    /// Every entry of every kind's line, in line order within each kind (agents, test runs,
    /// the full run), each probed for a moment and never removed: what `worklane slots` shows.
    pub fn line_views(&self) -> Result<Vec<LineView>, look::Error> {
        let listed = self.dir().list().map_err(self.listing())?;
        Ok(self.line_views_in(&listed))
    }

    /// [`Pool::line_views`] from a listing of the directory already made (a snapshot lists it
    /// once for its slots, its problems and its lines).
    pub(crate) fn line_views_in(&self, listed: &[worklane_slotfile::SlotPath]) -> Vec<LineView> {
        let mut views = Vec::new();
        for label in ["agent", "test", "full-run", "job"] {
            for entry in entries_of(label, listed) {
                let Ok(path) = self.dir().file(&entry.name()) else {
                    continue;
                };
                let live = matches!(path.try_guard(), Ok(None));
                let (record, writer) = match path.read_with_owner() {
                    Ok(Some((raw, writer))) => {
                        (worklane_lease::Record::parse(&raw).ok(), Some(writer))
                    }
                    _ => (None, None),
                };
                let weight = record
                    .as_ref()
                    .map_or(1, |r| crate::weight::Weight::of(r).units(u32::MAX));
                let share_owner = record
                    .as_ref()
                    .and_then(crate::weight::share_owner)
                    .map(str::to_owned);
                views.push(LineView {
                    entry,
                    record,
                    writer,
                    live,
                    weight,
                    share_owner,
                });
            }
        }
        views
    }

    /// Takes a place in the line for `kind` at `priority`, starting now (the pool's clock):
    /// an entry held by this process for as long as the [`Place`] lives.
    pub fn join_line(
        &self,
        kind: Kind,
        priority: i64,
        request: &Request,
    ) -> Result<Place, take::Error> {
        self.join_line_at(kind, priority, self.clock().now_ms(), request)
    }

    /// [`Pool::join_line`] at a place that started waiting at `start_ms` (the dispatcher's
    /// rows keep their original start).
    pub fn join_line_at(
        &self,
        kind: Kind,
        priority: i64,
        start_ms: u64,
        request: &Request,
    ) -> Result<Place, take::Error> {
        self.join_line_for(kind, priority, start_ms, request, &crate::Ask::default())
    }

    /// [`Pool::join_line_at`] for `ask`: the entry's record says its weight and the owner
    /// whose share it waits on (`weight`, `shareOwner`, resolved from the config in force
    /// now), which the fair order reads (PROTOCOL.md 12.10). The weight is checked as a take
    /// checks it ([`take::Error::Weight`], [`take::Error::WeightOverShare`]).
    pub fn join_line_for(
        &self,
        kind: Kind,
        priority: i64,
        start_ms: u64,
        request: &Request,
        ask: &crate::Ask,
    ) -> Result<Place, take::Error> {
        let request = match (kind, self.asked(kind, ask)) {
            (Kind::FullRun, asked) => {
                asked?;
                request.clone()
            }
            (_, Ok(asked)) => request
                .clone()
                .field(crate::weight::WEIGHT_FIELD, asked.weight)
                .field(
                    crate::weight::SHARE_OWNER_FIELD,
                    asked.share.owner.to_string(),
                ),
            // A config that cannot be used refuses every take, but not a place in line (a
            // waiter waits for it to be fixed): a place of weight 1 stands without a weight
            // or an owner, as an older harness's does.
            (_, Err(take::Error::Config { .. })) if ask.weight() == 1 => request.clone(),
            (_, Err(e)) => return Err(e),
        };
        for _ in 0..4 {
            let entry = Entry {
                kind: kind.label().to_owned(),
                priority,
                start_ms,
                token: worklane_guard::random_token(),
            };
            let request = request
                .clone()
                .field("kind", kind.label())
                .field("priority", priority);
            let options = Options::process().clock(self.clock());
            let joined = worklane_lease::acquire(self.dir(), &entry.name(), &request, &options)
                .map_err(|source| take::Error::JoinLine {
                    kind: kind.label(),
                    source: Box::new(source),
                })?;
            match joined {
                Acquired::Held(lease) => {
                    return Ok(Place {
                        dir: self.dir().clone(),
                        entry,
                        lease: Some(lease),
                    });
                }
                // A random name taken: only a writer outside the protocol made it. Another.
                Acquired::Refused(_) => {}
            }
        }
        Err(take::Error::LineFull)
    }

    /// The live line for `kind`, in order (dead entries found are retired on the way).
    pub fn line(&self, kind: Kind) -> Result<Vec<Entry>, look::Error> {
        let mut live = Vec::new();
        for entry in self.listed_line(kind.label())? {
            if self.is_live(&entry)? {
                live.push(entry);
            }
        }
        Ok(live)
    }

    /// Where a place of `priority` taken at `start_ms` stands in the line for `kind`, not
    /// counting the entry `own` (the place's own, if it stands in line). Entries before it are
    /// probed from the front until a live one is found; dead ones are retired.
    pub fn standing(
        &self,
        kind: Kind,
        priority: i64,
        start_ms: u64,
        own: Option<&Entry>,
    ) -> Result<Standing, look::Error> {
        let listed = self.listed_line(kind.label())?;
        self.standing_among(&listed, priority, start_ms, own)
    }

    fn standing_among(
        &self,
        listed: &[Entry],
        priority: i64,
        start_ms: u64,
        own: Option<&Entry>,
    ) -> Result<Standing, look::Error> {
        let in_line = u32::try_from(listed.len()).unwrap_or(u32::MAX);
        let before: Vec<&Entry> = listed
            .iter()
            .filter(|e| Some(*e) != own)
            .filter(|e| match own {
                Some(own) => *e < own,
                None => e.before(priority, start_ms),
            })
            .collect();
        let mut dead = 0u32;
        for entry in &before {
            if self.is_live(entry)? {
                let ahead = u32::try_from(before.len()).unwrap_or(u32::MAX) - dead;
                return Ok(Standing {
                    ahead,
                    in_line: in_line - dead,
                });
            }
            dead += 1;
        }
        Ok(Standing {
            ahead: 0,
            in_line: in_line - dead,
        })
    }

    /// How many entries of `kind`'s line are listed (not probed).
    pub(crate) fn line_length(&self, kind: Kind) -> Result<u32, look::Error> {
        Ok(u32::try_from(self.listed_line(kind.label())?.len()).unwrap_or(u32::MAX))
    }

    /// The entries of `label` as listed, in line order (not probed).
    fn listed_line(&self, label: &str) -> Result<Vec<Entry>, look::Error> {
        let prefix = format!("{LINE_PREFIX}{label}.");
        let listed = self.dir().list_prefixed(&prefix).map_err(self.listing())?;
        Ok(entries_of(label, &listed))
    }

    /// How many live entries of `kind`'s line stand before the place (`priority`, `start_ms`,
    /// and `own` if it stands in line), from a listing already made (`listed`): the first one
    /// before it is probed (dead ones retired on the way), the rest counted as listed.
    pub(crate) fn ahead_in(
        &self,
        kind: Kind,
        listed: &[worklane_slotfile::SlotPath],
        priority: i64,
        start_ms: u64,
        own: Option<&Entry>,
    ) -> Result<u32, look::Error> {
        let entries = entries_of(kind.label(), listed);
        Ok(self
            .standing_among(&entries, priority, start_ms, own)?
            .ahead)
    }

    /// Whether `entry`'s waiter lives (its guard held); a dead one's entry is retired.
    ///
    /// Only a held guard makes an entry live. An entry whose record is gone has left (or is
    /// being retired by another waiter: its guard may be unlinked and made again under us);
    /// one whose guard cannot be taken or removed cannot stand in anyone's way either: at
    /// worst someone goes before it, and the cap is kept by the count whatever the line says.
    pub(crate) fn is_live(&self, entry: &Entry) -> Result<bool, look::Error> {
        let path = self.file(&entry.name())?;
        if !path.modified_ms().is_ok_and(|m| m.is_some()) {
            return Ok(false);
        }
        // Who waited, read before its record goes (for the journal).
        let record = path
            .read()
            .ok()
            .flatten()
            .and_then(|raw| worklane_lease::Record::parse(&raw).ok());
        let retired = worklane_lease::retire(self.dir(), &entry.name());
        if matches!(retired, Ok(Removal::Removed)) {
            log::info!("retired {}: its waiter is gone", entry.name());
            self.journal().emit(worklane_journal::Event::SlotLeft {
                slot_kind: entry.kind.clone(),
                owner: record
                    .as_ref()
                    .and_then(|r| r.owner.clone())
                    .unwrap_or_default(),
                waiter_pid: record.as_ref().and_then(worklane_lease::Record::pid),
                waited_ms: self.clock().now_ms().saturating_sub(entry.start_ms),
            });
        }
        Ok(matches!(retired, Ok(Removal::Busy)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(priority: i64, start_ms: u64, token: &str) -> Entry {
        Entry {
            kind: "agent".into(),
            priority,
            start_ms,
            token: token.into(),
        }
    }

    #[test]
    fn names_round_trip_and_only_entries_parse() {
        let e = entry(-3, 1_800_000_000_123, "0123456789abcdef");
        assert_eq!(e.name(), "line-agent.-3.1800000000123.0123456789abcdef");
        assert_eq!(Entry::parse(&e.name()), Some(e));
        for kind in ["agent", "test", "full-run", "job"] {
            let name = format!("line-{kind}.0.0.0123456789abcdef");
            assert_eq!(Entry::parse(&name).map(|e| e.kind), Some(kind.to_owned()));
        }
        for not in [
            "line-agent.0.5.0123456789abcdef.epoch.1",
            "line-agent.0.5.0123456789abcdef.0123456789abcdef.claim",
            "line-agent.0.5",
            "line-other.0.5.0123456789abcdef",
            "line-agent.00.5.0123456789abcdef",
            "line-agent.-0.5.0123456789abcdef",
            "line-agent.-.5.0123456789abcdef",
            "line-agent.+1.5.0123456789abcdef",
            "line-agent.0.05.0123456789abcdef",
            "line-agent.0..0123456789abcdef",
            "line-agent.0.5.0123456789ABCDEF",
            "line-agent.0.5.0123456789abcde",
            "line-agent.0.5.0123456789abcdef0",
            "line-agent.99999999999999999999.5.0123456789abcdef",
            "agent-0.lock",
            "xline-agent.0.5.0123456789abcdef",
        ] {
            assert_eq!(Entry::parse(not), None, "{not}");
        }
        assert_eq!(
            Entry::parse("line-agent.0.0.0123456789abcdef").map(|e| (e.priority, e.start_ms)),
            Some((0, 0)),
            "zero is written 0"
        );
    }

    #[test]
    fn the_line_goes_by_priority_then_start_then_token() {
        let mut line = [
            entry(0, 20, "00000000000000aa"),
            entry(5, 30, "00000000000000aa"),
            entry(0, 10, "00000000000000bb"),
            entry(0, 10, "00000000000000aa"),
            entry(-1, 1, "00000000000000aa"),
        ];
        line.sort();
        let keys: Vec<(i64, u64, &str)> = line
            .iter()
            .map(|e| (e.priority, e.start_ms, &e.token[14..]))
            .collect();
        assert_eq!(
            keys,
            [
                (5, 30, "aa"),
                (0, 10, "aa"),
                (0, 10, "bb"),
                (0, 20, "aa"),
                (-1, 1, "aa")
            ]
        );
        let e = entry(0, 10, "00000000000000aa");
        assert!(e.before(0, 10), "a tie goes to whoever stands in line");
        assert!(e.before(0, 11), "an earlier start");
        assert!(!e.before(0, 9), "a later start");
        assert!(e.before(-1, 0), "a higher priority, whatever the start");
        assert!(!e.before(1, 99), "a lower priority");
    }
}
