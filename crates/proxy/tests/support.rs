//! What every test uses: a runtime, a slot directory of its own, a running proxy, a client,
//! the ledger's state as the files say it, and the logs.

use crate::fake::{Fake, Flavor};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use worklane_budget::CredentialKey;
use worklane_proxy::{Config, Listen, Proxy, Served, Trigger};
use worklane_slotfile::{Environment, SlotDir};

/// Runs `test` on a multi-threaded runtime of two workers (as `Proxy::run` makes).
pub(crate) fn run<F: Future>(test: F) -> F::Output {
    capture_logs();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(test)
}

/// A slot directory of the test's own, resolved as the machine's is, through
/// `AGENT_SLOTS_DIR` (inside the test's temporary root, as the isolation rule requires).
pub(crate) struct Site {
    pub(crate) temp: tempfile::TempDir,
    pub(crate) dir: SlotDir,
}

impl Site {
    pub(crate) fn new() -> Site {
        let temp = tempfile::tempdir().expect("temp dir");
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
        let dir = SlotDir::resolve_dir_in(&env).expect("the slot directory resolves");
        Site { temp, dir }
    }

    /// The state file of `token`'s budget with `flavor`'s provider, if there is one.
    pub(crate) fn state(&self, flavor: Flavor, token: &str) -> Option<serde_json::Value> {
        let name = CredentialKey::of_token(token).state_name_of(flavor.provider().name());
        let bytes = std::fs::read(self.temp.path().join(name)).ok()?;
        Some(serde_json::from_slice(&bytes).expect("the state is JSON"))
    }

    /// The reservations in flight in that state.
    pub(crate) fn in_flight(&self, flavor: Flavor, token: &str) -> usize {
        self.state(flavor, token)
            .and_then(|s| {
                s.get("inFlight")
                    .and_then(|f| f.as_object())
                    .map(|f| f.len())
            })
            .unwrap_or(0)
    }

    /// A ledger on the same files, as `worklane budget take` makes one.
    pub(crate) fn ledger(&self) -> worklane_budget::Ledger {
        worklane_budget::Ledger::new(self.dir.clone()).owner("direct")
    }
}

/// A proxy serving in the background.
pub(crate) struct Running {
    pub(crate) addr: SocketAddr,
    pub(crate) trigger: Trigger,
    pub(crate) done: tokio::task::JoinHandle<Result<Served, worklane_proxy::serve::Error>>,
}

impl Running {
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops it and waits for the end.
    pub(crate) async fn stop(self) -> Served {
        self.trigger.fire();
        within("the proxy's end", self.done)
            .await
            .expect("the serve task")
            .expect("served")
    }
}

/// A configuration for `flavor` in front of `fake`, on loopback, on `site`'s directory.
pub(crate) fn config(site: &Site, flavor: Flavor, fake: &Fake) -> Config {
    Config {
        dir: Some(site.dir.clone()),
        ..Config::new(
            flavor.provider(),
            fake.url().parse().expect("upstream"),
            Listen::loopback(0),
        )
    }
}

/// Binds `config` and serves it in the background.
pub(crate) fn start(config: Config) -> Running {
    let proxy = Proxy::bind(config).expect("the proxy binds");
    let Listen::Tcp(addr) = *proxy.local_addr() else {
        panic!("a TCP proxy");
    };
    let trigger = proxy.trigger();
    let done = tokio::spawn(proxy.serve(std::future::pending()));
    Running {
        addr,
        trigger,
        done,
    }
}

pub(crate) type Plain = Client<HttpConnector, Full<Bytes>>;

/// A pooled HTTP/1.1 client, as an SDK has.
pub(crate) fn client() -> Plain {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A body as each provider's SDK sends it: `max_tokens` 64, a message of some 80 bytes.
pub(crate) fn prompt(flavor: Flavor, stream: bool) -> String {
    let content = "Summarise the design of a machine-wide budget ledger in one line.";
    match flavor {
        Flavor::Anthropic => serde_json::json!({
            "model": "claude-test", "max_tokens": 64, "stream": stream,
            "messages": [{"role": "user", "content": content}]
        }),
        Flavor::Openai => serde_json::json!({
            "model": "gpt-test", "max_completion_tokens": 64, "stream": stream,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": content}]
        }),
    }
    .to_string()
}

/// A request to `base` with `token` where each provider's SDK puts it.
pub(crate) fn request(flavor: Flavor, base: &str, token: &str) -> http::request::Builder {
    let path = match flavor {
        Flavor::Anthropic => "/v1/messages",
        Flavor::Openai => "/v1/chat/completions",
    };
    let builder = Request::post(format!("{base}{path}")).header("content-type", "application/json");
    match flavor {
        Flavor::Anthropic => builder
            .header("x-api-key", token)
            .header("anthropic-version", "2023-06-01"),
        Flavor::Openai => builder.header("authorization", format!("Bearer {token}")),
    }
}

/// Sends a request and reads its whole response.
pub(crate) async fn send(client: &Plain, request: Request<Full<Bytes>>) -> (Response<()>, Bytes) {
    let response = within("a response", client.request(request))
        .await
        .expect("the request is answered");
    let (head, body) = response.into_parts();
    let bytes = within("the body", body.collect())
        .await
        .expect("the whole body")
        .to_bytes();
    (Response::from_parts(head, ()), bytes)
}

/// A connection of its own (so the test can cut it), with one request sent on it; the
/// response's head.
pub(crate) async fn open_stream(
    addr: SocketAddr,
    request: Request<Full<Bytes>>,
) -> (Response<Incoming>, tokio::task::JoinHandle<()>) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let response = within("the response's head", sender.send_request(request))
        .await
        .expect("a response");
    (response, conn)
}

/// No test waits forever: what must happen happens within 60 s, or the test fails saying
/// what did not (a bound against hanging, not a measure of speed).
pub(crate) async fn within<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(60), future).await {
        Ok(output) => output,
        Err(_) => panic!("{what} never came"),
    }
}

/// Waits until `holds()` is true (looking every 10 ms), or fails after 60 s saying `what`.
pub(crate) async fn eventually(what: &str, mut holds: impl FnMut() -> bool) {
    let started = Instant::now();
    while !holds() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what} never happened"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every line logged by any test of this binary.
pub(crate) fn logs() -> Vec<String> {
    LOGS.lock().expect("logs").clone()
}

static LOGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        LOGS.lock().expect("logs").push(format!(
            "{} {} {}: {}",
            record.level(),
            worklane_lease::Clock::now_ms(&worklane_lease::SystemClock),
            record.target(),
            record.args()
        ));
    }

    fn flush(&self) {}
}

/// Every record at every level, from every crate, kept for [`logs`] ([`run`] starts it).
pub(crate) fn capture_logs() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        log::set_logger(&Capture).expect("the only logger");
        log::set_max_level(log::LevelFilter::Trace);
    });
}
