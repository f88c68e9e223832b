//! What `worklane slots` shows and `stop-all` enforces: every slot and lease file with its
//! verdict, the idle probe, and the commands records name.

use super::blocker::Holding;
use super::count::SlotState;
use super::{FULL_RUN_LOCK, Pool, slot_index};
use crate::drain::DrainState;
use crate::look::Error;
use crate::stop::Stop;
use crate::weight::Weight;
use std::path::PathBuf;
use worklane_lease::{Liveness, ProcessLiveness, Record, TtlLiveness};
use worklane_slotfile::{Config, ShareKey};

/// One slot or lease file as seen by [`Pool::snapshot`].
#[derive(Debug, Clone, PartialEq)]
pub struct SlotView {
    /// File name.
    pub name: String,
    /// `agent`, `test`, `full-run`, `role` or `lock`.
    pub kind: &'static str,
    /// The record, when it parses.
    pub record: Option<Record>,
    /// The verdict on its holder.
    pub state: SlotState,
    /// Its record's `weight`, as written ([`Weight::Absent`] without one, or without a
    /// readable record).
    pub weight: Weight,
    /// The units of its kind's cap it counts for, as a take counts them under the cap in
    /// force (its weight uncut when the config cannot be used; 1 for a held job slot or full
    /// run); 0 when its holder is gone, and for locks and leases outside the pool's caps.
    pub units: u32,
    /// Its record's `shareOwner`: the owner whose share its units count against.
    pub share_owner: Option<String>,
}

/// What one owner holds of the agents' units, and may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareUse {
    /// The owner (`uid:1001`, `group:ci`, `owner:nightly`).
    pub owner: String,
    /// Units it holds now.
    pub held: u32,
    /// Its share (its own, else that of `*`); `None`: only the cap (or no config in force).
    pub share: Option<u32>,
    /// Its live agent slots.
    pub slots: Vec<Holding>,
}

impl Snapshot {
    /// The units held of `kind` (`agent`, `test`, `job`, `full-run`): the sum of its slots'
    /// units.
    #[must_use]
    pub fn held_units(&self, kind: &str) -> u32 {
        self.slots
            .iter()
            .filter(|s| s.kind == kind)
            .fold(0u32, |n, s| n.saturating_add(s.units))
    }

    /// The live agent slots whose units count against `owner`'s share.
    #[must_use]
    pub fn holdings(&self, owner: &str) -> Vec<Holding> {
        self.slots
            .iter()
            .filter(|s| s.kind == "agent" && s.units > 0)
            .filter(|s| s.share_owner.as_deref() == Some(owner))
            .map(|s| Holding {
                slot: s.name.clone(),
                units: s.units,
                pid: s
                    .record
                    .as_ref()
                    .and_then(|r| r.holder.pid.present().copied()),
                holder: s.record.as_ref().and_then(|r| r.owner.clone()),
            })
            .collect()
    }

    /// Every owner that holds agent units or that the config's `shares` name (`*` aside), with
    /// what it holds and its share, by owner.
    #[must_use]
    pub fn share_uses(&self) -> Vec<ShareUse> {
        let shares = self.config.as_ref().map(|c| c.shares.clone()).ok();
        let mut owners: Vec<String> = self
            .slots
            .iter()
            .filter(|s| s.kind == "agent" && s.units > 0)
            .filter_map(|s| s.share_owner.clone())
            .collect();
        if let Some(shares) = &shares {
            owners.extend(
                shares
                    .iter()
                    .filter(|(k, _)| **k != ShareKey::Anyone)
                    .map(|(k, _)| k.to_string()),
            );
        }
        owners.sort();
        owners.dedup();
        owners
            .into_iter()
            .map(|owner| {
                let slots = self.holdings(&owner);
                let share = shares.as_ref().and_then(|shares| {
                    ShareKey::parse(&owner).and_then(|key| shares.ceiling(&key))
                });
                ShareUse {
                    held: slots.iter().fold(0u32, |n, h| n.saturating_add(h.units)),
                    owner,
                    share,
                    slots,
                }
            })
            .collect()
    }
}

/// Everything `worklane slots` shows.
#[derive(Debug)]
pub struct Snapshot {
    /// The slot directory.
    pub dir: PathBuf,
    /// The caps in force, or why the config cannot be used (then every agent and test-run
    /// take fails with [`take::Error::Config`](crate::take::Error::Config) until it is fixed;
    /// STOP, the drain and the full run do not read it).
    pub config: Result<Config, worklane_slotfile::config::Error>,
    /// STOP, if in force.
    pub stop: Option<Stop>,
    /// The drain flag.
    pub drain: DrainState,
    /// Every slot, run and lease file, sorted by name.
    pub slots: Vec<SlotView>,
    /// Stray and broken files, each with what it does and its fix.
    pub problems: Vec<crate::Problem>,
    /// The waiting lines, each kind's in order.
    pub line: Vec<crate::line::LineView>,
}

impl Pool {
    /// Whether the machine is idle for a full run started outside any harness: no live full
    /// run (decided from the lock, not from processes).
    pub fn idle(&self) -> Result<bool, Error> {
        let path = self.file(FULL_RUN_LOCK)?;
        Ok(!self.state_of(&path, &ProcessLiveness)?.is_held())
    }

    /// Every slot, run, lease and lock file with its verdict, plus caps, STOP and drain.
    /// Changes nothing (see [`Pool::snapshot_retiring`] for the operator's views).
    pub fn snapshot(&self) -> Result<Snapshot, Error> {
        self.snapshot_with(false)
    }

    /// [`Pool::snapshot`] for a view an operator reads (`slots`, `why`, `metrics`, `top`): a
    /// slot (agent, test, job, full run) whose holder is proved dead is shown dead this once
    /// and retired: its record removed under its guard and a `holder-gone` event journaled,
    /// so that a holder killed with nobody after it is on record from the first look, not
    /// only from the next take (PROTOCOL.md section 8).
    pub fn snapshot_retiring(&self) -> Result<Snapshot, Error> {
        self.snapshot_with(true)
    }

    fn snapshot_with(&self, retiring: bool) -> Result<Snapshot, Error> {
        let config = Config::load_in(&self.env, &self.locations.config);
        // The caps the units are counted under (none while the config cannot be used).
        let cap = |kind: &str| match (&config, kind) {
            (Ok(c), "agent") => c.max_agents,
            (Ok(c), "test") => c.max_test_runs,
            _ => u32::MAX,
        };
        let mut slots = Vec::new();
        let (files, hidden) = self.dir.list_with_hidden().map_err(self.listing())?;
        for path in &files {
            let name = path.name();
            let (kind, liveness): (&'static str, Box<dyn Liveness>) =
                if slot_index("agent", name).is_some() {
                    ("agent", Box::new(ProcessLiveness))
                } else if slot_index("test", name).is_some() {
                    ("test", Box::new(ProcessLiveness))
                } else if slot_index("job", name).is_some() {
                    ("job", Box::new(ProcessLiveness))
                } else if name == FULL_RUN_LOCK {
                    ("full-run", Box::new(ProcessLiveness))
                } else if name.starts_with("role-") && name.ends_with(".lease") {
                    ("role", Box::new(TtlLiveness::default()))
                } else if name.ends_with(".lease") {
                    ("lease", Box::new(TtlLiveness::default()))
                } else if name.ends_with(".lock") {
                    ("lock", Box::new(ProcessLiveness))
                } else {
                    continue;
                };
            // The state first, then the record: a free guard's record is the one the state was
            // judged from; a held guard's record is read after the probe, so it never names a
            // holder that had already left before it. A record that cannot be read is shown
            // without one; its state says why.
            // A slot's dead holder is retired on the way (`holder-gone`): see
            // `Pool::observe_retiring`.
            let retire =
                (retiring && matches!(kind, "agent" | "test" | "job" | "full-run")).then_some(kind);
            let (state, raw) = self.observe_retiring(path, liveness.as_ref(), retire)?;
            let raw = match raw {
                Some(raw) => Some(raw),
                None if matches!(state, SlotState::GuardHeld) => path.read().ok().flatten(),
                None => None,
            };
            let record = raw.and_then(|raw| Record::parse(&raw).ok());
            let (weight, share_owner) = match (kind, &record) {
                ("agent" | "test", Some(record)) => (
                    Weight::of(record),
                    crate::weight::share_owner(record).map(str::to_owned),
                ),
                _ => (Weight::Absent, None),
            };
            let units = match kind {
                "agent" | "test" => crate::weight::counted(&state, &weight, cap(kind)),
                // A job slot is one token of `max_jobs`, always of weight 1.
                "full-run" | "job" => u32::from(state.is_held()),
                _ => 0,
            };
            slots.push(SlotView {
                name: name.to_owned(),
                kind,
                record,
                state,
                weight,
                units,
                share_owner,
            });
        }
        // Guards held with no record: what a finished run left running still holds its slot.
        for (prefix, kind) in [("agent", "agent"), ("test", "test"), ("job", "job")] {
            let listed: Vec<u32> = slots
                .iter()
                .filter_map(|v| slot_index(prefix, &v.name))
                .collect();
            for (_, path) in self.recordless_held(prefix, &hidden, &listed)? {
                if !slots.iter().any(|v| v.name == path.name()) {
                    slots.push(SlotView {
                        name: path.name().to_owned(),
                        kind,
                        record: None,
                        state: SlotState::GuardHeld,
                        weight: Weight::Absent,
                        units: 1,
                        share_owner: None,
                    });
                }
            }
        }
        slots.sort_by(|a, b| a.name.cmp(&b.name));
        // One listing for the slots, the problems and the lines: each more is a read of the
        // whole directory (thousands of names with a long line).
        let mut problems = crate::problems::scan(&self.dir, self.clock.now_ms(), &files, &hidden);
        problems.extend(
            slots
                .iter()
                .filter_map(|v| crate::problems::weight_problem(&self.dir, v, cap(v.kind))),
        );
        Ok(Snapshot {
            dir: self.dir.path().to_owned(),
            config,
            stop: self.stop()?,
            drain: self.drain()?,
            slots,
            problems,
            line: self.line_views_in(&files),
        })
    }
}

/// A command that a lock or lease record names as running under it (`commandProcess`, written
/// by `worklane run`, `lease run` and the queued full run), read without any lock: the input
/// of STOP's enforcement, which halts such commands when their supervisor cannot.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCommand {
    /// The lock or lease file naming it.
    pub resource: String,
    /// The record (its holder is the supervisor).
    pub record: Record,
    /// The command's pid, in the record's pid namespace.
    pub pid: u32,
    /// The command's start identity when recorded.
    pub start: Option<u64>,
    /// Whether the command leads a process group of its own (signalled whole).
    pub group: bool,
    /// Who may have written the record file (owner, mode, links): a record that others than
    /// its owner could have written proves nothing about the command it names.
    pub writer: worklane_slotfile::Written,
    /// The resource's guard (device and inode), when there is one: the processes holding a
    /// copy of its descriptor are the run's (process-liveness locks).
    pub guard: Option<worklane_guard::FileId>,
}

impl Pool {
    /// Every command named by a record in the directory. Files that cannot be read or parsed,
    /// or name no command, are skipped: this is a best-effort view for enforcement.
    pub fn recorded_commands(&self) -> Result<Vec<RecordedCommand>, Error> {
        let mut found = Vec::new();
        for path in self.dir.list().map_err(self.listing())? {
            let name = path.name();
            if !(name.ends_with(".lock") || name.ends_with(".lease")) {
                continue;
            }
            let Ok(Some((raw, writer))) = path.read_with_owner() else {
                continue;
            };
            let Ok(record) = Record::parse(&raw) else {
                continue;
            };
            let Some(command) = record.extra.get("commandProcess") else {
                continue;
            };
            let Some(pid) = command
                .get("pid")
                .and_then(serde_json::Value::as_u64)
                .and_then(|p| u32::try_from(p).ok())
                .filter(|&p| p > 0)
            else {
                continue;
            };
            found.push(RecordedCommand {
                resource: name.to_owned(),
                pid,
                start: command.get("start").and_then(serde_json::Value::as_u64),
                group: command.get("group") == Some(&serde_json::Value::Bool(true)),
                guard: name.ends_with(".lock").then(|| path.guard_id()).flatten(),
                record,
                writer,
            });
        }
        Ok(found)
    }
}
