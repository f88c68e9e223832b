//! The dispatcher's drivers as processes: each started detached, as the one who enqueued it,
//! with an environment built for it and its output appended to its attempt's log; and reaped
//! when it ends, its status handed to the service loop.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use worklane_admission::Pool;
use worklane_dispatch::driver::{Account, Start, environment};
use worklane_dispatch::service::{Admitted, Exit, Started};
use worklane_lease::{Clock, SystemClock, rfc3339_ms};

/// The mode of a driver's log: its user reads and writes it, the directory's group reads it.
const LOG_MODE: u32 = 0o640;

/// What every driver start needs.
pub struct Launcher {
    /// The dispatcher's pool (its directory holds the logs).
    pub pool: Pool,
    /// The dispatcher's socket, which the driver claims on.
    pub socket: PathBuf,
    /// The soft limit of descriptors the dispatcher was started with, for its drivers.
    pub nofile: Option<rustix::process::Rlimit>,
}

impl Launcher {
    /// Starts `admitted`'s driver: detached (a session of its own), as the uid, gid and groups
    /// that enqueued it when the dispatcher is root (as itself otherwise: it queues nobody
    /// else's work), with a fresh environment, and its output appended to
    /// `queue-<attempt>.log` (owned by that user), no descriptor of the dispatcher's but 0, 1
    /// and 2 reaching it. Returns the driver's pid and a pidfd of it (Linux), opened before
    /// anyone could reap it: the only handle the dispatcher signals it by.
    pub fn launch(&self, admitted: &Admitted) -> std::io::Result<Started> {
        let attempt = &admitted.attempt;
        let enqueuer = attempt.enqueuer.as_ref().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the attempt records no enqueuer, so it has nobody to run as",
            )
        })?;
        let (program, args) = attempt
            .args
            .split_first()
            .ok_or_else(|| std::io::Error::other("the attempt has no driver command"))?;
        let root = rustix::process::geteuid().is_root();
        let creds = root.then(|| crate::sys::Credentials {
            uid: enqueuer.uid,
            gid: enqueuer.gid,
            groups: enqueuer.groups.clone(),
        });
        let log = self.log(&attempt.log_name(), root.then_some(enqueuer.uid))?;
        let mut line = std::fs::File::from(log.try_clone()?);
        let _ = writeln!(
            line,
            "worklane: {} start {} of attempt {} (lane {}) as uid {}: {}",
            rfc3339_ms(SystemClock.now_ms()),
            attempt.starts + 1,
            attempt.id,
            attempt.lane,
            enqueuer.uid,
            crate::describe(&attempt.args.iter().map(OsString::from).collect::<Vec<_>>())
        );
        let err = log.try_clone()?;
        let uid = if root {
            enqueuer.uid
        } else {
            rustix::process::geteuid().as_raw()
        };
        let account = Account::of(uid);
        let env = environment(
            &Start {
                row: &attempt.env,
                account: &account,
                uid,
                attempt: &attempt.id,
                token: &admitted.token,
                socket: &self.socket,
                lane: &attempt.lane,
            },
            inherited(),
        );
        let env: Vec<(&OsStr, &OsStr)> = env
            .iter()
            .map(|(name, value)| (name.as_os_str(), value.as_os_str()))
            .collect();
        let args: Vec<OsString> = args.iter().map(Into::into).collect();
        let mut cmd = Command::new(program);
        cmd.args(&args)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        // The driver gets the descriptor limit the dispatcher was started with, and is searched
        // for and run as `worklane run`'s command is.
        crate::sys::detach(
            &mut cmd,
            OsStr::new(program),
            &args,
            &env,
            self.nofile,
            creds.as_ref(),
        )?;
        // Held across the start: std reaps a child whose exec failed itself, by its pid, and
        // panics if the reaper took that child first.
        let _starting = STARTING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        #[allow(
            clippy::disallowed_methods,
            reason = "product code: the dispatcher starts each admitted attempt's driver"
        )]
        let child = cmd.spawn()?;
        let pid = child.id();
        // Still under `STARTING`: the reaper cannot have reaped it, so the pid is this child.
        let pidfd = pidfd_of(pid);
        Ok(Started { pid, pidfd })
    }

    /// The log `name`, opened for appending (created if missing), given to `owner`. Whatever
    /// else is at the name (a link, a FIFO, another user's file: any member of the group may
    /// put one there) is renamed aside to `<name>.refused-<ms>`, never written, and the log
    /// made anew: a planted file fails no attempt.
    fn log(&self, name: &str, owner: Option<u32>) -> std::io::Result<OwnedFd> {
        let path = self.pool.dir().file(name).map_err(std::io::Error::other)?;
        match path.open_log(LOG_MODE, owner) {
            Ok(fd) => Ok(fd),
            Err(e)
                if e.source.kind() == std::io::ErrorKind::InvalidData
                    || rustix::io::Errno::from_io_error(&e.source).is_some_and(|n| {
                        // A link (O_NOFOLLOW), a directory, a FIFO nobody reads (O_NONBLOCK).
                        [
                            rustix::io::Errno::LOOP,
                            rustix::io::Errno::ISDIR,
                            rustix::io::Errno::NXIO,
                        ]
                        .contains(&n)
                    }) =>
            {
                path.rename(&format!("{name}.refused-{}", SystemClock.now_ms()))
                    .map_err(std::io::Error::other)?;
                path.open_log(LOG_MODE, owner)
                    .map_err(std::io::Error::other)
            }
            Err(e) => Err(std::io::Error::other(e)),
        }
    }

    /// Appends `text` as one line to attempt `log`'s file, if it is the attempt's (the end of
    /// a run, which the driver's own output does not say when it was killed); `owner` is the
    /// enqueuer, to whom a root dispatcher gave the log.
    pub fn note(&self, log: &str, owner: Option<u32>, text: &str) {
        let Ok(path) = self.pool.dir().file(log) else {
            return;
        };
        let owner = owner.filter(|_| rustix::process::geteuid().is_root());
        if let Ok(fd) = path.open_log(LOG_MODE, owner) {
            let mut file = std::fs::File::from(fd);
            let _ = writeln!(
                file,
                "worklane: {} {text}",
                rfc3339_ms(SystemClock.now_ms())
            );
        }
    }
}

/// The dispatcher's variables a driver may get ([`worklane_dispatch::driver::PASSED_ON`]
/// picks), with the test-isolation root of a test run named explicitly: a driver started in
/// a test is confined as its dispatcher is, though it inherits nothing else.
fn inherited() -> Vec<(OsString, OsString)> {
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    if let Some(run) = worklane_slotfile::Environment::from_process().test_run() {
        vars.push((
            worklane_slotfile::TEST_ROOT_VAR.into(),
            run.root.into_os_string(),
        ));
    }
    vars
}

/// A pidfd of the child `pid` (Linux; `None` elsewhere or where the kernel has none).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn pidfd_of(pid: u32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn pidfd_of(_pid: u32) -> Option<OwnedFd> {
    None
}

/// Held while a driver is being started ([`Launcher::launch`]) and while the reaper reaps
/// ([`reap`]): a child std is starting is never reaped by anyone but std.
static STARTING: Mutex<()> = Mutex::new(());

/// Starts the thread that reaps the dispatcher's drivers as they end (they run detached, but
/// are its children) and returns where their exits collect, for the service loop to take. It
/// learns that a child has exited without reaping it (`WNOWAIT`), then reaps every exited
/// child under `STARTING`: a driver whose exec failed is reaped by std's `spawn`, which
/// holds the lock until it has, and would panic if its child were gone.
#[must_use]
pub fn reap() -> Arc<Mutex<Vec<Exit>>> {
    use rustix::process::{WaitId, WaitIdOptions, WaitOptions};
    let exits = Arc::new(Mutex::new(Vec::new()));
    let collected = Arc::clone(&exits);
    std::thread::spawn(move || {
        loop {
            match rustix::process::waitid(
                WaitId::All,
                WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
            ) {
                Ok(_) => {
                    let _starting = STARTING
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
                        let Ok(pid) = u32::try_from(pid.as_raw_nonzero().get()) else {
                            continue;
                        };
                        let exit = Exit {
                            pid,
                            status: status.exit_status(),
                            signal: status.terminating_signal(),
                        };
                        collected
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(exit);
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                // No child at all (ECHILD): look again later.
                Err(_) => std::thread::sleep(std::time::Duration::from_secs(1)),
            }
        }
    });
    exits
}
