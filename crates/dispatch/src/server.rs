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

/// What the loop reports to its caller (the CLI logs it).
#[derive(Debug)]
pub enum Event {
    /// An attempt was admitted and its driver started (pid).
    Started {
        /// The attempt.
        attempt: String,
        /// The driver's pid.
        pid: u32,
    },
    /// An admitted attempt's driver could not be started.
    StartFailed {
        /// The attempt.
        attempt: String,
        /// Why, in words (the launch's error and its causes).
        error: String,
        /// What became of the attempt.
        failure: StartFailure,
    },
    /// A starting attempt's driver ended before it claimed: a failed start.
    DriverEnded {
        /// The attempt.
        attempt: String,
        /// How the driver ended.
        why: String,
        /// What became of the attempt.
        failure: StartFailure,
    },
    /// A running attempt ended (kept in the history).
    Ended(EndedView),
    /// A request was answered.
    Answered {
        /// The request's op.
        op: &'static str,
        /// The reply's error code, if refused.
        refused: Option<String>,
    },
    /// Starting attempts expired back to the queue.
    Expired(Vec<String>),
    /// A step of the loop failed: retried after `retry_in`, the loop serving on.
    Trouble {
        /// The error and its causes.
        error: String,
        /// How many times in a row it failed.
        failures: u32,
        /// When it is tried again.
        retry_in: Duration,
    },
    /// A failing step succeeded again.
    Recovered {
        /// How many times it had failed.
        failures: u32,
    },
    /// Ended attempts past their retention were forgotten and their logs removed.
    Swept {
        /// How many logs went.
        logs: usize,
    },
    /// A connection failed (a peer that went away, a malformed message, a stranger).
    Connection(ConnectionError),
    /// The loop went round (at least every [`TICK`]): it is alive.
    Tick,
}

/// Why one connection failed: its own trouble, reported as an [`Event`], never the server's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// A waiting connection could not be accepted.
    #[error("cannot accept a connection")]
    Accept(#[source] std::io::Error),
    /// The peer's credentials could not be read: it is refused.
    #[error("cannot read a connection's peer credentials")]
    Credentials(#[source] transport::Error),
    /// The peer is neither root, the directory's owner nor in its group: refused at once.
    #[error(
        "refused a connection of uid {uid} (pid {pid:?}): not root, the owner or a member of the group"
    )]
    Stranger {
        /// Its uid.
        uid: u32,
        /// Its pid, where known.
        pid: Option<u32>,
    },
    /// The request did not arrive whole within [`REQUEST_TIMEOUT`] (or its reply was not
    /// read within as long): closed.
    #[error("closed a connection of uid {uid} that took more than {} s to {what}", REQUEST_TIMEOUT.as_secs())]
    Timeout {
        /// Its uid.
        uid: u32,
        /// `send its request` or `read its reply`.
        what: &'static str,
    },
    /// A new connection of the same uid (or any, at the overall limit) closed this, the
    /// oldest.
    #[error("closed the oldest connection of uid {uid}: too many open at once")]
    Evicted {
        /// Its uid.
        uid: u32,
    },
    /// The request could not be received whole.
    #[error("cannot receive a request")]
    Receive(#[source] transport::Error),
    /// The reply could not be sent.
    #[error("cannot send the reply to a {op}")]
    Reply {
        /// The request's op.
        op: &'static str,
        /// Why.
        #[source]
        source: transport::Error,
    },
}

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

/// A reply on its way out.
struct Outgoing {
    sender: transport::Sender,
    fds: Vec<Guard>,
    op: &'static str,
    refused: Option<String>,
}

/// One connection: its peer, its deadline, and its request or reply as far as it got.
struct Conn {
    stream: UnixStream,
    caller: Caller,
    /// Accept order, for closing the oldest.
    seq: u64,
    deadline: Instant,
    reader: transport::Reader,
    out: Option<Outgoing>,
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
    conns: Vec<Conn>,
    seq: u64,
    trouble: Option<Trouble>,
    /// The most connections of one uid kept at once ([`MAX_PER_PEER`] unless set).
    per_user: usize,
}

fn spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
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

/// An error and its causes, `outer: inner: innermost`, for a reply the client shows.
fn chain(error: &dyn std::error::Error) -> String {
    crate::service::chain(error)
}

/// A refusal sent without waiting on a socket that may not read it (a stranger, an evicted
/// connection): best effort, then the connection is closed.
fn refuse_now(stream: &UnixStream, code: &str, message: String) {
    let _ = stream.set_nonblocking(true);
    let reply = Reply::refused(code, message);
    if let Ok(mut sender) = transport::Sender::new(&serde_json::to_vec(&reply).unwrap_or_default())
    {
        let _ = sender.send(stream, &[]);
    }
}

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
            fds.push(rustix::event::PollFd::new(
                &self.listener,
                rustix::event::PollFlags::IN,
            ));
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

    /// Accepts the waiting connections, at most [`ACCEPT_BATCH`] a turn (a client that
    /// connects and closes as fast as it can never keeps the loop from serving the connections
    /// it accepted, nor from its ticks): each peer checked before anything is read (a stranger
    /// is told and closed), then kept within the limits.
    fn accept_all(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            match self.listener.accept() {
                Ok((stream, _)) => self.welcome(stream),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        rustix::io::Errno::from_io_error(&e),
                        Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)
                    ) && self.spare.is_some() =>
                {
                    self.refuse_for_want_of_descriptors(e);
                    break;
                }
                Err(e) => {
                    (self.report)(Event::Connection(ConnectionError::Accept(e)));
                    break;
                }
            }
        }
    }

    /// A connection just accepted: refused at once unless its peer is trusted; else kept, the
    /// oldest of its uid (or of all) closed if it is one too many.
    fn welcome(&mut self, stream: UnixStream) {
        let _ = stream.set_nonblocking(true);
        let admitted = match self.trust.check(&stream) {
            Ok(admitted) => admitted,
            Err(Refused::Credentials(e)) => {
                refuse_now(
                    &stream,
                    code::PERMISSION,
                    "the dispatcher cannot tell who you are (no peer credentials)".to_owned(),
                );
                (self.report)(Event::Connection(ConnectionError::Credentials(e)));
                return;
            }
            Err(refused) => {
                refuse_now(
                    &stream,
                    code::PERMISSION,
                    "only root, the slot directory's owner or a member of its group may use the \
                     dispatcher"
                        .to_owned(),
                );
                if let Refused::Stranger { uid, pid, .. } = refused {
                    (self.report)(Event::Connection(ConnectionError::Stranger { uid, pid }));
                }
                return;
            }
        };
        let (peer, groups) = (admitted.peer, admitted.groups);
        let same = self
            .conns
            .iter()
            .filter(|c| c.caller.uid == peer.uid)
            .count();
        if same >= self.per_user {
            self.evict(Some(peer.uid));
        } else if self.conns.len() >= MAX_CONNECTIONS {
            self.evict(None);
        }
        self.seq += 1;
        self.conns.push(Conn {
            stream,
            caller: Caller {
                pid: peer.pid,
                uid: peer.uid,
                gid: peer.gid,
                groups,
            },
            seq: self.seq,
            deadline: Instant::now() + REQUEST_TIMEOUT,
            reader: transport::Reader::default(),
            out: None,
        });
    }

    /// Closes the oldest connection (of `uid`, where given), telling it why.
    fn evict(&mut self, uid: Option<u32>) {
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| uid.is_none_or(|u| c.caller.uid == u))
            .min_by_key(|(_, c)| (c.out.is_some(), c.seq))
            .map(|(i, _)| i);
        if let Some(i) = oldest {
            let conn = self.conns.swap_remove(i);
            refuse_now(
                &conn.stream,
                code::BAD_REQUEST,
                match uid {
                    Some(uid) => format!(
                        "closed: uid {uid} had {} connections open at once, the most one user \
                         may (the dispatcher's --max-connections-per-user), and this was its \
                         oldest",
                        self.per_user
                    ),
                    None => format!(
                        "closed: the dispatcher had {MAX_CONNECTIONS} connections open, the \
                         most it keeps, and this was the oldest"
                    ),
                },
            );
            (self.report)(Event::Connection(ConnectionError::Evicted {
                uid: conn.caller.uid,
            }));
        }
    }

    /// Closes every connection past its deadline.
    fn close_overdue(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.conns.len() {
            if self.conns[i].deadline <= now {
                let conn = self.conns.swap_remove(i);
                let what = if conn.out.is_some() {
                    "read its reply"
                } else {
                    "send its request"
                };
                (self.report)(Event::Connection(ConnectionError::Timeout {
                    uid: conn.caller.uid,
                    what,
                }));
            } else {
                i += 1;
            }
        }
    }

    /// Reads from, or writes to, each connection `poll` found ready (`ready` in the order of
    /// the connections when it was called; none was added or removed since), then removes
    /// those that are done.
    fn serve_ready(&mut self, ready: &[bool]) {
        let mut done = Vec::new();
        for (i, _) in ready.iter().enumerate().filter(|(_, r)| **r) {
            if i < self.conns.len() && !self.progress(i) {
                done.push(i);
            }
        }
        // From the end, so that each index removed still names its connection.
        for i in done.into_iter().rev() {
            drop(self.conns.swap_remove(i));
        }
    }

    /// Moves connection `i` on: reads its request (and answers it once whole) or sends its
    /// reply. `false` when it is done or failed (the caller removes it).
    fn progress(&mut self, i: usize) -> bool {
        if self.conns[i].out.is_none() {
            let read = {
                let conn = &mut self.conns[i];
                conn.reader.read(&conn.stream)
            };
            match read {
                Ok(None) => return true,
                Ok(Some((line, fds))) => {
                    let caller = self.conns[i].caller.clone();
                    // A pidfd of the sender, taken now it is connected: a claim keeps it, so
                    // that a cancel signals exactly the process that claimed.
                    let pidfd = transport::peer_pidfd(&self.conns[i].stream).ok();
                    let out = self.answer(&line, fds, &caller, pidfd);
                    let conn = &mut self.conns[i];
                    conn.deadline = Instant::now() + REQUEST_TIMEOUT;
                    conn.out = Some(out);
                }
                Err(e) => {
                    // A message that cannot be taken whole is answered with why (a peer that
                    // is gone does not read it), so a client never waits on silence.
                    if matches!(e, transport::Error::TooManyFds | transport::Error::TooLong) {
                        refuse_now(&self.conns[i].stream, code::BAD_REQUEST, e.to_string());
                    }
                    (self.report)(Event::Connection(ConnectionError::Receive(e)));
                    return false;
                }
            }
        }
        let conn = &mut self.conns[i];
        let Some(out) = conn.out.as_mut() else {
            return true;
        };
        let borrowed: Vec<_> = out.fds.iter().map(AsFd::as_fd).collect();
        let sent = out.sender.send(&conn.stream, &borrowed);
        drop(borrowed);
        match sent {
            Ok(false) => true,
            Ok(true) => {
                let op = out.op;
                let refused = out.refused.take();
                // Sent: our copies go (after a claim the driver holds the lane and the slot).
                (self.report)(Event::Answered { op, refused });
                false
            }
            Err(source) => {
                let op = out.op;
                // Not sent: our copies go all the same; if it was a claim, nobody holds the
                // lane now and `worklane reconcile` says so.
                (self.report)(Event::Connection(ConnectionError::Reply { op, source }));
                false
            }
        }
    }

    /// Out of descriptors: the spare one is given up to accept the waiting connection, which
    /// is told why and closed (with any descriptor it sent), then the spare is taken again.
    fn refuse_for_want_of_descriptors(&mut self, error: std::io::Error) {
        drop(self.spare.take());
        if let Ok((stream, _)) = self.listener.accept() {
            refuse_now(
                &stream,
                code::INTERNAL,
                format!(
                    "the dispatcher has no descriptor left ({error}): it holds one per queued \
                     lane; raise its limit of open files (LimitNOFILE= under systemd)"
                ),
            );
        }
        (self.report)(Event::Connection(ConnectionError::Accept(error)));
        self.spare = spare();
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
        match self.tick() {
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

    /// The reply to one whole request of `caller`, and what to send with it.
    fn answer(
        &mut self,
        line: &[u8],
        fds: Vec<OwnedFd>,
        caller: &Caller,
        pidfd: Option<OwnedFd>,
    ) -> Outgoing {
        let (op, reply, send) = match self.dispatch(line, fds, caller, pidfd) {
            Ok(answer) => answer,
            // The dispatcher's own failure (its database, the directory): the client is
            // told, the service goes on.
            Err(e) => (
                "unknown",
                Reply::refused(
                    code::INTERNAL,
                    format!("the dispatcher failed: {}", chain(&e)),
                ),
                Vec::new(),
            ),
        };
        let bytes = serde_json::to_vec(&reply).unwrap_or_default();
        let sender = transport::Sender::new(&bytes).unwrap_or_else(|_| {
            let short = Reply::refused(
                code::INTERNAL,
                "the reply is longer than a message may be (64 KiB); ask for less",
            );
            transport::Sender::new(&serde_json::to_vec(&short).unwrap_or_default())
                .expect("a short refusal fits a message")
        });
        Outgoing {
            sender,
            fds: send,
            op,
            refused: reply.error,
        }
    }

    fn dispatch(
        &mut self,
        line: &[u8],
        fds: Vec<OwnedFd>,
        caller: &Caller,
        pidfd: Option<OwnedFd>,
    ) -> Result<(&'static str, Reply, Vec<Guard>), ServiceError> {
        if let Some(unknown) = crate::wire::unknown_version(line) {
            drop(fds);
            return Ok((
                "unknown",
                Reply::refused(
                    code::BAD_REQUEST,
                    format!(
                        "protocol version {unknown} is not known here (this dispatcher speaks \
                         version {})",
                        crate::wire::VERSION
                    ),
                ),
                Vec::new(),
            ));
        }
        let request = match serde_json::from_slice::<Request>(line) {
            Ok(request) => request,
            Err(e) => {
                drop(fds);
                return Ok((
                    "unknown",
                    Reply::refused(code::BAD_REQUEST, format!("not a request: {e}")),
                    Vec::new(),
                ));
            }
        };
        let op = request.op();
        if !fds.is_empty() && !matches!(request, Request::Enqueue(_)) {
            drop(fds);
            return Ok((
                op,
                Reply::refused(code::DESCRIPTORS, format!("a {op} carries no descriptor")),
                Vec::new(),
            ));
        }
        let dir = self.dispatcher.pool().dir().clone();
        Ok(match request {
            Request::Enqueue(entry) => {
                let reply = self.dispatcher.enqueue(entry, fds, caller)?;
                if let (true, Some(id)) = (reply.ok, reply.attempt.as_deref()) {
                    self.at(CrashPoint::AfterInsert);
                    // Admitted at once, its entry is written as starting; else as queued. (A
                    // crash before either leaves a row without an entry, which the next
                    // dispatcher writes: the entries are a view, the database the truth.) A
                    // failing admission is the loop's trouble, not this enqueue's.
                    let admitted = match self.tick() {
                        Ok(ids) => ids,
                        Err(e) => {
                            self.troubled(chain(&e));
                            Vec::new()
                        }
                    };
                    if !admitted.iter().any(|a| a == id) {
                        self.write_entry(id);
                    }
                }
                ("enqueue", reply, Vec::new())
            }
            Request::Claim { attempt, token } => {
                match self.dispatcher.claim_by(&attempt, &token, caller, pidfd)? {
                    Ok(claimed) => {
                        self.at(CrashPoint::AfterClaimRemove);
                        if let Some(lane) = claimed.reply.lane.as_deref() {
                            let name = lane.trim_start_matches("lane-").trim_end_matches(".lock");
                            let _ = status::remove_entry(&dir, name);
                        }
                        ("claim", claimed.reply, claimed.fds)
                    }
                    Err(refused) => ("claim", refused, Vec::new()),
                }
            }
            Request::List { all } => {
                let mut reply = Reply::ok();
                reply.attempts = Some(self.dispatcher.list()?);
                reply.pid = Some(std::process::id());
                if all {
                    reply.history = Some(self.dispatcher.history()?);
                }
                reply.trouble = self.trouble.as_ref().map(|t| {
                    format!(
                        "failing since {} tries: {} (next try within {} s)",
                        t.failures,
                        t.error,
                        t.next
                            .saturating_duration_since(Instant::now())
                            .as_secs()
                            .max(1)
                    )
                });
                let recovery = self.dispatcher.recovery();
                let refused = match &recovery.legacy {
                    crate::state::Legacy::Refused { why } => Some(format!(
                        "a queue database in the slot directory was refused ({why}): none of \
                         its rows was read, and it was renamed queue.db*.refused-*"
                    )),
                    _ => None,
                };
                let damage = recovery.damage.as_ref().map(|d| d.sentence());
                let said: Vec<String> = damage.into_iter().chain(refused).collect();
                reply.damage = (!said.is_empty())
                    .then(|| format!("{} when this dispatcher started", said.join("; ")));
                ("list", reply, Vec::new())
            }
            Request::Cancel { attempt } => {
                let lane = self.dispatcher.view(&attempt)?.map(|a| (a.lane, a.state));
                let reply = self.dispatcher.cancel(&attempt, caller)?;
                if reply.ok
                    && let Some((lane, state)) = lane
                    && state != "running"
                {
                    let _ = status::remove_entry(&dir, &lane);
                }
                self.dispatcher.stand()?;
                ("cancel", reply, Vec::new())
            }
            Request::Retry { attempt } => {
                let reply = self.dispatcher.retry(&attempt, caller)?;
                if reply.ok {
                    self.write_entry(&attempt);
                    self.dispatcher.stand()?;
                }
                ("retry", reply, Vec::new())
            }
            Request::Prune { older_than_ms } => (
                "prune",
                self.dispatcher.prune(caller, older_than_ms)?,
                Vec::new(),
            ),
        })
    }
}
