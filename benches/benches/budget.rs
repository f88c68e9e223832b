//! Taking one unit of an API budget before a call, beside what a user would write by hand:
//! `flock` a lock file, read a counter file, write it back in place. The hand-written version
//! has none of the ledger's safety (no crash-safe replace, no dead-holder recovery, no bounds,
//! no waits); the figure shows what those cost. Reported on the disk's filesystem and on tmpfs.
//!
//! `cargo bench -p worklane-benches --bench budget`

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
    group.finish();
}

fn budget_benches(c: &mut Criterion) {
    for (label, dir) in worklane_benches::filesystems() {
        bench_on(c, label, &dir);
    }
}

criterion_group!(benches, budget_benches);
criterion_main!(benches);
