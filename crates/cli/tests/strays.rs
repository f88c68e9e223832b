//! No single stray or broken file stops the pool: each is skipped or counted as
//! PROTOCOL.md says, and `slots` and `why` name it with its fix.
use super::*;

fn json(site: &Site, args: &[&str]) -> serde_json::Value {
    let out = site.output(args);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?} prints JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn problem<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["problems"]
        .as_array()
        .expect("a problems array")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} is reported: {doc}"))
}

#[test]
fn a_stray_where_a_free_index_guard_belongs_is_skipped_and_named() {
    type Plant = fn(&Path);
    let plants: [(&str, Plant); 4] = [
        ("directory", |p| std::fs::create_dir(p).expect("mkdir")),
        ("FIFO", |p| {
            let status = Command::new("mkfifo")
                .arg(p)
                .status_gated()
                .expect("mkfifo");
            assert!(status.success());
        }),
        ("symbolic link", |p| {
            std::os::unix::fs::symlink("/etc/passwd", p).expect("symlink")
        }),
        ("non-empty file", |p| {
            std::fs::write(p, b"x").expect("write")
        }),
    ];
    for (what, plant) in plants {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let guard = site.slots().join(".agent-0.lock.flock");
        plant(&guard);
        let out = site.output(&["run", "--no-wait", "--", "true"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "a {what} at a free index's guard is skipped: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        assert!(
            site.slots().join("agent-1.lock").exists(),
            "{what}: the next index"
        );
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            75,
            "{what}: the stray is not counted, the holder is: at cap 1"
        );
        let doc = json(&site, &["slots", "--json"]);
        assert_eq!(doc["agents_held"], 1, "{what}: {doc}");
        let p = problem(&doc, ".agent-0.lock.flock");
        assert!(p["fix"].as_str().is_some_and(|f| f.contains("rm ")), "{p}");
        let why = json(&site, &["why", "--json"]);
        problem(&why, ".agent-0.lock.flock");
        std::fs::write(site.file("release.0"), b"").expect("release");
        wait_exit(&mut holder, "the holder");
    }
}

#[test]
fn a_garbage_claim_on_slots_lock_is_cleared_by_the_next_take() {
    let site = Site::new(None);
    let claim = site.slots().join("slots.lock.0123456789abcdef.claim");
    std::fs::write(&claim, b"garbage\n").expect("plant");
    let doc = json(&site, &["slots", "--json"]);
    assert!(
        problem(&doc, "slots.lock.0123456789abcdef.claim")["what"]
            .as_str()
            .is_some_and(|w| w.contains("garbage")),
        "{doc}"
    );
    let out = site.output(&["run", "--no-wait", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "not 75 for a slots.lock that looks stuck: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!claim.exists(), "the garbage claim is cleared");
}

#[test]
fn temp_files_of_killed_writers_are_removed_once_a_minute_old_unless_held() {
    let site = Site::new(None);
    let dir = site.slots();
    let old_temp = dir.join(".agent-0.lock.tmp-0123456789abcdef");
    let fresh_temp = dir.join(".slots.lock.tmp-0123456789abcdee");
    let held_temp = dir.join(".STOP.tmp-0123456789abcded");
    let old_alias = dir.join(".agent-0.lock.flock.tmp-0123456789abcdec");
    for path in [&old_temp, &fresh_temp, &held_temp, &old_alias] {
        std::fs::write(path, b"").expect("plant");
    }
    for path in [&old_temp, &held_temp, &old_alias] {
        let status = Command::new("touch")
            .args(["-d", "2 minutes ago"])
            .arg(path)
            .status_gated()
            .expect("touch");
        assert!(status.success());
    }
    // A writer stopped mid-write still holds its temp file's lock.
    let mut writer = Running::new(
        site.command("flock")
            .arg(&held_temp)
            .args(["sh", "-c", r#"touch "$T/locked"; exec sleep 60"#])
            .env("T", site.temp.path())
            .spawn_gated()
            .expect("flock"),
    );
    wait_until("the writer's lock", || site.file("locked").exists());
    let doc = json(&site, &["slots", "--json"]);
    problem(&doc, ".agent-0.lock.tmp-0123456789abcdef");
    assert_eq!(site.code(&["run", "--", "true"]), 0);
    assert!(!old_temp.exists(), "an old temp nobody holds is removed");
    assert!(!old_alias.exists(), "an old guard temp alias is removed");
    assert!(fresh_temp.exists(), "a young temp may be a writer at work");
    assert!(held_temp.exists(), "a held temp belongs to a live writer");
    let _ = writer.kill();
    let _ = writer.wait();
}

#[test]
fn an_exhausted_epoch_skips_its_index_and_is_named() {
    let site = Site::new(None);
    let max = u64::MAX.to_string();
    std::fs::write(site.slots().join(format!("agent-0.lock.epoch.{max}")), b"").expect("plant");
    let mut holder = site.spawn(&["run"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    assert!(
        site.slots().join("agent-1.lock").exists(),
        "index 0 is skipped"
    );
    let doc = json(&site, &["slots", "--json"]);
    let p = problem(&doc, &format!("agent-0.lock.epoch.{max}"));
    assert!(
        p["what"].as_str().is_some_and(|w| w.contains("epoch")),
        "{p}"
    );
    std::fs::write(site.file("release.0"), b"").expect("release");
    wait_exit(&mut holder, "the holder");
    std::fs::write(site.slots().join(format!("slots.lock.epoch.{max}")), b"").expect("plant");
    let out = site.output(&["run", "--no-wait", "--", "true"]);
    assert_ne!(
        out.status.code(),
        Some(0),
        "slots.lock can no longer be taken"
    );
    let why = json(&site, &["why", "--json"]);
    assert_eq!(why["resource_admission"]["blocks"], true, "{why}");
}

#[test]
fn a_broken_guard_of_slots_lock_fails_takes_with_its_fix_and_why_says_so() {
    let site = Site::new(None);
    std::fs::create_dir(site.slots().join(".slots.lock.flock")).expect("mkdir");
    let out = site.output(&["run", "--no-wait", "--", "true"]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "nobody can count slots");
    assert!(text.contains(".slots.lock.flock"), "names the file: {text}");
    let why = json(&site, &["why", "--json"]);
    assert_eq!(why["resource_admission"]["blocks"], true, "{why}");
    assert!(
        why["resource_admission"]["why"]
            .as_str()
            .is_some_and(|w| w.contains("rm -r")),
        "{why}"
    );
    assert_eq!(
        site.code(&["run", "--kind", "full-run", "--no-wait", "--", "true"]),
        0,
        "the full run does not count under slots.lock"
    );
    std::fs::remove_dir(site.slots().join(".slots.lock.flock")).expect("the fix");
    assert_eq!(site.code(&["run", "--no-wait", "--", "true"]), 0, "fixed");
}
