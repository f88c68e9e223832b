//! Parser of Darwin `/bin/ps -o lstart=,state= -p PID`, run with `LC_ALL=C` and `TZ=UTC`.
//!
//! One line: the start time in the C locale's `ctime` shape (`Mon Nov 30 04:27:19 2026`, the day
//! of month padded with a space below 10), then the state (`Ss`, `R+`, `Z`, ...). No line means
//! no such process. The start becomes whole seconds since the Unix epoch, computed here, so the
//! record holds a number that does not depend on the reader's locale or zone.
#![cfg_attr(not(target_os = "macos"), allow(dead_code))]

use std::process::{Command, Stdio};

use crate::parse::Malformed;

/// Prints a process's start time and state, see [ps(1)].
///
/// [ps(1)]: https://keith.github.io/xcode-man-pages/ps.1.html
pub(crate) const PS: &str = "/bin/ps";

/// The `ps` run that prints the start and state of `pid` in one line: an empty environment but
/// `LC_ALL=C` and `TZ=UTC`, so the output does not depend on the caller's locale or zone; no
/// standard input, errors discarded (no output at all means no such process).
pub(crate) fn command(pid: u32) -> Command {
    let mut command = Command::new(PS);
    command
        .args(["-o", "lstart=,state=", "-p", &pid.to_string()])
        .env_clear()
        .env("LC_ALL", "C")
        .env("TZ", "UTC")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// One line of `ps` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PsLine {
    /// The start, in seconds since the Unix epoch (UTC). `None` only for a zombie whose start
    /// time `ps` could not print: a zombie's exit is proved by its state alone.
    pub(crate) start: Option<u64>,
    /// Whether the state begins with `Z`: the process has exited.
    pub(crate) zombie: bool,
}

/// Parses the whole output of `ps`. `Ok(None)`: `ps` printed nothing, no such process.
pub(crate) fn parse(output: &[u8]) -> Result<Option<PsLine>, Malformed> {
    let text = std::str::from_utf8(output)
        .map_err(|_| Malformed("ps printed bytes that are not UTF-8"))?;
    let mut lines = text.lines().filter(|line| !line.trim_ascii().is_empty());
    let Some(line) = lines.next() else {
        return Ok(None);
    };
    if lines.next().is_some() {
        return Err(Malformed("ps printed more than one process"));
    }
    let mut tokens: Vec<&str> = line.split_ascii_whitespace().collect();
    let state = tokens.pop().ok_or(Malformed("ps printed an empty line"))?;
    let zombie = match state.as_bytes().first() {
        Some(b'Z') => true,
        Some(first) if first.is_ascii_uppercase() => false,
        _ => return Err(Malformed("the last column is not a process state")),
    };
    match parse_lstart(&tokens) {
        Ok(start) => Ok(Some(PsLine {
            start: Some(start),
            zombie,
        })),
        Err(_) if zombie => Ok(Some(PsLine {
            start: None,
            zombie,
        })),
        Err(malformed) => Err(malformed),
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// Seconds since the Unix epoch of an `lstart` split into its five words:
/// weekday, month, day, `HH:MM:SS`, year. The weekday must agree with the date.
pub(crate) fn parse_lstart(words: &[&str]) -> Result<u64, Malformed> {
    let &[weekday, month, day, time, year] = words else {
        return Err(Malformed(
            "the start time is not five words (weekday month day time year)",
        ));
    };
    let month = MONTHS.iter().position(|&m| m == month).ok_or(Malformed(
        "the start time's month is not a C-locale month name",
    ))?;
    let month = u32::try_from(month + 1).map_err(|_| Malformed("month out of range"))?;
    let year: i64 = number(year, 4, 4)
        .filter(|year| (1970..=9999).contains(year))
        .ok_or(Malformed(
            "the start time's year is not between 1970 and 9999",
        ))?;
    let date = number(day, 1, 2)
        .and_then(|day| {
            jiff::civil::Date::new(
                i16::try_from(year).ok()?,
                i8::try_from(month).ok()?,
                i8::try_from(day).ok()?,
            )
            .ok()
        })
        .ok_or(Malformed(
            "the start time's day does not exist in its month",
        ))?;
    let mut hms = time.split(':');
    let (Some(hours), Some(minutes), Some(seconds), None) =
        (hms.next(), hms.next(), hms.next(), hms.next())
    else {
        return Err(Malformed("the start time's clock is not HH:MM:SS"));
    };
    let hours = number(hours, 2, 2).filter(|&h| h < 24);
    let minutes = number(minutes, 2, 2).filter(|&m| m < 60);
    let seconds = number(seconds, 2, 2).filter(|&s| s < 60);
    let (Some(hours), Some(minutes), Some(seconds)) = (hours, minutes, seconds) else {
        return Err(Malformed("the start time's clock is not a valid HH:MM:SS"));
    };

    let weekday_of_date =
        WEEKDAYS[usize::try_from(date.weekday().to_sunday_zero_offset()).unwrap_or(0)];
    if weekday != weekday_of_date {
        return Err(Malformed(
            "the start time's weekday does not match its date",
        ));
    }
    // In range by construction: a valid date and a valid clock, in UTC.
    let clock = |n: i64| i8::try_from(n).unwrap_or(0);
    let at = date.at(clock(hours), clock(minutes), clock(seconds), 0);
    // Civil (UTC) arithmetic: jiff's timestamps end at 9999-12-30T22:00:00Z, before the last
    // start a four-digit year can print.
    let epoch = jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0);
    let secs = at.duration_since(epoch).as_secs();
    u64::try_from(secs).map_err(|_| Malformed("the start time is before 1970"))
}

/// A decimal of `min..=max` ASCII digits.
fn number(text: &str, min: usize, max: usize) -> Option<i64> {
    if !(min..=max).contains(&text.len()) || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(start: u64, zombie: bool) -> Option<PsLine> {
        Some(PsLine {
            start: Some(start),
            zombie,
        })
    }

    #[test]
    fn ps_runs_in_the_c_locale_and_utc_and_asks_for_start_and_state() {
        let command = command(4242);
        assert_eq!(command.get_program(), PS, "the system ps, by absolute path");
        let args: Vec<_> = command.get_args().collect();
        assert_eq!(
            args,
            ["-o", "lstart=,state=", "-p", "4242"],
            "start and state of the one pid, without headers"
        );
        let envs: Vec<_> = command.get_envs().collect();
        for (name, value) in [("LC_ALL", "C"), ("TZ", "UTC")] {
            assert!(
                envs.contains(&(name.as_ref(), Some(value.as_ref()))),
                "ps must run with {name}={value}, got {envs:?}"
            );
        }
    }

    #[test]
    fn a_live_process() {
        // 2026-11-30T04:27:19Z
        let parsed = parse(b"Mon Nov 30 04:27:19 2026     Ss\n");
        assert_eq!(
            parsed,
            Ok(line(1_796_012_839, false)),
            "a sleeping session leader"
        );
    }

    #[test]
    fn a_zombie() {
        let parsed = parse(b"Thu Jan  1 00:00:00 1970     Z\n");
        assert_eq!(
            parsed,
            Ok(line(0, true)),
            "state Z is a zombie, start still read"
        );
        let parsed = parse(b"Sat Feb 29 23:59:59 2020 Z+\n");
        assert_eq!(
            parsed,
            Ok(line(1_583_020_799, true)),
            "leading Z with a flag is a zombie"
        );
    }

    #[test]
    fn a_zombie_whose_start_ps_cannot_print_is_still_a_zombie() {
        let parsed = parse(b"-     Z\n");
        assert_eq!(
            parsed,
            Ok(Some(PsLine {
                start: None,
                zombie: true
            })),
            "state alone proves exit"
        );
    }

    #[test]
    fn empty_output_means_no_such_process() {
        assert_eq!(parse(b""), Ok(None), "nothing printed");
        assert_eq!(parse(b"\n  \n"), Ok(None), "only blank lines");
    }

    #[test]
    fn extra_whitespace_is_accepted() {
        let parsed = parse(b"  \n\tWed   Jan  3  09:05:07   2024 \t R+  \r\n\n");
        assert_eq!(
            parsed,
            Ok(line(1_704_272_707, false)),
            "padding around and between words"
        );
    }

    #[test]
    fn malformed_output_is_refused() {
        let cases: &[(&[u8], &str)] = &[
            (b"Mon Nov 30 04:27:19 2026\n", "state missing"),
            (b"Ss\n", "start missing for a live process"),
            (
                b"Mon Nov 30 04:27:19 2026 Ss\nTue Dec  1 00:00:00 2026 S\n",
                "two processes",
            ),
            (b"Tue Nov 30 04:27:19 2026 Ss\n", "wrong weekday"),
            (b"Mon Foo 30 04:27:19 2026 Ss\n", "unknown month"),
            (b"lun. 30 nov. 2026 04:27:19 Ss\n", "another locale"),
            (b"Mon Nov 31 04:27:19 2026 Ss\n", "day past the month"),
            (
                b"Fri Feb 29 04:27:19 2019 Ss\n",
                "leap day of a common year",
            ),
            // The weekday of March 1, which a Feb 29 would fall on if 2100 had one.
            (
                b"Mon Feb 29 12:00:00 2100 Ss\n",
                "leap day of a century year not divisible by 400",
            ),
            (b"Mon Nov 30 24:00:00 2026 Ss\n", "hour 24"),
            (b"Mon Nov 30 04:60:19 2026 Ss\n", "minute 60"),
            (b"Mon Nov 30 04:27:60 2026 Ss\n", "second 60"),
            (b"Mon Nov 30 4:27:19 2026 Ss\n", "one-digit hour"),
            (b"Mon Nov 30 04:27 2026 Ss\n", "no seconds"),
            (b"Mon Nov 30 04:27:19:00 2026 Ss\n", "four clock parts"),
            (b"Mon Nov 30 04:27:19 26 Ss\n", "two-digit year"),
            (b"Wed Dec 31 23:59:59 1969 Ss\n", "before the epoch"),
            (b"Mon Nov 30 04:27:19 2026 ss\n", "lowercase state"),
            (b"Mon Nov 30 04:27:19 2026 1\n", "numeric state"),
            (b"Mon Nov +3 04:27:19 2026 S\n", "signed day"),
            (b"\xff Ss\n", "not UTF-8"),
        ];
        for (input, why) in cases {
            assert!(
                parse(input).is_err(),
                "{why}: {:?} must be refused",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn lstart_agrees_with_known_instants() {
        let cases: &[(&[&str], u64)] = &[
            (&["Thu", "Jan", "1", "00:00:00", "1970"], 0),
            (&["Sun", "Sep", "9", "01:46:40", "2001"], 1_000_000_000),
            (&["Tue", "Jan", "19", "03:14:07", "2038"], 2_147_483_647),
            (&["Tue", "Feb", "29", "12:00:00", "2000"], 951_825_600),
            (&["Fri", "Dec", "31", "23:59:59", "9999"], 253_402_300_799),
        ];
        for (words, expected) in cases {
            assert_eq!(parse_lstart(words), Ok(*expected), "lstart {words:?}");
        }
    }

    #[test]
    fn every_day_for_a_decade_has_the_right_weekday_and_is_one_day_apart() {
        // Counted independently of the code under test: the Gregorian month lengths, and
        // weekdays from 2020-01-01, a Wednesday.
        let leap = |y: i32| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let mut previous: Option<u64> = None;
        let mut weekday = 3;
        for year in 2020..2030 {
            let lengths = [
                31,
                if leap(year) { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            for (month, len) in MONTHS.iter().zip(lengths) {
                for day in 1..=len {
                    let words = [
                        WEEKDAYS[weekday],
                        month,
                        &day.to_string(),
                        "00:00:00",
                        &year.to_string(),
                    ];
                    let start =
                        parse_lstart(&words).unwrap_or_else(|e| panic!("{words:?} parses: {e:?}"));
                    if let Some(previous) = previous {
                        assert_eq!(start, previous + 86_400, "{words:?} follows the day before");
                    } else {
                        assert_eq!(start, 1_577_836_800, "2020-01-01 00:00:00 UTC");
                    }
                    previous = Some(start);
                    let other = WEEKDAYS[(weekday + 1) % 7];
                    let words = [
                        other,
                        month,
                        &day.to_string(),
                        "00:00:00",
                        &year.to_string(),
                    ];
                    assert!(
                        parse_lstart(&words).is_err(),
                        "{words:?}: the wrong weekday"
                    );
                    weekday = (weekday + 1) % 7;
                }
            }
        }
    }
}
