use super::*;

#[test]
fn the_cap_holds_and_the_first_free_index_is_taken() {
    let site = Site::new(r#"{"max_agents": 3}"#);
    let slots: Vec<_> = (0..3).map(|_| site.take(Kind::Agent)).collect();
    let names: Vec<&str> = slots.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["agent-0.lock", "agent-1.lock", "agent-2.lock"]);
    assert_eq!(
        site.blocked(Kind::Agent),
        Blocker::AtCap { held: 3, cap: 3 }
    );
    let mut slots = slots.into_iter();
    let first = slots.next().expect("slot 0");
    first.end(Slot::release).expect("release");
    assert_eq!(
        site.take(Kind::Agent).name(),
        "agent-0.lock",
        "the lowest free index"
    );
}

#[test]
fn lowering_the_cap_admits_nobody_until_fewer_run() {
    let site = Site::new(r#"{"max_agents": 4}"#);
    let mut held: Vec<_> = (0..4).map(|_| Some(site.take(Kind::Agent))).collect();
    site.set_config(r#"{"max_agents": 2}"#);
    for (i, expect_held) in [(0, 3), (1, 2)] {
        held[i]
            .take()
            .expect("held")
            .end(Slot::release)
            .expect("release");
        assert_eq!(
            site.blocked(Kind::Agent),
            Blocker::AtCap {
                held: expect_held,
                cap: 2
            },
            "after freeing slot {i}, {expect_held} still run"
        );
    }
    held[2]
        .take()
        .expect("held")
        .end(Slot::release)
        .expect("release");
    let slot = site.take(Kind::Agent);
    assert_eq!(
        slot.name(),
        "agent-0.lock",
        "admitted once fewer than 2 run"
    );
}

#[test]
fn files_past_the_cap_are_counted_not_their_indexes() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let a = site.take(Kind::Agent);
    let b = site.take(Kind::Agent);
    // A slot numbered past the cap, held by a live process (this one), from before a cap
    // change: it counts.
    let mut live = dead_record();
    live.holder = Recorded::new(
        ProcessIdentity::of_self().expect("me"),
        Place::current().expect("place").clone(),
    );
    site.write_record("agent-7.lock", &live);
    drop(a);
    assert_eq!(
        site.blocked(Kind::Agent),
        Blocker::AtCap { held: 2, cap: 2 }
    );
    drop(b);
    assert_eq!(site.take(Kind::Agent).name(), "agent-0.lock");
}

#[test]
fn a_dead_slot_is_free_and_taken_over() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    site.write_record("agent-0.lock", &dead_record());
    let slot = site.take(Kind::Agent);
    assert_eq!(slot.name(), "agent-0.lock");
    assert_eq!(slot.lease().record().owner.as_deref(), Some("test"));
}

#[test]
fn unknown_and_malformed_slots_count_as_held() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let mut foreign = dead_record();
    if let Field::Present(place) = &mut foreign.holder.place {
        place.host = "elsewhere".into();
    }
    site.write_record("agent-0.lock", &foreign);
    std::fs::write(site.temp.path().join("agent-1.lock"), b"{").expect("malformed");
    assert_eq!(
        site.blocked(Kind::Agent),
        Blocker::AtCap { held: 2, cap: 2 }
    );
    let snapshot = site.snapshot();
    let states: Vec<_> = snapshot
        .slots
        .iter()
        .map(|s| (&s.name[..], &s.state))
        .collect();
    assert!(
        matches!(
            states[0],
            ("agent-0.lock", SlotState::Live(LiveWhy::Unknown(_)))
        ),
        "{states:?}"
    );
    assert!(
        matches!(
            states[1],
            ("agent-1.lock", SlotState::Live(LiveWhy::Malformed { .. }))
        ),
        "{states:?}"
    );
}

#[test]
fn broken_slot_files_count_as_held_and_never_stop_the_pool() {
    let site = Site::new(r#"{"max_agents": 4}"#);
    let dir = site.temp.path();
    std::os::unix::fs::symlink(dir.join("config.json"), dir.join("agent-0.lock"))
        .expect("a symlinked record");
    std::fs::write(dir.join("agent-1.lock"), vec![b' '; 65 * 1024]).expect("a huge record");
    std::fs::create_dir(dir.join("agent-2.lock")).expect("a directory for a record");
    // A dead holder's record, which would be free, behind a guard that is not empty.
    site.write_record("agent-3.lock", &dead_record());
    std::fs::write(dir.join(".agent-3.lock.flock"), b"x").expect("a broken guard");
    assert_eq!(
        site.blocked(Kind::Agent),
        Blocker::AtCap { held: 4, cap: 4 },
        "slots that cannot be judged count as held"
    );
    site.set_config(r#"{"max_agents": 5}"#);
    assert_eq!(
        site.take(Kind::Agent).name(),
        "agent-4.lock",
        "the pool goes on past them"
    );
    let snapshot = site.snapshot();
    let states: Vec<(&str, &SlotState)> = snapshot
        .slots
        .iter()
        .map(|s| (&s.name[..], &s.state))
        .collect();
    for (name, state) in &states[..3] {
        assert!(
            matches!(state, SlotState::Live(LiveWhy::Malformed { .. })),
            "{name} is shown as malformed: {states:?}"
        );
    }
    assert!(
        matches!(states[3], ("agent-3.lock", SlotState::Live(LiveWhy::Other(why))) if why.contains("guard")),
        "a broken guard is shown as such: {states:?}"
    );
}
