//! `worklane queue full-run`: a detached runner that waits for its turn and survives the
//! shell that queued it; and `queue ls` / `queue cancel`, which show and cancel both the
//! queued full runs and the dispatcher's attempts.
//!
//! A runner stands in the full-run line (PROTOCOL.md 12.9) from the moment it starts until it
//! takes `full-run.lock`, through STOP, a drain and a busy idle probe: its entry keeps its
//! place, and its record (owner [`QUEUED_OWNER`], `command`, `log`) is what `slots` and
//! `queue ls` show. `queue cancel fr-<pid>` sends it SIGTERM: waiting, it leaves the line and
//! logs why; if it has just started its command, that command is halted as by STOP.

use crate::exit::{self, Failure};
use crate::json::problem_lines;
use crate::out::{errln, outln, sayln};
use crate::supervise::{Started, Watch, describe, supervise};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use worklane_admission::{FULL_RUN_LOCK, Kind, Pool, Take};
use worklane_lease::{Clock, Record, Request, SystemClock, rfc3339_ms};

/// The `owner` of a queued full run's records (its line entry, then `full-run.lock`).
pub(crate) const QUEUED_OWNER: &str = "queued full run";

/// How a queued full run is named in `queue ls` and `queue cancel`: `fr-<runner pid>`.
const ID_PREFIX: &str = "fr-";

/// How often a runner retries while STOP or a drain is in force, and its idle probe.
const OPERATOR_RETRY: Duration = Duration::from_secs(1);
const PROBE_RETRY: Duration = Duration::from_secs(5);

pub(crate) fn queue_full_run(
    idle_probe: Option<String>,
    priority: i64,
    as_json: bool,
    command: Vec<OsString>,
) -> Result<ExitCode, Failure> {
    // Resolve now, so that a configuration error is reported here and not in the runner's log.
    // The runner inherits this environment and resolves the same directory.
    crate::taking_pool()?;
    let now = SystemClock.now_ms();
    let log = std::env::temp_dir().join(format!(
        "worklane-full-run-{}-{}.log",
        rfc3339_ms(now).replace(':', ""),
        std::process::id()
    ));
    let file = std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&log)
        .map_err(|e| {
            Failure::new(
                exit::OS_ERROR,
                format!("cannot create log {}: {e}", log.display()),
            )
        })?;
    let err = file
        .try_clone()
        .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot duplicate the log: {e}")))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot find worklane itself: {e}")))?;
    let mut runner = Command::new(exe);
    runner.arg("queued-full-run");
    if let Some(probe) = &idle_probe {
        runner.args(["--idle-probe", probe]);
    }
    runner
        .arg(format!("--priority={priority}"))
        .arg("--log")
        .arg(&log)
        .arg("--")
        .args(&command)
        .stdin(Stdio::null())
        .stdout(file)
        // The runner's first act is setsid(): a new session and process group, away from this
        // shell's terminal and job control. (Not process_group(0) here: a group leader cannot
        // call setsid.)
        .stderr(err);
    #[allow(
        clippy::disallowed_methods,
        reason = "product code: queueing holds no guard while it starts the runner"
    )]
    let child = runner
        .spawn()
        .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot start the runner: {e}")))?;
    if as_json {
        outln!(
            "{}",
            crate::json::line(&crate::json::QueuedFullRun {
                version: crate::json::VERSION,
                id: format!("{ID_PREFIX}{}", child.id()),
                pid: child.id(),
                command: describe(&command),
                log: log.display().to_string(),
            })
        )?;
    } else {
        sayln!(
            "queued full run {ID_PREFIX}{} of `{}`: runner pid {}, log {}",
            child.id(),
            describe(&command),
            child.id(),
            log.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The detached runner: new session, a place in the full-run line; then wait for STOP/drain to
/// lift, the idle probe to pass and its turn; then run the command holding `full-run.lock`.
pub(crate) fn runner(
    idle_probe: Option<String>,
    priority: i64,
    log: Option<PathBuf>,
    command: Vec<OsString>,
) -> Result<ExitCode, Failure> {
    // First, before this process opens anything: the caller's descriptors (a pipe it reads
    // until every writer has gone, a lock it holds) must not live as long as this runner.
    crate::sys::close_inherited();
    // A session of its own: no controlling terminal, no SIGHUP when the shell goes away.
    if let Err(e) = rustix::process::setsid() {
        errln!("worklane: cannot start a new session ({e}); running in the caller's");
    }
    // SIGTERM (`queue cancel`) is noted, not fatal: the runner leaves the line and says why.
    let cancelled = Arc::new(AtomicBool::new(false));
    // Unblocked too (a caller's blocked mask survives exec), or `queue cancel` never reaches us.
    crate::sys::on_flag(signal_hook::consts::SIGTERM, Arc::clone(&cancelled)).map_err(|e| {
        Failure::new(
            exit::OS_ERROR,
            format!("cannot install a SIGTERM handler: {e}"),
        )
    })?;
    let pool = crate::taking_pool()?;
    let mut request = Request::new(QUEUED_OWNER).field("command", describe(&command));
    if let Some(log) = &log {
        request = request.field("log", log.display().to_string());
    }
    let place = pool.join_line(Kind::FullRun, priority, &request)?;
    let me = std::process::id();
    errln!(
        "worklane: {} queued full run {ID_PREFIX}{me} of `{}` (runner pid {me}), in line as {}",
        stamp(),
        describe(&command),
        place.entry().name()
    );
    let mut last_said = String::new();
    let mut say = |what: String| {
        if what != last_said {
            errln!("worklane: {} waiting: {what}", stamp());
            last_said = what;
        }
    };
    let slot = loop {
        if cancelled.load(Ordering::Relaxed) {
            let _ = place.leave();
            errln!(
                "worklane: {} cancelled (SIGTERM, as `worklane queue cancel` sends) while \
                 waiting: left the line; the command never ran",
                stamp()
            );
            return Ok(ExitCode::from(128 + 15));
        }
        // The idle probe (a process) runs only when nothing else stands in the way, right
        // before the take.
        let entry = place.entry();
        let blocked = if let Some(blocker) = pool.operator_blocker()? {
            (blocker.to_string(), OPERATOR_RETRY)
        } else if !pool.idle()? {
            (
                "another full run holds full-run.lock".to_owned(),
                worklane_admission::LOOK_AGAIN_AT_MOST,
            )
        } else if let ahead @ 1.. = pool
            .standing(Kind::FullRun, entry.priority, entry.start_ms, Some(entry))?
            .ahead
        {
            (
                format!("{ahead} waiter(s) before it in the full-run line"),
                worklane_admission::LOOK_AGAIN_AT_MOST,
            )
        } else if let Some(probe) = idle_probe.as_deref()
            && !probe_passes(probe)
        {
            (format!("idle probe `{probe}` says busy"), PROBE_RETRY)
        } else {
            match pool.try_take_as(Kind::FullRun, &request, entry)? {
                Take::Held(slot) => break slot,
                Take::Blocked(blocker) => {
                    (blocker.to_string(), worklane_admission::LOOK_AGAIN_AT_MOST)
                }
            }
        };
        say(blocked.0);
        nap(blocked.1, &cancelled);
    };
    // Out of the line the moment the slot is held; a file left behind is litter only.
    let _ = place.leave();
    errln!("worklane: {} starting the full run", stamp());
    let mut slot = slot;
    let mut launch = crate::run::slot_launch(&command, &slot)?;
    // Its command runs inside the full run, as under `worklane run --kind full-run`.
    let nesting = crate::nesting::env(crate::cli::KindArg::FullRun, pool.dir().path(), slot.name());
    launch.env.push(nesting);
    let outcome = supervise(
        launch,
        &mut RunnerWatch {
            slot: crate::run::SlotWatch {
                pool: &pool,
                slot: &mut slot,
            },
            cancelled: &cancelled,
        },
    );
    let _ = slot.release();
    let outcome = outcome?;
    errln!(
        "worklane: {} full run exited with status {}",
        stamp(),
        outcome.code
    );
    Ok(ExitCode::from(outcome.code))
}

/// Now, as the log shows it.
fn stamp() -> String {
    rfc3339_ms(SystemClock.now_ms())
}

/// Sleeps `total`, in steps short enough to see a SIGTERM within a quarter second.
fn nap(total: Duration, cancelled: &AtomicBool) {
    let until = Instant::now() + total;
    while !cancelled.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(250)));
    }
}

/// Runs the idle probe with `sh -c`: exit 0 is idle.
fn probe_passes(probe: &str) -> bool {
    #[allow(
        clippy::disallowed_methods,
        reason = "product code: the probe runs before the slot is taken, no guard held"
    )]
    let status = Command::new("sh")
        .args(["-c", probe])
        .stdin(Stdio::null())
        .status();
    status.is_ok_and(|s| s.success())
}

/// The full run's supervision, plus the runner's own SIGTERM: one that came after the last look
/// in line (the command just started) halts the command as STOP would, instead of being lost.
struct RunnerWatch<'a, 'b> {
    slot: crate::run::SlotWatch<'a>,
    cancelled: &'b AtomicBool,
}

impl Watch for RunnerWatch<'_, '_> {
    fn started(&mut self, command: &Started) {
        self.slot.started(command);
    }

    fn check(&mut self) -> Option<String> {
        self.slot.check().or_else(|| {
            self.cancelled
                .load(Ordering::Relaxed)
                .then(|| "the runner was sent SIGTERM (`worklane queue cancel`)".to_owned())
        })
    }
}

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
        let record = path
            .read()
            .ok()
            .flatten()
            .and_then(|raw| Record::parse(&raw).ok());
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
    let target = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap_or(0))
        .ok_or_else(|| Failure::new(exit::USAGE, format!("{id}: not a process id")))?;
    rustix::process::kill_process(target, rustix::process::Signal::TERM).map_err(|e| {
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
