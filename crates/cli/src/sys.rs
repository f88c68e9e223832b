//! The one module of the CLI with `unsafe`: std's `Command::pre_exec` is an unsafe API (the
//! closure runs in the forked child), and the parent-death signal can only be set there;
//! setting a variable of the process's environment (`--dir`) and taking an inherited
//! descriptor by its number (`--status-fd`) are unsafe too.

#![allow(unsafe_code)]

use std::process::Command;

/// On Linux, makes the command's direct process receive SIGTERM when worklane dies
/// (`PR_SET_PDEATHSIG`, see [prctl(2)]), so that a command whose supervisor was SIGKILLed does
/// not run on without reason. It keeps its slot for as long as it runs (it inherits the
/// slot's guard); the signal only tells it that nobody supervises it any more. If worklane died
/// before the setting took effect (the child's parent is no longer worklane), the child sends
/// itself the signal at once. Elsewhere this does nothing.
///
/// The signal fires when the thread that spawned the child ends: call this only from the
/// thread that lives until the command is reaped (worklane's main thread).
///
/// [prctl(2)]: https://man7.org/linux/man-pages/man2/prctl.2.html
#[cfg(target_os = "linux")]
pub(crate) fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the child between fork and exec, where only async-signal-safe
    // work is allowed. It makes three system calls through rustix (prctl, getppid, kill),
    // which neither allocate nor take locks, and touches no state shared with the parent but
    // the copied `Pid` value.
    unsafe {
        cmd.pre_exec(move || {
            let signal = rustix::process::Signal::TERM;
            rustix::process::set_parent_process_death_signal(Some(signal))?;
            if rustix::process::getppid() != Some(parent) {
                rustix::process::kill_process(rustix::process::getpid(), signal)?;
            }
            Ok(())
        });
    }
}

/// No parent-death signal off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_parent(_cmd: &mut Command) {}

/// Sets `AGENT_SLOTS_DIR` to `dir` in this process's environment (`--dir`), so that every
/// resolution of the slot directory here and in every process worklane starts uses it.
///
/// Call it only from `main` before any thread is started: the environment is process-wide
/// state that another thread could be reading.
pub(crate) fn set_slots_dir(dir: &std::path::Path) {
    // SAFETY: called once from `main`, right after the command line is parsed and before
    // anything starts a thread (signal-hook's and the supervisor's threads come later), so no
    // other thread can read or write the environment concurrently.
    unsafe { std::env::set_var(worklane_slotfile::SLOTS_DIR_VAR, dir) };
}

/// Why a descriptor given on the command line cannot be used.
#[derive(Debug)]
pub(crate) enum BadFd {
    /// It is not open in this process.
    Closed,
    /// It is open for reading only.
    ReadOnly,
    /// Another failure of fcntl(2) on it.
    Other(rustix::io::Errno),
}

/// Takes descriptor `n`, inherited from the caller (`--status-fd N`), as this process's own:
/// checks that it is open for writing and marks it close-on-exec, so that the command worklane
/// starts does not inherit it. Call it before anything else opens a descriptor, so that `n`
/// can only be one the caller passed, and at most once per descriptor.
pub(crate) fn claim_writable_fd(n: i32) -> Result<std::os::fd::OwnedFd, BadFd> {
    use rustix::io::{Errno, FdFlags, fcntl_getfd, fcntl_setfd};
    use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
    // SAFETY: the borrow lives only for these fcntl(2) queries. If `n` is not open they fail
    // with EBADF and touch nothing; no other code of this process has opened or owns a
    // descriptor yet (the caller claims it first), so `n` cannot be closed under us.
    let fd = unsafe { BorrowedFd::borrow_raw(n) };
    let flags = fcntl_getfd(fd).map_err(|e| match e {
        Errno::BADF => BadFd::Closed,
        other => BadFd::Other(other),
    })?;
    let mode = rustix::fs::fcntl_getfl(fd).map_err(BadFd::Other)? & rustix::fs::OFlags::RWMODE;
    if mode == rustix::fs::OFlags::RDONLY {
        return Err(BadFd::ReadOnly);
    }
    fcntl_setfd(fd, flags | FdFlags::CLOEXEC).map_err(BadFd::Other)?;
    // SAFETY: `n` is open (checked above) and was inherited from the caller: nothing else in
    // this process owns it, so it gets exactly one owner, which closes it once.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Makes the command start a session of its own (`setsid` between fork and exec): a detached
/// driver has no controlling terminal and outlives the dispatcher's session.
#[cfg(feature = "dispatcher")]
pub(crate) fn detach(cmd: &mut Command, nofile: Option<rustix::process::Rlimit>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and makes at most two
    // system calls, setsid(2) and setrlimit(2), through rustix, on a copied plain value: no
    // allocation, no lock, no state shared with the parent.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            if let Some(limit) = nofile {
                rustix::process::setrlimit(rustix::process::Resource::Nofile, limit)?;
            }
            Ok(())
        });
    }
}

/// Raises this process's soft limit of open descriptors to its hard limit (the dispatcher
/// holds one descriptor per queued lane; a soft limit of 1 024 is common), and returns the
/// limit it had, for the processes it starts to get back. `None` if it could not be raised
/// (then nothing changed).
#[cfg(feature = "dispatcher")]
pub(crate) fn raise_nofile() -> Option<rustix::process::Rlimit> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let before = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: before.maximum,
        maximum: before.maximum,
    };
    (raised != before && setrlimit(Resource::Nofile, raised).is_ok()).then_some(before)
}

/// The listening socket systemd passed (socket activation: `LISTEN_PID` is this process and
/// `LISTEN_FDS` is at least 1), taken as descriptor 3 and made close-on-exec.
#[cfg(feature = "dispatcher")]
pub(crate) fn systemd_listener() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let ours = std::env::var("LISTEN_PID").ok()?.parse::<u32>().ok()? == std::process::id();
    let count = std::env::var("LISTEN_FDS").ok()?.parse::<u32>().ok()?;
    if !ours || count < 1 {
        return None;
    }
    // SAFETY: systemd's contract: with LISTEN_PID naming this process and LISTEN_FDS >= 1,
    // descriptor 3 is open and passed to this process to own. This runs once, at start,
    // before anything else in the process opens or closes a descriptor, so nothing else owns
    // the number.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(3) };
    let _ = rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC);
    Some(fd)
}

/// Closes every descriptor above 2 that this process inherited (the queued full run's
/// runner, which outlives its caller: a pipe the caller reads to its end, or a lock it holds,
/// must not stay open for hours in a detached process). Call it first, before this process
/// opens anything of its own. Descriptors are listed from `/proc/self/fd` (`/dev/fd`
/// elsewhere); where neither can be read, nothing is closed.
pub(crate) fn close_inherited() {
    let listing = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else {
        "/dev/fd"
    };
    let Ok(entries) = std::fs::read_dir(listing) else {
        return;
    };
    let listed: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    // The listing's own descriptor is among them, closed by now: each is checked first.
    for fd in listed {
        // SAFETY: at this point (the runner's first act, one thread) no object of this process
        // owns a descriptor above 2: each is either one the caller left open across exec,
        // which nothing here uses, or not open at all (the listing's own, already closed),
        // which `fcntl(F_GETFD)` tells apart before the close.
        unsafe {
            let borrowed = std::os::fd::BorrowedFd::borrow_raw(fd);
            if rustix::io::fcntl_getfd(borrowed).is_ok() {
                rustix::io::close(fd);
            }
        }
    }
}

/// Ends this process by `signal`, as the command it ran ended: its default disposition
/// restored and the signal raised, with core dumps off (the command may have dumped core;
/// the wrapper has nothing to show). Returns only if that did not end it (a signal whose
/// default is to be ignored, or a failure): the caller then exits with 128+N.
pub(crate) fn die_by(signal: i32) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let core = getrlimit(Resource::Core);
    let _ = setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum: core.maximum,
        },
    );
    let _ = signal_hook::low_level::emulate_default_handler(signal);
}

/// The signals this process ignores (inherited `SIG_IGN`), from the `SigIgn` mask of
/// `/proc/self/status` (Linux; elsewhere none are known to be ignored).
pub(crate) fn ignored_signals() -> Vec<i32> {
    // One read into a page-sized buffer (the file is about 1.4 KiB): `read_to_string` would
    // grow its buffer from 32 bytes, a read call each time.
    use std::io::Read;
    let mut buf = vec![0u8; 8192];
    let mut len = 0;
    if let Ok(mut file) = std::fs::File::open("/proc/self/status") {
        while len < buf.len() {
            match file.read(&mut buf[len..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n,
            }
        }
    }
    std::str::from_utf8(&buf[..len])
        .ok()
        .and_then(parse_sigign)
        .unwrap_or_default()
}

/// The signal numbers in the `SigIgn:` line of a `/proc/<pid>/status` text (a hexadecimal
/// mask, bit N-1 for signal N); `None` without a readable line.
pub(crate) fn parse_sigign(status: &str) -> Option<Vec<i32>> {
    let hex = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))?
        .trim();
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(
        (0..64)
            .filter(|bit| mask & (1u64 << bit) != 0)
            .map(|bit| bit + 1)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ignored_mask_is_read_bit_by_signal() {
        let status =
            "Name:\tsh\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000203\nSigCgt:\t0\n";
        assert_eq!(parse_sigign(status), Some(vec![1, 2, 10]));
        assert_eq!(parse_sigign("SigIgn:\t8000000000000000\n"), Some(vec![64]));
        assert_eq!(parse_sigign("SigIgn:\t0000000000000000\n"), Some(vec![]));
        assert_eq!(parse_sigign("SigIgn:\tzz\n"), None, "not hexadecimal");
        assert_eq!(parse_sigign("Name:\tsh\n"), None, "no line");
    }
}
