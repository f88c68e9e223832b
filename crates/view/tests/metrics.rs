//! The slots document and the exposition built from a real pool.

use super::support::*;
use worklane_view::context::Around;

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{series} in:\n{text}"))
}

#[test]
fn the_document_counts_what_is_held_against_the_caps() {
    let site = Site::new(r#"{"max_agents": 3, "max_test_runs": 1}"#);
    let _a = site.take(Kind::Agent);
    let _t = site.take(Kind::Test {
        limit_ms: Some(60_000),
    });
    let snapshot = site.snapshot();
    let doc = worklane_view::slots::to_json(&snapshot, &Around::of(&site.pool, &snapshot));
    assert_eq!(doc.version, worklane_view::doc::VERSION);
    assert_eq!((doc.max_agents, doc.max_test_runs), (3, 1));
    assert_eq!((doc.agents_held, doc.test_runs_held), (1, 1));
    assert_eq!(doc.agent_units_held, 1);
    assert!(doc.stop.is_none() && doc.config_problem.is_none());
    let agent = doc
        .slots
        .iter()
        .find(|s| s.name == "agent-0.lock")
        .expect("the agent slot");
    assert_eq!(agent.kind, "agent");
    assert_eq!(agent.state, "held");
    assert!(agent.counts);
    assert_eq!(agent.pid, Some(std::process::id()));
    assert_eq!(agent.owner.as_deref(), Some("view-test"));
    let test = doc
        .slots
        .iter()
        .find(|s| s.name == "test-0.lock")
        .expect("the test slot");
    assert_eq!(test.limit_ms, Some(60_000));
    let json = serde_json::to_value(&doc).expect("serializes");
    assert_eq!(json["drain"], serde_json::json!({"state": "none"}));
    assert!(json.get("fleet").is_none(), "no fleet key without --fleet");
}

#[test]
fn a_config_that_cannot_be_used_zeroes_the_caps_and_says_why() {
    let site = Site::new("{}");
    site.set_config(r#"{"max_agents": "many"}"#);
    let snapshot = site.snapshot();
    let around = Around::of(&site.pool, &snapshot);
    let problem = around.config.problem.as_ref().expect("a problem");
    assert!(problem.line().contains("every take is refused with 78"));
    let doc = worklane_view::slots::to_json(&snapshot, &around);
    assert_eq!((doc.max_agents, doc.max_test_runs), (0, 0));
    let shown = doc.config_problem.expect("shown");
    assert!(shown.fix.contains("max_agents"), "{}", shown.fix);
    let text = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(value(&text, "worklane_cap{kind=\"agent\"}"), 0.0);
}

#[test]
fn the_exposition_has_the_holders_and_caps_of_the_pool() {
    let site = Site::new(r#"{"max_agents": 3, "max_jobs": 4}"#);
    let _a = site.take(Kind::Agent);
    let _b = site.take(Kind::Agent);
    let text = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(value(&text, "worklane_holders{kind=\"agent\"}"), 2.0);
    assert_eq!(value(&text, "worklane_holders{kind=\"test\"}"), 0.0);
    assert_eq!(value(&text, "worklane_cap{kind=\"agent\"}"), 3.0);
    assert_eq!(value(&text, "worklane_cap{kind=\"job\"}"), 4.0);
    assert!(text.contains("# TYPE worklane_holders gauge"), "{text}");
    assert!(
        text.ends_with('\n') && !text.contains("# EOF"),
        "0.0.4 text: {text}"
    );
}
