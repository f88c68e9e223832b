//! The one module of the CLI with `unsafe`: starting the command (a `clone(CLONE_VM |
//! CLONE_VFORK)` whose child sets the parent-death signal before its exec; rustix has no
//! clone) and std's `Command::pre_exec` (its closure runs in the forked child) are unsafe;
//! setting a variable of the process's environment (`--dir`) and taking an inherited
//! descriptor by its number (`--status-fd`) are unsafe too, and so are a signal handler's
//! action and asking sigaction(2) for a signal's disposition.

#![allow(unsafe_code)]

/// A command started by [`spawn`]: its pid, reaped by [`Child::wait`].
pub(crate) struct Child {
    pid: rustix::process::Pid,
}

impl Child {
    /// Its pid.
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

/// Starts `program` with `args` (searched in `PATH` as glibc's execvp(3) does, a file
/// without a `#!` line run by `/bin/sh`: [`search`]), this process's environment with `env`
/// set, and every descriptor that is not close-on-exec. The search reads the `PATH` the
/// command gets (`env`'s if it sets one, as `env PATH=... cmd` does; worklane's variables
/// never do). The command starts with the signal mask empty and SIGPIPE at its default (as
/// std's `Command` does); a signal the caller ignores stays ignored. With `group`, it leads
/// a process group of its own.
///
/// On Linux the command also gets SIGTERM when worklane dies (`PR_SET_PDEATHSIG`, see
/// [prctl(2)]), so that a command whose supervisor was SIGKILLed does not run on without
/// reason. It keeps its slot for as long as it runs (it inherits the slot's guard); the signal
/// only tells it that nobody supervises it any more. If worklane died before the setting
/// took effect (the child's parent is no longer worklane), the child sends itself the signal
/// at once. The signal fires when the thread that spawned the child ends: call this only from
/// the thread that lives until the command is reaped (worklane's main thread).
///
/// On Linux the child shares this process's memory until its exec (`clone(CLONE_VM |
/// CLONE_VFORK)`, as `posix_spawn` does), instead of a copy of it (`fork`): the start costs
/// no page tables copied and no page copied on write. Elsewhere std's `Command` starts it.
///
/// [prctl(2)]: https://man7.org/linux/man-pages/man2/prctl.2.html
#[cfg(target_os = "linux")]
pub(crate) fn spawn(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    env: &[(&str, std::ffi::OsString)],
    group: bool,
) -> std::io::Result<Child> {
    use std::ffi::{OsStr, c_int, c_void};
    use std::sync::atomic::{AtomicI32, Ordering};

    let env: Vec<(&OsStr, &OsStr)> = env
        .iter()
        .map(|(name, value)| (OsStr::new(name), value.as_os_str()))
        .collect();
    let mut exec = Exec::new(program, args, &env, true)?;

    /// What the child reads (the parent's memory, shared until the exec) and where it leaves
    /// the error of a failed start.
    struct Start {
        /// What to exec (its `/bin/sh` vector written by the child only).
        exec: *mut Exec,
        group: bool,
        parent: c_int,
        /// Signals this process catches (std's and the supervisor's handlers), which must be at
        /// their default before the child can take a signal, and SIGPIPE (ignored by std).
        defaults: [c_int; 11],
        errno: AtomicI32,
    }

    /// The handler of a job-control stop in the child before its exec: nothing (it runs on the
    /// child's own stack, touching no memory), so that the stop is spent without stopping it.
    extern "C" fn spend_stop(_: c_int) {}

    /// The child, between clone and exec: only async-signal-safe calls, no allocation, and
    /// nothing written but `errno` of `Start` (and, by libc, the shared thread's `errno`).
    extern "C" fn child(start: *mut c_void) -> c_int {
        // SAFETY: `start` points to the parent's `Start`, alive until the parent resumes,
        // which is after this process has exec'd or exited (CLONE_VFORK).
        let start = unsafe { &*(start as *const Start) };
        let fail = |errno: c_int| -> c_int {
            start.errno.store(errno.max(1), Ordering::SeqCst);
            // SAFETY: _exit(2) ends this process at once, running nothing of the parent's.
            unsafe { libc::_exit(127) }
        };
        // SAFETY: each call is async-signal-safe (signal-safety(7)) and is given pointers the
        // parent prepared: the `Start` fields, or locals of this stack. The one write to the
        // parent's memory, by `Exec::run` to its `/bin/sh` vector, is to a value the parent
        // does not touch until this process has exec'd or exited.
        unsafe {
            if start.group && libc::setpgid(0, 0) != 0 {
                return fail(*libc::__errno_location());
            }
            for &signal in &start.defaults {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                    && (signal == libc::SIGPIPE || old.sa_sigaction != libc::SIG_IGN)
                    && old.sa_sigaction != libc::SIG_DFL
                {
                    let mut default: libc::sigaction = std::mem::zeroed();
                    default.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(signal, &default, std::ptr::null_mut());
                }
            }
            // A job-control stop that reaches this child before its exec (Ctrl-Z, a shell's
            // `kill -TSTP` of the job) would stop it here, and with it worklane, which waits
            // for the exec unable to stop itself, so that no shell ever sees the job stopped
            // and continues it (and without a terminal the child has left the job's group,
            // which SIGCONT reaches). Caught by a handler that does nothing, it is spent before
            // the exec instead; the exec resets the handler to the default, so the command
            // starts as it would have, and worklane, which the stop reached too, stops itself.
            for signal in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction == libc::SIG_DFL
                {
                    let mut spend: libc::sigaction = std::mem::zeroed();
                    spend.sa_sigaction = spend_stop as extern "C" fn(c_int) as libc::sighandler_t;
                    spend.sa_flags = libc::SA_RESTART;
                    libc::sigaction(signal, &spend, std::ptr::null_mut());
                }
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return fail(*libc::__errno_location());
            }
            if libc::getppid() != start.parent {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            fail((*start.exec).run())
        }
    }

    let start = Start {
        exec: std::ptr::addr_of_mut!(exec),
        group,
        parent: rustix::process::getpid().as_raw_nonzero().get(),
        defaults: [
            libc::SIGPIPE,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGCHLD,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGALRM,
        ],
        errno: AtomicI32::new(0),
    };
    // The child's stack: libc's calls need little (the search's paths and the shell's
    // argument vector are prepared above). Pages that are never touched cost nothing.
    let size = 64 * 1024;
    let mut stack: Vec<u8> = Vec::with_capacity(size);
    // SAFETY: within the allocation (capacity `size`); rounded down to the 16 bytes the ABI
    // wants at a call.
    let top = unsafe { stack.as_mut_ptr().add(size) };
    let top = top.wrapping_sub(top as usize % 16);

    // No handler may run in the child before its exec: every signal is blocked across the
    // clone (the child unblocks them once their handlers are at their defaults).
    // SAFETY: a sigset_t is plain bits (all zero is a valid value); sigfillset and
    // pthread_sigmask write only to these locals, and the mask is restored below on every
    // path.
    let before = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        before
    };
    // SAFETY: `child` runs on `stack` (alive across the call) with a pointer to `start`
    // (alive too); CLONE_VFORK suspends this thread until the child has exec'd or exited, so
    // nothing the child reads changes under it, and nothing of ours runs while it shares our
    // memory. The flags ask for no thread, no shared descriptor table: a new process.
    let pid = unsafe {
        libc::clone(
            child,
            top.cast::<c_void>(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::addr_of!(start).cast_mut().cast::<c_void>(),
        )
    };
    let cloned = (pid == -1).then(std::io::Error::last_os_error);
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut()) };
    drop(stack);
    if let Some(e) = cloned {
        return Err(e);
    }
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| std::io::Error::other("clone(2) returned pid 0 to the parent"))?;
    let child = Child { pid };
    match start.errno.load(Ordering::SeqCst) {
        0 => Ok(child),
        errno => {
            // It exited with 127 without running anything: reap it.
            let _ = child.wait();
            Err(std::io::Error::from_raw_os_error(errno))
        }
    }
}

/// The shell that runs a file without a `#!` line, as execvp(3) runs it.
#[cfg(target_os = "linux")]
const SHELL: &std::ffi::CStr = c"/bin/sh";

/// An exec(2) of a program, prepared before the clone or fork that runs it: the child of a
/// process with threads may allocate nothing (another thread may hold the allocator's lock),
/// so every path, argument and variable is made here. [`Exec::run`] then tries the paths as
/// glibc's execvpe does, whichever libc worklane was linked with (musl's runs no `#!`-less
/// file through the shell, and its default `PATH` is another).
#[cfg(target_os = "linux")]
struct Exec {
    /// What the pointers below point into (a `CString`'s bytes stay put when it moves).
    _owned: Vec<std::ffi::CString>,
    /// The paths to try, in order ([`search`]).
    candidates: Vec<*const std::ffi::c_char>,
    argv: Vec<*const std::ffi::c_char>,
    /// `/bin/sh`, a free slot for the file, then `argv` after its first: the command line of
    /// a file the kernel cannot execute (ENOEXEC).
    sh_argv: Vec<*const std::ffi::c_char>,
    envp: Vec<*const std::ffi::c_char>,
}

// SAFETY: the pointers point into `_owned`, which the value owns and never changes, or to
// `SHELL`, a static; the only write, `run`'s to a slot of `sh_argv`, takes `&mut self`. The
// value moves into std's `pre_exec` closure, which needs it `Send` and `Sync`.
#[cfg(target_os = "linux")]
unsafe impl Send for Exec {}
// SAFETY: as for `Send`: a shared `Exec` is only read.
#[cfg(target_os = "linux")]
unsafe impl Sync for Exec {}

#[cfg(target_os = "linux")]
impl Exec {
    /// `program` with `args`, this process's environment with `env` set (only `env`, without
    /// `inherit`), searched in the `PATH` that environment gives the program (`env`'s, else
    /// this process's when it inherits).
    fn new(
        program: &std::ffi::OsStr,
        args: &[std::ffi::OsString],
        env: &[(&std::ffi::OsStr, &std::ffi::OsStr)],
        inherit: bool,
    ) -> std::io::Result<Exec> {
        use std::ffi::{CString, OsStr, c_char};
        use std::os::unix::ffi::OsStrExt;
        let c = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the command line or the environment holds a NUL byte",
                )
            })
        };
        let pointers = |strings: &[CString]| -> Vec<*const c_char> {
            strings
                .iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        let mut argv_c = vec![c(program.as_bytes())?];
        for arg in args {
            argv_c.push(c(arg.as_bytes())?);
        }
        let mut env_c = Vec::new();
        let inherited = if inherit {
            std::env::vars_os().collect()
        } else {
            Vec::new()
        };
        for (name, value) in inherited {
            if !env.iter().any(|(set, _)| *set == name) {
                env_c.push(c(&[name.as_bytes(), b"=", value.as_bytes()].concat())?);
            }
        }
        for (name, value) in env {
            env_c.push(c(&[name.as_bytes(), b"=", value.as_bytes()].concat())?);
        }
        let path = match env
            .iter()
            .rev()
            .find(|(name, _)| *name == OsStr::new("PATH"))
        {
            Some((_, path)) => Some(path.to_os_string()),
            None if inherit => std::env::var_os("PATH"),
            None => None,
        };
        let candidates_c = search(program, path.as_deref())
            .into_iter()
            .map(|p| c(&p))
            .collect::<std::io::Result<Vec<CString>>>()?;
        let argv = pointers(&argv_c);
        let sh_argv = [SHELL.as_ptr(), std::ptr::null()]
            .into_iter()
            .chain(argv[1..].iter().copied())
            .collect();
        let envp = pointers(&env_c);
        let mut candidates = pointers(&candidates_c);
        candidates.pop();
        let mut owned = argv_c;
        owned.extend(env_c);
        owned.extend(candidates_c);
        Ok(Exec {
            _owned: owned,
            candidates,
            argv,
            sh_argv,
            envp,
        })
    }

    /// Tries each candidate with execve(2), runs one the kernel cannot execute (ENOEXEC) by
    /// `/bin/sh`, goes on past "not here" and "not ours to run" (EACCES, remembered), and
    /// stops at any other error, as glibc's execvpe does. Returns only if nothing was
    /// executed, with the errno to report.
    ///
    /// # Safety
    ///
    /// Only async-signal-safe calls, and no allocation: call it in a child between clone or
    /// fork and exec.
    unsafe fn run(&mut self) -> std::ffi::c_int {
        let mut last = libc::ENOENT;
        let mut denied = false;
        for &path in &self.candidates {
            // SAFETY: `path`, `argv` and `envp` are NUL-terminated strings and null-terminated
            // vectors of them, owned by `self`; execve(2) and `__errno_location` are
            // async-signal-safe.
            let mut errno = unsafe {
                libc::execve(path, self.argv.as_ptr(), self.envp.as_ptr());
                *libc::__errno_location()
            };
            if errno == libc::ENOEXEC {
                self.sh_argv[1] = path;
                // SAFETY: as above; `sh_argv` is null-terminated (it ends as `argv` does).
                errno = unsafe {
                    libc::execve(SHELL.as_ptr(), self.sh_argv.as_ptr(), self.envp.as_ptr());
                    *libc::__errno_location()
                };
            }
            // (A name with a `/` is the one candidate: its error is the answer.)
            match errno {
                // Not here, or not ours to run: the next directory of `PATH` may have it.
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => return errno,
            }
            last = errno;
        }
        if denied { libc::EACCES } else { last }
    }
}

/// The paths execvp(3) tries for `program`, in order, as glibc's does: `program` itself when
/// it holds a `/`; else each entry of `path` (`PATH`; `/bin:/usr/bin` when unset, glibc's
/// default) joined to it, an empty entry meaning the current directory (the bare name, as
/// glibc tries it). An empty `program` has none (ENOENT). An entry of `PATH_MAX` bytes or
/// more is skipped, as glibc skips it (its exec could only fail with ENAMETOOLONG, which
/// would end the search before the entries after it); glibc then also tries the bare name
/// in the current directory, a quirk of its loop that is not copied: a file `PATH` never
/// named is not run.
#[cfg(any(target_os = "linux", test))]
pub(crate) fn search(program: &std::ffi::OsStr, path: Option<&std::ffi::OsStr>) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let name = program.as_bytes();
    if name.is_empty() {
        return Vec::new();
    }
    if name.contains(&b'/') {
        return vec![name.to_vec()];
    }
    let path = path.map_or(&b"/bin:/usr/bin"[..], OsStrExt::as_bytes);
    path.split(|&b| b == b':')
        .filter(|dir| dir.len() < PATH_MAX)
        .map(|dir| {
            if dir.is_empty() {
                name.to_vec()
            } else {
                [dir, b"/", name].concat()
            }
        })
        .collect()
}

/// Linux's `PATH_MAX`: glibc's execvp(3) skips an entry of `PATH` this long or longer.
#[cfg(any(target_os = "linux", test))]
const PATH_MAX: usize = 4096;

/// Starts the command with std's `Command` (off Linux: no parent-death signal).
#[cfg(not(target_os = "linux"))]
pub(crate) fn spawn(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    env: &[(&str, std::ffi::OsString)],
    group: bool,
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

/// Catches `signal` by setting `flag` (`signal_hook::flag`), then unblocks it ([`unblock`]):
/// every handler worklane installs is registered through here or [`on_signal`], so none can
/// be kept from its signal by a mask the caller blocked.
pub(crate) fn on_flag(
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
    let mut exec = Exec::new(program, args, env, false)?;
    #[cfg(not(target_os = "linux"))]
    let _ = (program, args);
    // Made before the fork: the child allocates nothing.
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
    // async-signal-safe calls: setsid(2), setrlimit(2), setgroups(2), setgid(2) and setuid(2)
    // through rustix (raw system calls, on values made before the fork; the child has one
    // thread, so a thread's credentials are the process's), then (Linux) execve(2) on the
    // vectors `Exec` prepared before the fork; no allocation (`from_raw_os_error` makes none),
    // no lock, nothing shared with the parent (the child writes only to its own copy of
    // `exec`).
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
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

    fn paths(program: &str, path: Option<&str>) -> Vec<String> {
        search(
            std::ffi::OsStr::new(program),
            path.map(std::ffi::OsStr::new),
        )
        .into_iter()
        .map(|p| String::from_utf8(p).expect("utf-8"))
        .collect()
    }

    #[test]
    fn search_tries_each_path_entry_in_order_and_the_bare_name_for_an_empty_one() {
        assert_eq!(
            paths("tool", Some("/a:/b/c::/d/")),
            ["/a/tool", "/b/c/tool", "tool", "/d//tool"]
        );
        assert_eq!(paths("tool", Some("")), ["tool"]);
        assert_eq!(paths("tool", Some(":")), ["tool", "tool"]);
    }

    #[test]
    fn search_skips_an_entry_of_path_max_bytes_or_more_and_tries_no_other_path_for_it() {
        let long = format!("/{}", "d".repeat(PATH_MAX - 1));
        let shorter = format!("/{}", "d".repeat(PATH_MAX - 2));
        assert_eq!(paths("tool", Some(&format!("{long}:/a"))), ["/a/tool"]);
        assert_eq!(
            paths("tool", Some(&format!("/a:{shorter}"))),
            ["/a/tool".to_owned(), format!("{shorter}/tool")]
        );
        assert!(paths("tool", Some(&long)).is_empty());
    }

    #[test]
    fn search_uses_glibcs_default_path_when_path_is_unset() {
        assert_eq!(paths("tool", None), ["/bin/tool", "/usr/bin/tool"]);
    }

    #[test]
    fn search_takes_a_name_with_a_slash_as_it_is_and_has_nothing_for_an_empty_name() {
        assert_eq!(paths("./tool", Some("/a")), ["./tool"]);
        assert_eq!(paths("/usr/bin/env", Some("/a")), ["/usr/bin/env"]);
        assert_eq!(paths("dir/tool", None), ["dir/tool"]);
        assert!(paths("", Some("/a")).is_empty());
    }

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
            spawn(OsStr::new(program), &args, &env, true)
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
