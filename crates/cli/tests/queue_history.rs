use super::dispatcher::{enqueue, start, states};
use super::*;

fn history(site: &Site) -> Vec<serde_json::Value> {
    let out = site.output(&["queue", "ls", "--all", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("queue ls");
    doc["history"].as_array().cloned().unwrap_or_default()
}

fn log_of(site: &Site, attempt: &str) -> String {
    std::fs::read_to_string(site.slots().join(format!("queue-{attempt}.log"))).unwrap_or_default()
}

#[test]
fn an_attempt_s_log_says_its_start_end_and_status_and_the_history_keeps_it() {
    let site = Site::new(None);
    let _dispatcher = start(&site, &[]);
    let out = enqueue(&site, &["--lane", "f"], "echo failing; exit 3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    wait_until("the attempt to end", || {
        history(&site)
            .iter()
            .any(|e| e["attempt"] == attempt.as_str())
    });
    let ended = history(&site)
        .into_iter()
        .find(|e| e["attempt"] == attempt.as_str())
        .expect("ended");
    assert_eq!(
        (&ended["outcome"], &ended["status"], &ended["lane"]),
        (
            &serde_json::json!("exited"),
            &serde_json::json!(3),
            &serde_json::json!("f")
        ),
        "{ended}"
    );
    assert!(ended["started_at_ms"].as_u64().is_some(), "it ran: {ended}");
    let log = log_of(&site, &attempt);
    for part in [
        format!("start 1 of attempt {attempt} (lane f) as uid 0"),
        format!("attempt {attempt} claimed (lane lane-f.lock"),
        "failing".to_owned(),
        format!("attempt {attempt} ended after"),
        ": exit status 3".to_owned(),
        format!("attempt {attempt} exited with exit status 3"),
    ] {
        assert!(log.contains(&part), "the log says {part:?}: {log}");
    }
    let out = site.output(&["reconcile", &attempt]);
    assert_eq!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("ended at") && said.contains("exit status 3"),
        "reconcile reads the history: {said}"
    );
    let out = site.output(&["reconcile", &attempt, "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["holder"], serde_json::Value::Null, "{doc}");
    assert_eq!(doc["ended"]["status"], 3, "{doc}");
    let out = site.output(&["reconcile", "a-0123456789abcdef0123456789abcdef"]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "a made-up id is an error: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = site.output(&["queue", "ls", "--all"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains(&attempt) && text.contains("exited with exit status 3"),
        "queue ls --all shows it: {text}"
    );
}

#[test]
fn a_running_attempt_is_listed_and_cancel_halts_it_as_stop_would() {
    let site = Site::new(None);
    let _dispatcher = start(&site, &[]);
    let script = r#"trap 'echo got TERM >> "$T/term"; exit 0' TERM; echo $$ > "$T/pid"; while :; do sleep 0.05; done"#;
    let out = enqueue(&site, &["--lane", "r"], script);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    wait_until("the command", || {
        std::fs::read_to_string(site.file("pid")).is_ok_and(|t| t.ends_with('\n'))
    });
    wait_until("the row to be running", || {
        states(&site)
            .get(&attempt)
            .is_some_and(|a| a["state"] == "running")
    });
    let row = states(&site)[&attempt].clone();
    assert!(
        row["driver_pid"].as_u64().is_some(),
        "its driver's pid: {row}"
    );
    let shown = site.output(&["queue", "ls"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("running") && text.contains("driver pid ") && text.contains("since "),
        "queue ls lists it with its driver and since when: {text}"
    );
    let out = site.output(&["queue", "cancel", &attempt]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("being halted"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    wait_until("the attempt to end", || {
        history(&site)
            .iter()
            .any(|e| e["attempt"] == attempt.as_str())
    });
    // (Twice, on a slow machine: from `worklane claim`'s halt on the marker, then as the
    // dispatcher's own SIGTERM, a second later, forwarded.)
    let term = std::fs::read_to_string(site.file("term")).expect("term");
    assert!(
        term.starts_with("got TERM\n") && term.lines().all(|l| l == "got TERM"),
        "the command was sent SIGTERM, as STOP sends it: {term:?}"
    );
    let ended = history(&site)
        .into_iter()
        .find(|e| e["attempt"] == attempt.as_str())
        .expect("ended");
    assert_eq!(ended["outcome"], "cancelled", "{ended}");
    assert!(
        ended["detail"]
            .as_str()
            .is_some_and(|d| d.contains("queue cancel (uid 0)")),
        "who halted it: {ended}"
    );
    let log = log_of(&site, &attempt);
    assert!(
        log.contains("halted (cancelled by `worklane queue cancel` (uid 0)"),
        "its log says who halted it: {log}"
    );
    assert!(
        !site
            .slots()
            .join(format!("queue-{attempt}.cancel"))
            .exists(),
        "the cancel marker is gone with the attempt"
    );
    assert!(super::dispatcher::lane_free(&site, "r"), "its lane is free");
}

/// A driver that claims after the interval (as a slow driver in another language did): it
/// is halted at the expiry, the row is queued again after a backoff and its driver started
/// again, appending to the same log; the
/// row behind it runs meanwhile, nobody cancelling anything; the dispatcher's log and the
/// slots' epochs grow by a few lines and a few steps per start, not thousands a second.
#[test]
fn a_driver_that_claims_late_is_started_again_and_the_line_moves_on() {
    let site = Site::new(Some(r#"{"max_agents": 2}"#));
    let mut dispatcher = start(&site, &["--claim-interval", "1s"]);
    let stderr = dispatcher.stderr.take().expect("stderr");
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let late = format!(
        r#"echo start >> "$LANE_T/starts"; sleep 1.5; exec {} claim -- true"#,
        worklane_bin()
    );
    let out = site
        .worklane()
        .args([
            "enqueue", "--lane", "late", "--driver", "--", "sh", "-c", &late,
        ])
        .output_gated()
        .expect("enqueue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let behind = enqueue(&site, &["--lane", "behind"], r#"touch "$T/behind-ran""#);
    assert!(behind.status.success());
    wait_until("the row behind to run", || site.file("behind-ran").exists());
    let starts = || std::fs::read_to_string(site.file("starts")).map_or(0, |t| t.lines().count());
    wait_until("three starts of the late driver", || starts() >= 3);
    let log = log_of(&site, &attempt);
    for n in 1..=3 {
        assert!(
            log.contains(&format!("start {n} of attempt {attempt}")),
            "start {n} appends to the same log: {log}"
        );
    }
    // Each expiry halts the late driver (it never gets to claim) and counts as a failed
    // start, said on the row.
    let row = states(&site).remove(&attempt).expect("the late row");
    assert!(
        row["failures"].as_u64().is_some_and(|n| n >= 2)
            && row["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("did not claim it within the claim interval")),
        "each expiry is a failed start: {row}"
    );
    let out = site.output(&["queue", "cancel", &attempt]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = starts();
    let mut mentions = 0;
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(300)) {
        if line.contains(&attempt) {
            mentions += 1;
        }
    }
    assert!(
        mentions <= 3 * seen + 3,
        "a few log lines per start ({mentions} for {seen} starts)"
    );
    let epoch = std::fs::read_dir(site.slots())
        .expect("list")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| n.strip_prefix("slots.lock.epoch.")?.parse::<u64>().ok())
        .max()
        .expect("slots.lock's epoch");
    assert!(
        epoch <= 20 * (seen as u64) + 20,
        "slots.lock taken a few times per start, not in a loop: epoch {epoch} after {seen}"
    );
}

#[test]
fn ended_attempts_and_their_logs_go_after_the_retention_or_when_pruned() {
    let site = Site::new(None);
    let dispatcher = start(&site, &["--retention", "2s"]);
    let out = enqueue(&site, &["--lane", "kept"], "true");
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let log = site.slots().join(format!("queue-{attempt}.log"));
    wait_until("the attempt to end", || {
        history(&site)
            .iter()
            .any(|e| e["attempt"] == attempt.as_str())
    });
    assert!(log.exists(), "its log is kept for now");
    wait_until("the retention to pass", || !log.exists());
    assert!(
        history(&site)
            .iter()
            .all(|e| e["attempt"] != attempt.as_str()),
        "forgotten with its log"
    );
    drop(dispatcher);
    let _dispatcher = start(&site, &[]);
    let out = enqueue(&site, &["--lane", "pruned"], "true");
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let log = site.slots().join(format!("queue-{attempt}.log"));
    wait_until("the attempt to end", || {
        history(&site)
            .iter()
            .any(|e| e["attempt"] == attempt.as_str())
    });
    assert!(log.exists());
    let out = site.output(&["queue", "prune"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("forgot 1 ended attempt"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!log.exists(), "queue prune removes the log");
    assert!(history(&site).is_empty(), "and forgets the attempt");
}
