//! The waiting line on real processes: every waiting `worklane run` stands in one order,
//! by priority then arrival, and only the head takes a free slot.
use super::*;

/// The entries of the agents' line in the slot directory (their record names).
fn entries(site: &Site) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(site.slots())
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("line-agent.") && n.split('.').count() == 4)
        .collect();
    names.sort();
    names
}

/// Everything the line leaves in the directory: entries, their epochs and guards.
fn line_files(site: &Site) -> Vec<String> {
    std::fs::read_dir(site.slots())
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("line-") || n.starts_with(".line-"))
        .collect()
}

const RECORD: &str = r#"echo "$K" >> "$T/order""#;

/// Starts a waiting run of key `key` and waits until it stands in line (`in_line` entries).
fn join(site: &Site, args: &[&str], key: &str, in_line: usize) -> Running {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    let waiter = site.spawn(&all, RECORD, key);
    wait_until(&format!("waiter {key} in line"), || {
        entries(site).len() == in_line
    });
    waiter
}

fn order(site: &Site) -> Vec<String> {
    std::fs::read_to_string(site.file("order"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn twenty_waiters_started_in_turn_at_cap_1_are_admitted_in_arrival_order() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "h");
    wait_until("the holder", || site.file("up.h").exists());
    let waiters: Vec<Running> = (1..=20)
        .map(|i| join(&site, &[], &i.to_string(), i))
        .collect();
    std::fs::write(site.file("release.h"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    for w in waiters {
        let out = w.wait_with_output().expect("a waiter");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let expected: Vec<String> = (1..=20).map(|i| i.to_string()).collect();
    assert_eq!(order(&site), expected, "exactly in arrival order");
    assert!(line_files(&site).is_empty(), "{:?}", line_files(&site));
}

#[test]
fn a_later_waiter_with_a_higher_priority_goes_first() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "h");
    wait_until("the holder", || site.file("up.h").exists());
    let mut low = join(&site, &[], "low", 1);
    let mut negative = join(&site, &["--priority", "-3"], "negative", 2);
    let mut high = join(&site, &["--priority", "5"], "high", 3);
    // Seen from outside: the line in order, with each waiter's pid.
    let out = site.output(&["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("slots --json");
    let line = doc["line"].as_array().expect("line");
    let seen: Vec<(u64, i64, u64)> = line
        .iter()
        .map(|w| {
            (
                w["position"].as_u64().expect("live"),
                w["priority"].as_i64().expect("priority"),
                w["pid"].as_u64().expect("pid"),
            )
        })
        .collect();
    let pid = |w: &Running| u64::from(w.id());
    assert_eq!(
        seen,
        [
            (1, 5, pid(&high)),
            (2, 0, pid(&low)),
            (3, -3, pid(&negative))
        ],
        "{doc}"
    );
    let why = site.output(&["why"]);
    let text = String::from_utf8_lossy(&why.stdout);
    assert!(
        text.contains(&format!("3 waiting in line, first pid {}", high.id())),
        "why names who is first: {text}"
    );
    // A run that does not wait is refused while waiters of its priority stand in line.
    let out = site.output(&["run", "--no-wait", "--", "true"]);
    assert_eq!(out.status.code(), Some(75));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("waiting in line before it"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(site.file("release.h"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    for w in [&mut low, &mut negative, &mut high] {
        assert!(wait_exit(w, "a waiter").success());
    }
    assert_eq!(order(&site), ["high", "low", "negative"]);
}

#[test]
fn a_sigkilled_waiter_at_the_head_is_skipped_and_a_timed_out_one_leaves() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "h");
    wait_until("the holder", || site.file("up.h").exists());
    let mut head = join(&site, &[], "head", 1);
    let mut second = join(&site, &[], "second", 2);
    let mut impatient = join(&site, &["--timeout", "1s"], "impatient", 3);
    let mut last = join(&site, &[], "last", 4);
    let out = wait_exit(&mut impatient, "the impatient waiter");
    assert_eq!(out.code(), Some(75), "a timed out wait exits 75");
    wait_until("the impatient waiter's entry to go", || {
        entries(&site).len() == 3
    });
    head.kill().expect("SIGKILL the head");
    head.wait().expect("reap");
    // Its entry stays until a waiter behind it looks (at the latest 250 ms on) and
    // retires it; the release below may come first.
    std::fs::write(site.file("release.h"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    for w in [&mut second, &mut last] {
        assert!(wait_exit(w, "a waiter").success());
    }
    assert_eq!(
        order(&site),
        ["second", "last"],
        "the rest keep their order"
    );
    assert!(
        line_files(&site).is_empty(),
        "the dead entry was retired: {:?}",
        line_files(&site)
    );
}

#[test]
fn runs_and_dispatched_rows_at_one_cap_interleave_in_line_order() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let _dispatcher = super::dispatcher::start(&site, &[]);
    let mut holder = site.spawn(&["run"], HOLD, "h");
    wait_until("the holder", || site.file("up.h").exists());
    let enqueue = |key: &str| {
        let out = site
            .worklane()
            .args(["enqueue", "--", "sh", "-c"])
            .arg(driven(&format!(r#"echo {key} >> "$T/order""#)))
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // Row A, then a waiting run R, then row B: one line, A R B.
    enqueue("rowA");
    wait_until("row A standing in line", || entries(&site).len() == 1);
    let mut run = join(&site, &[], "run", 2);
    enqueue("rowB");
    assert_eq!(
        entries(&site).len(),
        2,
        "the dispatcher stands once, for its first row"
    );
    std::fs::write(site.file("release.h"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    assert!(wait_exit(&mut run, "the run").success());
    wait_until("all three", || order(&site).len() == 3);
    assert_eq!(order(&site), ["rowA", "run", "rowB"], "in line order");
    wait_until("the line to empty", || entries(&site).is_empty());
}

#[test]
fn stop_refuses_the_whole_line() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "h");
    wait_until("the holder", || site.file("up.h").exists());
    let mut waiters: Vec<Running> = (1..=3)
        .map(|i| join(&site, &[], &i.to_string(), i))
        .collect();
    assert_eq!(site.code(&["stop-all", "maintenance"]), 0);
    for w in &mut waiters {
        assert_eq!(
            wait_exit(w, "a waiter").code(),
            Some(69),
            "refused, not waiting"
        );
    }
    assert!(line_files(&site).is_empty(), "{:?}", line_files(&site));
    assert!(order(&site).is_empty(), "none ran");
    let _ = wait_exit(&mut holder, "the holder halted by STOP");
    assert_eq!(site.code(&["resume-all"]), 0);
}

#[test]
fn eight_waiters_at_cap_2_never_run_more_than_2() {
    let site = Site::new(Some(r#"{"max_agents": 2}"#));
    let script = r#"
bump() { flock "$T/count.lock" sh -c "$1"; }
bump 'n=$(cat "$T/n" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$T/n"; echo $n >> "$T/log"'
sleep 0.1
bump 'n=$(cat "$T/n"); echo $((n-1)) > "$T/n"'
"#;
    let counts = super::cap::overlaps(&site, script, 8);
    assert_eq!(counts.len(), 8, "{counts:?}");
    assert!(
        counts.iter().all(|n| *n <= 2),
        "never more than 2: {counts:?}"
    );
    assert!(line_files(&site).is_empty(), "{:?}", line_files(&site));
}
