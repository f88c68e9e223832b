//! What every module of the pool's tests shares: a slot directory in a temp dir with its pool,
//! and the files and processes the tests plant in it.

pub(crate) use std::process::{Command, Stdio};
pub(crate) use std::sync::Arc;
pub(crate) use std::time::Duration;
pub(crate) use worklane_admission::{
    Blocker, Drain, DrainState, Kind, Pool, Slot, SlotState, Stop, Take, Wait,
};
pub(crate) use worklane_identity::{Field, Place, ProcessIdentity, Recorded};
pub(crate) use worklane_lease::{LiveWhy, ManualClock, Record, Request, rfc3339_ms};
pub(crate) use worklane_slotfile::{Environment, RECORD_MODE, SlotDir};
pub(crate) use worklane_testkit::Gated;
pub(crate) use worklane_testkit::gate::{self, QuietDrop};

pub(crate) struct Site {
    pub(crate) temp: tempfile::TempDir,
    pub(crate) pool: Pool,
}

impl Site {
    pub(crate) fn new(config: &str) -> Site {
        let temp = tempfile::tempdir().expect("temp dir");
        std::fs::write(temp.path().join("config.json"), config).expect("config");
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
        let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
        Site { temp, pool }
    }

    pub(crate) fn set_config(&self, config: &str) {
        std::fs::write(self.temp.path().join("config.json"), config).expect("config");
    }

    /// A take with the gate quiet: it takes and releases `slots.lock`, and maybe guards of
    /// slots it finds in use.
    pub(crate) fn try_take(&self, kind: Kind) -> Take {
        gate::quietly(|| self.pool.try_take(kind, &Request::new("test"))).expect("take")
    }

    /// Takes a slot that must be free; it is released with the gate quiet.
    pub(crate) fn take(&self, kind: Kind) -> QuietDrop<Slot> {
        match self.try_take(kind) {
            Take::Held(slot) => QuietDrop::new(slot),
            Take::Blocked(b) => panic!("{} must be free: {b}", kind.label()),
        }
    }

    pub(crate) fn blocked(&self, kind: Kind) -> Blocker {
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
    pub(crate) fn idle(&self) -> bool {
        gate::quietly(|| self.pool.idle()).expect("idle")
    }

    /// The pool's snapshot, with the gate quiet (it probes every slot's guard).
    pub(crate) fn snapshot(&self) -> worklane_admission::Snapshot {
        gate::quietly(|| self.pool.snapshot()).expect("snapshot")
    }

    pub(crate) fn write_record(&self, name: &str, record: &Record) {
        SlotDir::open(self.temp.path())
            .expect("open")
            .file(name)
            .expect("valid")
            .replace(&record.to_bytes(), RECORD_MODE)
            .expect("write");
    }
}

/// Sets `path`'s modification time to `secs` seconds after the Unix epoch.
pub(crate) fn set_mtime(path: &std::path::Path, secs: u64) {
    std::fs::File::open(path)
        .and_then(|f| f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs)))
        .unwrap_or_else(|e| panic!("set the mtime of {}: {e}", path.display()));
}

/// Sets `path`'s modification time `secs` seconds back, as a writer killed that long ago
/// leaves its file.
pub(crate) fn age(path: &std::path::Path, secs: u64) {
    let then = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs()
        - secs;
    set_mtime(path, then);
}

/// Releases `slot` but keeps a copy of its guard's descriptor, so the guard stays held with no
/// record behind it: what the processes a finished run left running leave.
pub(crate) fn leave_running(slot: QuietDrop<Slot>) -> std::os::fd::OwnedFd {
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

pub(crate) fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

pub(crate) fn dead_record() -> Record {
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
