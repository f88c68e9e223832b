//! The fleet against a real etcd: a 3-member cluster on loopback, started by each test with
//! temporary data directories and stopped by it; holders are separate processes
//! (`fleet-holder`), SIGKILLed and SIGSTOPped for real. Needs the `etcd` feature and the
//! `etcd` binary (Debian's `etcd-server`, which `.ci/run` installs).
#![cfg(feature = "etcd")]

use std::io::{BufRead, BufReader};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use worklane_testkit::etcd::Cluster;
use worklane_testkit::{Child, Gated};

/// A holder process and the lines it prints.
struct HolderProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl HolderProc {
    fn start(cluster: &Cluster, ttl_ms: u64, what: &str, name: &str, wait: bool) -> HolderProc {
        Self::start_as(cluster, ttl_ms, what, name, if wait { "wait" } else { "" })
    }

    /// A holder that waits and says `waiting` when it starts to, and that reads again only
    /// when its watch reports a change (its recheck is an hour away): only the watch can wake
    /// it within a test's watchdog.
    fn start_waiting_aloud(cluster: &Cluster, what: &str, name: &str) -> HolderProc {
        Self::start_as(cluster, TTL_MS, what, name, "wait-aloud")
    }

    fn start_as(cluster: &Cluster, ttl_ms: u64, what: &str, name: &str, mode: &str) -> HolderProc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleet-holder"));
        cmd.args([
            cluster.endpoints(),
            ttl_ms.to_string(),
            what.to_owned(),
            name.to_owned(),
        ]);
        if !mode.is_empty() {
            cmd.arg(mode);
        }
        if mode == "wait-aloud" {
            cmd.env("FLEET_HOLDER_RECHECK_MS", "3600000");
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        cluster.scope.mark(&mut cmd);
        let mut child = cmd.spawn_gated().expect("start fleet-holder");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        HolderProc {
            child,
            stdin,
            lines,
        }
    }

    /// Its next line (a watchdog, not a timing assertion).
    fn next(&self, limit: Duration) -> String {
        self.lines
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("no line from the holder in {limit:?}"))
    }

    fn pid(&self) -> rustix::process::Pid {
        rustix::process::Pid::from_raw(i32::try_from(self.child.id()).expect("pid")).expect("pid")
    }

    fn release(mut self) -> String {
        drop(self.stdin.take());
        let line = self.next(Duration::from_secs(10));
        let _ = self.child.wait();
        line
    }
}

fn epoch(line: &str) -> i64 {
    line.strip_prefix("held ")
        .unwrap_or_else(|| panic!("not held: {line}"))
        .parse()
        .expect("an epoch")
}

fn set_cap(cluster: &Cluster, pool: &str, cap: u32) {
    let endpoints: Vec<String> = cluster.endpoints().split(',').map(str::to_owned).collect();
    let fleet =
        worklane_fleet::Fleet::connect(&endpoints, Duration::from_secs(2)).expect("connect");
    fleet.set_cap(pool, cap).expect("set cap");
}

const TTL_MS: u64 = 2_000;
const LIMIT: Duration = Duration::from_secs(20);

#[test]
fn n_plus_4_concurrent_holders_from_separate_processes_exactly_n_hold() {
    let cluster = Cluster::start();
    let cap = 3;
    set_cap(&cluster, "agents", cap);
    let holders: Vec<HolderProc> = (0..cap + 4)
        .map(|_| HolderProc::start(&cluster, TTL_MS, "pool", "agents", false))
        .collect();
    let said: Vec<String> = holders.iter().map(|h| h.next(LIMIT)).collect();
    let held: Vec<i64> = said
        .iter()
        .filter(|l| l.starts_with("held "))
        .map(|l| epoch(l))
        .collect();
    assert_eq!(held.len(), cap as usize, "exactly the cap hold: {said:?}");
    assert!(
        said.iter()
            .filter(|l| l.starts_with("refused "))
            .all(|l| l.contains("is full (3 of 3 held")),
        "the others are refused, naming the holders: {said:?}"
    );
    let mut distinct = held.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        held.len(),
        "each holder its own epoch: {held:?}"
    );
    for (h, line) in holders.into_iter().zip(&said) {
        if line.starts_with("held ") {
            assert_eq!(h.release(), "released");
        }
    }
}

#[test]
fn a_pool_without_a_cap_admits_nobody_and_says_so() {
    let cluster = Cluster::start();
    let h = HolderProc::start(&cluster, TTL_MS, "pool", "uncapped", false);
    let line = h.next(LIMIT);
    assert!(
        line.starts_with("refused ") && line.contains("no cap set"),
        "{line}"
    );
}

#[test]
fn a_sigkilled_holder_frees_its_place_within_its_ttl_and_the_next_epoch_is_higher() {
    let cluster = Cluster::start();
    set_cap(&cluster, "agents", 1);
    let mut first = HolderProc::start(&cluster, TTL_MS, "pool", "agents", false);
    let first_epoch = epoch(&first.next(LIMIT));
    let waiter = HolderProc::start(&cluster, TTL_MS, "pool", "agents", true);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        waiter.lines.try_recv().is_err(),
        "the waiter waits while the first holds"
    );
    first.child.kill().expect("SIGKILL the holder");
    let _ = first.child.wait();
    let killed_at = Instant::now();
    let second_epoch = epoch(&waiter.next(LIMIT));
    assert!(
        killed_at.elapsed() < Duration::from_millis(TTL_MS) + Duration::from_secs(3),
        "freed within its TTL (plus etcd's expiry sweep): {:?}",
        killed_at.elapsed()
    );
    assert!(second_epoch > first_epoch, "{second_epoch} > {first_epoch}");
    assert_eq!(waiter.release(), "released");
}

/// A waiter of `what` `name` (held now by another) watches: while nothing changes it sends
/// etcd no transaction (a poller every 100 ms would send about fifteen), and the holder's
/// release wakes it (its recheck is an hour away: a watch that never fired would fail the
/// watchdog). It then holds, at a higher epoch.
fn a_waiter_watches_and_a_release_wakes_it(cluster: &Cluster, what: &str, name: &str) {
    let first = HolderProc::start(cluster, TTL_MS, what, name, false);
    let first_epoch = epoch(&first.next(LIMIT));
    let waiter = HolderProc::start_waiting_aloud(cluster, what, name);
    assert_eq!(waiter.next(LIMIT), "waiting");
    let before = cluster.grpc_calls("Txn");
    std::thread::sleep(Duration::from_millis(1_500));
    let sent = cluster.grpc_calls("Txn") - before;
    assert!(
        sent <= 2,
        "a {what} waiter with nothing changing sent {sent} transactions in 1.5 s"
    );
    assert!(waiter.lines.try_recv().is_err(), "still waiting");
    assert_eq!(first.release(), "released");
    let second_epoch = epoch(&waiter.next(LIMIT));
    assert!(second_epoch > first_epoch, "{second_epoch} > {first_epoch}");
    assert_eq!(waiter.release(), "released");
}

#[test]
fn a_pool_waiter_watches_instead_of_reading_again_and_a_release_wakes_it() {
    let cluster = Cluster::start();
    set_cap(&cluster, "agents", 1);
    a_waiter_watches_and_a_release_wakes_it(&cluster, "pool", "agents");
}

#[test]
fn a_role_waiter_watches_the_role_and_claims_it_when_its_holder_leaves() {
    let cluster = Cluster::start();
    a_waiter_watches_and_a_release_wakes_it(&cluster, "role", "coordinator");
}

#[test]
fn a_holder_stopped_past_its_ttl_is_succeeded_and_halts_on_resume_before_anything_else() {
    let cluster = Cluster::start();
    set_cap(&cluster, "agents", 1);
    let stopped = HolderProc::start(&cluster, TTL_MS, "pool", "agents", false);
    let old = epoch(&stopped.next(LIMIT));
    rustix::process::kill_process(stopped.pid(), rustix::process::Signal::STOP).expect("SIGSTOP");
    let successor = HolderProc::start(&cluster, TTL_MS, "pool", "agents", true);
    let new = epoch(&successor.next(LIMIT));
    assert!(new > old, "the successor's epoch is higher: {new} > {old}");
    rustix::process::kill_process(stopped.pid(), rustix::process::Signal::CONT).expect("SIGCONT");
    let line = stopped.next(LIMIT);
    assert!(
        line.starts_with("lost "),
        "its first act on resume is to give up: {line}"
    );
    assert_eq!(successor.release(), "released");
}

#[test]
fn a_role_has_one_holder_across_hosts_and_a_refusal_names_it() {
    let cluster = Cluster::start();
    let first = HolderProc::start(&cluster, TTL_MS, "role", "coordinator", false);
    let _ = epoch(&first.next(LIMIT));
    let second = HolderProc::start(&cluster, TTL_MS, "role", "coordinator", false);
    let line = second.next(LIMIT);
    assert!(line.starts_with("refused "), "{line}");
    for part in [
        "coordinator".to_owned(),
        format!("pid {}", first.child.id()),
        worklane_fleet::value::host_name(),
        "since".to_owned(),
    ] {
        assert!(line.contains(&part), "names {part}: {line}");
    }
    assert_eq!(first.release(), "released");
    let third = HolderProc::start(&cluster, TTL_MS, "role", "coordinator", false);
    assert!(third.next(LIMIT).starts_with("held "), "free once released");
}

#[test]
fn killing_the_leader_keeps_every_holder_in_place() {
    let mut cluster = Cluster::start();
    set_cap(&cluster, "agents", 2);
    // A TTL the leader's election fits in well (etcd here elects within about a second): a
    // holder halts at TTL/2 unconfirmed.
    let ttl_ms = 5_000;
    let holders: Vec<HolderProc> = (0..2)
        .map(|_| HolderProc::start(&cluster, ttl_ms, "pool", "agents", false))
        .collect();
    for h in &holders {
        let _ = epoch(&h.next(LIMIT));
    }
    let leader = cluster.leader();
    cluster.kill(leader);
    // Longer than the TTL: the holders keep their leases alive through the new leader.
    std::thread::sleep(Duration::from_millis(ttl_ms + 1_000));
    for h in &holders {
        if let Ok(line) = h.lines.try_recv() {
            panic!("no holder loses its place when the leader dies: {line}");
        }
    }
    let late = HolderProc::start(&cluster, TTL_MS, "pool", "agents", false);
    let line = late.next(LIMIT);
    assert!(
        line.contains("is full (2 of 2 held"),
        "both still hold: {line}"
    );
    for h in holders {
        assert_eq!(h.release(), "released");
    }
}

#[test]
fn stopping_the_whole_cluster_halts_every_holder_and_admits_nobody() {
    let mut cluster = Cluster::start();
    set_cap(&cluster, "agents", 2);
    let holders: Vec<HolderProc> = (0..2)
        .map(|_| HolderProc::start(&cluster, TTL_MS, "pool", "agents", false))
        .collect();
    for h in &holders {
        let _ = epoch(&h.next(LIMIT));
    }
    for i in 0..3 {
        cluster.kill(i);
    }
    let stopped_at = Instant::now();
    for h in &holders {
        let line = h.next(LIMIT);
        assert!(
            line.starts_with("lost ") && line.contains("unconfirmed"),
            "{line}"
        );
    }
    assert!(
        stopped_at.elapsed() < Duration::from_millis(TTL_MS),
        "every holder halted before its lease could lapse: {:?}",
        stopped_at.elapsed()
    );
    let late = HolderProc::start(&cluster, TTL_MS, "pool", "agents", false);
    let line = late.next(LIMIT);
    assert!(
        line.starts_with("error ") && line.contains("127.0.0.1"),
        "names the endpoints: {line}"
    );
}

#[test]
fn eight_processes_on_two_hosts_never_take_more_than_the_shared_budget_has_left() {
    let cluster = Cluster::start();
    let endpoints: Vec<String> = cluster.endpoints().split(',').map(str::to_owned).collect();
    let fleet =
        worklane_fleet::Fleet::connect(&endpoints, Duration::from_secs(5)).expect("connect");
    let token = "ghp_fleet_budget_test_token_not_real";
    let credential = worklane_budget::CredentialKey::of_token(token);
    let now = || {
        u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis()),
        )
        .unwrap_or(0)
    };
    // An answer seen: 5 calls left of `core` until an hour from now.
    let reset = (now() / 1000 + 3600).to_string();
    let headers = [
        ("x-ratelimit-limit", "5000"),
        ("x-ratelimit-remaining", "5"),
        ("x-ratelimit-reset", reset.as_str()),
        ("x-ratelimit-resource", "core"),
    ];
    let observation = worklane_budget::Observation::from_headers(200, |name| {
        headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    });
    fleet
        .budget_observe(&credential, &observation, &now)
        .expect("observe");
    // Eight takers at once (as from two hosts: nothing of the host is involved).
    let takers: Vec<HolderProc> = (0..8)
        .map(|_| HolderProc::start(&cluster, TTL_MS, "budget", token, false))
        .collect();
    let said: Vec<String> = takers.iter().map(|t| t.next(LIMIT)).collect();
    let went = said.iter().filter(|l| *l == "go counted").count();
    let refused = said.iter().filter(|l| *l == "refused").count();
    assert_eq!(
        (went, refused),
        (5, 3),
        "exactly the 5 calls left go: {said:?}"
    );
    let state = fleet.budget_show(&credential).expect("show");
    let window = state.resources.get("core").expect("the core window");
    assert_eq!(window.left(), 0, "{window:?}");
    assert_eq!(window.granted, 5, "{window:?}");
    let stored = String::from_utf8_lossy(&state.to_bytes(now())).into_owned();
    assert!(
        !stored.contains(token),
        "the token never leaves the host: {stored}"
    );
}
