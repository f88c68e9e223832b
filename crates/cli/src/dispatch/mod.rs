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

/// The queue database's name in the slot directory.
const DATABASE: &str = "queue.db";

/// The lock one dispatcher per directory holds for its life.
const DISPATCHER_LOCK: &str = "dispatcher.lock";

fn socket_path(pool: &Pool, given: Option<&Path>) -> PathBuf {
    given
        .map(Path::to_owned)
        .or_else(|| std::env::var_os("WORKLANE_SOCKET").map(PathBuf::from))
        .unwrap_or_else(|| pool.dir().path().join(SOCKET))
}

/// The dispatcher's part of the config: `admission` (`"dispatcher"`, the default, or
/// `"waiter"`), and the environment filter's `env_allow_prefixes` and `env_secret_words`
/// (arrays of strings; each replaces its default when given).
fn dispatcher_config(pool: &Pool) -> Result<(Mode, EnvFilter), Failure> {
    let path = &pool.locations().config;
    let raw = worklane_slotfile::read::read_path(path)
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    let doc = raw
        .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw).ok())
        .unwrap_or_default();
    let bad = |field: &str, expected: &str| {
        Failure::new(
            exit::CONFIG,
            format!(
                "config {}: field `{field}` must be {expected}",
                path.display()
            ),
        )
    };
    let mode = match doc.get("admission").map(|v| v.as_str()) {
        None | Some(Some("dispatcher")) => Mode::Dispatcher,
        Some(Some("waiter")) => Mode::Waiter,
        Some(_) => return Err(bad("admission", "\"dispatcher\" or \"waiter\"")),
    };
    let strings = |field: &str, default: &[&str]| -> Result<Vec<String>, Failure> {
        match doc.get(field) {
            None => Ok(default.iter().map(|s| (*s).to_owned()).collect()),
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .ok_or_else(|| bad(field, "an array of non-empty strings"))
                })
                .collect(),
            Some(_) => Err(bad(field, "an array of non-empty strings")),
        }
    };
    use worklane_dispatch::env::{DEFAULT_PREFIXES, DEFAULT_SECRET_WORDS};
    let env = EnvFilter::new(
        strings("env_allow_prefixes", DEFAULT_PREFIXES)?,
        strings("env_secret_words", DEFAULT_SECRET_WORDS)?,
    );
    Ok((mode, env))
}

fn connect(path: &Path) -> Result<UnixStream, Failure> {
    UnixStream::connect(path).map_err(|e| {
        Failure::new(
            exit::UNAVAILABLE,
            format!(
                "no dispatcher answers at {} ({e}): start one with `worklane dispatcher` (or the \
                 systemd units in contrib/systemd)",
                path.display()
            ),
        )
    })
}

/// Sends one request and reads its reply.
fn ask(
    path: &Path,
    request: &Wire,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> Result<(Reply, Vec<OwnedFd>), Failure> {
    ask_on(&connect(path)?, request, fds)
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
            code::LANE_QUEUED | code::NO_ADMITTED_ROW | code::NO_SUCH_ATTEMPT | code::NOT_FAILED,
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
