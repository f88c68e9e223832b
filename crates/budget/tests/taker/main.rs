#![allow(clippy::print_stdout, missing_docs)]
//! Test helper: takes from a budget in its own process, so tests can run takers as other
//! processes and as an unprivileged user.
//!
//! `budget-taker DIR TOKEN RESOURCE CONSUMER [TAKES]` takes TAKES (default 1) units and
//! prints one line per take: `counted LEFT`, `uncounted`, `unaccounted REASON` or
//! `refused KIND`.

use std::process::ExitCode;
use worklane_budget::{CredentialKey, Ledger};
use worklane_slotfile::SlotDir;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
                (_, Some(why)) => format!("unaccounted {why}"),
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
