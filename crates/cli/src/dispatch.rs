//! The dispatcher commands: `dispatcher` (the service), `enqueue` (a launcher hands its held
//! lane over), `claim` (a driver takes the lane and slot and runs its command), `queue ls`,
//! `queue cancel` and `reconcile`. The decisions live in `worklane_admission::dispatch`; this
//! module is the process around them: the socket, signals, systemd, detached drivers, output.

use crate::cli::{ClaimArgs, DispatcherArgs, EnqueueArgs};
use crate::exit::{self, Failure};
use crate::json;
use crate::out::{errln, outln};
use crate::run::{SlotWatch, slot_launch};
use crate::supervise::{Started, Watch, describe, inheritable, supervise};
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use worklane_admission::Pool;
use worklane_admission::dispatch::env::EnvFilter;
use worklane_admission::dispatch::lane::{is_own_lane, own_lane, retire_own_lane};
use worklane_admission::dispatch::server::{Event, Server, Trust};
use worklane_admission::dispatch::service::{
    Dispatcher, Mode, Recovery, Settings, StartFailure, cancel_marker, lane_lock, valid_lane,
};
use worklane_admission::dispatch::transport;
use worklane_admission::dispatch::wire::{Enqueue, Reply, Request as Wire, code};
use worklane_lease::{Acquired, Clock, Options, Request, SystemClock, acquire, rfc3339_ms};

/// The socket's name in the slot directory.
const SOCKET: &str = "dispatcher.sock";
/// The queue database's name in the slot directory.
const DATABASE: &str = "queue.db";
/// The lock one dispatcher per directory holds for its life.
const DISPATCHER_LOCK: &str = "dispatcher.lock";

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
        Some(
            code::LANE_QUEUED | code::NO_ADMITTED_ROW | code::NO_SUCH_ATTEMPT | code::NOT_FAILED,
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

/// A socket systemd made (socket activation) must not let anyone outside the directory's
/// group connect: the unit asks for `SocketMode=0660`, but a unit edited or an older systemd
/// may leave 0644 or 0666. Bits for others are taken away (the dispatcher, root under the
/// unit, may); where that fails, the dispatcher refuses to serve.
fn guard_socket_mode(listener: &UnixListener) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(addr) = listener.local_addr() else {
        return Ok(());
    };
    let Some(path) = addr.as_pathname() else {
        // An abstract socket has no mode: the peer check is all there is.
        return Ok(());
    };
    let meta = std::fs::symlink_metadata(path).map_err(|e| {
        Failure::new(
            exit::OS_ERROR,
            format!(
                "cannot examine the socket systemd passed, {}: {e}",
                path.display()
            ),
        )
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o007 == 0 {
        return Ok(());
    }
    let fixed = mode & 0o770;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(fixed)).map_err(|e| {
        Failure::new(
            exit::CONFIG,
            format!(
                "the socket systemd passed, {}, has mode {mode:04o}, which lets users outside \
                 the slot directory's group connect, and it cannot be changed ({e}): set \
                 SocketMode=0660 in worklane-dispatcher.socket",
                path.display()
            ),
        )
    })?;
    errln!(
        "worklane: the socket systemd passed, {}, had mode {mode:04o}; set to {fixed:04o} (the \
         unit should say SocketMode=0660)",
        path.display()
    );
    Ok(())
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
    let settings = Settings {
        claim_interval_ms: millis(args.claim_interval),
        env,
        mode,
        start_attempts: args.start_attempts,
        start_backoff_ms: millis(args.start_backoff),
        retention_ms: millis(args.retention),
        ..Settings::default()
    };
    // One descriptor per queued lane (and per reserved slot): a soft limit of 1 024 would
    // refuse enqueues long before the queue is large.
    let nofile = crate::sys::raise_nofile();
    let dispatcher = Dispatcher::open(pool.clone(), &dir.path().join(DATABASE), settings)
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    say_recovery(dispatcher.recovery());
    let stop = Arc::new(AtomicBool::new(false));
    // Unblocked too (a caller's blocked mask survives exec), or SIGTERM never stops us.
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        crate::sys::on_flag(signal, Arc::clone(&stop))
            .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot handle signals: {e}")))?;
    }
    let exits = crate::driver::reap();
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
    let launcher = crate::driver::Launcher {
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
                    &format!("attempt {} {}", ended.attempt, ended_words(ended)),
                );
            }
            journal.log(&event);
        },
    )
    .with_exits(|| {
        std::mem::take(
            &mut *exits
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    });
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

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What recovery found, said loudly on the dispatcher's log.
fn say_recovery(recovery: &Recovery) {
    if let Some(damage) = &recovery.damage {
        errln!(
            "worklane: THE QUEUE DATABASE WAS DAMAGED ({}); it was moved to {} and a new one \
             made: what could be recovered follows",
            damage.why,
            damage.moved_to.display()
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

/// How an ended attempt ended, in words (its log's last line, `queue ls --all`).
pub(crate) fn ended_words(ended: &worklane_admission::dispatch::wire::EndedView) -> String {
    let how = match (ended.status, ended.signal) {
        (_, Some(signal)) => format!("killed by signal {signal}"),
        (Some(status), None) => format!("with exit status {status}"),
        (None, None) => "with its status in its log".to_owned(),
    };
    format!("{} {how} ({})", ended.outcome, ended.detail)
}

/// The dispatcher's log (its stderr): one line per event, with a line that repeats (the same
/// kind, of the same attempt or peer) said at most once a minute, and how many were left out
/// said with the next.
#[derive(Default)]
struct Journal {
    seen: std::collections::HashMap<String, (std::time::Instant, u32)>,
}

/// How long a repeated line stays quiet.
const QUIET_FOR: std::time::Duration = std::time::Duration::from_secs(60);

impl Journal {
    fn log(&mut self, event: &Event) {
        let now = rfc3339_ms(SystemClock.now_ms());
        let (key, line) = match event {
            Event::Started { attempt, pid } => {
                (None, format!("started the driver of {attempt} (pid {pid})"))
            }
            Event::StartFailed {
                attempt,
                error,
                failure,
            } => (
                // Parking is said every time (once per attempt, at the end of its tries).
                (!matches!(failure, StartFailure::Parked { .. }))
                    .then(|| format!("start-failed {attempt}")),
                format!(
                    "cannot start the driver of {attempt}: {error}; {}",
                    failure_words(failure)
                ),
            ),
            Event::DriverEnded {
                attempt,
                why,
                failure,
            } => (
                Some(format!("driver-ended {attempt}")),
                format!("attempt {attempt}: {why}; {}", failure_words(failure)),
            ),
            Event::Ended(ended) => (
                None,
                format!(
                    "attempt {} of lane {} {}",
                    ended.attempt,
                    ended.lane,
                    ended_words(ended)
                ),
            ),
            Event::Expired(ids) => (
                None,
                format!("not claimed in time, queued again: {}", ids.join(", ")),
            ),
            Event::Answered { op, refused } => match refused {
                Some(code) => (
                    Some(format!("refused {op} {code}")),
                    format!("refused a {op}: {code}"),
                ),
                None => return,
            },
            Event::Trouble {
                error,
                failures,
                retry_in,
            } => (
                Some("trouble".to_owned()),
                format!(
                    "{error} (failed {failures} time(s) in a row; trying again in {} ms; serving \
                     on)",
                    retry_in.as_millis()
                ),
            ),
            Event::Recovered { failures } => {
                (None, format!("working again after {failures} failure(s)"))
            }
            Event::Swept { logs } => (
                None,
                format!("removed {logs} log(s) of attempts past their retention"),
            ),
            Event::Connection(error) => (
                Some(format!("connection {}", connection_key(error))),
                format!("connection: {}", exit::chain(error)),
            ),
            Event::Tick => return,
        };
        let Some(key) = key else {
            errln!("worklane: {now} {line}");
            return;
        };
        let at = std::time::Instant::now();
        match self.seen.get_mut(&key) {
            Some((since, left_out)) if at.duration_since(*since) < QUIET_FOR => {
                *left_out += 1;
            }
            Some((since, left_out)) => {
                let more = std::mem::take(left_out);
                *since = at;
                if more > 0 {
                    errln!("worklane: {now} {line} (and {more} more like it in the last minute)");
                } else {
                    errln!("worklane: {now} {line}");
                }
            }
            None => {
                // Forget the oldest keys past a bound: a line's key names an attempt or a peer.
                if self.seen.len() > 4096 {
                    self.seen
                        .retain(|_, (since, _)| at.duration_since(*since) < QUIET_FOR);
                }
                self.seen.insert(key, (at, 0));
                errln!("worklane: {now} {line}");
            }
        }
    }
}

/// A connection error's kind and peer, so that one peer's repeated trouble is said once.
fn connection_key(error: &worklane_admission::dispatch::server::ConnectionError) -> String {
    use worklane_admission::dispatch::server::ConnectionError as C;
    match error {
        C::Stranger { uid, .. } => format!("stranger {uid}"),
        C::Timeout { uid, .. } => format!("timeout {uid}"),
        C::Evicted { uid } => format!("evicted {uid}"),
        C::Accept(_) => "accept".to_owned(),
        C::Credentials(_) => "credentials".to_owned(),
        C::Receive(_) => "receive".to_owned(),
        C::Reply { op, .. } => format!("reply {op}"),
        _ => "other".to_owned(),
    }
}

fn failure_words(failure: &StartFailure) -> String {
    match failure {
        StartFailure::Retry {
            failures,
            retry_at_ms,
        } => format!(
            "queued again ({failures} failed start(s)); next start at {}",
            rfc3339_ms(*retry_at_ms)
        ),
        StartFailure::Parked { failures } => format!(
            "parked as failed after {failures} failed starts: `worklane queue retry` queues it \
             again, `worklane queue cancel` drops it"
        ),
        StartFailure::Host => {
            "the machine's own trouble: queued again, every admission backing off".to_owned()
        }
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
        own_lane: args.lane.is_none(),
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
    let began = std::time::Instant::now();
    errln!(
        "worklane: {} attempt {attempt} claimed (lane {lane}, slot {slot_name}): running `{}`",
        rfc3339_ms(SystemClock.now_ms()),
        describe(&args.command)
    );
    let marker = dir.file(&cancel_marker(&attempt)).ok();
    let outcome = supervise(
        launch,
        &mut ClaimWatch {
            slot: SlotWatch {
                pool: &pool,
                slot: &mut slot,
            },
            marker,
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
    let how = match (&outcome.halted, outcome.signal) {
        (Some(why), _) => format!("halted ({why}), exit status {}", outcome.code),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => format!("exit status {}", outcome.code),
    };
    errln!(
        "worklane: {} attempt {attempt} ended after {:.1} s: {how}",
        rfc3339_ms(SystemClock.now_ms()),
        began.elapsed().as_secs_f64()
    );
    Ok(ExitCode::from(outcome.code))
}

/// What `worklane claim` watches while its command runs: STOP (as `run` does) and its
/// attempt's cancel marker, which `queue cancel` leaves for a running attempt.
struct ClaimWatch<'a> {
    slot: SlotWatch<'a>,
    marker: Option<worklane_slotfile::SlotPath>,
}

impl Watch for ClaimWatch<'_> {
    fn started(&mut self, command: &Started) {
        self.slot.started(command);
    }

    fn check(&mut self) -> Option<String> {
        if let Some(stop) = self.slot.check() {
            return Some(stop);
        }
        let raw = self.marker.as_ref()?.read().ok().flatten()?;
        let marker: serde_json::Value = serde_json::from_slice(&raw).unwrap_or_default();
        Some(format!(
            "cancelled by `worklane queue cancel` (uid {}) at {}",
            marker.get("by").map_or("?".to_owned(), ToString::to_string),
            marker.get("at").and_then(|v| v.as_str()).unwrap_or("?")
        ))
    }
}

/// The dispatcher's part of `queue ls` (with `all`, its history too). A dispatcher that does
/// not answer (none started) has no attempts, and says so; one that answers and refuses is an
/// error.
pub(crate) fn listing(pool: &Pool, all: bool) -> Result<crate::queue::Listing, Failure> {
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
    let (reply, _) = ask_on(&stream, &Wire::List { all }, &[])?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    let attempts = reply.attempts.unwrap_or_default();
    let logs: Vec<String> = attempts
        .iter()
        .map(|a| pool.dir().path().join(&a.log).display().to_string())
        .collect();
    let mut lines = vec![format!(
        "dispatcher pid {}: {} attempt(s)",
        reply.pid.unwrap_or(0),
        attempts.len()
    )];
    if let Some(damage) = &reply.damage {
        lines.push(format!("DAMAGED QUEUE: {damage}"));
    }
    if let Some(trouble) = &reply.trouble {
        lines.push(format!("TROUBLE: {trouble}"));
    }
    for (a, log) in attempts.iter().zip(&logs) {
        let mut line = format!(
            "{}  lane {}  {}  priority {}  queued {}  stage {:?}  slot {}",
            a.attempt,
            a.lane,
            a.state,
            a.priority,
            rfc3339_ms(a.start_ms),
            a.stage,
            a.slot.as_deref().unwrap_or("-"),
        );
        if a.state == "running" || a.state == "starting" {
            line.push_str(&format!(
                "  driver pid {}  since {}",
                a.driver_pid.map_or("?".to_owned(), |p| p.to_string()),
                rfc3339_ms(a.state_at_ms)
            ));
        }
        if let Some(uid) = a.uid {
            line.push_str(&format!("  uid {uid}"));
        }
        if a.cancel_at_ms.is_some() {
            line.push_str("  (cancelled: being halted)");
        }
        if a.failures > 0 || a.state == "failed" {
            line.push_str(&format!(
                "  {} failed start(s){}: {}",
                a.failures,
                a.retry_at_ms
                    .map(|at| format!(", next at {}", rfc3339_ms(at)))
                    .unwrap_or_default(),
                a.last_error.as_deref().unwrap_or("?")
            ));
        }
        line.push_str(&format!("  log {log}"));
        lines.push(line);
    }
    if let Some(history) = &reply.history {
        lines.push(format!("ended: {}", history.len()));
        for e in history {
            lines.push(format!(
                "{}  lane {}  ended {} {}  log {}",
                e.attempt,
                e.lane,
                rfc3339_ms(e.ended_at_ms),
                ended_words(e),
                e.log
                    .as_deref()
                    .map(|l| pool.dir().path().join(l).display().to_string())
                    .unwrap_or_else(|| "-".to_owned())
            ));
        }
    }
    let json = json::DispatcherList {
        dispatcher_pid: reply.pid,
        attempts,
        logs,
        dispatcher: None,
        history: reply.history,
        trouble: reply.trouble,
        damage: reply.damage,
    };
    Ok(crate::queue::Listing { json, lines })
}

/// The dispatcher's own trouble, as it says it (for `why`); `None` when it has none or does
/// not answer within a second.
pub(crate) fn trouble(pool: &Pool) -> Option<String> {
    let stream = UnixStream::connect(socket_path(pool, None)).ok()?;
    let limit = Some(std::time::Duration::from_secs(1));
    stream.set_read_timeout(limit).ok()?;
    stream.set_write_timeout(limit).ok()?;
    let (reply, _) = ask_on(&stream, &Wire::List { all: false }, &[]).ok()?;
    reply.trouble
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
    match &reply.message {
        Some(halting) => crate::queue::halting(attempt, halting, as_json)?,
        None => crate::queue::cancelled(attempt, "attempt", None, as_json)?,
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn retry(attempt: &str) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let (reply, _) = ask(
        &socket_path(&pool, None),
        &Wire::Retry {
            attempt: attempt.to_owned(),
        },
        &[],
    )?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    outln!("{attempt} queued again, its failed starts forgotten")?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn prune(older_than: Option<std::time::Duration>) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let (reply, _) = ask(
        &socket_path(&pool, None),
        &Wire::Prune {
            older_than_ms: older_than.map(millis),
        },
        &[],
    )?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    let pruned = reply.history.unwrap_or_default();
    outln!(
        "forgot {} ended attempt(s) and removed their logs",
        pruned.len()
    )?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn reconcile(attempt: &str, as_json: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    // 1. The dispatcher's rows and history (if one answers).
    let answered = ask(&socket_path(&pool, None), &Wire::List { all: true }, &[]).ok();
    if let Some((reply, _)) = &answered {
        if let Some(row) = reply
            .attempts
            .iter()
            .flatten()
            .find(|a| a.attempt == attempt)
        {
            let lane_held = pool
                .dir()
                .file(&lane_lock(&row.lane))
                .ok()
                .is_some_and(|path| matches!(path.try_guard(), Ok(None)));
            if row.state == "running" && !lane_held {
                // Ended a moment ago: the dispatcher records how at its next look.
                let text = format!(
                    "{attempt}: nobody holds it: its driver left {} free (how it ended is \
                     in `worklane queue ls --all` in a moment)",
                    lane_lock(&row.lane)
                );
                return say(
                    as_json,
                    attempt,
                    json::Holder::FreeLane {
                        holder: json::Nobody,
                        lane: lane_lock(&row.lane),
                    },
                    &text,
                );
            }
            if row.state == "running" {
                let text = format!(
                    "{attempt}: a driver holds it (pid {}), running on lane {} since {}",
                    row.driver_pid.map_or("?".to_owned(), |p| p.to_string()),
                    row.lane,
                    rfc3339_ms(row.state_at_ms)
                );
                return say(
                    as_json,
                    attempt,
                    json::Holder::driver(lane_lock(&row.lane), row.driver_pid),
                    &text,
                );
            }
            let text = format!(
                "{attempt}: the dispatcher (pid {}) holds it, {} on lane {}",
                reply.pid.unwrap_or(0),
                row.state,
                row.lane
            );
            return say(
                as_json,
                attempt,
                json::Holder::dispatcher(row.state.clone(), row.lane.clone(), reply.pid),
                &text,
            );
        }
        if let Some(ended) = reply
            .history
            .iter()
            .flatten()
            .find(|e| e.attempt == attempt)
        {
            let text = format!(
                "{attempt}: nobody holds it: it ended at {} {}",
                rfc3339_ms(ended.ended_at_ms),
                ended_words(ended)
            );
            return say(
                as_json,
                attempt,
                json::Holder::Ended {
                    holder: json::Nobody,
                    ended: ended.clone(),
                },
                &text,
            );
        }
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
    // 3. Nothing names it: an id the dispatcher never had (or forgot, past its retention).
    let why = match &answered {
        Some(_) => {
            "the dispatcher has no such attempt, queued, running or ended (ended ones are \
                    kept for its retention period, 7 days by default), and no lane names it"
        }
        None => "no dispatcher answers to say whether it had it, and no lane names it",
    };
    if as_json {
        say(
            true,
            attempt,
            json::Holder::Nowhere {
                holder: json::Nobody,
            },
            "",
        )?;
    }
    Err(Failure::new(
        exit::USAGE,
        format!("{attempt}: unknown: {why}"),
    ))
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
