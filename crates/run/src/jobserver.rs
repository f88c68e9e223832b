//! A GNU make jobserver whose tokens are the machine's job slots (`job-<i>.lock`, capped by
//! the config's `max_jobs`), for the build a supervised command runs.
//!
//! # The protocol the build sees
//!
//! A named FIFO in a private directory (mode 0700) holds the tokens: a client reads one byte
//! before starting a job and writes one byte back when the job ends, as make's own jobserver
//! does. The build learns of it through `MAKEFLAGS` and `CARGO_MAKEFLAGS`: `-jN
//! --jobserver-auth=R,W` with two inherited descriptors on the FIFO ([`Style::Fds`], every
//! make from 3.78 to 4.4, cargo, rustc, ninja), or `--jobserver-auth=fifo:PATH`
//! ([`Style::Fifo`], make 4.4 and newer clients). `N` is the tree's share.
//!
//! # Tokens and machine slots
//!
//! Every token the tree can read is backed by a job slot taken first. The supervision holds
//! one slot itself before the command starts (the implicit token every make has), which the
//! command inherits like its agent slot. Then:
//!
//! - *standby*: while the FIFO is empty and the tree holds fewer than its share, one more slot
//!   is taken, waiting in the machine's job line (priority, then arrival: a build that asks
//!   fastest cannot take every free token), and its token written: at most one token waits
//!   unread in the FIFO;
//! - *return*: a token written back is kept as the standby unless another build waits in the
//!   job line, or a standby is there already; then it is read back and its slot released;
//! - *accounting*: the tokens out are what this side wrote, less what it read back, less what
//!   the FIFO still holds (`FIONREAD`); every change is seen at once (inotify on the FIFO);
//! - *lost tokens*: a token whose reader died without writing it back is returned when the
//!   tree can no longer be holding it: when no process of the tree has the FIFO open, or when
//!   the tree's live threads fall below the tokens out plus one (each token backs a running
//!   job of at least one thread, plus whoever coordinates them). Checked every 250 ms while
//!   tokens are out; a token held by a live process that will never return it is returned
//!   only when the tree ends;
//! - *end*: when the command's supervision ends, the token taker is stopped and joined (a
//!   take it completes is its own to give back), then every slot still held is released at
//!   once;
//! - *left behind*: the private directory is locked (`flock`) for the jobserver's life; one
//!   whose lock is free, a minute old and of this user was left by a killed supervisor, and
//!   the next jobserver's start removes it.
//!
//! A SIGKILLed supervisor frees nothing a live build still uses: each token slot's guard is
//! also sent, as `SCM_RIGHTS`, into a Unix socket whose receiving end the tree inherits and
//! never reads. A descriptor in flight keeps its open file description, and so its lock, for
//! as long as the socket's receiving end is open in some process of the tree.
//!
//! # make's own `-jN`
//!
//! GNU make ignores an inherited jobserver when `-jN` is on its own command line ("-jN forced
//! in submake: resetting jobserver mode"), so for a command whose program is `make`, `gmake`
//! or `gnumake` the `-j` options are taken out of its arguments ([`make_jobs`](crate::jobs::make_jobs)) and their N
//! caps the tree's share instead.

use crate::jobs::{Remember, Style, judge_loss, lost_tokens, makeflags};
use crate::supervise::Error;
use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use worklane_admission::{Kind, Pool, Slot, Take, Wait};
use worklane_lease::Request;

/// How often lost tokens are looked for while tokens are out.
const LOST_CHECK: Duration = Duration::from_millis(250);

/// How long the accountant lets events gather after one wakes it.
const COALESCE: Duration = Duration::from_micros(500);

/// How long a look at the job line is trusted.
const LINE_LOOK: Duration = Duration::from_millis(20);

/// The most descriptors one `SCM_RIGHTS` message carries into the keeper socket.
const CHUNK: usize = 250;

// The FIFO's mode and opens, as named constants (no flag arithmetic in the code).
/// The FIFO's mode: its user's alone.
const FIFO_MODE: rustix::fs::Mode = rustix::fs::Mode::RUSR.union(rustix::fs::Mode::WUSR);
/// Our own descriptor on it: read-write (never blocks at open, and the FIFO never sees its
/// last writer leave), nonblocking.
const OPEN_OURS: rustix::fs::OFlags = rustix::fs::OFlags::RDWR
    .union(rustix::fs::OFlags::NONBLOCK)
    .union(rustix::fs::OFlags::CLOEXEC);
/// The client's read end, opened without blocking (made blocking once open: make waits in
/// read(2) or pselect).
const OPEN_READ_END: rustix::fs::OFlags = rustix::fs::OFlags::RDONLY
    .union(rustix::fs::OFlags::NONBLOCK)
    .union(rustix::fs::OFlags::CLOEXEC);
/// The client's write end.
const OPEN_WRITE_END: rustix::fs::OFlags =
    rustix::fs::OFlags::WRONLY.union(rustix::fs::OFlags::CLOEXEC);
/// What wakes the accountant: a read or write of the FIFO, or an attribute change (the end's
/// fchmod).
const WATCHED: rustix::fs::inotify::WatchFlags = rustix::fs::inotify::WatchFlags::ACCESS
    .union(rustix::fs::inotify::WatchFlags::MODIFY)
    .union(rustix::fs::inotify::WatchFlags::ATTRIB);

/// What both threads and the supervision share.
struct Shared {
    pool: Pool,
    request: Request,
    /// Our own descriptor on the FIFO (read-write, nonblocking).
    fifo: OwnedFd,
    fifo_path: PathBuf,
    /// Our end of the keeper socket, and a copy of the tree's end to read old batches back.
    keep_send: OwnedFd,
    keep_recv: OwnedFd,
    /// The most token slots (the implicit one is not among them).
    tokens_max: u32,
    ledger: Mutex<Ledger>,
    wanted: Condvar,
    stop: AtomicBool,
}

/// The accounts, under the mutex.
#[derive(Default)]
struct Ledger {
    /// The token slots held (standby and out).
    held: Vec<Slot>,
    /// Bytes this side wrote to the FIFO (each with a slot), and read back.
    written: u64,
    read: u64,
    /// Tokens judged lost (their slots released), never more than the tokens out.
    lost: u64,
    /// Whether the taker should fetch a standby.
    want: bool,
    /// Messages of the batch now in the keeper socket.
    in_flight: usize,
    /// A shortfall of the tree seen at a look for lost tokens (when, how many): judged lost
    /// only if the next look, at least [`LOST_CHECK`] later, sees it still.
    suspect: Option<(std::time::Instant, u64)>,
    /// The last look at the job line: when, and whether a build waited in it.
    line_seen: Option<(std::time::Instant, bool)>,
    /// The last look for a part of the build that escaped the jobserver ([`ESCAPE_LOOK`]):
    /// when, and whether it was seen then (said once it is seen at two looks in a row).
    escape_look: Option<(std::time::Instant, bool)>,
    /// Whether the escape was said.
    escape_said: bool,
}

/// How often the accountant looks whether the build runs more at once than its tokens allow.
const ESCAPE_LOOK: Duration = Duration::from_secs(1);

/// A running jobserver; [`Jobserver::end`] (or dropping it) releases everything.
///
/// [`crate::Supervisor::jobs`] runs one for its command, taking the build's own job slot
/// first; a caller that runs its build itself starts one with [`Jobserver::start`], gives the
/// command [`Jobserver::env`] and [`Jobserver::inherit`], holds one job slot for the command
/// itself, and calls [`Jobserver::end`] once the build's tree has ended.
pub struct Jobserver {
    shared: Arc<Shared>,
    dir: PathBuf,
    /// What the command inherits: the tree's keeper end, and with [`Style::Fds`] the FIFO's
    /// two client descriptors.
    inherit: Vec<OwnedFd>,
    env: Vec<(&'static str, OsString)>,
    accountant: Option<std::thread::JoinHandle<()>>,
    /// The private directory, locked (`flock`) for the jobserver's life: a directory whose lock
    /// is free was left by a supervisor that was killed, and the next jobserver of its user
    /// sweeps it ([`sweep_left_dirs`]).
    _dir_lock: Option<OwnedFd>,
    /// Joined before anything is released: a take it completes after the end is its own to
    /// give back, and no take is in progress when the process goes on to exit.
    taker: Option<std::thread::JoinHandle<()>>,
}

fn io(what: &'static str) -> impl Fn(rustix::io::Errno) -> Error {
    move |e| Error::Jobserver {
        what,
        source: e.into(),
    }
}

fn lock(ledger: &Mutex<Ledger>) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Jobserver {
    /// Makes the FIFO and the keeper socket, and starts the threads that keep the accounts.
    /// `share` is the tree's whole share (its implicit slot included; `u32::MAX`: as many as
    /// the machine gives); `request` names the token slots' records.
    pub fn start(
        pool: &Pool,
        request: &Request,
        share: u32,
        style: Style,
    ) -> Result<Jobserver, Error> {
        use rustix::fs::Mode;
        sweep_left_dirs(&std::env::temp_dir());
        let dir = private_dir()?;
        let dir_lock = lock_dir(&dir);
        let fifo_path = dir.join("jobserver");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo_path, FIFO_MODE)
            .map_err(io("making the jobserver's FIFO"))?;
        let open = |flags| {
            rustix::fs::open(&fifo_path, flags, Mode::empty())
                .map_err(io("opening the jobserver's FIFO"))
        };
        let fifo = open(OPEN_OURS)?;
        let (keep_send, keep_tree) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(io("making the keeper socket"))?;
        let keep_recv = rustix::io::fcntl_dupfd_cloexec(&keep_tree, 3)
            .map_err(io("copying the keeper socket"))?;
        rustix::io::ioctl_fionbio(&keep_recv, true).map_err(io("the keeper socket"))?;
        let mut inherit = vec![crate::supervise::inheritable(&keep_tree)?];
        drop(keep_tree);
        // The directory's lock, inherited too: a flock is the open file's, so it stays held
        // while any process of the tree lives, and a sweep by another build never removes
        // the FIFO of a tree that outlived its killed supervisor.
        if let Some(dir_lock) = &dir_lock {
            inherit.push(crate::supervise::inheritable(dir_lock)?);
        }
        let tokens = share.saturating_sub(1);
        let shown_share = Some(share).filter(|&s| s < u32::MAX);
        let auth = match style {
            Style::Fds => {
                // The client's ends: a blocking read end (make waits in read(2) or pselect)
                // and a write end, both inherited by the command.
                let read = open(OPEN_READ_END)?;
                rustix::io::ioctl_fionbio(&read, false).map_err(io("the FIFO's read end"))?;
                let write = open(OPEN_WRITE_END)?;
                let (read, write) = (
                    crate::supervise::inheritable(&read)?,
                    crate::supervise::inheritable(&write)?,
                );
                let auth = format!(
                    "{},{}",
                    std::os::fd::AsRawFd::as_raw_fd(&read),
                    std::os::fd::AsRawFd::as_raw_fd(&write)
                );
                inherit.push(read);
                inherit.push(write);
                auth
            }
            Style::Fifo => format!("fifo:{}", fifo_path.display()),
        };
        let flags = makeflags(
            std::env::var("MAKEFLAGS").ok().as_deref(),
            shown_share,
            &auth,
        );
        let cargo_flags = makeflags(
            std::env::var("CARGO_MAKEFLAGS").ok().as_deref(),
            shown_share,
            &auth,
        );
        let env = vec![
            ("MAKEFLAGS", OsString::from(flags)),
            ("CARGO_MAKEFLAGS", OsString::from(cargo_flags)),
            ("WORKLANE_JOBSERVER", fifo_path.clone().into_os_string()),
        ];
        let inotify = rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::CLOEXEC)
            .map_err(io("watching the jobserver's FIFO"))?;
        rustix::fs::inotify::add_watch(&inotify, &fifo_path, WATCHED)
            .map_err(io("watching the jobserver's FIFO"))?;
        let shared = Arc::new(Shared {
            pool: pool.clone(),
            request: request.clone().field("token", true),
            fifo,
            fifo_path,
            keep_send,
            keep_recv,
            tokens_max: tokens,
            ledger: Mutex::new(Ledger::default()),
            wanted: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        shared.settle(&mut lock(&shared.ledger), false);
        let accountant = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("jobserver".into())
                .spawn(move || shared.account(&inotify))
                .map_err(|source| Error::Jobserver {
                    what: "starting its accountant",
                    source,
                })?
        };
        let taker = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("jobserver-taker".into())
                .spawn(move || shared.take_standbys())
        };
        let mut server = Jobserver {
            shared,
            dir,
            inherit,
            env,
            accountant: Some(accountant),
            _dir_lock: dir_lock,
            taker: None,
        };
        server.taker = Some(taker.map_err(|source| Error::Jobserver {
            what: "starting its taker",
            source,
        })?);
        Ok(server)
    }

    /// The variables the command gets: `MAKEFLAGS`, `CARGO_MAKEFLAGS`, `WORKLANE_JOBSERVER`.
    #[must_use]
    pub fn env(&self) -> &[(&'static str, OsString)] {
        &self.env
    }

    /// Puts `make`, `gmake` and `ninja` shims first on the command's `PATH` (in the private
    /// directory's `bin`), each running the real one found on `PATH` now without any `-jN`,
    /// `-j N`, `-j`, `--jobs=N` or `--jobs N`: a make or ninja that a shell or `env` starts then
    /// reads the jobserver instead of running its own `-jN` past `max_jobs` (a ninja older
    /// than 1.13 reads no jobserver and runs its default width). A program not on `PATH` gets
    /// no shim.
    pub fn add_shims(&mut self) -> Result<(), Error> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let bin = self.dir.join("bin");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&bin)
            .map_err(|source| Error::Jobserver {
                what: "making the directory of its make and ninja shims",
                source,
            })?;
        let path = std::env::var_os("PATH");
        for name in ["make", "gmake", "ninja"] {
            let Some(real) = on_path(name, path.as_deref()) else {
                continue;
            };
            let script = shim_script(&real);
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o700)
                .open(bin.join(name))
                .and_then(|mut f| std::io::Write::write_all(&mut f, script.as_bytes()))
                .map_err(|source| Error::Jobserver {
                    what: "writing its make and ninja shims",
                    source,
                })?;
        }
        let mut joined = bin.into_os_string();
        if let Some(path) = path {
            joined.push(":");
            joined.push(path);
        }
        self.env.retain(|(name, _)| *name != "PATH");
        self.env.push(("PATH", joined));
        Ok(())
    }

    /// The FIFO (a client of the fifo form opens it by this path).
    #[must_use]
    pub fn fifo(&self) -> &std::path::Path {
        &self.shared.fifo_path
    }

    /// The descriptors the command must inherit (not close-on-exec; given away once): the
    /// keeper socket's end, the private directory's lock (held while any process of the tree
    /// lives, so that no other build's sweep removes the FIFO of a tree that outlived its
    /// supervisor), then with [`Style::Fds`] the FIFO's read and write ends that `MAKEFLAGS`
    /// names.
    pub fn inherit(&mut self) -> Vec<OwnedFd> {
        std::mem::take(&mut self.inherit)
    }

    /// The tree has ended: every token slot is released, the threads stop, the FIFO goes.
    pub fn end(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // The taker first: waiting for `want`, it wakes now; waiting in the job line, it sees
        // `stop` at its next look (within the line's 250 ms) and leaves; inside a take, it
        // finishes it and gives the slot back itself. Only then is nothing taken behind the
        // release below, and the process may exit without a take half done (a slot or
        // `slots.lock` left to be taken over).
        {
            let _ledger = lock(&self.shared.ledger);
            self.shared.wanted.notify_all();
        }
        if let Some(taker) = self.taker.take() {
            let _ = taker.join();
        }
        {
            let mut ledger = lock(&self.shared.ledger);
            ledger.want = false;
            let held = std::mem::take(&mut ledger.held);
            for slot in held {
                let _ = slot.release();
            }
            self.shared.send_batch(&mut ledger);
        }
        self.shared.wanted.notify_all();
        // Wakes the accountant's inotify (an attribute change is an event).
        let _ = rustix::fs::fchmod(&self.shared.fifo, FIFO_MODE);
        if let Some(accountant) = self.accountant.take() {
            let _ = accountant.join();
        }
        let _ = std::fs::remove_file(&self.shared.fifo_path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl Drop for Jobserver {
    fn drop(&mut self) {
        if self.accountant.is_some() {
            self.stop_now();
        }
    }
}

/// The first executable file named `name` on `path`.
fn on_path(name: &str, path: Option<&std::ffi::OsStr>) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    crate::search::search(std::ffi::OsStr::new(name), path)
        .into_iter()
        .map(|p| std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&p)))
        .find(|p| {
            p.is_absolute()
                && std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A shim that runs `real` without any `-j` option (POSIX sh: the arguments are walked once,
/// each kept one appended after the ones still to walk).
fn shim_script(real: &std::path::Path) -> String {
    let real = real.display().to_string().replace('\'', r"'\''");
    format!(
        "#!/bin/sh\n\
         # worklane run --jobs-shim: without its own -jN, so that it reads the jobserver.\n\
         skip=\n\
         for a in \"$@\"; do\n\
         \x20 shift\n\
         \x20 if [ -n \"$skip\" ]; then skip=; case \"$a\" in [0-9]*) continue;; esac; fi\n\
         \x20 case \"$a\" in\n\
         \x20   -j|--jobs) skip=1; continue;;\n\
         \x20   -j[0-9]*|--jobs=*) continue;;\n\
         \x20 esac\n\
         \x20 set -- \"$@\" \"$a\"\n\
         done\n\
         exec '{real}' \"$@\"\n"
    )
}

mod account;
mod dirs;

pub(crate) use dirs::sweep_left_dirs;
use dirs::{lock_dir, private_dir};

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_shims_program_is_the_first_executable_file_on_an_absolute_path_entry() {
        let temp = tempfile::tempdir().expect("temp");
        let entry = |name: &str| {
            let dir = temp.path().join(name);
            std::fs::create_dir(&dir).expect("mkdir");
            dir
        };
        let (as_dir, not_exec, exec, later) = (entry("a"), entry("b"), entry("c"), entry("d"));
        std::fs::create_dir(as_dir.join("tool")).expect("a directory named tool");
        std::fs::write(not_exec.join("tool"), "").expect("a file");
        std::fs::set_permissions(
            not_exec.join("tool"),
            std::fs::Permissions::from_mode(0o644),
        )
        .expect("chmod");
        for dir in [&exec, &later] {
            std::fs::write(dir.join("tool"), "#!/bin/sh\n").expect("a program");
            std::fs::set_permissions(dir.join("tool"), std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        // An empty entry first: the current directory, never searched for a shim.
        let path = format!(
            ":{}:{}:{}:{}",
            as_dir.display(),
            not_exec.display(),
            exec.display(),
            later.display()
        );
        let cwd_tool = std::env::current_dir().expect("cwd").join("tool");
        assert!(!cwd_tool.exists(), "the test runs where no `tool` is");
        assert_eq!(
            on_path("tool", Some(std::ffi::OsStr::new(&path))),
            Some(exec.join("tool"))
        );
        assert_eq!(
            on_path("no-such-tool", Some(std::ffi::OsStr::new(&path))),
            None
        );
    }

    #[test]
    fn a_shim_runs_the_real_program_without_any_j() {
        let temp = tempfile::tempdir().expect("temp");
        let real = temp.path().join("it's real");
        let shim = temp.path().join("shim");
        // Written with the gate quiet: a child another test is starting would hold a copy of
        // the write descriptor, and the exec below fail (ETXTBSY).
        worklane_testkit::gate::quietly(|| {
            std::fs::write(&real, "#!/bin/sh\nprintf '%s|' \"$@\"\n").expect("real");
            std::fs::write(&shim, shim_script(&real)).expect("shim");
        });
        for program in [&real, &shim] {
            std::fs::set_permissions(program, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        use worklane_testkit::Gated;
        let out = std::process::Command::new(&shim)
            .args([
                "-j8", "all", "-j", "4", "--jobs=2", "--jobs", "3", "-k", "-j", "x",
            ])
            .output_gated()
            .expect("run the shim");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "all|-k|x|");
    }
}
