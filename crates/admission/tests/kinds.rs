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
