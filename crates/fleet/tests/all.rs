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
        Self::start_with(cluster, ttl_ms, what, name, mode, &[])
    }

    /// A holder started with `mode` and the variables `env` (`FLEET_HOLDER_RECHECK_MS`,
    /// `FLEET_HOLDER_TIMEOUT_MS`).
    fn start_with(
        cluster: &Cluster,
        ttl_ms: u64,
        what: &str,
        name: &str,
        mode: &str,
        env: &[(&str, &str)],
    ) -> HolderProc {
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
        if mode == "wait-aloud" || mode == "wait-stop" {
            cmd.env("FLEET_HOLDER_RECHECK_MS", "3600000");
        }
        cmd.envs(env.iter().copied());
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
    let fleet = connect_to(&cluster.endpoints(), Duration::from_secs(2));
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
    let sent = transactions_in_1_5_s(cluster);
    assert!(
        sent <= 2,
        "a {what} waiter with nothing changing sent {sent} transactions in 1.5 s"
    );
    assert!(waiter.lines.try_recv().is_err(), "still waiting");
    the_waiter_succeeds(first, first_epoch, waiter);
}

/// Transactions etcd answered while the test waited 1.5 s (a waiter with nothing changing
/// should send few: a poller every 100 ms would send about fifteen).
fn transactions_in_1_5_s(cluster: &Cluster) -> u64 {
    let before = cluster.grpc_calls("Txn");
    std::thread::sleep(Duration::from_millis(1_500));
    cluster.grpc_calls("Txn") - before
}

/// `first` releases; `waiter` then holds, at an epoch above `first_epoch`, and releases.
fn the_waiter_succeeds(first: HolderProc, first_epoch: i64, waiter: HolderProc) {
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
    let fleet = connect_to(&cluster.endpoints(), Duration::from_secs(5));
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

/// The wall clock in ms, as the budget's windows count it.
fn wall_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis()),
    )
    .unwrap_or(0)
}

/// A connection to `cluster` whose holders' leases are 5 s.
fn connect(cluster: &Cluster) -> worklane_fleet::Fleet {
    connect_to(&cluster.endpoints(), Duration::from_secs(5))
}

/// A connection to `endpoints` (comma-separated) whose holders' leases are `ttl`.
fn connect_to(endpoints: &str, ttl: Duration) -> worklane_fleet::Fleet {
    let endpoints: Vec<String> = endpoints.split(',').map(str::to_owned).collect();
    worklane_fleet::Fleet::connect(&endpoints, ttl).expect("connect")
}

/// An answer's headers: `remaining` calls left of `core` until an hour from now.
fn core_left(remaining: u64) -> worklane_budget::Observation {
    let reset = (wall_ms() / 1000 + 3600).to_string();
    let remaining = remaining.to_string();
    let headers = [
        ("x-ratelimit-limit", "5000"),
        ("x-ratelimit-remaining", remaining.as_str()),
        ("x-ratelimit-reset", reset.as_str()),
        ("x-ratelimit-resource", "core"),
    ];
    worklane_budget::Observation::from_headers(200, |name| {
        headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    })
}

/// A hook that, on each of its first `times` calls, has another host take one call of `core`
/// from `credential` (a write between this host's read and its write); it counts its calls,
/// and fails the test at twice the writes a take may lose (a take that never gives up).
fn another_host_takes(
    other: worklane_fleet::Fleet,
    credential: worklane_budget::CredentialKey,
    times: u32,
    calls: &std::sync::Arc<std::sync::atomic::AtomicU32>,
) -> std::sync::Arc<dyn Fn() + Send + Sync> {
    let calls = std::sync::Arc::clone(calls);
    std::sync::Arc::new(move || {
        let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        assert!(
            n < 2 * worklane_fleet::budget::MAX_LOST_WRITES,
            "still trying after {n} lost writes: the retry has no bound"
        );
        if n < times {
            let took = other
                .budget_take(&credential, "core", "other", Duration::ZERO, &wall_ms)
                .expect("the other host's take");
            assert!(
                matches!(
                    took,
                    worklane_fleet::budget::BudgetTake::Go { counted: true, .. }
                ),
                "{took:?}"
            );
        }
    })
}

#[test]
fn a_budget_write_lost_to_other_hosts_is_decided_again_on_what_they_wrote_up_to_the_last_allowed() {
    use worklane_fleet::budget::{BudgetTake, MAX_LOST_WRITES};
    let cluster = Cluster::start();
    let fleet = connect(&cluster);
    let credential = worklane_budget::CredentialKey::of_token("ghp_fleet_contended_not_real");
    fleet
        .budget_observe(&credential, &core_left(1000), &wall_ms)
        .expect("observe");
    // Another host writes between each read and write of this host's, one time fewer than
    // the writes this host may lose: its last write goes through.
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let hook = another_host_takes(
        connect(&cluster),
        credential.clone(),
        MAX_LOST_WRITES - 1,
        &calls,
    );
    let took = fleet
        .clone()
        .with_before_budget_write(hook)
        .budget_take(&credential, "core", "me", Duration::ZERO, &wall_ms)
        .expect("the take goes through on its last allowed write");
    let others = u64::from(MAX_LOST_WRITES - 1);
    assert_eq!(
        took,
        BudgetTake::Go {
            counted: true,
            left: Some(1000 - others - 1)
        },
        "decided each time on what the other host wrote"
    );
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        MAX_LOST_WRITES
    );
    let window = fleet.budget_show(&credential).expect("show");
    let window = window.resources.get("core").expect("the core window");
    assert_eq!(window.granted, others + 1, "{window:?}");
}

#[test]
fn a_budget_whose_every_write_loses_gives_up_at_the_limit_and_takes_or_records_nothing() {
    use worklane_fleet::budget::MAX_LOST_WRITES;
    let cluster = Cluster::start();
    let fleet = connect(&cluster);
    let credential = worklane_budget::CredentialKey::of_token("ghp_fleet_starved_not_real");
    fleet
        .budget_observe(&credential, &core_left(100_000), &wall_ms)
        .expect("observe");
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let starved = fleet.clone().with_before_budget_write(another_host_takes(
        connect(&cluster),
        credential.clone(),
        u32::MAX,
        &calls,
    ));
    let err = starved
        .budget_take(&credential, "core", "me", Duration::ZERO, &wall_ms)
        .expect_err("a take that loses every write gives up");
    assert!(
        matches!(
            err,
            worklane_fleet::Error::Contended { lost, ref key }
                if lost == MAX_LOST_WRITES && key.contains("/budget/")
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("nothing was taken") && text.contains("try again"),
        "{text}"
    );
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        MAX_LOST_WRITES
    );
    let state = fleet.budget_show(&credential).expect("show");
    let window = state.resources.get("core").expect("the core window");
    assert_eq!(
        window.granted,
        u64::from(MAX_LOST_WRITES),
        "only the other host's takes were counted: {window:?}"
    );
    // An observation that loses every write gives up the same way, recording nothing.
    calls.store(0, std::sync::atomic::Ordering::SeqCst);
    let err = starved
        .budget_observe(&credential, &core_left(7), &wall_ms)
        .expect_err("an observation that loses every write gives up");
    assert!(
        matches!(err, worklane_fleet::Error::Contended { lost, .. } if lost == MAX_LOST_WRITES),
        "{err:?}"
    );
    let state = fleet.budget_show(&credential).expect("show");
    let window = state.resources.get("core").expect("the core window");
    assert_ne!(
        window.left(),
        7,
        "the observation was not recorded: {window:?}"
    );
}

#[test]
fn the_fleets_budgets_are_listed_one_per_credential_and_a_connection_says_its_endpoints() {
    let cluster = Cluster::start();
    let fleet = connect(&cluster);
    assert_eq!(fleet.endpoints(), cluster.endpoints());
    assert_eq!(
        fleet.ttl(),
        Duration::from_secs(5),
        "the TTL holders' leases get"
    );
    let shown = format!("{fleet:?}");
    assert!(
        shown.contains(&cluster.endpoints()) && shown.contains("5s"),
        "{shown}"
    );
    assert!(fleet.budgets().expect("no budget yet").is_empty());
    let first = worklane_budget::CredentialKey::of_token("ghp_fleet_first_not_real");
    let second = worklane_budget::CredentialKey::of_token("ghp_fleet_second_not_real");
    fleet
        .budget_observe(&first, &core_left(11), &wall_ms)
        .expect("observe");
    fleet
        .budget_observe(&second, &core_left(22), &wall_ms)
        .expect("observe");
    // A pool's keys beside them are not budgets.
    fleet.set_cap("agents", 3).expect("set cap");
    let mut left: Vec<u64> = fleet
        .budgets()
        .expect("budgets")
        .iter()
        .map(|s| s.resources.get("core").expect("core").left())
        .collect();
    left.sort_unstable();
    assert_eq!(left, [11, 22]);
}

/// This process as a holder named `test`.
fn me() -> worklane_fleet::Holder {
    worklane_fleet::Holder::this_process("test", "2026-12-07T00:00:00.000Z".into())
}

/// A place in pool `agents` asked for at once by this process, without waiting.
fn try_take_now(
    fleet: &worklane_fleet::Fleet,
) -> Result<worklane_fleet::Taken, worklane_fleet::Error> {
    fleet.take(
        "agents",
        &me(),
        worklane_fleet::Wait {
            timeout: Some(Duration::ZERO),
            on_wait: &mut |_| {},
        },
    )
}

/// Role `leader` claimed at once by this process, without waiting.
fn try_claim_now(
    fleet: &worklane_fleet::Fleet,
) -> Result<worklane_fleet::Taken, worklane_fleet::Error> {
    fleet.claim_role(
        "leader",
        &me(),
        worklane_fleet::Wait {
            timeout: Some(Duration::ZERO),
            on_wait: &mut |_| {},
        },
    )
}

/// A place in pool `agents` taken at once by this process (a holder named `test`).
fn take_now(fleet: &worklane_fleet::Fleet) -> worklane_fleet::Taken {
    try_take_now(fleet).expect("take at once")
}

/// A free place in pool `agents`, taken at once: held.
fn held_now(fleet: &worklane_fleet::Fleet) -> Box<worklane_fleet::Hold> {
    let taken = take_now(fleet);
    let worklane_fleet::Taken::Held(hold) = taken else {
        panic!("the free place is taken: {taken:?}")
    };
    hold
}

/// A connection to `cluster` and the one place of pool `agents` (its cap 1), held.
fn the_one_place(cluster: &Cluster) -> (worklane_fleet::Fleet, Box<worklane_fleet::Hold>) {
    let fleet = connect(cluster);
    fleet.set_cap("agents", 1).expect("set cap");
    let hold = held_now(&fleet);
    (fleet, hold)
}

/// Runs `work` with etcd's own client connected to `endpoints` (comma-separated), on a
/// runtime of its own: what an operator, or another host, does meanwhile.
fn with_etcd<F, Fut>(endpoints: &str, work: F)
where
    F: FnOnce(etcd_client::Client) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let endpoints: Vec<String> = endpoints.split(',').map(str::to_owned).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = etcd_client::Client::connect(&endpoints, None)
            .await
            .expect("connect");
        work(client).await;
    });
}

/// A place taken in this process says what it holds: its key (the pool's, in etcd's
/// listing), its epoch (the key's create revision), the TTL etcd granted, and its `Debug`
/// names the key; released, the key is gone at once. With etcd gone, an error names it and
/// what was being done.
#[test]
fn a_held_place_says_its_key_epoch_and_ttl_and_its_release_removes_the_key() {
    let mut cluster = Cluster::start();
    let (fleet, hold) = the_one_place(&cluster);
    let status = fleet.status("agents").expect("status");
    assert_eq!(status.keys.len(), 1, "{status:?}");
    assert_eq!(
        hold.key(),
        status.keys[0].key,
        "the key held is the one listed"
    );
    assert_eq!(
        hold.epoch(),
        status.keys[0].create_revision,
        "the epoch is its revision"
    );
    assert!(hold.epoch() > 1, "{hold:?}");
    assert_eq!(hold.ttl(), Duration::from_secs(5), "as etcd granted it");
    assert!(format!("{hold:?}").contains(hold.key()), "{hold:?}");
    hold.release().expect("release");
    assert!(
        fleet.status("agents").expect("status").keys.is_empty(),
        "released: the key is gone at once, not at the lease's end"
    );
    // A place dropped without its release (a holder unwinding) is given up the same way: its
    // lease revoked, the key gone at once rather than at the lease's end (5 s).
    let again = take_now(&fleet);
    assert!(matches!(again, worklane_fleet::Taken::Held(_)), "{again:?}");
    drop(again);
    assert!(
        fleet.status("agents").expect("status").keys.is_empty(),
        "dropped: its lease revoked"
    );
    // With every member gone, the error says where and what it was doing, and a release
    // etcd did not confirm says so (the place may still count until its lease ends).
    let kept = take_now(&fleet);
    let worklane_fleet::Taken::Held(kept) = kept else {
        panic!("the free place is taken: {kept:?}")
    };
    for member in 0..3 {
        cluster.kill(member);
    }
    let gone = fleet.status("agents").expect_err("no member answers");
    let said = gone.to_string();
    assert!(
        said.contains("127.0.0.1")
            && said.contains(r#"did not answer while reading pool "agents""#),
        "{said}"
    );
    let unconfirmed = kept.release().expect_err("no member confirms the release");
    assert!(
        unconfirmed.to_string().contains("while releasing"),
        "{unconfirmed}"
    );
}

/// A holder that pulses often sends a keepalive only every sixth of its TTL (250 ms at
/// least), not at every pulse: over 2 s of pulses every 20 ms with a TTL of 2 s, about 7,
/// not 100.
#[test]
fn keepalives_go_at_their_pace_however_often_the_holder_pulses() {
    let cluster = Cluster::start();
    let fleet = connect_to(&cluster.endpoints(), Duration::from_millis(TTL_MS));
    fleet.set_cap("agents", 1).expect("set cap");
    let mut hold = held_now(&fleet);
    let before = cluster.grpc_messages("LeaseKeepAlive");
    let until = Instant::now() + Duration::from_secs(2);
    let mut pulses = 0;
    while Instant::now() < until {
        hold.pulse().expect("held");
        pulses += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = cluster.grpc_messages("LeaseKeepAlive") - before;
    assert!(
        (1..=12).contains(&sent),
        "{sent} keepalives for {pulses} pulses in 2 s (one every 333 ms expected)"
    );
    hold.release().expect("release");
}

/// A place whose lease etcd no longer has (an operator revoked it) is lost at its next
/// keepalive, which etcd answers with a TTL of 0: `Expired`, not held on until the halt rule's
/// half TTL.
#[test]
fn a_place_whose_lease_etcd_revoked_is_lost_at_the_next_keepalive() {
    let cluster = Cluster::start();
    let (_, mut hold) = the_one_place(&cluster);
    hold.pulse().expect("a first keepalive, confirmed");
    revoke_as_an_operator(&cluster, hold.key());
    // The next keepalive is due within a sixth of the TTL (5 s): a watchdog of 10 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    let lost = loop {
        match hold.pulse() {
            Err(lost) => break lost,
            Ok(()) => {
                assert!(
                    Instant::now() < deadline,
                    "still held 10 s after the revoke"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert!(
        matches!(lost, worklane_fleet::Lost::Expired { .. }),
        "etcd said the lease is gone: {lost:?}"
    );
}

/// An hour: a waiter's recheck that only its watch (or its timeout) can beat in a test.
const HOUR_MS: &str = "3600000";

/// `/proc/PID/stat` of a holder: its state letter and its CPU time in clock ticks (user and
/// system; Linux counts them at 100 a second).
fn proc_stat(h: &HolderProc) -> (char, u64) {
    let text = std::fs::read_to_string(format!("/proc/{}/stat", h.child.id())).expect("stat");
    let after = &text[text.rfind(')').expect("(comm)") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let state = fields[0].chars().next().expect("a state");
    // Fields 14 and 15 of the line (utime, stime) are 11 and 12 after the command's name.
    let ticks =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    (state, ticks)
}

/// Waits (a watchdog, not a timing) until `cond` holds, checking every 20 ms.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(h: &HolderProc, sig: rustix::process::Signal) {
    rustix::process::kill_process(h.pid(), sig).expect("signal the holder");
}

/// The keys of `pool` in etcd now (holders and waiters).
fn pool_keys(cluster: &Cluster, pool: &str) -> usize {
    let fleet = connect_to(&cluster.endpoints(), Duration::from_secs(2));
    fleet.status(pool).expect("status").keys.len()
}

/// A waiter that stopped itself right after its read, before it watched: a release in
/// between must still wake it (its watch starts at the revision after its read), and its
/// recheck is an hour away.
fn a_release_between_the_read_and_the_watch_wakes_the_waiter(what: &str, name: &str) {
    let cluster = Cluster::start();
    set_cap(&cluster, name, 1);
    let first = HolderProc::start(&cluster, TTL_MS, what, name, false);
    let first_epoch = epoch(&first.next(LIMIT));
    // A TTL its own stop cannot come near: the stop is the test's, not the lease's.
    let waiter = HolderProc::start_as(&cluster, 20_000, what, name, "wait-stop");
    assert_eq!(waiter.next(LIMIT), "waiting");
    eventually("the waiter to stop", || proc_stat(&waiter).0 == 'T');
    assert_eq!(first.release(), "released");
    signal(&waiter, rustix::process::Signal::CONT);
    let second_epoch = epoch(&waiter.next(LIMIT));
    assert!(second_epoch > first_epoch, "{second_epoch} > {first_epoch}");
    assert_eq!(waiter.release(), "released");
}

#[test]
fn a_release_between_a_pool_waiters_read_and_its_watch_wakes_it() {
    a_release_between_the_read_and_the_watch_wakes_the_waiter("pool", "agents");
}

#[test]
fn a_release_between_a_role_waiters_claim_and_its_watch_wakes_it() {
    a_release_between_the_read_and_the_watch_wakes_the_waiter("role", "coordinator");
}

/// A waiter stopped after its read, before its watch; etcd's history is then compacted past
/// the revision its watch asks to start at, so etcd cancels that watch: the waiter must read
/// again and watch afresh (no spin: a handful of transactions while nothing changes), and the
/// holder's release must still wake it.
fn a_watch_canceled_by_a_compaction_is_read_again(what: &str, name: &str) {
    let cluster = Cluster::start();
    set_cap(&cluster, "agents", 1);
    let first = HolderProc::start(&cluster, TTL_MS, what, name, false);
    let first_epoch = epoch(&first.next(LIMIT));
    let waiter = HolderProc::start_as(&cluster, 20_000, what, name, "wait-stop");
    assert_eq!(waiter.next(LIMIT), "waiting");
    eventually("the waiter to stop", || proc_stat(&waiter).0 == 'T');
    // Two revisions past the waiter's read, then compacted up to them.
    set_cap(&cluster, "other", 1);
    set_cap(&cluster, "other", 2);
    let _ = cluster.compact();
    let watches = cluster.grpc_calls("Watch");
    signal(&waiter, rustix::process::Signal::CONT);
    // Its canceled watch ends (etcd counts a Watch stream when it closes): it read again.
    eventually("the canceled watch to close", || {
        cluster.grpc_calls("Watch") > watches
    });
    let sent = transactions_in_1_5_s(&cluster);
    assert!(
        sent <= 4,
        "a {what} waiter after a compaction sent {sent} transactions in 1.5 s"
    );
    assert!(waiter.lines.try_recv().is_err(), "still waiting");
    the_waiter_succeeds(first, first_epoch, waiter);
}

#[test]
fn a_pool_waiters_watch_canceled_by_a_compaction_is_read_again_and_still_wakes() {
    a_watch_canceled_by_a_compaction_is_read_again("pool", "agents");
}

#[test]
fn a_role_waiters_watch_canceled_by_a_compaction_is_read_again_and_still_wakes() {
    a_watch_canceled_by_a_compaction_is_read_again("role", "coordinator");
}

#[test]
fn raising_the_cap_wakes_a_pool_waiter() {
    let cluster = Cluster::start();
    set_cap(&cluster, "agents", 1);
    let first = HolderProc::start(&cluster, TTL_MS, "pool", "agents", false);
    let _ = epoch(&first.next(LIMIT));
    let waiter = HolderProc::start_waiting_aloud(&cluster, "pool", "agents");
    assert_eq!(waiter.next(LIMIT), "waiting");
    set_cap(&cluster, "agents", 2);
    let _ = epoch(&waiter.next(LIMIT));
    assert_eq!(waiter.release(), "released");
    assert_eq!(first.release(), "released");
}

#[test]
fn waiters_in_line_are_admitted_in_order_as_holders_leave() {
    let cluster = Cluster::start();
    set_cap(&cluster, "agents", 1);
    let first = HolderProc::start(&cluster, TTL_MS, "pool", "agents", false);
    let mut last = epoch(&first.next(LIMIT));
    let mut line: std::collections::VecDeque<HolderProc> = std::collections::VecDeque::new();
    for _ in 0..4 {
        let w = HolderProc::start_waiting_aloud(&cluster, "pool", "agents");
        assert_eq!(w.next(LIMIT), "waiting");
        line.push_back(w);
    }
    let mut holding = first;
    while let Some(next) = line.pop_front() {
        assert_eq!(holding.release(), "released");
        let e = epoch(&next.next(LIMIT));
        assert!(e > last, "admitted in order of arrival: {e} > {last}");
        last = e;
        for behind in &line {
            assert!(behind.lines.try_recv().is_err(), "a later waiter waits");
        }
        holding = next;
    }
    assert_eq!(holding.release(), "released");
}

/// A waiter (recheck an hour away) whose watch's member, or the leader, is SIGKILLed must
/// still wake when the holder leaves afterwards.
fn a_waiter_survives_losing_a_member(what: &str, name: &str, leader: bool) {
    let mut cluster = Cluster::start();
    set_cap(&cluster, name, 1);
    // A TTL a new leader's election fits in well (as in the leader test above).
    let ttl_ms = 5_000;
    let first = HolderProc::start(&cluster, ttl_ms, what, name, false);
    let first_epoch = epoch(&first.next(LIMIT));
    let waiter = HolderProc::start_as(&cluster, ttl_ms, what, name, "wait-aloud");
    assert_eq!(waiter.next(LIMIT), "waiting");
    let mut serving = None;
    eventually("the waiter's watch to be open", || {
        serving = cluster.open_streams("Watch").iter().position(|&n| n > 0);
        serving.is_some()
    });
    let victim = if leader {
        cluster.leader()
    } else {
        serving.expect("a member")
    };
    cluster.kill(victim);
    let _ = cluster.leader();
    the_waiter_succeeds(first, first_epoch, waiter);
}

#[test]
fn killing_the_member_that_serves_a_pool_waiters_watch_still_wakes_it() {
    a_waiter_survives_losing_a_member("pool", "agents", false);
}

#[test]
fn killing_the_member_that_serves_a_role_waiters_watch_still_wakes_it() {
    a_waiter_survives_losing_a_member("role", "coordinator", false);
}

#[test]
fn killing_the_leader_while_a_pool_waiter_waits_still_wakes_it() {
    a_waiter_survives_losing_a_member("pool", "agents", true);
}

/// Every member SIGKILLed while a waiter waits: it fails, naming the endpoints, and spends
/// little CPU meanwhile (no loop without a pause).
fn stopping_the_cluster_fails_a_waiter_without_spinning(what: &str, name: &str) {
    let mut cluster = Cluster::start();
    set_cap(&cluster, name, 1);
    let first = HolderProc::start(&cluster, TTL_MS, what, name, false);
    let _ = epoch(&first.next(LIMIT));
    let waiter = HolderProc::start_as(&cluster, TTL_MS, what, name, "wait-aloud");
    assert_eq!(waiter.next(LIMIT), "waiting");
    let (_, before) = proc_stat(&waiter);
    for i in 0..3 {
        cluster.kill(i);
    }
    let line = waiter.next(LIMIT);
    assert!(
        line.starts_with("error ") && line.contains("127.0.0.1"),
        "{line}"
    );
    let (_, after) = proc_stat(&waiter);
    assert!(
        after - before < 50,
        "the {what} waiter spent {} ticks of CPU while etcd was gone",
        after - before
    );
}

#[test]
fn stopping_the_whole_cluster_fails_a_pool_waiter_without_spinning() {
    stopping_the_cluster_fails_a_waiter_without_spinning("pool", "agents");
}

#[test]
fn stopping_the_whole_cluster_fails_a_role_waiter_without_spinning() {
    stopping_the_cluster_fails_a_waiter_without_spinning("role", "coordinator");
}

#[test]
fn a_pool_waiter_stopped_past_its_ttl_reports_the_loss_on_resume_not_a_place() {
    let cluster = Cluster::start();
    set_cap(&cluster, "agents", 1);
    let first = HolderProc::start(&cluster, TTL_MS, "pool", "agents", false);
    let _ = epoch(&first.next(LIMIT));
    let waiter = HolderProc::start_waiting_aloud(&cluster, "pool", "agents");
    assert_eq!(waiter.next(LIMIT), "waiting");
    signal(&waiter, rustix::process::Signal::STOP);
    eventually("the stopped waiter's key to expire", || {
        pool_keys(&cluster, "agents") == 1
    });
    // Its place would now be free: it must not take it.
    assert_eq!(first.release(), "released");
    signal(&waiter, rustix::process::Signal::CONT);
    // Either way of noticing is a loss: its key gone, or its lease unconfirmed too long (the
    // place given up: `Error::GivenUp`).
    let line = waiter.next(LIMIT);
    assert!(
        line.starts_with("error ")
            && (line.contains("lost while waiting") || line.contains("given up")),
        "{line}"
    );
}

/// A waiter stopped for longer than half its TTL but (very likely) less than its TTL, while
/// the place it waits for is freed: when it resumes, its lease is unconfirmed past the halt
/// rule's limit, so it must not report the place as held (its lease may lapse any moment).
/// (If the stop outlasts the lease, the waiter reports its key gone: also not held.)
#[test]
fn a_pool_waiter_unconfirmed_past_half_its_ttl_does_not_report_a_place() {
    let cluster = Cluster::start();
    set_cap(&cluster, "agents", 1);
    let ttl_ms = 10_000;
    let first = HolderProc::start(&cluster, ttl_ms, "pool", "agents", false);
    let _ = epoch(&first.next(LIMIT));
    let waiter = HolderProc::start_as(&cluster, ttl_ms, "pool", "agents", "wait-aloud");
    assert_eq!(waiter.next(LIMIT), "waiting");
    signal(&waiter, rustix::process::Signal::STOP);
    eventually("the waiter to stop", || proc_stat(&waiter).0 == 'T');
    assert_eq!(first.release(), "released");
    // Past half the TTL: the stop's length is a lower bound the halt rule must see.
    std::thread::sleep(Duration::from_millis(ttl_ms / 2 + 1_000));
    signal(&waiter, rustix::process::Signal::CONT);
    let line = waiter.next(LIMIT);
    assert!(line.starts_with("error "), "not held: {line}");
}

/// A waiter with a timeout gives up at its timeout, not at its next recheck (an hour away).
fn a_timed_waiter_gives_up_at_its_timeout(what: &str, name: &str) {
    let cluster = Cluster::start();
    set_cap(&cluster, name, 1);
    let first = HolderProc::start(&cluster, TTL_MS, what, name, false);
    let _ = epoch(&first.next(LIMIT));
    let started = Instant::now();
    let waiter = HolderProc::start_with(
        &cluster,
        TTL_MS,
        what,
        name,
        "wait",
        &[
            ("FLEET_HOLDER_RECHECK_MS", HOUR_MS),
            ("FLEET_HOLDER_TIMEOUT_MS", "1000"),
        ],
    );
    let line = waiter.next(LIMIT);
    assert!(line.starts_with("refused "), "{line}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "not before its timeout"
    );
    assert_eq!(first.release(), "released");
}

#[test]
fn a_timed_pool_waiter_gives_up_at_its_timeout_not_at_its_recheck() {
    a_timed_waiter_gives_up_at_its_timeout("pool", "agents");
}

#[test]
fn a_timed_role_waiter_gives_up_at_its_timeout_not_at_its_recheck() {
    a_timed_waiter_gives_up_at_its_timeout("role", "coordinator");
}

#[test]
fn a_role_freed_by_its_holders_lease_expiry_wakes_its_waiter() {
    let cluster = Cluster::start();
    let mut first = HolderProc::start(&cluster, TTL_MS, "role", "coordinator", false);
    let first_epoch = epoch(&first.next(LIMIT));
    let waiter = HolderProc::start_waiting_aloud(&cluster, "role", "coordinator");
    assert_eq!(waiter.next(LIMIT), "waiting");
    first.child.kill().expect("SIGKILL the holder");
    let _ = first.child.wait();
    let second_epoch = epoch(&waiter.next(LIMIT));
    assert!(second_epoch > first_epoch, "{second_epoch} > {first_epoch}");
    assert_eq!(waiter.release(), "released");
}

/// A recheck of zero ("read again at once") must not make a waiter read in a loop without
/// a pause: it reads no more often than a poller would (every `POLL_EVERY`, about fifteen
/// transactions in 1.5 s), not as fast as etcd answers.
fn a_zero_recheck_polls_instead_of_spinning(what: &str, name: &str) {
    let cluster = Cluster::start();
    set_cap(&cluster, name, 1);
    let first = HolderProc::start(&cluster, TTL_MS, what, name, false);
    let _ = epoch(&first.next(LIMIT));
    let waiter = HolderProc::start_with(
        &cluster,
        TTL_MS,
        what,
        name,
        "wait-aloud",
        &[("FLEET_HOLDER_RECHECK_MS", "0")],
    );
    assert_eq!(waiter.next(LIMIT), "waiting");
    let sent = transactions_in_1_5_s(&cluster);
    assert!(
        sent <= 30,
        "a {what} waiter with a zero recheck sent {sent} transactions in 1.5 s"
    );
    assert_eq!(first.release(), "released");
    let _ = epoch(&waiter.next(LIMIT));
    assert_eq!(waiter.release(), "released");
}

#[test]
fn a_pool_waiter_with_a_zero_recheck_polls_instead_of_spinning() {
    a_zero_recheck_polls_instead_of_spinning("pool", "agents");
}

#[test]
fn a_role_waiter_with_a_zero_recheck_polls_instead_of_spinning() {
    a_zero_recheck_polls_instead_of_spinning("role", "coordinator");
}

/// A holder stopped between its lease's grant and its put (`FLEET_HOLDER_STOP_AFTER_GRANT`)
/// for more than half the TTL but less than all of it: the put still succeeds, but etcd counts
/// the TTL from the grant and will expire the lease sooner than a halt rule counted from the
/// put would stop the holder. It must give the place up, not report it held.
fn a_holder_stopped_between_grant_and_put_does_not_hold(what: &str, name: &str) {
    let cluster = Cluster::start();
    if what == "pool" {
        set_cap(&cluster, name, 1);
    }
    let h = HolderProc::start_with(
        &cluster,
        TTL_MS,
        what,
        name,
        "",
        &[("FLEET_HOLDER_STOP_AFTER_GRANT", "1")],
    );
    eventually("the holder to stop itself after the grant", || {
        proc_stat(&h).0 == 'T'
    });
    // 0.7 of the TTL: past its half (the halt rule), short of its end (etcd's expiry).
    std::thread::sleep(Duration::from_millis(TTL_MS * 7 / 10));
    signal(&h, rustix::process::Signal::CONT);
    let line = h.next(LIMIT);
    assert!(
        line.starts_with("error ") && line.contains("given up"),
        "a {what} taken with a lease granted 0.7 TTL ago is given up: {line}"
    );
}

#[test]
fn a_pool_holder_stopped_between_grant_and_put_past_half_its_ttl_gives_the_place_up() {
    a_holder_stopped_between_grant_and_put_does_not_hold("pool", "agents");
}

#[test]
fn a_role_claimant_stopped_between_grant_and_put_past_half_its_ttl_gives_the_role_up() {
    a_holder_stopped_between_grant_and_put_does_not_hold("role", "coordinator");
}

/// A take or claim whose answer is lost after etcd applied it (the connection broke between
/// the two) is sent again, and its own key, found there, is its own: the place or the role is
/// held, with the key's create revision as its epoch, even though another host wrote
/// meanwhile (the answer to the second send is at a later revision). Before, a role claim
/// found its own key, called itself refused by its own holder and revoked its lease; a take's
/// epoch was the later revision, which may be another holder's.
#[test]
fn a_take_or_claim_whose_answer_was_lost_holds_with_its_own_key_s_epoch() {
    let cluster = Cluster::start();
    let fleet = connect(&cluster);
    fleet.set_cap("agents", 2).expect("set cap");
    let another = move |cluster_endpoints: String| {
        move || {
            let other = connect_to(&cluster_endpoints, Duration::from_secs(5));
            other.set_cap("elsewhere", 1).expect("another host writes");
        }
    };
    // The answers: the lease's grant (1), the transaction (2).
    fleet.lose_answer(2, another(cluster.endpoints()));
    let hold = held_now(&fleet);
    let status = fleet.status("agents").expect("status");
    assert_eq!(status.keys.len(), 1, "one key, put once: {status:?}");
    assert_eq!(hold.key(), status.keys[0].key);
    assert_eq!(
        hold.epoch(),
        status.keys[0].create_revision,
        "the epoch is its key's revision, not the later answer's"
    );

    fleet.lose_answer(2, another(cluster.endpoints()));
    let claimed = try_claim_now(&fleet).expect("claim");
    let worklane_fleet::Taken::Held(role) = claimed else {
        panic!("the role it put is held, not refused by itself: {claimed:?}")
    };
    let later = try_claim_now(&fleet).expect("claim again");
    let worklane_fleet::Taken::Refused(worklane_fleet::Refusal::RoleHeld { .. }) = later else {
        panic!("the role is still held, by the first claim: {later:?}")
    };
    // The writes after the role's put: the other host's (one revision), then this take's.
    let next = held_now(&fleet);
    assert_eq!(
        role.epoch(),
        next.epoch() - 2,
        "the role's epoch is its key's revision, not the later answer's: {role:?} {next:?}"
    );
    let mut role = role;
    role.pulse().expect("still held");
}

/// Revokes the lease of `key` by etcd's own client, as an operator would.
fn revoke_as_an_operator(cluster: &Cluster, key: &str) {
    with_etcd(&cluster.endpoints(), |mut client| async move {
        let got = client.get(key, None).await.expect("get");
        let lease = got.kvs().first().expect("the key").lease();
        client.lease_revoke(lease).await.expect("revoke");
    });
}

/// A place whose lease is revoked before its first keepalive is lost at that keepalive, and
/// at every one after: the keepalive stream's opening is itself a keepalive, which etcd
/// answers with TTL 0 (the client reports it as an error, not an answer). Before, that was
/// taken for no answer, and the holder held on until half its TTL had gone unconfirmed.
#[test]
fn a_place_revoked_before_its_first_keepalive_is_lost_at_that_keepalive() {
    let cluster = Cluster::start();
    let (_, mut hold) = the_one_place(&cluster);
    revoke_as_an_operator(&cluster, hold.key());
    for pulse in 0..2 {
        let lost = hold.pulse().expect_err("etcd says the lease is gone");
        assert!(
            matches!(lost, worklane_fleet::Lost::Expired { .. }),
            "pulse {pulse}: etcd said the lease is gone, which is not unconfirmed: {lost:?}"
        );
    }
}

/// A keepalive that gets no answer ends with the halt rule applied again, not only before it
/// was sent: a pulse never says the place is held once half the TTL (2.5 s of 5 s) has passed
/// since the last confirmed keepalive. Pulses from 200 ms before it, with every member
/// stopped: each keepalive waits its whole budget (TTL/10, 500 ms) unanswered, and before,
/// the pulse then returned Ok past the half.
#[test]
fn a_keepalive_unanswered_past_half_the_ttl_gives_the_place_up_at_once() {
    let cluster = Cluster::start();
    let (_, mut hold) = the_one_place(&cluster);
    hold.pulse().expect("a keepalive");
    // Later than the last confirmed keepalive was sent (at the latest, that pulse's start).
    let confirmed = Instant::now();
    std::thread::sleep(Duration::from_millis(2300).saturating_sub(confirmed.elapsed()));
    for member in 0..3 {
        cluster.pause(member);
    }
    let lost = loop {
        let pulsed = hold.pulse();
        let at = confirmed.elapsed();
        match pulsed {
            Err(lost) => break lost,
            Ok(()) => assert!(
                at < Duration::from_millis(2500),
                "still held {at:?} after the last confirmed keepalive, half the TTL or more"
            ),
        }
        assert!(at < Duration::from_secs(10), "never given up");
    };
    for member in 0..3 {
        cluster.resume(member);
    }
    assert!(
        matches!(lost, worklane_fleet::Lost::Unconfirmed { .. }),
        "{lost:?}"
    );
}

/// A release whose answer was lost after etcd applied it is sent again and finds the lease
/// gone: released, at once (one more revoke, not 2 s of them), not an error saying etcd did
/// not answer.
#[test]
fn a_release_whose_answer_was_lost_is_released() {
    let cluster = Cluster::start();
    let (fleet, hold) = the_one_place(&cluster);
    let revokes = cluster.grpc_calls("LeaseRevoke");
    fleet.lose_answer(1, || {});
    hold.release().expect("released: the lease is gone");
    assert_eq!(
        cluster.grpc_calls("LeaseRevoke") - revokes,
        2,
        "the revoke applied, and the one sent again, refused at once"
    );
    assert!(fleet.status("agents").expect("status").keys.is_empty());
}

/// A request etcd refuses fails at once and says etcd refused, with etcd's reason: a lease
/// longer than etcd grants (`--fleet-ttl` of 300 years) is asked for once, not for 2 s as
/// if no member answered.
#[test]
fn a_request_etcd_refuses_fails_at_once_saying_so() {
    let cluster = Cluster::start();
    let fleet = connect_to(&cluster.endpoints(), Duration::from_secs(10_000_000_000));
    fleet.set_cap("agents", 1).expect("set cap");
    let grants = cluster.grpc_calls("LeaseGrant");
    let refused = try_take_now(&fleet).expect_err("etcd grants no such lease");
    assert_eq!(cluster.grpc_calls("LeaseGrant") - grants, 1, "asked once");
    let said = format!(
        "{refused}: {}",
        std::error::Error::source(&refused).map_or(String::new(), |s| s.to_string())
    );
    assert!(
        said.contains("refused while granting") && said.contains("too large lease TTL"),
        "{said}"
    );
}

static EXPIRE_AT_GRANT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Revokes every lease in the cluster named by [`EXPIRE_AT_GRANT`]: a lease that expires
/// between its grant and its use (the taker stopped past its TTL there).
fn expire_every_lease() {
    with_etcd(
        EXPIRE_AT_GRANT.get().expect("the cluster"),
        |mut client| async move {
            let leases = client.leases().await.expect("leases");
            for lease in leases.leases() {
                client.lease_revoke(lease.id()).await.expect("revoke");
            }
        },
    );
}

/// A take or claim whose lease is gone before its put (the taker stopped past its TTL
/// between the two) is given up at once, saying the lease expired, rather than failing
/// after 2 s of puts etcd refuses as if it did not answer.
#[test]
fn a_take_whose_lease_expired_before_its_put_is_given_up_at_once() {
    let cluster = Cluster::start();
    EXPIRE_AT_GRANT
        .set(cluster.endpoints())
        .expect("one test uses it");
    let fleet = connect(&cluster);
    fleet.set_cap("agents", 1).expect("set cap");
    let fleet = fleet.with_after_grant(expire_every_lease);
    let txns = cluster.grpc_calls("Txn");
    let taken = try_take_now(&fleet).expect_err("its lease is gone");
    let claimed = try_claim_now(&fleet).expect_err("its lease is gone");
    for given_up in [taken, claimed] {
        assert!(
            matches!(
                given_up,
                worklane_fleet::Error::GivenUp(worklane_fleet::Lost::Expired { .. })
            ),
            "{given_up:?}"
        );
    }
    assert_eq!(cluster.grpc_calls("Txn") - txns, 2, "one put each");
}

static FULL_AT_GRANT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Raises etcd's "no space" alarm in the cluster named by [`FULL_AT_GRANT`]: its database
/// full, etcd refuses every write from then on (a lease's grant included).
fn fill_the_database() {
    database_alarm(etcd_client::AlarmAction::Activate);
}

/// Raises or clears the "no space" alarm of a member of the cluster named by
/// [`FULL_AT_GRANT`].
fn database_alarm(action: etcd_client::AlarmAction) {
    with_etcd(
        FULL_AT_GRANT.get().expect("the cluster"),
        |mut client| async move {
            let member = client
                .status()
                .await
                .expect("status")
                .header()
                .expect("a header")
                .member_id();
            let mut options = etcd_client::AlarmOptions::new();
            options.with_member(member);
            client
                .alarm(action, etcd_client::AlarmType::Nospace, Some(options))
                .await
                .expect("raise or clear the alarm");
        },
    );
}

/// A take or claim whose put etcd refuses for another reason than its lease (a database
/// full) fails naming etcd's reason: only a lease etcd no longer has gives the place up.
#[test]
fn a_put_refused_for_a_full_database_is_an_error_naming_it_not_a_lost_lease() {
    let cluster = Cluster::start();
    FULL_AT_GRANT
        .set(cluster.endpoints())
        .expect("one test uses it");
    let fleet = connect(&cluster);
    fleet.set_cap("agents", 1).expect("set cap");
    let fleet = fleet.with_after_grant(fill_the_database);
    let taken = try_take_now(&fleet).expect_err("the database is full");
    // Cleared, so that the claim's grant goes through and its put meets the alarm again.
    database_alarm(etcd_client::AlarmAction::Deactivate);
    let claimed = try_claim_now(&fleet).expect_err("the database is full");
    for refused in [taken, claimed] {
        let worklane_fleet::Error::Unavailable(refused) = refused else {
            panic!("etcd refused the put, no lease was lost: {refused:?}")
        };
        let reason = refused.source.as_ref().map(ToString::to_string);
        assert!(
            reason
                .as_deref()
                .is_some_and(|r| r.contains("database space exceeded")),
            "{refused:?}"
        );
    }
}
