#![allow(clippy::print_stdout, missing_docs)]
//! Test helper: takes from a budget in its own process, so tests can run takers as other
//! processes and as an unprivileged user.
//!
//! `budget-taker DIR TOKEN RESOURCE CONSUMER [TAKES]` takes TAKES (default 1) units and
//! prints one line per take: `counted LEFT`, `uncounted`, `unaccounted REASON` or
//! `refused KIND`.
//!
//! `budget-taker observe DIR TOKEN REMAINING RESET_S` records a 200 response with that
//! window for `core` and prints `recorded` or `skipped REASON`.

use std::process::ExitCode;
use worklane_budget::{CredentialKey, Ledger, Observation, Observed};
use worklane_slotfile::SlotDir;
use worklane_stdx::chain;

fn observe(dir: &str, token: &str, remaining: &str, reset_s: &str) -> ExitCode {
    let dir = match SlotDir::open(std::path::Path::new(dir)) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("budget-taker: {e}");
            return ExitCode::from(78);
        }
    };
    let observation = Observation::from_headers(200, |name| match name {
        "x-ratelimit-remaining" => Some(remaining),
        "x-ratelimit-reset" => Some(reset_s),
        _ => None,
    });
    match Ledger::new(dir)
        .owner("budget-taker")
        .observe(&CredentialKey::of_token(token), &observation)
    {
        Observed::Recorded => println!("recorded"),
        Observed::Skipped(why) => println!("skipped {}", chain(&why)),
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    if let ["observe", dir, token, remaining, reset_s] = words.as_slice() {
        return observe(dir, token, remaining, reset_s);
    }
    let [dir, token, resource, consumer, rest @ ..] = args.as_slice() else {
        eprintln!("usage: budget-taker DIR TOKEN RESOURCE CONSUMER [TAKES]");
        return ExitCode::from(64);
    };
    let takes: u32 = rest.first().and_then(|n| n.parse().ok()).unwrap_or(1);
    let dir = match SlotDir::open(std::path::Path::new(dir)) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("budget-taker: {e}");
            return ExitCode::from(78);
        }
    };
    let ledger = Ledger::new(dir).owner("budget-taker");
    let key = CredentialKey::of_token(token);
    let mut out = String::new();
    for _ in 0..takes {
        let line = match ledger.take(&key, resource, consumer) {
            Ok(grant) => match (grant.counted, grant.unaccounted) {
                (_, Some(why)) => format!("unaccounted {}", chain(&why)),
                (true, None) => format!("counted {}", grant.left.unwrap_or(0)),
                (false, None) => "uncounted".to_owned(),
            },
            Err(refused) => format!("refused {}", refused.kind()),
        };
        out.push_str(&line);
        out.push('\n');
    }
    print!("{out}");
    ExitCode::SUCCESS
}
