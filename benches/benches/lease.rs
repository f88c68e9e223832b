//! Lease acquisition and release, beside the syscall floor it is built from, plus the
//! multi-process stress: 16 `lease-holder` processes contending for one lease.
//!
//! - `lease_acquire_release/{disk,tmpfs}`: an uncontended `acquire` + `release` of
//!   `agent-0.lock` under process liveness, beside `raw_floor`: open the guard +
//!   `flock(LOCK_EX|LOCK_NB)`, publish the same record bytes by O_EXCL temp + fchmod + write +
//!   `linkat` + unlink of the temp, then unlink the record and close the guard.
//! - `lease_parts/{disk,tmpfs}`: the steps `acquire` + `release` add on top of that floor,
//!   each alone, to show where the time goes.
//! - `lease_stress`: per iteration, 16 `lease-holder --cycles 2000` processes on one lease;
//!   every one must print `done` (no `DOUBLE`: never two owners at once) and the shared
//!   counter must end at 32000. Throughput is cycles per second.
//!
//! The stress runs the `lease-holder` helper binary of `worklane-lease`, which cargo does not
//! build for this crate; build it first:
//!
//! `cargo build --release -p worklane-lease --features test-seams --bin lease-holder && cargo bench -p worklane-benches --bench lease`

// A benchmark starts its processes from one thread and releases nothing another process must
// see free meanwhile: the fork gate of the test binaries (worklane-testkit) is not needed here.
// The raw floor calls `flock`, `linkat` and `unlinkat` itself, which only guard and slotfile
// may in worklane's code.
#![allow(
    clippy::disallowed_methods,
    reason = "processes started from one thread; the raw floor makes the syscalls itself"
)]

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};
use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use worklane_identity::ProcessIdentity;
use worklane_lease::{Acquired, Lease, Options, Request, acquire, current_epoch, epoch_prefix};
use worklane_slotfile::{Environment, RECORD_MODE, SHARED_MODE, SlotDir, TEST_ROOT_VAR};

const LOCK: &str = "agent-0.lock";
const GUARD: &str = ".agent-0.lock.flock";
const PROCESSES: u64 = 16;
const CYCLES: u64 = 2000;

/// A slot directory in a fresh temp dir under `parent`, with its descriptor for raw calls.
struct Site {
    /// Kept so the directory lives as long as the benches that use it.
    _dir: tempfile::TempDir,
    slots: SlotDir,
    fd: std::fs::File,
}

impl Site {
    fn new(parent: &Path) -> Site {
        let dir = tempfile::tempdir_in(parent).expect("temp dir");
        // A bench binary counts as a test run: allow its own temp root, wherever that is.
        let env = Environment::from_process().var(TEST_ROOT_VAR, parent);
        let slots = SlotDir::open_in(&env, dir.path()).expect("open slot dir");
        let fd = std::fs::File::open(dir.path()).expect("open dir");
        Site {
            _dir: dir,
            slots,
            fd,
        }
    }

    fn held(&self, request: &Request, options: &Options) -> Lease {
        match acquire(&self.slots, LOCK, request, options).expect("acquire") {
            Acquired::Held(lease) => lease,
            Acquired::Refused(refusal) => panic!("an uncontended acquire was refused: {refusal}"),
        }
    }
}

fn bench_on(c: &mut Criterion, label: &str, parent: &Path) {
    let site = Site::new(parent);
    let request = Request::new("bench");
    let options = Options::process();
    // One acquisition first: it publishes the guard inode (as every later one finds it) and
    // gives the raw floor the exact record bytes a lease writes.
    let first = site.held(&request, &options);
    let record = first.record().to_bytes();
    first.release().expect("release");

    let mut group = c.benchmark_group(format!("lease_acquire_release/{label}"));
    group.bench_function("worklane_lease", |b| {
        b.iter(|| {
            let lease = site.held(black_box(&request), &options);
            lease.release().expect("release");
        });
    });

    group.bench_function("raw_floor", |b| {
        let guard_flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let temp_flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let temp = ".agent-0.lock.tmp-raw";
        let fd = &site.fd;
        b.iter(|| {
            let guard =
                rustix::fs::openat(fd, black_box(GUARD), guard_flags, Mode::empty()).expect("open");
            rustix::fs::flock(&guard, FlockOperation::NonBlockingLockExclusive).expect("flock");
            let t = rustix::fs::openat(fd, temp, temp_flags, Mode::from_bits_truncate(0o600))
                .expect("create temp");
            rustix::fs::fchmod(&t, Mode::from_bits_truncate(0o644)).expect("fchmod");
            std::fs::File::from(t)
                .write_all(black_box(&record))
                .expect("write");
            rustix::fs::linkat(fd, temp, fd, LOCK, AtFlags::empty()).expect("link");
            rustix::fs::unlinkat(fd, temp, AtFlags::empty()).expect("unlink temp");
            rustix::fs::unlinkat(fd, LOCK, AtFlags::empty()).expect("unlink record");
            drop(guard);
        });
    });
    group.finish();

    bench_parts(c, label, &site, &record);
}

/// What `acquire` + `release` do beyond the raw floor, one step at a time, on the same site.
fn bench_parts(c: &mut Criterion, label: &str, site: &Site, record: &[u8]) {
    let lock = site.slots.file(LOCK).expect("valid name");
    let mut group = c.benchmark_group(format!("lease_parts/{label}"));

    group.bench_function("guard_try_acquire", |b| {
        b.iter(|| {
            worklane_benches::settled("lease_parts guard_try_acquire", || {
                lock.try_guard().expect("guard")
            })
        });
    });
    group.bench_function("clear_claims_list_dir", |b| {
        b.iter(|| site.slots.list().expect("list"));
    });
    group.bench_function("read_absent_record", |b| {
        b.iter(|| assert!(lock.read().expect("read").is_none(), "no record"));
    });
    group.bench_function("epoch_advance_by_rename", |b| {
        let mut n = current_epoch(&lock).expect("epoch");
        if n == 0 {
            let first = site
                .slots
                .file(&format!("{}1", epoch_prefix(LOCK)))
                .expect("name");
            let _ = first.publish(b"", SHARED_MODE).expect("first epoch");
            n = 1;
        }
        b.iter(|| {
            let from = site
                .slots
                .file(&format!("{}{n}", epoch_prefix(LOCK)))
                .expect("name");
            from.rename(&format!("{}{}", epoch_prefix(LOCK), n + 1))
                .expect("advance");
            n += 1;
        });
    });
    group.bench_function("process_identity_of_self", |b| {
        b.iter(|| ProcessIdentity::of_self().expect("identity"));
    });
    group.bench_function("publish_then_remove_if_unchanged", |b| {
        b.iter(|| {
            let _ = lock
                .publish(black_box(record), RECORD_MODE)
                .expect("publish");
            let _ = lock.remove_if_unchanged(record).expect("remove");
        });
    });
    group.finish();
}

fn acquire_release(c: &mut Criterion) {
    for (label, dir) in worklane_benches::filesystems() {
        bench_on(c, label, &dir);
    }
}

/// One stress run: 16 processes x `CYCLES` acquire/release cycles on one lease in a fresh
/// directory. Returns the wall time from the first spawn to the last exit.
fn stress_run(holder: &Path) -> Duration {
    let root = std::env::temp_dir();
    let dir = tempfile::tempdir_in(&root).expect("temp dir");
    let start = Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            Command::new(holder)
                .arg(dir.path())
                .args([LOCK, &format!("w{i}"), "--cycles", &CYCLES.to_string()])
                // The children of a test run are test runs too, confined to the same root.
                .env(TEST_ROOT_VAR, &root)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn lease-holder")
        })
        .collect();
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait for lease-holder"))
        .collect();
    let elapsed = start.elapsed();
    for out in outputs {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "a lease-holder failed: {text}");
        assert_eq!(text.trim(), "done", "double ownership or error: {text}");
    }
    let count: u64 = std::fs::read_to_string(dir.path().join("counter"))
        .expect("read the counter")
        .trim()
        .parse()
        .expect("the counter holds a number");
    assert_eq!(
        count,
        PROCESSES * CYCLES,
        "every cycle must be counted exactly once"
    );
    elapsed
}

fn stress(c: &mut Criterion) {
    let holder = worklane_benches::sibling_binary(
        "lease-holder",
        "cargo build --release -p worklane-lease --features test-seams --bin lease-holder",
    );
    let mut group = c.benchmark_group("lease_stress");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(PROCESSES * CYCLES));
    group.bench_function(format!("{PROCESSES}_processes_x_{CYCLES}_cycles"), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let t = stress_run(&holder);
                    #[allow(clippy::cast_precision_loss)]
                    let rate = (PROCESSES * CYCLES) as f64 / t.as_secs_f64();
                    eprintln!(
                        "lease_stress run: {PROCESSES} x {CYCLES} cycles in {t:.2?}, {rate:.0} cycles/s, no double ownership"
                    );
                    t
                })
                .sum()
        });
    });
    group.finish();
}

criterion_group!(benches, acquire_release, stress);
criterion_main!(benches);
