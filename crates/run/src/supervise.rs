//! Running the command: spawn it, forward signals, halt it on request, report its status.

use signal_hook::consts::{SIGALRM, SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the halt check runs (STOP, lease pulse).
pub const CHECK_EVERY: Duration = Duration::from_millis(250);
/// How long a halted command has between SIGTERM and SIGKILL. With the check interval this
/// keeps a halt within about 5 s of a STOP.
pub const GRACE: Duration = Duration::from_secs(3);

/// The signals `worklane run` passes on to its command (each one's default would end the
/// wrapper and leave the command running without its supervisor).
const FORWARDED: [i32; 7] = [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM];

/// Where signals go: the command's own process group (when it has one) or its pid.
#[derive(Clone, Copy)]
enum Target {
    Group(rustix::process::Pid),
    Process(rustix::process::Pid),
}

impl Target {
    fn send(self, signal: rustix::process::Signal) {
        // The command may have exited a moment ago; nothing to do then.
        let _ = match self {
            Target::Group(pgid) => rustix::process::kill_process_group(pgid, signal),
            Target::Process(pid) => rustix::process::kill_process(pid, signal),
        };
    }
}

/// The command as started: what a record names so that `stop-all` can halt it even when its
/// supervisor cannot act.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    /// Its pid.
    pub pid: u32,
    /// Its start identity (`/proc/<pid>/stat` field 22 on Linux), if it could be read.
    pub start: Option<u64>,
    /// Whether it leads a process group of its own (no terminal on stdin), which a halt signals
    /// whole.
    pub group: bool,
}

impl Started {
    /// `{"commandProcess": {"pid", "start", "group"}}` for the record (PROTOCOL.md 12.7).
    #[must_use]
    pub fn fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut fields = serde_json::Map::new();
        fields.insert(
            COMMAND_PROCESS.to_owned(),
            serde_json::json!({"pid": self.pid, "start": self.start, "group": self.group}),
        );
        fields
    }
}

/// The record field naming the supervised command's process.
pub const COMMAND_PROCESS: &str = "commandProcess";

/// What the supervisor is told while the command runs.
pub trait Watch {
    /// Called once, right before the command is started: what the hold needs is in place
    /// (the run's cgroup made and named in its record, a build's own job slot taken), so a
    /// caller that tells others the run is under way (`--status-fd`'s `taken`) says it here.
    /// By default nothing.
    fn starting(&mut self) {}
    /// Called once, right after the command started.
    fn started(&mut self, command: &Started);
    /// Called every [`CHECK_EVERY`]: a reason halts the command.
    fn check(&mut self) -> Option<String>;
    /// Called once when a halt begins (the reason [`Watch::check`] gave), before the command
    /// is sent SIGTERM; SIGKILL follows `grace` later. By default it is logged (`warn`).
    fn halting(&mut self, reason: &str, grace: Duration) {
        log::warn!(
            "{reason}: halting the command (SIGTERM, then SIGKILL after {} ms)",
            grace.as_millis()
        );
    }
}

/// How to start the command.
pub struct Launch<'a> {
    /// The command line.
    pub command: &'a [OsString],
    /// SIGTERM-to-SIGKILL grace of a halt.
    pub grace: Duration,
    /// A copy of the held guard's descriptor (not close-on-exec) that the command inherits:
    /// the lock is on the open file description, so the slot stays held for as long as any
    /// process of the run has it open, even if worklane itself is killed. Closed in worklane
    /// right after the start.
    pub inherit: Vec<OwnedFd>,
    /// Variables set in the command's environment.
    pub env: Vec<(&'static str, OsString)>,
    /// The run's cgroup, if it has one: the command starts in it, and a halt reaches every
    /// process in it.
    pub cgroup: Option<crate::cgroup::RunCgroup>,
    /// End what the command left running when it ends (SIGTERM, SIGKILL after the grace).
    pub kill_tree_on_exit: bool,
}

/// A copy of `fd` that a child inherits (dup(2) clears close-on-exec on the copy).
pub fn inheritable(fd: impl AsFd) -> Result<OwnedFd, Error> {
    rustix::io::dup(fd).map_err(|e| Error::Inherit { source: e.into() })
}

/// How the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outcome {
    /// Its exit code as a shell reports it (128+N for signal N).
    pub code: u8,
    /// Why it was halted, if it was.
    pub halted: Option<String>,
    /// The signal that ended it, when worklane did not halt it: the wrapper, once it has let
    /// go of what it holds, ends by the same signal ([`crate::process::die_by`]), so that a shell
    /// loop sees its job killed by SIGINT and stops, as it would without the wrapper.
    pub signal: Option<i32>,
    /// A role lease's supervision ([`crate::Supervisor::role`]): the halt was for the lease,
    /// lost or unconfirmed for TTL/2.
    pub lease_lost: bool,
    /// The signal that ended the command, whoever sent it (a halt's included); `None` when it
    /// exited.
    pub ended_by: Option<i32>,
    /// The processes of the run still in its cgroup once the command ended (daemons it left,
    /// by default let run on as under the bare command): the slot stays theirs, its record
    /// naming the cgroup, until they end.
    pub left_running: Vec<u32>,
    /// The CPU time the run used, µs, from its cgroup (`None` without one).
    pub cpu_usec: Option<u64>,
}

/// Runs `command`, calling `check` every [`CHECK_EVERY`]; when `check` returns a reason, the
/// command is sent SIGTERM, then SIGKILL after `grace` ([`GRACE`] unless a lease needs the
/// command gone sooner).
///
/// Without a terminal on stdin, the command gets a process group of its own, so that a halt
/// and forwarded SIGINT/SIGTERM/SIGHUP reach all of its processes. With a terminal, it stays in
/// the foreground group (so it can read the terminal); the terminal delivers Ctrl-C to it
/// directly, so SIGINT is not forwarded then.
pub fn supervise(launch: Launch<'_>, watch: &mut dyn Watch) -> Result<Outcome, Error> {
    let Launch {
        command,
        grace,
        inherit,
        env,
        cgroup,
        kill_tree_on_exit,
    } = launch;
    let (program, args) = command.split_first().ok_or(Error::NoCommand)?;
    // Every signal a caller may send a job is passed on to the command, except those the
    // caller ignores (`nohup`, `trap '' HUP`): they stay ignored, here and in the command,
    // which inherits the disposition through exec as under `flock(1)` or `env`.
    let forwarded: Vec<i32> = FORWARDED
        .iter()
        .copied()
        .filter(|&s| !crate::sys::is_ignored(s))
        .collect();
    // A parent that ignores SIGCHLD passes that on through exec, and with SIGCHLD ignored the
    // kernel reaps our children itself: the command's status would be lost and the wait for
    // it fail. Any handler restores normal child reporting; ours also wakes the loop below
    // when the command (or an orphan of its tree) exits.
    let mut wake = Wakeup::new().map_err(|source| Error::Wakeup { source })?;
    // Each is unblocked once caught: a caller may have started us with some of them blocked,
    // and a SIGTERM for the command would stay pending here.
    for &signal in forwarded.iter().chain(&[SIGCHLD]) {
        wake.register(signal)
            .map_err(|source| Error::Handler { signal, source })?;
    }
    let interactive = std::io::stdin().is_terminal();
    // Orphans of the command's tree are re-parented to us (Linux), so a halt still finds them.
    let reaping = crate::sys::become_subreaper();
    let procs = cgroup.as_ref().and_then(|c| c.procs_file().ok());
    watch.starting();
    let spawned = crate::sys::spawn(program, args, &env, !interactive, procs.as_ref());
    drop(procs);
    // The command has its copy now (or failed to start): ours goes.
    drop(inherit);
    let child = spawned.map_err(|source| {
        let program = program.to_string_lossy().into_owned();
        match source.kind() {
            std::io::ErrorKind::NotFound => Error::NotFound { program },
            std::io::ErrorKind::PermissionDenied => Error::PermissionDenied { program },
            _ => Error::Start { program, source },
        }
    })?;
    let pid = child.pid();
    let target = if interactive {
        Target::Process(pid)
    } else {
        Target::Group(pid)
    };
    watch.started(&Started {
        pid: child.id(),
        start: worklane_identity::ProcessIdentity::of(child.id())
            .ok()
            .map(|i| i.start),
        group: !interactive,
    });

    let mut next_check = Instant::now() + CHECK_EVERY;
    let mut halting: Option<(String, Instant)> = None;
    let mut killed = false;
    // One thread: the loop sleeps in poll(2) on the signal handlers' wake-up socket until a
    // signal (SIGCHLD included) or the next check is due. Handlers set a flag, then write a
    // byte; the loop drains the bytes, then reads the flags, so no signal is lost.
    let waited = loop {
        let mut forward = Vec::new();
        let child_changed = wake.drain(&mut forward);
        for signal in forward {
            let forwarded = match signal {
                SIGTERM => Some(rustix::process::Signal::TERM),
                SIGHUP => Some(rustix::process::Signal::HUP),
                SIGUSR1 => Some(rustix::process::Signal::USR1),
                SIGUSR2 => Some(rustix::process::Signal::USR2),
                SIGALRM => Some(rustix::process::Signal::ALARM),
                // From a terminal, Ctrl-C and Ctrl-\ reach the command in its foreground
                // group already.
                SIGINT if !interactive => Some(rustix::process::Signal::INT),
                SIGQUIT if !interactive => Some(rustix::process::Signal::QUIT),
                _ => None,
            };
            if let Some(signal) = forwarded {
                target.send(signal);
            }
        }
        match exited(pid, reaping && child_changed) {
            Ok(true) => break Ok(()),
            Ok(false) => {}
            Err(e) => break Err(e),
        }
        let now = Instant::now();
        if now >= next_check {
            next_check = now + CHECK_EVERY;
            if halting.is_none()
                && let Some(reason) = watch.check()
            {
                watch.halting(&reason, grace);
                // A stopped process acts on SIGTERM only once continued.
                halt(
                    target,
                    pid,
                    cgroup.as_ref(),
                    &[rustix::process::Signal::TERM, rustix::process::Signal::CONT],
                );
                halting = Some((reason, now));
            }
        }
        if let Some((_, since)) = &halting
            && !killed
            && now >= *since + grace
        {
            halt(
                target,
                pid,
                cgroup.as_ref(),
                &[rustix::process::Signal::KILL],
            );
            if let Some(cgroup) = &cgroup {
                cgroup.kill();
            }
            killed = true;
        }
        let mut due = next_check;
        if let Some((_, since)) = &halting
            && !killed
        {
            due = due.min(*since + grace);
        }
        wake.sleep(due.saturating_duration_since(Instant::now()));
    };
    drop(wake);
    // A halted command's processes go with it: whatever of it outlived the command (a child
    // that ignored SIGTERM, in its group or not) is killed before the slot is released. The
    // command is not reaped yet, so its pid, and the pgid of its group, cannot have been
    // reused by an unrelated process.
    if halting.is_some() {
        target.send(rustix::process::Signal::KILL);
        crate::tree::kill_descendants(raw_pid(pid));
        if let Some(cgroup) = &cgroup {
            cgroup.kill();
        }
    } else if kill_tree_on_exit && waited.is_ok() {
        end_tree(target, pid, cgroup.as_ref(), grace);
    }
    let status = waited
        .and_then(|()| child.wait())
        .map_err(|source| Error::Wait { source })?;
    let cpu_usec = cgroup.as_ref().and_then(crate::cgroup::RunCgroup::cpu_usec);
    let left_running = match &cgroup {
        Some(cgroup) => {
            // After a kill, the kernel empties the cgroup at once but not instantly.
            let until = Instant::now() + Duration::from_secs(2);
            let mut left = cgroup.pids();
            while halting.is_some() && !left.is_empty() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
                left = cgroup.pids();
            }
            if left.is_empty() {
                cgroup.remove_if_empty();
            }
            left
        }
        None => Vec::new(),
    };
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(u8::MAX),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(u8::MAX),
        // Neither an exit nor a signal: not a status waitpid(2) reports for an ended process.
        (None, None) => 70,
    };
    Ok(Outcome {
        lease_lost: false,
        ended_by: status.signal(),
        code,
        signal: status.signal().filter(|_| halting.is_none()),
        halted: halting.map(|(reason, _)| reason),
        left_running,
        cpu_usec,
    })
}

/// Sends a halt signal to the command (its group, or its pid with a terminal) and to every
/// other descendant of worklane, which reaches the processes that left the group or were
/// orphaned (see [`crate::tree`]).
fn halt(
    target: Target,
    command: rustix::process::Pid,
    cgroup: Option<&crate::cgroup::RunCgroup>,
    signals: &[rustix::process::Signal],
) {
    for &signal in signals {
        target.send(signal);
        // Every process of the run, those that left its group and session too.
        if let Some(cgroup) = cgroup {
            cgroup.signal(signal);
        }
    }
    crate::tree::signal_descendants(raw_pid(command), signals);
}

/// Ends what an ended command left running (`--kill-tree-on-exit`): SIGTERM (and SIGCONT) to
/// every process of the run, then, what is left after `grace`, SIGKILL. The command is not
/// reaped yet, so its pid and its group's cannot have been reused.
fn end_tree(
    target: Target,
    command: rustix::process::Pid,
    cgroup: Option<&crate::cgroup::RunCgroup>,
    grace: Duration,
) {
    let left = || match cgroup {
        Some(cgroup) => !cgroup.pids().is_empty(),
        None => crate::tree::has_descendants(raw_pid(command)),
    };
    if !left() {
        return;
    }
    halt(
        target,
        command,
        cgroup,
        &[rustix::process::Signal::TERM, rustix::process::Signal::CONT],
    );
    let until = Instant::now() + grace;
    while left() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    target.send(rustix::process::Signal::KILL);
    crate::tree::kill_descendants(raw_pid(command));
    if let Some(cgroup) = cgroup {
        cgroup.kill();
    }
}

fn raw_pid(pid: rustix::process::Pid) -> u32 {
    pid.as_raw_nonzero().get().unsigned_abs()
}

/// Whether the command has exited, without reaping it (WNOWAIT): while it is an unreaped
/// zombie its pid, and so the pgid of its group, cannot be reused, so the kill of its leftovers
/// after a halt cannot reach an unrelated process. As a subreaper, orphans of the command's
/// tree become our children: `reap` (a SIGCHLD came) reaps those that have exited, so a long
/// run does not collect zombies. Nothing else in worklane spawns children while a command runs.
fn exited(pid: rustix::process::Pid, reap: bool) -> std::io::Result<bool> {
    use rustix::io::Errno;
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    let options = WaitIdOptions::EXITED
        .union(WaitIdOptions::NOWAIT)
        .union(WaitIdOptions::NOHANG);
    loop {
        match waitid(WaitId::Pid(pid), options) {
            Ok(Some(_)) => return Ok(true),
            Ok(None) => break,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if reap {
        crate::tree::reap_orphans(raw_pid(pid));
    }
    Ok(false)
}

/// The signal handlers of a supervision: each signal sets its flag, then writes a byte to a
/// socket the supervising loop sleeps on (the self-pipe pattern, `signal_hook::low_level::pipe`).
/// Dropping it removes the handlers' actions.
struct Wakeup {
    read: std::os::unix::net::UnixStream,
    write: Arc<std::os::fd::OwnedFd>,
    flags: Vec<(i32, Arc<AtomicBool>)>,
    ids: Vec<signal_hook::SigId>,
}

impl Wakeup {
    fn new() -> std::io::Result<Wakeup> {
        let (read, write) = std::os::unix::net::UnixStream::pair()?;
        read.set_nonblocking(true)?;
        Ok(Wakeup {
            read,
            write: Arc::new(write.into()),
            flags: Vec::new(),
            ids: Vec::new(),
        })
    }

    /// Catches `signal`: its flag is set, then the loop woken.
    fn register(&mut self, signal: i32) -> std::io::Result<()> {
        let flag = Arc::new(AtomicBool::new(false));
        self.ids.push(crate::sys::on_signal(
            signal,
            Arc::clone(&flag),
            Arc::clone(&self.write),
        )?);
        self.flags.push((signal, flag));
        Ok(())
    }

    /// Empties the socket, then collects the signals that came: those to forward into
    /// `forward`; returns whether SIGCHLD came.
    fn drain(&mut self, forward: &mut Vec<i32>) -> bool {
        use std::io::Read;
        let mut buf = [0u8; 64];
        while matches!((&self.read).read(&mut buf), Ok(n) if n > 0) {}
        let mut child = false;
        for (signal, flag) in &self.flags {
            if flag.swap(false, Ordering::SeqCst) {
                if *signal == SIGCHLD {
                    child = true;
                } else {
                    forward.push(*signal);
                }
            }
        }
        child
    }

    /// Sleeps until a signal comes or `timeout` has passed.
    fn sleep(&self, timeout: Duration) {
        let mut fds = [rustix::event::PollFd::new(
            &self.read,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec::try_from(timeout).ok();
        let _ = rustix::event::poll(&mut fds, timeout.as_ref());
    }
}

impl Drop for Wakeup {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// The command line as one string for records and messages (lossy, at most 512 bytes).
#[must_use]
pub fn describe(command: &[OsString]) -> String {
    let mut text = command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    if text.len() > 512 {
        let mut cut = 509;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

/// Why a command could not be run under supervision. (How it ended, by its status or a
/// signal, is an [`Outcome`], never an error.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The command line is empty.
    #[error("no command given")]
    NoCommand,
    /// The program was not found (in `PATH`, when it has no `/`).
    #[error("{program}: command not found")]
    NotFound {
        /// The program as given.
        program: String,
    },
    /// The program, or a directory on the way, may not be executed by this user.
    #[error("{program}: permission denied (is it executable?)")]
    PermissionDenied {
        /// The program as given.
        program: String,
    },
    /// Another failure to start the program (not an executable, a NUL byte in its line...).
    #[error("{program}: cannot run it")]
    Start {
        /// The program as given.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A held descriptor could not be duplicated for the command to inherit.
    #[error("cannot duplicate the held guard for the command")]
    Inherit {
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The socket the signal handlers wake the supervisor through could not be made.
    #[error("cannot install signal handlers")]
    Wakeup {
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A signal's handler could not be installed.
    #[error("cannot install a handler for signal {signal}")]
    Handler {
        /// The signal's number.
        signal: i32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The jobserver could not be set up ([`crate::Supervisor::jobs`]).
    #[error("cannot set up the build's jobserver: {what}")]
    Jobserver {
        /// The step that failed.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The build's own job slot could not be taken.
    #[error("cannot take the build's job slot")]
    JobSlot {
        /// Why.
        #[source]
        source: worklane_admission::take::Error,
    },
    /// The build's own job slot is refused (STOP or a drain in force).
    #[error("refused a job slot: {blocker}")]
    JobsRefused {
        /// What refuses it.
        blocker: String,
    },
    /// The command's status could not be collected.
    #[error("cannot wait for the command")]
    Wait {
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::describe;
    use std::ffi::OsString;

    #[test]
    fn a_command_line_is_described_in_at_most_512_bytes_cut_at_a_character() {
        let line = |args: &[&str]| describe(&args.iter().map(OsString::from).collect::<Vec<_>>());
        assert_eq!(line(&["make", "-j8", "all"]), "make -j8 all");
        let exact = "x".repeat(512);
        assert_eq!(line(&[&exact]), exact, "512 bytes fit");
        let long = "y".repeat(513);
        let cut = line(&[&long]);
        assert_eq!(
            cut,
            format!("{}...", "y".repeat(509)),
            "cut to 509 and marked"
        );
        // A two-byte character across byte 509: the cut moves back before it. On a thread
        // given 5 s: a cut that did not move back would look for a boundary forever.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let wide = format!("{}é{}", "z".repeat(508), "z".repeat(10));
            let _ = tx.send(describe(&[OsString::from(wide)]));
        });
        let cut = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("described within 5 s");
        assert_eq!(cut, format!("{}...", "z".repeat(508)));
        assert!(cut.len() <= 512);
    }
}
