//! `worklane dispatcher`: the service process around `worklane_admission`'s `Server`: its
//! lock, its socket (or systemd's, its mode checked), signals, `sd_notify` and the watchdog,
//! recovery said loudly, and the drivers started and reaped by `worklane_run::driver`.

use super::*;

/// `sd_notify(3)`: tells systemd (when it started us with `NOTIFY_SOCKET`) about our state.
fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(socket) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let path = PathBuf::from(path);
    #[cfg(target_os = "linux")]
    if let Some(name) = path.to_str().and_then(|p| p.strip_prefix('@')) {
        use std::os::linux::net::SocketAddrExt;
        if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name) {
            let _ = socket.send_to_addr(state.as_bytes(), &addr);
        }
        return;
    }
    let _ = socket.send_to(state.as_bytes(), &path);
}

/// Binds the dispatcher's socket: the one systemd passed, or a new one at `path`, mode 0660
/// and the directory's group (the directory is setgid). A stale socket left by a dead
/// dispatcher is removed first (we hold the dispatcher lock). At the slot directory's own
/// name every step goes through the directory's descriptor, never a path a member could
/// redirect: anything but a socket there (a member may have put a file, a link or a FIFO at
/// the name) is renamed aside to `dispatcher.sock.refused-<ms>`, said, and the socket made.
fn listen(pool: &Pool, path: &Path) -> Result<UnixListener, Failure> {
    if let Some(fd) = worklane_run::process::systemd_listener() {
        let listener = UnixListener::from(fd);
        guard_socket_mode(&listener)?;
        return Ok(listener);
    }
    let io = |what: &str, e: std::io::Error| {
        Failure::new(
            exit::OS_ERROR,
            format!(
                "cannot {what} the dispatcher socket {}: {e}",
                path.display()
            ),
        )
    };
    let in_dir = path == pool.dir().path().join(SOCKET);
    let bind_at = if in_dir {
        let name = pool
            .dir()
            .file(SOCKET)
            .map_err(|e| Failure::new(exit::SOFTWARE, exit::chain(&e)))?;
        set_aside_unless_socket(pool, &name, path)?;
        // Bound through the directory's descriptor: the magic link names the directory held
        // open, whatever has become of its path since.
        PathBuf::from(format!(
            "/proc/self/fd/{}/{SOCKET}",
            std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(pool.dir()))
        ))
    } else {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(Failure::new(
                    exit::CONFIG,
                    format!(
                        "{} exists and is not a socket; move it aside or give --socket",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path).map_err(|e| io("remove the stale", e))?;
        }
        path.to_owned()
    };
    let old = rustix::process::umask(rustix::fs::Mode::from_bits_truncate(0o117));
    let bound = UnixListener::bind(&bind_at);
    rustix::process::umask(old);
    bound.map_err(|e| io("bind", e))
}

/// At the socket's name in the slot directory: nothing, or a stale socket removed, or anything
/// else renamed aside (never followed, opened or removed) and said.
fn set_aside_unless_socket(
    pool: &Pool,
    name: &worklane_slotfile::SlotPath,
    path: &Path,
) -> Result<(), Failure> {
    let stat = match rustix::fs::statat(pool.dir(), SOCKET, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => {
            return Err(Failure::new(
                exit::OS_ERROR,
                format!("cannot examine {}: {e}", path.display()),
            ));
        }
    };
    let socket = rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Socket;
    if socket {
        name.remove()
            .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
        return Ok(());
    }
    let aside = format!(
        "{SOCKET}.refused-{}",
        worklane_lease::Clock::now_ms(&worklane_lease::SystemClock)
    );
    name.rename(&aside)
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    errln!(
        "worklane: {} was not a socket (a file someone put at its name); it was renamed {aside} \
         and the dispatcher's socket made",
        path.display()
    );
    Ok(())
}

/// A socket systemd made (socket activation) should not let anyone outside the directory's
/// group connect: the unit asks for `SocketMode=0660`, but a unit edited or an older systemd
/// may leave 0644 or 0666. The bits for others are taken away through one descriptor of the
/// name opened without following a link, and only from a socket of ours with one name
/// (`worklane_transport::mode::narrow`): the name is in a directory the group may write, so a
/// member may have put anything there. Whatever the mode, each connection's peer is checked.
fn guard_socket_mode(listener: &UnixListener) -> Result<(), Failure> {
    use worklane_transport::mode::{Narrowed, narrow};
    let Ok(addr) = listener.local_addr() else {
        return Ok(());
    };
    let Some(path) = addr.as_pathname() else {
        // An abstract socket has no mode: the peer check is all there is.
        return Ok(());
    };
    match narrow(path) {
        Ok(Narrowed::Already { .. }) => {}
        Ok(Narrowed::Done { from, to }) => errln!(
            "worklane: the socket systemd passed, {}, had mode {from:04o}; set to {to:04o} (the \
             unit should say SocketMode=0660)",
            path.display()
        ),
        Ok(Narrowed::Refused { why }) => errln!(
            "worklane: the mode of the socket systemd passed, {}, is left as it is ({why}); \
             every connection's peer is checked all the same",
            path.display()
        ),
        Err(e) => errln!(
            "worklane: cannot examine the socket systemd passed, {} ({e}); every connection's \
             peer is checked all the same",
            path.display()
        ),
    }
    Ok(())
}

pub(crate) fn serve(args: &DispatcherArgs) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let (mode, env) = dispatcher_config(&pool, args)?;
    let dir = pool.dir().clone();
    let held = match acquire(
        &dir,
        DISPATCHER_LOCK,
        &Request::new("worklane dispatcher"),
        &Options::process(),
    )? {
        Acquired::Held(lease) => lease,
        Acquired::Refused(refusal) => {
            return Err(Failure::new(
                exit::TEMP_FAIL,
                format!(
                    "another dispatcher already serves {}: {refusal}",
                    dir.path().display()
                ),
            ));
        }
    };
    let socket = socket_path(&pool, args.socket.as_deref());
    let listener = listen(&pool, &socket)?;
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
    // One descriptor per queued lane (and per reserved slot): a soft limit of 1 024 would
    // refuse enqueues long before the queue is large.
    let nofile = worklane_run::process::raise_nofile();
    let state = worklane_dispatch::state::open(
        args.state_dir.as_deref(),
        dir.path(),
        &worklane_slotfile::Environment::from_process(),
    )
    .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    let dispatcher = Dispatcher::open(pool.clone(), &state, settings)
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    say_recovery(dispatcher.recovery());
    let stop = Arc::new(AtomicBool::new(false));
    // Unblocked too (a caller's blocked mask survives exec), or SIGTERM never stops us.
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        worklane_run::process::on_flag(signal, Arc::clone(&stop))
            .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot handle signals: {e}")))?;
    }
    let exits = worklane_run::driver::reap();
    let stat = rustix::fs::fstat(&dir).map_err(|e| {
        Failure::new(
            exit::OS_ERROR,
            format!("cannot stat {}: {e}", dir.path().display()),
        )
    })?;
    let trust = Trust {
        owner: stat.st_uid,
        group: stat.st_gid,
    };
    let alive = Arc::new(std::sync::atomic::AtomicU64::new(
        worklane_identity::Place::boot_clock_ms(),
    ));
    watchdog(Arc::clone(&alive));
    let launcher = worklane_run::driver::Launcher {
        pool: pool.clone(),
        socket: socket.clone(),
        nofile,
    };
    let mut journal = Journal::default();
    let server = Server::new(
        dispatcher,
        listener,
        trust,
        |admitted| launcher.launch(admitted),
        |event| {
            if matches!(event, Event::Tick) {
                alive.store(
                    worklane_identity::Place::boot_clock_ms(),
                    std::sync::atomic::Ordering::SeqCst,
                );
            }
            if let Event::Ended(ended) = &event
                && let Some(log) = &ended.log
            {
                launcher.note(
                    log,
                    ended.uid,
                    &format!("attempt {} {}", ended.attempt, ended_words(ended)),
                );
            }
            journal.log(&event);
        },
    )
    .with_connections_per_user(usize::try_from(args.max_connections_per_user).unwrap_or(32))
    .with_exits(|| {
        std::mem::take(
            &mut *exits
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    });
    let mut server = match test_crash_point() {
        Some(point) => server.crash_at(point, || {
            worklane_run::process::die_by(signal_hook::consts::SIGKILL);
        }),
        None => server,
    };
    errln!(
        "worklane: dispatcher {} serving {} ({} mode, claim interval {} s)",
        std::process::id(),
        socket.display(),
        match mode {
            Mode::Dispatcher => "dispatcher",
            Mode::Waiter => "waiter",
        },
        crate::out::seconds(args.claim_interval)
    );
    notify(&format!("READY=1\nSTATUS=serving {}", socket.display()));
    let served = server.run(&stop);
    notify("STOPPING=1");
    drop(held);
    served.map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
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

/// systemd's watchdog (`WATCHDOG_USEC`): a thread sends `WATCHDOG=1` every half interval, but
/// only while the service loop has gone round within the interval (`alive` holds the time of
/// its last round, ms on the boot clock), so a stuck loop is restarted.
fn watchdog(alive: Arc<std::sync::atomic::AtomicU64>) {
    let Some(usec) = std::env::var("WATCHDOG_USEC")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&u| u > 0)
    else {
        return;
    };
    let interval_ms = usec / 1000;
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis((interval_ms / 2).max(1)));
            let last = alive.load(std::sync::atomic::Ordering::SeqCst);
            if worklane_identity::Place::boot_clock_ms().saturating_sub(last) <= interval_ms {
                notify("WATCHDOG=1");
            }
        }
    });
}
