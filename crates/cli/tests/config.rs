use super::*;
use std::os::unix::fs::PermissionsExt;

fn stdout(site: &Site, args: &[&str]) -> String {
    let out = site.output(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn file(site: &Site) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(site.slots().join("config.json")).expect("read"))
        .expect("the written config is JSON")
}

#[test]
fn an_unknown_key_is_a_config_error_naming_the_key_and_the_file() {
    let site = Site::new(Some(r#"{"max_agent": 3}"#));
    for args in [&["run", "--", "true"][..], &["config", "get", "max_agents"]] {
        let out = site.output(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{args:?}: {err}");
        assert!(err.contains("`max_agent`"), "{args:?} names the key: {err}");
        assert!(
            err.contains(&site.slots().join("config.json").display().to_string()),
            "{args:?} names the file: {err}"
        );
    }
    // A view shows it, with the command that fixes it.
    let out = site.output(&["slots"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text.contains("`max_agent`") && text.contains("fix: worklane config unset max_agent"),
        "slots names the key and the fix: {text}"
    );
    // A write keeps the file's other keys, so it refuses while the bad one is there...
    let out = site.output(&["config", "set", "max_agents", "3"]);
    assert_eq!(
        out.status.code(),
        Some(78),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        file(&site),
        serde_json::json!({"max_agent": 3}),
        "untouched"
    );
    // ...and unset removes it.
    assert!(stdout(&site, &["config", "unset", "max_agent"]).contains("removed"));
    stdout(&site, &["config", "set", "max_agents", "3"]);
    assert_eq!(stdout(&site, &["config", "get", "max_agents"]), "3\n");
}

#[test]
fn set_replaces_the_file_keeping_its_other_keys_and_get_reads_it() {
    let site = Site::new(Some(r#"{"admission": "waiter", "max_test_runs": 3}"#));
    assert_eq!(
        stdout(&site, &["config", "get", "max_agents"]),
        "2\n",
        "the default"
    );
    assert_eq!(stdout(&site, &["config", "get", "admission"]), "waiter\n");
    assert_eq!(
        stdout(&site, &["config", "get", "env_allow_prefixes"]),
        "WORKLANE_,LANE_,GIT_AUTHOR_,GIT_COMMITTER_\n",
        "a list's default, comma-separated"
    );
    let said = stdout(&site, &["config", "set", "max_agents", "5"]);
    assert!(said.contains("max_agents = 5"), "{said}");
    stdout(&site, &["config", "set", "max_test_runs", "4"]);
    // What crosses from one user's enqueue to a driver is the dispatcher's own setting,
    // never the group-writable config's.
    let refused = site.output(&["config", "set", "env_secret_words", "TOKEN,KEY"]);
    assert_eq!(refused.status.code(), Some(64), "a usage error");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("--env-secret-word"),
        "names the dispatcher's flag: {said}"
    );
    assert_eq!(
        file(&site),
        serde_json::json!({
            "admission": "waiter",
            "max_test_runs": 4,
            "max_agents": 5,
        }),
        "every other key kept"
    );
    let mode = std::fs::metadata(site.slots().join("config.json"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644, "readable by every harness");
    let names: Vec<String> = std::fs::read_dir(site.slots())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("config.json"))
        .collect();
    assert_eq!(
        names,
        ["config.json"],
        "no temp file left: replaced by rename"
    );
    assert_eq!(stdout(&site, &["config", "get", "max_agents"]), "5\n");
    let doc: serde_json::Value =
        serde_json::from_str(&stdout(&site, &["config", "get", "--json"])).expect("json");
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["exists"], true);
    assert_eq!(doc["values"]["max_agents"], 5);
    assert_eq!(doc["values"]["max_test_runs"], 4);
    assert_eq!(
        doc["set"],
        serde_json::json!(["max_agents", "max_test_runs", "admission"])
    );
    let all = stdout(&site, &["config", "get"]);
    assert!(all.contains("max_agents = 5\n"), "{all}");
    assert!(
        all.contains("env_allow_prefixes = WORKLANE_,LANE_,GIT_AUTHOR_,GIT_COMMITTER_ (default)"),
        "{all}"
    );
    // Bad values are usage errors and write nothing; unknown keys are clap's.
    let before = file(&site);
    for args in [
        &["config", "set", "max_agents", "0"][..],
        &["config", "set", "max_test_runs", "9"],
        &["config", "set", "admission", "queue"],
        &["config", "set", "env_allow_prefixes", "A,,B"],
        &["config", "set", "max_agent", "3"],
        &["config", "get", "nope"],
    ] {
        assert_eq!(site.code(args), 64, "{args:?}");
    }
    assert_eq!(file(&site), before, "nothing written by a refused set");
    // The cap written is the cap in force.
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout(&site, &["slots", "--json"]))
            .expect("json")["max_agents"],
        5
    );
}

#[test]
fn slots_says_which_config_file_is_in_force() {
    let site = Site::new(None);
    let path = site.slots().join("config.json").display().to_string();
    let doc: serde_json::Value =
        serde_json::from_str(&stdout(&site, &["slots", "--json"])).expect("json");
    assert_eq!(
        doc["config"],
        serde_json::json!({"path": path, "exists": false})
    );
    let text = stdout(&site, &["slots"]);
    assert!(
        text.contains(&format!(
            "config: {path} (absent: the defaults are in force)"
        )),
        "{text}"
    );
    // AGENT_SLOTS_CONFIG names another file: config set writes there, slots names it.
    let caps = site.file("caps.json");
    let out = site
        .worklane()
        .env("AGENT_SLOTS_CONFIG", &caps)
        .args(["config", "set", "max_agents", "4"])
        .output_gated()
        .expect("config set");
    assert!(out.status.success(), "{out:?}");
    assert!(
        !site.slots().join("config.json").exists(),
        "not the slot directory's"
    );
    let out = site
        .worklane()
        .env("AGENT_SLOTS_CONFIG", &caps)
        .args(["slots"])
        .output_gated()
        .expect("slots");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("config: {}\n", caps.display())),
        "{text}"
    );
    assert!(text.contains("agents: 0 of 4 held"), "{text}");
}
