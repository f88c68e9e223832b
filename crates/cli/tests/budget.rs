use super::*;

const TOKEN: &str = "ghp_cli_test_token_not_real";

fn budget(site: &Site, args: &[&str]) -> Output {
    site.worklane()
        .arg("budget")
        .args(args)
        .env("GITHUB_TOKEN", TOKEN)
        .output_gated()
        .expect("run worklane budget")
}

fn reset_in(secs: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    format!("X-RateLimit-Reset: {}", now + secs)
}

#[test]
fn a_shared_budget_is_observed_taken_and_shown_without_its_key() {
    let site = Site::new(None);
    let reset = reset_in(600);
    let out = budget(
        &site,
        &[
            "observe",
            "--status",
            "200",
            "--header",
            "X-RateLimit-Limit: 5000",
            "--header",
            "x-ratelimit-remaining: 2",
            "--header",
            &reset,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = budget(&site, &["take", "--consumer", "backlog", "--json"]);
    assert!(out.status.success());
    let took: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(took["go"], true);
    assert_eq!(took["counted"], true);
    assert_eq!(took["left"], 1);
    assert!(
        budget(&site, &["take", "--consumer", "triage"])
            .status
            .success()
    );

    let out = site.output(&["slots", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let v: serde_json::Value = serde_json::from_str(&text).expect("slots --json");
    let credential = &v["budgets"][0];
    assert_eq!(credential["credential"], 1, "numbered");
    let core = &credential["resources"][0];
    assert_eq!(core["name"], "core");
    assert_eq!(core["limit"], 5000);
    assert_eq!(core["remaining"], 2);
    assert_eq!(core["granted"], 2);
    assert_eq!(core["left"], 0);
    assert_eq!(core["by_consumer"]["backlog"], 1);
    assert_eq!(core["by_consumer"]["triage"], 1);
    let key = std::fs::read_dir(site.slots())
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find_map(|n| {
            n.strip_prefix("github-budget-")
                .and_then(|k| k.strip_suffix(".json"))
                .map(str::to_owned)
        })
        .expect("a state file");
    let shown = String::from_utf8_lossy(&budget(&site, &["show"]).stdout).into_owned();
    assert!(shown.contains("credential #1"), "{shown}");
    for text in [&text, &shown] {
        assert!(!text.contains(&key), "never named by key: {text}");
        assert!(!text.contains(TOKEN), "the token never shows");
    }
}

#[test]
fn a_paused_credential_refuses_the_call_after_10_s_with_75() {
    let site = Site::new(None);
    let out = budget(
        &site,
        &["observe", "--status", "429", "--header", "Retry-After: 600"],
    );
    assert!(out.status.success());
    let out = budget(&site, &["take", "--consumer", "backlog", "--json"]);
    assert_eq!(out.status.code(), Some(75), "the call must not be made");
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(said["go"], false);
    assert_eq!(said["kind"], "secondary_rate_limited");
    assert_eq!(said["status"], 429);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("paused until"), "{err}");
}

#[test]
fn bad_budget_input_is_a_usage_error() {
    let site = Site::new(None);
    let out = site
        .worklane()
        .args(["budget", "take", "--consumer", "c"])
        .env_remove("GITHUB_TOKEN")
        .output_gated()
        .expect("run");
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("$GITHUB_TOKEN"));
    let out = budget(
        &site,
        &["observe", "--status", "200", "--header", "no colon"],
    );
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Name: value"));
    let out = budget(&site, &["take", "--consumer", "c", "--resource", "../x"]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn the_ledger_never_holds_a_call_back_for_its_own_trouble() {
    // A cap the config gets wrong is no reason to stop an API call.
    let site = Site::new(Some(r#"{"max_test_runs": 9}"#));
    assert_eq!(
        site.code(&["run", "--", "true"]),
        78,
        "the slot pool refuses the config"
    );
    let reset = reset_in(600);
    let args = [
        "observe",
        "--status",
        "200",
        "--header",
        "X-RateLimit-Remaining: 3",
        "--header",
        &reset,
    ];
    assert!(budget(&site, &args).status.success());
    let out = budget(&site, &["take", "--consumer", "c", "--json"]);
    assert!(out.status.success());
    let took: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(took["counted"], true, "the budget is kept all the same");

    // No slot directory to be had: the call goes, unaccounted, and says why.
    let file = site.file("not-a-dir");
    std::fs::write(&file, b"").expect("write");
    let out = site
        .worklane()
        .args(["budget", "take", "--consumer", "c", "--json"])
        .env("GITHUB_TOKEN", TOKEN)
        .env("AGENT_SLOTS_DIR", &file)
        .output_gated()
        .expect("run");
    assert!(out.status.success(), "the call may go");
    let took: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(took["go"], true);
    assert_eq!(took["counted"], false);
    assert!(
        took["unaccounted"]
            .as_str()
            .is_some_and(|w| w.contains("not-a-dir"))
    );
}

#[test]
fn a_secondary_limit_named_by_the_caller_pauses_the_credential() {
    let site = Site::new(None);
    let forbidden = [
        "observe",
        "--status",
        "403",
        "--header",
        "X-RateLimit-Remaining: 4000",
    ];
    assert!(budget(&site, &forbidden).status.success());
    let shown = |site: &Site| -> serde_json::Value {
        serde_json::from_slice(&budget(site, &["show", "--json"]).stdout).expect("json")
    };
    assert!(
        shown(&site)["budgets"][0]["paused_until"].is_null(),
        "a 403 with calls left may be a permission error: no pause"
    );
    let mut secondary = forbidden.to_vec();
    secondary.push("--secondary-limit");
    assert!(budget(&site, &secondary).status.success());
    assert!(
        shown(&site)["budgets"][0]["paused_until"].is_string(),
        "the body said secondary rate limit: paused"
    );
}
