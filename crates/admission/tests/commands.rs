//! `Pool::recorded_commands`: what STOP's enforcement reads from the records.
use super::*;
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use worklane_admission::RecordedCommand;

fn naming(command: serde_json::Value) -> Record {
    let mut record = Record {
        owner: Some("supervisor".into()),
        ..Record::default()
    };
    record.extra.insert("commandProcess".into(), command);
    record
}

#[test]
fn records_naming_a_command_are_listed_with_their_writer_and_guard() {
    let site = Site::new("{}");
    let dir = site.temp.path();
    let mut slot = site.take(Kind::Agent);
    let mut fields = serde_json::Map::new();
    fields.insert(
        "commandProcess".into(),
        json!({"pid": 4242, "start": 99, "group": true}),
    );
    slot.annotate(fields).expect("annotate");
    site.write_record(
        "role-build.lease",
        &naming(json!({"pid": 77, "group": false})),
    );
    site.write_record("agent-1.lock", &naming(json!({"pid": 5, "group": "yes"})));
    std::fs::hard_link(dir.join("agent-1.lock"), dir.join("agent-1.lock.bak"))
        .expect("a second name");
    site.write_record("test-0.lock", &naming(json!({"pid": 0, "group": true})));
    site.write_record("test-1.lock", &naming(json!({"pid": 4_294_967_296_u64})));
    site.write_record("test-2.lock", &naming(json!({"group": true})));
    site.write_record("agent-2.lock", &dead_record());
    site.write_record("notes.json", &naming(json!({"pid": 6})));
    std::fs::write(dir.join("agent-3.lock"), b"{").expect("a malformed record");
    set_mode(&dir.join("role-build.lease"), 0o666);

    let found = site.pool.recorded_commands().expect("recorded commands");
    let by_name: std::collections::BTreeMap<&str, &RecordedCommand> =
        found.iter().map(|c| (&c.resource[..], c)).collect();
    assert_eq!(
        by_name.keys().copied().collect::<Vec<_>>(),
        ["agent-0.lock", "agent-1.lock", "role-build.lease"],
        "only lock and lease records that name a command with a real pid: {found:#?}"
    );

    let me = std::fs::metadata(dir.join("agent-0.lock"))
        .expect("stat")
        .uid();
    let guard = std::fs::metadata(dir.join(".agent-0.lock.flock")).expect("the guard");
    let ours = by_name["agent-0.lock"];
    assert_eq!(
        (ours.pid, ours.start, ours.group),
        (4242, Some(99), true),
        "the annotated command"
    );
    assert_eq!(
        ours.record.owner.as_deref(),
        Some("test"),
        "with the supervisor's record"
    );
    assert_eq!(
        ours.guard,
        Some(worklane_guard::FileId {
            dev: guard.dev(),
            ino: guard.ino(),
        }),
        "the guard whose holders are the run's processes"
    );
    assert_eq!(
        (ours.writer.uid, ours.writer.mode, ours.writer.links),
        (me, RECORD_MODE, 1),
        "written by its owner alone"
    );
    assert!(ours.writer.only_by_owner(), "{:?}", ours.writer);

    let linked = by_name["agent-1.lock"];
    assert_eq!(
        (linked.pid, linked.start, linked.group),
        (5, None, false),
        "a group that is not `true` is no group"
    );
    assert_eq!(linked.writer.links, 2, "a record with two names");
    assert_eq!(linked.guard, None, "no guard file: never taken");

    let lease = by_name["role-build.lease"];
    assert_eq!(
        (lease.pid, lease.group),
        (77, false),
        "a role lease's command"
    );
    assert_eq!(lease.writer.mode, 0o666, "writable by anyone");
    assert!(!lease.writer.only_by_owner(), "{:?}", lease.writer);
    assert_eq!(
        lease.guard, None,
        "a TTL lease's guard is held by nobody's run"
    );
    drop(slot);
}
