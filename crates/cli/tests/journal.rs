//! `worklane events` and `worklane metrics` on real processes, and a journal that a
//! member of the directory's group may not write.
use super::ownership::{SHARED, as_member, root_only};
use super::*;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;

/// The lines a `worklane` prints on stdout, as they come.
fn lines_of(running: &mut Running) -> std::sync::mpsc::Receiver<String> {
    let stdout = running.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn next_json(lines: &std::sync::mpsc::Receiver<String>) -> serde_json::Value {
    let line = lines
        .recv_timeout(Duration::from_secs(60))
        .expect("the follower prints the next event");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// A member whose journal is read-only takes, waits and is refused exactly as when it can
/// write it; the journal is left as it was.
#[test]
fn a_read_only_journal_never_changes_a_members_take() {
    root_only();
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let slots = site.slots();
    std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
        .expect("chmod");
    std::os::unix::fs::chown(&slots, Some(0), Some(SHARED)).expect("chgrp");
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
    assert_eq!(
        site.code(&["run", "--", "true"]),
        0,
        "root writes the journal"
    );
    let journal = slots.join("journal.jsonl");
    let codes = |site: &Site| {
        let free = as_member(site, &["run", "--no-wait", "--", "true"]);
        let mut holder = site.spawn(&["run", "--owner", "holder"], HOLD, "h");
        wait_until("the holder", || site.file("up.h").exists());
        let busy = as_member(site, &["run", "--no-wait", "--", "true"]);
        std::fs::write(site.file("release.h"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        std::fs::remove_file(site.file("up.h")).expect("rm");
        std::fs::remove_file(site.file("release.h")).expect("rm");
        (free.status.code(), busy.status.code())
    };
    let writable = codes(&site);
    assert_eq!(writable, (Some(0), Some(75)), "taken, then at cap");
    let by_member =
        worklane_journal::read(&worklane_slotfile::SlotDir::open(&slots).expect("open"))
            .expect("read")
            .entries
            .iter()
            .filter(|e| matches!(&e.event, worklane_journal::Event::SlotRefused { .. }))
            .count();
    assert_eq!(by_member, 1, "the member wrote its refusal while it could");
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let member_lines = || {
        worklane_journal::read(&worklane_slotfile::SlotDir::open(&slots).expect("open"))
            .expect("read")
            .entries
            .iter()
            .filter(|e| e.event.kind().starts_with("slot-"))
            .count()
    };
    let before = member_lines();
    let read_only = codes(&site);
    assert_eq!(
        read_only, writable,
        "the same outcomes with a read-only journal"
    );
    let after = member_lines();
    assert_eq!(
        after - before,
        2,
        "only root's holder wrote (taken, released): the member's events were dropped"
    );
    // Not silently: the member says so once, and `slots` names the journal with its fix.
    let run = as_member(&site, &["run", "--", "true"]);
    assert!(run.status.success(), "{run:?}");
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(
        err.matches("cannot be appended to").count(),
        1,
        "said once, though the take and the release were both dropped: {err}"
    );
    let slots = site.output(&["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&slots.stdout).expect("slots --json");
    let problem = doc["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .find(|p| p["name"] == "journal.jsonl")
        .cloned()
        .unwrap_or_else(|| panic!("the journal named: {doc}"));
    assert!(
        problem["fix"]
            .as_str()
            .is_some_and(|f| f.contains("chmod 0660")),
        "{problem}"
    );
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o660)).expect("chmod");
    let slots = site.output(&["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&slots.stdout).expect("slots --json");
    assert!(
        !doc["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .any(|p| p["name"] == "journal.jsonl"),
        "fixed: {doc}"
    );
}

/// `events --follow --json` prints what there is, then each new event as it comes, across
/// rotations (a cap of 64 KiB, rounds of events it reads before the next round).
#[test]
fn events_follow_prints_new_events_across_rotations() {
    let site = Site::new(Some(r#"{"journal_max_bytes": 65536}"#));
    assert_eq!(site.code(&["run", "--", "true"]), 0);
    let mut follower = Running::new(
        site.worklane()
            .args(["events", "--follow", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("events --follow"),
    );
    let lines = lines_of(&mut follower);
    let first = next_json(&lines);
    assert_eq!(first["kind"], "slot-taken", "what there is first: {first}");
    assert_eq!(next_json(&lines)["kind"], "slot-released");
    let dir = worklane_slotfile::SlotDir::open(&site.slots()).expect("open");
    let journal = worklane_journal::Journal::of(&dir);
    journal.set_max_bytes(65536);
    let reason = "r".repeat(200);
    for round in 0..8 {
        for i in 0..50 {
            journal.emit(worklane_journal::Event::Stop {
                by: format!("{round}.{i}"),
                reason: reason.clone(),
            });
        }
        for i in 0..50 {
            let event = next_json(&lines);
            assert_eq!(event["by"], format!("{round}.{i}"), "in order, each once");
        }
    }
    assert!(site.slots().join("journal.1.jsonl").exists(), "it rotated");
    assert_eq!(site.code(&["run", "--", "true"]), 0);
    assert_eq!(
        next_json(&lines)["kind"],
        "slot-taken",
        "a new file, followed"
    );
    drop(follower);
}

/// `events --follow | head -n1` ends once head has its line, though no event comes after:
/// the follower sees its reader gone without having to write.
#[test]
fn events_follow_ends_when_its_reader_goes_without_a_next_event() {
    let site = Site::new(None);
    assert_eq!(site.code(&["run", "--", "true"]), 0);
    let mut pipeline = site
        .command("sh")
        .args(["-c", "\"$WORKLANE\" events --follow --json | head -n1"])
        .env("WORKLANE", worklane_bin())
        .env("AGENT_SLOTS_DIR", site.slots())
        .env_remove("AGENT_SLOTS_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn_gated()
        .expect("the pipeline");
    let status = wait_exit(&mut pipeline, "the pipeline, with no further event");
    assert!(status.success(), "{status:?}");
    let mut line = String::new();
    std::io::Read::read_to_string(&mut pipeline.stdout.take().expect("stdout"), &mut line)
        .expect("read");
    assert!(line.contains("slot-taken"), "{line}");
}

#[test]
fn events_filters_by_kind_and_time_and_refuses_what_it_cannot_read() {
    let site = Site::new(None);
    assert_eq!(site.code(&["run", "--", "true"]), 0);
    assert_eq!(site.code(&["stop-all", "x"]), 0);
    assert_eq!(site.code(&["resume-all"]), 0);
    let out = site.output(&["events", "--kind", "slot"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.contains("slot-taken") && text.contains("slot-released"),
        "{text}"
    );
    let out = site.output(&["events", "--kind", "stop", "--kind", "resume", "--json"]);
    let kinds: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json")["kind"].to_string())
        .collect();
    assert_eq!(kinds, [r#""stop""#, r#""resume""#]);
    let out = site.output(&["events", "--since", "2999-01-01T00:00:00Z"]);
    assert!(out.stdout.is_empty(), "nothing after then");
    assert_eq!(site.code(&["events", "--since", "10m"]), 0);
    assert_eq!(site.code(&["events", "--since", "soon"]), 64);
    assert_eq!(site.code(&["events", "--kind", "slots"]), 64);
    // An event whose `at` is not a time (another writer's) is not shown as recent: skipped
    // under --since, and counted on stderr.
    let journal = site.slots().join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).expect("the journal");
    let mut odd: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("a line")).expect("json");
    odd["at"] = "yesterday".into();
    std::fs::write(&journal, format!("{text}{odd}\n")).expect("append");
    let all = site.output(&["events"]);
    assert_eq!(
        String::from_utf8_lossy(&all.stdout).lines().count(),
        text.lines().count() + 1,
        "without --since it is shown"
    );
    let out = site.output(&["events", "--since", "10m"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        text.lines().count(),
        "under --since it is not"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 event(s) skipped under --since"),
        "{out:?}"
    );
    std::fs::remove_file(site.slots().join("journal.jsonl")).expect("rm");
    std::fs::create_dir(site.slots().join("journal.jsonl")).expect("a directory there");
    let out = site.output(&["events"]);
    assert_eq!(out.status.code(), Some(71), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("journal.jsonl"),
        "names the file: {out:?}"
    );
}

/// `promtool check metrics` on `text`: no error and no lint. `.ci/run` installs promtool
/// (Debian's `prometheus`) and sets `WORKLANE_REQUIRE_PROMTOOL`, so CI fails without it;
/// elsewhere, without promtool, this says so on stderr and checks nothing.
pub(super) fn promtool_lint(text: &str) {
    let available = Command::new("promtool")
        .arg("--version")
        .output_gated()
        .is_ok_and(|o| o.status.success());
    if !available {
        assert!(
            std::env::var_os("WORKLANE_REQUIRE_PROMTOOL").is_none(),
            "WORKLANE_REQUIRE_PROMTOOL is set but promtool is not on PATH"
        );
        // A test's own note, on the harness's stderr (not the CLI's output).
        #[allow(clippy::disallowed_macros)]
        {
            eprintln!("promtool not found: the exposition was not linted");
        }
        return;
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_gated()
        .expect("promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool ends");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text}"
    );
}

/// A careful reader of the Prometheus text format (0.0.4): every sample belongs to a
/// family with a TYPE; histograms have ordered cumulative buckets whose +Inf is the count.
pub(super) fn parse_exposition(text: &str) -> BTreeMap<String, f64> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    assert!(text.ends_with('\n'), "ends with a newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE NAME KIND");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "{line}"
            );
            continue;
        }
        if line.starts_with("# HELP ") || line.is_empty() {
            continue;
        }
        assert!(!line.starts_with('#'), "no other comment: {line}");
        let (series, value) = line.rsplit_once(' ').expect("SERIES VALUE");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|e| panic!("{line}: {e}")),
        };
        let name = series.split('{').next().expect("name");
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':'),
            "{line}"
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        assert!(types.contains_key(family), "{line}: its family has a TYPE");
        if let Some(labels) = series.strip_prefix(name)
            && !labels.is_empty()
        {
            assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
            for pair in labels[1..labels.len() - 1].split(',') {
                let (k, v) = pair.split_once('=').expect("k=v");
                assert!(
                    !k.is_empty() && v.starts_with('"') && v.ends_with('"'),
                    "{line}"
                );
            }
        }
        assert!(
            samples.insert(series.to_owned(), value).is_none(),
            "once: {line}"
        );
    }
    for (family, kind) in &types {
        if kind != "histogram" {
            continue;
        }
        // Each series of the family (its labels but `le`): cumulative buckets whose +Inf is
        // its count.
        let mut series: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
        for (sample, value) in &samples {
            let Some(labels) = sample.strip_prefix(&format!("{family}_bucket{{")) else {
                continue;
            };
            let labels = labels.strip_suffix('}').expect("closed");
            let (others, le): (Vec<&str>, Vec<&str>) =
                labels.split(',').partition(|pair| !pair.starts_with("le="));
            series
                .entry(others.join(","))
                .or_default()
                .push((le.concat(), *value));
        }
        assert!(!series.is_empty(), "{family}: no buckets");
        for (others, buckets) in series {
            let mut values: Vec<f64> = buckets.iter().map(|(_, v)| *v).collect();
            values.sort_by(f64::total_cmp);
            let inf = buckets
                .iter()
                .find(|(le, _)| le == "le=\"+Inf\"")
                .map(|(_, v)| *v)
                .unwrap_or_else(|| panic!("{family}{{{others}}}: a +Inf bucket"));
            let count = if others.is_empty() {
                format!("{family}_count")
            } else {
                format!("{family}_count{{{others}}}")
            };
            assert_eq!(
                inf, samples[&count],
                "{family}{{{others}}}: +Inf is the count"
            );
            assert_eq!(
                values.last(),
                Some(&inf),
                "{family}{{{others}}}: cumulative"
            );
        }
    }
    samples
}

#[test]
fn metrics_parse_and_agree_with_slots_json() {
    let site = Site::new(Some(r#"{"max_agents": 1, "max_test_runs": 3}"#));
    let mut holder = site.spawn(&["run", "--owner", "holder"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let mut waiter = site.spawn(&["run", "--owner", "waiter"], HOLD, "1");
    wait_until("the waiter in line", || {
        let doc: serde_json::Value =
            serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("json");
        doc["line"].as_array().is_some_and(|l| !l.is_empty())
    });
    let check = |stop: f64, drain: f64, waiters: usize| {
        let doc: serde_json::Value =
            serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("json");
        let out = site.output(&["metrics"]);
        assert!(out.status.success(), "{out:?}");
        let m = parse_exposition(&String::from_utf8_lossy(&out.stdout));
        let number = |v: &serde_json::Value| v.as_f64().expect("a number");
        assert_eq!(
            m["worklane_holders{kind=\"agent\"}"],
            number(&doc["agents_held"])
        );
        assert_eq!(
            m["worklane_holders{kind=\"test\"}"],
            number(&doc["test_runs_held"])
        );
        assert_eq!(
            m["worklane_cap{kind=\"agent\"}"],
            number(&doc["max_agents"])
        );
        assert_eq!(
            m["worklane_cap{kind=\"test\"}"],
            number(&doc["max_test_runs"])
        );
        let waiting = doc["line"]
            .as_array()
            .expect("line")
            .iter()
            .filter(|w| w["kind"] == "agent" && w["live"] == true)
            .count();
        assert_eq!(m["worklane_waiters{kind=\"agent\"}"], waiting as f64);
        assert_eq!(waiting, waiters, "{doc}");
        assert_eq!(m["worklane_stop"], stop);
        assert_eq!(
            m["worklane_stop"],
            f64::from(u8::from(!doc["stop"].is_null()))
        );
        assert_eq!(m["worklane_drain"], drain);
        assert_eq!(
            m["worklane_drain"],
            f64::from(u8::from(doc["drain"]["state"] == "in-force"))
        );
        m
    };
    let m = check(0.0, 0.0, 1);
    // Loaded (a holder, a waiter, the journal's histograms): Prometheus's own linter agrees.
    promtool_lint(&String::from_utf8_lossy(&site.output(&["metrics"]).stdout));
    assert_eq!(m["worklane_holders{kind=\"agent\"}"], 1.0);
    assert_eq!(
        m["worklane_queue_wait_seconds_count{kind=\"agent\"}"], 1.0,
        "the holder's take"
    );
    // A drain refuses the waiter at once.
    assert_eq!(site.code(&["drain", "--until", "10m"]), 0);
    assert_eq!(wait_exit(&mut waiter, "the waiter").code(), Some(69));
    check(0.0, 1.0, 0);
    assert_eq!(site.code(&["undrain"]), 0);
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    assert_eq!(site.code(&["stop-all", "metrics"]), 0);
    let m = check(1.0, 0.0, 0);
    assert_eq!(m["worklane_holders{kind=\"agent\"}"], 0.0);
    assert_eq!(
        m["worklane_run_seconds_count{kind=\"agent\"}"], 1.0,
        "one run ended"
    );
    assert_eq!(
        m["worklane_queue_wait_seconds_count{kind=\"agent\"}"], 1.0,
        "one take"
    );
    assert_eq!(site.code(&["resume-all"]), 0);
}

/// `--textfile` rewrites the file while a reader reads it over and over: every read is a
/// whole exposition, and no temp file is left.
#[test]
fn the_textfile_is_never_seen_half_written() {
    let site = Site::new(None);
    assert_eq!(site.code(&["run", "--", "true"]), 0);
    let out_dir = site.file("textfile");
    std::fs::create_dir(&out_dir).expect("mkdir");
    let path = out_dir.join("worklane.prom");
    assert_eq!(
        site.code(&["metrics", "--textfile", path.to_str().expect("utf-8")]),
        0
    );
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (path, done) = (path.clone(), done.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let text = std::fs::read_to_string(&path).expect("always there");
                parse_exposition(&text);
                assert!(text.contains("worklane_journal_skipped_lines "), "whole");
                reads += 1;
            }
            reads
        })
    };
    for _ in 0..30 {
        assert_eq!(
            site.code(&["metrics", "--textfile", path.to_str().expect("utf-8")]),
            0
        );
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().expect("reader") > 0);
    let names: Vec<_> = std::fs::read_dir(&out_dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["worklane.prom"], "no temp file left");
}

fn get(port: u16, request: &str) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.write_all(request.as_bytes()).expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("reply");
    reply
}

#[test]
fn listen_serves_get_metrics_and_nothing_else() {
    let site = Site::new(None);
    let mut server = Running::new(
        site.worklane()
            .args(["metrics", "--listen", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("metrics --listen"),
    );
    let mut said = String::new();
    std::io::BufReader::new(server.stderr.take().expect("stderr"))
        .read_line(&mut said)
        .expect("it says where");
    let port: u16 = said
        .trim()
        .strip_prefix("worklane: serving http://127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("on the loopback address: {said}"));
    let reply = get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(reply.contains("text/plain; version=0.0.4"), "{reply}");
    let body = reply.split_once("\r\n\r\n").expect("a body").1;
    parse_exposition(body);
    assert!(get(port, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(get(port, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    // Three idle connections and one sending its head a byte at a time hold up no scrape:
    // it is answered while they are all still open (a server serving one connection at a
    // time would answer it only after giving each of them up, 5 s apiece).
    let idle: Vec<std::net::TcpStream> = (0..3)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    slow.write_all(b"GE").expect("a first byte");
    let reply = get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    for stream in idle.iter().chain([&slow]) {
        stream.set_nonblocking(true).expect("nonblocking");
        let mut byte = [0u8; 1];
        let read = (&*stream).read(&mut byte);
        assert!(
            matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "still open, unanswered, when the scrape was answered: {read:?}"
        );
    }
    // The slow one finishes its head and is answered too.
    slow.set_nonblocking(false).expect("blocking");
    slow.write_all(b"T /metrics HTTP/1.1\r\n\r\n")
        .expect("the rest");
    let mut reply = String::new();
    slow.read_to_string(&mut reply).expect("reply");
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    drop(server);
}

/// The counters and histograms never go down when a rotation drops the older file: each
/// rotation carries what it drops in the new file's `totals` line, so a scrape after any
/// number of rotations counts every event ever written.
#[test]
fn metrics_count_every_event_across_rotations() {
    let site = Site::new(Some(r#"{"journal_max_bytes": 65536}"#));
    let dir = worklane_slotfile::SlotDir::open(&site.slots()).expect("open");
    let journal = worklane_journal::Journal::of(&dir);
    journal.set_max_bytes(65536);
    let count = |site: &Site| {
        let out = site.output(&["metrics"]);
        assert!(out.status.success(), "{out:?}");
        let m = parse_exposition(&String::from_utf8_lossy(&out.stdout));
        (
            m["worklane_run_seconds_count{kind=\"agent\"}"],
            m["worklane_run_seconds_sum{kind=\"agent\"}"],
            m["worklane_takeovers_total"],
        )
    };
    let first_lines = || -> usize {
        // How many rotations there have been: each new file starts with its totals.
        std::fs::read_to_string(site.slots().join("journal.jsonl"))
            .unwrap_or_default()
            .lines()
            .next()
            .map_or(0, |l| usize::from(l.contains("\"kind\":\"totals\"")))
    };
    let mut written = 0u32;
    let mut rotations_seen = 0;
    let mut previous_id = None;
    for round in 0..6 {
        for _ in 0..200 {
            journal.emit(worklane_journal::Event::SlotReleased {
                slot: "agent-0.lock".to_owned(),
                slot_kind: "agent".to_owned(),
                owner: "o".repeat(40),
                held_ms: 1500,
                cpu_usec: None,
            });
            written += 1;
        }
        journal.emit(worklane_journal::Event::Takeover {
            resource: "agent-0.lock".to_owned(),
            owner: "o".to_owned(),
            stale_pid: Some(1),
            stale_owner: None,
            stale_since: None,
            claim: "c".to_owned(),
            proof: "p".to_owned(),
        });
        let id = std::fs::metadata(site.slots().join("journal.1.jsonl"))
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m));
        if id != previous_id {
            rotations_seen += 1;
            previous_id = id;
        }
        let (runs, sum, takeovers) = count(&site);
        assert_eq!(runs, f64::from(written), "round {round}: every run counted");
        assert!(
            (sum - 1.5 * f64::from(written)).abs() < 1e-6,
            "round {round}: their time too: {sum}"
        );
        assert_eq!(takeovers, f64::from(round + 1), "round {round}");
    }
    assert!(rotations_seen >= 3, "it rotated: {rotations_seen}");
    assert_eq!(first_lines(), 1, "the current file starts with its totals");
    // `events` shows no totals line unless asked.
    let out = site.output(&["events", "--json"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("\"totals\""));
    let out = site.output(&["events", "--kind", "totals", "--json"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"kind\":\"totals\""));
}

/// A waiter killed in line cannot say it left: the next waiter that finds its entry dead
/// retires it and says so (`slot-left`, with who waited).
#[test]
fn a_killed_waiter_is_said_gone_by_the_one_that_retires_its_entry() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run", "--owner", "holder"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let mut victim = site.spawn(&["run", "--owner", "victim"], HOLD, "1");
    let in_line = |site: &Site| {
        let doc: serde_json::Value =
            serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("json");
        doc["line"].as_array().map_or(0, Vec::len)
    };
    wait_until("the victim in line", || in_line(&site) == 1);
    super::jobs::sigkill(victim.id());
    let _ = wait_exit(&mut victim, "the killed waiter");
    let mut next = site.spawn(&["run", "--owner", "next"], HOLD, "2");
    let left = || {
        std::fs::read_to_string(site.slots().join("journal.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["kind"] == "slot-left")
            .collect::<Vec<_>>()
    };
    wait_until("the dead entry retired and said", || !left().is_empty());
    let said = left();
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0]["owner"], "victim", "{said:?}");
    assert_eq!(said[0]["slot_kind"], "agent");
    assert!(said[0]["waiter_pid"].is_u64(), "{said:?}");
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    wait_until("the next one holds", || site.file("up.2").exists());
    std::fs::write(site.file("release.2"), b"").expect("release");
    assert!(wait_exit(&mut next, "the next").success());
}

/// A supervisor SIGKILLed with nobody after it: once its command has ended too, the first look
/// (`slots`) says the holder is gone (`holder-gone`, once), `metrics` counts it and `events`
/// shows it.
#[test]
fn a_killed_holder_with_no_successor_is_said_gone_by_the_first_look() {
    let site = Site::new(Some(r#"{"max_agents": 2}"#));
    let mut holder = site.spawn(&["run", "--owner", "killed"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    super::jobs::sigkill(holder.id());
    let _ = wait_exit(&mut holder, "the killed supervisor");
    let gone = || {
        std::fs::read_to_string(site.slots().join("journal.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["kind"] == "holder-gone")
            .collect::<Vec<_>>()
    };
    // Its command gets SIGTERM from the kernel (`PR_SET_PDEATHSIG`) and ends; once the last
    // copy of the guard is closed, the first look says the holder is gone.
    std::fs::write(site.file("release.0"), b"").expect("release");
    wait_until("the first look after the command's end says it", || {
        assert!(site.output(&["slots"]).status.success());
        !gone().is_empty()
    });
    assert!(site.output(&["slots"]).status.success());
    let said = gone();
    assert_eq!(said.len(), 1, "once: {said:?}");
    assert_eq!(said[0]["slot"], "agent-0.lock", "{said:?}");
    assert_eq!(said[0]["slot_kind"], "agent");
    assert_eq!(said[0]["stale_owner"], "killed");
    assert_eq!(said[0]["stale_pid"].as_u64(), Some(u64::from(holder.id())));
    let metrics = String::from_utf8_lossy(&site.output(&["metrics"]).stdout).into_owned();
    assert!(
        metrics.contains("worklane_holders_gone_total 1\n"),
        "{metrics}"
    );
    let shown =
        String::from_utf8_lossy(&site.output(&["events", "--kind", "holder"]).stdout).into_owned();
    assert!(shown.contains("agent-0.lock freed"), "{shown}");
}
