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

/// The series of every line starting with `name{` or `name ` in the exposition.
fn series<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .collect()
}

#[test]
fn stop_drain_waiters_and_the_full_run_s_cap_are_gauges_of_the_moment() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let before = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(value(&before, "worklane_stop"), 0.0);
    assert_eq!(value(&before, "worklane_drain"), 0.0);
    assert_eq!(value(&before, "worklane_cap{kind=\"full-run\"}"), 1.0);
    assert_eq!(value(&before, "worklane_waiters{kind=\"agent\"}"), 0.0);
    assert_eq!(value(&before, "worklane_protocol_refused"), 0.0);
    let _held = site.take(Kind::Agent);
    let _waiting = site
        .pool
        .join_line(Kind::Agent, 0, &Request::new("waiter"))
        .expect("join");
    worklane_admission::stop::write(
        site.pool.dir(),
        &worklane_admission::Stop {
            by: "op@host".into(),
            at: rfc3339_ms(0),
            reason: "test".into(),
        },
    )
    .expect("stop");
    site.pool
        .write_drain(&worklane_admission::Drain {
            since: rfc3339_ms(0),
            until: rfc3339_ms(now_ms() + 3_600_000),
            to: None,
        })
        .expect("drain");
    let after = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(value(&after, "worklane_stop"), 1.0);
    assert_eq!(value(&after, "worklane_drain"), 1.0);
    assert_eq!(value(&after, "worklane_waiters{kind=\"agent\"}"), 1.0);
    assert_eq!(value(&after, "worklane_waiters{kind=\"test\"}"), 0.0);
    std::fs::write(
        site.temp.path().join("protocol.json"),
        br#"{"version": 1, "level": 99, "extensions": []}"#,
    )
    .expect("protocol");
    let refused = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(value(&refused, "worklane_protocol_refused"), 1.0);
}

#[test]
fn what_happened_is_counted_from_the_journal() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let before = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(value(&before, "worklane_takeovers_total"), 0.0);
    assert_eq!(value(&before, "worklane_holders_gone_total"), 0.0);
    assert_eq!(value(&before, "worklane_halts_total{by=\"worklane\"}"), 0.0);
    assert_eq!(
        value(&before, "worklane_halts_total{by=\"supervisor\"}"),
        0.0
    );
    for _ in 0..3 {
        site.take(Kind::Agent).release().expect("release");
    }
    site.take(Kind::Test { limit_ms: None })
        .release()
        .expect("release");
    let text = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(
        value(&text, "worklane_run_seconds_count{kind=\"agent\"}"),
        3.0,
        "each release measured: {text}"
    );
    assert_eq!(
        value(&text, "worklane_run_seconds_count{kind=\"test\"}"),
        1.0
    );
    assert_eq!(
        value(&text, "worklane_queue_wait_seconds_count{kind=\"agent\"}"),
        3.0,
        "each take measured"
    );
    assert_eq!(value(&text, "worklane_journal_dropped_events_total"), 0.0);
    assert_eq!(value(&text, "worklane_journal_skipped_lines"), 0.0);
    // A torn line, as a writer killed mid-line leaves one, is skipped and counted.
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(site.temp.path().join("journal.jsonl"))
        .expect("journal")
        .write_all(b"{\"version\":1,\"at\"")
        .expect("tear");
    let torn = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(
        value(&torn, "worklane_journal_skipped_lines"),
        1.0,
        "{torn}"
    );
    assert_eq!(series(&torn, "worklane_run_seconds_bucket").len() % 2, 0);
}

#[test]
fn a_dead_holder_is_said_gone_once_by_the_first_look() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let slot = site.take(Kind::Agent);
    let name = slot.name().to_owned();
    // Its holder gone without releasing: the record stays, naming a pid that has exited.
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(site.temp.path().join(&name)).expect("record"))
            .expect("JSON");
    drop(slot.hand_over());
    let dead = dead_pid();
    record["pid"] = serde_json::json!(dead);
    if let Some(identity) = record.get_mut("identity") {
        identity["pid"] = serde_json::json!(dead);
    }
    std::fs::write(
        site.temp.path().join(&name),
        serde_json::to_vec(&record).expect("JSON"),
    )
    .expect("rewrite");
    let first = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(value(&first, "worklane_holders_gone_total"), 1.0, "{first}");
    assert_eq!(value(&first, "worklane_holders{kind=\"agent\"}"), 0.0);
    let second = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(
        value(&second, "worklane_holders_gone_total"),
        1.0,
        "said once"
    );
}

/// A pid no process can have (the kernel's `pid_max` itself: pids stay below it), so that no
/// process is started here (a start beside the other tests' releases would need the fork
/// gate).
fn dead_pid() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("pid_max")
        .trim()
        .parse()
        .expect("a number")
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("fits")
}

#[test]
fn the_document_shows_the_full_run_a_weight_and_whether_the_config_file_exists() {
    let site = Site::new(r#"{"max_agents": 4}"#);
    let doc = |site: &Site| {
        let snapshot = site.snapshot();
        worklane_view::slots::to_json(&snapshot, &Around::of(&site.pool, &snapshot))
    };
    assert!(!doc(&site).full_run_held);
    assert!(doc(&site).config.exists);
    let full = site.take(Kind::FullRun);
    let now = site.pool.clock().now_ms();
    let heavy = match site
        .pool
        .try_take_for(
            Kind::Agent,
            &Request::new("heavy"),
            &worklane_admission::Ask::new().with_weight(2),
            0,
            now,
        )
        .expect("take")
    {
        Take::Held(slot) => slot,
        Take::Blocked(b) => panic!("free: {b}"),
    };
    let shown = doc(&site);
    assert!(shown.full_run_held);
    let slot = shown
        .slots
        .iter()
        .find(|s| s.name == heavy.name())
        .expect("the heavy slot");
    assert_eq!((slot.weight, slot.units), (2, 2));
    assert_eq!(shown.agent_units_held, 2);
    drop(full);
    drop(heavy);
    std::fs::remove_file(site.temp.path().join("config.json")).expect("rm");
    let defaults = doc(&site);
    assert!(!defaults.config.exists, "the defaults hold");
    assert!(defaults.config_problem.is_none());
}

#[test]
fn the_dispatcher_s_rows_are_counted_by_state() {
    let site = Site::new("{}");
    for (lane, state) in [("a", "queued"), ("b", "queued"), ("c", "starting")] {
        std::fs::write(
            site.temp.path().join(format!("queue-{lane}.json")),
            format!(r#"{{"attempt": "x-{lane}", "lane": "{lane}", "state": "{state}"}}"#),
        )
        .expect("entry");
    }
    let text = worklane_view::metrics::exposition(&site.pool).expect("exposition");
    assert_eq!(
        value(&text, "worklane_dispatcher_rows{state=\"queued\"}"),
        2.0
    );
    assert_eq!(
        value(&text, "worklane_dispatcher_rows{state=\"starting\"}"),
        1.0
    );
}

#[test]
fn a_held_slot_s_cgroup_is_shown_in_cpu_seconds_and_processes() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let _held = site.take(Kind::Agent);
    let snapshot = site.snapshot();
    let mut doc = worklane_view::slots::to_json(&snapshot, &Around::of(&site.pool, &snapshot));
    // The cgroup a run in one would have (its parts are read from cgroupfs, which needs a run
    // in a cgroup: the CLI's containment tests make one as root).
    let slot = doc
        .slots
        .iter_mut()
        .find(|s| s.name == "agent-0.lock")
        .expect("the agent slot");
    slot.cgroup = Some(worklane_view::doc::SlotCgroup {
        path: "/worklane/j-x-agent-0-1".into(),
        procs: vec![10, 11, 12],
        cpu_usec: Some(2_500_000),
        memory_current: None,
        memory_peak: None,
    });
    let journal = worklane_journal::read(site.pool.dir()).expect("journal");
    let text = worklane_view::metrics::render(&doc, &journal);
    assert_eq!(
        value(
            &text,
            "worklane_slot_cpu_seconds{slot=\"agent-0.lock\",kind=\"agent\"}"
        ),
        2.5,
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "worklane_slot_processes{slot=\"agent-0.lock\",kind=\"agent\"}"
        ),
        3.0,
        "{text}"
    );
}
