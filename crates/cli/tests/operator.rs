use super::*;

#[test]
fn stop_halts_running_commands_refuses_new_ones_and_resume_admits() {
    let site = Site::new(None);
    let polite = site.spawn(&["run"], r#"touch "$T/up.$K"; exec sleep 600"#, "0");
    let stubborn = site.spawn(
        &["run"],
        r#"trap '' TERM; touch "$T/up.$K"; exec sleep 600"#,
        "1",
    );
    wait_until("both commands", || {
        site.file("up.0").exists() && site.file("up.1").exists()
    });
    let out = site.output(&["stop-all", "incident", "42"]);
    assert!(out.status.success(), "stop-all writes STOP");
    let stop: serde_json::Value =
        serde_json::from_slice(&std::fs::read(site.slots().join("STOP")).expect("STOP"))
            .expect("STOP is JSON");
    assert_eq!(stop["reason"], "incident 42");
    assert!(
        stop["at"].as_str().is_some_and(|a| a.ends_with('Z')),
        "{stop}"
    );
    let mut polite = polite;
    let mut stubborn = stubborn;
    let status = wait_exit(&mut polite, "the polite command");
    assert_eq!(status.code(), Some(128 + 15), "halted by SIGTERM");
    let status = wait_exit(&mut stubborn, "the stubborn command");
    assert_eq!(status.code(), Some(128 + 9), "SIGKILL after the grace");
    let out = site.output(&["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(69), "refused under STOP");
    assert!(String::from_utf8_lossy(&out.stderr).contains("incident 42"));
    assert_eq!(site.code(&["resume-all"]), 0);
    assert_eq!(
        site.code(&["run", "--", "true"]),
        0,
        "admitted after resume"
    );
}

fn write_drain(site: &Site, until: &str) {
    std::fs::write(
        site.slots().join("update-drain.json"),
        format!(r#"{{"since": "2026-01-01T00:00:00Z", "until": "{until}", "to": "9.9"}}"#),
    )
    .expect("drain flag");
}

#[test]
fn a_drain_refuses_and_is_ignored_when_past_too_far_or_unreadable() {
    let site = Site::new(None);
    assert_eq!(site.code(&["drain", "--until", "30m", "--to", "2.0"]), 0);
    let out = site.output(&["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(69), "a drain in force refuses");
    assert!(String::from_utf8_lossy(&out.stderr).contains("2.0"));
    assert_eq!(site.code(&["run", "--kind", "full-run", "--", "true"]), 69);
    assert_eq!(site.code(&["undrain"]), 0);
    assert_eq!(site.code(&["run", "--", "true"]), 0, "undrained");
    assert_eq!(site.code(&["drain", "--until", "30m"]), 0, "no --to");
    let flag: serde_json::Value = serde_json::from_slice(
        &std::fs::read(site.slots().join("update-drain.json")).expect("the flag"),
    )
    .expect("json");
    assert!(
        flag.get("to").is_some_and(serde_json::Value::is_null),
        "`to` is written, null without --to: {flag}"
    );
    assert_eq!(site.code(&["undrain"]), 0);

    write_drain(&site, "2020-01-01T00:00:00Z");
    assert_eq!(
        site.code(&["run", "--", "true"]),
        0,
        "past its until: ignored"
    );
    let far = worklane_lease::rfc3339_ms(
        worklane_lease::Clock::now_ms(&worklane_lease::SystemClock) + 5 * 3_600_000,
    );
    write_drain(&site, &far);
    assert_eq!(
        site.code(&["run", "--", "true"]),
        0,
        "more than 4 h ahead: ignored"
    );
    std::fs::write(site.slots().join("update-drain.json"), b"{not json").expect("write");
    assert_eq!(site.code(&["run", "--", "true"]), 0, "unreadable: ignored");
    assert_eq!(
        site.code(&["drain", "--until", "5h"]),
        64,
        "refuses to write a useless drain"
    );
}

#[test]
fn one_full_run_at_a_time_and_the_idle_probe() {
    let site = Site::new(None);
    assert_eq!(site.code(&["idle"]), 0, "idle");
    let mut run = site.spawn(&["run", "--kind", "full-run"], HOLD, "0");
    wait_until("the full run", || site.file("up.0").exists());
    assert_eq!(
        site.code(&["run", "--kind", "full-run", "--no-wait", "--", "true"]),
        75
    );
    assert_eq!(site.code(&["idle"]), 75, "not idle during a full run");
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut run, "the full run").success());
    assert_eq!(site.code(&["idle"]), 0, "idle again");
}

#[test]
fn set_test_slots_on_a_config_it_cannot_write_is_a_config_error() {
    let site = Site::new(None);
    let config = site.file(".slots.json");
    let out = site
        .worklane()
        .env("AGENT_SLOTS_CONFIG", &config)
        .args(["set-test-slots", "3"])
        .output_gated()
        .expect("run worklane");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(78),
        "the config path is configuration, not usage: {err}"
    );
    assert!(err.contains(".slots.json"), "names the file: {err}");
    assert!(!config.exists(), "nothing written");
}

#[test]
fn the_test_run_cap_is_set_by_set_test_slots() {
    let site = Site::new(Some(r#"{"max_agents": 1, "admission": "waiter"}"#));
    assert_eq!(site.code(&["set-test-slots", "9"]), 64, "out of range");
    assert_eq!(site.code(&["set-test-slots", "2"]), 0);
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(site.slots().join("config.json")).expect("config"))
            .expect("json");
    assert_eq!(config["max_test_runs"], 2);
    assert_eq!(config["admission"], "waiter", "other fields survive");
    let mut holders: Vec<Running> = (0..2)
        .map(|i| {
            site.spawn(
                &["run", "--kind", "test", "--limit", "10m"],
                HOLD,
                &i.to_string(),
            )
        })
        .collect();
    wait_until("two test runs", || {
        site.file("up.0").exists() && site.file("up.1").exists()
    });
    assert_eq!(
        site.code(&["run", "--kind", "test", "--no-wait", "--", "true"]),
        75
    );
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "agents are apart"
    );
    for (i, h) in holders.iter_mut().enumerate() {
        std::fs::write(site.file(&format!("release.{i}")), b"").expect("release");
        assert!(wait_exit(h, "a test run").success());
    }
}
