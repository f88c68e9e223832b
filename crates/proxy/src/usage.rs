//! What a response says it used, read from its body as it passes (never holding a chunk
//! back): a JSON body's `usage`, or a stream's events (Anthropic: the input in
//! `message_start`, the output, cumulative, in the last `message_delta`; OpenAI: the last
//! chunk's `usage`, or `response.completed`'s `response.usage`).

use http::HeaderMap;
use worklane_budget::Usage;

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
    /// The JSON body so far, or the stream's unfinished line.
    buf: Vec<u8>,
    /// A stream line too long to keep: skipped up to its end. A JSON body too long: given
    /// up.
    overflow: bool,
    usage: Option<Usage>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Json,
    Events,
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
        let kind = if !(encoding.is_empty() || encoding == "identity") {
            Kind::Nothing
        } else if media.starts_with("text/event-stream") {
            Kind::Events
        } else if media.starts_with("application/json") || media.contains("+json") {
            Kind::Json
        } else {
            Kind::Nothing
        };
        UsageScan::of_kind(kind)
    }

    fn of_kind(kind: Kind) -> UsageScan {
        UsageScan {
            kind,
            buf: Vec::new(),
            overflow: false,
            usage: None,
        }
    }

    /// Whether the body is a stream of events.
    pub(crate) fn is_stream(&self) -> bool {
        self.kind == Kind::Events
    }

    /// Takes in the next chunk of the body.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        match self.kind {
            Kind::Nothing => {}
            Kind::Json => {
                if self.overflow || self.buf.len() + chunk.len() > MAX_JSON_BODY {
                    self.overflow = true;
                    self.buf = Vec::new();
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
            Kind::Events => {
                let mut rest = chunk;
                while let Some(end) = rest.iter().position(|&b| b == b'\n') {
                    let (part, after) = rest.split_at(end);
                    if !self.overflow && self.buf.len() + part.len() <= MAX_EVENT_LINE {
                        self.buf.extend_from_slice(part);
                        let line = std::mem::take(&mut self.buf);
                        self.line(&line);
                    }
                    self.buf.clear();
                    self.overflow = false;
                    rest = &after[1..];
                }
                if self.overflow || self.buf.len() + rest.len() > MAX_EVENT_LINE {
                    self.overflow = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(rest);
                }
            }
        }
    }

    /// The body ended: what it said it used, if it said.
    pub(crate) fn finish(mut self) -> Option<Usage> {
        match self.kind {
            Kind::Nothing => None,
            Kind::Json => {
                if self.overflow {
                    return None;
                }
                let value = serde_json::from_slice(&self.buf).ok()?;
                usage_of(&value)
            }
            Kind::Events => {
                if !self.overflow && !self.buf.is_empty() {
                    let line = std::mem::take(&mut self.buf);
                    self.line(&line);
                }
                self.usage
            }
        }
    }

    /// One line of a stream: a `data:` line that mentions a usage is read.
    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        if !data.windows(7).any(|w| w == b"\"usage\"") {
            return;
        }
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
            return;
        };
        if let Some(found) = usage_of(&value) {
            self.usage = Some(match self.usage {
                None => found,
                // Each event says its part: Anthropic's `message_start` the input (and an
                // output of 1 or so), its `message_delta`s the output so far.
                Some(seen) => Usage {
                    input_tokens: if found.input_tokens > 0 {
                        found.input_tokens
                    } else {
                        seen.input_tokens
                    },
                    output_tokens: if found.output_tokens > 0 {
                        found.output_tokens
                    } else {
                        seen.output_tokens
                    },
                },
            });
        }
    }
}

/// The usage of a body or event: its own `usage` (or `message.usage`), or OpenAI's
/// responses API's `response.usage`.
fn usage_of(value: &serde_json::Value) -> Option<Usage> {
    if value.get("usage").is_some_and(|u| !u.is_null()) || value.get("message").is_some() {
        return Usage::of_json(value);
    }
    value.get("response").and_then(Usage::of_json)
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

    const OPENAI_STREAM: &str = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\r\n\r\n\
        data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":4,\"total_tokens\":15}}\r\n\r\n\
        data: [DONE]\r\n\r\n";

    fn scan(kind: Kind, chunks: &[&[u8]]) -> Option<Usage> {
        let mut scan = UsageScan::of_kind(kind);
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
    fn each_provider_s_stream_says_its_usage() {
        assert_eq!(
            scan(Kind::Events, &[ANTHROPIC_STREAM.as_bytes()]),
            usage(25, 15),
            "message_start's input, the last message_delta's output"
        );
        assert_eq!(
            scan(Kind::Events, &[OPENAI_STREAM.as_bytes()]),
            usage(11, 4)
        );
        let responses = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}}";
        assert_eq!(
            scan(Kind::Events, &[responses.as_bytes()]),
            usage(3, 2),
            "the last line needs no newline"
        );
        assert_eq!(scan(Kind::Events, &[b"data: {\"x\":1}\n\n"]), None);
    }

    #[test]
    fn a_json_body_says_its_usage_and_other_bodies_nothing() {
        let body = br#"{"id":"m","content":[],"usage":{"input_tokens":9,"output_tokens":2}}"#;
        assert_eq!(scan(Kind::Json, &[&body[..10], &body[10..]]), usage(9, 2));
        assert_eq!(scan(Kind::Json, &[b"{\"usage\":"]), None, "cut short");
        assert_eq!(scan(Kind::Nothing, &[body]), None);
        let long = vec![b' '; MAX_JSON_BODY];
        assert_eq!(scan(Kind::Json, &[&long, body]), None, "too long to keep");
    }

    #[test]
    fn the_kind_comes_from_the_headers() {
        let kind = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, value.parse().expect("value"));
            }
            UsageScan::for_response(&headers).kind
        };
        assert_eq!(
            kind(&[("content-type", "text/event-stream; charset=utf-8")]),
            Kind::Events
        );
        assert_eq!(kind(&[("content-type", "application/json")]), Kind::Json);
        assert_eq!(
            kind(&[("content-type", "application/problem+json")]),
            Kind::Json
        );
        assert_eq!(kind(&[("content-type", "text/html")]), Kind::Nothing);
        assert_eq!(
            kind(&[
                ("content-type", "application/json"),
                ("content-encoding", "gzip")
            ]),
            Kind::Nothing,
            "a compressed body is not read"
        );
        assert_eq!(kind(&[]), Kind::Nothing);
    }

    #[test]
    fn a_line_too_long_is_skipped_and_the_next_one_read() {
        let long = format!(
            "data: {{\"usage\":{{\"input_tokens\":1}},\"pad\":\"{}\"}}\n",
            "x".repeat(MAX_EVENT_LINE)
        );
        let next = "data: {\"usage\":{\"input_tokens\":4,\"output_tokens\":5}}\n";
        assert_eq!(
            scan(Kind::Events, &[long.as_bytes(), next.as_bytes()]),
            usage(4, 5)
        );
        let (a, b) = long.split_at(MAX_EVENT_LINE / 2);
        assert_eq!(
            scan(Kind::Events, &[a.as_bytes(), b.as_bytes(), next.as_bytes()]),
            usage(4, 5),
            "also when it comes in pieces"
        );
    }

    proptest! {
        #[test]
        fn chunks_cut_anywhere_read_the_same(cuts in proptest::collection::vec(0usize..400, 0..12)) {
            for (stream, expected) in [(ANTHROPIC_STREAM, usage(25, 15)), (OPENAI_STREAM, usage(11, 4))] {
                let bytes = stream.as_bytes();
                let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
                points.sort_unstable();
                let mut chunks = Vec::new();
                let mut at = 0;
                for p in points {
                    chunks.push(&bytes[at..p]);
                    at = p;
                }
                chunks.push(&bytes[at..]);
                prop_assert_eq!(scan(Kind::Events, &chunks), expected);
            }
        }

        #[test]
        fn no_bytes_make_it_panic(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
            for kind in [Kind::Events, Kind::Json] {
                let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
                let _ = scan(kind, &refs);
            }
        }
    }
}
