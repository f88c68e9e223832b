use super::*;

#[test]
fn a_blocking_take_reports_its_blocker_and_times_out() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let held = site.take(Kind::Agent);
    let pool = site.pool.clone();
    // Quiet for the whole wait: each retry takes and releases `slots.lock`, and the last one
    // before the deadline must find it free to report the cap, not the lock. Held by this
    // thread, not the waiter's: a wait that never ends must not keep the gate shut.
    let quiet = gate::quiet();
    let (got, seen) = spawn_bounded(move || {
        let mut seen = Vec::new();
        let got = pool.take(
            Kind::Agent,
            &Request::new("waiter"),
            Wait {
                timeout: Some(Duration::from_millis(200)),
                priority: 0,
                on_wait: &mut |w| seen.push(w.blocker.clone()),
            },
        );
        (got, seen)
    })
    .join_within(PROMPT, "a take of 200 ms timing out");
    drop(quiet);
    let got = got.expect("take");
    assert!(
        matches!(got, Take::Blocked(Blocker::AtCap { held: 1, cap: 1 })),
        "{got:?}"
    );
    assert!(
        seen.iter()
            .all(|b| *b == Blocker::AtCap { held: 1, cap: 1 })
            && !seen.is_empty(),
        "the wait said what blocks it: {seen:?}"
    );
    drop(held);
}

#[test]
fn a_zero_timeout_still_tries_once() {
    let site = Site::new("{}");
    let pool = site.pool.clone();
    let got = spawn_bounded(move || {
        pool.take(
            Kind::Agent,
            &Request::new("impatient"),
            Wait {
                timeout: Some(Duration::ZERO),
                priority: 0,
                on_wait: &mut |_| {},
            },
        )
    })
    .join_within(PROMPT, "a take of no timeout")
    .expect("take");
    assert!(
        matches!(got, Take::Held(_)),
        "a free slot is taken at once: {got:?}"
    );
}

#[test]
fn a_counter_stuck_on_slots_lock_is_reported_and_named() {
    let site = Site::new("{}");
    let dir = SlotDir::open(site.temp.path()).expect("open");
    let stuck = match worklane_lease::acquire(
        &dir,
        worklane_admission::SLOTS_LOCK,
        &Request::new("stuck counter"),
        &worklane_lease::Options::process(),
    )
    .expect("acquire")
    {
        worklane_lease::Acquired::Held(lease) => lease,
        worklane_lease::Acquired::Refused(r) => panic!("free: {r}"),
    };
    let pool = site.pool.clone();
    let got = spawn_bounded(move || {
        pool.take(
            Kind::Agent,
            &Request::new("waiter"),
            Wait {
                timeout: Some(Duration::from_millis(100)),
                priority: 0,
                on_wait: &mut |_| {},
            },
        )
    })
    .join_within(PROMPT, "a take of 100 ms giving up on a stuck counter")
    .expect("take");
    assert!(
        matches!(&got, Take::Blocked(b @ Blocker::Counting) if b.to_string().contains("slots.lock")),
        "a blocking take gives up on a stuck counter at its timeout: {got:?}"
    );
    let snapshot = site.snapshot();
    let lock = snapshot
        .slots
        .iter()
        .find(|s| s.name == "slots.lock")
        .expect("slots shows the stuck slots.lock");
    assert_eq!(lock.state, SlotState::GuardHeld);
    assert_eq!(
        lock.record.as_ref().and_then(|r| r.owner.as_deref()),
        Some("stuck counter"),
        "and names its holder"
    );
    drop(stuck);
}

#[test]
fn a_blocking_take_gets_the_slot_once_freed() {
    let site = Arc::new(Site::new(r#"{"max_agents": 1}"#));
    let held = site.take(Kind::Agent);
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let site = Arc::clone(&site);
        spawn_bounded(move || {
            let mut told = false;
            let got = site.pool.take(
                Kind::Agent,
                &Request::new("waiter"),
                Wait {
                    timeout: None,
                    priority: 0,
                    on_wait: &mut |_| {
                        if !told {
                            told = true;
                            tx.send(()).expect("tell");
                        }
                    },
                },
            );
            matches!(got, Ok(Take::Held(_)))
        })
    };
    recv_within(&rx, "the waiter's first look");
    drop(held);
    assert!(
        waiter.join("the waiter taking the freed slot"),
        "the waiter got the freed slot"
    );
}

#[test]
fn a_stop_written_while_a_take_waits_ends_the_wait() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let held = site.take(Kind::Agent);
    let pool = site.pool.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = spawn_bounded(move || {
        let mut told = false;
        pool.take(
            Kind::Agent,
            &Request::new("waiter"),
            Wait {
                timeout: None,
                priority: 0,
                on_wait: &mut |_| {
                    if !told {
                        told = true;
                        let _ = tx.send(());
                    }
                },
            },
        )
    });
    recv_within(&rx, "the waiter's first look");
    let stop = Stop {
        by: "ops".into(),
        at: "2026-12-06T00:00:00.000Z".into(),
        reason: "incident".into(),
    };
    worklane_admission::stop::write(site.pool.dir(), &stop).expect("write STOP");
    let got = waiter
        .join_within(PROMPT, "a wait ending at the STOP written meanwhile")
        .expect("take");
    assert!(
        matches!(&got, Take::Blocked(Blocker::Stop(s)) if *s == stop),
        "refused by the STOP: {got:?}"
    );
    let left: Vec<String> = std::fs::read_dir(site.temp.path())
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("line-"))
        .collect();
    assert!(left.is_empty(), "it left the line: {left:?}");
    drop(held);
}
