//! A fake provider: a real hyper server on loopback that enforces its own requests- and
//! tokens-per-window limits and answers with the provider's real header names and formats
//! (Anthropic: `anthropic-ratelimit-*`, resets in RFC 3339; OpenAI: `x-ratelimit-*`, resets as
//! durations like `850ms`, `1.5s`, `6m0s`), JSON bodies with their `usage`, and server-sent
//! events as each provider streams them.
//!
//! Its windows count from its own first request, never from the wall clock: a test's outcome
//! cannot depend on where the clock stands when it runs (a window aligned to the clock's
//! minutes reset under a test that crossed one). Its [`Manner`] says how kind it is.
//! [`EXACT`]: fixed windows that start at its first request, resets to the millisecond,
//! `retry-after` on every 429. The providers are not so kind, and [`Manner`] can make it as
//! they are: windows already running when the first request comes, Anthropic's token bucket
//! (it refills continuously; its reset is when it is full again), resets written as the
//! providers write them (Anthropic's cut to the whole second, OpenAI's rounded: `4.53s`,
//! `6m0s`), and OpenAI's 429 without `retry-after` (optional there).
//!
//! Request headers steer it: `x-test-hold: ID` stops a stream after its first event (a JSON
//! body after its first half) until [`Fake::release`]`(ID)`; `x-test-status: N` answers N with a fixed error body (never
//! counted); `x-test-partial: 1` reports the requests window alone (as a provider that
//! reports fewer dimensions than the profile knows), `x-test-partial: requests,tokens` those
//! it lists. [`Fake::force_429`] makes the next request a 429 with `retry-after`.
//! A token count (`.../count_tokens`) or a model list (`.../models`) is answered at once,
//! without rate-limit headers, and counted apart (`Counts::apart`), as the providers do.

use http::{HeaderMap, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::{Notify, mpsc};
use worklane_lease::{Clock, SystemClock, rfc3339_ms};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    Anthropic,
    Openai,
}

impl Flavor {
    pub(crate) fn provider(self) -> worklane_proxy::Provider {
        match self {
            Flavor::Anthropic => worklane_proxy::Provider::Anthropic,
            Flavor::Openai => worklane_proxy::Provider::Openai,
        }
    }
}

/// The fake's own limits, per fixed window of `window_ms`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) window_ms: u64,
    pub(crate) requests: u64,
    pub(crate) tokens: u64,
}

/// How the fake keeps and says its windows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Manner {
    /// The first fixed window started this long before the fake's first request (a window
    /// already running when a caller comes, so its reset is no whole window away); the next
    /// ones follow it back to back.
    pub(crate) offset_ms: u64,
    /// A token bucket per dimension instead of fixed windows: it refills continuously, the
    /// whole limit in a window's time; its reset says when it is full again (Anthropic's).
    pub(crate) bucket: bool,
    /// Resets written as the providers write them: Anthropic's RFC 3339 cut to the whole
    /// second (so before the true instant), OpenAI's durations rounded to 10 ms, or to the
    /// second from a minute on (`4.53s`, `6m0s`).
    pub(crate) coarse: bool,
    /// Whether its own 429s say `retry-after` (OpenAI's may not).
    pub(crate) retry_after: bool,
}

/// The kind fake: fixed windows from its first request, exact resets, `retry-after` always.
pub(crate) const EXACT: Manner = Manner {
    offset_ms: 0,
    bucket: false,
    coarse: false,
    retry_after: true,
};

/// The provider as it behaves: Anthropic's token bucket with resets to the whole second;
/// OpenAI's fixed windows already running at the first request, rounded resets, and 429s
/// without `retry-after`.
pub(crate) fn as_it_is(flavor: Flavor) -> Manner {
    match flavor {
        Flavor::Anthropic => Manner {
            offset_ms: 0,
            bucket: true,
            coarse: true,
            retry_after: true,
        },
        Flavor::Openai => Manner {
            offset_ms: 377,
            bucket: false,
            coarse: true,
            retry_after: false,
        },
    }
}

/// Limits no test reaches.
pub(crate) const GENEROUS: Limits = Limits {
    window_ms: 60_000,
    requests: 1_000_000,
    tokens: 1_000_000_000,
};

/// What one request looked like when it arrived.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) uri: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body_len: usize,
    pub(crate) body_sum: u64,
    pub(crate) at_ms: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// When the first fixed window started (set by the first request).
    origin: Option<u64>,
    window: u64,
    requests: u64,
    tokens: u64,
    input: u64,
    output: u64,
    /// The buckets' levels (requests, tokens) when last changed, in units, and when.
    levels: Option<(f64, f64, u64)>,
    /// Requests answered 200.
    pub(crate) served: u64,
    /// Requests refused by the fake's own limits.
    pub(crate) too_many: u64,
    /// Calls that are no generation (a token count, a model list), counted apart.
    pub(crate) apart: u64,
    /// Requests answered 429 by `force_429`, with when.
    pub(crate) forced_at: Vec<u64>,
    /// Every request, in order of arrival.
    pub(crate) seen: Vec<Seen>,
    /// Streams whose reader went away before the end.
    pub(crate) cancelled: u64,
    force: Option<u64>,
}

struct Inner {
    flavor: Flavor,
    limits: Limits,
    manner: Manner,
    counts: Arc<Mutex<Counts>>,
    holds: Mutex<HashMap<String, Arc<Notify>>>,
}

pub(crate) struct Fake {
    pub(crate) addr: SocketAddr,
    inner: Arc<Inner>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Fake {
    pub(crate) async fn start(flavor: Flavor, limits: Limits) -> Fake {
        Fake::start_as(flavor, limits, EXACT).await
    }

    /// A fake that keeps and says its windows in `manner`.
    pub(crate) async fn start_as(flavor: Flavor, limits: Limits, manner: Manner) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the fake binds");
        let addr = listener.local_addr().expect("its address");
        let inner = Arc::new(Inner {
            flavor,
            limits,
            manner,
            counts: Arc::new(Mutex::new(Counts::default())),
            holds: Mutex::new(HashMap::new()),
        });
        let serving = Arc::clone(&inner);
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let inner = Arc::clone(&serving);
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let inner = Arc::clone(&inner);
                        async move { Ok::<_, Infallible>(answer(&inner, request).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Fake {
            addr,
            inner,
            server,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Reads the counts.
    pub(crate) fn counts<T>(&self, read: impl FnOnce(&Counts) -> T) -> T {
        read(&self.inner.counts.lock().expect("counts"))
    }

    /// The next request is answered 429 with `retry-after: secs`.
    pub(crate) fn force_429(&self, secs: u64) {
        self.inner.counts.lock().expect("counts").force = Some(secs);
    }

    /// Lets the stream held under `id` go on.
    pub(crate) fn release(&self, id: &str) {
        hold(&self.inner, id).notify_one();
    }
}

fn hold(inner: &Inner, id: &str) -> Arc<Notify> {
    Arc::clone(
        inner
            .holds
            .lock()
            .expect("holds")
            .entry(id.to_owned())
            .or_default(),
    )
}

type FakeBody = BoxBody<Bytes, Infallible>;

fn full(bytes: impl Into<Bytes>) -> FakeBody {
    Full::new(bytes.into()).boxed()
}

/// FNV-1a of the body, to show it arrived whole.
pub(crate) fn sum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A duration as OpenAI writes its resets.
pub(crate) fn go_duration(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let text = format!("{}.{:03}", ms / 1000, ms % 1000);
        format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
    } else {
        format!("{}m{}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

async fn answer(inner: &Inner, request: Request<Incoming>) -> Response<FakeBody> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let now = SystemClock.now_ms();
    {
        let mut counts = inner.counts.lock().expect("counts");
        counts.seen.push(Seen {
            method: parts.method.to_string(),
            uri: parts.uri.to_string(),
            headers: parts.headers.clone(),
            body_len: body.len(),
            body_sum: sum(&body),
            at_ms: now,
        });
    }
    let echo = |mut response: Response<FakeBody>| {
        let headers = response.headers_mut();
        headers.insert("x-test-body-len", body.len().into());
        headers.insert(
            "x-test-body-sum",
            sum(&body).to_string().parse().expect("digits"),
        );
        response
    };
    if let Some(status) = parts.headers.get("x-test-status") {
        let mut response = Response::new(full(
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"fake says no"}}"#,
        ));
        *response.status_mut() = status.to_str().expect("status").parse().expect("status");
        response
            .headers_mut()
            .insert("x-test-marker", "from-the-upstream".parse().expect("value"));
        return echo(response);
    }
    // As the providers do: a token count or a model list is no generation call, answered
    // without the generation limits' headers and counted apart (here: not at all).
    let path = parts.uri.path();
    if path.ends_with("/count_tokens") || path.ends_with("/models") {
        inner.counts.lock().expect("counts").apart += 1;
        let mut response = Response::new(full(r#"{"input_tokens": 12}"#));
        response
            .headers_mut()
            .insert("content-type", "application/json".parse().expect("value"));
        return echo(response);
    }
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let stream = json["stream"].as_bool().unwrap_or(false);
    let max = ["max_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|k| json[k].as_u64())
        .unwrap_or(1000);
    // Fewer than the proxy's estimate of a quarter of the bytes, as a tokenizer counts.
    let input = body.len() as u64 / 5;
    let output = max.min(5);
    let limits = inner.limits;
    let manner = inner.manner;
    let partial: Option<Vec<String>> =
        parts
            .headers
            .get("x-test-partial")
            .map(|v| match v.to_str().expect("dimensions") {
                "1" => vec!["requests".to_owned()],
                list => list.split(',').map(str::to_owned).collect(),
            });
    let verdict = {
        let mut counts = inner.counts.lock().expect("counts");
        admit(&mut counts, limits, manner, now, input, max)
    };
    let window = verdict.window;
    let (status, retry) = (verdict.status, verdict.retry);
    let mut builder = Response::builder().status(status);
    let reported = |dim: &str| {
        partial
            .as_ref()
            .is_none_or(|only| only.iter().any(|d| d == dim))
    };
    match inner.flavor {
        Flavor::Anthropic => {
            let reset = |at: u64| {
                if manner.coarse {
                    // Cut to the whole second, as Anthropic writes it: before the instant.
                    rfc3339_ms(at - at % 1000).replace(".000Z", "Z")
                } else {
                    rfc3339_ms(at)
                }
            };
            for (dim, limit, (left, at)) in [
                ("requests", limits.requests, verdict.requests),
                ("tokens", limits.tokens, verdict.tokens),
                ("input-tokens", limits.tokens, verdict.input),
                ("output-tokens", limits.tokens, verdict.output),
            ] {
                if !reported(dim) {
                    continue;
                }
                builder = builder
                    .header(format!("anthropic-ratelimit-{dim}-limit"), limit)
                    .header(format!("anthropic-ratelimit-{dim}-remaining"), left)
                    .header(format!("anthropic-ratelimit-{dim}-reset"), reset(at));
            }
            builder = builder.header("request-id", "req_fake");
        }
        Flavor::Openai => {
            let reset = |at: u64| {
                if manner.coarse {
                    openai_duration(at - now)
                } else {
                    go_duration(at - now)
                }
            };
            for (dim, limit, (left, at)) in [
                ("requests", limits.requests, verdict.requests),
                ("tokens", limits.tokens, verdict.tokens),
            ] {
                if !reported(dim) {
                    continue;
                }
                builder = builder
                    .header(format!("x-ratelimit-limit-{dim}"), limit)
                    .header(format!("x-ratelimit-remaining-{dim}"), left)
                    .header(format!("x-ratelimit-reset-{dim}"), reset(at));
            }
            builder = builder.header("x-request-id", "req_fake");
        }
    }
    if let Some(secs) = retry.filter(|_| status == 429)
        && (manner.retry_after || verdict.forced)
    {
        builder = builder.header("retry-after", secs);
        if inner.flavor == Flavor::Openai {
            builder = builder.header("retry-after-ms", secs * 1000);
        }
    }
    if status == 429 {
        let body = match inner.flavor {
            Flavor::Anthropic => {
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"fake: rate limited"}}"#
            }
            Flavor::Openai => {
                r#"{"error":{"message":"fake: rate limited","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#
            }
        };
        return echo(
            builder
                .header("content-type", "application/json")
                .body(full(body))
                .expect("response"),
        );
    }
    let back = max - output;
    if !stream {
        let body = match inner.flavor {
            Flavor::Anthropic => serde_json::json!({
                "id": "msg_fake", "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": "hello"}],
                "usage": {"input_tokens": input, "output_tokens": output}
            }),
            Flavor::Openai => serde_json::json!({
                "id": "chatcmpl-fake", "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
                "usage": {"prompt_tokens": input, "completion_tokens": output,
                          "total_tokens": input + output}
            }),
        };
        give_back(
            &mut inner.counts.lock().expect("counts"),
            limits,
            window,
            back,
        );
        let builder = builder.header("content-type", "application/json");
        let Some(id) = parts
            .headers
            .get("x-test-hold")
            .and_then(|v| v.to_str().ok())
        else {
            return echo(builder.body(full(body.to_string())).expect("response"));
        };
        // Held: its first half, then the rest once released.
        let held = hold(inner, id);
        let text = Bytes::from(body.to_string());
        let (tx, rx) = mpsc::channel(2);
        tokio::spawn(async move {
            let half = text.len() / 2;
            if tx.send(text.slice(..half)).await.is_ok() {
                held.notified().await;
                let _ = tx.send(text.slice(half..)).await;
            }
        });
        return echo(builder.body(ChannelBody(rx).boxed()).expect("response"));
    }
    let events = events(inner.flavor, input, output);
    let held = parts
        .headers
        .get("x-test-hold")
        .and_then(|v| v.to_str().ok())
        .map(|id| hold(inner, id));
    let (tx, rx) = mpsc::channel(4);
    let counts = Arc::clone(&inner.counts);
    tokio::spawn(async move {
        for (i, event) in events.into_iter().enumerate() {
            if tx.send(Bytes::from(event)).await.is_err() {
                counts.lock().expect("counts").cancelled += 1;
                return;
            }
            if i == 0
                && let Some(held) = &held
            {
                held.notified().await;
            }
        }
        give_back(&mut counts.lock().expect("counts"), limits, window, back);
    });
    echo(
        builder
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(ChannelBody(rx).boxed())
            .expect("response"),
    )
}

/// The output tokens the request reserved but did not use go back, as Anthropic adjusts at
/// the end of a request: to its bucket, or to its window if that is still the one now.
fn give_back(counts: &mut Counts, limits: Limits, window: u64, back: u64) {
    if let Some((requests, tokens, at)) = counts.levels {
        counts.levels = Some((
            requests,
            (tokens + back as f64).min(limits.tokens as f64),
            at,
        ));
    } else if counts.window == window {
        counts.tokens = counts.tokens.saturating_sub(back);
        counts.output = counts.output.saturating_sub(back);
    }
}

/// What the fake's limits say of one request.
struct Verdict {
    status: u16,
    /// Seconds to wait, for a 429.
    retry: Option<u64>,
    /// Made a 429 by [`Fake::force_429`].
    forced: bool,
    /// The fixed window it fell in (its start), or 0 with a bucket.
    window: u64,
    /// Each dimension's units left and when it resets (ms).
    requests: (u64, u64),
    tokens: (u64, u64),
    input: (u64, u64),
    output: (u64, u64),
}

/// Takes one request needing `input + max` tokens from the limits at `now`, or refuses it.
fn admit(
    counts: &mut Counts,
    limits: Limits,
    manner: Manner,
    now: u64,
    input: u64,
    max: u64,
) -> Verdict {
    let forced = counts.force.take();
    if forced.is_some() {
        counts.forced_at.push(now);
    }
    if manner.bucket {
        let (full_r, full_t) = (limits.requests as f64, limits.tokens as f64);
        let (r, t, at) = counts.levels.unwrap_or((full_r, full_t, now));
        let filled = now.saturating_sub(at) as f64 / limits.window_ms as f64;
        let (mut r, mut t) = (
            (r + filled * full_r).min(full_r),
            (t + filled * full_t).min(full_t),
        );
        let need = (input + max) as f64;
        let (status, retry) = if let Some(secs) = forced {
            (429, Some(secs))
        } else if r < 1.0 || t < need {
            counts.too_many += 1;
            // Until the bucket holds what the request needs.
            let short = ((1.0 - r) / full_r).max((need - t) / full_t).max(0.0);
            let ms = (short * limits.window_ms as f64).ceil() as u64;
            (429, Some(ms.div_ceil(1000).max(1)))
        } else {
            r -= 1.0;
            t -= need;
            counts.served += 1;
            (200, None)
        };
        counts.levels = Some((r, t, now));
        // Full again after the missing part refills.
        let full_at = |level: f64, full: f64| {
            now + (((full - level) / full) * limits.window_ms as f64).ceil() as u64
        };
        let tokens = (t.floor() as u64, full_at(t, full_t));
        return Verdict {
            status,
            retry,
            forced: forced.is_some(),
            window: 0,
            requests: (r.floor() as u64, full_at(r, full_r)),
            tokens,
            input: tokens,
            output: tokens,
        };
    }
    let origin = *counts
        .origin
        .get_or_insert(now.saturating_sub(manner.offset_ms % limits.window_ms));
    // A request whose clock was read before an earlier one's falls in the first window.
    let window = origin + now.saturating_sub(origin) / limits.window_ms * limits.window_ms;
    let end = window + limits.window_ms;
    if counts.window != window {
        counts.window = window;
        counts.requests = 0;
        counts.tokens = 0;
        counts.input = 0;
        counts.output = 0;
    }
    let (status, retry) = if let Some(secs) = forced {
        (429, Some(secs))
    } else if counts.requests + 1 > limits.requests || counts.tokens + input + max > limits.tokens {
        counts.too_many += 1;
        (429, Some((end - now).div_ceil(1000).max(1)))
    } else {
        counts.requests += 1;
        counts.tokens += input + max;
        counts.input += input;
        counts.output += max;
        counts.served += 1;
        (200, None)
    };
    Verdict {
        status,
        retry,
        forced: forced.is_some(),
        window,
        requests: (limits.requests - counts.requests, end),
        tokens: (limits.tokens.saturating_sub(counts.tokens), end),
        input: (limits.tokens.saturating_sub(counts.input), end),
        output: (limits.tokens.saturating_sub(counts.output), end),
    }
}

/// A duration as OpenAI writes its resets: rounded to 10 ms under a minute (`4.53s`), to the
/// second from a minute on (`6m0s`), in ms under a second (`850ms`).
pub(crate) fn openai_duration(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let centis = (ms + 5) / 10;
        let text = format!("{}.{:02}", centis / 100, centis % 100);
        format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
    } else {
        let secs = (ms + 500) / 1000;
        format!("{}m{}s", secs / 60, secs % 60)
    }
}

/// The events of a stream of `output` tokens, as each provider sends them.
fn events(flavor: Flavor, input: u64, output: u64) -> Vec<String> {
    match flavor {
        Flavor::Anthropic => {
            let mut events = vec![format!(
                "event: message_start\ndata: {}\n\n",
                serde_json::json!({"type": "message_start", "message": {"id": "msg_fake",
                    "type": "message", "role": "assistant", "content": [],
                    "usage": {"input_tokens": input, "output_tokens": 1}}})
            )];
            events.push(
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
                    .to_owned(),
            );
            for i in 0..output {
                events.push(format!(
                    "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word{i} \"}}}}\n\n"
                ));
            }
            events.push(
                "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
                    .to_owned(),
            );
            events.push(format!(
                "event: message_delta\ndata: {}\n\n",
                serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": output}})
            ));
            events.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".to_owned());
            events
        }
        Flavor::Openai => {
            let mut events = Vec::new();
            for i in 0..output {
                events.push(format!(
                    "data: {}\n\n",
                    serde_json::json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {"content": format!("word{i} ")}}],
                        "usage": null})
                ));
            }
            events.push(format!(
                "data: {}\n\n",
                serde_json::json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                    "choices": [], "usage": {"prompt_tokens": input,
                    "completion_tokens": output, "total_tokens": input + output}})
            ));
            events.push("data: [DONE]\n\n".to_owned());
            events
        }
    }
}

/// A body fed by a channel: each message one frame, sent when it is sent.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// The fake's windows count from its first request, wherever the clock stands: a window
/// aligned to the clock's minutes reset under a test that crossed one (a spent window let a
/// request through 2 ms after it was spent).
#[test]
fn a_window_starts_at_the_first_request_not_on_the_clock_s_minute() {
    let limits = Limits {
        window_ms: 60_000,
        requests: 1,
        tokens: 1_000_000,
    };
    let minute = 1_796_550_060_000;
    for (manner, already) in [(EXACT, 0), (as_it_is(Flavor::Openai), 377)] {
        let mut counts = Counts::default();
        let first = admit(&mut counts, limits, manner, minute - 1, 10, 10);
        assert_eq!(first.status, 200);
        assert_eq!(
            first.requests,
            (0, minute - 1 - already + 60_000),
            "the window runs a minute from its start, {already} ms before the first request"
        );
        let across = admit(&mut counts, limits, manner, minute + 1, 10, 10);
        assert_eq!(
            (across.status, across.retry),
            (429, Some(60)),
            "the window is still spent across the clock's minute"
        );
        let next = admit(
            &mut counts,
            limits,
            manner,
            minute - 1 - already + 60_000,
            10,
            10,
        );
        assert_eq!(
            next.status, 200,
            "the next window starts when the first ends"
        );
    }
}
