//! What one API response says about the budget: its rate-limit headers and status, read by a
//! plain function from any HTTP client's headers.

/// The resource a response counts against when it names none.
pub const DEFAULT_RESOURCE: &str = "core";

/// The rate-limit facts of one response. Every field is optional: a missing or malformed
/// header is "not known", never guessed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observation {
    /// The HTTP status.
    pub status: u16,
    /// `X-RateLimit-Resource` (a plain name such as `core`, `graphql`, `search`).
    pub resource: Option<String>,
    /// `X-RateLimit-Limit`: calls allowed in the window.
    pub limit: Option<u64>,
    /// `X-RateLimit-Remaining`: calls left in the window.
    pub remaining: Option<u64>,
    /// `X-RateLimit-Reset`: when the window ends, seconds since the Unix epoch.
    pub reset_s: Option<u64>,
    /// `Retry-After`: seconds to wait (the delta-seconds form; an HTTP-date is not known).
    pub retry_after_s: Option<u64>,
}

impl Observation {
    /// Reads an observation from a response's `status` and a header lookup (`header(name)` is
    /// the header's value, names compared case-insensitively by the caller's client; the names
    /// asked for are lowercase).
    pub fn from_headers<'a>(status: u16, header: impl Fn(&str) -> Option<&'a str>) -> Self {
        Observation {
            status,
            resource: header("x-ratelimit-resource")
                .map(str::trim)
                .filter(|r| is_resource_name(r))
                .map(str::to_owned),
            limit: header("x-ratelimit-limit").and_then(whole),
            remaining: header("x-ratelimit-remaining").and_then(whole),
            reset_s: header("x-ratelimit-reset").and_then(whole),
            retry_after_s: header("retry-after").and_then(whole),
        }
    }

    /// The resource this response counts against ([`DEFAULT_RESOURCE`] when unnamed).
    #[must_use]
    pub fn resource(&self) -> &str {
        self.resource.as_deref().unwrap_or(DEFAULT_RESOURCE)
    }

    /// Whether this response is a secondary limit: a 403 or 429 that is not the primary
    /// window running out (it carries `Retry-After`, or its remaining is not 0).
    #[must_use]
    pub fn is_secondary_limit(&self) -> bool {
        matches!(self.status, 403 | 429)
            && (self.retry_after_s.is_some() || self.remaining != Some(0))
    }
}

/// A whole number written as plain ASCII digits (surrounding spaces allowed): no sign, no
/// fraction, no exponent, at most 2^53 - 1 (a count every JSON reader keeps exactly).
#[must_use]
pub fn whole(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() || text.len() > 16 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|&n| n <= MAX_SAFE)
}

/// The largest integer a JSON number keeps exactly in every reader (2^53 - 1).
pub const MAX_SAFE: u64 = (1 << 53) - 1;

/// A resource name: 1 to 32 ASCII letters, digits, `_` or `-`.
#[must_use]
pub fn is_resource_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::{Observation, whole};
    use proptest::prelude::*;

    fn observe(status: u16, headers: &[(&str, &str)]) -> Observation {
        Observation::from_headers(status, |name| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
        })
    }

    #[test]
    fn github_headers_are_read() {
        let o = observe(
            200,
            &[
                ("X-RateLimit-Limit", "5000"),
                ("X-RateLimit-Remaining", "4999"),
                ("X-RateLimit-Reset", "1764484800"),
                ("X-RateLimit-Resource", "graphql"),
            ],
        );
        assert_eq!(o.limit, Some(5000));
        assert_eq!(o.remaining, Some(4999));
        assert_eq!(o.reset_s, Some(1_764_484_800));
        assert_eq!(o.resource(), "graphql");
        assert!(!o.is_secondary_limit());
        assert_eq!(observe(200, &[]).resource(), "core", "the default resource");
    }

    #[test]
    fn malformed_values_are_not_known() {
        for bad in [
            "-1",
            "1.5",
            "1e3",
            "",
            " ",
            "+3",
            "0x10",
            "9007199254740992",
            "12a",
        ] {
            let o = observe(200, &[("X-RateLimit-Remaining", bad)]);
            assert_eq!(o.remaining, None, "{bad:?} is not a whole count");
        }
        assert_eq!(whole(" 42 "), Some(42));
        assert_eq!(whole("9007199254740991"), Some((1 << 53) - 1));
        let o = observe(200, &[("X-RateLimit-Resource", "../core")]);
        assert_eq!(o.resource(), "core", "a strange resource name is not used");
    }

    #[test]
    fn secondary_limits_are_told_from_a_spent_window() {
        let spent = observe(403, &[("X-RateLimit-Remaining", "0")]);
        assert!(
            !spent.is_secondary_limit(),
            "403 with remaining 0: the window"
        );
        let spent = observe(429, &[("X-RateLimit-Remaining", "0")]);
        assert!(!spent.is_secondary_limit());
        let secondary = observe(403, &[("X-RateLimit-Remaining", "12")]);
        assert!(secondary.is_secondary_limit(), "403 with calls left");
        let secondary = observe(
            429,
            &[("Retry-After", "30"), ("X-RateLimit-Remaining", "0")],
        );
        assert!(secondary.is_secondary_limit(), "Retry-After always pauses");
        assert_eq!(secondary.retry_after_s, Some(30));
        assert!(observe(429, &[]).is_secondary_limit(), "a bare 429");
        assert!(!observe(500, &[("Retry-After", "5")]).is_secondary_limit());
        assert!(!observe(200, &[("Retry-After", "5")]).is_secondary_limit());
    }

    proptest! {
        #[test]
        fn whole_accepts_exactly_the_plain_numbers(n in 0u64..=((1u64 << 53) - 1)) {
            prop_assert_eq!(whole(&n.to_string()), Some(n));
            prop_assert_eq!(whole(&format!("-{n}")), None);
            prop_assert_eq!(whole(&format!("{n}.0")), None);
        }
    }
}
