//! The admission dispatcher as a process (`worklane dispatcher`, or any Rust service that
//! embeds one): the one dispatcher of a slot directory (it holds `dispatcher.lock` for its
//! life), its socket (systemd's, its mode narrowed through a descriptor; or made through the
//! slot directory's descriptor), its private state directory, the drivers it starts and
//! reaps ([`crate::driver`]), and systemd's readiness and watchdog, until a stop flag is set.
//!
//! What happens is told to the caller ([`Said`]), who decides what to print; this module
//! prints nothing ([`log::Log`] words the service loop's events as `worklane dispatcher`
//! logs them).

pub mod log;

use crate::driver::{Launcher, reap};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use worklane_admission::Pool;
use worklane_dispatch::client::{DISPATCHER_LOCK, SOCKET};
use worklane_dispatch::server::{Event, Server};
use worklane_dispatch::service::{Dispatcher, Recovery, Settings};
use worklane_lease::{Acquired, Options as LeaseOptions, Request};
use worklane_transport::Trust;

/// How to serve.
pub struct Options {
    /// The socket: the slot directory's [`SOCKET`] unless given elsewhere (systemd's passed
    /// socket, when there is one, wins over both).
    pub socket: PathBuf,
    /// The private state directory (`worklane_dispatch::state`: its default when `None`).
    pub state_dir: Option<PathBuf>,
    /// The dispatcher's settings.
    pub settings: Settings,
    /// The most connections of one user kept at once.
    pub connections_per_user: usize,
    /// A last adjustment of the server before it runs: a test's crash point
    /// (`Server::crash_at`, the crash tests' seam), or nothing.
    pub tune: Option<Tune>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("socket", &self.socket)
            .field("state_dir", &self.state_dir)
            .field("settings", &self.settings)
            .field("connections_per_user", &self.connections_per_user)
            .field("tune", &self.tune.is_some())
            .finish()
    }
}

/// A last adjustment of the [`Server`] before it runs ([`Options::tune`]).
pub type Tune = Box<dyn for<'a> FnOnce(Server<'a>) -> Server<'a>>;

/// What the dispatcher tells its caller, for its log.
#[derive(Debug)]
pub enum Said<'a> {
    /// What recovery found at the start (damage, lost rows, a database an older worklane kept
    /// in the slot directory...).
    Recovery(&'a Recovery),
    /// Something about the socket an operator should know (a mode narrowed or left alone, a
    /// file set aside from its name).
    Socket(String),
    /// It serves now.
    Serving {
        /// The socket.
        socket: &'a Path,
    },
    /// A step of the service loop (an admission, a start, a refusal, a trouble...).
    Event(&'a Event),
}

/// Why the dispatcher could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another dispatcher serves the directory already.
    #[error("another dispatcher already serves {dir}: {refusal}")]
    Busy {
        /// The slot directory.
        dir: PathBuf,
        /// Who holds `dispatcher.lock`.
        refusal: Box<worklane_lease::Refusal>,
    },
    /// `dispatcher.lock` could not be taken (not held by another: broken).
    #[error("cannot take dispatcher.lock in {dir}")]
    Lock {
        /// The slot directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: Box<worklane_lease::acquire::Error>,
    },
    /// A socket given elsewhere than the slot directory has something else at its name.
    #[error("{path} exists and is not a socket; move it aside or give another --socket")]
    NotASocket {
        /// The socket's path.
        path: PathBuf,
    },
    /// The socket could not be made.
    #[error("cannot {op} the dispatcher socket {path}")]
    Socket {
        /// What was being done.
        op: &'static str,
        /// The socket's path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The state directory could not be used.
    #[error("cannot use the dispatcher's state directory")]
    State(#[source] worklane_dispatch::state::Error),
    /// The queue could not be opened or recovered, or the service failed.
    #[error("the dispatcher failed")]
    Service(#[source] worklane_dispatch::service::Error),
}

/// Serves the admission dispatcher of `pool`'s directory until `stop` is set (a SIGTERM or
/// SIGINT handler sets it), telling `say` what happens. The queued rows stay in the database
/// for the next dispatcher.
pub fn serve(
    pool: &Pool,
    options: Options,
    stop: &AtomicBool,
    mut say: impl FnMut(Said<'_>),
) -> Result<(), Error> {
    let dir = pool.dir().clone();
    let held = match worklane_lease::acquire(
        &dir,
        DISPATCHER_LOCK,
        &Request::new("worklane dispatcher"),
        &LeaseOptions::process(),
    ) {
        Ok(Acquired::Held(lease)) => lease,
        Ok(Acquired::Refused(refusal)) => {
            return Err(Error::Busy {
                dir: dir.path().to_owned(),
                refusal: Box::new(refusal),
            });
        }
        Err(source) => {
            return Err(Error::Lock {
                dir: dir.path().to_owned(),
                source: Box::new(source),
            });
        }
    };
    let listener = listen(pool, &options.socket, &mut say)?;
    // One descriptor per queued lane (and per reserved slot): a soft limit of 1 024 would
    // refuse enqueues long before the queue is large.
    let nofile = crate::process::raise_nofile();
    let state = worklane_dispatch::state::open(
        options.state_dir.as_deref(),
        dir.path(),
        &worklane_slotfile::Environment::from_process(),
    )
    .map_err(Error::State)?;
    let dispatcher =
        Dispatcher::open(pool.clone(), &state, options.settings).map_err(Error::Service)?;
    say(Said::Recovery(dispatcher.recovery()));
    say(Said::Serving {
        socket: &options.socket,
    });
    let exits = reap();
    let stat = rustix::fs::fstat(&dir).map_err(|e| Error::Socket {
        op: "stat the slot directory of",
        path: options.socket.clone(),
        source: e.into(),
    })?;
    let trust = Trust {
        owner: stat.st_uid,
        group: stat.st_gid,
    };
    let alive = Arc::new(AtomicU64::new(worklane_identity::Place::boot_clock_ms()));
    watchdog(Arc::clone(&alive));
    let launcher = Launcher {
        pool: pool.clone(),
        socket: options.socket.clone(),
        nofile,
    };
    let server = Server::new(
        dispatcher,
        listener,
        trust,
        |admitted| launcher.launch(admitted),
        |event| {
            if matches!(event, Event::Tick) {
                alive.store(worklane_identity::Place::boot_clock_ms(), Ordering::SeqCst);
            }
            if let Event::Ended(ended) = &event
                && let Some(log) = &ended.log
            {
                launcher.note(
                    log,
                    ended.uid,
                    &format!("attempt {} {}", ended.attempt, ended_words(ended)),
                );
            }
            say(Said::Event(&event));
        },
    )
    .with_connections_per_user(options.connections_per_user)
    .with_exits(|| {
        std::mem::take(
            &mut *exits
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    });
    let mut server = match options.tune {
        Some(tune) => tune(server),
        None => server,
    };
    notify(&format!(
        "READY=1\nSTATUS=serving {}",
        options.socket.display()
    ));
    let served = server.run(stop);
    notify("STOPPING=1");
    drop(held);
    served.map_err(Error::Service)
}

/// How an attempt ended, in the words of its log's last line and the dispatcher's log:
/// its outcome, then how (`exited with exit status 0 (...)`, `killed killed by signal 9
/// (...)`, `ended with its status in its log (...)`).
#[must_use]
pub fn ended_words(ended: &worklane_dispatch::wire::EndedView) -> String {
    let how = match (ended.status, ended.signal) {
        (_, Some(signal)) => format!("killed by signal {signal}"),
        (Some(status), None) => format!("with exit status {status}"),
        (None, None) => "with its status in its log".to_owned(),
    };
    format!("{} {how} ({})", ended.outcome, ended.detail)
}

/// `sd_notify(3)`: tells systemd (when it started us with `NOTIFY_SOCKET`) about our state.
fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(socket) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let path = PathBuf::from(path);
    #[cfg(target_os = "linux")]
    if let Some(name) = path.to_str().and_then(|p| p.strip_prefix('@')) {
        use std::os::linux::net::SocketAddrExt;
        if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name) {
            let _ = socket.send_to_addr(state.as_bytes(), &addr);
        }
        return;
    }
    let _ = socket.send_to(state.as_bytes(), &path);
}

/// systemd's watchdog (`WATCHDOG_USEC`): `WATCHDOG=1` every half interval, as long as the
/// service loop ticked within the interval (`alive`, on the boot clock), so that a loop stuck
/// in a step is restarted.
fn watchdog(alive: Arc<AtomicU64>) {
    let Some(usec) = std::env::var("WATCHDOG_USEC")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&u| u > 0)
    else {
        return;
    };
    let interval_ms = usec / 1000;
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis((interval_ms / 2).max(1)));
            let last = alive.load(Ordering::SeqCst);
            if worklane_identity::Place::boot_clock_ms().saturating_sub(last) <= interval_ms {
                notify("WATCHDOG=1");
            }
        }
    });
}

/// Binds the dispatcher's socket: the one systemd passed, or a new one at `path`, mode 0660
/// and the directory's group (the directory is setgid). A stale socket left by a dead
/// dispatcher is removed first (we hold the dispatcher lock). At the slot directory's own
/// name every step goes through the directory's descriptor, never a path a member could
/// redirect: anything but a socket there (a member may have put a file, a link or a FIFO at
/// the name) is renamed aside to `dispatcher.sock.refused-<ms>`, said, and the socket made.
fn listen(pool: &Pool, path: &Path, say: &mut impl FnMut(Said<'_>)) -> Result<UnixListener, Error> {
    if let Some(fd) = crate::process::systemd_listener() {
        let listener = UnixListener::from(fd);
        narrow_passed_socket(&listener, say);
        return Ok(listener);
    }
    let io = |op: &'static str, source: std::io::Error| Error::Socket {
        op,
        path: path.to_owned(),
        source,
    };
    let in_dir = path == pool.dir().path().join(SOCKET);
    let bind_at = if in_dir {
        set_aside_unless_socket(pool, path, say).map_err(|e| io("clear the name of", e))?;
        // Bound through the directory's descriptor: the magic link names the directory held
        // open, whatever has become of its path since.
        PathBuf::from(format!(
            "/proc/self/fd/{}/{SOCKET}",
            std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(pool.dir()))
        ))
    } else {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(Error::NotASocket {
                    path: path.to_owned(),
                });
            }
            #[allow(
                clippy::disallowed_methods,
                reason = "a socket given outside the slot directory, by its path as given"
            )]
            std::fs::remove_file(path).map_err(|e| io("remove the stale", e))?;
        }
        path.to_owned()
    };
    let old = rustix::process::umask(rustix::fs::Mode::from_bits_truncate(0o117));
    let bound = UnixListener::bind(&bind_at);
    rustix::process::umask(old);
    bound.map_err(|e| io("bind", e))
}

/// At the socket's name in the slot directory: nothing, or a stale socket removed, or anything
/// else renamed aside (never followed, opened or removed) and said.
fn set_aside_unless_socket(
    pool: &Pool,
    path: &Path,
    say: &mut impl FnMut(Said<'_>),
) -> std::io::Result<()> {
    let stat = match rustix::fs::statat(pool.dir(), SOCKET, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let name = pool.dir().file(SOCKET).map_err(std::io::Error::other)?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Socket {
        name.remove().map_err(std::io::Error::other)?;
        return Ok(());
    }
    let aside = format!(
        "{SOCKET}.refused-{}",
        worklane_lease::Clock::now_ms(&worklane_lease::SystemClock)
    );
    name.rename(&aside).map_err(std::io::Error::other)?;
    say(Said::Socket(format!(
        "{} was not a socket (a file someone put at its name); it was renamed {aside} and the \
         dispatcher's socket made",
        path.display()
    )));
    Ok(())
}

/// A socket systemd made (socket activation) should not let anyone outside the directory's
/// group connect: the unit asks for `SocketMode=0660`, but a unit edited or an older systemd
/// may leave 0644 or 0666. The bits for others are taken away through one descriptor of the
/// name opened without following a link, and only from a socket of ours with one name
/// (`worklane_transport::mode::narrow`): the name is in a directory the group may write, so a
/// member may have put anything there. Whatever the mode, each connection's peer is checked.
fn narrow_passed_socket(listener: &UnixListener, say: &mut impl FnMut(Said<'_>)) {
    use worklane_transport::mode::{Narrowed, narrow};
    let Ok(addr) = listener.local_addr() else {
        return;
    };
    let Some(path) = addr.as_pathname() else {
        // An abstract socket has no mode: the peer check is all there is.
        return;
    };
    match narrow(path) {
        Ok(Narrowed::Already { .. }) => {}
        Ok(Narrowed::Done { from, to }) => say(Said::Socket(format!(
            "the socket systemd passed, {}, had mode {from:04o}; set to {to:04o} (the unit \
             should say SocketMode=0660)",
            path.display()
        ))),
        Ok(Narrowed::Refused { why }) => say(Said::Socket(format!(
            "the mode of the socket systemd passed, {}, is left as it is ({why}); every \
             connection's peer is checked all the same",
            path.display()
        ))),
        Err(e) => say(Said::Socket(format!(
            "cannot examine the socket systemd passed, {} ({e}); every connection's peer is \
             checked all the same",
            path.display()
        ))),
    }
}
