//! What every module of the pool's tests shares: a slot directory in a temp dir with its pool,
//! and the files and processes the tests plant in it.

pub(crate) use std::process::{Command, Stdio};
pub(crate) use std::sync::Arc;
pub(crate) use std::time::Duration;
pub(crate) use worklane_admission::{
    Blocker, Drain, DrainState, Kind, Pool, Slot, SlotState, Stop, Take, Wait,
};
pub(crate) use worklane_identity::{Field, Place, ProcessIdentity, Recorded};
pub(crate) use worklane_lease::{LiveWhy, ManualClock, Record, Request, rfc3339_ms};
pub(crate) use worklane_slotfile::{Environment, RECORD_MODE, SlotDir};
pub(crate) use worklane_testkit::Gated;
pub(crate) use worklane_testkit::gate::{self, QuietDrop};

/// How long a test waits for what happens at once when the code is right: a waiter's next
/// look (due within 250 ms), a helper process's next line, a thread's or a process's end. Ten
/// times what it takes on this loaded 2-core machine, and short enough that when a mutant
/// makes several such things never happen, the tests that wait for them, two at a time, all
/// fail within the 23 s cargo-mutants gives the whole suite, naming what did not happen.
pub(crate) const BOUND: Duration = Duration::from_secs(3);

/// How long a test waits for a take due to end within a few hundred milliseconds (its
/// timeout of at most 200 ms, or the next look, at most 250 ms away): ten times that, and
/// shorter than [`BOUND`] because several such takes hang at once under one mutant (of the
/// wait's end), and their bounds add up on the suite's two test threads.
pub(crate) const PROMPT: Duration = Duration::from_secs(2);

/// How long [`watched`] lets a call run: a take tries a busy `slots.lock` for about 2 s (5 s
/// on this loaded machine) before it reports it; nothing else a test calls takes as long.
pub(crate) const WATCHDOG: Duration = Duration::from_secs(10);

/// Runs `f` on this thread, and aborts the whole test binary, saying why, if it has not
/// returned within [`WATCHDOG`]: for a call that can only hang inside the library (a loop of
/// its own, the gate shut meanwhile), where no thread can be joined within a bound instead.
/// The binary failing is the test failing: a mutant that makes a take spin fails the suite
/// rather than timing it out.
pub(crate) fn watched<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let what = what.to_owned();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(WATCHDOG) {
            eprintln!("{what} did not return within {WATCHDOG:?}: the test binary aborts");
            std::process::abort();
        }
    });
    let out = f();
    drop(done);
    out
}

/// The next value of `rx` within [`BOUND`]; panics naming `what` did not come.
pub(crate) fn recv_within<T>(rx: &std::sync::mpsc::Receiver<T>, what: &str) -> T {
    match rx.recv_timeout(BOUND) {
        Ok(value) => value,
        Err(e) => panic!("{what}: not within {BOUND:?} ({e})"),
    }
}

/// A thread whose end a test waits for within [`BOUND`] ([`Bounded::join`]).
pub(crate) struct Bounded<T>(std::sync::mpsc::Receiver<std::thread::Result<T>>);

/// Runs `f` on a thread of its own, to be joined within [`BOUND`]. A thread that never ends
/// is left behind when its test fails; the test binary's end takes it.
pub(crate) fn spawn_bounded<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Bounded<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    Bounded(rx)
}

impl<T> Bounded<T> {
    /// What the thread returned (its panic goes on in the caller), within [`BOUND`]; panics
    /// naming `what` did not end.
    pub(crate) fn join(self, what: &str) -> T {
        self.join_within(BOUND, what)
    }

    /// [`Bounded::join`] within `limit`.
    pub(crate) fn join_within(self, limit: Duration, what: &str) -> T {
        match self.0.recv_timeout(limit) {
            Ok(Ok(value)) => value,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(e) => panic!("{what}: not within {limit:?} ({e})"),
        }
    }
}

/// Waits for `child` to end within [`BOUND`] (its pidfd polled) and reaps it; panics naming
/// `what` did not end. A child still running is SIGKILLed when the failing test drops it.
pub(crate) fn wait_within(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .expect("a child's pid");
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).expect("pidfd_open of a child");
    let deadline = std::time::Instant::now() + BOUND;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        assert!(!left.is_zero(), "{what}: did not end within {BOUND:?}");
        let spec = Timespec {
            tv_sec: i64::try_from(left.as_secs()).expect("seconds"),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        match poll(&mut fds, Some(&spec)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => {}
            Ok(_) => return child.wait().expect("reap"),
            Err(e) => panic!("{what}: poll of its pidfd: {e}"),
        }
    }
}

pub(crate) struct Site {
    pub(crate) temp: tempfile::TempDir,
    pub(crate) pool: Pool,
}

impl Site {
    pub(crate) fn new(config: &str) -> Site {
        let temp = tempfile::tempdir().expect("temp dir");
        std::fs::write(temp.path().join("config.json"), config).expect("config");
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
        let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
        Site { temp, pool }
    }

    pub(crate) fn set_config(&self, config: &str) {
        std::fs::write(self.temp.path().join("config.json"), config).expect("config");
    }

    /// A take with the gate quiet: it takes and releases `slots.lock`, and maybe guards of
    /// slots it finds in use. Watched: a take that never returns aborts the test binary.
    pub(crate) fn try_take(&self, kind: Kind) -> Take {
        watched("a take", || {
            gate::quietly(|| self.pool.try_take(kind, &Request::new("test")))
        })
        .expect("take")
    }

    /// Takes a slot that must be free; it is released with the gate quiet.
    pub(crate) fn take(&self, kind: Kind) -> QuietDrop<Slot> {
        match self.try_take(kind) {
            Take::Held(slot) => QuietDrop::new(slot),
            Take::Blocked(b) => panic!("{} must be free: {b}", kind.label()),
        }
    }

    pub(crate) fn blocked(&self, kind: Kind) -> Blocker {
        match self.try_take(kind) {
            Take::Held(slot) => {
                let name = slot.name().to_owned();
                gate::quietly(|| drop(slot));
                panic!("{} must be blocked, got {name}", kind.label())
            }
            Take::Blocked(b) => b,
        }
    }

    /// The idle probe, with the gate quiet (it takes the full run's guard for a moment).
    pub(crate) fn idle(&self) -> bool {
        gate::quietly(|| self.pool.idle()).expect("idle")
    }

    /// The pool's snapshot, with the gate quiet (it probes every slot's guard).
    pub(crate) fn snapshot(&self) -> worklane_admission::Snapshot {
        gate::quietly(|| self.pool.snapshot()).expect("snapshot")
    }

    pub(crate) fn write_record(&self, name: &str, record: &Record) {
        SlotDir::open(self.temp.path())
            .expect("open")
            .file(name)
            .expect("valid")
            .replace(&record.to_bytes(), RECORD_MODE)
            .expect("write");
    }
}

/// Sets `path`'s modification time to `secs` seconds after the Unix epoch.
pub(crate) fn set_mtime(path: &std::path::Path, secs: u64) {
    std::fs::File::open(path)
        .and_then(|f| f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs)))
        .unwrap_or_else(|e| panic!("set the mtime of {}: {e}", path.display()));
}

/// Sets `path`'s modification time `secs` seconds back, as a writer killed that long ago
/// leaves its file.
pub(crate) fn age(path: &std::path::Path, secs: u64) {
    let then = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs()
        - secs;
    set_mtime(path, then);
}

/// Releases `slot` but keeps a copy of its guard's descriptor, so the guard stays held with no
/// record behind it: what the processes a finished run left running leave.
pub(crate) fn leave_running(slot: QuietDrop<Slot>) -> std::os::fd::OwnedFd {
    use std::os::fd::AsFd;
    let copy = slot
        .lease()
        .guard()
        .expect("a slot holds its guard for life")
        .as_fd()
        .try_clone_to_owned()
        .expect("copy the guard's descriptor");
    slot.end(Slot::release).expect("release");
    copy
}

pub(crate) fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

pub(crate) fn dead_record() -> Record {
    let mut child = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn_gated()
        .expect("spawn sleep");
    let identity = ProcessIdentity::of(child.id()).expect("identity");
    child.kill().expect("kill");
    child.wait().expect("reap");
    Record {
        holder: Recorded::new(identity, Place::current().expect("place").clone()),
        owner: Some("dead".into()),
        ..Record::default()
    }
}

/// Watches the opens in `dir`, and the closes that separate them (the kernel merges an
/// event into an identical one still unread, so opens alone would count as one): each try
/// at a guard opens it, so tries are counted, never timed.
pub(crate) fn watch(dir: &std::path::Path) -> std::os::fd::OwnedFd {
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
    let watch = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).expect("inotify");
    inotify::add_watch(&watch, dir, WatchFlags::OPEN | WatchFlags::CLOSE_NOWRITE)
        .expect("watch the directory");
    watch
}

/// How many times `name` was opened since the last look (every event already queued).
pub(crate) fn opens(watch: &std::os::fd::OwnedFd, name: &str) -> usize {
    opened(watch).iter().filter(|n| *n == name).count()
}

/// The names opened since the last look, one per open (every event already queued).
pub(crate) fn opened(watch: &std::os::fd::OwnedFd) -> Vec<String> {
    use rustix::fs::inotify::{ReadFlags, Reader};
    let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
    let mut events = Reader::new(watch, &mut buf);
    let mut names = Vec::new();
    loop {
        match events.next() {
            Ok(event) => {
                assert!(
                    !event.events().contains(ReadFlags::QUEUE_OVERFLOW),
                    "the inotify queue overflowed"
                );
                if event.events().contains(ReadFlags::OPEN)
                    && let Some(name) = event.file_name()
                {
                    names.push(name.to_string_lossy().into_owned());
                }
            }
            Err(rustix::io::Errno::AGAIN) => return names,
            Err(e) => panic!("read inotify events: {e}"),
        }
    }
}
