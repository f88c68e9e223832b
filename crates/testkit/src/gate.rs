//! The fork gate: starting a process and a release that must be seen never overlap.
//!
//! A process-wide reader-writer lock. Starting a process takes it shared: any number of test
//! threads start children at once. A release that another process (or the next acquisition
//! in this one) must see takes it exclusively ([`quiet`]): it waits until no start is in
//! flight, and no start begins until it is done. So at the moment a quiet section closes a
//! guard's descriptor, no child holds a copy of it, and none made later can.
//!
//! A start is over when its child has exec'd and closed its close-on-exec copies, which is
//! later than `Command::spawn` returning: with `posix_spawn` (what std uses when it can) the
//! parent resumes once the child has replaced its memory, a moment before the kernel closes
//! the child's close-on-exec descriptors. So each start also opens a canary pipe whose write
//! end sits above every other descriptor of the process; `execve` closes close-on-exec
//! descriptors in ascending order, so when the read end sees end-of-file every child forked
//! while the canary was open has closed every copy below it, the guards' included.
//!
//! The thread that holds the gate quiet may itself start processes: it cannot release
//! anything while it waits for its own start, and the start returns only once the child's
//! copies are closed. Another thread that starts a process waits for the section to end; a
//! quiet section must therefore never wait for another thread of the process.

use std::cell::Cell;
use std::io::{self, Read};
use std::os::fd::{OwnedFd, RawFd};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::Child;

/// Shared while a process is being started, exclusive while a quiet section runs.
static GATE: RwLock<()> = RwLock::new(());

thread_local! {
    /// Whether this thread holds the gate quiet (so its own starts need no shared hold).
    static QUIET_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Starting a process through the gate: the replacements of [`Command::spawn`],
/// [`Command::output`] and [`Command::status`] in worklane's tests.
pub trait Gated {
    /// Starts the command as [`Command::spawn`] does, once no quiet section runs, and returns
    /// when the child has exec'd and closed its copies of this process's descriptors. The
    /// child is SIGKILLed and reaped if it is dropped before it was waited for.
    fn spawn_gated(&mut self) -> io::Result<Child>;

    /// Runs the command to completion and collects its output, as [`Command::output`] does:
    /// standard input is `/dev/null`, standard output and error are captured (this call sets
    /// all three, whatever the command said before).
    fn output_gated(&mut self) -> io::Result<Output>;

    /// Runs the command to completion with the standard streams it was given (inherited by
    /// default), as [`Command::status`] does, and returns its status.
    fn status_gated(&mut self) -> io::Result<ExitStatus>;
}

impl Gated for Command {
    fn spawn_gated(&mut self) -> io::Result<Child> {
        spawn(self).map(Child::new)
    }

    fn output_gated(&mut self) -> io::Result<Output> {
        self.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.spawn_gated()?.wait_with_output()
    }

    fn status_gated(&mut self) -> io::Result<ExitStatus> {
        self.spawn_gated()?.wait()
    }
}

/// Starts `command` through the gate (see the module documentation).
fn spawn(command: &mut Command) -> io::Result<std::process::Child> {
    crate::storm::start_if_asked(spawn_unstormed);
    spawn_unstormed(command)
}

/// [`spawn`] without starting the storm: the storm's own starts.
fn spawn_unstormed(command: &mut Command) -> io::Result<std::process::Child> {
    let _starting: Option<RwLockReadGuard<'static, ()>> = if QUIET_HERE.get() {
        None
    } else {
        Some(GATE.read().unwrap_or_else(PoisonError::into_inner))
    };
    let canary = Canary::new()?;
    #[allow(
        clippy::disallowed_methods,
        reason = "the gate is the one place tests start processes"
    )]
    let started = command.spawn();
    canary.wait();
    started
}

/// While this value lives, no other thread of this process starts a process through the gate,
/// and every child started through it earlier has closed its copies of this process's
/// descriptors. A descriptor closed now is closed everywhere: the lock it held is free.
///
/// Nested sections on one thread are allowed (the inner one does nothing).
#[must_use = "the gate is quiet only while this value lives"]
#[derive(Debug)]
pub struct Quiet {
    write: Option<RwLockWriteGuard<'static, ()>>,
}

/// Makes the gate quiet until the returned value is dropped: waits until no start is in
/// flight, then holds off every other thread's start. Keep the section short and never wait
/// in it for another thread of the process.
pub fn quiet() -> Quiet {
    crate::storm::start_if_asked(spawn_unstormed);
    if QUIET_HERE.get() {
        return Quiet { write: None };
    }
    let write = GATE.write().unwrap_or_else(PoisonError::into_inner);
    QUIET_HERE.set(true);
    Quiet { write: Some(write) }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        if let Some(write) = self.write.take() {
            QUIET_HERE.set(false);
            drop(write);
        }
    }
}

/// Runs `section` with the gate quiet (see [`quiet`]): for a call that releases a guard inside
/// a library (a refused acquisition, a pulse, a reclaim) when what follows needs it free.
pub fn quietly<R>(section: impl FnOnce() -> R) -> R {
    let _quiet = quiet();
    section()
}

/// A value (a guard, a lease, a slot) that is dropped, or ended with [`QuietDrop::end`], only
/// with the gate quiet, so that what it held is free for everyone once it is gone.
#[derive(Debug)]
pub struct QuietDrop<T>(Option<T>);

impl<T> QuietDrop<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> QuietDrop<T> {
        QuietDrop(Some(value))
    }

    /// Ends the value with `finish` (for example `Lease::release`) with the gate quiet.
    pub fn end<R>(mut self, finish: impl FnOnce(T) -> R) -> R {
        let value = self
            .0
            .take()
            .expect("a QuietDrop holds its value until it ends");
        quietly(|| finish(value))
    }
}

impl<T> std::ops::Deref for QuietDrop<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0
            .as_ref()
            .expect("a QuietDrop holds its value until it ends")
    }
}

impl<T> std::ops::DerefMut for QuietDrop<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0
            .as_mut()
            .expect("a QuietDrop holds its value until it ends")
    }
}

impl<T> Drop for QuietDrop<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            quietly(|| drop(value));
        }
    }
}

/// A pipe whose write end lies above every other descriptor of the process while a child is
/// started; see the module documentation.
struct Canary {
    reader: io::PipeReader,
    writer: OwnedFd,
}

impl Canary {
    fn new() -> io::Result<Canary> {
        let (reader, writer) = io::pipe()?;
        let writer = rustix::io::fcntl_dupfd_cloexec(&writer, high_descriptor())?;
        Ok(Canary { reader, writer })
    }

    /// Closes our write end and waits for end-of-file: every process forked while it was
    /// open has exec'd (or exited) and closed its copies.
    fn wait(self) {
        let Canary { mut reader, writer } = self;
        drop(writer);
        let mut byte = [0u8; 1];
        loop {
            match reader.read(&mut byte) {
                Ok(0) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Nobody writes to the canary; any other error ends the wait too.
                Ok(_) | Err(_) => return,
            }
        }
    }
}

/// The lowest descriptor number a canary may take: above the few dozen descriptors a test
/// binary keeps open, below the limit.
fn high_descriptor() -> RawFd {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    RawFd::try_from(limit.saturating_sub(64).min(1000)).unwrap_or(1000)
}
