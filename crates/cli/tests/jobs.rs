//! `run --jobs`: a build's jobserver backed by the machine's job slots (`max_jobs`), with real
//! GNU make, real cargo and rustc, and clients that crash.

use super::*;

/// A Makefile of `targets` targets that each count themselves in while they run (through
/// `$(CTR)`, under flock(1)), sleep `secs`, and count themselves out, in one shell (so a
/// target whose make was killed still counts itself out); every count seen at a start goes to
/// `$(CTR).log`.
fn makefile(site: &Site, targets: u32, secs: &str) -> PathBuf {
    let dir = site.file("build");
    let _ = std::fs::create_dir(&dir);
    let text = format!(
        "T := $(shell seq 1 {targets})\n\
         all: $(addprefix t,$(T))\n\
         t%:\n\
         \t@flock $(CTR).lock sh -c 'n=$$(($$(cat $(CTR) 2>/dev/null || echo 0)+1)); echo $$n > $(CTR); echo $$n >> $(CTR).log'; \
         sleep {secs}; \
         flock $(CTR).lock sh -c 'echo $$(($$(cat $(CTR))-1)) > $(CTR)'\n"
    );
    std::fs::write(dir.join("Makefile"), text).expect("Makefile");
    dir
}

/// `worklane run ARGS -- make -s -j32 CTR=...` in `dir`, started in the background.
fn build(site: &Site, args: &[&str], dir: &Path, counter: &Path) -> Running {
    Running::new(
        site.worklane()
            .arg("run")
            .args(args)
            .args(["--", "make", "-s", "-j32"])
            .arg(format!("CTR={}", counter.display()))
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn worklane run --jobs -- make"),
    )
}

/// Every count the targets saw at their start.
fn counts(counter: &Path) -> Vec<u32> {
    let log = std::fs::read_to_string(format!("{}.log", counter.display())).unwrap_or_default();
    log.lines().map(|l| l.parse().expect("a count")).collect()
}

/// The job slots `slots --json` shows held.
fn jobs_held(site: &Site) -> u64 {
    let out = site.output(&["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("slots --json");
    doc["jobs_held"].as_u64().expect("jobs_held")
}

fn finish(run: Running, what: &str) {
    let out = run.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{what} succeeds: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn four_builds_never_run_more_targets_at_once_than_max_jobs() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 4}"#));
    let dir = makefile(&site, 40, "0.05");
    let counter = site.file("counter");
    let builds: Vec<Running> = (0..4)
        .map(|_| build(&site, &["--jobs"], &dir, &counter))
        .collect();
    for b in builds {
        finish(b, "every build");
    }
    let seen = counts(&counter);
    assert_eq!(seen.len(), 160, "every target of the four builds ran");
    let most = seen.iter().copied().max().expect("counts");
    assert!(
        most <= 4,
        "never more than max_jobs (4) targets at once machine-wide: {most}"
    );
    assert_eq!(jobs_held(&site), 0, "every job slot is released");
    assert!(
        journaled(&site, "jobs-escaped").is_empty(),
        "a build that reads the jobserver is no escape"
    );
}

#[test]
fn one_build_runs_at_the_machines_full_width() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 3}"#));
    let dir = makefile(&site, 12, "0.3");
    let counter = site.file("counter");
    finish(build(&site, &["--jobs"], &dir, &counter), "the build");
    let seen = counts(&counter);
    assert_eq!(
        seen.iter().copied().max(),
        Some(3),
        "make -j32 runs as wide as max_jobs (3) and no wider: {seen:?}"
    );
}

#[test]
fn a_share_caps_the_tree_and_makes_own_j_is_one() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 4}"#));
    let dir = makefile(&site, 8, "0.3");
    let counter = site.file("counter");
    finish(build(&site, &["--jobs=2"], &dir, &counter), "the build");
    assert_eq!(counts(&counter).iter().copied().max(), Some(2), "--jobs=2");
    std::fs::remove_file(format!("{}.log", counter.display())).expect("new log");
    let out = site
        .worklane()
        .args(["run", "--jobs", "--", "make", "-s", "-j3"])
        .arg(format!("CTR={}", counter.display()))
        .current_dir(&dir)
        .output_gated()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        counts(&counter).iter().copied().max(),
        Some(3),
        "make's own -j3"
    );
}

#[test]
fn a_build_killed_mid_run_leaves_no_job_slot_once_its_tree_has_ended() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 3}"#));
    let dir = makefile(&site, 30, "0.2");
    let counter = site.file("counter");
    let mut doomed = build(&site, &["--jobs"], &dir, &counter);
    wait_until("the doomed build runs three targets", || {
        counts(&counter).contains(&3)
    });
    // SIGKILL the make (the supervisor's child) while its targets run.
    let make = child_named(doomed.id(), "make").expect("the build's make");
    sigkill(make);
    let status = wait_exit(&mut doomed, "the killed build's supervisor");
    assert_eq!(status.code(), None, "it ends by make's signal");
    wait_until("the killed build's targets end", || {
        std::fs::read_to_string(&counter).is_ok_and(|n| n.trim() == "0")
    });
    wait_until("every job slot free", || jobs_held(&site) == 0);
    // The others run on at full width.
    std::fs::remove_file(format!("{}.log", counter.display())).expect("new log");
    let dir = makefile(&site, 9, "0.3");
    finish(build(&site, &["--jobs"], &dir, &counter), "the next build");
    assert_eq!(
        counts(&counter).iter().copied().max(),
        Some(3),
        "the next build gets every job slot"
    );
}

#[test]
fn a_token_read_and_never_written_back_is_returned_while_the_tree_runs() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 2}"#));
    // A client of the fifo form reads a token and exits; the tree runs on without anyone
    // holding the jobserver, so the token is judged lost and its slot returned while it runs.
    let thief = r#"
        auth=$(printf '%s' "$MAKEFLAGS" | sed -n 's/.*--jobserver-auth=fifo:\([^ ]*\).*/\1/p')
        head -c 1 "$auth" > "$T/stolen"
        touch "$T/up"
        while [ ! -e "$T/release" ]; do sleep 0.02; done
    "#;
    let mut run = Running::new(
        site.worklane()
            .args([
                "run",
                "--jobs",
                "--jobs-style",
                "fifo",
                "--",
                "sh",
                "-c",
                thief,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn"),
    );
    wait_until("the thief has its token", || site.file("up").exists());
    assert_eq!(
        std::fs::read(site.file("stolen")).expect("stolen").len(),
        1,
        "it read a token"
    );
    // With both job slots held (the build's own and the stolen token's), another build's job
    // gets one only once the stolen token is judged lost.
    let other = site.output(&["run", "--kind", "job", "--timeout", "20s", "--", "true"]);
    assert!(
        other.status.success(),
        "another build's job ran while the thief's tree still runs: {other:?}"
    );
    assert!(
        matches!(run.try_wait(), Ok(None)),
        "the thief's tree is still running"
    );
    std::fs::write(site.file("release"), "").expect("release");
    let status = wait_exit(&mut run, "the run");
    assert!(status.success(), "{status:?}");
    assert_eq!(jobs_held(&site), 0, "nothing held once the tree has ended");
}

#[test]
fn stop_halts_a_build_and_frees_its_job_slots() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 3}"#));
    let dir = makefile(&site, 30, "1");
    let counter = site.file("counter");
    let mut run = build(&site, &["--jobs"], &dir, &counter);
    wait_until("three targets run", || counts(&counter).contains(&3));
    let out = site.output(&["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("slots --json");
    let jobs: Vec<&serde_json::Value> = doc["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .filter(|s| s["kind"] == "job")
        .collect();
    assert_eq!(
        jobs.len(),
        3,
        "slots shows the build's three job slots: {doc}"
    );
    let supervisor = run.id();
    assert!(
        jobs.iter().all(|s| s["pid"] == supervisor),
        "each names the build's supervisor: {doc}"
    );
    let out = site.output(&["stop-all", "--json", "build", "storm"]);
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stop-all --json");
    let halted = report["halted"].as_array().expect("halted");
    // One command, counted once: under its agent slot, not again under its own job slot.
    assert_eq!(halted.len(), 1, "{report}");
    assert!(
        halted[0]["resource"]
            .as_str()
            .is_some_and(|r| r.starts_with("agent-")),
        "{report}"
    );
    let status = wait_exit(&mut run, "the halted build");
    assert_eq!(status.code(), Some(143), "halted by SIGTERM: {status:?}");
    wait_until("every job slot free", || jobs_held(&site) == 0);
}

/// A small crate graph: `n` library crates, all but the first two on `c0`.
fn crate_graph(site: &Site, n: u32) -> PathBuf {
    let root = site.file("graph");
    std::fs::create_dir_all(&root).expect("graph");
    std::fs::write(
        root.join("Cargo.toml"),
        "[workspace]\nmembers = [\"c*\"]\nresolver = \"2\"\n",
    )
    .expect("workspace");
    for i in 0..n {
        let dir = root.join(format!("c{i}"));
        std::fs::create_dir_all(dir.join("src")).expect("crate");
        let dep = if i >= 2 {
            "c0 = { path = \"../c0\" }"
        } else {
            ""
        };
        std::fs::write(
            dir.join("Cargo.toml"),
            format!(
                "[package]\nname = \"c{i}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
                 [dependencies]\n{dep}\n"
            ),
        )
        .expect("manifest");
        std::fs::write(
            dir.join("src/lib.rs"),
            format!("pub fn f{i}() -> u64 {{ (0..1000u64).map(|x| x * {i}).sum() }}\n"),
        )
        .expect("lib");
    }
    root
}

/// The most `rustc` processes below `root` seen at once, sampled until `root` exits.
fn most_rustc(root: &mut Running) -> usize {
    let mut most = 0;
    while matches!(root.try_wait(), Ok(None)) {
        let table = process_table();
        let n = descendants(root.id(), &table)
            .iter()
            .filter(|pid| {
                table
                    .iter()
                    .any(|(p, _, name)| p == *pid && name == "rustc")
            })
            .count();
        most = most.max(n);
        std::thread::sleep(Duration::from_millis(5));
    }
    most
}

#[test]
fn cargo_runs_no_more_rustc_at_once_than_max_jobs_in_either_form() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    for style in ["fifo", "fds"] {
        let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 2}"#));
        let graph = crate_graph(&site, 10);
        let mut run = Running::new(
            site.worklane()
                .args(["run", "--jobs", "--jobs-style", style, "--"])
                .arg(&cargo)
                .args(["build", "--offline", "-q", "-j64"])
                .current_dir(&graph)
                .env("CARGO_TARGET_DIR", site.file("target"))
                .env_remove("CARGO_MAKEFLAGS")
                .env_remove("MAKEFLAGS")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("spawn cargo build"),
        );
        let most = most_rustc(&mut run);
        let out = run.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{style}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            (1..=2).contains(&most),
            "{style}: at most max_jobs (2) rustc at once, and some: {most}"
        );
        assert_eq!(jobs_held(&site), 0, "{style}: every job slot released");
    }
}

#[test]
fn an_older_make_style_client_reads_and_returns_tokens_through_the_descriptors() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 3}"#));
    // What make before 4.4 does: `--jobserver-auth=R,W` (`--jobserver-fds` before 4.2),
    // a blocking read of one byte per job on R, the byte written back on W.
    let client = r#"
        auth=$(printf '%s' "$MAKEFLAGS" | sed -n 's/.*--jobserver-auth=\([0-9]*\),\([0-9]*\).*/\1 \2/p')
        set -- $auth
        python3 - "$1" "$2" <<'EOF'
import os, sys
r, w = int(sys.argv[1]), int(sys.argv[2])
got = [os.read(r, 1) for _ in range(2)]
open(os.environ["T"] + "/got", "w").write(str(len(b"".join(got))))
for t in got:
    os.write(w, t)
EOF
    "#;
    let out = site.output(&["run", "--jobs", "--", "sh", "-c", client]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(site.file("got")).expect("got"),
        "2",
        "two tokens read beside the implicit one (max_jobs 3)"
    );
    assert_eq!(jobs_held(&site), 0, "returned, and released");
}

/// Every process as `(pid, ppid, name)`.
fn process_table() -> Vec<(u32, u32, String)> {
    let mut table = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_owned();
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        table.push((pid, ppid, name));
    }
    table
}

fn descendants(root: u32, table: &[(u32, u32, String)]) -> Vec<u32> {
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, ppid, _) in table {
            if *ppid == parent && !found.contains(pid) {
                found.push(*pid);
                frontier.push(*pid);
            }
        }
    }
    found
}

/// A child of `parent` named `name`.
fn child_named(parent: u32, name: &str) -> Option<u32> {
    process_table()
        .into_iter()
        .find(|(_, ppid, n)| *ppid == parent && n == name)
        .map(|(pid, _, _)| pid)
}

pub(super) fn sigkill(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

#[test]
fn dispatched_work_gets_a_jobserver_too() {
    let site = Site::new(Some(r#"{"max_agents": 2, "max_jobs": 3}"#));
    let _dispatcher = super::dispatcher::start(&site, &[]);
    let script =
        r#"printf '%s' "$MAKEFLAGS" > "$T/flags"; printf '%s' "$WORKLANE_JOBSERVER" > "$T/fifo""#;
    let out = super::dispatcher::enqueue(&site, &["--jobs=2"], script);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the driver's command ran", || site.file("fifo").exists());
    let flags = std::fs::read_to_string(site.file("flags")).expect("flags");
    assert!(
        flags.starts_with("-j2 --jobserver-auth=") && flags.contains(','),
        "the dispatched command's build was given a jobserver of share 2: {flags:?}"
    );
    wait_until("every job slot free once it ended", || {
        jobs_held(&site) == 0
    });
}

#[test]
fn a_build_under_stop_is_refused_with_69_before_it_starts() {
    let site = Site::new(Some(r#"{"max_agents": 2, "max_jobs": 2}"#));
    assert_eq!(site.code(&["stop-all", "maintenance"]), 0);
    let ran = site.file("ran");
    let out = site.output(&["run", "--jobs", "--", "touch", ran.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(!ran.exists(), "the command never started");
    assert_eq!(jobs_held(&site), 0, "and no job slot was taken");
}

#[test]
fn a_killed_supervisor_frees_no_job_slot_its_build_still_uses() {
    let site = Site::new(Some(r#"{"max_agents": 2, "max_jobs": 3}"#));
    // A client that takes a token, then runs on (ignoring the SIGTERM its supervisor's death
    // sends) until it is released.
    let client = r#"
        trap '' TERM
        auth=$(printf '%s' "$MAKEFLAGS" | sed -n 's/.*--jobserver-auth=\([0-9]*\),\([0-9]*\).*/\1/p')
        python3 -c 'import os, sys; os.read(int(sys.argv[1]), 1)' "$auth"
        touch "$T/up"
        while [ ! -e "$T/release" ]; do sleep 0.02; done
    "#;
    let mut run = Running::new(
        site.worklane()
            .args(["run", "--jobs", "--", "sh", "-c", client])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("spawn"),
    );
    wait_until("the client holds its token", || site.file("up").exists());
    wait_until("the build's own slot and its token's", || {
        jobs_held(&site) >= 2
    });
    sigkill(run.id());
    let _ = wait_exit(&mut run, "the SIGKILLed supervisor");
    // Some looks later, both are still held: the build's own by the guard it inherited, the
    // token's by the descriptor in flight in the socket the tree inherited.
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            jobs_held(&site) >= 2,
            "nothing the live build uses is freed by its supervisor's death"
        );
    }
    std::fs::write(site.file("release"), "").expect("release");
    wait_until("every job slot free once the tree has ended", || {
        jobs_held(&site) == 0
    });
}

/// The journal's events of `kind` (all of its lines that are JSON).
fn journaled(site: &Site, kind: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(site.slots().join("journal.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// Builds that end normally leave nothing to take over: the supervisor stops its token taker
/// and waits for it before it releases and exits, so no take is half done at exit.
#[test]
fn builds_that_end_normally_leave_no_slot_to_take_over() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 3}"#));
    let dir = makefile(&site, 6, "0.02");
    let counter = site.file("counter");
    for _batch in 0..6 {
        let builds: Vec<Running> = (0..8)
            .map(|_| build(&site, &["--jobs"], &dir, &counter))
            .collect();
        for b in builds {
            finish(b, "every build");
        }
    }
    assert_eq!(counts(&counter).len(), 48 * 6, "every target ran");
    let takeovers = journaled(&site, "takeover");
    assert!(takeovers.is_empty(), "no takeover: {takeovers:?}");
    let jobs = |kind: &str| {
        journaled(&site, kind)
            .into_iter()
            .filter(|e| e["slot_kind"] == "job")
            .count()
    };
    let (taken, released) = (jobs("slot-taken"), jobs("slot-released"));
    assert!(
        taken >= 48,
        "each build took its own job slot at least: {taken}"
    );
    assert_eq!(taken, released, "every job slot taken was released");
    assert_eq!(jobs_held(&site), 0);
    // Nothing left for the next take to find and take over.
    assert_eq!(site.code(&["run", "--kind", "job", "--", "true"]), 0);
    assert!(journaled(&site, "takeover").is_empty());
}

/// A held job slot is one unit of `max_jobs` everywhere: `why --kind job` says the pool is
/// full and exits 75 as a take would be refused, and `slots --json` gives each 1 unit.
#[test]
fn held_job_slots_count_one_unit_each_in_why_and_slots() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 3}"#));
    let holders: Vec<Running> = (0..3)
        .map(|i| site.spawn(&["run", "--kind", "job"], HOLD, &i.to_string()))
        .collect();
    for i in 0..3 {
        wait_until("a job slot held", || site.file(&format!("up.{i}")).exists());
    }
    let why = site.output(&["why", "--kind", "job"]);
    let text = String::from_utf8_lossy(&why.stdout);
    assert_eq!(why.status.code(), Some(75), "{text}");
    assert!(text.contains("at cap: 3 of 3 held"), "{text}");
    assert_eq!(site.code(&["run", "--kind", "job", "-n", "--", "true"]), 75);
    let out = site.output(&["slots", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("slots --json");
    let units: Vec<u64> = doc["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .filter(|s| s["kind"] == "job")
        .map(|s| s["units"].as_u64().expect("units"))
        .collect();
    assert_eq!(units, [1, 1, 1], "{doc}");
    // A fourth waits in the job line.
    let waiter = site.spawn(&["run", "--kind", "job"], HOLD, "3");
    wait_until("the fourth in line", || {
        let out = site.output(&["slots", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("slots --json");
        doc["line"].as_array().is_some_and(|l| !l.is_empty())
    });
    // The metrics watch max_jobs as they watch the other caps.
    let metrics = |site: &Site| {
        let out = site.output(&["metrics"]);
        assert!(out.status.success(), "{out:?}");
        super::journal::parse_exposition(&String::from_utf8_lossy(&out.stdout))
    };
    let m = metrics(&site);
    assert_eq!(m["worklane_holders{kind=\"job\"}"], 3.0);
    assert_eq!(m["worklane_cap{kind=\"job\"}"], 3.0);
    assert_eq!(m["worklane_waiters{kind=\"job\"}"], 1.0);
    for (i, holder) in holders.into_iter().enumerate() {
        std::fs::write(site.file(&format!("release.{i}")), b"").expect("release");
        finish(holder, "a holder");
    }
    wait_until("the fourth holds", || site.file("up.3").exists());
    std::fs::write(site.file("release.3"), b"").expect("release");
    finish(waiter, "the fourth");
    assert_eq!(site.code(&["why", "--kind", "job"]), 0, "clear again");
    // Each hold and wait timed under its own kind, apart from agents'.
    let m = metrics(&site);
    assert_eq!(m["worklane_run_seconds_count{kind=\"job\"}"], 4.0);
    assert_eq!(m["worklane_queue_wait_seconds_count{kind=\"job\"}"], 4.0);
    assert_eq!(m["worklane_run_seconds_count{kind=\"agent\"}"], 0.0);
}

/// Backdates `path`'s modification time by two minutes.
fn backdate(path: &Path) {
    let out = Command::new("touch")
        .args(["-d", "2 minutes ago"])
        .arg(path)
        .output_gated()
        .expect("touch");
    assert!(out.status.success(), "{out:?}");
}

/// A jobserver's private directory left by a SIGKILLed supervisor is swept by the next
/// `run --jobs` of its user; a live jobserver's (locked), a young one, and another user's
/// are left alone.
#[test]
fn a_killed_supervisors_private_directory_is_swept_by_the_next_build() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 3}"#));
    // The site's own root as TMPDIR: a test's paths must all be inside it.
    let temp = site.file("");
    let dirs = |temp: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(temp)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("worklane-jobs-"))
            .collect();
        names.sort();
        names
    };
    // A real one: the supervisor and its command SIGKILLed mid-build.
    let mut killed = Running::new(
        site.worklane()
            .args(["run", "--jobs", "--", "sleep", "30"])
            .env("TMPDIR", &temp)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("run --jobs"),
    );
    wait_until("its private directory", || {
        if let Ok(Some(status)) = killed.try_wait() {
            let mut err = String::new();
            let _ =
                std::io::Read::read_to_string(&mut killed.stderr.take().expect("stderr"), &mut err);
            panic!("run --jobs ended: {status:?} {err}");
        }
        dirs(&temp).len() == 1
    });
    let left = dirs(&temp).remove(0);
    let supervisor = killed.id();
    wait_until("its command", || child_named(supervisor, "sleep").is_some());
    let command = child_named(supervisor, "sleep").expect("sleep");
    sigkill(supervisor);
    sigkill(command);
    let _ = wait_exit(&mut killed, "the killed supervisor");
    assert!(temp.join(&left).join("jobserver").exists(), "left behind");
    backdate(&temp.join(&left));
    // Three that must stay: a live jobserver's (its lock held), a young one, another user's.
    let live = temp.join("worklane-jobs-live-0-0");
    let young = temp.join("worklane-jobs-young-0-0");
    let others = temp.join("worklane-jobs-others-0-0");
    for dir in [&live, &young, &others] {
        std::fs::create_dir(dir).expect("mkdir");
    }
    std::os::unix::fs::chown(&others, Some(65534), Some(65534)).expect("chown");
    backdate(&live);
    backdate(&others);
    let mut holder = Running::new(
        site.command("flock")
            .arg(&live)
            .args(["-c", "sleep 60"])
            .stdin(Stdio::null())
            .spawn_gated()
            .expect("flock"),
    );
    wait_until("the live one locked", || {
        site.command("flock")
            .args(["-n"])
            .arg(&live)
            .arg("true")
            .output_gated()
            .is_ok_and(|o| !o.status.success())
    });
    let next = site
        .worklane()
        .args(["run", "--jobs", "--", "true"])
        .env("TMPDIR", &temp)
        .output_gated()
        .expect("the next build");
    assert!(next.status.success(), "{next:?}");
    assert_eq!(
        dirs(&temp),
        [
            "worklane-jobs-live-0-0",
            "worklane-jobs-others-0-0",
            "worklane-jobs-young-0-0"
        ],
        "the killed one's swept ({left}), the next build's own removed at its end"
    );
    sigkill(holder.id());
    let _ = wait_exit(&mut holder, "the lock's holder");
}

/// `sh -c 'make -j8'` under `--jobs`: make, given its own -j through a shell worklane cannot
/// rewrite, drops the jobserver and runs 8 at once. That cannot be stopped from outside, so it
/// is said: once on stderr, and as a `jobs-escaped` event.
#[test]
fn a_make_given_its_own_j_through_a_shell_is_said_to_escape() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 3}"#));
    // Long enough for the two looks a second apart, whenever the first falls.
    let dir = makefile(&site, 8, "4");
    let counter = site.file("counter");
    let out = site
        .worklane()
        .args(["run", "--jobs", "--", "sh", "-c"])
        .arg(format!("make -s -j8 CTR={}", counter.display()))
        .current_dir(&dir)
        .output_gated()
        .expect("run --jobs -- sh -c make -j8");
    assert!(out.status.success(), "{out:?}");
    let most = counts(&counter).into_iter().max().unwrap_or(0);
    assert!(most > 3, "it did run past max_jobs: {most}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("runs outside the machine's max_jobs").count(),
        1,
        "said once: {err}"
    );
    let escaped = journaled(&site, "jobs-escaped");
    assert_eq!(escaped.len(), 1, "{escaped:?}");
    assert!(
        escaped[0]["command"]
            .as_str()
            .is_some_and(|c| c.contains("make -s -j8")),
        "{escaped:?}"
    );
}

/// With `--jobs-shim` the same `sh -c 'make -j8'` stays within max_jobs: the shim first on
/// PATH runs the real make without its -j8, so make reads the jobserver.
#[test]
fn the_jobs_shim_keeps_a_make_started_through_a_shell_within_max_jobs() {
    let site = Site::new(Some(r#"{"max_agents": 8, "max_jobs": 3}"#));
    let dir = makefile(&site, 9, "0.3");
    let counter = site.file("counter");
    let out = site
        .worklane()
        .args(["run", "--jobs", "--jobs-shim", "--", "sh", "-c"])
        .arg(format!(
            "env nice make -s -j 8 --jobs=8 -j8 CTR={}",
            counter.display()
        ))
        .current_dir(&dir)
        .output_gated()
        .expect("run --jobs --jobs-shim");
    assert!(out.status.success(), "{out:?}");
    let seen = counts(&counter);
    assert_eq!(seen.len(), 9, "every target ran: {seen:?}");
    let most = seen.iter().copied().max().unwrap_or(0);
    assert!(
        most <= 3,
        "within max_jobs (3), though asked -j8 three ways: {most}"
    );
    assert_eq!(
        most, 3,
        "and as wide as the machine gives: the jobserver was read"
    );
    assert!(journaled(&site, "jobs-escaped").is_empty());
}
