//! The dispatcher commands: `dispatcher` (the service, `serve`), `enqueue` (a launcher hands
//! its held lane over), `claim` (a driver takes the lane and slot and runs its command),
//! `queue ls`/`cancel`/`retry`/`prune` (`queue`) and `reconcile`. The decisions live in
//! `worklane_dispatch`; this module is the process around them: the socket,
//! systemd, the log, output. Here: what they share (the socket's path, one request and its
//! reply, the dispatcher's part of the config).

mod claim;
mod enqueue;
mod queue;
mod reconcile;
mod serve;

pub(crate) use claim::claim;
pub(crate) use enqueue::enqueue;
pub(crate) use queue::{cancel, listing, prune, retry, trouble};
pub(crate) use reconcile::reconcile;
pub(crate) use serve::serve;
use worklane_run::dispatcher::ended_words;

use crate::cli::{ClaimArgs, DispatcherArgs, EnqueueArgs};
use crate::exit::{self, Failure};
use crate::json;
use crate::out::{errln, outln};
use crate::watch::CliWatch;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use worklane_admission::Pool;
use worklane_dispatch::client;
use worklane_dispatch::env::EnvFilter;
use worklane_dispatch::lane::{is_own_lane, own_lane, retire_own_lane};
use worklane_dispatch::service::{Mode, Recovery, Settings, cancel_marker, lane_lock, valid_lane};
use worklane_dispatch::wire::{Enqueue, Reply, Request as Wire, code};
use worklane_lease::{Acquired, Clock, Options, Request, SystemClock, acquire, rfc3339_ms};
use worklane_run::{Supervisor, describe};

/// The dispatcher's socket: `given` (a `--socket`), else `$WORKLANE_SOCKET`, else the slot
/// directory's.
fn socket_path(pool: &Pool, given: Option<&Path>) -> PathBuf {
    let from_env = socket_from_env();
    client::socket_path(pool.dir(), given.or(from_env.as_deref()))
}

/// `$WORKLANE_SOCKET`, when set and not empty (an empty one is unset, as an empty
/// `AGENT_SLOTS_DIR` is).
pub(crate) fn socket_from_env() -> Option<PathBuf> {
    std::env::var_os("WORKLANE_SOCKET")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
}

/// The dispatcher's part of the config ([`worklane_dispatch::config`]: `admission`, and the
/// old environment-filter keys it ignores, said here), and its environment filter from its own
/// command line (`--env-allow-prefix`, `--env-secret-word`), never from the config, which every
/// member of the group may write.
fn dispatcher_config(pool: &Pool, args: &DispatcherArgs) -> Result<(Mode, EnvFilter), Failure> {
    let path = &pool.locations().config;
    let config = worklane_dispatch::config::read(path)
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    for (key, flag) in config.ignored {
        errln!(
            "worklane: config {} sets `{key}`, which the dispatcher ignores: any member of the \
             slot directory's group may write the config, and this setting decides what of one \
             user's environment reaches a driver; give `worklane dispatcher {flag} ...` \
             instead, and `worklane config unset {key}`",
            path.display()
        );
    }
    use worklane_dispatch::env::DEFAULT_PREFIXES;
    let prefixes = if args.env_allow_prefixes.is_empty() {
        DEFAULT_PREFIXES.iter().map(|p| (*p).to_owned()).collect()
    } else {
        args.env_allow_prefixes.clone()
    };
    if prefixes
        .iter()
        .chain(&args.env_secret_words)
        .any(String::is_empty)
    {
        return Err(Failure::new(
            exit::USAGE,
            "--env-allow-prefix and --env-secret-word take a non-empty value",
        ));
    }
    let env = EnvFilter::new(prefixes, args.env_secret_words.clone());
    Ok((config.mode, env))
}

/// A client's failure as the CLI says it: 69 when no dispatcher (or not the dispatcher)
/// answers, with what to do; 71 for the rest.
fn client_failure(e: &client::Error) -> Failure {
    match e {
        client::Error::Unavailable { .. } => Failure::new(
            exit::UNAVAILABLE,
            format!(
                "{}: start one with `worklane dispatcher` (or the systemd units in \
                 contrib/systemd)",
                exit::chain(e)
            ),
        ),
        client::Error::NotTheDispatcher { .. } => Failure::new(
            exit::UNAVAILABLE,
            format!(
                "{}. Tell the operator (`worklane dispatcher` restarted makes the socket again)",
                exit::chain(e)
            ),
        ),
        _ => Failure::new(exit::OS_ERROR, exit::chain(e)),
    }
}

/// Connects to the dispatcher's socket at `path`, checking who serves it before anything is
/// sent ([`client::connect`]).
fn connect(pool: &Pool, path: &Path) -> Result<UnixStream, Failure> {
    client::connect(pool.dir(), path).map_err(|e| client_failure(&e))
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
    client::ask(stream, request, fds).map_err(|e| client_failure(&e))
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
