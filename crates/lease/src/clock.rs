//! Time, through a seam: every boundary of a lease is decided on `Clock::now_ms`, so tests set
//! the time exactly instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Time, as leases need it: the wall clock (milliseconds since the Unix epoch), which every
/// process on every host shares but which can be stepped, and, where there is one, this boot's
/// clock, which is never stepped but is comparable only within one boot and time namespace.
///
/// Leases compare times written by different processes (`lastPulse`), so the wall clock is the
/// common ground; a contender on the holder's boot and time namespace judges by the boot clock
/// instead, so a step of the wall clock neither steals a live lease nor strands a dead one.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// Milliseconds on this boot's clock (see `Place::boot_clock_ms`), `None` when this clock
    /// has none.
    fn boot_ms(&self) -> Option<u64> {
        None
    }
}

/// The system's wall clock, and its boot clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }

    fn boot_ms(&self) -> Option<u64> {
        Some(worklane_identity::Place::boot_clock_ms())
    }
}

/// No boot clock reading (a [`ManualClock`] without one).
const NO_BOOT: u64 = u64::MAX;

/// A clock that shows what it is set to, shared by clones (for tests and simulations). It has
/// a boot clock only once given one ([`ManualClock::with_boot`]).
#[derive(Debug, Clone)]
pub struct ManualClock {
    wall: Arc<AtomicU64>,
    boot: Arc<AtomicU64>,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::at(0)
    }
}

impl ManualClock {
    /// A clock showing `ms` on the wall clock, with no boot clock.
    #[must_use]
    pub fn at(ms: u64) -> ManualClock {
        ManualClock {
            wall: Arc::new(AtomicU64::new(ms)),
            boot: Arc::new(AtomicU64::new(NO_BOOT)),
        }
    }

    /// The same clock with a boot clock showing `ms`.
    #[must_use]
    pub fn with_boot(self, ms: u64) -> ManualClock {
        self.boot.store(ms, Ordering::SeqCst);
        self
    }

    /// Sets the wall clock alone: a step of the wall clock (an NTP jump, an operator's
    /// `date -s`), which the boot clock does not see.
    pub fn set(&self, ms: u64) {
        self.wall.store(ms, Ordering::SeqCst);
    }

    /// Sets the boot clock alone.
    pub fn set_boot(&self, ms: u64) {
        self.boot.store(ms, Ordering::SeqCst);
    }

    /// Lets `ms` pass: both clocks move forward.
    pub fn advance(&self, ms: u64) {
        self.wall.fetch_add(ms, Ordering::SeqCst);
        let _ = self
            .boot
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                (b != NO_BOOT).then(|| b.saturating_add(ms))
            });
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.wall.load(Ordering::SeqCst)
    }

    fn boot_ms(&self) -> Option<u64> {
        Some(self.boot.load(Ordering::SeqCst)).filter(|&b| b != NO_BOOT)
    }
}

/// A reading of the boot clock with what makes it comparable: the boot and the time
/// namespace it was read in (a record's `pulseBoot`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BootTime {
    /// The boot id (`Place::boot`).
    pub boot: String,
    /// The time namespace (`Place::timens`).
    #[serde(default)]
    pub timens: Option<u64>,
    /// The boot clock, milliseconds.
    pub ms: u64,
}

/// A moment as a process sees it: the wall clock and, where there is one, the boot clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Now {
    /// Milliseconds since the Unix epoch.
    pub wall_ms: u64,
    /// The boot clock, when the clock has one and this process's place is known.
    pub boot: Option<BootTime>,
}

impl Now {
    /// What `clock` shows now.
    #[must_use]
    pub fn of(clock: &dyn Clock) -> Now {
        let boot = clock.boot_ms().and_then(|ms| {
            worklane_identity::Place::current()
                .ok()
                .map(|place| BootTime {
                    boot: place.boot.clone(),
                    timens: place.timens,
                    ms,
                })
        });
        Now {
            wall_ms: clock.now_ms(),
            boot,
        }
    }

    /// A moment known by the wall clock only.
    #[must_use]
    pub fn wall(ms: u64) -> Now {
        Now {
            wall_ms: ms,
            boot: None,
        }
    }

    /// Milliseconds from `earlier` to this moment: by the boot clock when both were read on
    /// the same boot and time namespace (a wall-clock step does not count), else by the wall
    /// clock (0 if it went backwards).
    #[must_use]
    pub fn since(&self, earlier: &Now) -> u64 {
        match (&self.boot, &earlier.boot) {
            (Some(now), Some(then)) if now.boot == then.boot && now.timens == then.timens => {
                now.ms.saturating_sub(then.ms)
            }
            _ => self.wall_ms.saturating_sub(earlier.wall_ms),
        }
    }
}

/// Formats milliseconds since the epoch as RFC 3339 UTC with milliseconds
/// (`2026-11-30T04:27:19.123Z`): the protocol's form of a time, as in a record's `acquiredAt`
/// ([`Record::acquired_at`](crate::Record::acquired_at)). The layers above write every other
/// time in the slot directory with it too (STOP's `at`, the drain's `since` and `until`), so
/// all of them read alike. An instant past 9999-12-31T23:59:59.999Z, which four-digit years
/// cannot write, is written as that last instant (jiff's last civil time, at millisecond
/// precision).
#[must_use]
pub fn rfc3339_ms(ms: u64) -> String {
    let civil = i64::try_from(ms)
        .ok()
        .and_then(|ms| {
            EPOCH
                .checked_add(jiff::SignedDuration::from_millis(ms))
                .ok()
        })
        .unwrap_or(jiff::civil::DateTime::MAX);
    format!("{civil:.3}Z")
}

/// 1970-01-01T00:00:00, the Unix epoch as a UTC civil time. The conversions here are civil
/// (UTC) arithmetic, not `jiff::Timestamp`: jiff's timestamps end at 9999-12-30T22:00:00Z (so
/// that every offset keeps a valid civil time), short of the last instant a four-digit year
/// writes, which the protocol's times may name.
const EPOCH: jiff::civil::DateTime = jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0);

/// Parses an RFC 3339 timestamp (`2026-11-30T04:27:19Z`, optional fraction, `Z` or `±HH:MM`)
/// into milliseconds since the epoch: the reader of [`rfc3339_ms`]'s form and of the other
/// forms PROTOCOL.md accepts from other writers (a drain's `until`). `None` for anything else,
/// or a time before 1970.
///
/// The grammar is PROTOCOL.md 12.6's, checked here; the calendar (which days exist, how many
/// days lie between a date and the epoch) is jiff's. jiff's own parser is not used: it accepts
/// more than the protocol does (basic formats such as `20261130T042719Z`, omitted seconds,
/// `±HH` and `±HHMM` offsets, bracketed annotations) and reads a leap second `:60` as `:59`,
/// where the protocol reads it as the minute's end.
#[must_use]
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(range)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if s > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        // The fraction's digits, counted (no index to advance by hand).
        i = start
            + b.get(start..)
                .unwrap_or_default()
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
        if i == start {
            return None;
        }
        let frac = &text[start..i.min(start + 3)];
        millis = frac.parse::<i64>().ok()? * 10i64.pow(3 - u32::try_from(frac.len()).ok()?);
    }
    let offset_min = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = oh * 60 + om;
            if *sign == b'+' { m } else { -m }
        }
        _ => return None,
    };
    // A leap second is the last second of its minute, read as the next minute's start.
    let (second, leap_ms) = if s == 60 { (59, 1000) } else { (s, 0) };
    let civil = jiff::civil::DateTime::new(
        i16::try_from(y).ok()?,
        i8::try_from(mo).ok()?,
        i8::try_from(d).ok()?,
        i8::try_from(h).ok()?,
        i8::try_from(mi).ok()?,
        i8::try_from(second).ok()?,
        0,
    )
    .ok()?;
    // As UTC first, then the offset applied by hand, so that an offset that carries the
    // instant past year 9999 still names it.
    let utc_ms = i64::try_from(civil.duration_since(EPOCH).as_millis()).ok()?;
    u64::try_from(utc_ms + leap_ms + millis - offset_min * 60_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_ms(951_782_400_000),
            "2000-02-29T00:00:00.000Z",
            "leap day"
        );
        assert_eq!(rfc3339_ms(1_796_012_839_123), "2026-11-30T04:27:19.123Z");
        assert_eq!(rfc3339_ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_what_it_formats_and_common_forms() {
        for ms in [0, 951_782_400_000, 1_796_012_839_123, 4_102_444_799_999] {
            assert_eq!(
                parse_rfc3339_ms(&rfc3339_ms(ms)),
                Some(ms),
                "round trip {ms}"
            );
        }
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(
            parse_rfc3339_ms("1970-01-01T01:00:00+01:00"),
            Some(0),
            "offset"
        );
        assert_eq!(
            parse_rfc3339_ms("1970-01-01T00:00:00.5Z"),
            Some(500),
            "short fraction"
        );
        assert_eq!(
            parse_rfc3339_ms("1970-01-01T00:00:00.123456Z"),
            Some(123),
            "long fraction"
        );
        for bad in [
            "",
            "2026-11-30",
            "2026-11-30T04:27:19",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T04:27:19.Z",
            "2026-11-30T04:27:19+0100",
            "2026-11-30T04:27:19Zjunk",
            "1969-12-31T23:59:59Z",
            "+026-11-30T04:27:19Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad:?} must not parse");
        }
    }

    #[test]
    fn manual_clock_is_shared_by_clones() {
        let a = ManualClock::at(5);
        let b = a.clone();
        a.advance(10);
        assert_eq!(b.now_ms(), 15, "clones share the time");
        b.set(1);
        assert_eq!(a.now_ms(), 1);
        assert_eq!(a.boot_ms(), None, "no boot clock until given one");
    }

    #[test]
    fn a_wall_step_is_not_time_passing() {
        let clock = ManualClock::at(1_000).with_boot(50);
        clock.advance(10);
        assert_eq!((clock.now_ms(), clock.boot_ms()), (1_010, Some(60)));
        clock.set(5_000_000);
        assert_eq!(clock.boot_ms(), Some(60), "a step of the wall clock only");
        let then = Now {
            wall_ms: 1_010,
            boot: Some(BootTime {
                boot: "b".into(),
                timens: Some(1),
                ms: 60,
            }),
        };
        let later = Now {
            wall_ms: 5_000_000,
            boot: Some(BootTime {
                boot: "b".into(),
                timens: Some(1),
                ms: 70,
            }),
        };
        assert_eq!(later.since(&then), 10, "by the boot clock");
        let elsewhere = Now {
            boot: Some(BootTime {
                boot: "b".into(),
                timens: Some(2),
                ms: 70,
            }),
            ..later.clone()
        };
        assert_eq!(
            elsewhere.since(&then),
            5_000_000 - 1_010,
            "another time namespace: wall"
        );
        assert_eq!(
            Now::wall(5).since(&Now::wall(9)),
            0,
            "a wall clock set back"
        );
    }

    /// The Gregorian leap rule, written independently of the code under test.
    fn leap(y: i64) -> bool {
        if y % 400 == 0 {
            true
        } else if y % 100 == 0 {
            false
        } else {
            y % 4 == 0
        }
    }

    fn month_lengths(y: i64) -> [i64; 12] {
        let february = if leap(y) { 29 } else { 28 };
        [31, february, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    }

    #[test]
    fn month_lengths_follow_the_leap_rules_for_4_100_and_400() {
        for (y, is_leap) in [
            (1900, false),
            (1970, false),
            (1972, true),
            (2000, true),
            (2023, false),
            (2024, true),
            (2100, false),
            (2400, true),
        ] {
            assert_eq!(leap(y), is_leap, "the test's own rule for {y}");
        }
    }

    /// Milliseconds of `y-m-d` at 00:00 UTC, counted by the test's own month lengths.
    fn day_ms(y: i64, m: i64, d: i64) -> i64 {
        let years: i64 = (1970..y).map(|y| if leap(y) { 366 } else { 365 }).sum();
        let months: i64 = month_lengths(y)[..usize::try_from(m - 1).unwrap_or(0)]
            .iter()
            .sum();
        (years + months + d - 1) * 86_400_000
    }

    #[test]
    fn the_last_day_of_each_month_parses_and_the_day_after_does_not() {
        for y in [1970, 1972, 2000, 2023, 2024, 2100, 2400, 9999] {
            for (m, len) in (1..=12).zip(month_lengths(y)) {
                let last = format!("{y:04}-{m:02}-{len:02}T12:00:00Z");
                let expected = day_ms(y, m, len) + 12 * 3_600_000;
                assert_eq!(
                    parse_rfc3339_ms(&last),
                    u64::try_from(expected).ok(),
                    "{last} is the last day of its month"
                );
                let after = format!("{y:04}-{m:02}-{:02}T12:00:00Z", len + 1);
                assert_eq!(parse_rfc3339_ms(&after), None, "{after} does not exist");
                let zeroth = format!("{y:04}-{m:02}-00T12:00:00Z");
                assert_eq!(parse_rfc3339_ms(&zeroth), None, "{zeroth} does not exist");
            }
        }
    }

    #[test]
    fn every_day_of_the_centuries_and_era_boundaries_converts_both_ways() {
        // Every day of 1970 to 2100 and of the years around 2400 and 9999, counted by the
        // test's own month lengths.
        for years in [1970..=2100, 2398..=2401, 9998..=9999] {
            let mut ms = day_ms(*years.start(), 1, 1);
            for y in years {
                for (m, len) in (1..=12).zip(month_lengths(y)) {
                    for d in 1..=len {
                        let text = format!("{y:04}-{m:02}-{d:02}T00:00:00.000Z");
                        let at = u64::try_from(ms).unwrap_or(0);
                        assert!(rfc3339_ms(at) == text, "{ms} is {text}");
                        assert!(parse_rfc3339_ms(&text) == Some(at), "{text} is {ms}");
                        ms += 86_400_000;
                    }
                }
            }
        }
    }

    #[test]
    fn formats_century_and_era_boundaries() {
        for (ms, text) in [
            (68_169_600_000, "1972-02-29T00:00:00.000Z"),
            (951_868_800_000, "2000-03-01T00:00:00.000Z"),
            (978_307_199_999, "2000-12-31T23:59:59.999Z"),
            (978_307_200_000, "2001-01-01T00:00:00.000Z"),
            (4_107_456_000_000, "2100-02-28T00:00:00.000Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
            (4_133_894_400_000, "2100-12-31T00:00:00.000Z"),
            (13_574_563_200_000, "2400-02-29T00:00:00.000Z"),
            (13_574_649_600_000, "2400-03-01T00:00:00.000Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (3_723_004, "1970-01-01T01:02:03.004Z"),
            (86_399_999, "1970-01-01T23:59:59.999Z"),
        ] {
            assert_eq!(rfc3339_ms(ms), text, "format {ms}");
            assert_eq!(parse_rfc3339_ms(text), Some(ms), "parse {text}");
        }
    }

    #[test]
    fn parse_bounds_of_each_field() {
        for (text, expected) in [
            ("1970-01-01T00:00:60Z", Some(60_000)),
            ("2016-12-31T23:59:60Z", Some(1_483_228_800_000)),
            ("1970-01-01T00:00:61Z", None),
            ("1970-01-01T00:59:00Z", Some(3_540_000)),
            ("1970-01-01T00:60:00Z", None),
            ("1970-01-01T23:00:00Z", Some(82_800_000)),
            ("1970-01-01T24:00:00Z", None),
            ("1970-12-01T00:00:00Z", Some(28_857_600_000)),
            ("1970-13-01T00:00:00Z", None),
            ("1970-00-01T00:00:00Z", None),
            ("1970-04-31T00:00:00Z", None),
            ("1970-01-01t00:00:01Z", Some(1_000)),
            ("1970-01-01 00:00:01Z", Some(1_000)),
            ("1970-01-01T00:00:01z", Some(1_000)),
            ("1970-01-01x00:00:01Z", None),
            ("1970x01-01T00:00:01Z", None),
            ("1970-01x01T00:00:01Z", None),
            ("1970-01-01T00x00:01Z", None),
            ("1970-01-01T00:00x01Z", None),
            ("1970-01-01T00:00:1Z", None),
            ("1970-01-01T00:00:01", None),
            ("1970-01-01T00:00:01ZZ", None),
            ("1970-01-01T0a:00:01Z", None),
        ] {
            assert_eq!(parse_rfc3339_ms(text), expected, "{text:?}");
        }
    }

    #[test]
    fn parse_offsets_up_to_23_59_either_way() {
        const DAY: u64 = 86_400_000;
        for (text, expected) in [
            ("1970-01-02T23:59:00+23:59", Some(DAY)),
            ("1970-01-01T00:00:00-23:59", Some(DAY - 60_000)),
            ("1970-01-02T05:30:00+05:30", Some(DAY)),
            ("1970-01-01T23:00:00-01:00", Some(DAY)),
            ("1970-01-02T00:00:00+00:00", Some(DAY)),
            ("1970-01-02T00:00:00-00:00", Some(DAY)),
            ("1970-01-02T00:00:00.5+00:30", Some(DAY - 1_800_000 + 500)),
            ("1970-01-02T00:00:00+24:00", None),
            ("1970-01-02T00:00:00-24:00", None),
            ("1970-01-02T00:00:00+00:60", None),
            ("1970-01-02T00:00:00+01:00x", None),
            ("1970-01-02T00:00:00+01x00", None),
            ("1970-01-02T00:00:00+01:0", None),
            ("1970-01-02T00:00:00+1:00", None),
            ("1970-01-02T00:00:00+0a:00", None),
            ("1970-01-02T00:00:00+01:0a", None),
            ("1970-01-01T00:00:00+00:01", None),
        ] {
            assert_eq!(parse_rfc3339_ms(text), expected, "{text:?}");
        }
    }

    #[test]
    fn parse_fractions_of_1_to_9_digits() {
        for (fraction, millis) in [
            ("1", 100),
            ("12", 120),
            ("123", 123),
            ("1234", 123),
            ("12345", 123),
            ("123456", 123),
            ("1234567", 123),
            ("12345678", 123),
            ("123456789", 123),
            ("009", 9),
            ("05", 50),
            ("999999999", 999),
        ] {
            let text = format!("1970-01-01T00:00:01.{fraction}Z");
            assert_eq!(parse_rfc3339_ms(&text), Some(1_000 + millis), "{text}");
        }
        for bad in [
            "1970-01-01T00:00:01.Z",
            "1970-01-01T00:00:01.1a",
            "1970-01-01T00:00:01.+01:00",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad:?} must not parse");
        }
    }

    /// The largest instant RFC 3339's four-digit years can write: 9999-12-31T23:59:59.999Z.
    const LAST_MS: u64 = 253_402_300_799_999;

    proptest::proptest! {
        #[test]
        fn formatting_round_trips_through_parsing(ms in 0..=LAST_MS) {
            let text = rfc3339_ms(ms);
            proptest::prop_assert_eq!(text.len(), 24, "{}", text);
            proptest::prop_assert_eq!(parse_rfc3339_ms(&text), Some(ms), "{}", text);
        }

        #[test]
        fn jiffs_rfc3339_at_any_precision_and_offset_parses_to_its_instant(
            ms in 0..=LAST_MS,
            precision in 0usize..=9,
            offset in -1439i32..=1439,
        ) {
            // jiff's timestamps end at 9999-12-30T22:00:00Z.
            let ts = jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(0));
            proptest::prop_assume!(ts.is_ok());
            let ts = ts.expect("in range");
            let kept = ms - ms % 10u64.pow(3 - u32::try_from(precision.min(3)).unwrap_or(3));
            let utc = format!("{ts:.precision$}");
            proptest::prop_assert_eq!(parse_rfc3339_ms(&utc), Some(kept), "{}", utc);
            let offset = jiff::tz::Offset::from_seconds(offset * 60).expect("an offset");
            let local = ts.display_with_offset(offset).to_string();
            // Four-digit years only (an offset can carry 0000 or 9999 past them).
            proptest::prop_assume!(local.as_bytes().get(4) == Some(&b'-'));
            proptest::prop_assert_eq!(parse_rfc3339_ms(&local), Some(ms), "{}", local);
        }

        #[test]
        fn an_offset_names_the_same_instant(ms in 0..=LAST_MS, offset in -1439i64..=1439) {
            let utc = i64::try_from(ms).unwrap_or(i64::MAX);
            let local = u64::try_from(utc + offset * 60_000).ok().filter(|&l| l <= LAST_MS);
            proptest::prop_assume!(local.is_some());
            let local = rfc3339_ms(local.unwrap_or_default());
            let sign = if offset < 0 { '-' } else { '+' };
            let (oh, om) = (offset.abs() / 60, offset.abs() % 60);
            let text = format!("{}{sign}{oh:02}:{om:02}", &local[..23]);
            proptest::prop_assert_eq!(parse_rfc3339_ms(&text), Some(ms), "{}", text);
        }

        #[test]
        fn a_fraction_of_any_length_is_read_to_the_millisecond(
            ms in 0..=LAST_MS,
            digits in 1usize..=9,
            extra in 0u64..1_000_000,
        ) {
            let text = rfc3339_ms(ms);
            let fraction = format!("{:03}{extra:06}", ms % 1000);
            let text = format!("{}.{}Z", &text[..19], &fraction[..digits]);
            let kept: u64 = fraction[..digits.min(3)].parse().unwrap_or(0);
            let millis = kept * 10u64.pow(3 - u32::try_from(digits.min(3)).unwrap_or(3));
            proptest::prop_assert_eq!(parse_rfc3339_ms(&text), Some(ms - ms % 1000 + millis), "{}", text);
        }
    }
}
