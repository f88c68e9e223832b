//! The slots document's parts: the dispatcher's queue as its files show it, the line's
//! positions, and how dispatched work is named.

use super::support::*;
use worklane_view::context::{Around, queue_view};

fn document(site: &Site) -> worklane_view::doc::Slots {
    let snapshot = site.snapshot();
    worklane_view::slots::to_json(&snapshot, &Around::of(&site.pool, &snapshot))
}

#[test]
fn status_entries_are_shown_and_one_that_is_not_an_object_is_a_problem_with_its_fix() {
    let site = Site::new("{}");
    std::fs::write(
        site.temp.path().join("queue-l1.json"),
        br#"{"attempt": "a-1", "lane": "l1", "state": "queued"}"#,
    )
    .expect("entry");
    std::fs::write(site.temp.path().join("queue-l2.json"), b"[1]").expect("entry");
    std::fs::write(site.temp.path().join("queue-l3.json"), b"{torn").expect("entry");
    let queue = queue_view(site.pool.dir());
    assert_eq!(queue.attempts.len(), 1);
    assert_eq!(queue.attempts[0]["attempt"], "a-1");
    assert!(!queue.alive, "no dispatcher holds its lock");
    assert_eq!(queue.pid, None);
    let mut names: Vec<&str> = queue.problems.iter().map(|p| p.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["queue-l2.json", "queue-l3.json"]);
    for problem in &queue.problems {
        assert!(problem.fix.contains("rm -r -- "), "{}", problem.fix);
        assert!(problem.blocks.is_none(), "only skipped");
    }
    let doc = document(&site);
    assert_eq!(doc.queue.attempts.len(), 1);
    assert!(
        doc.problems.iter().any(|p| p.name == "queue-l3.json"),
        "the document lists them: {:?}",
        doc.problems
    );
    let json = serde_json::to_value(&doc).expect("json");
    assert_eq!(json["queue"]["dispatcher"]["alive"], false);
}

#[test]
fn the_line_numbers_each_kind_s_live_waiters_from_the_head() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let agents: Vec<_> = (0..2)
        .map(|_| {
            site.pool
                .join_line(Kind::Agent, 0, &Request::new("waiter"))
                .expect("join")
        })
        .collect();
    let test = site
        .pool
        .join_line(Kind::Test { limit_ms: None }, 0, &Request::new("tester"))
        .expect("join");
    let line = worklane_view::context::line_json(&site.snapshot());
    let positions = |kind: &str| -> Vec<Option<u32>> {
        line.iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.position)
            .collect()
    };
    assert_eq!(positions("agent"), [Some(1), Some(2)]);
    assert_eq!(positions("test"), [Some(1)]);
    for entry in &line {
        assert!(entry.live);
        assert_eq!(entry.pid, Some(std::process::id()));
        assert!(entry.name.starts_with("line-"), "{}", entry.name);
    }
    drop(agents);
    drop(test);
    assert!(worklane_view::context::line_json(&site.snapshot()).is_empty());
}

#[test]
fn dispatched_work_is_named_by_its_command_or_its_lane_and_attempt() {
    use worklane_view::slots::holder_name;
    let site = Site::new("{}");
    std::fs::write(
        site.temp.path().join("queue-l1.json"),
        br#"{"attempt": "a-7", "lane": "l1", "state": "starting"}"#,
    )
    .expect("entry");
    let queue = queue_view(site.pool.dir());
    let record = |owner: &str, extra: serde_json::Value| -> worklane_lease::Record {
        let mut value = serde_json::json!({"version": 1, "pid": 1, "owner": owner});
        value
            .as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        serde_json::from_value(value).expect("a record")
    };
    let claimed = record(
        "worklane claim",
        serde_json::json!({"command": "make test"}),
    );
    assert_eq!(
        holder_name("agent-0.lock", &claimed, &queue).as_deref(),
        Some("make test")
    );
    let waiting = record("worklane dispatcher", serde_json::json!({}));
    assert_eq!(
        holder_name("lane-l1.lock", &waiting, &queue).as_deref(),
        Some("attempt a-7"),
        "the lane found by the file's name"
    );
    let handed = record("worklane enqueue", serde_json::json!({"lane": "l1"}));
    assert_eq!(
        holder_name("lane-l1.lock", &handed, &queue).as_deref(),
        Some("lane l1, attempt a-7")
    );
    let own = record("harness", serde_json::json!({"command": "x"}));
    assert_eq!(
        holder_name("agent-0.lock", &own, &queue).as_deref(),
        Some("harness"),
        "anyone else's work is named by its owner"
    );
    let unknown = record("worklane enqueue", serde_json::json!({"lane": "elsewhere"}));
    assert_eq!(
        holder_name("lane-elsewhere.lock", &unknown, &queue).as_deref(),
        Some("lane elsewhere")
    );
}

#[test]
fn each_verdict_has_its_words() {
    use worklane_admission::SlotState;
    use worklane_view::slots::reason;
    assert_eq!(
        reason(&SlotState::GuardHeld),
        "a live process holds its kernel guard"
    );
    let site = Site::new("{}");
    let _held = site.take(Kind::Agent);
    let doc = document(&site);
    let slot = doc
        .slots
        .iter()
        .find(|s| s.name == "agent-0.lock")
        .expect("slot");
    assert_eq!(slot.reason, "a live process holds its kernel guard");
    assert_eq!(slot.units, 1);
    assert_eq!(slot.weight, 1);
    assert_eq!(worklane_view::slots::count(&site.snapshot(), "agent"), 1);
    assert_eq!(worklane_view::slots::count(&site.snapshot(), "test"), 0);
}
