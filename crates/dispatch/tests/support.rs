//! What every module of the tests shares: a slot directory in a temp dir with its pool.

pub(crate) use std::process::Command;
pub(crate) use std::sync::Arc;
pub(crate) use std::time::Duration;
pub(crate) use worklane_admission::{Kind, Pool, Stop};
pub(crate) use worklane_lease::{ManualClock, Record, Request};
pub(crate) use worklane_slotfile::{Environment, SlotDir};
pub(crate) use worklane_testkit::Gated;
pub(crate) use worklane_testkit::gate;

/// A slot directory in a temp dir, with its config, and the pool over it.
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

    /// The pool's snapshot, with the gate quiet (it probes every slot's guard).
    pub(crate) fn snapshot(&self) -> worklane_admission::Snapshot {
        gate::quietly(|| self.pool.snapshot()).expect("snapshot")
    }
}

/// `child`'s exit status once it has ended, waited `within` at most (a halt that never comes
/// fails the test instead of hanging it); `None` if it lives on.
pub(crate) fn reaped_within(
    child: &mut std::process::Child,
    within: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A pidfd of the process `pid` (a child of the test, so it cannot have been reaped yet).
pub(crate) fn pidfd_of(pid: u32) -> std::os::fd::OwnedFd {
    rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid"),
        rustix::process::PidfdFlags::empty(),
    )
    .expect("pidfd")
}

/// uid and gid 65534, as the calling thread becomes with [`become_nobody`].
pub(crate) const NOBODY: u32 = 65_534;

/// Gives the calling thread (only it: Linux keeps credentials per thread) uid and gid
/// [`NOBODY`] and no supplementary groups, for good.
pub(crate) fn become_nobody() {
    let uid = rustix::process::Uid::from_raw(NOBODY);
    let gid = rustix::process::Gid::from_raw(NOBODY);
    rustix::thread::set_thread_groups(&[]).expect("setgroups");
    rustix::thread::set_thread_res_gid(gid, gid, gid).expect("setresgid");
    rustix::thread::set_thread_res_uid(uid, uid, uid).expect("setresuid");
}
