//! Taking one unit of an API budget before a call, beside what a user would write by hand:
//! `flock` a lock file, read a counter file, write it back in place. The hand-written version
//! has none of the ledger's safety (no crash-safe replace, no dead-holder recovery, no bounds,
//! no waits); the figure shows what those cost. Reported on the disk's filesystem and on tmpfs.
//!
//! `syscall_floor` is the ledger's own steps by hand (`floor_take`): its lock, the state read
//! and changed, a temp file renamed over it.
//!
//! `cargo bench -p worklane-benches --bench budget`

// The floor takes kernel locks and renames by hand, as the ledger's libraries do: that is what
// it measures.
#![allow(clippy::disallowed_methods)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use worklane_budget::{CredentialKey, Ledger, Observation};
use worklane_lease::{Clock, SystemClock};
use worklane_slotfile::{Environment, SlotDir, TEST_ROOT_VAR};

fn bench_on(c: &mut Criterion, label: &str, parent: &Path) {
    let dir = tempfile::tempdir_in(parent).expect("temp dir");
    // A bench binary counts as a test run: allow its own temp root, wherever that is.
    let env = Environment::from_process().var(TEST_ROOT_VAR, parent);
    let slots = SlotDir::open_in(&env, dir.path()).expect("open slot dir");
    let ledger = Ledger::new(slots).owner("bench");
    let key = CredentialKey::of_token("bench token");
    // A window with calls enough for any run, resetting in an hour.
    let reset = (SystemClock.now_ms() / 1000 + 3600).to_string();
    let window = Observation::from_headers(200, |name| match name {
        "x-ratelimit-remaining" => Some("9000000000000"),
        "x-ratelimit-limit" => Some("9000000000000"),
        "x-ratelimit-reset" => Some(reset.as_str()),
        _ => None,
    });
    ledger.observe(&key, &window);
    let mut group = c.benchmark_group(format!("budget_take/{label}"));

    group.bench_function("worklane_budget_take", |b| {
        b.iter(|| {
            let grant = ledger
                .take(&key, black_box("core"), "bench")
                .expect("a call left");
            assert!(grant.counted);
        });
    });

    let lock = std::fs::File::create(dir.path().join("hand.lock")).expect("lock file");
    let mut counter = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join("hand.count"))
        .expect("counter file");
    counter.write_all(b"0").expect("init");
    group.bench_function("hand_flock_read_write_in_place", |b| {
        b.iter(|| {
            fs2::FileExt::lock_exclusive(&lock).expect("flock");
            let mut text = String::new();
            counter.seek(SeekFrom::Start(0)).expect("seek");
            counter.read_to_string(&mut text).expect("read");
            let n: u64 = text.trim().parse().expect("count");
            counter.seek(SeekFrom::Start(0)).expect("seek");
            counter.set_len(0).expect("truncate");
            write!(counter, "{}", black_box(n + 1)).expect("write");
            fs2::FileExt::unlock(&lock).expect("unlock");
        });
    });
    // The ledger's steps by hand: its lock (a guard flocked), the state read, changed and
    // replaced by temp + rename, the lock let go.
    let fd = std::fs::File::open(dir.path()).expect("open the directory");
    std::fs::write(
        dir.path().join("floor.json"),
        br#"{"core": {"granted": 0}}"#,
    )
    .expect("state");
    std::fs::write(dir.path().join(".floor.lock.flock"), b"").expect("guard");
    group.bench_function("syscall_floor", |b| {
        b.iter(|| floor_take(&fd));
    });
    group.finish();
}

/// One counted take at the least, by hand with raw syscalls: the guard of the state's lock
/// opened and flocked, the state read and its count raised, the new state written to a temp
/// file and exchanged with the old (`renameat2(RENAME_EXCHANGE)`, as the ledger writes a
/// state on Linux: no ext4 write-back at a rename over data), the temp name, now the old
/// bytes, unlinked, the guard closed.
fn floor_take(dir: &std::fs::File) {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let guard = rustix::fs::openat(
        dir,
        ".floor.lock.flock",
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open the guard");
    rustix::fs::flock(&guard, FlockOperation::LockExclusive).expect("flock");
    let state = rustix::fs::openat(
        dir,
        "floor.json",
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open the state");
    let mut text = String::new();
    std::fs::File::from(state)
        .read_to_string(&mut text)
        .expect("read");
    let mut value: serde_json::Value = serde_json::from_str(&text).expect("json");
    let granted = value["core"]["granted"].as_u64().expect("count");
    value["core"]["granted"] = serde_json::Value::from(black_box(granted + 1));
    let temp = rustix::fs::openat(
        dir,
        ".floor.json.tmp",
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_bits_truncate(0o660),
    )
    .expect("create the temp");
    std::fs::File::from(temp)
        .write_all(&serde_json::to_vec(&value).expect("json"))
        .expect("write");
    rustix::fs::renameat_with(
        dir,
        ".floor.json.tmp",
        dir,
        "floor.json",
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .expect("exchange");
    rustix::fs::unlinkat(dir, ".floor.json.tmp", rustix::fs::AtFlags::empty()).expect("unlink");
    drop(guard);
}

fn budget_benches(c: &mut Criterion) {
    for (label, dir) in worklane_benches::filesystems() {
        bench_on(c, label, &dir);
    }
}

criterion_group!(benches, budget_benches);
criterion_main!(benches);
