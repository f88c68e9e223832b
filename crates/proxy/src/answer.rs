//! The proxy's own answers, each in the provider's own error shape so that its SDK reads
//! them as it reads the provider's: a 429 when the budget stays spent or paused past the
//! wait, a 502 when the upstream cannot be reached, a 400 for a body that cannot be read, a
//! 403 for a stranger on the Unix socket.

use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Bytes;
use serde::Serialize;
use std::time::Duration;
use worklane_budget::{Provider, Refused};
use worklane_lease::rfc3339_ms;

/// The header that marks an answer the proxy made itself (the upstream was not asked): the
/// refusal's kind (`rate_limited`, `secondary_rate_limited`), or `upstream_unreachable`,
/// `bad_request`, `forbidden`.
pub const ANSWERED_HEADER: &str = "x-worklane-proxy";

/// Anthropic's error body: `{"type":"error","error":{"type":..,"message":..}}`.
#[derive(Serialize)]
struct AnthropicError<'a> {
    r#type: &'static str,
    error: AnthropicDetail<'a>,
}

#[derive(Serialize)]
struct AnthropicDetail<'a> {
    r#type: &'a str,
    message: &'a str,
}

/// OpenAI's error body: `{"error":{"message":..,"type":..,"param":null,"code":..}}` (also
/// what OpenAI-compatible providers answer, so a generic provider gets it too).
#[derive(Serialize)]
struct OpenaiError<'a> {
    error: OpenaiDetail<'a>,
}

#[derive(Serialize)]
struct OpenaiDetail<'a> {
    message: &'a str,
    r#type: &'a str,
    param: Option<()>,
    code: Option<&'a str>,
}

/// What went wrong, in each shape's words.
struct Kind {
    status: StatusCode,
    /// Anthropic's `error.type`.
    anthropic: &'static str,
    /// OpenAI's `error.type`.
    openai: &'static str,
    /// OpenAI's `error.code`.
    code: Option<&'static str>,
    /// The marker of [`ANSWERED_HEADER`].
    marker: &'static str,
}

fn answer(provider: &Provider, kind: &Kind, message: &str) -> Response<Full<Bytes>> {
    let body = match provider {
        Provider::Anthropic => serde_json::to_vec(&AnthropicError {
            r#type: "error",
            error: AnthropicDetail {
                r#type: kind.anthropic,
                message,
            },
        }),
        _ => serde_json::to_vec(&OpenaiError {
            error: OpenaiDetail {
                message,
                r#type: kind.openai,
                param: None,
                code: kind.code,
            },
        }),
    }
    .unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = kind.status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(ANSWERED_HEADER, HeaderValue::from_static(kind.marker));
    response
}

/// 429: the budget stayed spent or paused for the whole wait; the request was not sent.
/// `retry-after` (whole seconds, at least 1) and `retry-after-ms` say when it may be.
pub(crate) fn refused(
    provider: &Provider,
    refused: &Refused,
    waited: Duration,
    now_ms: u64,
) -> Response<Full<Bytes>> {
    let waited_ms = waited.as_millis();
    let name = provider.name();
    let (until, message, openai) = match refused {
        Refused::SecondaryRateLimited { until, .. } => (
            *until,
            format!(
                "worklane proxy: every request on this API key is paused until {} after a \
                 rate limit from {name} (waited {waited_ms} ms); the request was not sent",
                rfc3339_ms(*until)
            ),
            "rate_limit_error",
        ),
        Refused::RateLimited {
            resource, reset_at, ..
        } => (
            *reset_at,
            format!(
                "worklane proxy: this machine's shared {name} budget for this API key has no \
                 {resource} left until {} (waited {waited_ms} ms); the request was not sent",
                rfc3339_ms(*reset_at)
            ),
            if resource == "requests" {
                "requests"
            } else {
                "tokens"
            },
        ),
        _ => (
            now_ms.saturating_add(1000),
            format!("worklane proxy: {refused}"),
            "rate_limit_error",
        ),
    };
    let kind = Kind {
        status: StatusCode::TOO_MANY_REQUESTS,
        anthropic: "rate_limit_error",
        openai,
        code: Some("rate_limit_exceeded"),
        marker: refused.kind(),
    };
    let wait_ms = until.saturating_sub(now_ms).max(1);
    let mut response = answer(provider, &kind, &message);
    let headers = response.headers_mut();
    headers.insert(
        http::header::RETRY_AFTER,
        HeaderValue::from(wait_ms.div_ceil(1000)),
    );
    headers.insert("retry-after-ms", HeaderValue::from(wait_ms));
    response
}

/// 502: the upstream could not be reached or failed before its response began; `why` is
/// the client's error chain (no request content, no key).
pub(crate) fn unreachable(provider: &Provider, upstream: &str, why: &str) -> Response<Full<Bytes>> {
    let kind = Kind {
        status: StatusCode::BAD_GATEWAY,
        anthropic: "api_error",
        openai: "server_error",
        code: None,
        marker: "upstream_unreachable",
    };
    answer(
        provider,
        &kind,
        &format!("worklane proxy: cannot reach {upstream}: {why}"),
    )
}

/// 400: the request's body could not be read from the client.
pub(crate) fn bad_request(provider: &Provider, why: &str) -> Response<Full<Bytes>> {
    let kind = Kind {
        status: StatusCode::BAD_REQUEST,
        anthropic: "invalid_request_error",
        openai: "invalid_request_error",
        code: None,
        marker: "bad_request",
    };
    answer(provider, &kind, &format!("worklane proxy: {why}"))
}

/// 403: a peer on the Unix socket that is neither root, the slot directory's owner nor in
/// its group.
pub(crate) fn forbidden(provider: &Provider) -> Response<Full<Bytes>> {
    let kind = Kind {
        status: StatusCode::FORBIDDEN,
        anthropic: "permission_error",
        openai: "permission_error",
        code: None,
        marker: "forbidden",
    };
    answer(
        provider,
        &kind,
        "worklane proxy: only root, the slot directory's owner and members of its group may \
         use this socket",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn body(response: Response<Full<Bytes>>) -> serde_json::Value {
        let bytes = futures_lite_block(response.into_body());
        serde_json::from_slice(&bytes).expect("a JSON body")
    }

    /// A `Full` body is ready at once: one poll reads it.
    fn futures_lite_block(body: Full<Bytes>) -> Bytes {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut collect = std::pin::pin!(body.collect());
        match collect.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(collected)) => collected.to_bytes(),
            _ => panic!("a full body is ready"),
        }
    }

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn a_refusal_is_a_429_in_anthropic_s_shape_with_retry_after() {
        let refusal = Refused::SecondaryRateLimited {
            until: NOW + 2_500,
            waited_ms: 0,
        };
        let response = refused(
            &Provider::Anthropic,
            &refusal,
            Duration::from_millis(7),
            NOW,
        );
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "3", "whole seconds, up");
        assert_eq!(response.headers()["retry-after-ms"], "2500");
        assert_eq!(
            response.headers()[ANSWERED_HEADER],
            "secondary_rate_limited"
        );
        let json = body(response);
        assert_eq!(json["type"], "error");
        assert_eq!(json["error"]["type"], "rate_limit_error");
        let message = json["error"]["message"].as_str().expect("message");
        assert!(
            message.contains("paused") && message.contains("waited 7 ms"),
            "{message}"
        );
    }

    #[test]
    fn a_refusal_is_a_429_in_openai_s_shape_naming_the_dimension() {
        for (resource, kind) in [
            ("requests", "requests"),
            ("tokens", "tokens"),
            ("input-tokens", "tokens"),
        ] {
            let refusal = Refused::RateLimited {
                resource: resource.to_owned(),
                reset_at: NOW + 20,
                waited_ms: 0,
            };
            let response = refused(&Provider::Openai, &refusal, Duration::ZERO, NOW);
            assert_eq!(response.headers()["retry-after"], "1", "at least a second");
            assert_eq!(response.headers()[ANSWERED_HEADER], "rate_limited");
            let json = body(response);
            assert_eq!(json["error"]["type"], kind, "{resource}");
            assert_eq!(json["error"]["code"], "rate_limit_exceeded");
            assert!(json["error"]["param"].is_null());
        }
    }

    #[test]
    fn the_other_answers_have_their_status_and_shape() {
        let response = unreachable(&Provider::Anthropic, "https://x", "connection refused");
        assert_eq!(response.status(), 502);
        assert_eq!(body(response)["error"]["type"], "api_error");
        let response = bad_request(&Provider::Openai, "the body broke off");
        assert_eq!(response.status(), 400);
        assert_eq!(body(response)["error"]["type"], "invalid_request_error");
        let response = forbidden(&Provider::Anthropic);
        assert_eq!(response.status(), 403);
        assert_eq!(response.headers()[ANSWERED_HEADER], "forbidden");
    }
}
