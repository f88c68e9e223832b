//! Integration tests of `worklane-admission`: real slot directories in temp dirs, real
//! guards, real dead processes. One binary, a module per behaviour.
//!
//! Tests run on several threads, and a child being started by one holds copies of every
//! descriptor of the process until it execs, a guard's included. So processes are started
//! through the fork gate, and every pool call that takes and releases guards (`slots.lock`
//! on every take, a slot's guard on a refusal or a probe) runs with the gate quiet, as does
//! the release of a slot, when a later step needs those guards free.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use worklane_admission::{
    Blocker, Drain, DrainState, Kind, Pool, Slot, SlotState, Stop, Take, Wait,
};
use worklane_identity::{Field, Place, ProcessIdentity, Recorded};
use worklane_lease::{LiveWhy, ManualClock, Record, Request, rfc3339_ms};
use worklane_slotfile::{Environment, RECORD_MODE, SlotDir};
use worklane_testkit::Gated;
use worklane_testkit::gate::{self, QuietDrop};

struct Site {
    temp: tempfile::TempDir,
    pool: Pool,
}

impl Site {
    fn new(config: &str) -> Site {
        let temp = tempfile::tempdir().expect("temp dir");
        std::fs::write(temp.path().join("config.json"), config).expect("config");
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
        let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
        Site { temp, pool }
    }

    fn set_config(&self, config: &str) {
        std::fs::write(self.temp.path().join("config.json"), config).expect("config");
    }

    /// A take with the gate quiet: it takes and releases `slots.lock`, and maybe guards of
    /// slots it finds in use.
    fn try_take(&self, kind: Kind) -> Take {
        gate::quietly(|| self.pool.try_take(kind, &Request::new("test"))).expect("take")
    }

    /// Takes a slot that must be free; it is released with the gate quiet.
    fn take(&self, kind: Kind) -> QuietDrop<Slot> {
        match self.try_take(kind) {
            Take::Held(slot) => QuietDrop::new(slot),
            Take::Blocked(b) => panic!("{} must be free: {b}", kind.label()),
        }
    }

    fn blocked(&self, kind: Kind) -> Blocker {
        match self.try_take(kind) {
            Take::Held(slot) => {
                let name = slot.name().to_owned();
                gate::quietly(|| drop(slot));
                panic!("{} must be blocked, got {name}", kind.label())
            }
            Take::Blocked(b) => b,
        }
    }

    /// The idle probe, with the gate quiet (it takes the full run's guard for a moment).
    fn idle(&self) -> bool {
        gate::quietly(|| self.pool.idle()).expect("idle")
    }

    /// The pool's snapshot, with the gate quiet (it probes every slot's guard).
    fn snapshot(&self) -> worklane_admission::Snapshot {
        gate::quietly(|| self.pool.snapshot()).expect("snapshot")
    }

    fn write_record(&self, name: &str, record: &Record) {
        SlotDir::open(self.temp.path())
            .expect("open")
            .file(name)
            .expect("valid")
            .replace(&record.to_bytes(), RECORD_MODE)
            .expect("write");
    }
}

/// Sets `path`'s modification time to `secs` seconds after the Unix epoch.
fn set_mtime(path: &std::path::Path, secs: u64) {
    std::fs::File::open(path)
        .and_then(|f| f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs)))
        .unwrap_or_else(|e| panic!("set the mtime of {}: {e}", path.display()));
}

/// Sets `path`'s modification time `secs` seconds back, as a writer killed that long ago
/// leaves its file.
fn age(path: &std::path::Path, secs: u64) {
    let then = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs()
        - secs;
    set_mtime(path, then);
}

/// Releases `slot` but keeps a copy of its guard's descriptor, so the guard stays held with no
/// record behind it: what the processes a finished run left running leave.
fn leave_running(slot: QuietDrop<Slot>) -> std::os::fd::OwnedFd {
    use std::os::fd::AsFd;
    let copy = slot
        .lease()
        .guard()
        .expect("a slot holds its guard for life")
        .as_fd()
        .try_clone_to_owned()
        .expect("copy the guard's descriptor");
    slot.end(Slot::release).expect("release");
    copy
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

fn dead_record() -> Record {
    let mut child = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn_gated()
        .expect("spawn sleep");
    let identity = ProcessIdentity::of(child.id()).expect("identity");
    child.kill().expect("kill");
    child.wait().expect("reap");
    Record {
        holder: Recorded::new(identity, Place::current().expect("place").clone()),
        owner: Some("dead".into()),
        ..Record::default()
    }
}

mod agents {
    use super::*;

    #[test]
    fn the_cap_holds_and_the_first_free_index_is_taken() {
        let site = Site::new(r#"{"max_agents": 3}"#);
        let slots: Vec<_> = (0..3).map(|_| site.take(Kind::Agent)).collect();
        let names: Vec<&str> = slots.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["agent-0.lock", "agent-1.lock", "agent-2.lock"]);
        assert_eq!(
            site.blocked(Kind::Agent),
            Blocker::AtCap { held: 3, cap: 3 }
        );
        let mut slots = slots.into_iter();
        let first = slots.next().expect("slot 0");
        first.end(Slot::release).expect("release");
        assert_eq!(
            site.take(Kind::Agent).name(),
            "agent-0.lock",
            "the lowest free index"
        );
    }

    #[test]
    fn lowering_the_cap_admits_nobody_until_fewer_run() {
        let site = Site::new(r#"{"max_agents": 4}"#);
        let mut held: Vec<_> = (0..4).map(|_| Some(site.take(Kind::Agent))).collect();
        site.set_config(r#"{"max_agents": 2}"#);
        for (i, expect_held) in [(0, 3), (1, 2)] {
            held[i]
                .take()
                .expect("held")
                .end(Slot::release)
                .expect("release");
            assert_eq!(
                site.blocked(Kind::Agent),
                Blocker::AtCap {
                    held: expect_held,
                    cap: 2
                },
                "after freeing slot {i}, {expect_held} still run"
            );
        }
        held[2]
            .take()
            .expect("held")
            .end(Slot::release)
            .expect("release");
        let slot = site.take(Kind::Agent);
        assert_eq!(
            slot.name(),
            "agent-0.lock",
            "admitted once fewer than 2 run"
        );
    }

    #[test]
    fn files_past_the_cap_are_counted_not_their_indexes() {
        let site = Site::new(r#"{"max_agents": 2}"#);
        let a = site.take(Kind::Agent);
        let b = site.take(Kind::Agent);
        // A slot numbered past the cap, held by a live process (this one), from before a cap
        // change: it counts.
        let mut live = dead_record();
        live.holder = Recorded::new(
            ProcessIdentity::of_self().expect("me"),
            Place::current().expect("place").clone(),
        );
        site.write_record("agent-7.lock", &live);
        drop(a);
        assert_eq!(
            site.blocked(Kind::Agent),
            Blocker::AtCap { held: 2, cap: 2 }
        );
        drop(b);
        assert_eq!(site.take(Kind::Agent).name(), "agent-0.lock");
    }

    #[test]
    fn a_dead_slot_is_free_and_taken_over() {
        let site = Site::new(r#"{"max_agents": 1}"#);
        site.write_record("agent-0.lock", &dead_record());
        let slot = site.take(Kind::Agent);
        assert_eq!(slot.name(), "agent-0.lock");
        assert_eq!(slot.lease().record().owner.as_deref(), Some("test"));
    }

    #[test]
    fn unknown_and_malformed_slots_count_as_held() {
        let site = Site::new(r#"{"max_agents": 2}"#);
        let mut foreign = dead_record();
        if let Field::Present(place) = &mut foreign.holder.place {
            place.host = "elsewhere".into();
        }
        site.write_record("agent-0.lock", &foreign);
        std::fs::write(site.temp.path().join("agent-1.lock"), b"{").expect("malformed");
        assert_eq!(
            site.blocked(Kind::Agent),
            Blocker::AtCap { held: 2, cap: 2 }
        );
        let snapshot = site.snapshot();
        let states: Vec<_> = snapshot
            .slots
            .iter()
            .map(|s| (&s.name[..], &s.state))
            .collect();
        assert!(
            matches!(
                states[0],
                ("agent-0.lock", SlotState::Live(LiveWhy::Unknown(_)))
            ),
            "{states:?}"
        );
        assert!(
            matches!(
                states[1],
                ("agent-1.lock", SlotState::Live(LiveWhy::Malformed { .. }))
            ),
            "{states:?}"
        );
    }

    #[test]
    fn broken_slot_files_count_as_held_and_never_stop_the_pool() {
        let site = Site::new(r#"{"max_agents": 4}"#);
        let dir = site.temp.path();
        std::os::unix::fs::symlink(dir.join("config.json"), dir.join("agent-0.lock"))
            .expect("a symlinked record");
        std::fs::write(dir.join("agent-1.lock"), vec![b' '; 65 * 1024]).expect("a huge record");
        std::fs::create_dir(dir.join("agent-2.lock")).expect("a directory for a record");
        // A dead holder's record, which would be free, behind a guard that is not empty.
        site.write_record("agent-3.lock", &dead_record());
        std::fs::write(dir.join(".agent-3.lock.flock"), b"x").expect("a broken guard");
        assert_eq!(
            site.blocked(Kind::Agent),
            Blocker::AtCap { held: 4, cap: 4 },
            "slots that cannot be judged count as held"
        );
        site.set_config(r#"{"max_agents": 5}"#);
        assert_eq!(
            site.take(Kind::Agent).name(),
            "agent-4.lock",
            "the pool goes on past them"
        );
        let snapshot = site.snapshot();
        let states: Vec<(&str, &SlotState)> = snapshot
            .slots
            .iter()
            .map(|s| (&s.name[..], &s.state))
            .collect();
        for (name, state) in &states[..3] {
            assert!(
                matches!(state, SlotState::Live(LiveWhy::Malformed { .. })),
                "{name} is shown as malformed: {states:?}"
            );
        }
        assert!(
            matches!(states[3], ("agent-3.lock", SlotState::Live(LiveWhy::Other(why))) if why.contains("guard")),
            "a broken guard is shown as such: {states:?}"
        );
    }
}

mod operator {
    use super::*;

    fn stop() -> Stop {
        Stop {
            by: "ops".into(),
            at: "2026-11-30T00:00:00.000Z".into(),
            reason: "incident".into(),
        }
    }

    #[test]
    fn stop_refuses_every_kind_and_resume_admits_again() {
        let site = Site::new("{}");
        worklane_admission::stop::write(site.pool.dir(), &stop()).expect("write STOP");
        assert_eq!(site.pool.stop().expect("read"), Some(stop()));
        for kind in [Kind::Agent, Kind::Test { limit_ms: None }, Kind::FullRun] {
            let blocker = site.blocked(kind);
            assert_eq!(blocker, Blocker::Stop(stop()), "{}", kind.label());
            assert!(blocker.is_operator_refusal());
            assert!(blocker.to_string().contains("incident"), "{blocker}");
        }
        assert!(worklane_admission::stop::remove(site.pool.dir()).expect("remove"));
        drop(site.take(Kind::Agent));
    }

    #[test]
    fn a_blocking_take_refuses_at_once_under_stop_and_drain() {
        let site = Site::new("{}");
        worklane_admission::stop::write(site.pool.dir(), &stop()).expect("write STOP");
        let take = |pool: &Pool| {
            pool.take(
                Kind::Agent,
                &Request::new("waiter"),
                Wait {
                    // A watchdog only: the take must return before its first retry.
                    timeout: Some(Duration::from_secs(30)),
                    priority: 0,
                    on_wait: &mut |w| panic!("an operator refusal is not waited on: {}", w.blocker),
                },
            )
            .expect("take")
        };
        let got = take(&site.pool);
        assert!(
            matches!(got, Take::Blocked(Blocker::Stop(_))),
            "STOP: {got:?}"
        );
        worklane_admission::stop::remove(site.pool.dir()).expect("resume");
        let now = 1_796_012_839_000;
        let clock = ManualClock::at(now);
        let pool = drain_until(&site, &clock, now + 60_000);
        let got = take(&pool);
        assert!(
            matches!(got, Take::Blocked(Blocker::Drain(_))),
            "drain: {got:?}"
        );
    }

    #[test]
    fn an_unreadable_stop_is_still_a_stop() {
        let site = Site::new("{}");
        std::fs::write(site.temp.path().join("STOP"), b"not json").expect("write");
        assert!(matches!(site.blocked(Kind::Agent), Blocker::Stop(_)));
    }

    #[test]
    fn stop_and_the_drain_are_written_over_an_empty_directory_and_never_into_a_full_one() {
        let site = Site::new("{}");
        let stop_at = site.temp.path().join("STOP");
        std::fs::create_dir(&stop_at).expect("mkdir STOP");
        assert!(
            matches!(site.blocked(Kind::Agent), Blocker::Stop(_)),
            "a STOP"
        );
        worklane_admission::stop::write(site.pool.dir(), &stop()).expect("written over it");
        assert_eq!(site.pool.stop().expect("read"), Some(stop()));
        assert!(worklane_admission::stop::remove(site.pool.dir()).expect("remove"));
        std::fs::create_dir(&stop_at).expect("mkdir STOP");
        assert!(
            worklane_admission::stop::remove(site.pool.dir()).expect("an empty directory"),
            "resume removes an empty directory at STOP"
        );
        std::fs::create_dir(&stop_at).expect("mkdir STOP");
        std::fs::write(stop_at.join("kept"), b"x").expect("write");
        assert!(worklane_admission::stop::write(site.pool.dir(), &stop()).is_err());
        assert!(worklane_admission::stop::remove(site.pool.dir()).is_err());
        assert!(stop_at.join("kept").exists(), "nothing in it is removed");
        assert!(
            matches!(site.blocked(Kind::Agent), Blocker::Stop(_)),
            "and it is a STOP in force"
        );
        std::fs::remove_dir_all(&stop_at).expect("clean up");

        let flag = site.temp.path().join("update-drain.json");
        std::fs::create_dir(&flag).expect("mkdir the flag");
        let now = worklane_lease::Clock::now_ms(&worklane_lease::SystemClock);
        let drain = Drain {
            since: rfc3339_ms(now),
            until: rfc3339_ms(now + 600_000),
            to: None,
        };
        site.pool.write_drain(&drain).expect("written over it");
        assert!(matches!(
            site.pool.drain().expect("drain"),
            DrainState::InForce(_)
        ));
        assert!(site.pool.remove_drain().expect("remove"));
        std::fs::create_dir(&flag).expect("mkdir the flag");
        assert!(site.pool.remove_drain().expect("an empty directory"));
    }

    #[test]
    fn a_pool_opened_without_its_config_reads_it_only_to_take() {
        let site = Site::new("{}");
        std::fs::write(site.temp.path().join("config.json"), b"{not json").expect("write");
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", site.temp.path());
        assert!(
            SlotDir::resolve_in(&env).is_err(),
            "resolving with the config refuses it"
        );
        let pool = Pool::open(SlotDir::resolve_located_in(&env).expect("the directory alone"));
        let snapshot = gate::quietly(|| pool.snapshot()).expect("a snapshot all the same");
        let err = snapshot.config.expect_err("the caps cannot be read");
        assert!(err.to_string().contains("config.json"), "{err}");
        worklane_admission::stop::write(pool.dir(), &stop()).expect("STOP");
        assert_eq!(pool.stop().expect("read"), Some(stop()));
        assert!(
            gate::quietly(|| pool.idle()).expect("idle"),
            "the idle probe"
        );
        assert!(worklane_admission::stop::remove(pool.dir()).expect("resume"));
        let taken = gate::quietly(|| pool.try_take(Kind::Agent, &Request::new("test")));
        assert!(
            matches!(taken, Err(worklane_admission::Error::Config { .. })),
            "an agent take reads the config: {taken:?}"
        );
        site.set_config(r#"{"max_agents": 1}"#);
        let taken = gate::quietly(|| pool.try_take(Kind::Agent, &Request::new("test")));
        let Ok(Take::Held(slot)) = taken else {
            panic!("fixed, the same pool takes: {taken:?}");
        };
        gate::quietly(|| drop(slot));
    }

    /// A clock that stops its first reader until the test lets it go.
    struct Gate {
        first: std::sync::atomic::AtomicBool,
        reached: std::sync::mpsc::Sender<()>,
        go: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
    }

    impl worklane_lease::Clock for Gate {
        fn now_ms(&self) -> u64 {
            if !self.first.swap(true, std::sync::atomic::Ordering::SeqCst) {
                self.reached.send(()).expect("report");
                self.go.lock().expect("lock").recv().expect("wait for go");
            }
            worklane_lease::SystemClock.now_ms()
        }
    }

    #[test]
    fn a_stop_written_while_a_taker_checks_wins_under_slots_lock() {
        let site = Site::new("{}");
        let (reached_tx, reached_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel();
        // The taker's first clock reading is the drain decision of its first STOP and drain
        // check, after it found no STOP: the gate holds it there.
        let pool = site.pool.clone().with_clock(Arc::new(Gate {
            first: false.into(),
            reached: reached_tx,
            go: go_rx.into(),
        }));
        let taker = std::thread::spawn(move || {
            match pool
                .try_take(Kind::Agent, &Request::new("late"))
                .expect("take")
            {
                Take::Held(slot) => format!("held {}", slot.name()),
                Take::Blocked(blocker) => format!("blocked: {blocker}"),
            }
        });
        reached_rx
            .recv()
            .expect("the taker passed its first STOP check");
        worklane_admission::stop::write(site.pool.dir(), &stop()).expect("write STOP");
        go_tx.send(()).expect("let the taker go");
        let got = taker.join().expect("the taker's thread");
        assert!(
            got.starts_with("blocked: STOP"),
            "the check under slots.lock sees a STOP written a moment ago: {got}"
        );
        assert!(
            !site.temp.path().join("agent-0.lock").exists(),
            "no slot was taken"
        );
    }

    fn drain_until(site: &Site, clock: &ManualClock, until: u64) -> Pool {
        let pool = site.pool.clone().with_clock(Arc::new(clock.clone()));
        pool.write_drain(&Drain {
            since: rfc3339_ms(clock.now_ms()),
            until: rfc3339_ms(until),
            to: Some("2.0.0".into()),
        })
        .expect("write drain");
        pool
    }

    use worklane_lease::Clock;

    #[test]
    fn a_drain_in_force_refuses_and_its_ignore_cases_do_not() {
        let site = Site::new("{}");
        let now = 1_796_012_839_000;
        let clock = ManualClock::at(now);
        let pool = drain_until(&site, &clock, now + 3_600_000);
        assert!(matches!(
            pool.drain().expect("drain"),
            DrainState::InForce(_)
        ));
        let blocked =
            gate::quietly(|| pool.try_take(Kind::FullRun, &Request::new("t"))).expect("take");
        assert!(
            matches!(blocked, Take::Blocked(Blocker::Drain(_))),
            "{blocked:?}"
        );
        clock.set(now + 3_600_000);
        assert!(
            gate::quietly(|| matches!(
                pool.try_take(Kind::Agent, &Request::new("t"))
                    .expect("take"),
                Take::Held(_)
            )),
            "past its until the drain is ignored"
        );
        let pool = drain_until(&site, &clock, clock.now_ms() + 4 * 3_600_000 + 1);
        assert!(
            gate::quietly(|| matches!(
                pool.try_take(Kind::Agent, &Request::new("t"))
                    .expect("take"),
                Take::Held(_)
            )),
            "more than 4 h ahead is ignored"
        );
        std::fs::write(site.temp.path().join("update-drain.json"), b"{oops").expect("write");
        assert!(
            gate::quietly(|| matches!(
                pool.try_take(Kind::Agent, &Request::new("t"))
                    .expect("take"),
                Take::Held(_)
            )),
            "an unreadable flag is ignored"
        );
        assert!(
            pool.remove_drain().expect("remove"),
            "undrain removes the flag"
        );
    }

    #[test]
    fn a_drain_without_a_version_writes_to_null() {
        let site = Site::new("{}");
        let now = 1_796_012_839_000;
        site.pool
            .write_drain(&Drain {
                since: rfc3339_ms(now),
                until: rfc3339_ms(now + 60_000),
                to: None,
            })
            .expect("write drain");
        let raw = std::fs::read(site.temp.path().join("update-drain.json")).expect("the flag");
        let flag: serde_json::Value = serde_json::from_slice(&raw).expect("json");
        assert_eq!(
            flag.as_object().map(|o| o.len()),
            Some(3),
            "since, until and to, always: {flag}"
        );
        assert!(flag["to"].is_null(), "to is null when not given: {flag}");
    }
}

mod runs {
    use super::*;

    #[test]
    fn one_full_run_at_a_time_and_the_idle_probe_sees_it() {
        let site = Site::new("{}");
        assert!(site.idle(), "idle with no full run");
        let run = site.take(Kind::FullRun);
        assert!(!site.idle(), "not idle during a full run");
        let blocker = site.blocked(Kind::FullRun);
        assert!(
            matches!(&blocker, Blocker::FullRunHeld(r) if r.why == LiveWhy::GuardHeld),
            "{blocker:?}"
        );
        drop(run);
        assert!(site.idle(), "idle again");
        site.write_record("full-run.lock", &dead_record());
        assert!(site.idle(), "a dead full run is not live");
    }

    #[test]
    fn the_idle_probe_judges_a_record_behind_a_free_guard() {
        let site = Site::new("{}");
        let mut live = dead_record();
        live.holder = Recorded::new(
            ProcessIdentity::of_self().expect("me"),
            Place::current().expect("place").clone(),
        );
        site.write_record("full-run.lock", &live);
        assert!(
            !site.idle(),
            "a full run whose process runs is live, guard or not"
        );
        let mut foreign = dead_record();
        if let Field::Present(place) = &mut foreign.holder.place {
            place.host = "elsewhere".into();
        }
        site.write_record("full-run.lock", &foreign);
        assert!(!site.idle(), "a full run that cannot be judged is live");
        std::fs::write(site.temp.path().join("full-run.lock"), b"{").expect("malformed");
        assert!(!site.idle(), "a malformed full-run record is live");
    }

    #[test]
    fn test_runs_are_capped_apart_from_agents_and_carry_their_limit() {
        let site = Site::new(r#"{"max_agents": 1, "max_test_runs": 2}"#);
        let agent = site.take(Kind::Agent);
        let t0 = site.take(Kind::Test {
            limit_ms: Some(60_000),
        });
        let t1 = site.take(Kind::Test { limit_ms: None });
        assert_eq!((t0.name(), t1.name()), ("test-0.lock", "test-1.lock"));
        assert_eq!(
            t0.lease().record().extra.get("limit_ms"),
            Some(&60_000.into()),
            "limit_ms recorded"
        );
        assert_eq!(
            site.blocked(Kind::Test { limit_ms: None }),
            Blocker::AtCap { held: 2, cap: 2 }
        );
        drop(agent);
    }
}

mod waiting {
    use super::*;

    #[test]
    fn a_blocking_take_reports_its_blocker_and_times_out() {
        let site = Site::new(r#"{"max_agents": 1}"#);
        let held = site.take(Kind::Agent);
        let mut seen = Vec::new();
        // Quiet for the whole wait: each retry takes and releases `slots.lock`, and the last
        // one before the deadline must find it free to report the cap, not the lock.
        let got = gate::quietly(|| {
            site.pool.take(
                Kind::Agent,
                &Request::new("waiter"),
                Wait {
                    timeout: Some(Duration::from_millis(200)),
                    priority: 0,
                    on_wait: &mut |w| seen.push(w.blocker.clone()),
                },
            )
        })
        .expect("take");
        assert!(
            matches!(got, Take::Blocked(Blocker::AtCap { held: 1, cap: 1 })),
            "{got:?}"
        );
        assert!(
            seen.iter()
                .all(|b| *b == Blocker::AtCap { held: 1, cap: 1 })
                && !seen.is_empty(),
            "the wait said what blocks it: {seen:?}"
        );
        drop(held);
    }

    #[test]
    fn a_zero_timeout_still_tries_once() {
        let site = Site::new("{}");
        let got = site
            .pool
            .take(
                Kind::Agent,
                &Request::new("impatient"),
                Wait {
                    timeout: Some(Duration::ZERO),
                    priority: 0,
                    on_wait: &mut |_| {},
                },
            )
            .expect("take");
        assert!(
            matches!(got, Take::Held(_)),
            "a free slot is taken at once: {got:?}"
        );
    }

    #[test]
    fn a_counter_stuck_on_slots_lock_is_reported_and_named() {
        let site = Site::new("{}");
        let dir = SlotDir::open(site.temp.path()).expect("open");
        let stuck = match worklane_lease::acquire(
            &dir,
            worklane_admission::SLOTS_LOCK,
            &Request::new("stuck counter"),
            &worklane_lease::Options::process(),
        )
        .expect("acquire")
        {
            worklane_lease::Acquired::Held(lease) => lease,
            worklane_lease::Acquired::Refused(r) => panic!("free: {r}"),
        };
        let got = site
            .pool
            .take(
                Kind::Agent,
                &Request::new("waiter"),
                Wait {
                    timeout: Some(Duration::from_millis(100)),
                    priority: 0,
                    on_wait: &mut |_| {},
                },
            )
            .expect("take");
        assert!(
            matches!(&got, Take::Blocked(b @ Blocker::Counting) if b.to_string().contains("slots.lock")),
            "a blocking take gives up on a stuck counter at its timeout: {got:?}"
        );
        let snapshot = site.snapshot();
        let lock = snapshot
            .slots
            .iter()
            .find(|s| s.name == "slots.lock")
            .expect("slots shows the stuck slots.lock");
        assert_eq!(lock.state, SlotState::GuardHeld);
        assert_eq!(
            lock.record.as_ref().and_then(|r| r.owner.as_deref()),
            Some("stuck counter"),
            "and names its holder"
        );
        drop(stuck);
    }

    #[test]
    fn a_blocking_take_gets_the_slot_once_freed() {
        let site = Arc::new(Site::new(r#"{"max_agents": 1}"#));
        let held = site.take(Kind::Agent);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let site = Arc::clone(&site);
            std::thread::spawn(move || {
                let mut told = false;
                let got = site.pool.take(
                    Kind::Agent,
                    &Request::new("waiter"),
                    Wait {
                        timeout: None,
                        priority: 0,
                        on_wait: &mut |_| {
                            if !told {
                                told = true;
                                tx.send(()).expect("tell");
                            }
                        },
                    },
                );
                matches!(got, Ok(Take::Held(_)))
            })
        };
        rx.recv().expect("the waiter is waiting");
        drop(held);
        assert!(
            waiter.join().expect("join"),
            "the waiter got the freed slot"
        );
    }
}

mod model {
    //! A model-based property test of the slot pool: random takes, releases, kills (a holder
    //! gone without releasing: its record stays, its guard is closed), cap changes and STOP,
    //! against a reference model. The live count at each admission never exceeds the cap, the
    //! first index not live is the one taken, and a killed holder's slot is free at once.
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Take,
        Release(usize),
        Kill(usize),
        SetCap(u32),
        Stop,
        Resume,
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                5 => Just(Op::Take),
                2 => (0usize..6).prop_map(Op::Release),
                2 => (0usize..6).prop_map(Op::Kill),
                1 => (1u32..5).prop_map(Op::SetCap),
                1 => Just(Op::Stop),
                1 => Just(Op::Resume),
            ],
            1..40,
        )
    }

    fn run(ops: &[Op]) -> Result<(), TestCaseError> {
        // Releases here must be seen at once by the next acquisition: no other test thread
        // may be between fork and exec meanwhile (see worklane-testkit's gate).
        let _quiet = worklane_testkit::gate::quiet();
        let site = Site::new(r#"{"max_agents": 2}"#);
        let dir = site.temp.path();
        // Held slots by index, in the harness and in the model.
        let mut held: BTreeMap<u32, worklane_admission::Slot> = BTreeMap::new();
        let mut cap = 2u32;
        let mut stopped = false;
        for op in ops {
            match op {
                Op::Take => {
                    let got = site
                        .pool
                        .try_take(Kind::Agent, &Request::new("model"))
                        .expect("take");
                    let live = u32::try_from(held.len()).expect("few");
                    match got {
                        Take::Held(slot) => {
                            prop_assert!(!stopped, "admitted under STOP");
                            prop_assert!(live < cap, "admitted at {live} of {cap}: over the cap");
                            let first_free =
                                (0..).find(|i| !held.contains_key(i)).expect("an index");
                            prop_assert_eq!(slot.name(), format!("agent-{first_free}.lock"));
                            held.insert(first_free, slot);
                        }
                        Take::Blocked(Blocker::Stop(_)) => prop_assert!(stopped),
                        Take::Blocked(Blocker::AtCap { held: n, cap: c }) => {
                            prop_assert!(!stopped);
                            prop_assert_eq!((n, c), (live, cap), "the count is the model's");
                        }
                        Take::Blocked(other) => {
                            return Err(TestCaseError::fail(format!("unexpected blocker {other}")));
                        }
                    }
                }
                Op::Release(i) => {
                    let Some(&index) = held.keys().nth(*i % held.len().max(1)) else {
                        continue;
                    };
                    let slot = held.remove(&index).expect("held");
                    slot.release().expect("release");
                }
                Op::Kill(i) => {
                    let Some(&index) = held.keys().nth(*i % held.len().max(1)) else {
                        continue;
                    };
                    let slot = held.remove(&index).expect("held");
                    // What a SIGKILL leaves: the record as it was, and the guard closed.
                    let name = dir.join(slot.name());
                    let bytes = std::fs::read(&name).expect("its record");
                    slot.release().expect("release");
                    std::fs::write(&name, bytes).expect("the record stays");
                }
                Op::SetCap(n) => {
                    cap = *n;
                    site.set_config(&format!(r#"{{"max_agents": {n}}}"#));
                }
                Op::Stop => {
                    stopped = true;
                    std::fs::write(dir.join("STOP"), br#"{"by":"m","at":"x","reason":"model"}"#)
                        .expect("STOP");
                }
                Op::Resume => {
                    stopped = false;
                    let _ = std::fs::remove_file(dir.join("STOP"));
                }
            }
            let snapshot = site.pool.snapshot().expect("snapshot");
            let counted = snapshot
                .slots
                .iter()
                .filter(|s| s.kind == "agent" && s.state.is_held())
                .count();
            prop_assert_eq!(
                counted,
                held.len(),
                "slots counts what is held, after {:?}",
                op
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn the_pool_follows_the_model(ops in ops()) {
            run(&ops)?;
        }
    }
}

mod texts {
    //! What operators and scripts read: kind names, STOP, drain and blocker texts.
    use super::*;

    #[test]
    fn kinds_are_named_as_the_cli_and_slots_json_show_them() {
        let labels = [
            Kind::Agent.label(),
            Kind::Test {
                limit_ms: Some(60_000),
            }
            .label(),
            Kind::Test { limit_ms: None }.label(),
            Kind::FullRun.label(),
        ];
        assert_eq!(
            labels,
            ["agent", "test", "test", "full-run"],
            "the labels scripts match on"
        );
    }

    #[test]
    fn a_stop_says_who_when_and_why() {
        let stop = Stop {
            by: "ops".into(),
            at: "2026-11-30T00:00:00.000Z".into(),
            reason: "incident".into(),
        };
        assert_eq!(
            stop.to_string(),
            "STOP by ops at 2026-11-30T00:00:00.000Z: incident",
            "a full STOP"
        );
        assert_eq!(
            Blocker::Stop(stop).to_string(),
            "STOP by ops at 2026-11-30T00:00:00.000Z: incident (worklane resume-all lifts it)",
            "a STOP refusal says how to lift it"
        );
        let anonymous = Stop {
            by: String::new(),
            at: String::new(),
            reason: String::new(),
        };
        assert_eq!(
            anonymous.to_string(),
            "STOP by (unknown) at (unknown)",
            "what a STOP does not say is shown as unknown, and no empty reason"
        );
    }

    #[test]
    fn a_drain_says_until_when_and_to_what() {
        let mut drain = Drain {
            since: "2026-11-30T04:25:59.008Z".into(),
            until: "2026-11-30T05:25:59.008Z".into(),
            to: Some("2.0.0".into()),
        };
        assert_eq!(
            drain.to_string(),
            "drain until 2026-11-30T05:25:59.008Z (updating to 2.0.0)",
            "a drain with a version"
        );
        assert_eq!(
            Blocker::Drain(drain.clone()).to_string(),
            "an update is draining the machine: drain until 2026-11-30T05:25:59.008Z \
             (updating to 2.0.0) (worklane undrain ends it early)",
            "a drain refusal says how to end it"
        );
        drain.to = None;
        assert_eq!(
            drain.to_string(),
            "drain until 2026-11-30T05:25:59.008Z",
            "a drain without a version"
        );
    }

    #[test]
    fn a_blocker_at_cap_says_how_many_of_how_many() {
        assert_eq!(
            Blocker::AtCap { held: 3, cap: 4 }.to_string(),
            "at cap: 3 of 4 held",
            "the count and the cap"
        );
    }

    #[test]
    fn a_pool_shows_its_directory_and_config_when_debugged() {
        let site = Site::new("{}");
        let shown = format!("{:?}", site.pool);
        let config = format!("{:?}", site.temp.path().join("config.json"));
        assert!(
            shown.starts_with("Pool") && shown.contains(&config),
            "the pool's Debug names its config {config}: {shown}"
        );
    }
}

mod handles {
    //! What a held slot does: its record takes annotations, its release removes it.
    use super::*;

    #[test]
    fn a_handed_over_slot_is_adopted_as_its_kind_and_nothing_else_is_a_slot() {
        let site = Site::new(r#"{"max_agents": 2, "max_test_runs": 2}"#);
        for kind in [Kind::Agent, Kind::Test { limit_ms: None }, Kind::FullRun] {
            let Take::Held(slot) = site.try_take(kind) else {
                panic!("{} is free", kind.label());
            };
            let name = slot.name().to_owned();
            let guard = slot.hand_over().expect("a held guard");
            // What the receiver gets: another descriptor of the same open file description.
            let fd = rustix::io::fcntl_dupfd_cloexec(&guard, 3).expect("dup");
            gate::quietly(|| drop(guard));
            let adopted = site
                .pool
                .adopt(&name, fd, &Request::new("driver"))
                .expect("adopt");
            assert_eq!(
                adopted.kind().label(),
                kind.label(),
                "{name} keeps its kind"
            );
            assert_eq!(adopted.name(), name);
            gate::quietly(|| adopted.release()).expect("release");
        }
        let file = tempfile::tempfile().expect("file");
        let error = site
            .pool
            .adopt("lane-x.lock", file.into(), &Request::new("driver"))
            .expect_err("a lane is no slot");
        assert!(
            matches!(error, worklane_admission::Error::NotASlot { ref name } if name == "lane-x.lock"),
            "{error}"
        );
    }
    use serde_json::json;

    #[test]
    fn an_annotation_reaches_the_record_on_disk_and_reserved_fields_are_refused() {
        let site = Site::new("{}");
        let mut slot = site.take(Kind::Agent);
        let path = site.temp.path().join(slot.name());
        let command = json!({"pid": 4242, "start": 99, "group": true});
        let mut fields = serde_json::Map::new();
        fields.insert("commandProcess".into(), command.clone());
        slot.annotate(fields).expect("annotate");
        let on_disk =
            Record::parse(&std::fs::read(&path).expect("the record")).expect("the record parses");
        assert_eq!(
            on_disk.extra.get("commandProcess"),
            Some(&command),
            "the annotation is in the record others read"
        );
        let mut reserved = serde_json::Map::new();
        reserved.insert("pid".into(), json!(1));
        let refused = slot.annotate(reserved);
        assert!(
            refused.is_err(),
            "a field the core writes cannot be annotated: {refused:?}"
        );
        let after = std::fs::read(&path).expect("the record");
        assert_eq!(
            Record::parse(&after).expect("parses").pid(),
            on_disk.pid(),
            "a refused annotation leaves the record alone"
        );
    }

    #[test]
    fn a_release_removes_the_record() {
        let site = Site::new("{}");
        let slot = site.take(Kind::Agent);
        let path = site.temp.path().join(slot.name());
        assert!(path.exists(), "a held slot has its record");
        slot.end(Slot::release).expect("release");
        assert!(!path.exists(), "a released slot has none");
        assert_eq!(
            site.take(Kind::Agent).name(),
            "agent-0.lock",
            "and is free at once"
        );
    }
}

mod leftovers {
    //! Guards held with no record behind them: processes a finished run left running still
    //! hold a copy of the slot's guard descriptor, so the slot stays live until they exit.
    use super::*;

    #[test]
    fn an_agent_guard_held_without_a_record_counts_and_is_shown_once() {
        let site = Site::new(r#"{"max_agents": 2}"#);
        let first = site.take(Kind::Agent);
        let second = site.take(Kind::Agent);
        let left = leave_running(first);
        assert!(
            !site.temp.path().join("agent-0.lock").exists(),
            "the run's record is gone"
        );
        assert_eq!(
            site.blocked(Kind::Agent),
            Blocker::AtCap { held: 2, cap: 2 },
            "what the first run left running still holds its slot, beside the second run"
        );
        let snapshot = site.snapshot();
        let shown: Vec<(&str, &str, &SlotState, bool)> = snapshot
            .slots
            .iter()
            .map(|s| (&s.name[..], s.kind, &s.state, s.record.is_some()))
            .collect();
        assert_eq!(
            shown,
            [
                ("agent-0.lock", "agent", &SlotState::GuardHeld, false),
                ("agent-1.lock", "agent", &SlotState::GuardHeld, true),
            ],
            "the leftover is shown once, held, with no record"
        );
        second.end(Slot::release).expect("release");
        assert_eq!(
            site.take(Kind::Agent).name(),
            "agent-1.lock",
            "index 0 stays held while the leftover runs"
        );
        gate::quietly(|| drop(left));
        assert_eq!(
            site.take(Kind::Agent).name(),
            "agent-0.lock",
            "free once the leftover is gone"
        );
    }

    #[test]
    fn a_test_run_guard_held_without_a_record_is_shown_as_a_test_slot() {
        let site = Site::new("{}");
        let left = leave_running(site.take(Kind::Test { limit_ms: None }));
        let snapshot = site.snapshot();
        let shown: Vec<(&str, &str, &SlotState)> = snapshot
            .slots
            .iter()
            .map(|s| (&s.name[..], s.kind, &s.state))
            .collect();
        assert_eq!(
            shown,
            [("test-0.lock", "test", &SlotState::GuardHeld)],
            "{snapshot:?}"
        );
        drop(left);
    }

    #[test]
    fn a_full_run_guard_held_without_a_record_refuses() {
        let site = Site::new("{}");
        let left = leave_running(site.take(Kind::FullRun));
        let blocker = site.blocked(Kind::FullRun);
        assert!(
            matches!(&blocker, Blocker::FullRunHeld(r) if r.why == LiveWhy::GuardHeld && r.holder.is_none()),
            "a guard held for longer than a probe is a full run in progress: {blocker:?}"
        );
        assert!(!site.idle(), "and the machine is not idle");
        gate::quietly(|| drop(left));
        assert!(site.idle(), "idle once the leftover is gone");
        assert_eq!(site.take(Kind::FullRun).name(), "full-run.lock");
    }
}

mod strays {
    //! A stray file where a free index's guard belongs is skipped, never counted, and never
    //! stops the pool.
    use super::*;

    pub(super) fn fifo(path: &std::path::Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
    }

    #[test]
    fn broken_guards_at_free_indexes_are_skipped_and_not_counted() {
        let site = Site::new(r#"{"max_agents": 2}"#);
        let dir = site.temp.path();
        std::fs::create_dir(dir.join(".agent-0.lock.flock")).expect("a directory");
        fifo(&dir.join(".agent-1.lock.flock"));
        std::os::unix::fs::symlink("/etc/passwd", dir.join(".agent-2.lock.flock"))
            .expect("a symlink");
        std::fs::write(dir.join(".agent-3.lock.flock"), b"x").expect("a non-empty file");
        let first = site.take(Kind::Agent);
        assert_eq!(
            first.name(),
            "agent-4.lock",
            "the directory, FIFO, symlink and non-empty file are skipped"
        );
        let second = site.take(Kind::Agent);
        assert_eq!(second.name(), "agent-5.lock", "and skipped again");
        assert_eq!(
            site.blocked(Kind::Agent),
            Blocker::AtCap { held: 2, cap: 2 },
            "the strays are not counted, the two holders are"
        );
    }

    #[test]
    fn an_index_whose_epoch_is_exhausted_is_skipped() {
        let site = Site::new("{}");
        let marker = format!("agent-0.lock.epoch.{}", u64::MAX);
        std::fs::write(site.temp.path().join(marker), b"").expect("plant");
        assert_eq!(
            site.take(Kind::Agent).name(),
            "agent-1.lock",
            "an index that can never get a larger epoch is never taken again"
        );
    }
}

mod problems {
    //! `Pool::snapshot().problems`: every stray or broken file, what it does and its fix.
    use super::*;
    use worklane_admission::{Problem, Snapshot};

    fn problem<'a>(snapshot: &'a Snapshot, name: &str) -> &'a Problem {
        snapshot
            .problems
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{name} is reported: {:#?}", snapshot.problems))
    }

    fn names(snapshot: &Snapshot) -> Vec<&str> {
        let mut names: Vec<&str> = snapshot.problems.iter().map(|p| &p.name[..]).collect();
        names.sort_unstable();
        names
    }

    /// The path of `name`, quoted for a shell as the fixes quote it.
    fn quoted(snapshot: &Snapshot, name: &str) -> String {
        format!("'{}'", snapshot.dir.join(name).display())
    }

    #[test]
    fn strays_where_slot_guards_belong_are_named_with_their_effect_and_fix() {
        let site = Site::new("{}");
        let dir = site.temp.path();
        // A held slot's guard and an unheld one's are what guards should be.
        let held = site.take(Kind::Agent);
        drop(site.take(Kind::Test { limit_ms: None }));
        std::fs::create_dir(dir.join(".agent-1.lock.flock")).expect("a directory");
        strays::fifo(&dir.join(".agent-2.lock.flock"));
        std::os::unix::fs::symlink("/etc/passwd", dir.join(".agent-3.lock.flock"))
            .expect("a symlink");
        std::fs::write(dir.join(".test-1.lock.flock"), b"x").expect("a non-empty guard");
        std::fs::write(dir.join(".agent-4.lock.flock"), b"").expect("an unreadable guard");
        set_mode(&dir.join(".agent-4.lock.flock"), 0o600);
        std::fs::write(dir.join(".agent-5.lock.flock"), b"xy").expect("a non-empty 0600 guard");
        set_mode(&dir.join(".agent-5.lock.flock"), 0o600);
        std::fs::write(dir.join(".agent-6.lock.flock"), b"").expect("a group-readable guard");
        set_mode(&dir.join(".agent-6.lock.flock"), 0o640);
        std::fs::create_dir(dir.join(".other.lock.flock")).expect("a directory");
        let snapshot = site.snapshot();
        assert_eq!(
            names(&snapshot),
            [
                ".agent-1.lock.flock",
                ".agent-2.lock.flock",
                ".agent-3.lock.flock",
                ".agent-4.lock.flock",
                ".agent-5.lock.flock",
                ".other.lock.flock",
                ".test-1.lock.flock",
            ],
            "every broken guard, and no sound one: {:#?}",
            snapshot.problems
        );
        for (name, kind, resource) in [
            (".agent-1.lock.flock", "directory", "agent-1.lock"),
            (".agent-2.lock.flock", "FIFO", "agent-2.lock"),
            (".agent-3.lock.flock", "symbolic link", "agent-3.lock"),
        ] {
            let p = problem(&snapshot, name);
            assert_eq!(
                p.what,
                format!(
                    "a {kind} sits where the guard of {resource} belongs: no process can hold \
                     {resource}: takes skip that index"
                ),
                "{name}"
            );
            assert_eq!(
                p.fix,
                format!(
                    "rm -r -- {} (nobody can hold it; worklane recreates the guard)",
                    quoted(&snapshot, name)
                ),
                "{name}"
            );
            assert_eq!(p.blocks, None, "{name} stops only its own index");
        }
        let p = problem(&snapshot, ".test-1.lock.flock");
        assert_eq!(
            p.what,
            "the guard of test-1.lock holds 1 bytes: no process can hold test-1.lock: takes \
             skip that index",
            "a guard with contents"
        );
        assert_eq!(
            p.fix,
            format!(
                "in a quiescent window (`worklane stop-all`, nothing held): rm -- {}",
                quoted(&snapshot, ".test-1.lock.flock")
            ),
            "a guard with contents may be written into while held: removed only when quiet"
        );
        assert_eq!(
            problem(&snapshot, ".agent-5.lock.flock").what,
            "the guard of agent-5.lock holds 2 bytes: no process can hold agent-5.lock: takes \
             skip that index",
            "contents first, whatever its mode"
        );
        let p = problem(&snapshot, ".agent-4.lock.flock");
        assert_eq!(
            p.what,
            "the guard of agent-4.lock has mode 0600: only its owner can open it, so every \
             other user's take of agent-4.lock fails",
            "an unreadable guard"
        );
        assert_eq!(
            p.fix,
            format!("chmod 0444 -- {}", quoted(&snapshot, ".agent-4.lock.flock")),
            "its fix"
        );
        assert_eq!(p.blocks, None, "its owner can still take it");
        let p = problem(&snapshot, ".other.lock.flock");
        assert_eq!(
            p.what,
            "a directory sits where the guard of other.lock belongs: no process can take \
             other.lock",
            "a lock that is no slot has no index to skip"
        );
        assert_eq!(p.blocks, None, "{p:?}");
        drop(held);
    }

    #[test]
    fn a_broken_guard_of_slots_lock_or_the_full_run_stops_every_take_of_its_kind() {
        let site = Site::new("{}");
        let dir = site.temp.path();
        std::fs::create_dir(dir.join(".slots.lock.flock")).expect("a directory");
        std::fs::write(dir.join(".full-run.lock.flock"), b"x").expect("a non-empty guard");
        let snapshot = site.snapshot();
        let p = problem(&snapshot, ".slots.lock.flock");
        assert_eq!(
            p.what,
            "a directory sits where the guard of slots.lock belongs: no process can take \
             slots.lock, so every take of agent and test-run slots fails",
            "slots.lock"
        );
        assert_eq!(p.blocks, Some("agent and test-run slots"), "{p:?}");
        let p = problem(&snapshot, ".full-run.lock.flock");
        assert_eq!(
            p.what,
            "the guard of full-run.lock holds 1 bytes: no process can take full-run.lock, so \
             every take of the full run fails",
            "full-run.lock"
        );
        assert_eq!(p.blocks, Some("the full run"), "{p:?}");
        for kind in [Kind::Agent, Kind::FullRun] {
            let got = gate::quietly(|| site.pool.try_take(kind, &Request::new("t")));
            assert!(
                got.is_err(),
                "{}: a take fails, naming the file: {got:?}",
                kind.label()
            );
        }
    }

    #[test]
    fn exhausted_epochs_are_named_with_what_they_stop() {
        let site = Site::new("{}");
        let max = u64::MAX;
        for marker in [
            format!("agent-0.lock.epoch.{max}"),
            format!("slots.lock.epoch.{max}"),
            format!("full-run.lock.epoch.{max}"),
            "agent-1.lock.epoch.5".to_owned(),
        ] {
            std::fs::write(site.temp.path().join(marker), b"").expect("plant");
        }
        let snapshot = site.snapshot();
        let agent = format!("agent-0.lock.epoch.{max}");
        let slots = format!("slots.lock.epoch.{max}");
        let full = format!("full-run.lock.epoch.{max}");
        let mut expected = vec![&agent[..], &full[..], &slots[..]];
        expected.sort_unstable();
        assert_eq!(
            names(&snapshot),
            expected,
            "every exhausted epoch, and not one that can still grow"
        );
        let p = problem(&snapshot, &agent);
        assert_eq!(
            p.what,
            "the fencing epoch of agent-0.lock is at its largest value, so agent-0.lock can \
             never be taken again (takes skip it)",
            "an index"
        );
        assert_eq!(
            p.fix,
            format!(
                "in a quiescent window, only if nothing fences on agent-0.lock's epoch: rm -- {} \
                 (its epochs start over at 1)",
                quoted(&snapshot, &agent)
            ),
            "its fix"
        );
        assert_eq!(p.blocks, None, "takes skip an index");
        let p = problem(&snapshot, &slots);
        assert_eq!(
            p.what,
            "the fencing epoch of slots.lock is at its largest value, so slots.lock can never \
             be taken again",
            "slots.lock"
        );
        assert_eq!(p.blocks, Some("agent and test-run slots"), "{p:?}");
        assert_eq!(
            problem(&snapshot, &full).blocks,
            Some("the full run"),
            "full-run.lock"
        );
    }

    #[test]
    fn files_named_like_claims_that_are_no_claims_are_named() {
        let site = Site::new("{}");
        let dir = site.temp.path();
        std::fs::write(dir.join("slots.lock.0123456789abcdef.claim"), b"garbage\n")
            .expect("a garbage claim");
        std::fs::create_dir(dir.join("agent-1.lock.0123456789abcdef.claim"))
            .expect("a directory named like a claim");
        // A claim as a taker writes it (a lock record), and a name that is no claim name.
        site.write_record("agent-0.lock.0123456789abcdef.claim", &dead_record());
        std::fs::write(dir.join("agent-2.lock.0123456789abcde.claim"), b"garbage")
            .expect("no claim name");
        let snapshot = site.snapshot();
        assert_eq!(
            names(&snapshot),
            [
                "agent-1.lock.0123456789abcdef.claim",
                "slots.lock.0123456789abcdef.claim",
            ],
            "{:#?}",
            snapshot.problems
        );
        let p = problem(&snapshot, "slots.lock.0123456789abcdef.claim");
        assert_eq!(
            p.what,
            "a takeover claim of slots.lock that is not a lock record (garbage); the next take \
             of slots.lock clears it",
            "garbage"
        );
        assert_eq!(
            p.fix,
            format!(
                "rm -r -- {}",
                quoted(&snapshot, "slots.lock.0123456789abcdef.claim")
            ),
            "its fix"
        );
        assert_eq!(p.blocks, None, "{p:?}");
        let p = problem(&snapshot, "agent-1.lock.0123456789abcdef.claim");
        assert!(
            p.what
                .starts_with("named like a takeover claim of agent-1.lock but no claim ("),
            "a directory: {p:?}"
        );
    }

    #[test]
    fn temp_files_are_named_from_a_minute_old() {
        let site = Site::new("{}");
        let dir = site.temp.path();
        let born: u64 = 1_796_012_839;
        let temp = ".agent-0.lock.tmp-0123456789abcdef";
        let alias = ".agent-0.lock.flock.tmp-0123456789abcdec";
        let other = ".notes";
        for name in [temp, alias, other] {
            std::fs::write(dir.join(name), b"").expect("plant");
            set_mtime(&dir.join(name), born);
        }
        let at = |now_ms: u64| {
            let pool = site
                .pool
                .clone()
                .with_clock(Arc::new(ManualClock::at(now_ms)));
            gate::quietly(|| pool.snapshot()).expect("snapshot")
        };
        let young = at(born * 1000 + 59_999);
        assert!(
            young.problems.is_empty(),
            "a temp file under a minute old may be a writer at work: {:#?}",
            young.problems
        );
        let old = at(born * 1000 + 60_000);
        assert_eq!(
            names(&old),
            [alias, temp],
            "a temp file and a guard temp alias a minute old, and no other hidden file"
        );
        let p = problem(&old, temp);
        assert_eq!(
            p.what,
            "a temp file left by a killed writer, over a minute old; the next agent or test-run \
             take removes it unless a writer still holds it",
            "what it is"
        );
        assert_eq!(p.fix, format!("rm -- {}", quoted(&old, temp)), "its fix");
        assert_eq!(p.blocks, None, "{p:?}");
    }
}

mod line {
    //! The waiting line in one process: places held by this test stand for live waiters, an
    //! entry file nobody holds for a dead one.
    use super::*;
    use worklane_admission::line::{Entry, Place};

    /// Every file of the line in the directory: entries, their epoch files, their guards.
    fn line_files(site: &Site) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(site.temp.path())
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("line-") || n.starts_with(".line-"))
            .collect();
        names.sort();
        names
    }

    fn join(site: &Site, priority: i64, start_ms: u64) -> Place {
        gate::quietly(|| {
            site.pool
                .join_line_at(Kind::Agent, priority, start_ms, &Request::new("waiter"))
        })
        .expect("join")
    }

    /// The entry a waiter killed while it waited leaves: a record nobody's guard protects.
    fn dead_entry(site: &Site, priority: i64, start_ms: u64) -> String {
        let name = format!("line-agent.{priority}.{start_ms}.00000000000000dd");
        let record = Record {
            owner: Some("killed".into()),
            ..Record::default()
        };
        site.write_record(&name, &record);
        name
    }

    fn standing(site: &Site, priority: i64, start_ms: u64, own: Option<&Entry>) -> (u32, u32) {
        let s = gate::quietly(|| site.pool.standing(Kind::Agent, priority, start_ms, own))
            .expect("standing");
        (s.ahead, s.in_line)
    }

    #[test]
    fn leaving_while_a_reader_probes_the_entry_still_removes_every_file() {
        // Held throughout: no child of another test may inherit a guard.
        let _quiet = gate::quiet();
        let site = Site::new(r#"{"max_agents": 1}"#);
        // A reader probing the entry's guard half of the time (`worklane slots`, stop-all):
        // each leave meets it about every other look, and must still retire the entry.
        for round in 0..6 {
            let place = join(&site, 0, 100 + round);
            let guard = site
                .temp
                .path()
                .join(format!(".{}.flock", place.entry().name()));
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let probing = std::sync::Arc::clone(&stop);
            #[allow(
                clippy::disallowed_methods,
                reason = "the test plays a reader outside the crates: a bare flock on the guard"
            )]
            let reader = std::thread::spawn(move || {
                while !probing.load(std::sync::atomic::Ordering::SeqCst) {
                    if let Ok(file) = std::fs::File::open(&guard)
                        && rustix::fs::flock(
                            &file,
                            rustix::fs::FlockOperation::NonBlockingLockExclusive,
                        )
                        .is_ok()
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            place.leave().expect("leave");
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            reader.join().expect("the reader");
            assert!(
                line_files(&site).is_empty(),
                "round {round}: {:?}",
                line_files(&site)
            );
        }
    }

    #[test]
    fn places_stand_in_order_and_leaving_removes_every_file() {
        // Held throughout: no child of another test may inherit a place's guard.
        let _quiet = gate::quiet();
        let site = Site::new(r#"{"max_agents": 1}"#);
        let first = join(&site, 0, 100);
        let second = join(&site, 0, 200);
        let urgent = join(&site, 5, 300);
        assert_eq!(
            standing(&site, 5, 300, Some(urgent.entry())),
            (0, 3),
            "the head"
        );
        assert_eq!(standing(&site, 0, 100, Some(first.entry())), (1, 3));
        assert_eq!(standing(&site, 0, 200, Some(second.entry())), (2, 3));
        assert_eq!(
            standing(&site, 0, 150, None),
            (2, 3),
            "a newcomer between them"
        );
        assert_eq!(
            standing(&site, 9, 999, None),
            (0, 3),
            "a higher priority passes all"
        );
        assert_eq!(
            standing(&site, -1, 0, None),
            (3, 3),
            "a lower one waits for all"
        );
        let line = gate::quietly(|| site.pool.line(Kind::Agent)).expect("line");
        assert_eq!(
            line.iter()
                .map(|e| (e.priority, e.start_ms))
                .collect::<Vec<_>>(),
            [(5, 300), (0, 100), (0, 200)]
        );
        assert!(
            gate::quietly(|| site.pool.line(Kind::Test { limit_ms: None }))
                .expect("line")
                .is_empty(),
            "each kind has its own line"
        );
        let views = gate::quietly(|| site.pool.line_views()).expect("views");
        assert_eq!(views.len(), 3);
        assert!(
            views.iter().all(|v| v.live && v.record.is_some()),
            "{views:?}"
        );
        gate::quietly(|| urgent.leave()).expect("leave");
        assert_eq!(
            standing(&site, 0, 100, Some(first.entry())),
            (0, 2),
            "next in line"
        );
        gate::quietly(|| {
            drop(first);
            drop(second);
        });
        assert_eq!(
            line_files(&site),
            Vec::<String>::new(),
            "nothing left behind"
        );
    }

    #[test]
    fn a_dead_waiters_entry_is_skipped_and_retired() {
        // Held throughout: no child of another test may inherit a place's guard.
        let _quiet = gate::quiet();
        let site = Site::new(r#"{"max_agents": 1}"#);
        dead_entry(&site, 0, 100);
        assert_eq!(
            standing(&site, 0, 50, None),
            (0, 1),
            "an entry after the place is not before it"
        );
        assert_eq!(
            standing(&site, 0, 300, None),
            (0, 0),
            "a dead entry alone: the head, and the dead one retired"
        );
        let dead = dead_entry(&site, 0, 100);
        let live = join(&site, 0, 200);
        let views = gate::quietly(|| site.pool.line_views()).expect("views");
        let dead_view = views
            .iter()
            .find(|v| v.entry.name() == dead)
            .expect("listed");
        assert!(!dead_view.live, "shown as dead, not removed by a view");
        assert!(
            site.temp.path().join(&dead).exists(),
            "a view never removes"
        );
        assert_eq!(standing(&site, 0, 300, None), (1, 1), "the live one only");
        assert!(
            !site.temp.path().join(&dead).exists(),
            "retired by the look"
        );
        let line = gate::quietly(|| site.pool.line(Kind::Agent)).expect("line");
        assert_eq!(line.len(), 1);
        gate::quietly(|| live.leave()).expect("leave");
        assert_eq!(line_files(&site), Vec::<String>::new());
    }

    #[test]
    fn a_take_that_does_not_wait_takes_its_turn() {
        // Held throughout: no child of another test may inherit a place's guard.
        let _quiet = gate::quiet();
        let site = Site::new(r#"{"max_agents": 2}"#);
        let waiting = join(&site, 0, 100);
        let take = |priority: i64, start: u64| {
            gate::quietly(|| {
                site.pool
                    .try_take_at(Kind::Agent, &Request::new("t"), priority, start)
            })
            .expect("take")
        };
        match take(0, 200) {
            Take::Blocked(Blocker::InLine { ahead, held, cap }) => {
                assert_eq!((ahead, held, cap), (1, 0, 2), "one before it, 0 of 2 held");
            }
            other => panic!("refused while a waiter stands before it: {other:?}"),
        }
        assert!(
            matches!(
                gate::quietly(|| site.pool.try_take(Kind::Agent, &Request::new("t"))),
                Ok(Take::Blocked(Blocker::InLine { .. }))
            ),
            "try_take is priority 0, now"
        );
        let Take::Held(slot) = take(1, 999) else {
            panic!("a higher priority goes before the waiter");
        };
        let Take::Held(older) = take(0, 50) else {
            panic!("an earlier start too (a dispatcher row older than the waiter)");
        };
        // The holder of a place is not blocked by its own entry.
        let Take::Blocked(Blocker::AtCap { .. }) = gate::quietly(|| {
            site.pool
                .try_take_as(Kind::Agent, &Request::new("t"), waiting.entry())
        })
        .expect("take") else {
            panic!("at its turn, only the cap stops it");
        };
        gate::quietly(|| {
            drop(slot);
            drop(older);
            drop(waiting);
        });
        assert!(matches!(take(0, 200), Take::Held(_)), "the line is empty");
    }

    #[test]
    fn the_full_runs_line_is_its_own() {
        // Held throughout: no child of another test may inherit a place's guard.
        let _quiet = gate::quiet();
        let site = Site::new(r#"{"max_agents": 1}"#);
        let waiting = gate::quietly(|| {
            site.pool
                .join_line_at(Kind::FullRun, 0, 100, &Request::new("full run"))
        })
        .expect("join");
        let take = |kind| {
            gate::quietly(|| site.pool.try_take_at(kind, &Request::new("t"), 0, 200)).expect("take")
        };
        match take(Kind::FullRun) {
            Take::Blocked(Blocker::InLine { ahead, held, cap }) => {
                assert_eq!(
                    (ahead, held, cap),
                    (1, 0, 1),
                    "one before it, none held of 1"
                );
            }
            other => panic!("behind the waiting full run: {other:?}"),
        }
        let Take::Held(agent) = take(Kind::Agent) else {
            panic!("an agent does not wait for the full run's line");
        };
        gate::quietly(|| {
            drop(agent);
            drop(waiting);
        });
        assert!(
            matches!(take(Kind::FullRun), Take::Held(_)),
            "its line is empty now"
        );
    }

    #[test]
    fn a_waiting_take_goes_when_the_place_before_it_leaves() {
        // Held throughout: no child of another test may inherit a place's guard.
        let _quiet = gate::quiet();
        let site = Site::new(r#"{"max_agents": 1}"#);
        let before = join(&site, 0, 1);
        let pool = site.pool.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let got = pool.take(
                Kind::Agent,
                &Request::new("waiter"),
                Wait {
                    timeout: Some(Duration::from_secs(60)),
                    priority: 0,
                    on_wait: &mut |w| {
                        seen.push((w.position, w.in_line, w.blocker.clone()));
                        let _ = tx.send(());
                    },
                },
            );
            (got, seen)
        });
        rx.recv().expect("the waiter looked");
        gate::quietly(|| before.leave()).expect("leave");
        let (got, seen) = waiter.join().expect("waiter");
        let Take::Held(slot) = got.expect("take") else {
            panic!("held once the place before it left");
        };
        let (position, in_line, blocker) = seen.first().cloned().expect("it waited");
        assert_eq!((position, in_line), (2, 2), "second of two");
        assert!(
            matches!(blocker, Blocker::InLine { ahead: 1, .. }),
            "{blocker:?}"
        );
        gate::quietly(|| drop(slot));
        assert_eq!(line_files(&site), Vec::<String>::new(), "it left the line");
    }

    #[test]
    fn a_waiting_take_that_times_out_leaves_the_line() {
        // Held throughout: no child of another test may inherit a place's guard.
        let _quiet = gate::quiet();
        let site = Site::new(r#"{"max_agents": 1}"#);
        let before = join(&site, 0, 1);
        let got = gate::quietly(|| {
            site.pool.take(
                Kind::Agent,
                &Request::new("impatient"),
                Wait {
                    timeout: Some(Duration::from_millis(50)),
                    priority: 0,
                    on_wait: &mut |_| {},
                },
            )
        })
        .expect("take");
        assert!(
            matches!(got, Take::Blocked(Blocker::InLine { .. })),
            "{got:?}"
        );
        let names = line_files(&site);
        assert_eq!(
            names
                .iter()
                .filter(|n| !n.starts_with('.') && !n.contains(".epoch."))
                .count(),
            1,
            "only the place before it stands: {names:?}"
        );
        gate::quietly(|| drop(before));
    }
}

mod sweep {
    //! Temp files killed writers leave are removed by ordinary takes.
    use super::*;

    #[test]
    fn a_take_removes_old_temp_files_nobody_holds_and_keeps_the_rest() {
        let site = Site::new("{}");
        let dir = site.temp.path();
        let old_temp = dir.join(".agent-0.lock.tmp-0123456789abcdef");
        let young_temp = dir.join(".slots.lock.tmp-0123456789abcdee");
        let held_temp = dir.join(".STOP.tmp-0123456789abcded");
        let old_alias = dir.join(".agent-0.lock.flock.tmp-0123456789abcdec");
        for path in [&old_temp, &young_temp, &held_temp, &old_alias] {
            std::fs::write(path, b"").expect("plant");
        }
        for path in [&old_temp, &held_temp, &old_alias] {
            age(path, 120);
        }
        // A writer stopped mid-write still holds its temp file's lock.
        let writer = std::fs::File::open(&held_temp).expect("open");
        writer.try_lock().expect("lock the held temp file");
        let slot = site.take(Kind::Agent);
        assert!(
            !old_temp.exists(),
            "an old temp file nobody holds is removed"
        );
        assert!(!old_alias.exists(), "an old guard temp alias is removed");
        assert!(
            young_temp.exists(),
            "a young temp file may be a writer at work"
        );
        assert!(
            held_temp.exists(),
            "a held temp file belongs to a live writer"
        );
        drop(slot);
        drop(writer);
    }

    #[test]
    fn one_pool_sweeps_at_most_once_per_interval_of_its_clock() {
        use worklane_admission::SWEEP_EVERY_MS;
        assert_eq!(
            SWEEP_EVERY_MS, 10_000,
            "a sixth of the temp files' minimum age"
        );
        let site = Site::new(r#"{"max_agents": 4}"#);
        let dir = site.temp.path();
        let now_ms = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after the epoch")
                .as_millis(),
        )
        .expect("ms");
        let clock = ManualClock::at(now_ms);
        let pool = site.pool.clone().with_clock(Arc::new(clock.clone()));
        let take =
            |pool: &Pool| match gate::quietly(|| pool.try_take(Kind::Agent, &Request::new("t")))
                .expect("take")
            {
                Take::Held(slot) => QuietDrop::new(slot),
                Take::Blocked(b) => panic!("free: {b}"),
            };
        let plant = |name: &str| {
            let path = dir.join(name);
            std::fs::write(&path, b"").expect("plant");
            age(&path, 120);
            path
        };
        let first = plant(".agent-0.lock.tmp-0123456789abcdef");
        let a = take(&pool);
        assert!(!first.exists(), "a pool's first take sweeps");
        let second = plant(".agent-1.lock.tmp-0123456789abcdee");
        clock.advance(SWEEP_EVERY_MS - 1);
        let b = take(&pool);
        assert!(
            second.exists(),
            "within the interval the take does not list for temps"
        );
        clock.advance(1);
        let c = take(&pool);
        assert!(!second.exists(), "at the interval it sweeps again");
        let third = plant(".agent-2.lock.tmp-0123456789abcded");
        clock.set(now_ms - 1);
        let d = take(&pool);
        assert!(!third.exists(), "a clock that went back sweeps at once");
        drop((a, b, c, d));
    }
}

mod commands {
    //! `Pool::recorded_commands`: what STOP's enforcement reads from the records.
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::MetadataExt;
    use worklane_admission::RecordedCommand;

    fn naming(command: serde_json::Value) -> Record {
        let mut record = Record {
            owner: Some("supervisor".into()),
            ..Record::default()
        };
        record.extra.insert("commandProcess".into(), command);
        record
    }

    #[test]
    fn records_naming_a_command_are_listed_with_their_writer_and_guard() {
        let site = Site::new("{}");
        let dir = site.temp.path();
        let mut slot = site.take(Kind::Agent);
        let mut fields = serde_json::Map::new();
        fields.insert(
            "commandProcess".into(),
            json!({"pid": 4242, "start": 99, "group": true}),
        );
        slot.annotate(fields).expect("annotate");
        site.write_record(
            "role-build.lease",
            &naming(json!({"pid": 77, "group": false})),
        );
        site.write_record("agent-1.lock", &naming(json!({"pid": 5, "group": "yes"})));
        std::fs::hard_link(dir.join("agent-1.lock"), dir.join("agent-1.lock.bak"))
            .expect("a second name");
        site.write_record("test-0.lock", &naming(json!({"pid": 0, "group": true})));
        site.write_record("test-1.lock", &naming(json!({"pid": 4_294_967_296_u64})));
        site.write_record("test-2.lock", &naming(json!({"group": true})));
        site.write_record("agent-2.lock", &dead_record());
        site.write_record("notes.json", &naming(json!({"pid": 6})));
        std::fs::write(dir.join("agent-3.lock"), b"{").expect("a malformed record");
        set_mode(&dir.join("role-build.lease"), 0o666);

        let found = site.pool.recorded_commands().expect("recorded commands");
        let by_name: std::collections::BTreeMap<&str, &RecordedCommand> =
            found.iter().map(|c| (&c.resource[..], c)).collect();
        assert_eq!(
            by_name.keys().copied().collect::<Vec<_>>(),
            ["agent-0.lock", "agent-1.lock", "role-build.lease"],
            "only lock and lease records that name a command with a real pid: {found:#?}"
        );

        let me = std::fs::metadata(dir.join("agent-0.lock"))
            .expect("stat")
            .uid();
        let guard = std::fs::metadata(dir.join(".agent-0.lock.flock")).expect("the guard");
        let ours = by_name["agent-0.lock"];
        assert_eq!(
            (ours.pid, ours.start, ours.group),
            (4242, Some(99), true),
            "the annotated command"
        );
        assert_eq!(
            ours.record.owner.as_deref(),
            Some("test"),
            "with the supervisor's record"
        );
        assert_eq!(
            ours.guard,
            Some(worklane_guard::FileId {
                dev: guard.dev(),
                ino: guard.ino(),
            }),
            "the guard whose holders are the run's processes"
        );
        assert_eq!(
            (ours.writer.uid, ours.writer.mode, ours.writer.links),
            (me, RECORD_MODE, 1),
            "written by its owner alone"
        );
        assert!(ours.writer.only_by_owner(), "{:?}", ours.writer);

        let linked = by_name["agent-1.lock"];
        assert_eq!(
            (linked.pid, linked.start, linked.group),
            (5, None, false),
            "a group that is not `true` is no group"
        );
        assert_eq!(linked.writer.links, 2, "a record with two names");
        assert_eq!(linked.guard, None, "no guard file: never taken");

        let lease = by_name["role-build.lease"];
        assert_eq!(
            (lease.pid, lease.group),
            (77, false),
            "a role lease's command"
        );
        assert_eq!(lease.writer.mode, 0o666, "writable by anyone");
        assert!(!lease.writer.only_by_owner(), "{:?}", lease.writer);
        assert_eq!(
            lease.guard, None,
            "a TTL lease's guard is held by nobody's run"
        );
        drop(slot);
    }
}

mod kinds {
    //! `Pool::snapshot` shows every lock and lease file with its kind.
    use super::*;

    #[test]
    fn every_lock_and_lease_file_is_shown_with_its_kind() {
        let site = Site::new("{}");
        let run = site.take(Kind::FullRun);
        for name in [
            "role-build.lease",
            "cache.lease",
            "role-x.lock",
            "other.lock",
            "notes.json",
        ] {
            site.write_record(name, &dead_record());
        }
        let snapshot = site.snapshot();
        let kinds: Vec<(&str, &str)> = snapshot
            .slots
            .iter()
            .map(|s| (&s.name[..], s.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("cache.lease", "lease"),
                ("full-run.lock", "full-run"),
                ("other.lock", "lock"),
                ("role-build.lease", "role"),
                ("role-x.lock", "lock"),
            ],
            "config.json and notes.json are not locks"
        );
        drop(run);
    }

    #[test]
    fn a_slot_whose_guard_is_broken_is_shown_without_a_record() {
        let site = Site::new("{}");
        site.write_record("agent-0.lock", &dead_record());
        std::fs::write(site.temp.path().join(".agent-0.lock.flock"), b"x").expect("plant");
        let snapshot = site.snapshot();
        let slot = &snapshot.slots[0];
        assert!(
            matches!(&slot.state, SlotState::Live(LiveWhy::Other(why)) if why.contains("guard")),
            "{slot:?}"
        );
        assert_eq!(
            slot.record, None,
            "no record is shown that the state was not judged from (nothing guarded its read)"
        );
    }
}

mod drains {
    //! The drain flag: how far ahead it holds, where it lives, and undrain.
    use super::*;
    use worklane_admission::MAX_DRAIN_AHEAD_MS;
    use worklane_admission::drain::Ignored;

    const NOW: u64 = 1_796_012_839_000;
    const HOUR: u64 = 3_600_000;

    fn drain_until(pool: &Pool, until: u64) {
        pool.write_drain(&Drain {
            since: rfc3339_ms(NOW),
            until: rfc3339_ms(until),
            to: None,
        })
        .expect("write drain");
    }

    #[test]
    fn a_drain_holds_for_at_most_four_hours_ahead() {
        assert_eq!(MAX_DRAIN_AHEAD_MS, 4 * HOUR, "the documented limit");
        let site = Site::new("{}");
        let pool = site.pool.clone().with_clock(Arc::new(ManualClock::at(NOW)));
        for (until, in_force) in [(NOW + 3 * HOUR, true), (NOW + 4 * HOUR, true)] {
            drain_until(&pool, until);
            assert_eq!(
                matches!(pool.drain().expect("drain"), DrainState::InForce(_)),
                in_force,
                "{} h ahead",
                (until - NOW) / HOUR
            );
        }
        drain_until(&pool, NOW + 4 * HOUR + 1);
        assert!(
            matches!(
                pool.drain().expect("drain"),
                DrainState::Ignored(Ignored::TooFarAhead { .. })
            ),
            "more than 4 h ahead is a mistake, not a drain"
        );
    }

    #[test]
    fn undrain_says_whether_there_was_a_flag() {
        let site = Site::new("{}");
        assert!(
            !site.pool.remove_drain().expect("remove"),
            "no flag to remove"
        );
        drain_until(&site.pool, NOW + HOUR);
        assert!(site.pool.remove_drain().expect("remove"), "a flag removed");
        assert!(!site.pool.remove_drain().expect("remove"), "and it is gone");
    }

    #[test]
    fn with_the_system_layout_the_flag_lives_in_the_state_directory() {
        let temp = tempfile::tempdir().expect("temp dir");
        let state = temp.path().join(worklane_slotfile::SYSTEM_STATE_DIR);
        let slots = temp.path().join(worklane_slotfile::SYSTEM_SLOTS_DIR);
        std::fs::create_dir_all(&slots).expect("the system slot directory");
        let env = Environment::with_root(temp.path());
        let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"))
            .with_clock(Arc::new(ManualClock::at(NOW)));
        assert_ne!(
            pool.locations().drain_dir,
            pool.locations().slot_dir,
            "the system layout keeps the flag apart"
        );
        drain_until(&pool, NOW + HOUR);
        assert!(
            state.join("update-drain.json").exists(),
            "the flag is in {}",
            state.display()
        );
        assert!(
            !slots.join("update-drain.json").exists(),
            "not in the slot directory"
        );
        assert!(
            matches!(pool.drain().expect("drain"), DrainState::InForce(_)),
            "and read from there"
        );
        assert!(pool.remove_drain().expect("undrain"), "removed from there");
        assert!(!state.join("update-drain.json").exists(), "gone");
    }
}

mod retries {
    //! A busy guard is tried again before a take gives up on it: `slots.lock` while another
    //! counter finishes, a slot's guard while a probe looks at it. Each try opens the guard,
    //! so the tries are counted with inotify (counts of attempts, never durations).
    use super::*;
    use rustix::fs::inotify;
    use std::mem::MaybeUninit;
    use std::os::fd::OwnedFd;

    /// Watches the opens in `dir`, and the closes that separate them (the kernel merges an
    /// event into an identical one still unread, so opens alone would count as one).
    fn watch(dir: &std::path::Path) -> OwnedFd {
        let watch = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .expect("inotify");
        inotify::add_watch(
            &watch,
            dir,
            inotify::WatchFlags::OPEN | inotify::WatchFlags::CLOSE_NOWRITE,
        )
        .expect("watch the directory");
        watch
    }

    /// How many times `name` was opened since the last call (every event already queued).
    fn opens(watch: &OwnedFd, name: &str) -> usize {
        let mut buf = [MaybeUninit::uninit(); 4096];
        let mut events = inotify::Reader::new(watch, &mut buf);
        let mut count = 0;
        loop {
            match events.next() {
                Ok(event) => {
                    assert!(
                        !event.events().contains(inotify::ReadFlags::QUEUE_OVERFLOW),
                        "the inotify queue overflowed"
                    );
                    if event.events().contains(inotify::ReadFlags::OPEN)
                        && event
                            .file_name()
                            .is_some_and(|n| n.to_bytes() == name.as_bytes())
                    {
                        count += 1;
                    }
                }
                Err(rustix::io::Errno::AGAIN) => return count,
                Err(e) => panic!("read inotify events: {e}"),
            }
        }
    }

    fn hold(dir: &SlotDir, name: &str) -> QuietDrop<worklane_lease::Lease> {
        match worklane_lease::acquire(
            dir,
            name,
            &Request::new("another counter"),
            &worklane_lease::Options::process(),
        )
        .expect("acquire")
        {
            worklane_lease::Acquired::Held(lease) => QuietDrop::new(lease),
            worklane_lease::Acquired::Refused(r) => panic!("free: {r}"),
        }
    }

    #[test]
    fn a_blocking_take_tries_a_busy_slots_lock_again_before_it_reports_counting() {
        let site = Site::new("{}");
        let dir = SlotDir::open(site.temp.path()).expect("open");
        let guard = ".slots.lock.flock";
        let mut counter = Some(hold(&dir, worklane_admission::SLOTS_LOCK));
        let watch = watch(site.temp.path());
        let mut tries = None;
        let got = site
            .pool
            .take(
                Kind::Agent,
                &Request::new("waiter"),
                Wait {
                    // A watchdog only: the counter finishes at the first report.
                    timeout: Some(Duration::from_secs(600)),
                    priority: 0,
                    on_wait: &mut |waiting| {
                        let blocker = waiting.blocker;
                        // Checked here, so that a take that would wait on fails at once.
                        assert!(
                            *blocker == Blocker::Counting && tries.is_none(),
                            "one report, of the counter (tried {tries:?} times before): \
                             {blocker}"
                        );
                        tries = Some(opens(&watch, guard));
                        counter
                            .take()
                            .expect("the counter is held until the first report")
                            .end(worklane_lease::Lease::release)
                            .expect("the counter finishes");
                    },
                },
            )
            .expect("take");
        let got = match got {
            Take::Held(slot) => {
                let name = slot.name().to_owned();
                gate::quietly(|| drop(slot));
                name
            }
            Take::Blocked(b) => panic!("the take must get its slot once the counter is done: {b}"),
        };
        assert_eq!(got, "agent-0.lock", "the take got its slot");
        let tries = tries.expect("the busy counter was reported");
        assert!(
            tries > 1,
            "slots.lock is tried again inside the deadline before the take reports it busy \
             (tried {tries} times)"
        );
    }

    #[test]
    fn a_guard_held_without_a_record_is_tried_again_before_a_refusal() {
        let site = Site::new("{}");
        // A guard held with no record: a reader's probe, a leftover of a run.
        let left = leave_running(site.take(Kind::FullRun));
        let watch = watch(site.temp.path());
        let blocker = site.blocked(Kind::FullRun);
        assert!(
            matches!(&blocker, Blocker::FullRunHeld(r) if r.why == LiveWhy::GuardHeld && r.holder.is_none()),
            "{blocker:?}"
        );
        let tries = opens(&watch, ".full-run.lock.flock");
        assert!(
            tries > 1,
            "a guard held with no record may be a momentary probe: it is tried again before \
             the take is refused (tried {tries} times)"
        );
        drop(left);
    }

    #[test]
    fn a_holder_with_a_record_is_refused_at_the_first_try() {
        let site = Site::new("{}");
        let run = site.take(Kind::FullRun);
        let watch = watch(site.temp.path());
        let blocker = site.blocked(Kind::FullRun);
        assert!(
            matches!(&blocker, Blocker::FullRunHeld(r) if r.why == LiveWhy::GuardHeld && r.holder.is_some()),
            "{blocker:?}"
        );
        assert_eq!(
            opens(&watch, ".full-run.lock.flock"),
            1,
            "a holder that wrote its record is no probe: refused without trying again"
        );
        drop(run);
    }
}

mod other_user {
    //! As root, the test re-runs its own binary as user 65534 (nobody) under `setpriv`, with a
    //! slot directory of nobody's that holds a guard only root can open. In that run the same
    //! test is the subject: it takes a slot and releases one it cannot check, and prints what
    //! happened; the parent checks it.
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const DIR_VAR: &str = "WORKLANE_ADMISSION_TEST_SUBJECT_DIR";
    const TEST_NAME: &str = "other_user::a_guard_this_user_cannot_open_is_skipped";
    const NOBODY: u32 = 65_534;

    #[test]
    fn a_guard_this_user_cannot_open_is_skipped() {
        if let Some(dir) = std::env::var_os(DIR_VAR) {
            subject(std::path::Path::new(&dir));
            return;
        }
        assert!(
            rustix::process::geteuid().is_root(),
            "this test runs the subject as user {NOBODY} with setpriv and must start as root"
        );
        let temp = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod temp dir");
        let slots = temp.path().join("slots");
        std::fs::create_dir(&slots).expect("the slot directory");
        std::os::unix::fs::chown(&slots, Some(NOBODY), Some(NOBODY)).expect("chown");
        std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        // Root's guard of agent-0.lock, which only root can open.
        let guard = slots.join(".agent-0.lock.flock");
        std::fs::write(&guard, b"").expect("plant");
        std::fs::set_permissions(&guard, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        // Our own binary may sit under directories user 65534 cannot enter: run a copy.
        let exe = temp.path().join("admission-subject");
        // Copied with the gate quiet: a child started meanwhile would hold the descriptor the
        // copy is written through, and exec of a file open for writing fails (ETXTBSY).
        gate::quietly(|| std::fs::copy(std::env::current_exe().expect("the test binary"), &exe))
            .expect("copy the test binary");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let output = Command::new("setpriv")
            .args([
                format!("--reuid={NOBODY}"),
                format!("--regid={NOBODY}"),
                "--clear-groups".into(),
            ])
            .arg("--")
            .arg(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(DIR_VAR, &slots)
            .output_gated()
            .expect("run setpriv");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let report = format!(
            "subject status {}\nstdout:\n{stdout}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "the subject must pass\n{report}");
        assert!(
            stdout.contains(&format!("SUBJECT euid={NOBODY}\n")),
            "the subject runs as nobody\n{report}"
        );
        assert!(
            stdout.contains("SUBJECT took agent-1.lock\n"),
            "a guard this user cannot open is skipped like any stray\n{report}"
        );
        assert!(
            stdout.contains("SUBJECT release failed\n"),
            "a release that cannot read its record says so\n{report}"
        );
    }

    /// Run as user 65534: takes a slot, then releases it with its record unreadable, and
    /// reports each step on stdout.
    fn subject(dir: &std::path::Path) {
        use std::io::Write;
        let report = |line: &str| {
            writeln!(std::io::stdout(), "SUBJECT {line}").expect("write to stdout");
        };
        report(&format!("euid={}", rustix::process::geteuid().as_raw()));
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", dir);
        let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
        let slot = match pool.try_take(Kind::Agent, &Request::new("nobody")) {
            Ok(Take::Held(slot)) => slot,
            other => panic!("SUBJECT took nothing: {other:?}"),
        };
        report(&format!("took {}", slot.name()));
        // A record its releaser cannot read back cannot be checked before it is removed.
        std::fs::set_permissions(
            dir.join(slot.name()),
            std::fs::Permissions::from_mode(0o000),
        )
        .expect("chmod the record");
        match slot.release() {
            Ok(()) => report("release succeeded"),
            Err(e) => report(&format!("release failed\n{e}")),
        }
    }
}

mod weights;

mod journal {
    //! Each event the pool journals, from the real operation: exactly one
    //! line of its kind, with its documented fields.
    use super::*;
    use worklane_journal::{Entry, Event};

    fn all(dir: &SlotDir) -> Vec<Entry> {
        let batch = worklane_journal::read(dir).expect("read the journal");
        assert_eq!(batch.skipped, 0, "nothing torn");
        batch.entries
    }

    /// The one event of `kind` in the journal of `dir`.
    fn one(dir: &SlotDir, kind: &str) -> Event {
        let found: Vec<Entry> = all(dir)
            .into_iter()
            .filter(|e| e.event.kind() == kind)
            .collect();
        assert_eq!(found.len(), 1, "one {kind}: {found:?}");
        let entry = found.into_iter().next().expect("one");
        assert_eq!(entry.pid, std::process::id(), "written by this process");
        entry.event
    }

    fn count(dir: &SlotDir, kind: &str) -> usize {
        all(dir).iter().filter(|e| e.event.kind() == kind).count()
    }

    fn stop() -> Stop {
        Stop {
            by: "alice@build1".into(),
            at: rfc3339_ms(1_800_000_000_000),
            reason: "maintenance".into(),
        }
    }

    #[test]
    fn a_slot_taken_and_released_is_said_once_each() {
        let site = Site::new(r#"{"max_agents": 2}"#);
        let dir = site.pool.dir().clone();
        let slot = site.take(Kind::Agent);
        let Event::SlotTaken {
            slot: name,
            slot_kind,
            owner,
            epoch,
            waited_ms,
        } = one(&dir, "slot-taken")
        else {
            panic!("slot-taken");
        };
        assert_eq!(
            (
                name.as_str(),
                slot_kind.as_str(),
                owner.as_str(),
                epoch,
                waited_ms
            ),
            ("agent-0.lock", "agent", "test", 1, 0)
        );
        assert_eq!(count(&dir, "slot-released"), 0, "not yet");
        slot.end(Slot::release).expect("release");
        let Event::SlotReleased {
            slot: name,
            slot_kind,
            owner,
            ..
        } = one(&dir, "slot-released")
        else {
            panic!("slot-released");
        };
        assert_eq!(
            (name.as_str(), slot_kind.as_str(), owner.as_str()),
            ("agent-0.lock", "agent", "test")
        );
        // Dropped rather than released: said all the same.
        let test = site.take(Kind::Test { limit_ms: None });
        gate::quietly(|| drop(test.end(|s| s)));
        assert_eq!(count(&dir, "slot-released"), 2, "a dropped slot too");
    }

    #[test]
    fn refusals_at_the_cap_and_by_stop_and_drain_and_the_operator_s_changes() {
        let site = Site::new(r#"{"max_agents": 1}"#);
        let dir = site.pool.dir().clone();
        let _held = site.take(Kind::Agent);
        assert_eq!(
            site.blocked(Kind::Agent),
            Blocker::AtCap { held: 1, cap: 1 }
        );
        let Event::SlotRefused {
            slot_kind,
            owner,
            blocker,
            why,
            waited_ms,
        } = one(&dir, "slot-refused")
        else {
            panic!("slot-refused");
        };
        assert_eq!(
            (
                slot_kind.as_str(),
                owner.as_str(),
                blocker.as_str(),
                waited_ms
            ),
            ("agent", "test", "at-cap", 0)
        );
        assert_eq!(why, "at cap: 1 of 1 held");

        worklane_admission::stop::write(&dir, &stop()).expect("STOP");
        assert_eq!(
            one(&dir, "stop"),
            Event::Stop {
                by: "alice@build1".into(),
                reason: "maintenance".into()
            }
        );
        assert!(matches!(site.blocked(Kind::FullRun), Blocker::Stop(_)));
        let stop_refusals: Vec<Entry> = all(&dir)
            .into_iter()
            .filter(|e| matches!(&e.event, Event::SlotRefused { blocker, .. } if blocker == "stop"))
            .collect();
        assert_eq!(stop_refusals.len(), 1, "{stop_refusals:?}");
        assert!(worklane_admission::stop::remove(&dir).expect("resume"));
        assert_eq!(
            one(&dir, "resume"),
            Event::Resume {
                by: "alice@build1".into(),
                reason: "maintenance".into()
            },
            "the STOP lifted"
        );
        assert!(!worklane_admission::stop::remove(&dir).expect("none"));
        assert_eq!(count(&dir, "resume"), 1, "nothing lifted, nothing said");

        let until = rfc3339_ms(site.pool.clock().now_ms() + 600_000);
        site.pool
            .write_drain(&Drain {
                since: rfc3339_ms(site.pool.clock().now_ms()),
                until: until.clone(),
                to: Some("1.2.3".into()),
            })
            .expect("drain");
        assert_eq!(
            one(&dir, "drain"),
            Event::Drain {
                until,
                to: Some("1.2.3".into())
            }
        );
        assert!(matches!(site.blocked(Kind::FullRun), Blocker::Drain(_)));
        assert!(site.pool.remove_drain().expect("undrain"));
        assert_eq!(one(&dir, "undrain"), Event::Undrain);
        assert!(!site.pool.remove_drain().expect("none"));
        assert_eq!(count(&dir, "undrain"), 1);
    }

    /// A waiter says its place once (it does not move), and what it waited when it takes the
    /// slot; a waiter that times out says its refusal.
    #[test]
    fn a_waiter_says_its_place_and_its_wait() {
        let site = Site::new(r#"{"max_agents": 1}"#);
        let dir = site.pool.dir().clone();
        let held = site.take(Kind::Agent);
        let pool = site.pool.clone();
        let waiter = std::thread::spawn(move || {
            let taken = pool
                .take(
                    Kind::Agent,
                    &Request::new("waiter"),
                    Wait {
                        timeout: None,
                        priority: 0,
                        on_wait: &mut |_| {},
                    },
                )
                .expect("take");
            match taken {
                Take::Held(slot) => gate::quietly(|| drop(slot)),
                Take::Blocked(b) => panic!("it waits for ever: {b}"),
            }
        });
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while count(&dir, "slot-waiting") == 0 {
            assert!(
                std::time::Instant::now() < give_up,
                "the waiter says its place"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        held.end(Slot::release).expect("release");
        waiter.join().expect("waiter");
        let Event::SlotWaiting {
            slot_kind,
            owner,
            position,
            in_line,
            why,
        } = one(&dir, "slot-waiting")
        else {
            panic!("slot-waiting");
        };
        assert_eq!(
            (slot_kind.as_str(), owner.as_str(), position, in_line),
            ("agent", "waiter", 1, 1)
        );
        assert!(why.starts_with("at cap"), "{why}");
        let waited: Vec<u64> = all(&dir)
            .iter()
            .filter_map(|e| match &e.event {
                Event::SlotTaken {
                    owner, waited_ms, ..
                } if owner == "waiter" => Some(*waited_ms),
                _ => None,
            })
            .collect();
        assert_eq!(waited.len(), 1, "taken once: {waited:?}");
        assert!(waited[0] > 0, "after a wait: {waited:?}");

        // Timed out: its refusal, with the time waited.
        let _again = site.take(Kind::Agent);
        let taken = gate::quietly(|| {
            site.pool.take(
                Kind::Agent,
                &Request::new("impatient"),
                Wait {
                    timeout: Some(Duration::from_millis(100)),
                    priority: 0,
                    on_wait: &mut |_| {},
                },
            )
        })
        .expect("take");
        assert!(matches!(taken, Take::Blocked(Blocker::AtCap { .. })));
        let refused: Vec<u64> = all(&dir)
            .iter()
            .filter_map(|e| match &e.event {
                Event::SlotRefused {
                    owner, waited_ms, ..
                } if owner == "impatient" => Some(*waited_ms),
                _ => None,
            })
            .collect();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0] >= 100, "after its timeout: {refused:?}");
    }

    #[test]
    fn a_takeover_names_the_record_taken_over_and_the_proof() {
        let site = Site::new(r#"{"max_agents": 1}"#);
        let dir = site.pool.dir().clone();
        let dead = dead_record();
        let dead_pid = dead.pid().expect("a pid");
        site.write_record("agent-0.lock", &dead);
        let raw = std::fs::read(site.temp.path().join("agent-0.lock")).expect("read");
        let slot = site.take(Kind::Agent);
        assert_eq!(slot.name(), "agent-0.lock", "taken over");
        let Event::Takeover {
            resource,
            owner,
            stale_pid,
            stale_owner,
            claim,
            proof,
            ..
        } = one(&dir, "takeover")
        else {
            panic!("takeover");
        };
        assert_eq!(resource, "agent-0.lock");
        assert_eq!(owner, "test");
        assert_eq!(stale_pid, Some(dead_pid));
        assert_eq!(stale_owner.as_deref(), Some("dead"));
        assert_eq!(claim, worklane_lease::claim_name("agent-0.lock", &raw));
        assert!(!proof.is_empty(), "the proof of death: {proof}");
        gate::quietly(|| drop(slot));
    }

    #[test]
    fn a_stray_guard_is_said_once_and_a_dead_writer_s_temp_file_when_swept() {
        let site = Site::new(r#"{"max_agents": 3}"#);
        let dir = site.pool.dir().clone();
        std::fs::create_dir(site.temp.path().join(".agent-0.lock.flock")).expect("stray");
        let temp = site.temp.path().join(".agent-7.lock.tmp-0123456789abcdef");
        std::fs::write(&temp, b"{}").expect("a dead writer's temp file");
        age(&temp, 120);
        let first = site.take(Kind::Agent);
        let second = site.take(Kind::Agent);
        assert_eq!(
            (first.name(), second.name()),
            ("agent-1.lock", "agent-2.lock")
        );
        let broken: Vec<Event> = all(&dir)
            .into_iter()
            .filter(|e| e.event.kind() == "broken-file")
            .map(|e| e.event)
            .collect();
        assert_eq!(broken.len(), 2, "{broken:?}");
        let Event::BrokenFile {
            name,
            what,
            fix,
            fixed,
        } = &broken[0]
        else {
            panic!("broken-file");
        };
        assert_eq!(name, ".agent-0.lock.flock", "the stray guard, once");
        assert!(
            what.contains("agent-0.lock") && fix.starts_with("rm -r -- "),
            "{what}; {fix}"
        );
        assert!(!fixed);
        let Event::BrokenFile { name, fixed, .. } = &broken[1] else {
            panic!("broken-file");
        };
        assert_eq!(name, ".agent-7.lock.tmp-0123456789abcdef");
        assert!(fixed, "removed by the sweep");
        assert!(!temp.exists());
    }

    /// A journal every write to fails (a full disk) or that cannot be opened (a directory at
    /// its name) changes no take: the same slots, the same refusals; its events are counted.
    #[test]
    fn a_full_or_unwritable_journal_never_changes_a_take() {
        for broken in ["full", "directory"] {
            let site = Site::new(r#"{"max_agents": 1}"#);
            let journal = site.pool.journal().clone();
            match broken {
                "full" => journal.sink(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open("/dev/full")
                        .expect("/dev/full")
                        .into(),
                ),
                _ => std::fs::create_dir(site.temp.path().join(worklane_journal::CURRENT))
                    .expect("mkdir"),
            }
            let slot = site.take(Kind::Agent);
            assert_eq!(slot.name(), "agent-0.lock", "{broken}: taken");
            assert_eq!(
                site.blocked(Kind::Agent),
                Blocker::AtCap { held: 1, cap: 1 },
                "{broken}: refused as ever"
            );
            slot.end(Slot::release).expect("released");
            let again = site.take(Kind::Agent);
            assert_eq!(again.name(), "agent-0.lock");
            assert_eq!(
                journal.dropped(),
                4,
                "{broken}: taken, refused, released, taken"
            );
            drop(again);
        }
    }
}
