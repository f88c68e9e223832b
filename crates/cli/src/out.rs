//! The CLI's one writer of output: results to stdout, messages to stderr. Nothing here panics
//! (the `print!` family panics on a failed write, so `clippy.toml` bans it in this crate).
//!
//! stdout: a closed pipe (EPIPE, as after `worklane slots | head -1`) is a normal end: the
//! reader has all it wanted, so the rest of the output is dropped and the command ends as it
//! would have (0 for a view, its decision for `why` or `budget take`, the command's status for
//! `run`). Any other failed write (a full disk, EIO) is an error: [`IO_ERROR`](crate::exit::IO_ERROR)
//! with a message naming stdout.
//!
//! stderr: best effort. A message that cannot be written is dropped, as there is nowhere left
//! to report it; the exit code still says what happened.

use crate::exit::{self, Failure};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout met a closed pipe: later output is dropped unwritten.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// `-q`: the human lines that say a command succeeded ([`sayln!`]) are not printed, nor is
/// the live line of a waiting run; data (views, JSON, ids) and every message on stderr are.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Whether stdout's reader went away (a closed pipe): a command that would print on for ever
/// (`events --follow`) ends then.
pub(crate) fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Turns on `-q` for the rest of the process.
pub(crate) fn set_quiet() {
    QUIET.store(true, Ordering::Relaxed);
}

/// Whether `-q` is on.
pub(crate) fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Writes one human success line to stdout unless `-q` is on (use [`sayln!`]).
pub(crate) fn say(args: std::fmt::Arguments<'_>) -> Result<(), Failure> {
    if quiet() {
        return Ok(());
    }
    line(args)
}

/// What a failed write to stdout means.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// Written (or dropped after the reader went away).
    Done,
    /// The reader closed the pipe: end quietly.
    Closed,
}

/// Classifies the outcome of a write to stdout: EPIPE is a quiet end, anything else 74.
pub(crate) fn classify(result: std::io::Result<()>) -> Result<Written, Failure> {
    match result {
        Ok(()) => Ok(Written::Done),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Written::Closed),
        Err(e) => Err(Failure::new(
            exit::IO_ERROR,
            format!("cannot write to stdout: {e}"),
        )),
    }
}

/// Remembers a closed pipe, so that later output is dropped unwritten.
fn settle(result: std::io::Result<()>) -> Result<(), Failure> {
    if classify(result)? == Written::Closed {
        CLOSED.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// Writes `bytes` to stdout and flushes them.
#[allow(clippy::disallowed_methods)] // the one place that writes stdout
pub(crate) fn bytes(bytes: &[u8]) -> Result<(), Failure> {
    if CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    settle(out.write_all(bytes).and_then(|()| out.flush()))
}

/// Writes one line to stdout (use [`outln!`]).
#[allow(clippy::disallowed_methods)] // the one place that writes stdout
pub(crate) fn line(args: std::fmt::Arguments<'_>) -> Result<(), Failure> {
    if CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    // `write_fmt`, not `format!`: a failing `Display` is an error here, never a panic.
    settle(
        out.write_fmt(args)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush()),
    )
}

/// Flushes stdout after clap's own writer printed help or the version; `result` is what that
/// writer returned.
#[allow(clippy::disallowed_methods)] // the one place that writes stdout
pub(crate) fn after_clap(result: std::io::Result<()>) -> Result<(), Failure> {
    settle(result.and_then(|()| std::io::stdout().lock().flush()))
}

/// Whether stderr is a terminal (for the live progress line).
#[allow(clippy::disallowed_methods)] // the one place that touches stderr
pub(crate) fn stderr_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Writes `args` to stderr as given, best effort (use [`errln!`] for a line).
#[allow(clippy::disallowed_methods)] // the one place that writes stderr
pub(crate) fn to_stderr(args: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.flush());
}

/// Prints a line to stdout: `outln!("{x}")?`, an error only for a write that failed other
/// than on a closed pipe.
macro_rules! outln {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

/// Prints a line that says a command succeeded (a confirmation for a person) to stdout, unless
/// `-q` asks for silence: `sayln!("STOP removed")?`. Data a script reads (a view, an id, a
/// JSON document) is printed with [`outln!`] instead.
macro_rules! sayln {
    ($($arg:tt)*) => {
        $crate::out::say(format_args!($($arg)*))
    };
}

/// Prints a line to stderr, best effort.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::to_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {errln, outln, sayln};

impl Failure {
    /// Says the failure on stderr and gives its exit code (here, not in `exit.rs`, so that
    /// the exit codes know nothing of where output goes).
    pub(crate) fn exit(&self) -> std::process::ExitCode {
        errln!("worklane: {}", self.message);
        std::process::ExitCode::from(self.code)
    }
}

/// A duration in seconds as a person reads it: `3`, `0.5`, `1.25`.
pub(crate) fn seconds(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    let (whole, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:03}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// Whether standard output's reader has gone (a pipe whose reader closed: `events --follow |
/// grep -m1 ...`), looked at without writing: poll reports the error or hang-up at once.
#[allow(clippy::disallowed_methods)] // the one place that touches stdout; nothing is written
pub(crate) fn reader_gone() -> bool {
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let fd = stdout.as_fd();
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::empty(),
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .intersects(rustix::event::PollFlags::ERR | rustix::event::PollFlags::HUP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_shown_without_trailing_zeros() {
        use std::time::Duration;
        assert_eq!(seconds(Duration::from_secs(3)), "3");
        assert_eq!(seconds(Duration::from_millis(500)), "0.5");
        assert_eq!(seconds(Duration::from_millis(1250)), "1.25");
        assert_eq!(seconds(Duration::from_millis(2001)), "2.001");
        assert_eq!(seconds(Duration::ZERO), "0");
    }

    #[test]
    fn a_closed_pipe_is_a_quiet_end_and_other_errors_are_74() {
        assert_eq!(classify(Ok(())).expect("ok"), Written::Done);
        let closed = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert_eq!(
            classify(Err(closed)).expect("a closed pipe is no error"),
            Written::Closed
        );
        let full = std::io::Error::from_raw_os_error(28);
        let failure = classify(Err(full)).expect_err("ENOSPC is an error");
        assert_eq!(failure.code, exit::IO_ERROR, "{}", failure.message);
        assert!(
            failure.message.contains("stdout"),
            "names stdout: {}",
            failure.message
        );
    }
}
