//! Guard acquire + release on an existing guard (in a directory whose filesystem was checked
//! once, as a slot directory's guards are), beside what a user would otherwise pick:
//! a raw `open + flock + close`, `std::fs::File::try_lock`, fs2, and spawning
//! `/usr/bin/flock -n FILE true` per acquisition (the helper-process design this replaces).
//!
//! `cargo bench -p worklane-benches --bench guard`

// A benchmark starts its processes from one thread and releases nothing another process must
// see free meanwhile: the fork gate of the test binaries (worklane-testkit) is not needed here.
// The raw baseline calls `flock` itself, which only guard and slotfile may in worklane's code.
#![allow(
    clippy::disallowed_methods,
    reason = "processes started from one thread; the raw baseline calls flock itself"
)]

use criterion::{Criterion, criterion_group, criterion_main};
use rustix::fs::{FlockOperation, Mode, OFlags};
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use worklane_guard::Guard;

const RES: &str = "agent-0.lock";

fn site(parent: &Path) -> (tempfile::TempDir, std::fs::File) {
    let dir = tempfile::tempdir_in(parent).expect("temp dir");
    let fd = std::fs::File::open(dir.path()).expect("open dir");
    // Publish the guard once: the benchmark measures acquisition of an existing guard.
    Guard::try_acquire(&fd, dir.path(), RES)
        .expect("acquire")
        .expect("free")
        .release();
    (dir, fd)
}

fn bench_on(c: &mut Criterion, label: &str, parent: &Path) {
    let (dir, fd) = site(parent);
    let guard = dir.path().join(format!(".{RES}.flock"));
    let mut group = c.benchmark_group(format!("guard_acquire_release/{label}"));

    // As a slot directory takes its guards: its filesystem checked once, when it was opened.
    let checked = worklane_guard::CheckedFilesystem::of(&fd)
        .expect("fstatfs")
        .expect("a local filesystem");
    group.bench_function("worklane_guard", |b| {
        b.iter(|| {
            let g = worklane_benches::settled("worklane_guard", || {
                Guard::try_acquire_on(&fd, dir.path(), black_box(RES), Some(checked))
                    .expect("acquire")
            });
            drop(black_box(g));
        });
    });

    group.bench_function("raw_open_flock_close", |b| {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        b.iter(|| {
            let f = rustix::fs::openat(&fd, black_box(".agent-0.lock.flock"), flags, Mode::empty())
                .expect("open");
            worklane_benches::settled("raw_open_flock_close", || {
                rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).ok()
            });
            drop(f);
        });
    });

    group.bench_function("std_file_try_lock", |b| {
        b.iter(|| {
            let f = std::fs::File::open(black_box(&guard)).expect("open");
            worklane_benches::settled("std_file_try_lock", || f.try_lock().ok());
            drop(f);
        });
    });

    group.bench_function("fs2_try_lock_exclusive", |b| {
        b.iter(|| {
            let f = std::fs::File::open(black_box(&guard)).expect("open");
            worklane_benches::settled("fs2_try_lock_exclusive", || {
                fs2::FileExt::try_lock_exclusive(&f).ok()
            });
            drop(f);
        });
    });

    group.sample_size(20);
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("spawn_usr_bin_flock", |b| {
        b.iter(|| {
            let status = Command::new("/usr/bin/flock")
                .arg("-n")
                .arg(black_box(&guard))
                .arg("true")
                .status()
                .expect("spawn flock");
            assert!(status.success(), "flock -n must get the free lock");
        });
    });
    group.finish();
}

fn guard_benches(c: &mut Criterion) {
    for (label, dir) in worklane_benches::filesystems() {
        bench_on(c, label, &dir);
    }
}

criterion_group!(benches, guard_benches);
criterion_main!(benches);
