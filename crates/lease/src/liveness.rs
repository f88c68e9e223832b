//! How a holder is judged: the `Liveness` seam and its two built-ins.

use crate::clock::Now;
use crate::record::Record;
use std::time::Duration;
use worklane_identity::{GoneReason, UnknownReason, Verdict};

/// Default TTL of a TTL lease: 60 s.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);
/// Default pulse interval of a TTL lease: 3 s (20 missed pulses of margin in a TTL).
pub const DEFAULT_PULSE: Duration = Duration::from_secs(3);
/// How far in the future a `lastPulse` may lie before the record is Unknown instead of fresh:
/// clocks of cooperating processes on one machine agree, so only a small skew is tolerated.
pub const MAX_SKEW_MS: u64 = 1_000;

/// How long a lease holds its resource's guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardHold {
    /// For the lease's whole life: the kernel lock itself proves the holder is alive, and the
    /// record is judged only when the guard is free (process liveness).
    ForLife,
    /// Only while the record is inspected or changed (acquire, pulse, release): the record's
    /// age is the truth, so a paused holder's lease can go stale and be reclaimed (TTL).
    WhileChanging,
}

/// Why a holder counts as live (or cannot be judged, which counts as live).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LiveWhy {
    /// Another open file description holds the resource's kernel guard.
    GuardHeld,
    /// The recorded process is running.
    Alive,
    /// The recorded process cannot be judged (another host or namespace, hidden, legacy...).
    Unknown(UnknownReason),
    /// A TTL lease pulsed recently enough.
    Fresh {
        /// Milliseconds since the last pulse.
        age_ms: u64,
        /// The record's TTL.
        ttl_ms: u64,
    },
    /// A TTL lease's last pulse lies in the future beyond [`MAX_SKEW_MS`].
    FromTheFuture {
        /// How far ahead.
        ahead_ms: u64,
    },
    /// A TTL lease record without `lastPulse` or `ttlMs`.
    NoPulse,
    /// The record is not a valid lock record.
    Malformed {
        /// What is wrong.
        detail: String,
    },
    /// A takeover claim of a taker that may still be running.
    TakeoverInProgress {
        /// The claim file's name.
        claim: String,
        /// The taker's pid, if the claim names one.
        claimant: Option<u32>,
    },
    /// The record changed while we were taking it over: someone else got there first.
    Changed,
    /// An injected liveness's own reason.
    Other(String),
}

impl std::fmt::Display for LiveWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::GuardHeld => f.write_str("a live process holds its kernel guard"),
            Self::Alive => f.write_str("the recorded process is running"),
            Self::Unknown(why) => write!(f, "its holder cannot be judged: {why}"),
            Self::Fresh { age_ms, ttl_ms } => {
                write!(
                    f,
                    "its last pulse was {age_ms} ms ago, within its TTL of {ttl_ms} ms"
                )
            }
            Self::FromTheFuture { ahead_ms } => write!(
                f,
                "its last pulse is {ahead_ms} ms in the future; check the clocks, or remove \
                 the record once its holder is known to be gone"
            ),
            Self::NoPulse => f.write_str(
                "it is a TTL lease record without lastPulse/ttlMs; remove it once its holder is \
                 known to be gone",
            ),
            Self::Malformed { detail } => write!(
                f,
                "the record is malformed ({detail}); remove it once its holder is known to be gone"
            ),
            Self::TakeoverInProgress { claim, claimant } => match claimant {
                Some(pid) => write!(f, "pid {pid} may still be taking it over (claim {claim})"),
                None => write!(f, "a takeover claim {claim} cannot be judged"),
            },
            Self::Changed => f.write_str("another process changed it while we were taking it over"),
            Self::Other(why) => f.write_str(why),
        }
    }
}

/// Why a holder is dead, so its record may be taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadWhy {
    /// The recorded process is provably gone.
    Gone(GoneReason),
    /// The record (or claim) declares that its holder keeps the resource's guard for its whole
    /// life, and the guard is free: every copy of the holder's descriptor is closed, so the
    /// holder is gone, whatever host, boot or namespace it names.
    GuardReleased,
    /// A TTL lease went without a pulse for longer than its TTL.
    Stale {
        /// Milliseconds since the last pulse.
        age_ms: u64,
        /// The record's TTL.
        ttl_ms: u64,
    },
    /// An injected liveness's own reason.
    Other(String),
}

impl std::fmt::Display for DeadWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gone(why) => write!(f, "{why}"),
            Self::GuardReleased => f.write_str(
                "its holder kept the kernel guard for life and the guard is free: the holder is gone",
            ),
            Self::Stale { age_ms, ttl_ms } => {
                write!(
                    f,
                    "no pulse for {age_ms} ms, longer than its TTL of {ttl_ms} ms"
                )
            }
            Self::Other(why) => f.write_str(why),
        }
    }
}

/// A verdict on a record's holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Live or unknown: the record stays, the contender is refused.
    Live(LiveWhy),
    /// Dead: the record may be taken over.
    Dead(DeadWhy),
}

/// The seam that decides whether a record's holder still owns it.
pub trait Liveness: Send + Sync {
    /// How long a lease under this liveness holds the guard.
    fn guard_hold(&self) -> GuardHold;

    /// Adds this liveness's own fields to a record about to be written at `now`.
    fn stamp(&self, record: &mut Record, now: &Now);

    /// Judges the holder of `record`, found while the resource's guard is held, at `now`.
    fn judge(&self, record: &Record, now: &Now) -> Judgement;

    /// Judges the taker named by a takeover claim found while the guard is held. The taker no
    /// longer holds the guard, so it crashed or stopped mid-takeover: by default its claim is
    /// cleared at once when it declares that its taker held the guard (every worklane claim
    /// does), otherwise only when its process is provably gone.
    fn judge_claim(&self, claim: &Record, _now: &Now) -> Judgement {
        if claim.declares_guard_held() {
            return Judgement::Dead(DeadWhy::GuardReleased);
        }
        judge_process(claim)
    }

    /// The TTL of leases under this liveness, if it has one. A holder re-verifies ownership
    /// before a mutating action after a gap longer than half of it since its last pulse.
    fn ttl_ms(&self) -> Option<u64> {
        None
    }
}

/// Judges a record by its holder's process identity (`worklane-identity`).
fn judge_process(record: &Record) -> Judgement {
    match worklane_identity::probe(&record.holder) {
        Verdict::Alive => Judgement::Live(LiveWhy::Alive),
        Verdict::Gone(why) => Judgement::Dead(DeadWhy::Gone(why)),
        Verdict::Unknown(why) => Judgement::Live(LiveWhy::Unknown(why)),
    }
}

/// Process liveness: the holder keeps the guard for the lease's life, and its record says so
/// (`holdsGuard: true`). A declaring record found with the guard free is dead at once, whatever
/// host, boot or namespace it names: the kernel released the lock, so no copy of the holder's
/// descriptor is open. A record without the declaration (legacy, the seed's protocol, another
/// writer) is taken over only when its process is provably gone (exited, zombie, pid reused,
/// rebooted), and never by age.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessLiveness;

impl Liveness for ProcessLiveness {
    fn guard_hold(&self) -> GuardHold {
        GuardHold::ForLife
    }

    fn stamp(&self, record: &mut Record, _now: &Now) {
        record.holds_guard = Some(true);
    }

    fn judge(&self, record: &Record, _now: &Now) -> Judgement {
        if record.declares_guard_held() {
            return Judgement::Dead(DeadWhy::GuardReleased);
        }
        judge_process(record)
    }
}

/// TTL liveness (heartbeat lease): a record whose `lastPulse` is at most `ttlMs` old is held
/// whatever its pid shows (its holder may live in another pid namespace or a VM); older, it is
/// stale and reclaimed. The boundary: age `== ttlMs` is still held, `ttlMs + 1` is stale.
#[derive(Debug, Clone, Copy)]
pub struct TtlLiveness {
    ttl_ms: u64,
}

impl TtlLiveness {
    /// TTL liveness with the given TTL (written into each record as `ttlMs`).
    #[must_use]
    pub fn new(ttl: Duration) -> TtlLiveness {
        TtlLiveness {
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl Default for TtlLiveness {
    fn default() -> Self {
        TtlLiveness::new(DEFAULT_TTL)
    }
}

impl Liveness for TtlLiveness {
    fn guard_hold(&self) -> GuardHold {
        GuardHold::WhileChanging
    }

    fn stamp(&self, record: &mut Record, now: &Now) {
        record.last_pulse = Some(now.wall_ms);
        record.pulse_boot = now.boot.clone();
        record.ttl_ms = Some(self.ttl_ms);
        if record.started_at.is_none() {
            record.started_at = record.acquired_at.clone();
        }
    }

    fn judge(&self, record: &Record, now: &Now) -> Judgement {
        judge_pulse(record, record.ttl_ms, now)
    }

    fn judge_claim(&self, claim: &Record, now: &Now) -> Judgement {
        // A claimant that held the guard, or is proved gone, is cleared at once; otherwise its
        // claim ages out like a lease.
        if claim.declares_guard_held() {
            return Judgement::Dead(DeadWhy::GuardReleased);
        }
        match judge_process(claim) {
            dead @ Judgement::Dead(_) => dead,
            Judgement::Live(_) => judge_pulse(claim, Some(self.ttl_ms), now),
        }
    }

    fn ttl_ms(&self) -> Option<u64> {
        Some(self.ttl_ms)
    }
}

/// The TTL rule applied to a record's pulse at `now`: by the boot clock when the pulse carries
/// one (`pulseBoot`) of this boot and time namespace, so that a step of either side's wall
/// clock changes nothing; by the wall clock ([`judge_ttl`]) otherwise.
#[must_use]
pub fn judge_pulse(record: &Record, ttl_ms: Option<u64>, now: &Now) -> Judgement {
    match (&record.pulse_boot, &now.boot) {
        (Some(theirs), Some(ours))
            if record.last_pulse.is_some()
                && theirs.boot == ours.boot
                && theirs.timens == ours.timens =>
        {
            judge_ttl(Some(theirs.ms), ttl_ms, ours.ms)
        }
        _ => judge_ttl(record.last_pulse, ttl_ms, now.wall_ms),
    }
}

/// The TTL rule on its own, as a pure function.
#[must_use]
pub fn judge_ttl(last_pulse: Option<u64>, ttl_ms: Option<u64>, now_ms: u64) -> Judgement {
    let (Some(last), Some(ttl)) = (last_pulse, ttl_ms) else {
        return Judgement::Live(LiveWhy::NoPulse);
    };
    if last > now_ms {
        let ahead_ms = last - now_ms;
        return if ahead_ms > MAX_SKEW_MS {
            Judgement::Live(LiveWhy::FromTheFuture { ahead_ms })
        } else {
            Judgement::Live(LiveWhy::Fresh {
                age_ms: 0,
                ttl_ms: ttl,
            })
        };
    }
    let age_ms = now_ms - last;
    if age_ms > ttl {
        Judgement::Dead(DeadWhy::Stale {
            age_ms,
            ttl_ms: ttl,
        })
    } else {
        Judgement::Live(LiveWhy::Fresh {
            age_ms,
            ttl_ms: ttl,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_boundary_is_exact() {
        let ttl = Some(60_000);
        assert!(matches!(
            judge_ttl(Some(0), ttl, 59_999),
            Judgement::Live(LiveWhy::Fresh { .. })
        ));
        assert!(matches!(
            judge_ttl(Some(0), ttl, 60_000),
            Judgement::Live(LiveWhy::Fresh { .. })
        ));
        assert_eq!(
            judge_ttl(Some(0), ttl, 60_001),
            Judgement::Dead(DeadWhy::Stale {
                age_ms: 60_001,
                ttl_ms: 60_000
            })
        );
    }

    #[test]
    fn future_pulses_within_skew_are_fresh_beyond_are_unknown() {
        let ttl = Some(60_000);
        assert!(matches!(
            judge_ttl(Some(10_000 + MAX_SKEW_MS), ttl, 10_000),
            Judgement::Live(LiveWhy::Fresh { .. })
        ));
        assert_eq!(
            judge_ttl(Some(10_000 + MAX_SKEW_MS + 1), ttl, 10_000),
            Judgement::Live(LiveWhy::FromTheFuture {
                ahead_ms: MAX_SKEW_MS + 1
            })
        );
    }

    #[test]
    fn records_without_pulse_fields_stay_busy() {
        assert_eq!(
            judge_ttl(None, Some(1), 5),
            Judgement::Live(LiveWhy::NoPulse)
        );
        assert_eq!(
            judge_ttl(Some(1), None, 5),
            Judgement::Live(LiveWhy::NoPulse)
        );
    }

    #[test]
    fn stamp_writes_pulse_and_ttl() {
        let mut r = Record {
            acquired_at: Some("t".into()),
            ..Record::default()
        };
        TtlLiveness::new(Duration::from_millis(500)).stamp(&mut r, &Now::wall(42));
        assert_eq!((r.last_pulse, r.ttl_ms), (Some(42), Some(500)));
        assert_eq!(
            r.started_at.as_deref(),
            Some("t"),
            "startedAt kept for diagnostics"
        );
    }

    #[test]
    fn only_ttl_liveness_has_a_ttl() {
        assert_eq!(
            ProcessLiveness.ttl_ms(),
            None,
            "process liveness never re-verifies by time"
        );
        assert_eq!(
            TtlLiveness::new(Duration::from_millis(1_500)).ttl_ms(),
            Some(1_500)
        );
        assert_eq!(
            TtlLiveness::default().ttl_ms(),
            Some(60_000),
            "the default TTL"
        );
    }

    #[test]
    fn dead_reasons_say_why() {
        for (why, says) in [
            (DeadWhy::GuardReleased, "the guard is free"),
            (
                DeadWhy::Stale {
                    age_ms: 61_000,
                    ttl_ms: 60_000,
                },
                "no pulse for 61000 ms, longer than its TTL of 60000 ms",
            ),
            (DeadWhy::Other("injected".into()), "injected"),
        ] {
            let text = why.to_string();
            assert!(text.contains(says), "{why:?} must say {says:?}: {text:?}");
        }
        let gone = GoneReason::NoSuchProcess { pid: 4_000_000 };
        assert_eq!(
            DeadWhy::Gone(gone.clone()).to_string(),
            gone.to_string(),
            "a proof of exit is told as identity tells it"
        );
    }
}
