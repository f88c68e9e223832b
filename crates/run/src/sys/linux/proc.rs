//! What this crate reads of a Linux machine's processes, all from `/proc`: the process table
//! (for a halt's reach beyond the command's group), how one process looks (for STOP's
//! enforcement), which processes hold a guard's descriptor, and the subreaper setting. A
//! process's `/proc/<pid>/stat` is parsed by `worklane_identity::proc_stat`, tested everywhere;
//! `sys/other.rs` has the same signatures for every other platform, where nothing is seen (but
//! `tree_use`, which only the Linux jobserver asks).

use crate::enforce::Seen;
use crate::tree::Entry;
use std::collections::{HashMap, HashSet};
use worklane_guard::FileId;
use worklane_identity::proc_stat;

/// The process table, or `None` when it cannot be read or does not describe our own pid
/// namespace (a `/proc` mounted from another namespace would name other processes).
pub(crate) fn table() -> Option<Vec<Entry>> {
    let mut table = Vec::new();
    for pid in proc_pids()? {
        // A process can exit between the listing and the read: skip it.
        let Ok(stat) = worklane_stdx::read_small(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Ok(s) = proc_stat::parse(&stat) {
            table.push(Entry {
                pid,
                ppid: s.ppid,
                state: s.state,
            });
        }
    }
    Some(table)
}

/// The pids listed in `/proc`, or `None` when `/proc` is not this pid namespace's (a pid read
/// there would name another process here) or cannot be listed.
fn proc_pids() -> Option<Vec<u32>> {
    if !proc_is_ours() {
        return None;
    }
    Some(
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .collect(),
    )
}

/// Whether `/proc` numbers processes as our pid namespace does (its `self` is our pid).
fn proc_is_ours() -> bool {
    // `/proc/self` is a link to our pid as that `/proc`'s namespace numbers it: one call.
    let ours = rustix::process::getpid().as_raw_nonzero().get();
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|link| link.to_str()?.parse::<i32>().ok())
        == Some(ours)
}

/// Makes this process a child subreaper, so orphaned descendants stay findable, if and only
/// if `/proc` is of our pid namespace (without a table of our descendants there would be
/// nobody to halt or reap the orphans it would adopt; one `/proc/self` read, not the whole
/// table, keeps the start of every run cheap). Returns whether it is one.
pub(crate) fn become_subreaper() -> bool {
    proc_is_ours() && rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_ok()
}

/// How a process looks now, `None` when it is gone or cannot be seen.
pub(crate) fn observe(pid: u32) -> Option<Seen> {
    let stat = worklane_stdx::read_small(format!("/proc/{pid}/stat")).ok()?;
    let proc_stat::Stat {
        state,
        pgid,
        sid,
        start,
        ..
    } = proc_stat::parse(&stat).ok()?;
    let uid = rustix::fs::stat(format!("/proc/{pid}").as_str())
        .ok()?
        .st_uid;
    Some(Seen {
        state,
        pgid,
        sid,
        start,
        uid,
    })
}

/// The pids holding a descriptor on each of `guards`, from one pass over `/proc/*/fd` (only
/// the processes this one may inspect).
pub(crate) fn guard_holders(guards: &HashSet<FileId>) -> HashMap<FileId, Vec<u32>> {
    let mut found: HashMap<FileId, Vec<u32>> = HashMap::new();
    if guards.is_empty() {
        return found;
    }
    // Only a `/proc` of our own pid namespace: its pids are the ones signals reach.
    let Some(pids) = proc_pids() else {
        return found;
    };
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            // stat follows the descriptor's magic link to the open file itself.
            let Ok(stat) = rustix::fs::stat(fd.path().as_path()) else {
                continue;
            };
            #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
            let id = FileId {
                dev: stat.st_dev as u64,
                ino: stat.st_ino as u64,
            };
            if guards.contains(&id) {
                let pids = found.entry(id).or_default();
                if !pids.contains(&pid) {
                    pids.push(pid);
                }
            }
        }
    }
    found
}

/// What the descendants of this process (a build's tree) look like to its jobserver: their
/// live threads, and how many of them have the FIFO at `fifo` open. `None` for what cannot be
/// read (then nothing is judged lost).
pub(crate) fn tree_use(fifo: &std::path::Path) -> (Option<u32>, Option<u32>) {
    let Ok(stat) = rustix::fs::stat(fifo) else {
        return (None, None);
    };
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    let id = FileId {
        dev: stat.st_dev as u64,
        ino: stat.st_ino as u64,
    };
    let Some(table) = table() else {
        return (None, None);
    };
    let ours = std::process::id();
    let mut threads = 0u32;
    let mut holders = 0u32;
    for pid in crate::tree::descendants(ours, &table) {
        if table.iter().any(|e| e.pid == pid && e.state == b'Z') {
            continue;
        }
        let Some(n) = worklane_stdx::read_small(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| proc_stat::parse(&s).ok())
            .map(|s| s.threads)
        else {
            continue;
        };
        threads = threads.saturating_add(n);
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            // Not ours to look into: count it as holding, never as proof of a loss.
            holders = holders.saturating_add(1);
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            rustix::fs::stat(fd.path().as_path()).is_ok_and(|s| {
                #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
                let found = FileId {
                    dev: s.st_dev as u64,
                    ino: s.st_ino as u64,
                };
                found == id
            })
        });
        holders = holders.saturating_add(u32::from(holds));
    }
    (Some(threads), Some(holders))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a pid namespace of its own whose `/proc` is still the outer one's (a container
    /// started with `unshare --pid` and no `--mount-proc`), a pid read in `/proc` names
    /// another process: no table is read there and no subreaper is made.
    #[test]
    fn a_proc_of_another_pid_namespace_is_not_ours() {
        const INSIDE: &str = "WORKLANE_RUN_TEST_OTHER_PID_NAMESPACE";
        const NAME: &str = "sys::linux::proc::tests::a_proc_of_another_pid_namespace_is_not_ours";
        if std::env::var_os(INSIDE).is_none() {
            assert!(proc_is_ours(), "this process's own /proc");
            assert!(table().is_some(), "its table, read");
            // Without --mount-proc: /proc stays the outer namespace's. (As root here; a user
            // namespace of its own otherwise.)
            let wrapper: &[&str] = if rustix::process::geteuid().is_root() {
                &["unshare", "--pid", "--fork", "--kill-child", "--"]
            } else {
                &[
                    "unshare",
                    "--user",
                    "--map-root-user",
                    "--pid",
                    "--fork",
                    "--kill-child",
                    "--",
                ]
            };
            worklane_testkit::subject::run_again_as_subject_through(wrapper, NAME, |command| {
                command
                    .env(INSIDE, "1")
                    .env_remove("WORKLANE_TEST_FORK_STORM");
            });
            return;
        }
        assert_eq!(
            rustix::process::getpid().as_raw_nonzero().get(),
            1,
            "the first process of its namespace"
        );
        assert!(!proc_is_ours(), "/proc numbers the outer namespace's pids");
        assert!(table().is_none(), "no table from another namespace's /proc");
        assert!(!become_subreaper());
    }
}
