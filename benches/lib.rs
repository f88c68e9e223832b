//! Shared helpers of the criterion benches in `benches/`; figures in `BENCHMARKS.md`.
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! Criterion benchmarks (`harness = false`; `lib.rs` holds the shared `filesystems()` (the temp
//! directory's and `/dev/shm`) and `sibling_binary()`), each beside the alternative a user would
//! otherwise pick. `guard`: acquire and release an existing guard, against raw
//! `open + flock + close`, `std::fs::File::try_lock`, fs2 `try_lock_exclusive`, and spawning
//! `/usr/bin/flock -n FILE true`. `slotfile`: publish and unlink a record, against the raw syscall
//! sequence. `identity`: `probe` of a live pid, against bare `kill(pid, 0)` and
//! `ProcessIdentity::of`. `lease`: acquire + release beside its raw syscall floor, each step of
//! acquire alone, and 16 `lease-holder` processes contending for one lease. `admission`: take +
//! release of an agent slot with 8 live slots, and whole-process `worklane run -- true` beside
//! plain `true` and `flock -n FILE true`. `budget`: a counted `Ledger::take` beside a
//! hand-written `flock` + read + rewrite-in-place counter. `dispatcher`: one enqueue, admission
//! and claim through a `Server` in a thread on a real socket (descriptors passed both ways, the
//! driver's adopt and release included), choosing the next row with 10 and 10 000 queued, and
//! recovering 10 000 rows (and cold, the page cache dropped). `views`: the `slots` document,
//! the metrics and `why` with 1,000 holders and 1,000 waiters. `guard`, `slotfile`, `lease`, `budget`
//! and the admission take run on the temp directory's filesystem and on `/dev/shm` when it exists. The lease stress and the
//! CLI bench run the release `lease-holder` and `worklane` binaries, built first. Figures go in
//! `BENCHMARKS.md`.

use std::path::{Path, PathBuf};

/// The directories a filesystem-sensitive bench runs in, with their labels: the temp dir's
/// filesystem (`disk`), and `/dev/shm` (`tmpfs`) where it exists.
#[must_use]
pub fn filesystems() -> Vec<(&'static str, PathBuf)> {
    let mut dirs = vec![("disk", std::env::temp_dir())];
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        dirs.push(("tmpfs", shm.to_owned()));
    }
    dirs
}

/// `target/<profile>/<name>`, beside the `deps/` directory the bench runs from: a binary of
/// another package, which cargo does not build for a bench. Panics with `build`, the command
/// that builds it, when it is missing.
#[must_use]
pub fn sibling_binary(name: &str, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("the bench runs from target/<profile>/deps")
        .join(name);
    assert!(
        bin.is_file(),
        "{} is missing: run `{build}` first",
        bin.display()
    );
    bin
}

/// Runs `try_once` until it gives a value, at most 50 times 1 ms apart, as worklane's own
/// takes wait out a guard held by a momentary probe (PROTOCOL.md 12, `acquire_settled`): a
/// bench's guard in a shared temp directory (`/dev/shm`) was twice found held for a moment by
/// a process outside the bench. Each wait is said on stderr with the lock holders the
/// kernel lists; still busy after 50 tries, it panics naming them.
///
/// # Panics
/// When `try_once` gives nothing 50 times.
pub fn settled<T>(what: &str, mut try_once: impl FnMut() -> Option<T>) -> T {
    for _ in 0..50 {
        if let Some(value) = try_once() {
            return value;
        }
        eprintln!("{what}: busy for a moment; {}", lock_holders());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("{what}: busy 50 times; {}", lock_holders());
}

/// The processes `/proc/locks` lists as holding a lock, with their command lines.
fn lock_holders() -> String {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let mut pids: Vec<&str> = locks
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    let shown: Vec<String> = pids
        .iter()
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            format!("{pid} {}", cmd.chars().take(80).collect::<String>())
        })
        .collect();
    format!(
        "this process is {}; lock holders: {shown:?}",
        std::process::id()
    )
}
