//! What one response of a model provider says about its budget, read from its status and
//! headers by its provider's [`Profile`]: the windows it reports, the dimensions it leaves not
//! known, a pause and the wait it asks for.

use super::{Dimension, Profile, Usage};
use crate::observe::whole;

/// One dimension's window as a response reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenWindow {
    /// The dimension.
    pub dimension: Dimension,
    /// Its limit, if sent.
    pub limit: Option<u64>,
    /// What is left.
    pub remaining: u64,
    /// When it resets, ms since the Unix epoch.
    pub reset_at: u64,
}

/// What one response of a provider says about its budget.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProviderObservation {
    /// The HTTP status.
    pub status: u16,
    /// The windows it reported (each well-formed, its reset ahead).
    pub windows: Vec<SeenWindow>,
    /// The dimensions whose headers were there but not well-formed: not known any more.
    pub unknown: Vec<Dimension>,
    /// Whether it pauses every caller of the credential (a pause status: the key's quota).
    pub pause: bool,
    /// Whether the provider says it is overloaded (an overload status: its capacity, not the
    /// key's quota).
    pub overloaded: bool,
    /// The wait it asked for, ms (`retry-after-ms`, `retry-after`), if readable.
    pub retry_after_ms: Option<u64>,
    /// What it used, if its body said.
    pub usage: Option<Usage>,
}

impl ProviderObservation {
    /// Reads a response of a provider with `profile`, seen at `now_ms`: its `status` and a
    /// header lookup (`header(name)` with lowercase names).
    #[must_use]
    pub fn from_headers<'a>(
        profile: &Profile,
        status: u16,
        now_ms: u64,
        header: impl Fn(&str) -> Option<&'a str>,
    ) -> ProviderObservation {
        let mut windows = Vec::new();
        let mut unknown = Vec::new();
        for dim in &profile.dimensions {
            let remaining = header(&dim.remaining);
            let reset = header(&dim.reset);
            if remaining.is_none() && reset.is_none() {
                continue;
            }
            let seen = remaining
                .and_then(whole)
                .zip(reset.and_then(|r| dim.format.reset_at(r, now_ms)))
                .filter(|(_, at)| *at > now_ms);
            match seen {
                Some((remaining, reset_at)) => windows.push(SeenWindow {
                    dimension: dim.dimension,
                    limit: header(&dim.limit).and_then(whole),
                    remaining,
                    reset_at,
                }),
                None => unknown.push(dim.dimension),
            }
        }
        let retry_after_ms = profile
            .retry_after
            .iter()
            .find_map(|(name, unit)| wait_ms(header(name)?, *unit));
        ProviderObservation {
            status,
            windows,
            unknown,
            pause: profile.pause_statuses.contains(&status),
            overloaded: profile.overload_statuses.contains(&status),
            retry_after_ms,
            usage: None,
        }
    }

    /// With what the response's body said it used.
    #[must_use]
    pub fn with_usage(mut self, usage: Option<Usage>) -> ProviderObservation {
        self.usage = usage;
        self
    }
}

/// A wait header's value (`7`, `1.5`, `.25`) in ms, its number counted in `unit` ms; `None`
/// for anything else (`..`, `1.2.3`, `-1`, empty): an unreadable wait is not a wait.
fn wait_ms(text: &str, unit: u64) -> Option<u64> {
    let text = text.trim();
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    let int: u64 = if int.is_empty() {
        0
    } else {
        int.parse().unwrap_or(u64::MAX)
    };
    let frac_ms = frac
        .bytes()
        .take(3)
        .fold((0u64, 100u64), |(acc, place), d| {
            (acc + u64::from(d - b'0') * place, place / 10)
        })
        .0;
    let extra = if unit >= 1000 {
        frac_ms * (unit / 1000)
    } else {
        0
    };
    Some(int.saturating_mul(unit).saturating_add(extra))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Provider;
    use crate::observe::MAX_SAFE;
    use proptest::prelude::*;

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn anthropic_headers_make_four_windows_and_a_529_says_overloaded() {
        let profile = Provider::Anthropic.profile().expect("a profile");
        let reset = worklane_lease::rfc3339_ms(NOW + 30_000);
        let lookup = |name: &str| -> Option<&str> {
            match name {
                "anthropic-ratelimit-requests-limit" => Some("50"),
                "anthropic-ratelimit-requests-remaining" => Some("49"),
                "anthropic-ratelimit-requests-reset" => Some(reset.as_str()),
                "anthropic-ratelimit-tokens-remaining" => Some("-3"),
                "anthropic-ratelimit-tokens-reset" => Some(reset.as_str()),
                "anthropic-ratelimit-input-tokens-remaining" => Some("40000"),
                "anthropic-ratelimit-input-tokens-reset" => Some("1999-01-01T00:00:00Z"),
                "retry-after" => Some("7"),
                _ => None,
            }
        };
        let seen = ProviderObservation::from_headers(&profile, 529, NOW, lookup);
        assert_eq!(
            seen.windows,
            [SeenWindow {
                dimension: Dimension::Requests,
                limit: Some(50),
                remaining: 49,
                reset_at: NOW + 30_001
            }]
        );
        assert_eq!(
            seen.unknown,
            [Dimension::Tokens, Dimension::InputTokens],
            "a negative remaining and a reset in the past are not known"
        );
        assert!(
            seen.overloaded && !seen.pause,
            "a 529 is the provider's capacity, not the key's quota"
        );
        assert_eq!(seen.retry_after_ms, Some(7_000));
        let limited = ProviderObservation::from_headers(&profile, 429, NOW, lookup);
        assert!(
            limited.pause && !limited.overloaded,
            "a 429 is the key's quota"
        );
        let ok = ProviderObservation::from_headers(&profile, 200, NOW, lookup);
        assert!(!ok.pause && !ok.overloaded);
    }

    #[test]
    fn openai_headers_and_retry_after_ms_first() {
        let profile = Provider::Openai.profile().expect("a profile");
        let seen = ProviderObservation::from_headers(&profile, 429, NOW, |name| match name {
            "x-ratelimit-limit-tokens" => Some("150000"),
            "x-ratelimit-remaining-tokens" => Some("149984"),
            "x-ratelimit-reset-tokens" => Some("6m0s"),
            "retry-after" => Some("20"),
            "retry-after-ms" => Some("1500"),
            _ => None,
        });
        assert_eq!(
            seen.windows,
            [SeenWindow {
                dimension: Dimension::Tokens,
                limit: Some(150_000),
                remaining: 149_984,
                reset_at: NOW + 361_000
            }]
        );
        assert!(seen.pause);
        assert_eq!(seen.retry_after_ms, Some(1_500), "the finer one wins");
    }

    #[test]
    fn one_header_of_a_dimension_without_the_other_makes_it_not_known() {
        let profile = Provider::Anthropic.profile().expect("a profile");
        let reset = worklane_lease::rfc3339_ms(NOW + 30_000);
        let seen = ProviderObservation::from_headers(&profile, 200, NOW, |name| match name {
            "anthropic-ratelimit-requests-remaining" => Some("49"),
            "anthropic-ratelimit-tokens-reset" => Some(reset.as_str()),
            _ => None,
        });
        assert_eq!(seen.windows, []);
        assert_eq!(seen.unknown, [Dimension::Requests, Dimension::Tokens]);
    }

    #[test]
    fn a_reset_read_as_exactly_now_is_not_a_window() {
        let profile = Provider::Anthropic.profile().expect("a profile");
        // Milliseconds written: the reset is read 1 ms after the time said.
        for (said, window) in [(NOW - 1, false), (NOW, true)] {
            let reset = worklane_lease::rfc3339_ms(said);
            let seen = ProviderObservation::from_headers(&profile, 200, NOW, |name| match name {
                "anthropic-ratelimit-requests-remaining" => Some("49"),
                "anthropic-ratelimit-requests-reset" => Some(reset.as_str()),
                _ => None,
            });
            assert_eq!(seen.windows.len(), usize::from(window), "{reset}: {seen:?}");
            assert_eq!(seen.unknown.is_empty(), window, "{reset}: {seen:?}");
        }
    }

    proptest! {
        #[test]
        fn no_header_text_panics_or_gives_a_past_or_far_reset(
            remaining in "\\PC{0,24}",
            reset in "\\PC{0,24}",
            retry in "\\PC{0,12}",
            status in 100u16..600,
        ) {
            for provider in [Provider::Anthropic, Provider::Openai] {
                let profile = provider.profile().expect("profile");
                let seen = ProviderObservation::from_headers(&profile, status, NOW, |name| {
                    if name.ends_with("remaining") || name.contains("remaining-") {
                        Some(remaining.as_str())
                    } else if name.ends_with("reset") || name.contains("reset-") {
                        Some(reset.as_str())
                    } else if name.starts_with("retry-after") {
                        Some(retry.as_str())
                    } else {
                        None
                    }
                });
                for w in &seen.windows {
                    prop_assert!(w.reset_at > NOW && w.reset_at <= MAX_SAFE, "{w:?}");
                    prop_assert!(w.remaining <= MAX_SAFE);
                }
            }
        }

        #[test]
        fn a_wait_of_digits_and_dots_never_panics(text in "[0-9.]{0,8}", unit in 1u64..=1000) {
            let readable = text.matches('.').count() <= 1 && text.chars().any(|c| c.is_ascii_digit());
            prop_assert_eq!(wait_ms(&text, unit).is_some(), readable, "{:?}", text);
        }
    }

    #[test]
    fn wait_headers_read_as_numbers_or_not_at_all() {
        assert_eq!(wait_ms("7", 1000), Some(7000));
        assert_eq!(wait_ms(" 1.5 ", 1000), Some(1500));
        assert_eq!(wait_ms(".25", 1000), Some(250));
        assert_eq!(wait_ms("2.", 1000), Some(2000));
        assert_eq!(wait_ms("1.9999", 1000), Some(1999));
        assert_eq!(wait_ms("250", 1), Some(250));
        assert_eq!(
            wait_ms("1.5", 60_000),
            Some(90_000),
            "a fraction of a unit longer than a second"
        );
        assert_eq!(wait_ms("99999999999999999999", 1000), Some(u64::MAX));
        for bad in ["", ".", "..", "1.2.3", "-1", "1e3", "Fri, 01 Jan 2027"] {
            assert_eq!(wait_ms(bad, 1000), None, "{bad:?}");
        }
    }
}
