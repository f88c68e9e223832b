//! The parsers of values that clap calls: durations, budget resources.

use super::*;

/// An API rate-limit resource name, as the budget ledger accepts it.
pub(crate) fn parse_resource(text: &str) -> Result<String, String> {
    if worklane_budget::observe::is_resource_name(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?}: a resource is 1 to 32 letters, digits, `_` or `-` (core, graphql, search)"
        ))
    }
}

/// What every duration message suggests.
/// A provider's name: a built-in one, or a plain name the config may describe.
pub(crate) fn parse_provider(text: &str) -> Result<String, String> {
    if worklane_budget::Provider::builtin(text).is_some()
        || worklane_budget::provider::is_provider_name(text)
    {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is no provider: github, anthropic, openai, or a name of lowercase letters, \
             digits and `-` that the config's budget_providers describes"
        ))
    }
}

const DURATION_FORMS: &str = "use e.g. 500ms, 90s, 5m, 2h, 1d, 1h30m, or a plain number of seconds";

/// Parses a duration: a plain number of seconds (`90`), or one or more parts of a number and a
/// unit (`ms`, `s`, `m`, `h`, `d`) from the largest unit to the smallest, each unit at most
/// once: `500ms`, `90s`, `5m`, `2h`, `1d`, `1h30m`, `2m30s`, `1s500ms`. A number without a
/// unit after a part (`1h30`) is refused rather than guessed.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("an empty duration: {DURATION_FORMS}"));
    }
    let too_long = || format!("{text:?} is too long a duration");
    if text.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = text.parse().map_err(|_| too_long())?;
        return secs
            .checked_mul(1000)
            .map(Duration::from_millis)
            .ok_or_else(too_long);
    }
    let mut rest = text;
    let mut total: u64 = 0;
    // The unit of the part before, with its rank (0 for `d` .. 4 for `ms`).
    let mut before: Option<(&str, u8)> = None;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, after) = rest.split_at(digits_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        if digits.is_empty() {
            return Err(format!(
                "{text:?} is not a duration: expected a number at {rest:?}; {DURATION_FORMS}"
            ));
        }
        let (rank, per_unit_ms): (u8, u64) = match unit {
            "d" => (0, 86_400_000),
            "h" => (1, 3_600_000),
            "m" => (2, 60_000),
            "s" => (3, 1_000),
            "ms" => (4, 1),
            "" => {
                let (prev, _) = before.unwrap_or_default();
                return Err(format!(
                    "{text:?}: {digits} after {prev:?} has no unit; give every part its unit \
                     (e.g. 1h30m, 2m30s)"
                ));
            }
            _ => {
                // `1hm`: a unit and then another with no number between them.
                let empty = ["ms", "d", "h", "m", "s"].iter().find_map(|known| {
                    unit.strip_prefix(known)
                        .filter(|tail| ["d", "h", "m", "s"].iter().any(|u| tail.starts_with(u)))
                });
                return Err(match empty {
                    Some(tail) => format!(
                        "{text:?} is not a duration: expected a number at {tail:?}; \
                         {DURATION_FORMS}"
                    ),
                    None => format!(
                        "{text:?}: unknown unit {unit:?}; use ms, s, m, h or d (e.g. 1h30m)"
                    ),
                });
            }
        };
        if let Some((prev, prev_rank)) = before
            && prev_rank >= rank
        {
            return Err(format!(
                "{text:?}: {unit:?} after {prev:?}; give the units from the largest to the \
                 smallest, each once (e.g. 1h30m)"
            ));
        }
        let n: u64 = digits.parse().map_err(|_| too_long())?;
        total = n
            .checked_mul(per_unit_ms)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(too_long)?;
        before = Some((unit, rank));
        rest = next;
    }
    Ok(Duration::from_millis(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration(" 0 "), Ok(Duration::ZERO));
        for bad in ["", "m", "5x", "-1s", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn compound_durations_add_their_parts() {
        for (text, ms) in [
            ("1h30m", 5_400_000),
            ("2m30s", 150_000),
            ("1h", 3_600_000),
            ("1d2h3m4s5ms", 93_784_005),
            ("1s500ms", 1_500),
            ("0h5m", 300_000),
            ("1h0m", 3_600_000),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn bad_compound_durations_say_what_is_wrong() {
        for (text, says) in [
            ("1h30", "has no unit"),
            ("2m30", "has no unit"),
            ("1hm", "expected a number at \"m\""),
            ("h30m", "expected a number"),
            ("1h 30m", "unknown unit"),
            ("1m1h", "from the largest to the smallest"),
            ("1s1s", "from the largest to the smallest"),
            ("500ms1s", "from the largest to the smallest"),
            ("1h30x", "unknown unit \"x\""),
            ("1H", "unknown unit"),
            ("abc", "expected a number"),
            ("   ", "empty"),
        ] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    #[test]
    fn overflowing_durations_are_refused_not_wrapped() {
        for text in [
            "18446744073709551616",
            "18446744073709551615",
            "99999999999999999999ms",
            "213503982335d",
            "5124095576030431h",
            "1d18446744073709551615ms",
        ] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.contains("too long"), "{text:?}: {err}");
        }
        assert_eq!(
            parse_duration("18446744073709551615ms"),
            Ok(Duration::from_millis(u64::MAX)),
            "the largest count of milliseconds"
        );
    }

    proptest::proptest! {
        #[test]
        fn a_duration_written_in_parts_is_their_sum(
            d in 0u64..1000, h in 0u64..1000, m in 0u64..1000, s in 0u64..1000, ms in 0u64..1000
        ) {
            let text = format!("{d}d{h}h{m}m{s}s{ms}ms");
            let want = (((d * 24 + h) * 60 + m) * 60 + s) * 1000 + ms;
            proptest::prop_assert_eq!(parse_duration(&text), Ok(Duration::from_millis(want)));
        }

        #[test]
        fn no_text_makes_the_parser_panic(text in "[0-9a-z. ]{0,12}") {
            let _ = parse_duration(&text);
        }
    }

    #[test]
    fn resources_are_plain_names() {
        assert_eq!(parse_resource("graphql"), Ok("graphql".to_owned()));
        for bad in ["", "a b", "../core", &"x".repeat(33)] {
            assert!(parse_resource(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
