use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

const OTHER: u32 = 1000;
pub(super) const SHARED: u32 = 23_456;

pub(super) fn root_only() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test gives files to other users (chown) and drops to one (setpriv), so it \
             runs as root"
    );
}

#[test]
fn a_squatted_or_world_writable_directory_exits_78_naming_owner_mode_and_fix() {
    root_only();
    let site = Site::new(None);
    let slots = site.slots();
    std::os::unix::fs::chown(&slots, Some(OTHER), Some(OTHER)).expect("chown");
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    for args in [
        &["run", "--", "true"][..],
        &["stop-all", "squatted"],
        &["slots"],
        &["set-test-slots", "3"],
    ] {
        let out = site.output(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{args:?}: {err}");
        for part in ["uid 1000", "0777", "rm -r"] {
            assert!(err.contains(part), "{args:?} names {part:?}: {err}");
        }
    }
    assert!(
        std::fs::read_dir(&slots).expect("list").next().is_none(),
        "nothing was written into it"
    );
    std::os::unix::fs::chown(&slots, Some(0), Some(0)).expect("chown");
    let out = site.output(&["run", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "root's, but 0777: {err}");
    assert!(err.contains("chmod o-w"), "the fix: {err}");
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
    assert_eq!(site.code(&["run", "--", "true"]), 0, "fixed");
}

#[test]
fn a_symbolic_link_exits_78_in_every_spelling() {
    let site = Site::new(None);
    let link = site.file("link");
    std::os::unix::fs::symlink(site.slots(), &link).expect("symlink");
    let link = link.display().to_string();
    for spelling in [link.clone(), format!("{link}/"), format!("{link}/.")] {
        let out = site
            .worklane()
            .args(["run", "--", "true"])
            .env("AGENT_SLOTS_DIR", &spelling)
            .output_gated()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{spelling}: {err}");
        assert!(err.contains("symbolic link"), "{spelling}: {err}");
    }
}

#[test]
fn a_guard_only_its_owner_can_open_is_skipped_by_other_users() {
    root_only();
    let site = Site::new(Some(r#"{"max_agents": 2}"#));
    let slots = site.slots();
    std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
        .expect("chmod");
    std::os::unix::fs::chown(&slots, Some(0), Some(SHARED)).expect("chown");
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
    // root's guard of index 0, mode 0600: nobody else can open it.
    let guard = slots.join(".agent-0.lock.flock");
    std::fs::write(&guard, b"").expect("guard");
    std::fs::set_permissions(&guard, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let out = as_member(&site, &["run", "--no-wait", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the index is skipped, not an error for every take: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = site.output(&["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("json ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let named = doc["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .any(|p| {
            p["name"] == ".agent-0.lock.flock"
                && p["fix"].as_str().is_some_and(|f| f.contains("chmod"))
        });
    assert!(named, "slots names it with its fix: {doc}");
}

/// Runs `worklane budget ARGS` as user 65534, primary group 12345, member of `SHARED`.
fn budget_as_member(site: &Site, args: &[&str]) -> Output {
    let mut all = vec!["budget"];
    all.extend_from_slice(args);
    as_member(site, &all)
}

/// Runs `worklane ARGS` as that member.
pub(super) fn as_member(site: &Site, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=12345",
            &format!("--groups={SHARED}"),
        ])
        .arg(worklane_bin())
        .args(args)
        .env("AGENT_SLOTS_DIR", site.slots())
        .env("WORKLANE_STATE_DIR", site.state())
        .env_remove("AGENT_SLOTS_CONFIG")
        .env("GITHUB_TOKEN", "ghp_cli_test_token_not_real")
        .stdin(Stdio::null())
        .output_gated()
        .expect("run setpriv")
}

#[test]
fn a_member_that_cannot_read_the_budget_is_told_loudly_and_replaces_nothing() {
    root_only();
    let site = Site::new(None);
    let slots = site.slots();
    std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
        .expect("chmod");
    std::os::unix::fs::chown(&slots, None, Some(SHARED)).expect("chgrp");
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
    // Root spends the window; its state then loses the group (as a state written before
    // the directory was setgid did), so the member cannot read it.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let reset = format!("X-RateLimit-Reset: {}", now + 600);
    let out = site
        .worklane()
        .args(["budget", "observe", "--status", "200"])
        .args(["--header", "X-RateLimit-Remaining: 0", "--header", &reset])
        .env("GITHUB_TOKEN", "ghp_cli_test_token_not_real")
        .output_gated()
        .expect("observe");
    assert!(out.status.success());
    let state = std::fs::read_dir(&slots)
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("a state file");
    assert_eq!(
        std::fs::metadata(&state).expect("stat").gid(),
        SHARED,
        "written with the directory's group"
    );
    std::os::unix::fs::chown(&state, None, Some(0)).expect("chgrp");
    let before = std::fs::read(&state).expect("read");

    let out = budget_as_member(&site, &["take", "--consumer", "member", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the call may go: {err}");
    let took: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(took["go"], true);
    assert_eq!(took["counted"], false);
    assert!(
        took["unaccounted"]
            .as_str()
            .is_some_and(|w| w.contains("cannot read")),
        "--json says why: {took}"
    );
    assert!(
        err.contains("unaccounted") && err.contains("cannot read"),
        "and stderr says it too: {err}"
    );
    let out = budget_as_member(&site, &["take", "--consumer", "member"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success());
    assert!(err.contains("cannot read"), "loud without --json: {err}");
    let out = as_member(&site, &["why", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("why --json");
    let quota = &doc["provider_quota"];
    assert_eq!(quota["blocks"], false, "the call would go: {doc}");
    assert!(
        quota.to_string().contains("unaccounted"),
        "but `why` says it would be unaccounted: {quota}"
    );

    let out = budget_as_member(
        &site,
        &[
            "observe",
            "--status",
            "200",
            "--header",
            "X-RateLimit-Remaining: 4999",
            "--header",
            &reset,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success());
    assert!(
        err.contains("not recorded") && err.contains("cannot read"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&state).expect("read"),
        before,
        "the state the member could not read is not replaced"
    );
}
