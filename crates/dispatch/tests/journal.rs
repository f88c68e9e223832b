//! The events the dispatcher journals, from the real operation: exactly one line of its kind,
//! with its documented fields.
use super::service::{Bench, T0, me};
use super::*;
use worklane_dispatch::service::{Dispatcher, Settings, lane_lock};
use worklane_dispatch::store::Store;
use worklane_journal::{Entry, Event};
use worklane_lease::{Acquired, Options};

fn all(dir: &SlotDir) -> Vec<Entry> {
    let batch = worklane_journal::read(dir).expect("read the journal");
    assert_eq!(batch.skipped, 0, "nothing torn");
    batch.entries
}

/// The one event of `kind` in the journal of `dir`.
fn one(dir: &SlotDir, kind: &str) -> Event {
    let found: Vec<Entry> = all(dir)
        .into_iter()
        .filter(|e| e.event.kind() == kind)
        .collect();
    assert_eq!(found.len(), 1, "one {kind}: {found:?}");
    let entry = found.into_iter().next().expect("one");
    assert_eq!(entry.pid, std::process::id(), "written by this process");
    entry.event
}

#[test]
fn the_dispatcher_says_each_enqueue_admission_claim_expiry_and_cancel() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let dir = bench.dispatcher.pool().dir().clone();
    let a = bench.enqueue("a", T0 - 5_000, 3);
    let Event::DispatchEnqueued {
        attempt,
        lane,
        priority,
        uid,
    } = one(&dir, "dispatch-enqueued")
    else {
        panic!("dispatch-enqueued");
    };
    assert_eq!(
        (attempt.as_str(), lane.as_str(), priority, uid),
        (a.as_str(), "a", 3, me().uid)
    );
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
    assert_eq!(
        one(&dir, "dispatch-admitted"),
        Event::DispatchAdmitted {
            attempt: a.clone(),
            lane: "a".into(),
            slot: "agent-0.lock".into(),
            waited_ms: 5_000,
        },
        "waited from its original start"
    );
    // Unclaimed past the interval: queued again.
    bench.clock.advance(60_001);
    assert_eq!(
        bench.dispatcher.expire().expect("expire"),
        std::slice::from_ref(&a)
    );
    assert_eq!(
        one(&dir, "dispatch-expired"),
        Event::DispatchExpired {
            attempt: a.clone(),
            lane: "a".into(),
            starting_ms: 60_001,
        }
    );
    let _ = admitted;
    // An expiry is a failed start: queued again after its backoff.
    bench.clock.advance(1_000);
    let admitted = bench
        .dispatcher
        .admit_next()
        .expect("admit")
        .expect("again");
    bench.clock.advance(1_500);
    let claimed = bench
        .dispatcher
        .claim(&a, &admitted.token, &me())
        .expect("claim")
        .expect("claimed");
    assert_eq!(
        one(&dir, "dispatch-claimed"),
        Event::DispatchClaimed {
            attempt: a.clone(),
            lane: "a".into(),
            slot: "agent-0.lock".into(),
            admitted_ms: 1_500,
        }
    );
    drop(claimed);
    let b = bench.enqueue("b", T0, 0);
    assert!(bench.dispatcher.cancel(&b, &me()).expect("cancel").is_ok());
    assert_eq!(
        one(&dir, "dispatch-cancelled"),
        Event::DispatchCancelled {
            attempt: b,
            lane: "b".into(),
            state: "queued".into(),
            uid: me().uid,
        }
    );
}

/// Recovery journals each row it found, kept or dropped, with why: a queued row kept, a
/// starting one queued again, a failed one kept as failed, one that names no enqueuer parked,
/// one whose lane another process holds dropped.
#[test]
fn recovery_says_which_rows_it_kept_and_which_it_dropped() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(
        r#"{"max_agents": 2}"#,
        Settings {
            start_attempts: 1,
            ..Settings::default()
        },
    );
    let failed = bench.enqueue("failed", T0 - 2, 0);
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
    assert_eq!(admitted.attempt.id, failed);
    bench
        .dispatcher
        .start_failed(&failed, "no such driver", false)
        .expect("parked");
    let starting = bench.enqueue("starting", T0 - 1, 0);
    let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
    assert_eq!(admitted.attempt.id, starting);
    let kept = bench.enqueue("kept", T0, 0);
    let dropped = bench.enqueue("taken", T0 + 1, 0);
    let legacy = bench.enqueue("legacy", T0 + 2, 0);
    let Bench {
        site, dispatcher, ..
    } = bench;
    let pool = dispatcher.pool().clone();
    drop(dispatcher);
    drop(super::service::rusqlite_free_update(&site, &legacy));
    let other = match worklane_lease::acquire(
        pool.dir(),
        &lane_lock("taken"),
        &Request::new("someone"),
        &Options::process(),
    )
    .expect("acquire")
    {
        Acquired::Held(lease) => lease,
        Acquired::Refused(r) => panic!("free after the dispatcher died: {r}"),
    };
    let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
    let recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
    let dir = recovered.pool().dir().clone();
    let mut found: Vec<(String, bool, String)> = all(&dir)
        .into_iter()
        .filter_map(|e| match e.event {
            Event::DispatchRecovered {
                attempt,
                lane,
                kept,
                why,
            } => Some((format!("{attempt} {lane}"), kept, why)),
            _ => None,
        })
        .collect();
    found.sort();
    let mut expected = vec![
        (
            format!("{kept} kept"),
            true,
            "its lane was free: kept queued",
        ),
        (
            format!("{starting} starting"),
            true,
            "its lane was free: it was starting, and is queued again",
        ),
        (
            format!("{failed} failed"),
            true,
            "its lane was free: kept as failed",
        ),
        (
            format!("{legacy} legacy"),
            true,
            "its lane was free, but it names no enqueuer: parked as failed",
        ),
        (
            format!("{dropped} taken"),
            false,
            "another process holds its lane: the row is dropped, the holder left alone",
        ),
    ];
    expected.sort();
    assert_eq!(
        found
            .iter()
            .map(|(what, kept, why)| (what.clone(), *kept, why.as_str()))
            .collect::<Vec<_>>(),
        expected
    );
    drop(other);
}
