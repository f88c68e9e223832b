//! The dispatcher flow on real processes: a dispatcher serving a temp slot directory,
//! launchers that enqueue and exit, drivers that claim and run, kills at each step.
use super::*;
use std::os::unix::process::ExitStatusExt;

/// Starts `worklane dispatcher` and waits for its socket.
pub(super) fn start(site: &Site, extra: &[&str]) -> Running {
    start_crashing(site, extra, "")
}

/// Starts a dispatcher that SIGKILLs itself at `crash` (the test seam; "" for none).
pub(super) fn start_crashing(site: &Site, extra: &[&str], crash: &str) -> Running {
    let running = Running::new(
        site.worklane()
            .arg("dispatcher")
            .args(extra)
            .env("WORKLANE_TEST_DISPATCHER_CRASH", crash)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn the dispatcher"),
    );
    let socket = site.slots().join("dispatcher.sock");
    wait_until("the dispatcher's socket", || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    running
}

/// A dispatcher started by a caller that blocks SIGTERM and SIGINT (the mask survives
/// exec) still stops on SIGTERM: it unblocks what it handles.
#[test]
fn a_dispatcher_whose_caller_blocked_sigterm_still_stops_on_it() {
    let site = Site::new(None);
    let mut dispatcher = Running::new(
        site.command("python3")
            .args([
                "-c",
                "import os, signal, sys\n\
                     signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})\n\
                     os.execv(sys.argv[1], sys.argv[1:])",
                worklane_bin(),
                "dispatcher",
            ])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("spawn the dispatcher"),
    );
    let socket = site.slots().join("dispatcher.sock");
    wait_until("the dispatcher's socket", || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    let pid = rustix::process::Pid::from_raw(dispatcher.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("TERM");
    let status = wait_exit(&mut dispatcher, "the dispatcher after SIGTERM");
    assert!(status.success(), "it stopped as SIGTERM asks: {status:?}");
}

#[test]
fn a_queue_longer_than_the_soft_descriptor_limit_is_kept_and_drivers_get_the_old_limit() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    // A dispatcher started with a soft limit of 40 descriptors (the hard limit as it is).
    let _dispatcher = Running::new(
        site.command("sh")
            .args(["-c", r#"ulimit -Sn 40 && exec "$0" dispatcher"#])
            .arg(worklane_bin())
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env("T", site.temp.path())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("spawn the dispatcher"),
    );
    let socket = site.slots().join("dispatcher.sock");
    wait_until("the dispatcher's socket", || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    assert_eq!(site.code(&["stop-all", "queueing"]), 0);
    let first = enqueue(&site, &[], r#"ulimit -n > "$T/limit""#);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    for i in 0..59 {
        let out = enqueue(&site, &[], "true");
        assert!(
            out.status.success(),
            "enqueue {i} beyond the soft limit: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(queue_len(&site), 60, "every row kept, each lane held");
    assert_eq!(site.code(&["resume-all"]), 0);
    wait_until("the first driver", || site.file("limit").exists());
    wait_until("its line", || {
        std::fs::read_to_string(site.file("limit")).is_ok_and(|t| t.ends_with('\n'))
    });
    assert_eq!(
        std::fs::read_to_string(site.file("limit"))
            .expect("limit")
            .trim(),
        "40",
        "the driver runs with the limit the dispatcher was started with"
    );
}

#[test]
fn a_dispatcher_out_of_descriptors_refuses_with_the_reason_and_serves_on() {
    // Two limits of each parity: whichever step of an enqueue finds none left (accepting,
    // receiving the lane's descriptor, opening its guard to check it), the launcher is
    // told why.
    for limit in [40, 41, 42, 43] {
        out_of_descriptors(limit);
    }
}

fn out_of_descriptors(limit: u32) {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    // Soft and hard limit the same: nothing to raise it to.
    let mut dispatcher = Running::new(
        site.command("sh")
            .args([
                "-c",
                &format!(r#"ulimit -n {limit} && exec "$0" dispatcher"#),
            ])
            .arg(worklane_bin())
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env("T", site.temp.path())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("spawn the dispatcher"),
    );
    let socket = site.slots().join("dispatcher.sock");
    wait_until("the dispatcher's socket", || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    assert_eq!(site.code(&["stop-all", "queueing"]), 0);
    let mut refused = None;
    for _ in 0..60 {
        let out = enqueue(&site, &[], "true");
        if !out.status.success() {
            refused = Some(String::from_utf8_lossy(&out.stderr).into_owned());
            break;
        }
    }
    let refused = refused.expect("a queue of 60 does not fit");
    assert!(
        refused.contains("no descriptor left"),
        "limit {limit}: {refused}"
    );
    assert!(
        dispatcher.try_wait().expect("try_wait").is_none(),
        "the dispatcher serves on"
    );
    assert_eq!(site.code(&["resume-all"]), 0);
}

pub(super) fn enqueue(site: &Site, args: &[&str], script: &str) -> Output {
    site.worklane()
        .arg("enqueue")
        .args(args)
        .args(["--", "sh", "-c", &driven(script)])
        .output_gated()
        .expect("enqueue")
}

pub(super) fn lane_free(site: &Site, lane: &str) -> bool {
    Command::new("flock")
        .arg("-n")
        .arg(site.slots().join(format!(".lane-{lane}.lock.flock")))
        .arg("true")
        .status_gated()
        .expect("flock")
        .success()
}

#[test]
fn five_enqueued_at_cap_1_run_one_at_a_time_by_priority_then_start() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let _dispatcher = start(&site, &[]);
    // Held back by STOP while all five are queued, so that only the order decides.
    assert_eq!(site.code(&["stop-all", "queueing"]), 0);
    let script = r#"echo "start $L" >> "$T/order"; sleep 0.1; echo "end $L" >> "$T/order""#;
    for (lane, priority) in [("a", "0"), ("b", "5"), ("c", "0"), ("d", "5"), ("e", "-1")] {
        let out = enqueue(
            &site,
            &["--lane", lane, "--priority", priority],
            &script.replace("$L", lane),
        );
        assert!(
            out.status.success(),
            "{lane}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("a-"),
            "prints the attempt id"
        );
    }
    let listed = site.output(&["queue", "ls", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
    assert_eq!(doc["attempts"].as_array().map(Vec::len), Some(5), "{doc}");
    let why = site.output(&["why", "--json"]);
    let why: serde_json::Value = serde_json::from_slice(&why.stdout).expect("why --json");
    let queued = why["queued"].as_array().expect("queued");
    assert_eq!(queued.len(), 5, "{why}");
    assert!(
        queued.iter().all(|q| q["held_by"]
            .as_str()
            .is_some_and(|h| h.starts_with("resource admission") && h.contains("queueing"))),
        "each is held by STOP, the resource-admission question: {why}"
    );
    assert!(
        queued[0]["waited_ms"].as_u64().is_some(),
        "and for how long: {why}"
    );
    assert_eq!(site.code(&["resume-all"]), 0);
    wait_until("all five to end", || {
        std::fs::read_to_string(site.file("order")).is_ok_and(|t| t.lines().count() == 10)
    });
    let order = std::fs::read_to_string(site.file("order")).expect("order");
    assert_eq!(
        order, "start b\nend b\nstart d\nend d\nstart a\nend a\nstart c\nend c\nstart e\nend e\n",
        "one at a time, by priority then original start"
    );
}

#[test]
fn no_dispatcher_is_69_and_a_taken_lane_is_75() {
    let site = Site::new(None);
    let out = enqueue(&site, &["--lane", "x"], "true");
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("worklane dispatcher"),
        "says how to start one"
    );
    assert!(lane_free(&site, "x"), "the lane is released again");
    let _dispatcher = start(&site, &[]);
    assert_eq!(site.code(&["stop-all", "hold"]), 0);
    let out = enqueue(&site, &["--lane", "x"], "true");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !lane_free(&site, "x"),
        "the dispatcher holds the lane after enqueue exited"
    );
    let out = site.output(&["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["queue"]["dispatcher"]["alive"], true, "{doc}");
    let attempts = doc["queue"]["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "{doc}");
    assert_eq!(attempts[0]["lane"], "x");
    assert_eq!(attempts[0]["state"], "queued");
    assert_eq!(
        attempts[0]["dispatcher"]["pid"],
        _dispatcher.id(),
        "the entry names the dispatcher that keeps the wait"
    );
    let out = enqueue(&site, &["--lane", "x"], "true");
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(site.code(&["resume-all"]), 0);
}

/// The names in the slot directory that belong to lane `lane` (record, epoch, claims,
/// guard).
fn lane_files(site: &Site, lane: &str) -> Vec<String> {
    let lock = format!("lane-{lane}.lock");
    let mut names: Vec<String> = std::fs::read_dir(site.slots())
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&lock) || n.starts_with(&format!(".{lock}")))
        .collect();
    names.sort();
    names
}

#[test]
fn a_lane_of_its_own_leaves_no_files_when_its_attempt_ends_or_is_cancelled() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let _dispatcher = start(&site, &[]);
    let reserved = enqueue(&site, &["--lane", "q-0123456789abcdef"], "true");
    assert_eq!(reserved.status.code(), Some(64), "a reserved lane name");
    assert!(
        String::from_utf8_lossy(&reserved.stderr).contains("reserved"),
        "{}",
        String::from_utf8_lossy(&reserved.stderr)
    );
    let lane_of = |attempt: &str| -> String {
        let out = site.output(&["queue", "ls", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        doc["attempts"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["attempt"] == attempt))
            .and_then(|a| a["lane"].as_str())
            .expect("the attempt's lane")
            .to_owned()
    };
    // Run to its end: the driver retires the lane once the command is over.
    assert_eq!(site.code(&["stop-all", "hold"]), 0);
    let out = enqueue(&site, &[], r#"echo ran > "$T/ran-own""#);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let lane = lane_of(&attempt);
    assert!(lane.starts_with("q-"), "a lane of its own: {lane}");
    assert!(
        !lane_files(&site, &lane).is_empty(),
        "while queued its lock has its files"
    );
    assert_eq!(site.code(&["resume-all"]), 0);
    wait_until("the attempt to run and its lane to go", || {
        site.file("ran-own").exists() && lane_files(&site, &lane).is_empty()
    });
    assert!(
        site.slots().join(format!("queue-{attempt}.log")).exists(),
        "its log stays for the operator"
    );
    // Cancelled while queued: the dispatcher retires it.
    assert_eq!(site.code(&["stop-all", "hold"]), 0);
    let out = enqueue(&site, &[], "true");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let lane = lane_of(&attempt);
    assert_eq!(site.code(&["queue", "cancel", &attempt]), 0);
    assert_eq!(
        lane_files(&site, &lane),
        Vec::<String>::new(),
        "cancel removes them"
    );
    // A named lane keeps its guard and epoch (its next holder's fencing needs them).
    let out = enqueue(&site, &["--lane", "named"], "true");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(site.code(&["queue", "cancel", &attempt]), 0);
    let kept = lane_files(&site, "named");
    assert!(
        kept.iter().any(|n| n.contains(".epoch.")) && kept.iter().any(|n| n.ends_with(".flock")),
        "{kept:?}"
    );
    assert_eq!(site.code(&["resume-all"]), 0);
}

fn queue_len(site: &Site) -> usize {
    let out = site.output(&["queue", "ls", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("queue ls");
    doc["attempts"].as_array().map_or(0, Vec::len)
}

const COUNT_RUNS: &str = r#"echo x >> "$T/ran""#;

fn runs(site: &Site) -> usize {
    std::fs::read_to_string(site.file("ran")).map_or(0, |t| t.lines().count())
}

#[test]
fn a_dispatcher_killed_after_the_insert_before_the_reply_loses_no_row() {
    let site = Site::new(None);
    assert_eq!(site.code(&["stop-all", "hold"]), 0);
    let mut dying = start_crashing(&site, &[], "after-insert");
    let out = enqueue(&site, &["--lane", "i"], COUNT_RUNS);
    assert_ne!(out.status.code(), Some(0), "no reply came");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("queue ls"),
        "the launcher says where to look: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = wait_exit(&mut dying, "the dispatcher's crash");
    assert_eq!(
        status.signal(),
        Some(9),
        "it SIGKILLed itself after the insert"
    );
    assert!(lane_free(&site, "i"), "nobody holds the lane meanwhile");
    let _dispatcher = start(&site, &[]);
    assert_eq!(queue_len(&site), 1, "the committed row was recovered");
    assert_eq!(site.code(&["resume-all"]), 0);
    wait_until("the recovered attempt to run", || runs(&site) == 1);
    wait_until("the queue to empty", || queue_len(&site) == 0);
    assert_eq!(runs(&site), 1, "exactly once");
}

/// A `--driver` command is run as `worklane run` runs its command, whichever libc the
/// binary was linked with: a script without a `#!` line is run by `/bin/sh`, which gets
/// the script's path, then its arguments. The installed binary (musl) started drivers
/// with musl's execvp(3), which refuses such a file (ENOEXEC): the attempt was queued
/// again at once, again and again, and never ran.
#[test]
fn a_driver_script_without_a_shebang_is_run_by_sh_with_its_arguments() {
    let site = Site::new(None);
    let script = site.write_script(
            "plain-driver",
            "T=\"$LANE_T\"\necho \"$0|$1|$2\" > \"$T/driver-ran.tmp\" && mv \"$T/driver-ran.tmp\" \"$T/driver-ran\"\n",
        );
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let _dispatcher = start(&site, &[]);
    let out = site
        .worklane()
        .args(["enqueue", "--driver", "--", &script, "one", "two words"])
        .output_gated()
        .expect("enqueue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the driver script", || site.file("driver-ran").exists());
    assert_eq!(
        std::fs::read_to_string(site.file("driver-ran"))
            .expect("driver-ran")
            .trim_end(),
        format!("{script}|one|two words"),
        "sh ran the script with its path as $0, then the arguments"
    );
}

/// The states of every attempt `queue ls --json` lists, by attempt id.
pub(super) fn states(site: &Site) -> std::collections::BTreeMap<String, serde_json::Value> {
    let out = site.output(&["queue", "ls", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("queue ls");
    doc["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| (a["attempt"].as_str().unwrap_or("").to_owned(), a.clone()))
        .collect()
}

/// A driver that cannot be started is tried again with a backoff, a bounded number of
/// times, then parked as `failed` (its failures and last error shown) while the rows
/// behind it run; the dispatcher lives through hundreds of failed starts (std's `spawn`
/// reaps such a child itself, by its pid; the reaper of exited drivers could take it
/// first, and std then panicked: `driver::STARTING` closes that by construction), and its
/// log says each attempt's failure once, not once per try.
#[test]
fn a_driver_that_cannot_start_is_parked_as_failed_and_the_line_moves_on() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut dispatcher = start(&site, &["--start-attempts", "8", "--start-backoff", "1ms"]);
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
    assert_eq!(site.code(&["stop-all", "hold"]), 0);
    let mut broken = Vec::new();
    for i in 0..40 {
        let out = site
            .worklane()
            .args(["enqueue", "--lane", &format!("x{i}"), "--driver", "--"])
            .arg("/nonexistent/worklane-driver")
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        broken.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    // Behind all forty (a later start): it runs once they are parked, nobody cancelling.
    let good = enqueue(&site, &["--lane", "good"], r#"touch "$T/good-ran""#);
    assert!(good.status.success());
    assert_eq!(site.code(&["resume-all"]), 0);
    // 320 failed starts come first (40 rows, 8 starts each): a process each.
    let starts = Duration::from_secs(120);
    wait_until_within("the good row to run", starts, || {
        site.file("good-ran").exists()
    });
    wait_until_within("every broken row parked", starts, || {
        let states = states(&site);
        broken
            .iter()
            .all(|id| states.get(id).is_some_and(|a| a["state"] == "failed"))
    });
    let why = site.output(&["why", "--json"]);
    let why: serde_json::Value = serde_json::from_slice(&why.stdout).expect("why --json");
    let parked_said = why["queued"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["held_by"].as_str().is_some_and(|h| {
                h.contains("parked as failed after 8") && h.contains("queue retry")
            })
        })
        .count();
    assert_eq!(
        parked_said,
        broken.len(),
        "why says each is parked, and the fix: {why}"
    );
    let parked_rows = states(&site);
    for id in &broken {
        let row = &parked_rows[id];
        assert_eq!(
            row["failures"], 8,
            "tried the bounded number of times: {row}"
        );
        assert!(
            row["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("No such file")),
            "the last error is kept: {row}"
        );
    }
    assert!(
        matches!(dispatcher.try_wait(), Ok(None)),
        "the dispatcher lives through 320 failed starts"
    );
    // Its log: at most one line per attempt about its failures (the rest counted).
    drop(site.output(&["queue", "ls"]));
    let mut said = std::collections::BTreeMap::<String, u32>::new();
    let mut parked = 0;
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
        assert!(
            !line.contains("panicked"),
            "the dispatcher panicked: {line}"
        );
        if line.contains("parked as failed") {
            parked += 1;
        }
        if line.contains("cannot start the driver of") {
            let id = broken
                .iter()
                .find(|id| line.contains(id.as_str()))
                .cloned()
                .unwrap_or_default();
            *said.entry(id).or_default() += 1;
        }
    }
    assert_eq!(
        said.len(),
        broken.len(),
        "each attempt's failure is said: {said:?}"
    );
    assert!(
        said.values().all(|n| *n == 2),
        "its first failure and its parking, not once per try: {said:?}"
    );
    assert_eq!(parked, broken.len(), "each parking is said");
    // Parked rows are retried on demand, and cancelled.
    let retry = site.output(&["queue", "retry", &broken[0]]);
    assert!(
        retry.status.success(),
        "{}",
        String::from_utf8_lossy(&retry.stderr)
    );
    wait_until("the retried row parked again", || {
        states(&site)
            .get(&broken[0])
            .is_some_and(|a| a["state"] == "failed" && a["failures"] == 8)
    });
    let cancel = site.output(&["queue", "cancel", &broken[1]]);
    assert!(
        cancel.status.success(),
        "{}",
        String::from_utf8_lossy(&cancel.stderr)
    );
    assert!(!states(&site).contains_key(&broken[1]), "cancelled: gone");
    assert!(lane_free(&site, "x1"), "and its lane free");
}

#[test]
fn a_dispatcher_killed_after_admitting_before_the_driver_starts_admits_it_again() {
    let site = Site::new(None);
    assert_eq!(site.code(&["stop-all", "hold"]), 0);
    let mut dying = start_crashing(&site, &[], "after-admit");
    let out = enqueue(&site, &["--lane", "a"], COUNT_RUNS);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(site.code(&["resume-all"]), 0);
    let status = wait_exit(&mut dying, "the dispatcher's crash at admission");
    assert_eq!(status.signal(), Some(9));
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "its reserved slot is free"
    );
    let _dispatcher = start(&site, &[]);
    wait_until("the attempt to run", || runs(&site) == 1);
    wait_until("the queue to empty", || queue_len(&site) == 0);
    assert_eq!(runs(&site), 1, "exactly once, never two drivers");
}

#[test]
fn a_dispatcher_killed_after_removing_a_claimed_row_leaves_nobody_holding_it() {
    let site = Site::new(None);
    let mut dying = start_crashing(&site, &[], "after-claim-remove");
    let out = enqueue(&site, &["--lane", "c"], COUNT_RUNS);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let status = wait_exit(&mut dying, "the dispatcher's crash at the claim");
    assert_eq!(status.signal(), Some(9));
    wait_until("the lane to be free", || lane_free(&site, "c"));
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "and the slot"
    );
    let out = site.output(&["reconcile", &attempt, "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        doc["holder"],
        serde_json::Value::Null,
        "nobody holds it: {doc}"
    );
    let _dispatcher = start(&site, &[]);
    assert_eq!(queue_len(&site), 0, "the row was removed before the crash");
    assert_eq!(
        runs(&site),
        0,
        "and its command never ran: the reply was lost"
    );
}

#[test]
fn the_config_sets_waiter_mode_and_the_dispatcher_alone_its_environment_filter() {
    let site = Site::new(Some(r#"{"admission": "waiter"}"#));
    let _dispatcher = start(&site, &[]);
    let out = enqueue(&site, &["--lane", "w"], "true");
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("waiter"),
        "says why: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(_dispatcher);
    // The driver's environment as each dispatcher keeps it from one enqueue.
    let driven = |site: &Site| {
        let out = site
            .worklane()
            .args(["enqueue", "--lane", "e", "--"])
            .args([
                "sh",
                "-c",
                // The directory as whichever variable reached the driver names it.
                r#"env | grep -E '^(MY_|LANE_X)' | sort > "${LANE_T:-$MY_T}/env""#,
            ])
            .env("MY_T", site.temp.path())
            .env("MY_STAGE", "kept")
            .env("MY_PIN", "dropped: a secret word")
            .env(
                "MY_TOKEN",
                "dropped: a default secret word, whatever is set",
            )
            .env("LANE_X", "a default prefix")
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_until("the driver's environment", || {
            site.file("env").exists()
                && std::fs::read_to_string(site.file("env")).is_ok_and(|t| !t.is_empty())
        });
        std::fs::read_to_string(site.file("env")).expect("env")
    };
    // A config (which any member of the group may write) that widens the filter and
    // empties its words is ignored, and the dispatcher says so.
    let planted = Site::new(Some(
        r#"{"env_allow_prefixes": ["MY_", "A", "B"], "env_secret_words": ["@@@@"]}"#,
    ));
    let mut dispatcher = start(&planted, &[]);
    let lines = super::queue_trouble::lines_of(&mut dispatcher);
    std::fs::remove_file(planted.file("env")).ok();
    assert_eq!(
        driven(&planted),
        "LANE_X=a default prefix\n",
        "the default filter, not the config's"
    );
    let log = super::queue_trouble::drain(&lines);
    assert!(
        log.iter()
            .any(|l| l.contains("env_allow_prefixes") && l.contains("--env-allow-prefix")),
        "says the config's setting is ignored and what to give instead: {log:?}"
    );
    drop(dispatcher);
    // The dispatcher's own flags decide; the default words stay a floor.
    let site = Site::new(None);
    let _dispatcher = start(
        &site,
        &["--env-allow-prefix", "MY_", "--env-secret-word", "PIN"],
    );
    assert_eq!(
        driven(&site),
        format!("MY_STAGE=kept\nMY_T={}\n", site.temp.path().display()),
        "only the flags' prefixes, less the secret words"
    );
    let bad = Site::new(None);
    let out = bad.output(&["dispatcher", "--env-allow-prefix", ""]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn reconcile_tells_dispatcher_driver_and_nobody_apart() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let _dispatcher = start(&site, &[]);
    assert_eq!(site.code(&["stop-all", "hold"]), 0);
    let out = enqueue(
        &site,
        &["--lane", "r"],
        r#"echo $$ > "$T/driver.pid"; while [ ! -e "$T/go" ]; do sleep 0.02; done"#,
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let holder = |site: &Site| {
        let out = site.output(&["reconcile", &attempt, "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        doc["holder"].clone()
    };
    assert_eq!(holder(&site), "dispatcher", "queued");
    assert_eq!(site.code(&["resume-all"]), 0);
    wait_until("the driver's command", || site.file("driver.pid").exists());
    assert_eq!(holder(&site), "driver", "claimed and running");
    assert!(!lane_free(&site, "r"), "the driver holds the lane");
    std::fs::write(site.file("go"), b"").expect("go");
    wait_until("the lane to be free", || lane_free(&site, "r"));
    assert_eq!(holder(&site), serde_json::Value::Null, "done: nobody");
}

#[test]
fn a_killed_driver_frees_lane_and_slot() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let _dispatcher = start(&site, &[]);
    let out = enqueue(
        &site,
        &["--lane", "k"],
        r#"echo $PPID > "$T/claim.pid"; exec sleep 60"#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the driver", || {
        std::fs::read_to_string(site.file("claim.pid")).is_ok_and(|t| t.ends_with('\n'))
    });
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        75,
        "the driver holds the one slot"
    );
    let claim: i32 = std::fs::read_to_string(site.file("claim.pid"))
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    let pid = rustix::process::Pid::from_raw(claim).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("SIGKILL the driver");
    // Its command gets SIGTERM (the parent-death signal) and with it the last copies go.
    wait_until("the lane free", || lane_free(&site, "k"));
    let mut code = 75;
    wait_until("the slot free", || {
        code = site.code(&["run", "--no-wait", "--", "true"]);
        code == 0
    });
}

#[test]
fn runs_and_enqueued_work_share_one_cap() {
    let site = Site::new(Some(r#"{"max_agents": 4}"#));
    let _dispatcher = start(&site, &[]);
    let script = site.write_script("overlap.sh", super::cap::OVERLAP);
    for i in 0..8 {
        let out = site
            .worklane()
            .args(["enqueue", "--lane", &format!("o{i}"), "--", "sh", "-c"])
            .arg(driven(&format!("sh {script}")))
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let runs: Vec<Running> = (0..8)
        .map(|i| {
            Running::new(
                site.worklane()
                    .args(["run", "--", "sh", &script])
                    .env("K", i.to_string())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn_gated()
                    .expect("spawn"),
            )
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().expect("wait");
        assert!(out.status.success(), "every run completes");
    }
    wait_until("all sixteen to have run", || {
        std::fs::read_to_string(site.file("log")).is_ok_and(|t| t.lines().count() == 16)
    });
    let log = std::fs::read_to_string(site.file("log")).expect("log");
    let max = log
        .lines()
        .map(|l| l.parse::<u32>().expect("a count"))
        .max();
    assert_eq!(
        max,
        Some(4),
        "never more than 4 at once across both kinds: {log}"
    );
}

#[test]
fn one_dispatcher_per_directory_and_a_restart_recovers_the_queue() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut first = start(&site, &[]);
    let second = site.output(&["dispatcher"]);
    assert_eq!(second.status.code(), Some(75), "a second one is refused");
    assert!(
        String::from_utf8_lossy(&second.stderr).contains(&first.id().to_string()),
        "naming the first: {}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(site.code(&["stop-all", "hold"]), 0);
    let out = enqueue(&site, &["--lane", "s"], r#"touch "$T/ran""#);
    assert!(out.status.success());
    let pid = rustix::process::Pid::from_raw(i32::try_from(first.id()).expect("pid")).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let status = wait_exit(&mut first, "the dispatcher");
    assert!(status.success(), "a clean stop");
    assert!(
        lane_free(&site, "s"),
        "its lanes are freed with its descriptors"
    );
    let _again = start(&site, &[]);
    assert!(
        !lane_free(&site, "s"),
        "recovered: the new dispatcher holds the lane again"
    );
    assert_eq!(site.code(&["resume-all"]), 0);
    wait_until("the recovered attempt to run", || site.file("ran").exists());
}

/// A lane of its own whose enqueue is refused (no dispatcher) is never used again: its files
/// go with it, not only its record.
#[test]
fn a_refused_enqueue_leaves_no_files_of_its_own_lane() {
    let site = Site::new(None);
    let out = enqueue(&site, &[], "true");
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: Vec<String> = std::fs::read_dir(site.slots())
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("lane-q-"))
        .collect();
    assert!(left.is_empty(), "nothing of the lane is left: {left:?}");
}

/// The command a driver runs is in an agent slot as a `run`'s is: a `worklane run` inside it
/// is refused at once (64), not left waiting for a second slot for ever at a cap of 1; and an
/// empty `WORKLANE_SOCKET` is no socket (the slot directory's is used).
#[test]
fn a_run_inside_dispatched_work_is_refused_at_once_and_an_empty_socket_variable_is_unset() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let _dispatcher = start(&site, &[]);
    let script = format!(
        r#"echo "$WORKLANE_AGENT_SLOT" > "$T/slot"; timeout 20 "{}" run -- true; echo $? > "$T/nested.tmp"; mv "$T/nested.tmp" "$T/nested""#,
        worklane_bin()
    );
    let out = site
        .worklane()
        .env("WORKLANE_SOCKET", "")
        .arg("enqueue")
        .args(["--", "sh", "-c", &driven(&script)])
        .output_gated()
        .expect("enqueue");
    assert!(
        out.status.success(),
        "an empty WORKLANE_SOCKET is unset: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the nested run to end", || site.file("nested").exists());
    let nested = std::fs::read_to_string(site.file("nested")).expect("status");
    assert_eq!(nested.trim(), "64", "refused at once, not waiting");
    let slot = std::fs::read_to_string(site.file("slot")).expect("slot");
    assert!(
        slot.trim().starts_with(&site.slots().display().to_string())
            && slot.trim().ends_with("agent-0.lock"),
        "{slot}"
    );
}

/// A lane named like a lane's lock (`lane-x`): once its attempt is claimed, its status entry
/// `queue-lane-x.json` goes, as every claimed attempt's does.
#[test]
fn a_lane_named_lane_something_loses_its_status_entry_when_claimed() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let _dispatcher = start(&site, &[]);
    let out = enqueue(&site, &["--lane", "lane-x"], r#"touch "$T/ran-lane-x""#);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the attempt ran", || site.file("ran-lane-x").exists());
    wait_until("its status entry removed", || {
        !site.slots().join("queue-lane-x.json").exists()
    });
}
