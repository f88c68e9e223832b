//! `worklane dispatcher`: `worklane_run::dispatcher` serving the slot directory, with the
//! dispatcher's settings from the command line, SIGTERM and SIGINT as its stop, and what it
//! says written to its log (stderr): recovery loudly, then one line per event.

use super::*;
use worklane_run::dispatcher::{Error as ServeError, Options as ServeOptions, Said};

pub(crate) fn serve(args: &DispatcherArgs) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let (mode, env) = dispatcher_config(&pool, args)?;
    let socket = socket_path(&pool, args.socket.as_deref());
    let settings = Settings {
        claim_interval_ms: millis(args.claim_interval),
        env,
        mode,
        start_attempts: args.start_attempts,
        start_backoff_ms: millis(args.start_backoff),
        retention_ms: millis(args.retention),
        max_rows_per_user: args.max_rows_per_user,
        ..Settings::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    // Unblocked too (a caller's blocked mask survives exec), or SIGTERM never stops us.
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        worklane_run::process::on_flag(signal, Arc::clone(&stop))
            .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot handle signals: {e}")))?;
    }
    let options = ServeOptions {
        socket: socket.clone(),
        state_dir: args.state_dir.clone(),
        settings,
        connections_per_user: usize::try_from(args.max_connections_per_user).unwrap_or(32),
        tune: test_crash_point().map(|point| -> worklane_run::dispatcher::Tune {
            Box::new(move |server| {
                server.crash_at(point, || {
                    worklane_run::process::die_by(signal_hook::consts::SIGKILL);
                })
            })
        }),
    };
    let mut log = worklane_run::dispatcher::log::Log::default();
    let served = worklane_run::dispatcher::serve(&pool, options, &stop, |said| match said {
        Said::Recovery(recovery) => say_recovery(recovery),
        Said::Socket(text) => errln!("worklane: {text}"),
        Said::Serving { socket } => errln!(
            "worklane: dispatcher {} serving {} ({} mode, claim interval {} s)",
            std::process::id(),
            socket.display(),
            match mode {
                Mode::Dispatcher => "dispatcher",
                Mode::Waiter => "waiter",
            },
            crate::out::seconds(args.claim_interval)
        ),
        Said::Event(event) => {
            if let Some(line) = log.line(event, SystemClock.now_ms(), std::time::Instant::now()) {
                errln!("worklane: {line}");
            }
        }
    });
    served.map_err(|e| {
        let code = match &e {
            ServeError::Busy { .. } => exit::TEMP_FAIL,
            ServeError::NotASocket { .. } | ServeError::State(_) => exit::CONFIG,
            _ => exit::OS_ERROR,
        };
        Failure::new(code, exit::chain(&e))
    })?;
    errln!("worklane: dispatcher stopped; queued attempts stay in the database for the next one");
    Ok(ExitCode::SUCCESS)
}

/// In a test run only (see `Environment::test_run`), `WORKLANE_TEST_DISPATCHER_CRASH`
/// (`after-insert`, `after-admit`, `after-claim-remove`) makes the dispatcher SIGKILL itself at
/// that point: the crash tests' seam. Ignored everywhere else.
fn test_crash_point() -> Option<worklane_dispatch::server::CrashPoint> {
    use worklane_dispatch::server::CrashPoint;
    worklane_slotfile::Environment::from_process().test_run()?;
    match std::env::var("WORKLANE_TEST_DISPATCHER_CRASH")
        .ok()?
        .as_str()
    {
        "after-insert" => Some(CrashPoint::AfterInsert),
        "after-admit" => Some(CrashPoint::AfterAdmit),
        "after-claim-remove" => Some(CrashPoint::AfterClaimRemove),
        _ => None,
    }
}

/// What recovery found, said loudly on the dispatcher's log.
fn say_recovery(recovery: &Recovery) {
    use worklane_dispatch::state::Legacy;
    match &recovery.legacy {
        Legacy::None => {}
        Legacy::Adopted => errln!(
            "worklane: the queue database an older worklane kept in the slot directory was \
             taken over into the dispatcher's state directory (the old files are renamed \
             queue.db*.migrated-*)"
        ),
        Legacy::Refused { why } => errln!(
            "worklane: A QUEUE DATABASE IN THE SLOT DIRECTORY WAS REFUSED ({why}): it is not \
             provably this dispatcher's own, so none of its rows was read; it is renamed \
             queue.db*.refused-* for you to look at"
        ),
        Legacy::Ignored => errln!(
            "worklane: a queue.db is still in the slot directory; it is ignored (the \
             dispatcher's state directory has its database): remove it"
        ),
    }
    if let Some(damage) = &recovery.damage {
        errln!(
            "worklane: QUEUE DATABASE DAMAGED: {}; what could be recovered follows",
            damage.sentence()
        );
    }
    for lost in &recovery.lost {
        errln!(
            "worklane: LOST attempt {} of lane {} ({}): {}",
            lost.attempt,
            lost.lane,
            if lost.args.is_empty() {
                "its arguments are not known".to_owned()
            } else {
                format!("it was to run `{}`", lost.args.join(" "))
            },
            lost.detail
        );
    }
    for ended in &recovery.ended {
        errln!(
            "worklane: attempt {} of lane {} ended while no dispatcher watched: {}",
            ended.attempt,
            ended.lane,
            ended.detail
        );
    }
    for id in &recovery.dropped {
        errln!("worklane: attempt {id} dropped: its lane is held by another process now");
    }
    for id in &recovery.parked {
        errln!(
            "worklane: attempt {id} parked as failed: {}",
            "it was queued by an older worklane that did not record who enqueued it"
        );
    }
}
