//! The one module of the CLI with `unsafe`: std's `Command::pre_exec` is an unsafe API (the
//! closure runs in the forked child), and the parent-death signal can only be set there.

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
