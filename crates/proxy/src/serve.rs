//! Serving: the accept loop, each connection's HTTP/1.1, each request's take, forward and
//! observation, and the graceful end.

use crate::answer;
use crate::bind::{Listener, Proxy, Shared};
use crate::estimate::{PEEK_LIMIT, estimate};
use crate::forward::{self, Observing, Outgoing, Settle};
use crate::lanes::{NotTaken, chain};
use crate::usage::UsageScan;
use http::{Request, Response};
use http_body_util::{Either, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinSet;
use worklane_budget::ProviderObservation;
use worklane_lease::{Clock, SystemClock};

/// A response's body: the upstream's, observed as it passes, or one the proxy made.
pub(crate) type ProxyBody = Either<Observing, Full<Bytes>>;

/// How long the budget's last calls may take after the drain: 5 s.
const CLOSE_BOUND: Duration = Duration::from_secs(5);
/// The pause after a failed accept (out of descriptors, say) before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Ends a proxy's serving from anywhere (a signal handler's thread, another task): the same
/// as its shutdown future ending. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Trigger(Arc<watch::Sender<bool>>);

impl Trigger {
    /// Stops accepting and lets requests in flight finish (within the drain bound).
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

/// How serving ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Served {
    /// Connections still busy when the drain bound ran out, cut then (their reservations
    /// settled by what their responses said, or given back).
    pub cut: usize,
}

impl Proxy {
    /// A trigger that ends [`Proxy::serve`] as its shutdown future would.
    #[must_use]
    pub fn trigger(&self) -> Trigger {
        Trigger(Arc::clone(&self.stop))
    }

    /// Serves until `shutdown` ends (or [`Proxy::trigger`] fires): then stops accepting,
    /// lets requests and streams in flight finish for up to the drain bound, cuts those
    /// still running, and waits for the budget's last calls. Runs inside a tokio runtime
    /// with I/O and time enabled (the multi-threaded one: the ledger's calls take blocking
    /// threads).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<Served, Error> {
        let accepting = match self.listener {
            Listener::Tcp(listener) => Accepting::Tcp(
                tokio::net::TcpListener::from_std(listener)
                    .map_err(|source| Error::Register { source })?,
            ),
            Listener::Unix { listener, path, id } => Accepting::Unix(
                tokio::net::UnixListener::from_std(listener)
                    .map_err(|source| Error::Register { source })?,
                path,
                id,
            ),
        };
        log::info!(
            "the {} proxy listens on {} for {}",
            self.shared.provider.name(),
            self.local,
            self.shared.upstream
        );
        let mut triggered = self.stop.subscribe();
        let mut triggered = pin!(async move {
            let _ = triggered.wait_for(|stop| *stop).await;
        });
        let mut shutdown = pin!(shutdown);
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut connections = JoinSet::new();
        loop {
            let event = std::future::poll_fn(|cx| {
                if shutdown.as_mut().poll(cx).is_ready() || triggered.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                while let Poll::Ready(Some(_)) = connections.poll_join_next(cx) {}
                accepting.poll_accept(cx).map(Some)
            })
            .await;
            match event {
                None => break,
                Some(Ok(Conn::Tcp(stream))) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(connection(
                        Arc::clone(&self.shared),
                        TokioIo::new(stream),
                        stop_rx.clone(),
                        true,
                    ));
                }
                Some(Ok(Conn::Unix(stream))) => {
                    let admitted = crate::peer::admits_peer(self.trust, &stream);
                    connections.spawn(connection(
                        Arc::clone(&self.shared),
                        TokioIo::new(stream),
                        stop_rx.clone(),
                        admitted,
                    ));
                }
                Some(Err(e)) => {
                    log::warn!("the proxy could not accept a connection: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
        drop(accepting);
        log::info!(
            "the {} proxy stops accepting; {} connection(s) may finish within {} ms",
            self.shared.provider.name(),
            connections.len(),
            self.drain.as_millis()
        );
        stop_tx.send_replace(true);
        let drained = tokio::time::timeout(self.drain, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        let cut = connections.len();
        if drained.is_err() {
            log::warn!("{cut} connection(s) still busy after the drain bound are cut");
            connections.shutdown().await;
        }
        self.shared.lanes.close(CLOSE_BOUND).await;
        Ok(Served { cut })
    }

    /// [`Proxy::serve`] on a runtime of its own (two worker threads), for a caller that has
    /// none: returns when serving ends.
    pub fn run(self, shutdown: impl Future<Output = ()>) -> Result<Served, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("worklane-proxy")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|source| Error::Runtime { source })?;
        runtime.block_on(self.serve(shutdown))
    }
}

enum Accepting {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, std::path::PathBuf, (u64, u64)),
}

enum Conn {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl Accepting {
    fn poll_accept(&self, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<Conn>> {
        match self {
            Accepting::Tcp(l) => l.poll_accept(cx).map_ok(|(s, _)| Conn::Tcp(s)),
            Accepting::Unix(l, ..) => l.poll_accept(cx).map_ok(|(s, _)| Conn::Unix(s)),
        }
    }
}

/// The socket file goes with the proxy, if it is still the one it made.
impl Drop for Accepting {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if let Accepting::Unix(_, path, id) = self
            && let Ok(meta) = std::fs::symlink_metadata(&*path)
            && (meta.dev(), meta.ino()) == *id
        {
            let _ = std::fs::remove_file(&*path);
        }
    }
}

/// One connection: HTTP/1.1 until the client closes it, or, once the proxy stops, until its
/// request in flight is answered. A peer not `admitted` gets 403 to each request.
async fn connection<S>(
    shared: Arc<Shared>,
    io: TokioIo<S>,
    mut stop: watch::Receiver<bool>,
    admitted: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request: Request<Incoming>| {
        let shared = Arc::clone(&shared);
        async move {
            Ok::<_, Infallible>(if admitted {
                handle(&shared, request).await
            } else {
                answer::forbidden(&shared.provider).map(Either::Right)
            })
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(admitted)
        .serve_connection(io, service);
    let mut conn = pin!(conn);
    let mut stopping = pin!(async move {
        let _ = stop.wait_for(|stop| *stop).await;
    });
    let mut graceful = false;
    let ended = std::future::poll_fn(|cx| {
        if !graceful && stopping.as_mut().poll(cx).is_ready() {
            graceful = true;
            conn.as_mut().graceful_shutdown();
        }
        conn.as_mut().poll(cx)
    })
    .await;
    if let Err(e) = ended {
        log::debug!("a client connection ended: {e}");
    }
}

/// One request: the take, the forward, the response on its way back.
async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<ProxyBody> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let Some(key) = forward::credential(&parts.headers) else {
        log::debug!("{} {path}: no API key; forwarded unaccounted", parts.method);
        return forward_to(shared, &parts, Outgoing::stream(body), None).await;
    };
    // Only a generation call takes from the budget: a token count, a model list, a batch or a
    // file is counted apart by the provider (or not at all), and its response says nothing
    // of the generation windows.
    if !worklane_budget::is_generation(parts.method.as_str(), &path) {
        log::debug!(
            "{} {path}: not a generation call; forwarded unaccounted",
            parts.method
        );
        return forward_to(shared, &parts, Outgoing::stream(body), None).await;
    }
    let content_length = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let prefix = match forward::read_prefix(body, PEEK_LIMIT).await {
        Ok(prefix) => prefix,
        Err(e) => {
            return answer::bad_request(
                &shared.provider,
                &format!("cannot read the request's body: {}", chain(&e)),
            )
            .map(Either::Right);
        }
    };
    let need = estimate(&prefix.bytes, prefix.complete(), content_length);
    let reservation = match shared.lanes.take(&key, need, shared.max_wait).await {
        Ok(reservation) => reservation,
        Err(NotTaken::Refused { refused, waited }) => {
            log::info!(
                "{} {path}: refused after {} ms: {refused}",
                parts.method,
                waited.as_millis()
            );
            return answer::refused(&shared.provider, &refused, waited, SystemClock.now_ms())
                .map(Either::Right);
        }
        Err(NotTaken::Closed) => {
            return answer::unreachable(
                &shared.provider,
                &shared.upstream.to_string(),
                "the proxy is shutting down",
            )
            .map(Either::Right);
        }
    };
    forward_to(shared, &parts, Outgoing::replay(prefix), Some(reservation)).await
}

/// Sends the request upstream and returns its response, its body observed on the way.
async fn forward_to(
    shared: &Shared,
    parts: &http::request::Parts,
    body: Outgoing,
    reservation: Option<crate::lanes::Reservation>,
) -> Response<ProxyBody> {
    let request = match forward::upstream_request(parts, &shared.upstream, body) {
        Ok(request) => request,
        Err(e) => {
            return answer::bad_request(
                &shared.provider,
                &format!("cannot forward this request: {}", chain(&e)),
            )
            .map(Either::Right);
        }
    };
    let started = Instant::now();
    let response = match shared.client.request(request).await {
        Ok(response) => response,
        Err(e) => {
            // No response: what the take reserved is given back as the reservation drops.
            let why = chain(&e);
            log::warn!(
                "{} {}: the upstream failed: {why}",
                parts.method,
                parts.uri.path()
            );
            return answer::unreachable(&shared.provider, &shared.upstream.to_string(), &why)
                .map(Either::Right);
        }
    };
    log::debug!(
        "{} {}: {} from the upstream after {} ms",
        parts.method,
        parts.uri.path(),
        response.status(),
        started.elapsed().as_millis()
    );
    let (mut head, body) = response.into_parts();
    let observation = ProviderObservation::from_headers(
        &shared.profile,
        head.status.as_u16(),
        SystemClock.now_ms(),
        |name| head.headers.get(name).and_then(|v| v.to_str().ok()),
    );
    let scan = UsageScan::for_response(&head.headers);
    // A head that reports a window of every dimension the take reserved counts the request
    // already (the provider counts it before it answers): it settles the reservation at once,
    // in the order the provider answered, and the body has nothing left to settle.
    let head_counts_it = shared
        .provider
        .dimensions()
        .iter()
        .all(|d| observation.windows.iter().any(|w| w.dimension == *d));
    let (settle, reservation) = match reservation {
        Some(reservation) if head_counts_it => {
            reservation.settle(observation);
            (Settle::Recorded, None)
        }
        Some(reservation) if scan.is_stream() => {
            reservation.record(observation);
            (Settle::Recorded, Some(reservation))
        }
        reservation => (Settle::Head(observation), reservation),
    };
    forward::strip_hop_by_hop(&mut head.headers);
    Response::from_parts(
        head,
        Either::Left(Observing::new(body, scan, settle, reservation)),
    )
}

/// Why serving could not go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bound socket could not be registered with the runtime.
    #[error(
        "cannot serve the bound socket (serve runs inside a tokio runtime with I/O and time \
         enabled)"
    )]
    Register {
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// [`Proxy::run`] could not start its runtime.
    #[error("cannot start the proxy's runtime")]
    Runtime {
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Listen, Provider};

    /// A proxy on a port of loopback the system picks, on a slot directory of its own.
    fn proxy(temp: &tempfile::TempDir) -> Proxy {
        Proxy::bind(Config {
            dir: Some(worklane_slotfile::SlotDir::open(temp.path()).expect("the slot directory")),
            ..Config::new(
                Provider::Anthropic,
                "http://127.0.0.1:9".parse().expect("upstream"),
                Listen::loopback(0),
            )
        })
        .expect("the proxy binds")
    }

    /// A client's connection serves one request after another (keep-alive), and an idle one
    /// is closed at once when the proxy stops: not held open until the drain bound cuts it.
    #[test]
    fn a_connection_is_kept_alive_and_closed_when_the_proxy_stops() {
        use http_body_util::BodyExt;
        let temp = tempfile::tempdir().expect("temp dir");
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(async {
                let bound = Duration::from_secs(20);
                let proxy = Proxy {
                    drain: Duration::from_secs(60),
                    ..proxy(&temp)
                };
                let Listen::Tcp(addr) = *proxy.local_addr() else {
                    panic!("a TCP proxy");
                };
                let trigger = proxy.trigger();
                let serving = tokio::spawn(proxy.serve(std::future::pending()));
                let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .expect("handshake");
                let conn = tokio::spawn(conn);
                for n in 0..2 {
                    // No key: forwarded unaccounted, to an upstream nobody serves.
                    let request = Request::get("/v1/models")
                        .header("host", "proxy")
                        .body(Full::<Bytes>::default())
                        .expect("request");
                    tokio::time::timeout(bound, sender.ready())
                        .await
                        .expect("ready in time")
                        .unwrap_or_else(|e| panic!("the connection, for request {n}: {e}"));
                    let response = tokio::time::timeout(bound, sender.send_request(request))
                        .await
                        .expect("an answer in time")
                        .unwrap_or_else(|e| panic!("request {n} on the same connection: {e}"));
                    assert_eq!(response.status(), 502, "the proxy's own answer");
                    response.into_body().collect().await.expect("its body");
                }
                trigger.fire();
                let served = tokio::time::timeout(bound, serving)
                    .await
                    .expect("serving ends before the drain bound")
                    .expect("the task")
                    .expect("served");
                assert_eq!(served, Served { cut: 0 }, "the idle connection was not cut");
                tokio::time::timeout(bound, conn)
                    .await
                    .expect("the connection is closed")
                    .expect("the task")
                    .expect("closed cleanly");
            });
    }

    /// A bound proxy shows its provider, upstream and address, never its client or ledger.
    #[test]
    fn a_proxy_shows_what_it_serves_where() {
        let temp = tempfile::tempdir().expect("temp dir");
        let proxy = proxy(&temp);
        let shown = format!("{proxy:?}");
        let listen = proxy.local_addr().to_string();
        assert!(listen.starts_with("127.0.0.1:"), "{listen}");
        assert_eq!(
            shown,
            format!(
                "Proxy {{ provider: \"anthropic\", upstream: \"http://127.0.0.1:9\", listen: \"{listen}\", .. }}"
            )
        );
    }

    /// Only a generation call takes from its key's budget, which the ledger's files show (a
    /// take, and the release of a call that got no response, write the key's state); a
    /// model list goes unaccounted.
    #[test]
    fn only_a_generation_call_takes_from_the_budget() {
        use http_body_util::BodyExt;
        let temp = tempfile::tempdir().expect("temp dir");
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(async {
                let bound = Duration::from_secs(20);
                let proxy = proxy(&temp);
                let Listen::Tcp(addr) = *proxy.local_addr() else {
                    panic!("a TCP proxy");
                };
                let trigger = proxy.trigger();
                let serving = tokio::spawn(proxy.serve(std::future::pending()));
                let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .expect("handshake");
                tokio::spawn(conn);
                let state = |token: &str| {
                    let name = worklane_budget::CredentialKey::of_token(token)
                        .state_name_of(Provider::Anthropic.name());
                    temp.path().join(name).exists()
                };
                for (method, path, token) in [
                    ("GET", "/v1/models", "sk-list-not-real"),
                    ("POST", "/v1/messages", "sk-generate-not-real"),
                ] {
                    tokio::time::timeout(bound, sender.ready())
                        .await
                        .expect("ready in time")
                        .expect("the connection");
                    let request = Request::builder()
                        .method(method)
                        .uri(path)
                        .header("host", "proxy")
                        .header("x-api-key", token)
                        .body(Full::<Bytes>::from(r#"{"max_tokens":1}"#))
                        .expect("request");
                    let response = tokio::time::timeout(bound, sender.send_request(request))
                        .await
                        .expect("an answer in time")
                        .expect("an answer");
                    assert_eq!(response.status(), 502, "{path}: nobody serves the upstream");
                    response.into_body().collect().await.expect("its body");
                }
                let started = Instant::now();
                while !state("sk-generate-not-real") {
                    assert!(
                        started.elapsed() < bound,
                        "the message's take wrote its state"
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                assert!(!state("sk-list-not-real"), "the model list took nothing");
                trigger.fire();
                tokio::time::timeout(bound, serving)
                    .await
                    .expect("serving ends")
                    .expect("the task")
                    .expect("served");
            });
    }

    /// Serving ends when its trigger fires (the shutdown future still pending) and when its
    /// shutdown future ends (the trigger never fired), each within a bound.
    #[test]
    fn serving_ends_when_its_trigger_fires_or_its_shutdown_future_ends() {
        let temp = tempfile::tempdir().expect("temp dir");
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(async {
                let bound = Duration::from_secs(20);
                let fired = proxy(&temp);
                let trigger = fired.trigger();
                let serving = tokio::spawn(fired.serve(std::future::pending()));
                trigger.fire();
                let served = tokio::time::timeout(bound, serving)
                    .await
                    .expect("serving ends when its trigger fires")
                    .expect("the task")
                    .expect("served");
                assert_eq!(served, Served { cut: 0 });
                let (end, ended) = tokio::sync::oneshot::channel::<()>();
                let serving = tokio::spawn(proxy(&temp).serve(async {
                    let _ = ended.await;
                }));
                end.send(()).expect("serving");
                tokio::time::timeout(bound, serving)
                    .await
                    .expect("serving ends with its shutdown future")
                    .expect("the task")
                    .expect("served");
            });
    }
}
