//! Guards held with no record behind them: processes a finished run left running still
//! hold a copy of the slot's guard descriptor, so the slot stays live until they exit.
use super::*;

#[test]
fn an_agent_guard_held_without_a_record_counts_and_is_shown_once() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let first = site.take(Kind::Agent);
    let second = site.take(Kind::Agent);
    let left = leave_running(first);
    assert!(
        !site.temp.path().join("agent-0.lock").exists(),
        "the run's record is gone"
    );
    assert_eq!(
        site.blocked(Kind::Agent),
        Blocker::AtCap { held: 2, cap: 2 },
        "what the first run left running still holds its slot, beside the second run"
    );
    let snapshot = site.snapshot();
    let shown: Vec<(&str, &str, &SlotState, bool)> = snapshot
        .slots
        .iter()
        .map(|s| (&s.name[..], s.kind, &s.state, s.record.is_some()))
        .collect();
    assert_eq!(
        shown,
        [
            ("agent-0.lock", "agent", &SlotState::GuardHeld, false),
            ("agent-1.lock", "agent", &SlotState::GuardHeld, true),
        ],
        "the leftover is shown once, held, with no record"
    );
    second.end(Slot::release).expect("release");
    assert_eq!(
        site.take(Kind::Agent).name(),
        "agent-1.lock",
        "index 0 stays held while the leftover runs"
    );
    gate::quietly(|| drop(left));
    assert_eq!(
        site.take(Kind::Agent).name(),
        "agent-0.lock",
        "free once the leftover is gone"
    );
}

#[test]
fn a_test_run_guard_held_without_a_record_is_shown_as_a_test_slot() {
    let site = Site::new("{}");
    let left = leave_running(site.take(Kind::Test { limit_ms: None }));
    let snapshot = site.snapshot();
    let shown: Vec<(&str, &str, &SlotState)> = snapshot
        .slots
        .iter()
        .map(|s| (&s.name[..], s.kind, &s.state))
        .collect();
    assert_eq!(
        shown,
        [("test-0.lock", "test", &SlotState::GuardHeld)],
        "{snapshot:?}"
    );
    drop(left);
}

#[test]
fn a_full_run_guard_held_without_a_record_refuses() {
    let site = Site::new("{}");
    let left = leave_running(site.take(Kind::FullRun));
    let blocker = site.blocked(Kind::FullRun);
    assert!(
        matches!(&blocker, Blocker::FullRunHeld(r) if r.why == LiveWhy::GuardHeld && r.holder.is_none()),
        "a guard held for longer than a probe is a full run in progress: {blocker:?}"
    );
    assert!(!site.idle(), "and the machine is not idle");
    gate::quietly(|| drop(left));
    assert!(site.idle(), "idle once the leftover is gone");
    assert_eq!(site.take(Kind::FullRun).name(), "full-run.lock");
}
