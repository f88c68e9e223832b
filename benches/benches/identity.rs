//! Cost of judging a lock record's holder, beside the bare liveness check a user might pick.
//!
//! `probe` of a live pid = one `kill(pid, 0)` + one read of `/proc/<pid>/stat` (place cached).
//!
//! `cargo bench -p worklane-benches --bench identity`

// A benchmark starts its processes from one thread and releases nothing another process must
// see free meanwhile: the fork gate of the test binaries (worklane-testkit) is not needed here.
#![allow(clippy::disallowed_methods)]

use criterion::{Criterion, criterion_group, criterion_main};
use rustix::process::{Pid, test_kill_process};
use std::hint::black_box;
use std::process::{Child, Command, Stdio};
use worklane_identity::{Place, ProcessIdentity, Recorded, Verdict, probe};

/// A `sleep` child, killed and reaped on drop.
struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn probe_a_live_pid(c: &mut Criterion) {
    let sleeper = Sleeper(
        Command::new("sleep")
            .arg("3600")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep"),
    );
    let pid = sleeper.0.id();
    let place = Place::current().expect("read this place").clone();
    let record = Recorded::new(ProcessIdentity::of(pid).expect("identity of sleep"), place);
    assert_eq!(
        probe(&record),
        Verdict::Alive,
        "the benchmarked record must be alive"
    );

    let mut group = c.benchmark_group("identity/probe_live_pid");
    group.bench_function("worklane_identity_probe", |b| {
        b.iter(|| probe(black_box(&record)))
    });
    // The alternative a user would pick: signal 0 alone (no start identity, so a reused pid
    // looks alive). The gap between the two is the cost of proof.
    let raw = Pid::from_raw(i32::try_from(pid).expect("pid fits i32")).expect("pid is not 0");
    group.bench_function("kill_pid_0_only", |b| {
        b.iter(|| test_kill_process(black_box(raw)))
    });
    group.bench_function("process_identity_of", |b| {
        b.iter(|| ProcessIdentity::of(black_box(pid)))
    });
    group.finish();
    drop(sleeper);
}

criterion_group!(benches, probe_a_live_pid);
criterion_main!(benches);
