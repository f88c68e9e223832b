//! A cgroup per run (cgroup v2, as root on this machine's unified hierarchy): a daemon a
//! command leaves keeps its slot and `stop-all` ends it, also after its supervisor was
//! SIGKILLed; the slot is free once the cgroup empties; a busy command's CPU time shows in
//! `slots --json`; a run without a cgroup of its own (an unprivileged user, no delegated
//! subtree) still works, and `slots` says containment is off and why.

use super::queue_rights::{as_member, shared_site};
use super::*;

/// A daemon that leaves the command's process group and session and closes every descriptor
/// it inherited (the slot's guard too), as dev servers and watchers do: only the run's cgroup
/// still ties it to the run.
const DAEMON: &str = r#"setsid bash -c 'for fd in $(seq 3 63); do eval "exec $fd>&-"; done 2>/dev/null; exec 0<&- 1>&- 2>&-; echo $$ > "$T/daemon.tmp"; mv "$T/daemon.tmp" "$T/daemon"; while :; do sleep 0.1; done' &"#;

fn slots_json(site: &Site) -> serde_json::Value {
    let out = site.output(&["slots", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Containment must be on here: the tests run as root on a machine with cgroup v2.
fn contained(site: &Site) {
    let doc = slots_json(site);
    assert_eq!(
        doc["containment"]["on"], true,
        "cgroup v2 containment on this machine: {}",
        doc["containment"]
    );
}

fn daemon_pid(site: &Site) -> i32 {
    wait_until("the daemon", || site.file("daemon").exists());
    std::fs::read_to_string(site.file("daemon"))
        .expect("daemon pid")
        .trim()
        .parse()
        .expect("a pid")
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.contains(") Z ") && !s.contains(") X "))
}

fn held(site: &Site) -> u64 {
    slots_json(site)["agents_held"]
        .as_u64()
        .expect("agents_held")
}

#[test]
fn a_daemon_a_command_leaves_keeps_its_slot_until_stop_all_ends_it() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    contained(&site);
    let out = site
        .worklane()
        .args([
            "run",
            "--",
            "sh",
            "-c",
            &format!("{DAEMON} sleep 0.2; exit 0"),
        ])
        .env("T", site.file(""))
        .output_gated()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("still run in its cgroup"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let daemon = daemon_pid(&site);
    assert!(alive(daemon));
    let doc = slots_json(&site);
    assert_eq!(doc["agents_held"], 1, "the daemon keeps the slot: {doc}");
    let cgroup = &doc["slots"][0]["cgroup"];
    assert!(
        cgroup["procs"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p.as_i64() == Some(i64::from(daemon)))),
        "slots lists what still runs in the run's cgroup: {doc}"
    );
    assert_eq!(
        site.code(&["run", "-n", "--", "true"]),
        75,
        "the cap counts the daemon's slot"
    );
    let stop = site.output(&["stop-all", "daemon", "left"]);
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    wait_until("the daemon ended by stop-all", || !alive(daemon));
    wait_until("the slot free once the cgroup is empty", || {
        held(&site) == 0
    });
    assert_eq!(site.code(&["resume-all"]), 0);
    assert_eq!(site.code(&["run", "-n", "--", "true"]), 0, "free again");
}

#[test]
fn a_killed_supervisor_s_cgroup_is_reached_by_stop_all() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    contained(&site);
    let script = format!(r#"{DAEMON} touch "$T/up.$K"; while :; do sleep 0.1; done"#);
    let mut holder = site.spawn(&["run"], &script, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let daemon = daemon_pid(&site);
    super::jobs::sigkill(holder.id());
    let _ = wait_exit(&mut holder, "the killed supervisor");
    // The command got SIGTERM from the kernel (its supervisor died); the daemon left its
    // group and session, and runs on in the run's cgroup, holding the slot.
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(daemon), "the daemon outlived its supervisor");
    assert_eq!(held(&site), 1, "its slot stays held");
    let stop = site.output(&["stop-all", "supervisor", "gone"]);
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    assert!(!alive(daemon), "stop-all ended it before it returned");
    wait_until("the slot free", || held(&site) == 0);
    assert_eq!(site.code(&["resume-all"]), 0);
}

#[test]
fn a_busy_command_s_cpu_time_shows_in_slots() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    contained(&site);
    // A fixed amount of work, not a span of wall time (a loaded machine gives a busy loop of
    // a second far less CPU), and the shell's own account of the CPU it used (`times`), which
    // the cgroup's must cover.
    let script = r#"i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; times > "$T/times.$K"; touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.05; done"#;
    let mut holder = site.spawn(&["run"], script, "0");
    wait_until("the busy part done", || site.file("up.0").exists());
    let used = shell_cpu_usec(&std::fs::read_to_string(site.file("times.0")).expect("times"));
    assert!(used >= 50_000, "the loop used CPU: {used} µs");
    let doc = slots_json(&site);
    let cpu = doc["slots"][0]["cgroup"]["cpu_usec"]
        .as_u64()
        .expect("cpu_usec");
    // `times` rounds to the clock tick (10 ms) and the cgroup counts in µs.
    assert!(
        cpu + 10_000 >= used,
        "the cgroup counts what the shell used ({used} µs): {cpu} µs: {doc}"
    );
    let metrics = String::from_utf8_lossy(&site.output(&["metrics"]).stdout).into_owned();
    let seconds: f64 = metrics
        .lines()
        .find(|l| {
            l.starts_with("worklane_slot_cpu_seconds{") && l.contains("slot=\"agent-0.lock\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("the slot's CPU time in metrics: {metrics}"));
    assert!(
        seconds * 1e6 + 10_000.0 >= used as f64,
        "{seconds} s, {used} µs"
    );
    super::journal::promtool_lint(&metrics);
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    assert_eq!(held(&site), 0);
    let released: Vec<serde_json::Value> =
        std::fs::read_to_string(site.slots().join("journal.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|e: &serde_json::Value| e["kind"] == "slot-released")
            .collect();
    assert_eq!(released.len(), 1, "{released:?}");
    assert!(
        released[0]["cpu_usec"]
            .as_u64()
            .is_some_and(|us| us + 10_000 >= used),
        "the release says what the run used ({used} µs): {released:?}"
    );
}

/// The user and system time the shell itself used, in µs, from the first line of `times`
/// (`0m0.460000s 0m0.004000s`, dash's and bash's shape).
fn shell_cpu_usec(times: &str) -> u64 {
    let first = times.lines().next().unwrap_or_default();
    first
        .split_whitespace()
        .map(|t| {
            let (m, s) = t
                .trim_end_matches('s')
                .split_once('m')
                .unwrap_or_else(|| panic!("a time of `times`: {times:?}"));
            let m: f64 = m.parse().expect("minutes");
            let s: f64 = s.parse().expect("seconds");
            ((m * 60.0 + s) * 1e6) as u64
        })
        .sum()
}

#[test]
fn without_a_delegated_subtree_a_run_works_and_containment_is_said_off() {
    let site = shared_site(Some(r#"{"max_agents": 1}"#));
    let out = as_member(&site)
        .args(["run", "--", "true"])
        .output_gated()
        .expect("run as the member");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let slots = as_member(&site)
        .arg("slots")
        .output_gated()
        .expect("slots as the member");
    let text = String::from_utf8_lossy(&slots.stdout);
    assert!(
        text.contains("containment: off (") && text.contains("may not create cgroups"),
        "{text}"
    );
    let why = as_member(&site)
        .arg("why")
        .output_gated()
        .expect("why as the member");
    let text = String::from_utf8_lossy(&why.stdout);
    assert!(text.contains("containment: off ("), "{text}");
}

#[test]
fn kill_tree_on_exit_ends_what_the_command_left_with_it() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    contained(&site);
    let out = site
        .worklane()
        .args([
            "run",
            "--kill-tree-on-exit",
            "--",
            "sh",
            "-c",
            &format!(r#"{DAEMON} while [ ! -e "$T/daemon" ]; do sleep 0.02; done; exit 3"#),
        ])
        .env("T", site.file(""))
        .output_gated()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(3),
        "the command's own status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let daemon = daemon_pid(&site);
    assert!(!alive(daemon), "the daemon ended with the command");
    assert_eq!(held(&site), 0, "the slot is free at once");
    assert_eq!(site.code(&["run", "-n", "--", "true"]), 0);
}

/// `--memory-max` and `--cpu-max` are written to the run's cgroup where those controllers
/// are enabled; where they are not (this machine's unified hierarchy has none), the run says
/// what is unavailable and why, and goes on: a take never fails for want of them.
#[test]
fn limits_are_set_where_the_hierarchy_gives_them_and_said_unavailable_elsewhere() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    contained(&site);
    let out = site
        .worklane()
        .args(["run", "--memory-max", "100M", "--cpu-max", "0.5", "--", "sh", "-c"])
        .arg(
            r#"m=$(awk -F' - ' '$2 ~ /^cgroup2 / {split($1, f, " "); print f[5]; exit}' /proc/self/mountinfo); cg=$(sed -n 's/^0:://p' /proc/self/cgroup); cat "$m$cg/memory.max" 2>/dev/null || echo none"#,
        )
        .output_gated()
        .expect("run");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let seen = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if said.contains("memory.max is unavailable") {
        assert_eq!(seen, "none", "no memory controller here: {said}");
        assert!(said.contains("cpu.max is unavailable"), "{said}");
    } else {
        assert_eq!(
            seen, "104857600",
            "the limit is on the run's cgroup: {said}"
        );
    }
}

/// The config's `max_memory` and `max_cpu` limit a kind's runs as `--memory-max` and
/// `--cpu-max` do; a bad value is refused by `config set`, naming the key.
#[test]
fn the_config_limits_a_kind_s_runs() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    contained(&site);
    let bad = site.output(&["config", "set", "max_memory", r#"{"agents": 1}"#]);
    assert_eq!(
        bad.status.code(),
        Some(78),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("max_memory"));
    assert_eq!(
        site.code(&["config", "set", "max_memory", r#"{"agent": 104857600}"#]),
        0
    );
    assert_eq!(
        site.code(&["config", "set", "max_cpu", r#"{"test": 0.5}"#]),
        0
    );
    // Each run prints its cgroup's memory.max and cpu.max ("none" where there is none).
    let limits = |kind: &str| {
        let out = site
            .worklane()
            .args(["run", "--kind", kind, "--", "sh", "-c"])
            .arg(
                r#"m=$(awk -F' - ' '$2 ~ /^cgroup2 / {split($1, f, " "); print f[5]; exit}' /proc/self/mountinfo); cg=$(sed -n 's/^0:://p' /proc/self/cgroup); for f in memory.max cpu.max; do cat "$m$cg/$f" 2>/dev/null || echo none; done"#,
            )
            .output_gated()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (seen, said) = limits("agent");
    if said.contains("memory.max is unavailable") {
        assert!(
            !said.contains("cpu.max"),
            "the agent's memory limit only: {said}"
        );
    } else {
        assert!(seen.starts_with("104857600\n"), "{seen} {said}");
    }
    let (seen, said) = limits("test");
    if said.contains("cpu.max is unavailable") {
        assert!(
            !said.contains("memory.max"),
            "the test runs' CPU limit only: {said}"
        );
    } else {
        assert!(seen.ends_with("50000 100000\n"), "{seen} {said}");
    }
}

/// `--status-fd`'s `taken` comes once the hold is whole: the record names the run's cgroup,
/// `protocol.json` declares `cgroups`, and `slots.lock` (taken again for that declaration) is
/// no longer held, so a harness that looks at the directory on `taken` sees the slot as it
/// stays. (CI's conformance run once looked in the moment between and found `slots.lock`.)
#[test]
fn taken_is_said_once_the_record_names_the_cgroup() {
    use std::io::{BufRead, Write};
    let site = Site::new(None);
    contained(&site);
    let mut run = Running::new(
        site.command("sh")
            .args(["-c", r#"exec "$0" "$@" 3>&1 1>/dev/null"#])
            .arg(worklane_bin())
            .args(["run", "--status-fd", "3", "--", "cat"])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("worklane"),
    );
    let mut events = std::io::BufReader::new(run.stdout.take().expect("stdout"));
    let mut line = String::new();
    events.read_line(&mut line).expect("the first event");
    // Looked at at once, before anything else can happen.
    let record = std::fs::read_to_string(site.slots().join("agent-0.lock"));
    let counting = site.slots().join("slots.lock").exists();
    let protocol = std::fs::read_to_string(site.slots().join("protocol.json"));
    let event: serde_json::Value = serde_json::from_str(&line).expect("json");
    assert_eq!(event["event"], "taken", "{line}");
    let record: serde_json::Value =
        serde_json::from_str(&record.expect("agent-0.lock")).expect("a record");
    assert!(
        record["cgroup"].as_str().is_some_and(|c| !c.is_empty()),
        "the record names its cgroup when `taken` is said: {record}"
    );
    assert!(!counting, "slots.lock is released when `taken` is said");
    assert!(
        protocol.expect("protocol.json").contains("\"cgroups\""),
        "cgroups declared when `taken` is said"
    );
    drop(run.stdin.take().expect("stdin").write_all(b""));
    let out = run.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
