//! Forwarding: the request as the upstream gets it (hop-by-hop headers dropped, `Host` the
//! upstream's, its body replayed from what was read and streamed on), and the response's
//! body as the client gets it, read for its usage as it passes and settled when it ends or
//! is dropped.

use crate::Upstream;
use crate::lanes::Reservation;
use crate::usage::UsageScan;
use http::Request;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http_body_util::BodyExt;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use worklane_budget::ProviderObservation;

/// The headers that belong to one connection, never forwarded (RFC 9110 section 7.6.1),
/// beside those the `Connection` header names.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Removes the hop-by-hop headers and those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().chain(&named) {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

/// The key a request's credential draws from: its `x-api-key` (Anthropic), else its
/// `Authorization: Bearer` token (OpenAI and most others), hashed at once; the token itself
/// is not kept.
pub(crate) fn credential(headers: &HeaderMap) -> Option<worklane_budget::CredentialKey> {
    let value = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let token = value(HeaderName::from_static("x-api-key"))
        .map(str::trim)
        .or_else(|| {
            let auth = value(header::AUTHORIZATION)?.trim();
            let (scheme, token) = auth.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|t| !t.is_empty())?;
    Some(worklane_budget::CredentialKey::of_token(token))
}

/// The request the upstream gets.
pub(crate) fn upstream_request(
    parts: &Parts,
    upstream: &Upstream,
    body: Outgoing,
) -> Result<Request<Outgoing>, http::Error> {
    let mut headers = parts.headers.clone();
    strip_hop_by_hop(&mut headers);
    headers.remove(header::HOST);
    // The proxy reads the response's usage: it asks for it uncompressed (the client's leg is
    // loopback or a local socket, where compression gains nothing).
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    let mut request = Request::builder()
        .method(parts.method.clone())
        .uri(upstream.uri_for(parts.uri.path_and_query())?)
        .body(body)?;
    headers.insert(
        header::HOST,
        HeaderValue::from_str(upstream.authority().as_str()).map_err(http::Error::from)?,
    );
    *request.headers_mut() = headers;
    Ok(request)
}

/// The start of a request's body, read before it is forwarded.
pub(crate) struct Prefix {
    /// The frames read, to be sent first.
    frames: VecDeque<Frame<Bytes>>,
    /// Their data, one piece (at most about [`crate::PEEK_LIMIT`] and one frame).
    pub(crate) bytes: Vec<u8>,
    /// The rest of the body, unread; `None` when it was read whole.
    rest: Option<Incoming>,
}

impl Prefix {
    /// Whether the whole body was read.
    pub(crate) fn complete(&self) -> bool {
        self.rest.is_none()
    }
}

/// Reads `body` until its end or until `limit` bytes.
pub(crate) async fn read_prefix(mut body: Incoming, limit: usize) -> Result<Prefix, hyper::Error> {
    let mut frames = VecDeque::new();
    let mut bytes = Vec::new();
    loop {
        if body.is_end_stream() {
            return Ok(Prefix {
                frames,
                bytes,
                rest: None,
            });
        }
        if bytes.len() >= limit {
            return Ok(Prefix {
                frames,
                bytes,
                rest: Some(body),
            });
        }
        match body.frame().await {
            None => {
                return Ok(Prefix {
                    frames,
                    bytes,
                    rest: None,
                });
            }
            Some(frame) => {
                let frame = frame?;
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                }
                frames.push_back(frame);
            }
        }
    }
}

/// A request's body on its way to the upstream: the frames read first, then the rest as it
/// comes.
pub(crate) struct Outgoing {
    frames: VecDeque<Frame<Bytes>>,
    rest: Option<Incoming>,
    /// Data bytes still in `frames`.
    queued: u64,
}

impl Outgoing {
    /// The body of `prefix`, then of the rest.
    pub(crate) fn replay(prefix: Prefix) -> Outgoing {
        let queued = prefix
            .frames
            .iter()
            .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
            .sum();
        Outgoing {
            frames: prefix.frames,
            rest: prefix.rest,
            queued,
        }
    }

    /// A body streamed as it comes.
    pub(crate) fn stream(body: Incoming) -> Outgoing {
        Outgoing {
            frames: VecDeque::new(),
            rest: Some(body),
            queued: 0,
        }
    }
}

impl Body for Outgoing {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(frame) = this.frames.pop_front() {
            if let Some(data) = frame.data_ref() {
                this.queued -= data.len() as u64;
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        match &mut this.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint);
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + self.queued);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + self.queued);
        }
        hint
    }
}

/// A response's body on its way to the client. Each frame passes as it comes; its data is
/// read for the usage on the way. The response is settled when the body ends, or when it is
/// dropped before (the client went away, the upstream broke off, the proxy's drain ran out).
pub(crate) struct Observing {
    inner: Incoming,
    scan: Option<UsageScan>,
    settle: Settle,
    reservation: Option<Reservation>,
}

/// How a response settles its reservation at its end (a response whose head reported a
/// window of every dimension the take reserved was settled by its head, and has none left).
pub(crate) enum Settle {
    /// Its head is not recorded yet (a body that follows its head at once): one
    /// observation, the head's windows with the body's usage, records it and settles the
    /// reservation.
    Head(ProviderObservation),
    /// Its head was recorded as it arrived (a stream, which may last minutes: its windows,
    /// its status and a pause count from its first byte, in the order the provider
    /// answered); the body's usage replaces the estimate in the windows the head did not
    /// report, and its status is not recorded again (an overload answered meanwhile stays
    /// counted in a row).
    Recorded,
}

impl Observing {
    pub(crate) fn new(
        inner: Incoming,
        scan: UsageScan,
        settle: Settle,
        reservation: Option<Reservation>,
    ) -> Observing {
        Observing {
            inner,
            scan: Some(scan),
            settle,
            reservation,
        }
    }

    /// Settles the reservation: with the usage read when the body ended whole. A body cut
    /// short has no usage: the estimate stays counted where no window of the response
    /// counts the request, since the upstream counted it and giving it back would overstate
    /// what is left (the ledger gives back the estimate of a response that says no usage).
    fn settle(&mut self, whole: bool) {
        let scan = self.scan.take();
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        let usage = if whole {
            scan.and_then(UsageScan::finish)
        } else {
            log::debug!("a response ended before its body did: its estimate stays counted");
            Some(reservation.estimate())
        };
        let settle = std::mem::replace(&mut self.settle, Settle::Recorded);
        match settle {
            Settle::Head(observation) => reservation.settle(observation.with_usage(usage)),
            Settle::Recorded => {
                reservation.settle(ProviderObservation::default().with_usage(usage));
            }
        }
    }
}

impl Body for Observing {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(scan)) = (frame.data_ref(), this.scan.as_mut()) {
                    scan.feed(data);
                }
                // A body of known length ends with its last byte: hyper may not ask again.
                if this.inner.is_end_stream() {
                    this.settle(true);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.settle(false);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.settle(true);
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Observing {
    fn drop(&mut self) {
        self.settle(self.inner.is_end_stream());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("name"),
                value.parse().expect("value"),
            );
        }
        map
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_dropped() {
        let mut map = headers(&[
            ("connection", "keep-alive, x-private"),
            ("keep-alive", "timeout=5"),
            ("x-private", "1"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic x"),
            ("anthropic-version", "2023-06-01"),
            ("x-api-key", "k"),
        ]);
        strip_hop_by_hop(&mut map);
        let mut left: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["anthropic-version", "x-api-key"]);
    }

    #[test]
    fn the_credential_is_the_api_key_or_the_bearer_token() {
        let key = worklane_budget::CredentialKey::of_token;
        assert_eq!(
            credential(&headers(&[("x-api-key", "sk-ant-1")])),
            Some(key("sk-ant-1"))
        );
        assert_eq!(
            credential(&headers(&[("authorization", "Bearer sk-proj-2")])),
            Some(key("sk-proj-2"))
        );
        assert_eq!(
            credential(&headers(&[("authorization", "bearer  sk-3 ")])),
            Some(key("sk-3")),
            "the scheme in any case, the token trimmed"
        );
        assert_eq!(
            credential(&headers(&[
                ("x-api-key", "a"),
                ("authorization", "Bearer b")
            ])),
            Some(key("a")),
            "x-api-key first"
        );
        for none in [
            headers(&[]),
            headers(&[("authorization", "Basic dXNlcjpwdw==")]),
            headers(&[("authorization", "Bearer ")]),
            headers(&[("x-api-key", "")]),
        ] {
            assert_eq!(credential(&none), None, "{none:?}");
        }
    }

    /// A body replayed from the frames read first: they go out in order, and its size hint
    /// stays exact as they go (it is what hyper frames the upstream request by).
    #[test]
    fn a_replayed_body_gives_its_frames_in_order_with_an_exact_size() {
        let mut frames = VecDeque::new();
        frames.push_back(Frame::data(Bytes::from_static(b"abc")));
        frames.push_back(Frame::data(Bytes::from_static(b"de")));
        let mut body = Outgoing::replay(Prefix {
            frames,
            bytes: b"abcde".to_vec(),
            rest: None,
        });
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut next = |body: &mut Outgoing| match Pin::new(body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => Some(frame.into_data().expect("data")),
            Poll::Ready(None) => None,
            other => panic!("a replayed body is ready at once: {other:?}"),
        };
        for (expected, left) in [(&b"abc"[..], 2), (&b"de"[..], 0)] {
            assert!(!body.is_end_stream(), "frames are left");
            assert_eq!(body.size_hint().exact(), Some(left + expected.len() as u64));
            assert_eq!(next(&mut body).as_deref(), Some(expected));
            assert_eq!(body.size_hint().exact(), Some(left), "after {expected:?}");
        }
        assert!(body.is_end_stream(), "read whole");
        assert_eq!(next(&mut body), None);
    }

    /// A response's body tells hyper the upstream body's size as it is (hyper frames the
    /// client's response by it): 5 bytes announced, 5 bytes hinted, exactly.
    #[test]
    fn an_observed_body_hints_the_upstream_body_s_size() {
        use std::io::{Read, Write};
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = upstream.local_addr().expect("its address");
        let served = std::thread::spawn(move || {
            let (mut conn, _) = upstream.accept().expect("accept");
            conn.set_read_timeout(Some(std::time::Duration::from_secs(20)))
                .expect("a read bound");
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                assert_eq!(
                    conn.read(&mut byte).expect("the request"),
                    1,
                    "a whole head"
                );
                head.push(byte[0]);
            }
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
                .expect("the response");
            head
        });
        let hint = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(async {
                let bound = std::time::Duration::from_secs(20);
                let stream = tokio::time::timeout(bound, tokio::net::TcpStream::connect(addr))
                    .await
                    .expect("connected in time")
                    .expect("connect");
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await
                        .expect("handshake");
                tokio::spawn(conn);
                let request = Request::get("/v1/models")
                    .header("host", "upstream")
                    .body(http_body_util::Empty::<Bytes>::new())
                    .expect("request");
                let response = tokio::time::timeout(bound, sender.send_request(request))
                    .await
                    .expect("a response in time")
                    .expect("a response");
                let (head, body) = response.into_parts();
                let observing = Observing::new(
                    body,
                    UsageScan::for_response(&head.headers),
                    Settle::Head(ProviderObservation::default()),
                    None,
                );
                let hint = observing.size_hint();
                (hint.lower(), hint.upper())
            });
        let head = served.join().expect("the upstream");
        assert!(head.starts_with(b"GET /v1/models "), "{head:?}");
        assert_eq!(hint, (5, Some(5)), "the upstream's length, exactly");
    }

    #[test]
    fn the_upstream_request_keeps_method_path_and_headers_and_sets_host() {
        let (parts, ()) = Request::builder()
            .method("POST")
            .uri("/v1/messages?beta=1")
            .header("host", "127.0.0.1:8480")
            .header("accept-encoding", "gzip, br")
            .header("connection", "close")
            .header("anthropic-version", "2023-06-01")
            .body(())
            .expect("request")
            .into_parts();
        let upstream: Upstream = "https://api.anthropic.com/base".parse().expect("upstream");
        let outgoing = Outgoing {
            frames: VecDeque::new(),
            rest: None,
            queued: 0,
        };
        let request = upstream_request(&parts, &upstream, outgoing).expect("request");
        assert_eq!(request.method(), "POST");
        assert_eq!(
            request.uri().to_string(),
            "https://api.anthropic.com/base/v1/messages?beta=1"
        );
        assert_eq!(request.headers()["host"], "api.anthropic.com");
        assert_eq!(request.headers()["accept-encoding"], "identity");
        assert_eq!(request.headers()["anthropic-version"], "2023-06-01");
        assert!(request.headers().get("connection").is_none());
        assert!(request.body().is_end_stream());
        assert_eq!(request.body().size_hint().exact(), Some(0));
    }
}
