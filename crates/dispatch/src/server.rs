//! The dispatcher's service loop: one thread, one `poll`, every connection nonblocking.
//!
//! Each connection's peer is checked at `accept`, before anything is read (a stranger is told
//! and closed at once); a connection then has [`REQUEST_TIMEOUT`] for its whole request and
//! as long again for its reply, and at most [`MAX_PER_PEER`] connections of one uid (and
//! [`MAX_CONNECTIONS`] in all) are kept: a new one closes the oldest of its uid (or the oldest
//! of all). So no connection, nor any number of them, can hold the queue: between requests,
//! at least every [`TICK`], the loop expires starting attempts, learns which drivers ended,
//! admits queued ones and beats the status entries' heartbeat.
//!
//! A step of the loop that fails (the disk full, the database or a slot unwritable) is
//! reported ([`Event::Trouble`]), shown by `list`, and retried with a backoff that doubles up
//! to [`MAX_TROUBLE_BACKOFF`]; the loop serves on. Only its own socket failing ends it.
//!
//! Files: `conn` (accepting, reading and closing connections), `answer` (one request: the
//! service asked, what its decision asks of the loop done), `reply` (the one place where the
//! service's outcomes and refusals become replies, each refusal with its code), `event` (what
//! the loop reports).

use crate::service::{
    Admitted, Caller, Dispatcher, DriverEnded, Error as ServiceError, Exit, StartFailure, Started,
};
use crate::status;
use crate::wire::{EndedView, Reply, Request, code};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use worklane_guard::Guard;
use worklane_transport::{self as transport, Refused, Trust};

mod answer;
mod conn;
mod event;
mod reply;

use conn::{Conn, Outgoing, spare};
pub use event::{ConnectionError, Event};

/// How often the loop looks at the queue without a request (expiry, admission after a slot
/// was freed elsewhere, STOP lifted).
pub const TICK: Duration = Duration::from_millis(100);
/// The least time between two passes brought forward by changes in the slot directory.
pub const MIN_TICK_GAP: Duration = Duration::from_millis(20);
/// How often every status entry's heartbeat is rewritten.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// How long a connection may take to send its whole request, from its accept; its reply has
/// as long again.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The most connections kept at once; a new one beyond closes the oldest.
pub const MAX_CONNECTIONS: usize = 256;
/// The most connections of one uid kept at once; a new one beyond closes that uid's oldest.
pub const MAX_PER_PEER: usize = 32;
/// The most connections accepted in one turn of the loop, before those accepted are served.
pub const ACCEPT_BATCH: usize = 32;
/// The first wait after a step of the loop failed; it doubles up to [`MAX_TROUBLE_BACKOFF`].
pub const TROUBLE_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between two tries of a failing step.
pub const MAX_TROUBLE_BACKOFF: Duration = Duration::from_secs(30);
/// How often, at most, the history and the logs are swept of what is past its retention
/// (every quarter of the retention period when that is shorter, and at least every second).
pub const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// Starts an admitted attempt's driver and returns its pid (and a pidfd of it).
type Launch<'a> = Box<dyn FnMut(&Admitted) -> std::io::Result<Started> + 'a>;

#[cfg(feature = "test-seams")]
pub use crash::CrashPoint;
#[cfg(not(feature = "test-seams"))]
use crash::CrashPoint;

/// The crash-test seam's points, public with the `test-seams` feature only.
mod crash {
    /// A point of the loop where a crash test stops the process (test seam, feature
    /// `test-seams`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[cfg_attr(
        not(feature = "test-seams"),
        allow(
            unreachable_pub,
            clippy::enum_variant_names,
            reason = "exported with the test-seams feature, and named as it exports them"
        )
    )]
    pub enum CrashPoint {
        /// An enqueue's row is committed, its reply not yet sent.
        AfterInsert,
        /// An attempt is admitted (starting, its slot taken), its driver not yet started.
        AfterAdmit,
        /// A claimed row is marked running, its descriptors not yet sent.
        AfterClaimRemove,
    }
}

/// A step of the loop failing again and again.
struct Trouble {
    failures: u32,
    next: Instant,
    error: String,
}

/// The dispatcher serving `listener` until `stop` is set.
pub struct Server<'a> {
    dispatcher: Dispatcher,
    listener: UnixListener,
    trust: Trust,
    launch: Launch<'a>,
    exits: Box<dyn FnMut() -> Vec<Exit> + 'a>,
    report: Box<dyn FnMut(Event) + 'a>,
    #[cfg(feature = "test-seams")]
    crash: Option<(CrashPoint, Box<dyn Fn() + 'a>)>,
    /// A descriptor kept in reserve: when the process has no other left, it is closed to
    /// accept the waiting connection and refuse it, instead of leaving it pending (and the
    /// listener readable, so the loop would spin).
    spare: Option<std::fs::File>,
    /// Out of descriptors with no spare to refuse with: the listener is left out of the poll
    /// until then (it stays readable while the connection waits, and the loop would spin).
    accept_paused_until: Option<Instant>,
    /// That pause was reported (once until a connection is accepted again).
    pause_reported: bool,
    conns: Vec<Conn>,
    seq: u64,
    trouble: Option<Trouble>,
    /// The most connections of one uid kept at once ([`MAX_PER_PEER`] unless set).
    per_user: usize,
}

impl std::fmt::Debug for Server<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("dispatcher", &self.dispatcher)
            .field("trust", &self.trust)
            .field("connections", &self.conns.len())
            .finish_non_exhaustive()
    }
}

use worklane_stdx::chain;

impl<'a> Server<'a> {
    /// A server of `dispatcher` on `listener`, starting each admitted attempt's driver with
    /// `launch` (which returns the driver's pid) and telling `report` what happens.
    pub fn new<S: Into<Started>>(
        dispatcher: Dispatcher,
        listener: UnixListener,
        trust: Trust,
        mut launch: impl FnMut(&Admitted) -> std::io::Result<S> + 'a,
        report: impl FnMut(Event) + 'a,
    ) -> Server<'a> {
        Server {
            dispatcher,
            listener,
            trust,
            launch: Box::new(move |admitted| launch(admitted).map(Into::into)),
            exits: Box::new(Vec::new),
            report: Box::new(report),
            #[cfg(feature = "test-seams")]
            crash: None,
            spare: spare(),
            accept_paused_until: None,
            pause_reported: false,
            conns: Vec::new(),
            seq: 0,
            trouble: None,
            per_user: MAX_PER_PEER,
        }
    }

    /// Tells the loop which of the drivers it started ended: `exits` is asked at every round
    /// (the caller reaps its children, which the drivers are).
    #[must_use]
    pub fn with_exits(mut self, exits: impl FnMut() -> Vec<Exit> + 'a) -> Server<'a> {
        self.exits = Box::new(exits);
        self
    }

    /// Keeps at most `n` connections of one uid at once (at least 1, at most
    /// [`MAX_CONNECTIONS`]): a new one beyond closes that uid's oldest.
    #[must_use]
    pub fn with_connections_per_user(mut self, n: usize) -> Server<'a> {
        self.per_user = n.clamp(1, MAX_CONNECTIONS);
        self
    }

    /// Test seam (feature `test-seams`): calls `die` (which must not return: it kills the
    /// process) at `point`.
    #[cfg(feature = "test-seams")]
    #[must_use]
    pub fn crash_at(mut self, point: CrashPoint, die: impl Fn() + 'a) -> Server<'a> {
        self.crash = Some((point, Box::new(die)));
        self
    }

    /// The loop reached `point`: the test seam's `die` runs if it was set for it.
    #[cfg(feature = "test-seams")]
    fn at(&self, point: CrashPoint) {
        if let Some((at, die)) = &self.crash
            && *at == point
        {
            die();
        }
    }

    /// The loop reached `point`: without the test seams, nothing happens.
    #[cfg(not(feature = "test-seams"))]
    #[inline]
    fn at(&self, _point: CrashPoint) {}

    /// Serves until `stop` is set (checked at least every [`TICK`]). Rows stay in the database
    /// when it returns; the lanes are freed with the descriptors and recovered at the next
    /// start. Only the listening socket's own failure is an error.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), ServiceError> {
        self.listener
            .set_nonblocking(true)
            .map_err(|source| ServiceError::Socket {
                op: "make the dispatcher's socket nonblocking",
                source,
            })?;
        self.heartbeat();
        self.sweep();
        let mut last_heartbeat = Instant::now();
        let mut last_sweep = Instant::now();
        let sweep_every = SWEEP_EVERY
            .min(Duration::from_millis(
                self.dispatcher.settings().retention_ms / 4,
            ))
            .max(Duration::from_secs(1));
        let mut last_tick = Instant::now() - TICK;
        // Woken as a `worklane run` is: a slot released or a place in the agents' line left
        // lets a queued row on at once, not at the next tick.
        let watches = worklane_admission::watch::Watches::default();
        let mut watch = watches.watch(self.dispatcher.pool().dir());
        // A change that may let a row on, not yet acted on: the tick comes early, but never
        // sooner than MIN_TICK_GAP after the last (a member rewriting STOP or the config in a
        // loop buys at most that many passes a second).
        let mut early = false;
        while !stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            let next_tick = if early {
                last_tick + MIN_TICK_GAP
            } else {
                last_tick + TICK
            };
            let wake = self
                .conns
                .iter()
                .map(|c| c.deadline)
                .chain([next_tick])
                .min()
                .unwrap_or(now + TICK);
            let wait = wake.saturating_duration_since(now).min(TICK);
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: i64::try_from(wait.as_nanos()).unwrap_or(100_000_000),
            };
            let changes = watch.fd();
            let mut fds = Vec::with_capacity(self.conns.len() + 2);
            if self.accept_paused_until.is_none_or(|until| until <= now) {
                fds.push(rustix::event::PollFd::new(
                    &self.listener,
                    rustix::event::PollFlags::IN,
                ));
            }
            if let Some(changes) = &changes {
                fds.push(rustix::event::PollFd::new(
                    changes,
                    rustix::event::PollFlags::IN,
                ));
            }
            let first = fds.len();
            for conn in &self.conns {
                let want = if conn.out.is_some() {
                    rustix::event::PollFlags::OUT
                } else {
                    rustix::event::PollFlags::IN
                };
                fds.push(rustix::event::PollFd::new(&conn.stream, want));
            }
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    return Err(ServiceError::Socket {
                        op: "wait for connections on the dispatcher's socket",
                        source: e.into(),
                    });
                }
            }
            let ready: Vec<bool> = fds[first..]
                .iter()
                .map(|fd| !fd.revents().is_empty())
                .collect();
            drop(fds);
            // Only a change that may let a row on (a slot released, a place in the line left,
            // STOP, the drain flag or the config changed) brings the tick forward; the loop's
            // own writes (status entries, epochs, its line entry) and anything else wake the
            // poll, are read and forgotten, and wait for the next tick.
            early |= watch.drain(&|name| {
                worklane_admission::Pool::wakes(worklane_admission::Kind::Agent, name)
            });
            self.serve_ready(&ready);
            self.accept_all();
            self.close_overdue();
            let since = last_tick.elapsed();
            if (early && since >= MIN_TICK_GAP) || since >= TICK {
                self.guarded_tick();
                (self.report)(Event::Tick);
                last_tick = Instant::now();
                early = false;
            }
            if last_heartbeat.elapsed() >= HEARTBEAT {
                self.heartbeat();
                last_heartbeat = Instant::now();
            }
            if last_sweep.elapsed() >= sweep_every {
                self.sweep();
                last_sweep = Instant::now();
            }
        }
        Ok(())
    }

    /// [`Server::tick`], unless a failing step is waiting out its backoff; a failure starts
    /// (or lengthens) that backoff and is reported, a success ends it.
    fn guarded_tick(&mut self) {
        if self
            .trouble
            .as_ref()
            .is_some_and(|t| Instant::now() < t.next)
        {
            return;
        }
        let failures = self.trouble.as_ref().map(|t| t.failures);
        match self.tick() {
            // A pass that met the host's trouble starting a driver returns its admissions
            // but is troubled itself (`tick` counted the failure): not a recovery.
            Ok(_) if self.trouble.as_ref().map(|t| t.failures) != failures => {}
            Ok(_) => {
                if let Some(trouble) = self.trouble.take() {
                    (self.report)(Event::Recovered {
                        failures: trouble.failures,
                    });
                }
            }
            Err(e) => self.troubled(chain(&e)),
        }
    }

    /// A step failed with `error`: retried after a backoff that doubles with each failure in
    /// a row.
    fn troubled(&mut self, error: String) {
        let failures = self.trouble.as_ref().map_or(0, |t| t.failures) + 1;
        let retry_in = TROUBLE_BACKOFF
            .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
            .min(MAX_TROUBLE_BACKOFF);
        (self.report)(Event::Trouble {
            error: error.clone(),
            failures,
            retry_in,
        });
        self.trouble = Some(Trouble {
            failures,
            next: Instant::now() + retry_in,
            error,
        });
    }

    /// Learns which drivers ended and which runs are over, expires, then admits while the
    /// pool has room; returns the attempts it admitted (their status entries written). A
    /// driver that cannot be started is the attempt's failure (backed off, or parked), and
    /// the next row is tried; the host's own trouble stops the round as an error.
    pub fn tick(&mut self) -> Result<Vec<String>, ServiceError> {
        for exit in (self.exits)() {
            match self.dispatcher.exited(exit)? {
                DriverEnded::BeforeClaim {
                    attempt,
                    failure,
                    why,
                } => {
                    self.write_entry(&attempt);
                    (self.report)(Event::DriverEnded {
                        attempt,
                        why,
                        failure,
                    });
                }
                DriverEnded::Running(_) | DriverEnded::Unknown => {}
            }
        }
        for ended in self.dispatcher.runs()? {
            (self.report)(Event::Ended(ended));
        }
        let mut admitted_ids = Vec::new();
        self.dispatcher.halt_expired();
        let expired = self.dispatcher.expire()?;
        if !expired.is_empty() {
            for id in &expired {
                self.write_entry(id);
            }
            (self.report)(Event::Expired(expired));
        }
        let mut host_trouble = None;
        while let Some(admitted) = self.dispatcher.admit_next()? {
            self.at(CrashPoint::AfterAdmit);
            let id = admitted.attempt.id.clone();
            match (self.launch)(&admitted) {
                Ok(started) => {
                    let pid = started.pid;
                    self.dispatcher.started(&id, started)?;
                    (self.report)(Event::Started {
                        attempt: id.clone(),
                        pid,
                    });
                    self.write_entry(&id);
                    admitted_ids.push(id);
                }
                Err(error) => {
                    let failure = self.dispatcher.launch_failed(&id, &error)?;
                    let text = chain(&error);
                    self.write_entry(&id);
                    (self.report)(Event::StartFailed {
                        attempt: id.clone(),
                        error: text.clone(),
                        failure: failure.clone(),
                    });
                    if failure == StartFailure::Host {
                        host_trouble = Some(format!("cannot start the driver of {id}: {text}"));
                        break;
                    }
                }
            }
        }
        // Rows queued by an enqueue, an expiry or a failed start stand in the agents' line.
        self.dispatcher.stand()?;
        if let Some(error) = host_trouble {
            self.troubled(error);
        }
        Ok(admitted_ids)
    }

    /// Rewrites the status entry of attempt `id` (after its state changed); a failure is the
    /// view's, never the queue's.
    fn write_entry(&mut self, id: &str) {
        let now = self.dispatcher.pool().clock().now_ms();
        if let Ok(Some(view)) = self.dispatcher.view(id)
            && view.state != "running"
        {
            let _ =
                status::write_entry(self.dispatcher.pool().dir(), &view, std::process::id(), now);
        }
    }

    /// Rewrites every waiting attempt's status entry with this dispatcher's pid and the time.
    fn heartbeat(&mut self) {
        let now = self.dispatcher.pool().clock().now_ms();
        let pid = std::process::id();
        match self.dispatcher.list() {
            Ok(views) => {
                for view in views.iter().filter(|v| v.state != "running") {
                    let _ = status::write_entry(self.dispatcher.pool().dir(), view, pid, now);
                }
            }
            Err(e) => self.troubled(chain(&e)),
        }
    }

    /// Forgets what is past its retention (history, logs).
    fn sweep(&mut self) {
        match self.dispatcher.sweep() {
            Ok(0) => {}
            Ok(logs) => (self.report)(Event::Swept { logs }),
            Err(e) => self.troubled(chain(&e)),
        }
    }
}
