//! More callers than the window allows, against a fake that behaves as the providers do
//! ([`fake::as_it_is`]): Anthropic's token bucket with resets cut to the whole second,
//! OpenAI's windows started anywhere with rounded resets and 429s without `retry-after`.
//! Through the proxy the provider refuses nothing: at most the window's limit goes after each
//! reset, however many callers waited for it.

use super::*;
use fake::as_it_is;

/// `clients` clients, each sending `each` requests one after another through `proxy`; the
/// statuses, with the body of each that was not 200.
async fn clients(
    flavor: Flavor,
    base: &str,
    token: &str,
    clients: usize,
    each: usize,
) -> Vec<(u16, String)> {
    let client = client();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..clients {
        let client = client.clone();
        let (base, token) = (base.to_owned(), token.to_owned());
        tasks.spawn(async move {
            let mut statuses = Vec::new();
            for n in 0..each {
                let request = request(flavor, &base, &token)
                    .body(Full::from(prompt(flavor, (i + n) % 2 == 0)))
                    .expect("request");
                let (head, body) = send(&client, request).await;
                let text = if head.status() == 200 {
                    String::new()
                } else {
                    String::from_utf8_lossy(&body).into_owned()
                };
                statuses.push((head.status().as_u16(), text));
            }
            statuses
        });
    }
    let mut all = Vec::new();
    while let Some(statuses) = tasks.join_next().await {
        all.extend(statuses.expect("a client"));
    }
    all
}

/// A proxy in front of `fake` whose callers may wait a minute (the tests count the
/// provider's refusals, not the proxy's).
fn patient(site: &Site, flavor: Flavor, fake: &Fake) -> Running {
    start(worklane_proxy::Config {
        max_wait: Duration::from_secs(60),
        ..config(site, flavor, fake)
    })
}

/// Six callers wait on a spent window of two: at each reset two go, and the provider refuses
/// none of them.
fn six_waiters_on_a_window_of_two(flavor: Flavor) {
    run(async {
        let token = format!("sk-herd-six-{flavor:?}-not-real");
        let limits = Limits {
            window_ms: 2_000,
            requests: 2,
            tokens: 1_000_000,
        };
        let fake = Fake::start_as(flavor, limits, as_it_is(flavor)).await;
        let site = Site::new();
        let proxy = patient(&site, flavor, &fake);
        // The window's two, one after the other: it is known, and spent.
        let warm = clients(flavor, &proxy.url(), &token, 1, 2).await;
        assert!(warm.iter().all(|(s, _)| *s == 200), "{warm:?}");
        eventually("the spent window is recorded", || {
            site.state(flavor, &token)
                .is_some_and(|s| s["resources"]["requests"]["remaining"] == 0)
        })
        .await;
        let waited = clients(flavor, &proxy.url(), &token, 6, 1).await;
        let failed: Vec<_> = waited.iter().filter(|(s, _)| *s != 200).collect();
        assert!(
            failed.is_empty(),
            "each waiter went in its turn: {failed:?}"
        );
        assert_eq!(
            fake.counts(|c| (c.served, c.too_many)),
            (8, 0),
            "the provider served all eight and refused none"
        );
        proxy.stop().await;
    });
}

#[test]
fn anthropic_six_waiters_on_a_window_of_two_meet_no_upstream_429() {
    six_waiters_on_a_window_of_two(Flavor::Anthropic);
}

#[test]
fn openai_six_waiters_on_a_window_of_two_meet_no_upstream_429() {
    six_waiters_on_a_window_of_two(Flavor::Openai);
}

/// Eight clients, three requests each, at four a window whose resets are written to the
/// whole second (Anthropic) or rounded (OpenAI): none meets the provider's 429.
fn eight_clients_at_four_a_window(flavor: Flavor) {
    run(async {
        let token = format!("sk-herd-eight-{flavor:?}-not-real");
        let limits = Limits {
            window_ms: 2_000,
            requests: 4,
            tokens: 1_000_000,
        };
        let fake = Fake::start_as(flavor, limits, as_it_is(flavor)).await;
        let site = Site::new();
        let proxy = patient(&site, flavor, &fake);
        // Until a response says the window, nothing counts (the first calls of a key never
        // seen go as they come): one call first, as a fleet that has run before.
        let warm = clients(flavor, &proxy.url(), &token, 1, 1).await;
        assert_eq!(warm[0].0, 200, "{warm:?}");
        let all = clients(flavor, &proxy.url(), &token, 8, 3).await;
        let failed: Vec<_> = all.iter().filter(|(s, _)| *s != 200).collect();
        assert!(failed.is_empty(), "every call succeeded: {failed:?}");
        assert_eq!(
            fake.counts(|c| (c.served, c.too_many)),
            (25, 0),
            "no upstream 429: {:?}",
            logs()
                .iter()
                .filter(|l| l.starts_with("WARN") || l.starts_with("INFO"))
                .collect::<Vec<_>>()
        );
        proxy.stop().await;
    });
}

#[test]
fn anthropic_eight_clients_at_four_a_window_meet_no_upstream_429() {
    eight_clients_at_four_a_window(Flavor::Anthropic);
}

#[test]
fn openai_eight_clients_at_four_a_window_meet_no_upstream_429() {
    eight_clients_at_four_a_window(Flavor::Openai);
}

/// OpenAI's 429 without `retry-after` (optional there) pauses the key until the reset its own
/// headers say, not for a default minute: the next call goes after it.
#[test]
fn a_429_without_retry_after_waits_for_its_own_reset() {
    run(async {
        let flavor = Flavor::Openai;
        let token = "sk-no-retry-after-not-real";
        let limits = Limits {
            window_ms: 3_000,
            requests: 1,
            tokens: 1_000_000,
        };
        let fake = Fake::start_as(flavor, limits, as_it_is(flavor)).await;
        let site = Site::new();
        let proxy = start(worklane_proxy::Config {
            max_wait: Duration::from_secs(10),
            ..config(&site, flavor, &fake)
        });
        let client = client();
        // Another user of the key spends the window directly, unseen by the ledger.
        let direct = request(flavor, &fake.url(), token)
            .body(Full::from(prompt(flavor, false)))
            .expect("request");
        assert_eq!(send(&client, direct).await.0.status(), 200);
        let ask = || {
            request(flavor, &proxy.url(), token)
                .body(Full::from(prompt(flavor, false)))
                .expect("request")
        };
        let (head, _) = send(&client, ask()).await;
        assert_eq!(head.status(), 429, "the provider's own refusal");
        assert!(head.headers().get("retry-after").is_none());
        eventually("the pause is recorded", || {
            site.state(flavor, token)
                .is_some_and(|s| s["pausedUntil"].is_u64())
        })
        .await;
        let state = site.state(flavor, token).expect("state");
        let paused = state["pausedUntil"].as_u64().expect("until")
            - state["updatedAt"].as_u64().expect("at");
        assert!(
            paused <= 3_000 + 1_000,
            "until the window's reset (rounded up), not a minute: {paused} ms"
        );
        let (head, _) = send(&client, ask()).await;
        assert_eq!(head.status(), 200, "the next call goes after the reset");
        assert_eq!(fake.counts(|c| c.too_many), 1, "the one refusal, no other");
        proxy.stop().await;
    });
}

/// A pause longer than the proxy may hold a caller is answered at once, with its
/// `retry-after`: waiting would only give the same answer later.
#[test]
fn a_pause_longer_than_the_wait_is_answered_at_once() {
    run(async {
        let flavor = Flavor::Anthropic;
        let token = "sk-ant-long-pause-not-real";
        let fake = Fake::start(flavor, GENEROUS).await;
        let site = Site::new();
        let proxy = start(worklane_proxy::Config {
            max_wait: Duration::from_secs(30),
            ..config(&site, flavor, &fake)
        });
        let client = client();
        let ask = || {
            request(flavor, &proxy.url(), token)
                .body(Full::from(prompt(flavor, false)))
                .expect("request")
        };
        fake.force_429(60);
        assert_eq!(send(&client, ask()).await.0.status(), 429);
        eventually("the pause is recorded", || {
            site.state(flavor, token)
                .is_some_and(|s| s["pausedUntil"].is_u64())
        })
        .await;
        let asked = std::time::Instant::now();
        let (head, body) = send(&client, ask()).await;
        // Bounded by the wait the proxy would otherwise have held it (30 s), not by speed.
        assert!(
            asked.elapsed() < Duration::from_secs(15),
            "answered at once, not after the wait: {:?}",
            asked.elapsed()
        );
        assert_eq!(head.status(), 429);
        assert_eq!(
            head.headers()[worklane_proxy::ANSWERED_HEADER],
            "secondary_rate_limited"
        );
        let retry: u64 = head.headers()["retry-after"]
            .to_str()
            .expect("text")
            .parse()
            .expect("seconds");
        assert!((55..=60).contains(&retry), "the pause's end: {retry}");
        assert!(String::from_utf8_lossy(&body).contains("rate_limit_error"));
        assert_eq!(
            fake.counts(|c| c.seen.len()),
            1,
            "the upstream was not asked"
        );
        proxy.stop().await;
    });
}

/// How many calls of `token` the state shows waiting.
fn waiting(site: &Site, flavor: Flavor, token: &str) -> u64 {
    site.state(flavor, token)
        .and_then(|s| {
            s["waiting"]
                .as_object()
                .map(|w| w.values().filter_map(|v| v["calls"].as_u64()).sum::<u64>())
        })
        .unwrap_or(0)
}

/// Callers that wait for a spent window go in the order they came: one a reset here, four
/// waiting, and each reset serves the one that has waited longest, not whichever's timer
/// fires first.
#[test]
fn waiting_callers_go_in_the_order_they_came() {
    run(async {
        let flavor = Flavor::Anthropic;
        let token = "sk-ant-in-line-not-real";
        let limits = Limits {
            window_ms: 1_000,
            requests: 1,
            tokens: 1_000_000,
        };
        let fake = Fake::start_as(flavor, limits, as_it_is(flavor)).await;
        let site = Site::new();
        let proxy = patient(&site, flavor, &fake);
        let warm = clients(flavor, &proxy.url(), token, 1, 1).await;
        assert_eq!(warm[0].0, 200, "{warm:?}");
        eventually("the spent window is recorded", || {
            site.state(flavor, token)
                .is_some_and(|s| s["resources"]["requests"]["remaining"] == 0)
        })
        .await;
        let client = client();
        let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
        for n in 0..4u64 {
            let (client, base, done_tx) = (client.clone(), proxy.url(), done_tx.clone());
            tokio::spawn(async move {
                let ask = request(flavor, &base, token)
                    .body(Full::from(prompt(flavor, false)))
                    .expect("request");
                let (head, _) = send(&client, ask).await;
                done_tx
                    .send((n, head.status().as_u16()))
                    .expect("the test listens");
            });
            // Each one waits before the next comes.
            eventually("the caller waits (or has gone)", || {
                waiting(&site, flavor, token) + fake.counts(|c| c.served) as u64 > n + 1
            })
            .await;
        }
        drop(done_tx);
        let mut order = Vec::new();
        while let Some(one) = done.recv().await {
            order.push(one);
        }
        assert_eq!(
            order,
            vec![(0, 200), (1, 200), (2, 200), (3, 200)],
            "served in the order they came"
        );
        assert_eq!(fake.counts(|c| (c.served, c.too_many)), (5, 0));
        proxy.stop().await;
    });
}

/// The `budget-refused` lines of `site`'s journal.
fn refusals_journaled(site: &Site) -> usize {
    std::fs::read_to_string(site.temp.path().join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"budget-refused\""))
        .count()
}

/// A request that waits is shown waiting (in the state, and so in `budget show`, `metrics`
/// and `top`) while it waits, and the calls in flight are shown; a client refused after its
/// whole wait is one `budget-refused` event, however often its take was tried.
#[test]
fn a_waiting_request_is_shown_and_its_refusal_journaled_once() {
    run(async {
        let flavor = Flavor::Anthropic;
        let token = "sk-ant-waiting-not-real";
        let fake = Fake::start(
            flavor,
            Limits {
                window_ms: 60_000,
                requests: 100,
                tokens: 400,
            },
        )
        .await;
        let site = Site::new();
        let impatient = start(worklane_proxy::Config {
            max_wait: Duration::from_millis(2_500),
            ..config(&site, flavor, &fake)
        });
        let patient = start(worklane_proxy::Config {
            max_wait: Duration::from_secs(30),
            ..config(&site, flavor, &fake)
        });
        let client = client();
        let ask = move |base: &str| {
            request(flavor, base, token)
                .body(Full::from(prompt(flavor, false)))
                .expect("request")
        };
        assert_eq!(send(&client, ask(&impatient.url())).await.0.status(), 200);
        eventually("the tokens window is recorded", || {
            site.state(flavor, token)
                .is_some_and(|s| s["resources"]["tokens"]["remaining"].is_u64())
        })
        .await;
        // A direct taker holds all but 10 of the tokens left: the next request waits for
        // them (they may come back), it is not refused at once.
        let state = site.state(flavor, token).expect("state");
        let left = state["resources"]["tokens"]["remaining"]
            .as_u64()
            .expect("remaining")
            - state["resources"]["tokens"]["granted"]
                .as_u64()
                .unwrap_or(0);
        let ledger = site.ledger();
        let key = CredentialKey::of_token(token);
        let held = ledger
            .take_model_within(
                &flavor.provider(),
                &key,
                Need {
                    input_tokens: left - 10,
                    output_tokens: 0,
                },
                "direct",
                0,
            )
            .expect("the direct take goes");
        let reservation = held.reservation.expect("a reservation");
        let waits = |site: &Site| waiting(site, flavor, token);
        let refused = tokio::spawn({
            let (client, base) = (client.clone(), impatient.url());
            async move { send(&client, ask(&base)).await }
        });
        eventually("the request is shown waiting", || waits(&site) == 1).await;
        let health = ledger.health_report().expect("the health view");
        let view = &health.views[0];
        assert_eq!((view.in_flight, view.waiting), (1, 1), "{view:?}");
        let tokens = view
            .resources
            .iter()
            .find(|r| r.name == "tokens")
            .expect("tokens");
        assert_eq!(
            tokens.in_flight,
            left - 10,
            "the direct reservation's tokens"
        );
        let (head, body) = within("the refusal", refused).await.expect("the request");
        assert_eq!(head.status(), 429);
        assert_eq!(
            head.headers()[worklane_proxy::ANSWERED_HEADER],
            "rate_limited"
        );
        assert!(String::from_utf8_lossy(&body).contains("waited"));
        // The lane journals the refusal after the client has its answer: waited for.
        eventually("the refusal journaled", || refusals_journaled(&site) > 0).await;
        eventually("no longer waiting", || waits(&site) == 0).await;
        assert_eq!(
            refusals_journaled(&site),
            1,
            "one event for the one refused client, not one per try"
        );
        // Another waits, and goes when the direct taker gives its tokens back.
        let goes = tokio::spawn({
            let (client, base) = (client.clone(), patient.url());
            async move { send(&client, ask(&base)).await.0.status() }
        });
        eventually("the second is shown waiting", || waits(&site) == 1).await;
        assert!(matches!(
            ledger.release(&flavor.provider(), &key, &reservation),
            worklane_budget::Observed::Recorded
        ));
        assert_eq!(within("the second", goes).await.expect("request"), 200);
        assert_eq!(refusals_journaled(&site), 1, "no refusal: it went");
        impatient.stop().await;
        patient.stop().await;
    });
}

/// A request that waits longer than the 5 s after which a word of waiting is no longer
/// counted is still shown waiting (its lane says so again every second), and no longer once
/// it goes.
#[test]
fn a_request_waiting_past_five_seconds_is_still_shown_and_not_once_it_went() {
    run(async {
        let flavor = Flavor::Anthropic;
        let token = "sk-ant-long-wait-not-real";
        let fake = Fake::start(
            flavor,
            Limits {
                window_ms: 60_000,
                requests: 100,
                tokens: 400,
            },
        )
        .await;
        let site = Site::new();
        let proxy = start(worklane_proxy::Config {
            max_wait: Duration::from_secs(50),
            ..config(&site, flavor, &fake)
        });
        let client = client();
        let ask = move |base: &str| {
            request(flavor, base, token)
                .body(Full::from(prompt(flavor, false)))
                .expect("request")
        };
        assert_eq!(send(&client, ask(&proxy.url())).await.0.status(), 200);
        eventually("the tokens window is recorded", || {
            site.state(flavor, token)
                .is_some_and(|s| s["resources"]["tokens"]["remaining"].is_u64())
        })
        .await;
        // A direct taker holds all but 10 of the tokens left: the next request waits.
        let state = site.state(flavor, token).expect("state");
        let left = state["resources"]["tokens"]["remaining"]
            .as_u64()
            .expect("remaining")
            - state["resources"]["tokens"]["granted"]
                .as_u64()
                .unwrap_or(0);
        let ledger = site.ledger();
        let key = CredentialKey::of_token(token);
        let held = ledger
            .take_model_within(
                &flavor.provider(),
                &key,
                Need {
                    input_tokens: left - 10,
                    output_tokens: 0,
                },
                "direct",
                0,
            )
            .expect("the direct take goes");
        let waits = tokio::spawn({
            let (client, base) = (client.clone(), proxy.url());
            async move { send(&client, ask(&base)).await.0.status() }
        });
        eventually("the request is shown waiting", || {
            waiting(&site, flavor, token) == 1
        })
        .await;
        tokio::time::sleep(Duration::from_secs(6)).await;
        let health = ledger.health_report().expect("the health view");
        assert_eq!(
            health.views[0].waiting,
            1,
            "after 6 s its word is fresh: {:?}",
            site.state(flavor, token)
        );
        assert!(!waits.is_finished(), "it still waits");
        assert!(matches!(
            ledger.release(
                &flavor.provider(),
                &key,
                &held.reservation.expect("a reservation")
            ),
            worklane_budget::Observed::Recorded
        ));
        assert_eq!(within("the request", waits).await.expect("request"), 200);
        // The lane's calls are in order, and it says how many wait after each batch of them:
        // once the second of two calls queued after the request went has been answered (the
        // first may have been in the batch of its going), the state says what the lane said.
        for _ in 0..2 {
            let after = request(flavor, &proxy.url(), token)
                .header("x-test-status", "400")
                .body(Full::from(prompt(flavor, false)))
                .expect("request");
            assert_eq!(send(&client, after).await.0.status(), 400);
        }
        assert_eq!(
            waiting(&site, flavor, token),
            0,
            "no longer waiting: {:?}",
            site.state(flavor, token)
        );
        proxy.stop().await;
    });
}
