//! The fleet's round trip beside the host's own lease.
//!
//! - `fleet_take_release/etcd_loopback`: `Fleet::take` of a place in a pool with room (grant
//!   a lease, put the key, read the pool) + `Hold::release` (revoke), against a one-member
//!   etcd on loopback that this bench starts in a temp data directory (its WAL fsyncs: on
//!   disk, as etcd runs).
//! - `fleet_take_release/local_lease`: `worklane_lease::acquire` + `release` of a lock in a
//!   slot directory on the same disk: what one host pays for the same question.
//!
//! Needs the `etcd` binary (Debian's etcd-server) and the `fleet` feature (protoc to build):
//!
//! `TMPDIR=/var/tmp cargo bench -p worklane-benches --features fleet --bench fleet`

// One etcd process, started and killed by this bench: no fork gate needed.
#![allow(clippy::disallowed_methods)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use worklane_fleet::{Fleet, Holder, Taken, Wait};
use worklane_lease::{Acquired, Options, Request, acquire};
use worklane_slotfile::{Environment, SlotDir, TEST_ROOT_VAR};

struct Etcd(std::process::Child, tempfile::TempDir);

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_etcd() -> (Etcd, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let ports: Vec<u16> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("port"))
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().expect("addr").port())
        .collect();
    let client = format!("http://127.0.0.1:{}", ports[0]);
    let peer = format!("http://127.0.0.1:{}", ports[1]);
    let child = Command::new("etcd")
        .args([
            format!("--data-dir={}", dir.path().join("etcd").display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=default={peer}"),
            "--log-level=error".to_owned(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start etcd (install etcd-server)");
    let etcd = Etcd(child, dir);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Fleet::connect(&[client.clone()], Duration::from_secs(5))
        .and_then(|f| Ok(f.status("bench").is_ok()))
        .ok()
        != Some(true)
    {
        assert!(Instant::now() < deadline, "etcd did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    (etcd, client)
}

fn bench(c: &mut Criterion) {
    let (_etcd, endpoint) = start_etcd();
    let fleet = Fleet::connect(&[endpoint], Duration::from_secs(15)).expect("connect");
    fleet.set_cap("bench", 1_000_000).expect("cap");
    let me = Holder::this_process("bench", "2026-12-01T00:00:00.000Z".into());

    let parent = std::env::temp_dir();
    let dir = tempfile::tempdir_in(&parent).expect("temp dir");
    let env = Environment::from_process().var(TEST_ROOT_VAR, &parent);
    let slots = SlotDir::open_in(&env, dir.path()).expect("slot dir");
    let request = Request::new("bench");
    let options = Options::process();

    let mut group = c.benchmark_group("fleet_take_release");
    group.bench_function("etcd_loopback", |b| {
        b.iter(|| {
            let taken = fleet
                .take(
                    "bench",
                    &me,
                    Wait {
                        timeout: Some(Duration::ZERO),
                        on_wait: &mut |_| {},
                    },
                )
                .expect("take");
            let Taken::Held(hold) = taken else {
                panic!("room for all")
            };
            hold.release().expect("release");
        });
    });
    group.bench_function("local_lease", |b| {
        b.iter(
            || match acquire(&slots, "agent-0.lock", &request, &options).expect("acquire") {
                Acquired::Held(lease) => lease.release().expect("release"),
                Acquired::Refused(r) => panic!("uncontended: {r}"),
            },
        );
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
