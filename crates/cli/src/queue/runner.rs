//! The queued full run's runner: `queue full-run` starts it detached; it waits in the
//! full-run line, then runs the command holding `full-run.lock`.

use super::{ID_PREFIX, QUEUED_OWNER};
use crate::exit::{self, Failure};
use crate::out::{errln, outln, sayln};
use crate::watch::CliWatch;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use worklane_admission::{Kind, Take};
use worklane_lease::{Clock, Request, SystemClock, rfc3339_ms};
use worklane_run::{Supervisor, describe};

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
    // In a directory of this user's own (0700, created if missing, owner and mode checked,
    // no link on its path), created anew with mode 0600: the command's output is for its user
    // alone, and no other user can put a link or a file at the log's name first.
    let euid = rustix::process::geteuid().as_raw();
    let logs = std::env::temp_dir().join(format!("worklane-{euid}"));
    let logs = worklane_slotfile::PrivateDir::open(&logs, true).map_err(|e| {
        Failure::new(
            exit::CONFIG,
            format!("cannot keep the queued run's log: {}", exit::chain(&e)),
        )
    })?;
    let name = format!(
        "worklane-full-run-{}-{}.log",
        rfc3339_ms(now).replace(':', ""),
        std::process::id()
    );
    let log = logs.join(&name);
    let file = logs.create_new(&name, 0o600).map_err(|e| {
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
            && !worklane_run::process::shell_says_yes(probe)
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
    // Its command runs inside the full run, as under `worklane run --kind full-run`; a SIGTERM
    // that came after the last look in line (the command just started) halts the command as
    // STOP would, instead of being lost.
    let nesting = crate::nesting::env(crate::cli::KindArg::FullRun, pool.dir().path(), slot.name());
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
