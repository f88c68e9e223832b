use super::*;

fn stop() -> Stop {
    Stop {
        by: "ops".into(),
        at: "2026-11-30T00:00:00.000Z".into(),
        reason: "incident".into(),
    }
}

#[test]
fn stop_refuses_every_kind_and_resume_admits_again() {
    let site = Site::new("{}");
    worklane_admission::stop::write(site.pool.dir(), &stop()).expect("write STOP");
    assert_eq!(site.pool.stop().expect("read"), Some(stop()));
    for kind in [Kind::Agent, Kind::Test { limit_ms: None }, Kind::FullRun] {
        let blocker = site.blocked(kind);
        assert_eq!(blocker, Blocker::Stop(stop()), "{}", kind.label());
        assert!(blocker.is_operator_refusal());
        assert!(blocker.to_string().contains("incident"), "{blocker}");
    }
    assert!(worklane_admission::stop::remove(site.pool.dir()).expect("remove"));
    drop(site.take(Kind::Agent));
}

#[test]
fn a_blocking_take_refuses_at_once_under_stop_and_drain() {
    let site = Site::new("{}");
    worklane_admission::stop::write(site.pool.dir(), &stop()).expect("write STOP");
    let take = |pool: &Pool| {
        pool.take(
            Kind::Agent,
            &Request::new("waiter"),
            Wait {
                // A watchdog only: the take must return before its first retry.
                timeout: Some(BOUND),
                priority: 0,
                on_wait: &mut |w| panic!("an operator refusal is not waited on: {}", w.blocker),
            },
        )
        .expect("take")
    };
    let watch = watch(site.temp.path());
    let got = take(&site.pool);
    assert!(
        matches!(got, Take::Blocked(Blocker::Stop(_))),
        "STOP: {got:?}"
    );
    let opened = opened(&watch);
    assert!(
        !opened.iter().any(|n| n.contains("line-")),
        "a refusal is no reason to stand in line, not even for a moment: {opened:?}"
    );
    worklane_admission::stop::remove(site.pool.dir()).expect("resume");
    let now = 1_796_012_839_000;
    let clock = ManualClock::at(now);
    let pool = drain_until(&site, &clock, now + 60_000);
    let got = take(&pool);
    assert!(
        matches!(got, Take::Blocked(Blocker::Drain(_))),
        "drain: {got:?}"
    );
}

#[test]
fn an_unreadable_stop_is_still_a_stop() {
    let site = Site::new("{}");
    std::fs::write(site.temp.path().join("STOP"), b"not json").expect("write");
    assert!(matches!(site.blocked(Kind::Agent), Blocker::Stop(_)));
}

#[test]
fn stop_and_the_drain_are_written_over_an_empty_directory_and_never_into_a_full_one() {
    let site = Site::new("{}");
    let stop_at = site.temp.path().join("STOP");
    std::fs::create_dir(&stop_at).expect("mkdir STOP");
    assert!(
        matches!(site.blocked(Kind::Agent), Blocker::Stop(_)),
        "a STOP"
    );
    worklane_admission::stop::write(site.pool.dir(), &stop()).expect("written over it");
    assert_eq!(site.pool.stop().expect("read"), Some(stop()));
    assert!(worklane_admission::stop::remove(site.pool.dir()).expect("remove"));
    std::fs::create_dir(&stop_at).expect("mkdir STOP");
    assert!(
        worklane_admission::stop::remove(site.pool.dir()).expect("an empty directory"),
        "resume removes an empty directory at STOP"
    );
    std::fs::create_dir(&stop_at).expect("mkdir STOP");
    std::fs::write(stop_at.join("kept"), b"x").expect("write");
    assert!(worklane_admission::stop::write(site.pool.dir(), &stop()).is_err());
    assert!(worklane_admission::stop::remove(site.pool.dir()).is_err());
    assert!(stop_at.join("kept").exists(), "nothing in it is removed");
    assert!(
        matches!(site.blocked(Kind::Agent), Blocker::Stop(_)),
        "and it is a STOP in force"
    );
    std::fs::remove_dir_all(&stop_at).expect("clean up");

    let flag = site.temp.path().join("update-drain.json");
    std::fs::create_dir(&flag).expect("mkdir the flag");
    let now = worklane_lease::Clock::now_ms(&worklane_lease::SystemClock);
    let drain = Drain {
        since: rfc3339_ms(now),
        until: rfc3339_ms(now + 600_000),
        to: None,
    };
    site.pool.write_drain(&drain).expect("written over it");
    assert!(matches!(
        site.pool.drain().expect("drain"),
        DrainState::InForce(_)
    ));
    assert!(site.pool.remove_drain().expect("remove"));
    std::fs::create_dir(&flag).expect("mkdir the flag");
    assert!(site.pool.remove_drain().expect("an empty directory"));
}

#[test]
fn a_pool_opened_without_its_config_reads_it_only_to_take() {
    let site = Site::new("{}");
    std::fs::write(site.temp.path().join("config.json"), b"{not json").expect("write");
    let env = Environment::from_process().var("AGENT_SLOTS_DIR", site.temp.path());
    assert!(
        SlotDir::resolve_in(&env).is_err(),
        "resolving with the config refuses it"
    );
    let pool = Pool::open(SlotDir::resolve_located_in(&env).expect("the directory alone"));
    let snapshot = gate::quietly(|| pool.snapshot()).expect("a snapshot all the same");
    let err = snapshot.config.expect_err("the caps cannot be read");
    assert!(err.to_string().contains("config.json"), "{err}");
    worklane_admission::stop::write(pool.dir(), &stop()).expect("STOP");
    assert_eq!(pool.stop().expect("read"), Some(stop()));
    assert!(
        gate::quietly(|| pool.idle()).expect("idle"),
        "the idle probe"
    );
    assert!(worklane_admission::stop::remove(pool.dir()).expect("resume"));
    let taken = gate::quietly(|| pool.try_take(Kind::Agent, &Request::new("test")));
    assert!(
        matches!(taken, Err(worklane_admission::take::Error::Config { .. })),
        "an agent take reads the config: {taken:?}"
    );
    site.set_config(r#"{"max_agents": 1}"#);
    let taken = gate::quietly(|| pool.try_take(Kind::Agent, &Request::new("test")));
    let Ok(Take::Held(slot)) = taken else {
        panic!("fixed, the same pool takes: {taken:?}");
    };
    gate::quietly(|| drop(slot));
}

/// A clock that stops its first reader until the test lets it go.
struct Gate {
    first: std::sync::atomic::AtomicBool,
    reached: std::sync::mpsc::Sender<()>,
    go: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl worklane_lease::Clock for Gate {
    fn now_ms(&self) -> u64 {
        if !self.first.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.reached.send(()).expect("report");
            self.go.lock().expect("lock").recv().expect("wait for go");
        }
        worklane_lease::SystemClock.now_ms()
    }
}

#[test]
fn a_stop_written_while_a_taker_checks_wins_under_slots_lock() {
    let site = Site::new("{}");
    let (reached_tx, reached_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel();
    // The taker's first clock reading is the drain decision of its first STOP and drain
    // check, after it found no STOP: the gate holds it there.
    let pool = site.pool.clone().with_clock(Arc::new(Gate {
        first: false.into(),
        reached: reached_tx,
        go: go_rx.into(),
    }));
    let taker = spawn_bounded(move || {
        match pool
            .try_take(Kind::Agent, &Request::new("late"))
            .expect("take")
        {
            Take::Held(slot) => format!("held {}", slot.name()),
            Take::Blocked(blocker) => format!("blocked: {blocker}"),
        }
    });
    recv_within(&reached_rx, "the taker passing its first STOP check");
    worklane_admission::stop::write(site.pool.dir(), &stop()).expect("write STOP");
    go_tx.send(()).expect("let the taker go");
    let got = taker.join("the taker's take after the gate let it go");
    assert!(
        got.starts_with("blocked: STOP"),
        "the check under slots.lock sees a STOP written a moment ago: {got}"
    );
    assert!(
        !site.temp.path().join("agent-0.lock").exists(),
        "no slot was taken"
    );
}

fn drain_until(site: &Site, clock: &ManualClock, until: u64) -> Pool {
    let pool = site.pool.clone().with_clock(Arc::new(clock.clone()));
    pool.write_drain(&Drain {
        since: rfc3339_ms(clock.now_ms()),
        until: rfc3339_ms(until),
        to: Some("2.0.0".into()),
    })
    .expect("write drain");
    pool
}

use worklane_lease::Clock;

#[test]
fn a_drain_in_force_refuses_and_its_ignore_cases_do_not() {
    let site = Site::new("{}");
    let now = 1_796_012_839_000;
    let clock = ManualClock::at(now);
    let pool = drain_until(&site, &clock, now + 3_600_000);
    assert!(matches!(
        pool.drain().expect("drain"),
        DrainState::InForce(_)
    ));
    let blocked = gate::quietly(|| pool.try_take(Kind::FullRun, &Request::new("t"))).expect("take");
    assert!(
        matches!(blocked, Take::Blocked(Blocker::Drain(_))),
        "{blocked:?}"
    );
    clock.set(now + 3_600_000);
    assert!(
        gate::quietly(|| matches!(
            pool.try_take(Kind::Agent, &Request::new("t"))
                .expect("take"),
            Take::Held(_)
        )),
        "past its until the drain is ignored"
    );
    let pool = drain_until(&site, &clock, clock.now_ms() + 4 * 3_600_000 + 1);
    assert!(
        gate::quietly(|| matches!(
            pool.try_take(Kind::Agent, &Request::new("t"))
                .expect("take"),
            Take::Held(_)
        )),
        "more than 4 h ahead is ignored"
    );
    std::fs::write(site.temp.path().join("update-drain.json"), b"{oops").expect("write");
    assert!(
        gate::quietly(|| matches!(
            pool.try_take(Kind::Agent, &Request::new("t"))
                .expect("take"),
            Take::Held(_)
        )),
        "an unreadable flag is ignored"
    );
    assert!(
        pool.remove_drain().expect("remove"),
        "undrain removes the flag"
    );
}

#[test]
fn a_drain_without_a_version_writes_to_null() {
    let site = Site::new("{}");
    let now = 1_796_012_839_000;
    site.pool
        .write_drain(&Drain {
            since: rfc3339_ms(now),
            until: rfc3339_ms(now + 60_000),
            to: None,
        })
        .expect("write drain");
    let raw = std::fs::read(site.temp.path().join("update-drain.json")).expect("the flag");
    let flag: serde_json::Value = serde_json::from_slice(&raw).expect("json");
    assert_eq!(
        flag.as_object().map(|o| o.len()),
        Some(3),
        "since, until and to, always: {flag}"
    );
    assert!(flag["to"].is_null(), "to is null when not given: {flag}");
}
