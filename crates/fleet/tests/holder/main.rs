//! A fleet holder for the integration tests: one process per holder, on any "host".
//!
//! `fleet-holder ENDPOINTS TTL_MS pool|role NAME [wait|wait-aloud|wait-stop]` takes a place in
//! pool NAME (or claims role NAME), waiting for it with `wait` (and printing `waiting` when it
//! starts to with `wait-aloud`; `wait-stop` also stops itself with SIGSTOP right after, before
//! it watches, so that a test can change etcd between its read and its watch), prints
//! `held <epoch>`, `refused <why>` or `error <why>`, then keeps the place alive (a pulse every
//! 50 ms) until its stdin closes (`released`, exit 0) or the place is lost (`lost <why>`,
//! exit 3). `FLEET_HOLDER_TIMEOUT_MS` bounds the wait.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use worklane_fleet::{Fleet, Holder, Taken, Wait};
use worklane_stdx::chain;

fn stop_self() {
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::STOP);
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let endpoints: Vec<String> = args[1].split(',').map(str::to_owned).collect();
    let ttl = Duration::from_millis(args[2].parse().expect("TTL_MS"));
    let (what, name) = (args[3].as_str(), args[4].as_str());
    let wait = args
        .get(5)
        .is_some_and(|w| w == "wait" || w == "wait-aloud" || w == "wait-stop");
    let aloud = args
        .get(5)
        .is_some_and(|w| w == "wait-aloud" || w == "wait-stop");
    let stop = args.get(5).is_some_and(|w| w == "wait-stop");
    let mut said_waiting = false;
    let mut on_wait = |_: &worklane_fleet::Waiting| {
        if aloud && !said_waiting {
            said_waiting = true;
            say("waiting");
            if stop {
                rustix::process::kill_process(
                    rustix::process::getpid(),
                    rustix::process::Signal::STOP,
                )
                .expect("SIGSTOP myself");
            }
        }
    };
    // `FLEET_HOLDER_RECHECK_MS`: how often a waiter reads again whatever its watch says.
    let recheck = std::env::var("FLEET_HOLDER_RECHECK_MS")
        .ok()
        .map(|ms| Duration::from_millis(ms.parse().expect("FLEET_HOLDER_RECHECK_MS")));
    // `FLEET_HOLDER_STOP_AFTER_GRANT`: the holder stops itself (SIGSTOP) between its lease's
    // grant and its put, for the test to continue it.
    let stop_after_grant = std::env::var_os("FLEET_HOLDER_STOP_AFTER_GRANT").is_some();
    let fleet = match Fleet::connect(&endpoints, ttl) {
        Ok(f) => {
            let f = match recheck {
                Some(every) => f.with_recheck(every),
                None => f,
            };
            if stop_after_grant {
                f.with_after_grant(stop_self)
            } else {
                f
            }
        }
        Err(e) => {
            say(&format!("error {e}"));
            std::process::exit(69);
        }
    };
    if what == "budget" {
        // `budget TOKEN`: take one call of `core` at once, print `go counted`, `go uncounted`
        // or `refused`.
        let credential = worklane_budget::CredentialKey::of_token(name);
        let now = || {
            u64::try_from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis()),
            )
            .unwrap_or(0)
        };
        match fleet.budget_take(&credential, "core", "holder", Duration::ZERO, &now) {
            Ok(worklane_fleet::budget::BudgetTake::Go { counted: true, .. }) => say("go counted"),
            Ok(worklane_fleet::budget::BudgetTake::Go { counted: false, .. }) => {
                say("go uncounted")
            }
            Ok(worklane_fleet::budget::BudgetTake::Refused { .. }) => say("refused"),
            Err(e) => say(&format!("error {e}")),
        }
        return;
    }
    let me = Holder::this_process("fleet-holder", "2026-12-01T00:00:00.000Z".into());
    // `FLEET_HOLDER_TIMEOUT_MS`: how long a waiter waits at most.
    let timeout = match std::env::var("FLEET_HOLDER_TIMEOUT_MS") {
        Ok(ms) if wait => Some(Duration::from_millis(
            ms.parse().expect("FLEET_HOLDER_TIMEOUT_MS"),
        )),
        _ if wait => None,
        _ => Some(Duration::ZERO),
    };
    let taken = match what {
        "pool" => fleet.take(
            name,
            &me,
            Wait {
                timeout,
                on_wait: &mut on_wait,
            },
        ),
        _ => fleet.claim_role(
            name,
            &me,
            Wait {
                timeout,
                on_wait: &mut on_wait,
            },
        ),
    };
    let mut hold = match taken {
        Ok(Taken::Held(hold)) => hold,
        Ok(Taken::Refused(why)) => {
            say(&format!("refused {why}"));
            std::process::exit(75);
        }
        Err(e) => {
            say(&format!("error {}", chain(&e)));
            std::process::exit(69);
        }
    };
    say(&format!("held {}", hold.epoch()));
    let done = Arc::new(AtomicBool::new(false));
    let stdin_done = Arc::clone(&done);
    std::thread::spawn(move || {
        for _ in std::io::stdin().lock().lines() {}
        stdin_done.store(true, Ordering::SeqCst);
    });
    while !done.load(Ordering::SeqCst) {
        if let Err(lost) = hold.pulse() {
            say(&format!("lost {lost}"));
            std::process::exit(3);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    match hold.release() {
        Ok(()) => say("released"),
        Err(e) => say(&format!("release failed {e}")),
    }
}
