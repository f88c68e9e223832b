//! The budget proxy (`worklane-proxy`) beside the direct call it stands in front of, on
//! loopback: a fake Anthropic API (a hyper server answering at once, with Anthropic's
//! rate-limit headers and a window no bench exhausts) called directly, and through a proxy
//! whose ledger lives in a slot directory on the disk's filesystem or on tmpfs.
//!
//! - `proxy_request/{direct,proxy_disk,proxy_tmpfs}`: one `POST /v1/messages` on a kept-alive
//!   connection, its whole JSON response read: what the proxy adds to a request (the body
//!   read, the ledger's take, the forward; the head's record and the release happen after
//!   the response and off its path).
//! - `proxy_first_byte/{...}`: a streamed request, timed from its sending to the first event
//!   received (the rest of the stream is read untimed).
//!
//! The issue's target: the proxy adds at most 1 ms to each median.
//!
//! `cargo bench -p worklane-benches --bench proxy`

use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use worklane_lease::{Clock, SystemClock, rfc3339_ms};
use worklane_proxy::{Config, Listen, Provider, Proxy};
use worklane_slotfile::{Environment, SlotDir, TEST_ROOT_VAR};

const TOKEN: &str = "sk-ant-bench-not-real";
const JSON: &str = r#"{"id":"msg","type":"message","content":[{"type":"text","text":"hello"}],"usage":{"input_tokens":20,"output_tokens":5}}"#;
const EVENTS: [&str; 3] = [
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
];

/// The events of a stream, each its own frame.
struct Events(usize);

impl Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = EVENTS
            .get(self.0)
            .map(|e| Ok(Frame::data(Bytes::from_static(e.as_bytes()))));
        self.0 += 1;
        Poll::Ready(next)
    }
}

async fn fake(
    request: Request<Incoming>,
) -> Result<Response<BoxBody<Bytes, Infallible>>, Infallible> {
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let stream = body.windows(13).any(|w| w == b"\"stream\":true");
    // A window of a minute that never runs out.
    let now = SystemClock.now_ms();
    let reset = rfc3339_ms(now - now % 60_000 + 60_000);
    let mut builder = Response::builder();
    for dim in ["requests", "tokens", "input-tokens", "output-tokens"] {
        builder = builder
            .header(format!("anthropic-ratelimit-{dim}-limit"), "1000000000000")
            .header(
                format!("anthropic-ratelimit-{dim}-remaining"),
                "999999999999",
            )
            .header(format!("anthropic-ratelimit-{dim}-reset"), reset.as_str());
    }
    Ok(if stream {
        builder
            .header("content-type", "text/event-stream")
            .body(Events(0).boxed())
    } else {
        builder
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(JSON.as_bytes())).boxed())
    }
    .expect("response"))
}

async fn start_fake() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(
                http1::Builder::new().serve_connection(TokioIo::new(stream), service_fn(fake)),
            );
        }
    });
    addr
}

fn request(base: &str, stream: bool) -> Request<Full<Bytes>> {
    keyed(base, stream, true)
}

fn keyed(base: &str, stream: bool, key: bool) -> Request<Full<Bytes>> {
    let body = format!(
        r#"{{"model":"claude-bench","max_tokens":64,"stream":{stream},"messages":[{{"role":"user","content":"Say hello."}}]}}"#
    );
    let builder = Request::post(format!("{base}/v1/messages"));
    let builder = if key {
        builder.header("x-api-key", TOKEN)
    } else {
        builder
    };
    builder
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(Full::from(body))
        .expect("request")
}

fn proxy_benches(c: &mut Criterion) {
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let fake_addr = server.block_on(start_fake());
    let mut bases = vec![("direct".to_owned(), format!("http://{fake_addr}"))];
    let mut dirs = Vec::new();
    for (label, parent) in worklane_benches::filesystems() {
        let dir = tempfile::tempdir_in(&parent).expect("temp dir");
        // A bench binary counts as a test run: allow its own temp root, wherever that is.
        let env = Environment::from_process()
            .var(TEST_ROOT_VAR, &parent)
            .var("AGENT_SLOTS_DIR", dir.path());
        let slots = SlotDir::resolve_dir_in(&env).expect("slot dir");
        let config = Config {
            dir: Some(slots),
            ..Config::new(
                Provider::Anthropic,
                format!("http://{fake_addr}").parse().expect("upstream"),
                Listen::loopback(0),
            )
        };
        let proxy = Proxy::bind(config).expect("bind");
        let Listen::Tcp(addr) = *proxy.local_addr() else {
            unreachable!("a TCP proxy")
        };
        server.spawn(proxy.serve(std::future::pending()));
        bases.push((format!("proxy_{label}"), format!("http://{addr}")));
        dirs.push(dir);
    }
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client: Client<HttpConnector, Full<Bytes>> = {
        let _entered = client_rt.enter();
        Client::builder(TokioExecutor::new()).build_http()
    };

    let mut group = c.benchmark_group("proxy_request");
    let mut cases: Vec<(String, &str, bool)> = bases
        .iter()
        .map(|(l, b)| (l.clone(), b.as_str(), true))
        .collect();
    // A request without a key goes through unaccounted: the HTTP hop alone.
    cases.push(("proxy_hop_only".to_owned(), bases[1].1.as_str(), false));
    for (label, base, key) in &cases {
        group.bench_function(label.as_str(), |b| {
            b.iter(|| {
                client_rt.block_on(async {
                    let response = client
                        .request(keyed(base, false, *key))
                        .await
                        .expect("response");
                    assert_eq!(response.status(), 200);
                    response.into_body().collect().await.expect("body");
                });
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("proxy_first_byte");
    for (label, base) in &bases {
        group.bench_function(label.as_str(), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    client_rt.block_on(async {
                        let started = Instant::now();
                        let response = client.request(request(base, true)).await.expect("response");
                        let mut body = response.into_body();
                        body.frame().await.expect("a first event").expect("data");
                        total += started.elapsed();
                        while body.frame().await.is_some() {}
                    });
                }
                total
            });
        });
    }
    group.finish();
    drop(dirs);
}

criterion_group!(benches, proxy_benches);
criterion_main!(benches);
