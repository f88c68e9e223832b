//! What the event journal costs a slot take + release, and what one append costs.
//!
//! - `admission_journal/{disk,tmpfs}/journal_on|journal_off`: library take + release of an
//!   agent slot with 8 live slot files present (as `admission_take_release`), under a cap of
//!   16, with the journal on (two lines appended per iteration: `slot-taken` and
//!   `slot-released`, rotations included at the default 16 MiB cap) and off (`Journal::off`).
//! - `journal_emit/{disk,tmpfs}`: one event appended (`statat`, `write`, `fstat`).
//! - Then, outside criterion, the two pools alternated (rounds of 100 take + release each,
//!   which goes first alternating too) and the ratio on/off taken round by round: the figure
//!   that holds on a machine whose load drifts between criterion's groups. Printed on stderr
//!   as `admission_journal/LABEL: alternating ...`.
//!
//! `cargo bench -p worklane-benches --bench journal`

#![allow(
    clippy::print_stderr,
    reason = "the alternating rounds report on stderr"
)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;
use std::time::{Duration, Instant};
use worklane_admission::{Kind, Pool, Slot, Take};
use worklane_journal::{Event, Journal};
use worklane_lease::Request;
use worklane_slotfile::{Environment, SlotDir, TEST_ROOT_VAR};

fn pool_in(parent: &Path) -> (tempfile::TempDir, Pool) {
    let dir = tempfile::tempdir_in(parent).expect("temp dir");
    std::fs::write(dir.path().join("config.json"), r#"{"max_agents": 16}"#).expect("config");
    // A bench binary counts as a test run: allow its own temp root, wherever that is.
    let env = Environment::from_process()
        .var(TEST_ROOT_VAR, parent)
        .var("AGENT_SLOTS_DIR", dir.path());
    let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
    (dir, pool)
}

fn take(pool: &Pool) -> Slot {
    match pool
        .try_take(Kind::Agent, &Request::new("bench"))
        .expect("take")
    {
        Take::Held(slot) => slot,
        Take::Blocked(b) => panic!("under the cap: {b}"),
    }
}

fn bench_take(c: &mut Criterion, label: &str, parent: &Path) {
    let (_on_dir, on) = pool_in(parent);
    let (_off_dir, off) = pool_in(parent);
    let off = off.with_journal(Journal::off());
    let held_on: Vec<Slot> = (0..8).map(|_| take(&on)).collect();
    let held_off: Vec<Slot> = (0..8).map(|_| take(&off)).collect();
    let mut group = c.benchmark_group(format!("admission_journal/{label}"));
    group.bench_function("journal_off", |b| {
        b.iter(|| take(&off).release().expect("release"));
    });
    group.bench_function("journal_on", |b| {
        b.iter(|| take(&on).release().expect("release"));
    });
    group.finish();
    alternate(label, &on, &off);
    drop((held_on, held_off));
}

/// The pools `on` and `off` alternated, 40 rounds of 100 take + release each (which goes first
/// alternating too); prints the medians and the median of the per-round ratios.
fn alternate(label: &str, on: &Pool, off: &Pool) {
    let round = |pool: &Pool| {
        let started = Instant::now();
        for _ in 0..100 {
            take(pool).release().expect("release");
        }
        started.elapsed() / 100
    };
    let (mut ons, mut offs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..40 {
        let (on_t, off_t) = if i % 2 == 0 {
            let off_t = round(off);
            (round(on), off_t)
        } else {
            let on_t = round(on);
            (on_t, round(off))
        };
        ratios.push(on_t.as_secs_f64() / off_t.as_secs_f64());
        ons.push(on_t);
        offs.push(off_t);
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    ratios.sort_by(f64::total_cmp);
    eprintln!(
        "admission_journal/{label}: alternating 40 rounds x 100: off {:.1} us, on {:.1} us, \
         on/off median {:.3} (quartiles {:.3} to {:.3})",
        median(&mut offs).as_secs_f64() * 1e6,
        median(&mut ons).as_secs_f64() * 1e6,
        ratios[20],
        ratios[10],
        ratios[30]
    );
}

fn bench_emit(c: &mut Criterion, label: &str, parent: &Path) {
    let dir = tempfile::tempdir_in(parent).expect("temp dir");
    let env = Environment::from_process().var(TEST_ROOT_VAR, parent);
    let slots = SlotDir::open_in(&env, dir.path()).expect("open");
    let journal = Journal::of(&slots);
    let mut group = c.benchmark_group(format!("journal_emit/{label}"));
    group.bench_function("slot_taken", |b| {
        b.iter(|| {
            journal.emit(Event::SlotTaken {
                slot: "agent-0.lock".to_owned(),
                slot_kind: "agent".to_owned(),
                owner: "bench".to_owned(),
                epoch: 1,
                waited_ms: 0,
            });
        });
    });
    group.finish();
}

fn journal(c: &mut Criterion) {
    for (label, dir) in worklane_benches::filesystems() {
        bench_take(c, label, &dir);
        bench_emit(c, label, &dir);
    }
}

criterion_group!(benches, journal);
criterion_main!(benches);
