//! The dispatcher commands: `dispatcher` (the service), `enqueue` (a launcher hands its held
//! lane over), `claim` (a driver takes the lane and slot and runs its command), `queue ls`,
//! `queue cancel` and `reconcile`. The decisions live in `worklane_admission::dispatch`; this
//! module is the process around them: the socket, signals, systemd, detached drivers, output.

use crate::cli::{ClaimArgs, DispatcherArgs, EnqueueArgs};
use crate::exit::{self, Failure};
use crate::json;
use crate::out::{errln, outln};
use crate::run::{SlotWatch, slot_launch};
use crate::supervise::{describe, inheritable, supervise};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use worklane_admission::Pool;
use worklane_admission::dispatch::env::EnvFilter;
use worklane_admission::dispatch::lane::{is_own_lane, own_lane, retire_own_lane};
use worklane_admission::dispatch::server::{Event, Server, Trust};
use worklane_admission::dispatch::service::{
    Admitted, Dispatcher, Mode, Settings, lane_lock, valid_lane,
};
use worklane_admission::dispatch::store::Store;
use worklane_admission::dispatch::transport;
use worklane_admission::dispatch::wire::{Enqueue, Reply, Request as Wire, code};
use worklane_lease::{Acquired, Clock, Options, Request, SystemClock, acquire, rfc3339_ms};

/// The socket's name in the slot directory.
const SOCKET: &str = "dispatcher.sock";
/// The queue database's name in the slot directory.
const DATABASE: &str = "queue.db";
/// The lock one dispatcher per directory holds for its life.
const DISPATCHER_LOCK: &str = "dispatcher.lock";

/// The log a driver writes, named after its attempt, in the slot directory.
pub(crate) fn log_name(attempt: &str) -> String {
    format!("queue-{attempt}.log")
}

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
    use worklane_admission::dispatch::env::{DEFAULT_PREFIXES, DEFAULT_SECRET_WORDS};
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
    let line = worklane_admission::dispatch::wire::request_line(request);
    let io = |e: transport::Error| Failure::new(exit::OS_ERROR, exit::chain(&e));
    transport::send(stream, &line, fds).map_err(io)?;
    let (reply, fds) = transport::recv(stream).map_err(io)?;
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
        Some(code::LANE_QUEUED | code::NO_ADMITTED_ROW | code::NO_SUCH_ATTEMPT) => exit::TEMP_FAIL,
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

/// Binds the dispatcher's socket: the one systemd passed, or a new one at `path` (a stale
/// socket left by a dead dispatcher is removed first: we hold the dispatcher lock), mode 0660
/// and the directory's group (the directory is setgid).
fn listen(path: &Path) -> Result<UnixListener, Failure> {
    if let Some(fd) = crate::sys::systemd_listener() {
        return Ok(UnixListener::from(fd));
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
    let old = rustix::process::umask(rustix::fs::Mode::from_bits_truncate(0o117));
    let bound = UnixListener::bind(path);
    rustix::process::umask(old);
    bound.map_err(|e| io("bind", e))
}

/// Starts an admitted attempt's driver, detached (a session of its own), with its output in
/// `queue-<attempt>.log` in the slot directory and the attempt's variables.
fn launch(
    pool: &Pool,
    socket: &Path,
    admitted: &Admitted,
    nofile: Option<rustix::process::Rlimit>,
) -> std::io::Result<u32> {
    let attempt = &admitted.attempt;
    let (program, args) = attempt
        .args
        .split_first()
        .ok_or_else(|| std::io::Error::other("the attempt has no driver command"))?;
    let log = pool
        .dir()
        .file(&log_name(&attempt.id))
        .map_err(std::io::Error::other)?
        .create_log(0o640)
        .map_err(std::io::Error::other)?;
    let err = log.try_clone()?;
    let env: Vec<(&OsStr, &OsStr)> = attempt
        .env
        .iter()
        .map(|(name, value)| (OsStr::new(name), OsStr::new(value)))
        .chain([
            (OsStr::new("WORKLANE_ATTEMPT"), OsStr::new(&attempt.id)),
            (OsStr::new("WORKLANE_TOKEN"), OsStr::new(&admitted.token)),
            (OsStr::new("WORKLANE_SOCKET"), socket.as_os_str()),
            (OsStr::new("WORKLANE_LANE"), OsStr::new(&attempt.lane)),
        ])
        .collect();
    let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    let mut cmd = Command::new(program);
    cmd.args(&args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err));
    // The driver gets the descriptor limit the dispatcher was started with, and is searched
    // for and run as `worklane run`'s command is.
    crate::sys::detach(&mut cmd, OsStr::new(program), &args, &env, nofile)?;
    // Held across the start: std reaps a child whose exec failed itself, by its pid, and
    // panics if the reaper took that child first.
    let _starting = STARTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    #[allow(
        clippy::disallowed_methods,
        reason = "product code: the dispatcher starts each admitted attempt's driver"
    )]
    let child = cmd.spawn()?;
    Ok(child.id())
}

/// Held while a driver is being started ([`launch`]) and while the reaper reaps
/// ([`reap_drivers`]): a child std is starting is never reaped by anyone but std.
static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Reaps the dispatcher's exited drivers as they end (they run detached, but are its children).
/// It learns that a child has exited without reaping it (`WNOWAIT`), then reaps every exited
/// child under [`STARTING`]: a driver whose exec failed is reaped by std's `spawn`, which
/// holds the lock until it has, and would panic if its child were gone.
fn reap_drivers() {
    use rustix::process::{WaitId, WaitIdOptions, WaitOptions};
    std::thread::spawn(|| {
        loop {
            match rustix::process::waitid(
                WaitId::All,
                WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
            ) {
                Ok(_) => {
                    let _starting = STARTING
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
                }
                Err(rustix::io::Errno::INTR) => {}
                // No child at all (ECHILD): look again later.
                Err(_) => std::thread::sleep(std::time::Duration::from_secs(1)),
            }
        }
    });
}

pub(crate) fn serve(args: &DispatcherArgs) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let (mode, env) = dispatcher_config(&pool)?;
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
    let listener = listen(&socket)?;
    let store = Store::open(&dir.path().join(DATABASE))
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    let settings = Settings {
        claim_interval_ms: u64::try_from(args.claim_interval.as_millis()).unwrap_or(u64::MAX),
        env,
        mode,
    };
    // One descriptor per queued lane (and per reserved slot): a soft limit of 1 024 would
    // refuse enqueues long before the queue is large.
    let nofile = crate::sys::raise_nofile();
    let dispatcher = Dispatcher::recover(pool.clone(), store, settings)
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    let stop = Arc::new(AtomicBool::new(false));
    // Unblocked too (a caller's blocked mask survives exec), or SIGTERM never stops us.
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        crate::sys::on_flag(signal, Arc::clone(&stop))
            .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot handle signals: {e}")))?;
    }
    reap_drivers();
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
    let server = Server::new(
        dispatcher,
        listener,
        trust,
        |admitted| launch(&pool, &socket, admitted, nofile),
        |event| {
            if matches!(event, Event::Tick) {
                alive.store(
                    worklane_identity::Place::boot_clock_ms(),
                    std::sync::atomic::Ordering::SeqCst,
                );
            }
            log(&event);
        },
    );
    let mut server = match test_crash_point() {
        Some(point) => server.crash_at(point, || {
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
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
        crate::supervise::seconds(args.claim_interval)
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
fn test_crash_point() -> Option<worklane_admission::dispatch::server::CrashPoint> {
    use worklane_admission::dispatch::server::CrashPoint;
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

fn log(event: &Event) {
    let now = rfc3339_ms(SystemClock.now_ms());
    match event {
        Event::Started { attempt, pid } => {
            errln!("worklane: {now} started the driver of {attempt} (pid {pid})");
        }
        Event::StartFailed { attempt, error } => {
            errln!(
                "worklane: {now} cannot start the driver of {attempt}: {}; queued again",
                exit::chain(error)
            );
        }
        Event::Expired(ids) => {
            errln!(
                "worklane: {now} not claimed in time, queued again: {}",
                ids.join(", ")
            );
        }
        Event::Answered { op, refused } => {
            if let Some(code) = refused {
                errln!("worklane: {now} refused a {op}: {code}");
            }
        }
        Event::Connection(error) => errln!("worklane: {now} connection: {}", exit::chain(error)),
        Event::Tick => {}
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

/// Command-line arguments as the queue stores them (UTF-8 only).
fn utf8(args: &[OsString]) -> Result<Vec<String>, Failure> {
    args.iter()
        .map(|a| {
            a.clone().into_string().map_err(|a| {
                Failure::new(
                    exit::USAGE,
                    format!("{a:?}: queued commands must be UTF-8 to be stored"),
                )
            })
        })
        .collect()
}

pub(crate) fn enqueue(args: &EnqueueArgs) -> Result<ExitCode, Failure> {
    let lane = args.lane.clone().unwrap_or_else(own_lane);
    if args.lane.is_some() && is_own_lane(&lane) {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--lane {lane}: names of `q-` and 16 hex digits are reserved for lanes of their \
                 own (enqueue without --lane), which are removed when their attempt ends; choose \
                 another name"
            ),
        ));
    }
    if !valid_lane(&lane) {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--lane {lane:?}: 1 to 64 letters, digits, `-`, `_` or `.`, not starting with `.`"
            ),
        ));
    }
    let command = utf8(&args.command)?;
    let driver = if args.driver {
        command
    } else {
        let me = std::env::current_exe()
            .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot find this worklane: {e}")))?;
        let mut driver = vec![
            me.to_string_lossy().into_owned(),
            "claim".to_owned(),
            "--".to_owned(),
        ];
        driver.extend(command);
        driver
    };
    let pool = crate::pool()?;
    let lock = lane_lock(&lane);
    let lease = match acquire(
        pool.dir(),
        &lock,
        &Request::new("worklane enqueue").field("lane", lane.clone()),
        &Options::process(),
    )? {
        Acquired::Held(lease) => lease,
        Acquired::Refused(refusal) => {
            return Err(Failure::new(
                exit::TEMP_FAIL,
                format!("lane {lane} is taken: {refusal}"),
            ));
        }
    };
    let socket = socket_path(&pool, args.socket.as_deref());
    let entry = Enqueue {
        lane: lane.clone(),
        start_ms: Some(SystemClock.now_ms()),
        priority: Some(args.priority),
        placement: args.placement.clone(),
        stage: args.stage.clone(),
        args: driver,
        env: dispatcher_config(&pool)?.1.keep(std::env::vars_os()),
    };
    let guard = lease
        .guard()
        .ok_or_else(|| Failure::new(exit::SOFTWARE, "a lane lease without its guard"))?;
    let (reply, _) = ask(&socket, &Wire::Enqueue(entry), &[guard.as_fd()]).map_err(|f| {
        if f.code == exit::OS_ERROR {
            Failure::new(
                exit::OS_ERROR,
                format!(
                    "{}; the dispatcher may have queued it before it failed: `worklane queue \
                     ls` lists lane {lane} if so (do not enqueue it again before you look)",
                    f.message
                ),
            )
        } else {
            f
        }
    })?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    // The dispatcher's copy holds the lane now; ours closes without removing the record.
    drop(lease.hand_over());
    let attempt = reply.attempt.unwrap_or_default();
    if args.json {
        outln!(
            "{}",
            json::line(&json::Enqueued {
                version: json::VERSION,
                attempt: &attempt,
                lane: &lane,
            })
        )?;
    } else {
        outln!("{attempt}")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn var(name: &str) -> Result<String, Failure> {
    std::env::var(name).map_err(|_| {
        Failure::new(
            exit::USAGE,
            format!(
                "{name} is not set: `worklane claim` is the driver the dispatcher starts for an \
                 admitted attempt, with WORKLANE_ATTEMPT, WORKLANE_TOKEN and WORKLANE_SOCKET"
            ),
        )
    })
}

pub(crate) fn claim(args: &ClaimArgs) -> Result<ExitCode, Failure> {
    let attempt = var("WORKLANE_ATTEMPT")?;
    let token = var("WORKLANE_TOKEN")?;
    let socket = PathBuf::from(var("WORKLANE_SOCKET")?);
    let pool = crate::pool()?;
    let (reply, mut fds) = ask(
        &socket,
        &Wire::Claim {
            attempt: attempt.clone(),
            token,
        },
        &[],
    )?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    let (Some(lane), Some(slot_name), 2) = (reply.lane.clone(), reply.slot.clone(), fds.len())
    else {
        return Err(Failure::new(
            exit::OS_ERROR,
            format!(
                "the dispatcher's claim reply carries {} descriptors, not the lane's and the slot's",
                fds.len()
            ),
        ));
    };
    let slot_fd = fds.pop().expect("two descriptors");
    let lane_fd = fds.pop().expect("two descriptors");
    let request = Request::new("worklane claim")
        .field("attempt", attempt.clone())
        .field("command", describe(&args.command));
    let dir = pool.dir();
    let lane_guard = worklane_guard::Guard::from_received(lane_fd, dir, dir.path(), &lane)
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    let lane_lease = worklane_lease::adopt(dir, &lane, lane_guard, &request, &Options::process())?;
    let mut slot = pool.adopt(&slot_name, slot_fd, &request)?;
    if args.json {
        errln!(
            "{}",
            json::line(&json::Claimed {
                version: json::VERSION,
                attempt: &attempt,
                lane: &lane,
                slot: &slot_name,
                lane_epoch: lane_lease.epoch(),
                slot_epoch: slot.lease().epoch(),
            })
        );
    }
    let mut launch = slot_launch(&args.command, &slot)?;
    // The command keeps the lane too, as it keeps the slot.
    if let Some(guard) = lane_lease.guard() {
        launch.inherit.push(inheritable(guard)?);
    }
    let outcome = supervise(
        launch,
        &mut SlotWatch {
            pool: &pool,
            slot: &mut slot,
        },
    );
    let released = slot.release();
    if lane_lease.release().is_ok()
        && let Some(name) = lane
            .strip_prefix("lane-")
            .and_then(|l| l.strip_suffix(".lock"))
        && let Err(e) = retire_own_lane(dir, name)
    {
        errln!(
            "worklane: removing the files of {lane}: {}",
            exit::chain(&e)
        );
    }
    let outcome = outcome?;
    if let Err(e) = released {
        errln!("worklane: releasing {slot_name}: {}", exit::chain(&e));
    }
    Ok(ExitCode::from(outcome.code))
}

/// The dispatcher's part of `queue ls`. A dispatcher that does not answer (none started) has no
/// attempts, and says so; one that answers and refuses is an error.
pub(crate) fn listing(pool: &Pool) -> Result<crate::queue::Listing, Failure> {
    let path = socket_path(pool, None);
    let stream = match connect(&path) {
        Ok(stream) => stream,
        Err(failure) => {
            return Ok(crate::queue::Listing {
                json: json::DispatcherList::none(failure.message.clone()),
                lines: vec![format!("attempts: none ({})", failure.message)],
            });
        }
    };
    let (reply, _) = ask_on(&stream, &Wire::List, &[])?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    let attempts = reply.attempts.unwrap_or_default();
    let logs: Vec<String> = attempts
        .iter()
        .map(|a| {
            pool.dir()
                .path()
                .join(log_name(&a.attempt))
                .display()
                .to_string()
        })
        .collect();
    let mut lines = vec![format!(
        "dispatcher pid {}: {} attempt(s)",
        reply.pid.unwrap_or(0),
        attempts.len()
    )];
    for (a, log) in attempts.iter().zip(&logs) {
        lines.push(format!(
            "{}  lane {}  {}  priority {}  queued {}  stage {:?}  slot {}  log {}",
            a.attempt,
            a.lane,
            a.state,
            a.priority,
            rfc3339_ms(a.start_ms),
            a.stage,
            a.slot.as_deref().unwrap_or("-"),
            log
        ));
    }
    let json = json::DispatcherList {
        dispatcher_pid: reply.pid,
        attempts,
        logs,
        dispatcher: None,
    };
    Ok(crate::queue::Listing { json, lines })
}

pub(crate) fn cancel(attempt: &str, as_json: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let (reply, _) = ask(
        &socket_path(&pool, None),
        &Wire::Cancel {
            attempt: attempt.to_owned(),
        },
        &[],
    )?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    crate::queue::cancelled(attempt, "attempt", None, as_json)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn reconcile(attempt: &str, as_json: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    // 1. The dispatcher's rows (if one answers).
    if let Ok((reply, _)) = ask(&socket_path(&pool, None), &Wire::List, &[])
        && let Some(row) = reply
            .attempts
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.attempt == attempt)
    {
        let text = format!(
            "{attempt}: the dispatcher (pid {}) holds it, {} on lane {}",
            reply.pid.unwrap_or(0),
            row.state,
            row.lane
        );
        return say(
            as_json,
            attempt,
            json::Holder::dispatcher(row.state, row.lane, reply.pid),
            &text,
        );
    }
    // 2. A lane whose record names the attempt: held by its driver, or free.
    let lanes = pool
        .dir()
        .list_prefixed("lane-")
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    for path in lanes {
        let Some(record) = path
            .read()
            .ok()
            .flatten()
            .and_then(|raw| worklane_lease::Record::parse(&raw).ok())
        else {
            continue;
        };
        if record.extra_str("attempt") != Some(attempt) {
            continue;
        }
        let held = matches!(path.try_guard(), Ok(None));
        let pid = record.pid();
        return if held {
            say(
                as_json,
                attempt,
                json::Holder::driver(path.name().to_owned(), pid),
                &format!(
                    "{attempt}: a driver holds {} (pid {})",
                    path.name(),
                    pid.map_or("?".to_owned(), |p| p.to_string())
                ),
            )
        } else {
            say(
                as_json,
                attempt,
                json::Holder::FreeLane {
                    holder: json::Nobody,
                    lane: path.name().to_owned(),
                },
                &format!(
                    "{attempt}: nobody holds it (its driver left {} free)",
                    path.name()
                ),
            )
        };
    }
    say(
        as_json,
        attempt,
        json::Holder::Nowhere {
            holder: json::Nobody,
        },
        &format!("{attempt}: nobody holds it (no queued row and no lane names it)"),
    )
}

fn say(
    as_json: bool,
    attempt: &str,
    holder: json::Holder,
    text: &str,
) -> Result<ExitCode, Failure> {
    if as_json {
        outln!(
            "{}",
            json::line(&json::Reconciled {
                version: json::VERSION,
                attempt,
                holder,
            })
        )?;
    } else {
        outln!("{text}")?;
    }
    Ok(ExitCode::SUCCESS)
}
