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
    /// `X-RateLimit-Resource` as sent (trimmed); see [`Observation::resource`].
    pub resource: Option<String>,
    /// Whether the response carried `X-RateLimit-Remaining` or `X-RateLimit-Reset` at all,
    /// well-formed or not. A response without them says nothing about the window.
    pub window_seen: bool,
    /// Set by the caller when the response body says a secondary rate limit was exceeded
    /// (GitHub: "You have exceeded a secondary rate limit"): such a 403 may carry neither
    /// `Retry-After` nor a remaining of 0.
    pub secondary_limit: bool,
    /// `X-RateLimit-Limit`: calls allowed in the window.
    pub limit: Option<u64>,
    /// `X-RateLimit-Remaining`: calls left in the window.
    pub remaining: Option<u64>,
    /// `X-RateLimit-Reset`: when the window ends, seconds since the Unix epoch.
    pub reset_s: Option<u64>,
    /// `Retry-After`: seconds to wait (the delta-seconds form, saturating; an HTTP-date is not
    /// known, and the default pause applies).
    pub retry_after_s: Option<u64>,
    /// Whether the response carried `Retry-After` at all, readable or not.
    pub retry_after_seen: bool,
}

impl Observation {
    /// Reads an observation from a response's `status` and a header lookup (`header(name)` is
    /// the header's value, names compared case-insensitively by the caller's client; the names
    /// asked for are lowercase).
    pub fn from_headers<'a>(status: u16, header: impl Fn(&str) -> Option<&'a str>) -> Self {
        let remaining = header("x-ratelimit-remaining");
        let reset = header("x-ratelimit-reset");
        Observation {
            status,
            resource: header("x-ratelimit-resource").map(|r| r.trim().to_owned()),
            window_seen: remaining.is_some() || reset.is_some(),
            secondary_limit: false,
            limit: header("x-ratelimit-limit").and_then(whole),
            remaining: remaining.and_then(whole),
            reset_s: reset.and_then(whole),
            retry_after_seen: header("retry-after").is_some(),
            retry_after_s: header("retry-after").and_then(delta_seconds),
        }
    }

    /// Marks the response as a secondary rate limit, as its body said.
    #[must_use]
    pub fn with_secondary_limit(mut self, secondary_limit: bool) -> Self {
        self.secondary_limit = secondary_limit;
        self
    }

    /// The resource this response counts against: [`DEFAULT_RESOURCE`] when unnamed, `None`
    /// when the header names something that is not a resource name (its numbers are then not
    /// known, rather than taken for another resource's).
    #[must_use]
    pub fn resource(&self) -> Option<&str> {
        match self.resource.as_deref() {
            None => Some(DEFAULT_RESOURCE),
            Some(name) if is_resource_name(name) => Some(name),
            Some(_) => None,
        }
    }

    /// Whether this response is a secondary limit, which pauses every call on the credential:
    /// the caller said so ([`Observation::secondary_limit`]); or a 403 or 429 with
    /// `Retry-After`; or a 429 whose remaining is not 0. A 403 without either is not: GitHub
    /// also answers 403 to a call the token may not make, and a 403 or 429 with a remaining
    /// of 0 is the primary window running out (recorded as a spent window instead).
    #[must_use]
    pub fn is_secondary_limit(&self) -> bool {
        self.secondary_limit
            || (matches!(self.status, 403 | 429)
                && (self.retry_after_seen || self.retry_after_s.is_some()))
            || (self.status == 429 && self.remaining != Some(0))
    }
}

#[cfg(feature = "http")]
impl Observation {
    /// Reads an observation from the `http` crate's status and headers (feature `http`).
    /// A header that is not valid text is "not known".
    #[must_use]
    pub fn from_http(status: http::StatusCode, headers: &http::HeaderMap) -> Self {
        let mut observation = Observation::from_headers(status.as_u16(), |name| {
            headers.get(name).and_then(|v| v.to_str().ok())
        });
        // A header that is there but not text was still carried: its value is not known.
        observation.window_seen |= headers.contains_key("x-ratelimit-remaining")
            || headers.contains_key("x-ratelimit-reset");
        observation.retry_after_seen |= headers.contains_key("retry-after");
        if observation.resource.is_none() && headers.contains_key("x-ratelimit-resource") {
            observation.resource = Some(String::new());
        }
        observation
    }

    /// Reads an observation from an `http::Response` (feature `http`).
    #[must_use]
    pub fn from_response<B>(response: &http::Response<B>) -> Self {
        Observation::from_http(response.status(), response.headers())
    }
}

/// A whole number written as plain ASCII digits (surrounding spaces allowed): no sign, no
/// fraction, no exponent, at most 2^53 - 1 (a count every JSON reader keeps exactly).
#[must_use]
pub fn whole(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Leading zeros are plain digits too; a value past u64 does not parse.
    text.parse().ok().filter(|&n| n <= MAX_SAFE)
}

/// `Retry-After` in delta seconds: plain digits, any length (saturating: a longer pause is cut
/// to the maximum anyway). Anything else, an HTTP-date included, is `None`.
fn delta_seconds(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse().unwrap_or(u64::MAX))
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
mod tests;
