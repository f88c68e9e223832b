//! Unit tests of `observe.rs`.

use super::{MAX_SAFE, Observation, is_resource_name, whole};
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
    assert_eq!(o.resource(), Some("graphql"));
    assert!(o.window_seen);
    assert!(!o.is_secondary_limit());
    let bare = observe(200, &[]);
    assert_eq!(bare.resource(), Some("core"), "the default resource");
    assert!(!bare.window_seen, "no rate-limit headers at all");
    assert!(
        observe(200, &[("X-RateLimit-Remaining", "lots")]).window_seen,
        "a malformed header is still seen"
    );
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
    assert_eq!(
        o.resource(),
        None,
        "a strange resource name is not known, not core"
    );
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
    let forbidden = observe(403, &[("X-RateLimit-Remaining", "4321")]);
    assert!(
        !forbidden.is_secondary_limit(),
        "a 403 with calls left may be a permission error: no pause without more"
    );
    assert!(
        forbidden.with_secondary_limit(true).is_secondary_limit(),
        "unless the body said it was a secondary limit"
    );
    let secondary = observe(
        403,
        &[("Retry-After", "30"), ("X-RateLimit-Remaining", "0")],
    );
    assert!(secondary.is_secondary_limit(), "Retry-After always pauses");
    assert_eq!(secondary.retry_after_s, Some(30));
    assert!(observe(429, &[]).is_secondary_limit(), "a bare 429");
    assert!(
        observe(429, &[("X-RateLimit-Remaining", "12")]).is_secondary_limit(),
        "a 429 with calls left"
    );
    assert!(!observe(403, &[]).is_secondary_limit(), "a bare 403");
    let dated = observe(
        403,
        &[
            ("Retry-After", "Wed, 21 Oct 2026 07:28:00 GMT"),
            ("X-RateLimit-Remaining", "9"),
        ],
    );
    assert!(
        dated.is_secondary_limit(),
        "a Retry-After of any form is a secondary limit"
    );
    assert_eq!(
        dated.retry_after_s, None,
        "an HTTP-date is not known: the default applies"
    );
    let huge = observe(429, &[("Retry-After", "99999999999999999999999")]);
    assert_eq!(
        huge.retry_after_s,
        Some(u64::MAX),
        "saturates, to be cut to 15 min"
    );
    assert!(!observe(500, &[("Retry-After", "5")]).is_secondary_limit());
    assert!(!observe(200, &[("Retry-After", "5")]).is_secondary_limit());
}

#[test]
fn whole_numbers_are_plain_digits_up_to_2_pow_53_minus_1() {
    assert_eq!(whole("0"), Some(0), "zero is a count");
    assert_eq!(whole("9007199254740990"), Some(MAX_SAFE - 1), "one below");
    assert_eq!(
        whole("9007199254740991"),
        Some(MAX_SAFE),
        "exactly 2^53 - 1"
    );
    assert_eq!(whole("9007199254740992"), None, "one above");
    assert_eq!(
        whole("00000000000000000042"),
        Some(42),
        "leading zeros are plain digits, however many"
    );
    assert_eq!(
        whole("0009007199254740991"),
        Some(MAX_SAFE),
        "2^53 - 1 with leading zeros"
    );
    assert_eq!(
        whole("99999999999999999999999"),
        None,
        "a number past u64 is not known"
    );
    assert_eq!(whole("\t7 "), Some(7), "surrounding white space");
    assert_eq!(whole("7 7"), None, "two numbers are not one");
    assert_eq!(whole("\u{0667}"), None, "only ASCII digits");
}

#[test]
fn resource_names_are_1_to_32_letters_digits_underscores_or_hyphens() {
    for name in [
        "a",
        "core",
        "code_scanning_upload",
        "source-import",
        "Graph9",
        "abcdefghijklmnopqrstuvwxyz_-0123",
    ] {
        assert!(is_resource_name(name), "{name:?} is a resource name");
        let o = observe(200, &[("X-RateLimit-Resource", name)]);
        assert_eq!(o.resource(), Some(name), "{name:?} is read as sent");
    }
    for name in [
        "",
        "abcdefghijklmnopqrstuvwxyz_-01234",
        "a.b",
        "a b",
        "../core",
        "caf\u{e9}",
        "core\n",
    ] {
        assert!(!is_resource_name(name), "{name:?} is not a resource name");
    }
    let o = observe(200, &[("X-RateLimit-Resource", "  graphql ")]);
    assert_eq!(o.resource(), Some("graphql"), "trimmed");
    let o = observe(200, &[("X-RateLimit-Resource", "")]);
    assert_eq!(o.resource(), None, "an empty resource is not core");
}

#[test]
fn retry_after_is_plain_delta_seconds_and_seen_in_any_form() {
    for (value, seconds) in [
        ("30", Some(30)),
        (" 30 ", Some(30)),
        ("0", Some(0)),
        ("18446744073709551615", Some(u64::MAX)),
        ("18446744073709551616", Some(u64::MAX)),
        ("", None),
        ("-5", None),
        ("1.5", None),
        ("+5", None),
        ("Wed, 21 Oct 2026 07:28:00 GMT", None),
    ] {
        let o = observe(403, &[("Retry-After", value)]);
        assert_eq!(o.retry_after_s, seconds, "Retry-After {value:?}");
        assert!(o.retry_after_seen, "Retry-After {value:?} was carried");
        assert!(
            o.is_secondary_limit(),
            "a 403 with Retry-After {value:?} is a secondary limit"
        );
    }
    let o = observe(403, &[]);
    assert!(
        !o.retry_after_seen && o.retry_after_s.is_none(),
        "no Retry-After"
    );
}

proptest! {
    #[test]
    fn whole_accepts_exactly_the_plain_numbers(n in 0u64..=((1u64 << 53) - 1)) {
        prop_assert_eq!(whole(&n.to_string()), Some(n));
        prop_assert_eq!(whole(&format!("-{n}")), None);
        prop_assert_eq!(whole(&format!("{n}.0")), None);
    }
}

#[cfg(feature = "http")]
#[test]
fn the_http_adapter_reads_the_same_headers() {
    let response = http::Response::builder()
        .status(429)
        .header("X-RateLimit-Remaining", "0")
        .header("x-ratelimit-reset", "1764484800")
        .header("X-RateLimit-Resource", "search")
        .header("Retry-After", "30")
        .header(
            "X-RateLimit-Limit",
            http::HeaderValue::from_bytes(b"\xff").expect("bytes"),
        )
        .body(())
        .expect("response");
    let o = Observation::from_response(&response);
    assert_eq!(o.status, 429);
    assert_eq!(o.remaining, Some(0));
    assert_eq!(o.reset_s, Some(1_764_484_800));
    assert_eq!(o.resource(), Some("search"));
    assert_eq!(o.retry_after_s, Some(30));
    assert_eq!(o.limit, None, "a value that is not text is not known");
    assert!(o.window_seen);
    assert!(o.is_secondary_limit(), "Retry-After on a 429");
    let unreadable = http::Response::builder()
        .status(200)
        .header(
            "X-RateLimit-Remaining",
            http::HeaderValue::from_bytes(b"\xff").expect("bytes"),
        )
        .header(
            "X-RateLimit-Resource",
            http::HeaderValue::from_bytes(b"\xfe").expect("bytes"),
        )
        .body(())
        .expect("response");
    let o = Observation::from_response(&unreadable);
    assert!(
        o.window_seen,
        "carried, though not text: the window is not known"
    );
    assert_eq!(o.remaining, None);
    assert_eq!(
        o.resource(),
        None,
        "a resource that is not text is not core"
    );
    assert!(!o.retry_after_seen, "no Retry-After was carried");
}

#[cfg(feature = "http")]
#[test]
fn the_http_adapter_sees_a_retry_after_that_is_not_text() {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "retry-after",
        http::HeaderValue::from_bytes(b"\xff30").expect("bytes"),
    );
    let o = Observation::from_http(http::StatusCode::FORBIDDEN, &headers);
    assert!(o.retry_after_seen, "carried, though not text");
    assert_eq!(o.retry_after_s, None, "its value is not known");
    assert!(
        o.is_secondary_limit(),
        "a 403 with a Retry-After of any form is a secondary limit"
    );
    assert!(!o.window_seen, "no window headers");
    assert_eq!(o.resource(), Some("core"), "no resource header: core");
    assert_eq!(o.status, 403, "the status");
    let o = Observation::from_http(http::StatusCode::OK, &http::HeaderMap::new());
    assert_eq!(
        o,
        Observation {
            status: 200,
            ..Observation::default()
        },
        "a response without any of the headers says nothing"
    );
}
