//! What a view reads beside the pool's snapshot: the dispatcher's queue as its files show it,
//! the waiting lines, the config file, the budgets, and the problems of each (`slots`, `why`
//! and `queue ls` show them).

use crate::doc;
use serde_json::Value;
use worklane_admission::Snapshot;
use worklane_budget::Ledger;
use worklane_lease::rfc3339_ms;

/// The dispatcher's queue as the slot directory shows it: the dispatcher (its lock's record
/// and whether its guard is held) and the status entries `queue-<lane>.json` it keeps.
pub struct QueueView {
    /// The dispatcher's pid, from `dispatcher.lock`, if there is a record.
    pub pid: Option<u32>,
    /// Whether a dispatcher holds `dispatcher.lock` now.
    pub alive: bool,
    /// The status entries (JSON objects).
    pub attempts: Vec<Value>,
    /// The status entries that could not be read or are not JSON objects.
    pub problems: Vec<doc::Problem>,
}

/// The dispatcher's queue as the files of the slot directory `dir` show it.
pub fn queue_view(dir: &worklane_slotfile::SlotDir) -> QueueView {
    let lock = dir.file("dispatcher.lock").ok();
    let pid = lock
        .as_ref()
        .and_then(|l| worklane_lease::read_record(l).ok().flatten())
        .and_then(|r| r.pid());
    // A held guard is a live dispatcher (it holds it for life); probing a free one takes it
    // for a moment, as `slots` does for every lock.
    let alive = lock.is_some_and(|l| matches!(l.try_guard(), Ok(None)));
    let (entries, unreadable) = worklane_dispatch::status::read_all(dir);
    let attempts = entries.into_iter().map(|e| e.value).collect();
    let problems = unreadable
        .into_iter()
        .map(|u| {
            let shown = worklane_stdx::shell_quote(&dir.path().join(&u.name).display().to_string());
            doc::Problem {
                what: format!(
                    "a dispatcher status entry that {}: the attempt it describes is not shown \
                     here (`worklane queue ls` asks the dispatcher itself)",
                    u.why
                ),
                fix: format!(
                    "a running dispatcher rewrites it at its next heartbeat; with none running: \
                     rm -r -- {shown}"
                ),
                name: u.name,
                blocks: None,
            }
        })
        .collect();
    QueueView {
        pid,
        alive,
        attempts,
        problems,
    }
}

/// The waiting lines: each live entry with its place in its kind's line (dead ones, waiting
/// to be retired by the next waiter, are listed with `"live": false` and no position).
pub fn line_json(snapshot: &Snapshot) -> Vec<doc::LineEntry> {
    let mut positions: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    snapshot
        .line
        .iter()
        .map(|v| {
            let position = v.live.then(|| {
                let n = positions.entry(v.entry.kind.as_str()).or_insert(0);
                *n += 1;
                *n
            });
            let r = v.record.as_ref();
            doc::LineEntry {
                kind: v.entry.kind.clone(),
                position,
                priority: v.entry.priority,
                start: rfc3339_ms(v.entry.start_ms),
                pid: r.and_then(|r| r.pid()),
                owner: r.and_then(|r| r.owner.clone()),
                command: r.and_then(|r| r.extra_str("command")).map(str::to_owned),
                log: r.and_then(|r| r.extra_str("log")).map(str::to_owned),
                live: v.live,
                name: v.entry.name(),
            }
        })
        .collect()
}

/// The config file in force, whether it exists (when not, the defaults hold), and why it
/// cannot be used, if it cannot.
pub struct ConfigFile {
    /// Its path.
    pub path: std::path::PathBuf,
    /// Whether something is at its name.
    pub exists: bool,
    /// Why it cannot be used, if it cannot.
    pub problem: Option<crate::config_problem::Problem>,
}

impl ConfigFile {
    fn of(pool: &worklane_admission::Pool, snapshot: &Snapshot) -> ConfigFile {
        let path = pool.locations().config.clone();
        // Something is at the name unless the read said there is nothing (a file it cannot
        // read or that is not a regular file is there, and is the problem).
        let exists = !matches!(worklane_slotfile::read::read_path(&path), Ok(None));
        let problem = snapshot
            .config
            .as_ref()
            .err()
            .map(crate::config_problem::Problem::of);
        ConfigFile {
            path,
            exists,
            problem,
        }
    }
}

/// Everything `slots` shows but the snapshot: the budgets (and the state files left out of
/// them), the dispatcher's queue, the config file.
pub struct Around {
    /// The config file in force.
    pub config: ConfigFile,
    /// The budgets' health, and the state files left out of it.
    pub budgets: worklane_budget::Health,
    /// The dispatcher's queue.
    pub queue: QueueView,
    /// A STOP or drain flag that is there but not as worklane writes it.
    pub operator: Vec<doc::Problem>,
}

impl Around {
    /// What is around `snapshot` of `pool` now.
    pub fn of(pool: &worklane_admission::Pool, snapshot: &Snapshot) -> Around {
        // The budgets are a view, never a reason to fail: an unlistable directory shows none.
        let budgets = Ledger::new(pool.dir().clone())
            .health_report()
            .unwrap_or_else(|_| worklane_budget::Health {
                views: Vec::new(),
                unshown: Vec::new(),
            });
        let operator = worklane_admission::stop_problem(pool.dir())
            .into_iter()
            .chain(worklane_admission::drain_problem(
                &pool.locations().drain_dir,
                &snapshot.drain,
            ))
            .map(doc::Problem::from)
            .collect();
        Around {
            config: ConfigFile::of(pool, snapshot),
            budgets,
            queue: queue_view(pool.dir()),
            operator,
        }
    }

    /// Every problem the views show but the config's: a STOP or drain flag that is not one,
    /// the pool's stray and broken files, the budget states left out of the budgets, the
    /// status entries that are not ones.
    pub fn problems(&self, snapshot: &Snapshot) -> Vec<doc::Problem> {
        let mut all: Vec<doc::Problem> = self.operator.clone();
        all.extend(snapshot.problems.iter().cloned().map(doc::Problem::from));
        all.extend(crate::budget::unshown_problems(
            &snapshot.dir,
            &self.budgets.unshown,
        ));
        all.extend(self.queue.problems.iter().cloned());
        all
    }
}
