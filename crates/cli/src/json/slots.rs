//! `slots --json` and the parts other documents share with it (a problem, STOP, the drain).

use super::*;

// ---- slots --json ----------------------------------------------------------------------------

/// `slots --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Slots {
    pub(crate) version: u32,
    pub(crate) dir: String,
    pub(crate) config: ConfigFile,
    pub(crate) max_agents: u32,
    pub(crate) max_test_runs: u32,
    pub(crate) max_jobs: u32,
    pub(crate) agents_held: usize,
    pub(crate) test_runs_held: usize,
    pub(crate) agent_units_held: u32,
    pub(crate) test_run_units_held: u32,
    pub(crate) shares: Vec<ShareUse>,
    pub(crate) jobs_held: usize,
    pub(crate) full_run_held: bool,
    pub(crate) stop: Option<Stop>,
    pub(crate) drain: Drain,
    pub(crate) slots: Vec<Slot>,
    pub(crate) problems: Vec<Problem>,
    pub(crate) queue: Queue,
    pub(crate) line: Vec<LineEntry>,
    pub(crate) budgets: Vec<Budget>,
    pub(crate) containment: Containment,
    /// Why the config in force cannot be used (then `max_agents` and `max_test_runs` are 0:
    /// no take is admitted), or `None`.
    pub(crate) config_problem: Option<ConfigProblem>,
    /// With `--fleet` only: the fleet pool, or why it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fleet: Option<SlotsFleet>,
}

/// `slots --fleet`'s `fleet`: the pool as `fleet status --json` shows it, or the error.
#[derive(Debug, Serialize)]
pub(crate) struct SlotsFleet {
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<FleetStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// The config file in force; when it does not exist, the defaults hold.
#[derive(Debug, Serialize)]
pub(crate) struct ConfigFile {
    pub(crate) path: String,
    pub(crate) exists: bool,
}

/// Why the config in force cannot be used: every take is refused (78) until it is fixed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConfigProblem {
    /// The config file.
    pub(crate) file: String,
    /// What is wrong with it.
    pub(crate) what: String,
    /// The command or step that fixes it.
    pub(crate) fix: String,
}

/// STOP while in force.
#[derive(Debug, Serialize)]
pub(crate) struct Stop {
    pub(crate) by: String,
    pub(crate) at: String,
    pub(crate) reason: String,
}

/// The drain flag: its `state`, and the flag's fields when it could be read.
#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub(crate) enum Drain {
    None,
    InForce(DrainFlag),
    Expired(DrainFlag),
    TooFarAhead(DrainFlag),
    Unreadable { detail: String },
}

/// A drain flag as written.
#[derive(Debug, Serialize)]
pub(crate) struct DrainFlag {
    pub(crate) since: String,
    pub(crate) until: String,
    pub(crate) to: Option<String>,
}

/// One slot, run, role lease or other lock file.
#[derive(Debug, Serialize)]
pub(crate) struct Slot {
    pub(crate) name: String,
    pub(crate) kind: &'static str,
    pub(crate) pid: Option<u32>,
    pub(crate) owner: Option<String>,
    /// The dispatcher's attempt the slot or lane belongs to.
    pub(crate) attempt: Option<String>,
    pub(crate) since: Option<String>,
    pub(crate) role: Option<String>,
    pub(crate) command: Option<String>,
    pub(crate) epoch: Option<u64>,
    pub(crate) limit_ms: Option<u64>,
    pub(crate) last_pulse: Option<String>,
    pub(crate) weight: u32,
    pub(crate) units: u32,
    pub(crate) share_owner: Option<String>,
    pub(crate) state: &'static str,
    pub(crate) counts: bool,
    pub(crate) reason: String,
    /// The run's cgroup (its record's `cgroup`) and what it holds, when it has one.
    pub(crate) cgroup: Option<SlotCgroup>,
}

/// A held slot's cgroup (`slots --json`): what runs in it and what it used.
#[derive(Debug, Serialize)]
pub(crate) struct SlotCgroup {
    pub(crate) path: String,
    pub(crate) procs: Vec<u32>,
    pub(crate) cpu_usec: Option<u64>,
    pub(crate) memory_current: Option<u64>,
    pub(crate) memory_peak: Option<u64>,
}

/// Whether this worklane's runs get a cgroup each (`slots --json`'s `containment`).
#[derive(Debug, Serialize)]
pub(crate) struct Containment {
    pub(crate) on: bool,
    /// Where the runs' cgroups go (`/worklane`), when on.
    pub(crate) cgroups: Option<String>,
    /// Why not, when off.
    pub(crate) why: Option<String>,
}

/// One owner's use of its share of the agents' cap (`slots --json`).
#[derive(Debug, Serialize)]
pub(crate) struct ShareUse {
    pub(crate) owner: String,
    pub(crate) held: u32,
    pub(crate) share: Option<u32>,
}

/// A stray or broken file (`slots --json`, `why --json`, `budget show --json`, `queue ls
/// --json`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Problem {
    pub(crate) name: String,
    pub(crate) what: String,
    pub(crate) fix: String,
    pub(crate) blocks: Option<&'static str>,
}

impl From<worklane_admission::Problem> for Problem {
    fn from(p: worklane_admission::Problem) -> Problem {
        Problem {
            name: p.name,
            what: p.what,
            fix: p.fix,
            blocks: p.blocks,
        }
    }
}

/// Problems as lines for a person: `NAME: WHAT; fix: FIX`.
pub(crate) fn problem_lines(problems: &[Problem]) -> Vec<String> {
    problems
        .iter()
        .map(|p| format!("{}: {}; fix: {}", p.name, p.what, p.fix))
        .collect()
}

/// The admission dispatcher as the slot directory shows it.
#[derive(Debug, Serialize)]
pub(crate) struct Queue {
    pub(crate) dispatcher: Dispatcher,
    /// The status entries `queue-<lane>.json` as the dispatcher wrote them (PROTOCOL.md 14.1).
    pub(crate) attempts: Vec<serde_json::Value>,
}

/// The dispatcher's lock: its pid (from the record) and whether one holds it now.
#[derive(Debug, Serialize)]
pub(crate) struct Dispatcher {
    pub(crate) pid: Option<u32>,
    pub(crate) alive: bool,
}

/// One entry of a waiting line.
#[derive(Debug, Serialize)]
pub(crate) struct LineEntry {
    pub(crate) kind: String,
    /// 1 for the head; `None` for a dead waiter's entry.
    pub(crate) position: Option<u32>,
    pub(crate) priority: i64,
    pub(crate) start: String,
    pub(crate) pid: Option<u32>,
    pub(crate) owner: Option<String>,
    pub(crate) command: Option<String>,
    pub(crate) log: Option<String>,
    pub(crate) live: bool,
    pub(crate) name: String,
}
