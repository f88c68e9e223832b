use super::*;

#[test]
fn a_queued_full_run_runs_detached_once_the_lock_is_free() {
    let site = Site::new(None);
    let mut blocker = site.spawn(&["run", "--kind", "full-run"], HOLD, "0");
    wait_until("the first full run", || site.file("up.0").exists());
    let out = site.output(&[
        "queue",
        "full-run",
        "--",
        "sh",
        "-c",
        r#"cut -d" " -f6 /proc/$$/stat > "$T/queued.sid"; echo ran > "$T/queued.out""#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let log: PathBuf = said
        .split("log ")
        .nth(1)
        .map(|l| PathBuf::from(l.trim()))
        .expect("names its log");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !site.file("queued.out").exists(),
        "waits while another full run holds it"
    );
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut blocker, "the first full run").success());
    wait_until("the queued run", || site.file("queued.out").exists());
    let sid: i32 = std::fs::read_to_string(site.file("queued.sid"))
        .expect("sid")
        .trim()
        .parse()
        .expect("a session id");
    // Read our own session from /proc rather than getsid(2): in a container
    // whose session leader lives outside our pid namespace the kernel reports
    // session 0, which rustix's getsid refuses to represent as a Pid.
    let stat = std::fs::read_to_string("/proc/self/stat").expect("our stat");
    let ours: i32 = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(3))
        .and_then(|field| field.parse().ok())
        .expect("our session id");
    assert!(
        sid > 0,
        "setsid makes the runner lead a session visible to us"
    );
    assert_ne!(sid, ours, "the runner lives in a session of its own");
    wait_until("the log's last line", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("exited with status 0"))
    });
    let _ = std::fs::remove_file(&log);
    assert!(
        Path::new(&site.slots())
            .join(".full-run.lock.flock")
            .exists()
    );
}

/// `queue ls --json`'s queued full runs.
fn full_runs(site: &Site) -> Vec<serde_json::Value> {
    let out = site.output(&["queue", "ls", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    doc["full_runs"].as_array().expect("full_runs").clone()
}

#[test]
fn a_queued_full_run_is_listed_in_line_and_cancelled_with_a_line_in_its_log() {
    let site = Site::new(None);
    let mut blocker = site.spawn(&["run", "--kind", "full-run"], HOLD, "0");
    wait_until("the first full run", || site.file("up.0").exists());
    // Queued from a shell that leaves its stdout open as descriptor 3 too: the runner must
    // close it, or this caller would wait for the runner (hours) to see its output end.
    let mut queue = site.command("sh");
    queue
        .args([
            "-c",
            r#"exec "$W" queue full-run --priority 3 -- sh -c 'echo ran > "$T/never"' 3>&1"#,
        ])
        .env("W", worklane_bin())
        .env("AGENT_SLOTS_DIR", site.slots())
        .env("WORKLANE_STATE_DIR", site.state())
        .env_remove("AGENT_SLOTS_CONFIG")
        .env("T", site.temp.path())
        .env("TMPDIR", site.temp.path())
        .stdin(Stdio::null());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(queue.output_gated());
    });
    // A watchdog, not a timing assertion: without the close this never returns while the
    // first full run holds the lock.
    let out = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("queue full-run's output ends when it exits, not when its runner does")
        .expect("run sh");
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = said
        .split_whitespace()
        .find(|w| w.starts_with("fr-"))
        .expect("names its id")
        .to_owned();
    let pid: u32 = id["fr-".len()..].parse().expect("fr-<pid>");
    let log = PathBuf::from(said.split("log ").nth(1).expect("names its log").trim());

    wait_until("the runner in line", || full_runs(&site).len() == 1);
    let listed = &full_runs(&site)[0];
    assert_eq!(listed["id"], id.as_str(), "{listed}");
    assert_eq!(listed["pid"], pid, "{listed}");
    assert_eq!(listed["state"], "waiting", "{listed}");
    assert_eq!(listed["position"], 1, "{listed}");
    assert_eq!(listed["priority"], 3, "{listed}");
    assert_eq!(
        listed["log"],
        log.display().to_string().as_str(),
        "{listed}"
    );
    assert!(
        listed["command"]
            .as_str()
            .is_some_and(|c| c.contains("never")),
        "{listed}"
    );
    let text = site.output(&["queue", "ls"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&format!("{id}  waiting, 1. in line  priority 3")),
        "{text}"
    );
    // `slots` shows its place in the full-run line.
    let slots = site.output(&["slots", "--json"]);
    let slots: serde_json::Value = serde_json::from_slice(&slots.stdout).expect("slots json");
    let line = slots["line"].as_array().expect("line");
    assert!(
        line.iter().any(|e| e["kind"] == "full-run"
            && e["owner"] == "queued full run"
            && e["pid"] == pid
            && e["live"] == true),
        "{slots}"
    );

    assert_eq!(site.code(&["queue", "cancel", "fr-x"]), 64, "not an id");
    assert_eq!(
        site.code(&["queue", "cancel", &format!("fr-{}", u32::MAX)]),
        75,
        "no such queued run"
    );
    let cancelled = site.output(&["queue", "cancel", &id]);
    assert!(cancelled.status.success(), "{cancelled:?}");
    assert!(
        String::from_utf8_lossy(&cancelled.stdout).contains("cancelled"),
        "{cancelled:?}"
    );
    assert!(full_runs(&site).is_empty(), "out of the line");
    wait_until("the log's cancel line", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("cancelled"))
    });
    // The lock freed, the cancelled run never starts.
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut blocker, "the first full run").success());
    let again = site.output(&["run", "--kind", "full-run", "--no-wait", "--", "true"]);
    assert!(again.status.success(), "the lock is free: {again:?}");
    assert!(!site.file("never").exists(), "a cancelled run never runs");
}

/// A caller that blocks SIGTERM (the mask survives exec, into the detached runner) cannot
/// make its queued full run uncancellable: the runner unblocks what it handles.
#[test]
fn a_queued_full_run_from_a_caller_that_blocks_sigterm_is_still_cancelled() {
    let site = Site::new(None);
    let mut blocker = site.spawn(&["run", "--kind", "full-run"], HOLD, "0");
    wait_until("the first full run", || site.file("up.0").exists());
    let out = site
        .command("python3")
        .args([
            "-c",
            "import os, signal, sys\n\
                 signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n\
                 os.execv(sys.argv[1], sys.argv[1:])",
            worklane_bin(),
            "queue",
            "full-run",
            "--",
            "sh",
            "-c",
            r#"echo ran > "$T/never""#,
        ])
        .env("AGENT_SLOTS_DIR", site.slots())
        .env("WORKLANE_STATE_DIR", site.state())
        .env_remove("AGENT_SLOTS_CONFIG")
        .env("T", site.temp.path())
        .env("TMPDIR", site.temp.path())
        .stdin(Stdio::null())
        .output_gated()
        .expect("run python3");
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = said
        .split_whitespace()
        .find(|w| w.starts_with("fr-"))
        .expect("names its id")
        .to_owned();
    let log = PathBuf::from(said.split("log ").nth(1).expect("names its log").trim());
    wait_until("the runner in line", || full_runs(&site).len() == 1);
    let cancelled = site.output(&["queue", "cancel", &id]);
    assert!(cancelled.status.success(), "{cancelled:?}");
    wait_until("the log's cancel line", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("cancelled"))
    });
    assert!(full_runs(&site).is_empty(), "out of the line");
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut blocker, "the first full run").success());
    let again = site.output(&["run", "--kind", "full-run", "--no-wait", "--", "true"]);
    assert!(again.status.success(), "the lock is free: {again:?}");
    assert!(!site.file("never").exists(), "a cancelled run never runs");
}

#[test]
fn a_running_queued_full_run_is_listed_and_not_cancelled_as_queued() {
    let site = Site::new(None);
    let out = site
        .worklane()
        .env("TMPDIR", site.temp.path())
        .env("K", "1")
        .args(["queue", "full-run", "--", "sh", "-c", HOLD])
        .output_gated()
        .expect("queue");
    assert!(out.status.success(), "{out:?}");
    wait_until("the queued run", || site.file("up.1").exists());
    let listed = full_runs(&site);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "running", "{listed:?}");
    let id = listed[0]["id"].as_str().expect("id").to_owned();
    let refused = site.output(&["queue", "cancel", &id]);
    assert_eq!(refused.status.code(), Some(75), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no longer queued"),
        "{refused:?}"
    );
    std::fs::write(site.file("release.1"), b"").expect("release");
    wait_until("the run's end", || full_runs(&site).is_empty());
}
