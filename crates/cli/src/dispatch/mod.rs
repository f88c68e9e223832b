//! The dispatcher commands: `dispatcher` (the service, `serve`), `enqueue` (a launcher hands
//! its held lane over), `claim` (a driver takes the lane and slot and runs its command),
//! `queue ls`/`cancel`/`retry`/`prune` (`queue`) and `reconcile`. The decisions live in
//! `worklane_dispatch`; this module is the process around them: the socket,
//! systemd, the log, output. Here: what they share (the socket's path, one request and its
//! reply, the dispatcher's part of the config).

mod claim;
mod enqueue;
mod journal;
mod queue;
mod reconcile;
mod serve;

pub(crate) use claim::claim;
pub(crate) use enqueue::enqueue;
use journal::{Journal, ended_words};
pub(crate) use queue::{cancel, listing, prune, retry, trouble};
pub(crate) use reconcile::reconcile;
pub(crate) use serve::serve;

use crate::cli::{ClaimArgs, DispatcherArgs, EnqueueArgs};
use crate::exit::{self, Failure};
use crate::json;
use crate::out::{errln, outln};
use crate::watch::CliWatch;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use worklane_admission::Pool;
use worklane_dispatch::env::EnvFilter;
use worklane_dispatch::lane::{is_own_lane, own_lane, retire_own_lane};
use worklane_dispatch::server::{Event, Server};
use worklane_dispatch::service::{
    Dispatcher, Mode, Recovery, Settings, StartFailure, cancel_marker, lane_lock, valid_lane,
};
use worklane_dispatch::wire::{Enqueue, Reply, Request as Wire, code};
use worklane_lease::{Acquired, Clock, Options, Request, SystemClock, acquire, rfc3339_ms};
use worklane_run::{Supervisor, describe};
use worklane_transport::Trust;

/// The socket's name in the slot directory.
const SOCKET: &str = "dispatcher.sock";

/// The lock one dispatcher per directory holds for its life.
const DISPATCHER_LOCK: &str = "dispatcher.lock";

fn socket_path(pool: &Pool, given: Option<&Path>) -> PathBuf {
    given
        .map(Path::to_owned)
        .or_else(|| std::env::var_os("WORKLANE_SOCKET").map(PathBuf::from))
        .unwrap_or_else(|| pool.dir().path().join(SOCKET))
}

/// The dispatcher's part of the config: `admission` (`"dispatcher"`, the default, or
/// `"waiter"`). What crosses from one user's enqueue to the driver (the environment filter) is
/// never read from the config, which every member of the group may write: it comes from the
/// dispatcher's own command line (`--env-allow-prefix`, `--env-secret-word`), and the config's
/// old `env_allow_prefixes` and `env_secret_words` are ignored, with a warning.
fn dispatcher_config(pool: &Pool, args: &DispatcherArgs) -> Result<(Mode, EnvFilter), Failure> {
    let path = &pool.locations().config;
    let raw = worklane_slotfile::read::read_path(path)
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    let doc = raw
        .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw).ok())
        .unwrap_or_default();
    let mode = match doc.get("admission").map(|v| v.as_str()) {
        None | Some(Some("dispatcher")) => Mode::Dispatcher,
        Some(Some("waiter")) => Mode::Waiter,
        Some(_) => {
            return Err(Failure::new(
                exit::CONFIG,
                format!(
                    "config {}: field `admission` must be \"dispatcher\" or \"waiter\"",
                    path.display()
                ),
            ));
        }
    };
    for (key, flag) in [
        ("env_allow_prefixes", "--env-allow-prefix"),
        ("env_secret_words", "--env-secret-word"),
    ] {
        if doc.get(key).is_some() {
            errln!(
                "worklane: config {} sets `{key}`, which the dispatcher ignores: any member of \
                 the slot directory's group may write the config, and this setting decides \
                 what of one user's environment reaches a driver; give `worklane dispatcher \
                 {flag} ...` instead, and `worklane config unset {key}`",
                path.display()
            );
        }
    }
    use worklane_dispatch::env::DEFAULT_PREFIXES;
    let prefixes = if args.env_allow_prefixes.is_empty() {
        DEFAULT_PREFIXES.iter().map(|p| (*p).to_owned()).collect()
    } else {
        args.env_allow_prefixes.clone()
    };
    if let Some(empty) = prefixes
        .iter()
        .chain(&args.env_secret_words)
        .find(|p| p.is_empty())
    {
        let _ = empty;
        return Err(Failure::new(
            exit::USAGE,
            "--env-allow-prefix and --env-secret-word take a non-empty value",
        ));
    }
    let env = EnvFilter::new(prefixes, args.env_secret_words.clone());
    Ok((mode, env))
}

/// Connects to the dispatcher's socket at `path` and checks who serves it before anything is
/// sent: root, the slot directory's owner, or this user (`Trust::serves`, by the kernel's
/// `SO_PEERCRED`). Anyone else is a member of the group serving a socket of its own at the
/// name, and is told nothing: no descriptor, no command, no environment.
fn connect(pool: &Pool, path: &Path) -> Result<UnixStream, Failure> {
    let stream = UnixStream::connect(path).map_err(|e| {
        Failure::new(
            exit::UNAVAILABLE,
            format!(
                "no dispatcher answers at {} ({e}): start one with `worklane dispatcher` (or the \
                 systemd units in contrib/systemd)",
                path.display()
            ),
        )
    })?;
    let server = worklane_transport::peer(&stream)
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    let trust = Trust::of_dir(pool.dir()).map_err(|e| {
        Failure::new(
            exit::OS_ERROR,
            format!("cannot stat {}: {e}", pool.dir().path().display()),
        )
    })?;
    let me = rustix::process::geteuid().as_raw();
    if !trust.serves(server.uid, me) {
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "refused to use {}: it is served by uid {} (pid {}), which is neither root, the \
                 slot directory's owner (uid {}) nor you (uid {me}), so it is not the \
                 dispatcher: another user may have put a socket of its own at that name; \
                 nothing was sent. Tell the operator (`worklane dispatcher` restarted makes the \
                 socket again)",
                path.display(),
                server.uid,
                server.pid.map_or("?".to_owned(), |p| p.to_string()),
                trust.owner
            ),
        ));
    }
    Ok(stream)
}

/// Sends one request and reads its reply.
fn ask(
    pool: &Pool,
    path: &Path,
    request: &Wire,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> Result<(Reply, Vec<OwnedFd>), Failure> {
    ask_on(&connect(pool, path)?, request, fds)
}

/// Sends one request on a connected stream and reads its reply.
fn ask_on(
    stream: &UnixStream,
    request: &Wire,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> Result<(Reply, Vec<OwnedFd>), Failure> {
    let line = worklane_dispatch::wire::request_line(request);
    let io = |e: worklane_transport::Error| Failure::new(exit::OS_ERROR, exit::chain(&e));
    worklane_transport::send(stream, &line, fds).map_err(io)?;
    let (reply, fds) = worklane_transport::recv(stream).map_err(io)?;
    let reply: Reply = serde_json::from_slice(&reply).map_err(|e| {
        Failure::new(
            exit::OS_ERROR,
            format!("the dispatcher's reply is not one: {e}"),
        )
    })?;
    Ok((reply, fds))
}

fn refused(reply: &Reply) -> Failure {
    let code = match reply.error.as_deref() {
        Some(code::WAITER_MODE | code::PERMISSION) => exit::UNAVAILABLE,
        Some(
            code::LANE_QUEUED
            | code::NO_ADMITTED_ROW
            | code::NO_SUCH_ATTEMPT
            | code::NOT_FAILED
            | code::LIMIT,
        ) => exit::TEMP_FAIL,
        Some(code::BAD_REQUEST | code::MISSING_FIELD) => exit::USAGE,
        _ => exit::OS_ERROR,
    };
    Failure::new(
        code,
        format!(
            "the dispatcher refused: {} ({})",
            reply.message.as_deref().unwrap_or("no reason given"),
            reply.error.as_deref().unwrap_or("?")
        ),
    )
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
