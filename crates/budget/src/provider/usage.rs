//! What a response says it used: the `usage` of its JSON body, or of its stream of server-sent
//! events, read as it passes ([`StreamUsage`]) or whole ([`Usage::of_stream`]). One reading
//! for every caller: the proxy reads a response's body with it as it streams through, and
//! `worklane budget observe --usage-json` reads a saved body or stream with it.
//!
//! The shapes read:
//! - Anthropic: a body's `usage`; a stream's `message_start` (its `message.usage`: the input,
//!   and an output of 1 or so) and `message_delta` events (their `usage`: the output so far,
//!   cumulative, and in newer versions the input again);
//! - OpenAI's chat completions: a body's `usage`; a stream's last chunk (`choices` empty,
//!   `usage` set, when the request asked for `stream_options.include_usage`; every other
//!   chunk's `usage` is `null`);
//! - OpenAI's Responses API: a body's `usage`; a stream's `response.completed` event (its
//!   `response.usage`; the earlier `response.created` and `response.in_progress` events carry
//!   `"usage": null`).

use super::Dimension;
use crate::observe::MAX_SAFE;

/// A saved response that is neither a JSON body nor a stream of `data:` events
/// ([`Usage::of_saved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("neither a JSON body nor a stream of `data:` events")]
pub struct NotAResponse;

/// What a response used, from its body's `usage` (or the final stream event's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// The `usage` object of a response body or stream event, as Anthropic (`input_tokens`,
    /// `output_tokens`, and the cache counts, added to the input) or OpenAI
    /// (`prompt_tokens`, `completion_tokens`; or `input_tokens`, `output_tokens`) writes it;
    /// `value` may be the body itself (its `usage` is looked in, and Anthropic's
    /// `message.usage` of a `message_start` event). `None` when there is none or a count is
    /// not a whole safe number.
    #[must_use]
    pub fn of_json(value: &serde_json::Value) -> Option<Usage> {
        let usage = value
            .get("usage")
            .or_else(|| value.get("message").and_then(|m| m.get("usage")))
            .unwrap_or(value);
        let count = |name: &str| -> Option<Option<u64>> {
            match usage.get(name) {
                None | Some(serde_json::Value::Null) => Some(None),
                Some(v) => v.as_u64().filter(|&n| n <= MAX_SAFE).map(Some),
            }
        };
        let input = count("input_tokens")?.or(count("prompt_tokens")?);
        let output = count("output_tokens")?.or(count("completion_tokens")?);
        if input.is_none() && output.is_none() {
            return None;
        }
        let cached = count("cache_creation_input_tokens")?.unwrap_or(0)
            + count("cache_read_input_tokens")?.unwrap_or(0);
        Some(Usage {
            input_tokens: input.unwrap_or(0).saturating_add(cached).min(MAX_SAFE),
            output_tokens: output.unwrap_or(0),
        })
    }

    /// The usage a response's JSON body, or one event of its stream, says: its own `usage`
    /// (a body; Anthropic's `message_delta`; OpenAI's last chat chunk), Anthropic's
    /// `message.usage` (`message_start`), or the Responses API's `response.usage`
    /// (`response.completed`), read as [`Usage::of_json`] reads it. `None` when it says none
    /// (a chunk's `"usage": null` included).
    #[must_use]
    pub fn of_body(value: &serde_json::Value) -> Option<Usage> {
        if value.get("usage").is_some_and(|u| !u.is_null()) || value.get("message").is_some() {
            return Usage::of_json(value);
        }
        value.get("response").and_then(Usage::of_json)
    }

    /// The usage a whole stream of server-sent events says (its bytes, `\n` or `\r\n` line
    /// ends): [`StreamUsage`] fed all of it, lines of any length read. `None` when no event
    /// said one.
    #[must_use]
    pub fn of_stream(stream: &[u8]) -> Option<Usage> {
        let mut scan = StreamUsage::new();
        scan.feed(stream);
        scan.finish()
    }

    /// The usage a saved response says, whole: a JSON body (read as [`Usage::of_body`]), or a
    /// stream of events (as [`Usage::of_stream`]), as the proxy would have read it passing.
    /// `Ok(None)` when it says none; [`NotAResponse`] when it is neither a JSON body nor a
    /// stream of `data:` events (a gateway's HTML page, say).
    pub fn of_saved(raw: &[u8]) -> Result<Option<Usage>, NotAResponse> {
        let text = String::from_utf8_lossy(raw);
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
            return Ok(Usage::of_body(&value));
        }
        let usage = Usage::of_stream(raw);
        if usage.is_none() && !text.lines().any(|l| l.starts_with("data:")) {
            return Err(NotAResponse);
        }
        Ok(usage)
    }

    /// Both together.
    #[must_use]
    pub fn total(self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .min(MAX_SAFE)
    }

    /// The units of `dimension` this usage counts (a request counts 1).
    #[must_use]
    pub fn units(self, dimension: Dimension) -> u64 {
        match dimension {
            Dimension::Requests => 1,
            Dimension::Tokens => self.total(),
            Dimension::InputTokens => self.input_tokens,
            Dimension::OutputTokens => self.output_tokens,
        }
    }
}

/// A stream's usage, read as it passes chunk by chunk (never holding a chunk back): each
/// `data:` line that mentions a `"usage"` is read with [`Usage::of_body`], and each event says
/// its part: a count above 0 replaces the one seen before (Anthropic's `message_start` the
/// input, its `message_delta`s the output so far; OpenAI's one usage event both).
#[derive(Debug, Clone)]
pub struct StreamUsage {
    /// The stream's unfinished line.
    buf: Vec<u8>,
    /// The line being read is longer than `max_line`: skipped up to its end.
    overflow: bool,
    /// The longest line kept.
    max_line: usize,
    /// What the events read so far said.
    usage: Option<Usage>,
}

impl Default for StreamUsage {
    fn default() -> Self {
        StreamUsage::new()
    }
}

impl StreamUsage {
    /// A scan that keeps lines of any length.
    #[must_use]
    pub fn new() -> StreamUsage {
        StreamUsage {
            buf: Vec::new(),
            overflow: false,
            max_line: usize::MAX,
            usage: None,
        }
    }

    /// Keeps at most `bytes` of a line: a longer line is passed over and skipped (what a
    /// reader that must bound its memory, such as a proxy, sets; usage events are small, but
    /// a Responses API `response.completed` repeats the whole response).
    #[must_use]
    pub fn max_line(mut self, bytes: usize) -> StreamUsage {
        self.max_line = bytes;
        self
    }

    /// Takes in the next chunk of the stream (cut anywhere, a line or a UTF-8 character
    /// included).
    pub fn feed(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (part, after) = rest.split_at(end);
            if !self.overflow && self.buf.len().saturating_add(part.len()) <= self.max_line {
                self.buf.extend_from_slice(part);
                let line = std::mem::take(&mut self.buf);
                self.line(&line);
            }
            self.buf.clear();
            self.overflow = false;
            rest = &after[1..];
        }
        if self.overflow || self.buf.len().saturating_add(rest.len()) > self.max_line {
            self.overflow = true;
            self.buf.clear();
        } else {
            self.buf.extend_from_slice(rest);
        }
    }

    /// The stream ended (its last line needs no newline): what it said it used, if it said.
    #[must_use]
    pub fn finish(mut self) -> Option<Usage> {
        if !self.overflow && !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            self.line(&line);
        }
        self.usage
    }

    /// One line of the stream, without its `\n`: a `data:` line that mentions a usage is read.
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
        if let Some(found) = Usage::of_body(&value) {
            self.usage = Some(match self.usage {
                None => found,
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A Messages API stream as Anthropic sends it (`"stream": true`): the input (with the
    /// cache's reads and writes) in `message_start`, the output, cumulative, in each
    /// `message_delta`; a text that says "usage" in between.
    const ANTHROPIC_STREAM: &str = "event: message_start\n\
        data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-20250514\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":2048,\"output_tokens\":2,\"service_tier\":\"standard\"}}}\n\n\
        event: content_block_start\n\
        data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
        event: ping\n\
        data: {\"type\": \"ping\"}\n\n\
        event: content_block_delta\n\
        data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"The \\\"usage\\\" of the word\"}}\n\n\
        event: content_block_stop\n\
        data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
        event: message_delta\n\
        data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null,\"stop_sequence\":null},\"usage\":{\"output_tokens\":7}}\n\n\
        event: message_delta\n\
        data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n\
        event: message_stop\n\
        data: {\"type\":\"message_stop\"}\n\n";

    /// A chat completions stream as OpenAI sends it with `stream_options.include_usage`:
    /// every chunk `"usage": null` but the last, whose `choices` are empty; CRLF line ends.
    const OPENAI_CHAT_STREAM: &str = "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_f9f4fb6dbf\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\r\n\r\n\
        data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_f9f4fb6dbf\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\r\n\r\n\
        data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_f9f4fb6dbf\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\r\n\r\n\
        data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_f9f4fb6dbf\",\"choices\":[],\"usage\":{\"prompt_tokens\":19,\"completion_tokens\":10,\"total_tokens\":29,\"prompt_tokens_details\":{\"cached_tokens\":0,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}\r\n\r\n\
        data: [DONE]\r\n\r\n";

    /// A Responses API stream as OpenAI sends it: `response.created` and
    /// `response.in_progress` with `"usage": null`, the text's events, and `response.completed`
    /// whose `response.usage` says what was used.
    const OPENAI_RESPONSES_STREAM: &str = "event: response.created\n\
        data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"in_progress\",\"error\":null,\"incomplete_details\":null,\"instructions\":\"You are a helpful assistant.\",\"max_output_tokens\":null,\"model\":\"gpt-4.1-2025-04-14\",\"output\":[],\"parallel_tool_calls\":true,\"previous_response_id\":null,\"reasoning\":{\"effort\":null,\"summary\":null},\"store\":true,\"temperature\":1.0,\"text\":{\"format\":{\"type\":\"text\"}},\"tool_choice\":\"auto\",\"tools\":[],\"top_p\":1.0,\"truncation\":\"disabled\",\"usage\":null,\"user\":null,\"metadata\":{}}}\n\n\
        event: response.in_progress\n\
        data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"in_progress\",\"model\":\"gpt-4.1-2025-04-14\",\"output\":[],\"usage\":null}}\n\n\
        event: response.output_item.added\n\
        data: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n\
        event: response.output_text.delta\n\
        data: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,\"item_id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi there!\"}\n\n\
        event: response.output_text.done\n\
        data: {\"type\":\"response.output_text.done\",\"sequence_number\":5,\"item_id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"output_index\":0,\"content_index\":0,\"text\":\"Hi there!\"}\n\n\
        event: response.completed\n\
        data: {\"type\":\"response.completed\",\"sequence_number\":8,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"completed\",\"error\":null,\"model\":\"gpt-4.1-2025-04-14\",\"output\":[{\"id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi there!\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":37,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":11,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":48},\"user\":null,\"metadata\":{}}}\n\n";

    fn usage(input_tokens: u64, output_tokens: u64) -> Option<Usage> {
        Some(Usage {
            input_tokens,
            output_tokens,
        })
    }

    fn scan(scan: StreamUsage, chunks: &[&[u8]]) -> Option<Usage> {
        let mut scan = scan;
        for chunk in chunks {
            scan.feed(chunk);
        }
        scan.finish()
    }

    #[test]
    fn anthropic_s_stream_says_its_input_at_the_start_and_its_output_at_the_end() {
        assert_eq!(
            Usage::of_stream(ANTHROPIC_STREAM.as_bytes()),
            usage(472 + 100 + 2048, 15),
            "message_start's input with the cache's counts, the last message_delta's output"
        );
        // Newer API versions repeat the input, cumulative, in `message_delta`.
        let repeated = "event: message_start\n\
            data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":30,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n\
            event: message_delta\n\
            data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":30,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":64}}\n\n";
        assert_eq!(
            Usage::of_stream(repeated.as_bytes()),
            usage(30, 64),
            "a message_delta with the input repeated"
        );
    }

    #[test]
    fn openai_s_chat_stream_says_its_usage_in_the_last_chunk() {
        assert_eq!(
            Usage::of_stream(OPENAI_CHAT_STREAM.as_bytes()),
            usage(19, 10),
            "the last chunk's prompt and completion tokens; the null usages say nothing"
        );
        let without = OPENAI_CHAT_STREAM
            .split("\r\n\r\n")
            .filter(|event| !event.contains("\"prompt_tokens\""))
            .collect::<Vec<_>>()
            .join("\r\n\r\n");
        assert_eq!(
            Usage::of_stream(without.as_bytes()),
            None,
            "a stream asked without include_usage says nothing"
        );
    }

    #[test]
    fn openai_s_responses_stream_says_its_usage_in_response_completed() {
        assert_eq!(
            Usage::of_stream(OPENAI_RESPONSES_STREAM.as_bytes()),
            usage(37, 11),
            "response.completed's response.usage"
        );
        let completed = OPENAI_RESPONSES_STREAM
            .split("\n\n")
            .find(|event| event.starts_with("event: response.completed"))
            .and_then(|event| event.split_once("data: "))
            .map(|(_, data)| serde_json::from_str::<serde_json::Value>(data).expect("JSON"))
            .expect("a response.completed event");
        assert_eq!(
            Usage::of_body(&completed),
            usage(37, 11),
            "the event alone, as a body"
        );
        assert_eq!(
            Usage::of_json(&completed),
            None,
            "of_json alone does not look in `response`"
        );
        let last = OPENAI_RESPONSES_STREAM
            .trim_end()
            .rsplit_once('\n')
            .expect("lines")
            .0;
        assert_eq!(
            Usage::of_stream(last.as_bytes()),
            None,
            "a stream cut before response.completed says nothing"
        );
    }

    #[test]
    fn each_provider_s_body_says_its_usage() {
        let anthropic = serde_json::json!({"id": "msg_013Zva2CMHLNnXjNJJKqJ2EF", "type": "message",
            "role": "assistant", "model": "claude-sonnet-4-20250514",
            "content": [{"type": "text", "text": "Hi!"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 2095, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 5, "output_tokens": 503}});
        assert_eq!(Usage::of_body(&anthropic), usage(2100, 503));
        let chat = serde_json::json!({"id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
            "object": "chat.completion", "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi!"},
                "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
                "prompt_tokens_details": {"cached_tokens": 0}}});
        assert_eq!(Usage::of_body(&chat), usage(19, 10));
        let responses = serde_json::json!({"id": "resp_67ccd2bed1ec8190b14f964abc054267",
            "object": "response", "status": "completed", "model": "gpt-4.1-2025-04-14",
            "output": [{"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": "Hi!"}]}],
            "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 123}});
        assert_eq!(Usage::of_body(&responses), usage(36, 87));
        for says_none in [
            serde_json::json!({"id": "x"}),
            serde_json::json!({"choices": [], "usage": null}),
            serde_json::json!({"type": "response.created", "response": {"usage": null}}),
        ] {
            assert_eq!(Usage::of_body(&says_none), None, "{says_none}");
        }
    }

    #[test]
    fn usage_of_either_provider_and_of_a_stream_event() {
        let anthropic = serde_json::json!({"usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2}});
        assert_eq!(
            Usage::of_json(&anthropic),
            Some(Usage {
                input_tokens: 12,
                output_tokens: 5
            })
        );
        let start = serde_json::json!({"type": "message_start", "message": {"usage": {"input_tokens": 7, "output_tokens": 1}}});
        assert_eq!(Usage::of_json(&start).map(Usage::total), Some(8));
        let openai = serde_json::json!({"usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}});
        assert_eq!(
            Usage::of_json(&openai).map(|u| (u.input_tokens, u.output_tokens)),
            Some((3, 4))
        );
        for bad in [
            serde_json::json!({"usage": {"input_tokens": -1}}),
            serde_json::json!({"usage": {"input_tokens": "10"}}),
            serde_json::json!({"usage": {}}),
            serde_json::json!({"id": "x"}),
            serde_json::json!({"usage": {"input_tokens": 1.5}}),
        ] {
            assert_eq!(Usage::of_json(&bad), None, "{bad}");
        }
        assert_eq!(
            Usage {
                input_tokens: 2,
                output_tokens: 3
            }
            .units(Dimension::Requests),
            1
        );
    }

    #[test]
    fn a_saved_response_is_a_body_or_any_provider_s_stream() {
        assert_eq!(
            Usage::of_saved(
                br#"{"id":"msg_01","type":"message","usage":{"input_tokens":9,"output_tokens":2}}"#
            ),
            Ok(usage(9, 2)),
            "a JSON body"
        );
        assert_eq!(
            Usage::of_saved(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":1}}}\n\n\
                 event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":120}}\n\n"),
            Ok(usage(900, 120)),
            "Anthropic's stream"
        );
        assert_eq!(
            Usage::of_saved(b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\",\"usage\":null}}\n\n\
                 event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":37,\"output_tokens\":11,\"total_tokens\":48}}}\n\n"),
            Ok(usage(37, 11)),
            "OpenAI's Responses stream: response.completed's response.usage"
        );
        assert_eq!(
            Usage::of_saved(b"data: {\"choices\":[],\"usage\":null}\n\ndata: [DONE]\n\n"),
            Ok(None),
            "a stream that says no usage"
        );
        assert_eq!(
            Usage::of_saved(b"<html>502 Bad Gateway</html>"),
            Err(NotAResponse)
        );
    }

    #[test]
    fn the_last_line_needs_no_newline_and_other_lines_say_nothing() {
        let completed = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}}";
        assert_eq!(
            Usage::of_stream(completed.as_bytes()),
            usage(3, 2),
            "the last line needs no newline"
        );
        for nothing in [
            "data: {\"x\":1}\n\n",
            "data: [DONE]\n\n",
            ": a comment \"usage\"\n\n",
            "event: usage\nid: \"usage\"\n\n",
            "data: {\"usage\": broken\n\n",
            "",
        ] {
            assert_eq!(Usage::of_stream(nothing.as_bytes()), None, "{nothing:?}");
        }
    }

    #[test]
    fn a_line_too_long_is_skipped_and_the_next_one_read() {
        const MAX: usize = 64 << 10;
        let long = format!(
            "data: {{\"usage\":{{\"input_tokens\":1}},\"pad\":\"{}\"}}\n",
            "x".repeat(MAX)
        );
        let next = "data: {\"usage\":{\"input_tokens\":4,\"output_tokens\":5}}\n";
        assert_eq!(
            scan(
                StreamUsage::new().max_line(MAX),
                &[long.as_bytes(), next.as_bytes()]
            ),
            usage(4, 5)
        );
        let (a, b) = long.split_at(MAX / 2);
        assert_eq!(
            scan(
                StreamUsage::new().max_line(MAX),
                &[a.as_bytes(), b.as_bytes(), next.as_bytes()]
            ),
            usage(4, 5),
            "also when it comes in pieces"
        );
        assert_eq!(
            scan(StreamUsage::new(), &[long.as_bytes()]),
            usage(1, 0),
            "without a bound, a line of any length is read"
        );
    }

    #[test]
    fn a_skipped_line_says_nothing_even_of_what_the_next_leaves_out() {
        // The line too long says an output the next line does not: skipped, it says none.
        let long = format!(
            "data: {{\"usage\":{{\"input_tokens\":1,\"output_tokens\":9}},\"pad\":\"{}\"}}\n",
            "x".repeat(64)
        );
        let next = "data: {\"usage\":{\"input_tokens\":4}}\n";
        assert_eq!(
            scan(
                StreamUsage::new().max_line(48),
                &[long.as_bytes(), next.as_bytes()]
            ),
            usage(4, 0)
        );
    }

    #[test]
    fn the_rest_of_a_line_too_long_is_no_line_of_its_own() {
        // A line cut where its rest would read as a usage event on its own.
        let head = format!("data: {{\"pad\":\"{}", "x".repeat(64));
        let rest = "data: {\"usage\":{\"input_tokens\":7}}\n";
        assert_eq!(
            scan(
                StreamUsage::new().max_line(48),
                &[head.as_bytes(), rest.as_bytes()]
            ),
            None
        );
    }

    #[test]
    fn a_last_line_without_a_newline_is_read_up_to_exactly_the_bound() {
        let line = "data: {\"usage\":{\"input_tokens\":3}}";
        assert_eq!(
            scan(StreamUsage::new().max_line(line.len()), &[line.as_bytes()]),
            usage(3, 0),
            "exactly as long as the bound"
        );
        assert_eq!(
            scan(
                StreamUsage::new().max_line(line.len() - 1),
                &[line.as_bytes()]
            ),
            None,
            "one byte longer than the bound"
        );
    }

    #[test]
    fn each_event_replaces_the_counts_it_says_and_keeps_the_others() {
        let stream = "data: {\"usage\":{\"input_tokens\":5,\"output_tokens\":15}}\n\
                      data: {\"usage\":{\"input_tokens\":9}}\n";
        assert_eq!(
            Usage::of_stream(stream.as_bytes()),
            usage(9, 15),
            "the later input; the output the later event did not say"
        );
    }

    #[test]
    fn a_data_line_that_does_not_mention_usage_is_not_read() {
        // As a body this says a usage (its `response`'s counts); a stream's line is read only
        // when it mentions "usage".
        let data = "{\"type\":\"response.completed\",\"response\":{\"input_tokens\":9,\"output_tokens\":1}}";
        let value: serde_json::Value = serde_json::from_str(data).expect("JSON");
        assert_eq!(Usage::of_body(&value), usage(9, 1));
        assert_eq!(Usage::of_stream(format!("data: {data}\n").as_bytes()), None);
    }

    proptest! {
        #[test]
        fn chunks_cut_anywhere_read_the_same(cuts in proptest::collection::vec(0usize..4000, 0..12)) {
            for (stream, expected) in [
                (ANTHROPIC_STREAM, usage(2620, 15)),
                (OPENAI_CHAT_STREAM, usage(19, 10)),
                (OPENAI_RESPONSES_STREAM, usage(37, 11)),
            ] {
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
                prop_assert_eq!(scan(StreamUsage::new().max_line(64 << 10), &chunks), expected);
            }
        }

        #[test]
        fn no_bytes_make_it_panic(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
            let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            let _ = scan(StreamUsage::new(), &refs);
            let _ = scan(StreamUsage::new().max_line(16), &refs);
        }
    }
}
