//! Publishing a lock record (then removing it, so the next iteration can publish again),
//! beside the raw syscall sequence it is built from: O_EXCL temp, write, fchmod, link, unlink.
//! Reported on the disk's filesystem and on tmpfs.
//!
//! `cargo bench -p worklane-benches --bench slotfile`

// The baseline is the raw syscall sequence (link, unlink) that only guard and slotfile may
// call in worklane's own code.
#![allow(
    clippy::disallowed_methods,
    reason = "the baseline calls linkat and unlinkat itself"
)]

use criterion::{Criterion, criterion_group, criterion_main};
use rustix::fs::{AtFlags, Mode, OFlags};
use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use worklane_slotfile::{Environment, Publish, RECORD_MODE, SlotDir, TEST_ROOT_VAR};

const RECORD: &[u8] = br#"{"pid":4242,"owner":"bench","acquiredAt":"2026-11-30T00:00:00.000Z","place":{"host":"h","boot":"b","pidns":4026531836,"timens":4026531834},"identity":{"boot":"b","start":123456}}"#;

fn bench_on(c: &mut Criterion, label: &str, parent: &Path) {
    let dir = tempfile::tempdir_in(parent).expect("temp dir");
    // A bench binary counts as a test run: allow its own temp root, wherever that is.
    let env = Environment::from_process().var(TEST_ROOT_VAR, parent);
    let slots = SlotDir::open_in(&env, dir.path()).expect("open slot dir");
    let lock = slots.file("agent-0.lock").expect("valid name");
    let fd = std::fs::File::open(dir.path()).expect("open dir");
    let mut group = c.benchmark_group(format!("publish_record/{label}"));

    group.bench_function("worklane_slotfile", |b| {
        b.iter(|| {
            let got = lock
                .publish(black_box(RECORD), RECORD_MODE)
                .expect("publish");
            assert_eq!(got, Publish::Published);
            rustix::fs::unlinkat(&fd, "agent-0.lock", AtFlags::empty()).expect("unlink");
        });
    });

    group.bench_function("raw_syscalls", |b| {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        b.iter(|| {
            let temp = ".agent-0.lock.tmp-raw";
            let t = rustix::fs::openat(&fd, temp, flags, Mode::from_bits_truncate(0o600))
                .expect("create temp");
            rustix::fs::fchmod(&t, Mode::from_bits_truncate(0o644)).expect("fchmod");
            std::fs::File::from(t)
                .write_all(black_box(RECORD))
                .expect("write");
            rustix::fs::linkat(&fd, temp, &fd, "agent-0.lock", AtFlags::empty()).expect("link");
            rustix::fs::unlinkat(&fd, temp, AtFlags::empty()).expect("unlink temp");
            rustix::fs::unlinkat(&fd, "agent-0.lock", AtFlags::empty()).expect("unlink");
        });
    });
    group.finish();
}

fn slotfile_benches(c: &mut Criterion) {
    for (label, dir) in worklane_benches::filesystems() {
        bench_on(c, label, &dir);
    }
}

criterion_group!(benches, slotfile_benches);
criterion_main!(benches);
