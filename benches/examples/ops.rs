//! One operation `N` times, for counting its syscalls: `strace -c -f target/release/examples/ops
//! OP N DIR` (DIR: where the slot directory goes, `/tmp` or `/dev/shm`), then divide by `N`
//! (the setup's few calls aside: run it with two values of `N` to tell them apart). The
//! per-step budgets in BENCHMARKS.md are made this way (`benches/scripts/syscalls.sh`).
//!
//! OP: `take` (an agent slot taken and released with 8 held, as the `admission` bench),
//! `budget` (a counted `Ledger::take`, as the `budget` bench), `lease` (a lease acquired and
//! released, as the `lease` bench), `guard` (a guard acquired and released), `slots-view` (the
//! `slots --json` document with 1,000 holders and 1,000 waiting, as the `views` bench).

#![allow(clippy::print_stdout)]

use std::path::Path;
use worklane_admission::{Kind, Pool, Slot, Take};
use worklane_budget::{CredentialKey, Ledger, Observation};
use worklane_lease::{Clock, Request, SystemClock};
use worklane_slotfile::{Environment, SlotDir, TEST_ROOT_VAR};

fn take(pool: &Pool) -> Slot {
    match pool
        .try_take(Kind::Agent, &Request::new("ops"))
        .expect("take")
    {
        Take::Held(slot) => slot,
        Take::Blocked(b) => panic!("under the cap: {b}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (op, n, parent) = match args.as_slice() {
        [_, op, n, dir] => (op.as_str(), n.parse::<u32>().expect("N"), Path::new(dir)),
        _ => panic!("usage: ops take|budget|lease|guard|slots-view N DIR"),
    };
    let dir = tempfile::tempdir_in(parent).expect("temp dir");
    std::fs::write(dir.path().join("config.json"), r#"{"max_agents": 16}"#).expect("config");
    let env = Environment::from_process()
        .var(TEST_ROOT_VAR, parent)
        .var("AGENT_SLOTS_DIR", dir.path());
    match op {
        "take" => {
            let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
            let held: Vec<Slot> = (0..8).map(|_| take(&pool)).collect();
            for _ in 0..n {
                take(&pool).release().expect("release");
            }
            drop(held);
        }
        "budget" => {
            let slots = SlotDir::open_in(&env, dir.path()).expect("open");
            let ledger = Ledger::new(slots).owner("ops");
            let key = CredentialKey::of_token("ops token");
            let reset = (SystemClock.now_ms() / 1000 + 3600).to_string();
            ledger.observe(
                &key,
                &Observation::from_headers(200, |name| match name {
                    "x-ratelimit-remaining" | "x-ratelimit-limit" => Some("9000000000000"),
                    "x-ratelimit-reset" => Some(reset.as_str()),
                    _ => None,
                }),
            );
            for _ in 0..n {
                assert!(ledger.take(&key, "core", "ops").expect("left").counted);
            }
        }
        "lease" => {
            let slots = SlotDir::open_in(&env, dir.path()).expect("open");
            let options = worklane_lease::Options::process();
            for _ in 0..n {
                match worklane_lease::acquire(&slots, "ops.lock", &Request::new("ops"), &options)
                    .expect("acquire")
                {
                    worklane_lease::Acquired::Held(lease) => lease.release().expect("release"),
                    worklane_lease::Acquired::Refused(why) => panic!("free: {why}"),
                }
            }
        }
        "guard" => {
            let slots = SlotDir::open_in(&env, dir.path()).expect("open");
            for _ in 0..n {
                // As the slot directory's own files take theirs (its filesystem checked once).
                let guard = slots
                    .file("ops.lock")
                    .expect("name")
                    .try_guard()
                    .expect("acquire")
                    .expect("free");
                drop(guard);
            }
        }
        "slots-view" => {
            std::fs::write(dir.path().join("config.json"), r#"{"max_agents": 1000}"#)
                .expect("config");
            let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
            let held: Vec<Slot> = (0..1000).map(|_| take(&pool)).collect();
            let places: Vec<_> = (0..1000)
                .map(|_| {
                    pool.join_line(Kind::Agent, 0, &Request::new("waiter"))
                        .expect("join")
                })
                .collect();
            for _ in 0..n {
                let snapshot = pool.snapshot().expect("snapshot");
                let around = worklane_view::context::Around::of(&pool, &snapshot);
                let doc = worklane_view::slots::to_json(&snapshot, &around);
                assert_eq!(doc.agents_held, held.len());
            }
            drop(places);
        }
        other => panic!("no op {other}"),
    }
    println!("{op} x {n}");
}
