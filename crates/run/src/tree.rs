//! The processes a halt must reach beyond the command's process group.
//!
//! A halt signals the command's group, but a descendant can leave it (`setsid`, `setpgid`), and
//! with a terminal on stdin the command shares worklane's own foreground group, which worklane
//! cannot signal without hitting itself and its pipeline neighbours. So a halt also signals
//! every descendant of worklane found in the process table. On Linux worklane makes itself a
//! child subreaper, so a descendant whose parent exits (a double-forked daemon) is re-parented
//! to worklane rather than to init and is still found; worklane reaps such orphans while the
//! command runs.
//!
//! The decisions are plain functions ([`descendants`]; a process's stat line is parsed by
//! `worklane_identity::proc_stat`) tested everywhere; only
//! `sys`'s `table` reads the machine (Linux `/proc`; elsewhere there is no table
//! and a halt reaches the command's group or pid only).

/// One row of the process table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) pid: u32,
    pub(crate) ppid: u32,
    /// The one-letter state of `/proc/<pid>/stat` (`Z` for a zombie).
    pub(crate) state: u8,
}

/// Every descendant of `root` in `table` (children, their children, ...), excluding `root`.
/// A malformed table with a parent cycle ends the walk rather than looping.
pub(crate) fn descendants(root: u32, table: &[Entry]) -> Vec<u32> {
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for entry in table {
            if entry.ppid == parent && entry.pid != root && !found.contains(&entry.pid) {
                found.push(entry.pid);
                frontier.push(entry.pid);
            }
        }
    }
    found
}

/// How many of `root`'s live descendants in `table` run with no live child of their own: the
/// processes doing the tree's work at this moment (a build's running jobs; a shell or make
/// that waits for its children is not one).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn leaves(root: u32, table: &[Entry]) -> usize {
    let live: Vec<&Entry> = descendants(root, table)
        .into_iter()
        .filter_map(|pid| table.iter().find(|e| e.pid == pid))
        .filter(|e| !matches!(e.state, b'Z' | b'X'))
        .collect();
    live.iter()
        .filter(|e| !live.iter().any(|c| c.ppid == e.pid))
        .count()
}

/// The process table, if it is consistent with what we know: our child `child` (the command,
/// running or an unreaped zombie) must be in it with us as its parent. A `/proc` of another
/// pid namespace whose numbering happened to agree on our own pid fails this.
fn table_with(child: u32) -> Option<Vec<Entry>> {
    let ours = rustix::process::getpid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs();
    let table = crate::sys::table()?;
    table
        .iter()
        .any(|e| e.pid == child && e.ppid == ours)
        .then_some(table)
}

/// Held while a table of our descendants is read and acted on: signalling holds it from the
/// read to the last `kill`, and reaping holds it too, so a pid read as an orphan of ours cannot
/// be reaped (and freed for reuse by an unrelated process) before it is signalled.
static TABLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn table_lock() -> std::sync::MutexGuard<'static, ()> {
    TABLE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sends `signals`, in order, to every live descendant of this process, `child` (the command)
/// being one, from one read of the table; returns how many descendants were signalled.
pub(crate) fn signal_descendants(child: u32, signals: &[rustix::process::Signal]) -> usize {
    let _held = table_lock();
    let Some(table) = table_with(child) else {
        return 0;
    };
    let ours = rustix::process::getpid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs();
    let mut sent = 0;
    for pid in descendants(ours, &table) {
        let live = table.iter().any(|e| e.pid == pid && e.state != b'Z');
        if let Some(pid) = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            && live
            && signals
                .iter()
                .all(|&signal| rustix::process::kill_process(pid, signal).is_ok())
        {
            sent += 1;
        }
    }
    sent
}

/// Whether this process has a live descendant (the ended command, a zombie until reaped, is
/// not one).
pub(crate) fn has_descendants(child: u32) -> bool {
    let _held = table_lock();
    let Some(table) = table_with(child) else {
        return false;
    };
    let ours = rustix::process::getpid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs();
    descendants(ours, &table)
        .into_iter()
        .any(|pid| table.iter().any(|e| e.pid == pid && e.state != b'Z'))
}

/// SIGKILLs every descendant of this process until a fresh look at the table finds none alive
/// (a descendant may fork between one look and the kill; as a subreaper we find its child the
/// next time), for at most [`KILL_SETTLE`]. A process sent SIGKILL is still in the table,
/// and not yet a zombie, until the kernel has run its exit, which on a loaded machine takes
/// a while: the looks go on (a few at once, then every 5 ms) until every one has died, so
/// that the caller's outcome comes after its processes are gone. Only a process the kernel
/// cannot end (in uninterruptible sleep) outlasts the bound.
pub(crate) fn kill_descendants(child: u32) {
    let started = std::time::Instant::now();
    for pass in 0u32.. {
        let signalled = signal_descendants(child, &[rustix::process::Signal::KILL]);
        if settled(signalled, started.elapsed()) {
            break;
        }
        std::thread::sleep(pause_after(pass));
    }
}

/// Whether [`kill_descendants`] is done after a pass that found `signalled` live descendants,
/// `elapsed` after its start: none was left to kill, or [`KILL_SETTLE`] has run out.
fn settled(signalled: usize, elapsed: std::time::Duration) -> bool {
    signalled == 0 || elapsed >= KILL_SETTLE
}

/// The pause after [`kill_descendants`]' pass `pass` (from 0) before it looks again: none
/// after the first three (what was killed is usually dead by then), then 5 ms, so that a
/// process slow to die is not waited for in a tight loop for up to [`KILL_SETTLE`].
fn pause_after(pass: u32) -> std::time::Duration {
    if pass >= 3 {
        std::time::Duration::from_millis(5)
    } else {
        std::time::Duration::ZERO
    }
}

/// How long [`kill_descendants`] waits for what it killed to die.
pub(crate) const KILL_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// Reaps exited children of this process other than `keep` (orphans re-parented to us);
/// returns how many were reaped.
pub(crate) fn reap_orphans(keep: u32) -> usize {
    let _held = table_lock();
    let Some(table) = table_with(keep) else {
        return 0;
    };
    let ours = rustix::process::getpid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs();
    table
        .iter()
        .filter(|e| e.ppid == ours && e.pid != keep && e.state == b'Z')
        .filter_map(|e| {
            i32::try_from(e.pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
        })
        .filter(|&pid| {
            matches!(
                rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG),
                Ok(Some(_))
            )
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_are_the_live_descendants_without_live_children() {
        let e = |pid, ppid, state| Entry { pid, ppid, state };
        // 1 is the supervisor; 2 make; 3, 4, 5 recipe shells; 6 a compiler under 3; 7 a
        // zombie under 4; 8 someone else's.
        let table = [
            e(2, 1, b'S'),
            e(3, 2, b'S'),
            e(4, 2, b'S'),
            e(5, 2, b'R'),
            e(6, 3, b'R'),
            e(7, 4, b'Z'),
            e(8, 99, b'R'),
        ];
        // 6 (under 3), 4 (its only child a zombie), 5.
        assert_eq!(leaves(1, &table), 3);
        assert_eq!(leaves(6, &table), 0, "no descendants");
    }
    use super::{Entry, descendants};

    fn entry(pid: u32, ppid: u32) -> Entry {
        Entry {
            pid,
            ppid,
            state: b'S',
        }
    }

    #[test]
    fn descendants_are_found_at_every_depth_and_only_below_the_root() {
        let table = [
            entry(1, 0),
            entry(10, 1),
            entry(20, 10),
            entry(21, 10),
            entry(30, 20),
            entry(40, 1),
            entry(50, 40),
        ];
        let mut below = descendants(10, &table);
        below.sort_unstable();
        assert_eq!(below, vec![20, 21, 30]);
        assert_eq!(descendants(30, &table), Vec::<u32>::new());
        let mut all = descendants(1, &table);
        all.sort_unstable();
        assert_eq!(all, vec![10, 20, 21, 30, 40, 50]);
    }

    #[test]
    fn a_parent_cycle_ends_the_walk() {
        // On a thread given 5 s: a walk that did not end would go on for ever.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let table = [entry(2, 3), entry(3, 2), entry(4, 2)];
            let _ = tx.send(descendants(2, &table));
        });
        let mut below = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the walk ended within 5 s");
        below.sort_unstable();
        assert_eq!(below, vec![3, 4], "the root itself is never listed");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_live_table_holds_a_spawned_child_under_us() {
        use worklane_testkit::Gated;
        // Killed and reaped when dropped, should an assertion fail first.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::null())
            .spawn_gated()
            .expect("spawn sleep");
        let table = crate::sys::table().expect("a process table on Linux");
        let ours = std::process::id();
        assert!(
            descendants(ours, &table).contains(&child.id()),
            "the child is our descendant"
        );
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The table is believed only when it shows our child with us as its parent: pid 1 (not
    /// our child) is refused though we have a child, as a `/proc` of another pid namespace
    /// would be.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_table_is_believed_only_when_it_shows_our_child_under_us() {
        use worklane_testkit::Gated;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::null())
            .spawn_gated()
            .expect("spawn sleep");
        let shown = table_with(child.id());
        let not_ours = table_with(1);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            shown.is_some_and(|t| t.iter().any(|e| e.pid == child.id())),
            "our child under us"
        );
        assert!(not_ours.is_none(), "pid 1 is not our child");
    }

    #[test]
    fn the_kill_is_done_when_none_is_left_or_its_time_has_run_out() {
        let ms = std::time::Duration::from_millis;
        assert!(settled(0, ms(0)), "nobody left to kill");
        assert!(settled(0, KILL_SETTLE * 2));
        assert!(!settled(1, ms(0)), "one killed: look again");
        assert!(!settled(64, KILL_SETTLE - ms(1)));
        assert!(settled(1, KILL_SETTLE), "the bound reached");
        assert!(settled(1, KILL_SETTLE + ms(1)));
    }

    #[test]
    fn the_first_looks_after_a_kill_come_at_once_then_every_5_ms() {
        let ms = std::time::Duration::from_millis;
        assert_eq!(pause_after(0), ms(0));
        assert_eq!(pause_after(2), ms(0));
        assert_eq!(pause_after(3), ms(5));
        assert_eq!(pause_after(400), ms(5));
    }

    /// Runs test `name` again in a process of its own (this test binary, on that test alone)
    /// unless this is that run; returns whether this is the outer run (then the test's body
    /// is not for this process). For a test that reaps or kills every descendant of its
    /// process, which in the shared test process would take other tests' children.
    #[cfg(target_os = "linux")]
    fn ran_alone(name: &str) -> bool {
        const ALONE: &str = "WORKLANE_RUN_TEST_TREE_ALONE";
        if std::env::var_os(ALONE).is_some() {
            return false;
        }
        worklane_testkit::subject::run_again_as_subject(name, |command| {
            command
                .env(ALONE, "1")
                // Its storm's threads would start children that this test would reap or kill.
                .env_remove("WORKLANE_TEST_FORK_STORM");
        });
        true
    }

    /// `kill_descendants` returns once what it killed has died, not once it has sent the
    /// signal: the caller's outcome (the run's exit) must come after its processes are gone.
    /// A shell with 64 children, SIGKILLed on a machine of a few cores: each must be
    /// scheduled to run its exit, and a fresh look right after the return finds none alive.
    #[cfg(target_os = "linux")]
    #[test]
    fn killed_descendants_are_dead_when_the_kill_returns() {
        use std::os::unix::process::ExitStatusExt;
        use worklane_testkit::Gated;
        const NAME: &str = "tree::tests::killed_descendants_are_dead_when_the_kill_returns";
        const CHILDREN: usize = 64;
        if ran_alone(NAME) {
            return;
        }
        let ours = rustix::process::getpid()
            .as_raw_nonzero()
            .get()
            .unsigned_abs();
        // Started through a shell, as commands are: the shell and its children.
        let mut shell = std::process::Command::new("sh")
            .args(["-c", &format!("{}wait", "sleep 60 & ".repeat(CHILDREN))])
            .stdin(std::process::Stdio::null())
            .spawn_gated()
            .expect("spawn sh");
        let live = || {
            let table = table_with(shell.id()).expect("our table");
            descendants(ours, &table)
                .into_iter()
                .filter(|&pid| table.iter().any(|e| e.pid == pid && e.state != b'Z'))
                .count()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while live() < CHILDREN + 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the shell and its {CHILDREN} children within 20 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        kill_descendants(shell.id());
        assert_eq!(live(), 0, "descendants still alive when the kill returned");
        assert!(shell.wait().expect("reap the shell").signal().is_some());
    }

    /// `reap_orphans` reaps this process's exited children but `keep` (the command, which
    /// the supervision reaps itself, last: reaped early, its pid could be reused before the
    /// last kill of its group). Run in a process of its own (this test binary again, on this
    /// test alone): reaping every exited child of the test binary would take other tests'.
    #[cfg(target_os = "linux")]
    #[test]
    fn exited_orphans_are_reaped_but_the_command_is_kept() {
        use worklane_testkit::Gated;
        const NAME: &str = "tree::tests::exited_orphans_are_reaped_but_the_command_is_kept";
        if ran_alone(NAME) {
            return;
        }
        let start = || {
            std::process::Command::new("true")
                .stdin(std::process::Stdio::null())
                .spawn_gated()
                .expect("spawn true")
        };
        let (mut command, orphan) = (start(), start());
        let zombie = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat[stat.rfind(')').expect(")") + 2..].starts_with('Z'))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !(zombie(command.id()) && zombie(orphan.id())) {
            assert!(
                std::time::Instant::now() < deadline,
                "both exited within 10 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(reap_orphans(command.id()), 1, "the other one reaped");
        assert!(!zombie(orphan.id()), "reaped: gone from the table");
        assert!(
            command.try_wait().expect("still ours to reap").is_some(),
            "the command kept for its own reaping"
        );
    }
}
