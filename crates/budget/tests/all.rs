//! The budget ledger against real files, real locks and an injected clock.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, UNIX_EPOCH};
use worklane_budget::{
    CredentialKey, Grant, Ledger, Observation, Observed, Refused, Sleep, Trouble,
};
use worklane_lease::{Acquired, Clock, ManualClock, Options, Request, acquire};
use worklane_slotfile::SlotDir;
use worklane_testkit::{Gated, gate};

/// 2025-11-30T05:20:00Z.
const T0: u64 = 1_764_480_000_000;

// The design's bounds, written out here rather than imported from the crate, so that a wrong
// constant there fails these tests instead of moving them along with it.
/// A take waits at most 10 s for calls to be left or a pause to end.
const MAX_WAIT_MS: u64 = 10_000;
/// A take waits at most 0.5 s for a busy lock.
const LOCK_PATIENCE_MS: u64 = 500;
/// A state unchanged for more than 2 h is removed.
const STALE_MS: u64 = 2 * 60 * 60 * 1000;
/// At most one sweep per process every 10 min.
const SWEEP_EVERY_MS: u64 = 10 * 60 * 1000;

/// Sleeping advances the manual clock by exactly the time asked for. A ledger never sleeps
/// more than about a hundred times in one of these tests (0.5 s of 10 ms lock polls, 10 s of
/// 1 s looks): far more means a wait that should have ended goes on, and the sleeper says so
/// at once rather than letting the test spin until real time ends it.
struct ManualSleep(ManualClock, AtomicUsize);

impl ManualSleep {
    fn new(clock: ManualClock) -> ManualSleep {
        ManualSleep(clock, AtomicUsize::new(0))
    }
}

impl Sleep for ManualSleep {
    fn sleep(&self, duration: Duration) {
        let sleeps = self.1.fetch_add(1, Ordering::Relaxed) + 1;
        assert!(
            sleeps <= 1_000,
            "the ledger slept {sleeps} times: a wait that should have ended did not"
        );
        self.0
            .advance(u64::try_from(duration.as_millis()).expect("ms"));
    }
}

/// A test's slot directory and clock. The whole test runs with the fork gate quiet: every
/// take and observe takes the budget's lock and releases it again, and on the manual clock
/// the ledger's 0.5 s of patience for a busy lock passes in no real time, so each needs the
/// lock the step before released to be free at once, never held for a moment by a copy of
/// its descriptor in a child another test is starting. The test's own processes are started
/// through the gate from its own thread, which a quiet section allows; tests of this binary
/// therefore run one at a time.
struct Site {
    temp: tempfile::TempDir,
    clock: ManualClock,
    _quiet: gate::Quiet,
}

impl Site {
    fn new() -> Site {
        Site {
            _quiet: gate::quiet(),
            temp: tempfile::tempdir().expect("temp dir"),
            clock: ManualClock::at(T0),
        }
    }

    fn dir(&self) -> SlotDir {
        SlotDir::open(self.temp.path()).expect("open slot dir")
    }

    fn ledger(&self) -> Ledger {
        Ledger::new(self.dir())
            .clock(Arc::new(self.clock.clone()))
            .sleeper(Arc::new(ManualSleep::new(self.clock.clone())))
            .owner("test")
    }

    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.temp.path().join(name)
    }

    fn state_of(&self, key: &CredentialKey, provider: &str) -> serde_json::Value {
        let bytes = std::fs::read(self.path(&key.state_name_of(provider))).expect("state file");
        serde_json::from_slice(&bytes).expect("state is JSON")
    }

    fn state(&self, key: &CredentialKey) -> serde_json::Value {
        let bytes = std::fs::read(self.path(&key.state_name())).expect("state file");
        serde_json::from_slice(&bytes).expect("state is JSON")
    }
}

fn key() -> CredentialKey {
    CredentialKey::of_token("ghp_test_token_not_real")
}

/// A 200 response with `remaining` calls left and a reset `reset_in_ms` from `now`.
fn window(now: u64, remaining: u64, reset_in_ms: u64) -> Observation {
    Observation {
        status: 200,
        resource: Some("core".to_owned()),
        window_seen: true,
        secondary_limit: false,
        limit: Some(5000),
        remaining: Some(remaining),
        reset_s: Some((now + reset_in_ms) / 1000),
        retry_after_s: None,
        retry_after_seen: false,
    }
}

fn counted(grant: &Result<Grant, Refused>) -> bool {
    matches!(grant, Ok(Grant { counted: true, .. }))
}

mod take {
    use super::*;

    #[test]
    fn takes_are_counted_in_a_0660_file_replaced_whole() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let observed = ledger.observe(&key, &window(site.now(), 3, 60_000));
        assert!(matches!(observed, Observed::Recorded), "{observed:?}");
        let file = site.path(&key.state_name());
        let first_inode = std::fs::metadata(&file).expect("state").ino();
        let grant = ledger.take(&key, "core", "backlog").expect("a call left");
        assert!(
            matches!(
                grant,
                Grant {
                    counted: true,
                    left: Some(2),
                    unaccounted: None,
                    ..
                }
            ),
            "{grant:?}"
        );
        let meta = std::fs::metadata(&file).expect("state");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o660, "mode 0660");
        assert_ne!(meta.ino(), first_inode, "replaced, never written in place");
        let state = site.state(&key);
        assert_eq!(state["resources"]["core"]["granted"], 1);
        assert_eq!(state["resources"]["core"]["byConsumer"]["backlog"], 1);
        assert!(
            !String::from_utf8_lossy(&std::fs::read(&file).expect("read"))
                .contains("ghp_test_token_not_real"),
            "the token is never stored"
        );
        assert!(
            std::fs::read_dir(site.temp.path())
                .expect("list")
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().ends_with(".lock")),
            "the budget lock is released after the take"
        );
    }

    #[test]
    fn a_spent_window_waits_10_s_then_refuses_without_the_call() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        ledger.observe(&key, &window(site.now(), 1, 60_000));
        assert!(counted(&ledger.take(&key, "core", "a")));
        let start = site.now();
        let refused = ledger.take(&key, "core", "a").expect_err("none left");
        assert_eq!(site.now() - start, MAX_WAIT_MS, "waited exactly 10 s");
        assert_eq!(refused.kind(), "rate_limited");
        assert_eq!(refused.status(), 429);
        assert!(
            matches!(
                refused,
                Refused::RateLimited {
                    waited_ms: 10_000,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("not made"), "{refused}");
        assert_eq!(
            site.state(&key)["resources"]["core"]["granted"],
            1,
            "a refused call takes nothing"
        );
    }

    #[test]
    fn a_reset_within_10_s_lets_the_waiting_call_go_exactly_then() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        // The reset is a whole second: 4 s ahead of a clock on a whole second.
        ledger.observe(&key, &window(site.now(), 0, 4_000));
        let start = site.now();
        let grant = ledger
            .take(&key, "core", "a")
            .expect("goes after the reset");
        assert_eq!(site.now() - start, 4_000, "went exactly at the reset");
        assert!(!grant.counted, "the new window is not known yet");
    }

    /// `take_within` waits its own bound, not the take's 10 s: a reset within it lets the call
    /// go exactly then (counted in the window it then finds unknown), a reset beyond it is
    /// refused once the bound is over, saying how long it waited, and the call is not made.
    #[test]
    fn a_take_within_a_bound_waits_for_a_reset_inside_it_and_refuses_one_beyond() {
        for (reset_in_ms, bound_ms, goes) in [
            (4_000, 5_000, true),
            (5_000, 5_000, true),
            (30_000, 20_000, false),
            (6_000, 2_500, false),
        ] {
            let site = Site::new();
            let ledger = site.ledger();
            let key = key();
            ledger.observe(&key, &window(site.now(), 0, reset_in_ms));
            let start = site.now();
            let taken = ledger.take_within(&key, "core", "a", Duration::from_millis(bound_ms));
            let waited = site.now() - start;
            if goes {
                assert!(
                    matches!(taken, Ok(Grant { counted: false, .. })),
                    "a reset in {reset_in_ms} ms within {bound_ms} ms: goes: {taken:?}"
                );
                assert_eq!(waited, reset_in_ms, "went exactly at the reset");
            } else {
                match taken {
                    Err(Refused::RateLimited {
                        resource,
                        reset_at,
                        waited_ms,
                    }) => {
                        assert_eq!(resource, "core");
                        assert_eq!(reset_at, start + reset_in_ms, "the reset named");
                        assert_eq!(waited_ms, bound_ms, "the whole bound waited");
                    }
                    other => panic!("a reset in {reset_in_ms} ms beyond {bound_ms} ms: {other:?}"),
                }
                assert_eq!(waited, bound_ms, "refused exactly at the bound");
                assert_eq!(
                    site.state(&key)["resources"]["core"]["granted"],
                    0,
                    "a refused call takes nothing"
                );
            }
        }
    }

    /// A ledger's clock whose `at`-th reading (from 1) first runs `race`: another process
    /// acting at exactly that point of the ledger's work.
    struct Raced {
        clock: ManualClock,
        reads: AtomicUsize,
        at: usize,
        race: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
    }

    impl Clock for Raced {
        fn now_ms(&self) -> u64 {
            if self.reads.fetch_add(1, Ordering::SeqCst) + 1 == self.at
                && let Some(race) = self.race.lock().expect("race").take()
            {
                race();
            }
            self.clock.now_ms()
        }
    }

    /// `take_within` found a call free, but another process took the last one before its
    /// take did: the take waits its own 10 s and is refused, and `take_within` goes on
    /// waiting within its bound (20 s) for the reset (15 s), then goes.
    #[test]
    fn a_take_within_that_another_process_beat_waits_on_within_its_bound() {
        let site = Site::new();
        let key = key();
        let (dir, other_clock, other_key) = (site.dir(), site.clock.clone(), key.clone());
        let start = site.now();
        let race: Box<dyn FnOnce() + Send> = Box::new(move || {
            let other = Ledger::new(dir).clock(Arc::new(other_clock)).owner("other");
            // The other process's call took the last one: none left until the reset.
            let spent = window(start, 0, 15_000);
            assert!(matches!(
                other.observe(&other_key, &spent),
                Observed::Recorded
            ));
        });
        // Readings: take_within's start, its first look's time, the peek's now, then the
        // take's own (its sweep's): the race comes between the peek and the take.
        let ledger = Ledger::new(site.dir())
            .clock(Arc::new(Raced {
                clock: site.clock.clone(),
                reads: AtomicUsize::new(0),
                at: 4,
                race: std::sync::Mutex::new(Some(race)),
            }))
            .sleeper(Arc::new(ManualSleep::new(site.clock.clone())))
            .owner("test");
        let taken = ledger.take_within(&key, "core", "a", Duration::from_millis(20_000));
        assert!(
            matches!(taken, Ok(Grant { counted: false, .. })),
            "goes at the reset, within the bound: {taken:?}"
        );
        assert_eq!(site.now() - start, 15_000, "went exactly at the reset");
        assert!(
            site.path(&key.state_name()).exists(),
            "the other process's take was recorded"
        );
    }

    /// `take_within` refuses a paused credential after its bound, naming the pause's end.
    #[test]
    fn a_take_within_a_bound_refuses_a_pause_beyond_it() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let now = site.now();
        let paused = Observation {
            status: 403,
            secondary_limit: true,
            retry_after_s: Some(60),
            retry_after_seen: true,
            ..window(now, 10, 60_000)
        };
        ledger.observe(&key, &paused);
        let taken = ledger.take_within(&key, "core", "a", Duration::from_millis(2_000));
        match taken {
            Err(Refused::SecondaryRateLimited { until, waited_ms }) => {
                assert_eq!(until, now + 60_000, "the pause's end");
                assert_eq!(waited_ms, 2_000);
            }
            other => panic!("refused for the pause: {other:?}"),
        }
        assert_eq!(site.now() - now, 2_000, "waited its bound");
    }

    #[test]
    fn a_spent_window_resetting_by_the_10_s_mark_goes_then_and_one_second_later_refuses() {
        for (reset_in_ms, goes) in [(9_000, true), (10_000, true), (11_000, false)] {
            let site = Site::new();
            let ledger = site.ledger();
            let key = key();
            // The reset is a whole second: the clock is on one.
            ledger.observe(&key, &window(site.now(), 0, reset_in_ms));
            let start = site.now();
            let taken = ledger.take(&key, "core", "a");
            if goes {
                assert!(
                    matches!(
                        taken,
                        Ok(Grant {
                            counted: false,
                            left: None,
                            unaccounted: None,
                            ..
                        })
                    ),
                    "a reset {reset_in_ms} ms ahead: the call goes, the new window not known yet: \
                     {taken:?}"
                );
                assert_eq!(
                    site.now() - start,
                    reset_in_ms,
                    "a reset {reset_in_ms} ms ahead: went exactly at the reset"
                );
            } else {
                assert!(taken.is_err(), "a reset {reset_in_ms} ms ahead: {taken:?}");
                assert_eq!(
                    taken.err(),
                    Some(Refused::RateLimited {
                        resource: "core".to_owned(),
                        reset_at: start + reset_in_ms,
                        waited_ms: 10_000
                    }),
                    "a reset {reset_in_ms} ms ahead: refused after 10 s"
                );
                assert_eq!(site.now() - start, 10_000, "waited exactly 10 s");
            }
        }
    }

    #[test]
    fn refusals_and_troubles_say_what_a_person_needs() {
        let spent = Refused::RateLimited {
            resource: "graphql".to_owned(),
            reset_at: T0 + 61_500,
            waited_ms: 10_000,
        };
        assert_eq!(
            spent.to_string(),
            "rate_limited (429): no graphql calls are left for this credential until \
             2025-11-30T05:21:01.500Z (waited 10000 ms); the call was not made: retry after the \
             reset",
            "a spent window's refusal"
        );
        assert_eq!(
            (spent.kind(), spent.status()),
            ("rate_limited", 429),
            "its kind and status"
        );
        let paused = Refused::SecondaryRateLimited {
            until: T0 + 60_000,
            waited_ms: 10_000,
        };
        assert_eq!(
            paused.to_string(),
            "secondary_rate_limited (429): every call on this credential is paused until \
             2025-11-30T05:21:00.000Z after a secondary rate limit (waited 10000 ms); the call \
             was not made: retry after the pause",
            "a pause's refusal"
        );
        assert_eq!(
            (paused.kind(), paused.status()),
            ("secondary_rate_limited", 429),
            "its kind and status"
        );
        let lock = key().lock_name();
        let temp = tempfile::tempdir().expect("temp dir");
        let refused_name = worklane_slotfile::SlotDir::open(temp.path())
            .expect("open")
            .file("a/b.json")
            .expect_err("not one path component");
        let refused_text = refused_name.to_string();
        for (trouble, text, cause) in [
            (
                Trouble::LockBusy {
                    lock: lock.clone(),
                    waited_ms: 500,
                    refusal: Box::new(worklane_lease::Refusal {
                        resource: lock.clone(),
                        holder: None,
                        why: worklane_lease::LiveWhy::GuardHeld,
                    }),
                },
                format!(
                    "the budget lock {lock} stayed busy for 500 ms: {lock} is held: a live \
                     process holds its kernel guard"
                ),
                None,
            ),
            (
                Trouble::Lock {
                    lock: lock.clone(),
                    source: Box::new(worklane_lease::acquire::Error::ReservedField {
                        field: "pid".to_owned(),
                    }),
                },
                format!("cannot take the budget lock {lock}"),
                Some(
                    "the lease request sets `pid`, which worklane writes itself; rename the field"
                        .to_owned(),
                ),
            ),
            (
                Trouble::NotWritten {
                    what: "response",
                    source: worklane_slotfile::write::Error {
                        op: "write",
                        path: "/slots/state.json".into(),
                        source: std::io::Error::other("EROFS"),
                    },
                },
                "cannot record the response".to_owned(),
                Some("cannot write /slots/state.json".to_owned()),
            ),
            (
                Trouble::Name {
                    name: "a/b.json".to_owned(),
                    source: refused_name,
                },
                "cannot name the budget state a/b.json".to_owned(),
                Some(refused_text),
            ),
        ] {
            assert_eq!(trouble.to_string(), text, "{trouble:?}");
            assert_eq!(
                std::error::Error::source(&trouble).map(ToString::to_string),
                cause,
                "its cause is its source, not part of its message: {trouble:?}"
            );
        }
    }

    #[test]
    fn a_ledger_shows_its_directory_and_owner() {
        let site = Site::new();
        let shown = format!("{:?}", site.ledger());
        assert!(
            shown.starts_with("Ledger {")
                && shown.contains(&format!("{:?}", site.temp.path()))
                && shown.contains("owner: \"test\""),
            "Debug names the directory and the owner: {shown}"
        );
    }

    #[test]
    fn a_window_seen_by_another_process_ends_the_wait() {
        let site = Site::new();
        let key = key();
        site.ledger().observe(&key, &window(site.now(), 0, 60_000));
        // The clock's sleeper lets "another process" observe a fresh window mid-wait.
        struct Refill(ManualClock, SlotDir, CredentialKey, ManualClock);
        impl Sleep for Refill {
            fn sleep(&self, duration: Duration) {
                self.0
                    .advance(u64::try_from(duration.as_millis()).expect("ms"));
                let other = Ledger::new(self.1.clone()).clock(Arc::new(self.3.clone()));
                other.observe(&self.2, &window(self.3.now_ms(), 10, 60_000));
            }
        }
        let ledger = Ledger::new(site.dir())
            .clock(Arc::new(site.clock.clone()))
            .sleeper(Arc::new(Refill(
                site.clock.clone(),
                site.dir(),
                key.clone(),
                site.clock.clone(),
            )));
        let start = site.now();
        let grant = ledger.take(&key, "core", "a").expect("refilled");
        assert!(grant.counted);
        assert_eq!(grant.left, Some(9));
        assert_eq!(site.now() - start, 1_000, "noticed at the first look again");
    }

    #[test]
    fn an_unknown_resource_or_no_state_lets_the_call_go() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let grant = ledger.take(&key, "core", "a").expect("no state at all");
        assert!(
            matches!(
                grant,
                Grant {
                    counted: false,
                    left: None,
                    unaccounted: None,
                    ..
                }
            ),
            "{grant:?}"
        );
        ledger.observe(&key, &window(site.now(), 0, 60_000));
        let start = site.now();
        assert!(
            ledger.take(&key, "graphql", "a").is_ok(),
            "graphql is not known: the spent core window does not hold it"
        );
        assert_eq!(site.now(), start, "without waiting");
    }

    #[test]
    fn a_state_that_is_not_json_starts_afresh() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        std::fs::write(site.path(&key.state_name()), b"\0garbage{").expect("garbage");
        assert!(ledger.take(&key, "core", "a").is_ok(), "the call goes");
        let observed = ledger.observe(&key, &window(site.now(), 5, 60_000));
        assert!(matches!(observed, Observed::Recorded), "{observed:?}");
        assert_eq!(site.state(&key)["resources"]["core"]["remaining"], 5);
    }

    #[test]
    fn a_response_that_cannot_be_recorded_is_skipped() {
        // A directory at the state's name: no file can be renamed over it. (A take's unwritable
        // state is tested with a real unprivileged taker below.)
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        std::fs::create_dir(site.path(&key.state_name())).expect("mkdir");
        let observed = ledger.observe(&key, &window(site.now(), 5, 60_000));
        assert!(
            matches!(&observed, Observed::Skipped(why) if why.to_string().contains("cannot record")),
            "{observed:?}"
        );
    }

    #[test]
    fn a_taker_that_may_not_replace_the_state_lets_the_call_go_and_says_why() {
        // Another user's state file in a sticky directory of the taker's group: the unprivileged
        // taker can read it, lock and make temp files, but not rename over the file.
        let site = Site::new();
        let key = super::key();
        assert!(
            rustix::process::geteuid().is_root(),
            "this test drops to an unprivileged user with setpriv, so it runs as root"
        );
        // Written by root without its lock, so the taker makes the lock's files itself;
        // readable by the taker whatever root's umask.
        let mut state = worklane_budget::State::default();
        state.apply(&window(now_ms(), 5, 3_600_000), now_ms());
        let file = site.path(&key.state_name());
        std::fs::write(&file, state.to_bytes(now_ms())).expect("state");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        std::os::unix::fs::chown(site.temp.path(), None, Some(65_534)).expect("chgrp");
        std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o1770))
            .expect("chmod");
        open_path_to(site.temp.path());
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_budget-taker"))
            .arg(site.temp.path())
            .args(["ghp_test_token_not_real", "core", "nobody"])
            .output_gated()
            .expect("run setpriv");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{said} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            said.starts_with("unaccounted cannot record the call"),
            "the call goes, unaccounted, with the reason: {said}"
        );
        assert_eq!(site.state(&key)["resources"]["core"]["granted"], 0);
    }
}

/// A member of the slot directory's group that cannot read the state (written by a process
/// whose files took its own primary group, as before the directory was setgid) is told so:
/// its take goes unaccounted with the reason, never silently "go", and its observation leaves
/// the state exactly as it was.
mod unreadable {
    use super::*;

    const SHARED: u32 = 23_456;

    fn as_member(args: &[&str]) -> String {
        let out = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=12345",
                &format!("--groups={SHARED}"),
            ])
            .arg(env!("CARGO_BIN_EXE_budget-taker"))
            .args(args)
            .output_gated()
            .expect("run setpriv");
        let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            out.status.success(),
            "{said} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        said
    }

    #[test]
    fn a_state_a_member_cannot_read_is_unaccounted_and_never_replaced() {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test drops to an unprivileged member with setpriv, so it runs as root"
        );
        let site = Site::new();
        let dir = site.temp.path();
        std::os::unix::fs::chown(dir, None, Some(SHARED)).expect("chgrp");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
        open_path_to(dir);
        let key = super::key();
        // A spent window, recorded by root, whose file kept root's group.
        let mut state = worklane_budget::State::default();
        state.apply(&window(now_ms(), 0, 3_600_000), now_ms());
        let file = site.path(&key.state_name());
        std::fs::write(&file, state.to_bytes(now_ms())).expect("state");
        std::os::unix::fs::chown(&file, None, Some(0)).expect("chgrp");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o660)).expect("chmod");
        let before = std::fs::read(&file).expect("read");
        let inode = std::fs::metadata(&file).expect("stat").ino();

        let token = "ghp_test_token_not_real";
        let said = as_member(&[path_str(dir), token, "core", "member"]);
        assert!(
            said.starts_with("unaccounted the budget state exists but this process cannot read it"),
            "the call goes, unaccounted, saying why (never a silent go): {said}"
        );
        assert!(said.contains("Permission denied"), "the cause: {said}");
        let reset_s = ((now_ms() + 3_600_000) / 1000).to_string();
        let said = as_member(&["observe", path_str(dir), token, "4999", &reset_s]);
        assert!(
            said.starts_with("skipped the budget state exists but this process cannot read it"),
            "the observation is skipped: {said}"
        );
        assert_eq!(std::fs::read(&file).expect("read"), before, "not replaced");
        let meta = std::fs::metadata(&file).expect("stat");
        assert_eq!(meta.ino(), inode, "the same file");

        // Once it has the directory's group, the member counts against it again.
        std::os::unix::fs::chown(&file, None, Some(SHARED)).expect("chgrp");
        let next_s = ((now_ms() + 1_800_000) / 1000).to_string();
        let said = as_member(&["observe", path_str(dir), token, "3", &next_s]);
        assert_eq!(said, "recorded");
        let said = as_member(&[path_str(dir), token, "core", "member"]);
        assert_eq!(said, "counted 2", "the member's take is counted");
        let meta = std::fs::metadata(&file).expect("stat");
        assert_eq!(meta.gid(), SHARED, "the replaced state keeps the group");
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// The system clock's now.
fn now_ms() -> u64 {
    worklane_lease::SystemClock.now_ms()
}

/// Lets an unprivileged user reach `path` (each ancestor gets o+x).
fn open_path_to(path: &Path) {
    for dir in path.ancestors().skip(1) {
        if let Ok(meta) = std::fs::metadata(dir) {
            let mode = meta.permissions().mode();
            if mode & 0o001 == 0 {
                let _ =
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o001));
            }
        }
    }
}

/// Holds the budget's lock as another holder would.
fn hold_lock(site: &Site, key: &CredentialKey) -> worklane_lease::Lease {
    match acquire(
        &site.dir(),
        &key.lock_name(),
        &Request::new("holder"),
        &Options::process(),
    )
    .expect("acquire")
    {
        Acquired::Held(lease) => lease,
        Acquired::Refused(r) => panic!("refused: {r}"),
    }
}

mod peek {
    use super::*;
    use worklane_budget::{Peek, WaitWhy};

    #[test]
    fn a_peek_answers_as_a_take_would_without_taking_waiting_or_locking() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let peek = ledger.peek(&key, "core");
        assert!(
            matches!(peek, Peek::Go { left: None }),
            "no state: {peek:?}"
        );
        ledger.observe(&key, &window(site.now(), 2, 60_000));
        let held = hold_lock(&site, &key);
        let before = std::fs::read(site.path(&key.state_name())).expect("state");
        let start = site.now();
        let peek = ledger.peek(&key, "core");
        assert!(matches!(peek, Peek::Go { left: Some(2) }), "{peek:?}");
        assert_eq!(site.now(), start, "no wait for the held lock");
        assert_eq!(
            std::fs::read(site.path(&key.state_name())).expect("state"),
            before,
            "nothing taken"
        );
        drop(held);
        assert!(counted(&ledger.take(&key, "core", "a")));
        assert!(counted(&ledger.take(&key, "core", "a")));
        let peek = ledger.peek(&key, "core");
        assert!(
            matches!(
                peek,
                Peek::Wait {
                    until,
                    why: WaitWhy::Spent
                } if until == T0 + 60_000
            ),
            "{peek:?}"
        );
    }
}

mod pause {
    use super::*;

    fn secondary(retry_after_s: Option<u64>) -> Observation {
        Observation {
            status: 429,
            resource: None,
            window_seen: false,
            secondary_limit: false,
            limit: None,
            remaining: None,
            reset_s: None,
            retry_after_seen: retry_after_s.is_some(),
            retry_after_s,
        }
    }

    #[test]
    fn a_pause_ending_exactly_at_the_10_s_deadline_lets_the_call_go() {
        let site = Site::new();
        let key = key();
        site.ledger().observe(&key, &secondary(Some(10)));
        let start = site.now();
        assert!(site.ledger().take(&key, "core", "a").is_ok());
        assert_eq!(site.now() - start, MAX_WAIT_MS);
    }

    #[test]
    fn a_pause_ending_by_the_10_s_mark_lets_the_call_go_and_one_second_later_refuses() {
        for (pause_s, goes) in [(9, true), (10, true), (11, false)] {
            let site = Site::new();
            let key = key();
            site.ledger().observe(&key, &secondary(Some(pause_s)));
            let start = site.now();
            let taken = site.ledger().take(&key, "core", "a");
            if goes {
                assert!(
                    taken.is_ok(),
                    "a {pause_s} s pause: the call goes: {taken:?}"
                );
                assert_eq!(
                    site.now() - start,
                    pause_s * 1000,
                    "a {pause_s} s pause: went exactly at its end"
                );
            } else {
                assert!(taken.is_err(), "a {pause_s} s pause: {taken:?}");
                assert_eq!(
                    taken.err(),
                    Some(Refused::SecondaryRateLimited {
                        until: start + pause_s * 1000,
                        waited_ms: 10_000
                    }),
                    "a {pause_s} s pause: refused after 10 s"
                );
                assert_eq!(site.now() - start, 10_000, "waited exactly 10 s");
            }
        }
    }

    #[test]
    fn a_forbidden_call_does_not_pause_the_credential() {
        let site = Site::new();
        let key = key();
        let mut forbidden = window(site.now(), 4321, 60_000);
        forbidden.status = 403;
        site.ledger().observe(&key, &forbidden);
        let start = site.now();
        assert!(counted(&site.ledger().take(&key, "core", "a")));
        assert_eq!(
            site.now(),
            start,
            "no pause: a 403 with calls left and no Retry-After"
        );
        site.ledger()
            .observe(&key, &forbidden.clone().with_secondary_limit(true));
        let refused = site.ledger().take(&key, "core", "a").expect_err("paused");
        assert_eq!(refused.kind(), "secondary_rate_limited", "the body said so");
    }

    #[test]
    fn a_secondary_limit_pauses_every_caller_until_retry_after() {
        let site = Site::new();
        let key = key();
        site.ledger().observe(&key, &secondary(Some(5)));
        let start = site.now();
        assert!(site.ledger().take(&key, "graphql", "a").is_ok());
        assert_eq!(site.now() - start, 5_000, "waited out the pause, exactly");
    }

    #[test]
    fn a_pause_beyond_10_s_refuses_as_secondary_rate_limited() {
        let site = Site::new();
        let key = key();
        site.ledger().observe(&key, &secondary(None));
        let start = site.now();
        let refused = site.ledger().take(&key, "core", "a").expect_err("paused");
        assert_eq!(refused.kind(), "secondary_rate_limited");
        assert_eq!(
            refused,
            Refused::SecondaryRateLimited {
                until: start + 60_000,
                waited_ms: 10_000
            },
            "the default pause is one minute"
        );
    }

    #[test]
    fn a_pause_written_further_ahead_than_15_minutes_is_not_known() {
        let site = Site::new();
        let key = key();
        let file = site.path(&key.state_name());
        let far = site.now() + 24 * 3_600_000;
        std::fs::write(
            &file,
            format!(r#"{{"pausedUntil": {far}, "resources": {{}}}}"#),
        )
        .expect("write");
        let start = site.now();
        assert!(
            site.ledger().take(&key, "core", "a").is_ok(),
            "no writer pauses more than 15 min: the call goes"
        );
        assert_eq!(site.now(), start, "at once");
    }
}

mod lock {
    use super::*;

    #[test]
    fn a_lock_busy_for_half_a_second_lets_the_call_go_unaccounted() {
        let site = Site::new();
        let key = key();
        site.ledger().observe(&key, &window(site.now(), 5, 60_000));
        let held = hold_lock(&site, &key);
        let start = site.now();
        let grant = site.ledger().take(&key, "core", "a").expect("goes");
        assert_eq!(site.now() - start, LOCK_PATIENCE_MS, "waited exactly 0.5 s");
        assert!(!grant.counted);
        let why = grant.unaccounted.expect("says why");
        let Trouble::LockBusy { refusal, .. } = &why else {
            panic!("the lock was busy: {why:?}")
        };
        let holder = refusal
            .holder
            .as_ref()
            .expect("the holder's record was read");
        assert_eq!(
            (holder.pid(), holder.owner.as_deref()),
            (Some(std::process::id()), Some("holder")),
            "the holder, typed: {why}"
        );
        assert_eq!(
            refusal.why,
            worklane_lease::LiveWhy::GuardHeld,
            "and why it counts as live: {why}"
        );
        assert!(why.to_string().contains("busy"), "{why}");
        assert_eq!(site.state(&key)["resources"]["core"]["granted"], 0);
        // An observation tries once and never waits.
        let start = site.now();
        let observed = site.ledger().observe(&key, &window(site.now(), 1, 60_000));
        assert!(matches!(observed, Observed::Skipped(_)), "{observed:?}");
        assert_eq!(site.now(), start, "no wait");
        held.release().expect("release");
        assert!(counted(&site.ledger().take(&key, "core", "a")));
    }

    /// Advances the clock like [`ManualSleep`], and releases a held lock once the clock
    /// reaches `free_at`, as its holder finishing would.
    pub(super) struct FreeAt {
        pub(super) clock: ManualClock,
        pub(super) free_at: u64,
        pub(super) held: std::sync::Mutex<Option<worklane_lease::Lease>>,
    }

    impl Sleep for FreeAt {
        fn sleep(&self, duration: Duration) {
            self.clock
                .advance(u64::try_from(duration.as_millis()).expect("ms"));
            if self.clock.now_ms() >= self.free_at
                && let Some(lease) = self.held.lock().expect("not poisoned").take()
            {
                lease.release().expect("release");
            }
        }
    }

    #[test]
    fn a_lock_freed_by_the_half_second_mark_is_taken_and_later_is_not() {
        for (free_in_ms, taken) in [(490, true), (500, true), (510, false)] {
            let site = Site::new();
            let key = key();
            site.ledger().observe(&key, &window(site.now(), 5, 60_000));
            let start = site.now();
            let sleeper = FreeAt {
                clock: site.clock.clone(),
                free_at: start + free_in_ms,
                held: std::sync::Mutex::new(Some(hold_lock(&site, &key))),
            };
            let ledger = Ledger::new(site.dir())
                .clock(Arc::new(site.clock.clone()))
                .sleeper(Arc::new(sleeper));
            let grant = ledger.take(&key, "core", "a").expect("goes");
            if taken {
                assert!(
                    matches!(
                        grant,
                        Grant {
                            counted: true,
                            left: Some(4),
                            unaccounted: None,
                            ..
                        }
                    ),
                    "a lock freed {free_in_ms} ms into the wait is taken and the call counted: \
                     {grant:?}"
                );
                assert_eq!(site.now() - start, free_in_ms, "taken when it was freed");
            } else {
                assert!(
                    matches!(
                        &grant.unaccounted,
                        Some(Trouble::LockBusy { waited_ms: 500, .. })
                    ),
                    "a lock still busy after 0.5 s: the call goes unaccounted: {grant:?}"
                );
                assert_eq!(site.now() - start, 500, "after exactly 0.5 s");
            }
        }
    }

    /// Really sleeps, and fails the test past `cap` sleeps: a wait the real clock should have
    /// ended went on.
    struct CappedRealSleep {
        cap: usize,
        sleeps: AtomicUsize,
    }

    impl Sleep for CappedRealSleep {
        fn sleep(&self, duration: Duration) {
            let sleeps = self.sleeps.fetch_add(1, Ordering::Relaxed) + 1;
            assert!(
                sleeps <= self.cap,
                "slept {sleeps} times ({duration:?} each) and still waiting for the lock"
            );
            worklane_budget::RealSleep.sleep(duration);
        }
    }

    #[test]
    fn a_clock_that_stands_still_cannot_stretch_the_lock_patience() {
        let site = Site::new();
        let key = key();
        site.ledger().observe(&key, &window(site.now(), 5, 60_000));
        let held = hold_lock(&site, &key);
        // The manual clock never moves here; 0.5 s of monotonic time ends the patience. Each
        // real sleep is at least 10 ms, so 50 looks span it; 200 would be 2 s.
        let ledger = Ledger::new(site.dir())
            .clock(Arc::new(site.clock.clone()))
            .sleeper(Arc::new(CappedRealSleep {
                cap: 200,
                sleeps: AtomicUsize::new(0),
            }));
        let grant = ledger.take(&key, "core", "a").expect("goes");
        assert!(
            matches!(
                &grant.unaccounted,
                Some(Trouble::LockBusy { waited_ms: 500, .. })
            ),
            "the call goes unaccounted after 0.5 s of monotonic time: {grant:?}"
        );
        assert_eq!(site.now(), T0, "the clock stood still throughout");
        held.release().expect("release");
    }

    #[test]
    fn a_dead_holders_lock_is_recovered_and_a_legacy_one_stays_busy() {
        let site = Site::new();
        let key = key();
        site.ledger().observe(&key, &window(site.now(), 5, 60_000));
        // A record in the lock's exact format, but of a process that has exited.
        let held = hold_lock(&site, &key);
        let ours = std::fs::read(site.path(&key.lock_name())).expect("record");
        held.release().expect("release");
        let mut dead = std::process::Command::new("true")
            .spawn_gated()
            .expect("spawn");
        let dead_pid = dead.id();
        dead.wait().expect("reap");
        let mut record: serde_json::Value = serde_json::from_slice(&ours).expect("json");
        record["pid"] = dead_pid.into();
        record["identity"]["start"] = 1.into();
        std::fs::write(
            site.path(&key.lock_name()),
            serde_json::to_vec(&record).expect("json"),
        )
        .expect("plant");
        let start = site.now();
        assert!(
            counted(&site.ledger().take(&key, "core", "a")),
            "a known-dead owner is recovered at once"
        );
        assert_eq!(site.now(), start);

        std::fs::write(
            site.path(&key.lock_name()),
            br#"{"pid": 1, "owner": "old"}"#,
        )
        .expect("legacy");
        let grant = site.ledger().take(&key, "core", "a").expect("goes");
        assert!(!grant.counted, "a legacy record stays busy: unaccounted");
        assert_eq!(site.now() - start, LOCK_PATIENCE_MS);
        assert!(
            site.path(&key.lock_name()).exists(),
            "and is left for an operator"
        );
    }

    #[test]
    fn concurrent_taker_processes_never_lose_a_count() {
        let site = Site::new();
        let key = key();
        Ledger::new(site.dir()).observe(&key, &window(now_ms(), 1_000, 3_600_000));
        let takers: Vec<_> = (0..6)
            .map(|i| {
                std::process::Command::new(env!("CARGO_BIN_EXE_budget-taker"))
                    .arg(site.temp.path())
                    .args(["ghp_test_token_not_real", "core", &format!("w{i}"), "30"])
                    .stdout(std::process::Stdio::piped())
                    .spawn_gated()
                    .expect("spawn taker")
            })
            .collect();
        let mut counted_total = 0u64;
        for taker in takers {
            let out = taker.wait_with_output().expect("taker");
            assert!(out.status.success());
            let said = String::from_utf8_lossy(&out.stdout).into_owned();
            assert_eq!(said.lines().count(), 30, "{said}");
            counted_total +=
                u64::try_from(said.lines().filter(|l| l.starts_with("counted ")).count())
                    .expect("count");
        }
        let state = site.state(&key);
        assert_eq!(
            state["resources"]["core"]["granted"], counted_total,
            "every counted grant is in the file, exactly once"
        );
        assert!(counted_total > 0, "some takes were counted");
        let by_consumer: u64 = state["resources"]["core"]["byConsumer"]
            .as_object()
            .expect("byConsumer")
            .values()
            .map(|v| v.as_u64().expect("count"))
            .sum();
        assert_eq!(by_consumer, counted_total, "and in its consumer's count");
    }

    #[test]
    fn a_sigkilled_holder_of_the_lock_is_recovered_at_once() {
        let site = Site::new();
        let key = key();
        site.ledger().observe(&key, &window(site.now(), 5, 60_000));
        // A real process holds the lock (a shell holding a lease through worklane would do;
        // here the lock record is published by our own acquire, then rewritten to name a
        // child that is then SIGKILLed, with the guard free as the kernel leaves it).
        let held = hold_lock(&site, &key);
        let ours = std::fs::read(site.path(&key.lock_name())).expect("record");
        held.release().expect("release");
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .stdin(std::process::Stdio::null())
            .spawn_gated()
            .expect("spawn");
        let pid = child.id();
        let start_ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .expect("stat")
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(19).map(str::to_owned))
            .expect("field 22");
        let mut record: serde_json::Value = serde_json::from_slice(&ours).expect("json");
        record["pid"] = pid.into();
        record["identity"]["start"] = start_ticks.parse::<u64>().expect("ticks").into();
        // A record without the guard-held declaration (another writer's): judged by identity.
        record
            .as_object_mut()
            .expect("an object")
            .remove("holdsGuard");
        std::fs::write(
            site.path(&key.lock_name()),
            serde_json::to_vec(&record).expect("json"),
        )
        .expect("plant");
        let grant = site.ledger().take(&key, "core", "a").expect("goes");
        assert!(!grant.counted, "a live holder keeps the lock: unaccounted");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        let start = site.now();
        assert!(
            counted(&site.ledger().take(&key, "core", "a")),
            "a SIGKILLed owner is recovered automatically"
        );
        assert_eq!(site.now(), start, "at once");
    }
}

mod sweep {
    use super::*;

    pub(super) fn set_mtime(path: &Path, ms: u64) {
        std::fs::File::options()
            .write(true)
            .open(path)
            .expect("open")
            .set_modified(UNIX_EPOCH + Duration::from_millis(ms))
            .expect("set mtime");
    }

    #[test]
    fn a_state_unchanged_for_more_than_2_h_is_removed_by_the_next_take() {
        let site = Site::new();
        let ledger = site.ledger();
        let old = CredentialKey::of_token("an hourly token of an hour ago");
        ledger.observe(&old, &window(site.now(), 5, 60_000));
        let file = site.path(&old.state_name());
        set_mtime(&file, T0);
        site.clock.set(T0 + STALE_MS - 1);
        assert_eq!(
            ledger.remove_stale().expect("sweep"),
            0,
            "one ms under 2 h: kept"
        );
        site.clock.set(T0 + STALE_MS);
        assert_eq!(
            ledger.remove_stale().expect("sweep"),
            0,
            "exactly 2 h: kept"
        );
        assert!(file.exists());
        site.clock.set(T0 + STALE_MS + 1);
        assert_eq!(
            ledger.remove_stale().expect("sweep"),
            1,
            "just over 2 h: removed"
        );
        assert!(!file.exists());

        // Through take, at most every 10 min per process. The sweep time is process-wide, so
        // this part runs a month after the other tests' clocks.
        let base = T0 + 30 * 86_400_000;
        site.clock.set(base);
        let ledger = site.ledger();
        let stale = |name: &str| {
            let key = CredentialKey::of_token(name);
            ledger.observe(&key, &window(site.now(), 5, 60_000));
            set_mtime(&site.path(&key.state_name()), T0);
            site.path(&key.state_name())
        };
        let first = stale("first");
        let sweep_at = site.now();
        let _ = ledger.take(&key(), "core", "a");
        assert!(!first.exists(), "the first take sweeps");
        let second = stale("second");
        site.clock.set(sweep_at + SWEEP_EVERY_MS - 1);
        let _ = ledger.take(&key(), "core", "a");
        assert!(second.exists(), "not again within 10 min");
        site.clock.set(sweep_at + SWEEP_EVERY_MS);
        let _ = ledger.take(&key(), "core", "a");
        assert!(!second.exists(), "again after 10 min");
    }

    #[test]
    fn the_sweep_interval_is_per_process_not_per_ledger() {
        let site = Site::new();
        let base = T0 + 60 * 86_400_000;
        site.clock.set(base);
        let _ = site.ledger().take(&key(), "core", "a");
        let stale = CredentialKey::of_token("stale");
        site.ledger()
            .observe(&stale, &window(site.now(), 5, 60_000));
        set_mtime(&site.path(&stale.state_name()), T0);
        site.clock.set(base + 1);
        let _ = site.ledger().take(&key(), "core", "a");
        assert!(
            site.path(&stale.state_name()).exists(),
            "a second ledger in the same process does not sweep again within 10 min"
        );
    }

    #[test]
    fn a_busy_budget_is_not_swept() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        ledger.observe(&key, &window(site.now(), 5, 60_000));
        set_mtime(&site.path(&key.state_name()), T0);
        site.clock.set(T0 + STALE_MS + 1);
        let held = hold_lock(&site, &key);
        assert_eq!(ledger.remove_stale().expect("sweep"), 0);
        assert!(site.path(&key.state_name()).exists());
        drop(held);
        assert_eq!(ledger.remove_stale().expect("sweep"), 1);
    }
}

mod health {
    use super::sweep::set_mtime;
    use super::*;

    #[test]
    fn the_eight_newest_readable_states_are_shown_numbered_never_by_key() {
        let site = Site::new();
        let ledger = site.ledger();
        let mut keys = Vec::new();
        for i in 0..11u64 {
            let key = CredentialKey::of_token(&format!("token {i}"));
            ledger.observe(&key, &window(site.now(), 100 + i, 60_000));
            let file = site.path(&key.state_name());
            std::fs::File::options()
                .write(true)
                .open(&file)
                .expect("open")
                .set_modified(UNIX_EPOCH + Duration::from_millis(T0 + i * 1000))
                .expect("mtime");
            keys.push(key);
        }
        // The two newest are unreadable: garbage, and a valid state larger than 64 KiB.
        std::fs::write(site.path(&keys[10].state_name()), b"not json").expect("garbage");
        let padded = format!(
            r#"{{"resources": {{}}, "pad": "{}"}}"#,
            "x".repeat(64 * 1024)
        );
        std::fs::write(site.path(&keys[9].state_name()), padded).expect("big");
        for k in [&keys[10], &keys[9]] {
            std::fs::File::options()
                .write(true)
                .open(site.path(&k.state_name()))
                .expect("open")
                .set_modified(UNIX_EPOCH + Duration::from_millis(T0 + 60_000))
                .expect("mtime");
        }
        let views = ledger.health().expect("health");
        assert_eq!(views.len(), 8, "at most 8");
        let numbers: Vec<usize> = views.iter().map(|v| v.number).collect();
        assert_eq!(numbers, (1..=8).collect::<Vec<_>>());
        let remaining: Vec<u64> = views.iter().map(|v| v.resources[0].remaining).collect();
        assert_eq!(
            remaining,
            vec![108, 107, 106, 105, 104, 103, 102, 101],
            "newest readable first"
        );
        // What a take would count now: an ended window and a pause that is over are not shown.
        let paused = CredentialKey::of_token("paused once");
        let mut limited = window(site.now(), 3, 60_000);
        limited.status = 429;
        limited.retry_after_s = Some(30);
        limited.retry_after_seen = true;
        ledger.observe(&paused, &limited);
        let find = |views: &[worklane_budget::CredentialView]| {
            views
                .iter()
                .find(|v| v.resources.iter().any(|r| r.remaining == 3))
                .cloned()
        };
        let view = find(&ledger.health().expect("health")).expect("shown while in force");
        assert_eq!(view.paused_until, Some(T0 + 30_000));
        site.clock.set(T0 + 30_000);
        let view = find(&ledger.health().expect("health")).expect("still shown");
        assert_eq!(view.paused_until, None, "the pause is over");
        site.clock.set(T0 + 60_000);
        assert!(
            find(&ledger.health().expect("health")).is_none(),
            "the window has ended at its reset"
        );
        site.clock.set(T0);
        // Read without the lock: a budget whose lock is held is shown all the same.
        let held = hold_lock(&site, &keys[8]);
        assert_eq!(ledger.health().expect("health").len(), 8);
        drop(held);
    }

    #[test]
    fn a_state_of_exactly_64_kib_is_shown_and_one_byte_more_is_not() {
        let site = Site::new();
        let ledger = site.ledger();
        let sized = |token: &str, remaining: u64, size: usize, mtime: u64| {
            let key = CredentialKey::of_token(token);
            let head = format!(
                r#"{{"resources": {{"core": {{"remaining": {remaining}, "resetAt": {}}}}}, "pad": ""#,
                T0 + 60_000
            );
            let text = format!("{head}{}\"}}", "x".repeat(size - head.len() - 2));
            assert_eq!(text.len(), size, "the state is {size} bytes");
            std::fs::write(site.path(&key.state_name()), text).expect("write");
            set_mtime(&site.path(&key.state_name()), mtime);
        };
        sized("exactly 64 KiB", 64, 64 * 1024, T0);
        sized("one byte more", 65, 64 * 1024 + 1, T0 + 1000);
        let views = ledger.health().expect("health");
        let shown: Vec<u64> = views
            .iter()
            .flat_map(|v| v.resources.iter().map(|r| r.remaining))
            .collect();
        assert_eq!(
            shown,
            vec![64],
            "64 KiB is read, 64 KiB and one byte is not: {views:?}"
        );
    }

    #[test]
    fn the_report_names_every_state_it_left_out_and_why() {
        let site = Site::new();
        let ledger = site.ledger();
        let good = CredentialKey::of_token("a good one");
        ledger.observe(&good, &window(site.now(), 7, 60_000));
        let at = |token: &str| site.path(&CredentialKey::of_token(token).state_name());
        std::fs::write(at("garbage"), b"not json").expect("garbage");
        std::fs::write(at("an array"), b"[1]").expect("array");
        std::fs::write(at("too large"), " ".repeat(64 * 1024 + 1)).expect("big");
        std::fs::create_dir(at("a directory")).expect("mkdir");
        std::os::unix::fs::symlink(at("a good one"), at("a link")).expect("symlink");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            at("a fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .expect("mkfifo");
        let report = ledger.health_report().expect("health");
        assert_eq!(report.views.len(), 1, "the good one is shown: {report:?}");
        assert_eq!(report.views[0].resources[0].remaining, 7);
        let why = |token: &str| {
            let file = CredentialKey::of_token(token).state_name();
            report
                .unshown
                .iter()
                .find(|u| u.file == file)
                .unwrap_or_else(|| panic!("{token} is reported: {report:?}"))
        };
        use worklane_budget::StateProblem;
        for token in ["garbage", "an array"] {
            assert!(
                matches!(why(token).why, StateProblem::NotAState(_)),
                "{token}: {:?}",
                why(token)
            );
        }
        for token in ["too large", "a directory", "a link", "a fifo"] {
            assert!(
                matches!(why(token).why, StateProblem::Unreadable(_)),
                "{token}: {:?}",
                why(token)
            );
        }
        assert_eq!(report.unshown.len(), 6, "{report:?}");
        assert_eq!(
            ledger.health().expect("health"),
            report.views,
            "health is the report's views"
        );
    }

    #[test]
    fn at_most_32_files_are_tried() {
        let site = Site::new();
        let ledger = site.ledger();
        let readable = CredentialKey::of_token("older but readable");
        ledger.observe(&readable, &window(site.now(), 7, 60_000));
        set_mtime(&site.path(&readable.state_name()), T0);
        let garbage = |i: u64| {
            let key = CredentialKey::of_token(&format!("garbage {i}"));
            std::fs::write(site.path(&key.state_name()), b"garbage").expect("write");
            set_mtime(&site.path(&key.state_name()), T0 + 1000 + i);
        };
        for i in 0..31 {
            garbage(i);
        }
        let views = ledger.health().expect("health");
        assert_eq!(views.len(), 1, "31 unreadable, the 32nd tried is readable");
        assert_eq!(views[0].resources[0].remaining, 7);
        garbage(31);
        assert!(
            ledger.health().expect("health").is_empty(),
            "32 unreadable newer files: the readable 33rd is not tried"
        );
    }
}

/// Model providers: a take reserves a request and its tokens in every window the provider
/// reports; the response settles the reservation; a 429 pauses every caller of the key.
mod models {
    use super::*;
    use worklane_budget::{ModelChange, Need, Provider, ProviderObservation, Trouble};

    const TOKEN: &str = "sk-ant-test-key-not-real";

    fn key() -> CredentialKey {
        CredentialKey::of_token(TOKEN)
    }

    /// An Anthropic response at `now` with `requests` and `tokens` left, resetting in 60 s.
    fn response(now: u64, status: u16, requests: u64, tokens: u64) -> ProviderObservation {
        let profile = Provider::Anthropic.profile().expect("profile");
        let reset = worklane_lease::rfc3339_ms(now + 60_000);
        let requests = requests.to_string();
        let tokens = tokens.to_string();
        ProviderObservation::from_headers(&profile, status, now, |name| match name {
            "anthropic-ratelimit-requests-limit" => Some("50"),
            "anthropic-ratelimit-requests-remaining" => Some(requests.as_str()),
            "anthropic-ratelimit-requests-reset" => Some(reset.as_str()),
            "anthropic-ratelimit-tokens-limit" => Some("10000"),
            "anthropic-ratelimit-tokens-remaining" => Some(tokens.as_str()),
            "anthropic-ratelimit-tokens-reset" => Some(reset.as_str()),
            "retry-after" if status == 429 => Some("30"),
            _ => None,
        })
    }

    fn need(input: u64, output: u64) -> Need {
        Need {
            input_tokens: input,
            output_tokens: output,
        }
    }

    /// A response that settles a reservation waits (up to 0.5 s) for a lock another holder
    /// has: dropped, the call would stay counted in flight until its reservation expired. An
    /// observation that settles nothing still never waits.
    #[test]
    fn a_settling_response_waits_for_a_busy_lock_and_a_bare_one_does_not() {
        let site = Site::new();
        let key = key();
        let provider = Provider::Anthropic;
        let reserved = site
            .ledger()
            .take_model(&provider, &key, need(10, 10), "agent")
            .expect("goes")
            .reservation
            .expect("a reservation");
        let in_flight = || -> usize {
            let state: serde_json::Value = serde_json::from_slice(
                &std::fs::read(site.path(&key.state_name_of("anthropic"))).expect("state"),
            )
            .expect("JSON");
            state["inFlight"]
                .as_object()
                .map_or(0, serde_json::Map::len)
        };
        assert_eq!(in_flight(), 1, "reserved");
        let start = site.now();
        let ledger = Ledger::new(site.dir())
            .clock(Arc::new(site.clock.clone()))
            .sleeper(Arc::new(super::lock::FreeAt {
                clock: site.clock.clone(),
                free_at: start + 300,
                held: std::sync::Mutex::new(Some(hold_lock_of(&site, &key, &provider))),
            }));
        let bare = ledger.observe_model(&provider, &key, None, &response(start, 200, 9, 900));
        assert!(!matches!(bare, Observed::Recorded), "{bare:?}");
        assert_eq!(site.now(), start, "a bare observation does not wait");
        let seen = ledger.observe_model(
            &provider,
            &key,
            Some(&reserved),
            &response(site.now(), 200, 9, 900),
        );
        assert!(matches!(seen, Observed::Recorded), "{seen:?}");
        assert_eq!(site.now() - start, 300, "it waited for the lock's release");
        assert_eq!(in_flight(), 0, "settled");
    }

    /// Holds `provider`'s budget lock of `key` as another holder would.
    fn hold_lock_of(
        site: &Site,
        key: &CredentialKey,
        provider: &Provider,
    ) -> worklane_lease::Lease {
        match acquire(
            &site.dir(),
            &key.lock_name_of(provider.name()),
            &Request::new("holder"),
            &Options::process(),
        )
        .expect("acquire")
        {
            Acquired::Held(lease) => lease,
            Acquired::Refused(r) => panic!("refused: {r}"),
        }
    }

    #[test]
    fn a_take_reserves_in_flight_and_the_response_settles_it_never_twice() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let provider = Provider::Anthropic;
        // Unknown windows: the call goes, reserved all the same.
        let first = ledger
            .take_model(&provider, &key, need(100, 200), "agent-1")
            .expect("goes");
        let first_id = first.reservation.clone().expect("a reservation");
        let file = site.path(&key.state_name_of("anthropic"));
        assert!(file.exists(), "the state is the provider's own file");
        let raw = std::fs::read_to_string(&file).expect("state");
        assert!(!raw.contains(TOKEN), "the key is never written: {raw}");
        // Its response says what is left (the call itself already counted by the provider).
        let seen = ledger.observe_model(
            &provider,
            &key,
            Some(&first_id),
            &response(site.now(), 200, 10, 1_000),
        );
        assert!(matches!(seen, Observed::Recorded), "{seen:?}");
        // A second call reserves 1 request and 300 tokens against those windows.
        let second = ledger
            .take_model(&provider, &key, need(100, 200), "agent-2")
            .expect("goes");
        assert_eq!(second.left, Some(9), "1 of 10 requests reserved");
        // A third needing more tokens than are left now (1 000 - 300) waits, then is refused.
        let refused = ledger
            .take_model(&provider, &key, need(500, 300), "agent-3")
            .expect_err("short of tokens");
        assert!(
            matches!(&refused, Refused::RateLimited { resource, .. } if resource == "tokens"),
            "{refused}"
        );
        // The second's response comes back: its reservation no longer counts.
        let second_id = second.reservation.expect("reserved");
        ledger.observe_model(
            &provider,
            &key,
            Some(&second_id),
            &response(site.now(), 200, 9, 700),
        );
        let state =
            serde_json::from_slice::<serde_json::Value>(&std::fs::read(&file).expect("state"))
                .expect("json");
        assert_eq!(
            state["resources"]["tokens"]["granted"], 0,
            "nothing in flight: {state}"
        );
        assert!(
            state.get("inFlight").is_none(),
            "every reservation settled: {state}"
        );
        assert!(
            ledger
                .take_model(&provider, &key, need(400, 300), "agent-3")
                .is_ok(),
            "700 tokens left now"
        );
    }

    #[test]
    fn a_reservation_released_or_left_behind_is_given_back() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let provider = Provider::Anthropic;
        ledger.observe_model(&provider, &key, None, &response(site.now(), 200, 2, 10_000));
        let a = ledger
            .take_model(&provider, &key, need(1, 1), "a")
            .expect("goes");
        let _b = ledger
            .take_model(&provider, &key, need(1, 1), "b")
            .expect("goes");
        assert!(
            ledger.take_model(&provider, &key, need(1, 1), "c").is_err(),
            "both requests in flight"
        );
        // The client went away mid-stream: its reservation is released.
        let released = ledger.release(&provider, &key, &a.reservation.expect("reserved"));
        assert!(matches!(released, Observed::Recorded), "{released:?}");
        let c = ledger
            .take_model(&provider, &key, need(1, 1), "c")
            .expect("a request freed");
        assert!(
            ledger.take_model(&provider, &key, need(1, 1), "d").is_err(),
            "b and c in flight"
        );
        // A caller killed without a word: its reservation counts for 10 minutes at most (the
        // window is observed anew so that it has not ended by then).
        drop(c);
        site.clock.advance(10 * 60 * 1000 + 1);
        ledger.observe_model(&provider, &key, None, &response(site.now(), 200, 2, 10_000));
        assert!(
            ledger.take_model(&provider, &key, need(1, 1), "d").is_ok(),
            "the reservations left behind have expired"
        );
    }

    #[test]
    fn one_429_pauses_every_caller_of_the_key() {
        let site = Site::new();
        let ledger = site.ledger();
        let other = site.ledger();
        let key = key();
        let provider = Provider::Anthropic;
        let grant = ledger
            .take_model(&provider, &key, need(1, 1), "a")
            .expect("goes");
        ledger.observe_model(
            &provider,
            &key,
            grant.reservation.as_deref(),
            &response(site.now(), 429, 5, 5_000),
        );
        let refused = other
            .take_model(&provider, &key, need(1, 1), "b")
            .expect_err("paused for the retry-after");
        assert!(
            matches!(refused, Refused::SecondaryRateLimited { .. }),
            "{refused}"
        );
        assert_eq!(refused.status(), 429);
        site.clock.advance(30_000);
        assert!(
            other.take_model(&provider, &key, need(1, 1), "b").is_ok(),
            "the pause of 30 s is over"
        );
        let github = site
            .ledger()
            .take(&key, "core", "x")
            .expect("another provider's budget");
        assert!(
            !github.counted,
            "GitHub's budget of the same key is its own"
        );
    }

    #[test]
    fn the_health_view_names_each_provider_and_its_key_s_hash_never_the_token() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        ledger.observe_model(
            &Provider::Openai,
            &key,
            None,
            &ProviderObservation::from_headers(
                &Provider::Openai.profile().expect("profile"),
                200,
                site.now(),
                |name| match name {
                    "x-ratelimit-remaining-requests" => Some("99"),
                    "x-ratelimit-reset-requests" => Some("1m0s"),
                    _ => None,
                },
            ),
        );
        ledger.observe(&key, &window(site.now(), 4, 60_000));
        let views = ledger.health().expect("health");
        let mut providers: Vec<&str> = views.iter().map(|v| v.provider.as_str()).collect();
        providers.sort_unstable();
        assert_eq!(providers, ["github", "openai"]);
        let openai = views
            .iter()
            .find(|v| v.provider == "openai")
            .expect("openai");
        assert_eq!(openai.resources[0].name, "requests");
        assert_eq!(openai.resources[0].left, 99);
        // Numbered, and keyed by the hash its files and journal events are named by (for the
        // metrics' labels), which says nothing of the token.
        assert_eq!(openai.key, key.as_str());
        assert!(views.iter().all(|v| v.number >= 1));
    }

    /// The epoch of `provider`'s budget lock of `key` now: every take of the lock makes it
    /// one larger (taking it here to read it counts one).
    fn lock_epoch(site: &Site, key: &CredentialKey, provider: &Provider) -> u64 {
        let lease = hold_lock_of(site, key, provider);
        let epoch = lease.epoch();
        lease.release().expect("release");
        epoch
    }

    fn in_flight(site: &Site, key: &CredentialKey) -> Vec<String> {
        let state: serde_json::Value = serde_json::from_slice(
            &std::fs::read(site.path(&key.state_name_of("anthropic"))).expect("state"),
        )
        .expect("JSON");
        state["inFlight"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// A batch makes its changes in order under one take of the lock: a settlement that
    /// gives a request back lets the take behind it go, the next take finds the window spent
    /// and is refused naming it, and the lock was taken once for all three.
    #[test]
    fn a_batch_makes_its_changes_in_order_under_one_take_of_the_lock() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let provider = Provider::Anthropic;
        let now = site.now();
        let known = response(now, 200, 1, 9_000);
        assert!(matches!(
            ledger.observe_model(&provider, &key, None, &known),
            Observed::Recorded
        ));
        let first = ledger
            .try_take_model(&provider, &key, need(10, 10), "agent")
            .expect("the last request goes")
            .reservation
            .expect("reserved");
        let alone = ledger
            .try_take_model(&provider, &key, need(10, 10), "agent")
            .expect_err("none left until the response is settled");
        let before = lock_epoch(&site, &key, &provider);
        // The provider answered with one request left after it (another came back).
        let answer = response(now, 200, 1, 8_900);
        let taken = ledger
            .change_model_batch(
                &provider,
                &key,
                &[
                    ModelChange::Observe {
                        reservation: Some(&first),
                        observation: &answer,
                        head: false,
                    },
                    ModelChange::Take {
                        need: need(10, 10),
                        consumer: "agent",
                    },
                    ModelChange::Take {
                        need: need(10, 10),
                        consumer: "agent",
                    },
                ],
            )
            .expect("made");
        assert_eq!(taken.len(), 2, "one answer a take: {taken:?}");
        let second = match &taken[0] {
            Ok(Grant {
                counted: true,
                left: Some(0),
                reservation: Some(id),
                unaccounted: None,
            }) => id.clone(),
            other => panic!("the settlement gave the take its request: {other:?}"),
        };
        assert_ne!(second, first, "a new reservation");
        match &taken[1] {
            Err(Refused::RateLimited {
                resource,
                reset_at,
                waited_ms,
            }) => {
                assert_eq!(resource, "requests");
                // As a take alone is, but for the time tried: a take alone counts the real
                // time its one try took too (a millisecond on a busy machine).
                assert!(
                    matches!(&alone, Refused::RateLimited { reset_at: r, .. } if r == reset_at),
                    "refused as a take alone is: {alone:?}"
                );
                assert_eq!(*waited_ms, 0, "the batch waits for nothing");
            }
            other => panic!("the last take finds none left: {other:?}"),
        }
        assert_eq!(
            in_flight(&site, &key),
            vec![second.clone()],
            "settled, then taken"
        );
        assert_eq!(
            lock_epoch(&site, &key, &provider),
            before + 2,
            "the batch took the lock once (and reading its epoch once more)"
        );
        // A head settles what it reports and keeps the reservation; a release gives it back.
        let head = ModelChange::Observe {
            reservation: Some(&second),
            observation: &answer,
            head: true,
        };
        assert!(
            ledger
                .change_model_batch(&provider, &key, &[head])
                .expect("made")
                .is_empty(),
            "no take, no answer"
        );
        assert_eq!(
            in_flight(&site, &key),
            vec![second.clone()],
            "the head keeps it"
        );
        ledger
            .change_model_batch(
                &provider,
                &key,
                &[ModelChange::Release {
                    reservation: &second,
                }],
            )
            .expect("made");
        assert!(in_flight(&site, &key).is_empty(), "given back");
        let alone = ledger
            .change_model_batch(
                &provider,
                &key,
                &[ModelChange::Take {
                    need: need(10, 10),
                    consumer: "agent",
                }],
            )
            .expect("made");
        match alone.as_slice() {
            [
                Ok(Grant {
                    reservation: Some(id),
                    ..
                }),
            ] => assert_eq!(
                in_flight(&site, &key),
                vec![id.clone()],
                "a take alone is kept"
            ),
            other => panic!("the take goes: {other:?}"),
        }
    }

    /// A refused take names the window that is short, not one that has exactly what the
    /// take needs left.
    #[test]
    fn a_refusal_names_the_window_that_is_short() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let provider = Provider::Anthropic;
        // One request left, what a take needs; 5 tokens, short of the 20 it needs.
        assert!(matches!(
            ledger.observe_model(&provider, &key, None, &response(site.now(), 200, 1, 5)),
            Observed::Recorded
        ));
        match ledger.try_take_model(&provider, &key, need(10, 10), "agent") {
            Err(Refused::RateLimited { resource, .. }) => assert_eq!(resource, "tokens"),
            other => panic!("refused for the tokens: {other:?}"),
        }
    }

    /// A take of a window seen spent, whose reset comes within the take's wait, waits for it
    /// and goes then (the carried window's limit left).
    #[test]
    fn a_take_waits_for_a_spent_window_s_reset_within_its_wait_then_goes() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let provider = Provider::Anthropic;
        let start = site.now();
        let reset = worklane_lease::rfc3339_ms(start + 3_000);
        let spent = ProviderObservation::from_headers(
            &provider.profile().expect("profile"),
            200,
            start,
            |name| match name {
                "anthropic-ratelimit-requests-limit" => Some("50"),
                "anthropic-ratelimit-requests-remaining" => Some("0"),
                "anthropic-ratelimit-requests-reset" => Some(reset.as_str()),
                _ => None,
            },
        );
        assert!(matches!(
            ledger.observe_model(&provider, &key, None, &spent),
            Observed::Recorded
        ));
        let reset_at = site.state_of(&key, "anthropic")["resources"]["requests"]["resetAt"]
            .as_u64()
            .expect("a reset");
        assert!(reset_at > start && reset_at - start < MAX_WAIT_MS);
        let grant = ledger
            .take_model(&provider, &key, need(1, 1), "agent")
            .expect("goes at the reset");
        assert!(grant.counted, "{grant:?}");
        assert_eq!(site.now(), reset_at, "it waited exactly until the reset");
    }

    /// A batch with a take sweeps stale states when a sweep is due, as a take alone does; a
    /// batch of observations never does.
    #[test]
    fn a_batch_with_a_take_sweeps_when_due_and_one_without_never_does() {
        let site = Site::new();
        // The sweep time is process-wide: this test runs three months after the others' clocks.
        site.clock.set(T0 + 90 * 86_400_000);
        let ledger = site.ledger();
        let stale = CredentialKey::of_token("stale");
        ledger.observe(&stale, &window(site.now(), 5, 60_000));
        let stale_file = site.path(&stale.state_name());
        super::sweep::set_mtime(&stale_file, T0);
        let key = key();
        let provider = Provider::Anthropic;
        let answer = response(site.now(), 200, 9, 900);
        ledger
            .change_model_batch(
                &provider,
                &key,
                &[ModelChange::Observe {
                    reservation: None,
                    observation: &answer,
                    head: false,
                }],
            )
            .expect("made");
        assert!(stale_file.exists(), "no take, no sweep");
        ledger
            .change_model_batch(
                &provider,
                &key,
                &[ModelChange::Take {
                    need: need(1, 1),
                    consumer: "agent",
                }],
            )
            .expect("made");
        assert!(!stale_file.exists(), "a take's batch sweeps");
    }

    /// A batch whose state cannot be written says what it could not record: a call when it
    /// holds a take, else a response.
    #[test]
    fn a_batch_that_cannot_be_written_says_a_call_or_a_response() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let provider = Provider::Anthropic;
        std::fs::create_dir(site.path(&key.state_name_of("anthropic"))).expect("mkdir");
        let answer = response(site.now(), 200, 9, 900);
        let observe = ModelChange::Observe {
            reservation: None,
            observation: &answer,
            head: false,
        };
        let take = ModelChange::Take {
            need: need(1, 1),
            consumer: "agent",
        };
        for (changes, said) in [
            (vec![observe], "response"),
            (vec![observe, take], "call"),
            (vec![take], "call"),
        ] {
            match ledger.change_model_batch(&provider, &key, &changes) {
                Err(Trouble::NotWritten { what, .. }) => assert_eq!(what, said, "{changes:?}"),
                other => panic!("not written: {other:?}"),
            }
        }
    }

    /// A waiting process's id: 16 lowercase hex digits, another each time.
    #[test]
    fn a_waiter_id_is_16_hex_digits_and_new_each_time() {
        let a = Ledger::waiter_id();
        let b = Ledger::waiter_id();
        for id in [&a, &b] {
            assert_eq!(id.len(), 16, "{id}");
            assert!(
                id.bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)),
                "{id}"
            );
        }
        assert_ne!(a, b);
    }

    /// What a take would meet now: a model provider's window that ended is shown carried over
    /// (its limit left), as the next take carries it.
    #[test]
    fn the_health_view_shows_a_model_provider_s_ended_window_carried_over() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = key();
        let provider = Provider::Anthropic;
        ledger.observe_model(&provider, &key, None, &response(site.now(), 200, 3, 9_000));
        let reset_at = site.state_of(&key, "anthropic")["resources"]["requests"]["resetAt"]
            .as_u64()
            .expect("a reset");
        site.clock.set(reset_at);
        let views = ledger.health().expect("health");
        let view = views
            .iter()
            .find(|v| v.provider == "anthropic")
            .expect("shown");
        let requests = view
            .resources
            .iter()
            .find(|r| r.name == "requests")
            .expect("carried over");
        assert!(requests.assumed, "{requests:?}");
        assert_eq!((requests.limit, requests.left), (Some(50), 50));
    }

    /// A batch that cannot have the lock records nothing and says why: its caller then makes
    /// each call alone. It waits for the lock as long as a take or a settlement would; a
    /// batch of observations that settle nothing tries once.
    #[test]
    fn a_batch_that_cannot_have_the_lock_records_nothing() {
        let site = Site::new();
        let key = key();
        let provider = Provider::Anthropic;
        let reserved = site
            .ledger()
            .take_model(&provider, &key, need(10, 10), "agent")
            .expect("goes")
            .reservation
            .expect("a reservation");
        let state = std::fs::read(site.path(&key.state_name_of("anthropic"))).expect("state");
        let start = site.now();
        let ledger = Ledger::new(site.dir())
            .clock(Arc::new(site.clock.clone()))
            .sleeper(Arc::new(super::lock::FreeAt {
                clock: site.clock.clone(),
                free_at: start + 60_000,
                held: std::sync::Mutex::new(Some(hold_lock_of(&site, &key, &provider))),
            }));
        let answer = response(start, 200, 9, 900);
        let bare = [ModelChange::Observe {
            reservation: None,
            observation: &answer,
            head: false,
        }];
        assert!(matches!(
            ledger.change_model_batch(&provider, &key, &bare),
            Err(Trouble::LockBusy { .. })
        ));
        assert_eq!(site.now(), start, "observations settling nothing try once");
        let settling = [
            ModelChange::Observe {
                reservation: Some(&reserved),
                observation: &answer,
                head: false,
            },
            ModelChange::Take {
                need: need(10, 10),
                consumer: "agent",
            },
        ];
        assert!(matches!(
            ledger.change_model_batch(&provider, &key, &settling),
            Err(Trouble::LockBusy { .. })
        ));
        assert_eq!(
            site.now() - start,
            worklane_budget::ledger::LOCK_PATIENCE_MS,
            "a batch that settles waits as a settlement does"
        );
        assert_eq!(
            std::fs::read(site.path(&key.state_name_of("anthropic"))).expect("state"),
            state,
            "nothing recorded"
        );
    }
}

mod journal {
    //! The ledger's events: a pause set by a response, and a take refused, each once, the
    //! credential named by its key, never by its token.
    use super::*;
    use worklane_journal::Event;

    fn events(site: &Site) -> Vec<Event> {
        let batch = worklane_journal::read(&site.dir()).expect("read the journal");
        assert_eq!(batch.skipped, 0);
        batch.entries.into_iter().map(|e| e.event).collect()
    }

    #[test]
    fn a_pause_and_a_refusal_are_said_once_each_by_credential_key() {
        let site = Site::new();
        let key = key();
        let mut observation = window(site.now(), 4000, 600_000);
        observation.status = 429;
        observation.retry_after_s = Some(60);
        observation.retry_after_seen = true;
        site.ledger().observe(&key, &observation);
        let until = worklane_lease::rfc3339_ms(site.now() + 60_000);
        assert_eq!(
            events(&site),
            [Event::BudgetPaused {
                provider: "github".into(),
                credential: key.as_str().into(),
                until: until.clone(),
            }]
        );
        // The same pause seen again is no news.
        site.ledger().observe(&key, &observation);
        assert_eq!(events(&site).len(), 1, "{:?}", events(&site));
        let refused = site.ledger().take(&key, "core", "ci").expect_err("paused");
        assert_eq!(refused.kind(), "secondary_rate_limited");
        let all = events(&site);
        assert_eq!(
            all[1..],
            [Event::BudgetRefused {
                provider: "github".into(),
                credential: key.as_str().into(),
                resource: "core".into(),
                refusal: "secondary_rate_limited".into(),
                retry_at: Some(until),
                consumer: "ci".into(),
                waited_ms: 10_000,
            }]
        );
        let text = std::fs::read_to_string(site.path(worklane_journal::CURRENT)).expect("read");
        assert!(!text.contains("ghp_"), "never the token: {text}");
    }

    /// A refusal a proxy's client got is said once, by its provider and the window short; a
    /// pause without a time known says no retry time.
    #[test]
    fn a_model_refusal_a_client_got_is_said_with_its_window_and_time() {
        let site = Site::new();
        let ledger = site.ledger();
        let key = CredentialKey::of_token("sk-ant-test-key-not-real");
        let provider = worklane_budget::Provider::Anthropic;
        ledger.journal_model_refusal(
            &provider,
            &key,
            "agent",
            &Refused::RateLimited {
                resource: "tokens".to_owned(),
                reset_at: T0 + 5_000,
                waited_ms: 1_200,
            },
        );
        ledger.journal_model_refusal(
            &provider,
            &key,
            "agent",
            &Refused::SecondaryRateLimited {
                until: 0,
                waited_ms: 0,
            },
        );
        assert_eq!(
            events(&site),
            [
                Event::BudgetRefused {
                    provider: "anthropic".into(),
                    credential: key.as_str().into(),
                    resource: "tokens".into(),
                    refusal: "rate_limited".into(),
                    retry_at: Some(worklane_lease::rfc3339_ms(T0 + 5_000)),
                    consumer: "agent".into(),
                    waited_ms: 1_200,
                },
                Event::BudgetRefused {
                    provider: "anthropic".into(),
                    credential: key.as_str().into(),
                    resource: "requests".into(),
                    refusal: "secondary_rate_limited".into(),
                    retry_at: None,
                    consumer: "agent".into(),
                    waited_ms: 0,
                },
            ]
        );
    }
}
