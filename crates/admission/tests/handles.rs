//! What a held slot does: its record takes annotations, its release removes it.
use super::*;

#[test]
fn a_handed_over_slot_is_adopted_as_its_kind_and_nothing_else_is_a_slot() {
    let site = Site::new(r#"{"max_agents": 2, "max_test_runs": 2}"#);
    for kind in [Kind::Agent, Kind::Test { limit_ms: None }, Kind::FullRun] {
        let Take::Held(slot) = site.try_take(kind) else {
            panic!("{} is free", kind.label());
        };
        let name = slot.name().to_owned();
        let guard = slot.hand_over().expect("a held guard");
        // What the receiver gets: another descriptor of the same open file description.
        let fd = rustix::io::fcntl_dupfd_cloexec(&guard, 3).expect("dup");
        gate::quietly(|| drop(guard));
        let adopted = site
            .pool
            .adopt(&name, fd, &Request::new("driver"))
            .expect("adopt");
        assert_eq!(
            adopted.kind().label(),
            kind.label(),
            "{name} keeps its kind"
        );
        assert_eq!(adopted.name(), name);
        gate::quietly(|| adopted.release()).expect("release");
    }
    let file = tempfile::tempfile().expect("file");
    let error = site
        .pool
        .adopt("lane-x.lock", file.into(), &Request::new("driver"))
        .expect_err("a lane is no slot");
    assert!(
        matches!(error, worklane_admission::slot::Error::NotASlot { ref name } if name == "lane-x.lock"),
        "{error}"
    );
}
use serde_json::json;

#[test]
fn an_annotation_reaches_the_record_on_disk_and_reserved_fields_are_refused() {
    let site = Site::new("{}");
    let mut slot = site.take(Kind::Agent);
    let path = site.temp.path().join(slot.name());
    let command = json!({"pid": 4242, "start": 99, "group": true});
    let mut fields = serde_json::Map::new();
    fields.insert("commandProcess".into(), command.clone());
    slot.annotate(fields).expect("annotate");
    let on_disk =
        Record::parse(&std::fs::read(&path).expect("the record")).expect("the record parses");
    assert_eq!(
        on_disk.extra.get("commandProcess"),
        Some(&command),
        "the annotation is in the record others read"
    );
    let mut reserved = serde_json::Map::new();
    reserved.insert("pid".into(), json!(1));
    let refused = slot.annotate(reserved);
    assert!(
        refused.is_err(),
        "a field the core writes cannot be annotated: {refused:?}"
    );
    let after = std::fs::read(&path).expect("the record");
    assert_eq!(
        Record::parse(&after).expect("parses").pid(),
        on_disk.pid(),
        "a refused annotation leaves the record alone"
    );
}

#[test]
fn a_release_removes_the_record() {
    let site = Site::new("{}");
    let slot = site.take(Kind::Agent);
    let path = site.temp.path().join(slot.name());
    assert!(path.exists(), "a held slot has its record");
    slot.end(Slot::release).expect("release");
    assert!(!path.exists(), "a released slot has none");
    assert_eq!(
        site.take(Kind::Agent).name(),
        "agent-0.lock",
        "and is free at once"
    );
}
