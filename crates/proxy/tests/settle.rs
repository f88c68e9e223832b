//! What a response does to its take's reservation, read in the ledger's files: its usage
//! replaces the estimate (it is settled, not given back), a stream's head is recorded as it
//! arrives, and a response cut short keeps its estimate counted.
//!
//! Each test first sends one request whose head reports every window, so that the ledger
//! knows the windows the next take counts in (a take reserves only in known windows).
//! Where a test must know that the lane has made a call queued before, it sends a request
//! the fake answers 400 without windows or usage (its own reservation is given back, which
//! leaves every count as it was): the lane makes its calls in order, so once that answer has
//! come back, every call queued before it has been made. No test waits for something that a
//! broken proxy never does: each waits for what happens either way, then checks the counts.

use super::*;

/// One request whose head reports every window: the ledger knows them after it.
async fn windows_known(client: &Plain, site: &Site, flavor: Flavor, base: &str, token: &str) {
    let (head, _) = send(
        client,
        request(flavor, base, token)
            .body(Full::from(prompt(flavor, false)))
            .expect("request"),
    )
    .await;
    assert_eq!(head.status(), 200);
    lane_passed(client, flavor, base, token).await;
    eventually("no reservation is left in flight", || {
        site.state(flavor, token).is_some() && site.in_flight(flavor, token) == 0
    })
    .await;
    let state = site.state(flavor, token).expect("a state");
    assert!(
        state["resources"]["tokens"]["remaining"].is_u64(),
        "the head's windows are recorded: {state}"
    );
}

/// A call through the lane of `token` that changes no count, answered once every call
/// queued in that lane before it has been made.
async fn lane_passed(client: &Plain, flavor: Flavor, base: &str, token: &str) {
    let (head, _) = send(
        client,
        request(flavor, base, token)
            .header("x-test-status", "400")
            .body(Full::from(prompt(flavor, false)))
            .expect("request"),
    )
    .await;
    assert_eq!(head.status(), 400, "the fake's plain refusal");
}

/// `dimension`'s window in the state: its `granted` and `remaining`.
fn window(site: &Site, flavor: Flavor, token: &str, dimension: &str) -> (u64, u64) {
    let state = site.state(flavor, token).expect("a state");
    let window = &state["resources"][dimension];
    (
        window["granted"].as_u64().unwrap_or(0),
        window["remaining"]
            .as_u64()
            .unwrap_or_else(|| panic!("no {dimension} window: {state}")),
    )
}

/// The units of the one reservation in flight.
fn reserved(site: &Site, flavor: Flavor, token: &str) -> serde_json::Value {
    let state = site.state(flavor, token).expect("a state");
    let in_flight = state["inFlight"].as_object().expect("inFlight");
    assert_eq!(in_flight.len(), 1, "one reservation in flight: {state}");
    in_flight.values().next().expect("one")["units"].clone()
}

/// A JSON response whose head reports the requests window alone: at its end its usage
/// replaces the estimate in the other windows (the reservation is settled, not given back),
/// and its head's requests window is recorded with it.
#[test]
fn a_response_s_usage_settles_its_reservation_where_its_head_reported_no_window() {
    for flavor in [Flavor::Anthropic, Flavor::Openai] {
        run(async {
            let token = format!("sk-usage-{flavor:?}-not-real");
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let client = client();
            windows_known(&client, &site, flavor, &proxy.url(), &token).await;
            let body = prompt(flavor, false);
            let (head, answer) = send(
                &client,
                request(flavor, &proxy.url(), &token)
                    .header("x-test-partial", "1")
                    .body(Full::from(body.clone()))
                    .expect("request"),
            )
            .await;
            assert_eq!(head.status(), 200);
            // What the fake says it used: a fifth of the bytes in, 5 out.
            let (input, output) = (body.len() as u64 / 5, 5);
            assert!(
                String::from_utf8_lossy(&answer).contains(&format!("{output}")),
                "the body says its usage"
            );
            eventually("the response is settled", || {
                site.in_flight(flavor, &token) == 0
            })
            .await;
            let (granted, _) = window(&site, flavor, &token, "tokens");
            assert_eq!(
                granted,
                input + output,
                "{flavor:?}: the tokens the response used stay counted, in place of the \
                 estimate of {} ({})",
                (body.len() as u64).div_ceil(worklane_proxy::BYTES_PER_TOKEN) + 64,
                site.state(flavor, &token).expect("state")
            );
            if flavor == Flavor::Anthropic {
                assert_eq!(window(&site, flavor, &token, "input-tokens").0, input);
                assert_eq!(window(&site, flavor, &token, "output-tokens").0, output);
            }
            assert_eq!(
                window(&site, flavor, &token, "requests"),
                (0, 1_000_000 - 2),
                "the head's requests window, recorded with the settlement, counts both requests"
            );
            proxy.stop().await;
        });
    }
}

/// An Anthropic response whose head reports two of its four windows (requests and tokens):
/// the head counts the request in those, and the usage settles the input and output tokens
/// (the reservation is not settled by a head that leaves windows out).
#[test]
fn a_head_reporting_some_windows_leaves_the_others_to_the_usage() {
    run(async {
        let flavor = Flavor::Anthropic;
        let token = "sk-some-windows-not-real";
        let fake = Fake::start(flavor, GENEROUS).await;
        let site = Site::new();
        let proxy = start(config(&site, flavor, &fake));
        let client = client();
        windows_known(&client, &site, flavor, &proxy.url(), token).await;
        let body = prompt(flavor, false);
        let (head, _) = send(
            &client,
            request(flavor, &proxy.url(), token)
                .header("x-test-partial", "requests,tokens")
                .body(Full::from(body.clone()))
                .expect("request"),
        )
        .await;
        assert_eq!(head.status(), 200);
        eventually("the response is settled", || {
            site.in_flight(flavor, token) == 0
        })
        .await;
        let state = site.state(flavor, token).expect("state");
        assert_eq!(
            (
                window(&site, flavor, token, "input-tokens").0,
                window(&site, flavor, token, "output-tokens").0,
            ),
            (body.len() as u64 / 5, 5),
            "the usage settles the windows the head did not report: {state}"
        );
        assert_eq!(
            window(&site, flavor, token, "tokens").0,
            0,
            "the head's tokens window counts the request, which is not counted again: {state}"
        );
        proxy.stop().await;
    });
}

/// A stream whose head reports every window is settled by its head, while its body still
/// streams: the provider counted the request before it answered.
#[test]
fn a_stream_whose_head_reports_every_window_is_settled_by_it() {
    for flavor in [Flavor::Anthropic, Flavor::Openai] {
        run(async {
            let token = format!("sk-stream-full-{flavor:?}-not-real");
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let client = client();
            windows_known(&client, &site, flavor, &proxy.url(), &token).await;
            let hold = format!("full-{flavor:?}");
            let stream = request(flavor, &proxy.url(), &token)
                .header("x-test-hold", &hold)
                .body(Full::from(prompt(flavor, true)))
                .expect("request");
            let (response, _conn) = open_stream(proxy.addr, stream).await;
            let mut body = response.into_body();
            within("the first event", body.frame())
                .await
                .expect("a frame")
                .expect("data");
            lane_passed(&client, flavor, &proxy.url(), &token).await;
            // The plain refusal reserved a request; a reservation the stream's head settled
            // nothing of would still hold one too.
            eventually("the plain refusal's reservation is given back", || {
                let state = site.state(flavor, &token).expect("state");
                state["inFlight"]
                    .as_object()
                    .is_none_or(|f| f.values().all(|r| r["units"]["requests"].is_null()))
            })
            .await;
            assert_eq!(
                site.in_flight(flavor, &token),
                0,
                "{flavor:?}: settled by its head while it streams: {}",
                site.state(flavor, &token).expect("state")
            );
            fake.release(&hold);
            within("the rest", body.collect()).await.expect("the rest");
            proxy.stop().await;
        });
    }
}

/// A streamed response's head is recorded as it arrives, while its body streams: its
/// requests window is in the state and the request is no longer reserved in it.
#[test]
fn a_stream_s_head_is_recorded_while_its_body_streams() {
    for flavor in [Flavor::Anthropic, Flavor::Openai] {
        run(async {
            let token = format!("sk-stream-head-{flavor:?}-not-real");
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let client = client();
            windows_known(&client, &site, flavor, &proxy.url(), &token).await;
            assert_eq!(window(&site, flavor, &token, "requests").1, 999_999);
            let hold = format!("head-{flavor:?}");
            let stream = request(flavor, &proxy.url(), &token)
                .header("x-test-hold", &hold)
                .header("x-test-partial", "1")
                .body(Full::from(prompt(flavor, true)))
                .expect("request");
            let (response, _conn) = open_stream(proxy.addr, stream).await;
            let mut body = response.into_body();
            within("the first event", body.frame())
                .await
                .expect("a frame")
                .expect("data");
            lane_passed(&client, flavor, &proxy.url(), &token).await;
            eventually("the plain refusal's reservation is given back", || {
                site.in_flight(flavor, &token) <= 1
            })
            .await;
            assert_eq!(
                window(&site, flavor, &token, "requests"),
                (0, 999_998),
                "{flavor:?}: the stream's head is recorded before its body ends: its requests \
                 window counts the stream ({})",
                site.state(flavor, &token).expect("state")
            );
            let units = reserved(&site, flavor, &token);
            assert!(
                units.get("requests").is_none() && units["tokens"].is_u64(),
                "{flavor:?}: the head settled the request, the tokens stay reserved: {units}"
            );
            fake.release(&hold);
            within("the rest", body.collect()).await.expect("the rest");
            eventually("the stream's end settles it", || {
                site.in_flight(flavor, &token) == 0
            })
            .await;
            proxy.stop().await;
        });
    }
}

/// A stream whose client goes away before its end was counted by the provider (what it was
/// sent, and what it wrote): its estimate stays counted in the windows its head did not
/// report, not given back as if no call had been made.
#[test]
fn a_stream_cut_short_keeps_its_estimate_counted() {
    for flavor in [Flavor::Anthropic, Flavor::Openai] {
        run(async {
            let token = format!("sk-cut-short-{flavor:?}-not-real");
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let client = client();
            windows_known(&client, &site, flavor, &proxy.url(), &token).await;
            let hold = format!("cut-{flavor:?}");
            let body = prompt(flavor, true);
            let stream = request(flavor, &proxy.url(), &token)
                .header("x-test-hold", &hold)
                .header("x-test-partial", "1")
                .body(Full::from(body.clone()))
                .expect("request");
            let (response, conn) = open_stream(proxy.addr, stream).await;
            let mut first = response.into_body();
            within("the first event", first.frame())
                .await
                .expect("a frame")
                .expect("data");
            let estimate = (body.len() as u64).div_ceil(worklane_proxy::BYTES_PER_TOKEN) + 64;
            lane_passed(&client, flavor, &proxy.url(), &token).await;
            eventually("the plain refusal's reservation is given back", || {
                site.in_flight(flavor, &token) <= 1
            })
            .await;
            assert_eq!(
                reserved(&site, flavor, &token)["tokens"],
                estimate,
                "the stream's tokens are reserved at the estimate"
            );
            // The client dies: its connection closes with the stream unfinished.
            conn.abort();
            drop(first);
            eventually("the stream cut short is settled", || {
                site.in_flight(flavor, &token) == 0
            })
            .await;
            assert_eq!(
                window(&site, flavor, &token, "tokens").0,
                estimate,
                "{flavor:?}: the estimate stays counted ({})",
                site.state(flavor, &token).expect("state")
            );
            fake.release(&hold);
            proxy.stop().await;
        });
    }
}

/// A stream's status is recorded with its head, in the order the provider answered: an
/// overload answered while the stream still streams stays counted (as one in a row) when the
/// stream ends, rather than being set back to 0 by a status answered before it.
#[test]
fn a_stream_s_end_does_not_undo_an_overload_answered_after_its_head() {
    run(async {
        let flavor = Flavor::Anthropic;
        let token = "sk-overload-mid-stream-not-real";
        let fake = Fake::start(flavor, GENEROUS).await;
        let site = Site::new();
        let proxy = start(config(&site, flavor, &fake));
        let client = client();
        windows_known(&client, &site, flavor, &proxy.url(), token).await;
        let stream = request(flavor, &proxy.url(), token)
            .header("x-test-hold", "overload")
            .header("x-test-partial", "1")
            .body(Full::from(prompt(flavor, true)))
            .expect("request");
        let (response, _conn) = open_stream(proxy.addr, stream).await;
        let mut body = response.into_body();
        within("the first event", body.frame())
            .await
            .expect("a frame")
            .expect("data");
        let overloaded = request(flavor, &proxy.url(), token)
            .header("x-test-status", "529")
            .body(Full::from(prompt(flavor, false)))
            .expect("request");
        assert_eq!(send(&client, overloaded).await.0.status(), 529);
        eventually("the overload is recorded", || {
            site.state(flavor, token)
                .is_some_and(|s| s["overloads"] == 1)
        })
        .await;
        fake.release("overload");
        within("the rest", body.collect()).await.expect("the rest");
        eventually("the stream is settled", || {
            site.in_flight(flavor, token) == 0
        })
        .await;
        let state = site.state(flavor, token).expect("state");
        assert_eq!(
            state["overloads"], 1,
            "the overload answered after the stream's head is still counted: {state}"
        );
        proxy.stop().await;
    });
}

/// A JSON response is recorded once, as its body ends: its head's window with its usage in
/// one observation. While its body is still on its way (held after its first half), the
/// state shows nothing of it: its requests window is not yet counted there, the request is
/// still reserved in it.
#[test]
fn a_json_response_is_recorded_once_as_its_body_ends() {
    run(async {
        let flavor = Flavor::Anthropic;
        let token = "sk-json-held-not-real";
        let fake = Fake::start(flavor, GENEROUS).await;
        let site = Site::new();
        let proxy = start(config(&site, flavor, &fake));
        let client = client();
        windows_known(&client, &site, flavor, &proxy.url(), token).await;
        assert_eq!(window(&site, flavor, token, "requests").1, 999_999);
        let held = request(flavor, &proxy.url(), token)
            .header("x-test-hold", "json")
            .header("x-test-partial", "1")
            .body(Full::from(prompt(flavor, false)))
            .expect("request");
        let (response, _conn) = open_stream(proxy.addr, held).await;
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        within("the first half", body.frame())
            .await
            .expect("a frame")
            .expect("data");
        lane_passed(&client, flavor, &proxy.url(), token).await;
        eventually("the plain refusal's reservation is given back", || {
            site.in_flight(flavor, token) <= 1
        })
        .await;
        assert_eq!(
            window(&site, flavor, token, "requests"),
            (1, 999_999),
            "the held response's head is not recorded before its body ends: its request is \
             reserved, its window not seen ({})",
            site.state(flavor, token).expect("state")
        );
        assert!(
            reserved(&site, flavor, token)["requests"].is_u64(),
            "the request is still reserved"
        );
        fake.release("json");
        within("the rest", body.collect()).await.expect("the rest");
        eventually("the response's end settles it", || {
            site.in_flight(flavor, token) == 0
        })
        .await;
        assert_eq!(
            window(&site, flavor, token, "requests"),
            (0, 999_998),
            "its head's window, recorded with its usage ({})",
            site.state(flavor, token).expect("state")
        );
        proxy.stop().await;
    });
}
