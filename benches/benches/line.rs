//! The waiting line (PROTOCOL.md 12.9).
//!
//! - `line_handoff_gap/{line,polling}`: one holder releases its slot at cap 1 while one other
//!   take waits; the time from the release to the waiter holding the slot. `line` is
//!   `Pool::take` (in line, woken by inotify); `polling` is what `take` did before the line:
//!   `try_take` again and again with a 25 ms pause doubling to 500 ms. The release comes
//!   100 ms after the waiter began (a poller then looks again at 175 ms).
//! - `line_take_release/{0,100,1000}_waiting`: a take and release of an agent slot that passes
//!   the line (priority 1) with no waiter, and with 100 and 1,000 waiters of priority 0 in line (each entry
//!   held by this process, so each is live), on tmpfs: the cost the line adds to a take.
//!
//! `cargo bench -p worklane-benches --bench line`

// Threads only, no process is started: the test binaries' fork gate is not needed.
#![allow(clippy::disallowed_methods)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use worklane_admission::line::Place;
use worklane_admission::{Kind, Pool, Slot, Take, Wait};
use worklane_lease::Request;
use worklane_slotfile::{Environment, SlotDir, TEST_ROOT_VAR};

fn pool_in(parent: &Path, cap: u32) -> (tempfile::TempDir, Pool) {
    let dir = tempfile::tempdir_in(parent).expect("temp dir");
    std::fs::write(
        dir.path().join("config.json"),
        format!(r#"{{"max_agents": {cap}}}"#),
    )
    .expect("config");
    let env = Environment::from_process()
        .var(TEST_ROOT_VAR, parent)
        .var("AGENT_SLOTS_DIR", dir.path());
    (dir, Pool::new(SlotDir::resolve_in(&env).expect("resolve")))
}

fn take_now(pool: &Pool, priority: i64) -> Slot {
    let now = pool.clock().now_ms();
    match pool
        .try_take_at(Kind::Agent, &Request::new("bench"), priority, now)
        .expect("take")
    {
        Take::Held(slot) => slot,
        Take::Blocked(b) => panic!("free: {b}"),
    }
}

/// The waiter of `line_handoff_gap/polling`: the loop `take` ran before the line.
fn take_polling(pool: &Pool) -> Slot {
    let mut pause = Duration::from_millis(25);
    loop {
        if let Take::Held(slot) = pool
            .try_take(Kind::Agent, &Request::new("poller"))
            .expect("take")
        {
            return slot;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

fn handoff(c: &mut Criterion) {
    let root = std::env::temp_dir();
    let (_dir, pool) = pool_in(&root, 1);
    let mut group = c.benchmark_group("line_handoff_gap");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    for polling in [false, true] {
        let label = if polling { "polling" } else { "line" };
        group.bench_function(label, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let holder = take_now(&pool, 0);
                    let (tx, rx) = mpsc::channel::<Instant>();
                    let waiter_pool = pool.clone();
                    let waiter = std::thread::spawn(move || {
                        let slot = if polling {
                            take_polling(&waiter_pool)
                        } else {
                            match waiter_pool
                                .take(
                                    Kind::Agent,
                                    &Request::new("waiter"),
                                    Wait {
                                        timeout: None,
                                        priority: 0,
                                        on_wait: &mut |_| {},
                                    },
                                )
                                .expect("take")
                            {
                                Take::Held(slot) => slot,
                                Take::Blocked(b) => panic!("waits: {b}"),
                            }
                        };
                        tx.send(Instant::now()).expect("send");
                        slot.release().expect("release");
                    });
                    // The waiter is in line and asleep by then.
                    std::thread::sleep(Duration::from_millis(100));
                    let released = Instant::now();
                    holder.release().expect("release");
                    let taken = rx.recv().expect("taken");
                    waiter.join().expect("waiter");
                    total += taken.saturating_duration_since(released);
                }
                total
            });
        });
    }
    group.finish();
}

fn take_with_waiters(c: &mut Criterion) {
    let shm = Path::new("/dev/shm");
    let root = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    let mut group = c.benchmark_group("line_take_release");
    for waiting in [0usize, 100, 1000] {
        let (_dir, pool) = pool_in(&root, 4);
        let places: Vec<Place> = (0..waiting)
            .map(|_| {
                pool.join_line(Kind::Agent, 0, &Request::new("waiter"))
                    .expect("join")
            })
            .collect();
        group.bench_function(format!("{waiting}_waiting"), |b| {
            b.iter(|| take_now(&pool, 1).release().expect("release"));
        });
        drop(places);
    }
    group.finish();
}

criterion_group!(benches, handoff, take_with_waiters);
criterion_main!(benches);
