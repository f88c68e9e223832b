//! `worklane budget take` (one unit before a call, waiting up to its bound) and `budget
//! observe` (the response's headers, given as arguments or a curl header dump).

use super::answer::{granted, refusal};
use crate::shared::budget::{key_from_env, ledger, token_env};

use crate::cli::{BudgetObserveArgs, BudgetTakeArgs};
use crate::exit::{self, Failure};
use crate::out::errln;
use std::path::Path;
use std::process::ExitCode;
use worklane_budget::dump::{self, Headers};
use worklane_budget::{Observation, Observed};

pub(crate) fn take(args: &BudgetTakeArgs) -> Result<ExitCode, Failure> {
    if args.provider != "github" {
        return super::providers::take(args);
    }
    let key = key_from_env(&token_env("github", args.token_env.as_deref())?)?;
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

/// The status and headers of `--headers-file` (`-`: stdin): a dump with its status line
/// (`dump::parse_header_dump`), or, the status given, its `Name: value` lines alone, read
/// leniently (a status line, if any, says nothing more).
fn read_headers(path: &Path, status: Option<u16>) -> Result<(u16, Headers), Failure> {
    let shown = path.display();
    let raw = super::read_input(path, dump::MAX_DUMP)
        .map_err(|e| Failure::new(exit::USAGE, format!("--headers-file {shown}: {e}")))?;
    let text = String::from_utf8_lossy(&raw);
    if let Some(status) = status {
        return Ok((status, dump::header_lines(&text)));
    }
    dump::parse_header_dump(&text).ok_or_else(|| {
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
        (Some(path), status) => read_headers(path, status)?,
        (None, Some(status)) => {
            let mut headers = Vec::with_capacity(args.header.len());
            for h in &args.header {
                let Some(header) = dump::header_arg(h) else {
                    return Err(Failure::new(
                        exit::USAGE,
                        format!("--header {h:?}: give it as \"Name: value\""),
                    ));
                };
                headers.push(header);
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
    let key = key_from_env(&token_env("github", args.token_env.as_deref())?)?;
    let observation = Observation::from_headers(status, |name| dump::lookup(&headers, name))
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
