//! The fleet against a real etcd: a 3-member cluster on loopback, started by each test with
//! temporary data directories and stopped by it; holders are separate processes
//! (`fleet-holder`), SIGKILLed and SIGSTOPped for real. Needs the `etcd` feature and the
//! `etcd` binary (Debian's `etcd-server`, which `.ci/run` installs).
#![cfg(feature = "etcd")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use worklane_testkit::{Child, Gated, Scope};

/// A cluster of three etcd members on loopback ports, each with its own temp data directory.
struct Cluster {
    scope: Scope,
    _dir: tempfile::TempDir,
    members: Vec<Member>,
}

struct Member {
    name: String,
    client: String,
    child: Option<Child>,
    args: Vec<String>,
}

/// Free loopback ports: bound to port 0, read, released (another process could take one in
/// between; a member that cannot bind fails the start, and the test says so).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("addr").port())
        .collect()
}

/// `GET path` on a member, the body if it answered 200.
fn http_get(endpoint: &str, path: &str) -> Option<String> {
    let addr = endpoint.trim_start_matches("http://");
    let mut stream =
        TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_owned()))
}

/// `POST path` with a JSON body on a member.
fn http_post(endpoint: &str, path: &str, body: &str) -> Option<String> {
    let addr = endpoint.trim_start_matches("http://");
    let mut stream =
        TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text.split_once("\r\n\r\n")?.1.to_owned())
}

fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("gave up waiting for {what}");
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let ports = free_ports(6);
        let names = ["m1", "m2", "m3"];
        let initial = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n}=http://127.0.0.1:{}", ports[3 + i]))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            scope: Scope::new(),
            members: Vec::new(),
            _dir: dir,
        };
        for (i, name) in names.iter().enumerate() {
            let client = format!("http://127.0.0.1:{}", ports[i]);
            let peer = format!("http://127.0.0.1:{}", ports[3 + i]);
            let data = cluster._dir.path().join(name);
            let args = vec![
                format!("--name={name}"),
                format!("--data-dir={}", data.display()),
                format!("--listen-client-urls={client}"),
                format!("--advertise-client-urls={client}"),
                format!("--listen-peer-urls={peer}"),
                format!("--initial-advertise-peer-urls={peer}"),
                format!("--initial-cluster={initial}"),
                "--initial-cluster-state=new".to_owned(),
                "--initial-cluster-token=worklane-test".to_owned(),
                "--heartbeat-interval=50".to_owned(),
                "--election-timeout=500".to_owned(),
                "--log-level=error".to_owned(),
            ];
            cluster.members.push(Member {
                name: (*name).to_owned(),
                client,
                child: None,
                args,
            });
            cluster.run(i);
        }
        for m in &cluster.members {
            wait_until(
                &format!("etcd member {} to be healthy", m.name),
                Duration::from_secs(30),
                || http_get(&m.client, "/health").is_some_and(|b| b.contains("true")),
            );
        }
        cluster
    }

    fn run(&mut self, i: usize) {
        let member = &mut self.members[i];
        let mut cmd = Command::new("etcd");
        cmd.args(&member.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.scope.mark(&mut cmd);
        member.child = Some(
            cmd.spawn_gated()
                .expect("start etcd (is etcd-server installed?)"),
        );
    }

    fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| m.client.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the current leader.
    fn leader(&self) -> usize {
        let mut found = None;
        wait_until("a leader", Duration::from_secs(10), || {
            let status = self
                .members
                .iter()
                .find(|m| m.child.is_some())
                .and_then(|m| http_post(&m.client, "/v3/maintenance/status", "{}"))
                .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok());
            let Some(leader) = status
                .as_ref()
                .and_then(|s| s["leader"].as_str().map(str::to_owned))
            else {
                return false;
            };
            found = self.members.iter().position(|m| {
                m.child.is_some()
                    && http_post(&m.client, "/v3/maintenance/status", "{}")
                        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
                        .is_some_and(|s| s["header"]["member_id"].as_str() == Some(leader.as_str()))
            });
            found.is_some()
        });
        found.expect("a leader")
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// A holder process and the lines it prints.
struct HolderProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl HolderProc {
    fn start(cluster: &Cluster, ttl_ms: u64, what: &str, name: &str, wait: bool) -> HolderProc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleet-holder"));
        cmd.args([
            cluster.endpoints(),
            ttl_ms.to_string(),
            what.to_owned(),
            name.to_owned(),
        ]);
        if wait {
            cmd.arg("wait");
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
