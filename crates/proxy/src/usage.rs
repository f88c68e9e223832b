//! What a response says it used, read from its body as it passes (never holding a chunk
//! back): a JSON body's `usage`, or a stream's events, both read by `worklane-budget`
//! ([`Usage::of_body`], [`StreamUsage`]: Anthropic's `message_start` and `message_delta`,
//! OpenAI's last chat chunk, the Responses API's `response.completed`). This file decides
//! which a body is, from its headers, and bounds what is kept of it.

use http::HeaderMap;
use worklane_budget::{StreamUsage, Usage};

/// The longest JSON body kept to read its usage: 2 MiB (a longer one is observed by its
/// headers alone).
pub const MAX_JSON_BODY: usize = 2 << 20;
/// The longest stream event line kept to read its usage: 64 KiB (usage events are small; a
/// longer line is passed on and skipped).
pub const MAX_EVENT_LINE: usize = 64 << 10;

/// Reads a response body's usage chunk by chunk.
#[derive(Debug)]
pub(crate) struct UsageScan {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// The JSON body so far; `None` once it is too long to keep (given up).
    Json(Option<Vec<u8>>),
    /// Server-sent events, read line by line (a line over [`MAX_EVENT_LINE`] skipped).
    Events(StreamUsage),
    /// Another type, or a compressed body: not read.
    Nothing,
}

impl UsageScan {
    /// The scan of a response with `headers`: server-sent events, JSON, or (another type, or a
    /// compressed body) nothing.
    pub(crate) fn for_response(headers: &HeaderMap) -> UsageScan {
        let header = |name| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        };
        let encoding = header(http::header::CONTENT_ENCODING);
        let media = header(http::header::CONTENT_TYPE);
        if !(encoding.is_empty() || encoding == "identity") {
            UsageScan::nothing()
        } else if media.starts_with("text/event-stream") {
            UsageScan::events()
        } else if media.starts_with("application/json") || media.contains("+json") {
            UsageScan::json()
        } else {
            UsageScan::nothing()
        }
    }

    fn json() -> UsageScan {
        UsageScan {
            kind: Kind::Json(Some(Vec::new())),
        }
    }

    fn events() -> UsageScan {
        UsageScan {
            kind: Kind::Events(StreamUsage::new().max_line(MAX_EVENT_LINE)),
        }
    }

    fn nothing() -> UsageScan {
        UsageScan {
            kind: Kind::Nothing,
        }
    }

    /// Whether the body is a stream of events.
    pub(crate) fn is_stream(&self) -> bool {
        matches!(self.kind, Kind::Events(_))
    }

    /// Takes in the next chunk of the body.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        match &mut self.kind {
            Kind::Nothing | Kind::Json(None) => {}
            Kind::Json(Some(buf)) => {
                if buf.len() + chunk.len() > MAX_JSON_BODY {
                    self.kind = Kind::Json(None);
                } else {
                    buf.extend_from_slice(chunk);
                }
            }
            Kind::Events(stream) => stream.feed(chunk),
        }
    }

    /// The body ended: what it said it used, if it said.
    pub(crate) fn finish(self) -> Option<Usage> {
        match self.kind {
            Kind::Nothing | Kind::Json(None) => None,
            Kind::Json(Some(buf)) => {
                let value = serde_json::from_slice(&buf).ok()?;
                Usage::of_body(&value)
            }
            Kind::Events(stream) => stream.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ANTHROPIC_STREAM: &str = "event: message_start\n\
        data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n\
        event: content_block_delta\n\
        data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n\
        event: message_delta\n\
        data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n\
        event: message_delta\n\
        data: {\"type\":\"message_delta\",\"delta\":{},\"usage\":{\"output_tokens\":15}}\n\n\
        event: message_stop\n\
        data: {\"type\":\"message_stop\"}\n\n";

    fn scan(mut scan: UsageScan, chunks: &[&[u8]]) -> Option<Usage> {
        for chunk in chunks {
            scan.feed(chunk);
        }
        scan.finish()
    }

    fn usage(input_tokens: u64, output_tokens: u64) -> Option<Usage> {
        Some(Usage {
            input_tokens,
            output_tokens,
        })
    }

    #[test]
    fn a_stream_is_read_by_the_budget_s_stream_reader_with_its_line_bound() {
        // Each provider's events are the budget crate's tests (`provider/usage.rs`); here, that
        // an event stream goes to that reader, bounded.
        assert_eq!(
            scan(UsageScan::events(), &[ANTHROPIC_STREAM.as_bytes()]),
            usage(25, 15),
            "message_start's input, the last message_delta's output"
        );
        let responses = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}}";
        assert_eq!(
            scan(UsageScan::events(), &[responses.as_bytes()]),
            usage(3, 2),
            "OpenAI's response.usage; the last line needs no newline"
        );
        let long = format!(
            "data: {{\"usage\":{{\"input_tokens\":1}},\"pad\":\"{}\"}}\n",
            "x".repeat(MAX_EVENT_LINE)
        );
        let next = "data: {\"usage\":{\"input_tokens\":4,\"output_tokens\":5}}\n";
        assert_eq!(
            scan(UsageScan::events(), &[long.as_bytes(), next.as_bytes()]),
            usage(4, 5),
            "a line over MAX_EVENT_LINE is skipped"
        );
    }

    #[test]
    fn a_json_body_says_its_usage_and_other_bodies_nothing() {
        let body = br#"{"id":"m","content":[],"usage":{"input_tokens":9,"output_tokens":2}}"#;
        assert_eq!(
            scan(UsageScan::json(), &[&body[..10], &body[10..]]),
            usage(9, 2)
        );
        let responses = br#"{"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":2}}}"#;
        assert_eq!(scan(UsageScan::json(), &[responses]), usage(3, 2));
        assert_eq!(
            scan(UsageScan::json(), &[b"{\"usage\":"]),
            None,
            "cut short"
        );
        assert_eq!(scan(UsageScan::nothing(), &[body]), None);
        let long = vec![b' '; MAX_JSON_BODY];
        assert_eq!(
            scan(UsageScan::json(), &[&long, body]),
            None,
            "too long to keep"
        );
    }

    /// A JSON body of exactly `MAX_JSON_BODY` bytes is kept and read, one byte more is not
    /// (in one chunk or in two).
    #[test]
    fn a_json_body_is_read_up_to_max_json_body_bytes() {
        let usage_json = br#"{"usage":{"input_tokens":9,"output_tokens":2}}"#;
        let padded = |len: usize| {
            let mut body = vec![b' '; len - usage_json.len()];
            body.extend_from_slice(usage_json);
            body
        };
        let exact = padded(MAX_JSON_BODY);
        assert_eq!(
            scan(UsageScan::json(), &[&exact]),
            usage(9, 2),
            "exactly the bound"
        );
        let (head, tail) = exact.split_at(MAX_JSON_BODY / 2);
        assert_eq!(
            scan(UsageScan::json(), &[head, tail]),
            usage(9, 2),
            "in two"
        );
        let over = padded(MAX_JSON_BODY + 1);
        assert_eq!(scan(UsageScan::json(), &[&over]), None, "a byte past it");
        let (head, tail) = over.split_at(MAX_JSON_BODY / 2);
        assert_eq!(scan(UsageScan::json(), &[head, tail]), None, "in two");
    }

    #[test]
    fn the_kind_comes_from_the_headers() {
        let kind = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, value.parse().expect("value"));
            }
            match UsageScan::for_response(&headers).kind {
                Kind::Json(_) => "json",
                Kind::Events(_) => "events",
                Kind::Nothing => "nothing",
            }
        };
        assert_eq!(
            kind(&[("content-type", "text/event-stream; charset=utf-8")]),
            "events"
        );
        assert_eq!(kind(&[("content-type", "application/json")]), "json");
        assert_eq!(
            kind(&[("content-type", "application/problem+json")]),
            "json"
        );
        assert_eq!(kind(&[("content-type", "text/html")]), "nothing");
        assert_eq!(
            kind(&[
                ("content-type", "application/json"),
                ("content-encoding", "gzip")
            ]),
            "nothing",
            "a compressed body is not read"
        );
        assert_eq!(kind(&[]), "nothing");
    }

    proptest! {
        #[test]
        fn no_bytes_make_it_panic(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
            let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            for fresh in [UsageScan::events, UsageScan::json] {
                let _ = scan(fresh(), &refs);
            }
        }
    }
}
