//! The admission dispatcher.
//!
//! - `dispatcher_round_trip/{disk,tmpfs}`: one enqueue, admission and claim through a real
//!   dispatcher (its service loop in a thread of this process, on a Unix socket), the
//!   launcher's lane descriptor passed in and the lane's and slot's passed out, then the
//!   driver's adopt and release of both: handing one piece of work over and back.
//!   `{disk,tmpfs}/enqueue-to-claim` times only the dispatcher's part of that cycle: from the
//!   enqueue's request (the lane already held) to the claim's reply (both descriptors
//!   received), the launcher's acquire and the driver's adopt and release left out.
//!   `{disk,tmpfs}/syscall_floor` is that part's floor by hand (`floor_in`): two Unix-socket
//!   requests and replies, one descriptor in and two out, and the row's insert and two
//!   updates in SQLite (WAL, `synchronous = NORMAL`).
//! - `dispatcher_next_row/{10,10000,100000}`: choosing the next row to admit with 10, 10 000
//!   and 100 000 queued (the `attempts_order` index).
//! - `dispatcher_recovery_10000_rows/{disk,tmpfs}`: a dispatcher starting over 10 000 stored
//!   rows whose lanes are free (each lane's lock taken again) and every row's status entry
//!   rewritten, as after a restart: each lane has the guard, epoch file and record its
//!   launcher left, and each row the status entry the dead dispatcher wrote. `/fresh`: the same rows in a
//!   directory without any lane file (as after a reboot with the slot directory on tmpfs),
//!   so each lane's guard and first epoch file are created too. `disk/cold`: as `disk`, with
//!   the page cache dropped before each recovery (`sync`, then 3 written to
//!   `/proc/sys/vm/drop_caches`; root only, skipped elsewhere), as after a reboot: the database
//!   and every lane file read from the disk.
//!
//! `cargo bench -p worklane-benches --bench dispatcher`

// One thread starts no process here; nothing needs the test binaries' fork gate.
#![allow(clippy::disallowed_methods)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use worklane_admission::Pool;
use worklane_dispatch::server::Server;
use worklane_dispatch::service::{Dispatcher, Settings, lane_lock};
use worklane_dispatch::status;
use worklane_dispatch::store::{Attempt, State, Store};
use worklane_transport::Trust;

use worklane_dispatch::wire::{Enqueue, Reply, Request as Wire};
use worklane_guard::Guard;
use worklane_lease::{Acquired, Options, Request, acquire, adopt};
use worklane_slotfile::{Environment, SlotDir, TEST_ROOT_VAR};

fn pool_in(dir: &Path, root: &Path) -> Pool {
    std::fs::write(dir.join("config.json"), r#"{"max_agents": 64}"#).expect("config");
    let env = Environment::from_process()
        .var(TEST_ROOT_VAR, root)
        .var("AGENT_SLOTS_DIR", dir);
    Pool::new(SlotDir::resolve_in(&env).expect("resolve"))
}

fn ask(
    path: &Path,
    request: &Wire,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> (Reply, Vec<std::os::fd::OwnedFd>) {
    let stream = UnixStream::connect(path).expect("connect");
    worklane_transport::send(&stream, &serde_json::to_vec(request).expect("json"), fds)
        .expect("send");
    let (line, fds) = worklane_transport::recv(&stream).expect("recv");
    (serde_json::from_slice(&line).expect("reply"), fds)
}

fn round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("dispatcher_round_trip");
    for (label, root) in worklane_benches::filesystems() {
        round_trip_in(&mut group, label, &root);
    }
    group.finish();
}

/// One enqueue, admission and claim through a dispatcher serving a slot directory in `root`.
fn round_trip_in(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    label: &str,
    root: &Path,
) {
    let temp = tempfile::tempdir_in(root).expect("temp");
    let pool = pool_in(temp.path(), root);
    let socket = temp.path().join("dispatcher.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let store = Store::open(&temp.path().join("queue.db")).expect("store");
    let dispatcher =
        Dispatcher::recover(pool.clone(), store, Settings::default()).expect("dispatcher");
    let stop = Arc::new(AtomicBool::new(false));
    let (admitted_tx, admitted_rx) = mpsc::channel::<(String, String)>();
    let stat = rustix::fs::fstat(pool.dir()).expect("fstat");
    let trust = Trust {
        owner: stat.st_uid,
        group: stat.st_gid,
    };
    let server = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut server = Server::new(
                dispatcher,
                listener,
                trust,
                |admitted| {
                    // The "driver": told the attempt and its token, as a started process would be.
                    admitted_tx
                        .send((admitted.attempt.id.clone(), admitted.token.clone()))
                        .expect("send");
                    Ok(0)
                },
                |_| {},
            );
            server.run(&stop).expect("serve");
        })
    };
    let mut round = 0u64;
    // One whole cycle; returns the time from the enqueue's request to the claim's reply.
    let mut one_round = || -> Duration {
        // 64 lanes in turn, as a harness reuses its lanes: the dispatcher closes its copies
        // of the handed-over descriptors just after its reply, so the lane of the last
        // round may still be held for a moment, never that of 64 rounds ago.
        round = (round + 1) % 64;
        let lane = format!("bench-{round}");
        let lease = match acquire(
            pool.dir(),
            &lane_lock(&lane),
            &Request::new("launcher"),
            &Options::process(),
        )
        .expect("acquire")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("a new lane is free: {r}"),
        };
        let entry = Enqueue {
            lane: lane.clone(),
            start_ms: Some(1),
            priority: Some(0),
            placement: String::new(),
            stage: String::new(),
            args: vec!["driver".into()],
            env: BTreeMap::new(),
            own_lane: false,
            weight: None,
            owner: None,
        };
        let guard = lease.guard().expect("held");
        let started = Instant::now();
        let (reply, _) = ask(&socket, &Wire::Enqueue(entry), &[guard.as_fd()]);
        assert!(reply.ok, "{reply:?}");
        drop(lease.hand_over());
        let (attempt, token) = admitted_rx.recv().expect("admitted");
        let (reply, mut fds) = ask(&socket, &Wire::Claim { attempt, token }, &[]);
        let span = started.elapsed();
        assert!(reply.ok && fds.len() == 2, "{reply:?}");
        // The driver's side, as `worklane claim` does it: adopt both, then release both.
        let slot_fd = fds.pop().expect("slot");
        let lane_fd = fds.pop().expect("lane");
        let dir = pool.dir();
        let name = lane_lock(&lane);
        let lane_guard = Guard::from_received(lane_fd, dir, dir.path(), &name).expect("lane guard");
        let claimer = Request::new("driver");
        let lane_lease =
            adopt(dir, &name, lane_guard, &claimer, &Options::process()).expect("adopt the lane");
        let slot = pool
            .adopt(reply.slot.as_deref().expect("slot name"), slot_fd, &claimer)
            .expect("adopt the slot");
        slot.release().expect("release the slot");
        lane_lease.release().expect("release the lane");
        span
    };
    group.bench_function(label, |b| b.iter(&mut one_round));
    group.bench_function(format!("{label}/enqueue-to-claim"), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| one_round()).sum());
    });
    stop.store(true, Ordering::SeqCst);
    server.join().expect("server");
    floor_in(group, label, root);
}

/// `{label}/syscall_floor`, the floor of `enqueue-to-claim`: what handing a lane over and
/// back needs at the least, by hand. A server thread on a Unix socket, and per round two
/// connections: the enqueue (a JSON line and one descriptor in; the row inserted; a line
/// back) and the claim (a JSON line in; the row updated to admitted, then to running; a line
/// and two descriptors back), the rows in SQLite in WAL mode with `synchronous = NORMAL`, as
/// the dispatcher keeps them.
fn floor_in(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    label: &str,
    root: &Path,
) {
    let temp = tempfile::tempdir_in(root).expect("temp");
    let socket = temp.path().join("floor.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let db = rusqlite::Connection::open(temp.path().join("floor.db")).expect("db");
    db.pragma_update(None, "journal_mode", "WAL").expect("wal");
    db.pragma_update(None, "synchronous", "NORMAL")
        .expect("normal");
    db.execute_batch(
        "CREATE TABLE rows (id INTEGER PRIMARY KEY, lane TEXT NOT NULL, state TEXT NOT NULL, \
         args TEXT NOT NULL)",
    )
    .expect("schema");
    let lane = std::fs::File::create(temp.path().join("lane")).expect("a lane");
    let slot = std::fs::File::create(temp.path().join("slot")).expect("a slot");
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let stream = stream.expect("accept");
                let (line, fds) = worklane_transport::recv(&stream).expect("recv");
                let request: serde_json::Value = serde_json::from_slice(&line).expect("json");
                if request["op"] == "enqueue" {
                    db.execute(
                        "INSERT INTO rows (lane, state, args) VALUES (?1, 'queued', ?2)",
                        (request["lane"].as_str().expect("lane"), "[\"driver\"]"),
                    )
                    .expect("insert");
                    held = fds;
                    worklane_transport::send(&stream, br#"{"ok":true}"#, &[]).expect("reply");
                } else {
                    let id = db.last_insert_rowid();
                    db.execute("UPDATE rows SET state = 'starting' WHERE id = ?1", [id])
                        .expect("admit");
                    db.execute("UPDATE rows SET state = 'running' WHERE id = ?1", [id])
                        .expect("claim");
                    worklane_transport::send(
                        &stream,
                        br#"{"ok":true,"slot":"agent-0.lock"}"#,
                        &[lane.as_fd(), slot.as_fd()],
                    )
                    .expect("reply");
                    held.clear();
                }
            }
        })
    };
    let held = std::fs::File::create(temp.path().join("held")).expect("held");
    group.bench_function(format!("{label}/syscall_floor"), |b| {
        b.iter(|| {
            let enqueue = UnixStream::connect(&socket).expect("connect");
            worklane_transport::send(
                &enqueue,
                br#"{"op":"enqueue","lane":"bench"}"#,
                &[held.as_fd()],
            )
            .expect("send");
            let (reply, _) = worklane_transport::recv(&enqueue).expect("recv");
            assert_eq!(reply, br#"{"ok":true}"#);
            let claim = UnixStream::connect(&socket).expect("connect");
            worklane_transport::send(&claim, br#"{"op":"claim"}"#, &[]).expect("send");
            let (_, fds) = worklane_transport::recv(&claim).expect("recv");
            assert_eq!(fds.len(), 2);
        });
    });
    stop.store(true, Ordering::SeqCst);
    // Wake the accept loop so it sees the stop.
    drop(UnixStream::connect(&socket));
    server.join().expect("server");
}

fn attempt(i: usize, state: State) -> Attempt {
    Attempt {
        state,
        args: vec!["driver".into()],
        lane_epoch: Some(1),
        ..Attempt::queued(
            format!("a-{i:032x}"),
            format!("l{i}"),
            1_000_000 + (i as u64 * 7919) % 100_000,
            (i % 5) as i64,
            1,
        )
    }
}

fn next_row(c: &mut Criterion) {
    let mut group = c.benchmark_group("dispatcher_next_row");
    for n in [10usize, 10_000, 100_000] {
        let temp = tempfile::tempdir().expect("temp");
        let store = Store::open(&temp.path().join("queue.db")).expect("store");
        for i in 0..n {
            store.insert(&attempt(i, State::Queued)).expect("insert");
        }
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| store.next_queued(u64::MAX).expect("next").expect("a row"));
        });
    }
    group.finish();
}

/// What a starting server does after recovery: every row's status entry rewritten with its
/// pid and the time.
fn write_entries(dispatcher: &Dispatcher) {
    let now = dispatcher.pool().clock().now_ms();
    for view in dispatcher.list().expect("list") {
        status::write_entry(dispatcher.pool().dir(), &view, std::process::id(), now)
            .expect("entry");
    }
}

fn recovery(c: &mut Criterion) {
    let mut group = c.benchmark_group("dispatcher_recovery_10000_rows");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(30));
    let can_drop = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/vm/drop_caches")
        .is_ok();
    if !can_drop {
        eprintln!(
            "dispatcher_recovery_10000_rows/disk/cold skipped: the page cache cannot be dropped here"
        );
    }
    for ((label, root), fresh, cold) in worklane_benches::filesystems().into_iter().flat_map(|fs| {
        let cold = fs.0 == "disk" && can_drop;
        let mut each = vec![(fs.clone(), false, false), (fs.clone(), true, false)];
        if cold {
            each.push((fs, false, true));
        }
        each
    }) {
        let label = match (fresh, cold) {
            (true, _) => format!("{label}/fresh"),
            (false, true) => format!("{label}/cold"),
            (false, false) => label.to_owned(),
        };
        group.bench_function(label, |b| {
            b.iter_batched(
                || {
                    let temp = tempfile::tempdir_in(&root).expect("temp");
                    let store = Store::open(&temp.path().join("queue.db")).expect("store");
                    for i in 0..10_000 {
                        store.insert(&attempt(i, State::Queued)).expect("insert");
                    }
                    drop(store);
                    if fresh {
                        return temp;
                    }
                    // As a dispatcher finds them after a restart: each row's lane was taken by
                    // its launcher (guard, epoch file, record), and is free now.
                    let pool = pool_in(temp.path(), &root);
                    let names: Vec<String> =
                        (0..10_000).map(|i| lane_lock(&format!("l{i}"))).collect();
                    let each: Vec<(&str, Request)> = names
                        .iter()
                        .map(|n| (n.as_str(), Request::new("launcher")))
                        .collect();
                    for got in worklane_lease::acquire_each(pool.dir(), &each, &Options::process())
                        .expect("launchers")
                    {
                        match got {
                            Acquired::Held(lease) => drop(lease.hand_over()),
                            Acquired::Refused(r) => panic!("free: {r}"),
                        }
                    }
                    // And a dispatcher served them, wrote their status entries and died.
                    let store = Store::open(&temp.path().join("queue.db")).expect("store");
                    let served = Dispatcher::recover(pool, store, Settings::default())
                        .expect("a first dispatcher");
                    write_entries(&served);
                    drop(served);
                    if cold {
                        drop_caches();
                    }
                    temp
                },
                |temp| {
                    let pool = pool_in(temp.path(), &root);
                    let store = Store::open(&temp.path().join("queue.db")).expect("store");
                    let recovered =
                        Dispatcher::recover(pool, store, Settings::default()).expect("recover");
                    write_entries(&recovered);
                    drop(recovered);
                    temp
                },
                criterion::BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

/// Writes what is dirty to disk and drops the page cache, so the next read comes from the disk.
fn drop_caches() {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", b"3").expect("drop the page cache");
}

criterion_group!(benches, round_trip, next_row, recovery);
criterion_main!(benches);
