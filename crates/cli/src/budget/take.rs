//! `worklane budget take` (one unit before a call, waiting up to its bound) and `budget
//! observe` (the response's headers, given as arguments or a curl header dump).

use super::answer::{granted, refusal};
use super::{key_from_env, ledger};

use crate::cli::{BudgetObserveArgs, BudgetTakeArgs};
use crate::exit::{self, Failure};
use crate::out::errln;
use std::process::ExitCode;
use worklane_budget::{Observation, Observed};

pub(crate) fn take(args: &BudgetTakeArgs) -> Result<ExitCode, Failure> {
    if args.provider != "github" {
        return super::providers::take(args);
    }
    let key = key_from_env(&super::providers::token_env(
        "github",
        args.token_env.as_deref(),
    )?)?;
    if !args.fleet.endpoints.is_empty() {
        let taken = crate::fleet::budget_take(
            &args.fleet,
            &key,
            &args.resource,
            &args.consumer,
            args.wait_max,
        )?;
        return match taken {
            Ok((counted, left)) => granted(args.json, counted, left, None, None),
            Err(refused) => refusal(args.json, &refused),
        };
    }
    // The ledger never holds a call back for its own trouble, a slot directory it cannot
    // reach included: the call goes, unaccounted, and stderr says why.
    let ledger = match ledger(&args.consumer) {
        Ok(ledger) => ledger,
        Err(failure) => {
            let why = format!("no budget ledger: {}", failure.message);
            return granted(args.json, false, None, Some(why), None);
        }
    };
    match ledger.take_within(&key, &args.resource, &args.consumer, args.wait_max) {
        Ok(grant) => granted(
            args.json,
            grant.counted,
            grant.left,
            grant.unaccounted.as_ref().map(|why| exit::chain(why)),
            None,
        ),
        Err(refused) => refusal(args.json, &refused),
    }
}

/// A raw HTTP header dump, as `curl -D` writes it: the status and headers of its last
/// response (after redirects or a `100 Continue`). `None` when it holds no status line.
fn parse_header_dump(text: &str) -> Option<(u16, Vec<(String, String)>)> {
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
            && let Some((name, value)) = line.split_once(':')
        {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    last
}

/// The most of a header dump worklane reads: far more than any response's headers.
const MAX_DUMP: u64 = 1 << 20;

/// The `Name: value` lines of `--headers-file` (`-`: stdin), lowercased names; other lines
/// (a status line, blank lines) are skipped.
fn read_header_lines(path: &std::path::Path) -> Result<Vec<(String, String)>, Failure> {
    use std::io::Read;
    let mut raw = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().lock().take(MAX_DUMP).read_to_end(&mut raw)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(MAX_DUMP).read_to_end(&mut raw))
    };
    read.map_err(|e| {
        Failure::new(
            exit::USAGE,
            format!("--headers-file {}: {e}", path.display()),
        )
    })?;
    Ok(String::from_utf8_lossy(&raw)
        .lines()
        .filter(|l| !l.starts_with("HTTP/"))
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect())
}

/// The status and headers of `--headers-file` (`-`: stdin).
fn read_header_dump(path: &std::path::Path) -> Result<(u16, Vec<(String, String)>), Failure> {
    use std::io::Read;
    let shown = path.display();
    let mut raw = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().lock().take(MAX_DUMP).read_to_end(&mut raw)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(MAX_DUMP).read_to_end(&mut raw))
    };
    read.map_err(|e| Failure::new(exit::USAGE, format!("--headers-file {shown}: {e}")))?;
    parse_header_dump(&String::from_utf8_lossy(&raw)).ok_or_else(|| {
        Failure::new(
            exit::USAGE,
            format!(
                "--headers-file {shown}: no status line (`HTTP/1.1 200 OK`, `HTTP/2 429`): give \
                 the headers as `curl -D FILE` writes them"
            ),
        )
    })
}

pub(crate) fn observe(args: &BudgetObserveArgs) -> Result<ExitCode, Failure> {
    let (status, headers) = match (&args.headers_file, args.status) {
        // `Name: value` lines alone, the status given: read leniently (a status line, if
        // any, says nothing more).
        (Some(path), Some(status)) => (status, read_header_lines(path)?),
        (Some(path), None) => read_header_dump(path)?,
        (None, Some(status)) => {
            let mut headers = Vec::with_capacity(args.header.len());
            for h in &args.header {
                let Some((name, value)) = h.split_once(':') else {
                    return Err(Failure::new(
                        exit::USAGE,
                        format!("--header {h:?}: give it as \"Name: value\""),
                    ));
                };
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
            (status, headers)
        }
        (None, None) => {
            return Err(Failure::new(
                exit::USAGE,
                "give the response's --status (and --header), or --headers-file",
            ));
        }
    };
    if args.provider != "github" {
        return super::providers::observe(args, status, &headers);
    }
    let key = key_from_env(&super::providers::token_env(
        "github",
        args.token_env.as_deref(),
    )?)?;
    let observation = Observation::from_headers(status, |name| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    })
    .with_secondary_limit(args.secondary_limit);
    if !args.fleet.endpoints.is_empty() {
        crate::fleet::budget_observe(&args.fleet, &key, &observation)?;
        return Ok(ExitCode::SUCCESS);
    }
    let ledger = match ledger("worklane") {
        Ok(ledger) => ledger,
        Err(failure) => {
            errln!("worklane: response not recorded: {}", failure.message);
            return Ok(ExitCode::SUCCESS);
        }
    };
    match ledger.observe(&key, &observation) {
        Observed::Recorded => {}
        // Recording is best effort by design: the response was already received.
        Observed::Skipped(why) => {
            errln!(
                "worklane: response not recorded: {}",
                crate::exit::chain(&why)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_header_dump;

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_curl_header_dump_gives_its_last_responses_status_and_headers() {
        let dump = "HTTP/1.1 301 Moved Permanently\r\nLocation: /x\r\nX-RateLimit-Remaining: 9\r\n\r\n\
                    HTTP/2 403 \r\nx-ratelimit-remaining: 0\r\nX-RateLimit-Reset:  1700000000 \r\n\
                    retry-after: 60\r\nX-Odd: a: b\r\n\r\n";
        let (status, headers) = parse_header_dump(dump).expect("a dump");
        assert_eq!(status, 403, "the last response's status");
        assert_eq!(
            header(&headers, "x-ratelimit-remaining"),
            Some("0"),
            "not the redirect's"
        );
        assert_eq!(header(&headers, "x-ratelimit-reset"), Some("1700000000"));
        assert_eq!(header(&headers, "retry-after"), Some("60"));
        assert_eq!(
            header(&headers, "x-odd"),
            Some("a: b"),
            "split at the first colon"
        );
        assert_eq!(header(&headers, "location"), None);
    }

    #[test]
    fn lf_dumps_continue_responses_and_bodies_are_read_right() {
        let dump = "HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\nX-RateLimit-Remaining: 4\n\n\
                    {\"message\": \"Retry-After: 999\"}\n";
        let (status, headers) = parse_header_dump(dump).expect("a dump");
        assert_eq!(status, 200);
        assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("4"));
        assert_eq!(
            header(&headers, "retry-after"),
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
}
