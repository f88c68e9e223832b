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
