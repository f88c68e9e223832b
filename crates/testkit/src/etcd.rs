//! A real etcd cluster for tests: members on loopback ports, each with its own temp data
//! directory, started and stopped by the test (the `etcd` binary: Debian's `etcd-server`).

use crate::{Child, Gated, Scope};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A cluster of three etcd members on loopback ports, each with its own temp data directory;
/// every member is killed when it is dropped.
pub struct Cluster {
    /// The scope its members run in: mark the test's own processes with it too.
    pub scope: Scope,
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
    /// Starts three members and waits (at most 30 s) until each answers healthy. The ports
    /// are found free and released before etcd binds them, so another test's process may take
    /// one first: a member that exits, or a cluster not healthy in time, is stopped and
    /// started again on new ports (three attempts in all).
    #[must_use]
    pub fn start() -> Cluster {
        let mut why = Vec::new();
        for _ in 0..3 {
            match Self::try_start() {
                Ok(cluster) => return cluster,
                Err(e) => why.push(e),
            }
        }
        panic!("cannot start a 3-member etcd cluster: {}", why.join("; "));
    }

    fn try_start() -> Result<Cluster, String> {
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
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut healthy = vec![false; cluster.members.len()];
        while healthy.iter().any(|h| !h) {
            for (i, m) in cluster.members.iter_mut().enumerate() {
                if healthy[i] {
                    continue;
                }
                if let Some(child) = m.child.as_mut()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    // Dropping the cluster stops the others.
                    return Err(format!(
                        "member {} exited ({status}): a port taken first?",
                        m.name
                    ));
                }
                healthy[i] = http_get(&m.client, "/health").is_some_and(|b| b.contains("true"));
            }
            if Instant::now() >= deadline {
                return Err("not every member healthy within 30 s".to_owned());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(cluster)
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

    /// The members' client URLs, comma-separated.
    #[must_use]
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| m.client.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the current leader.
    #[must_use]
    pub fn leader(&self) -> usize {
        let mut found = None;
        wait_until("a leader", Duration::from_secs(10), || {
            let status = self
                .members
                .iter()
                .find(|m| m.child.is_some())
                .and_then(|m| http_post(&m.client, "/v3/maintenance/status", "{}"));
            let Some(leader) = status.as_deref().and_then(|s| field(s, "leader")) else {
                return false;
            };
            found = self.members.iter().position(|m| {
                m.child.is_some()
                    && http_post(&m.client, "/v3/maintenance/status", "{}")
                        .is_some_and(|s| field(&s, "member_id").as_deref() == Some(leader.as_str()))
            });
            found.is_some()
        });
        found.expect("a leader")
    }

    /// How many gRPC calls of `method` (`Txn`, `Range`, `Watch`...) the live members have
    /// answered so far, from their `/metrics` (`grpc_server_handled_total`), summed.
    #[must_use]
    pub fn grpc_calls(&self, method: &str) -> u64 {
        self.grpc_counter("grpc_server_handled_total{", method)
    }

    /// How many messages of `method` (`LeaseKeepAlive`: one per keepalive sent on a stream)
    /// the live members have received so far, from their `/metrics`
    /// (`grpc_server_msg_received_total`), summed.
    #[must_use]
    pub fn grpc_messages(&self, method: &str) -> u64 {
        self.grpc_counter("grpc_server_msg_received_total{", method)
    }

    /// The counter `name` (with its `{`) of `method`, summed over the live members' `/metrics`.
    fn grpc_counter(&self, name: &str, method: &str) -> u64 {
        let wanted = format!("grpc_method=\"{method}\"");
        self.members
            .iter()
            .filter(|m| m.child.is_some())
            .map(|m| {
                let metrics = http_get(&m.client, "/metrics")
                    .unwrap_or_else(|| panic!("no /metrics from {}", m.name));
                metrics
                    .lines()
                    .filter(|l| l.starts_with(name) && l.contains(&wanted))
                    .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                    .sum::<f64>()
            })
            .sum::<f64>() as u64
    }

    /// How many streams of `method` (`Watch`, `LeaseKeepAlive`) each member has open now
    /// (`grpc_server_started_total` less `grpc_server_handled_total`; 0 for a dead member), by
    /// member index.
    #[must_use]
    pub fn open_streams(&self, method: &str) -> Vec<u64> {
        let wanted = format!("grpc_method=\"{method}\"");
        let sum = |metrics: &str, name: &str| {
            metrics
                .lines()
                .filter(|l| l.starts_with(name) && l.contains(&wanted))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum::<f64>() as u64
        };
        self.members
            .iter()
            .map(|m| {
                if m.child.is_none() {
                    return 0;
                }
                let metrics = http_get(&m.client, "/metrics")
                    .unwrap_or_else(|| panic!("no /metrics from {}", m.name));
                sum(&metrics, "grpc_server_started_total{")
                    .saturating_sub(sum(&metrics, "grpc_server_handled_total{"))
            })
            .collect()
    }

    /// Compacts etcd's history up to its current revision (physically, waiting for it): a
    /// watch asked to start before it is canceled. Returns that revision.
    ///
    /// The revision is read by a linearizable range (etcd's default), which the member answers
    /// only once it has applied everything committed before it: a member's status may lag
    /// behind a write another member answered a moment ago, and a compaction at that older
    /// revision would leave a watch from the newest one uncanceled.
    pub fn compact(&self) -> i64 {
        let member = self
            .members
            .iter()
            .find(|m| m.child.is_some())
            .expect("a live member");
        // Key "\0" (base64 "AA=="), at most one: only the header's revision is wanted.
        let range = http_post(
            &member.client,
            "/v3/kv/range",
            r#"{"key":"AA==","limit":"1","keys_only":true}"#,
        )
        .expect("a linearizable range from a member");
        let revision: i64 = number(&range, "revision").expect("a revision in the range's header");
        let answer = http_post(
            &member.client,
            "/v3/kv/compaction",
            &format!("{{\"revision\":\"{revision}\",\"physical\":true}}"),
        )
        .expect("an answer to the compaction");
        assert!(
            !answer.contains("\"error\""),
            "compacting at {revision}: {answer}"
        );
        revision
    }

    /// SIGSTOPs member `i` (it answers nothing, keeping its connections open, until
    /// [`Cluster::resume`]).
    pub fn pause(&self, i: usize) {
        self.signal(i, rustix::process::Signal::STOP);
    }

    /// SIGCONTs member `i`.
    pub fn resume(&self, i: usize) {
        self.signal(i, rustix::process::Signal::CONT);
    }

    fn signal(&self, i: usize, signal: rustix::process::Signal) {
        let child = self.members[i].child.as_ref().expect("a live member");
        let pid = i32::try_from(child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .expect("a member's pid");
        rustix::process::kill_process(pid, signal).expect("signal a member");
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
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

/// The string value of `"name":"..."` in a JSON text (etcd's status answers: ids as strings).
fn field(json: &str, name: &str) -> Option<String> {
    let at = json.find(&format!("\"{name}\":\""))? + name.len() + 4;
    Some(json[at..].split('"').next()?.to_owned())
}

/// The whole number in `"name":"123"` or `"name":123` of a JSON text (the gateway writes
/// 64-bit numbers as strings).
fn number(json: &str, name: &str) -> Option<i64> {
    let at = json.find(&format!("\"{name}\":"))? + name.len() + 3;
    let rest = json[at..].trim_start_matches('"');
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
