//! Each event the pool journals, from the real operation: exactly one
//! line of its kind, with its documented fields.
use super::*;
use worklane_journal::{Entry, Event};

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

fn count(dir: &SlotDir, kind: &str) -> usize {
    all(dir).iter().filter(|e| e.event.kind() == kind).count()
}

fn stop() -> Stop {
    Stop {
        by: "alice@build1".into(),
        at: rfc3339_ms(1_800_000_000_000),
        reason: "maintenance".into(),
    }
}

#[test]
fn a_slot_taken_and_released_is_said_once_each() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let dir = site.pool.dir().clone();
    let slot = site.take(Kind::Agent);
    let Event::SlotTaken {
        slot: name,
        slot_kind,
        owner,
        epoch,
        waited_ms,
    } = one(&dir, "slot-taken")
    else {
        panic!("slot-taken");
    };
    assert_eq!(
        (
            name.as_str(),
            slot_kind.as_str(),
            owner.as_str(),
            epoch,
            waited_ms
        ),
        ("agent-0.lock", "agent", "test", 1, 0)
    );
    assert_eq!(count(&dir, "slot-released"), 0, "not yet");
    slot.end(Slot::release).expect("release");
    let Event::SlotReleased {
        slot: name,
        slot_kind,
        owner,
        ..
    } = one(&dir, "slot-released")
    else {
        panic!("slot-released");
    };
    assert_eq!(
        (name.as_str(), slot_kind.as_str(), owner.as_str()),
        ("agent-0.lock", "agent", "test")
    );
    // Dropped rather than released: said all the same.
    let test = site.take(Kind::Test { limit_ms: None });
    gate::quietly(|| drop(test.end(|s| s)));
    assert_eq!(count(&dir, "slot-released"), 2, "a dropped slot too");
}

#[test]
fn the_usage_noted_on_a_slot_is_said_in_its_release() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let dir = site.pool.dir().clone();
    let mut slot = site.take(Kind::Agent);
    slot.note_usage(Some(2_500_000));
    slot.end(Slot::release).expect("release");
    let Event::SlotReleased { cpu_usec, .. } = one(&dir, "slot-released") else {
        panic!("slot-released");
    };
    assert_eq!(cpu_usec, Some(2_500_000), "the CPU its run used, as noted");
}

#[test]
fn refusals_at_the_cap_and_by_stop_and_drain_and_the_operator_s_changes() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let dir = site.pool.dir().clone();
    let _held = site.take(Kind::Agent);
    assert_eq!(
        site.blocked(Kind::Agent),
        Blocker::AtCap { held: 1, cap: 1 }
    );
    let Event::SlotRefused {
        slot_kind,
        owner,
        blocker,
        why,
        waited_ms,
    } = one(&dir, "slot-refused")
    else {
        panic!("slot-refused");
    };
    assert_eq!(
        (
            slot_kind.as_str(),
            owner.as_str(),
            blocker.as_str(),
            waited_ms
        ),
        ("agent", "test", "at-cap", 0)
    );
    assert_eq!(why, "at cap: 1 of 1 held");

    worklane_admission::stop::write(&dir, &stop()).expect("STOP");
    assert_eq!(
        one(&dir, "stop"),
        Event::Stop {
            by: "alice@build1".into(),
            reason: "maintenance".into()
        }
    );
    assert!(matches!(site.blocked(Kind::FullRun), Blocker::Stop(_)));
    let stop_refusals: Vec<Entry> = all(&dir)
        .into_iter()
        .filter(|e| matches!(&e.event, Event::SlotRefused { blocker, .. } if blocker == "stop"))
        .collect();
    assert_eq!(stop_refusals.len(), 1, "{stop_refusals:?}");
    assert!(worklane_admission::stop::remove(&dir).expect("resume"));
    assert_eq!(
        one(&dir, "resume"),
        Event::Resume {
            by: "alice@build1".into(),
            reason: "maintenance".into()
        },
        "the STOP lifted"
    );
    assert!(!worklane_admission::stop::remove(&dir).expect("none"));
    assert_eq!(count(&dir, "resume"), 1, "nothing lifted, nothing said");

    let until = rfc3339_ms(site.pool.clock().now_ms() + 600_000);
    site.pool
        .write_drain(&Drain {
            since: rfc3339_ms(site.pool.clock().now_ms()),
            until: until.clone(),
            to: Some("1.2.3".into()),
        })
        .expect("drain");
    assert_eq!(
        one(&dir, "drain"),
        Event::Drain {
            until,
            to: Some("1.2.3".into())
        }
    );
    assert!(matches!(site.blocked(Kind::FullRun), Blocker::Drain(_)));
    assert!(site.pool.remove_drain().expect("undrain"));
    assert_eq!(one(&dir, "undrain"), Event::Undrain);
    assert!(!site.pool.remove_drain().expect("none"));
    assert_eq!(count(&dir, "undrain"), 1);
}

/// A waiter says its place once (it does not move), and what it waited when it takes the
/// slot; a waiter that times out says its refusal.
#[test]
fn a_waiter_says_its_place_and_its_wait() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let dir = site.pool.dir().clone();
    let held = site.take(Kind::Agent);
    let pool = site.pool.clone();
    let waiter = spawn_bounded(move || {
        let taken = pool
            .take(
                Kind::Agent,
                &Request::new("waiter"),
                Wait {
                    timeout: None,
                    priority: 0,
                    on_wait: &mut |_| {},
                },
            )
            .expect("take");
        match taken {
            Take::Held(slot) => gate::quietly(|| drop(slot)),
            Take::Blocked(b) => panic!("it waits for ever: {b}"),
        }
    });
    let give_up = std::time::Instant::now() + BOUND;
    while count(&dir, "slot-waiting") == 0 {
        assert!(
            std::time::Instant::now() < give_up,
            "the waiter says its place"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The waiter started before it said its place, and takes only after the release: held 2
    // ms more, its wait is at least that, whatever the scheduling (released at once, it could
    // round down to 0 ms: seen once in some fifty runs of the suite here).
    std::thread::sleep(Duration::from_millis(2));
    held.end(Slot::release).expect("release");
    waiter.join("the waiter taking the slot released");
    let Event::SlotWaiting {
        slot_kind,
        owner,
        position,
        in_line,
        why,
    } = one(&dir, "slot-waiting")
    else {
        panic!("slot-waiting");
    };
    assert_eq!(
        (slot_kind.as_str(), owner.as_str(), position, in_line),
        ("agent", "waiter", 1, 1)
    );
    assert!(why.starts_with("at cap"), "{why}");
    let waited: Vec<u64> = all(&dir)
        .iter()
        .filter_map(|e| match &e.event {
            Event::SlotTaken {
                owner, waited_ms, ..
            } if owner == "waiter" => Some(*waited_ms),
            _ => None,
        })
        .collect();
    assert_eq!(waited.len(), 1, "taken once: {waited:?}");
    assert!(waited[0] > 0, "after a wait: {waited:?}");

    // Timed out: its refusal, with the time waited.
    let _again = site.take(Kind::Agent);
    let pool = site.pool.clone();
    // Quiet while it waits (held by this thread: a wait that never ends must not keep the
    // gate shut).
    let quiet = gate::quiet();
    let taken = spawn_bounded(move || {
        pool.take(
            Kind::Agent,
            &Request::new("impatient"),
            Wait {
                timeout: Some(Duration::from_millis(100)),
                priority: 0,
                on_wait: &mut |_| {},
            },
        )
    })
    .join_within(PROMPT, "a take of 100 ms timing out")
    .expect("take");
    drop(quiet);
    assert!(matches!(taken, Take::Blocked(Blocker::AtCap { .. })));
    let refused: Vec<u64> = all(&dir)
        .iter()
        .filter_map(|e| match &e.event {
            Event::SlotRefused {
                owner, waited_ms, ..
            } if owner == "impatient" => Some(*waited_ms),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0] >= 100, "after its timeout: {refused:?}");
}

#[test]
fn a_takeover_names_the_record_taken_over_and_the_proof() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let dir = site.pool.dir().clone();
    let dead = dead_record();
    let dead_pid = dead.pid().expect("a pid");
    site.write_record("agent-0.lock", &dead);
    let raw = std::fs::read(site.temp.path().join("agent-0.lock")).expect("read");
    let slot = site.take(Kind::Agent);
    assert_eq!(slot.name(), "agent-0.lock", "taken over");
    let Event::Takeover {
        resource,
        owner,
        stale_pid,
        stale_owner,
        claim,
        proof,
        ..
    } = one(&dir, "takeover")
    else {
        panic!("takeover");
    };
    assert_eq!(resource, "agent-0.lock");
    assert_eq!(owner, "test");
    assert_eq!(stale_pid, Some(dead_pid));
    assert_eq!(stale_owner.as_deref(), Some("dead"));
    assert_eq!(claim, worklane_lease::claim_name("agent-0.lock", &raw));
    assert!(!proof.is_empty(), "the proof of death: {proof}");
    gate::quietly(|| drop(slot));
}

/// A holder killed with nobody after it is said by the first look at the pool (`slots`,
/// `metrics`, `top`, `why`): one `holder-gone`, its record removed, the slot free to the next
/// look; a live holder and a lease of another kind are left alone.
#[test]
fn a_dead_holder_nobody_takes_over_is_said_once_by_the_first_look() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let dir = site.pool.dir().clone();
    let dead = dead_record();
    site.write_record("agent-1.lock", &dead);
    site.write_record("other.lock", &dead);
    let live = site.take(Kind::Agent);
    assert_eq!(live.name(), "agent-0.lock");
    site.pool.snapshot().expect("a plain snapshot");
    assert!(
        site.temp.path().join("agent-1.lock").exists(),
        "a plain snapshot changes nothing"
    );
    let first = site.pool.snapshot_retiring().expect("snapshot");
    let state = |snapshot: &worklane_admission::Snapshot, name: &str| {
        snapshot
            .slots
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.state.is_held())
    };
    assert_eq!(
        state(&first, "agent-1.lock"),
        Some(false),
        "shown dead once"
    );
    assert_eq!(state(&first, "agent-0.lock"), Some(true));
    let Event::HolderGone {
        slot,
        slot_kind,
        stale_pid,
        stale_owner,
        proof,
        ..
    } = one(&dir, "holder-gone")
    else {
        panic!("holder-gone");
    };
    assert_eq!(
        (slot.as_str(), slot_kind.as_str()),
        ("agent-1.lock", "agent")
    );
    assert_eq!(stale_pid, dead.pid());
    assert_eq!(stale_owner.as_deref(), Some("dead"));
    assert!(!proof.is_empty());
    assert!(
        !site.temp.path().join("agent-1.lock").exists(),
        "its record is removed"
    );
    assert!(
        site.temp.path().join("other.lock").exists(),
        "a lock outside the pool's slots is not the view's to retire"
    );
    let second = site.pool.snapshot_retiring().expect("snapshot");
    assert_eq!(state(&second, "agent-1.lock"), None, "free: not listed");
    assert_eq!(state(&second, "agent-0.lock"), Some(true));
    let gone = all(&dir)
        .iter()
        .filter(|e| e.event.kind() == "holder-gone")
        .count();
    assert_eq!(gone, 1, "said once");
    gate::quietly(|| drop(live));
}

#[test]
fn a_stray_guard_is_said_once_and_a_dead_writer_s_temp_file_when_swept() {
    let site = Site::new(r#"{"max_agents": 3}"#);
    let dir = site.pool.dir().clone();
    std::fs::create_dir(site.temp.path().join(".agent-0.lock.flock")).expect("stray");
    let temp = site.temp.path().join(".agent-7.lock.tmp-0123456789abcdef");
    std::fs::write(&temp, b"{}").expect("a dead writer's temp file");
    age(&temp, 120);
    let first = site.take(Kind::Agent);
    let second = site.take(Kind::Agent);
    assert_eq!(
        (first.name(), second.name()),
        ("agent-1.lock", "agent-2.lock")
    );
    let broken: Vec<Event> = all(&dir)
        .into_iter()
        .filter(|e| e.event.kind() == "broken-file")
        .map(|e| e.event)
        .collect();
    assert_eq!(broken.len(), 2, "{broken:?}");
    let Event::BrokenFile {
        name,
        what,
        fix,
        fixed,
    } = &broken[0]
    else {
        panic!("broken-file");
    };
    assert_eq!(name, ".agent-0.lock.flock", "the stray guard, once");
    assert!(
        what.contains("agent-0.lock") && fix.starts_with("rm -r -- "),
        "{what}; {fix}"
    );
    assert!(!fixed);
    let Event::BrokenFile { name, fixed, .. } = &broken[1] else {
        panic!("broken-file");
    };
    assert_eq!(name, ".agent-7.lock.tmp-0123456789abcdef");
    assert!(fixed, "removed by the sweep");
    assert!(!temp.exists());
}

/// A journal every write to fails (a full disk) or that cannot be opened (a directory at
/// its name) changes no take: the same slots, the same refusals; its events are counted.
#[test]
fn a_full_or_unwritable_journal_never_changes_a_take() {
    for broken in ["full", "directory"] {
        let site = Site::new(r#"{"max_agents": 1}"#);
        let journal = site.pool.journal().clone();
        match broken {
            "full" => journal.sink(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .expect("/dev/full")
                    .into(),
            ),
            _ => std::fs::create_dir(site.temp.path().join(worklane_journal::CURRENT))
                .expect("mkdir"),
        }
        let slot = site.take(Kind::Agent);
        assert_eq!(slot.name(), "agent-0.lock", "{broken}: taken");
        assert_eq!(
            site.blocked(Kind::Agent),
            Blocker::AtCap { held: 1, cap: 1 },
            "{broken}: refused as ever"
        );
        slot.end(Slot::release).expect("released");
        let again = site.take(Kind::Agent);
        assert_eq!(again.name(), "agent-0.lock");
        assert_eq!(
            journal.dropped(),
            4,
            "{broken}: taken, refused, released, taken"
        );
        drop(again);
    }
}

/// A waiter says its place when it joins and when it reaches the head, not at every step:
/// the third of three moves 3, 2, 1 and says so twice.
#[test]
fn a_waiter_says_its_place_on_joining_and_at_the_head_only() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let dir = site.pool.dir().clone();
    let held = site.take(Kind::Agent);
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let pool = site.pool.clone();
            let waiter = spawn_bounded(move || {
                let taken = pool
                    .take(
                        Kind::Agent,
                        &Request::new(format!("w{i}")),
                        Wait {
                            timeout: None,
                            priority: 0,
                            on_wait: &mut |_| {},
                        },
                    )
                    .expect("take");
                match taken {
                    // Held a moment, so the next moves up while it holds.
                    Take::Held(slot) => gate::quietly(|| {
                        // Longer than a waiter goes between looks (250 ms): the next
                        // sees itself at the head while this one holds.
                        std::thread::sleep(Duration::from_millis(400));
                        drop(slot);
                    }),
                    Take::Blocked(b) => panic!("it waits for ever: {b}"),
                }
            });
            // In line before the next joins: their order is fixed.
            let give_up = std::time::Instant::now() + BOUND;
            while count(&dir, "slot-waiting") <= i {
                assert!(std::time::Instant::now() < give_up, "w{i} says its place");
                std::thread::sleep(Duration::from_millis(5));
            }
            waiter
        })
        .collect();
    held.end(Slot::release).expect("release");
    for (i, waiter) in waiters.into_iter().enumerate() {
        waiter.join(&format!("w{i} taking its turn"));
    }
    let places = |who: &str| -> Vec<u32> {
        all(&dir)
            .iter()
            .filter_map(|e| match &e.event {
                Event::SlotWaiting {
                    owner, position, ..
                } if owner == who => Some(*position),
                _ => None,
            })
            .collect()
    };
    assert_eq!(places("w0"), [1], "joined at the head");
    assert_eq!(places("w1"), [2, 1], "joined second, then at the head");
    assert_eq!(places("w2"), [3, 1], "not at 2: only joining and the head");
}
