//! The dispatcher's service loop: accept connections on a listening Unix socket, check each
//! peer, answer one request per connection, and between requests expire starting attempts,
//! admit queued ones and beat the status entries' heartbeat.

use super::service::{Admitted, Dispatcher, Error as ServiceError};
use super::status;
use super::transport::{self, Peer};
use super::wire::{Reply, Request, code};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the loop looks at the queue without a request (expiry, admission after a slot
/// was freed elsewhere, STOP lifted).
pub const TICK: Duration = Duration::from_millis(100);
/// How often every status entry's heartbeat is rewritten.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// How long a connection may take to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// An error and its causes, `outer: inner: innermost`, for a reply the client shows: each
/// part says only its own step, so the client learns which one failed and why.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Who may use the dispatcher: root, the slot directory's owner, or a member of its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trust {
    /// The directory's owner.
    pub owner: u32,
    /// The directory's group.
    pub group: u32,
}

impl Trust {
    /// Whether `peer` may enqueue, claim, list or cancel. Supplementary groups are read from
    /// `/proc/<pid>/status` where there is one.
    #[must_use]
    pub fn admits(&self, peer: &Peer) -> bool {
        self.admits_with(peer, groups_of)
    }

    /// [`Trust::admits`] with the supplementary groups of a pid from `groups`, asked only
    /// when nothing else admits the peer.
    fn admits_with(&self, peer: &Peer, groups: impl FnOnce(u32) -> Vec<u32>) -> bool {
        peer.uid == 0
            || peer.uid == self.owner
            || peer.gid == self.group
            || peer
                .pid
                .is_some_and(|pid| groups(pid).contains(&self.group))
    }
}

/// The supplementary groups of `pid` (`Groups:` of `/proc/<pid>/status`), none if it cannot
/// be read.
fn groups_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|status| parse_groups(&status))
        .unwrap_or_default()
}

/// The numbers of the `Groups:` line of a `/proc/<pid>/status` text, none without one.
fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|groups| {
            groups
                .split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

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
    /// An admitted attempt's driver could not be started; it is queued again.
    StartFailed {
        /// The attempt.
        attempt: String,
        /// Why (the launch callback's error).
        error: std::io::Error,
    },
    /// A request was answered.
    Answered {
        /// The request's op.
        op: &'static str,
        /// The reply's error code, if refused.
        refused: Option<String>,
    },
    /// Starting attempts expired back to the queue.
    Expired(Vec<String>),
    /// A connection failed (a peer that went away, a malformed message).
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

/// Starts an admitted attempt's driver and returns its pid.
type Launch<'a> = Box<dyn FnMut(&Admitted) -> std::io::Result<u32> + 'a>;

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
        /// A claimed row is removed, its descriptors not yet sent.
        AfterClaimRemove,
    }
}

/// The dispatcher serving `listener` until `stop` is set.
pub struct Server<'a> {
    dispatcher: Dispatcher,
    listener: UnixListener,
    trust: Trust,
    launch: Launch<'a>,
    report: Box<dyn FnMut(Event) + 'a>,
    #[cfg(feature = "test-seams")]
    crash: Option<(CrashPoint, Box<dyn Fn() + 'a>)>,
    /// A descriptor kept in reserve: when the process has no other left, it is closed to
    /// accept the waiting connection and refuse it, instead of leaving it pending (and the
    /// listener readable, so the loop would spin).
    spare: Option<std::fs::File>,
}

fn spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

impl std::fmt::Debug for Server<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("dispatcher", &self.dispatcher)
            .field("trust", &self.trust)
            .finish_non_exhaustive()
    }
}

impl<'a> Server<'a> {
    /// A server of `dispatcher` on `listener`, starting each admitted attempt's driver with
    /// `launch` (which returns the driver's pid) and telling `report` what happens.
    pub fn new(
        dispatcher: Dispatcher,
        listener: UnixListener,
        trust: Trust,
        launch: impl FnMut(&Admitted) -> std::io::Result<u32> + 'a,
        report: impl FnMut(Event) + 'a,
    ) -> Server<'a> {
        Server {
            dispatcher,
            listener,
            trust,
            launch: Box::new(launch),
            report: Box::new(report),
            #[cfg(feature = "test-seams")]
            crash: None,
            spare: spare(),
        }
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
    /// start.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), ServiceError> {
        self.listener
            .set_nonblocking(true)
            .map_err(|source| ServiceError::Socket {
                op: "make the dispatcher's socket nonblocking",
                source,
            })?;
        self.refresh_entries()?;
        let mut last_heartbeat = Instant::now();
        // Woken as a `worklane run` is: a slot released or a place in the agents' line left
        // lets a queued row on at once, not at the next tick.
        let watches = crate::watch::Watches::default();
        let mut watch = watches.watch(self.dispatcher.pool().dir());
        while !stop.load(Ordering::SeqCst) {
            let listener = rustix::event::PollFd::new(&self.listener, rustix::event::PollFlags::IN);
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: i64::try_from(TICK.as_nanos()).unwrap_or(100_000_000),
            };
            let polled = match watch.fd() {
                Some(changes) => rustix::event::poll(
                    &mut [
                        listener,
                        rustix::event::PollFd::new(&changes, rustix::event::PollFlags::IN),
                    ],
                    Some(&timeout),
                ),
                None => rustix::event::poll(&mut [listener], Some(&timeout)),
            };
            match polled {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    return Err(ServiceError::Socket {
                        op: "wait for connections on the dispatcher's socket",
                        source: e.into(),
                    });
                }
            }
            // Whatever changed, the tick below looks again; the events are only a wake-up.
            watch.drain(&|name| crate::Pool::wakes(crate::Kind::Agent, name));
            loop {
                match self.listener.accept() {
                    Ok((stream, _)) => self.answer(stream)?,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e)
                        if matches!(
                            rustix::io::Errno::from_io_error(&e),
                            Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)
                        ) && self.spare.is_some() =>
                    {
                        self.refuse_for_want_of_descriptors(e);
                    }
                    Err(e) => {
                        (self.report)(Event::Connection(ConnectionError::Accept(e)));
                        break;
                    }
                }
            }
            self.tick()?;
            (self.report)(Event::Tick);
            if last_heartbeat.elapsed() >= HEARTBEAT {
                self.refresh_entries()?;
                last_heartbeat = Instant::now();
            }
        }
        Ok(())
    }

    /// Out of descriptors: the spare one is given up to accept the waiting connection, which
    /// is told why and closed (with any descriptor it sent), then the spare is taken again.
    fn refuse_for_want_of_descriptors(&mut self, error: std::io::Error) {
        drop(self.spare.take());
        if let Ok((stream, _)) = self.listener.accept() {
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
            let reply = Reply::refused(
                code::INTERNAL,
                format!(
                    "the dispatcher has no descriptor left ({error}): it holds one per queued \
                     lane; raise its limit of open files (LimitNOFILE= under systemd)"
                ),
            );
            let _ = transport::send(
                &stream,
                &serde_json::to_vec(&reply).unwrap_or_default(),
                &[],
            );
        }
        (self.report)(Event::Connection(ConnectionError::Accept(error)));
        self.spare = spare();
    }

    /// Expires, then admits while the pool has room; returns the attempts it admitted (their
    /// status entries written).
    pub fn tick(&mut self) -> Result<Vec<String>, ServiceError> {
        let mut admitted_ids = Vec::new();
        let expired = self.dispatcher.expire()?;
        if !expired.is_empty() {
            for id in &expired {
                self.write_entry(id)?;
            }
            (self.report)(Event::Expired(expired));
        }
        while let Some(admitted) = self.dispatcher.admit_next()? {
            self.at(CrashPoint::AfterAdmit);
            match (self.launch)(&admitted) {
                Ok(pid) => (self.report)(Event::Started {
                    attempt: admitted.attempt.id.clone(),
                    pid,
                }),
                Err(error) => {
                    self.dispatcher.unadmit(&admitted.attempt.id)?;
                    (self.report)(Event::StartFailed {
                        attempt: admitted.attempt.id.clone(),
                        error,
                    });
                    break;
                }
            }
            self.write_entry(&admitted.attempt.id)?;
            admitted_ids.push(admitted.attempt.id);
        }
        // Rows queued by an enqueue, an expiry or a failed start stand in the agents' line.
        self.dispatcher.stand()?;
        Ok(admitted_ids)
    }

    /// Rewrites the status entry of attempt `id` (after its state changed).
    fn write_entry(&mut self, id: &str) -> Result<(), ServiceError> {
        let now = self.dispatcher.pool().clock().now_ms();
        if let Some(view) = self.dispatcher.view(id)? {
            let _ =
                status::write_entry(self.dispatcher.pool().dir(), &view, std::process::id(), now);
        }
        Ok(())
    }

    /// Rewrites every status entry with this dispatcher's pid and the time.
    fn refresh_entries(&mut self) -> Result<(), ServiceError> {
        let now = self.dispatcher.pool().clock().now_ms();
        let pid = std::process::id();
        for view in self.dispatcher.list()? {
            let _ = status::write_entry(self.dispatcher.pool().dir(), &view, pid, now);
        }
        Ok(())
    }

    /// Answers one connection: its peer checked, one request read, one reply written. A
    /// connection's own failure is reported, never the server's.
    fn answer(&mut self, stream: UnixStream) -> Result<(), ServiceError> {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
        let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
        let (line, fds) = match transport::recv(&stream) {
            Ok(got) => got,
            Err(e) => {
                // A message that cannot be taken whole is answered with why (a peer that
                // is gone does not read it), so a client never waits on silence.
                if matches!(e, transport::Error::TooManyFds | transport::Error::TooLong) {
                    let reply = Reply::refused(code::BAD_REQUEST, e.to_string());
                    let bytes = serde_json::to_vec(&reply).unwrap_or_default();
                    let _ = transport::send(&stream, &bytes, &[]);
                }
                (self.report)(Event::Connection(ConnectionError::Receive(e)));
                return Ok(());
            }
        };
        let trusted = transport::peer(&stream).is_ok_and(|peer| self.trust.admits(&peer));
        let (op, reply, send): (&'static str, Reply, Vec<worklane_guard::Guard>) = if !trusted {
            drop(fds);
            (
                "unknown",
                Reply::refused(
                    code::PERMISSION,
                    "only root, the slot directory's owner or a member of its group may use the \
                     dispatcher",
                ),
                Vec::new(),
            )
        } else {
            match self.dispatch(&line, fds) {
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
            }
        };
        let borrowed: Vec<_> = send.iter().map(AsFd::as_fd).collect();
        let bytes = serde_json::to_vec(&reply).unwrap_or_default();
        if let Err(source) = transport::send(&stream, &bytes, &borrowed) {
            (self.report)(Event::Connection(ConnectionError::Reply { op, source }));
        }
        drop(borrowed);
        // Sent or not, our copies go: after a claim the driver holds the lane and the slot,
        // or, if the reply was lost, nobody does (`worklane reconcile` tells which).
        drop(send);
        (self.report)(Event::Answered {
            op,
            refused: reply.error.clone(),
        });
        Ok(())
    }

    fn dispatch(
        &mut self,
        line: &[u8],
        fds: Vec<OwnedFd>,
    ) -> Result<(&'static str, Reply, Vec<worklane_guard::Guard>), ServiceError> {
        if let Some(unknown) = crate::dispatch::wire::unknown_version(line) {
            drop(fds);
            return Ok((
                "unknown",
                Reply::refused(
                    code::BAD_REQUEST,
                    format!(
                        "protocol version {unknown} is not known here (this dispatcher speaks \
                         version {})",
                        crate::dispatch::wire::VERSION
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
        let dir = self.dispatcher.pool().dir().clone();
        Ok(match request {
            Request::Enqueue(entry) => {
                let reply = self.dispatcher.enqueue(entry, fds)?;
                if let (true, Some(id)) = (reply.ok, reply.attempt.as_deref()) {
                    self.at(CrashPoint::AfterInsert);
                    // Admitted at once, its entry is written as starting; else as queued. (A
                    // crash before either leaves a row without an entry, which the next
                    // dispatcher writes: the entries are a view, the database the truth.)
                    if !self.tick()?.iter().any(|a| a == id) {
                        self.write_entry(id)?;
                    }
                }
                ("enqueue", reply, Vec::new())
            }
            other if !fds.is_empty() => {
                drop(fds);
                let op = match other {
                    Request::Claim { .. } => "claim",
                    Request::List => "list",
                    _ => "cancel",
                };
                (
                    op,
                    Reply::refused(code::DESCRIPTORS, format!("a {op} carries no descriptor")),
                    Vec::new(),
                )
            }
            Request::Claim { attempt, token } => match self.dispatcher.claim(&attempt, &token)? {
                Ok(claimed) => {
                    self.at(CrashPoint::AfterClaimRemove);
                    if let Some(lane) = claimed.reply.lane.as_deref() {
                        let name = lane.trim_start_matches("lane-").trim_end_matches(".lock");
                        let _ = status::remove_entry(&dir, name);
                    }
                    ("claim", claimed.reply, claimed.fds)
                }
                Err(refused) => ("claim", refused, Vec::new()),
            },
            Request::List => {
                let mut reply = Reply::ok();
                reply.attempts = Some(self.dispatcher.list()?);
                reply.pid = Some(std::process::id());
                ("list", reply, Vec::new())
            }
            Request::Cancel { attempt } => {
                let lane = self.dispatcher.view(&attempt)?.map(|a| a.lane);
                let cancelled = self.dispatcher.cancel(&attempt)?;
                self.dispatcher.stand()?;
                if cancelled {
                    if let Some(lane) = lane {
                        let _ = status::remove_entry(&dir, &lane);
                    }
                    let mut reply = Reply::ok();
                    reply.attempt = Some(attempt);
                    ("cancel", reply, Vec::new())
                } else {
                    (
                        "cancel",
                        Reply::refused(code::NO_SUCH_ATTEMPT, format!("no attempt {attempt}")),
                        Vec::new(),
                    )
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use worklane_testkit::Gated;

    const TRUST: Trust = Trust {
        owner: 1000,
        group: 2000,
    };

    fn peer(pid: Option<u32>, uid: u32, gid: u32) -> Peer {
        Peer { pid, uid, gid }
    }

    #[test]
    fn root_the_owner_and_the_group_are_admitted_and_no_one_else() {
        let none = |_| Vec::new();
        assert!(TRUST.admits_with(&peer(Some(5), 0, 9), none), "root");
        assert!(
            TRUST.admits_with(&peer(Some(5), 1000, 9), none),
            "the owner"
        );
        assert!(
            TRUST.admits_with(&peer(Some(5), 9, 2000), none),
            "the primary group"
        );
        assert!(
            TRUST.admits_with(&peer(Some(5), 9, 9), |pid| {
                assert_eq!(pid, 5, "the peer's own groups are asked");
                vec![7, 2000]
            }),
            "a supplementary group"
        );
        assert!(
            !TRUST.admits_with(&peer(Some(5), 9, 9), |_| vec![7, 8]),
            "a stranger in other groups"
        );
        assert!(
            !TRUST.admits_with(&peer(None, 9, 9), |_| panic!("no pid, no groups to ask")),
            "a stranger whose pid the platform does not tell"
        );
        assert!(
            !TRUST.admits_with(&peer(Some(5), 1, 1), none),
            "uid and gid 1 are nobody special"
        );
    }

    #[test]
    fn the_groups_line_is_read_from_a_status_text() {
        let status = "Name:\tsh\nUid:\t0\t0\t0\t0\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_groups(status), vec![4, 24, 27]);
        assert_eq!(
            parse_groups("Groups:\t\n"),
            Vec::<u32>::new(),
            "in no group"
        );
        assert_eq!(parse_groups("Name:\tsh\n"), Vec::<u32>::new(), "no line");
        assert_eq!(
            parse_groups("Groups: 5 x 6\n"),
            vec![5, 6],
            "garbage is skipped"
        );
    }

    #[test]
    fn a_live_process_s_supplementary_groups_are_read_from_proc() {
        // The subject drops to uid 65534 with two supplementary groups, then sleeps: setpriv
        // sets the groups before it execs `sleep`.
        let mut child = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--groups=4242,4343",
                "sleep",
                "30",
            ])
            .spawn_gated()
            .expect("setpriv");
        let pid = child.id();
        // Until setpriv has set them (before, the process has root's groups).
        let mut groups = Vec::new();
        for _ in 0..2000 {
            groups = groups_of(pid);
            if groups == [4242, 4343] {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(groups, vec![4242, 4343], "the groups setpriv gave it");
        child.kill().expect("kill");
        let _ = child.wait();
        assert_eq!(
            groups_of(u32::MAX),
            Vec::<u32>::new(),
            "no such process: none"
        );
    }
}
