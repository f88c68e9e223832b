//! A response's status and headers as a person or a tool saves them, for a caller that makes
//! its API calls with something else (curl, a shell script) and hands the response to the
//! budget afterwards: a raw header dump as `curl -D` writes it ([`parse_header_dump`]), bare
//! `Name: value` lines ([`header_lines`]), or one `Name: value` argument ([`header_arg`]).
//! Every name is lowercased, every value trimmed, as [`crate::Observation::from_headers`] and
//! [`crate::ProviderObservation::from_headers`] look them up.

/// A response's headers: lowercase names and trimmed values, in the order given.
pub type Headers = Vec<(String, String)>;

/// The most of a header dump worth reading: far more than any response's headers.
pub const MAX_DUMP: u64 = 1 << 20;

/// A raw HTTP header dump, as `curl -D` writes it: the status and headers of its last
/// response (after redirects or a `100 Continue`); a body after a header block (`curl -i`) is
/// not headers. `None` when it holds no status line.
#[must_use]
pub fn parse_header_dump(text: &str) -> Option<(u16, Headers)> {
    let mut last = None;
    let mut in_headers = false;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.starts_with("HTTP/") {
            let status = line.split_whitespace().nth(1)?.parse().ok()?;
            last = Some((status, Vec::new()));
            in_headers = true;
        } else if line.is_empty() {
            // The end of a header block; what follows until the next status line is a body
            // (`curl -i`) or nothing.
            in_headers = false;
        } else if in_headers
            && let Some((_, headers)) = last.as_mut()
            && let Some(header) = header_arg(line)
        {
            headers.push(header);
        }
    }
    last
}

/// The `Name: value` lines of `text`, read leniently: a status line, blank lines and any line
/// without a colon are skipped.
#[must_use]
pub fn header_lines(text: &str) -> Headers {
    text.lines()
        .filter(|l| !l.starts_with("HTTP/"))
        .filter_map(header_arg)
        .collect()
}

/// One header given as `Name: value` (split at the first colon), its name lowercased and both
/// trimmed; `None` without a colon.
#[must_use]
pub fn header_arg(text: &str) -> Option<(String, String)> {
    let (name, value) = text.split_once(':')?;
    Some((name.trim().to_ascii_lowercase(), value.trim().to_owned()))
}

/// The value of header `name` (lowercase) in `headers`, for the `from_headers` lookups.
#[must_use]
pub fn lookup<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_curl_header_dump_gives_its_last_responses_status_and_headers() {
        let dump = "HTTP/1.1 301 Moved Permanently\r\nLocation: /x\r\nX-RateLimit-Remaining: 9\r\n\r\n\
                    HTTP/2 403 \r\nx-ratelimit-remaining: 0\r\nX-RateLimit-Reset:  1700000000 \r\n\
                    retry-after: 60\r\nX-Odd: a: b\r\n\r\n";
        let (status, headers) = parse_header_dump(dump).expect("a dump");
        assert_eq!(status, 403, "the last response's status");
        assert_eq!(
            lookup(&headers, "x-ratelimit-remaining"),
            Some("0"),
            "not the redirect's"
        );
        assert_eq!(lookup(&headers, "x-ratelimit-reset"), Some("1700000000"));
        assert_eq!(lookup(&headers, "retry-after"), Some("60"));
        assert_eq!(
            lookup(&headers, "x-odd"),
            Some("a: b"),
            "split at the first colon"
        );
        assert_eq!(lookup(&headers, "location"), None);
    }

    #[test]
    fn lf_dumps_continue_responses_and_bodies_are_read_right() {
        let dump = "HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\nX-RateLimit-Remaining: 4\n\n\
                    {\"message\": \"Retry-After: 999\"}\n";
        let (status, headers) = parse_header_dump(dump).expect("a dump");
        assert_eq!(status, 200);
        assert_eq!(lookup(&headers, "x-ratelimit-remaining"), Some("4"));
        assert_eq!(
            lookup(&headers, "retry-after"),
            None,
            "a body is not headers"
        );
    }

    #[test]
    fn a_dump_without_a_status_line_is_refused() {
        for dump in [
            "",
            "X-RateLimit-Remaining: 1\n",
            "HTTP/1.1\n",
            "HTTP/1.1 abc OK\n",
        ] {
            assert_eq!(parse_header_dump(dump), None, "{dump:?}");
        }
    }

    #[test]
    fn a_dump_of_up_to_1_mib_is_read() {
        assert_eq!(MAX_DUMP, 1024 * 1024);
    }

    #[test]
    fn bare_lines_skip_a_status_line_and_lines_without_a_colon() {
        let headers = header_lines("HTTP/1.1 429 Too Many\r\nRetry-After: 5\r\n\r\nnoise\n");
        assert_eq!(headers, [("retry-after".to_owned(), "5".to_owned())]);
        assert_eq!(header_arg("no colon"), None);
    }
}
