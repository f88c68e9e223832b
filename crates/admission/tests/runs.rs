use super::*;

#[test]
fn a_full_run_waits_in_line_whatever_the_config_says() {
    // Held throughout: the held full run's guard must stay this test's alone.
    let _quiet = gate::quiet();
    let site = Site::new("{}");
    let run = site.take(Kind::FullRun);
    // A config that refuses every agent take: the full run reads none.
    site.set_config("not json");
    let pool = site.pool.clone();
    let (got, told) = spawn_bounded(move || {
        let cancelled = std::sync::atomic::AtomicBool::new(false);
        let mut told = Vec::new();
        let got = pool.take_unless(
            Kind::FullRun,
            &Request::new("waiter"),
            Wait {
                // A watchdog only: called off at its first look, it ends at the next.
                timeout: Some(PROMPT),
                priority: 0,
                on_wait: &mut |w| {
                    told.push(w.blocker.clone());
                    cancelled.store(true, std::sync::atomic::Ordering::SeqCst);
                },
            },
            &cancelled,
        );
        (got, told)
    })
    .join("a full-run waiter called off at its first look");
    assert!(
        matches!(&got, Ok(Take::Blocked(Blocker::FullRunHeld(_)))),
        "it waited for the full run held, not for the config: {got:?}"
    );
    assert!(
        matches!(told.first(), Some(Blocker::FullRunHeld(_))),
        "{told:?}"
    );
    drop(run);
}

#[test]
fn one_full_run_at_a_time_and_the_idle_probe_sees_it() {
    let site = Site::new("{}");
    assert!(site.idle(), "idle with no full run");
    let run = site.take(Kind::FullRun);
    assert!(!site.idle(), "not idle during a full run");
    let blocker = site.blocked(Kind::FullRun);
    assert!(
        matches!(&blocker, Blocker::FullRunHeld(r) if r.why == LiveWhy::GuardHeld),
        "{blocker:?}"
    );
    drop(run);
    assert!(site.idle(), "idle again");
    site.write_record("full-run.lock", &dead_record());
    assert!(site.idle(), "a dead full run is not live");
}

#[test]
fn the_idle_probe_judges_a_record_behind_a_free_guard() {
    let site = Site::new("{}");
    let mut live = dead_record();
    live.holder = Recorded::new(
        ProcessIdentity::of_self().expect("me"),
        Place::current().expect("place").clone(),
    );
    site.write_record("full-run.lock", &live);
    assert!(
        !site.idle(),
        "a full run whose process runs is live, guard or not"
    );
    let mut foreign = dead_record();
    if let Field::Present(place) = &mut foreign.holder.place {
        place.host = "elsewhere".into();
    }
    site.write_record("full-run.lock", &foreign);
    assert!(!site.idle(), "a full run that cannot be judged is live");
    std::fs::write(site.temp.path().join("full-run.lock"), b"{").expect("malformed");
    assert!(!site.idle(), "a malformed full-run record is live");
}

#[test]
fn test_runs_are_capped_apart_from_agents_and_carry_their_limit() {
    let site = Site::new(r#"{"max_agents": 1, "max_test_runs": 2}"#);
    let agent = site.take(Kind::Agent);
    let t0 = site.take(Kind::Test {
        limit_ms: Some(60_000),
    });
    let t1 = site.take(Kind::Test { limit_ms: None });
    assert_eq!((t0.name(), t1.name()), ("test-0.lock", "test-1.lock"));
    assert_eq!(
        t0.lease().record().extra.get("limit_ms"),
        Some(&60_000.into()),
        "limit_ms recorded"
    );
    assert_eq!(
        site.blocked(Kind::Test { limit_ms: None }),
        Blocker::AtCap { held: 2, cap: 2 }
    );
    drop(agent);
}
