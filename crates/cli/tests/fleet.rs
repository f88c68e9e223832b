use super::*;
use worklane_testkit::etcd::Cluster;

/// `worklane ARGS -- sh -c SCRIPT` in the background with the fleet's endpoints.
fn spawn(site: &Site, cluster: &Cluster, args: &[&str], script: &str, key: &str) -> Running {
    Running::new(
        site.worklane()
            .env("WORKLANE_FLEET", cluster.endpoints())
            .args(args)
            .args(["--", "sh", "-c", script])
            .env("K", key)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn worklane"),
    )
}

fn fleet(site: &Site, cluster: &Cluster, args: &[&str]) -> Output {
    site.worklane()
        .env("WORKLANE_FLEET", cluster.endpoints())
        .args(args)
        .output_gated()
        .expect("run worklane")
}

const HOLD_EPOCH: &str = r#"echo "$WORKLANE_EPOCH $WORKLANE_HOST_EPOCH" > "$T/epoch.$K"; touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#;

#[test]
fn two_hosts_share_the_fleet_cap_and_each_holder_gets_the_fleet_epoch() {
    let cluster = Cluster::start();
    let hosts = [
        Site::new(Some(r#"{"max_agents": 3}"#)),
        Site::new(Some(r#"{"max_agents": 3}"#)),
    ];
    let set = fleet(
        &hosts[0],
        &cluster,
        &["fleet", "set-cap", "--pool", "agents", "2"],
    );
    assert!(set.status.success(), "{set:?}");
    let mut runs: Vec<(usize, String, Running)> = Vec::new();
    for i in 0..6 {
        let host = i % 2;
        let key = i.to_string();
        let run = spawn(&hosts[host], &cluster, &["run", "-n"], HOLD_EPOCH, &key);
        runs.push((host, key, run));
    }
    // Each run either holds (its command is up) or was refused (it exited).
    let mut refused = Vec::new();
    for (host, key, run) in &mut runs {
        let site = &hosts[*host];
        wait_until("each run to hold or be refused", || {
            site.file(&format!("up.{key}")).exists() || matches!(run.try_wait(), Ok(Some(_)))
        });
        if let Ok(Some(status)) = run.try_wait() {
            refused.push(status.code());
        }
    }
    assert_eq!(
        refused.len(),
        4,
        "exactly the fleet's cap of 2 hold: {refused:?}"
    );
    assert!(refused.iter().all(|c| *c == Some(75)), "busy: {refused:?}");
    let status = fleet(&hosts[1], &cluster, &["fleet", "status", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
    assert_eq!(doc["cap"], 2, "{doc}");
    assert_eq!(doc["held"], 2, "{doc}");
    let mut epochs = Vec::new();
    for (host, key, run) in &mut runs {
        let site = &hosts[*host];
        if site.file(&format!("up.{key}")).exists() {
            let text = std::fs::read_to_string(site.file(&format!("epoch.{key}"))).expect("epoch");
            let mut parts = text.split_whitespace();
            let fleet_epoch: i64 = parts
                .next()
                .and_then(|e| e.parse().ok())
                .expect("fleet epoch");
            assert!(parts.next().is_some(), "the slot's own epoch too: {text:?}");
            assert!(
                doc["keys"]
                    .as_array()
                    .expect("keys")
                    .iter()
                    .any(|k| k["epoch"] == fleet_epoch && k["holds"] == true),
                "WORKLANE_EPOCH is the fleet key's create revision: {fleet_epoch} in {doc}"
            );
            epochs.push(fleet_epoch);
            std::fs::write(site.file(&format!("release.{key}")), b"").expect("release");
            assert!(wait_exit(run, "a holder").success());
        }
    }
    assert_eq!(epochs.len(), 2);
    let after = fleet(&hosts[0], &cluster, &["fleet", "status", "--json"]);
    let after: serde_json::Value = serde_json::from_slice(&after.stdout).expect("json");
    assert_eq!(after["held"], 0, "both released: {after}");
}

#[test]
fn a_pool_without_a_cap_or_an_unreachable_fleet_refuses_and_frees_the_host_slot() {
    let cluster = Cluster::start();
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let out = fleet(&site, &cluster, &["run", "--pool", "nocap", "--", "true"]);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no cap set"),
        "{out:?}"
    );
    assert_eq!(
        site.code(&["run", "-n", "--", "true"]),
        0,
        "the host's slot was let go"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let nowhere = format!("http://127.0.0.1:{port}");
    let out = site.output(&["run", "--fleet", &nowhere, "--", "true"]);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&nowhere),
        "names the endpoints: {out:?}"
    );
    assert_eq!(site.code(&["run", "-n", "--", "true"]), 0, "let go again");
}

#[test]
fn a_fleet_role_has_one_holder_across_two_hosts() {
    let cluster = Cluster::start();
    let hosts = [Site::new(None), Site::new(None)];
    let role = ["lease", "run", "--role", "coordinator"];
    let mut first = spawn(&hosts[0], &cluster, &role, HOLD_EPOCH, "0");
    wait_until("the first holder", || hosts[0].file("up.0").exists());
    // The other host's own role file is free: only the fleet refuses.
    let refused = fleet(&hosts[1], &cluster, &[&role[..], &["--", "true"]].concat());
    assert_eq!(refused.status.code(), Some(75), "{refused:?}");
    let err = String::from_utf8_lossy(&refused.stderr);
    for part in ["coordinator", &format!("pid {}", first.id()), "since"] {
        assert!(err.contains(part), "names {part}: {err}");
    }
    let mut second = spawn(
        &hosts[1],
        &cluster,
        &[&role[..], &["--wait"]].concat(),
        HOLD_EPOCH,
        "1",
    );
    std::fs::write(hosts[0].file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut first, "the first holder").success());
    wait_until("the waiting holder on the other host", || {
        hosts[1].file("up.1").exists()
    });
    let epoch = |site: &Site, k: &str| -> i64 {
        std::fs::read_to_string(site.file(&format!("epoch.{k}")))
            .expect("epoch")
            .split_whitespace()
            .next()
            .and_then(|e| e.parse().ok())
            .expect("a fleet epoch")
    };
    assert!(
        epoch(&hosts[1], "1") > epoch(&hosts[0], "0"),
        "the fleet epoch grows across hosts"
    );
    std::fs::write(hosts[1].file("release.1"), b"").expect("release");
    assert!(wait_exit(&mut second, "the second holder").success());
}

#[test]
fn two_hosts_share_one_budget_in_the_fleet() {
    let cluster = Cluster::start();
    let hosts = [Site::new(None), Site::new(None)];
    let token = "ghp_cli_fleet_budget_not_real";
    let reset = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("now")
        .as_secs()
        + 3600)
        .to_string();
    let observed = hosts[0]
        .worklane()
        .env("WORKLANE_FLEET", cluster.endpoints())
        .env("GITHUB_TOKEN", token)
        .args([
            "budget",
            "observe",
            "--status",
            "200",
            "--header",
            "X-RateLimit-Remaining: 2",
            "--header",
            &format!("X-RateLimit-Reset: {reset}"),
            "--header",
            "X-RateLimit-Resource: core",
        ])
        .output_gated()
        .expect("observe");
    assert!(observed.status.success(), "{observed:?}");
    let take = |site: &Site| {
        site.worklane()
            .env("WORKLANE_FLEET", cluster.endpoints())
            .env("GITHUB_TOKEN", token)
            .args([
                "budget",
                "take",
                "--consumer",
                "t",
                "--wait-max",
                "0",
                "--json",
            ])
            .output_gated()
            .expect("take")
    };
    let outs = [take(&hosts[0]), take(&hosts[1]), take(&hosts[1])];
    let codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
    assert_eq!(
        codes,
        [Some(0), Some(0), Some(75)],
        "2 calls left for both hosts: {outs:?}"
    );
    let last: serde_json::Value = serde_json::from_slice(&outs[2].stdout).expect("json");
    assert_eq!(last["kind"], "rate_limited", "{last}");
    assert!(last["retry_at"].as_str().is_some(), "{last}");
    let shown = hosts[1]
        .worklane()
        .env("WORKLANE_FLEET", cluster.endpoints())
        .args(["budget", "show", "--json"])
        .output_gated()
        .expect("show");
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("json");
    let shown = &shown["budgets"];
    assert_eq!(shown[0]["resources"][0]["name"], "core", "{shown}");
    assert_eq!(shown[0]["resources"][0]["left"], 0, "{shown}");
    assert_eq!(shown[0]["resources"][0]["granted"], 2, "{shown}");
    // The hosts' own ledgers were not used.
    for site in &hosts {
        let local = site.output(&["budget", "show", "--json"]);
        let local: serde_json::Value = serde_json::from_slice(&local.stdout).expect("json");
        assert_eq!(
            local["budgets"],
            serde_json::json!([]),
            "no host ledger written: {local}"
        );
    }
}

#[test]
fn fleet_status_json_has_the_documented_shape() {
    let cluster = Cluster::start();
    let site = Site::new(None);
    let set = fleet(
        &site,
        &cluster,
        &["fleet", "set-cap", "--pool", "agents", "2"],
    );
    assert!(set.status.success(), "{set:?}");
    let mut run = spawn(&site, &cluster, &["run"], HOLD_EPOCH, "0");
    wait_until("the fleet holder", || site.file("up.0").exists());
    let out = fleet(&site, &cluster, &["fleet", "status", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    super::json_docs::check(&super::json_docs::examples(), "fleet status --json", &[doc]);
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut run, "the fleet holder").success());
}

#[test]
fn slots_and_why_show_the_fleet_and_name_it_when_it_blocks() {
    let cluster = Cluster::start();
    let site = Site::new(None);
    // No cap yet: the fleet blocks what the host would admit.
    let why = fleet(&site, &cluster, &["why", "--json"]);
    assert_eq!(why.status.code(), Some(69), "{why:?}");
    let doc: serde_json::Value = serde_json::from_slice(&why.stdout).expect("json");
    assert_eq!(doc["blocked_by"], "resource_admission", "{doc}");
    assert!(
        doc["resource_admission"]["why"]
            .as_str()
            .is_some_and(|w| w.contains("no cap set")),
        "{doc}"
    );
    let set = fleet(&site, &cluster, &["fleet", "set-cap", "1"]);
    assert!(set.status.success(), "{set:?}");
    let free = fleet(&site, &cluster, &["why"]);
    assert_eq!(free.status.code(), Some(0), "room in both: {free:?}");
    assert!(
        String::from_utf8_lossy(&free.stdout).contains("0 of 1 held"),
        "{free:?}"
    );
    let mut run = spawn(&site, &cluster, &["run"], HOLD_EPOCH, "0");
    wait_until("the fleet holder", || site.file("up.0").exists());
    let why = fleet(&site, &cluster, &["why", "--json"]);
    assert_eq!(why.status.code(), Some(75), "{why:?}");
    let doc: serde_json::Value = serde_json::from_slice(&why.stdout).expect("json");
    assert!(
        doc["resource_admission"]["why"].as_str().is_some_and(|w| w
            .contains("is full (1 of 1 held")
            && w.contains(&run.id().to_string())),
        "the fleet named, with its holder's pid: {doc}"
    );
    let slots = fleet(&site, &cluster, &["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&slots.stdout).expect("json");
    assert_eq!(doc["fleet"]["pool"], "agents", "{doc}");
    assert_eq!(doc["fleet"]["held"], 1, "{doc}");
    assert_eq!(doc["fleet"]["keys"][0]["pid"], run.id(), "{doc}");
    let text = fleet(&site, &cluster, &["slots"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("fleet pool \"agents\""),
        "{text:?}"
    );
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut run, "the fleet holder").success());
    // An etcd that does not answer never fails `slots`; it is shown.
    let nowhere = "http://127.0.0.1:9";
    let out = site.output(&["slots", "--json", "--fleet", nowhere]);
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        doc["fleet"]["error"]
            .as_str()
            .is_some_and(|e| e.contains(nowhere)),
        "{doc}"
    );
}

#[test]
fn losing_the_whole_fleet_halts_the_command_before_its_lease_can_lapse() {
    let mut cluster = Cluster::start();
    let site = Site::new(None);
    let set = fleet(&site, &cluster, &["fleet", "set-cap", "1"]);
    assert!(set.status.success(), "{set:?}");
    let mut run = spawn(
        &site,
        &cluster,
        &["run", "--fleet-ttl", "2s"],
        HOLD_EPOCH,
        "0",
    );
    wait_until("the run to hold", || site.file("up.0").exists());
    for i in 0..3 {
        cluster.kill(i);
    }
    let status = wait_exit(&mut run, "the halted run");
    assert_eq!(status.code(), Some(143), "halted with SIGTERM: {status}");
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(&mut run.stderr.take().expect("stderr"), &mut err);
    assert!(
        err.contains("fleet pool") && err.contains("unconfirmed"),
        "{err}"
    );
}
