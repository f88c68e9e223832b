//! Linux's start of a command: `clone(CLONE_VM | CLONE_VFORK)` on a stack of its own, as
//! `posix_spawn` does (rustix has no clone), and the exec(2) of a prepared [`Exec`], tried along
//! `PATH` as glibc's execvpe does whichever libc this was linked with.

pub(crate) mod proc;

use super::Child;

/// Starts `program` with `args` (searched in `PATH` as glibc's execvp(3) does, a file
/// without a `#!` line run by `/bin/sh`: [`search`](crate::search::search)), this process's environment with `env`
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
pub(crate) fn spawn(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    env: &[(&str, std::ffi::OsString)],
    group: bool,
    cgroup: Option<&std::fs::File>,
) -> std::io::Result<Child> {
    use std::ffi::{OsStr, c_int, c_void};
    use std::os::fd::AsRawFd;
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
        /// `cgroup.procs` of the run's cgroup (-1: none): the child moves itself in.
        cgroup_procs: c_int,
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
            // Into the run's cgroup before anything of the command runs, so nothing it starts
            // can be outside. A move the kernel refuses leaves the run without containment,
            // as where there are no cgroups: the command still starts.
            if start.cgroup_procs >= 0 {
                libc::write(start.cgroup_procs, b"0".as_ptr().cast::<c_void>(), 1);
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
        cgroup_procs: cgroup.map_or(-1, AsRawFd::as_raw_fd),
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
const SHELL: &std::ffi::CStr = c"/bin/sh";

/// An exec(2) of a program, prepared before the clone or fork that runs it: the child of a
/// process with threads may allocate nothing (another thread may hold the allocator's lock),
/// so every path, argument and variable is made here. [`Exec::run`] then tries the paths as
/// glibc's execvpe does, whichever libc worklane was linked with (musl's runs no `#!`-less
/// file through the shell, and its default `PATH` is another).
pub(super) struct Exec {
    /// What the pointers below point into (a `CString`'s bytes stay put when it moves).
    _owned: Vec<std::ffi::CString>,
    /// The paths to try, in order ([`search`](crate::search::search)).
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
unsafe impl Send for Exec {}
// SAFETY: as for `Send`: a shared `Exec` is only read.
unsafe impl Sync for Exec {}

impl Exec {
    /// `program` with `args`, this process's environment with `env` set (only `env`, without
    /// `inherit`), searched in the `PATH` that environment gives the program (`env`'s, else
    /// this process's when it inherits).
    pub(super) fn new(
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
        let candidates_c = crate::search::search(program, path.as_deref())
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
    pub(super) unsafe fn run(&mut self) -> std::ffi::c_int {
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
