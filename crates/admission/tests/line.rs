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

/// A copy of the descriptor by which `place` holds its entry's guard: the same open file
/// description, so the same `flock`, held on after the place lets its own descriptor go, as
/// a reader's probe holds it (`worklane slots`, stop-all). Taken with `pidfd_getfd(2)` from
/// this very process (a `Place` does not lend its guard), and checked to be the guard's inode.
fn copy_of_guard(site: &Site, place: &Place) -> std::os::fd::OwnedFd {
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};
    let name = format!(".{}.flock", place.entry().name());
    let guard = rustix::fs::stat(site.temp.path().join(&name)).expect("stat the guard");
    let me = pidfd_open(getpid(), PidfdFlags::empty()).expect("a pidfd of this process");
    for listed in std::fs::read_dir("/proc/self/fd").expect("list this process's descriptors") {
        let listed = listed.expect("a descriptor");
        // Another test's descriptor may close (and its number be reused) meanwhile: only a
        // copy whose inode is the guard's is taken.
        let names_guard = std::fs::read_link(listed.path())
            .is_ok_and(|target| target.file_name() == Some(std::ffi::OsStr::new(&name)));
        let Some(number) = listed.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if !names_guard {
            continue;
        }
        let Ok(copy) = pidfd_getfd(&me, number, PidfdGetfdFlags::empty()) else {
            continue;
        };
        let stat = rustix::fs::fstat(&copy).expect("fstat the copy");
        if (stat.st_dev, stat.st_ino) == (guard.st_dev, guard.st_ino) {
            return copy;
        }
    }
    panic!("no descriptor of this process holds {name}")
}

#[test]
fn a_leave_that_finds_its_entry_probed_tries_50_times_then_leaves_it_out_of_line() {
    // Held throughout: no child of another test may inherit the guard or its copy.
    let _quiet = gate::quiet();
    let site = Site::new(r#"{"max_agents": 1}"#);
    let place = join(&site, 0, 100);
    let entry = place.entry().name();
    let guard = format!(".{entry}.flock");
    // A probe that outlasts the leave: every try to retire the entry finds its guard held.
    let probe = copy_of_guard(&site, &place);
    let watch = watch(site.temp.path());
    let leaving = spawn_bounded(move || place.leave());
    leaving
        .join("a leave giving up on an entry whose guard stays held")
        .expect("a leave that cannot retire a probed entry still succeeds");
    assert_eq!(
        opens(&watch, &guard),
        50,
        "the retire is tried 50 times (a probe lasts microseconds) before the entry is left"
    );
    assert!(
        !site.temp.path().join(&entry).exists(),
        "its record is released: it no longer stands in line"
    );
    assert_eq!(
        standing(&site, 0, 200, None),
        (0, 0),
        "nobody stands before a newcomer"
    );
    drop(probe);
}

#[test]
fn a_leave_that_cannot_retire_its_entry_says_which_and_why() {
    // Held throughout: no child of another test may inherit a place's guard.
    let _quiet = gate::quiet();
    let site = Site::new(r#"{"max_agents": 1}"#);
    let place = join(&site, 0, 100);
    let entry = place.entry().name();
    // The guard's name made a link: the place holds its guard by its descriptor still, but a
    // guard is never taken through a link, so the entry cannot be retired.
    let guard = site.temp.path().join(format!(".{entry}.flock"));
    std::fs::remove_file(&guard).expect("unlink the guard's name");
    std::os::unix::fs::symlink("elsewhere", &guard).expect("a link in its place");
    let err = place
        .leave()
        .expect_err("a leave whose entry cannot be retired fails");
    assert!(
        matches!(&err, worklane_admission::line::Error::Retire { entry: e, .. } if *e == entry),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&entry),
        "the message names the entry: {err}"
    );
    assert!(
        !site.temp.path().join(&entry).exists(),
        "its record is released before the retire"
    );
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
    match take(0, 200) {
        Take::Blocked(Blocker::InLine { ahead, held, cap }) => {
            assert_eq!((ahead, held, cap), (1, 1, 2), "one before it, 1 of 2 held");
        }
        other => panic!("still refused behind the waiter: {other:?}"),
    }
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
    let waiter = spawn_bounded(move || {
        let mut seen = Vec::new();
        let got = pool.take(
            Kind::Agent,
            &Request::new("waiter"),
            Wait {
                // Past the bound on its join: the test fails before the take gives up.
                timeout: Some(BOUND * 2),
                priority: 0,
                on_wait: &mut |w| {
                    seen.push((w.position, w.in_line, w.blocker.clone()));
                    let _ = tx.send(());
                },
            },
        );
        (got, seen)
    });
    recv_within(&rx, "the waiter's first look");
    gate::quietly(|| before.leave()).expect("leave");
    let (got, seen) = waiter.join("the waiter taking the slot once the place before it left");
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
    let pool = site.pool.clone();
    // The gate is quiet already (held by this thread): the take needs no more.
    let got = spawn_bounded(move || {
        pool.take(
            Kind::Agent,
            &Request::new("impatient"),
            Wait {
                timeout: Some(Duration::from_millis(50)),
                priority: 0,
                on_wait: &mut |_| {},
            },
        )
    })
    .join_within(PROMPT, "a take of 50 ms timing out")
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
