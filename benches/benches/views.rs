//! The views at scale: what `worklane slots`, `why` and `metrics` build with 1,000 holders and
//! 1,000 waiters in line (issue 38's goal: each under 50 ms).
//!
//! - `views_1000_holders_1000_waiting/slots_document`: the pool's snapshot, what is around it
//!   and the `slots --json` document, serialized;
//! - `.../metrics_exposition`: the same and the journal, as the Prometheus text;
//! - `.../why_admission`: the snapshot and the resource-admission answer.
//!
//! The slot directory is on tmpfs where there is one. `cargo bench -p worklane-benches --bench views`

// Threads only, no process is started: the test binaries' fork gate is not needed.
#![allow(clippy::disallowed_methods)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;
use std::time::Duration;
use worklane_admission::line::Place;
use worklane_admission::{Ask, Kind, Pool, Slot, Take};
use worklane_lease::Request;
use worklane_slotfile::{Environment, SlotDir, TEST_ROOT_VAR};
use worklane_view::context::Around;

const HOLDERS: usize = 1000;
const WAITING: usize = 1000;

fn views(c: &mut Criterion) {
    let shm = Path::new("/dev/shm");
    let root = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::tempdir_in(&root).expect("temp dir");
    std::fs::write(
        dir.path().join("config.json"),
        format!(r#"{{"max_agents": {HOLDERS}}}"#),
    )
    .expect("config");
    let env = Environment::from_process()
        .var(TEST_ROOT_VAR, &root)
        .var("AGENT_SLOTS_DIR", dir.path());
    let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
    let held: Vec<Slot> = (0..HOLDERS)
        .map(
            |_| match pool.try_take(Kind::Agent, &Request::new("holder")) {
                Ok(Take::Held(slot)) => slot,
                other => panic!("under the cap: {other:?}"),
            },
        )
        .collect();
    let places: Vec<Place> = (0..WAITING)
        .map(|_| {
            pool.join_line(Kind::Agent, 0, &Request::new("waiter"))
                .expect("join")
        })
        .collect();
    let mut group = c.benchmark_group(format!("views_{HOLDERS}_holders_{WAITING}_waiting"));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("slots_document", |b| {
        b.iter(|| {
            let snapshot = pool.snapshot().expect("snapshot");
            let doc = worklane_view::slots::to_json(&snapshot, &Around::of(&pool, &snapshot));
            assert_eq!(doc.agents_held, HOLDERS);
            worklane_view::doc::pretty(&doc).len()
        });
    });
    group.bench_function("metrics_exposition", |b| {
        b.iter(|| {
            worklane_view::metrics::exposition(&pool)
                .expect("exposition")
                .len()
        });
    });
    group.bench_function("why_admission", |b| {
        b.iter(|| {
            let snapshot = pool.snapshot().expect("snapshot");
            let answer = worklane_view::why::admission(
                worklane_view::why::Kind::Agent,
                &snapshot,
                &Ask::new(),
            );
            assert_eq!(answer.blocks(), Some(true), "{answer:?}");
        });
    });
    group.finish();
    drop(places);
    drop(held);
}

criterion_group!(benches, views);
criterion_main!(benches);
