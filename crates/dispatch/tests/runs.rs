//! Running attempts: an end recorded from the driver the dispatcher reaped, a lane probed once
//! a second for one it did not start, and a cancelled run's driver halted in steps (the
//! marker, SIGTERM after a second, SIGKILL after the grace), each boundary to the millisecond
//! on the bench's clock.
use super::service::{Bench, T0, me};
use super::*;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Instant;
use worklane_dispatch::service::{Caller, Cancelled, DriverEnded, Exit, Settings, cancel_marker};

/// A driver started by the test for `id`, given to the dispatcher with a pidfd, then claimed
/// in its name: the attempt runs, its driver a child of "the dispatcher" (the test reaps it).
fn start_and_claim(
    bench: &mut Bench,
    id: &str,
    driver: Command,
) -> (worklane_testkit::Child, worklane_dispatch::service::Claimed) {
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
    assert_eq!(admitted.attempt.id, id);
    let mut driver = driver;
    let child = driver.spawn_gated().expect("the driver");
    let pid = child.id();
    bench.started_child(id, pid);
    let claimed = bench
        .dispatcher
        .claim(
            id,
            &admitted.token,
            &Caller {
                pid: Some(pid),
                ..me()
            },
        )
        .expect("claim")
        .expect("claimed");
    (child, claimed)
}

/// A driver's log's name, as PROTOCOL.md gives it: `queue-<attempt>.log`.
fn log_of(attempt: &str) -> String {
    format!("queue-{attempt}.log")
}

/// `child`'s exit, waited 5 s at most.
fn reaped(child: &mut worklane_testkit::Child) -> std::process::ExitStatus {
    reaped_within(child, Duration::from_secs(5)).expect("the driver ends within 5 s")
}

/// The exit the dispatcher's reaper would report for `status`.
fn exit_of(pid: u32, status: std::process::ExitStatus) -> Exit {
    Exit {
        pid,
        status: status.code(),
        signal: status.signal(),
    }
}

/// A run whose driver the dispatcher reaped: its end is recorded once its lane is free (the
/// claimer may outlive the driver), from the driver's exit: its status, or the signal that
/// killed it, in the history with what happened in words.
#[test]
fn a_run_s_end_is_recorded_from_its_driver_s_exit_once_its_lane_is_free() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 2}"#, Settings::default());
    let exited = bench.enqueue("exited", T0, 0);
    let killed = bench.enqueue("killed", T0 + 1, 0);
    let mut exits = Command::new("sh");
    exits
        .args(["-c", "read line; exit 3"])
        .stdin(Stdio::piped());
    let (mut first, first_claimed) = start_and_claim(&mut bench, &exited, exits);
    let mut sleeps = Command::new("sleep");
    sleeps.arg("60");
    let (mut second, second_claimed) = start_and_claim(&mut bench, &killed, sleeps);
    assert!(
        bench.dispatcher.runs().expect("runs").is_empty(),
        "their drivers run"
    );
    drop(first.stdin.take());
    let status = reaped(&mut first);
    assert_eq!(status.code(), Some(3));
    second.kill().expect("kill");
    let killed_status = reaped(&mut second);
    for (id, child, status) in [
        (&exited, first.id(), status),
        (&killed, second.id(), killed_status),
    ] {
        assert_eq!(
            bench
                .dispatcher
                .exited(exit_of(child, status))
                .expect("exited"),
            DriverEnded::Running(id.clone()),
            "a running attempt's driver"
        );
    }
    gate::quietly(|| {
        drop(first_claimed);
        drop(second_claimed);
    });
    let mut ended = bench.dispatcher.runs().expect("runs");
    ended.sort_by(|a, b| a.lane.cmp(&b.lane));
    let seen: Vec<_> = ended
        .iter()
        .map(|e| {
            (
                e.attempt.as_str(),
                e.outcome.as_str(),
                e.status,
                e.signal,
                e.detail.clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                exited.as_str(),
                "exited",
                Some(3),
                None,
                format!(
                    "its driver (pid {}) ended with {}",
                    first.id(),
                    exit_of(first.id(), status)
                )
            ),
            (
                killed.as_str(),
                "killed",
                None,
                Some(9),
                format!(
                    "its driver (pid {}) ended with {}",
                    second.id(),
                    exit_of(second.id(), killed_status)
                )
            ),
        ]
    );
    for e in &ended {
        assert_eq!(
            (e.started_at_ms, e.log.clone()),
            (Some(T0), Some(log_of(&e.attempt))),
            "when it started running (its claim), and its driver's log"
        );
    }
    assert!(
        bench.dispatcher.list().expect("list").is_empty(),
        "their rows are gone"
    );
}

/// A run the dispatcher did not start (its driver no child of it) ends when its lane is
/// found free, looked at once a second at most: not 999 ms after the last look, at 1,000.
#[test]
fn a_run_it_did_not_start_is_looked_at_once_a_second() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let id = bench.enqueue("a", T0, 0);
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
    let claimed = bench
        .dispatcher
        .claim(&id, &admitted.token, &me())
        .expect("claim")
        .expect("claimed");
    assert!(bench.dispatcher.runs().expect("runs").is_empty(), "held");
    gate::quietly(|| drop(claimed));
    bench.clock.advance(999);
    assert!(
        bench.dispatcher.runs().expect("runs").is_empty(),
        "not looked at again within the second"
    );
    bench.clock.advance(1);
    let ended = bench.dispatcher.runs().expect("runs");
    assert_eq!(
        ended
            .iter()
            .map(|e| (e.attempt.as_str(), e.outcome.as_str()))
            .collect::<Vec<_>>(),
        [(id.as_str(), "ended")],
        "a second after the last look, its free lane ends it"
    );
    assert!(
        ended[0].detail.contains("its status is in its log"),
        "{}",
        ended[0].detail
    );
}

/// The lines the driver of [`halted_step_by_step`] wrote on each SIGTERM.
fn terms(file: &std::path::Path) -> usize {
    std::fs::read_to_string(file).map_or(0, |s| s.lines().count())
}

/// A cancelled run's driver is halted step by step: the marker at once (which `worklane
/// claim` obeys), SIGTERM once a second later (not at exactly 1,000 ms), SIGKILL to its group
/// once the grace has passed (not at exactly the grace), each once; then its end is recorded
/// as cancelled, saying by whom.
#[test]
fn a_cancelled_run_s_driver_is_halted_step_by_step() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(
        r#"{"max_agents": 1}"#,
        Settings {
            cancel_grace_ms: 3_000,
            ..Settings::default()
        },
    );
    let id = bench.enqueue("a", T0, 0);
    let said = bench.site.temp.path().join("terms");
    let ready = bench.site.temp.path().join("ready");
    // A driver leading its session that counts each SIGTERM and lives on.
    let mut driver = Command::new("setsid");
    driver
        .args([
            "sh",
            "-c",
            "trap 'echo TERM >> \"$0\"' TERM; : > \"$1\"; while :; do sleep 0.05; done",
        ])
        .arg(&said)
        .arg(&ready);
    let (mut child, claimed) = start_and_claim(&mut bench, &id, driver);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the driver set its trap");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        bench.dispatcher.cancel(&id, &me()).expect("cancel").ok(),
        Some(Cancelled::Halting { grace_ms: 3_000 })
    );
    assert!(
        bench
            .site
            .temp
            .path()
            .join(format!("queue-{id}.cancel"))
            .exists(),
        "the marker, at its documented name"
    );
    assert_eq!(cancel_marker(&id), format!("queue-{id}.cancel"));
    let quiet_for_a_moment = |said: &std::path::Path, want: usize, what: &str| {
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(terms(said), want, "{what}");
    };
    assert!(bench.dispatcher.runs().expect("runs").is_empty());
    bench.clock.advance(1_000);
    assert!(bench.dispatcher.runs().expect("runs").is_empty());
    quiet_for_a_moment(&said, 0, "no SIGTERM within the marker's second");
    bench.clock.advance(1);
    assert!(bench.dispatcher.runs().expect("runs").is_empty());
    let deadline = Instant::now() + Duration::from_secs(5);
    while terms(&said) == 0 {
        assert!(
            Instant::now() < deadline,
            "SIGTERM after the marker's second"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    bench.clock.advance(1_999);
    assert!(bench.dispatcher.runs().expect("runs").is_empty());
    quiet_for_a_moment(&said, 1, "SIGTERM once, and no SIGKILL at the grace");
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "alive at exactly the grace"
    );
    bench.clock.advance(1);
    assert!(bench.dispatcher.runs().expect("runs").is_empty());
    let status = reaped(&mut child);
    assert_eq!(status.signal(), Some(9), "SIGKILL past the grace");
    assert_eq!(terms(&said), 1, "one SIGTERM in all");
    assert_eq!(
        bench
            .dispatcher
            .exited(exit_of(child.id(), status))
            .expect("exited"),
        DriverEnded::Running(id.clone())
    );
    gate::quietly(|| drop(claimed));
    let ended = bench.dispatcher.runs().expect("runs");
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(
        (ended[0].outcome.as_str(), ended[0].signal),
        ("cancelled", Some(9))
    );
    assert!(
        ended[0]
            .detail
            .starts_with(&format!("halted by queue cancel (uid {}); ", me().uid)),
        "{}",
        ended[0].detail
    );
    assert!(
        !bench
            .site
            .temp
            .path()
            .join(format!("queue-{id}.cancel"))
            .exists(),
        "the marker goes with the run"
    );
}

/// Cancels `name`'s queued row (enqueued by `caller`, cancelled by it): an ended attempt in
/// the history, with a log at its name.
fn ended_row(bench: &mut Bench, name: &str, caller: &Caller) -> String {
    let fd = bench.launch(name);
    let entry = Bench::entry(name, T0, 0);
    let id = bench
        .dispatcher
        .enqueue(entry, vec![fd], caller)
        .expect("enqueue")
        .expect("queued")
        .attempt;
    assert_eq!(
        bench.dispatcher.cancel(&id, caller).expect("cancel").ok(),
        Some(Cancelled::Dropped)
    );
    std::fs::write(bench.site.temp.path().join(log_of(&id)), b"log\n").expect("its log");
    id
}

fn user(uid: u32) -> Caller {
    Caller {
        pid: Some(1),
        uid,
        gid: uid,
        groups: Vec::new(),
    }
}

/// `queue prune`: a user forgets its own ended attempts only; root and the slot directory's
/// owner (here uid 65534, not root) forget everyone's; `older_than` keeps what ended less
/// than that long ago (what ended exactly that long ago goes); each forgotten attempt's log
/// goes with it.
#[test]
fn prune_forgets_a_user_s_own_and_for_root_or_the_owner_everyone_s() {
    const OWNER: u32 = 65_534;
    let _quiet = gate::quiet();
    let bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let Bench {
        site,
        clock,
        dispatcher,
    } = bench;
    let pool = dispatcher.pool().clone();
    drop(dispatcher);
    std::os::unix::fs::chown(site.temp.path(), Some(OWNER), None).expect("chown");
    let store =
        worklane_dispatch::store::Store::open(&site.temp.path().join("queue.db")).expect("store");
    let dispatcher =
        worklane_dispatch::service::Dispatcher::recover(pool, store, Settings::default())
            .expect("recover");
    let mut bench = Bench {
        site,
        clock,
        dispatcher,
    };
    let roots = ended_row(&mut bench, "r", &me());
    let users = ended_row(&mut bench, "u", &user(65_533));
    let owners = ended_row(&mut bench, "o", &user(OWNER));
    let log = |id: &str| bench.site.temp.path().join(log_of(id));
    let ids = |pruned: Vec<worklane_dispatch::wire::EndedView>| {
        let mut ids: Vec<String> = pruned.into_iter().map(|e| e.attempt).collect();
        ids.sort();
        ids
    };
    let never = bench
        .dispatcher
        .ended(&users)
        .expect("ended")
        .expect("kept");
    assert_eq!(
        (never.started_at_ms, never.log),
        (None, None),
        "cancelled while queued: it never started, and had no driver's log"
    );
    let pruned = bench.dispatcher.prune(&user(65_533), None).expect("prune");
    assert_eq!(
        ids(pruned),
        std::slice::from_ref(&users),
        "a user prunes its own only"
    );
    assert!(!log(&users).exists(), "its log goes with it");
    assert!(log(&roots).exists() && log(&owners).exists());
    bench.clock.advance(10_000);
    let pruned = bench
        .dispatcher
        .prune(&user(OWNER), Some(10_001))
        .expect("prune");
    assert!(pruned.is_empty(), "ended less than 10,001 ms ago: kept");
    let pruned = bench
        .dispatcher
        .prune(&user(OWNER), Some(10_000))
        .expect("prune");
    let mut both = vec![roots.clone(), owners.clone()];
    both.sort();
    assert_eq!(
        ids(pruned),
        both,
        "the owner prunes everyone's, exactly that old"
    );
    assert!(!log(&roots).exists() && !log(&owners).exists());
    let again = ended_row(&mut bench, "o2", &user(OWNER));
    let pruned = bench.dispatcher.prune(&me(), None).expect("prune");
    assert_eq!(ids(pruned), [again], "root prunes everyone's");
}

/// The sweep keeps the history and the logs within the retention: an attempt that ended
/// longer ago is forgotten with its log (counted); a log nobody names goes once older than
/// the retention, not at exactly it; a log an attempt still names, queued or ended, stays
/// however old.
#[test]
fn the_sweep_forgets_what_is_past_the_retention_and_keeps_what_is_named() {
    let _quiet = gate::quiet();
    let retention = 60_000;
    let mut bench = Bench::new(
        r#"{"max_agents": 1}"#,
        Settings {
            retention_ms: retention,
            ..Settings::default()
        },
    );
    let old_run = ended_row(&mut bench, "gone", &me());
    bench.clock.advance(retention + 1);
    let queued = bench.enqueue("queued", T0, 0);
    let kept_run = ended_row(&mut bench, "kept", &me());
    let now = T0 + retention + 1;
    let dir = bench.site.temp.path().to_owned();
    let aged = |name: &str, age_ms: u64| {
        let file = std::fs::File::create(dir.join(name)).expect("log");
        file.set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(now - age_ms))
            .expect("mtime");
    };
    aged("queue-a-nobody.log", retention + 1);
    aged("queue-a-boundary.log", retention);
    aged(&log_of(&queued), retention * 10);
    aged(&log_of(&kept_run), retention * 10);
    assert_eq!(
        bench.dispatcher.sweep().expect("sweep"),
        2,
        "the old run's log and the log nobody names"
    );
    assert!(
        bench.dispatcher.ended(&old_run).expect("ended").is_none(),
        "the old run is forgotten"
    );
    assert!(!dir.join(log_of(&old_run)).exists());
    assert!(!dir.join("queue-a-nobody.log").exists());
    for (name, what) in [
        (
            "queue-a-boundary.log".to_owned(),
            "exactly the retention old",
        ),
        (log_of(&queued), "a queued row's"),
        (log_of(&kept_run), "an ended attempt's"),
    ] {
        assert!(dir.join(&name).exists(), "{what} log stays");
    }
}
