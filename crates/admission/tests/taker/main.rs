#![allow(clippy::print_stdout, missing_docs)]
//! Test helper: a slot taker in a process of its own, so that tests run takers of several
//! weights and owners as real processes.
//!
//! `slot-taker DIR [weight=N] [uid=U] [tag=T] [start=MS] [priority=P] [kind=agent|test]
//! [nowait] [hold=MS] [timeout=MS]` takes a slot of `kind` (default `agent`) in the slot
//! directory DIR, of weight N (default 1), for the owner of uid U (default this process's
//! effective uid, in no group) with the tag T, at priority P (default 0).
//!
//! - `start=MS`: the pool's clock stands at MS (so the place it takes in line starts then:
//!   tests order waiters by it, never by the moment they were started).
//! - `nowait`: one try (`try_take_for`): prints `held NAME WEIGHT` or `blocked BLOCKER`.
//! - otherwise it waits in line (`take_for`): prints `waiting` at its first look that finds
//!   it blocked, then `held NAME WEIGHT` (or `timeout BLOCKER` after `timeout=MS`, default
//!   for ever).
//!
//! Held, it keeps the slot until its standard input ends (or for `hold=MS`, then), releases
//! it, prints `released NAME` and exits 0. An error prints `error CHAIN` and exits 1.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use worklane_admission::{Ask, Kind, Owner, Pool, Take, Wait};
use worklane_lease::{ManualClock, Request};
use worklane_slotfile::{Environment, SlotDir};
use worklane_stdx::chain;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((dir, options)) = args.split_first() else {
        eprintln!("usage: slot-taker DIR [weight=N] [uid=U] [tag=T] [start=MS] ...");
        return ExitCode::from(64);
    };
    let mut weight = 1u32;
    let mut owner = Owner::of_uid(rustix::process::geteuid().as_raw());
    let mut start = None;
    let mut priority = 0i64;
    let mut kind = Kind::Agent;
    let mut nowait = false;
    let mut hold = None;
    let mut timeout = None;
    for option in options {
        let (key, value) = option.split_once('=').unwrap_or((option.as_str(), ""));
        let number = || value.parse::<u64>().expect("a number");
        match key {
            "weight" => weight = u32::try_from(number()).expect("a weight"),
            "uid" => owner = Owner::of_uid(u32::try_from(number()).expect("a uid")),
            "tag" => owner = owner.with_tag(value),
            "start" => start = Some(number()),
            "priority" => priority = value.parse().expect("a priority"),
            "kind" if value == "test" => kind = Kind::Test { limit_ms: None },
            "kind" => kind = Kind::Agent,
            "nowait" => nowait = true,
            "hold" => hold = Some(Duration::from_millis(number())),
            "timeout" => timeout = Some(Duration::from_millis(number())),
            other => panic!("unknown option {other}"),
        }
    }
    let env = Environment::from_process().var("AGENT_SLOTS_DIR", dir);
    let mut pool = match SlotDir::resolve_in(&env) {
        Ok(resolved) => Pool::new(resolved),
        Err(e) => {
            say(&format!("error {}", chain(&e)));
            return ExitCode::FAILURE;
        }
    };
    if let Some(start) = start {
        pool = pool.with_clock(Arc::new(ManualClock::at(start)));
    }
    let ask = Ask::new().with_weight(weight).with_owner(owner);
    let request = Request::new("slot-taker");
    let taken = if nowait {
        let now = pool.clock().now_ms();
        pool.try_take_for(kind, &request, &ask, priority, now)
    } else {
        let mut told = false;
        pool.take_for(
            kind,
            &request,
            &ask,
            Wait {
                timeout,
                priority,
                on_wait: &mut |_| {
                    if !told {
                        told = true;
                        say("waiting");
                    }
                },
            },
        )
    };
    let slot = match taken {
        Ok(Take::Held(slot)) => slot,
        Ok(Take::Blocked(blocker)) if nowait => {
            say(&format!("blocked {blocker}"));
            return ExitCode::SUCCESS;
        }
        Ok(Take::Blocked(blocker)) => {
            say(&format!("timeout {blocker}"));
            return ExitCode::FAILURE;
        }
        Err(e) => {
            say(&format!("error {}", chain(&e)));
            return ExitCode::FAILURE;
        }
    };
    let name = slot.name().to_owned();
    say(&format!("held {name} {}", slot.weight()));
    match hold {
        Some(hold) => std::thread::sleep(hold),
        None => {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        }
    }
    if let Err(e) = slot.release() {
        say(&format!("error {}", chain(&e)));
        return ExitCode::FAILURE;
    }
    say(&format!("released {name}"));
    ExitCode::SUCCESS
}
