//! The dispatcher's loop out of descriptors: the connection it cannot accept is accepted on
//! the descriptor it keeps spare, told why and closed, and the spare is taken again for the
//! next time.
//!
//! A binary of its own with one test: the limit of open files is the process's, so no other
//! test may run beside it.

use rustix::fd::{AsFd, OwnedFd};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use worklane_admission::Pool;
use worklane_dispatch::server::Server;
use worklane_dispatch::service::{Dispatcher, Settings};
use worklane_dispatch::store::Store;
use worklane_dispatch::wire::{Reply, code};
use worklane_slotfile::{Environment, SlotDir};
use worklane_transport::Trust;

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
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    let open = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .max()
        .expect("some open");
    let mut fillers: Vec<OwnedFd> = Vec::new();
    loop {
        let filler = rustix::io::fcntl_dupfd_cloexec(null.as_fd(), 0).expect("dup");
        let number = std::os::fd::AsRawFd::as_raw_fd(&filler);
        fillers.push(filler);
        if number > open {
            break;
        }
    }
    let top = fillers
        .iter()
        .map(std::os::fd::AsRawFd::as_raw_fd)
        .max()
        .expect("a filler");
    let old = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(u64::try_from(top).expect("fd") + 1),
            maximum: old.maximum,
        },
    )
    .expect("lower the limit of open files");
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
    setrlimit(Resource::Nofile, old).expect("restore the limit of open files");
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
