#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]
//! Test helper: a Rust caller of `worklane-run` in a process of its own.
//!
//! `run-holder slot -- CMD...` takes an agent slot of `$AGENT_SLOTS_DIR` without waiting
//! (exit 75 when blocked), prints `held NAME`, runs CMD under `Supervisor::new`, and prints
//! `outcome CODE HALTED SIGNAL LOST` (`-` for none) or `error MESSAGE` (exit 1).
//!
//! `run-holder role ROLE TTL_MS -- CMD...` does the same under a TTL role lease
//! `role-ROLE.lease` (`held role-ROLE.lease`).
//!
//! `run-holder cgroups` prints where this process's runs' cgroups would go (`probe {:?}`) and
//! makes their directory (`containment {:?}`): what a user other than root gets.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use worklane_admission::{Kind, Pool, Take};
use worklane_lease::{Acquired, Options, Request, TtlLiveness};
use worklane_run::{Outcome, Supervisor};
use worklane_slotfile::{Environment, SlotDir};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn report(outcome: Result<Outcome, worklane_run::supervise::Error>) -> ExitCode {
    match outcome {
        Ok(o) => {
            say(&format!(
                "outcome {} {} {} {}",
                o.code,
                o.halted.map_or("-".to_owned(), |h| h.replace(' ', "_")),
                o.signal.map_or("-".to_owned(), |s| s.to_string()),
                o.lease_lost
            ));
            ExitCode::SUCCESS
        }
        Err(e) => {
            say(&format!("error {e}"));
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.len() == 1 && args[0] == "cgroups" {
        say(&format!("probe {:?}", worklane_run::cgroup::probe()));
        say(&format!(
            "containment {:?}",
            worklane_run::cgroup::containment().map(|(_, runs)| runs)
        ));
        return ExitCode::SUCCESS;
    }
    let Some(split) = args.iter().position(|a| a == "--") else {
        eprintln!("usage: run-holder slot|role ROLE TTL_MS -- CMD...");
        return ExitCode::from(64);
    };
    let (head, command) = (&args[..split], &args[split + 1..]);
    let head: Vec<String> = head
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let pool = match SlotDir::resolve_in(&Environment::from_process()) {
        Ok(resolved) => Pool::new(resolved),
        Err(e) => {
            eprintln!("run-holder: {e}");
            return ExitCode::from(78);
        }
    };
    match head
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["slot"] => {
            let mut slot = match pool.try_take(Kind::Agent, &Request::new("run-holder")) {
                Ok(Take::Held(slot)) => slot,
                Ok(Take::Blocked(blocker)) => {
                    say(&format!("blocked {blocker}"));
                    return ExitCode::from(75);
                }
                Err(e) => {
                    eprintln!("run-holder: {e}");
                    return ExitCode::from(1);
                }
            };
            say(&format!("held {}", slot.name()));
            let outcome = Supervisor::new(&pool, &mut slot).and_then(|s| s.run(command));
            let code = report(outcome);
            let _ = slot.release();
            code
        }
        ["role", role, ttl_ms] => {
            let ttl = Duration::from_millis(ttl_ms.parse().unwrap_or(2_000));
            let options = Options::with_liveness(Arc::new(TtlLiveness::new(ttl)));
            let name = format!("role-{role}.lease");
            let request = Request::new("run-holder").field("role", (*role).to_owned());
            let mut lease = match worklane_lease::acquire(pool.dir(), &name, &request, &options) {
                Ok(Acquired::Held(lease)) => lease,
                Ok(Acquired::Refused(refusal)) => {
                    say(&format!("blocked {}", refusal.why));
                    return ExitCode::from(75);
                }
                Err(e) => {
                    eprintln!("run-holder: {e}");
                    return ExitCode::from(1);
                }
            };
            say(&format!("held {name}"));
            let code = report(Supervisor::role(&pool, &mut lease, ttl).run(command));
            let _ = lease.release();
            code
        }
        _ => {
            eprintln!("usage: run-holder slot|role ROLE TTL_MS -- CMD...");
            ExitCode::from(64)
        }
    }
}
