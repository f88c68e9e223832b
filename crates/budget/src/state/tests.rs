//! Unit tests of `state.rs`.

use super::*;

const NOW: u64 = 1_764_480_000_000;

fn seen(status: u16, remaining: Option<u64>, reset_s: Option<u64>) -> Observation {
    Observation {
        status,
        resource: None,
        window_seen: true,
        secondary_limit: false,
        limit: Some(5000),
        remaining,
        reset_s,
        retry_after_s: None,
        retry_after_seen: false,
    }
}

fn with_window(remaining: u64, reset_at: u64) -> State {
    let mut state = State::default();
    state.apply(&seen(200, Some(remaining), Some(reset_at / 1000)), NOW);
    state
}

#[test]
fn calls_are_counted_until_none_is_left_then_wait_for_the_reset() {
    let reset = NOW + 60_000;
    let mut state = with_window(2, reset);
    assert_eq!(
        state.decide("core", "backlog", NOW),
        Decision::Go { counted: true }
    );
    assert_eq!(
        state.decide("core", "triage", NOW),
        Decision::Go { counted: true }
    );
    assert_eq!(
        state.decide("core", "backlog", NOW),
        Decision::Wait {
            until: reset,
            why: WaitWhy::Spent
        }
    );
    let w = state.window("core", NOW).expect("known");
    assert_eq!((w.granted, w.left()), (2, 0));
    assert_eq!(w.by_consumer["backlog"], 1);
    assert_eq!(w.by_consumer["triage"], 1);
    assert_eq!(
        state.decide("graphql", "backlog", NOW),
        Decision::Go { counted: false },
        "another resource is not known, so its call goes"
    );
}

#[test]
fn a_window_ends_exactly_at_its_reset() {
    let reset = NOW + 60_000;
    let mut state = with_window(0, reset);
    assert!(matches!(
        state.decide("core", "c", reset - 1),
        Decision::Wait { .. }
    ));
    assert_eq!(
        state.decide("core", "c", reset),
        Decision::Go { counted: false }
    );
}

#[test]
fn a_window_counts_only_up_to_65_minutes_ahead() {
    let state = with_window(5, NOW + MAX_WINDOW_MS);
    assert!(
        state.window("core", NOW).is_some(),
        "exactly 1 h 5 min ahead"
    );
    let mut far = State::default();
    far.apply(
        &seen(200, Some(5), Some((NOW + MAX_WINDOW_MS + 1000) / 1000)),
        NOW,
    );
    assert!(
        far.window("core", NOW).is_none(),
        "one second further is not known"
    );
    assert!(far.resources.is_empty(), "and is not kept");
    // Written by another process with a far reset: bounded when read too.
    let mut state = with_window(0, NOW + 60_000);
    state.resources.get_mut("core").expect("w").reset_at = NOW + MAX_WINDOW_MS + 1;
    assert_eq!(
        state.decide("core", "c", NOW),
        Decision::Go { counted: false }
    );
}

#[test]
fn a_missing_or_past_reset_or_remaining_is_not_known() {
    let mut state = with_window(3, NOW + 60_000);
    state.apply(&seen(200, None, Some((NOW + 60_000) / 1000)), NOW);
    assert!(state.window("core", NOW).is_none(), "no remaining");
    let mut state = with_window(3, NOW + 60_000);
    state.apply(&seen(200, Some(3), None), NOW);
    assert!(state.window("core", NOW).is_none(), "no reset");
    let mut state = State::default();
    state.apply(&seen(200, Some(3), Some(NOW / 1000)), NOW);
    assert!(state.window("core", NOW).is_none(), "a reset that is now");
    assert!(
        state.resources.is_empty(),
        "a window ending exactly now is not kept (it would count again on a clock set back)"
    );
    let mut state = with_window(3, NOW + 60_000);
    state.apply(&seen(200, Some(3), Some(NOW / 1000)), NOW);
    assert!(
        state.resources.is_empty(),
        "a response whose window ends now drops the window it replaces"
    );
}

#[test]
fn a_secondary_limit_pauses_every_resource_for_retry_after_at_most_15_minutes() {
    let mut state = with_window(100, NOW + 60_000);
    let mut limited = seen(403, Some(50), Some((NOW + 60_000) / 1000));
    limited.retry_after_s = Some(30);
    state.apply(&limited, NOW);
    assert_eq!(state.pause(NOW), Some(NOW + 30_000));
    assert_eq!(
        state.decide("graphql", "c", NOW + 29_999),
        Decision::Wait {
            until: NOW + 30_000,
            why: WaitWhy::Paused
        }
    );
    assert_eq!(
        state.decide("core", "c", NOW + 30_000),
        Decision::Go { counted: true },
        "the pause is over exactly at its end"
    );

    let mut state = State::default();
    limited.retry_after_s = Some(3600);
    state.apply(&limited, NOW);
    assert_eq!(state.pause(NOW), Some(NOW + MAX_PAUSE_MS), "cut to 15 min");
    let mut state = State::default();
    limited.retry_after_s = Some(u64::MAX);
    state.apply(&limited, NOW);
    assert_eq!(
        state.pause(NOW),
        Some(NOW + MAX_PAUSE_MS),
        "even from a huge value"
    );

    let mut state = State::default();
    let mut bare = seen(429, None, None);
    bare.window_seen = false;
    state.apply(&bare, NOW);
    assert_eq!(
        state.pause(NOW),
        Some(NOW + DEFAULT_PAUSE_MS),
        "one minute by default"
    );

    // Written by another process further ahead than any writer may: not known.
    let state = State {
        paused_until: Some(NOW + MAX_PAUSE_MS),
        ..State::default()
    };
    assert_eq!(
        state.pause(NOW),
        Some(NOW + MAX_PAUSE_MS),
        "15 min ahead counts"
    );
    let state = State {
        paused_until: Some(NOW + MAX_PAUSE_MS + 1),
        ..State::default()
    };
    assert_eq!(state.pause(NOW), None, "one ms further is not known");
    assert_eq!(
        state.pause(NOW + 1),
        Some(NOW + MAX_PAUSE_MS + 1),
        "until it is near"
    );
}

#[test]
fn a_shorter_secondary_limit_never_shortens_a_pause_in_force() {
    let mut state = State::default();
    let mut limited = seen(429, None, None);
    limited.retry_after_s = Some(600);
    state.apply(&limited, NOW);
    limited.retry_after_s = Some(10);
    state.apply(&limited, NOW + 1000);
    assert_eq!(state.pause(NOW + 1000), Some(NOW + 600_000));
}

#[test]
fn grants_by_consumer_carry_over_within_one_window_only() {
    let reset = NOW + 60_000;
    let mut state = with_window(10, reset);
    let _ = state.decide("core", "backlog", NOW);
    state.apply(&seen(200, Some(8), Some(reset / 1000)), NOW + 1);
    let w = state.window("core", NOW + 1).expect("known");
    assert_eq!(
        (w.remaining, w.granted),
        (8, 0),
        "the new remaining counts the call"
    );
    assert_eq!(w.by_consumer["backlog"], 1, "same window: kept");
    state.apply(
        &seen(200, Some(5000), Some((reset + 3_600_000) / 1000)),
        reset + 1,
    );
    let w = state.window("core", reset + 1).expect("known");
    assert!(
        w.by_consumer.is_empty(),
        "a new window starts its own count"
    );
}

#[test]
fn odd_consumer_names_are_counted_as_other() {
    assert_eq!(consumer_name("backlog"), "backlog");
    assert_eq!(consumer_name(""), OTHER_CONSUMER);
    assert_eq!(consumer_name("a b"), OTHER_CONSUMER);
    assert_eq!(consumer_name(&"x".repeat(33)), OTHER_CONSUMER);
    assert_eq!(consumer_name("ghp_secret/../x"), OTHER_CONSUMER);
}

#[test]
fn the_file_round_trips_and_bad_parts_are_not_known() {
    let mut state = with_window(7, NOW + 60_000);
    let _ = state.decide("core", "backlog", NOW);
    state.paused_until = Some(NOW + 5000);
    let back = State::parse(&state.to_bytes(NOW)).expect("parse");
    assert_eq!(back, state);

    assert!(State::parse(b"").is_err());
    assert!(State::parse(b"[1]").is_err());
    assert!(State::parse(b"{\"resources\":").is_err());
    let odd = br#"{"pausedUntil": -5, "resources": {
        "core": {"remaining": 1.5, "resetAt": 1764480060000},
        "graphql": {"remaining": 3, "resetAt": 1764480060000, "granted": "2"},
        "search": {"remaining": 3, "resetAt": 1764480060000, "byConsumer": {"a": 1, "b": -1}},
        "bad name": {"remaining": 3, "resetAt": 1764480060000}
    }}"#;
    let state = State::parse(odd).expect("an object");
    assert_eq!(state.paused_until, None, "a negative pause is not known");
    assert!(
        !state.resources.contains_key("core"),
        "a fractional remaining"
    );
    assert!(
        !state.resources.contains_key("graphql"),
        "a granted that is a string"
    );
    assert!(!state.resources.contains_key("bad name"));
    let search = &state.resources["search"];
    assert_eq!(search.by_consumer.get("a"), Some(&1));
    assert_eq!(
        search.by_consumer.get("b"),
        None,
        "a negative count is dropped"
    );
}

#[test]
fn a_response_without_rate_limit_headers_keeps_the_window() {
    let mut state = with_window(0, NOW + 60_000);
    let mut bad_gateway = seen(502, None, None);
    bad_gateway.window_seen = false;
    state.apply(&bad_gateway, NOW + 1);
    assert!(
        matches!(state.decide("core", "c", NOW + 1), Decision::Wait { .. }),
        "a 502 without headers says nothing about the spent window"
    );
}

#[test]
fn an_overtaken_response_never_gives_calls_back() {
    let reset = NOW + 60_000;
    let mut state = with_window(10, reset);
    for _ in 0..3 {
        let _ = state.decide("core", "c", NOW);
    }
    state.apply(&seen(200, Some(9), Some(reset / 1000)), NOW + 1);
    assert_eq!(
        state.window("core", NOW + 1).map(Window::left),
        Some(7),
        "an older response (9 left) does not undo 3 grants"
    );
    state.apply(&seen(200, Some(5), Some(reset / 1000)), NOW + 2);
    assert_eq!(
        state.window("core", NOW + 2).map(Window::left),
        Some(5),
        "a response showing fewer left than counted wins"
    );
    state.apply(
        &seen(200, Some(5000), Some((reset + 3_600_000) / 1000)),
        reset,
    );
    assert_eq!(
        state.window("core", reset).map(Window::left),
        Some(5000),
        "a new window starts from what it says"
    );
}

#[test]
fn an_invalid_resource_header_leaves_every_window_alone() {
    let mut state = with_window(10, NOW + 60_000);
    let mut odd = seen(200, Some(0), Some((NOW + 60_000) / 1000));
    odd.resource = Some("../core".to_owned());
    state.apply(&odd, NOW);
    assert_eq!(state.window("core", NOW).map(Window::left), Some(10));
    assert_eq!(
        state.resources.len(),
        1,
        "nothing recorded under another name"
    );
}

#[test]
fn counts_stay_safe_and_consumers_bounded() {
    let mut state = with_window(100, NOW + 60_000);
    for i in 0..MAX_CONSUMERS + 5 {
        let _ = state.decide("core", &format!("c{i}"), NOW);
    }
    let w = state.window("core", NOW).expect("known");
    assert_eq!(
        w.by_consumer.len(),
        MAX_CONSUMERS + 1,
        "64 named, the rest as (other)"
    );
    assert_eq!(w.by_consumer[OTHER_CONSUMER], 5);
    let huge = MAX_SAFE;
    let text = format!(
        r#"{{"resources": {{"core": {{"remaining": {huge}, "resetAt": {}, "granted": 1,
            "byConsumer": {{"a b": {huge}, "c d": {huge}}}}}}}}}"#,
        NOW + 60_000
    );
    let mut state = State::parse(text.as_bytes()).expect("parse");
    assert_eq!(
        state.resources["core"].by_consumer[OTHER_CONSUMER], MAX_SAFE,
        "two huge counts merged stay at 2^53 - 1"
    );
    let _ = state.decide("core", "a b", NOW);
    assert_eq!(
        state.resources["core"].by_consumer[OTHER_CONSUMER],
        MAX_SAFE
    );
    let back = State::parse(&state.to_bytes(NOW)).expect("written back");
    assert_eq!(back.resources["core"].by_consumer[OTHER_CONSUMER], MAX_SAFE);
}

#[test]
fn fields_of_other_writers_survive_a_rewrite() {
    let mut state = State::parse(br#"{"resources": {}, "writer": {"lang": "go"}}"#).expect("parse");
    state.apply(&seen(200, Some(5), Some((NOW + 60_000) / 1000)), NOW);
    let back: Value = serde_json::from_slice(&state.to_bytes(NOW)).expect("json");
    assert_eq!(back["writer"]["lang"], "go");
    assert_eq!(back["updatedAt"], NOW);
}

// The bounds of the design, written as plain numbers (not through the constants, so that a
// wrong constant fails here): each exactly at, one below and one above.

#[test]
fn a_pause_read_counts_up_to_exactly_15_minutes_ahead() {
    for (ahead, counts) in [(899_999, true), (900_000, true), (900_001, false)] {
        let state = State {
            paused_until: Some(NOW + ahead),
            ..State::default()
        };
        assert_eq!(
            state.pause(NOW),
            counts.then_some(NOW + ahead),
            "a pause {ahead} ms ahead: counts {counts}"
        );
    }
    let state = State {
        paused_until: Some(NOW),
        ..State::default()
    };
    assert_eq!(state.pause(NOW), None, "a pause ending now is over");
    assert_eq!(
        state.pause(NOW - 1),
        Some(NOW),
        "and in force one ms before its end"
    );
}

#[test]
fn retry_after_is_cut_to_exactly_15_minutes_and_defaults_to_one() {
    for (retry_after_s, pause_ms) in [
        (Some(0), 0),
        (Some(1), 1_000),
        (Some(899), 899_000),
        (Some(900), 900_000),
        (Some(901), 900_000),
        (None, 60_000),
    ] {
        let mut limited = seen(429, None, None);
        limited.window_seen = false;
        limited.retry_after_s = retry_after_s;
        limited.retry_after_seen = true;
        let mut state = State::default();
        state.apply(&limited, NOW);
        assert_eq!(
            state.paused_until,
            Some(NOW + pause_ms),
            "Retry-After {retry_after_s:?} pauses {pause_ms} ms"
        );
    }
}

#[test]
fn a_window_read_counts_up_to_exactly_65_minutes_ahead() {
    for (ahead, counts) in [(3_899_999, true), (3_900_000, true), (3_900_001, false)] {
        let mut state = with_window(5, NOW + 60_000);
        state.resources.get_mut("core").expect("window").reset_at = NOW + ahead;
        assert_eq!(
            state.window("core", NOW).is_some(),
            counts,
            "a window resetting {ahead} ms ahead: counts {counts}"
        );
        let expected = if counts {
            Decision::Go { counted: true }
        } else {
            Decision::Go { counted: false }
        };
        assert_eq!(
            state.decide("core", "c", NOW),
            expected,
            "a take {ahead} ms before the reset"
        );
    }
}

#[test]
fn a_response_window_is_kept_up_to_exactly_65_minutes_ahead() {
    // Resets come in whole seconds: one second below, at, and one above the bound.
    for (ahead, kept) in [
        (1_000, true),
        (3_899_000, true),
        (3_900_000, true),
        (3_901_000, false),
    ] {
        let mut state = State::default();
        state.apply(&seen(200, Some(5), Some((NOW + ahead) / 1000)), NOW);
        assert_eq!(
            state.resources.contains_key("core"),
            kept,
            "a response whose window resets {ahead} ms ahead: kept {kept}"
        );
    }
}

#[test]
fn consumer_names_are_1_to_32_plain_characters() {
    for name in [
        "a",
        "Z9",
        "backlog-2.x_y",
        "abcdefghijklmnopqrstuvwxyz012345",
    ] {
        assert_eq!(consumer_name(name), name, "{name:?} is a consumer name");
    }
    for name in [
        "",
        "abcdefghijklmnopqrstuvwxyz0123456",
        "a b",
        "a/b",
        "caf\u{e9}",
        "a\u{0}",
        "(other)",
    ] {
        assert_eq!(
            consumer_name(name),
            OTHER_CONSUMER,
            "{name:?} is counted as (other)"
        );
    }
}

#[test]
fn the_first_64_consumers_of_a_window_are_named_and_the_rest_are_other() {
    let mut state = with_window(1000, NOW + 60_000);
    for i in 0..64 {
        let _ = state.decide("core", &format!("c{i:02}"), NOW);
    }
    let w = state.window("core", NOW).expect("known");
    assert_eq!(w.by_consumer.len(), 64, "64 consumers are named");
    assert!(
        !w.by_consumer.contains_key(OTHER_CONSUMER),
        "the 64th is still named"
    );
    let _ = state.decide("core", "c64", NOW);
    let _ = state.decide("core", "c00", NOW);
    let w = state.window("core", NOW).expect("known");
    assert_eq!(
        w.by_consumer.get(OTHER_CONSUMER),
        Some(&1),
        "the 65th is counted as (other)"
    );
    assert_eq!(
        w.by_consumer.get("c00"),
        Some(&2),
        "a consumer already named keeps its name past 64"
    );
    assert_eq!(w.by_consumer.get("c64"), None, "the 65th is not named");
}

#[test]
fn a_file_with_more_than_64_consumers_is_read_as_64_and_other() {
    let consumers: Vec<String> = (0..70).map(|i| format!("\"c{i:02}\": 1")).collect();
    let text = format!(
        r#"{{"resources": {{"core": {{"remaining": 100, "resetAt": {}, "byConsumer": {{{}}}}}}}}}"#,
        NOW + 60_000,
        consumers.join(", ")
    );
    let state = State::parse(text.as_bytes()).expect("parse");
    let by_consumer = &state.resources["core"].by_consumer;
    assert_eq!(
        by_consumer.len(),
        65,
        "64 named and (other): {by_consumer:?}"
    );
    assert_eq!(by_consumer.get("c63"), Some(&1), "the 64th is named");
    assert_eq!(by_consumer.get("c64"), None, "the 65th is not");
    assert_eq!(
        by_consumer.get(OTHER_CONSUMER),
        Some(&6),
        "the 6 beyond the first 64 are counted as (other)"
    );
}

#[test]
fn counts_in_the_file_are_whole_numbers_up_to_2_pow_53_minus_1() {
    let window = |remaining: &str, granted: &str| {
        let text = format!(
            r#"{{"resources": {{"core": {{"remaining": {remaining}, "resetAt": {},
                "granted": {granted}}}}}}}"#,
            NOW + 60_000
        );
        State::parse(text.as_bytes())
            .expect("an object")
            .resources
            .get("core")
            .map(|w| (w.remaining, w.granted))
    };
    assert_eq!(
        window("9007199254740991", "9007199254740991"),
        Some((MAX_SAFE, MAX_SAFE)),
        "2^53 - 1 is kept exactly"
    );
    assert_eq!(window("9007199254740992", "0"), None, "2^53 is not known");
    assert_eq!(window("0", "9007199254740992"), None, "nor as granted");
    assert_eq!(window("0", "0"), Some((0, 0)), "0 is a count");
    assert_eq!(window("-1", "0"), None, "a negative remaining is not known");
    let paused = |until: &str| {
        State::parse(format!(r#"{{"pausedUntil": {until}}}"#).as_bytes())
            .expect("an object")
            .paused_until
    };
    assert_eq!(paused("9007199254740991"), Some(MAX_SAFE), "2^53 - 1");
    assert_eq!(paused("9007199254740992"), None, "2^53 is not known");
    assert_eq!(paused("1.0"), None, "a fraction is not known");
}

/// A model provider's response at `now` reporting `remaining` requests of a window that
/// resets at `reset_at`.
fn requests_seen(remaining: u64, reset_at: u64) -> crate::ProviderObservation {
    crate::ProviderObservation {
        status: 200,
        windows: vec![crate::provider::SeenWindow {
            dimension: crate::Dimension::Requests,
            limit: Some(50),
            remaining,
            reset_at,
        }],
        ..Default::default()
    }
}

#[test]
fn a_response_of_a_window_that_ended_meanwhile_keeps_the_next_window() {
    // A stream began in the window ending at NOW + 1 s and ends after it, once another
    // response has reported the next window: the next one stays known.
    let mut state = State::default();
    let later = NOW + 2_000;
    state.apply_provider(&requests_seen(40, NOW + 61_000), None, later);
    state.apply_provider(&requests_seen(3, NOW + 1_000), None, later);
    assert_eq!(
        state.window("requests", later).map(Window::left),
        Some(40),
        "the later window is kept"
    );
    // Its own window, ended, is carried over (its limit left), and the late report says
    // nothing of the window now.
    let mut state = State::default();
    state.apply_provider(&requests_seen(3, NOW + 1_000), None, NOW);
    state.apply_provider(&requests_seen(2, NOW + 1_000), None, later);
    let window = state
        .window("requests", later)
        .expect("the window carried over");
    assert!(window.assumed, "{window:?}");
    assert_eq!(window.left(), 50, "the limit, not the late report's 2");
}

#[test]
fn reports_of_one_window_read_at_different_moments_keep_the_least_left() {
    // OpenAI says its resets as durations: two responses of one window, read 300 ms apart,
    // the one overtaken (more left) recorded last.
    let mut state = State::default();
    state.apply_provider(&requests_seen(10, NOW + 60_300), None, NOW);
    state.apply_provider(&requests_seen(12, NOW + 60_000), None, NOW);
    let window = state.window("requests", NOW).expect("a window");
    assert_eq!(window.left(), 10, "an overtaken report gives nothing back");
    assert_eq!(
        window.reset_at,
        NOW + 60_300,
        "the later reset is kept: the window cannot have reset before it"
    );
    // Half a second or more later: the next window, which replaces it.
    let next = NOW + 60_100;
    state.apply_provider(&requests_seen(40, NOW + 61_000), None, next);
    assert_eq!(state.window("requests", next).map(Window::left), Some(40));
    // A response of the window before, overtaken by the next window's and read with a reset
    // still ahead (a duration that took long to arrive): ignored.
    state.apply_provider(&requests_seen(0, NOW + 60_350), None, next);
    let window = state.window("requests", next).expect("the next window");
    assert_eq!((window.left(), window.reset_at), (40, NOW + 61_000));
    // A window seen long ago that a later response reports as resetting sooner: replaced.
    let late = NOW + 60_900;
    state.apply_provider(&requests_seen(7, NOW + 60_950), None, late);
    assert_eq!(state.window("requests", late).map(Window::left), Some(7));
}

/// A model provider's response at `now` reporting `remaining` tokens of a window that resets
/// at `reset_at`.
fn tokens_seen(remaining: u64, reset_at: u64) -> crate::ProviderObservation {
    crate::ProviderObservation {
        status: 200,
        windows: vec![crate::provider::SeenWindow {
            dimension: crate::Dimension::Tokens,
            limit: Some(100_000),
            remaining,
            reset_at,
        }],
        ..Default::default()
    }
}

#[test]
fn a_stream_s_head_settles_the_windows_it_reports_and_its_body_the_rest() {
    // Both windows known; a streamed call reserves 1 request and 500 tokens.
    let mut state = State::default();
    state.apply_provider(&requests_seen(10, NOW + 60_000), None, NOW);
    state.apply_provider(&tokens_seen(50_000, NOW + 60_000), None, NOW);
    let units = [("requests".to_owned(), 1), ("tokens".to_owned(), 500)];
    assert!(matches!(
        state.decide_units(&units, "proxy", NOW, "r1"),
        Decision::Go { counted: true }
    ));
    // Its head reports the requests window alone, counting the request already.
    state.apply_provider_head(&requests_seen(9, NOW + 60_000), "r1", NOW + 10);
    assert_eq!(
        state.window("requests", NOW + 10).map(Window::left),
        Some(9),
        "the request counted once: by the head's remaining, not again as reserved"
    );
    assert_eq!(
        state.window("tokens", NOW + 10).map(Window::left),
        Some(49_500),
        "the tokens still reserved"
    );
    // Its body's usage settles the rest.
    let body = crate::ProviderObservation {
        status: 200,
        usage: Some(crate::Usage {
            input_tokens: 100,
            output_tokens: 200,
        }),
        ..Default::default()
    };
    state.apply_provider(&body, Some("r1"), NOW + 5_000);
    assert_eq!(
        state.window("requests", NOW + 5_000).map(Window::left),
        Some(9),
        "the request stays counted once after the stream ends"
    );
    assert_eq!(
        state.window("tokens", NOW + 5_000).map(Window::left),
        Some(49_700),
        "the tokens it used, not its estimate"
    );
    assert!(state.in_flight.is_empty(), "settled");
}

#[test]
fn a_reservation_whose_response_says_nothing_is_given_back() {
    let mut state = State::default();
    state.apply_provider(&requests_seen(1, NOW + 60_000), None, NOW);
    let units = [("requests".to_owned(), 1)];
    assert!(matches!(
        state.decide_units(&units, "proxy", NOW, "r1"),
        Decision::Go { counted: true }
    ));
    assert_eq!(state.window("requests", NOW).map(Window::left), Some(0));
    // No window, no usage: nothing says the provider counted it.
    let silent = crate::ProviderObservation {
        status: 200,
        ..Default::default()
    };
    state.apply_provider(&silent, Some("r1"), NOW + 100);
    assert_eq!(
        state.window("requests", NOW + 100).map(Window::left),
        Some(1),
        "given back"
    );
}

/// A response of status `status` with `retry_after_ms` and `windows`.
fn answered(
    status: u16,
    retry_after_ms: Option<u64>,
    windows: Vec<crate::provider::SeenWindow>,
) -> crate::ProviderObservation {
    let profile = crate::Provider::Anthropic.profile().expect("a profile");
    crate::ProviderObservation {
        status,
        windows,
        pause: profile.pause_statuses.contains(&status),
        overloaded: profile.overload_statuses.contains(&status),
        retry_after_ms,
        ..Default::default()
    }
}

#[test]
fn an_overload_backs_off_seconds_growing_with_repeats_never_the_key_s_minute() {
    let mut state = State::default();
    let mut at = NOW;
    for expected in [1_000, 2_000, 4_000, 8_000, 16_000, 16_000] {
        state.apply_provider(&answered(529, None, Vec::new()), None, at);
        assert_eq!(
            state.pause(at),
            Some(at + expected),
            "after {} overloads",
            state.overloads
        );
        at += expected;
    }
    // A shorter wait asked wins; a longer one is cut to the longest backoff.
    state.apply_provider(&answered(529, Some(500), Vec::new()), None, at);
    assert_eq!(state.pause(at), Some(at + 500));
    state.apply_provider(&answered(529, Some(60_000), Vec::new()), None, at + 500);
    assert_eq!(state.pause(at + 500), Some(at + 500 + 16_000));
    // A response that is no overload starts the backoff again.
    let later = at + 20_000;
    state.apply_provider(&answered(200, None, Vec::new()), None, later);
    assert_eq!(state.overloads, 0);
    state.apply_provider(&answered(529, None, Vec::new()), None, later);
    assert_eq!(state.pause(later), Some(later + 1_000));
    // The streak survives the file.
    let read = State::parse(&state.to_bytes(later)).expect("parse");
    assert_eq!(read.overloads, 1);
}

#[test]
fn a_429_without_retry_after_pauses_until_its_spent_window_resets_or_briefly() {
    let spent = crate::provider::SeenWindow {
        dimension: crate::Dimension::Requests,
        limit: Some(50),
        remaining: 0,
        reset_at: NOW + 1_020,
    };
    let left = crate::provider::SeenWindow {
        dimension: crate::Dimension::Tokens,
        limit: Some(10_000),
        remaining: 400,
        reset_at: NOW + 30_000,
    };
    let mut state = State::default();
    state.apply_provider(&answered(429, None, vec![spent, left]), None, NOW);
    assert_eq!(
        state.pause(NOW),
        Some(NOW + 1_020),
        "until the spent window's reset, not a minute"
    );
    let mut state = State::default();
    state.apply_provider(&answered(429, None, vec![left]), None, NOW);
    assert_eq!(
        state.pause(NOW),
        Some(NOW + NO_WAIT_SAID_PAUSE_MS),
        "nothing said spent: briefly"
    );
    let mut state = State::default();
    state.apply_provider(&answered(429, Some(7_000), vec![spent]), None, NOW);
    assert_eq!(state.pause(NOW), Some(NOW + 7_000), "a wait asked wins");
}

/// `n` requests of one unit each, as reservation ids `r<i>`, decided at `now`.
fn take_requests(state: &mut State, n: usize, now: u64) -> Vec<Decision> {
    (0..n)
        .map(|i| {
            state.decide_units(
                &[("requests".to_owned(), 1)],
                "agent",
                now,
                &format!("r{now}x{i}"),
            )
        })
        .collect()
}

#[test]
fn a_spent_window_carries_its_limit_into_the_next_so_at_most_the_limit_goes_after_a_reset() {
    // A window of 2, seen spent: it refills in 5 s, the whole limit's period.
    let mut state = State::default();
    let mut spent = requests_seen(0, NOW + 5_000);
    spent.windows[0].limit = Some(2);
    state.apply_provider(&spent, None, NOW);
    assert_eq!(
        take_requests(&mut state, 1, NOW + 4_999),
        vec![Decision::Wait {
            until: NOW + 5_000,
            why: WaitWhy::Spent
        }]
    );
    // Exactly at the reset, six waiters try: two go, four wait for the next window, which
    // the window before says lasts 5 s.
    let at = NOW + 5_000;
    let decided = take_requests(&mut state, 6, at);
    let went = decided
        .iter()
        .filter(|d| matches!(d, Decision::Go { counted: true }))
        .count();
    assert_eq!(went, 2, "{decided:?}");
    assert_eq!(
        decided[5],
        Decision::Wait {
            until: NOW + 10_000,
            why: WaitWhy::Spent
        }
    );
    let window = state.window("requests", at).expect("carried over");
    assert!(window.assumed);
    assert_eq!((window.limit, window.granted), (Some(2), 2));
    // A response of the new window replaces the assumption.
    let mut next = requests_seen(1, NOW + 9_000);
    next.windows[0].limit = Some(2);
    state.apply_provider(&next, Some(&format!("r{at}x0")), at + 100);
    let window = state.window("requests", at + 100).expect("reported");
    assert!(!window.assumed);
    assert_eq!(
        window.left(),
        0,
        "its remaining 1, less the other call in flight"
    );
}

#[test]
fn a_carried_window_counts_the_calls_still_in_flight_and_lasts_the_period_of_the_one_before() {
    let mut state = State::default();
    // A token bucket of 10 seen at NOW with 6 left, full again at NOW + 2 s: the 4 used
    // refill in 2 s, so the whole 10 in 5 s.
    let mut seen = requests_seen(6, NOW + 2_000);
    seen.windows[0].limit = Some(10);
    state.apply_provider(&seen, None, NOW);
    assert_eq!(state.resources["requests"].period_ms(), 5_000);
    // Three calls taken, none answered when the window ends.
    assert!(
        take_requests(&mut state, 3, NOW + 1_000)
            .iter()
            .all(|d| *d == Decision::Go { counted: true })
    );
    // 12 s after the reset: the window that holds now is the third after it.
    let now = NOW + 14_000;
    state.carry(now);
    let window = state.window("requests", now).expect("carried");
    assert_eq!(
        (window.seen_at, window.reset_at),
        (NOW + 12_000, NOW + 17_000)
    );
    assert_eq!(window.left(), 7, "10, less the 3 calls in flight");
    // Carried again, it keeps its period (it says nothing of a rate of its own).
    state.carry(NOW + 17_000);
    let window = state
        .window("requests", NOW + 17_000)
        .expect("carried again");
    assert_eq!(window.reset_at, NOW + 22_000);
    // It survives the file, still marked assumed.
    let read = State::parse(&state.to_bytes(NOW + 17_000)).expect("its own bytes");
    assert_eq!(read.resources["requests"], state.resources["requests"]);
}

#[test]
fn a_window_without_a_limit_is_not_carried_and_periods_are_bounded() {
    let mut state = State::default();
    let mut seen = requests_seen(0, NOW + 300);
    seen.windows[0].limit = None;
    state.apply_provider(&seen, None, NOW);
    state.carry(NOW + 300);
    assert!(
        state.window("requests", NOW + 300).is_none(),
        "without a limit, nothing says how many may go after the reset"
    );
    // A window seen 300 ms before its reset, all its limit left: at least a second.
    let mut full = requests_seen(50, NOW + 300);
    full.windows[0].limit = Some(50);
    state.apply_provider(&full, None, NOW);
    assert_eq!(state.resources["requests"].period_ms(), MIN_PERIOD_MS);
    // One of a million used, refilled by a reset an hour away: at most 65 min.
    let mut slow = tokens_seen(999_999, NOW + 3_600_000);
    slow.windows[0].limit = Some(1_000_000);
    state.apply_provider(&slow, None, NOW);
    assert_eq!(state.resources["tokens"].period_ms(), MAX_WINDOW_MS);
}

#[test]
fn a_token_bucket_s_older_answer_recorded_last_never_loosens_the_window() {
    // A bucket of 4: the provider counted X (3 left, full at +1.5 s) before Y (2 left, full
    // at +3 s), but Y's answer is recorded first.
    let bucket = |remaining: u64, reset_at: u64| {
        let mut seen = requests_seen(remaining, reset_at);
        seen.windows[0].limit = Some(4);
        seen
    };
    let mut state = State::default();
    state.apply_provider(&bucket(2, NOW + 3_000), None, NOW);
    state.apply_provider(&bucket(3, NOW + 1_500), None, NOW + 10);
    let window = state.window("requests", NOW + 10).expect("known");
    assert_eq!(
        (window.left(), window.reset_at),
        (2, NOW + 3_000),
        "the later state stands"
    );
    // A later answer with a later reset is the newer state, whatever it says.
    state.apply_provider(&bucket(3, NOW + 4_000), None, NOW + 2_000);
    let window = state.window("requests", NOW + 2_000).expect("known");
    assert_eq!((window.left(), window.reset_at), (3, NOW + 4_000));
}

#[test]
fn waiting_words_count_while_fresh_and_are_bounded() {
    let mut state = State::default();
    state.note_waiting("aaaa", 3, NOW);
    state.note_waiting("bbbb", 2, NOW + 1_000);
    assert_eq!(state.waiting_at(NOW + 1_000), 5);
    assert_eq!(
        state.waiting_at(NOW + WAITING_FRESH_MS),
        5,
        "exactly 5 s old counts"
    );
    assert_eq!(
        state.waiting_at(NOW + WAITING_FRESH_MS + 1),
        2,
        "older than 5 s: not counted"
    );
    assert_eq!(
        state.waiting_at(NOW - 1),
        0,
        "a word from the future is not"
    );
    // None any more: the word goes; a stale one goes with the next word.
    state.note_waiting("bbbb", 0, NOW + 1_000);
    assert!(!state.waiting.contains_key("bbbb"));
    state.note_waiting("cccc", 1, NOW + 6_000);
    assert!(!state.waiting.contains_key("aaaa"), "stale, dropped");
    for i in 0..(MAX_WAITERS + 5) {
        state.note_waiting(&format!("w{i:04}"), 1, NOW + 6_000 + i as u64);
    }
    assert_eq!(state.waiting.len(), MAX_WAITERS, "the stalest went first");
    assert!(
        state
            .waiting
            .contains_key(&format!("w{:04}", MAX_WAITERS + 4))
    );
    let read = State::parse(&state.to_bytes(NOW + 7_000)).expect("its own bytes");
    assert_eq!(read.waiting, state.waiting, "it survives the file");
}

/// A reservation of one request, taken at `at_ms`.
fn reserved_at(at_ms: u64) -> Reservation {
    Reservation {
        at_ms,
        units: BTreeMap::from([("requests".to_owned(), 1)]),
    }
}

#[test]
fn a_reservation_counts_exactly_10_minutes_and_one_from_the_future_up_to_15() {
    // Written out rather than taken from the constants, so a wrong constant fails here.
    const TEN_MIN: u64 = 10 * 60 * 1000;
    const FIFTEEN_MIN: u64 = 15 * 60 * 1000;
    let mut state = State::default();
    state.in_flight.insert("old".to_owned(), reserved_at(NOW));
    state.expire(NOW + TEN_MIN);
    assert!(state.in_flight.contains_key("old"), "exactly 10 min old");
    state.expire(NOW + TEN_MIN + 1);
    assert!(!state.in_flight.contains_key("old"), "older: expired");
    // Taken at a time ahead of now (a clock set back): kept while at most 15 min ahead.
    state
        .in_flight
        .insert("ahead".to_owned(), reserved_at(NOW + FIFTEEN_MIN));
    state
        .in_flight
        .insert("further".to_owned(), reserved_at(NOW + FIFTEEN_MIN + 1));
    state.expire(NOW);
    assert!(
        state.in_flight.contains_key("ahead"),
        "exactly 15 min ahead"
    );
    assert!(!state.in_flight.contains_key("further"), "further ahead");
}

#[test]
fn a_call_needing_exactly_a_window_s_limit_waits_and_one_needing_more_goes() {
    let mut state = State::default();
    state.apply_provider(&requests_seen(10, NOW + 60_000), None, NOW);
    assert_eq!(
        state.decide_units(&[("requests".to_owned(), 50)], "agent", NOW, "r1"),
        Decision::Wait {
            until: NOW + 60_000,
            why: WaitWhy::Spent
        },
        "the whole limit of 50 can be had after the reset: it waits"
    );
    assert_eq!(
        state.decide_units(&[("requests".to_owned(), 51)], "agent", NOW, "r2"),
        Decision::Go { counted: true },
        "more than the limit never can: waiting would not help"
    );
}

#[test]
fn units_are_counted_by_consumer_the_first_64_named_and_the_rest_other() {
    let mut state = State::default();
    let mut seen = requests_seen(1_000, NOW + 60_000);
    seen.windows[0].limit = Some(1_000);
    state.apply_provider(&seen, None, NOW);
    for i in 0..=MAX_CONSUMERS {
        assert_eq!(
            state.decide_units(
                &[("requests".to_owned(), 1)],
                &format!("c{i:02}"),
                NOW,
                &format!("r{i}")
            ),
            Decision::Go { counted: true }
        );
    }
    let by_consumer = &state.resources["requests"].by_consumer;
    assert_eq!(by_consumer.get("c00"), Some(&1), "{by_consumer:?}");
    assert_eq!(by_consumer.get("c63"), Some(&1), "{by_consumer:?}");
    assert_eq!(by_consumer.get(OTHER_CONSUMER), Some(&1), "the 65th");
    assert_eq!(by_consumer.len(), MAX_CONSUMERS + 1);
}

#[test]
fn a_reported_window_is_kept_up_to_exactly_65_minutes_ahead() {
    let mut state = State::default();
    state.apply_provider(&requests_seen(5, NOW + MAX_WINDOW_MS), None, NOW);
    assert_eq!(
        state.window("requests", NOW).map(Window::left),
        Some(5),
        "exactly 65 min ahead"
    );
    state.apply_provider(&requests_seen(4, NOW + MAX_WINDOW_MS + 1), None, NOW);
    assert!(
        !state.resources.contains_key("requests"),
        "1 ms further: not known, and the window it would replace goes"
    );
}

#[test]
fn a_report_less_than_half_a_second_later_is_the_same_window_and_exactly_half_the_next() {
    // The same window reported again with a reset 300 ms later (read from a duration): the
    // least left and the grants by consumer are kept.
    let mut state = State::default();
    state.apply_provider(&requests_seen(10, NOW + 60_000), None, NOW);
    assert_eq!(
        state.decide_units(&[("requests".to_owned(), 1)], "agent", NOW, "r1"),
        Decision::Go { counted: true }
    );
    state.apply_provider(&requests_seen(12, NOW + 60_300), None, NOW + 10);
    let window = state.window("requests", NOW + 10).expect("known");
    assert_eq!(
        (window.remaining, window.left(), window.reset_at),
        (10, 9, NOW + 60_300),
        "the least left, less the call in flight; the later reset"
    );
    assert_eq!(window.by_consumer.get("agent"), Some(&1), "{window:?}");
    // A reset exactly 0.5 s later is the next window: what it says stands.
    let mut state = State::default();
    state.apply_provider(&requests_seen(10, NOW + 60_000), None, NOW);
    state.apply_provider(&requests_seen(40, NOW + 60_500), None, NOW + 10);
    let window = state.window("requests", NOW + 10).expect("known");
    assert_eq!((window.left(), window.reset_at), (40, NOW + 60_500));
}

#[test]
fn a_report_of_a_window_seen_moments_ago_is_merged_not_ignored() {
    // Seen at NOW resetting at +300 ms; a report read 100 ms later with a reset 50 ms later:
    // the same window (not one before it), so its fewer left count.
    let mut state = State::default();
    state.apply_provider(&requests_seen(10, NOW + 300), None, NOW);
    state.apply_provider(&requests_seen(8, NOW + 350), None, NOW + 100);
    let window = state.window("requests", NOW + 100).expect("known");
    assert_eq!((window.left(), window.reset_at), (8, NOW + 350));
}

#[test]
fn a_head_that_reports_fewer_left_than_reserved_counts_what_it_reports() {
    let mut state = State::default();
    state.apply_provider(&requests_seen(10, NOW + 60_000), None, NOW);
    state.apply_provider(&tokens_seen(50_000, NOW + 60_000), None, NOW);
    let units = [("requests".to_owned(), 1), ("tokens".to_owned(), 500)];
    assert_eq!(
        state.decide_units(&units, "proxy", NOW, "r1"),
        Decision::Go { counted: true }
    );
    // Others' calls counted meanwhile: 7 requests left, this one's included.
    state.apply_provider_head(&requests_seen(7, NOW + 60_000), "r1", NOW + 10);
    assert_eq!(
        state.window("requests", NOW + 10).map(Window::left),
        Some(7)
    );
    assert_eq!(
        state.in_flight["r1"].units,
        BTreeMap::from([("tokens".to_owned(), 500)]),
        "the requests settled, the tokens still reserved"
    );
}

#[test]
fn overloads_are_written_only_when_there_were_some() {
    let written =
        |state: &State| -> Value { serde_json::from_slice(&state.to_bytes(NOW)).expect("JSON") };
    assert_eq!(written(&State::default()).get("overloads"), None);
    let state = State {
        overloads: 1,
        ..State::default()
    };
    assert_eq!(written(&state)["overloads"], 1);
}
