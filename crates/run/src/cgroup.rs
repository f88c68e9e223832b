//! A cgroup per run (Linux, cgroup v2): every process a run starts stays in it, a halt reaches
//! all of them (a daemon that left the command's process group and session included), and its
//! use is measured. Where there is no cgroup v2, or no subtree this user may write, the run
//! goes on without one ([`Off`] says why) under the process-group enforcement alone.
//!
//! A run's cgroup is `<base>/worklane/<slot>-<epoch>` in the unified hierarchy: `<base>` is
//! the root for root, else this process's own cgroup when it belongs to this user (a delegated
//! subtree, as `systemd-run --user --scope` gives). The command is moved into it between its
//! clone and its exec (it writes `0` to `cgroup.procs`), so nothing it starts can be outside.

use std::path::{Path, PathBuf};
use worklane_identity::cgroup::{self as read, RUNS_DIR};

/// Why a run has no cgroup of its own (containment off): the run goes on without one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Off {
    /// No cgroup v2 (unified) hierarchy is mounted (macOS, a machine with only v1).
    #[error("no cgroup v2 (unified) hierarchy is mounted")]
    NoUnified,
    /// This process's own cgroup is not this user's to divide.
    #[error(
        "this user ({uid}) may not create cgroups under its own, {path}: run worklane as root, \
         or in a delegated subtree (`systemd-run --user --scope worklane ...`, or a unit with \
         `Delegate=yes`)"
    )]
    NotDelegated {
        /// This process's uid.
        uid: u32,
        /// Its cgroup.
        path: String,
    },
    /// The runs' directory could not be made or used.
    #[error("cannot use {}: {why}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        why: String,
    },
}

/// Where this process's runs' cgroups would go (the runs' directory's path in the unified
/// hierarchy), or why it has none, without making anything: what `slots` and `why` say.
pub fn probe() -> Result<String, Off> {
    let mount = read::unified().ok_or(Off::NoUnified)?;
    Ok(format!("{}/{RUNS_DIR}", base(&mount)?))
}

/// The cgroup under which this process's runs' directory goes: the root for root, else its
/// own when it is this user's (delegated).
fn base(mount: &Path) -> Result<String, Off> {
    let uid = rustix::process::geteuid().as_raw();
    if uid == 0 {
        return Ok(String::new());
    }
    let own = read::own().ok_or(Off::NoUnified)?;
    let dir = read::dir_of(mount, &own).unwrap_or_else(|| mount.to_owned());
    let owner = std::fs::metadata(&dir).map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    if own == "/" || owner.ok() != Some(uid) {
        return Err(Off::NotDelegated { uid, path: own });
    }
    Ok(own)
}

/// Where this process's runs' cgroups go: the unified hierarchy's mount and the runs'
/// directory's path in it (`/worklane`, `/user.slice/.../worklane`), made if missing.
pub fn containment() -> Result<(PathBuf, String), Off> {
    let mount = read::unified().ok_or(Off::NoUnified)?;
    let uid = rustix::process::geteuid().as_raw();
    let runs = format!("{}/{RUNS_DIR}", base(&mount)?);
    let dir = read::dir_of(&mount, &runs).ok_or_else(|| Off::Dir {
        dir: mount.join(RUNS_DIR),
        why: "not a plain path".to_owned(),
    })?;
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(Off::Dir {
                dir,
                why: e.to_string(),
            });
        }
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| Off::Dir {
        dir: dir.clone(),
        why: e.to_string(),
    })?;
    let owner = std::os::unix::fs::MetadataExt::uid(&meta);
    if !meta.is_dir() || (owner != uid && owner != 0) {
        return Err(Off::Dir {
            dir,
            why: format!("not a directory of this user or root (owner {owner})"),
        });
    }
    Ok((mount, runs))
}

/// A cgroup that exists only while they are young: made by a run between its mkdir and its
/// command's move, which takes milliseconds.
const YOUNG_SECS: u64 = 60;

/// The cgroup of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCgroup {
    /// Its path in the hierarchy (`/worklane/agent-0-17`), as records and `/proc/<pid>/cgroup`
    /// name it.
    path: String,
    /// Its directory.
    dir: PathBuf,
}

impl RunCgroup {
    /// Makes the cgroup of the run holding `resource` at `epoch` (removing, first, the empty
    /// cgroups that ended runs left in the runs' directory).
    pub fn create(dir_key: &str, resource: &str, epoch: u64) -> Result<RunCgroup, Off> {
        let (mount, runs) = containment()?;
        let runs_dir = read::dir_of(&mount, &runs).ok_or(Off::NoUnified)?;
        sweep(&runs_dir);
        let path = format!("{runs}/{}", read::run_name(dir_key, resource, epoch));
        let dir = read::dir_of(&mount, &path).ok_or(Off::NoUnified)?;
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            // The epoch is new with every acquisition: a cgroup of this name is a leftover of
            // a machine whose slot directory was reset. Empty, it is ours; else it is not.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let empty = read::usage(&path).is_some_and(|u| u.procs.is_empty());
                if !empty {
                    return Err(Off::Dir {
                        dir,
                        why: "a cgroup of this name runs processes already".to_owned(),
                    });
                }
            }
            Err(e) => {
                return Err(Off::Dir {
                    dir,
                    why: e.to_string(),
                });
            }
        }
        Ok(RunCgroup { path, dir })
    }

    /// The cgroup a record names (its `cgroup`) for the run holding `resource` at `epoch` in
    /// the slot directory of key `dir_key`, if
    /// it may be acted on: named as that run's cgroup is ([`read::names_run`]) and made by the
    /// record's writer `writer_uid` (or root). What any member of the slot directory's group
    /// may write must not make worklane signal another user's processes.
    #[must_use]
    pub fn recorded(
        path: &str,
        dir_key: &str,
        resource: &str,
        epoch: u64,
        writer_uid: u32,
    ) -> Option<RunCgroup> {
        if !read::names_run(path, dir_key, resource, epoch) {
            return None;
        }
        let dir = read::dir_of(&read::unified()?, path)?;
        let meta = std::fs::symlink_metadata(&dir).ok()?;
        let owner = std::os::unix::fs::MetadataExt::uid(&meta);
        (meta.is_dir() && (owner == writer_uid || owner == 0)).then(|| RunCgroup {
            path: path.to_owned(),
            dir,
        })
    }

    /// Its path in the hierarchy, for the record.
    #[must_use]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `cgroup.procs`, opened for the command to move itself in before its exec (close on
    /// exec, as every descriptor std opens).
    pub(crate) fn procs_file(&self) -> std::io::Result<std::fs::File> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))
    }

    /// The processes in it now.
    #[must_use]
    pub fn pids(&self) -> Vec<u32> {
        worklane_stdx::read_small_text(self.dir.join("cgroup.procs"))
            .map(|t| read::parse_procs(&t))
            .unwrap_or_default()
    }

    /// Sets its limits where the hierarchy gives them: `memory` bytes to `memory.max` and `cpus`
    /// (CPUs, 1.5 for one and a half) to `cpu.max` (per 100 ms period). A controller that is
    /// not enabled for it is tried once, enabling it in its parent's `cgroup.subtree_control`
    /// (which only the subtree's owner may); what stays unavailable is returned, each in
    /// words, and the run goes on without it.
    #[must_use]
    pub fn limit(&self, memory: Option<u64>, cpus: Option<f64>) -> Vec<String> {
        let mut unavailable = Vec::new();
        let parent = self.dir.parent().map(Path::to_path_buf);
        let mut set = |controller: &str, file: &str, value: String| {
            let enabled = || {
                worklane_stdx::read_small_text(self.dir.join("cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|w| w == controller))
            };
            if !enabled()
                && let Some(parent) = &parent
            {
                let _ = std::fs::write(
                    parent.join("cgroup.subtree_control"),
                    format!("+{controller}"),
                );
            }
            if !enabled() {
                unavailable.push(format!(
                    "{file} is unavailable: the {controller} controller is not enabled for {} \
                     (enable it in the hierarchy, e.g. a systemd unit with Delegate=yes and \
                     {}Accounting=yes)",
                    self.path,
                    if controller == "memory" {
                        "Memory"
                    } else {
                        "CPU"
                    }
                ));
                return;
            }
            if let Err(e) = std::fs::write(self.dir.join(file), value) {
                unavailable.push(format!("{file} could not be set: {e}"));
            }
        };
        if let Some(bytes) = memory {
            set("memory", "memory.max", bytes.to_string());
        }
        if let Some(cpus) = cpus {
            // A quota per 100 ms period, at least 1 ms.
            let quota = ((cpus * 100_000.0).round() as u64).max(1000);
            set("cpu", "cpu.max", format!("{quota} 100000"));
        }
        unavailable
    }

    /// The CPU time its processes used, µs (`cpu.stat`'s `usage_usec`).
    #[must_use]
    pub fn cpu_usec(&self) -> Option<u64> {
        worklane_stdx::read_small_text(self.dir.join("cpu.stat"))
            .ok()
            .and_then(|t| read::parse_cpu_usec(&t))
    }

    /// Sends `signal` to every process in it (this one spared).
    pub fn signal(&self, signal: rustix::process::Signal) {
        let me = std::process::id();
        for pid in self.pids() {
            if pid == me {
                continue;
            }
            if let Some(pid) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
    }

    /// Kills every process in it at once (`cgroup.kill`, Linux 5.14), else by SIGKILL to each.
    pub fn kill(&self) {
        if std::fs::write(self.dir.join("cgroup.kill"), b"1").is_err() {
            self.signal(rustix::process::Signal::KILL);
        }
    }

    /// Removes it if nothing runs in it any more; `true` when it is gone.
    pub fn remove_if_empty(&self) -> bool {
        std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists()
    }
}

/// Removes the empty cgroups ended runs left in `runs` (older than a minute: a younger one may
/// be a run's between its mkdir and its command's move).
fn sweep(runs: &Path) {
    let Ok(entries) = std::fs::read_dir(runs) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for entry in entries.flatten() {
        // The directory's own type first (from the listing, no system call): the control
        // files beside the runs' cgroups (about twenty) are never looked at.
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|at| now.duration_since(at).ok())
            .is_some_and(|age| age.as_secs() >= YOUNG_SECS);
        if old {
            // Refused (EBUSY) while a process runs in it: then it stays.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

#[cfg(test)]
mod tests;
