//! `protocol.json` from the command line (PROTOCOL.md section 0): a run, a lease and an enqueue
//! are refused with 78 naming the extension or level and what to upgrade; the views still work
//! and say so; `config set shares` and a weighted run declare `weights`; `protocol drop`
//! removes it only when nothing uses it.

use super::*;

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_directory_naming_an_unknown_extension_refuses_takes_leases_and_enqueues_with_78() {
    let site = Site::new(Some(r#"{"max_agents": 2}"#));
    std::fs::write(
        site.slots().join("protocol.json"),
        r#"{"version": 1, "level": 1, "extensions": ["freezer"]}"#,
    )
    .expect("protocol.json");
    for args in [
        &["run", "--", "true"][..],
        &["lease", "run", "--role", "r", "--", "true"],
        &["enqueue", "--lane", "l", "--", "true"],
    ] {
        let out = site.output(args);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(78), "{args:?}: {said}");
        assert!(
            said.contains("\"freezer\"") && said.contains("upgrade worklane"),
            "{args:?}: {said}"
        );
    }
    let slots = site.output(&["slots"]);
    assert!(slots.status.success(), "{}", text(&slots));
    assert!(text(&slots).contains("protocol.json"), "{}", text(&slots));
    let events = site.output(&["events"]);
    assert!(events.status.success(), "{}", text(&events));
    assert!(
        String::from_utf8_lossy(&events.stderr).contains("freezer"),
        "events reads on and says so: {}",
        text(&events)
    );
    let metrics = String::from_utf8_lossy(&site.output(&["metrics"]).stdout).into_owned();
    assert!(
        metrics.contains("worklane_protocol_refused 1\n"),
        "{metrics}"
    );
    let shown = site.output(&["protocol", "show", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("JSON");
    assert_eq!(doc["extensions"], serde_json::json!(["freezer"]));
    assert_eq!(doc["keeps"]["level"], 1);
    assert!(
        doc["refused"]
            .as_str()
            .is_some_and(|r| r.contains("freezer")),
        "{doc}"
    );
    std::fs::write(
        site.slots().join("protocol.json"),
        r#"{"version": 1, "level": 7, "extensions": []}"#,
    )
    .expect("protocol.json");
    let out = site.output(&["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(text(&out).contains("protocol level 7"), "{}", text(&out));
}

#[test]
fn weights_are_declared_on_first_use_and_dropped_only_once_unused() {
    let site = Site::new(Some(r#"{"max_agents": 4}"#));
    let weights = || {
        let out = site.output(&["protocol", "show", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        doc["extensions"]
            .as_array()
            .expect("a list")
            .iter()
            .any(|e| e == "weights")
    };
    assert_eq!(site.code(&["run", "--", "true"]), 0);
    assert!(!weights(), "weight 1 uses no weights");
    assert_eq!(site.code(&["run", "--weight", "2", "--", "true"]), 0);
    assert!(weights());
    assert_eq!(
        site.code(&["protocol", "drop", "weights"]),
        0,
        "nothing uses it now"
    );
    assert!(!weights());
    let set = site.output(&["config", "set", "shares", r#"{"*": 2}"#]);
    assert!(set.status.success(), "{}", text(&set));
    assert!(
        text(&set).contains("protocol extension \"weights\""),
        "config set says so: {}",
        text(&set)
    );
    assert!(weights());
    let refused = site.output(&["protocol", "drop", "weights"]);
    assert_eq!(refused.status.code(), Some(75), "{}", text(&refused));
    assert!(text(&refused).contains("shares"), "{}", text(&refused));
    assert!(weights(), "kept");
    assert_eq!(site.code(&["config", "unset", "shares"]), 0);
    assert_eq!(site.code(&["protocol", "drop", "weights"]), 0);
    assert!(!weights());
}
