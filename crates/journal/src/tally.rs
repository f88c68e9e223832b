//! What the journal's events add up to, carried across rotations: takeovers, halts, dropped
//! events, and the waits and holds timed in histograms. `worklane metrics` exposes a tally as
//! its counters and histograms; so that they never go down when a rotation drops the older
//! file, the rotating writer adds that file's tally to the totals it carries and writes them
//! as the first line (`totals`) of the new current file (PROTOCOL.md 17.3). The whole count is
//! then the current file's `totals` plus the tally of both files' other events.

use crate::{Entry, Event};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The histograms' upper bounds, in seconds: 0.01 × 4^k for k = 0..9 (10 ms to about 44 min),
/// then +Inf.
pub const BOUNDS: [f64; 10] = [
    0.01, 0.04, 0.16, 0.64, 2.56, 10.24, 40.96, 163.84, 655.36, 2621.44,
];

/// The kinds of slot a histogram is labelled by; any other is counted as `other`.
pub const SLOT_KINDS: [&str; 4] = ["agent", "test", "job", "full-run"];

/// One histogram: how many observations, their sum (seconds), and how many fell in each
/// bucket (not cumulative: `buckets[i]` counts those above the bound before and at most
/// `BOUNDS[i]`; the last counts those above every bound).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Hist {
    /// Observations.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum: f64,
    /// Per bucket, [`BOUNDS`] then +Inf.
    pub buckets: Vec<u64>,
}

impl Default for Hist {
    fn default() -> Hist {
        Hist {
            count: 0,
            sum: 0.0,
            buckets: vec![0; BOUNDS.len() + 1],
        }
    }
}

impl Hist {
    /// Counts one observation of `seconds`.
    pub fn observe(&mut self, seconds: f64) {
        self.count = self.count.saturating_add(1);
        self.sum += seconds;
        let at = BOUNDS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BOUNDS.len());
        self.fit();
        self.buckets[at] = self.buckets[at].saturating_add(1);
    }

    /// Adds `other`'s observations.
    pub fn merge(&mut self, other: &Hist) {
        self.count = self.count.saturating_add(other.count);
        self.sum += other.sum;
        self.fit();
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// Its buckets as many as the bounds (a line another writer made may have more or fewer).
    fn fit(&mut self) {
        self.buckets.resize(BOUNDS.len() + 1, 0);
    }

    /// `(upper bound, count in that bucket)`, +Inf last, as Prometheus encoders take them.
    #[must_use]
    pub fn pairs(&self) -> Vec<(f64, u64)> {
        BOUNDS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.buckets.iter().copied().chain(std::iter::repeat(0)))
            .collect()
    }
}

/// What a run of events adds up to.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tally {
    /// Locks taken over from holders proved dead.
    pub takeovers: u64,
    /// Slots whose holders were found dead with nobody taking them over (`holder-gone`).
    pub gone: u64,
    /// Commands halted by STOP, by who halted them (`supervisor`, `worklane`, `other`).
    pub halts: BTreeMap<String, u64>,
    /// Events writers could not append, said in their later lines.
    pub dropped: u64,
    /// Waits for a slot, by kind ([`SLOT_KINDS`] or `other`).
    pub queue_wait: BTreeMap<String, Hist>,
    /// From a dispatched attempt's admission to its claim.
    pub claim_wait: Hist,
    /// Holds of a slot, by kind.
    pub run: BTreeMap<String, Hist>,
}

/// A journal's slot kind as a label: one of [`SLOT_KINDS`], else `other` (a line another
/// writer made up must not add series without end).
#[must_use]
pub fn known_kind(kind: &str) -> &'static str {
    SLOT_KINDS
        .into_iter()
        .find(|k| *k == kind)
        .unwrap_or("other")
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

impl Tally {
    /// The tally of `entries` (a `totals` line among them is not counted: it is a tally).
    #[must_use]
    pub fn of<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Tally {
        let mut tally = Tally::default();
        for entry in entries {
            tally.add(entry);
        }
        tally
    }

    /// Counts one entry.
    pub fn add(&mut self, entry: &Entry) {
        self.dropped = self.dropped.saturating_add(entry.dropped);
        match &entry.event {
            Event::Takeover { .. } => self.takeovers = self.takeovers.saturating_add(1),
            Event::HolderGone { .. } => self.gone = self.gone.saturating_add(1),
            Event::Halt { by, .. } => {
                let by = match by.as_str() {
                    "supervisor" => "supervisor",
                    "worklane" => "worklane",
                    _ => "other",
                };
                let n = self.halts.entry(by.to_owned()).or_default();
                *n = n.saturating_add(1);
            }
            Event::SlotTaken {
                owner,
                waited_ms,
                slot_kind,
                ..
            } if owner != "worklane dispatcher" => self
                .queue_wait
                .entry(known_kind(slot_kind).to_owned())
                .or_default()
                .observe(seconds(*waited_ms)),
            // Dispatched work waits for an agent slot.
            Event::DispatchAdmitted { waited_ms, .. } => self
                .queue_wait
                .entry("agent".to_owned())
                .or_default()
                .observe(seconds(*waited_ms)),
            Event::DispatchClaimed { admitted_ms, .. } => {
                self.claim_wait.observe(seconds(*admitted_ms));
            }
            Event::SlotReleased {
                held_ms, slot_kind, ..
            } => self
                .run
                .entry(known_kind(slot_kind).to_owned())
                .or_default()
                .observe(seconds(*held_ms)),
            _ => {}
        }
    }

    /// Adds `other`'s counts. Labels another writer made up are counted as `other`.
    pub fn merge(&mut self, other: &Tally) {
        self.takeovers = self.takeovers.saturating_add(other.takeovers);
        self.gone = self.gone.saturating_add(other.gone);
        self.dropped = self.dropped.saturating_add(other.dropped);
        for (by, n) in &other.halts {
            let by = match by.as_str() {
                "supervisor" | "worklane" => by.as_str(),
                _ => "other",
            };
            let mine = self.halts.entry(by.to_owned()).or_default();
            *mine = mine.saturating_add(*n);
        }
        for (mine, theirs) in [
            (&mut self.queue_wait, &other.queue_wait),
            (&mut self.run, &other.run),
        ] {
            for (kind, hist) in theirs {
                mine.entry(known_kind(kind).to_owned())
                    .or_default()
                    .merge(hist);
            }
        }
        self.claim_wait.merge(&other.claim_wait);
    }
}

/// The carried totals of a read journal (the last `totals` line of the batch: the current
/// file's, which covers every file the rotations dropped) plus the tally of its other events.
#[must_use]
pub fn total(entries: &[Entry]) -> Tally {
    let mut total = entries
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::Totals { totals } => Some(totals.clone()),
            _ => None,
        })
        .unwrap_or_default();
    total.merge(&Tally::of(entries));
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(event: Event) -> Entry {
        Entry {
            version: crate::VERSION,
            at: "2026-12-06T00:00:00.000Z".to_owned(),
            pid: 1,
            dropped: 0,
            event,
        }
    }

    fn released(kind: &str, held_ms: u64) -> Entry {
        entry(Event::SlotReleased {
            slot: "agent-0.lock".to_owned(),
            slot_kind: kind.to_owned(),
            owner: "o".to_owned(),
            held_ms,
            cpu_usec: None,
        })
    }

    #[test]
    fn a_histogram_puts_each_observation_in_its_bucket_at_the_bound() {
        let mut hist = Hist::default();
        for seconds in [0.0, 0.01, 0.010_001, 2621.44, 2621.45, f64::NAN] {
            hist.observe(seconds);
        }
        assert_eq!(hist.count, 6);
        assert_eq!(hist.buckets[0], 2, "at most 10 ms, the bound included");
        assert_eq!(hist.buckets[1], 1);
        assert_eq!(hist.buckets[9], 1, "at the last bound");
        assert_eq!(hist.buckets[10], 2, "above every bound, and NaN");
        let pairs = hist.pairs();
        assert_eq!(pairs.len(), 11);
        assert_eq!(pairs[10], (f64::INFINITY, 2));
    }

    /// A histogram read from another writer's line, with fewer or more buckets than the
    /// bounds, is brought to as many before it counts.
    #[test]
    fn a_histogram_of_another_shape_is_fitted_to_the_bounds() {
        let mut few = Hist {
            count: 1,
            sum: 0.005,
            buckets: vec![1],
        };
        few.observe(5000.0);
        let mut expected = vec![0; BOUNDS.len() + 1];
        expected[0] = 1;
        expected[BOUNDS.len()] = 1;
        assert_eq!(
            few.buckets, expected,
            "above every bound, in the last bucket"
        );
        let mut many = Hist {
            count: 0,
            sum: 0.0,
            buckets: vec![0; 15],
        };
        many.merge(&few);
        assert_eq!(many.buckets, expected, "as many buckets as the bounds");
        assert_eq!(many.count, 2);
    }

    /// Each kind of event is counted where it belongs: takeovers, slots freed with nobody
    /// taking over, halts by who halted them (any other name as `other`), waits for a slot
    /// (the dispatcher's own takes are counted at their admission, not twice), claims, holds.
    #[test]
    fn each_event_is_counted_where_it_belongs() {
        let halt = |by: &str| {
            entry(Event::Halt {
                resource: "agent-0.lock".to_owned(),
                command_pid: 1,
                by: by.to_owned(),
                reason: String::new(),
                signal: None,
                status: None,
                took_ms: 0,
            })
        };
        let taken = |owner: &str, slot_kind: &str, waited_ms| {
            entry(Event::SlotTaken {
                slot: "agent-0.lock".to_owned(),
                slot_kind: slot_kind.to_owned(),
                owner: owner.to_owned(),
                epoch: 1,
                waited_ms,
            })
        };
        let entries = [
            entry(Event::HolderGone {
                slot: "agent-0.lock".to_owned(),
                slot_kind: "agent".to_owned(),
                stale_pid: None,
                stale_owner: None,
                stale_since: None,
                proof: String::new(),
            }),
            halt("supervisor"),
            halt("supervisor"),
            halt("worklane"),
            halt("someone"),
            taken("alice", "test", 30),
            taken("worklane dispatcher", "agent", 50),
            entry(Event::DispatchAdmitted {
                attempt: "a1".to_owned(),
                lane: "ci".to_owned(),
                slot: "agent-0.lock".to_owned(),
                waited_ms: 2000,
            }),
            entry(Event::DispatchClaimed {
                attempt: "a1".to_owned(),
                lane: "ci".to_owned(),
                slot: "agent-0.lock".to_owned(),
                admitted_ms: 20,
            }),
            released("test", 10),
            entry(Event::Undrain),
        ];
        let tally = Tally::of(&entries);
        assert_eq!((tally.gone, tally.takeovers), (1, 0));
        let halts = |tally: &Tally| {
            tally
                .halts
                .iter()
                .map(|(by, n)| (by.clone(), *n))
                .collect::<Vec<_>>()
        };
        let by = |n: [(&str, u64); 3]| n.map(|(by, n)| (by.to_owned(), n)).to_vec();
        assert_eq!(
            halts(&tally),
            by([("other", 1), ("supervisor", 2), ("worklane", 1)])
        );
        let waits: Vec<(&str, u64, f64)> = tally
            .queue_wait
            .iter()
            .map(|(kind, h)| (kind.as_str(), h.count, h.sum))
            .collect();
        assert_eq!(
            waits,
            [("agent", 1, 2.0), ("test", 1, 0.03)],
            "the dispatcher's take counted at its admission only"
        );
        assert_eq!((tally.claim_wait.count, tally.claim_wait.sum), (1, 0.02));
        assert_eq!(tally.run["test"].count, 1);
        // Merged: the halts keep their names, an unknown one is `other`.
        let mut merged = Tally::default();
        merged.merge(&tally);
        merged.halts.insert("made-up".to_owned(), 0);
        let mut again = Tally::default();
        again.merge(&merged);
        assert_eq!(
            halts(&again),
            by([("other", 1), ("supervisor", 2), ("worklane", 1)])
        );
    }

    #[test]
    fn totals_carried_plus_the_events_make_the_whole_count() {
        let dropped = Tally::of(&[released("agent", 20), released("job", 5)]);
        let mut carried = Tally::default();
        carried.merge(&dropped);
        let mut with_dropped = entry(Event::Takeover {
            resource: "x".to_owned(),
            owner: "o".to_owned(),
            stale_pid: None,
            stale_owner: None,
            stale_since: None,
            claim: "c".to_owned(),
            proof: "p".to_owned(),
        });
        with_dropped.dropped = 3;
        let journal = vec![
            entry(Event::Totals {
                totals: carried.clone(),
            }),
            released("agent", 30_000),
            released("made-up", 1),
            with_dropped,
        ];
        let whole = total(&journal);
        assert_eq!(whole.run["agent"].count, 2, "one carried, one read");
        assert_eq!(whole.run["job"].count, 1);
        assert_eq!(whole.run["other"].count, 1, "a made-up kind");
        assert_eq!((whole.takeovers, whole.dropped), (1, 3));
        assert!((whole.run["agent"].sum - 30.02).abs() < 1e-9);
        // Only the last totals line counts (the current file's covers the previous one's).
        let mut twice = vec![entry(Event::Totals {
            totals: carried.clone(),
        })];
        twice.extend(journal);
        assert_eq!(total(&twice), whole);
        // A totals line of another writer's with odd labels and bucket counts still adds up.
        let mut odd = Tally::default();
        odd.run.insert(
            "made-up".to_owned(),
            Hist {
                count: 1,
                sum: 1.0,
                buckets: vec![1],
            },
        );
        let mut sum = Tally::default();
        sum.merge(&odd);
        assert_eq!(sum.run["other"].buckets.len(), BOUNDS.len() + 1);
    }
}
