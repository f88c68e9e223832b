//! A run's cgroup on this machine's unified hierarchy (the tests run as root on cgroup v2, as
//! the CLI's containment tests do): made, named in records, signalled, killed, swept and
//! removed, with `sleep` children moved into it.

use super::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use worklane_testkit::{Child, Gated};

/// A cgroup of this test's own (a key no other test or slot directory has), removed at the
/// end whatever happened.
struct Made {
    cgroup: RunCgroup,
    key: String,
    _temp: tempfile::TempDir,
}

impl Made {
    fn new(resource: &str, epoch: u64) -> Made {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = std::fs::File::open(temp.path()).expect("open the temp dir");
        let key = read::dir_key_of(&dir).expect("its key");
        let cgroup = RunCgroup::create(&key, resource, epoch)
            .expect("cgroup v2 containment on this machine (root, a unified hierarchy)");
        Made {
            cgroup,
            key,
            _temp: temp,
        }
    }

    /// Starts `args` and moves it into the cgroup.
    fn start(&self, args: &[&str]) -> Child {
        let child = Command::new(args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .spawn_gated()
            .expect("start");
        std::fs::write(self.cgroup.dir.join("cgroup.procs"), child.id().to_string())
            .expect("move it into the cgroup");
        child
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        self.cgroup.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.cgroup.remove_if_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Waits, for at most 10 s, until `done`; whether it came.
fn within(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    done()
}

fn ended(child: &mut Child) -> bool {
    within(|| matches!(child.try_wait(), Ok(Some(_))))
}

#[test]
fn root_runs_its_cgroups_under_the_hierarchys_root() {
    assert_eq!(probe(), Ok("/worklane".to_owned()));
    let (mount, runs) = containment().expect("containment");
    assert_eq!(runs, "/worklane");
    assert_eq!(Some(mount), read::unified());
    assert_eq!(
        containment().map(|(_, runs)| runs),
        Ok("/worklane".to_owned()),
        "the runs' directory made already is used again"
    );
}

#[test]
fn a_runs_cgroup_is_named_for_its_slot_and_epoch_and_lists_its_processes() {
    let made = Made::new("agent-0.lock", 17);
    assert_eq!(
        made.cgroup.path(),
        format!("/worklane/{}-agent-0-17", made.key),
        "as records name it"
    );
    assert!(made.cgroup.pids().is_empty(), "new and empty");
    let a = made.start(&["sleep", "60"]);
    let b = made.start(&["sleep", "60"]);
    let mut pids = made.cgroup.pids();
    pids.sort_unstable();
    let mut expected = vec![a.id(), b.id()];
    expected.sort_unstable();
    assert_eq!(pids, expected);
}

#[test]
fn a_cgroup_of_the_same_name_is_taken_over_only_while_empty() {
    let made = Made::new("agent-1.lock", 3);
    let again = RunCgroup::create(&made.key, "agent-1.lock", 3);
    assert_eq!(again.as_ref(), Ok(&made.cgroup), "empty: a leftover, ours");
    let _running = made.start(&["sleep", "60"]);
    match RunCgroup::create(&made.key, "agent-1.lock", 3) {
        Err(Off::Dir { why, .. }) => {
            assert_eq!(why, "a cgroup of this name runs processes already");
        }
        other => panic!("another run's cgroup is not taken over: {other:?}"),
    }
}

#[test]
fn a_recorded_cgroup_is_acted_on_only_if_named_for_its_run_and_made_by_its_writer_or_root() {
    let made = Made::new("agent-2.lock", 5);
    let path = made.cgroup.path().to_owned();
    let recorded = |key: &str, resource: &str, epoch: u64, writer: u32| {
        RunCgroup::recorded(&path, key, resource, epoch, writer)
    };
    assert_eq!(
        recorded(&made.key, "agent-2.lock", 5, 1000).as_ref(),
        Some(&made.cgroup),
        "root made it: any writer's record may name it"
    );
    assert_eq!(
        recorded("000000000000", "agent-2.lock", 5, 0),
        None,
        "another directory's"
    );
    assert_eq!(
        recorded(&made.key, "agent-3.lock", 5, 0),
        None,
        "another slot's"
    );
    assert_eq!(
        recorded(&made.key, "agent-2.lock", 6, 0),
        None,
        "another epoch's"
    );
    std::os::unix::fs::chown(&made.cgroup.dir, Some(1000), None).expect("chown");
    assert_eq!(
        recorded(&made.key, "agent-2.lock", 5, 1000).as_ref(),
        Some(&made.cgroup),
        "its maker's record"
    );
    assert_eq!(
        recorded(&made.key, "agent-2.lock", 5, 2000),
        None,
        "another user's record names a cgroup it did not make"
    );
    std::os::unix::fs::chown(&made.cgroup.dir, Some(0), None).expect("chown back");
}

#[test]
fn a_signal_reaches_every_process_in_it_and_a_kill_ends_them() {
    let made = Made::new("agent-3.lock", 1);
    let mut a = made.start(&["sleep", "60"]);
    let mut b = made.start(&["sleep", "60"]);
    made.cgroup.signal(rustix::process::Signal::TERM);
    assert!(ended(&mut a) && ended(&mut b), "SIGTERM reached both");
    let mut c = made.start(&["env", "--ignore-signal=TERM", "sleep", "60"]);
    made.cgroup.kill();
    assert!(ended(&mut c), "killed, whatever it ignores");
    assert!(
        within(|| made.cgroup.pids().is_empty()),
        "empty once killed"
    );
}

#[test]
fn the_cpu_time_its_processes_used_is_read() {
    let made = Made::new("agent-4.lock", 1);
    assert_eq!(made.cgroup.cpu_usec(), Some(0), "nothing ran in it yet");
    // It waits to be moved in before it works.
    let go = made._temp.path().join("go");
    let mut busy = made.start(&[
        "sh",
        "-c",
        "while [ ! -e \"$0\" ]; do sleep 0.01; done; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
        go.to_str().expect("utf-8"),
    ]);
    std::fs::write(&go, "").expect("go");
    assert!(ended(&mut busy), "the loop ends");
    assert!(
        made.cgroup.cpu_usec().is_some_and(|us| us >= 1000),
        "a loop of 20 000 shell steps takes more than a millisecond: {:?}",
        made.cgroup.cpu_usec()
    );
}

#[test]
fn a_limit_the_hierarchy_does_not_give_is_said_and_the_run_goes_on() {
    let made = Made::new("agent-5.lock", 1);
    assert_eq!(
        made.cgroup.limit(None, None),
        Vec::<String>::new(),
        "none asked"
    );
    let enabled = std::fs::read_to_string(made.cgroup.dir.join("cgroup.controllers"))
        .expect("its controllers");
    assert!(
        !enabled
            .split_whitespace()
            .any(|c| c == "memory" || c == "cpu"),
        "this test expects a hierarchy without the memory and cpu controllers (got {enabled})"
    );
    let path = made.cgroup.path().to_owned();
    assert_eq!(
        made.cgroup.limit(Some(1 << 30), Some(1.5)),
        [
            format!(
                "memory.max is unavailable: the memory controller is not enabled for {path} \
                 (enable it in the hierarchy, e.g. a systemd unit with Delegate=yes and \
                 MemoryAccounting=yes)"
            ),
            format!(
                "cpu.max is unavailable: the cpu controller is not enabled for {path} \
                 (enable it in the hierarchy, e.g. a systemd unit with Delegate=yes and \
                 CPUAccounting=yes)"
            ),
        ]
    );
}

#[test]
fn an_empty_cgroup_is_removed_and_a_busy_one_stays() {
    let made = Made::new("agent-6.lock", 1);
    let mut running = made.start(&["sleep", "60"]);
    assert!(!made.cgroup.remove_if_empty(), "a process runs in it");
    assert!(made.cgroup.dir.exists());
    let _ = running.kill();
    let _ = running.wait();
    assert!(
        within(|| made.cgroup.pids().is_empty()),
        "empty once its process is reaped"
    );
    assert!(made.cgroup.remove_if_empty(), "removed");
    assert!(!made.cgroup.dir.exists());
    assert!(made.cgroup.remove_if_empty(), "gone already: still gone");
}

#[test]
fn the_sweep_removes_only_empty_cgroups_older_than_a_minute() {
    let made = Made::new("agent-7.lock", 1);
    // A runs' directory of this test's own, under its cgroup.
    let runs = made.cgroup.dir.clone();
    let old_time = std::time::SystemTime::now() - Duration::from_secs(YOUNG_SECS + 60);
    let aged = |name: &str| {
        let dir = runs.join(name);
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::File::open(&dir)
            .and_then(|f| f.set_modified(old_time))
            .expect("age it");
        dir
    };
    let old = aged("old");
    let busy = aged("busy");
    let young = runs.join("young");
    std::fs::create_dir(&young).expect("mkdir");
    let mut sleeper = Command::new("sleep")
        .arg("60")
        .stdin(Stdio::null())
        .spawn_gated()
        .expect("start");
    std::fs::write(busy.join("cgroup.procs"), sleeper.id().to_string()).expect("move");
    sweep(&runs);
    assert!(!old.exists(), "an old empty cgroup goes");
    assert!(
        young.exists(),
        "a young one may be a run's between its mkdir and its move"
    );
    assert!(busy.exists(), "a process runs in it");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    for dir in [&young, &busy] {
        assert!(
            within(|| std::fs::remove_dir(dir).is_ok()),
            "{} removed",
            dir.display()
        );
    }
}

/// `limit`'s own decisions, on a directory laid out as the hierarchy lays out a cgroup (this
/// machine's unified hierarchy enables no controller, so a real cgroup shows only the
/// unavailable case, above): with its controllers enabled the values are written, the CPU
/// quota per 100 ms period and at least 1 ms; without them, enabling is tried once in the
/// parent's `cgroup.subtree_control` and what stays unavailable is said.
#[test]
fn limits_are_written_where_the_controllers_are_and_tried_in_the_parent_where_not() {
    let temp = tempfile::tempdir().expect("temp");
    let cgroup = |name: &str, controllers: &str| {
        let dir = temp.path().join(name);
        std::fs::create_dir(&dir).expect("dir");
        std::fs::write(dir.join("cgroup.controllers"), controllers).expect("controllers");
        RunCgroup {
            path: format!("/worklane/{name}"),
            dir,
        }
    };
    let full = cgroup("agent-1-1", "cpuset cpu io memory pids\n");
    assert_eq!(full.limit(Some(1 << 30), Some(1.5)), Vec::<String>::new());
    let read = |c: &RunCgroup, file: &str| std::fs::read_to_string(c.dir.join(file)).expect(file);
    assert_eq!(read(&full, "memory.max"), "1073741824");
    assert_eq!(
        read(&full, "cpu.max"),
        "150000 100000",
        "1.5 CPUs per 100 ms"
    );
    assert_eq!(full.limit(None, Some(0.004)), Vec::<String>::new());
    assert_eq!(read(&full, "cpu.max"), "1000 100000", "at least 1 ms");
    assert!(
        !temp.path().join("cgroup.subtree_control").exists(),
        "enabled: nothing asked of the parent"
    );
    let bare = cgroup("agent-2-1", "io pids\n");
    let said = bare.limit(Some(1 << 20), Some(2.0));
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].starts_with("memory.max is unavailable") && said[0].contains("MemoryAccounting"),
        "{said:?}"
    );
    assert!(
        said[1].starts_with("cpu.max is unavailable") && said[1].contains("CPUAccounting"),
        "{said:?}"
    );
    assert_eq!(
        std::fs::read_to_string(temp.path().join("cgroup.subtree_control"))
            .expect("tried in the parent"),
        "+cpu",
        "each controller tried once in the parent, the last one cpu"
    );
    assert!(
        !bare.dir.join("memory.max").exists() && !bare.dir.join("cpu.max").exists(),
        "nothing written where the controllers are not"
    );
}
