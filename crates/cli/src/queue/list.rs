//! `queue ls` and `queue cancel`: the queued full runs (from the line and `full-run.lock`)
//! and the dispatcher's attempts.

use super::{ID_PREFIX, QUEUED_OWNER};
use crate::exit::{self, Failure};
use crate::json::problem_lines;
use crate::out::outln;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use worklane_admission::{FULL_RUN_LOCK, Kind, Pool};
use worklane_lease::rfc3339_ms;

/// A queued full run as `queue ls` shows it.
struct Queued {
    pid: u32,
    state: &'static str,
    position: Option<u32>,
    priority: i64,
    since: String,
    command: Option<String>,
    log: Option<String>,
}

impl Queued {
    fn json(&self) -> crate::json::FullRun {
        crate::json::FullRun {
            id: format!("{ID_PREFIX}{}", self.pid),
            pid: self.pid,
            state: self.state,
            position: self.position,
            priority: self.priority,
            since: self.since.clone(),
            command: self.command.clone(),
            log: self.log.clone(),
        }
    }
}

/// Every queued full run: those waiting in the full-run line (live entries whose record is a
/// runner's), then the one running, if `full-run.lock` is held by a runner.
fn queued_full_runs(pool: &Pool) -> Result<Vec<Queued>, Failure> {
    let mut out = Vec::new();
    let mut position = 0u32;
    for view in pool.line_views()? {
        if view.entry.kind != Kind::FullRun.label() || !view.live {
            continue;
        }
        position += 1;
        let Some(record) = view.record.as_ref() else {
            continue;
        };
        if record.owner.as_deref() != Some(QUEUED_OWNER) {
            continue;
        }
        let Some(pid) = record.pid() else { continue };
        out.push(Queued {
            pid,
            state: "waiting",
            position: Some(position),
            priority: view.entry.priority,
            since: rfc3339_ms(view.entry.start_ms),
            command: record.extra_str("command").map(str::to_owned),
            log: record.extra_str("log").map(str::to_owned),
        });
    }
    if !pool.idle()? {
        let path = pool.dir().file(FULL_RUN_LOCK)?;
        let record = worklane_lease::read_record(&path).ok().flatten();
        if let Some(record) = record
            && record.owner.as_deref() == Some(QUEUED_OWNER)
            && let Some(pid) = record.pid()
        {
            out.push(Queued {
                pid,
                state: "running",
                position: None,
                priority: 0,
                since: record.acquired_at.clone().unwrap_or_default(),
                command: record.extra_str("command").map(str::to_owned),
                log: record.extra_str("log").map(str::to_owned),
            });
        }
    }
    Ok(out)
}

/// `worklane queue ls`: the queued full runs, then the dispatcher's attempts.
pub(crate) fn list(json: bool, all: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let full_runs = queued_full_runs(&pool)?;
    let config = crate::config::Problem::of_pool(&pool);
    let mut problems = Vec::new();
    // A dispatcher that answers with something that is not a reply, or refuses to list, is
    // shown as a problem: the full runs and the rest of the view are still worth seeing.
    let dispatcher = listing_within(&pool, all, DISPATCHER_PATIENCE).unwrap_or_else(|failure| {
        problems.push(dispatcher_problem(&pool, &failure));
        crate::queued::Listing {
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
                full_runs: full_runs.iter().map(Queued::json).collect(),
                dispatcher: dispatcher.json,
                problems,
                config_problem: config.as_ref().map(crate::config::Problem::json),
            })
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(problem) = &config {
        outln!("{}", problem.line())?;
    }
    outln!("queued full runs: {}", full_runs.len())?;
    for q in &full_runs {
        let place = q.position.map_or_else(
            || "running".to_owned(),
            |p| format!("waiting, {p}. in line"),
        );
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
) -> Result<crate::queued::Listing, Failure> {
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
    let found = queued_full_runs(&pool)?.into_iter().find(|q| q.pid == pid);
    let Some(queued) = found else {
        return Err(Failure::new(
            exit::TEMP_FAIL,
            format!(
                "{id}: no queued full run waits with runner pid {pid} (`worklane queue ls` lists \
                 them)"
            ),
        ));
    };
    if queued.state == "running" {
        return Err(Failure::new(
            exit::TEMP_FAIL,
            format!(
                "{id} is no longer queued: its full run has been running since {}; to end it, \
                 `kill -TERM {pid}` (its runner halts the command) or `worklane stop-all`",
                queued.since
            ),
        ));
    }
    worklane_run::process::signal_pid(pid, rustix::process::Signal::TERM).map_err(|e| {
        Failure::new(
            exit::UNAVAILABLE,
            format!("{id}: cannot signal its runner (pid {pid}): {e}"),
        )
    })?;
    // Wait for it to leave (it looks at least every quarter second).
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !queued_full_runs(&pool)?.iter().any(|q| q.pid == pid) {
            crate::queued::cancelled(id, "full-run", queued.log.clone(), as_json)?;
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(Failure::new(
        exit::TEMP_FAIL,
        format!("{id}: its runner (pid {pid}) was sent SIGTERM but has not left the line in 5 s"),
    ))
}
