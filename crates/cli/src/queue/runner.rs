//! The queued full run's runner: `queue full-run` starts it detached; it waits in the
//! full-run line, then runs the command holding `full-run.lock`. Its log and its wait are
//! `worklane_run::queued::runner`'s; here are the arguments, the log's lines and exit codes.

use super::{ID_PREFIX, QUEUED_OWNER};
use crate::exit::{self, Failure};
use crate::out::{errln, outln, sayln};
use crate::watch::CliWatch;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use worklane_admission::Kind;
use worklane_lease::{Clock, Request, SystemClock, rfc3339_ms};
use worklane_run::queued::runner::{LogError, Turn, runner_log, wait_turn};
use worklane_run::{Supervisor, describe};

pub(crate) fn queue_full_run(
    idle_probe: Option<String>,
    priority: i64,
    as_json: bool,
    command: Vec<OsString>,
) -> Result<ExitCode, Failure> {
    // Resolve now, so that a configuration error is reported here and not in the runner's log.
    // The runner inherits this environment and resolves the same directory.
    crate::taking_pool()?;
    let (log, file) = runner_log(SystemClock.now_ms(), std::process::id()).map_err(|e| {
        let code = match e {
            LogError::Dir(_) => exit::CONFIG,
            _ => exit::OS_ERROR,
        };
        Failure::new(code, exit::chain(&e))
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
        .stderr(err);
    // Detached: a new session and process group, away from this shell's terminal and job
    // control, and none of the caller's descriptors but the log (a pipe the caller reads to
    // its end, or a lock it holds, must not live as long as the runner).
    let pid = worklane_run::process::start_detached(&mut runner)
        .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot start the runner: {e}")))?;
    if as_json {
        outln!(
            "{}",
            crate::json::line(&crate::json::QueuedFullRun {
                version: crate::json::VERSION,
                id: format!("{ID_PREFIX}{}", pid),
                pid,
                command: describe(&command),
                log: log.display().to_string(),
            })
        )?;
    } else {
        sayln!(
            "queued full run {ID_PREFIX}{} of `{}`: runner pid {}, log {}",
            pid,
            describe(&command),
            pid,
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
    // `queue full-run` started it detached: a session of its own, only the log inherited.
    // SIGTERM (`queue cancel`) is noted, not fatal: the runner leaves the line and says why.
    let cancelled = Arc::new(AtomicBool::new(false));
    // Unblocked too (a caller's blocked mask survives exec), or `queue cancel` never reaches us.
    worklane_run::process::on_flag(signal_hook::consts::SIGTERM, Arc::clone(&cancelled)).map_err(
        |e| {
            Failure::new(
                exit::OS_ERROR,
                format!("cannot install a SIGTERM handler: {e}"),
            )
        },
    )?;
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
    let say = |what: String| {
        if what != last_said {
            errln!("worklane: {} waiting: {what}", stamp());
            last_said = what;
        }
    };
    let turn = wait_turn(
        &pool,
        place,
        &request,
        idle_probe.as_deref(),
        &cancelled,
        say,
    )?;
    let Turn::Held(mut slot) = turn else {
        errln!(
            "worklane: {} cancelled (SIGTERM, as `worklane queue cancel` sends) while \
             waiting: left the line; the command never ran",
            stamp()
        );
        return Ok(ExitCode::from(128 + 15));
    };
    errln!("worklane: {} starting the full run", stamp());
    // Its command runs inside the full run, as under `worklane run --kind full-run`; a SIGTERM
    // that came after the last look in line (the command just started) halts the command as
    // STOP would, instead of being lost.
    let nesting = worklane_run::nesting::env(
        &worklane_admission::Kind::FullRun,
        pool.dir().path(),
        slot.name(),
    );
    let mut watch = CliWatch {
        cancelled: Some(&cancelled),
        ..CliWatch::default()
    };
    let outcome = Supervisor::new(&pool, &mut slot)
        .and_then(|s| s.env(nesting.0, nesting.1).watch(&mut watch).run(&command));
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
