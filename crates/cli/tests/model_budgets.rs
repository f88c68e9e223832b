use super::*;
use std::io::Write;

const KEY: &str = "sk-ant-cli-test-key-not-real";

fn budget(site: &Site, args: &[&str], stdin: &str) -> Output {
    let mut child = site
        .worklane()
        .arg("budget")
        .args(args)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("MISTRAL_KEY", KEY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_gated()
        .expect("spawn worklane budget");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

fn reset_in(secs: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let at = u64::try_from(now).expect("ms") + secs * 1000;
    // RFC 3339, as Anthropic writes its resets.
    let out = Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("@{}", at / 1000),
            "+%Y-%m-%dT%H:%M:%SZ",
        ])
        .output_gated()
        .expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn everything_written(site: &Site) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(site.slots()).expect("list").flatten() {
        if let Ok(text) = std::fs::read_to_string(entry.path()) {
            all.push_str(&text);
        }
        all.push_str(&entry.file_name().to_string_lossy());
    }
    all
}

#[test]
fn a_take_reserves_the_response_settles_and_a_429_pauses_everyone_on_the_key() {
    let site = Site::new(None);
    let reset = reset_in(60);
    let headers = format!(
        "anthropic-ratelimit-requests-limit: 50\n\
             anthropic-ratelimit-requests-remaining: 3\n\
             anthropic-ratelimit-requests-reset: {reset}\n\
             anthropic-ratelimit-tokens-remaining: 5000\n\
             anthropic-ratelimit-tokens-reset: {reset}\n"
    );
    let seen = budget(
        &site,
        &[
            "observe",
            "--provider",
            "anthropic",
            "--status",
            "200",
            "--headers-file",
            "-",
        ],
        &headers,
    );
    assert!(
        seen.status.success(),
        "{}",
        String::from_utf8_lossy(&seen.stderr)
    );
    let take = budget(
        &site,
        &[
            "take",
            "--provider",
            "anthropic",
            "--consumer",
            "agent-1",
            "--tokens",
            "1000",
            "--output-tokens",
            "500",
        ],
        "",
    );
    assert!(
        take.status.success(),
        "{}",
        String::from_utf8_lossy(&take.stderr)
    );
    let reservation = String::from_utf8_lossy(&take.stdout).trim().to_owned();
    assert_eq!(
        reservation.len(),
        16,
        "it prints its reservation: {reservation:?}"
    );
    let shown = budget(&site, &["show", "--json"], "");
    let doc: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("show --json");
    let anthropic = doc["budgets"]
        .as_array()
        .and_then(|b| b.iter().find(|v| v["provider"] == "anthropic"))
        .cloned()
        .expect("the provider's budget is shown");
    let tokens = anthropic["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|w| w["name"] == "tokens"))
        .cloned()
        .expect("its tokens window");
    assert_eq!(
        tokens["left"], 3500,
        "1 500 tokens reserved in flight: {tokens}"
    );
    // The response comes back with its usage (the final stream event's): settled.
    let stream = site.file("stream.txt");
    std::fs::write(
            &stream,
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":1}}}\n\n\
             event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":120}}\n\n",
        )
        .expect("stream");
    let settled = budget(
        &site,
        &[
            "observe",
            "--provider",
            "anthropic",
            "--status",
            "200",
            "--reservation",
            &reservation,
            "--usage-json",
            stream.to_str().expect("utf-8"),
            "--headers-file",
            "-",
        ],
        &format!(
            "anthropic-ratelimit-requests-remaining: 2\nanthropic-ratelimit-requests-reset: {reset}\n"
        ),
    );
    assert!(
        settled.status.success(),
        "{}",
        String::from_utf8_lossy(&settled.stderr)
    );
    let shown = budget(&site, &["show", "--json"], "");
    let doc: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("show --json");
    let tokens = doc["budgets"][0]["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|w| w["name"] == "tokens"))
        .cloned()
        .expect("tokens");
    assert_eq!(
        tokens["granted"], 1020,
        "the estimate replaced by the usage (input from the first event, output from the last): {tokens}"
    );
    // A 429 with retry-after pauses every caller of the key.
    let paused = budget(
        &site,
        &[
            "observe",
            "--provider",
            "anthropic",
            "--status",
            "429",
            "--header",
            "retry-after: 30",
        ],
        "",
    );
    assert!(paused.status.success());
    let refused = budget(
        &site,
        &[
            "take",
            "--provider",
            "anthropic",
            "--consumer",
            "agent-2",
            "--wait-max",
            "0",
            "--json",
        ],
        "",
    );
    assert_eq!(
        refused.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&refused.stdout).expect("json");
    assert_eq!(
        (doc["go"].as_bool(), doc["kind"].as_str()),
        (Some(false), Some("secondary_rate_limited")),
        "{doc}"
    );
    let why = site
        .worklane()
        .args(["why", "--provider", "anthropic", "--json"])
        .env("ANTHROPIC_API_KEY", KEY)
        .output_gated()
        .expect("why");
    let doc: serde_json::Value = serde_json::from_slice(&why.stdout).expect("why --json");
    assert_eq!(doc["provider_quota"]["blocks"], true, "{doc}");
    assert!(
        doc["provider_quota"]["why"]
            .as_str()
            .is_some_and(|w| w.contains("429")),
        "{doc}"
    );
    let written = everything_written(&site);
    for out in [&seen, &take, &shown, &settled, &refused, &why] {
        assert!(!String::from_utf8_lossy(&out.stdout).contains(KEY));
        assert!(!String::from_utf8_lossy(&out.stderr).contains(KEY));
    }
    assert!(
        !written.contains(KEY),
        "the key is in no file of the slot directory"
    );
}

#[test]
fn a_provider_of_ones_own_is_described_in_the_config() {
    let site = Site::new(Some(
        r#"{"budget_providers": {"mistral": {"dimensions": {"requests": {"limit": "x-ratelimit-limit-req", "remaining": "x-ratelimit-remaining-req", "reset": "x-ratelimit-reset-req", "format": "duration"}}}}}"#,
    ));
    let seen = budget(
        &site,
        &[
            "observe",
            "--provider",
            "mistral",
            "--token-env",
            "MISTRAL_KEY",
            "--status",
            "200",
            "--header",
            "x-ratelimit-remaining-req: 1",
            "--header",
            "x-ratelimit-reset-req: 1m0s",
        ],
        "",
    );
    assert!(
        seen.status.success(),
        "{}",
        String::from_utf8_lossy(&seen.stderr)
    );
    let take = |consumer: &str| {
        budget(
            &site,
            &[
                "take",
                "--provider",
                "mistral",
                "--token-env",
                "MISTRAL_KEY",
                "--consumer",
                consumer,
                "--wait-max",
                "0",
            ],
            "",
        )
    };
    assert!(take("a").status.success(), "the one request left");
    assert_eq!(take("b").status.code(), Some(75), "none left now");
    assert!(site.slots().read_dir().expect("list").flatten().any(|e| {
        e.file_name()
            .to_string_lossy()
            .starts_with("mistral-budget-")
    }));
    let bad = Site::new(Some(
        r#"{"budget_providers": {"mistral": {"dimensions": {"requests": {"format": "unix"}}}}}"#,
    ));
    let out = budget(
        &bad,
        &[
            "take",
            "--provider",
            "mistral",
            "--token-env",
            "MISTRAL_KEY",
            "--consumer",
            "a",
        ],
        "",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("budget_providers.mistral") && err.contains("config"),
        "names the file and the field: {err}"
    );
    let unknown = budget(
        &site,
        &[
            "take",
            "--provider",
            "nobody",
            "--token-env",
            "MISTRAL_KEY",
            "--consumer",
            "a",
        ],
        "",
    );
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(
        unknown.status.code(),
        Some(64),
        "a name nothing describes: {err}"
    );
    assert!(
        err.contains("--provider nobody") && err.contains("PROTOCOL.md 13.1"),
        "names the value and the section that describes providers: {err}"
    );
}

/// `budget show` and `metrics` show a model provider's calls in flight (a take not yet
/// observed), the calls a proxy says wait, and an ended window carried over as assumed.
#[test]
fn calls_in_flight_waiting_and_an_assumed_window_are_shown() {
    let site = Site::new(None);
    let reset = reset_in(60);
    let headers = format!(
        "anthropic-ratelimit-requests-limit: 50\n\
         anthropic-ratelimit-requests-remaining: 3\n\
         anthropic-ratelimit-requests-reset: {reset}\n"
    );
    let seen = budget(
        &site,
        &[
            "observe",
            "--provider",
            "anthropic",
            "--status",
            "200",
            "--headers-file",
            "-",
        ],
        &headers,
    );
    assert!(seen.status.success(), "{seen:?}");
    let taken = budget(
        &site,
        &[
            "take",
            "--provider",
            "anthropic",
            "--consumer",
            "a",
            "--tokens",
            "100",
        ],
        "",
    );
    assert!(taken.status.success(), "{taken:?}");
    // A proxy's word that two of its calls wait, said now; another's, said a minute ago.
    let state_path = std::fs::read_dir(site.slots())
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| n.starts_with("anthropic-budget-") && n.ends_with(".json"))
        })
        .expect("the state");
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state_path).expect("read")).expect("JSON");
    let now = state["updatedAt"].as_u64().expect("updatedAt");
    state["waiting"] = serde_json::json!({
        "00000000000000aa": {"calls": 2, "at": now},
        "00000000000000bb": {"calls": 7, "at": now - 60_000},
    });
    std::fs::write(&state_path, state.to_string()).expect("write");
    let out = site.output(&["budget", "show", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let view = &doc["budgets"][0];
    assert_eq!(view["in_flight"], 1, "{view}");
    assert_eq!(view["waiting"], 2, "the stale word is not counted: {view}");
    let requests = view["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["name"] == "requests")
        .expect("requests");
    assert_eq!(requests["in_flight"], 1, "{requests}");
    assert_eq!(requests["assumed"], false);
    let text = site.output(&["budget", "show"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("1 call(s) in flight, 2 waiting in a proxy"),
        "{text}"
    );
    let metrics = site.output(&["metrics"]);
    let m = super::journal::parse_exposition(&String::from_utf8_lossy(&metrics.stdout));
    // Labelled by the key's hash, as its files and the journal name it (a rank would move).
    let key = state_path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("anthropic-budget-"))
        .and_then(|n| n.strip_suffix(".json"))
        .expect("the key in the name")
        .to_owned();
    assert_eq!(key.len(), 16, "{key}");
    let who = format!("provider=\"anthropic\",credential=\"{key}\"");
    assert_eq!(m[&format!("worklane_budget_in_flight{{{who}}}")], 1.0);
    assert_eq!(m[&format!("worklane_budget_waiting{{{who}}}")], 2.0);
    assert_eq!(
        m[&format!("worklane_budget_in_flight_units{{{who},resource=\"requests\"}}")],
        1.0
    );
    // The window ended a second ago: shown carried over, its limit less the call in flight.
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state_path).expect("read")).expect("JSON");
    state["resources"]["requests"]["resetAt"] = (now - 1_000).into();
    state["resources"]["requests"]["seenAt"] = (now - 61_000).into();
    std::fs::write(&state_path, state.to_string()).expect("write");
    let out = site.output(&["budget", "show", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let requests = doc["budgets"][0]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["name"] == "requests")
        .cloned()
        .expect("the window carried over");
    assert_eq!(requests["assumed"], true, "{requests}");
    assert_eq!(
        requests["left"], 49,
        "50, less the call in flight: {requests}"
    );
}
