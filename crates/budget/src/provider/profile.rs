//! What a provider's responses say, and how: its budget's dimensions, the headers of each
//! dimension's window and the format of their resets, the headers of a wait asked for, and
//! the statuses that pause every caller; the built-in profiles of Anthropic and OpenAI, and a
//! profile read from the slot directory's config ([`Profile::from_json`], refused with an
//! [`Error`] that names the field).

use crate::observe::{MAX_SAFE, whole};

/// One dimension of a provider's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dimension {
    /// Requests.
    Requests,
    /// Tokens, input and output together.
    Tokens,
    /// Input (prompt) tokens.
    InputTokens,
    /// Output (completion) tokens.
    OutputTokens,
}

impl Dimension {
    /// Every dimension.
    pub const ALL: [Dimension; 4] = [
        Dimension::Requests,
        Dimension::Tokens,
        Dimension::InputTokens,
        Dimension::OutputTokens,
    ];

    /// The name the state file and the views use: `requests`, `tokens`, `input-tokens`,
    /// `output-tokens`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Dimension::Requests => "requests",
            Dimension::Tokens => "tokens",
            Dimension::InputTokens => "input-tokens",
            Dimension::OutputTokens => "output-tokens",
        }
    }

    /// The dimension of a name (as [`Dimension::name`] writes it).
    #[must_use]
    pub fn parse(name: &str) -> Option<Dimension> {
        Dimension::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// How a header says when a window resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetFormat {
    /// Seconds since the Unix epoch (GitHub).
    EpochSeconds,
    /// An RFC 3339 time (Anthropic: `2026-12-03T10:00:30Z`).
    Rfc3339,
    /// A duration from the response (OpenAI: `1s`, `6m0s`, `20ms`, `1h2m3.5s`).
    Duration,
}

impl ResetFormat {
    /// The format of a name: `epoch-seconds`, `rfc3339`, `duration`.
    #[must_use]
    pub fn parse(name: &str) -> Option<ResetFormat> {
        match name {
            "epoch-seconds" => Some(ResetFormat::EpochSeconds),
            "rfc3339" => Some(ResetFormat::Rfc3339),
            "duration" => Some(ResetFormat::Duration),
            _ => None,
        }
    }

    /// The latest instant a reset written `text` in this format can stand for, ms since the
    /// Unix epoch, for a response seen at `now_ms`; `None` when it is not one. A reset is
    /// written to some precision (Anthropic's to the whole second, OpenAI's rounded: `4.53s`,
    /// `6m0s`), and the window may reset anywhere up to one unit of its last digit after
    /// what it says: so the unit is added (a whole second to `10:00:30Z` and to `6m0s`,
    /// 10 ms to `4.53s`). Taken any earlier, callers waiting for the reset would go before the
    /// provider's window has one. A duration counts from `now_ms`, when the response was
    /// read, which is after the provider wrote it: later still, never earlier.
    #[must_use]
    pub fn reset_at(self, text: &str, now_ms: u64) -> Option<u64> {
        let text = text.trim();
        let at = match self {
            ResetFormat::EpochSeconds => whole(text)?.checked_mul(1000)?.checked_add(1000)?,
            ResetFormat::Rfc3339 => {
                worklane_lease::parse_rfc3339_ms(text)?.checked_add(rfc3339_unit_ms(text))?
            }
            ResetFormat::Duration => {
                let (ns, unit_ns) = duration_ns(text)?;
                now_ms.checked_add(u64::try_from((ns + unit_ns).div_ceil(1_000_000)).ok()?)?
            }
        };
        (at <= MAX_SAFE).then_some(at)
    }
}

/// The unit of the last digit of an RFC 3339 time's seconds, in ms (at least 1): 1000 for
/// `10:00:30Z`, 100 for `10:00:30.5Z`, 1 for three fraction digits or more.
fn rfc3339_unit_ms(text: &str) -> u64 {
    let digits = text
        .get(19..)
        .and_then(|rest| rest.strip_prefix('.'))
        .map_or(0, |fraction| {
            fraction.bytes().take_while(u8::is_ascii_digit).count()
        });
    match digits {
        0 => 1000,
        1 => 100,
        2 => 10,
        _ => 1,
    }
}

/// A duration as Go and OpenAI write them: one or more `<number><unit>` parts, units `h`,
/// `m`, `s`, `ms`, `us`/`µs`, `ns`, each number plain digits with an optional fraction
/// (`1h2m3.5s`, `6m0s`, `20ms`, `0.5s`), rounded up to whole milliseconds. A bare number is not
/// one (its unit is not known), nor a sign, an empty text, or more than a day.
#[must_use]
pub fn duration_ms(text: &str) -> Option<u64> {
    duration_ns(text).and_then(|(ns, _)| u64::try_from(ns.div_ceil(1_000_000)).ok())
}

/// A duration as [`duration_ms`] reads it, in ns, with the unit of its last digit in ns
/// (`4.53s`: 10 ms; `6m0s`: 1 s; `20ms`: 1 ms).
fn duration_ns(text: &str) -> Option<(u128, u128)> {
    const DAY_NS: u128 = 86_400 * 1_000_000_000;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total_ns: u128 = 0;
    let mut unit_ns: u128 = 1;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale: u128 = match unit {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" | "µs" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        let (whole_part, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole_part.is_empty() && fraction.is_empty()
            || fraction.contains('.')
            || whole_part.len() > 12
        {
            return None;
        }
        let mut ns = if whole_part.is_empty() {
            0
        } else {
            whole_part.parse::<u128>().ok()?.checked_mul(scale)?
        };
        let mut place = scale;
        for digit in fraction.bytes().take(12) {
            place /= 10;
            ns = ns.checked_add(u128::from(digit - b'0') * place)?;
        }
        unit_ns = place.max(1);
        total_ns = total_ns.checked_add(ns)?;
        if total_ns > DAY_NS {
            return None;
        }
        rest = next;
    }
    Some((total_ns, unit_ns))
}

/// The headers of one dimension's window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimensionHeaders {
    /// The dimension.
    pub dimension: Dimension,
    /// The header of the window's limit (lowercase).
    pub limit: String,
    /// The header of what is left (lowercase).
    pub remaining: String,
    /// The header of when it resets (lowercase).
    pub reset: String,
    /// How the reset is written.
    pub format: ResetFormat,
}

/// What a provider's responses say, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Each dimension's headers.
    pub dimensions: Vec<DimensionHeaders>,
    /// The headers of a wait asked for: `(name, unit in ms)`, the first present wins
    /// (`retry-after-ms` before `retry-after`).
    pub retry_after: Vec<(String, u64)>,
    /// The statuses that pause every caller of the credential for the key's quota (429).
    pub pause_statuses: Vec<u16>,
    /// The statuses that say the provider is overloaded (Anthropic's 529): its capacity, not
    /// the key's quota, so every caller backs off briefly ([`crate::state::OVERLOAD_BACKOFF_MS`],
    /// growing with repeats), never for the key's whole window.
    pub overload_statuses: Vec<u16>,
}

fn headers(
    dimension: Dimension,
    limit: &str,
    remaining: &str,
    reset: &str,
    format: ResetFormat,
) -> DimensionHeaders {
    DimensionHeaders {
        dimension,
        limit: limit.to_owned(),
        remaining: remaining.to_owned(),
        reset: reset.to_owned(),
        format,
    }
}

/// Anthropic's profile: four dimensions (`anthropic-ratelimit-<dimension>-limit`,
/// `-remaining`, `-reset` in RFC 3339), `retry-after` in seconds, 429 pauses, 529 says it is
/// overloaded.
pub(super) fn anthropic() -> Profile {
    use Dimension::{InputTokens, OutputTokens, Requests, Tokens};
    let dims = [
        (Requests, "requests"),
        (Tokens, "tokens"),
        (InputTokens, "input-tokens"),
        (OutputTokens, "output-tokens"),
    ];
    Profile {
        dimensions: dims
            .into_iter()
            .map(|(d, n)| {
                headers(
                    d,
                    &format!("anthropic-ratelimit-{n}-limit"),
                    &format!("anthropic-ratelimit-{n}-remaining"),
                    &format!("anthropic-ratelimit-{n}-reset"),
                    ResetFormat::Rfc3339,
                )
            })
            .collect(),
        retry_after: vec![("retry-after".to_owned(), 1000)],
        pause_statuses: vec![429],
        overload_statuses: vec![529],
    }
}

/// OpenAI's profile: requests and tokens (`x-ratelimit-limit-<dimension>`, `-remaining-`,
/// `-reset-` as a duration), `retry-after-ms` before `retry-after`, 429 pauses.
pub(super) fn openai() -> Profile {
    use Dimension::{Requests, Tokens};
    Profile {
        dimensions: [(Requests, "requests"), (Tokens, "tokens")]
            .into_iter()
            .map(|(d, n)| {
                headers(
                    d,
                    &format!("x-ratelimit-limit-{n}"),
                    &format!("x-ratelimit-remaining-{n}"),
                    &format!("x-ratelimit-reset-{n}"),
                    ResetFormat::Duration,
                )
            })
            .collect(),
        retry_after: vec![
            ("retry-after-ms".to_owned(), 1),
            ("retry-after".to_owned(), 1000),
        ],
        pause_statuses: vec![429],
        overload_statuses: Vec::new(),
    }
}

impl Profile {
    /// A provider's profile as the slot directory's config writes it under
    /// `budget_providers.<name>`:
    ///
    /// ```json
    /// {"dimensions": {"requests": {"limit": "x-limit-requests", "remaining":
    ///   "x-remaining-requests", "reset": "x-reset-requests", "format": "duration"}},
    ///  "retry_after": ["retry-after"], "pause_statuses": [429]}
    /// ```
    ///
    /// `dimensions` is required (one to four of `requests`, `tokens`, `input-tokens`,
    /// `output-tokens`, each with its three header names and a `format`: `epoch-seconds`,
    /// `rfc3339` or `duration`); `retry_after` (header names, in seconds; default
    /// `retry-after`) and `pause_statuses` (default 429) are optional. `Err` says what is wrong.
    pub fn from_json(value: &serde_json::Value) -> Result<Profile, Error> {
        use Error as E;
        let object = value.as_object().ok_or(E::NotAnObject)?;
        if let Some(key) = object.keys().find(|k| {
            !matches!(
                k.as_str(),
                "dimensions" | "retry_after" | "pause_statuses" | "overload_statuses"
            )
        }) {
            return Err(E::UnknownField { field: key.clone() });
        }
        let dims = object
            .get("dimensions")
            .and_then(serde_json::Value::as_object)
            .ok_or(E::NoDimensions)?;
        if dims.is_empty() {
            return Err(E::NoDimensions);
        }
        let header =
            |v: &serde_json::Map<String, serde_json::Value>, field: &'static str, dim: &str| {
                v.get(field)
                    .and_then(serde_json::Value::as_str)
                    .filter(|h| is_header_name(h))
                    .map(str::to_ascii_lowercase)
                    .ok_or_else(|| E::Header {
                        dimension: dim.to_owned(),
                        field,
                    })
            };
        let mut dimensions = Vec::new();
        for (name, v) in dims {
            let dimension = Dimension::parse(name).ok_or_else(|| E::UnknownDimension {
                dimension: name.clone(),
            })?;
            let v = v.as_object().ok_or_else(|| E::DimensionNotAnObject {
                dimension: name.clone(),
            })?;
            let format = v
                .get("format")
                .and_then(serde_json::Value::as_str)
                .and_then(ResetFormat::parse)
                .ok_or_else(|| E::Format {
                    dimension: name.clone(),
                })?;
            dimensions.push(DimensionHeaders {
                dimension,
                limit: header(v, "limit", name)?,
                remaining: header(v, "remaining", name)?,
                reset: header(v, "reset", name)?,
                format,
            });
        }
        let retry_after = match object.get("retry_after") {
            None => vec![("retry-after".to_owned(), 1000)],
            Some(serde_json::Value::Array(names)) => names
                .iter()
                .map(|n| {
                    n.as_str()
                        .filter(|h| is_header_name(h))
                        .map(|h| (h.to_ascii_lowercase(), 1000))
                        .ok_or(E::RetryAfter)
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(E::RetryAfter),
        };
        let statuses = |field: &str, default: Vec<u16>, error: E| match object.get(field) {
            None => Ok(default),
            Some(serde_json::Value::Array(codes)) => codes
                .iter()
                .map(|c| {
                    c.as_u64()
                        .filter(|c| (100..600).contains(c))
                        .and_then(|c| u16::try_from(c).ok())
                        .ok_or(error.clone())
                })
                .collect::<Result<_, _>>(),
            Some(_) => Err(error.clone()),
        };
        let pause_statuses = statuses("pause_statuses", vec![429], E::PauseStatuses)?;
        let overload_statuses = statuses("overload_statuses", Vec::new(), E::OverloadStatuses)?;
        Ok(Profile {
            dimensions,
            retry_after,
            pause_statuses,
            overload_statuses,
        })
    }
}

/// Whether `name` can be an HTTP header's name as a profile gives it: 1 to 128 ASCII letters,
/// digits, `-` or `_`.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What is wrong with a provider profile of the config ([`Profile::from_json`]), naming the
/// field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The profile is not a JSON object.
    #[error("must be an object with `dimensions` (and optionally `retry_after`, `pause_statuses`)")]
    NotAnObject,
    /// A field the profile does not have.
    #[error("unknown field `{field}` (dimensions, retry_after, pause_statuses, overload_statuses)")]
    UnknownField {
        /// The field as written.
        field: String,
    },
    /// `dimensions` is missing, not an object, or empty.
    #[error("`dimensions` must be an object naming at least one dimension")]
    NoDimensions,
    /// A dimension that is none of the four.
    #[error("`dimensions.{dimension}`: requests, tokens, input-tokens or output-tokens")]
    UnknownDimension {
        /// The name as written.
        dimension: String,
    },
    /// A dimension whose value is not an object.
    #[error("`dimensions.{dimension}` must be an object")]
    DimensionNotAnObject {
        /// The dimension.
        dimension: String,
    },
    /// A dimension without a known reset format.
    #[error("`dimensions.{dimension}.format`: epoch-seconds, rfc3339 or duration")]
    Format {
        /// The dimension.
        dimension: String,
    },
    /// A header name that is missing or is not one.
    #[error(
        "`dimensions.{dimension}.{field}` must be a header name (1 to 128 letters, digits, `-` or `_`)"
    )]
    Header {
        /// The dimension.
        dimension: String,
        /// `limit`, `remaining` or `reset`.
        field: &'static str,
    },
    /// `retry_after` is not an array of header names.
    #[error("`retry_after` must be an array of header names")]
    RetryAfter,
    /// `pause_statuses` is not an array of HTTP statuses.
    #[error("`pause_statuses` must be an array of HTTP statuses (100 to 599)")]
    PauseStatuses,
    /// `overload_statuses` is not an array of HTTP statuses.
    #[error("`overload_statuses` must be an array of HTTP statuses (100 to 599)")]
    OverloadStatuses,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn durations_as_openai_writes_them() {
        for (text, ms) in [
            ("1s", 1_000),
            ("6m0s", 360_000),
            ("20ms", 20),
            ("1h2m3.5s", 3_723_500),
            ("0.5s", 500),
            ("59.789s", 59_789),
            ("1.0001ms", 2),
            ("750us", 1),
            ("3ns", 1),
            (" 2s ", 2_000),
            ("24h", 86_400_000),
        ] {
            assert_eq!(duration_ms(text), Some(ms), "{text}");
        }
        for bad in [
            "",
            "5",
            "-1s",
            "1x",
            "s",
            ".s",
            "1..2s",
            "1.2.3s",
            "25h",
            "9999999999999h",
            "1s-",
        ] {
            assert_eq!(duration_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_number_of_up_to_12_whole_digits_is_read() {
        assert_eq!(duration_ms("000000000001s"), Some(1_000), "12 digits");
        assert_eq!(duration_ms("0000000000001s"), None, "13 digits");
    }

    #[test]
    fn the_reset_formats_are_named_as_the_config_writes_them() {
        for (name, format) in [
            ("epoch-seconds", Some(ResetFormat::EpochSeconds)),
            ("rfc3339", Some(ResetFormat::Rfc3339)),
            ("duration", Some(ResetFormat::Duration)),
            ("unix", None),
        ] {
            assert_eq!(ResetFormat::parse(name), format, "{name}");
        }
    }

    #[test]
    fn the_three_reset_formats_each_at_its_latest_instant() {
        // Each is written to some precision; the window may reset up to one unit of its
        // last digit after what it says.
        assert_eq!(
            ResetFormat::EpochSeconds.reset_at("1800000030", NOW),
            Some(NOW + 31_000)
        );
        let at = worklane_lease::parse_rfc3339_ms("2027-01-15T08:00:30Z").expect("a time");
        for (text, unit) in [
            ("2027-01-15T08:00:30Z", 1_000),
            ("2027-01-15T08:00:30.0Z", 100),
            ("2027-01-15T08:00:30.00+00:00", 10),
            ("2027-01-15T08:00:30.000Z", 1),
            ("2027-01-15T08:00:30.000000Z", 1),
        ] {
            assert_eq!(
                ResetFormat::Rfc3339.reset_at(text, NOW),
                Some(at + unit),
                "{text}"
            );
        }
        for (text, ms) in [
            ("6m0s", 361_000),
            ("4.53s", 4_540),
            ("1.02s", 1_030),
            ("20ms", 21),
            ("1h2m3.5s", 3_723_600),
            ("750us", 1),
        ] {
            assert_eq!(
                ResetFormat::Duration.reset_at(text, NOW),
                Some(NOW + ms),
                "{text}"
            );
        }
        for (format, bad) in [
            (ResetFormat::EpochSeconds, "-5"),
            (ResetFormat::EpochSeconds, "1e9"),
            (ResetFormat::EpochSeconds, "99999999999999999999"),
            (ResetFormat::Rfc3339, "tomorrow"),
            (ResetFormat::Duration, "soon"),
        ] {
            assert_eq!(format.reset_at(bad, NOW), None, "{format:?} {bad}");
        }
    }

    #[test]
    fn a_profile_is_read_from_the_config_and_every_mistake_named() {
        let good = serde_json::json!({
            "dimensions": {"requests": {"limit": "X-Limit-Req", "remaining": "x-rem-req",
                "reset": "x-reset-req", "format": "duration"}},
            "pause_statuses": [429, 503]
        });
        let profile = Profile::from_json(&good).expect("a profile");
        assert_eq!(profile.dimensions[0].limit, "x-limit-req", "lowercased");
        assert_eq!(
            profile.retry_after,
            [("retry-after".to_owned(), 1000)],
            "the default"
        );
        assert_eq!(profile.pause_statuses, [429, 503]);
        for (bad, says) in [
            (serde_json::json!([]), "object"),
            (serde_json::json!({"dimensions": {}}), "at least one"),
            (
                serde_json::json!({"dimensions": {"cpu": {}}}),
                "dimensions.cpu",
            ),
            (
                serde_json::json!({"dimensions": {"requests": {"limit": "a", "remaining": "b", "reset": "c", "format": "unix"}}}),
                "format",
            ),
            (
                serde_json::json!({"dimensions": {"requests": {"limit": "a b", "remaining": "b", "reset": "c", "format": "rfc3339"}}}),
                "limit",
            ),
            (
                serde_json::json!({"dimensions": {"requests": {"limit": "a", "remaining": "b", "reset": "c", "format": "rfc3339"}}, "pause_statuses": [42]}),
                "statuses",
            ),
            (serde_json::json!({"dimension": {}}), "unknown field"),
        ] {
            let err = Profile::from_json(&bad).expect_err("refused").to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    proptest! {
        #[test]
        fn durations_never_panic_and_stay_within_a_day(text in "[0-9.hmsun]{0,16}") {
            if let Some(ms) = duration_ms(&text) {
                prop_assert!(ms <= 86_400_000, "{text}: {ms}");
            }
        }

        #[test]
        fn a_written_duration_reads_back(h in 0u64..24, m in 0u64..60, s in 0u64..60, ms in 0u64..1000) {
            let text = format!("{h}h{m}m{s}.{ms:03}s");
            prop_assert_eq!(duration_ms(&text), Some(((h * 60 + m) * 60 + s) * 1000 + ms));
        }
    }
}
