//! The time as the journal's lines say it: RFC 3339 UTC with milliseconds.

/// Now, as a line says it: RFC 3339 UTC with milliseconds.
pub(crate) fn now() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    time_of_ms(ms)
}

/// `ms` since the Unix epoch as RFC 3339 UTC with milliseconds.
#[must_use]
pub fn time_of_ms(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => format!("{t:.3}"),
        Err(_) => "1970-01-01T00:00:00.000Z".to_owned(),
    }
}

/// The milliseconds since the Unix epoch of a line's `at` (any RFC 3339 time); `None` when it
/// is not one.
#[must_use]
pub fn ms_of_time(at: &str) -> Option<i64> {
    at.parse::<jiff::Timestamp>()
        .ok()
        .map(jiff::Timestamp::as_millisecond)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_with_milliseconds() {
        assert_eq!(time_of_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time_of_ms(1_796_014_519_924), "2026-11-30T04:55:19.924Z");
        assert_eq!(
            ms_of_time("2026-11-30T04:55:19.924Z"),
            Some(1_796_014_519_924)
        );
        assert_eq!(
            ms_of_time("2026-11-30T05:55:19.924+01:00"),
            Some(1_796_014_519_924)
        );
        assert_eq!(ms_of_time("yesterday"), None);
        assert_eq!(now().len(), "2026-11-30T04:55:19.924Z".len(), "{}", now());
    }
}
