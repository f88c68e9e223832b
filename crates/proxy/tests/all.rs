//! The proxy against a fake provider on loopback (a real HTTP server enforcing its own
//! limits, with each provider's headers and streams), real ledger files in a slot directory
//! of the test's own, and real connections.

mod claude_code;
mod fake;
mod herd;
mod sdk;
mod settle;
mod support;

use fake::{Fake, Flavor, GENEROUS, Limits};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use std::time::Duration;
use support::*;
use worklane_budget::{CredentialKey, Need, Refused};

mod shared_budget {
    //! The budget is the machine's: clients through one proxy or several, and direct takers,
    //! draw from the same files.
    use super::*;

    /// The fake's limits: 40 requests and 4 000 tokens a second, so that 200 requests take
    /// about five windows through the proxy and blow through the first one when sent
    /// directly. A request is some 230 bytes asking for 64 tokens.
    const LIMITS: Limits = Limits {
        window_ms: 1_000,
        requests: 40,
        tokens: 4_000,
    };
    const CLIENTS: usize = 8;
    const EACH: usize = 25;

    /// Each of 8 clients sends 25 requests, one after another, to `base(i)`, half of them
    /// streamed; the statuses of all 200.
    async fn eight_clients(
        flavor: Flavor,
        token: &str,
        base: impl Fn(usize) -> String,
    ) -> Vec<(u16, String)> {
        let client = client();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..CLIENTS {
            let client = client.clone();
            let base = base(i);
            let token = token.to_owned();
            tasks.spawn(async move {
                let mut statuses = Vec::new();
                for n in 0..EACH {
                    let stream = (i + n) % 2 == 0;
                    let request = request(flavor, &base, &token)
                        .body(Full::from(prompt(flavor, stream)))
                        .expect("request");
                    let (head, body) = send(&client, request).await;
                    if head.status() == 200 && stream {
                        assert!(
                            String::from_utf8_lossy(&body).contains("usage"),
                            "a stream comes whole"
                        );
                    }
                    let text = if head.status() == 200 {
                        String::new()
                    } else {
                        format!("{:?} {}", head.headers(), String::from_utf8_lossy(&body))
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

    fn through_the_proxy_none_is_refused_where_direct_calls_are(flavor: Flavor) {
        run(async {
            let token = format!("sk-shared-{flavor:?}-not-real");
            let direct = Fake::start(flavor, LIMITS).await;
            let statuses = eight_clients(flavor, &token, |_| direct.url()).await;
            let refused = direct.counts(|c| c.too_many);
            assert!(
                refused > 0,
                "sent directly, the 8 clients run into the provider's limit"
            );
            assert_eq!(
                statuses.iter().filter(|(s, _)| *s == 429).count() as u64,
                refused,
                "each of the provider's refusals is a 429 to its client"
            );

            let fake = Fake::start(flavor, LIMITS).await;
            let site = Site::new();
            // Two proxies on the same slot directory, four clients each.
            let a = start(config(&site, flavor, &fake));
            let b = start(config(&site, flavor, &fake));
            let (url_a, url_b) = (a.url(), b.url());
            let statuses = eight_clients(flavor, &token, |i| {
                if i % 2 == 0 {
                    url_a.clone()
                } else {
                    url_b.clone()
                }
            })
            .await;
            let (served, too_many) = fake.counts(|c| (c.served, c.too_many));
            let troubles: Vec<String> = logs()
                .into_iter()
                .filter(|l| l.starts_with("WARN"))
                .collect();
            assert_eq!(
                too_many, 0,
                "through the proxies, the provider refuses nothing: {troubles:?}"
            );
            assert_eq!(served, 200, "every request reached the provider once");
            let failed: Vec<&(u16, String)> = statuses.iter().filter(|(s, _)| *s != 200).collect();
            assert!(
                failed.is_empty(),
                "every request succeeded: {failed:?} {troubles:?}"
            );
            a.stop().await;
            b.stop().await;
            assert_eq!(
                site.in_flight(flavor, &token),
                0,
                "nothing is left in flight"
            );
        });
    }

    #[test]
    fn anthropic_eight_clients_200_requests_no_upstream_429() {
        through_the_proxy_none_is_refused_where_direct_calls_are(Flavor::Anthropic);
    }

    #[test]
    fn openai_eight_clients_200_requests_no_upstream_429() {
        through_the_proxy_none_is_refused_where_direct_calls_are(Flavor::Openai);
    }

    #[test]
    fn what_a_proxy_takes_a_direct_taker_sees_in_the_same_files() {
        run(async {
            let flavor = Flavor::Anthropic;
            let token = "sk-ant-files-not-real";
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let (head, _) = send(
                &client(),
                request(flavor, &proxy.url(), token)
                    .body(Full::from(prompt(flavor, false)))
                    .expect("request"),
            )
            .await;
            assert_eq!(head.status(), 200);
            eventually(
                "the response is recorded and its reservation settled",
                || {
                    site.state(flavor, token)
                        .is_some_and(|s| s["resources"]["requests"].is_object())
                        && site.in_flight(flavor, token) == 0
                },
            )
            .await;
            let state = site.state(flavor, token).expect("state");
            assert_eq!(
                state["resources"]["requests"]["remaining"], 999_999,
                "the provider's own count, from its headers: {state}"
            );
            let grant = site
                .ledger()
                .take_model(
                    &flavor.provider(),
                    &CredentialKey::of_token(token),
                    Need::default(),
                    "direct",
                )
                .expect("a direct take goes");
            assert_eq!(
                grant.left,
                Some(999_998),
                "a direct taker counts what the proxy's request used"
            );
            proxy.stop().await;
        });
    }
}

mod pause {
    //! One provider 429 pauses every client of the key, through any proxy, and every direct
    //! taker; past the wait the proxy answers 429 itself, in the provider's shape.
    use super::*;

    fn one_429_pauses_everyone(flavor: Flavor) {
        run(async {
            let token = format!("sk-pause-{flavor:?}-not-real");
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let impatient = start(worklane_proxy::Config {
                max_wait: Duration::ZERO,
                ..config(&site, flavor, &fake)
            });
            let client = client();
            fake.force_429(2);
            let (head, body) = send(
                &client,
                request(flavor, &proxy.url(), &token)
                    .body(Full::from(prompt(flavor, false)))
                    .expect("request"),
            )
            .await;
            assert_eq!(head.status(), 429, "the provider's 429 comes back");
            assert!(
                head.headers()
                    .get(worklane_proxy::ANSWERED_HEADER)
                    .is_none(),
                "unchanged: the provider's own answer"
            );
            assert!(String::from_utf8_lossy(&body).contains("fake: rate limited"));
            let limited_at = fake.counts(|c| c.forced_at[0]);
            eventually("the pause is recorded", || {
                site.state(flavor, &token)
                    .is_some_and(|s| s["pausedUntil"].is_string() || s["pausedUntil"].is_number())
            })
            .await;

            // A direct taker of the same key is paused too.
            let direct = site.ledger().take_model_within(
                &flavor.provider(),
                &CredentialKey::of_token(&token),
                Need::default(),
                "direct",
                0,
            );
            assert!(
                matches!(direct, Err(Refused::SecondaryRateLimited { .. })),
                "a direct take waits for the pause: {direct:?}"
            );

            // A proxy that may not wait answers 429 itself, and the provider never hears of it.
            let before = fake.counts(|c| c.seen.len());
            let (head, body) = send(
                &client,
                request(flavor, &impatient.url(), &token)
                    .body(Full::from(prompt(flavor, false)))
                    .expect("request"),
            )
            .await;
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
            assert!(
                (1..=2).contains(&retry),
                "retry-after says the pause: {retry}"
            );
            let json: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            match flavor {
                Flavor::Anthropic => {
                    assert_eq!(json["type"], "error", "{json}");
                    assert_eq!(json["error"]["type"], "rate_limit_error", "{json}");
                }
                Flavor::Openai => {
                    assert_eq!(json["error"]["code"], "rate_limit_exceeded", "{json}");
                    assert!(json["error"]["message"].is_string(), "{json}");
                }
            }
            assert_eq!(
                fake.counts(|c| c.seen.len()),
                before,
                "the upstream was not asked"
            );

            // Eight patient clients all wait out the pause, then all succeed.
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..8 {
                let client = client.clone();
                let request = request(flavor, &proxy.url(), &token)
                    .body(Full::from(prompt(flavor, false)))
                    .expect("request");
                tasks.spawn(async move { send(&client, request).await.0.status() });
            }
            while let Some(status) = tasks.join_next().await {
                assert_eq!(status.expect("a client"), 200, "after the pause, each goes");
            }
            let arrivals: Vec<u64> =
                fake.counts(|c| c.seen.iter().skip(1).map(|s| s.at_ms).collect());
            assert_eq!(arrivals.len(), 8);
            for at in arrivals {
                assert!(
                    at >= limited_at + 2_000,
                    "no request reached the provider before the 2 s it asked for had passed \
                     ({} ms after its 429)",
                    at - limited_at
                );
            }
            proxy.stop().await;
            impatient.stop().await;
        });
    }

    #[test]
    fn anthropic_one_429_pauses_every_client_and_direct_taker() {
        one_429_pauses_everyone(Flavor::Anthropic);
    }

    #[test]
    fn openai_one_429_pauses_every_client_and_direct_taker() {
        one_429_pauses_everyone(Flavor::Openai);
    }

    /// A pause, or a spent requests window, that outlasts what is left of a request's wait
    /// is answered at once: the same refusal after the whole wait would only come later.
    /// (A spent tokens window waits: a reservation given back frees tokens.)
    #[test]
    fn a_refusal_sure_to_outlast_the_wait_is_answered_at_once() {
        run(async {
            let flavor = Flavor::Anthropic;
            let client = client();
            // Sooner than the wait: bounded so that a request that waits it out fails here.
            let at_once = Duration::from_secs(20);
            for spent in ["pause", "requests"] {
                let token = format!("sk-at-once-{spent}-not-real");
                let fake = Fake::start(
                    flavor,
                    Limits {
                        window_ms: 120_000,
                        requests: if spent == "requests" { 1 } else { 1_000 },
                        tokens: 1_000_000,
                    },
                )
                .await;
                let site = Site::new();
                let proxy = start(worklane_proxy::Config {
                    max_wait: Duration::from_secs(60),
                    ..config(&site, flavor, &fake)
                });
                let ask = || {
                    request(flavor, &proxy.url(), &token)
                        .body(Full::from(prompt(flavor, false)))
                        .expect("request")
                };
                if spent == "pause" {
                    fake.force_429(120);
                }
                send(&client, ask()).await;
                eventually("the first answer is recorded", || {
                    site.state(flavor, &token).is_some() && site.in_flight(flavor, &token) == 0
                })
                .await;
                let (head, _) = tokio::time::timeout(at_once, send(&client, ask()))
                    .await
                    .unwrap_or_else(|_| panic!("{spent}: refused at once, not after the wait"));
                assert_eq!(head.status(), 429, "{spent}");
                assert!(
                    head.headers().contains_key(worklane_proxy::ANSWERED_HEADER),
                    "{spent}: the proxy's own answer"
                );
                assert_eq!(fake.counts(|c| c.seen.len()), 1, "{spent}: not sent");
                proxy.stop().await;
            }
        });
    }

    #[test]
    fn a_spent_window_is_refused_in_the_provider_s_shape_naming_the_dimension() {
        run(async {
            let flavor = Flavor::Openai;
            let token = "sk-spent-not-real";
            // One request a minute.
            let fake = Fake::start(
                flavor,
                Limits {
                    window_ms: 60_000,
                    requests: 1,
                    tokens: 1_000_000,
                },
            )
            .await;
            let site = Site::new();
            let proxy = start(worklane_proxy::Config {
                max_wait: Duration::from_millis(300),
                ..config(&site, flavor, &fake)
            });
            let client = client();
            let ask = || {
                request(flavor, &proxy.url(), token)
                    .body(Full::from(prompt(flavor, false)))
                    .expect("request")
            };
            assert_eq!(send(&client, ask()).await.0.status(), 200);
            eventually("the window is recorded", || {
                site.state(flavor, token)
                    .is_some_and(|s| s["resources"]["requests"]["remaining"] == 0)
            })
            .await;
            let (head, body) = send(&client, ask()).await;
            assert_eq!(head.status(), 429);
            assert_eq!(
                head.headers()[worklane_proxy::ANSWERED_HEADER],
                "rate_limited"
            );
            let json: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            assert_eq!(json["error"]["type"], "requests", "{json}");
            assert!(
                json["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("waited")),
                "{json}"
            );
            assert_eq!(
                fake.counts(|c| c.seen.len()),
                1,
                "the second was never sent"
            );
            assert_eq!(
                site.in_flight(flavor, token),
                0,
                "a refusal reserves nothing"
            );
            proxy.stop().await;
        });
    }
}

mod streaming {
    //! Responses stream through as they come; a client that goes away frees its reservation.
    use super::*;

    fn held_stream(
        flavor: Flavor,
        base: &str,
        token: &str,
        hold: &str,
    ) -> http::Request<Full<Bytes>> {
        request(flavor, base, token)
            .header("x-test-hold", hold)
            .body(Full::from(prompt(flavor, true)))
            .expect("request")
    }

    #[test]
    fn the_first_event_reaches_the_client_before_the_provider_has_finished() {
        for flavor in [Flavor::Anthropic, Flavor::Openai] {
            run(async {
                let token = format!("sk-first-{flavor:?}-not-real");
                let fake = Fake::start(flavor, GENEROUS).await;
                let site = Site::new();
                let proxy = start(config(&site, flavor, &fake));
                let (response, _conn) = open_stream(
                    proxy.addr,
                    held_stream(flavor, &proxy.url(), &token, "first"),
                )
                .await;
                assert_eq!(response.status(), 200);
                assert_eq!(response.headers()["content-type"], "text/event-stream");
                let mut body = response.into_body();
                // The provider holds the rest until released below: the first event can only
                // have come through unbuffered.
                let first = within("the first event", body.frame())
                    .await
                    .expect("a frame")
                    .expect("data")
                    .into_data()
                    .expect("data");
                let first = String::from_utf8_lossy(&first).into_owned();
                assert!(
                    first.starts_with("event: message_start") || first.starts_with("data: "),
                    "{first}"
                );
                // Its head reported every dimension: it counts the request from the first byte,
                // and settles the reservation while the stream goes on.
                eventually("the head's windows are recorded while it streams", || {
                    site.state(flavor, &token)
                        .is_some_and(|s| s["resources"]["tokens"].is_object())
                        && site.in_flight(flavor, &token) == 0
                })
                .await;
                fake.release("first");
                let rest = within("the rest", body.collect())
                    .await
                    .expect("the rest")
                    .to_bytes();
                let text = format!("{first}{}", String::from_utf8_lossy(&rest));
                assert!(text.contains("usage"), "the stream came whole: {text}");
                // A head that reports the requests alone leaves the reservation in flight until
                // the stream ends.
                let partial = held_stream(flavor, &proxy.url(), &token, "partial");
                let (mut parts, body) = partial.into_parts();
                parts
                    .headers
                    .insert("x-test-partial", "1".parse().expect("value"));
                let (response, _conn) =
                    open_stream(proxy.addr, http::Request::from_parts(parts, body)).await;
                let mut body = response.into_body();
                within("the first event", body.frame())
                    .await
                    .expect("a frame")
                    .expect("data");
                assert_eq!(
                    site.in_flight(flavor, &token),
                    1,
                    "reserved while it streams"
                );
                fake.release("partial");
                within("the rest", body.collect()).await.expect("the rest");
                eventually("the stream's end settles its reservation", || {
                    site.in_flight(flavor, &token) == 0
                })
                .await;
                // The head's requests window counted the request already: once it ends, the
                // request is not counted again as granted (it was, and the next request
                // waited for the window's reset).
                let state = site.state(flavor, &token).expect("state");
                assert_eq!(
                    state["resources"]["requests"]["granted"], 0,
                    "the request counted once, by the head's remaining: {state}"
                );
                proxy.stop().await;
            });
        }
    }

    #[test]
    fn a_client_gone_mid_stream_leaves_no_reservation_behind() {
        run(async {
            let flavor = Flavor::Anthropic;
            let token = "sk-gone-not-real";
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            // Its head reports the requests alone: the reservation stays in flight while it
            // streams.
            let (mut parts, body) = held_stream(flavor, &proxy.url(), token, "gone").into_parts();
            parts
                .headers
                .insert("x-test-partial", "1".parse().expect("value"));
            let (response, conn) =
                open_stream(proxy.addr, http::Request::from_parts(parts, body)).await;
            let mut body = response.into_body();
            within("the first event", body.frame())
                .await
                .expect("a frame")
                .expect("data");
            assert_eq!(
                site.in_flight(flavor, token),
                1,
                "reserved while it streams"
            );
            // The client dies: its connection closes with the stream unfinished.
            conn.abort();
            drop(body);
            eventually("the reservation of the stream cut short is settled", || {
                site.in_flight(flavor, token) == 0
            })
            .await;
            eventually("the provider's stream is cancelled too", || {
                fake.release("gone");
                fake.counts(|c| c.cancelled) == 1
            })
            .await;
            proxy.stop().await;
        });
    }

    #[test]
    fn a_request_that_gets_no_response_gives_its_reservation_back() {
        run(async {
            let flavor = Flavor::Openai;
            let token = "sk-unreachable-not-real";
            let site = Site::new();
            // A port nobody listens on: bound, then closed.
            let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let port = closed.local_addr().expect("addr").port();
            drop(closed);
            let proxy = start(worklane_proxy::Config {
                dir: Some(site.dir.clone()),
                ..worklane_proxy::Config::new(
                    flavor.provider(),
                    format!("http://127.0.0.1:{port}")
                        .parse()
                        .expect("upstream"),
                    worklane_proxy::Listen::loopback(0),
                )
            });
            let (head, body) = send(
                &client(),
                request(flavor, &proxy.url(), token)
                    .body(Full::from(prompt(flavor, false)))
                    .expect("request"),
            )
            .await;
            assert_eq!(head.status(), 502);
            assert_eq!(
                head.headers()[worklane_proxy::ANSWERED_HEADER],
                "upstream_unreachable"
            );
            let json: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            assert_eq!(json["error"]["type"], "server_error", "{json}");
            eventually("the reservation is given back", || {
                site.state(flavor, token).is_some() && site.in_flight(flavor, token) == 0
            })
            .await;
            proxy.stop().await;
        });
    }
}

mod forwarding {
    //! What reaches the provider, and what comes back.
    use super::*;

    #[test]
    fn method_path_query_and_headers_are_kept_hop_by_hop_ones_dropped_host_set() {
        run(async {
            let flavor = Flavor::Anthropic;
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let body = prompt(flavor, false);
            let request = http::Request::post(format!("{}/v1/messages?beta=true", proxy.url()))
                .header("x-api-key", "sk-forward-not-real")
                .header("anthropic-version", "2023-06-01")
                .header("anthropic-beta", "tools-2024")
                .header("connection", "x-hop")
                .header("x-hop", "1")
                .header("accept-encoding", "gzip")
                .body(Full::from(body.clone()))
                .expect("request");
            let (head, _) = send(&client(), request).await;
            assert_eq!(head.status(), 200);
            assert_eq!(head.headers()["x-test-body-len"], body.len().to_string());
            let seen = fake.counts(|c| c.seen[0].clone());
            assert_eq!(seen.method, "POST");
            assert_eq!(seen.uri, "/v1/messages?beta=true");
            assert_eq!(
                seen.headers["host"],
                fake.addr.to_string(),
                "Host is the upstream's"
            );
            assert_eq!(seen.headers["anthropic-beta"], "tools-2024");
            assert_eq!(
                seen.headers["x-api-key"], "sk-forward-not-real",
                "the key goes on"
            );
            assert_eq!(
                seen.headers["accept-encoding"], "identity",
                "asked uncompressed"
            );
            assert!(
                seen.headers.get("x-hop").is_none(),
                "named by Connection: not forwarded"
            );
            assert_eq!(seen.body_len, body.len(), "the body arrived whole");
            assert_eq!(seen.body_sum, fake::sum(body.as_bytes()), "byte for byte");
            proxy.stop().await;
        });
    }

    #[test]
    fn an_upstream_error_comes_back_unchanged() {
        run(async {
            let flavor = Flavor::Anthropic;
            let token = "sk-error-not-real";
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let ask = |base: &str| {
                request(flavor, base, token)
                    .header("x-test-status", "400")
                    .body(Full::from(prompt(flavor, false)))
                    .expect("request")
            };
            let client = client();
            let (direct, direct_body) = send(&client, ask(&fake.url())).await;
            let (proxied, proxied_body) = send(&client, ask(&proxy.url())).await;
            assert_eq!(proxied.status(), direct.status());
            assert_eq!(proxied.headers()["x-test-marker"], "from-the-upstream");
            assert_eq!(proxied_body, direct_body, "the body byte for byte");
            eventually("the response is settled", || {
                site.state(flavor, token).is_some() && site.in_flight(flavor, token) == 0
            })
            .await;
            proxy.stop().await;
        });
    }

    #[test]
    fn a_body_past_the_peek_streams_through_estimated_from_its_length() {
        run(async {
            let flavor = Flavor::Anthropic;
            let token = "sk-large-not-real";
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            // 1.5 MiB of prompt, `max_tokens` at the end, past what the proxy reads first.
            let padding = "x".repeat(3 << 19);
            let large = format!(
                r#"{{"model":"m","stream":true,"messages":[{{"role":"user","content":"{padding}"}}],"max_tokens":64}}"#
            );
            let small = prompt(flavor, true);
            for (text, hold, output) in [
                (&small, "small", 64u64),
                (&large, "large", worklane_proxy::DEFAULT_OUTPUT_TOKENS),
            ] {
                let request = request(flavor, &proxy.url(), token)
                    .header("x-test-hold", hold)
                    .header("x-test-partial", "1")
                    .body(Full::from(text.clone()))
                    .expect("request");
                let (response, _conn) = open_stream(proxy.addr, request).await;
                assert_eq!(
                    response.headers()["x-test-body-sum"],
                    fake::sum(text.as_bytes()).to_string(),
                    "the body reached the provider whole"
                );
                let units = || {
                    site.state(flavor, token)
                        .and_then(|state| {
                            state["inFlight"]
                                .as_object()
                                .and_then(|f| f.values().next())
                                .map(|r| r["units"].clone())
                        })
                        .unwrap_or_default()
                };
                // Its head reports the requests window alone: that dimension is settled by
                // it (the provider counted the request), the tokens stay reserved.
                eventually("the head's window settles the request", || {
                    let units = units();
                    units["tokens"].is_u64() && units.get("requests").is_none()
                })
                .await;
                let input = (text.len() as u64).div_ceil(worklane_proxy::BYTES_PER_TOKEN);
                let units = units();
                assert_eq!(units["tokens"], input + output, "{hold}: {units}");
                fake.release(hold);
                within("the end", response.into_body().collect())
                    .await
                    .expect("the rest");
                eventually("settled", || site.in_flight(flavor, token) == 0).await;
            }
            proxy.stop().await;
        });
    }

    /// A token count and a model list are no generation calls: with the window's last
    /// request still unused they go at once, take nothing (no reservation, the window's
    /// remaining untouched), and the message after them still gets the last request.
    #[test]
    fn calls_that_are_no_generation_take_nothing_from_the_budget() {
        run(async {
            let flavor = Flavor::Anthropic;
            let token = "sk-ant-count-not-real";
            // Two messages a minute: one spent below, one left.
            let fake = Fake::start(
                flavor,
                Limits {
                    window_ms: 60_000,
                    requests: 2,
                    tokens: 1_000_000,
                },
            )
            .await;
            let site = Site::new();
            let proxy = start(worklane_proxy::Config {
                max_wait: Duration::from_millis(300),
                ..config(&site, flavor, &fake)
            });
            let client = client();
            let message = || {
                request(flavor, &proxy.url(), token)
                    .body(Full::from(prompt(flavor, false)))
                    .expect("request")
            };
            assert_eq!(send(&client, message()).await.0.status(), 200);
            eventually("the window is recorded", || {
                site.state(flavor, token)
                    .is_some_and(|s| s["resources"]["requests"]["remaining"] == 1)
            })
            .await;
            for (method, path, body) in [
                ("POST", "/v1/messages/count_tokens", prompt(flavor, false)),
                ("POST", "/v1/messages/count_tokens", prompt(flavor, false)),
                ("GET", "/v1/models", String::new()),
            ] {
                let call = http::Request::builder()
                    .method(method)
                    .uri(format!("{}{path}", proxy.url()))
                    .header("x-api-key", token)
                    .header("content-type", "application/json")
                    .body(Full::from(body))
                    .expect("request");
                let (head, _) = send(&client, call).await;
                assert_eq!(head.status(), 200, "{method} {path}");
                assert!(
                    head.headers()
                        .get(worklane_proxy::ANSWERED_HEADER)
                        .is_none(),
                    "{method} {path}: the provider's answer, not the proxy's"
                );
            }
            assert_eq!(fake.counts(|c| c.apart), 3, "each reached the provider");
            let state = site.state(flavor, token).expect("state");
            assert_eq!(state["resources"]["requests"]["remaining"], 1, "{state}");
            assert_eq!(site.in_flight(flavor, token), 0, "nothing reserved");
            assert_eq!(
                send(&client, message()).await.0.status(),
                200,
                "the window's last request is still the message's"
            );
            proxy.stop().await;
        });
    }

    /// Anthropic's 529 (overloaded) is the provider's capacity, not the key's quota: it comes
    /// back to its client unchanged, and the key's next request goes after a backoff of a
    /// second, not after the minute a pause of the whole key took.
    #[test]
    fn an_overload_backs_off_a_second_not_the_key_s_minute() {
        run(async {
            let flavor = Flavor::Anthropic;
            let token = "sk-ant-overload-not-real";
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(worklane_proxy::Config {
                max_wait: Duration::from_secs(5),
                ..config(&site, flavor, &fake)
            });
            let client = client();
            let overloaded = request(flavor, &proxy.url(), token)
                .header("x-test-status", "529")
                .body(Full::from(prompt(flavor, false)))
                .expect("request");
            let (head, _) = send(&client, overloaded).await;
            assert_eq!(head.status(), 529, "the provider's answer, passed through");
            assert!(
                head.headers()
                    .get(worklane_proxy::ANSWERED_HEADER)
                    .is_none()
            );
            eventually("the backoff is recorded", || {
                site.state(flavor, token)
                    .is_some_and(|s| s["overloads"] == 1 && s["pausedUntil"].is_u64())
            })
            .await;
            let state = site.state(flavor, token).expect("state");
            let paused = state["pausedUntil"].as_u64().expect("until");
            let at = state["updatedAt"].as_u64().expect("at");
            assert!(
                paused.saturating_sub(at) <= 1_000,
                "a backoff of a second at most: {state}"
            );
            let next = request(flavor, &proxy.url(), token)
                .body(Full::from(prompt(flavor, false)))
                .expect("request");
            let (head, _) = send(&client, next).await;
            assert_eq!(
                head.status(),
                200,
                "the next request goes within the proxy's 5 s wait"
            );
            proxy.stop().await;
        });
    }

    #[test]
    fn a_request_without_a_key_is_forwarded_unaccounted() {
        run(async {
            let flavor = Flavor::Openai;
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let request = http::Request::get(format!("{}/v1/models", proxy.url()))
                .body(Full::from(""))
                .expect("request");
            let (head, _) = send(&client(), request).await;
            assert_eq!(head.status(), 200);
            proxy.stop().await;
            let files: Vec<String> = std::fs::read_dir(site.temp.path())
                .expect("dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("budget"))
                .collect();
            assert!(files.is_empty(), "no budget was touched: {files:?}");
        });
    }
}

mod secrets {
    //! The key appears in no file, no log and no answer of the proxy.
    use super::*;

    #[test]
    fn a_key_appears_in_no_file_log_or_answer() {
        run(async {
            let flavor = Flavor::Anthropic;
            let token = "sk-ant-SECRET-c0ffee-not-real";
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let impatient = start(worklane_proxy::Config {
                max_wait: Duration::ZERO,
                ..config(&site, flavor, &fake)
            });
            let client = client();
            let mut answers = Vec::new();
            let ask = |base: &str, stream: bool| {
                request(flavor, base, token)
                    .body(Full::from(prompt(flavor, stream)))
                    .expect("request")
            };
            for stream in [false, true] {
                answers.push(send(&client, ask(&proxy.url(), stream)).await);
            }
            fake.force_429(30);
            answers.push(send(&client, ask(&proxy.url(), false)).await);
            eventually("the pause is recorded", || {
                site.state(flavor, token)
                    .is_some_and(|s| !s["pausedUntil"].is_null())
            })
            .await;
            answers.push(send(&client, ask(&impatient.url(), false)).await);
            assert_eq!(answers[3].0.status(), 429, "refused by the proxy");
            proxy.stop().await;
            impatient.stop().await;
            for (head, body) in &answers {
                assert!(
                    !String::from_utf8_lossy(body).contains(token),
                    "an answer's body"
                );
                for value in head.headers().values() {
                    assert!(
                        !value.to_str().unwrap_or("").contains(token),
                        "an answer's header"
                    );
                }
            }
            let mut files = 0;
            for entry in std::fs::read_dir(site.temp.path()).expect("dir") {
                let path = entry.expect("entry").path();
                if path.is_file() {
                    files += 1;
                    let bytes = std::fs::read(&path).expect("read");
                    assert!(
                        !String::from_utf8_lossy(&bytes).contains(token),
                        "{} holds the key",
                        path.display()
                    );
                    assert!(
                        !path.to_string_lossy().contains(token),
                        "a file is named by the key"
                    );
                }
            }
            assert!(files > 0, "the ledger wrote its files");
            let logs = logs();
            assert!(!logs.is_empty(), "the proxy logged");
            for line in logs {
                assert!(!line.contains(token), "a log line holds the key: {line}");
            }
        });
    }
}

mod unix_socket {
    //! On a Unix socket: only root, the directory's owner and its group are served.
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use worklane_testkit::Gated;

    fn unix_config(site: &Site, fake: &Fake, path: &std::path::Path) -> worklane_proxy::Config {
        worklane_proxy::Config {
            listen: worklane_proxy::Listen::Unix(path.to_owned()),
            ..config(site, Flavor::Anthropic, fake)
        }
    }

    /// `GET /v1/models` over the socket, as uid 65534 in `groups`; the status line.
    fn get_as_nobody(socket: &std::path::Path, groups: &str) -> String {
        let script = "import socket,sys\n\
            s=socket.socket(socket.AF_UNIX)\n\
            s.connect(sys.argv[1])\n\
            s.sendall(b'GET /v1/models HTTP/1.1\\r\\nHost: proxy\\r\\nConnection: close\\r\\n\\r\\n')\n\
            print(s.makefile('rb').readline().decode().strip())\n";
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534"]);
        match groups {
            "" => cmd.arg("--clear-groups"),
            some => cmd.arg(format!("--groups={some}")),
        };
        let out = cmd
            .args(["/usr/bin/python3", "-c", script])
            .arg(socket)
            .output_gated()
            .expect("python3 under setpriv");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    #[test]
    fn only_root_the_owner_and_the_directory_s_group_are_served() {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test connects as user 65534 with setpriv and must start as root"
        );
        run(async {
            let fake = Fake::start(Flavor::Anthropic, GENEROUS).await;
            let site = Site::new();
            // The directory's group is 4343; its owner root.
            std::os::unix::fs::chown(site.temp.path(), None, Some(4343)).expect("chgrp");
            let site = Site {
                dir: worklane_slotfile::SlotDir::open(site.temp.path()).expect("reopen"),
                temp: site.temp,
            };
            let sockets = tempfile::tempdir().expect("temp dir");
            std::fs::set_permissions(sockets.path(), std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
            let path = sockets.path().join("proxy.sock");
            let proxy =
                worklane_proxy::Proxy::bind(unix_config(&site, &fake, &path)).expect("bind");
            let mode = std::fs::metadata(&path)
                .expect("socket")
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o660, "the socket is the group's");
            let trigger = proxy.trigger();
            let done = tokio::spawn(proxy.serve(std::future::pending()));
            // Root is served.
            let stream = tokio::net::UnixStream::connect(&path)
                .await
                .expect("connect");
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .expect("handshake");
            tokio::spawn(conn);
            let response = sender
                .send_request(
                    http::Request::get("/v1/models")
                        .header("host", "proxy")
                        .body(Full::<Bytes>::from(""))
                        .expect("request"),
                )
                .await
                .expect("a response");
            assert_eq!(response.status(), 200, "root is served");
            // The socket's mode keeps strangers out first; open it to test the check behind it.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
            let path2 = path.clone();
            let stranger = tokio::task::spawn_blocking(move || get_as_nobody(&path2, ""))
                .await
                .expect("ran");
            assert_eq!(stranger, "HTTP/1.1 403 Forbidden", "a stranger is refused");
            let member = tokio::task::spawn_blocking(move || get_as_nobody(&path, "17,4343"))
                .await
                .expect("ran");
            assert_eq!(
                member, "HTTP/1.1 200 OK",
                "a member of the directory's group is served"
            );
            trigger.fire();
            within("the end", done)
                .await
                .expect("task")
                .expect("served");
            assert!(
                !sockets.path().join("proxy.sock").exists(),
                "the socket goes with the proxy"
            );
        });
    }

    #[test]
    fn a_socket_in_use_is_refused_and_a_stale_one_replaced() {
        run(async {
            let fake = Fake::start(Flavor::Anthropic, GENEROUS).await;
            let site = Site::new();
            let sockets = tempfile::tempdir().expect("temp dir");
            let path = sockets.path().join("proxy.sock");
            let first =
                worklane_proxy::Proxy::bind(unix_config(&site, &fake, &path)).expect("bind");
            let err =
                worklane_proxy::Proxy::bind(unix_config(&site, &fake, &path)).expect_err("in use");
            assert!(
                matches!(err, worklane_proxy::bind::Error::InUse { .. }),
                "{err}"
            );
            // The first one dies without cleaning up: its socket stays, nobody answers.
            std::mem::forget(first);
            let stale = std::os::unix::net::UnixListener::bind(sockets.path().join("x.sock"));
            drop(stale);
            let path2 = sockets.path().join("x.sock");
            worklane_proxy::Proxy::bind(unix_config(&site, &fake, &path2))
                .expect("a stale socket is replaced");
            std::fs::write(sockets.path().join("file"), b"").expect("a file");
            let err = worklane_proxy::Proxy::bind(unix_config(
                &site,
                &fake,
                &sockets.path().join("file"),
            ))
            .expect_err("not a socket");
            assert!(err.to_string().contains("is not a socket"), "{err}");
        });
    }
}

mod shutdown {
    //! Stopping: no new connection, streams in flight finish within the bound.
    use super::*;

    #[test]
    fn a_stream_in_flight_finishes_after_shutdown_and_no_new_connection_is_taken() {
        run(async {
            let flavor = Flavor::Anthropic;
            let token = "sk-drain-not-real";
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(config(&site, flavor, &fake));
            let addr = proxy.addr;
            let request = request(flavor, &proxy.url(), token)
                .header("x-test-hold", "drain")
                .body(Full::from(prompt(flavor, true)))
                .expect("request");
            let (response, _conn) = open_stream(addr, request).await;
            let mut body = response.into_body();
            within("the first event", body.frame())
                .await
                .expect("frame")
                .expect("data");
            proxy.trigger.fire();
            eventually("new connections are refused", || {
                std::net::TcpStream::connect(addr).is_err()
            })
            .await;
            fake.release("drain");
            let rest = within("the rest", body.collect())
                .await
                .expect("the stream finishes")
                .to_bytes();
            assert!(String::from_utf8_lossy(&rest).contains("message_stop"));
            let served = within("the end", proxy.done)
                .await
                .expect("task")
                .expect("served");
            assert_eq!(served.cut, 0, "nothing was cut");
            assert_eq!(
                site.in_flight(flavor, token),
                0,
                "its reservation was settled"
            );
        });
    }

    #[test]
    fn a_stream_past_the_drain_bound_is_cut_and_settled() {
        run(async {
            let flavor = Flavor::Openai;
            let token = "sk-cut-not-real";
            let fake = Fake::start(flavor, GENEROUS).await;
            let site = Site::new();
            let proxy = start(worklane_proxy::Config {
                drain: Duration::from_millis(100),
                ..config(&site, flavor, &fake)
            });
            let request = request(flavor, &proxy.url(), token)
                .header("x-test-hold", "never")
                .header("x-test-partial", "1")
                .body(Full::from(prompt(flavor, true)))
                .expect("request");
            let (response, _conn) = open_stream(proxy.addr, request).await;
            let mut body = response.into_body();
            within("the first event", body.frame())
                .await
                .expect("frame")
                .expect("data");
            assert_eq!(site.in_flight(flavor, token), 1);
            let served = proxy.stop().await;
            assert_eq!(served.cut, 1, "the held stream was cut at the bound");
            assert_eq!(
                site.in_flight(flavor, token),
                0,
                "the proxy's end waits for the cut stream's reservation to be settled"
            );
            fake.release("never");
        });
    }
}

mod bind {
    use super::*;

    /// Listening beyond loopback is allowed, with a warning that whoever reaches the proxy
    /// spends the machine's budget; loopback is not warned about.
    #[test]
    fn listening_beyond_loopback_is_warned_about_and_loopback_is_not() {
        let site = Site::new();
        capture_logs();
        let bind = |listen: worklane_proxy::Listen| {
            let proxy = worklane_proxy::Proxy::bind(worklane_proxy::Config {
                dir: Some(site.dir.clone()),
                ..worklane_proxy::Config::new(
                    worklane_proxy::Provider::Anthropic,
                    "http://127.0.0.1:9".parse().expect("upstream"),
                    listen,
                )
            })
            .expect("binds");
            let warned = format!("listens on {}, which is not loopback", proxy.local_addr());
            drop(proxy);
            logs()
                .iter()
                .any(|l| l.starts_with("WARN") && l.contains(&warned))
        };
        assert!(
            bind("0.0.0.0:0".parse().expect("listen")),
            "all interfaces: warned"
        );
        assert!(
            !bind(worklane_proxy::Listen::loopback(0)),
            "loopback: not warned"
        );
    }

    #[test]
    fn github_is_not_a_model_provider_to_proxy() {
        let site = Site::new();
        let err = worklane_proxy::Proxy::bind(worklane_proxy::Config {
            dir: Some(site.dir.clone()),
            ..worklane_proxy::Config::new(
                worklane_proxy::Provider::Github,
                "https://api.github.com".parse().expect("upstream"),
                worklane_proxy::Listen::loopback(0),
            )
        })
        .expect_err("refused");
        assert!(err.to_string().contains("budget take"), "{err}");
    }
}
