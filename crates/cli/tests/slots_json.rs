use super::*;

#[test]
fn slots_json_field_by_field() {
    let site = Site::new(Some(r#"{"max_agents": 3, "max_test_runs": 4}"#));
    let mut holder = site.spawn(&["run", "--owner", "harness-a"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    std::fs::write(site.slots().join("agent-5.lock"), b"{broken").expect("malformed slot");
    // STOP written by hand: `stop-all` would wait for the holder to halt.
    std::fs::write(
        site.slots().join("STOP"),
        br#"{"by":"ops","at":"2026-01-01T00:00:00.000Z","reason":"maintenance"}"#,
    )
    .expect("STOP");
    let out = site.output(&["slots", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("slots --json");
    assert_eq!(v["dir"], site.slots().display().to_string());
    assert_eq!(v["max_agents"], 3);
    assert_eq!(v["max_test_runs"], 4);
    assert_eq!(
        v["agents_held"], 2,
        "the live slot and the malformed one count"
    );
    assert_eq!(v["test_runs_held"], 0);
    assert_eq!(v["full_run_held"], false);
    assert_eq!(v["stop"]["reason"], "maintenance");
    assert_eq!(v["drain"]["state"], "none");
    let slots = v["slots"].as_array().expect("slots array");
    assert_eq!(slots.len(), 2, "{slots:?}");
    let held = &slots[0];
    assert_eq!(held["name"], "agent-0.lock");
    assert_eq!(held["kind"], "agent");
    assert_eq!(held["pid"], holder.id());
    assert_eq!(held["owner"], "harness-a");
    assert_eq!(held["state"], "held");
    assert_eq!(held["counts"], true);
    assert!(held["epoch"].as_u64().is_some_and(|e| e >= 1));
    assert!(
        held["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("sh -c"))
    );
    let since = held["since"].as_str().expect("since");
    assert!(worklane_lease::parse_rfc3339_ms(since).is_some(), "{since}");
    let broken = &slots[1];
    assert_eq!(broken["name"], "agent-5.lock");
    assert_eq!(broken["state"], "malformed");
    assert_eq!(broken["counts"], true);
    assert_eq!(broken["pid"], serde_json::Value::Null);
    assert!(
        broken["reason"]
            .as_str()
            .is_some_and(|r| r.contains("malformed"))
    );
    std::fs::write(site.file("release.0"), b"").expect("release");
    // Under STOP the holder is halted anyway; either way it ends.
    wait_exit(&mut holder, "the holder");
}

#[test]
fn the_human_view_names_holders() {
    let site = Site::new(None);
    let mut holder = site.spawn(&["run", "--owner", "harness-b"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let out = site.output(&["slots"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("agents: 1 of 2 held"), "{text}");
    assert!(text.contains("harness-b"), "{text}");
    assert!(text.contains(&holder.id().to_string()), "{text}");
    std::fs::write(site.file("release.0"), b"").expect("release");
    wait_exit(&mut holder, "the holder");
}
