//! A jobserver token's round trip, as a build's client sees it: read one byte from the
//! jobserver, write it back.
//!
//! - `jobserver_token_round_trip/worklane`: through worklane's jobserver (a FIFO whose token
//!   is backed by a machine-wide job slot, its accountant woken by inotify at every read and
//!   write), opened by path as a make 4.4 client opens it;
//! - `jobserver_token_round_trip/make_pipe`: through a plain pipe holding one token, which is
//!   what GNU make's own jobserver is (`make -jN` creates a pipe and writes N-1 tokens).
//!
//! `cargo bench -p worklane-benches --bench jobserver`

use criterion::{Criterion, criterion_group, criterion_main};
use std::time::Duration;
use worklane_admission::Pool;
use worklane_lease::Request;
use worklane_run::Style;
use worklane_run::jobserver::Jobserver;
use worklane_slotfile::{Environment, SlotDir, TEST_ROOT_VAR};

/// One blocking read of a token and its write back.
fn round_trip(read: &impl std::os::fd::AsFd, write: &impl std::os::fd::AsFd) {
    let mut token = [0u8; 1];
    let n = rustix::io::read(read, &mut token).expect("read a token");
    assert_eq!(n, 1, "a token");
    rustix::io::write(write, &token).expect("write it back");
}

fn jobserver(c: &mut Criterion) {
    let mut group = c.benchmark_group("jobserver_token_round_trip");
    group.measurement_time(Duration::from_secs(5));

    let parent = std::env::temp_dir();
    let dir = tempfile::tempdir_in(&parent).expect("temp dir");
    std::fs::write(dir.path().join("config.json"), r#"{"max_jobs": 4}"#).expect("config");
    let env = Environment::from_process()
        .var(TEST_ROOT_VAR, &parent)
        .var("AGENT_SLOTS_DIR", dir.path());
    let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
    let server =
        Jobserver::start(&pool, &Request::new("bench"), 2, Style::Fifo).expect("start a jobserver");
    let fifo = rustix::fs::open(
        server.fifo(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .expect("open the FIFO as a client");
    // The first token takes a job slot; after it, every round trip finds its token waiting.
    round_trip(&fifo, &fifo);
    group.bench_function("worklane", |b| b.iter(|| round_trip(&fifo, &fifo)));
    server.end();

    let (read, write) = std::io::pipe().expect("pipe");
    rustix::io::write(&write, b"+").expect("a token");
    group.bench_function("make_pipe", |b| b.iter(|| round_trip(&read, &write)));
    group.finish();
}

criterion_group!(benches, jobserver);
criterion_main!(benches);
