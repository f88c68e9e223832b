//! The dispatcher out of descriptors: the connection it cannot accept is accepted on the
//! descriptor it keeps spare, told why and closed, and the spare is taken again for the next
//! time (and when it cannot be, the loop waits a tick rather than spinning); an enqueue whose
//! lane it cannot open is refused as its own trouble; a user's enqueue that would leave fewer
//! than the reserve is refused.
//!
//! A binary of its own: the limit of open files is the process's, so no test of another
//! binary may run beside these, and these run one at a time ([`alone`]).

use rustix::fd::{AsFd, OwnedFd};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use worklane_admission::Pool;
use worklane_dispatch::server::Server;
use worklane_dispatch::service::{
    Caller, DESCRIPTOR_RESERVE, Dispatcher, EnqueueRefused, Settings, lane_lock,
};
use worklane_dispatch::store::Store;
use worklane_dispatch::wire::{Enqueue, Reply, code};
use worklane_slotfile::{Environment, SlotDir};
use worklane_transport::Trust;

/// Held by each test for its whole run: each changes the process's limit of open files.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A slot directory in a temp dir (cap 1) and a dispatcher of it.
fn dispatcher() -> (tempfile::TempDir, Dispatcher) {
    let temp = tempfile::tempdir().expect("temp dir");
    std::fs::write(temp.path().join("config.json"), r#"{"max_agents": 1}"#).expect("config");
    let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
    let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
    let store = Store::open(&temp.path().join("queue.db")).expect("store");
    let dispatcher = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
    (temp, dispatcher)
}

/// Every free descriptor number below the highest one open, filled (with copies of
/// `/dev/null`, returned: dropping them frees the numbers again), so that nothing new can be
/// opened once the limit is set at the returned top plus one.
fn fill_to_the_top() -> (Vec<OwnedFd>, i32) {
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    let open = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .max()
        .expect("some open");
    // `/dev/null` itself stays open with its copies, or its number would be free.
    let mut fillers: Vec<OwnedFd> = vec![null.into()];
    loop {
        let filler = rustix::io::fcntl_dupfd_cloexec(fillers[0].as_fd(), 0).expect("dup");
        let number = std::os::fd::AsRawFd::as_raw_fd(&filler);
        fillers.push(filler);
        if number > open {
            return (fillers, number);
        }
    }
}

/// Sets the soft limit of open files to `limit`; the old limits come back when the returned
/// value is dropped.
fn limit_open_files(limit: u64) -> impl Drop {
    struct Restore(Rlimit);
    impl Drop for Restore {
        fn drop(&mut self) {
            setrlimit(Resource::Nofile, self.0).expect("restore the limit of open files");
        }
    }
    let old = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(limit),
            maximum: old.maximum,
        },
    )
    .expect("lower the limit of open files");
    Restore(old)
}

/// Takes `lane` as a launcher does and returns its held guard, to be sent.
fn launch(dispatcher: &Dispatcher, lane: &str) -> OwnedFd {
    let lease = match worklane_lease::acquire(
        dispatcher.pool().dir(),
        &lane_lock(lane),
        &worklane_lease::Request::new("launcher"),
        &worklane_lease::Options::process(),
    )
    .expect("acquire the lane")
    {
        worklane_lease::Acquired::Held(lease) => lease,
        worklane_lease::Acquired::Refused(r) => panic!("lane {lane} is free: {r}"),
    };
    let guard = lease.hand_over().expect("a held guard");
    // A copy, as the dispatcher receives it; the launcher's own goes.
    rustix::io::fcntl_dupfd_cloexec(&guard, 0).expect("dup")
}

fn entry(lane: &str) -> Enqueue {
    Enqueue {
        lane: lane.to_owned(),
        start_ms: Some(1),
        priority: Some(0),
        placement: "wt-1".into(),
        stage: "build".into(),
        args: vec!["driver".into()],
        env: std::collections::BTreeMap::new(),
        own_lane: false,
        weight: None,
        owner: None,
    }
}

fn caller(uid: u32) -> Caller {
    Caller {
        pid: Some(std::process::id()),
        uid,
        gid: uid,
        groups: Vec::new(),
    }
}

/// An enqueue whose lane's guard the dispatcher cannot open (no descriptor left) is refused
/// as the dispatcher's trouble, naming it, not as the sender's descriptor being wrong.
#[test]
fn an_enqueue_whose_lane_cannot_be_opened_for_want_of_descriptors_says_so() {
    let _alone = alone();
    let (_temp, mut dispatcher) = dispatcher();
    let sent = launch(&dispatcher, "l");
    let (fillers, top) = fill_to_the_top();
    let limit = limit_open_files(u64::try_from(top).expect("fd") + 1);
    let reply = dispatcher.enqueue(entry("l"), vec![sent], &caller(0));
    drop(limit);
    drop(fillers);
    let refused = reply.expect("enqueue").expect_err("refused");
    assert!(
        matches!(&refused, EnqueueRefused::NoDescriptorToCheck { lock, .. } if lock == "lane-l.lock"),
        "{refused:?}"
    );
}

/// A user's enqueue is refused while fewer than [`DESCRIPTOR_RESERVE`] descriptors would be
/// left to the process (each queued row holds one); with exactly that many left, it is
/// queued. Root is never bounded.
#[test]
fn a_user_s_enqueue_leaves_the_reserve_of_descriptors() {
    let _alone = alone();
    let (_temp, mut dispatcher) = dispatcher();
    let open = || -> u64 {
        u64::try_from(std::fs::read_dir("/proc/self/fd").expect("fd").count()).expect("count")
    };
    for (left, lane, uid, queued) in [
        (DESCRIPTOR_RESERVE - 1, "short", 65_534, false),
        (DESCRIPTOR_RESERVE - 1, "root", 0, true),
        (DESCRIPTOR_RESERVE, "enough", 65_534, true),
    ] {
        let sent = launch(&dispatcher, lane);
        // Counted as the dispatcher counts: the listing's own descriptor included.
        let limit = limit_open_files(open() + left);
        let reply = dispatcher.enqueue(entry(lane), vec![sent], &caller(uid));
        drop(limit);
        match (reply.expect("enqueue"), queued) {
            (Ok(_), true) => {}
            (Err(EnqueueRefused::NoDescriptorsToSpare { left: said }), false) => {
                assert_eq!(said, left, "{lane}: says how many are left");
            }
            (other, _) => panic!("{lane} (uid {uid}, {left} left): {other:?}"),
        }
    }
}

/// What a connection made while the process could open nothing more was answered.
enum Answer {
    /// Refused for want of descriptors, with this message.
    Refused(String),
    /// Served: a descriptor another thread closed meanwhile was free for its accept.
    Served,
}

/// Connects to `socket` while this process has no descriptor number free below its limit of
/// open files, and reads the reply to a `list`. The client's socket is made first; every free
/// number below the highest open one is filled, and the limit set just above it, so the
/// dispatcher's `accept` finds none; all is given back before it returns.
fn ask_without_descriptors(socket: &std::path::Path) -> Answer {
    let client = rustix::net::socket(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        None,
    )
    .expect("socket");
    let stream = UnixStream::from(client);
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let (fillers, top) = fill_to_the_top();
    let limit = limit_open_files(u64::try_from(top).expect("fd") + 1);
    let asked = rustix::net::connect(
        &stream,
        &rustix::net::SocketAddrUnix::new(socket).expect("address"),
    )
    .map(|()| {
        // Refused at its accept, the connection may be closed before the request is sent
        // (the send meets EPIPE): the refusal is there to read all the same.
        let _ = worklane_transport::send(&stream, br#"{"op":"list"}"#, &[]);
        worklane_transport::recv(&stream)
    });
    drop(limit);
    drop(fillers);
    let (line, _) = asked.expect("connect").expect("an answer within 5 s");
    let reply: Reply = serde_json::from_slice(&line).expect("a reply");
    match reply.ok {
        true => Answer::Served,
        false => {
            assert_eq!(reply.error.as_deref(), Some(code::INTERNAL), "{reply:?}");
            Answer::Refused(reply.message.unwrap_or_default())
        }
    }
}

/// The reply to a `list` on a new connection, within 5 s.
fn list(socket: &std::path::Path) -> Reply {
    let stream = UnixStream::connect(socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    worklane_transport::send(&stream, br#"{"op":"list"}"#, &[]).expect("send");
    let (line, _) = worklane_transport::recv(&stream).expect("a reply within 5 s");
    serde_json::from_slice(&line).expect("a reply")
}

/// Out of descriptors, a connection is refused with why and what to do, not left waiting
/// (where the loop, its listener readable, would spin); the spare is taken again, so the
/// next time is refused alike; with descriptors back, it serves.
#[test]
fn a_connection_the_dispatcher_has_no_descriptor_for_is_told_why_and_closed() {
    let _alone = alone();
    let temp = tempfile::tempdir().expect("temp dir");
    std::fs::write(temp.path().join("config.json"), r#"{"max_agents": 1}"#).expect("config");
    let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
    let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
    let socket = temp.path().join("dispatcher.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let store = Store::open(&temp.path().join("queue.db")).expect("store");
    let dispatcher = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
    let stat = std::fs::metadata(temp.path()).expect("stat");
    let trust = Trust {
        owner: std::os::unix::fs::MetadataExt::uid(&stat),
        group: std::os::unix::fs::MetadataExt::gid(&stat),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, events) = std::sync::mpsc::channel();
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut server = Server::new(
                dispatcher,
                listener,
                trust,
                |_| Ok(4242_u32),
                move |event| {
                    let _ = tx.send(format!("{event:?}"));
                },
            );
            server.run(&stop).expect("serve");
        })
    };
    // Served once first: the loop has its spare descriptor from its start.
    assert!(list(&socket).ok, "served");
    for time in ["first", "second"] {
        // A descriptor the loop closed between the count and the connect (a file a tick
        // read) leaves a number free: that connection is served, and the next one tried.
        let refused = (0..20)
            .find_map(|_| match ask_without_descriptors(&socket) {
                Answer::Refused(message) => Some(message),
                Answer::Served => None,
            })
            .expect("refused within 20 tries");
        assert!(
            refused.contains("no descriptor left") && refused.contains("LimitNOFILE"),
            "the {time} time, told why and what to do: {refused}"
        );
    }
    let reply = list(&socket);
    assert!(reply.ok, "served again: {reply:?}");
    let said: Vec<String> = events.try_iter().collect();
    assert!(
        said.iter()
            .filter(|e| e.contains("Accept") && e.contains("Too many open files"))
            .count()
            >= 2,
        "each refusal is reported: {said:?}"
    );
    stop.store(true, Ordering::SeqCst);
    thread.join().expect("the loop ends");
}

/// The CPU time this process has used so far.
fn cpu_used() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).expect("seconds"),
        u32::try_from(t.tv_nsec).expect("nanoseconds"),
    )
}

/// Started with no descriptor left, the loop has no spare to refuse a connection with: the
/// connection waits (it cannot be accepted, nor refused), the loop looks again each tick
/// instead of spinning on its readable listener, says so once, and serves the connection as
/// soon as descriptors are back.
#[test]
fn a_loop_with_no_spare_descriptor_waits_a_tick_between_looks_and_serves_when_it_can() {
    let _alone = alone();
    let temp = tempfile::tempdir().expect("temp dir");
    std::fs::write(temp.path().join("config.json"), r#"{"max_agents": 1}"#).expect("config");
    let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
    let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
    let socket = temp.path().join("dispatcher.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let store = Store::open(&temp.path().join("queue.db")).expect("store");
    let dispatcher = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
    let stat = std::fs::metadata(temp.path()).expect("stat");
    let trust = Trust {
        owner: std::os::unix::fs::MetadataExt::uid(&stat),
        group: std::os::unix::fs::MetadataExt::gid(&stat),
    };
    let client = rustix::net::socket(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        None,
    )
    .expect("socket");
    let stream = UnixStream::from(client);
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let address = rustix::net::SocketAddrUnix::new(&socket).expect("address");
    // No number free from here on: the loop starts without its spare.
    let (fillers, top) = fill_to_the_top();
    let limit = limit_open_files(u64::try_from(top).expect("fd") + 1);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, events) = std::sync::mpsc::channel();
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut server = Server::new(
                dispatcher,
                listener,
                trust,
                |_| Ok(4242_u32),
                move |event| {
                    let _ = tx.send(format!("{event:?}"));
                },
            );
            server.run(&stop).expect("serve");
        })
    };
    rustix::net::connect(&stream, &address).expect("connect");
    worklane_transport::send(&stream, br#"{"op":"list"}"#, &[]).expect("send");
    // The loop meets the connection it cannot accept within its first tick; then, over 1.5 s,
    // it wakes about 15 times. Spinning, it used a core's worth (half of one at the least on
    // a machine busy with other work).
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_used();
    std::thread::sleep(Duration::from_millis(1500));
    let used = cpu_used() - before;
    drop(limit);
    drop(fillers);
    assert!(
        used < Duration::from_millis(200),
        "the loop slept between its looks: {used:?} of CPU in 1.5 s"
    );
    let (line, _) = worklane_transport::recv(&stream).expect("served within 10 s");
    let reply: Reply = serde_json::from_slice(&line).expect("a reply");
    assert!(reply.ok, "served once descriptors are back: {reply:?}");
    stop.store(true, Ordering::SeqCst);
    thread.join().expect("the loop ends");
    let said: Vec<String> = events.try_iter().collect();
    assert_eq!(
        said.iter()
            .filter(|e| e.contains("NoDescriptorToAccept") && e.contains("Too many open files"))
            .count(),
        1,
        "the wait is said once: {said:?}"
    );
}
