//! What operators and scripts read: kind names, STOP, drain and blocker texts.
use super::*;

#[test]
fn kinds_are_named_as_the_cli_and_slots_json_show_them() {
    let labels = [
        Kind::Agent.label(),
        Kind::Test {
            limit_ms: Some(60_000),
        }
        .label(),
        Kind::Test { limit_ms: None }.label(),
        Kind::FullRun.label(),
    ];
    assert_eq!(
        labels,
        ["agent", "test", "test", "full-run"],
        "the labels scripts match on"
    );
}

#[test]
fn a_stop_says_who_when_and_why() {
    let stop = Stop {
        by: "ops".into(),
        at: "2026-11-30T00:00:00.000Z".into(),
        reason: "incident".into(),
    };
    assert_eq!(
        stop.to_string(),
        "STOP by ops at 2026-11-30T00:00:00.000Z: incident",
        "a full STOP"
    );
    assert_eq!(
        Blocker::Stop(stop).to_string(),
        "STOP by ops at 2026-11-30T00:00:00.000Z: incident (worklane resume-all lifts it)",
        "a STOP refusal says how to lift it"
    );
    let anonymous = Stop {
        by: String::new(),
        at: String::new(),
        reason: String::new(),
    };
    assert_eq!(
        anonymous.to_string(),
        "STOP by (unknown) at (unknown)",
        "what a STOP does not say is shown as unknown, and no empty reason"
    );
}

#[test]
fn a_drain_says_until_when_and_to_what() {
    let mut drain = Drain {
        since: "2026-11-30T04:25:59.008Z".into(),
        until: "2026-11-30T05:25:59.008Z".into(),
        to: Some("2.0.0".into()),
    };
    assert_eq!(
        drain.to_string(),
        "drain until 2026-11-30T05:25:59.008Z (updating to 2.0.0)",
        "a drain with a version"
    );
    assert_eq!(
        Blocker::Drain(drain.clone()).to_string(),
        "an update is draining the machine: drain until 2026-11-30T05:25:59.008Z \
             (updating to 2.0.0) (worklane undrain ends it early)",
        "a drain refusal says how to end it"
    );
    drain.to = None;
    assert_eq!(
        drain.to_string(),
        "drain until 2026-11-30T05:25:59.008Z",
        "a drain without a version"
    );
}

#[test]
fn a_blocker_at_cap_says_how_many_of_how_many() {
    assert_eq!(
        Blocker::AtCap { held: 3, cap: 4 }.to_string(),
        "at cap: 3 of 4 held",
        "the count and the cap"
    );
}

#[test]
fn a_pool_shows_its_directory_and_config_when_debugged() {
    let site = Site::new("{}");
    let shown = format!("{:?}", site.pool);
    let config = format!("{:?}", site.temp.path().join("config.json"));
    assert!(
        shown.starts_with("Pool") && shown.contains(&config),
        "the pool's Debug names its config {config}: {shown}"
    );
}
