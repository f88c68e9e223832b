//! What a request will need, estimated before it is sent: one request, its input tokens from
//! its size, its output tokens from its `max_tokens`.
//!
//! The rule, documented because clients and operators can reason about it:
//! - input tokens: the body's bytes divided by [`BYTES_PER_TOKEN`] (4), rounded up: JSON
//!   text, whose English is about four bytes a token and whose syntax counts too, so the
//!   estimate is on the high side;
//! - output tokens: the body's `max_tokens`, else `max_completion_tokens`, else
//!   `max_output_tokens` (Anthropic, OpenAI's chat and responses APIs); without any (or
//!   when the body was not read whole), [`DEFAULT_OUTPUT_TOKENS`];
//! - only the first [`PEEK_LIMIT`] bytes of a body are read before it is forwarded (1 MiB);
//!   a longer body streams through, its input estimated from its `Content-Length` (or, sent
//!   chunked, from the bytes read so far), its output from the default.
//!
//! The response's headers and its usage replace the estimate as soon as it is observed.

use worklane_budget::Need;

/// Bytes of request body counted as one input token.
pub const BYTES_PER_TOKEN: u64 = 4;
/// The output tokens a request is assumed to ask for when its body does not say.
pub const DEFAULT_OUTPUT_TOKENS: u64 = 4096;
/// How much of a request's body the proxy reads before forwarding it: 1 MiB.
pub const PEEK_LIMIT: usize = 1 << 20;
/// The largest output a body's own `max_tokens` is believed up to (2^53 - 1, as the ledger
/// counts).
const MAX_COUNT: u64 = (1 << 53) - 1;

/// The need of a request whose body starts with `body` (the whole body when `complete`),
/// `content_length` long when its header says so.
pub(crate) fn estimate(body: &[u8], complete: bool, content_length: Option<u64>) -> Need {
    let len = if complete {
        body.len() as u64
    } else {
        content_length.unwrap_or(body.len() as u64)
    };
    let output = complete
        .then(|| max_output(body))
        .flatten()
        .unwrap_or(DEFAULT_OUTPUT_TOKENS);
    Need {
        input_tokens: len.div_ceil(BYTES_PER_TOKEN),
        output_tokens: output,
    }
}

/// The body's own bound on its output, if it is a JSON object that has one.
fn max_output(body: &[u8]) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|name| value.get(name)?.as_u64())
        .map(|n| n.min(MAX_COUNT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn input_from_the_size_output_from_max_tokens() {
        let body = br#"{"model":"m","max_tokens":300,"messages":[{"role":"user","content":"hi"}]}"#;
        let need = estimate(body, true, Some(body.len() as u64));
        assert_eq!(
            need.input_tokens,
            (body.len() as u64).div_ceil(4),
            "bytes / 4, up"
        );
        assert_eq!(need.output_tokens, 300, "max_tokens");
        for (body, out) in [
            (&br#"{"max_completion_tokens":70}"#[..], 70),
            (br#"{"max_output_tokens":9}"#, 9),
            (br#"{"max_tokens":5,"max_completion_tokens":70}"#, 5),
            (br#"{"max_tokens":-5}"#, DEFAULT_OUTPUT_TOKENS),
            (br#"{"max_tokens":"5"}"#, DEFAULT_OUTPUT_TOKENS),
            (br#"{"messages":[]}"#, DEFAULT_OUTPUT_TOKENS),
            (b"not json", DEFAULT_OUTPUT_TOKENS),
            (
                br#"{"max_tokens":99999999999999999999}"#,
                DEFAULT_OUTPUT_TOKENS,
            ),
        ] {
            assert_eq!(
                estimate(body, true, None).output_tokens,
                out,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        for (max_tokens, out) in [
            (9_007_199_254_740_991_u64, 9_007_199_254_740_991),
            (9_007_199_254_740_992, 9_007_199_254_740_991),
            (9_007_199_254_740_993, 9_007_199_254_740_991),
        ] {
            let body = format!(r#"{{"max_tokens":{max_tokens}}}"#);
            assert_eq!(
                estimate(body.as_bytes(), true, None).output_tokens,
                out,
                "bounded at 2^53 - 1, as the ledger counts"
            );
        }
    }

    #[test]
    fn a_body_beyond_the_peek_is_estimated_from_its_length() {
        let prefix = br#"{"max_tokens":10,"#;
        let need = estimate(prefix, false, Some(4_000_001));
        assert_eq!(need.input_tokens, 1_000_001);
        assert_eq!(
            need.output_tokens, DEFAULT_OUTPUT_TOKENS,
            "an unread body's max_tokens is not guessed"
        );
        assert_eq!(
            estimate(&[b' '; 10], false, None).input_tokens,
            3,
            "sent chunked: the bytes read so far"
        );
        assert_eq!(estimate(b"", true, None).input_tokens, 0);
    }

    proptest! {
        #[test]
        fn any_body_gives_an_estimate_within_bounds(body in proptest::collection::vec(any::<u8>(), 0..256), complete: bool) {
            let need = estimate(&body, complete, None);
            prop_assert!(need.input_tokens <= body.len() as u64);
            prop_assert!(need.output_tokens <= MAX_COUNT);
        }
    }
}
