//! The slot pool and the `worklane` CLI, beside what a user would otherwise run.
//!
//! - `admission_take_release/{disk,tmpfs}`: library take + release of an agent slot with 8
//!   live slot files present (each probed while counting), under a cap of 16:
//!   `agent_slot_with_8_held` (weight 1, as `try_take`), `weighted_slot_with_8_held` (a take
//!   of weight 3 among holders of weights 1 and 2, 12 units held: the weights read and summed)
//!   and `shared_slot_with_8_held` (the same under `"shares": {"*": 16}`: the owner's share
//!   checked and the fair order decided under `slots.lock`).
//!   `syscall_floor_with_8_held` is its floor: the same durable steps by hand with raw
//!   syscalls (`floor_take_release`).
//! - `admission_take_release_cpu/{disk,tmpfs}`: the same three, measured in CPU time of the
//!   benchmarking thread (user and kernel, `CLOCK_THREAD_CPUTIME_ID`) rather than wall time, so
//!   that two builds can be compared on a machine busy with other work: the time spent waiting
//!   for a CPU or the disk is not counted.
//! - `cli_per_run`: one whole process per iteration: `worklane run -- true` (the release
//!   build, and the binary `cargo xtask dist` makes when it is there), plain `true`, and
//!   `flock -n FILE true` (util-linux), so the difference is what wrapping a command costs.
//!   Criterion times each apart; `benches/scripts/alternate.py` alternates them, run by run,
//!   for the ratio.
//!
//! The CLI bench runs the release `worklane` binary, which cargo does not build for this
//! crate; build it first:
//!
//! `cargo build --release -p worklane && cargo xtask dist && cargo bench -p worklane-benches --bench admission`

// A benchmark starts its processes from one thread and releases nothing another process must
// see free meanwhile: the fork gate of the test binaries (worklane-testkit) is not needed here.
#![allow(clippy::disallowed_methods)]

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use worklane_admission::{Ask, Kind, Pool, Slot, Take};
use worklane_lease::Request;
use worklane_slotfile::{Environment, SlotDir, TEST_ROOT_VAR};

fn pool_in(parent: &Path, config: &str) -> (tempfile::TempDir, Pool) {
    let dir = tempfile::tempdir_in(parent).expect("temp dir");
    std::fs::write(dir.path().join("config.json"), config).expect("config");
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

fn take_weighted(pool: &Pool, ask: &Ask) -> Slot {
    let now = pool.clock().now_ms();
    match pool
        .try_take_for(Kind::Agent, &Request::new("bench"), ask, 0, now)
        .expect("take")
    {
        Take::Held(slot) => slot,
        Take::Blocked(b) => panic!("under the cap: {b}"),
    }
}

/// The CPU time the benchmarking thread spends, in the process and in the kernel for it
/// (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`), instead of wall time.
struct CpuTime;

fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

impl Measurement for CpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu()
    }

    fn end(&self, started: Duration) -> Duration {
        thread_cpu().saturating_sub(started)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

/// Nanoseconds of CPU time, shown in ns, µs or ms.
struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical < 1e3 {
            (1.0, "ns")
        } else if typical < 1e6 {
            (1e-3, "µs")
        } else {
            (1e-6, "ms")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        _throughput: &criterion::Throughput,
        _values: &mut [f64],
    ) -> &'static str {
        "(no throughput)"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn bench_take<M: Measurement>(c: &mut Criterion<M>, group: &str, label: &str, parent: &Path) {
    let mut group = c.benchmark_group(format!("{group}/{label}"));
    {
        let (_dir, pool) = pool_in(parent, r#"{"max_agents": 16}"#);
        let held: Vec<Slot> = (0..8).map(|_| take(&pool)).collect();
        group.bench_function("agent_slot_with_8_held", |b| {
            b.iter(|| take(&pool).release().expect("release"));
        });
        let record = {
            let slot = take(&pool);
            let bytes = std::fs::read(pool.dir().path().join(slot.name())).expect("record");
            slot.release().expect("release");
            bytes
        };
        group.bench_function("syscall_floor_with_8_held", |b| {
            let dir = std::fs::File::open(pool.dir().path()).expect("open the slot directory");
            b.iter(|| floor_take_release(&dir, &record));
        });
        drop(held);
    }
    for (name, config) in [
        ("weighted_slot_with_8_held", r#"{"max_agents": 16}"#),
        (
            "shared_slot_with_8_held",
            r#"{"max_agents": 16, "shares": {"*": 16}}"#,
        ),
    ] {
        let (_dir, pool) = pool_in(parent, config);
        // Eight holders of weights 1 and 2: 12 units of 16.
        let held: Vec<Slot> = (0..8)
            .map(|i| take_weighted(&pool, &Ask::new().with_weight(1 + i % 2)))
            .collect();
        let ask = Ask::new().with_weight(3);
        group.bench_function(name, |b| {
            b.iter(|| take_weighted(&pool, &ask).release().expect("release"));
        });
        drop(held);
    }
    group.finish();
}

/// What a take + release with 8 held must do at the least, by hand with raw syscalls: the
/// guard of `slots.lock` (open, `flock`), the directory read (to count the held), the 8 held
/// slots' guards probed (open, `flock` refused, close), the free slot's guard taken, its
/// record published by temp + link (create, fchmod, write, link, unlink the temp), `slots.lock`
/// let go, then the release (the record unlinked, the guard closed).
fn floor_take_release(dir: &std::fs::File, record: &[u8]) {
    use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};
    use std::io::Write;
    let guard_flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let lock = rustix::fs::openat(dir, ".slots.lock.flock", guard_flags, Mode::empty())
        .expect("open the count's guard");
    rustix::fs::flock(&lock, FlockOperation::LockExclusive).expect("flock");
    let listing = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open the directory");
    let mut entries = 0;
    for entry in rustix::fs::Dir::read_from(&listing).expect("read the directory") {
        entry.expect("an entry");
        entries += 1;
    }
    std::hint::black_box(entries);
    for i in 0..8 {
        let probe = rustix::fs::openat(
            dir,
            format!(".agent-{i}.lock.flock"),
            guard_flags,
            Mode::empty(),
        )
        .expect("open a held guard");
        assert!(
            rustix::fs::flock(&probe, FlockOperation::NonBlockingLockExclusive).is_err(),
            "held"
        );
    }
    let guard = rustix::fs::openat(dir, ".agent-8.lock.flock", guard_flags, Mode::empty())
        .expect("open the free guard");
    rustix::fs::flock(&guard, FlockOperation::NonBlockingLockExclusive).expect("free");
    let temp = ".agent-8.lock.tmp-floor";
    let t = rustix::fs::openat(
        dir,
        temp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .expect("create the temp");
    rustix::fs::fchmod(&t, Mode::from_bits_truncate(0o644)).expect("fchmod");
    std::fs::File::from(t).write_all(record).expect("write");
    rustix::fs::linkat(dir, temp, dir, "agent-8.lock", AtFlags::empty()).expect("link");
    rustix::fs::unlinkat(dir, temp, AtFlags::empty()).expect("unlink the temp");
    drop(lock);
    rustix::fs::unlinkat(dir, "agent-8.lock", AtFlags::empty()).expect("unlink the record");
    drop(guard);
}

fn take_release(c: &mut Criterion) {
    for (label, dir) in worklane_benches::filesystems() {
        bench_take(c, "admission_take_release", label, &dir);
    }
}

fn take_release_cpu(c: &mut Criterion<CpuTime>) {
    for (label, dir) in worklane_benches::filesystems() {
        bench_take(c, "admission_take_release_cpu", label, &dir);
    }
}

fn run_ok(cmd: &mut Command) {
    let status = cmd.stdin(Stdio::null()).status().expect("spawn");
    assert!(status.success(), "{cmd:?} must succeed");
}

fn cli_per_run(c: &mut Criterion) {
    let worklane =
        worklane_benches::sibling_binary("worklane", "cargo build --release -p worklane");
    let root = std::env::temp_dir();
    let dir = tempfile::tempdir_in(&root).expect("temp dir");
    let slots = dir.path().join("slots");
    let lockfile = dir.path().join("lock");
    let mut group = c.benchmark_group("cli_per_run");
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(6));
    group.bench_function("worklane_run_true", |b| {
        b.iter(|| {
            run_ok(
                Command::new(&worklane)
                    .args(["run", "--no-wait", "--", "true"])
                    .env("AGENT_SLOTS_DIR", &slots)
                    // The child of a test run is a test run, confined to the same root.
                    .env(TEST_ROOT_VAR, &root),
            );
        });
    });
    // The binary `cargo xtask dist` builds (musl, static, fixed address): the one installed.
    let dist = worklane
        .parent()
        .and_then(std::path::Path::parent)
        .map(|target| target.join("dist").join("worklane"))
        .filter(|dist| dist.is_file());
    match &dist {
        Some(dist) => {
            group.bench_function("worklane_dist_run_true", |b| {
                b.iter(|| {
                    run_ok(
                        Command::new(dist)
                            .args(["run", "--no-wait", "--", "true"])
                            .env("AGENT_SLOTS_DIR", &slots)
                            .env(TEST_ROOT_VAR, &root),
                    );
                });
            });
        }
        None => {
            eprintln!("cli_per_run/worklane_dist_run_true skipped: run `cargo xtask dist` first")
        }
    }
    group.bench_function("plain_true", |b| {
        b.iter(|| run_ok(&mut Command::new("true")))
    });
    group.bench_function("flock_n_file_true", |b| {
        b.iter(|| {
            run_ok(Command::new("flock").arg("-n").arg(&lockfile).arg("true"));
        });
    });
    group.finish();
}

criterion_group!(benches, take_release, cli_per_run);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(CpuTime);
    targets = take_release_cpu
}
// The CPU-time group first: `cli_per_run` needs the release `worklane` binary.
criterion_main!(cpu, benches);
