//! Tests of the test support itself: real locks, real children, real orphans.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use worklane_testkit::{Gated, gate};

/// The start time (field 22 of `/proc/PID/stat`) of `pid`, if it runs.
fn start_of(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split(' ').nth(19)?.parse().ok()
}

mod gate_ {
    use super::*;

    /// Starts children that linger between fork and exec (holding copies of every descriptor
    /// of this process), one after another, until the returned flag is set.
    fn forks_in_flight(linger: Duration) -> (Arc<AtomicBool>, std::thread::JoinHandle<u32>) {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let forker = std::thread::spawn(move || {
            let mut started = 0;
            while !flag.load(Ordering::Relaxed) {
                let mut command = Command::new("true");
                lingering(&mut command, linger);
                let mut child = command.spawn_gated().expect("start a lingering child");
                child.wait().expect("reap it");
                started += 1;
            }
            started
        });
        (stop, forker)
    }

    #[allow(unsafe_code)]
    fn lingering(command: &mut Command, linger: Duration) {
        use std::os::unix::process::CommandExt;
        // SAFETY: runs in the forked child before exec; it only calls nanosleep (through
        // `thread::sleep`), which is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                std::thread::sleep(linger);
                Ok(())
            });
        }
    }

    #[test]
    fn a_quiet_release_is_free_for_the_next_process_while_others_fork() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("lock");
        let (stop, forker) = forks_in_flight(Duration::from_millis(5));
        for round in 0..40 {
            let file = std::fs::File::create(&path).expect("open the lock file");
            #[allow(
                clippy::disallowed_methods,
                reason = "testkit depends on none of our crates: a bare flock stands for a guard"
            )]
            rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                .unwrap_or_else(|e| panic!("round {round}: the lock must be free to take: {e}"));
            gate::quietly(|| drop(file));
            let free = Command::new("flock")
                .arg("-n")
                .arg(&path)
                .arg("true")
                .status_gated()
                .expect("run util-linux flock");
            assert!(
                free.success(),
                "round {round}: another process must find a quietly released lock free"
            );
        }
        stop.store(true, Ordering::Relaxed);
        let started = forker.join().expect("the forking thread");
        assert!(started > 0, "children were started meanwhile");
    }

    #[test]
    fn the_quiet_thread_may_start_processes_and_nest_sections() {
        let status = gate::quietly(|| {
            let _inner = gate::quiet();
            Command::new("true").status_gated()
        })
        .expect("run true");
        assert!(status.success(), "a start inside a quiet section runs");
        // And the gate is open again for this thread.
        let status = Command::new("true").status_gated().expect("run true");
        assert!(status.success(), "a start after the section runs");
    }

    #[test]
    fn a_quiet_drop_releases_on_drop_and_on_end() {
        let dropped = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        drop(gate::QuietDrop::new(Flag(Arc::clone(&dropped))));
        assert!(dropped.load(Ordering::SeqCst), "dropped with the wrapper");
        let wrapped = gate::QuietDrop::new(41);
        assert_eq!(*wrapped, 41, "derefs to the value");
        assert_eq!(wrapped.end(|v| v + 1), 42, "end hands the value over");
    }

    #[test]
    fn output_reads_no_input_and_captures_both_streams() {
        let out = Command::new("sh")
            .args(["-c", "cat; echo out; echo err >&2"])
            .output_gated()
            .expect("run sh");
        assert!(out.status.success(), "sh exits 0: {}", out.status);
        assert_eq!(out.stdout, b"out\n", "stdin is empty, stdout captured");
        assert_eq!(out.stderr, b"err\n", "stderr captured");
    }
}

mod child {
    use super::*;

    #[test]
    fn a_child_dropped_while_running_is_killed_and_reaped() {
        let child = Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn_gated()
            .expect("start sleep");
        let pid = child.id();
        let start = start_of(pid).expect("sleep runs");
        drop(child);
        assert_ne!(
            start_of(pid),
            Some(start),
            "the dropped sleep is gone (killed and reaped)"
        );
    }

    #[test]
    fn a_waited_child_is_left_alone() {
        let mut child = Command::new("true").spawn_gated().expect("start true");
        let status = child.wait().expect("wait");
        assert!(status.success(), "true exits 0");
        drop(child);
    }
}

mod scope {
    use super::*;
    use worklane_testkit::Scope;

    #[test]
    fn a_scope_kills_an_orphan_that_left_its_group() {
        let scope = Scope::new();
        // `setsid -f` starts sleep in a session of its own and the shell exits: sleep is an
        // orphan, out of reach of anything that signals the shell or its group.
        let out = scope
            .mark(&mut Command::new("sh"))
            .args(["-c", "setsid -f sleep 600 </dev/null >/dev/null 2>&1"])
            .output_gated()
            .expect("run sh");
        assert!(out.status.success(), "sh starts the orphan: {}", out.status);
        // A watchdog, not a timing assertion: one look can miss a process in mid-exec.
        let mut survivors = Vec::new();
        for _ in 0..1000 {
            survivors = scope.survivors();
            if !survivors.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!survivors.is_empty(), "the orphan carries the scope's mark");
        let starts: Vec<Option<u64>> = survivors.iter().map(|&pid| start_of(pid)).collect();
        assert!(
            Scope::new().survivors().is_empty(),
            "no other scope's mark is on anything"
        );
        let killed = scope.end();
        for pid in &survivors {
            assert!(killed.contains(pid), "end kills {pid}: {killed:?}");
        }
        assert!(scope.survivors().is_empty(), "nothing marked is left");
        for (pid, start) in survivors.iter().zip(starts) {
            // Reaped by init (gone), or a zombie for a moment; a reused pid has another start.
            let dead = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| start_of(*pid) != start || s.contains(") Z"));
            assert!(dead, "the orphan {pid} is dead");
        }
    }
}
