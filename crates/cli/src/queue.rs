//! `worklane queue full-run`: a detached runner that waits for its turn and survives the
//! shell that queued it.

use crate::exit::{self, Failure};
use crate::out::{errln, outln};
use crate::supervise::{describe, supervise};
use std::ffi::OsString;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;
use worklane_admission::{Kind, Take};
use worklane_lease::{Clock, Request, SystemClock, rfc3339_ms};

pub(crate) fn queue_full_run(
    idle_probe: Option<String>,
    command: Vec<OsString>,
) -> Result<ExitCode, Failure> {
    // Resolve now, so that a configuration error is reported here and not in the runner's log.
    // The runner inherits this environment and resolves the same directory.
    crate::pool()?;
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
    outln!(
        "queued full run of `{}`: runner pid {}, log {}",
        describe(&command),
        child.id(),
        log.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The detached runner: new session, then wait for STOP/drain to lift, the idle probe to
/// pass and the full-run lock to be free; then run the command holding it.
pub(crate) fn runner(
    idle_probe: Option<String>,
    command: Vec<OsString>,
) -> Result<ExitCode, Failure> {
    // A session of its own: no controlling terminal, no SIGHUP when the shell goes away.
    if let Err(e) = rustix::process::setsid() {
        errln!("worklane: cannot start a new session ({e}); running in the caller's");
    }
    let pool = crate::pool()?;
    let request = Request::new("queued full run").field("command", describe(&command));
    errln!(
        "worklane: queued full run of `{}` (runner pid {})",
        describe(&command),
        std::process::id()
    );
    let mut last_said = String::new();
    let mut say = |what: String| {
        if what != last_said {
            errln!(
                "worklane: {} waiting: {what}",
                rfc3339_ms(SystemClock.now_ms())
            );
            last_said = what;
        }
    };
    let slot = loop {
        if let Some(blocker) = pool.operator_blocker()? {
            say(blocker.to_string());
            std::thread::sleep(Duration::from_secs(1));
            continue;
        }
        if let Some(probe) = &idle_probe {
            #[allow(
                clippy::disallowed_methods,
                reason = "product code: the probe runs before the slot is taken, no guard held"
            )]
            let ok = Command::new("sh")
                .args(["-c", probe])
                .stdin(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                say(format!("idle probe `{probe}` says busy"));
                std::thread::sleep(Duration::from_secs(5));
                continue;
            }
        }
        match pool.try_take(Kind::FullRun, &request)? {
            Take::Held(slot) => break slot,
            Take::Blocked(blocker) => {
                say(blocker.to_string());
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    };
    errln!(
        "worklane: {} starting the full run",
        rfc3339_ms(SystemClock.now_ms())
    );
    let mut slot = slot;
    let mut launch = crate::run::slot_launch(&command, &slot)?;
    // Its command runs inside the full run, as under `worklane run --kind full-run`.
    let nesting = crate::nesting::env(crate::cli::KindArg::FullRun, pool.dir().path(), slot.name());
    launch.env.push(nesting);
    let outcome = supervise(
        launch,
        &mut crate::run::SlotWatch {
            pool: &pool,
            slot: &mut slot,
        },
    );
    let _ = slot.release();
    let outcome = outcome?;
    errln!(
        "worklane: {} full run exited with status {}",
        rfc3339_ms(SystemClock.now_ms()),
        outcome.code
    );
    Ok(ExitCode::from(outcome.code))
}
