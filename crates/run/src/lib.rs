//! Run a command under a held worklane slot or role lease, with `worklane run`'s guarantees,
//! from Rust:
//!
//! - the slot lives as long as any process of the run: the command inherits a copy of the
//!   slot's guard descriptor, so a supervisor SIGKILLed while its command runs on frees
//!   nothing the command still uses;
//! - an emergency STOP halts the command within about 5 s: the supervisor checks every
//!   [`CHECK_EVERY`] and sends SIGTERM, then SIGKILL after [`GRACE`], to the command's process
//!   group and every descendant; and [`enforce::enforce_stop`] halts the commands whose
//!   supervisor cannot (SIGKILLed, stopped by SIGSTOP), from what their records name;
//! - signals behave as with the bare command: SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1,
//!   SIGUSR2 and SIGALRM are forwarded (those the caller ignores stay ignored), job control
//!   works, and the caller can end by the signal that ended the command ([`process::die_by`]);
//! - the command is found in `PATH` as glibc's execvp(3) finds it, a file without `#!` runs
//!   through `/bin/sh`, and it gets SIGTERM if its supervisor dies (Linux `PR_SET_PDEATHSIG`).
//!
//! - with [`Supervisor::jobs`], the command's build (make, cargo, ninja) gets a GNU make
//!   jobserver whose tokens are the machine's job slots: at most `max_jobs` compile jobs run
//!   machine-wide however many builds run ([`jobserver`], Linux).
//!
//! [`Supervisor`] is the entry point: a slot (or a TTL role lease, pulsed), a command, an
//! [`Outcome`]. [`supervise::supervise`] is the loop under it, for a caller with a [`Watch`] of
//! its own. Only this crate starts and signals processes for worklane; the CLI composes it.
//!
//! # Limitations
//!
//! - Linux is where the guarantees hold in full: off Linux the command starts through std's
//!   `Command` (no parent-death signal), no process table is read (a halt reaches the
//!   command's process group only; orphans that left it are not found), and STOP's
//!   enforcement sees no process (supervisors alone halt their commands).
//! - The parent-death signal fires when the *thread* that started the command ends: run
//!   [`Supervisor::run`] on a thread that lives until it returns (a program's main thread).
//! - The supervisor installs process-wide signal handlers for the forwarded signals and
//!   SIGCHLD while a command runs, and makes the process a child subreaper (Linux): run one
//!   supervised command per process at a time, and start no other children meanwhile.
//! - SIGKILL of a command's processes cannot be refused; a process that left the command's
//!   group and was re-parented outside this process (no subreaper: another pid namespace's
//!   `/proc`) is not found by a halt.
//!
//! # Example
//!
//! ```
//! use worklane_admission::{Kind, Pool, Take};
//! use worklane_lease::Request;
//! use worklane_run::Supervisor;
//! use worklane_slotfile::{Environment, SlotDir};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let temp = tempfile::tempdir()?;
//! let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
//! let pool = Pool::new(SlotDir::resolve_in(&env)?);
//! let Take::Held(mut slot) = pool.try_take(Kind::Agent, &Request::new("harness"))? else {
//!     panic!("a fresh directory has a free slot");
//! };
//! // The command holds the slot (it inherits its guard) and learns its fencing epoch.
//! let command = ["sh", "-c", r#"test -n "$WORKLANE_EPOCH" && exit 3"#].map(Into::into);
//! let outcome = Supervisor::new(&pool, &mut slot)?.run(&command)?;
//! assert_eq!((outcome.code, outcome.halted, outcome.signal), (3, None, None));
//! slot.release()?;
//! # Ok(()) }
//! ```
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! - `supervisor.rs`: [`Supervisor`], the slot's or role lease's watch (`Held`: the record's
//!   `commandProcess` fields, STOP, the role's pulse every TTL/20 measured on the boot clock,
//!   the caller's watch last), [`MIN_TTL`] and [`lease_grace`].
//! - `supervise.rs`: the loop. One thread sleeps in poll(2) on a socket the signal handlers
//!   write a byte to (`Wakeup`); each wake drains it, forwards the signals that came, checks
//!   whether the command exited *without reaping it* (`waitid(WNOWAIT)`, so its pid and pgid
//!   cannot be reused while leftovers are killed), and every [`CHECK_EVERY`] asks the watch.
//!   A halt sends SIGTERM and SIGCONT to the group and every descendant, SIGKILL after the
//!   grace, and SIGKILL to whatever outlived the command before it is reaped. Without a
//!   terminal on stdin the command leads its own process group; with one it stays in the
//!   foreground group and SIGINT/SIGQUIT are not forwarded (the terminal delivers them).
//! - `tree.rs`: the process table's pure parts (`descendants`), the signalling
//!   of every descendant from one read under one lock (so a pid read as ours is not reaped and
//!   reused before it is signalled), `kill_descendants` (until none is alive, at most 2 s), `reap_orphans`.
//! - `enforce.rs`: STOP's enforcement for `stop-all`: `judge` (pure) decides per recorded
//!   command (gone, untouchable and why, running with or without a supervisor able to act);
//!   only a record its owner alone could have written, naming this host, boot and pid
//!   namespace, makes anything be signalled, and only processes of the record's writer that
//!   are the one named (start identity) or hold the slot's guard, never pid 1, us, our group
//!   or session leader. Signals go through a pidfd (Linux) rechecked for the start identity.
//! - `sys/linux/proc.rs` / `sys/other.rs`: everything read from `/proc` (the table, one
//!   process's stat and owner, the holders of a guard's descriptor, the subreaper setting);
//!   same signatures, nothing seen off Linux (one file per platform under `sys/`, as guard and
//!   identity have theirs).
//! - `search.rs`: the paths execvp(3) tries, as glibc's does (a pure function).
//! - `sys/` is also the one place with `unsafe`: `spawn` (Linux: `clone(CLONE_VM | CLONE_VFORK)` on
//!   its own stack with every signal blocked across it; the child resets caught signals and
//!   SIGPIPE, spends a job-control stop that would freeze us both, sets `PR_SET_PDEATHSIG`,
//!   rechecks its parent, empties its mask and tries the prepared paths, `/bin/sh` on
//!   ENOEXEC; elsewhere std's `Command`), the signal handlers (`on_signal`, [`process::on_flag`],
//!   each followed by an unblock of its signal, since a caller's blocked mask survives exec),
//!   `is_ignored`, [`process::die_by`], [`process::take_inherited_fd`] (each number once),
//!   [`process::systemd_listener`] (once), [`process::start_detached`] (setsid and every
//!   descriptor above 2 closed in the child), and the driver's `detach` (setsid, the
//!   descriptor limit, the enqueuer's groups, gid and uid, then the same exec as `spawn`).
//! - `jobs.rs` (pure: make's `-j` options, `MAKEFLAGS`, the lost-token rule) and
//!   `jobserver.rs` (Linux): the FIFO, its accountant (`jobserver/account.rs`: inotify on the
//!   FIFO, `FIONREAD`, the slots held kept equal to the bytes written less those read back less
//!   tokens judged lost), its private directory and the sweep of killed ones' (`dirs.rs`), the
//!   taker (one standby token at a time, taken in the machine's `job` line), and the keeper
//!   socket whose in-flight `SCM_RIGHTS` descriptors keep the token slots' locks while the tree
//!   lives, whatever happens to the supervisor.
//! - `dispatcher.rs` (feature `dispatcher`): the admission dispatcher as a process: its lock,
//!   its socket (systemd's, its mode narrowed through a descriptor; or made through the slot
//!   directory's descriptor, anything else at the name set aside), its state directory, the
//!   server wired to the drivers' launch and reaping, systemd's readiness and watchdog; what
//!   happens is told to the caller (`Said`), which prints it; `dispatcher/log.rs` words the
//!   service loop's events as `worklane dispatcher` logs them, a repeat said once a minute.
//! - `driver.rs` (feature `dispatcher`): the admission dispatcher's drivers as processes:
//!   started detached as their enqueuer with a fresh environment and their log, and reaped by
//!   a thread that learns of an exit with `waitid(WNOWAIT)` and reaps under the lock a start
//!   holds, so a child std is still starting is never taken from it.
//! - `queued.rs`: the queued full runs as `queue ls` and `queue cancel` see them (`list`,
//!   `cancel`, a signal only through a pidfd rechecked for the runner's start);
//!   `queued/runner.rs`: the detached runner's own mechanism, its log (`runner_log`, a 0600
//!   file in the user's 0700 `worklane-<euid>`) and its wait in the full-run line
//!   (`wait_turn`: STOP or drain, another full run, waiters before it, the idle probe, then
//!   `full-run.lock`; a SIGTERM seen within a quarter second, the place left either way).
//! - `nesting.rs`: a run inside the command of another run: the variable naming the slot each
//!   kind's run holds (`WORKLANE_AGENT_SLOT`...), and the refusal of a run of the same kind in
//!   the same slot directory, which would wait for ever at a cap of 1.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod cgroup;
#[cfg(feature = "dispatcher")]
pub mod dispatcher;
#[cfg(feature = "dispatcher")]
pub mod driver;
pub mod enforce;
pub mod jobs;
#[cfg(target_os = "linux")]
pub mod jobserver;
pub mod nesting;
pub mod queued;
mod search;
mod signals;
mod start_jobs;
pub mod supervise;
mod supervisor;
mod sys;
mod tree;

pub use jobs::{Jobs, Style};
pub use signals::signal_name;
pub use supervisor::{Limits, MIN_TTL, Supervisor, lease_grace};

pub use supervise::{CHECK_EVERY, GRACE, Outcome, Started, Watch, describe};

/// This process's own signals, descriptors and detached starts: what a supervisor, a
/// dispatcher or a detached runner needs of the process it runs in.
pub mod process {
    pub use crate::signals::{shell_says_yes, signal_pid};
    #[cfg(all(target_os = "linux", feature = "test-seams"))]
    pub use crate::sys::cloexec_by_fcntl;
    pub use crate::sys::{
        BadFd, die_by, on_flag, raise_nofile, start_detached, systemd_listener, take_inherited_fd,
    };
}
