//! `run --weight` and the config's `shares`: real processes, real users (through setpriv).

use super::*;
use std::os::unix::fs::PermissionsExt;

/// The group the slot directory is given to, so that other users can take slots in it.
const SHARED: u32 = 23_461;

/// A site whose slot directory is root's, group `SHARED`, mode 2770, with `out/` a directory
/// anyone may write (the runs of other users say what they saw there).
fn shared_site(config: &str) -> Site {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests give the directory to a group and run as other users (setpriv)"
    );
    let site = Site::new(Some(config));
    std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
        .expect("chmod");
    std::os::unix::fs::chown(site.slots(), Some(0), Some(SHARED)).expect("chown");
    std::fs::set_permissions(site.slots(), std::fs::Permissions::from_mode(0o2770)).expect("chmod");
    std::fs::create_dir(site.file("out")).expect("out");
    std::fs::set_permissions(site.file("out"), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    // One file every user's run appends to.
    std::fs::write(site.file("out/order"), "").expect("order");
    std::fs::set_permissions(
        site.file("out/order"),
        std::fs::Permissions::from_mode(0o666),
    )
    .expect("chmod");
    site
}

/// `worklane run -- sh -c SCRIPT` as `uid` (primary group `uid`, member of `SHARED`), with
/// `K` set to `key`: it appends `key` to `out/order` once it holds its slot, then runs until
/// `out/release.<key>` appears.
fn run_as(site: &Site, uid: u32, key: &str) -> Running {
    let script =
        r#"echo "$K" >> "$OUT/order"; while [ ! -e "$OUT/release.$K" ]; do sleep 0.02; done"#;
    Running::new(
        site.command("setpriv")
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                &format!("--groups={SHARED}"),
            ])
            .arg(worklane_bin())
            .args(["run", "--", "sh", "-c", script])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env_remove("AGENT_SLOTS_CONFIG")
            .env("OUT", site.file("out"))
            .env("K", key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn setpriv worklane run"),
    )
}

/// The keys in `out/order`, in the order their runs took their slots.
fn order(site: &Site) -> Vec<String> {
    std::fs::read_to_string(site.file("out/order"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// How many live entries stand in the agents' line.
fn waiting(site: &Site) -> usize {
    let out = site.output(&["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("slots --json");
    doc["line"]
        .as_array()
        .expect("line")
        .iter()
        .filter(|e| e["kind"] == "agent" && e["live"] == true)
        .count()
}

fn release(site: &Site, key: &str) {
    std::fs::write(site.file(&format!("out/release.{key}")), "").expect("release");
}

#[test]
fn an_owner_with_two_waiting_runs_is_not_behind_another_owners_twenty() {
    let site = shared_site(r#"{"max_agents": 2, "shares": {"uid:1001": 2, "uid:1002": 2}}"#);
    let mut runs = vec![run_as(&site, 1001, "h1"), run_as(&site, 1001, "h2")];
    wait_until("both slots held by uid 1001", || order(&site).len() == 2);
    for i in 1..=20 {
        runs.push(run_as(&site, 1001, &format!("w{i}")));
        wait_until("the waiter in line", || waiting(&site) == i);
    }
    for (i, key) in ["v1", "v2"].into_iter().enumerate() {
        runs.push(run_as(&site, 1002, key));
        wait_until("the waiter in line", || waiting(&site) == 21 + i);
    }
    // Each release admits one run; uid 1002's two must come within two releases each.
    let mut admitted = Vec::new();
    for (n, key) in ["h1", "h2"].into_iter().enumerate() {
        release(&site, key);
        wait_until(
            &format!("a run admitted after releasing {key}: {:?}", order(&site)),
            || order(&site).len() == 3 + n,
        );
        admitted.push(order(&site)[2 + n].clone());
    }
    let first = admitted.clone();
    release(&site, &first[0]);
    wait_until("a run admitted", || order(&site).len() == 5);
    admitted.push(order(&site)[4].clone());
    assert_eq!(
        admitted[0], "v1",
        "uid 1002, holding nothing of its share, goes first at the first release: {admitted:?}"
    );
    let v2 = admitted.iter().position(|k| k == "v2");
    assert!(
        v2.is_some_and(|at| at <= 2),
        "uid 1002's second run within two releases of its first: {admitted:?}"
    );
    assert!(
        admitted.contains(&"w1".to_owned()),
        "uid 1001's runs go in their own order, the first of them between: {admitted:?}"
    );
    // The rest end; every run completes.
    for key in order(&site) {
        release(&site, &key);
    }
    for i in 1..=20 {
        release(&site, &format!("w{i}"));
    }
    release(&site, "v2");
    for run in runs {
        let out = run.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "every run completes: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn an_owner_whose_share_is_used_is_told_so_with_what_it_holds() {
    let site = shared_site(r#"{"max_agents": 4, "shares": {"uid:1001": 1}}"#);
    let mut holder = run_as(&site, 1001, "h1");
    wait_until("uid 1001 holds its one unit", || order(&site).len() == 1);
    let out = site
        .command("setpriv")
        .args([
            "--reuid=1001",
            "--regid=1001",
            &format!("--groups={SHARED}"),
        ])
        .arg(worklane_bin())
        .args(["run", "--no-wait", "--", "true"])
        .env("AGENT_SLOTS_DIR", site.slots())
        .env_remove("AGENT_SLOTS_CONFIG")
        .stdin(Stdio::null())
        .output_gated()
        .expect("run");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{said}");
    assert!(
        said.contains("your share (uid 1001: 1 of 1) is used"),
        "names the rule and the numbers: {said}"
    );
    let why = site
        .command("setpriv")
        .args([
            "--reuid=1001",
            "--regid=1001",
            &format!("--groups={SHARED}"),
        ])
        .arg(worklane_bin())
        .arg("why")
        .env("AGENT_SLOTS_DIR", site.slots())
        .env_remove("AGENT_SLOTS_CONFIG")
        .env("GITHUB_TOKEN", "")
        .stdin(Stdio::null())
        .output_gated()
        .expect("why");
    let text = String::from_utf8_lossy(&why.stdout);
    assert!(
        text.contains("your share (uid 1001: 1 of 1) is used") && text.contains("agent-0.lock"),
        "why names the share and what the owner holds: {text}"
    );
    release(&site, "h1");
    let _ = wait_exit(&mut holder, "the holder");
}

#[test]
fn runs_of_weights_one_to_three_at_cap_four_never_hold_more_than_four_units() {
    let site = Site::new(Some(r#"{"max_agents": 4}"#));
    // Each run adds its weight to a count under flock(1) while it runs, logging the total.
    let script = r#"
bump() { flock "$T/count.lock" sh -c "$1"; }
bump 'n=$(cat "$T/n" 2>/dev/null || echo 0); n=$((n+W)); echo $n > "$T/n"; echo $n >> "$T/log"'
sleep 0.1
bump 'n=$(cat "$T/n"); echo $((n-W)) > "$T/n"'
"#;
    let weights = [3, 1, 2, 1, 1, 3, 2, 1, 2, 3, 1, 1];
    let runs: Vec<Running> = weights
        .iter()
        .map(|w| {
            Running::new(
                site.worklane()
                    .args(["run", "--weight", &w.to_string(), "--", "sh", "-c", script])
                    .env("W", w.to_string())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn_gated()
                    .expect("spawn"),
            )
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "every run completes: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let log = std::fs::read_to_string(site.file("log")).expect("log");
    let totals: Vec<u32> = log.lines().map(|l| l.parse().expect("a count")).collect();
    assert_eq!(totals.len(), weights.len(), "each run counted itself in");
    assert!(
        totals.iter().all(|&t| t <= 4),
        "never more than the cap's 4 units at once: {totals:?}"
    );
}

#[test]
fn a_weight_above_the_cap_is_a_usage_error_naming_both() {
    let site = Site::new(Some(r#"{"max_agents": 2}"#));
    let out = site.output(&["run", "--weight", "3", "--", "true"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains('3') && said.contains("2 units"), "{said}");
    let out = site.output(&["run", "--weight", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(64), "clap refuses 0: {out:?}");
}

#[test]
fn shares_in_the_config_are_checked_and_named() {
    let site = Site::new(None);
    for (shares, says) in [
        (r#"{"uid:1001": 2.5}"#, "uid:1001"),
        (r#"{"user:bob": 1}"#, "user:bob"),
        (r#"{"*": 0}"#, "*"),
    ] {
        let out = site.output(&["config", "set", "shares", shares]);
        assert_eq!(out.status.code(), Some(78), "{shares}: {out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(says) && said.contains("config"),
            "{shares}: {said}"
        );
    }
    let out = site.output(&["config", "set", "shares", r#"{"uid:1001": 1, "*": 2}"#]);
    assert!(out.status.success(), "{out:?}");
    let out = site.output(&["config", "get", "shares"]);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(got["uid:1001"], 1, "{got}");
}
