use super::*;

fn why(site: &Site, args: &[&str], token: Option<&str>) -> (Option<i32>, serde_json::Value) {
    let mut cmd = site.worklane();
    cmd.arg("why").args(args).arg("--json");
    match token {
        Some(t) => cmd.env("GITHUB_TOKEN", t),
        None => cmd.env_remove("GITHUB_TOKEN"),
    };
    let out = cmd.output_gated().expect("run worklane why");
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "why --json: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), doc)
}

/// Records a secondary limit (Retry-After 600 s) for `token`'s budget.
fn pause_budget(site: &Site, token: &str) {
    let observed = site
        .worklane()
        .args(["budget", "observe", "--status", "429"])
        .args(["--header", "Retry-After: 600"])
        .env("GITHUB_TOKEN", token)
        .status_gated()
        .expect("observe");
    assert!(observed.success());
}

#[test]
fn nothing_blocks_on_an_idle_machine_and_release_is_never_decided() {
    let site = Site::new(None);
    let (code, doc) = why(&site, &[], None);
    assert_eq!(code, Some(0));
    assert!(doc["blocked_by"].is_null());
    assert_eq!(doc["resource_admission"]["blocks"], false);
    assert!(
        doc["provider_quota"]["blocks"].is_null(),
        "no token: not asked"
    );
    assert!(doc["task_ownership"]["blocks"].is_null());
    assert_eq!(doc["release_authority"]["decided_here"], false);
    assert!(doc["release_authority"]["blocks"].is_null());
    let (_, doc) = why(&site, &[], Some(""));
    assert!(
        doc["provider_quota"]["blocks"].is_null(),
        "an empty token is no token"
    );
    let out = site.output(&["why", "--resource", "a b"]);
    assert_eq!(out.status.code(), Some(64), "not a resource name");
}

#[test]
fn stop_and_the_cap_block_admission_with_their_codes() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let (code, doc) = why(&site, &[], None);
    assert_eq!(code, Some(75), "at cap: busy");
    assert_eq!(doc["blocked_by"], "resource_admission");
    assert!(
        doc["resource_admission"]["why"]
            .as_str()
            .is_some_and(|w| w.contains("1 of 1")),
        "{doc}"
    );
    let (code, _) = why(&site, &["--kind", "test"], None);
    assert_eq!(code, Some(0), "the test-run cap is apart");
    assert_eq!(site.code(&["stop-all", "drill"]), 0);
    let (code, doc) = why(&site, &["--kind", "test"], None);
    assert_eq!(code, Some(69), "STOP refuses every kind");
    assert!(
        doc["resource_admission"]["why"]
            .as_str()
            .is_some_and(|w| w.contains("drill")),
        "{doc}"
    );
    wait_exit(&mut holder, "the halted holder");
    assert_eq!(site.code(&["resume-all"]), 0);
}

#[test]
fn a_paused_budget_blocks_the_quota_at_once() {
    let site = Site::new(None);
    pause_budget(&site, "ghp_why_token");
    // (A take would wait 10 s here; `why` reads the state and answers.)
    let (code, doc) = why(&site, &[], Some("ghp_why_token"));
    assert_eq!(code, Some(75));
    assert_eq!(doc["blocked_by"], "provider_quota");
    assert!(
        doc["provider_quota"]["why"]
            .as_str()
            .is_some_and(|w| w.contains("secondary_rate_limited")),
        "{doc}"
    );
    let (code, _) = why(&site, &[], Some("another token"));
    assert_eq!(code, Some(0), "another credential has its own budget");
}

#[test]
fn a_held_role_blocks_ownership_and_names_its_holder() {
    let site = Site::new(None);
    let mut holder = site.spawn(
        &["lease", "run", "--role", "planner"],
        r#"touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#,
        "0",
    );
    wait_until("the role holder", || site.file("up.0").exists());
    let (code, doc) = why(&site, &["--role", "planner"], None);
    assert_eq!(code, Some(75));
    assert_eq!(doc["blocked_by"], "task_ownership");
    let said = doc["task_ownership"]["why"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(said.contains(&format!("pid {}", holder.id())), "{said}");
    let (code, _) = why(&site, &["--role", "reviewer"], None);
    assert_eq!(code, Some(0), "another role is free");
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the role holder").success());
    let (code, _) = why(&site, &["--role", "planner"], None);
    assert_eq!(code, Some(0), "released");
}

#[test]
fn stop_comes_before_the_quota_and_any_lock_can_be_asked_about() {
    let site = Site::new(None);
    pause_budget(&site, "ghp_why_token");
    assert_eq!(site.code(&["stop-all", "drill"]), 0);
    let (code, doc) = why(&site, &[], Some("ghp_why_token"));
    assert_eq!(code, Some(69), "the first blocker in order: admission");
    assert_eq!(doc["blocked_by"], "resource_admission");
    assert_eq!(doc["provider_quota"]["blocks"], true, "both are reported");
    assert_eq!(site.code(&["resume-all"]), 0);

    // A lease of the operator's own naming, and a bare guard held without a record.
    let mut holder = site.spawn(
        &["lease", "run", "--role", "x"],
        r#"touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#,
        "0",
    );
    wait_until("the role holder", || site.file("up.0").exists());
    std::fs::rename(
        site.slots().join("role-x.lease"),
        site.slots().join("deploy.lease"),
    )
    .expect("rename the fresh lease");
    let (code, doc) = why(&site, &["--lock", "deploy.lease"], None);
    assert_eq!(code, Some(75), "a fresh lease of any name blocks: {doc}");
    // flock(1) holds the guard for `cat`, which says so once it runs (the lock taken) and
    // ends when we close its input: killing flock alone would leave its command behind,
    // still holding the lock.
    let mut guard_holder = site
        .command("flock")
        .arg(site.slots().join(".bare.lock.flock"))
        .args(["sh", "-c", "echo held; exec cat >/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn_gated()
        .expect("flock");
    let mut line = String::new();
    std::io::BufReader::new(guard_holder.stdout.as_mut().expect("flock's stdout"))
        .read_line(&mut line)
        .expect("read flock's report");
    assert_eq!(line.trim(), "held", "flock(1) must report the guard held");
    let (code, doc) = why(&site, &["--lock", "bare.lock"], None);
    assert_eq!(
        code,
        Some(75),
        "a held guard without a record blocks: {doc}"
    );
    drop(guard_holder.stdin.take());
    let status = guard_holder.wait().expect("wait for flock");
    assert!(status.success(), "flock and its cat end cleanly: {status}");
    let out = site.output(&["why", "--lock", "../etc/passwd"]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "not a file of the slot directory"
    );
    std::fs::write(site.file("release.0"), b"").expect("release");
    let _ = wait_exit(&mut holder, "the role holder");
}
