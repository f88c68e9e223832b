//! The service loop's own pace, on a real socket in a thread of this process: when its
//! passes come (at once, every `TICK`, early after a change in the slot directory, never
//! spinning), when the heartbeat and the sweep come, and how a failing step backs off.
//!
//! Every wait is bounded (an event within a deadline); what is timed is compared with the
//! loop's own lower bounds (a pass can never come sooner than its constant allows), measured
//! between instants taken in the loop's report callback.
use super::*;
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Instant, SystemTime};
use worklane_dispatch::server::{Event, HEARTBEAT, MIN_TICK_GAP, Server, TICK, TROUBLE_BACKOFF};
use worklane_dispatch::service::{Dispatcher, Settings, lane_lock};
use worklane_dispatch::store::Store;
use worklane_lease::{Acquired, Options};
use worklane_transport::Trust;

const T0: u64 = 1_800_000_000_000;
/// The longest any one wait of these tests lasts.
const BOUND: Duration = Duration::from_secs(10);

type Launch = Box<dyn FnMut() -> std::io::Result<u32> + Send>;
/// Run before the loop starts, with the site and its socket bound; what it returns is kept.
type Before = Box<dyn FnOnce(&Site, &PathBuf) -> Vec<UnixStream>>;

struct Looped {
    site: Site,
    clock: ManualClock,
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    events: mpsc::Receiver<(Instant, Event)>,
    /// The loop's thread; it returns the CPU time it used.
    thread: Option<std::thread::JoinHandle<Duration>>,
}

struct Setup {
    config: &'static str,
    settings: Settings,
    per_user: usize,
    /// Called for each admitted attempt, as the driver's start.
    launch: Launch,
    /// Set the loop's stop flag when it reports an eviction.
    stop_on_evict: bool,
    /// Run before the loop starts, with the site and its socket bound.
    before: Before,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            config: r#"{"max_agents": 8}"#,
            settings: Settings::default(),
            per_user: 32,
            launch: Box::new(|| Ok(4242)),
            stop_on_evict: false,
            before: Box::new(|_, _| Vec::new()),
        }
    }
}

impl Looped {
    fn start(setup: Setup) -> (Looped, Vec<UnixStream>) {
        let site = Site::new(setup.config);
        let clock = ManualClock::at(T0);
        let pool = site.pool.clone().with_clock(Arc::new(clock.clone()));
        let socket = site.temp.path().join("dispatcher.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        let kept = (setup.before)(&site, &socket);
        let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
        let dispatcher = Dispatcher::recover(pool, store, setup.settings).expect("recover");
        let stat = std::fs::metadata(site.temp.path()).expect("stat");
        let trust = Trust {
            owner: std::os::unix::fs::MetadataExt::uid(&stat),
            group: std::os::unix::fs::MetadataExt::gid(&stat),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, events) = mpsc::channel();
        let thread = {
            let stop = Arc::clone(&stop);
            let (per_user, stop_on_evict, mut launch) =
                (setup.per_user, setup.stop_on_evict, setup.launch);
            std::thread::spawn(move || {
                let told = Arc::clone(&stop);
                let mut server = Server::new(
                    dispatcher,
                    listener,
                    trust,
                    move |_| launch(),
                    move |event| {
                        if stop_on_evict
                            && matches!(
                                event,
                                Event::Connection(
                                    worklane_dispatch::server::ConnectionError::Evicted { .. }
                                )
                            )
                        {
                            told.store(true, Ordering::SeqCst);
                        }
                        let _ = tx.send((Instant::now(), event));
                    },
                )
                .with_connections_per_user(per_user);
                server.run(&stop).expect("serve");
                thread_cpu()
            })
        };
        (
            Looped {
                site,
                clock,
                socket,
                stop,
                events,
                thread: Some(thread),
            },
            kept,
        )
    }

    /// The next event that `pick` keeps (the others are skipped), within [`BOUND`] of now.
    fn next<T>(&self, what: &str, mut pick: impl FnMut(Instant, &Event) -> Option<T>) -> T {
        let deadline = Instant::now() + BOUND;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, event) = self
                .events
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("{what} within {BOUND:?}: {e}"));
            if let Some(kept) = pick(at, &event) {
                return kept;
            }
        }
    }

    fn ask(&self, request: serde_json::Value, fds: &[std::os::fd::BorrowedFd<'_>]) -> bool {
        let stream = UnixStream::connect(&self.socket).expect("connect");
        // A loop that stops serving fails the test within the bound instead of hanging it.
        stream.set_read_timeout(Some(BOUND)).expect("read timeout");
        worklane_transport::send(&stream, request.to_string().as_bytes(), fds).expect("send");
        let (line, _fds) = worklane_transport::recv(&stream).expect("reply");
        let reply: serde_json::Value = serde_json::from_slice(&line).expect("json");
        reply["ok"].as_bool() == Some(true)
    }

    /// Takes `lane` as a launcher and enqueues it, handing its guard over.
    fn enqueue(&self, lane: &str) -> bool {
        let dir = self.site.pool.dir();
        let lease = match gate::quietly(|| {
            worklane_lease::acquire(
                dir,
                &lane_lock(lane),
                &Request::new("launcher"),
                &Options::process(),
            )
        })
        .expect("acquire")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("lane {lane} is free: {r}"),
        };
        let guard = lease.hand_over().expect("held");
        let request = serde_json::json!({"op": "enqueue", "lane": lane, "start_ms": 1, "priority": 0, "args": ["driver"]});
        let ok = self.ask(request, &[guard.as_fd()]);
        gate::quietly(|| drop(guard));
        ok
    }

    fn path(&self, name: &str) -> PathBuf {
        self.site.temp.path().join(name)
    }

    /// Stops the loop and returns the CPU time its thread used.
    fn stop(mut self) -> Duration {
        self.stop.store(true, Ordering::SeqCst);
        let thread = self.thread.take().expect("running");
        let deadline = Instant::now() + BOUND;
        while !thread.is_finished() {
            assert!(Instant::now() < deadline, "the loop ends within {BOUND:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
        thread.join().expect("the loop ends cleanly")
    }
}

/// The CPU time the calling thread used.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).expect("seconds"),
        u32::try_from(t.tv_nsec).expect("nanoseconds"),
    )
}

fn stop_file(looped: &Looped) {
    std::fs::write(looped.path("STOP"), br#"{"by":"t","at":"","reason":"r"}"#).expect("STOP");
}

/// With nothing to do, the loop passes every `TICK`, never sooner, and waits in between:
/// its thread sleeps, it does not spin.
#[test]
fn an_idle_loop_passes_every_tick_and_sleeps_between() {
    let (looped, _) = Looped::start(Setup::default());
    let began = Instant::now();
    let mut ticks = Vec::new();
    while ticks.len() < 8 {
        ticks.push(looped.next("a tick", |at, e| matches!(e, Event::Tick).then_some(at)));
    }
    let wall = began.elapsed();
    let cpu = looped.stop();
    for pair in ticks.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= TICK, "passes {gap:?} apart, not {TICK:?}: {ticks:?}");
    }
    assert!(
        cpu < wall / 4,
        "the loop's thread used {cpu:?} of CPU in {wall:?}: it spins"
    );
}

/// The first pass comes in the loop's first turn: a row waiting from before is not held
/// back a whole `TICK`. The loop is stopped from within its first turn (when it closes the
/// older of two connections of one user, accepted in that turn), and had passed once.
#[test]
fn the_first_pass_comes_in_the_first_turn() {
    let (looped, _conns) = Looped::start(Setup {
        per_user: 1,
        stop_on_evict: true,
        before: Box::new(|_, socket| {
            (0..2)
                .map(|_| UnixStream::connect(socket).expect("connect"))
                .collect()
        }),
        ..Setup::default()
    });
    looped.next("the eviction", |_, e| {
        matches!(e, Event::Connection(_)).then_some(())
    });
    let thread = looped.thread.as_ref().expect("running");
    let deadline = Instant::now() + BOUND;
    while !thread.is_finished() {
        assert!(Instant::now() < deadline, "stopped by its own callback");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut ticks = 0;
    while let Ok((_, event)) = looped.events.try_recv() {
        ticks += usize::from(matches!(event, Event::Tick));
    }
    assert_eq!(ticks, 1, "one pass, in the first turn");
    let _cpu = looped.stop();
}

/// STOP lifted lets a queued row on at the next pass brought forward (never sooner than
/// `MIN_TICK_GAP` after the last), not a whole `TICK` later.
#[test]
fn a_change_in_the_slot_directory_brings_the_pass_forward() {
    let (looped, _) = Looped::start(Setup::default());
    let mut gaps = Vec::new();
    for k in 0..5 {
        stop_file(&looped);
        let lane = format!("early{k}");
        assert!(looped.enqueue(&lane), "accepted, queued behind STOP");
        std::fs::remove_file(looped.path("STOP")).expect("lift STOP");
        let mut last_tick = None;
        let gap = looped.next("the row's start", |at, e| match e {
            Event::Tick => {
                last_tick = Some(at);
                None
            }
            Event::Started { .. } => Some(last_tick.map(|t| at - t)),
            _ => None,
        });
        if let Some(gap) = gap {
            gaps.push(gap);
        }
    }
    let _cpu = looped.stop();
    assert!(!gaps.is_empty(), "a tick came before some start");
    for gap in &gaps {
        assert!(
            *gap >= MIN_TICK_GAP,
            "a pass {gap:?} after the last: {gaps:?}"
        );
    }
    assert!(
        gaps.iter().any(|gap| *gap < TICK),
        "no pass came early: {gaps:?}"
    );
}

/// The heartbeat is rewritten every `HEARTBEAT`, not at every pass: a waiting row's entry
/// keeps the time it was written at over the passes, and has the clock's new time once the
/// heartbeat comes, never sooner than `HEARTBEAT` after the loop started.
#[test]
fn the_heartbeat_waits_its_period() {
    let began = Instant::now();
    let (looped, _) = Looped::start(Setup::default());
    stop_file(&looped);
    assert!(looped.enqueue("beat"), "accepted, queued behind STOP");
    let heartbeat = || -> String {
        let raw = std::fs::read(looped.path("queue-beat.json")).expect("entry");
        let entry: serde_json::Value = serde_json::from_slice(&raw).expect("json");
        entry["dispatcher"]["heartbeat"]
            .as_str()
            .expect("heartbeat")
            .to_owned()
    };
    let written = heartbeat();
    assert_eq!(written, worklane_lease::rfc3339_ms(T0));
    looped.clock.advance(60_000);
    let deadline = began + HEARTBEAT + BOUND;
    let (seen, rewritten) = loop {
        assert!(
            Instant::now() < deadline,
            "the heartbeat within {HEARTBEAT:?}"
        );
        looped.next("a tick", |_, e| matches!(e, Event::Tick).then_some(()));
        let now = heartbeat();
        if now != written {
            break (Instant::now(), now);
        }
    };
    let _cpu = looped.stop();
    assert_eq!(rewritten, worklane_lease::rfc3339_ms(T0 + 60_000));
    assert!(
        seen - began >= HEARTBEAT,
        "rewritten {:?} after the start, not {HEARTBEAT:?}",
        seen - began
    );
}

fn old_log(site: &Site, name: &str) {
    let path = site.temp.path().join(name);
    let file = std::fs::File::create(&path).expect("log");
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000))
        .expect("mtime");
}

/// The sweep comes at the start and then every quarter of the retention (here 2 s): not at
/// every pass, not sooner, not later.
#[test]
fn the_sweep_comes_every_quarter_of_the_retention() {
    let (looped, _) = Looped::start(Setup {
        settings: Settings {
            retention_ms: 8_000,
            ..Settings::default()
        },
        before: Box::new(|site, _| {
            old_log(site, "queue-a-gone1.log");
            Vec::new()
        }),
        ..Setup::default()
    });
    let swept = |what| {
        looped.next(what, |at, e| {
            matches!(e, Event::Swept { logs: 1 }).then_some(at)
        })
    };
    let first = swept("the sweep at the start");
    old_log(&looped.site, "queue-a-gone2.log");
    let second = swept("the next sweep");
    let _cpu = looped.stop();
    let every = Duration::from_secs(2);
    assert!(
        second - first >= every,
        "swept again after {:?}, not {every:?}",
        second - first
    );
}

/// The host's trouble starting a driver (no memory) backs every admission off: tried again
/// after `TROUBLE_BACKOFF`, then twice that, reported with its count; the success after it
/// is reported as the recovery.
#[test]
fn a_driver_that_cannot_start_for_the_host_s_trouble_backs_the_loop_off() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (looped, _) = Looped::start(Setup {
        launch: Box::new({
            let calls = Arc::clone(&calls);
            move || {
                let mut calls = calls.lock().expect("calls");
                calls.push(Instant::now());
                if calls.len() <= 2 {
                    Err(std::io::Error::from_raw_os_error(
                        rustix::io::Errno::NOMEM.raw_os_error(),
                    ))
                } else {
                    Ok(4242)
                }
            }
        }),
        ..Setup::default()
    });
    assert!(looped.enqueue("host"), "accepted");
    let mut seen = Vec::new();
    let mut troubles = Vec::new();
    while !matches!(seen.last(), Some(s) if s == "recovered 2") {
        let (at, what) = looped.next("trouble, start and recovery", |at, e| match e {
            Event::Trouble {
                failures, retry_in, ..
            } => Some((Some(at), format!("trouble {failures} {retry_in:?}"))),
            Event::Recovered { failures } => Some((None, format!("recovered {failures}"))),
            Event::Started { .. } => Some((None, "started".to_owned())),
            Event::StartFailed { .. } => Some((None, "start failed".to_owned())),
            _ => None,
        });
        troubles.extend(at);
        seen.push(what);
        assert!(seen.len() <= 6, "{seen:?}");
    }
    let _cpu = looped.stop();
    assert_eq!(
        seen,
        [
            "start failed",
            "trouble 1 250ms",
            "start failed",
            "trouble 2 500ms",
            "started",
            "recovered 2"
        ]
    );
    let calls = calls.lock().expect("calls").clone();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls[1] - troubles[0] >= TROUBLE_BACKOFF,
        "tried again {:?} after the first failure",
        calls[1] - troubles[0]
    );
    assert!(
        calls[2] - troubles[1] >= TROUBLE_BACKOFF * 2,
        "tried again {:?} after the second",
        calls[2] - troubles[1]
    );
}
