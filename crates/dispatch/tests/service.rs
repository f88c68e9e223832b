//! The dispatcher's decisions on real files, guards, descriptors and SQLite, in one
//! process: the launcher's hand-over is a duplicated descriptor of its held lane guard.
use super::*;
use std::os::fd::{AsFd, OwnedFd};
use worklane_dispatch::service::{
    Caller, CancelRefused, Cancelled, ClaimRefused, Dispatcher, EnqueueRefused, Mode, RetryRefused,
    Settings, lane_lock,
};
use worklane_dispatch::store::{State, Store};
use worklane_dispatch::wire::Enqueue;
use worklane_lease::{Acquired, Options, Request as LeaseRequest};

pub(super) const T0: u64 = 1_800_000_000_000;

/// This process as a caller of the dispatcher (its peer credentials).
pub(super) fn me() -> Caller {
    Caller {
        pid: Some(std::process::id()),
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        groups: rustix::process::getgroups()
            .expect("groups")
            .into_iter()
            .map(rustix::process::Gid::as_raw)
            .collect(),
    }
}

pub(super) struct Bench {
    pub(super) site: Site,
    pub(super) clock: ManualClock,
    pub(super) dispatcher: Dispatcher,
}

impl Bench {
    pub(super) fn new(config: &str, settings: Settings) -> Bench {
        Bench::at(config, settings, T0)
    }

    /// As [`Bench::new`], its clock at `now_ms`.
    pub(super) fn at(config: &str, settings: Settings, now_ms: u64) -> Bench {
        let site = Site::new(config);
        let clock = ManualClock::at(now_ms);
        let pool = Pool::new(
            SlotDir::resolve_in(
                &Environment::from_process().var("AGENT_SLOTS_DIR", site.temp.path()),
            )
            .expect("resolve"),
        )
        .with_clock(Arc::new(clock.clone()));
        let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
        let dispatcher = Dispatcher::recover(pool, store, settings).expect("dispatcher");
        Bench {
            site,
            clock,
            dispatcher,
        }
    }

    /// Tells the dispatcher that its driver for `id` started as process `pid` (a child of the
    /// test, so not reaped yet), with a pidfd of it, as the CLI's launcher does.
    pub(super) fn started_child(&mut self, id: &str, pid: u32) {
        self.dispatcher
            .started(
                id,
                worklane_dispatch::service::Started {
                    pid,
                    pidfd: Some(pidfd_of(pid)),
                },
            )
            .expect("started");
    }

    /// Takes lane `name` as a launcher would and returns a copy of its held guard's
    /// descriptor, as the dispatcher receives it (close-on-exec, as a descriptor received
    /// over the socket is: a driver a test starts must not inherit the lane); the launcher's
    /// own copy is closed.
    pub(super) fn launch(&self, name: &str) -> OwnedFd {
        let dir = self.dispatcher.pool().dir();
        let lease = match gate::quietly(|| {
            worklane_lease::acquire(
                dir,
                &lane_lock(name),
                &LeaseRequest::new("launcher"),
                &Options::process(),
            )
        })
        .expect("acquire the lane")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("lane {name} must be free: {r}"),
        };
        let guard = lease.hand_over().expect("a held guard");
        let copy = rustix::io::fcntl_dupfd_cloexec(&guard, 0).expect("dup");
        gate::quietly(|| drop(guard));
        copy
    }

    pub(super) fn entry(name: &str, start_ms: u64, priority: i64) -> Enqueue {
        Enqueue {
            lane: name.to_owned(),
            start_ms: Some(start_ms),
            priority: Some(priority),
            placement: "wt-1".into(),
            stage: "build".into(),
            args: vec!["driver".into()],
            env: [
                ("LANE_X".to_owned(), "1".to_owned()),
                ("API_TOKEN".to_owned(), "s".to_owned()),
            ]
            .into_iter()
            .collect(),
            own_lane: false,
            weight: None,
            owner: None,
        }
    }

    /// Enqueues lane `name` of weight `weight`, tagged `owner`, at `start_ms`.
    fn enqueue_weighted(
        &mut self,
        name: &str,
        start_ms: u64,
        weight: u32,
        owner: Option<&str>,
    ) -> String {
        let fd = self.launch(name);
        let entry = Enqueue {
            weight: Some(weight),
            owner: owner.map(str::to_owned),
            ..Bench::entry(name, start_ms, 0)
        };
        let reply = self
            .dispatcher
            .enqueue(entry, vec![fd], &me())
            .expect("enqueue")
            .expect("accepted");
        reply.attempt
    }

    pub(super) fn enqueue(&mut self, name: &str, start_ms: u64, priority: i64) -> String {
        let fd = self.launch(name);
        let reply = self
            .dispatcher
            .enqueue(Bench::entry(name, start_ms, priority), vec![fd], &me())
            .expect("enqueue")
            .expect("accepted");
        reply.attempt
    }

    /// Whether another process finds the lane free (`flock -n` on its guard).
    fn lane_free(&self, name: &str) -> bool {
        let guard = self
            .site
            .temp
            .path()
            .join(format!(".{}.flock", lane_lock(name)));
        Command::new("flock")
            .arg("-n")
            .arg(&guard)
            .arg("true")
            .status_gated()
            .expect("flock")
            .success()
    }
}

/// How many descriptors of this process refer to a lane's guard (counted in
/// `/proc/self/fd` by device and inode, so other tests' descriptors never count).
fn fds_on(bench: &Bench, lanes: &[&str]) -> usize {
    use std::os::unix::fs::MetadataExt;
    let ids: Vec<(u64, u64)> = lanes
        .iter()
        .filter_map(|name| {
            let path = bench
                .site
                .temp
                .path()
                .join(format!(".{}.flock", lane_lock(name)));
            std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
        })
        .collect();
    std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .flatten()
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .filter(|m| ids.contains(&(m.dev(), m.ino())))
        .count()
}

#[test]
fn every_refused_enqueue_closes_every_descriptor() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let two = vec![bench.launch("a"), bench.launch("b")];
    let reply = bench
        .dispatcher
        .enqueue(Bench::entry("a", T0, 0), two, &me())
        .expect("enqueue");
    assert!(
        matches!(reply, Err(EnqueueRefused::Descriptors { count: 2 })),
        "{reply:?}"
    );
    let reply = bench
        .dispatcher
        .enqueue(Bench::entry("a", T0, 0), vec![], &me())
        .expect("enqueue");
    assert!(
        matches!(reply, Err(EnqueueRefused::Descriptors { count: 0 })),
        "{reply:?}"
    );
    let other = bench.launch("b");
    let reply = bench
        .dispatcher
        .enqueue(Bench::entry("a", T0, 0), vec![other], &me())
        .expect("enqueue");
    assert!(
        matches!(&reply, Err(EnqueueRefused::NotTheLane { lock, .. }) if lock == "lane-a.lock"),
        "another lane's guard: {reply:?}"
    );
    // For a lane whose guard is not there at all: the open by name fails (not for want of
    // descriptors, so it is the sender's descriptor that is not the lane's).
    let other = bench.launch("b2");
    let reply = bench
        .dispatcher
        .enqueue(Bench::entry("never", T0, 0), vec![other], &me())
        .expect("enqueue");
    assert!(
        matches!(&reply, Err(EnqueueRefused::NotTheLane { lock, .. }) if lock == "lane-never.lock"),
        "a lane with no guard: {reply:?}"
    );
    let mut missing = Bench::entry("a", T0, 0);
    missing.priority = None;
    let reply = bench
        .dispatcher
        .enqueue(missing, vec![bench.launch("a")], &me())
        .expect("enqueue");
    assert!(
        matches!(reply, Err(EnqueueRefused::MissingField)),
        "{reply:?}"
    );
    let mut missing = Bench::entry("a", T0, 0);
    missing.start_ms = None;
    let reply = bench
        .dispatcher
        .enqueue(missing, vec![bench.launch("a")], &me())
        .expect("enqueue");
    assert!(
        matches!(reply, Err(EnqueueRefused::MissingField)),
        "{reply:?}"
    );
    assert_eq!(
        fds_on(&bench, &["a", "b"]),
        0,
        "every refused descriptor is closed"
    );
    assert!(
        bench.lane_free("a") && bench.lane_free("b"),
        "and the lanes are free again"
    );
    // A sender that never held the lock: its guard, but another description holds it.
    let holder = bench.launch("c");
    let path = bench
        .site
        .temp
        .path()
        .join(format!(".{}.flock", lane_lock("c")));
    let unlocked: OwnedFd = std::fs::File::open(&path).expect("open the guard").into();
    let reply = bench
        .dispatcher
        .enqueue(Bench::entry("c", T0, 0), vec![unlocked], &me())
        .expect("enqueue");
    assert!(
        matches!(&reply, Err(EnqueueRefused::NotHeld { lock }) if lock == "lane-c.lock"),
        "{reply:?}"
    );
    drop(holder);
    let mut waiter = Bench::new(
        "{}",
        Settings {
            mode: Mode::Waiter,
            ..Settings::default()
        },
    );
    let fd = waiter.launch("w");
    let reply = waiter
        .dispatcher
        .enqueue(Bench::entry("w", T0, 0), vec![fd], &me())
        .expect("enqueue");
    assert!(
        matches!(reply, Err(EnqueueRefused::WaiterMode)),
        "{reply:?}"
    );
    assert!(
        waiter.lane_free("w"),
        "refused in waiter mode, descriptor closed"
    );
}

#[test]
fn an_accepted_enqueue_holds_the_lane_and_keeps_start_and_priority() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let id = bench.enqueue("docs", T0 - 5_000, 7);
    assert!(
        !bench.lane_free("docs"),
        "the dispatcher's copy holds the lane after the sender closed its own"
    );
    let listed = bench.dispatcher.list().expect("list");
    assert_eq!(listed.len(), 1);
    let row = &listed[0];
    assert_eq!(
        (row.attempt.as_str(), row.state.as_str()),
        (id.as_str(), "queued")
    );
    assert_eq!(
        (row.start_ms, row.priority),
        (T0 - 5_000, 7),
        "kept exactly"
    );
    assert_eq!(
        (
            row.placement.as_str(),
            row.stage.as_str(),
            row.args.as_slice()
        ),
        ("wt-1", "build", ["driver".to_owned()].as_slice()),
        "what the launcher said, as it said it"
    );
    let store = Store::open(&bench.site.temp.path().join("queue.db")).expect("reopen");
    let stored = store.get(&id).expect("get").expect("committed");
    assert_eq!(
        stored.env.keys().collect::<Vec<_>>(),
        ["LANE_X"],
        "a secret-shaped name is never stored"
    );
    assert_eq!(
        bench.dispatcher.cancel(&id, &me()).expect("cancel").ok(),
        Some(Cancelled::Dropped)
    );
    assert!(bench.lane_free("docs"), "cancel closes the lane");
}

#[test]
fn admit_claim_and_the_seeds_refusals() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let first = bench.enqueue("a", T0, 0);
    let second = bench.enqueue("b", T0 + 1, 0);
    let admitted = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("room for one");
    assert_eq!(admitted.attempt.id, first);
    assert_eq!(admitted.token.len(), 32, "128 bits of token");
    assert_eq!(admitted.slot, "agent-0.lock");
    assert!(
        bench.dispatcher.admit_next().expect("admit").is_none(),
        "at cap 1: a starting row holds its slot"
    );
    let refusals = [
        (first.as_str(), "wrong"),
        (second.as_str(), admitted.token.as_str()),
        ("a-absent", admitted.token.as_str()),
    ];
    for (id, token) in refusals {
        let refused = bench
            .dispatcher
            .claim(id, token, &me())
            .expect("claim")
            .expect_err("refused");
        assert!(
            matches!(refused, ClaimRefused::NoAdmittedRow),
            "{refused:?}"
        );
        assert_eq!(refused.to_string(), "no admitted row for this token");
    }
    assert_eq!(
        bench.dispatcher.list().expect("list").len(),
        2,
        "the rows stay"
    );
    assert!(!bench.lane_free("a"), "and their descriptors");
    let claimed = bench
        .dispatcher
        .claim(&first, &admitted.token, &me())
        .expect("claim")
        .expect("claimed");
    assert_eq!(claimed.fds.len(), 2, "the lane and the slot");
    assert_eq!(claimed.slot, "agent-0.lock");
    assert_eq!(
        (claimed.attempt.as_str(), claimed.lane.as_str()),
        (first.as_str(), "a")
    );
    let rows = bench.dispatcher.list().expect("list");
    assert_eq!(
        rows.iter().map(|r| r.state.as_str()).collect::<Vec<_>>(),
        ["running", "queued"],
        "the claimed row left the queue: it runs, holding nothing of the dispatcher's"
    );
    // The driver's side: adopt the slot from the received descriptor.
    let slot_fd = rustix::io::fcntl_dupfd_cloexec(claimed.fds[1].as_fd(), 0).expect("dup");
    let lane_fd = rustix::io::fcntl_dupfd_cloexec(claimed.fds[0].as_fd(), 0).expect("dup");
    drop(claimed);
    let slot = bench
        .dispatcher
        .pool()
        .adopt("agent-0.lock", slot_fd, &LeaseRequest::new("driver"))
        .expect("adopt the slot");
    assert!(!bench.lane_free("a"), "the driver holds the lane");
    drop(lane_fd);
    assert!(bench.lane_free("a"), "closing the last copy frees it");
    assert!(
        bench.dispatcher.admit_next().expect("admit").is_none(),
        "the driver's slot counts"
    );
    slot.release().expect("release");
    let next = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("room again");
    assert_eq!(next.attempt.id, second);
}

#[test]
fn a_weighted_row_takes_its_units_and_stands_in_line_with_them() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 4}"#, Settings::default());
    let heavy = bench.enqueue_weighted("a", T0, 3, Some("nightly"));
    let next = bench.enqueue_weighted("b", T0 + 1, 2, None);
    let admitted = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("room for three");
    assert_eq!(admitted.attempt.id, heavy);
    assert_eq!(
        (admitted.attempt.weight, admitted.attempt.owner.as_deref()),
        (3, Some("nightly"))
    );
    let slot: serde_json::Value = serde_json::from_slice(
        &std::fs::read(bench.site.temp.path().join(&admitted.slot)).expect("record"),
    )
    .expect("JSON");
    assert_eq!(slot["weight"], 3, "the slot holds the row's units: {slot}");
    assert_eq!(
        slot["shareOwner"],
        format!("uid:{}", rustix::process::geteuid().as_raw()),
        "no config names the tag: its enqueuer's uid"
    );
    assert!(
        bench.dispatcher.admit_next().expect("admit").is_none(),
        "two units asked, one free"
    );
    let entry = bench
        .site
        .snapshot()
        .line
        .into_iter()
        .find(|v| v.live)
        .expect("the dispatcher stands for its next row");
    assert_eq!(entry.weight, 2, "with the row's weight");
    let rows = bench.dispatcher.list().expect("list");
    let view = rows.iter().find(|r| r.attempt == next).expect("listed");
    assert_eq!((view.weight, view.owner.as_deref()), (2, None));
}

#[test]
fn an_enqueue_no_cap_could_admit_is_refused_naming_weight_and_cap() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(
        r#"{"max_agents": 4, "shares": {"owner:small": 1}}"#,
        Settings::default(),
    );
    for (weight, owner, says) in [
        (0, None, "weight 0"),
        (5, None, "4 units"),
        (2, Some("small"), "share of owner:small is 1"),
        (1, Some("two words"), "a tag is 1 to 128 bytes"),
    ] {
        let fd = bench.launch("x");
        let entry = Enqueue {
            weight: Some(weight),
            owner: owner.map(str::to_owned),
            ..Bench::entry("x", T0, 0)
        };
        let refused = bench
            .dispatcher
            .enqueue(entry, vec![fd], &me())
            .expect("enqueue")
            .expect_err("refused");
        assert!(
            matches!(
                refused,
                EnqueueRefused::Unfit { .. } | EnqueueRefused::BadOwner { .. }
            ),
            "{weight} {owner:?}: {refused:?}"
        );
        let message = refused.to_string();
        assert!(message.contains(says), "{message}");
        assert!(
            bench.lane_free("x"),
            "a refusal closes the lane's descriptor"
        );
    }
}

/// `look` on `bench`, on a thread of its own given 10 s: a loop that never ends fails the
/// test instead of hanging it (the thread is left to the end of the test process). The
/// calling test holds the gate quiet, so `look` needs no quiet section of its own.
fn within<T: Send + 'static>(
    mut bench: Bench,
    look: impl FnOnce(&mut Bench) -> T + Send + 'static,
) -> (T, Bench) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let seen = look(&mut bench);
        let _ = tx.send((seen, bench));
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the pass ends within 10 s")
}

#[test]
fn a_row_the_lowered_cap_can_never_admit_is_parked_and_holds_nobody() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 4}"#, Settings::default());
    let heavy = bench.enqueue_weighted("a", T0, 3, None);
    let light = bench.enqueue_weighted("b", T0 + 1, 1, None);
    bench.site.set_config(r#"{"max_agents": 2}"#);
    // On a thread given 10 s: a pass that found the heavy row first again and again, never
    // parking it, would never end.
    let (admitted, bench) = within(bench, |bench| {
        match bench.dispatcher.admit_next().expect("admit") {
            Some(admitted) => admitted,
            None => bench
                .dispatcher
                .admit_next()
                .expect("admit")
                .expect("the light row next"),
        }
    });
    assert_eq!(admitted.attempt.id, light);
    let rows = bench.dispatcher.list().expect("list");
    let parked = rows.iter().find(|r| r.attempt == heavy).expect("listed");
    assert_eq!(parked.state, "failed");
    assert!(
        parked
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("weight 3") && e.contains("2 units")),
        "{parked:?}"
    );
    assert!(!bench.lane_free("a"), "a parked row keeps its lane");
}

#[test]
fn with_shares_the_dispatcher_admits_the_less_used_owner_first() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(
        r#"{"max_agents": 4, "shares": {"owner:a": 4, "owner:b": 4}}"#,
        Settings::default(),
    );
    let a1 = bench.enqueue_weighted("a1", T0, 1, Some("a"));
    let a2 = bench.enqueue_weighted("a2", T0 + 1, 1, Some("a"));
    let a3 = bench.enqueue_weighted("a3", T0 + 2, 1, Some("a"));
    let b1 = bench.enqueue_weighted("b1", T0 + 10, 1, Some("b"));
    let mut order = Vec::new();
    for _ in 0..4 {
        let admitted = gate::quietly(|| bench.dispatcher.admit_next())
            .expect("admit")
            .expect("room");
        order.push(admitted.attempt.id);
    }
    assert_eq!(
        order,
        [a1, b1, a2, a3],
        "owner b (0 of 4) before owner a (1 of 4), whatever a queued first"
    );
}

#[test]
fn an_admitted_attempt_is_starting_with_its_token_and_time() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let id = bench.enqueue("a", T0 - 9, 3);
    bench.clock.advance(7);
    let admitted = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("admitted");
    assert_eq!(admitted.attempt.id, id);
    assert_eq!(admitted.attempt.state, State::Starting);
    assert_eq!(
        admitted.attempt.token.as_deref(),
        Some(admitted.token.as_str())
    );
    assert_eq!(admitted.attempt.state_at_ms, T0 + 7, "admitted now");
    assert_eq!(admitted.attempt.queued_at_ms, T0 - 9, "its place kept");
    assert_eq!(admitted.slot, "agent-0.lock");
    assert!(!admitted.token.is_empty());
}

#[test]
fn expiry_is_strictly_after_the_interval_and_keeps_the_place() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(
        r#"{"max_agents": 1}"#,
        Settings {
            claim_interval_ms: 60_000,
            ..Settings::default()
        },
    );
    let id = bench.enqueue("a", T0 - 9, 3);
    let view = |bench: &Bench| bench.dispatcher.view(&id).expect("view").expect("row");
    assert_eq!(
        view(&bench).retry_at_ms,
        None,
        "never failed: no retry time"
    );
    let admitted = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("admitted");
    bench.clock.advance(60_000);
    assert!(
        bench.dispatcher.expire().expect("expire").is_empty(),
        "at exactly 60 s it is still starting"
    );
    bench.clock.advance(1);
    assert_eq!(
        bench.dispatcher.expire().expect("expire"),
        std::slice::from_ref(&id),
        "1 ms later it is queued"
    );
    let row = bench.dispatcher.list().expect("list").remove(0);
    assert_eq!(
        (row.state.as_str(), row.start_ms, row.priority),
        ("queued", T0 - 9, 3)
    );
    // The expiry is a failed start of the attempt: counted, said, and backed off.
    assert_eq!(row.failures, 1, "counted: {row:?}");
    assert!(
        row.last_error
            .as_deref()
            .is_some_and(|e| e.contains("did not claim it within the claim interval")),
        "said: {row:?}"
    );
    let expired_at = T0 + 60_001;
    assert_eq!(
        row.retry_at_ms,
        Some(expired_at + 1_000),
        "the first backoff"
    );
    assert!(
        bench
            .dispatcher
            .claim(&id, &admitted.token, &me())
            .expect("claim")
            .is_err(),
        "the old token is refused"
    );
    bench.clock.advance(999);
    assert!(
        bench.dispatcher.admit_next().expect("admit").is_none(),
        "not before its backoff ends"
    );
    bench.clock.advance(1);
    let again = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("its slot was returned");
    assert_ne!(again.token, admitted.token, "a fresh token");
    assert_eq!(
        (view(&bench).state.as_str(), view(&bench).retry_at_ms),
        ("starting", None),
        "a retry time is shown only while the row waits for it"
    );
}

#[test]
fn admission_goes_by_priority_then_original_start() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let ids = [
        bench.enqueue("p0-old", T0, 0),
        bench.enqueue("p5", T0 + 50, 5),
        bench.enqueue("p0-new", T0 + 10, 0),
        bench.enqueue("p5-old", T0 + 20, 5),
        bench.enqueue("n1", T0 - 100, -1),
    ];
    let mut order = Vec::new();
    for _ in 0..5 {
        let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
        order.push(admitted.attempt.lane.clone());
        let claimed = bench
            .dispatcher
            .claim(&admitted.attempt.id, &admitted.token, &me())
            .expect("claim")
            .expect("claimed");
        drop(claimed);
    }
    assert_eq!(order, ["p5-old", "p5", "p0-old", "p0-new", "n1"], "{ids:?}");
}

#[test]
fn recovery_keeps_free_lanes_and_leaves_held_ones_alone() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 2}"#, Settings::default());
    let kept = bench.enqueue("kept", T0, 0);
    let taken = bench.enqueue("taken", T0 + 1, 0);
    let admitted = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("admitted");
    assert_eq!(admitted.attempt.id, kept);
    // The dispatcher dies: its descriptors close. Meanwhile someone takes lane "taken".
    let Bench {
        site,
        clock,
        dispatcher,
    } = bench;
    let pool = dispatcher.pool().clone();
    drop(dispatcher);
    let other = match worklane_lease::acquire(
        pool.dir(),
        &lane_lock("taken"),
        &LeaseRequest::new("someone"),
        &Options::process(),
    )
    .expect("acquire")
    {
        Acquired::Held(lease) => lease,
        Acquired::Refused(r) => panic!("free after the dispatcher died: {r}"),
    };
    let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
    let recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
    let rows = recovered.list().expect("list");
    let ids: Vec<&str> = rows.iter().map(|r| r.attempt.as_str()).collect();
    assert_eq!(
        ids,
        [kept.as_str()],
        "the held lane's row is dropped: {taken}"
    );
    assert_eq!(rows[0].state, "queued", "starting becomes queued again");
    assert_eq!(rows[0].start_ms, T0, "its place kept");
    drop(other);
    let _ = clock;
}

#[test]
fn a_failed_step_names_itself_and_its_attempt_and_keeps_its_cause() {
    use worklane_dispatch::service::Error;
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let id = bench.enqueue("a", T0, 0);
    bench.site.set_config("{");
    let error =
        gate::quietly(|| bench.dispatcher.admit_next()).expect_err("the caps cannot be loaded");
    let Error::TakeSlot { attempt, source } = &error else {
        panic!("the slot's step: {error:?}")
    };
    assert_eq!(attempt, &id, "the attempt it was for");
    assert!(
        matches!(**source, worklane_admission::take::Error::Config { .. }),
        "the pool's own error, to match on: {source:?}"
    );
    // Each part of the chain says its own step once: the cause's text is not repeated.
    let mut parts = vec![error.to_string()];
    let mut cause = std::error::Error::source(&error);
    while let Some(e) = cause {
        let text = e.to_string();
        assert!(
            !parts.last().expect("a part").contains(&text),
            "{parts:?} repeats its cause {text:?}"
        );
        parts.push(text);
        cause = e.source();
    }
    assert_eq!(
        parts[..2],
        [
            format!("cannot take an agent slot for attempt {id}"),
            "cannot load the pool's caps".to_owned(),
        ],
        "the dispatcher's step, then the pool's: {parts:?}"
    );
    assert!(
        parts.len() > 2 && parts[2].contains("config.json"),
        "then the config's own error: {parts:?}"
    );
}

/// The record of lane `name`, as the dispatcher's recovery leaves it.
fn lane_record(site: &Site, name: &str) -> Record {
    let raw = std::fs::read(site.temp.path().join(lane_lock(name))).expect("lane record");
    Record::parse(&raw).expect("parses")
}

fn epochs(site: &Site, name: &str) -> Vec<String> {
    let prefix = format!("{}.epoch.", lane_lock(name));
    let mut names: Vec<String> = std::fs::read_dir(site.temp.path())
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    names.sort();
    names
}

/// The row admitted must be the one the dispatcher's entry in the line stands for: when the
/// row it stood for is gone (cancelled, with no stand since), the entry is moved to the next
/// row before it is admitted; an entry left at the old row's place, ahead of the next row,
/// would keep that row out of a free slot.
#[test]
fn the_entry_is_moved_to_the_row_being_admitted_before_it_is_admitted() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let first = bench.enqueue("first", T0, 0);
    let next = bench.enqueue("next", T0 + 1, -1);
    bench.dispatcher.stand().expect("stand");
    let cancelled = bench.dispatcher.cancel(&first, &me()).expect("cancel");
    assert_eq!(cancelled.ok(), Some(Cancelled::Dropped));
    let admitted = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("the next row, into the free slot");
    assert_eq!(admitted.attempt.id, next);
}

#[test]
fn the_dispatcher_stands_in_line_for_its_first_queued_row() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let stop = Stop {
        by: "ops".into(),
        at: "2026-11-30T00:00:00.000Z".into(),
        reason: "holding the queue".into(),
    };
    worklane_admission::stop::write(bench.dispatcher.pool().dir(), &stop).expect("STOP");
    let entries = |bench: &Bench| -> Vec<(i64, u64)> {
        bench
            .dispatcher
            .pool()
            .line(Kind::Agent)
            .expect("line")
            .iter()
            .map(|e| (e.priority, e.start_ms))
            .collect()
    };
    bench.dispatcher.stand().expect("stand");
    assert_eq!(entries(&bench), [], "nothing queued, no entry");
    let low = bench.enqueue("low", T0, 0);
    bench.dispatcher.stand().expect("stand");
    assert_eq!(entries(&bench), [(0, T0)], "the first row's place");
    let high = bench.enqueue("high", T0 + 5, 3);
    bench.dispatcher.stand().expect("stand");
    assert_eq!(
        entries(&bench),
        [(3, T0 + 5)],
        "moved to the new first row, one entry"
    );
    bench.dispatcher.stand().expect("stand");
    assert_eq!(
        entries(&bench),
        [(3, T0 + 5)],
        "standing again changes nothing"
    );
    assert!(
        bench
            .dispatcher
            .cancel(&high, &me())
            .expect("cancel")
            .is_ok()
    );
    bench.dispatcher.stand().expect("stand");
    assert_eq!(entries(&bench), [(0, T0)], "back to the next row's place");
    assert!(
        bench
            .dispatcher
            .cancel(&low, &me())
            .expect("cancel")
            .is_ok()
    );
    bench.dispatcher.stand().expect("stand");
    assert_eq!(entries(&bench), [], "none once nothing is queued");
}

#[test]
fn recovery_resumes_a_lane_nobody_took_and_acquires_one_someone_did() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 2}"#, Settings::default());
    let untouched = bench.enqueue("untouched", T0, 0);
    let passed = bench.enqueue("passed", T0 + 1, 0);
    let rewound = bench.enqueue("rewound", T0 + 2, 0);
    let Bench {
        site, dispatcher, ..
    } = bench;
    let pool = dispatcher.pool().clone();
    drop(dispatcher);
    // While no dispatcher runs, someone takes lane "passed" and gives it back.
    {
        let name = "passed";
        let other = match worklane_lease::acquire(
            pool.dir(),
            &lane_lock(name),
            &LeaseRequest::new("someone"),
            &Options::process(),
        )
        .expect("acquire")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("free after the dispatcher died: {r}"),
        };
        other.release().expect("release");
    }
    assert_eq!(epochs(&site, "passed"), ["lane-passed.lock.epoch.2"]);
    // And a member of the group rewrites "rewound"'s record to name another epoch (the epoch
    // files untouched): the chain of hands can no longer be proved.
    let record = site.temp.path().join(lane_lock("rewound"));
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).expect("record")).expect("json");
    doc["epoch"] = 5.into();
    std::fs::write(&record, doc.to_string()).expect("rewrite the record");
    let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
    let recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
    let ids: Vec<String> = recovered
        .list()
        .expect("list")
        .into_iter()
        .map(|r| r.attempt)
        .collect();
    assert_eq!(
        ids,
        [untouched.clone(), passed.clone(), rewound.clone()],
        "all kept"
    );
    // Nobody took "untouched": held again as the dead dispatcher held it, the launcher's
    // record and epoch as they were.
    assert_eq!(
        lane_record(&site, "untouched").owner.as_deref(),
        Some("launcher")
    );
    assert_eq!(lane_record(&site, "untouched").epoch, Some(1));
    assert_eq!(epochs(&site, "untouched"), ["lane-untouched.lock.epoch.1"]);
    // "passed" changed hands in between: acquired anew, so its epoch moves past the one
    // its interim holder had.
    let record = lane_record(&site, "passed");
    assert_eq!(record.owner.as_deref(), Some("worklane dispatcher"));
    assert_eq!(record.epoch, Some(3), "a new acquisition, a new epoch");
    let record = lane_record(&site, "rewound");
    assert_eq!(
        (record.owner.as_deref(), record.epoch),
        (Some("worklane dispatcher"), Some(2)),
        "a record that does not name the row's epoch: acquired anew"
    );
    let probe = |name: &str| {
        Command::new("flock")
            .arg("-n")
            .arg(site.temp.path().join(format!(".{}.flock", lane_lock(name))))
            .arg("true")
            .status_gated()
            .expect("flock")
            .success()
    };
    assert!(!probe("untouched") && !probe("passed"), "both lanes held");
    drop(recovered);
    assert!(
        probe("untouched") && probe("passed"),
        "and freed with the dispatcher"
    );
}

/// Another user than this process, as a caller (a member of the directory's group).
fn stranger() -> Caller {
    Caller {
        pid: Some(1),
        uid: 65_534,
        gid: 65_534,
        groups: Vec::new(),
    }
}

/// A user's rows waiting are bounded ([`Settings::max_rows_per_user`]): past the bound its
/// enqueue is refused, naming the count and the bound, and its descriptor closed; another
/// user, and root, enqueue on.
#[test]
fn a_user_s_waiting_rows_are_bounded_and_root_is_not() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(
        r#"{"max_agents": 1}"#,
        Settings {
            max_rows_per_user: 2,
            ..Settings::default()
        },
    );
    let enqueue_as = |bench: &mut Bench, name: &str, caller: &Caller| {
        let fd = bench.launch(name);
        bench
            .dispatcher
            .enqueue(Bench::entry(name, T0, 0), vec![fd], caller)
            .expect("enqueue")
    };
    let other = Caller {
        uid: 65_533,
        ..stranger()
    };
    for name in ["s1", "s2"] {
        assert!(
            enqueue_as(&mut bench, name, &stranger()).is_ok(),
            "{name} within the bound"
        );
    }
    let refused = enqueue_as(&mut bench, "s3", &stranger()).expect_err("past the bound");
    assert!(
        matches!(
            &refused,
            EnqueueRefused::TooManyRows {
                uid: 65_534,
                waiting: 2,
                max: 2
            }
        ),
        "{refused:?}"
    );
    assert!(bench.lane_free("s3"), "refused, its descriptor closed");
    assert!(
        enqueue_as(&mut bench, "o1", &other).is_ok(),
        "another user's own bound"
    );
    for name in ["r1", "r2", "r3"] {
        assert!(
            enqueue_as(&mut bench, name, &me()).is_ok(),
            "root is never bounded: {name}"
        );
    }
}

/// A lane enqueued again once its run let it go: the run is finished first (it ended: the
/// new enqueue holds its lane), and the new row queued, not refused as the lane's second.
#[test]
fn a_lane_enqueued_again_after_its_run_ended_finishes_the_run_first() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let first = bench.enqueue("a", T0, 0);
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
    let claimed = bench
        .dispatcher
        .claim(&first, &admitted.token, &me())
        .expect("claim")
        .expect("claimed");
    gate::quietly(|| drop(claimed));
    let second = bench.enqueue("a", T0 + 1, 0);
    assert_ne!(first, second);
    let ended = bench
        .dispatcher
        .ended(&first)
        .expect("ended")
        .expect("the run is in the history");
    assert_eq!(ended.lane, "a");
    let listed = bench.dispatcher.list().expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|a| (a.attempt.as_str(), a.state.as_str()))
            .collect::<Vec<_>>(),
        [(second.as_str(), "queued")]
    );
}

/// A user other than root claims the row it enqueued; root claims anyone's.
#[test]
fn a_user_claims_its_own_row_and_root_claims_anyone_s() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 2}"#, Settings::default());
    let mut enqueue_as_stranger = |name: &str, start_ms: u64| {
        let fd = bench.launch(name);
        bench
            .dispatcher
            .enqueue(Bench::entry(name, start_ms, 0), vec![fd], &stranger())
            .expect("enqueue")
            .expect("accepted")
            .attempt
    };
    let own = enqueue_as_stranger("own", T0);
    let other = enqueue_as_stranger("other", T0 + 1);
    let first = bench.dispatcher.admit_next().expect("admit").expect("own");
    let second = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("other");
    assert_eq!(
        (&first.attempt.id, &second.attempt.id),
        (&own, &other),
        "admitted in order"
    );
    let claimed = bench
        .dispatcher
        .claim(&own, &first.token, &stranger())
        .expect("claim")
        .expect("its enqueuer claims it");
    drop(claimed);
    let claimed = bench
        .dispatcher
        .claim(&other, &second.token, &me())
        .expect("claim")
        .expect("root claims another user's row");
    drop(claimed);
}

/// A dispatcher that is not root believes a status entry that no row backs when it or root
/// wrote it (no one else may have): the row it names was lost, and the history says so.
/// Here the site is made by root, given to uid 65534, and recovered by a thread with that
/// user's credentials (Linux keeps them per thread); the entry stays root's.
#[test]
fn a_dispatcher_that_is_not_root_believes_an_entry_root_wrote() {
    std::thread::spawn(|| {
        let _quiet = gate::quiet();
        let bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let Bench {
            site, dispatcher, ..
        } = bench;
        drop(dispatcher);
        let chown = Command::new("chown")
            .args(["-R", &format!("{NOBODY}:{NOBODY}")])
            .arg(site.temp.path())
            .status_gated()
            .expect("chown");
        assert!(chown.success());
        std::fs::write(
            site.temp.path().join("queue-ghost.json"),
            br#"{"version":1,"lane":"ghost","attempt":"a-ghost","args":["make"],"start":"2026-01-01T00:00:00.000Z","dispatcher":{"pid":4242}}"#,
        )
        .expect("root's entry");
        become_nobody();
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", site.temp.path());
        let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"))
            .with_clock(Arc::new(ManualClock::at(T0)));
        let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
        let recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
        let lost: Vec<(&str, &str)> = recovered
            .recovery()
            .lost
            .iter()
            .map(|l| (l.attempt.as_str(), l.outcome.as_str()))
            .collect();
        assert_eq!(lost, [("a-ghost", "lost")], "root's entry is believed");
        assert!(
            !site.temp.path().join("queue-ghost.json").exists(),
            "and removed"
        );
    })
    .join()
    .expect("the test's thread");
}

/// A dispatcher that is not root starts drivers only as itself: a row with no enqueuer is
/// retried by its own uid (the slot directory's owner), and refused to root, whom it could
/// not run as. Here the dispatcher is a thread with uid 65534's credentials (Linux keeps
/// them per thread), on a directory that user made.
#[test]
fn a_dispatcher_that_is_not_root_retries_a_row_with_no_enqueuer_only_as_itself() {
    std::thread::spawn(|| {
        become_nobody();
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        assert_eq!(me().uid, NOBODY, "the thread runs as nobody");
        let legacy = bench.enqueue("legacy", T0, 0);
        let Bench {
            site, dispatcher, ..
        } = bench;
        let pool = dispatcher.pool().clone();
        drop(dispatcher);
        drop(rusqlite_free_update(&site, &legacy));
        let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
        let mut recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
        assert_eq!(
            recovered.recovery().parked,
            std::slice::from_ref(&legacy),
            "parked"
        );
        let root = Caller {
            pid: Some(1),
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        };
        let refused = recovered.retry(&legacy, &root).expect("retry");
        assert!(
            matches!(&refused, Err(RetryRefused::OtherUser { euid: NOBODY })),
            "{refused:?}"
        );
        let retried = recovered.retry(&legacy, &me()).expect("retry");
        assert!(retried.is_ok(), "its own uid retries it: {retried:?}");
        assert_eq!(
            recovered.view(&legacy).expect("view").expect("kept").state,
            "queued"
        );
    })
    .join()
    .expect("the test's thread");
}

#[test]
fn a_lane_of_its_own_must_say_so_and_no_other_lane_may() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let own = "q-0123456789abcdef";
    let reply = bench
        .dispatcher
        .enqueue(Bench::entry(own, T0, 0), vec![bench.launch(own)], &me())
        .expect("enqueue")
        .expect_err("refused");
    assert!(
        matches!(&reply, EnqueueRefused::ReservedLane { lane } if lane == own),
        "{reply:?}"
    );
    assert!(reply.to_string().contains("reserved"), "says why: {reply}");
    assert!(bench.lane_free(own), "refused, its descriptor closed");
    let mut claimed = Bench::entry("docs", T0, 0);
    claimed.own_lane = true;
    let reply = bench
        .dispatcher
        .enqueue(claimed, vec![bench.launch("docs")], &me())
        .expect("enqueue");
    assert!(
        matches!(&reply, Err(EnqueueRefused::NotOwnLane { lane }) if lane == "docs"),
        "{reply:?}"
    );
    let mut declared = Bench::entry(own, T0, 0);
    declared.own_lane = true;
    let reply = bench
        .dispatcher
        .enqueue(declared, vec![bench.launch(own)], &me())
        .expect("enqueue");
    let id = reply.expect("declared, it is queued").attempt;
    // A lane of its own is the attempt's alone: once the attempt ends, its files go.
    let guard = bench
        .site
        .temp
        .path()
        .join(format!(".{}.flock", lane_lock(own)));
    assert!(guard.exists(), "its guard while queued");
    let cancelled = bench.dispatcher.cancel(&id, &me()).expect("cancel");
    assert_eq!(cancelled.ok(), Some(Cancelled::Dropped));
    assert!(
        !guard.exists() && !bench.site.temp.path().join(lane_lock(own)).exists(),
        "retired with its attempt"
    );
}

#[test]
fn a_descriptor_that_is_no_guard_is_named_for_what_it_is() {
    use std::os::unix::fs::OpenOptionsExt;
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let fifo = bench.site.temp.path().join("fifo");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status_gated()
        .expect("mkfifo");
    assert!(made.success());
    let read: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo)
        .expect("open the FIFO")
        .into();
    let dir: OwnedFd = std::fs::File::open(bench.site.temp.path())
        .expect("dir")
        .into();
    let (socket, _other) = std::os::unix::net::UnixStream::pair().expect("pair");
    let null: OwnedFd = std::fs::File::open("/dev/null").expect("/dev/null").into();
    // A block device's node (of no disk: opened as a path only, which is enough to be sent).
    let node = bench.site.temp.path().join("block");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &node,
        rustix::fs::FileType::BlockDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(7, 250),
    )
    .expect("mknod");
    let block = rustix::fs::open(
        &node,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .expect("open the node as a path");
    for (fd, what) in [
        (read, "a pipe (FIFO)"),
        (dir, "a directory"),
        (OwnedFd::from(socket), "a socket"),
        (null, "a character device"),
        (block, "a block device"),
    ] {
        let reply = bench
            .dispatcher
            .enqueue(Bench::entry("l", T0, 0), vec![fd], &me())
            .expect("enqueue")
            .expect_err("refused");
        assert!(
            matches!(&reply, EnqueueRefused::NotAFile { lock, .. } if lock == "lane-l.lock"),
            "{reply:?}"
        );
        let message = reply.to_string();
        assert!(
            message.contains(&format!("the descriptor sent is {what}")),
            "named for what it is: {message}"
        );
        assert!(
            !message.contains("remove it"),
            "no file to remove: {message}"
        );
    }
    // The lane's own guard, opened but locked by nobody: the sender does not hold it.
    let path = bench
        .site
        .temp
        .path()
        .join(format!(".{}.flock", lane_lock("f")));
    drop(bench.launch("f"));
    assert!(bench.lane_free("f"));
    let unlocked: OwnedFd = std::fs::File::open(&path).expect("the guard").into();
    let reply = bench
        .dispatcher
        .enqueue(Bench::entry("f", T0, 0), vec![unlocked], &me())
        .expect("enqueue")
        .expect_err("refused");
    assert!(
        matches!(&reply, EnqueueRefused::LockFree { lock } if lock == "lane-f.lock"),
        "{reply:?}"
    );
    assert!(reply.to_string().contains("nobody holds"), "{reply}");
    assert!(
        bench.lane_free("f"),
        "and the dispatcher did not take it either"
    );
}

#[test]
fn only_the_enqueuer_or_root_claims_and_only_it_root_or_the_owner_cancels() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let id = bench.enqueue("a", T0, 0);
    let stored = Store::open(&bench.site.temp.path().join("queue.db"))
        .expect("store")
        .get(&id)
        .expect("get")
        .expect("row");
    let me = me();
    assert_eq!(
        stored
            .enqueuer
            .as_ref()
            .map(|e| (e.uid, e.gid, e.groups.clone())),
        Some((me.uid, me.gid, me.groups.clone())),
        "the row records who enqueued, from the caller's credentials"
    );
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
    let refused = bench
        .dispatcher
        .claim(&id, &admitted.token, &stranger())
        .expect("claim")
        .expect_err("another user's claim");
    assert!(
        matches!(
            &refused,
            ClaimRefused::Permission { attempt, enqueuer, uid }
                if *attempt == id && *enqueuer == Some(me.uid) && *uid == stranger().uid
        ),
        "{refused:?}"
    );
    assert_eq!(
        bench.dispatcher.list().expect("list")[0].state,
        "starting",
        "it stays"
    );
    let reply = bench.dispatcher.cancel(&id, &stranger()).expect("cancel");
    assert!(
        matches!(
            &reply,
            Err(CancelRefused::Permission { attempt, enqueuer }) if *attempt == id && *enqueuer == Some(me.uid)
        ),
        "{reply:?}"
    );
    assert!(!bench.lane_free("a"), "not cancelled");
    let claimed = bench
        .dispatcher
        .claim(&id, &admitted.token, &me)
        .expect("claim")
        .expect("its enqueuer's claim");
    drop(claimed);
}

#[test]
fn a_failed_start_backs_off_the_line_moves_on_and_the_bounded_tries_park_it() {
    use worklane_dispatch::service::StartFailure;
    let _quiet = gate::quiet();
    let mut bench = Bench::new(
        r#"{"max_agents": 1}"#,
        Settings {
            start_attempts: 3,
            start_backoff_ms: 1_000,
            ..Settings::default()
        },
    );
    let head = bench.enqueue("head", T0, 0);
    let behind = bench.enqueue("behind", T0 + 1, 0);
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("head");
    assert_eq!(admitted.attempt.id, head);
    let failed = bench
        .dispatcher
        .start_failed(&head, "no such driver", false)
        .expect("failed");
    assert_eq!(
        failed,
        StartFailure::Retry {
            failures: 1,
            retry_at_ms: T0 + 1_000
        }
    );
    let next = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("the row behind");
    assert_eq!(
        next.attempt.id, behind,
        "the failing head does not hold the line"
    );
    drop(
        bench
            .dispatcher
            .claim(&behind, &next.token, &me())
            .expect("claim")
            .expect("claimed"),
    );
    bench.clock.advance(999);
    assert!(
        bench.dispatcher.admit_next().expect("admit").is_none(),
        "within its backoff, not tried"
    );
    bench.clock.advance(1);
    let again = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("tried at its end");
    assert_eq!(again.attempt.id, head);
    let failed = bench
        .dispatcher
        .start_failed(&head, "no space", true)
        .expect("host trouble");
    assert_eq!(
        failed,
        StartFailure::Host,
        "the host's trouble is not counted"
    );
    let again = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("at once");
    let failed = bench
        .dispatcher
        .start_failed(&again.attempt.id, "no such driver", false)
        .expect("failed");
    assert_eq!(
        failed,
        StartFailure::Retry {
            failures: 2,
            retry_at_ms: T0 + 1_000 + 2_000
        },
        "the backoff doubles"
    );
    bench.clock.advance(2_000);
    let again = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("tried");
    let failed = bench
        .dispatcher
        .start_failed(&again.attempt.id, "no such driver", false)
        .expect("failed");
    assert_eq!(failed, StartFailure::Parked { failures: 3 });
    let row = bench.dispatcher.view(&head).expect("view").expect("kept");
    assert_eq!(
        (row.state.as_str(), row.failures, row.last_error.as_deref()),
        ("failed", 3, Some("no such driver"))
    );
    bench.clock.advance(3_600_000);
    assert!(
        bench.dispatcher.admit_next().expect("admit").is_none(),
        "a parked row is never admitted"
    );
    assert!(!bench.lane_free("head"), "its lane is still held");
    let reply = bench.dispatcher.retry(&head, &me()).expect("retry");
    assert!(reply.is_ok(), "{reply:?}");
    let row = bench.dispatcher.view(&head).expect("view").expect("kept");
    assert_eq!((row.state.as_str(), row.failures), ("queued", 0));
    let reply = bench.dispatcher.retry(&head, &me()).expect("retry");
    assert!(
        matches!(
            &reply,
            Err(RetryRefused::NotFailed { attempt, state: State::Queued }) if *attempt == head
        ),
        "{reply:?}"
    );
}

#[test]
fn a_driver_that_ends_before_it_claims_is_a_failed_start() {
    use worklane_dispatch::service::{DriverEnded, Exit, StartFailure};
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let id = bench.enqueue("a", T0, 0);
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
    bench
        .dispatcher
        .started(&admitted.attempt.id, 4242)
        .expect("started");
    let other = bench
        .dispatcher
        .exited(Exit {
            pid: 4343,
            status: Some(0),
            signal: None,
        })
        .expect("exited");
    assert_eq!(other, DriverEnded::Unknown, "another process's end");
    let ended = bench
        .dispatcher
        .exited(Exit {
            pid: 4242,
            status: Some(2),
            signal: None,
        })
        .expect("exited");
    let DriverEnded::BeforeClaim {
        attempt,
        failure,
        why,
    } = ended
    else {
        panic!("a failed start: {ended:?}")
    };
    assert_eq!(attempt, id);
    assert!(
        matches!(failure, StartFailure::Retry { failures: 1, .. }),
        "{failure:?}"
    );
    assert!(why.contains("exit status 2"), "{why}");
    let row = bench.dispatcher.view(&id).expect("view").expect("row");
    assert_eq!((row.state.as_str(), row.starts), ("queued", 1));
}

#[test]
fn recovery_parks_rows_with_no_enqueuer_ends_free_runs_and_reports_lost_entries() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 2}"#, Settings::default());
    let running = bench.enqueue("running", T0, 0);
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
    let claimed = bench
        .dispatcher
        .claim(&running, &admitted.token, &me())
        .expect("claim")
        .expect("claimed");
    let legacy = bench.enqueue("legacy", T0 + 1, 0);
    let Bench {
        site, dispatcher, ..
    } = bench;
    let pool = dispatcher.pool().clone();
    drop(dispatcher);
    drop(claimed);
    // The row as an older worklane stored it, without its enqueuer.
    let conn = rusqlite_free_update(&site, &legacy);
    drop(conn);
    // A status entry naming an attempt the database never had.
    std::fs::write(
        site.temp.path().join("queue-ghost.json"),
        br#"{"version":1,"lane":"ghost","attempt":"a-ghost","args":["worklane","claim","--","make"],"start":"2026-01-01T00:00:00.000Z","dispatcher":{"pid":4242}}"#,
    )
    .expect("entry");
    // And one another user wrote (its own file, 0644): a member of the group can put one at
    // any lane's name, so it is believed in nothing.
    let planted = site.temp.path().join("queue-planted.json");
    std::fs::write(
        &planted,
        br#"{"version":1,"lane":"planted","attempt":"a-planted","args":["rm","-rf","/"],"start":"2026-01-01T00:00:00.000Z","dispatcher":{"pid":4242}}"#,
    )
    .expect("entry");
    std::os::unix::fs::chown(&planted, Some(65_533), Some(65_533)).expect("chown");
    let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
    let mut recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
    let recovery = recovered.recovery().clone();
    assert!(!planted.exists(), "another user's entry is removed");
    assert!(
        recovered.ended("a-planted").expect("ended").is_none(),
        "and not believed: no history of an attempt it names"
    );
    assert_eq!(
        recovery.parked,
        std::slice::from_ref(&legacy),
        "{recovery:?}"
    );
    assert_eq!(
        recovered.view(&legacy).expect("view").expect("kept").state,
        "failed",
        "parked, never started as the dispatcher's user"
    );
    assert_eq!(recovery.ended.len(), 1, "{recovery:?}");
    assert_eq!(recovery.ended[0].attempt, running);
    assert_eq!(recovery.ended[0].outcome, "ended");
    assert!(
        recovery.ended[0]
            .detail
            .starts_with("its lane was free when dispatcher ")
            && recovery.ended[0]
                .detail
                .contains("its driver's status is in its log"),
        "says why it ended and where its status is: {:?}",
        recovery.ended[0].detail
    );
    assert_eq!(recovery.lost.len(), 1, "{recovery:?}");
    let lost = &recovery.lost[0];
    assert_eq!(
        (
            lost.attempt.as_str(),
            lost.lane.as_str(),
            lost.outcome.as_str()
        ),
        ("a-ghost", "ghost", "lost")
    );
    assert_eq!(
        lost.args,
        ["worklane", "claim", "--", "make"],
        "with its arguments"
    );
    assert!(
        !site.temp.path().join("queue-ghost.json").exists(),
        "the stale entry is removed"
    );
    // A row with no enqueuer is retried by root or the directory's owner only (this
    // dispatcher is root, so it may start it as anyone), and runs as the one who retried it.
    let refused = recovered.retry(&legacy, &stranger()).expect("retry");
    assert!(
        matches!(&refused, Err(RetryRefused::Permission { attempt }) if *attempt == legacy),
        "{refused:?}"
    );
    let retried = recovered.retry(&legacy, &me()).expect("retry");
    assert!(retried.is_ok(), "root retries it: {retried:?}");
    assert_eq!(
        recovered.view(&legacy).expect("view").expect("kept").state,
        "queued"
    );
    let history: Vec<String> = recovered
        .history()
        .expect("history")
        .into_iter()
        .map(|e| e.attempt)
        .collect();
    assert!(
        history.contains(&running) && history.contains(&"a-ghost".to_owned()),
        "both kept in the history: {history:?}"
    );
}

/// Clears the enqueuer of row `id`, as a row stored before schema 3 has none.
pub(super) fn rusqlite_free_update(site: &Site, id: &str) -> std::process::Output {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nc.execute('UPDATE attempts SET uid=NULL, gid=NULL, groups=NULL WHERE id=?',(sys.argv[2],))\nc.commit()",
        ])
        .arg(site.temp.path().join("queue.db"))
        .arg(id)
        .output_gated()
        .expect("python3 sqlite3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A driver that never claims: at its expiry its whole session is halted through the pidfd
/// kept since its start (SIGTERM, then SIGKILL after the grace for one that ignores it), the
/// expiry counts as a failed start, the row is not started again while its old driver lives,
/// the row behind it is admitted meanwhile, and after the bounded starts it is `failed`.
#[test]
fn a_driver_that_never_claims_is_halted_counted_and_parked_and_the_row_behind_runs() {
    use std::os::unix::process::ExitStatusExt;
    use worklane_dispatch::service::EXPIRED_DRIVER_GRACE_MS;
    let _quiet = gate::quiet();
    let mut bench = Bench::new(
        r#"{"max_agents": 1}"#,
        Settings {
            claim_interval_ms: 1_000,
            start_attempts: 2,
            start_backoff_ms: 100,
            ..Settings::default()
        },
    );
    let a = bench.enqueue("a", T0 - 10, 0);
    let b = bench.enqueue("b", T0, 0);
    // A driver that ignores SIGTERM, leading a session of its own as a real driver does.
    let start = |bench: &mut Bench, id: &str| {
        let admitted = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("admitted");
        assert_eq!(admitted.attempt.id, id);
        let ready = bench.site.temp.path().join(format!("ready-{}", id));
        let child = Command::new("setsid")
            .args([
                "sh",
                "-c",
                "trap '' TERM; : > \"$0\"; while :; do sleep 0.05; done",
            ])
            .arg(&ready)
            .spawn_gated()
            .expect("a driver that never claims");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the driver set its trap"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = std::fs::remove_file(&ready);
        let pid = child.id();
        bench.started_child(id, pid);
        child
    };
    let mut first = start(&mut bench, &a);
    bench.clock.advance(1_001);
    assert_eq!(
        bench.dispatcher.expire().expect("expire"),
        std::slice::from_ref(&a)
    );
    let row = bench.dispatcher.view(&a).expect("view").expect("row");
    assert_eq!((row.state.as_str(), row.failures), ("queued", 1), "{row:?}");
    // While `a` backs off, `b` behind it is admitted (the slot `a` had is free again).
    let admitted = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("the row behind");
    assert_eq!(admitted.attempt.id, b, "the row behind runs meanwhile");
    let cancelled = bench.dispatcher.cancel(&b, &me()).expect("cancel");
    assert_eq!(cancelled.ok(), Some(Cancelled::Dropped));
    let ended = bench
        .dispatcher
        .ended(&b)
        .expect("ended")
        .expect("in the history");
    assert_eq!(
        (ended.outcome.as_str(), ended.detail.as_str()),
        (
            "cancelled",
            format!("cancelled by uid {} while starting", me().uid).as_str()
        ),
        "the history says who cancelled it, and when"
    );
    // Past its backoff, `a` is still not started again: its first driver ignores SIGTERM and
    // lives on through the grace.
    bench.clock.advance(500);
    assert!(
        bench.dispatcher.admit_next().expect("admit").is_none(),
        "never two drivers of one attempt"
    );
    // A moment before the grace ends, it is not killed yet.
    bench.clock.advance(EXPIRED_DRIVER_GRACE_MS - 501);
    bench.dispatcher.halt_expired();
    assert!(
        reaped_within(&mut first, Duration::from_millis(300)).is_none(),
        "its SIGTERM was ignored, and its grace is not over"
    );
    bench.clock.advance(1);
    bench.dispatcher.halt_expired();
    let status = reaped_within(&mut first, Duration::from_secs(5)).expect("the first driver ends");
    assert_eq!(status.signal(), Some(9), "SIGKILL after the grace");
    bench.dispatcher.halt_expired();
    // Its second start expires too: the bounded starts are spent, and it is parked.
    bench.clock.advance(1_000);
    let mut second = start(&mut bench, &a);
    bench.clock.advance(1_001);
    assert_eq!(
        bench.dispatcher.expire().expect("expire"),
        std::slice::from_ref(&a)
    );
    let row = bench.dispatcher.view(&a).expect("view").expect("row");
    assert_eq!((row.state.as_str(), row.failures), ("failed", 2), "{row:?}");
    bench.clock.advance(EXPIRED_DRIVER_GRACE_MS + 1);
    bench.dispatcher.halt_expired();
    let status =
        reaped_within(&mut second, Duration::from_secs(5)).expect("the second driver ends");
    assert_eq!(status.signal(), Some(9), "halted too");
}

/// A dispatcher that died while drivers it started had not claimed: the next one halts the
/// driver it can prove is its row's (a process of the row's enqueuer that started within
/// `PROVEN_WITHIN_MS` of the row's admission), and leaves alone the processes a row names
/// that cannot be proved its driver: one of another user than the enqueuer, one that started
/// an hour before the admission.
#[test]
fn a_restarted_dispatcher_halts_the_old_driver_it_can_prove_and_nothing_else() {
    let _quiet = gate::quiet();
    let mut drivers: Vec<worklane_testkit::Child> = (0..3)
        .map(|_| {
            Command::new("setsid")
                .args(["sleep", "60"])
                .spawn_gated()
                .expect("a driver leading its session")
        })
        .collect();
    let wall = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("ms");
    let mut bench = Bench::at(r#"{"max_agents": 3}"#, Settings::default(), wall);
    let mine = bench.enqueue("mine", wall, 2);
    let fd = bench.launch("theirs");
    let theirs = bench
        .dispatcher
        .enqueue(Bench::entry("theirs", wall, 1), vec![fd], &stranger())
        .expect("enqueue")
        .expect("accepted")
        .attempt;
    let early = bench.enqueue("early", wall, 0);
    for (id, driver) in [&mine, &theirs, &early].into_iter().zip(&drivers) {
        if *id == early {
            // Admitted an hour after its driver started.
            bench.clock.advance(3_600_000);
        }
        let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
        assert_eq!(&admitted.attempt.id, id);
        let pid = driver.id();
        bench.started_child(id, pid);
    }
    let Bench {
        site, dispatcher, ..
    } = bench;
    let pool = dispatcher.pool().clone();
    drop(dispatcher);
    let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
    let recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
    let status = reaped_within(&mut drivers[0], Duration::from_secs(5))
        .expect("its own driver, proved, is halted");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(15),
        "by SIGTERM"
    );
    for (driver, what) in drivers[1..]
        .iter_mut()
        .zip(["another user's", "an hour early"])
    {
        assert!(
            reaped_within(driver, Duration::from_millis(300)).is_none(),
            "a process {what} is left alone"
        );
        driver.kill().expect("kill");
        driver.wait().expect("reap");
    }
    drop(recovered);
}

/// A starting attempt cancelled: its driver is halted with it, even a driver that leads no
/// process group of its own (the signal to its group finds none, so it goes to the driver).
#[test]
fn a_cancelled_starting_attempt_halts_its_driver_even_one_leading_no_group() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let id = bench.enqueue("a", T0, 0);
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
    assert_eq!(admitted.attempt.id, id);
    let mut driver = Command::new("sleep")
        .arg("60")
        .spawn_gated()
        .expect("a driver in the test's group");
    let pid = driver.id();
    bench.started_child(&id, pid);
    let cancelled = bench.dispatcher.cancel(&id, &me()).expect("cancel");
    assert_eq!(cancelled.ok(), Some(Cancelled::Dropped));
    let status = reaped_within(&mut driver, Duration::from_secs(5)).expect("halted");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(15),
        "by SIGTERM"
    );
}

/// A cancel never signals a pid read from the database or a lane's record, which a member of
/// the group can make name any process (a root one that got a dead claimer's pid, here a
/// child of the test): across a restart the dispatcher holds no pidfd of the running attempt's
/// driver, so its cancel is the marker alone, and the process the files name lives on.
#[test]
fn a_cancel_across_a_restart_signals_no_pid_read_from_a_file() {
    use worklane_dispatch::service::cancel_marker;
    let _quiet = gate::quiet();
    let settings = Settings {
        cancel_grace_ms: 2_000,
        ..Settings::default()
    };
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, settings.clone());
    let id = bench.enqueue("a", T0, 0);
    let admitted = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("admitted");
    // The process that will carry the dead claimer's pid.
    let mut victim = Command::new("sleep")
        .arg("60")
        .spawn_gated()
        .expect("a process of root's");
    let claimer = Caller {
        pid: Some(victim.id()),
        ..me()
    };
    let claimed = bench
        .dispatcher
        .claim(&id, &admitted.token, &claimer)
        .expect("claim")
        .expect("claimed");
    // The lane's record names the victim and the attempt, as a member may write it.
    let record = bench.site.temp.path().join(lane_lock("a"));
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).expect("the lane's record")).expect("json");
    doc["pid"] = victim.id().into();
    doc["attempt"] = id.clone().into();
    std::fs::write(&record, doc.to_string()).expect("rewrite the record");
    // The dispatcher restarts: the row is running, its lane held (by the claimed guard).
    let Bench {
        site,
        clock,
        dispatcher,
    } = bench;
    let pool = dispatcher.pool().clone();
    drop(dispatcher);
    let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
    let mut dispatcher = Dispatcher::recover(pool, store, settings).expect("recover");
    let row = dispatcher.view(&id).expect("view").expect("row");
    assert_eq!(
        (row.state.as_str(), row.driver_pid),
        ("running", Some(victim.id())),
        "the stored pid names the victim: {row:?}"
    );
    assert_eq!(
        dispatcher.cancel(&id, &me()).expect("cancel").ok(),
        Some(Cancelled::Halting { grace_ms: 2_000 }),
        "a running attempt's driver is halted"
    );
    assert!(
        site.temp.path().join(cancel_marker(&id)).exists(),
        "the marker, for a driver to obey"
    );
    for step in [1_001, 2_000] {
        clock.advance(step);
        assert!(dispatcher.runs().expect("runs").is_empty(), "still running");
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        victim.try_wait().expect("try_wait").is_none(),
        "neither SIGTERM nor SIGKILL reached a process known only by a pid in a file"
    );
    victim.kill().expect("kill");
    victim.wait().expect("reap");
    drop(claimed);
}

/// The sweep removes a driver's log that no attempt names once it is older than the
/// retention, seven days by default, and keeps a younger one.
#[test]
fn the_sweep_removes_logs_nobody_names_past_the_seven_days_retention() {
    let mut bench = Bench::new("{}", Settings::default());
    let week: u64 = 7 * 24 * 3_600_000;
    let dir = bench.site.temp.path().to_owned();
    for (name, age_ms) in [
        ("queue-a-old.log", week + 1_000),
        ("queue-a-young.log", week - 60_000),
    ] {
        let file = std::fs::File::create(dir.join(name)).expect("log");
        file.set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(T0 - age_ms))
            .expect("mtime");
    }
    assert_eq!(bench.dispatcher.sweep().expect("sweep"), 1, "one log went");
    assert!(!dir.join("queue-a-old.log").exists(), "past the retention");
    assert!(dir.join("queue-a-young.log").exists(), "within it");
    bench.clock.advance(61_000);
    assert_eq!(bench.dispatcher.sweep().expect("sweep"), 1, "its turn came");
    assert!(!dir.join("queue-a-young.log").exists());
}

/// The dispatcher's place is one entry per first row: standing again for the same row keeps
/// it, and a new first row at the very same place (priority and time) is a new entry, which
/// names the new row.
#[test]
fn a_new_first_row_is_a_new_entry_even_at_the_same_place() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let stop = Stop {
        by: "ops".into(),
        at: "2026-11-30T00:00:00.000Z".into(),
        reason: "holding the queue".into(),
    };
    worklane_admission::stop::write(bench.dispatcher.pool().dir(), &stop).expect("STOP");
    let place = |bench: &Bench| -> (i64, u64, String, String) {
        let line = bench.dispatcher.pool().line(Kind::Agent).expect("line");
        assert_eq!(line.len(), 1, "one entry: {line:?}");
        let name = line[0].name();
        let text = std::fs::read_to_string(bench.site.temp.path().join(&name)).expect("entry");
        (line[0].priority, line[0].start_ms, name, text)
    };
    let one = bench.enqueue("one", T0, 0);
    let two = bench.enqueue("two", T0, 0);
    bench.dispatcher.stand().expect("stand");
    let first = place(&bench);
    assert_eq!((first.0, first.1), (0, T0));
    let (head, next) = if first.3.contains(&one) {
        (one, two)
    } else {
        (two, one)
    };
    assert!(
        first.3.contains(&head),
        "the entry names its row: {}",
        first.3
    );
    bench.dispatcher.stand().expect("stand");
    assert_eq!(place(&bench).2, first.2, "standing again keeps the entry");
    assert!(
        bench
            .dispatcher
            .cancel(&head, &me())
            .expect("cancel")
            .is_ok()
    );
    bench.dispatcher.stand().expect("stand");
    let second = place(&bench);
    assert_eq!((second.0, second.1), (0, T0), "the same place");
    assert_ne!(second.2, first.2, "a new entry");
    assert!(
        second.3.contains(&next),
        "for the new first row: {}",
        second.3
    );
    bench.dispatcher.stand().expect("stand");
    assert_eq!(place(&bench).2, second.2, "kept again");
}

/// Root may cancel anyone's attempt, and so may the slot directory's owner (here uid 4000,
/// not root): each alone is enough, the enqueuer being someone else.
#[test]
fn root_and_the_directory_s_owner_each_cancel_another_user_s_attempt() {
    let _quiet = gate::quiet();
    let site = Site::new(r#"{"max_agents": 1}"#);
    std::os::unix::fs::chown(site.temp.path(), Some(4000), Some(4000)).expect("chown");
    let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
    let pool = site.pool.clone().with_clock(Arc::new(ManualClock::at(T0)));
    let dispatcher = Dispatcher::recover(pool, store, Settings::default()).expect("dispatcher");
    let mut bench = Bench {
        site,
        clock: ManualClock::at(T0),
        dispatcher,
    };
    let owner = Caller {
        pid: Some(1),
        uid: 4000,
        gid: 4000,
        groups: Vec::new(),
    };
    let by_owner = {
        let fd = bench.launch("mine");
        bench
            .dispatcher
            .enqueue(Bench::entry("mine", T0, 0), vec![fd], &owner)
            .expect("enqueue")
            .expect("the owner's row")
            .attempt
    };
    let by_root = bench.enqueue("root", T0, 0);
    assert!(
        bench
            .dispatcher
            .cancel(&by_owner, &me())
            .expect("cancel")
            .is_ok(),
        "root cancels the owner's row"
    );
    assert!(
        bench
            .dispatcher
            .cancel(&by_root, &owner)
            .expect("cancel")
            .is_ok(),
        "the owner cancels root's row"
    );
}
