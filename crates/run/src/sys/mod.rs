//! The platform's calls, one file per platform (`linux.rs`, `other.rs`), as in guard and
//! identity; and the one module of the crate with `unsafe` (`linux.rs` below it too): starting the command (a
//! `clone(CLONE_VM | CLONE_VFORK)` whose child sets the parent-death signal before its exec;
//! rustix has no clone) and std's `Command::pre_exec` (its closure runs in the forked child)
//! are unsafe; taking an inherited descriptor by its number (`--status-fd`, systemd's socket)
//! is unsafe too, and so are a signal handler's action, the signal mask and asking
//! sigaction(2) for a signal's disposition. Everything here is a thin shim; the decisions
//! are made by the safe modules around it.

#![allow(unsafe_code)]

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::proc::*;
#[cfg(target_os = "linux")]
pub(crate) use linux::spawn;

// What the crate reads of the machine's processes (the process table, how one process looks,
// who holds a guard's descriptor, the subreaper setting), with the same signatures on every
// platform: `linux/proc.rs` reads `/proc` (safe code); `other.rs` sees nothing.
#[cfg(not(target_os = "linux"))]
mod other;
#[cfg(not(target_os = "linux"))]
pub(crate) use other::*;

/// A command started by [`spawn`]: its pid, reaped by [`Child::wait`].
pub(crate) struct Child {
    pid: rustix::process::Pid,
}

impl Child {
    /// Its pid.
    pub(crate) fn pid(&self) -> rustix::process::Pid {
        self.pid
    }

    /// Its pid, as a number.
    pub(crate) fn id(&self) -> u32 {
        self.pid.as_raw_nonzero().get().unsigned_abs()
    }

    /// Waits for it to end and reaps it.
    pub(crate) fn wait(self) -> std::io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        loop {
            match rustix::process::waitpid(Some(self.pid), rustix::process::WaitOptions::empty()) {
                Ok(Some((_, status))) => {
                    return Ok(std::process::ExitStatus::from_raw(status.as_raw()));
                }
                Ok(None) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Starts the command with std's `Command` (off Linux: no parent-death signal, and no cgroups,
/// so `_cgroup` is always `None`).
#[cfg(not(target_os = "linux"))]
pub(crate) fn spawn(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    env: &[(&str, std::ffi::OsString)],
    group: bool,
    _cgroup: Option<&std::fs::File>,
) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    if group {
        cmd.process_group(0);
    }
    #[allow(
        clippy::disallowed_methods,
        reason = "product code: the command is meant to inherit the slot it runs in"
    )]
    let child = cmd.spawn()?;
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX))
        .ok_or_else(|| std::io::Error::other("the command got pid 0"))?;
    // Reaped by `Child::wait` (dropping std's handle neither waits nor kills).
    drop(child);
    Ok(Child { pid })
}

/// Catches `signal`: its handler sets `flag`, then sends one byte on `wake` without waiting
/// (a socket whose other end the supervisor's loop polls), so that the loop wakes and reads
/// the flags. One handler per signal on one shared descriptor: registering costs two
/// sigaction(2) calls, not a descriptor of its own per signal. The signal is then unblocked
/// ([`unblock`]), so that a caller's blocked mask cannot keep it from the handler.
pub(crate) fn on_signal(
    signal: i32,
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
    wake: std::sync::Arc<std::os::fd::OwnedFd>,
) -> std::io::Result<signal_hook::SigId> {
    let action = move || {
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        // A full socket already holds a wake-up: losing this byte loses nothing.
        let _ = rustix::net::send(&*wake, b"X", rustix::net::SendFlags::DONTWAIT);
    };
    // SAFETY: the action runs inside a signal handler, where only async-signal-safe work is
    // allowed. It stores to an atomic and makes one send(2) through rustix's raw system call
    // (no allocation, no lock, and errno untouched); the `Arc`s it holds are never dropped
    // there (they go when the handler is unregistered, outside any handler).
    let id = unsafe { signal_hook::low_level::register(signal, action) }?;
    unblock(&[signal]);
    Ok(id)
}

/// Catches `signal` by setting `flag` (`signal_hook::flag`), then unblocks it (`unblock`):
/// every handler worklane installs is registered through here or `on_signal`, so none can
/// be kept from its signal by a mask the caller blocked.
pub fn on_flag(
    signal: i32,
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<signal_hook::SigId> {
    let id = signal_hook::flag::register(signal, flag)?;
    unblock(&[signal]);
    Ok(id)
}

/// Unblocks `signals` in this thread's signal mask. A caller may start worklane with signals
/// blocked (the mask is inherited through exec), and a blocked signal never reaches the
/// handler installed for it: called once a handler is in place, from the thread that waits
/// for it (a signal that came while blocked is handled now).
fn unblock(signals: &[i32]) {
    // SAFETY: a sigset_t is plain bits (all zero is a valid value); sigemptyset and sigaddset
    // write only to this local, and pthread_sigmask only reads it and changes this thread's
    // mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Why a descriptor given on the command line cannot be used.
#[derive(Debug)]
pub enum BadFd {
    /// It is not open in this process.
    Closed,
    /// It is open for reading only.
    ReadOnly,
    /// Another failure of fcntl(2) on it.
    Other(rustix::io::Errno),
    /// It was taken already by an earlier call: it has an owner.
    Taken,
}

/// Takes descriptor `n`, inherited from the caller (`--status-fd N`), as this process's own:
/// checks that it is open for writing and marks it close-on-exec, so that the command worklane
/// starts does not inherit it. Call it first, before anything in the process opens a
/// descriptor, so that `n` can only be one the caller passed. Each number is given out at most
/// once per process ([`BadFd::Taken`] after that), so two owners can never close it twice.
pub fn take_inherited_fd(n: i32) -> Result<std::os::fd::OwnedFd, BadFd> {
    use rustix::io::{Errno, FdFlags, fcntl_getfd, fcntl_setfd};
    use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
    static TAKEN: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());
    let mut taken = TAKEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if taken.contains(&n) {
        return Err(BadFd::Taken);
    }
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
    taken.push(n);
    // SAFETY: `n` is open (checked above) and was inherited from the caller: nothing else in
    // this process owns it, so it gets exactly one owner, which closes it once.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Who a detached driver runs as: set in the child before exec, in this order, each checked
/// (setgroups(2), setgid(2), setuid(2)); the uid last, so that nothing can be regained.
#[cfg(feature = "dispatcher")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) groups: Vec<u32>,
}

/// Makes `cmd` a detached driver's start: a session of its own (`setsid` between fork and
/// exec: no controlling terminal, and it outlives the dispatcher's session), the descriptor
/// limit `nofile`, the user `creds` (when given: the dispatcher runs as root), and exactly the
/// environment `env` (nothing of the dispatcher's own). On Linux `program` (`cmd`'s) is then
/// searched and run with `args` and `env` as [`spawn`] runs a command, glibc's execvp(3)
/// whichever libc worklane was linked with, in the `PATH` the driver gets; std's own exec,
/// musl's execvp in the installed binary, would refuse a `#!`-less script (ENOEXEC) and
/// search another default `PATH`.
#[cfg(feature = "dispatcher")]
pub(crate) fn detach(
    cmd: &mut std::process::Command,
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    env: &[(&std::ffi::OsStr, &std::ffi::OsStr)],
    nofile: Option<rustix::process::Rlimit>,
    creds: Option<&Credentials>,
) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    cmd.env_clear();
    cmd.envs(env.iter().copied());
    #[cfg(target_os = "linux")]
    let mut exec = linux::Exec::new(program, args, env, false)?;
    #[cfg(not(target_os = "linux"))]
    let _ = (program, args);
    // Made before the fork: the child allocates nothing.
    let limit = descriptor_limit();
    let who = creds.map(|c| {
        (
            rustix::process::Uid::from_raw(c.uid),
            rustix::process::Gid::from_raw(c.gid),
            c.groups
                .iter()
                .map(|g| rustix::process::Gid::from_raw(*g))
                .collect::<Vec<_>>(),
        )
    });
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls: setsid(2), close_range(2) or fcntl(2) on every descriptor
    // from 3 up (none the dispatcher inherited or holds reaches the driver: a lane's guard, a
    // file its parent shell left open), setrlimit(2), setgroups(2), setgid(2) and setuid(2)
    // through rustix (raw system calls, on values made before the fork; the child has one
    // thread, so a thread's credentials are the process's), then (Linux) execve(2) on the
    // vectors `Exec` prepared before the fork; no allocation (`from_raw_os_error` makes none),
    // no lock, nothing shared with the parent (the child writes only to its own copy of
    // `exec`).
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            cloexec_from_3(limit);
            if let Some(limit) = nofile {
                rustix::process::setrlimit(rustix::process::Resource::Nofile, limit)?;
            }
            if let Some((uid, gid, groups)) = &who {
                rustix::thread::set_thread_groups(groups)?;
                rustix::thread::set_thread_gid(*gid)?;
                rustix::thread::set_thread_uid(*uid)?;
            }
            #[cfg(target_os = "linux")]
            return Err(std::io::Error::from_raw_os_error(exec.run()));
            #[cfg(not(target_os = "linux"))]
            Ok(())
        });
    }
    Ok(())
}

/// Raises this process's soft limit of open descriptors to its hard limit (the dispatcher
/// holds one descriptor per queued lane; a soft limit of 1 024 is common), and returns the
/// limit it had, for the processes it starts to get back. `None` if it could not be raised
/// (then nothing changed).
pub fn raise_nofile() -> Option<rustix::process::Rlimit> {
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
pub fn systemd_listener() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let ours = std::env::var("LISTEN_PID").ok()?.parse::<u32>().ok()? == std::process::id();
    let count = std::env::var("LISTEN_FDS").ok()?.parse::<u32>().ok()?;
    // Taken at most once per process: a second owner would close it twice.
    static TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !ours || count < 1 || TAKEN.swap(true, std::sync::atomic::Ordering::SeqCst) {
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

/// Starts `cmd` detached from its caller: a session of its own (setsid(2) between fork and
/// exec: no controlling terminal, no SIGHUP when the caller's shell goes away, out of its job
/// control), and no descriptor but 0, 1 and 2 (a pipe the caller reads to its end, or a lock it
/// holds, must not stay open for hours in a process that outlives it): every other is marked
/// close-on-exec in the child before its exec (close_range(2) where the kernel has it, else
/// each up to the descriptor limit). Returns its pid; nobody waits for it here (its parent reaps it, or init
/// once the parent has gone).
pub fn start_detached(cmd: &mut std::process::Command) -> std::io::Result<u32> {
    use std::os::unix::process::CommandExt;
    // Made before the fork: the child allocates nothing.
    let limit = descriptor_limit();
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls (setsid(2), close_range(2) through syscall(2), fcntl(2)) on
    // values made before the fork; it allocates nothing and takes no lock. It only marks the
    // child's own copies of descriptors close-on-exec (so std's pipe that reports a failed
    // exec stays open until the exec), which nothing in the child uses before the exec.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            cloexec_from_3(limit);
            Ok(())
        });
    }
    #[allow(
        clippy::disallowed_methods,
        reason = "product code: a detached start holds no guard of its own"
    )]
    let child = cmd.spawn()?;
    Ok(child.id())
}

/// The soft limit of descriptors, for [`cloexec_from_3`]'s fallback (made before a fork: the
/// child allocates nothing).
fn descriptor_limit() -> i32 {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(65_536)
        .min(1 << 20);
    i32::try_from(limit).unwrap_or(i32::MAX)
}

/// Whether [`cloexec_from_3`] may use close_range(2): always, but where a test asked for the
/// fallback ([`cloexec_by_fcntl`]). Async-signal-safe (an atomic load).
#[cfg(target_os = "linux")]
fn close_range_allowed() -> bool {
    !FCNTL_ONLY.load(std::sync::atomic::Ordering::Relaxed)
}

/// Set by [`cloexec_by_fcntl`] (a test seam; never set otherwise).
#[cfg(target_os = "linux")]
static FCNTL_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Test seam (feature `test-seams`): from now on in this process, a detached start marks the
/// descriptors close-on-exec one by one by fcntl(2), as on a kernel before 5.11, which has no
/// close_range(2).
#[cfg(all(target_os = "linux", feature = "test-seams"))]
pub fn cloexec_by_fcntl() {
    FCNTL_ONLY.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Marks every descriptor from 3 up close-on-exec, in a child between fork and exec:
/// close_range(2)'s `CLOSE_RANGE_CLOEXEC` (Linux 5.11), else each up to `limit` by fcntl(2).
/// Async-signal-safe: system calls only, nothing allocated, no lock.
///
/// # Safety
///
/// Only in a child between fork and exec (or where no other thread uses descriptors): it
/// changes the flags of descriptors the caller does not own.
unsafe fn cloexec_from_3(limit: i32) {
    // SAFETY: raw system calls on descriptor numbers; a number that is not open fails harmlessly.
    unsafe {
        #[cfg(target_os = "linux")]
        let marked = close_range_allowed()
            && libc::syscall(libc::SYS_close_range, 3_u32, u32::MAX, 4_u32) == 0;
        #[cfg(not(target_os = "linux"))]
        let marked = false;
        if !marked {
            for fd in 3..limit {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                    libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
                }
            }
        }
    }
}

/// Ends this process by `signal`, as the command it ran ended: its default disposition
/// restored and the signal raised, with core dumps off (the command may have dumped core;
/// the wrapper has nothing to show). Returns only if that did not end it (a signal whose
/// default is to be ignored, or a failure): the caller then exits with 128+N.
pub fn die_by(signal: i32) {
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

/// Whether this process ignores `signal` (an inherited `SIG_IGN`, as `nohup` and
/// `trap '' SIG` leave it), asked of sigaction(2) without changing it.
pub(crate) fn is_ignored(signal: i32) -> bool {
    // SAFETY: a null new action only reads the disposition, into a zeroed local (all zero
    // is a valid sigaction).
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NUL byte cannot be passed to exec(2): refused before anything starts, saying so
    /// (`run` maps it to 126, the command cannot be executed). No caller's argument or
    /// variable can hold one; this guards the values worklane sets itself.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_nul_byte_in_the_command_or_its_environment_is_refused_before_anything_starts() {
        use std::ffi::{OsStr, OsString};
        let refused = |program: &str, args: &[&str], env: &[(&'static str, &str)]| {
            let args: Vec<OsString> = args.iter().map(OsString::from).collect();
            let env: Vec<(&str, OsString)> = env.iter().map(|(k, v)| (*k, v.into())).collect();
            spawn(OsStr::new(program), &args, &env, true, None)
                .err()
                .expect("refused")
        };
        for err in [
            refused("tr\0ue", &["x"], &[]),
            refused("true", &["a\0b"], &[]),
            refused("true", &["x"], &[("WORKLANE_RESOURCE", "a\0b")]),
        ] {
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
            assert!(err.to_string().contains("NUL byte"), "{err}");
        }
    }
}
