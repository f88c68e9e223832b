//! `queue ls` and `queue cancel`: the queued full runs (from the line and `full-run.lock`)
//! and the dispatcher's attempts.

use crate::exit::{self, Failure};
use crate::json::problem_lines;
use crate::out::outln;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use worklane_admission::Pool;
use worklane_run::queued::{Cancelled, ID_PREFIX, Queued, State};

/// A queued full run as `queue ls --json` shows it.
fn json_of(q: &Queued) -> crate::json::FullRun {
    let (state, position) = match q.state {
        State::Waiting { position } => ("waiting", Some(position)),
        State::Running => ("running", None),
    };
    crate::json::FullRun {
        id: format!("{ID_PREFIX}{}", q.pid),
        pid: q.pid,
        state,
        position,
        priority: q.priority,
        since: q.since.clone(),
        command: q.command.clone(),
        log: q.log.clone(),
    }
}

/// `worklane queue ls`: the queued full runs, then the dispatcher's attempts.
pub(crate) fn list(json: bool, all: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let full_runs = worklane_run::queued::list(&pool)?;
    let config = worklane_view::config_problem::Problem::of_pool(&pool);
    let mut problems = Vec::new();
    // A dispatcher that answers with something that is not a reply, or refuses to list, is
    // shown as a problem: the full runs and the rest of the view are still worth seeing.
    let dispatcher = listing_within(&pool, all, DISPATCHER_PATIENCE).unwrap_or_else(|failure| {
        problems.push(dispatcher_problem(&pool, &failure));
        crate::queue_say::Listing {
            json: crate::json::DispatcherList::none(format!(
                "the dispatcher did not answer with a list: {}",
                failure.message
            )),
            lines: vec![format!(
                "attempts: unknown (the dispatcher did not answer with a list)"
            )],
        }
    });
    if json {
        outln!(
            "{}",
            crate::json::line(&crate::json::QueueList {
                version: crate::json::VERSION,
                full_runs: full_runs.iter().map(json_of).collect(),
                dispatcher: dispatcher.json,
                problems,
                config_problem: config
                    .as_ref()
                    .map(worklane_view::config_problem::Problem::json),
            })
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(problem) = &config {
        outln!("{}", problem.line())?;
    }
    outln!("queued full runs: {}", full_runs.len())?;
    for q in &full_runs {
        let place = match q.state {
            State::Waiting { position } => format!("waiting, {position}. in line"),
            State::Running => "running".to_owned(),
        };
        outln!(
            "{ID_PREFIX}{}  {place}  priority {}  since {}  `{}`  log {}",
            q.pid,
            q.priority,
            q.since,
            q.command.as_deref().unwrap_or("-"),
            q.log.as_deref().unwrap_or("-")
        )?;
    }
    for line in &dispatcher.lines {
        outln!("{line}")?;
    }
    for line in problem_lines(&problems) {
        outln!("{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// How long `queue ls` waits for the dispatcher's answer: a dispatcher answers a listing at
/// once, so a process at its socket that accepts and says nothing is shown as a problem
/// rather than holding the view forever.
const DISPATCHER_PATIENCE: Duration = Duration::from_secs(5);

/// The dispatcher's listing, or a failure when it does not come within `patience` (the
/// asking thread is left behind: it ends with this process).
fn listing_within(
    pool: &Pool,
    all: bool,
    patience: Duration,
) -> Result<crate::queue_say::Listing, Failure> {
    let (send, answer) = std::sync::mpsc::channel();
    let asking = pool.clone();
    let spawned = std::thread::Builder::new()
        .name("queue-ls".to_owned())
        .spawn(move || {
            let _ = send.send(crate::dispatch::listing(&asking, all));
        });
    if spawned.is_err() {
        return crate::dispatch::listing(pool, all);
    }
    answer.recv_timeout(patience).unwrap_or_else(|_| {
        Err(Failure::new(
            exit::OS_ERROR,
            format!(
                "it accepted the connection but did not answer within {} s",
                patience.as_secs()
            ),
        ))
    })
}

/// The dispatcher's socket answered `queue ls` with an error (not a reply, a refusal): what
/// that means and what to do.
fn dispatcher_problem(pool: &Pool, failure: &Failure) -> crate::json::Problem {
    let socket = std::env::var_os("WORKLANE_SOCKET")
        .filter(|s| !s.is_empty())
        .map_or_else(|| pool.dir().path().join("dispatcher.sock"), PathBuf::from);
    crate::json::Problem {
        name: socket
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        what: format!(
            "the process serving {} did not list the queue ({}); its attempts are not shown",
            socket.display(),
            failure.message
        ),
        fix: "if it is a worklane dispatcher, see its log (`journalctl -u worklane-dispatcher` \
              under systemd) and restart it; if it is not one, stop it and start `worklane \
              dispatcher`; a refusal for permission: run as a member of the slot directory's \
              group"
            .to_owned(),
        blocks: None,
    }
}

/// `worklane queue cancel ID`: a queued full run (`fr-<pid>`) or a dispatcher attempt.
pub(crate) fn cancel(id: &str, as_json: bool) -> Result<ExitCode, Failure> {
    let Some(pid) = id.strip_prefix(ID_PREFIX) else {
        return crate::dispatch::cancel(id, as_json);
    };
    let pid: u32 = pid.parse().map_err(|_| {
        Failure::new(
            exit::USAGE,
            format!("{id:?}: a queued full run is `{ID_PREFIX}<runner pid>`, as `queue ls` shows"),
        )
    })?;
    let pool = crate::pool()?;
    match worklane_run::queued::cancel(&pool, pid)? {
        Cancelled::Left { log } => {
            crate::queue_say::cancelled(id, "full-run", log, as_json)?;
            Ok(ExitCode::SUCCESS)
        }
        Cancelled::NotQueued => Err(Failure::new(
            exit::TEMP_FAIL,
            format!(
                "{id}: no queued full run waits with runner pid {pid} (`worklane queue ls` lists \
                 them)"
            ),
        )),
        Cancelled::Running { since } => Err(Failure::new(
            exit::TEMP_FAIL,
            format!(
                "{id} is no longer queued: its full run has been running since {since}; to end \
                 it, `kill -TERM {pid}` (its runner halts the command) or `worklane stop-all`"
            ),
        )),
        Cancelled::Unproven { why } => Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "{id}: nothing was signalled: {why}, so the process at pid {pid} is not proved to \
                 be its runner (a line entry is a file any member of the group may put there)"
            ),
        )),
        Cancelled::StillThere => Err(Failure::new(
            exit::TEMP_FAIL,
            format!(
                "{id}: its runner (pid {pid}) was sent SIGTERM but has not left the line in 5 s"
            ),
        )),
    }
}
