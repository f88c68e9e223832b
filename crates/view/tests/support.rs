//! A slot directory in a temp dir with its pool, and slots held in it.

pub(crate) use worklane_admission::{Kind, Pool, Slot, Take};
pub(crate) use worklane_lease::{Request, rfc3339_ms};
pub(crate) use worklane_slotfile::{Environment, SlotDir};

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

    /// Takes a slot of `kind` that must be free.
    pub(crate) fn take(&self, kind: Kind) -> Slot {
        match self
            .pool
            .try_take(kind, &Request::new("view-test"))
            .expect("take")
        {
            Take::Held(slot) => slot,
            Take::Blocked(b) => panic!("{} must be free: {b}", kind.label()),
        }
    }

    /// Replaces the config (after the pool is made: a broken one fails the resolve).
    pub(crate) fn set_config(&self, config: &str) {
        std::fs::write(self.temp.path().join("config.json"), config).expect("config");
    }

    pub(crate) fn snapshot(&self) -> worklane_admission::Snapshot {
        self.pool.snapshot().expect("snapshot")
    }
}
