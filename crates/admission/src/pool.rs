//! The slot pool: agent slots, test-run slots, the full-run lock, and what blocks them.
//!
//! - `take.rs`: taking without waiting (weights and shares counted under `slots.lock`);
//! - `turn.rs`: whose turn it is, from that count: the owner's share, the line, the cap;
//! - `blocker.rs`: what blocks a take ([`Blocker`]), as typed data;
//! - `wait.rs`: waiting in line for a slot ([`Pool::take`]);
//! - `count.rs`: the verdict on each slot ([`SlotState`]);
//! - `view.rs`: what `worklane slots` shows ([`Snapshot`]) and the commands records name;
//! - `operator.rs`: STOP and the drain flag, and the operator's changes to `protocol.json`.

mod blocker;
pub(crate) mod count;
mod operator;
mod take;
mod turn;
mod view;
mod wait;

pub use blocker::{Blocker, Holding, ShareUsed, owner_words};
pub use count::SlotState;
pub use operator::Dropped;
pub use take::Take;
pub use view::{RecordedCommand, ShareUse, SlotView, Snapshot};
pub use wait::{LOOK_AGAIN_AT_MOST, Wait, Waiting};

use crate::error::slot;
use crate::look;
use crate::weight::{SHARE_OWNER_FIELD, WEIGHT_FIELD};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use worklane_journal::{Event, Journal};
use worklane_lease::{Clock, Lease, Options, Request, SystemClock};
use worklane_slotfile::{Config, Environment, Located, Locations, Resolved, SlotDir};

pub use crate::names::{FULL_RUN_LOCK, SLOTS_LOCK, slot_index};
pub(crate) use crate::names::{file_in, replace_over_empty_dir};

/// What kind of slot to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One running agent: `agent-<i>.lock`, capped by `max_agents`.
    Agent,
    /// One coordinator test run: `test-<i>.lock`, capped by `max_test_runs`.
    Test {
        /// The run's own time limit, recorded as `limit_ms`.
        limit_ms: Option<u64>,
    },
    /// The machine's one full test run: `full-run.lock`.
    FullRun,
    /// One build job (a jobserver token, or a build's own implicit one): `job-<i>.lock`,
    /// capped by `max_jobs`.
    Job,
}

impl Kind {
    /// The kind's name as the CLI and `slots --json` show it.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::Test { .. } => "test",
            Kind::FullRun => "full-run",
            Kind::Job => "job",
        }
    }

    fn prefix(self) -> Option<&'static str> {
        match self {
            Kind::Agent => Some("agent"),
            Kind::Test { .. } => Some("test"),
            Kind::FullRun => None,
            Kind::Job => Some("job"),
        }
    }
}

/// A held slot. Dropping it releases the slot.
#[derive(Debug)]
#[must_use = "the slot is released as soon as it is dropped"]
pub struct Slot {
    kind: Kind,
    lease: Lease,
    weight: u32,
    share_owner: Option<String>,
    /// Dropped after the lease: journals the release.
    note: Released,
}

/// Journals a slot's release when dropped (after the slot's lease, declared before it, is
/// released), unless the slot was handed over.
#[derive(Debug)]
struct Released {
    journal: Journal,
    slot: String,
    kind: Kind,
    owner: String,
    since: std::time::Instant,
    armed: bool,
    /// What the run used, as its supervisor measured it.
    cpu_usec: Option<u64>,
}

impl Released {
    fn new(journal: &Journal, lease: &Lease, kind: Kind) -> Released {
        Released {
            journal: journal.clone(),
            slot: lease.resource().to_owned(),
            kind,
            owner: lease.record().owner.clone().unwrap_or_default(),
            since: std::time::Instant::now(),
            armed: true,
            cpu_usec: None,
        }
    }
}

impl Drop for Released {
    fn drop(&mut self) {
        if self.armed {
            self.journal.emit(Event::SlotReleased {
                slot: std::mem::take(&mut self.slot),
                slot_kind: self.kind.label().to_owned(),
                owner: std::mem::take(&mut self.owner),
                held_ms: u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX),
                cpu_usec: self.cpu_usec,
            });
        }
    }
}

impl Slot {
    /// A slot held by `lease`, its release journaled in `journal`.
    pub(crate) fn new(
        kind: Kind,
        lease: Lease,
        weight: u32,
        share_owner: Option<String>,
        journal: &Journal,
    ) -> Slot {
        let note = Released::new(journal, &lease, kind);
        Slot {
            kind,
            lease,
            weight,
            share_owner,
            note,
        }
    }

    /// The slot's kind.
    #[must_use]
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// How many units of its kind's cap it holds (its record's `weight`; 1 for the full run).
    #[must_use]
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// The owner whose share its units count against (its record's `shareOwner`: `uid:1001`,
    /// `group:ci`, `owner:nightly`), if its record names one.
    #[must_use]
    pub fn share_owner(&self) -> Option<&str> {
        self.share_owner.as_deref()
    }

    /// The slot's file name (`agent-3.lock`).
    #[must_use]
    pub fn name(&self) -> &str {
        self.lease.resource()
    }

    /// The held lease (its record, epoch, guard).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Adds fields to the slot's record (see `Lease::annotate`), e.g. the process that runs
    /// under it. The pool's own fields, `weight` and `shareOwner`, are refused
    /// ([`slot::Error::PoolField`]): what a slot counts for is fixed when it is taken.
    pub fn annotate(
        &mut self,
        fields: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), slot::Error> {
        if let Some(field) = fields
            .keys()
            .find(|k| [WEIGHT_FIELD, SHARE_OWNER_FIELD].contains(&k.as_str()))
        {
            return Err(slot::Error::PoolField {
                slot: self.lease.resource().to_owned(),
                field: field.clone(),
            });
        }
        self.lease
            .annotate(fields)
            .map_err(|source| slot::Error::Annotate {
                slot: self.lease.resource().to_owned(),
                source: Box::new(source),
            })
    }

    /// Records what the run under the slot used (`cpu_usec`, µs of CPU from its cgroup), said
    /// in the `slot-released` event of its release.
    pub fn note_usage(&mut self, cpu_usec: Option<u64>) {
        self.note.cpu_usec = cpu_usec;
    }

    /// Gives the slot up without releasing it: its record stays and its held guard is returned,
    /// for a holder that passes the guard's descriptor to another process, which takes the
    /// slot over with [`Pool::adopt`].
    #[must_use]
    pub fn hand_over(self) -> Option<worklane_guard::Guard> {
        let Slot {
            lease, mut note, ..
        } = self;
        note.armed = false;
        lease.hand_over()
    }

    /// Releases the slot now, reporting errors.
    pub fn release(self) -> Result<(), slot::Error> {
        let Slot { lease, note, .. } = self;
        let slot = lease.resource().to_owned();
        let released = lease.release().map_err(|source| slot::Error::Release {
            slot,
            source: Box::new(source),
        });
        drop(note);
        released
    }
}

/// The machine's slot pool in one slot directory.
#[derive(Clone)]
pub struct Pool {
    dir: SlotDir,
    locations: Locations,
    env: Environment,
    clock: Arc<dyn Clock>,
    /// When this pool (and its clones) last swept temp files, on its clock (0: never).
    last_sweep_ms: Arc<AtomicU64>,
    /// The inotify instances its waiting takes use, kept for reuse (`crate::watch`).
    watches: Arc<crate::watch::Watches>,
    /// Where its events go.
    journal: Journal,
    /// The broken files it has journaled (once each per pool).
    broken: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// How often one pool sweeps temp files: only temps older than a minute are removed, so a
/// long-lived pool (the dispatcher) lists the directory for them at most every 10 s instead of
/// at every take. A pool's first take always sweeps.
pub const SWEEP_EVERY_MS: u64 = worklane_slotfile::TEMP_MIN_AGE_MS / 6;

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("dir", &self.dir)
            .field("config", &self.locations.config)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// The pool of a resolved slot directory (see `SlotDir::resolve`). The config it was
    /// resolved with is not kept: every take reads it again ([`Pool::config`]).
    #[must_use]
    pub fn new(resolved: Resolved) -> Pool {
        Pool::open(resolved.into())
    }

    /// The pool of a slot directory whose config has not been loaded (see
    /// `SlotDir::resolve_located`): STOP, the drain flag, the idle probe and the views work
    /// whatever the config holds; an agent or test-run take reads the config and fails with
    /// [`take::Error::Config`](crate::take::Error::Config) while it is broken, and
    /// [`Pool::snapshot`] reports its problem.
    #[must_use]
    pub fn open(located: Located) -> Pool {
        let journal = Journal::of(&located.dir);
        Pool {
            dir: located.dir,
            locations: located.locations,
            env: located.env,
            clock: Arc::new(SystemClock),
            last_sweep_ms: Arc::new(AtomicU64::new(0)),
            watches: Arc::default(),
            journal,
            broken: Arc::default(),
        }
    }

    /// Journals its events in `journal` instead of the directory's own ([`Journal::of`]):
    /// [`Journal::off`] writes none.
    #[must_use]
    pub fn with_journal(mut self, journal: Journal) -> Pool {
        self.journal = journal;
        self
    }

    /// Where its events go: the journal of its directory, at the cap its config last said.
    #[must_use]
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Uses `clock` for drain decisions and record times.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Pool {
        self.clock = clock;
        // Sweep times are on the clock: a new clock starts a new count.
        self.last_sweep_ms = Arc::new(AtomicU64::new(0));
        self
    }

    /// The clock it decides by.
    #[must_use]
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    /// The slot directory.
    #[must_use]
    pub fn dir(&self) -> &SlotDir {
        &self.dir
    }

    /// Where the directory, config and drain flag are.
    #[must_use]
    pub fn locations(&self) -> &Locations {
        &self.locations
    }

    /// The caps, re-read from the config file (an operator may change them while we run); the
    /// journal's cap is set from it too.
    pub fn config(&self) -> Result<Config, crate::error::take::Error> {
        let config = Config::load_in(&self.env, &self.locations.config)
            .map_err(|source| crate::error::take::Error::Config { source })?;
        self.journal.set_max_bytes(config.journal_max_bytes);
        Ok(config)
    }

    /// The pool's file `name` in its slot directory.
    pub(crate) fn file(&self, name: &str) -> Result<worklane_slotfile::SlotPath, look::Error> {
        file_in(&self.dir, name)
    }

    /// The error of a listing of the slot directory that failed.
    pub(crate) fn listing(
        &self,
    ) -> impl FnOnce(worklane_slotfile::open::Error) -> look::Error + '_ {
        |source| look::Error::List {
            dir: self.dir.path().to_owned(),
            source,
        }
    }

    fn options(&self) -> Options {
        Options::process()
            .clock(Arc::clone(&self.clock))
            .journal(self.journal.clone())
    }

    /// Takes over the slot `name` whose held guard another process handed to this one (`fd`,
    /// received over `SCM_RIGHTS`): checks that `fd` is that slot's guard and holds its lock,
    /// then rewrites the record to name this process, keeping the epoch and what the slot
    /// counts for (the `weight` and `shareOwner` of the record it replaces, whatever
    /// `request` says).
    pub fn adopt(
        &self,
        name: &str,
        fd: std::os::fd::OwnedFd,
        request: &Request,
    ) -> Result<Slot, slot::Error> {
        let kind = if slot_index("agent", name).is_some() {
            Kind::Agent
        } else if slot_index("test", name).is_some() {
            Kind::Test { limit_ms: None }
        } else if name == FULL_RUN_LOCK {
            Kind::FullRun
        } else if slot_index("job", name).is_some() {
            Kind::Job
        } else {
            return Err(slot::Error::NotASlot {
                name: name.to_owned(),
            });
        };
        let guard = worklane_guard::Guard::from_received(fd, &self.dir, self.dir.path(), name)
            .map_err(|source| slot::Error::AdoptGuard {
                slot: name.to_owned(),
                source,
            })?;
        // Read under the guard we were handed: the record its last holder wrote. Its weight is
        // kept as written (a bad one too: it counts 1, and `slots` keeps reporting it).
        let before: Option<serde_json::Value> = self
            .file(name)?
            .read()
            .ok()
            .flatten()
            .and_then(|raw| serde_json::from_slice(&raw).ok());
        let field = |f: &str| before.as_ref().and_then(|v| v.get(f)).cloned();
        let mut request = request.clone();
        request.fields.remove(WEIGHT_FIELD);
        request.fields.remove(SHARE_OWNER_FIELD);
        let weight = field(WEIGHT_FIELD);
        let units = match kind {
            Kind::FullRun => 1,
            _ => crate::weight::Weight::of_value(weight.as_ref()).units(u32::MAX),
        };
        if let Some(weight) = weight {
            request = request.field(WEIGHT_FIELD, weight);
        }
        let share_owner = field(SHARE_OWNER_FIELD).and_then(|v| v.as_str().map(str::to_owned));
        if let Some(owner) = &share_owner {
            request = request.field(SHARE_OWNER_FIELD, owner.clone());
        }
        let lease = worklane_lease::adopt(&self.dir, name, guard, &request, &self.options())
            .map_err(|source| slot::Error::Adopt {
                slot: name.to_owned(),
                source,
            })?;
        Ok(Slot::new(kind, lease, units, share_owner, &self.journal))
    }
}

#[cfg(test)]
mod tests {
    use super::slot_index;

    #[test]
    fn slot_names() {
        assert_eq!(slot_index("agent", "agent-0.lock"), Some(0));
        assert_eq!(slot_index("agent", "agent-17.lock"), Some(17));
        for bad in [
            "agent-.lock",
            "agent-01.lock",
            "agent-1.lock.epoch",
            "agent-1.lock.0123456789abcdef.claim",
            "agent-x.lock",
            "test-1.lock",
            "agent-+1.lock",
        ] {
            assert_eq!(slot_index("agent", bad), None, "{bad}");
        }
    }
}
