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

mod dispatcher {
    //! The dispatcher's decisions on real files, guards, descriptors and SQLite, in one
    //! process: the launcher's hand-over is a duplicated descriptor of its held lane guard.
    use super::*;
    use std::os::fd::{AsFd, OwnedFd};
    use worklane_admission::dispatch::service::{Caller, Dispatcher, Mode, Settings, lane_lock};
    use worklane_admission::dispatch::store::{State, Store};
    use worklane_admission::dispatch::wire::{Enqueue, code};
    use worklane_lease::{Acquired, Options, Request as LeaseRequest};

    pub(super) const T0: u64 = 1_800_000_000_000;

    /// This process as a caller of the dispatcher (its peer credentials).
    pub(super) fn me() -> Caller {
        Caller {
            pid: Some(std::process::id()),
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            groups: rustix::process::getgroups()
                .expect("groups")
                .into_iter()
                .map(rustix::process::Gid::as_raw)
                .collect(),
        }
    }

    pub(super) struct Bench {
        pub(super) site: Site,
        pub(super) clock: ManualClock,
        pub(super) dispatcher: Dispatcher,
    }

    impl Bench {
        pub(super) fn new(config: &str, settings: Settings) -> Bench {
            let site = Site::new(config);
            let clock = ManualClock::at(T0);
            let pool = Pool::new(
                SlotDir::resolve_in(
                    &Environment::from_process().var("AGENT_SLOTS_DIR", site.temp.path()),
                )
                .expect("resolve"),
            )
            .with_clock(Arc::new(clock.clone()));
            let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
            let dispatcher = Dispatcher::recover(pool, store, settings).expect("dispatcher");
            Bench {
                site,
                clock,
                dispatcher,
            }
        }

        /// Takes lane `name` as a launcher would and returns a copy of its held guard's
        /// descriptor, as the dispatcher receives it; the launcher's own copy is closed.
        pub(super) fn launch(&self, name: &str) -> OwnedFd {
            let dir = self.dispatcher.pool().dir();
            let lease = match gate::quietly(|| {
                worklane_lease::acquire(
                    dir,
                    &lane_lock(name),
                    &LeaseRequest::new("launcher"),
                    &Options::process(),
                )
            })
            .expect("acquire the lane")
            {
                Acquired::Held(lease) => lease,
                Acquired::Refused(r) => panic!("lane {name} must be free: {r}"),
            };
            let guard = lease.hand_over().expect("a held guard");
            let copy = rustix::io::dup(&guard).expect("dup");
            gate::quietly(|| drop(guard));
            copy
        }

        fn entry(name: &str, start_ms: u64, priority: i64) -> Enqueue {
            Enqueue {
                lane: name.to_owned(),
                start_ms: Some(start_ms),
                priority: Some(priority),
                placement: "wt-1".into(),
                stage: "build".into(),
                args: vec!["driver".into()],
                env: [
                    ("LANE_X".to_owned(), "1".to_owned()),
                    ("API_TOKEN".to_owned(), "s".to_owned()),
                ]
                .into_iter()
                .collect(),
                own_lane: false,
                weight: None,
                owner: None,
            }
        }

        /// Enqueues lane `name` of weight `weight`, tagged `owner`, at `start_ms`.
        fn enqueue_weighted(
            &mut self,
            name: &str,
            start_ms: u64,
            weight: u32,
            owner: Option<&str>,
        ) -> String {
            let fd = self.launch(name);
            let entry = Enqueue {
                weight: Some(weight),
                owner: owner.map(str::to_owned),
                ..Bench::entry(name, start_ms, 0)
            };
            let reply = self
                .dispatcher
                .enqueue(entry, vec![fd], &me())
                .expect("enqueue");
            assert!(reply.ok, "accepted: {reply:?}");
            reply.attempt.expect("an attempt id")
        }

        pub(super) fn enqueue(&mut self, name: &str, start_ms: u64, priority: i64) -> String {
            let fd = self.launch(name);
            let reply = self
                .dispatcher
                .enqueue(Bench::entry(name, start_ms, priority), vec![fd], &me())
                .expect("enqueue");
            assert!(reply.ok, "accepted: {reply:?}");
            reply.attempt.expect("an attempt id")
        }

        /// Whether another process finds the lane free (`flock -n` on its guard).
        fn lane_free(&self, name: &str) -> bool {
            let guard = self
                .site
                .temp
                .path()
                .join(format!(".{}.flock", lane_lock(name)));
            Command::new("flock")
                .arg("-n")
                .arg(&guard)
                .arg("true")
                .status_gated()
                .expect("flock")
                .success()
        }
    }

    /// How many descriptors of this process refer to a lane's guard (counted in
    /// `/proc/self/fd` by device and inode, so other tests' descriptors never count).
    fn fds_on(bench: &Bench, lanes: &[&str]) -> usize {
        use std::os::unix::fs::MetadataExt;
        let ids: Vec<(u64, u64)> = lanes
            .iter()
            .filter_map(|name| {
                let path = bench
                    .site
                    .temp
                    .path()
                    .join(format!(".{}.flock", lane_lock(name)));
                std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
            })
            .collect();
        std::fs::read_dir("/proc/self/fd")
            .expect("fds")
            .flatten()
            .filter_map(|fd| std::fs::metadata(fd.path()).ok())
            .filter(|m| ids.contains(&(m.dev(), m.ino())))
            .count()
    }

    #[test]
    fn every_refused_enqueue_closes_every_descriptor() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let two = vec![bench.launch("a"), bench.launch("b")];
        let reply = bench
            .dispatcher
            .enqueue(Bench::entry("a", T0, 0), two, &me())
            .expect("enqueue");
        assert_eq!(reply.error.as_deref(), Some(code::DESCRIPTORS), "{reply:?}");
        let reply = bench
            .dispatcher
            .enqueue(Bench::entry("a", T0, 0), vec![], &me())
            .expect("enqueue");
        assert_eq!(reply.error.as_deref(), Some(code::DESCRIPTORS), "{reply:?}");
        let other = bench.launch("b");
        let reply = bench
            .dispatcher
            .enqueue(Bench::entry("a", T0, 0), vec![other], &me())
            .expect("enqueue");
        assert_eq!(
            reply.error.as_deref(),
            Some(code::NOT_THE_LANE),
            "another lane's guard: {reply:?}"
        );
        let mut missing = Bench::entry("a", T0, 0);
        missing.priority = None;
        let reply = bench
            .dispatcher
            .enqueue(missing, vec![bench.launch("a")], &me())
            .expect("enqueue");
        assert_eq!(
            reply.error.as_deref(),
            Some(code::MISSING_FIELD),
            "{reply:?}"
        );
        let mut missing = Bench::entry("a", T0, 0);
        missing.start_ms = None;
        let reply = bench
            .dispatcher
            .enqueue(missing, vec![bench.launch("a")], &me())
            .expect("enqueue");
        assert_eq!(
            reply.error.as_deref(),
            Some(code::MISSING_FIELD),
            "{reply:?}"
        );
        assert_eq!(
            fds_on(&bench, &["a", "b"]),
            0,
            "every refused descriptor is closed"
        );
        assert!(
            bench.lane_free("a") && bench.lane_free("b"),
            "and the lanes are free again"
        );
        // A sender that never held the lock: its guard, but another description holds it.
        let holder = bench.launch("c");
        let path = bench
            .site
            .temp
            .path()
            .join(format!(".{}.flock", lane_lock("c")));
        let unlocked: OwnedFd = std::fs::File::open(&path).expect("open the guard").into();
        let reply = bench
            .dispatcher
            .enqueue(Bench::entry("c", T0, 0), vec![unlocked], &me())
            .expect("enqueue");
        assert_eq!(reply.error.as_deref(), Some(code::NOT_HELD), "{reply:?}");
        drop(holder);
        let mut waiter = Bench::new(
            "{}",
            Settings {
                mode: Mode::Waiter,
                ..Settings::default()
            },
        );
        let fd = waiter.launch("w");
        let reply = waiter
            .dispatcher
            .enqueue(Bench::entry("w", T0, 0), vec![fd], &me())
            .expect("enqueue");
        assert_eq!(reply.error.as_deref(), Some(code::WAITER_MODE), "{reply:?}");
        assert!(
            waiter.lane_free("w"),
            "refused in waiter mode, descriptor closed"
        );
    }

    #[test]
    fn an_accepted_enqueue_holds_the_lane_and_keeps_start_and_priority() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let id = bench.enqueue("docs", T0 - 5_000, 7);
        assert!(
            !bench.lane_free("docs"),
            "the dispatcher's copy holds the lane after the sender closed its own"
        );
        let listed = bench.dispatcher.list().expect("list");
        assert_eq!(listed.len(), 1);
        let row = &listed[0];
        assert_eq!(
            (row.attempt.as_str(), row.state.as_str()),
            (id.as_str(), "queued")
        );
        assert_eq!(
            (row.start_ms, row.priority),
            (T0 - 5_000, 7),
            "kept exactly"
        );
        let store = Store::open(&bench.site.temp.path().join("queue.db")).expect("reopen");
        let stored = store.get(&id).expect("get").expect("committed");
        assert_eq!(
            stored.env.keys().collect::<Vec<_>>(),
            ["LANE_X"],
            "a secret-shaped name is never stored"
        );
        assert!(bench.dispatcher.cancel(&id, &me()).expect("cancel").ok);
        assert!(bench.lane_free("docs"), "cancel closes the lane");
    }

    #[test]
    fn admit_claim_and_the_seeds_refusals() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let first = bench.enqueue("a", T0, 0);
        let second = bench.enqueue("b", T0 + 1, 0);
        let admitted = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("room for one");
        assert_eq!(admitted.attempt.id, first);
        assert_eq!(admitted.token.len(), 32, "128 bits of token");
        assert_eq!(admitted.slot, "agent-0.lock");
        assert!(
            bench.dispatcher.admit_next().expect("admit").is_none(),
            "at cap 1: a starting row holds its slot"
        );
        let refusals = [
            (first.as_str(), "wrong"),
            (second.as_str(), admitted.token.as_str()),
            ("a-absent", admitted.token.as_str()),
        ];
        for (id, token) in refusals {
            let refused = bench
                .dispatcher
                .claim(id, token, &me())
                .expect("claim")
                .expect_err("refused");
            assert_eq!(
                refused.message.as_deref(),
                Some("no admitted row for this token")
            );
        }
        assert_eq!(
            bench.dispatcher.list().expect("list").len(),
            2,
            "the rows stay"
        );
        assert!(!bench.lane_free("a"), "and their descriptors");
        let claimed = bench
            .dispatcher
            .claim(&first, &admitted.token, &me())
            .expect("claim")
            .expect("claimed");
        assert_eq!(claimed.fds.len(), 2, "the lane and the slot");
        assert_eq!(claimed.reply.slot.as_deref(), Some("agent-0.lock"));
        assert_eq!(claimed.reply.lane.as_deref(), Some("lane-a.lock"));
        let rows = bench.dispatcher.list().expect("list");
        assert_eq!(
            rows.iter().map(|r| r.state.as_str()).collect::<Vec<_>>(),
            ["running", "queued"],
            "the claimed row left the queue: it runs, holding nothing of the dispatcher's"
        );
        // The driver's side: adopt the slot from the received descriptor.
        let slot_fd = rustix::io::dup(claimed.fds[1].as_fd()).expect("dup");
        let lane_fd = rustix::io::dup(claimed.fds[0].as_fd()).expect("dup");
        drop(claimed);
        let slot = bench
            .dispatcher
            .pool()
            .adopt("agent-0.lock", slot_fd, &LeaseRequest::new("driver"))
            .expect("adopt the slot");
        assert!(!bench.lane_free("a"), "the driver holds the lane");
        drop(lane_fd);
        assert!(bench.lane_free("a"), "closing the last copy frees it");
        assert!(
            bench.dispatcher.admit_next().expect("admit").is_none(),
            "the driver's slot counts"
        );
        slot.release().expect("release");
        let next = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("room again");
        assert_eq!(next.attempt.id, second);
    }

    #[test]
    fn a_weighted_row_takes_its_units_and_stands_in_line_with_them() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 4}"#, Settings::default());
        let heavy = bench.enqueue_weighted("a", T0, 3, Some("nightly"));
        let next = bench.enqueue_weighted("b", T0 + 1, 2, None);
        let admitted = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("room for three");
        assert_eq!(admitted.attempt.id, heavy);
        assert_eq!(
            (admitted.attempt.weight, admitted.attempt.owner.as_deref()),
            (3, Some("nightly"))
        );
        let slot: serde_json::Value = serde_json::from_slice(
            &std::fs::read(bench.site.temp.path().join(&admitted.slot)).expect("record"),
        )
        .expect("JSON");
        assert_eq!(slot["weight"], 3, "the slot holds the row's units: {slot}");
        assert_eq!(
            slot["shareOwner"],
            format!("uid:{}", rustix::process::geteuid().as_raw()),
            "no config names the tag: its enqueuer's uid"
        );
        assert!(
            bench.dispatcher.admit_next().expect("admit").is_none(),
            "two units asked, one free"
        );
        let entry = bench
            .site
            .snapshot()
            .line
            .into_iter()
            .find(|v| v.live)
            .expect("the dispatcher stands for its next row");
        assert_eq!(entry.weight, 2, "with the row's weight");
        let rows = bench.dispatcher.list().expect("list");
        let view = rows.iter().find(|r| r.attempt == next).expect("listed");
        assert_eq!((view.weight, view.owner.as_deref()), (2, None));
    }

    #[test]
    fn an_enqueue_no_cap_could_admit_is_refused_naming_weight_and_cap() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(
            r#"{"max_agents": 4, "shares": {"owner:small": 1}}"#,
            Settings::default(),
        );
        for (weight, owner, says) in [
            (0, None, "weight 0"),
            (5, None, "4 units"),
            (2, Some("small"), "share of owner:small is 1"),
            (1, Some("two words"), "a tag is 1 to 128 bytes"),
        ] {
            let fd = bench.launch("x");
            let entry = Enqueue {
                weight: Some(weight),
                owner: owner.map(str::to_owned),
                ..Bench::entry("x", T0, 0)
            };
            let reply = bench
                .dispatcher
                .enqueue(entry, vec![fd], &me())
                .expect("enqueue");
            assert!(!reply.ok, "{weight} {owner:?}: {reply:?}");
            assert_eq!(reply.error.as_deref(), Some(code::BAD_REQUEST));
            let message = reply.message.unwrap_or_default();
            assert!(message.contains(says), "{message}");
            assert!(
                bench.lane_free("x"),
                "a refusal closes the lane's descriptor"
            );
        }
    }

    #[test]
    fn a_row_the_lowered_cap_can_never_admit_is_parked_and_holds_nobody() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 4}"#, Settings::default());
        let heavy = bench.enqueue_weighted("a", T0, 3, None);
        let light = bench.enqueue_weighted("b", T0 + 1, 1, None);
        bench.site.set_config(r#"{"max_agents": 2}"#);
        let admitted = gate::quietly(|| bench.dispatcher.admit_next()).expect("admit");
        let admitted = match admitted {
            Some(admitted) => admitted,
            None => gate::quietly(|| bench.dispatcher.admit_next())
                .expect("admit")
                .expect("the light row next"),
        };
        assert_eq!(admitted.attempt.id, light);
        let rows = bench.dispatcher.list().expect("list");
        let parked = rows.iter().find(|r| r.attempt == heavy).expect("listed");
        assert_eq!(parked.state, "failed");
        assert!(
            parked
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("weight 3") && e.contains("2 units")),
            "{parked:?}"
        );
        assert!(!bench.lane_free("a"), "a parked row keeps its lane");
    }

    #[test]
    fn with_shares_the_dispatcher_admits_the_less_used_owner_first() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(
            r#"{"max_agents": 4, "shares": {"owner:a": 4, "owner:b": 4}}"#,
            Settings::default(),
        );
        let a1 = bench.enqueue_weighted("a1", T0, 1, Some("a"));
        let a2 = bench.enqueue_weighted("a2", T0 + 1, 1, Some("a"));
        let a3 = bench.enqueue_weighted("a3", T0 + 2, 1, Some("a"));
        let b1 = bench.enqueue_weighted("b1", T0 + 10, 1, Some("b"));
        let mut order = Vec::new();
        for _ in 0..4 {
            let admitted = gate::quietly(|| bench.dispatcher.admit_next())
                .expect("admit")
                .expect("room");
            order.push(admitted.attempt.id);
        }
        assert_eq!(
            order,
            [a1, b1, a2, a3],
            "owner b (0 of 4) before owner a (1 of 4), whatever a queued first"
        );
    }

    #[test]
    fn an_admitted_attempt_is_starting_with_its_token_and_time() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let id = bench.enqueue("a", T0 - 9, 3);
        bench.clock.advance(7);
        let admitted = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("admitted");
        assert_eq!(admitted.attempt.id, id);
        assert_eq!(admitted.attempt.state, State::Starting);
        assert_eq!(
            admitted.attempt.token.as_deref(),
            Some(admitted.token.as_str())
        );
        assert_eq!(admitted.attempt.state_at_ms, T0 + 7, "admitted now");
        assert_eq!(admitted.attempt.queued_at_ms, T0 - 9, "its place kept");
        assert_eq!(admitted.slot, "agent-0.lock");
        assert!(!admitted.token.is_empty());
    }

    #[test]
    fn expiry_is_strictly_after_the_interval_and_keeps_the_place() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(
            r#"{"max_agents": 1}"#,
            Settings {
                claim_interval_ms: 60_000,
                ..Settings::default()
            },
        );
        let id = bench.enqueue("a", T0 - 9, 3);
        let admitted = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("admitted");
        bench.clock.advance(60_000);
        assert!(
            bench.dispatcher.expire().expect("expire").is_empty(),
            "at exactly 60 s it is still starting"
        );
        bench.clock.advance(1);
        assert_eq!(
            bench.dispatcher.expire().expect("expire"),
            std::slice::from_ref(&id),
            "1 ms later it is queued"
        );
        let row = bench.dispatcher.list().expect("list").remove(0);
        assert_eq!(
            (row.state.as_str(), row.start_ms, row.priority),
            ("queued", T0 - 9, 3)
        );
        assert!(
            bench
                .dispatcher
                .claim(&id, &admitted.token, &me())
                .expect("claim")
                .is_err(),
            "the old token is refused"
        );
        let again = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("its slot was returned");
        assert_ne!(again.token, admitted.token, "a fresh token");
    }

    #[test]
    fn admission_goes_by_priority_then_original_start() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let ids = [
            bench.enqueue("p0-old", T0, 0),
            bench.enqueue("p5", T0 + 50, 5),
            bench.enqueue("p0-new", T0 + 10, 0),
            bench.enqueue("p5-old", T0 + 20, 5),
            bench.enqueue("n1", T0 - 100, -1),
        ];
        let mut order = Vec::new();
        for _ in 0..5 {
            let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
            order.push(admitted.attempt.lane.clone());
            let claimed = bench
                .dispatcher
                .claim(&admitted.attempt.id, &admitted.token, &me())
                .expect("claim")
                .expect("claimed");
            drop(claimed);
        }
        assert_eq!(order, ["p5-old", "p5", "p0-old", "p0-new", "n1"], "{ids:?}");
    }

    #[test]
    fn recovery_keeps_free_lanes_and_leaves_held_ones_alone() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 2}"#, Settings::default());
        let kept = bench.enqueue("kept", T0, 0);
        let taken = bench.enqueue("taken", T0 + 1, 0);
        let admitted = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("admitted");
        assert_eq!(admitted.attempt.id, kept);
        // The dispatcher dies: its descriptors close. Meanwhile someone takes lane "taken".
        let Bench {
            site,
            clock,
            dispatcher,
        } = bench;
        let pool = dispatcher.pool().clone();
        drop(dispatcher);
        let other = match worklane_lease::acquire(
            pool.dir(),
            &lane_lock("taken"),
            &LeaseRequest::new("someone"),
            &Options::process(),
        )
        .expect("acquire")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("free after the dispatcher died: {r}"),
        };
        let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
        let recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
        let rows = recovered.list().expect("list");
        let ids: Vec<&str> = rows.iter().map(|r| r.attempt.as_str()).collect();
        assert_eq!(
            ids,
            [kept.as_str()],
            "the held lane's row is dropped: {taken}"
        );
        assert_eq!(rows[0].state, "queued", "starting becomes queued again");
        assert_eq!(rows[0].start_ms, T0, "its place kept");
        drop(other);
        let _ = clock;
    }

    #[test]
    fn a_failed_step_names_itself_and_its_attempt_and_keeps_its_cause() {
        use worklane_admission::dispatch::service::Error;
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let id = bench.enqueue("a", T0, 0);
        bench.site.set_config("{");
        let error =
            gate::quietly(|| bench.dispatcher.admit_next()).expect_err("the caps cannot be loaded");
        let Error::TakeSlot { attempt, source } = &error else {
            panic!("the slot's step: {error:?}")
        };
        assert_eq!(attempt, &id, "the attempt it was for");
        assert!(
            matches!(**source, worklane_admission::Error::Config { .. }),
            "the pool's own error, to match on: {source:?}"
        );
        // Each part of the chain says its own step once: the cause's text is not repeated.
        let mut parts = vec![error.to_string()];
        let mut cause = std::error::Error::source(&error);
        while let Some(e) = cause {
            let text = e.to_string();
            assert!(
                !parts.last().expect("a part").contains(&text),
                "{parts:?} repeats its cause {text:?}"
            );
            parts.push(text);
            cause = e.source();
        }
        assert_eq!(
            parts[..2],
            [
                format!("cannot take an agent slot for attempt {id}"),
                "cannot load the pool's caps".to_owned(),
            ],
            "the dispatcher's step, then the pool's: {parts:?}"
        );
        assert!(
            parts.len() > 2 && parts[2].contains("config.json"),
            "then the config's own error: {parts:?}"
        );
    }

    /// The record of lane `name`, as the dispatcher's recovery leaves it.
    fn lane_record(site: &Site, name: &str) -> Record {
        let raw = std::fs::read(site.temp.path().join(lane_lock(name))).expect("lane record");
        Record::parse(&raw).expect("parses")
    }

    fn epochs(site: &Site, name: &str) -> Vec<String> {
        let prefix = format!("{}.epoch.", lane_lock(name));
        let mut names: Vec<String> = std::fs::read_dir(site.temp.path())
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_dispatcher_stands_in_line_for_its_first_queued_row() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let stop = Stop {
            by: "ops".into(),
            at: "2026-11-30T00:00:00.000Z".into(),
            reason: "holding the queue".into(),
        };
        worklane_admission::stop::write(bench.dispatcher.pool().dir(), &stop).expect("STOP");
        let entries = |bench: &Bench| -> Vec<(i64, u64)> {
            bench
                .dispatcher
                .pool()
                .line(Kind::Agent)
                .expect("line")
                .iter()
                .map(|e| (e.priority, e.start_ms))
                .collect()
        };
        bench.dispatcher.stand().expect("stand");
        assert_eq!(entries(&bench), [], "nothing queued, no entry");
        let low = bench.enqueue("low", T0, 0);
        bench.dispatcher.stand().expect("stand");
        assert_eq!(entries(&bench), [(0, T0)], "the first row's place");
        let high = bench.enqueue("high", T0 + 5, 3);
        bench.dispatcher.stand().expect("stand");
        assert_eq!(
            entries(&bench),
            [(3, T0 + 5)],
            "moved to the new first row, one entry"
        );
        bench.dispatcher.stand().expect("stand");
        assert_eq!(
            entries(&bench),
            [(3, T0 + 5)],
            "standing again changes nothing"
        );
        assert!(bench.dispatcher.cancel(&high, &me()).expect("cancel").ok);
        bench.dispatcher.stand().expect("stand");
        assert_eq!(entries(&bench), [(0, T0)], "back to the next row's place");
        assert!(bench.dispatcher.cancel(&low, &me()).expect("cancel").ok);
        bench.dispatcher.stand().expect("stand");
        assert_eq!(entries(&bench), [], "none once nothing is queued");
    }

    #[test]
    fn recovery_resumes_a_lane_nobody_took_and_acquires_one_someone_did() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 2}"#, Settings::default());
        let untouched = bench.enqueue("untouched", T0, 0);
        let passed = bench.enqueue("passed", T0 + 1, 0);
        let Bench {
            site, dispatcher, ..
        } = bench;
        let pool = dispatcher.pool().clone();
        drop(dispatcher);
        // While no dispatcher runs, someone takes lane "passed" and gives it back.
        let other = match worklane_lease::acquire(
            pool.dir(),
            &lane_lock("passed"),
            &LeaseRequest::new("someone"),
            &Options::process(),
        )
        .expect("acquire")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("free after the dispatcher died: {r}"),
        };
        other.release().expect("release");
        assert_eq!(epochs(&site, "passed"), ["lane-passed.lock.epoch.2"]);
        let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
        let recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
        let ids: Vec<String> = recovered
            .list()
            .expect("list")
            .into_iter()
            .map(|r| r.attempt)
            .collect();
        assert_eq!(ids, [untouched.clone(), passed.clone()], "both kept");
        // Nobody took "untouched": held again as the dead dispatcher held it, the launcher's
        // record and epoch as they were.
        assert_eq!(
            lane_record(&site, "untouched").owner.as_deref(),
            Some("launcher")
        );
        assert_eq!(lane_record(&site, "untouched").epoch, Some(1));
        assert_eq!(epochs(&site, "untouched"), ["lane-untouched.lock.epoch.1"]);
        // "passed" changed hands in between: acquired anew, so its epoch moves past the one
        // its interim holder had.
        let record = lane_record(&site, "passed");
        assert_eq!(record.owner.as_deref(), Some("worklane dispatcher"));
        assert_eq!(record.epoch, Some(3), "a new acquisition, a new epoch");
        let probe = |name: &str| {
            Command::new("flock")
                .arg("-n")
                .arg(site.temp.path().join(format!(".{}.flock", lane_lock(name))))
                .arg("true")
                .status_gated()
                .expect("flock")
                .success()
        };
        assert!(!probe("untouched") && !probe("passed"), "both lanes held");
        drop(recovered);
        assert!(
            probe("untouched") && probe("passed"),
            "and freed with the dispatcher"
        );
    }

    /// Another user than this process, as a caller (a member of the directory's group).
    fn stranger() -> Caller {
        Caller {
            pid: Some(1),
            uid: 65_534,
            gid: 65_534,
            groups: Vec::new(),
        }
    }

    #[test]
    fn a_lane_of_its_own_must_say_so_and_no_other_lane_may() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let own = "q-0123456789abcdef";
        let reply = bench
            .dispatcher
            .enqueue(Bench::entry(own, T0, 0), vec![bench.launch(own)], &me())
            .expect("enqueue");
        assert_eq!(reply.error.as_deref(), Some(code::BAD_REQUEST), "{reply:?}");
        assert!(
            reply
                .message
                .as_deref()
                .is_some_and(|m| m.contains("reserved")),
            "says why: {reply:?}"
        );
        assert!(bench.lane_free(own), "refused, its descriptor closed");
        let mut claimed = Bench::entry("docs", T0, 0);
        claimed.own_lane = true;
        let reply = bench
            .dispatcher
            .enqueue(claimed, vec![bench.launch("docs")], &me())
            .expect("enqueue");
        assert_eq!(reply.error.as_deref(), Some(code::BAD_REQUEST), "{reply:?}");
        let mut declared = Bench::entry(own, T0, 0);
        declared.own_lane = true;
        let reply = bench
            .dispatcher
            .enqueue(declared, vec![bench.launch(own)], &me())
            .expect("enqueue");
        assert!(reply.ok, "declared, it is queued: {reply:?}");
    }

    #[test]
    fn a_descriptor_that_is_no_guard_is_named_for_what_it_is() {
        use std::os::unix::fs::OpenOptionsExt;
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let fifo = bench.site.temp.path().join("fifo");
        let made = Command::new("mkfifo")
            .arg(&fifo)
            .status_gated()
            .expect("mkfifo");
        assert!(made.success());
        let read: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&fifo)
            .expect("open the FIFO")
            .into();
        let dir: OwnedFd = std::fs::File::open(bench.site.temp.path())
            .expect("dir")
            .into();
        let (socket, _other) = std::os::unix::net::UnixStream::pair().expect("pair");
        for (fd, what) in [
            (read, "a pipe (FIFO)"),
            (dir, "a directory"),
            (OwnedFd::from(socket), "a socket"),
        ] {
            let reply = bench
                .dispatcher
                .enqueue(Bench::entry("l", T0, 0), vec![fd], &me())
                .expect("enqueue");
            assert_eq!(
                reply.error.as_deref(),
                Some(code::NOT_THE_LANE),
                "{reply:?}"
            );
            let message = reply.message.unwrap_or_default();
            assert!(
                message.contains(&format!("the descriptor sent is {what}")),
                "named for what it is: {message}"
            );
            assert!(
                !message.contains("remove it"),
                "no file to remove: {message}"
            );
        }
        // The lane's own guard, opened but locked by nobody: the sender does not hold it.
        let path = bench
            .site
            .temp
            .path()
            .join(format!(".{}.flock", lane_lock("f")));
        drop(bench.launch("f"));
        assert!(bench.lane_free("f"));
        let unlocked: OwnedFd = std::fs::File::open(&path).expect("the guard").into();
        let reply = bench
            .dispatcher
            .enqueue(Bench::entry("f", T0, 0), vec![unlocked], &me())
            .expect("enqueue");
        assert_eq!(reply.error.as_deref(), Some(code::NOT_HELD), "{reply:?}");
        assert!(
            reply
                .message
                .as_deref()
                .is_some_and(|m| m.contains("nobody holds")),
            "{reply:?}"
        );
        assert!(
            bench.lane_free("f"),
            "and the dispatcher did not take it either"
        );
    }

    #[test]
    fn only_the_enqueuer_or_root_claims_and_only_it_root_or_the_owner_cancels() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let id = bench.enqueue("a", T0, 0);
        let stored = Store::open(&bench.site.temp.path().join("queue.db"))
            .expect("store")
            .get(&id)
            .expect("get")
            .expect("row");
        let me = me();
        assert_eq!(
            stored
                .enqueuer
                .as_ref()
                .map(|e| (e.uid, e.gid, e.groups.clone())),
            Some((me.uid, me.gid, me.groups.clone())),
            "the row records who enqueued, from the caller's credentials"
        );
        let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
        let refused = bench
            .dispatcher
            .claim(&id, &admitted.token, &stranger())
            .expect("claim")
            .expect_err("another user's claim");
        assert_eq!(
            refused.error.as_deref(),
            Some(code::PERMISSION),
            "{refused:?}"
        );
        assert_eq!(
            bench.dispatcher.list().expect("list")[0].state,
            "starting",
            "it stays"
        );
        let reply = bench.dispatcher.cancel(&id, &stranger()).expect("cancel");
        assert_eq!(reply.error.as_deref(), Some(code::PERMISSION), "{reply:?}");
        assert!(!bench.lane_free("a"), "not cancelled");
        let claimed = bench
            .dispatcher
            .claim(&id, &admitted.token, &me)
            .expect("claim")
            .expect("its enqueuer's claim");
        drop(claimed);
    }

    #[test]
    fn a_failed_start_backs_off_the_line_moves_on_and_the_bounded_tries_park_it() {
        use worklane_admission::dispatch::service::StartFailure;
        let _quiet = gate::quiet();
        let mut bench = Bench::new(
            r#"{"max_agents": 1}"#,
            Settings {
                start_attempts: 3,
                start_backoff_ms: 1_000,
                ..Settings::default()
            },
        );
        let head = bench.enqueue("head", T0, 0);
        let behind = bench.enqueue("behind", T0 + 1, 0);
        let admitted = bench.dispatcher.admit_next().expect("admit").expect("head");
        assert_eq!(admitted.attempt.id, head);
        let failed = bench
            .dispatcher
            .start_failed(&head, "no such driver", false)
            .expect("failed");
        assert_eq!(
            failed,
            StartFailure::Retry {
                failures: 1,
                retry_at_ms: T0 + 1_000
            }
        );
        let next = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("the row behind");
        assert_eq!(
            next.attempt.id, behind,
            "the failing head does not hold the line"
        );
        drop(
            bench
                .dispatcher
                .claim(&behind, &next.token, &me())
                .expect("claim")
                .expect("claimed"),
        );
        bench.clock.advance(999);
        assert!(
            bench.dispatcher.admit_next().expect("admit").is_none(),
            "within its backoff, not tried"
        );
        bench.clock.advance(1);
        let again = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("tried at its end");
        assert_eq!(again.attempt.id, head);
        let failed = bench
            .dispatcher
            .start_failed(&head, "no space", true)
            .expect("host trouble");
        assert_eq!(
            failed,
            StartFailure::Host,
            "the host's trouble is not counted"
        );
        let again = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("at once");
        let failed = bench
            .dispatcher
            .start_failed(&again.attempt.id, "no such driver", false)
            .expect("failed");
        assert_eq!(
            failed,
            StartFailure::Retry {
                failures: 2,
                retry_at_ms: T0 + 1_000 + 2_000
            },
            "the backoff doubles"
        );
        bench.clock.advance(2_000);
        let again = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("tried");
        let failed = bench
            .dispatcher
            .start_failed(&again.attempt.id, "no such driver", false)
            .expect("failed");
        assert_eq!(failed, StartFailure::Parked { failures: 3 });
        let row = bench.dispatcher.view(&head).expect("view").expect("kept");
        assert_eq!(
            (row.state.as_str(), row.failures, row.last_error.as_deref()),
            ("failed", 3, Some("no such driver"))
        );
        bench.clock.advance(3_600_000);
        assert!(
            bench.dispatcher.admit_next().expect("admit").is_none(),
            "a parked row is never admitted"
        );
        assert!(!bench.lane_free("head"), "its lane is still held");
        let reply = bench.dispatcher.retry(&head, &me()).expect("retry");
        assert!(reply.ok, "{reply:?}");
        let row = bench.dispatcher.view(&head).expect("view").expect("kept");
        assert_eq!((row.state.as_str(), row.failures), ("queued", 0));
        let reply = bench.dispatcher.retry(&head, &me()).expect("retry");
        assert_eq!(reply.error.as_deref(), Some(code::NOT_FAILED), "{reply:?}");
    }

    #[test]
    fn a_driver_that_ends_before_it_claims_is_a_failed_start() {
        use worklane_admission::dispatch::service::{DriverEnded, Exit, StartFailure};
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let id = bench.enqueue("a", T0, 0);
        let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
        bench
            .dispatcher
            .started(&admitted.attempt.id, 4242)
            .expect("started");
        let other = bench
            .dispatcher
            .exited(Exit {
                pid: 4343,
                status: Some(0),
                signal: None,
            })
            .expect("exited");
        assert_eq!(other, DriverEnded::Unknown, "another process's end");
        let ended = bench
            .dispatcher
            .exited(Exit {
                pid: 4242,
                status: Some(2),
                signal: None,
            })
            .expect("exited");
        let DriverEnded::BeforeClaim {
            attempt,
            failure,
            why,
        } = ended
        else {
            panic!("a failed start: {ended:?}")
        };
        assert_eq!(attempt, id);
        assert!(
            matches!(failure, StartFailure::Retry { failures: 1, .. }),
            "{failure:?}"
        );
        assert!(why.contains("exit status 2"), "{why}");
        let row = bench.dispatcher.view(&id).expect("view").expect("row");
        assert_eq!((row.state.as_str(), row.starts), ("queued", 1));
    }

    #[test]
    fn recovery_parks_rows_with_no_enqueuer_ends_free_runs_and_reports_lost_entries() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 2}"#, Settings::default());
        let running = bench.enqueue("running", T0, 0);
        let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
        let claimed = bench
            .dispatcher
            .claim(&running, &admitted.token, &me())
            .expect("claim")
            .expect("claimed");
        let legacy = bench.enqueue("legacy", T0 + 1, 0);
        let Bench {
            site, dispatcher, ..
        } = bench;
        let pool = dispatcher.pool().clone();
        drop(dispatcher);
        drop(claimed);
        // The row as an older worklane stored it, without its enqueuer.
        let conn = rusqlite_free_update(&site, &legacy);
        drop(conn);
        // A status entry naming an attempt the database never had.
        std::fs::write(
            site.temp.path().join("queue-ghost.json"),
            br#"{"version":1,"lane":"ghost","attempt":"a-ghost","args":["worklane","claim","--","make"],"start":"2026-01-01T00:00:00.000Z","dispatcher":{"pid":4242}}"#,
        )
        .expect("entry");
        let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
        let recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
        let recovery = recovered.recovery();
        assert_eq!(
            recovery.parked,
            std::slice::from_ref(&legacy),
            "{recovery:?}"
        );
        assert_eq!(
            recovered.view(&legacy).expect("view").expect("kept").state,
            "failed",
            "parked, never started as the dispatcher's user"
        );
        assert_eq!(recovery.ended.len(), 1, "{recovery:?}");
        assert_eq!(recovery.ended[0].attempt, running);
        assert_eq!(recovery.ended[0].outcome, "ended");
        assert_eq!(recovery.lost.len(), 1, "{recovery:?}");
        let lost = &recovery.lost[0];
        assert_eq!(
            (
                lost.attempt.as_str(),
                lost.lane.as_str(),
                lost.outcome.as_str()
            ),
            ("a-ghost", "ghost", "lost")
        );
        assert_eq!(
            lost.args,
            ["worklane", "claim", "--", "make"],
            "with its arguments"
        );
        assert!(
            !site.temp.path().join("queue-ghost.json").exists(),
            "the stale entry is removed"
        );
        let history: Vec<String> = recovered
            .history()
            .expect("history")
            .into_iter()
            .map(|e| e.attempt)
            .collect();
        assert!(
            history.contains(&running) && history.contains(&"a-ghost".to_owned()),
            "both kept in the history: {history:?}"
        );
    }

    /// Clears the enqueuer of row `id`, as a row stored before schema 3 has none.
    fn rusqlite_free_update(site: &Site, id: &str) -> std::process::Output {
        let out = Command::new("python3")
            .args([
                "-c",
                "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nc.execute('UPDATE attempts SET uid=NULL, gid=NULL, groups=NULL WHERE id=?',(sys.argv[2],))\nc.commit()",
            ])
            .arg(site.temp.path().join("queue.db"))
            .arg(id)
            .output_gated()
            .expect("python3 sqlite3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
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

mod lanes {
    //! Lanes of their own: their reserved names, and their files removed when they end.
    use super::*;
    use worklane_admission::dispatch::lane::{is_own_lane, own_lane, retire_own_lane};
    use worklane_guard::reclaim::Removal;
    use worklane_lease::{Acquired, Options};

    #[test]
    fn own_lane_names_are_q_and_16_lowercase_hex() {
        let made = own_lane();
        assert!(is_own_lane(&made), "{made}");
        assert_ne!(own_lane(), made, "random");
        assert!(is_own_lane("q-0123456789abcdef"));
        for not in [
            "q-0123456789abcde",
            "q-0123456789abcdef0",
            "q-0123456789ABCDEF",
            "q-0123456789abcdeg",
            "Q-0123456789abcdef",
            "r-0123456789abcdef",
            "build",
        ] {
            assert!(!is_own_lane(not), "{not}");
        }
    }

    fn names(site: &Site) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(site.temp.path())
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.contains("lane-"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn retiring_removes_an_own_lanes_files_unless_someone_holds_it() {
        // No child of another test may be forked while this one's descriptors exist: it would
        // hold the lane's lock for as long as it lives.
        let _quiet = gate::quiet();
        let site = Site::new("{}");
        let dir = site.pool.dir();
        let lane = "q-00112233445566ff";
        let lock = format!("lane-{lane}.lock");
        let lease = match gate::quietly(|| {
            worklane_lease::acquire(dir, &lock, &Request::new("driver"), &Options::process())
        })
        .expect("acquire")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("free: {r}"),
        };
        // A claim a killed taker left, beside the record and epoch.
        std::fs::write(
            site.temp
                .path()
                .join(format!("{lock}.0123456789abcdef.claim")),
            b"{}",
        )
        .expect("claim");
        // What the command left running still holds the lane: nothing is removed.
        // Close-on-exec: a child another test starts meanwhile must not inherit the lock.
        let leftover =
            rustix::io::fcntl_dupfd_cloexec(lease.guard().expect("held"), 0).expect("dup");
        gate::quietly(|| lease.release()).expect("release");
        let before = names(&site);
        assert_eq!(
            retire_own_lane(dir, lane).expect("retire"),
            Some(Removal::Busy)
        );
        assert_eq!(names(&site), before, "a held lane keeps its files");
        drop(leftover);
        assert_eq!(
            retire_own_lane(dir, lane).expect("retire"),
            Some(Removal::Removed)
        );
        assert_eq!(
            names(&site),
            Vec::<String>::new(),
            "record, epoch, claim and guard gone"
        );
        // A lane with a name of the launcher's choosing is never touched.
        let named = match gate::quietly(|| {
            worklane_lease::acquire(
                dir,
                "lane-build.lock",
                &Request::new("d"),
                &Options::process(),
            )
        })
        .expect("acquire")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("free: {r}"),
        };
        gate::quietly(|| named.release()).expect("release");
        let before = names(&site);
        assert!(!before.is_empty());
        assert_eq!(retire_own_lane(dir, "build").expect("retire"), None);
        assert_eq!(names(&site), before);
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

mod served {
    //! The dispatcher's service loop on a real Unix socket, in a thread of this process: what
    //! each request is answered, what the loop reports, where its test seam stops it, and
    //! whom it serves.
    use super::*;
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use worklane_admission::dispatch::server::{CrashPoint, Event, Server, Trust};
    use worklane_admission::dispatch::service::{Dispatcher, Settings, lane_lock};
    use worklane_admission::dispatch::store::Store;
    use worklane_admission::dispatch::transport;
    use worklane_admission::dispatch::wire::{Reply, code};
    use worklane_lease::{Acquired, Options};

    const DRIVER_PID: u32 = 4242;

    struct Served {
        site: Site,
        socket: PathBuf,
        stop: Arc<AtomicBool>,
        events: mpsc::Receiver<String>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Served {
        /// A dispatcher serving at cap 2; its drivers "start" (pid 4242) unless `failing`.
        fn start(trust: Option<Trust>, failing: bool, crash: Option<CrashPoint>) -> Served {
            let site = Site::new(r#"{"max_agents": 2}"#);
            let socket = site.temp.path().join("dispatcher.sock");
            let listener = UnixListener::bind(&socket).expect("bind");
            let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
            let dispatcher = Dispatcher::recover(site.pool.clone(), store, Settings::default())
                .expect("recover");
            assert!(
                format!("{dispatcher:?}").contains("Dispatcher"),
                "a dispatcher shows itself"
            );
            let stat = std::fs::metadata(site.temp.path()).expect("stat");
            let trust = trust.unwrap_or(Trust {
                owner: std::os::unix::fs::MetadataExt::uid(&stat),
                group: std::os::unix::fs::MetadataExt::gid(&stat),
            });
            let stop = Arc::new(AtomicBool::new(false));
            let (tx, events) = mpsc::channel();
            let thread = {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let told = tx.clone();
                    let mut server = Server::new(
                        dispatcher,
                        listener,
                        trust,
                        move |_| match failing {
                            true => Err(std::io::Error::other("no driver here")),
                            false => Ok(DRIVER_PID),
                        },
                        move |event| {
                            let line = match event {
                                Event::Tick => return,
                                other => format!("{other:?}"),
                            };
                            let _ = told.send(line);
                        },
                    );
                    assert!(
                        format!("{server:?}").contains("Server"),
                        "a server shows itself"
                    );
                    if let Some(point) = crash {
                        server = server.crash_at(point, || panic!("crashed at the seam"));
                    }
                    server.run(&stop).expect("serve");
                })
            };
            Served {
                site,
                socket,
                stop,
                events,
                thread: Some(thread),
            }
        }

        fn ask_raw(
            &self,
            line: &[u8],
            fds: &[BorrowedFd<'_>],
        ) -> Result<(Reply, Vec<OwnedFd>), String> {
            let stream = UnixStream::connect(&self.socket).map_err(|e| e.to_string())?;
            transport::send(&stream, line, fds).map_err(|e| e.to_string())?;
            let (line, fds) = transport::recv(&stream).map_err(|e| e.to_string())?;
            Ok((serde_json::from_slice(&line).expect("a reply"), fds))
        }

        fn ask(&self, request: serde_json::Value, fds: &[BorrowedFd<'_>]) -> (Reply, Vec<OwnedFd>) {
            self.ask_raw(request.to_string().as_bytes(), fds)
                .expect("the dispatcher answers")
        }

        /// Takes `lane` as a launcher and enqueues it, handing its guard over.
        fn enqueue(&self, lane: &str) -> Reply {
            let dir = self.site.pool.dir();
            let lease = match gate::quietly(|| {
                worklane_lease::acquire(
                    dir,
                    &lane_lock(lane),
                    &Request::new("launcher"),
                    &Options::process(),
                )
            })
            .expect("acquire")
            {
                Acquired::Held(lease) => lease,
                Acquired::Refused(r) => panic!("lane {lane} is free: {r}"),
            };
            let guard = lease.hand_over().expect("held");
            let request = serde_json::json!({"op": "enqueue", "lane": lane, "start_ms": 1, "priority": 0, "args": ["driver"]});
            let (reply, _) = self.ask(request, &[guard.as_fd()]);
            gate::quietly(|| drop(guard));
            reply
        }

        /// The next event that is not a tick, within 10 s.
        fn event(&self) -> String {
            self.events
                .recv_timeout(Duration::from_secs(10))
                .expect("an event")
        }

        fn entry(&self, lane: &str) -> PathBuf {
            self.site.temp.path().join(format!("queue-{lane}.json"))
        }

        /// Whether another process finds the lane free, asked `tries` times 10 ms apart (a
        /// copy another test's fork holds is gone at its exec).
        fn lane_free(&self, lane: &str, tries: u32) -> bool {
            let guard = self
                .site
                .temp
                .path()
                .join(format!(".{}.flock", lane_lock(lane)));
            (0..tries).any(|_| {
                let free = Command::new("flock")
                    .arg("-n")
                    .arg(&guard)
                    .arg("true")
                    .status_gated()
                    .expect("flock")
                    .success();
                if !free {
                    std::thread::sleep(Duration::from_millis(10));
                }
                free
            })
        }

        fn stop(mut self) -> std::thread::Result<()> {
            self.stop.store(true, Ordering::SeqCst);
            self.thread.take().expect("running").join()
        }
    }

    #[test]
    fn a_row_that_waits_has_its_entry_as_queued_and_one_admitted_at_once_as_starting() {
        let served = Served::start(None, false, None);
        let dir = served.entry("x").parent().expect("dir").to_owned();
        let state = |lane: &str| -> String {
            let raw = std::fs::read(served.entry(lane)).expect("entry");
            let entry: serde_json::Value = serde_json::from_slice(&raw).expect("json");
            entry["state"].as_str().expect("state").to_owned()
        };
        assert!(served.enqueue("now").ok);
        assert_eq!(state("now"), "starting", "admitted at once");
        // Held back by STOP: queued, and its entry says so.
        std::fs::write(dir.join("STOP"), br#"{"by":"t","at":"","reason":"r"}"#).expect("STOP");
        assert!(served.enqueue("later").ok);
        assert_eq!(state("later"), "queued", "written although not admitted");
        std::fs::remove_file(dir.join("STOP")).expect("lift");
        drop(served.stop());
    }

    #[test]
    fn enqueue_admit_list_claim_and_each_refusal_over_the_socket() {
        let served = Served::start(None, false, None);
        let reply = served.enqueue("one");
        assert!(reply.ok, "accepted: {reply:?}");
        let attempt = reply.attempt.expect("an attempt");
        // Admitted at once (cap 2, nothing running) and its driver started, before the reply.
        let started = served.event();
        assert_eq!(
            started,
            format!(r#"Started {{ attempt: "{attempt}", pid: {DRIVER_PID} }}"#)
        );
        assert_eq!(
            served.event(),
            r#"Answered { op: "enqueue", refused: None }"#
        );
        assert!(served.entry("one").exists(), "its status entry is written");
        let (list, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
        assert!(list.ok, "{list:?}");
        assert_eq!(list.pid, Some(std::process::id()), "the dispatcher's pid");
        let rows = list.attempts.expect("rows");
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(
            (rows[0].attempt.as_str(), rows[0].state.as_str()),
            (attempt.as_str(), "starting")
        );
        assert_eq!(served.event(), r#"Answered { op: "list", refused: None }"#);
        // A descriptor on anything but an enqueue is refused, named by its op.
        let spare = tempfile::tempfile().expect("file");
        for (op, request) in [
            (
                "claim",
                serde_json::json!({"op": "claim", "attempt": attempt, "token": "t"}),
            ),
            ("list", serde_json::json!({"op": "list"})),
            (
                "cancel",
                serde_json::json!({"op": "cancel", "attempt": attempt}),
            ),
        ] {
            let (reply, fds) = served.ask(request, &[spare.as_fd()]);
            assert_eq!(
                reply.error.as_deref(),
                Some(code::DESCRIPTORS),
                "{op}: {reply:?}"
            );
            assert!(fds.is_empty(), "{op}: nothing sent back");
            assert_eq!(
                served.event(),
                format!(r#"Answered {{ op: "{op}", refused: Some("descriptors") }}"#)
            );
        }
        let (bad, _) = served.ask_raw(b"{\"op\":\"fly\"}", &[]).expect("answered");
        assert_eq!(bad.error.as_deref(), Some(code::BAD_REQUEST), "{bad:?}");
        assert_eq!(
            served.event(),
            r#"Answered { op: "unknown", refused: Some("bad-request") }"#
        );
        // The wrong token is refused; the lane stays held by the dispatcher.
        let (wrong, fds) = served.ask(
            serde_json::json!({"op": "claim", "attempt": attempt, "token": "nope"}),
            &[],
        );
        assert_eq!(
            wrong.error.as_deref(),
            Some(code::NO_ADMITTED_ROW),
            "{wrong:?}"
        );
        assert!(fds.is_empty());
        let _ = served.event();
        served.stop().expect("the loop ends when told");
    }

    #[test]
    fn a_claim_hands_over_lane_and_slot_and_drops_the_entry() {
        let (tx, rx) = mpsc::channel();
        // A driver that remembers its token, as a started process is told it.
        let site = Site::new(r#"{"max_agents": 2}"#);
        let socket = site.temp.path().join("dispatcher.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
        let dispatcher =
            Dispatcher::recover(site.pool.clone(), store, Settings::default()).expect("recover");
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let trust = Trust { owner: 0, group: 0 };
                let mut server = Server::new(
                    dispatcher,
                    listener,
                    trust,
                    move |admitted| {
                        tx.send((admitted.attempt.id.clone(), admitted.token.clone()))
                            .expect("send");
                        Ok(1)
                    },
                    |_| {},
                );
                server.run(&stop).expect("serve");
            })
        };
        let served = Served {
            site,
            socket,
            stop,
            events: mpsc::channel().1,
            thread: Some(thread),
        };
        assert!(served.enqueue("two").ok, "accepted");
        let (attempt, token) = rx.recv_timeout(Duration::from_secs(10)).expect("admitted");
        assert!(served.entry("two").exists(), "its status entry is written");
        let (reply, fds) = served.ask(
            serde_json::json!({"op": "claim", "attempt": attempt, "token": token}),
            &[],
        );
        assert!(reply.ok, "{reply:?}");
        assert_eq!(fds.len(), 2, "the lane's and the slot's descriptors");
        assert_eq!(reply.lane.as_deref(), Some("lane-two.lock"));
        assert!(
            !served.entry("two").exists(),
            "a claimed attempt's entry is removed"
        );
        let (list, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
        let rows = list.attempts.expect("rows");
        assert_eq!(
            rows.iter().map(|a| a.state.as_str()).collect::<Vec<_>>(),
            ["running"],
            "its row left the queue and runs: {rows:?}"
        );
        assert_eq!(
            rows[0].driver_pid,
            Some(std::process::id()),
            "the claimer's pid"
        );
        assert!(!served.lane_free("two", 1), "the claimer holds the lane");
        gate::quietly(|| drop(fds));
        assert!(
            served.lane_free("two", 200),
            "free once the claimer closes it"
        );
        served.stop().expect("stops");
    }

    #[test]
    fn a_driver_that_cannot_start_leaves_its_attempt_queued_and_cancel_frees_the_lane() {
        let served = Served::start(None, true, None);
        let reply = served.enqueue("three");
        let attempt = reply.attempt.expect("accepted");
        let failed = served.event();
        assert!(
            failed.starts_with(&format!(r#"StartFailed {{ attempt: "{attempt}""#))
                && failed.contains("no driver here"),
            "{failed}"
        );
        let (list, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
        let rows = list.attempts.expect("rows");
        assert_eq!(rows[0].state, "queued", "queued again: {rows:?}");
        assert!(
            !served.lane_free("three", 1),
            "the dispatcher still holds the lane"
        );
        let (cancel, _) = served.ask(serde_json::json!({"op": "cancel", "attempt": attempt}), &[]);
        assert!(cancel.ok, "{cancel:?}");
        assert!(served.lane_free("three", 200), "cancel frees the lane");
        assert!(!served.entry("three").exists(), "and removes its entry");
        served.stop().expect("stops");
    }

    #[test]
    fn the_crash_seam_stops_the_loop_where_it_is_set_and_only_there() {
        let served = Served::start(None, false, Some(CrashPoint::AfterClaimRemove));
        assert!(served.enqueue("four").ok, "no crash after an insert");
        assert!(served.stop().is_ok(), "nor after an admission");
        let served = Served::start(None, false, Some(CrashPoint::AfterInsert));
        let dir = served.site.pool.dir();
        let lease = match gate::quietly(|| {
            worklane_lease::acquire(
                dir,
                &lane_lock("five"),
                &Request::new("launcher"),
                &Options::process(),
            )
        })
        .expect("acquire")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("free: {r}"),
        };
        let guard = lease.hand_over().expect("held");
        let request = serde_json::json!({"op": "enqueue", "lane": "five", "start_ms": 1, "priority": 0, "args": ["driver"]});
        let answer = served.ask_raw(request.to_string().as_bytes(), &[guard.as_fd()]);
        gate::quietly(|| drop(guard));
        assert!(
            answer.is_err(),
            "no reply: the loop died after the insert, got {answer:?}"
        );
        let Served { stop, thread, .. } = served;
        stop.store(true, Ordering::SeqCst);
        assert!(
            thread.expect("ran").join().is_err(),
            "the loop panicked at the seam"
        );
    }

    #[test]
    fn lane_names_are_short_plain_and_not_hidden() {
        use worklane_admission::dispatch::service::valid_lane;
        for good in ["a", "build-1", "x_y.z", &"l".repeat(64)] {
            assert!(valid_lane(good), "{good:?} names a lane");
        }
        for bad in ["", ".hidden", "a/b", "a b", "ünï", &"l".repeat(65)] {
            assert!(!valid_lane(bad), "{bad:?} names no lane");
        }
    }

    /// Sends `{"op":"list"}` as uid 65534 (with `groups` as its supplementary groups) and
    /// returns the reply's error code, or "ok".
    ///
    /// A stranger is refused at once, when its connection is accepted: the refusal may close
    /// the socket before the request is sent (the send then meets EPIPE), and is read all the
    /// same.
    fn list_as_nobody(served: &Served, groups: &str) -> String {
        // A refused peer may be answered and closed before its request is sent: the send then
        // fails with EPIPE, and the refusal is still there to read.
        let script = "import socket,sys,json\n\
            s=socket.socket(socket.AF_UNIX)\n\
            s.connect(sys.argv[1])\n\
            try:\n    s.sendall(b'{\"op\":\"list\"}\\n')\n\
            except BrokenPipeError:\n    pass\n\
            r=json.loads(s.makefile().readline())\n\
            print(r.get('error') or 'ok')\n";
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534"]);
        match groups {
            "" => cmd.arg("--clear-groups"),
            some => cmd.arg(format!("--groups={some}")),
        };
        let out = cmd
            .args(["/usr/bin/python3", "-c", script])
            .arg(&served.socket)
            .output_gated()
            .expect("python3 under setpriv");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    #[test]
    fn only_root_the_owner_and_the_directory_s_group_are_served() {
        use std::os::unix::fs::PermissionsExt;
        let served = Served::start(
            Some(Trust {
                owner: 4000,
                group: 4343,
            }),
            false,
            None,
        );
        // The socket's mode keeps strangers out first; open it to test the check behind it.
        std::fs::set_permissions(
            served.site.temp.path(),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod dir");
        std::fs::set_permissions(&served.socket, std::fs::Permissions::from_mode(0o666))
            .expect("chmod socket");
        assert_eq!(
            list_as_nobody(&served, ""),
            code::PERMISSION,
            "a stranger is refused"
        );
        assert_eq!(
            list_as_nobody(&served, "17,4343"),
            "ok",
            "a member of the group is served"
        );
        let (root, _) = served.ask(serde_json::json!({"op": "list"}), &[]);
        assert!(root.ok, "root is served: {root:?}");
        served.stop().expect("stops");
    }
}

mod weights;

mod journal {
    //! Each event the pool and the dispatcher journal, from the real operation: exactly one
    //! line of its kind, with its documented fields.
    use super::dispatcher::{Bench, T0, me};
    use super::*;
    use worklane_admission::dispatch::service::{Dispatcher, Settings, lane_lock};
    use worklane_admission::dispatch::store::Store;
    use worklane_journal::{Entry, Event};
    use worklane_lease::{Acquired, Options};

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

    #[test]
    fn the_dispatcher_says_each_enqueue_admission_claim_expiry_and_cancel() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        let dir = bench.dispatcher.pool().dir().clone();
        let a = bench.enqueue("a", T0 - 5_000, 3);
        let Event::DispatchEnqueued {
            attempt,
            lane,
            priority,
            uid,
        } = one(&dir, "dispatch-enqueued")
        else {
            panic!("dispatch-enqueued");
        };
        assert_eq!(
            (attempt.as_str(), lane.as_str(), priority, uid),
            (a.as_str(), "a", 3, me().uid)
        );
        let admitted = bench.dispatcher.admit_next().expect("admit").expect("one");
        assert_eq!(
            one(&dir, "dispatch-admitted"),
            Event::DispatchAdmitted {
                attempt: a.clone(),
                lane: "a".into(),
                slot: "agent-0.lock".into(),
                waited_ms: 5_000,
            },
            "waited from its original start"
        );
        // Unclaimed past the interval: queued again.
        bench.clock.advance(60_001);
        assert_eq!(
            bench.dispatcher.expire().expect("expire"),
            std::slice::from_ref(&a)
        );
        assert_eq!(
            one(&dir, "dispatch-expired"),
            Event::DispatchExpired {
                attempt: a.clone(),
                lane: "a".into(),
                starting_ms: 60_001,
            }
        );
        let _ = admitted;
        let admitted = bench
            .dispatcher
            .admit_next()
            .expect("admit")
            .expect("again");
        bench.clock.advance(1_500);
        let claimed = bench
            .dispatcher
            .claim(&a, &admitted.token, &me())
            .expect("claim")
            .expect("claimed");
        assert_eq!(
            one(&dir, "dispatch-claimed"),
            Event::DispatchClaimed {
                attempt: a.clone(),
                lane: "a".into(),
                slot: "agent-0.lock".into(),
                admitted_ms: 1_500,
            }
        );
        drop(claimed);
        let b = bench.enqueue("b", T0, 0);
        assert!(bench.dispatcher.cancel(&b, &me()).expect("cancel").ok);
        assert_eq!(
            one(&dir, "dispatch-cancelled"),
            Event::DispatchCancelled {
                attempt: b,
                lane: "b".into(),
                state: "queued".into(),
                uid: me().uid,
            }
        );
    }

    #[test]
    fn recovery_says_which_rows_it_kept_and_which_it_dropped() {
        let _quiet = gate::quiet();
        let mut bench = Bench::new(r#"{"max_agents": 2}"#, Settings::default());
        let kept = bench.enqueue("kept", T0, 0);
        let dropped = bench.enqueue("taken", T0 + 1, 0);
        let Bench {
            site, dispatcher, ..
        } = bench;
        let pool = dispatcher.pool().clone();
        drop(dispatcher);
        let other = match worklane_lease::acquire(
            pool.dir(),
            &lane_lock("taken"),
            &Request::new("someone"),
            &Options::process(),
        )
        .expect("acquire")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("free after the dispatcher died: {r}"),
        };
        let store = Store::open(&site.temp.path().join("queue.db")).expect("store");
        let recovered = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
        let dir = recovered.pool().dir().clone();
        let mut found: Vec<(String, bool, String)> = all(&dir)
            .into_iter()
            .filter_map(|e| match e.event {
                Event::DispatchRecovered {
                    attempt,
                    lane,
                    kept,
                    why,
                } => Some((format!("{attempt} {lane}"), kept, why)),
                _ => None,
            })
            .collect();
        found.sort();
        assert_eq!(found.len(), 2, "{found:?}");
        let expected = [
            (format!("{kept} kept"), true),
            (format!("{dropped} taken"), false),
        ];
        let mut expected = expected.to_vec();
        expected.sort();
        for ((what, kept, why), (want, want_kept)) in found.iter().zip(&expected) {
            assert_eq!((what, kept), (want, want_kept), "{why}");
            assert!(!why.is_empty());
        }
        drop(other);
    }
}
