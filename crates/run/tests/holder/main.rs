#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]
//! Test helper: a Rust caller of `worklane-run` in a process of its own.
//!
//! `run-holder slot [OPTION]... -- CMD...` takes an agent slot of `$AGENT_SLOTS_DIR` without
//! waiting (exit 75 when blocked), prints `held NAME`, runs CMD under `Supervisor::new` (with
//! `--jobs[=N]`, `--jobs-style=fifo`, `--jobs-shim`: a jobserver; `--kill-tree-on-exit`;
//! `--grace-ms=N`), and prints `outcome CODE HALTED SIGNAL LOST` (`-` for none) or `error
//! MESSAGE` (exit 1).
//!
//! `run-holder role ROLE TTL_MS -- CMD...` does the same under a TTL role lease
//! `role-ROLE.lease` (`held role-ROLE.lease`).
//!
//! `run-holder queue PRIORITY [PROBE]` is a queued full run's runner without a command: it
//! joins the full-run line (`queued`), says each new reason it waits (`waiting WHAT`), and once
//! it holds `full-run.lock` says `held full-run.lock` and keeps it until its stdin ends; a
//! SIGTERM while it waits makes it leave the line (`cancelled`, exit 143).
//!
//! `run-holder cgroups` prints where this process's runs' cgroups would go (`probe {:?}`) and
//! makes their directory (`containment {:?}`): what a user other than root gets.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
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
        ["slot", options @ ..] => {
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
            let outcome = Supervisor::new(&pool, &mut slot)
                .and_then(|s| with_options(s, options))
                .and_then(|s| s.run(command));
            let code = report(outcome);
            let _ = slot.release();
            code
        }
        ["queue", priority, probe @ ..] => {
            queue(&pool, priority.parse().unwrap_or(0), probe.first().copied())
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

/// The supervision as `options` ask: `--jobs[=N]`, `--jobs-style=fifo`, `--jobs-shim`,
/// `--kill-tree-on-exit`, `--grace-ms=N`.
fn with_options<'a>(
    mut supervisor: Supervisor<'a>,
    options: &[&str],
) -> Result<Supervisor<'a>, worklane_run::supervise::Error> {
    let mut jobs: Option<worklane_run::Jobs> = None;
    for option in options {
        match *option {
            "--jobs" => jobs = Some(jobs.unwrap_or_default()),
            "--jobs-style=fifo" => {
                jobs = Some(worklane_run::Jobs {
                    style: worklane_run::Style::Fifo,
                    ..jobs.unwrap_or_default()
                });
            }
            "--jobs-shim" => {
                jobs = Some(worklane_run::Jobs {
                    shim: true,
                    ..jobs.unwrap_or_default()
                });
            }
            "--kill-tree-on-exit" => supervisor = supervisor.kill_tree_on_exit(true),
            other => {
                if let Some(n) = other.strip_prefix("--jobs=") {
                    jobs = Some(worklane_run::Jobs {
                        share: n.parse().ok(),
                        ..jobs.unwrap_or_default()
                    });
                } else if let Some(ms) = other.strip_prefix("--grace-ms=") {
                    supervisor =
                        supervisor.grace_at_most(Duration::from_millis(ms.parse().unwrap_or(3000)));
                } else {
                    eprintln!("run-holder: unknown option {other}");
                    std::process::exit(64);
                }
            }
        }
    }
    Ok(match jobs {
        Some(jobs) => supervisor.jobs(jobs),
        None => supervisor,
    })
}

fn queue(pool: &Pool, priority: i64, probe: Option<&str>) -> ExitCode {
    use worklane_run::queued::QUEUED_OWNER;
    use worklane_run::queued::runner::{Turn, wait_turn};
    let cancelled = Arc::new(AtomicBool::new(false));
    if let Err(e) =
        worklane_run::process::on_flag(signal_hook::consts::SIGTERM, Arc::clone(&cancelled))
    {
        eprintln!("run-holder: {e}");
        return ExitCode::from(1);
    }
    let request = Request::new(QUEUED_OWNER)
        .field("command", "queued by run-holder")
        .field("log", "/nowhere/run-holder.log");
    let place = match pool.join_line(Kind::FullRun, priority, &request) {
        Ok(place) => place,
        Err(e) => {
            eprintln!("run-holder: {e}");
            return ExitCode::from(1);
        }
    };
    say("queued");
    let mut last = String::new();
    let turn = wait_turn(pool, place, &request, probe, &cancelled, |what| {
        if what != last {
            say(&format!("waiting {what}"));
            last = what;
        }
    });
    match turn {
        Ok(Turn::Held(slot)) => {
            say(&format!("held {}", slot.name()));
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            let _ = slot.release();
            ExitCode::SUCCESS
        }
        Ok(Turn::Cancelled) => {
            say("cancelled");
            ExitCode::from(143)
        }
        Err(e) => {
            say(&format!("error {e}"));
            ExitCode::from(1)
        }
    }
}
