//! The dispatcher's service loop on a real Unix socket, in a thread of this process: what
//! each request is answered, what the loop reports, where its test seam stops it, and
//! whom it serves.
use super::*;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use worklane_dispatch::server::{CrashPoint, Event, Server};
use worklane_dispatch::service::{Dispatcher, Settings, lane_lock};
use worklane_dispatch::store::Store;
use worklane_dispatch::wire::{Reply, code};
use worklane_lease::{Acquired, Options};
use worklane_transport::Trust;

const DRIVER_PID: u32 = 4242;

struct Served {
    site: Site,
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    events: mpsc::Receiver<String>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    /// A dispatcher serving at cap 2; its drivers "start" (pid 4242) unless `failing`.
    fn start(trust: Option<Trust>, failing: bool, crash: Option<CrashPoint>) -> Served {
        Served::start_with(trust, failing, crash, None)
    }

    /// As [`Served::start`], keeping at most `per_user` connections of one uid where given.
    fn start_with(
        trust: Option<Trust>,
        failing: bool,
        crash: Option<CrashPoint>,
        per_user: Option<usize>,
    ) -> Served {
        let site = Site::new(r#"{"max_agents": 2}"#);
        let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
        let dispatcher =
            Dispatcher::recover(site.pool.clone(), store, Settings::default()).expect("recover");
        Served::serve(site, dispatcher, trust, failing, crash, per_user)
    }

    /// `dispatcher` served on `site`, as [`Served::start_with`] says.
    fn serve(
        site: Site,
        dispatcher: Dispatcher,
        trust: Option<Trust>,
        failing: bool,
        crash: Option<CrashPoint>,
        per_user: Option<usize>,
    ) -> Served {
        let socket = site.temp.path().join("dispatcher.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        assert!(
            format!("{dispatcher:?}").contains("Dispatcher"),
            "a dispatcher shows itself"
        );
        let stat = std::fs::metadata(site.temp.path()).expect("stat");
        let trust = trust.unwrap_or(Trust {
            owner: std::os::unix::fs::MetadataExt::uid(&stat),
            group: std::os::unix::fs::MetadataExt::gid(&stat),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, events) = mpsc::channel();
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let told = tx.clone();
                let mut server = Server::new(
                    dispatcher,
                    listener,
                    trust,
                    move |_| match failing {
                        true => Err(std::io::Error::other("no driver here")),
                        false => Ok(DRIVER_PID),
                    },
                    move |event| {
                        let line = match event {
                            Event::Tick => return,
                            other => format!("{other:?}"),
                        };
                        let _ = told.send(line);
                    },
                );
                assert!(
                    format!("{server:?}").contains("Server"),
                    "a server shows itself"
                );
                if let Some(point) = crash {
                    server = server.crash_at(point, || panic!("crashed at the seam"));
                }
                if let Some(n) = per_user {
                    server = server.with_connections_per_user(n);
                }
                server.run(&stop).expect("serve");
            })
        };
        Served {
            site,
            socket,
            stop,
            events,
            thread: Some(thread),
        }
    }

    fn ask_raw(
        &self,
        line: &[u8],
        fds: &[BorrowedFd<'_>],
    ) -> Result<(Reply, Vec<OwnedFd>), String> {
        let stream = self.connect();
        worklane_transport::send(&stream, line, fds).map_err(|e| e.to_string())?;
        let (line, fds) = worklane_transport::recv(&stream).map_err(|e| e.to_string())?;
        Ok((serde_json::from_slice(&line).expect("a reply"), fds))
    }

    /// A connection whose reads and writes give up after 10 s: a loop that stops serving
    /// fails the test instead of hanging it.
    fn connect(&self) -> UnixStream {
        let stream = UnixStream::connect(&self.socket).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .expect("write timeout");
        stream
    }

    fn ask(&self, request: serde_json::Value, fds: &[BorrowedFd<'_>]) -> (Reply, Vec<OwnedFd>) {
        self.ask_raw(request.to_string().as_bytes(), fds)
            .expect("the dispatcher answers")
    }

    /// Takes `lane` as a launcher and enqueues it, handing its guard over.
    fn enqueue(&self, lane: &str) -> Reply {
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
        let (reply, _) = self.ask(request, &[guard.as_fd()]);
        gate::quietly(|| drop(guard));
        reply
    }

    /// The next event that is not a tick, within 10 s.
    fn event(&self) -> String {
        self.events
            .recv_timeout(Duration::from_secs(10))
            .expect("an event")
    }

    fn entry(&self, lane: &str) -> PathBuf {
        self.site.temp.path().join(format!("queue-{lane}.json"))
    }

    /// Whether another process finds the lane free, asked `tries` times 10 ms apart (a
    /// copy another test's fork holds is gone at its exec).
    fn lane_free(&self, lane: &str, tries: u32) -> bool {
        let guard = self
            .site
            .temp
            .path()
            .join(format!(".{}.flock", lane_lock(lane)));
        (0..tries).any(|_| {
            let free = Command::new("flock")
                .arg("-n")
                .arg(&guard)
                .arg("true")
                .status_gated()
                .expect("flock")
                .success();
            if !free {
                std::thread::sleep(Duration::from_millis(10));
            }
            free
        })
    }

    fn stop(mut self) -> std::thread::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().expect("running").join()
    }
}

#[test]
fn a_row_that_waits_has_its_entry_as_queued_and_one_admitted_at_once_as_starting() {
    let served = Served::start(None, false, None);
    let dir = served.entry("x").parent().expect("dir").to_owned();
    let state = |lane: &str| -> String {
        let raw = std::fs::read(served.entry(lane)).expect("entry");
        let entry: serde_json::Value = serde_json::from_slice(&raw).expect("json");
        entry["state"].as_str().expect("state").to_owned()
    };
    assert!(served.enqueue("now").ok);
    assert_eq!(state("now"), "starting", "admitted at once");
    // Held back by STOP: queued, and its entry says so.
    std::fs::write(dir.join("STOP"), br#"{"by":"t","at":"","reason":"r"}"#).expect("STOP");
    assert!(served.enqueue("later").ok);
    assert_eq!(state("later"), "queued", "written although not admitted");
    std::fs::remove_file(dir.join("STOP")).expect("lift");
    drop(served.stop());
}

#[test]
fn enqueue_admit_list_claim_and_each_refusal_over_the_socket() {
    let served = Served::start(None, false, None);
    let reply = served.enqueue("one");
    assert!(reply.ok, "accepted: {reply:?}");
    let attempt = reply.attempt.expect("an attempt");
    // Admitted at once (cap 2, nothing running) and its driver started, before the reply.
    let started = served.event();
    assert_eq!(
        started,
        format!(r#"Started {{ attempt: "{attempt}", pid: {DRIVER_PID} }}"#)
    );
    assert_eq!(
        served.event(),
        r#"Answered { op: "enqueue", refused: None }"#
    );
    assert!(served.entry("one").exists(), "its status entry is written");
    let (list, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
    assert!(list.ok, "{list:?}");
    assert_eq!(list.pid, Some(std::process::id()), "the dispatcher's pid");
    let rows = list.attempts.expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].attempt.as_str(), rows[0].state.as_str()),
        (attempt.as_str(), "starting")
    );
    assert_eq!(served.event(), r#"Answered { op: "list", refused: None }"#);
    // A descriptor on anything but an enqueue is refused, named by its op.
    let spare = tempfile::tempfile().expect("file");
    for (op, request) in [
        (
            "claim",
            serde_json::json!({"op": "claim", "attempt": attempt, "token": "t"}),
        ),
        ("list", serde_json::json!({"op": "list"})),
        (
            "cancel",
            serde_json::json!({"op": "cancel", "attempt": attempt}),
        ),
    ] {
        let (reply, fds) = served.ask(request, &[spare.as_fd()]);
        assert_eq!(
            reply.error.as_deref(),
            Some(code::DESCRIPTORS),
            "{op}: {reply:?}"
        );
        assert!(fds.is_empty(), "{op}: nothing sent back");
        assert_eq!(
            served.event(),
            format!(r#"Answered {{ op: "{op}", refused: Some("descriptors") }}"#)
        );
    }
    let (bad, _) = served.ask_raw(b"{\"op\":\"fly\"}", &[]).expect("answered");
    assert_eq!(bad.error.as_deref(), Some(code::BAD_REQUEST), "{bad:?}");
    assert_eq!(
        served.event(),
        r#"Answered { op: "unknown", refused: Some("bad-request") }"#
    );
    // The wrong token is refused; the lane stays held by the dispatcher.
    let (wrong, fds) = served.ask(
        serde_json::json!({"op": "claim", "attempt": attempt, "token": "nope"}),
        &[],
    );
    assert_eq!(
        wrong.error.as_deref(),
        Some(code::NO_ADMITTED_ROW),
        "{wrong:?}"
    );
    assert!(fds.is_empty());
    let _ = served.event();
    served.stop().expect("the loop ends when told");
}

#[test]
fn a_claim_hands_over_lane_and_slot_and_drops_the_entry() {
    let (tx, rx) = mpsc::channel();
    // A driver that remembers its token, as a started process is told it.
    let site = Site::new(r#"{"max_agents": 2}"#);
    let socket = site.temp.path().join("dispatcher.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
    let dispatcher =
        Dispatcher::recover(site.pool.clone(), store, Settings::default()).expect("recover");
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let trust = Trust { owner: 0, group: 0 };
            let mut server = Server::new(
                dispatcher,
                listener,
                trust,
                move |admitted| {
                    tx.send((admitted.attempt.id.clone(), admitted.token.clone()))
                        .expect("send");
                    Ok(1)
                },
                |_| {},
            );
            server.run(&stop).expect("serve");
        })
    };
    let served = Served {
        site,
        socket,
        stop,
        events: mpsc::channel().1,
        thread: Some(thread),
    };
    assert!(served.enqueue("two").ok, "accepted");
    let (attempt, token) = rx.recv_timeout(Duration::from_secs(10)).expect("admitted");
    assert!(served.entry("two").exists(), "its status entry is written");
    let (reply, fds) = served.ask(
        serde_json::json!({"op": "claim", "attempt": attempt, "token": token}),
        &[],
    );
    assert!(reply.ok, "{reply:?}");
    assert_eq!(fds.len(), 2, "the lane's and the slot's descriptors");
    assert_eq!(reply.lane.as_deref(), Some("lane-two.lock"));
    assert!(
        !served.entry("two").exists(),
        "a claimed attempt's entry is removed"
    );
    let (list, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
    let rows = list.attempts.expect("rows");
    assert_eq!(
        rows.iter().map(|a| a.state.as_str()).collect::<Vec<_>>(),
        ["running"],
        "its row left the queue and runs: {rows:?}"
    );
    assert_eq!(
        rows[0].driver_pid,
        Some(std::process::id()),
        "the claimer's pid"
    );
    assert!(!served.lane_free("two", 1), "the claimer holds the lane");
    gate::quietly(|| drop(fds));
    assert!(
        served.lane_free("two", 200),
        "free once the claimer closes it"
    );
    served.stop().expect("stops");
}

#[test]
fn a_driver_that_cannot_start_leaves_its_attempt_queued_and_cancel_frees_the_lane() {
    let served = Served::start(None, true, None);
    let reply = served.enqueue("three");
    let attempt = reply.attempt.expect("accepted");
    let failed = served.event();
    assert!(
        failed.starts_with(&format!(r#"StartFailed {{ attempt: "{attempt}""#))
            && failed.contains("no driver here"),
        "{failed}"
    );
    let (list, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
    let rows = list.attempts.expect("rows");
    assert_eq!(rows[0].state, "queued", "queued again: {rows:?}");
    assert!(
        !served.lane_free("three", 1),
        "the dispatcher still holds the lane"
    );
    let (cancel, _) = served.ask(serde_json::json!({"op": "cancel", "attempt": attempt}), &[]);
    assert!(cancel.ok, "{cancel:?}");
    assert!(served.lane_free("three", 200), "cancel frees the lane");
    assert!(!served.entry("three").exists(), "and removes its entry");
    served.stop().expect("stops");
}

#[test]
fn the_crash_seam_stops_the_loop_where_it_is_set_and_only_there() {
    let served = Served::start(None, false, Some(CrashPoint::AfterClaimRemove));
    assert!(served.enqueue("four").ok, "no crash after an insert");
    assert!(served.stop().is_ok(), "nor after an admission");
    let served = Served::start(None, false, Some(CrashPoint::AfterInsert));
    let dir = served.site.pool.dir();
    let lease = match gate::quietly(|| {
        worklane_lease::acquire(
            dir,
            &lane_lock("five"),
            &Request::new("launcher"),
            &Options::process(),
        )
    })
    .expect("acquire")
    {
        Acquired::Held(lease) => lease,
        Acquired::Refused(r) => panic!("free: {r}"),
    };
    let guard = lease.hand_over().expect("held");
    let request = serde_json::json!({"op": "enqueue", "lane": "five", "start_ms": 1, "priority": 0, "args": ["driver"]});
    let answer = served.ask_raw(request.to_string().as_bytes(), &[guard.as_fd()]);
    gate::quietly(|| drop(guard));
    assert!(
        answer.is_err(),
        "no reply: the loop died after the insert, got {answer:?}"
    );
    let Served { stop, thread, .. } = served;
    stop.store(true, Ordering::SeqCst);
    assert!(
        thread.expect("ran").join().is_err(),
        "the loop panicked at the seam"
    );
}

#[test]
fn lane_names_are_short_plain_and_not_hidden() {
    use worklane_dispatch::service::valid_lane;
    for good in ["a", "build-1", "x_y.z", &"l".repeat(64)] {
        assert!(valid_lane(good), "{good:?} names a lane");
    }
    for bad in ["", ".hidden", "a/b", "a b", "ünï", &"l".repeat(65)] {
        assert!(!valid_lane(bad), "{bad:?} names no lane");
    }
}

/// Sends `{"op":"list"}` as uid 65534 (with `groups` as its supplementary groups) and
/// returns the reply's error code, or "ok".
///
/// A stranger is refused at once, when its connection is accepted: the refusal may close
/// the socket before the request is sent (the send then meets EPIPE), and is read all the
/// same.
fn list_as_nobody(served: &Served, groups: &str) -> String {
    // A refused peer may be answered and closed before its request is sent: the send then
    // fails with EPIPE, and the refusal is still there to read.
    let script = "import socket,sys,json\n\
        s=socket.socket(socket.AF_UNIX)\n\
        s.connect(sys.argv[1])\n\
        s.settimeout(10)\n\
        try:\n    s.sendall(b'{\"op\":\"list\"}\\n')\n\
        except BrokenPipeError:\n    pass\n\
        r=json.loads(s.makefile().readline())\n\
        print(r.get('error') or 'ok')\n";
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534"]);
    match groups {
        "" => cmd.arg("--clear-groups"),
        some => cmd.arg(format!("--groups={some}")),
    };
    let out = cmd
        .args(["/usr/bin/python3", "-c", script])
        .arg(&served.socket)
        .output_gated()
        .expect("python3 under setpriv");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn only_root_the_owner_and_the_directory_s_group_are_served() {
    use std::os::unix::fs::PermissionsExt;
    let served = Served::start(
        Some(Trust {
            owner: 4000,
            group: 4343,
        }),
        false,
        None,
    );
    // The socket's mode keeps strangers out first; open it to test the check behind it.
    std::fs::set_permissions(
        served.site.temp.path(),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod dir");
    std::fs::set_permissions(&served.socket, std::fs::Permissions::from_mode(0o666))
        .expect("chmod socket");
    assert_eq!(
        list_as_nobody(&served, ""),
        code::PERMISSION,
        "a stranger is refused"
    );
    assert_eq!(
        list_as_nobody(&served, "17,4343"),
        "ok",
        "a member of the group is served"
    );
    let (root, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
    assert!(root.ok, "root is served: {root:?}");
    served.stop().expect("stops");
}

/// The reply a connection is sent, read within its timeout.
fn reply_on(stream: &UnixStream) -> Reply {
    let (line, _) = worklane_transport::recv(stream).expect("a reply");
    serde_json::from_slice(&line).expect("a reply")
}

/// One user's connections past its bound close that user's oldest first, each told the bound,
/// in the order they came (not the order they sit in after one was closed); the others are
/// served.
#[test]
fn a_user_s_connections_past_the_bound_close_its_oldest_first_and_say_why() {
    let served = Served::start_with(None, false, None, Some(3));
    let conns: Vec<UnixStream> = (0..5).map(|_| served.connect()).collect();
    let uid = rustix::process::geteuid().as_raw();
    for (i, conn) in conns[..2].iter().enumerate() {
        let told = reply_on(conn);
        assert_eq!(told.error.as_deref(), Some(code::BAD_REQUEST), "{told:?}");
        let message = told.message.unwrap_or_default();
        assert!(
            message.contains(&format!("uid {uid} had 3 connections open at once"))
                && message.contains("--max-connections-per-user")
                && message.contains("its oldest"),
            "connection {i} is closed, naming the bound: {message}"
        );
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut &*conn, &mut rest).expect("closed");
        assert!(rest.is_empty(), "and closed: {rest:?}");
    }
    for (i, conn) in conns[2..].iter().enumerate() {
        worklane_transport::send(conn, br#"{"op":"list"}"#, &[]).expect("send");
        let reply = reply_on(conn);
        assert!(reply.ok, "connection {} is served: {reply:?}", i + 2);
    }
    let evicted = (0..2)
        .map(|_| {
            loop {
                let event = served.event();
                if event.contains("Evicted") {
                    break event;
                }
            }
        })
        .collect::<Vec<_>>();
    assert!(
        evicted.iter().all(|e| e.contains(&format!("uid: {uid}"))),
        "{evicted:?}"
    );
    served.stop().expect("stops");
}

/// A connection that sends nothing is closed at its deadline ([`REQUEST_TIMEOUT`] after it was
/// accepted, not before), without a reply, and the loop says so; it serves on.
#[test]
fn a_silent_connection_is_closed_at_its_deadline() {
    use worklane_dispatch::server::REQUEST_TIMEOUT;
    let served = Served::start(None, false, None);
    let before = std::time::Instant::now();
    let silent = served.connect();
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut &silent, &mut got).expect("closed within 10 s");
    assert!(got.is_empty(), "nothing is sent: {got:?}");
    assert!(
        before.elapsed() >= REQUEST_TIMEOUT,
        "not before its deadline: {:?}",
        before.elapsed()
    );
    let timeout = loop {
        let event = served.event();
        if event.contains("Timeout") {
            break event;
        }
    };
    assert!(timeout.contains("send its request"), "{timeout}");
    let (reply, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
    assert!(reply.ok, "it serves on: {reply:?}");
    served.stop().expect("stops");
}

/// A list says what the dispatcher refused at its start (a queue database in the slot
/// directory that was not provably its own: group-writable here), and nothing when there was
/// nothing to say.
#[test]
fn a_list_says_a_refused_legacy_database_and_nothing_when_all_was_well() {
    use std::os::unix::fs::PermissionsExt;
    let served = Served::start(None, false, None);
    let (reply, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
    assert_eq!((reply.ok, reply.damage), (true, None), "nothing to say");
    served.stop().expect("stops");
    let site = Site::new(r#"{"max_agents": 2}"#);
    let legacy = site.temp.path().join("queue.db");
    drop(Store::open(&legacy).expect("a legacy database"));
    std::fs::set_permissions(&legacy, std::fs::Permissions::from_mode(0o664)).expect("chmod");
    let state = worklane_slotfile::PrivateDir::open(&site.temp.path().join("state"), true)
        .expect("state dir");
    let dispatcher =
        Dispatcher::open(site.pool.clone(), &state, Settings::default()).expect("open");
    let served = Served::serve(site, dispatcher, None, false, None, None);
    let (reply, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
    let damage = reply.damage.unwrap_or_default();
    assert!(
        damage.contains("a queue database in the slot directory was refused")
            && damage.contains("renamed queue.db")
            && damage.ends_with("when this dispatcher started"),
        "{damage}"
    );
    served.stop().expect("stops");
}
