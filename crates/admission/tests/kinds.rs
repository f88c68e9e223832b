//! `Pool::snapshot` shows every lock and lease file with its kind.
use super::*;

#[test]
fn every_lock_and_lease_file_is_shown_with_its_kind() {
    let site = Site::new("{}");
    let run = site.take(Kind::FullRun);
    for name in [
        "role-build.lease",
        "cache.lease",
        "role-x.lock",
        "other.lock",
        "notes.json",
    ] {
        site.write_record(name, &dead_record());
    }
    let snapshot = site.snapshot();
    let kinds: Vec<(&str, &str)> = snapshot
        .slots
        .iter()
        .map(|s| (&s.name[..], s.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("cache.lease", "lease"),
            ("full-run.lock", "full-run"),
            ("other.lock", "lock"),
            ("role-build.lease", "role"),
            ("role-x.lock", "lock"),
        ],
        "config.json and notes.json are not locks"
    );
    assert_eq!(
        snapshot.held_units("full-run"),
        1,
        "the full run held is one unit"
    );
    drop(run);
}

#[test]
fn a_job_slot_held_is_one_unit_and_a_free_one_none() {
    let site = Site::new(r#"{"max_jobs": 2}"#);
    let job = site.take(Kind::Job);
    assert_eq!(site.snapshot().held_units("job"), 1, "one token held");
    drop(job);
    assert_eq!(site.snapshot().held_units("job"), 0, "released: none");
}

#[test]
fn a_slot_whose_guard_is_broken_is_shown_without_a_record() {
    let site = Site::new("{}");
    site.write_record("agent-0.lock", &dead_record());
    std::fs::write(site.temp.path().join(".agent-0.lock.flock"), b"x").expect("plant");
    let snapshot = site.snapshot();
    let slot = &snapshot.slots[0];
    assert!(
        matches!(&slot.state, SlotState::Live(LiveWhy::Other(why)) if why.contains("guard")),
        "{slot:?}"
    );
    assert_eq!(
        slot.record, None,
        "no record is shown that the state was not judged from (nothing guarded its read)"
    );
}

#[test]
fn each_verdict_has_its_word() {
    use worklane_lease::DeadWhy;
    for (state, word) in [
        (SlotState::GuardHeld, "held"),
        (SlotState::Live(LiveWhy::Alive), "alive"),
        (
            SlotState::Live(LiveWhy::Fresh {
                age_ms: 1,
                ttl_ms: 60_000,
            }),
            "fresh",
        ),
        (
            SlotState::Live(LiveWhy::Unknown(worklane_identity::UnknownReason::Legacy {
                missing: "place",
            })),
            "unknown",
        ),
        (
            SlotState::Live(LiveWhy::Malformed { detail: "x".into() }),
            "malformed",
        ),
        (SlotState::Live(LiveWhy::GuardHeld), "busy"),
        (SlotState::Dead(DeadWhy::GuardReleased), "dead"),
    ] {
        assert_eq!(state.word(), word, "{state:?}");
    }
}

/// The dispatcher's looks without `slots.lock`: whether a weight fits now, and what each
/// owner holds.
#[test]
fn what_fits_and_what_each_owner_holds_are_counted_as_a_take_counts() {
    let site = Site::new(r#"{"max_agents": 3}"#);
    let weighed = |weight: u32, uid: u32| {
        let ask = worklane_admission::Ask::new()
            .with_weight(weight)
            .with_owner(worklane_admission::Owner::of_uid(uid));
        match gate::quietly(|| {
            let now = site.pool.clock().now_ms();
            site.pool
                .try_take_for(Kind::Agent, &Request::new("t"), &ask, 0, now)
        })
        .expect("take")
        {
            Take::Held(slot) => QuietDrop::new(slot),
            Take::Blocked(b) => panic!("weight {weight} fits: {b}"),
        }
    };
    let fits = |weight| gate::quietly(|| site.pool.may_fit(Kind::Agent, weight)).expect("may_fit");
    assert!(fits(3), "nothing held: the whole cap fits");
    let two = weighed(2, 1001);
    // A dead holder's record naming an owner holds nothing.
    let mut dead = dead_record();
    dead.extra.insert("weight".into(), 1.into());
    dead.extra.insert("shareOwner".into(), "uid:2000".into());
    site.write_record("agent-2.lock", &dead);
    assert!(fits(1), "2 held + 1 of 3");
    assert!(!fits(2), "2 held + 2 is over 3");
    assert!(fits(0), "a weight of 0 counts as 1");
    assert!(!fits(9), "a weight above the cap counts as the cap");
    assert!(
        gate::quietly(|| site.pool.may_fit(Kind::FullRun, 1)).expect("may_fit"),
        "the full run has no units"
    );
    let by_owner = gate::quietly(|| site.pool.held_by_owner("agent", 3)).expect("held_by_owner");
    assert_eq!(
        by_owner,
        std::collections::HashMap::from([("uid:1001".to_owned(), 2)]),
        "each owner with live units, and only those"
    );
    drop(two);
}
