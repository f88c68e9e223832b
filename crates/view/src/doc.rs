//! `slots --json` and the parts other documents share with it (a problem, STOP, the drain).

use serde::Serialize;
use std::collections::BTreeMap;

/// The `version` of every document; raised when a field changes meaning or goes away.
pub const VERSION: u32 = 1;

/// Serializes a document on one line (plain data: it cannot fail).
pub fn line(doc: &impl Serialize) -> String {
    serde_json::to_string(doc).unwrap_or_default()
}

/// Serializes a document indented, as `slots --json` and `budget show --json` print it.
pub fn pretty(doc: &impl Serialize) -> String {
    serde_json::to_string_pretty(doc).unwrap_or_default()
}

// ---- slots --json ----------------------------------------------------------------------------

/// `slots --json`.
#[derive(Debug, Serialize)]
pub struct Slots {
    /// The document's version, [`VERSION`].
    pub version: u32,
    /// The slot directory.
    pub dir: String,
    /// The config file in force.
    pub config: ConfigFile,
    /// The agents' cap in force (0 while `config_problem` is set).
    pub max_agents: u32,
    /// The test runs' cap in force (0 while `config_problem` is set).
    pub max_test_runs: u32,
    /// The cap of a build's job slots.
    pub max_jobs: u32,
    /// `agent` entries that count as held.
    pub agents_held: usize,
    /// `test` entries that count as held.
    pub test_runs_held: usize,
    /// The units of the agents' cap those entries hold (a run of weight N holds N).
    pub agent_units_held: u32,
    /// The units of the test runs' cap held.
    pub test_run_units_held: u32,
    /// Each owner's use of its share of the agents' cap (PROTOCOL.md 12.10).
    pub shares: Vec<ShareUse>,
    /// `job` entries that count as held.
    pub jobs_held: usize,
    /// Whether the `full-run` entry counts.
    pub full_run_held: bool,
    /// STOP, while in force (an unreadable STOP is in force too: its `by` and `at` empty).
    pub stop: Option<Stop>,
    /// The drain flag.
    pub drain: Drain,
    /// Every slot, run, role lease and other lock file, sorted by name.
    pub slots: Vec<Slot>,
    /// Stray or broken files, each with what it does and the command that fixes it.
    pub problems: Vec<Problem>,
    /// The admission dispatcher as the slot directory shows it.
    pub queue: Queue,
    /// The waiting lines (PROTOCOL.md 12.9), each kind's entries in line order.
    pub line: Vec<LineEntry>,
    /// The API budgets.
    pub budgets: Vec<Budget>,
    /// Whether runs get a cgroup each here.
    pub containment: Containment,
    /// Why the config in force cannot be used (then `max_agents` and `max_test_runs` are 0:
    /// no take is admitted), or `None`.
    pub config_problem: Option<ConfigProblem>,
    /// With `--fleet` only: the fleet pool, or why it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<SlotsFleet>,
}

/// `slots --fleet`'s `fleet`: the pool as `fleet status --json` shows it, or the error.
#[derive(Debug, Serialize)]
pub struct SlotsFleet {
    /// The pool, when etcd answered.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub status: Option<FleetStatus>,
    /// Why the pool could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The config file in force; when it does not exist, the defaults hold.
#[derive(Debug, Serialize)]
pub struct ConfigFile {
    /// Its path.
    pub path: String,
    /// Whether it exists (when not, the defaults hold).
    pub exists: bool,
}

/// Why the config in force cannot be used: every take is refused (78) until it is fixed.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigProblem {
    /// The config file.
    pub file: String,
    /// What is wrong with it.
    pub what: String,
    /// The command or step that fixes it.
    pub fix: String,
}

/// STOP while in force.
#[derive(Debug, Serialize)]
pub struct Stop {
    /// Who wrote it (`USER@HOST`).
    pub by: String,
    /// When (RFC 3339).
    pub at: String,
    /// Why, in the writer's words (or what is wrong with an unreadable STOP).
    pub reason: String,
}

/// The drain flag: its `state`, and the flag's fields when it could be read.
#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Drain {
    /// No drain flag.
    None,
    /// A drain in force: takes wait.
    InForce(DrainFlag),
    /// A drain whose end has passed (ignored).
    Expired(DrainFlag),
    /// A drain that ends more than 4 h ahead (ignored).
    TooFarAhead(DrainFlag),
    /// A drain flag that cannot be read (ignored).
    Unreadable {
        /// What is wrong with it.
        detail: String,
    },
}

/// A drain flag as written.
#[derive(Debug, Serialize)]
pub struct DrainFlag {
    /// When the drain began (RFC 3339).
    pub since: String,
    /// When it ends (RFC 3339).
    pub until: String,
    /// Where the work goes meanwhile, if the flag says.
    pub to: Option<String>,
}

/// One slot, run, role lease or other lock file.
#[derive(Debug, Serialize)]
pub struct Slot {
    /// The file's name, e.g. `agent-0.lock`.
    pub name: String,
    /// `agent`, `test`, `job`, `full-run`, `role`, `lease` or `lock`.
    pub kind: &'static str,
    /// The holder's pid, from its record.
    pub pid: Option<u32>,
    /// The holder's `owner` as recorded.
    pub owner: Option<String>,
    /// The dispatcher's attempt the slot or lane belongs to.
    pub attempt: Option<String>,
    /// The record's `acquiredAt` (RFC 3339).
    pub since: Option<String>,
    /// A role lease's role.
    pub role: Option<String>,
    /// The record's `command`, else its `entrypoint`.
    pub command: Option<String>,
    /// The fencing epoch of this acquisition.
    pub epoch: Option<u64>,
    /// A test run's time limit.
    pub limit_ms: Option<u64>,
    /// A TTL lease's last pulse (RFC 3339).
    pub last_pulse: Option<String>,
    /// The record's weight (1 when it has none or an unusable one).
    pub weight: u32,
    /// The units of its kind's cap it counts for now (0 when its holder is gone).
    pub units: u32,
    /// The owner its units count against.
    pub share_owner: Option<String>,
    /// The verdict: `held`, `alive`, `fresh`, `unknown`, `malformed`, `busy` or `dead`.
    pub state: &'static str,
    /// Whether it counts as held (every state but `dead`).
    pub counts: bool,
    /// The verdict in words.
    pub reason: String,
    /// The run's cgroup (its record's `cgroup`) and what it holds, when it has one.
    pub cgroup: Option<SlotCgroup>,
}

/// A held slot's cgroup (`slots --json`): what runs in it and what it used.
#[derive(Debug, Serialize)]
pub struct SlotCgroup {
    /// Its path in the cgroup hierarchy.
    pub path: String,
    /// The pids in it now.
    pub procs: Vec<u32>,
    /// The CPU time its processes used, in µs.
    pub cpu_usec: Option<u64>,
    /// Its memory now, in bytes (without the memory controller, `None`).
    pub memory_current: Option<u64>,
    /// Its memory's peak, in bytes.
    pub memory_peak: Option<u64>,
}

/// Whether this worklane's runs get a cgroup each (`slots --json`'s `containment`).
#[derive(Debug, Serialize)]
pub struct Containment {
    /// Whether runs get a cgroup each.
    pub on: bool,
    /// Where the runs' cgroups go (`/worklane`), when on.
    pub cgroups: Option<String>,
    /// Why not, when off.
    pub why: Option<String>,
}

/// One owner's use of its share of the agents' cap (`slots --json`).
#[derive(Debug, Serialize)]
pub struct ShareUse {
    /// The owner: `uid:N`, `group:NAME` or `owner:TAG`.
    pub owner: String,
    /// The units it holds.
    pub held: u32,
    /// Its share, or `None` when only the cap limits it.
    pub share: Option<u32>,
}

/// A stray or broken file (`slots --json`, `why --json`, `budget show --json`, `queue ls
/// --json`).
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// The file's name in the slot directory.
    pub name: String,
    /// What is wrong and what it does.
    pub what: String,
    /// The command that fixes it.
    pub fix: String,
    /// The kind of take it fails, or `None` when it is only skipped.
    pub blocks: Option<&'static str>,
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
pub fn problem_lines(problems: &[Problem]) -> Vec<String> {
    problems
        .iter()
        .map(|p| format!("{}: {}; fix: {}", p.name, p.what, p.fix))
        .collect()
}

/// The admission dispatcher as the slot directory shows it.
#[derive(Debug, Serialize)]
pub struct Queue {
    /// The dispatcher's lock.
    pub dispatcher: Dispatcher,
    /// The status entries `queue-<lane>.json` as the dispatcher wrote them (PROTOCOL.md 14.1).
    pub attempts: Vec<serde_json::Value>,
}

/// The dispatcher's lock: its pid (from the record) and whether one holds it now.
#[derive(Debug, Serialize)]
pub struct Dispatcher {
    /// Its pid, from `dispatcher.lock`'s record.
    pub pid: Option<u32>,
    /// Whether a dispatcher holds `dispatcher.lock` now.
    pub alive: bool,
}

/// One entry of a waiting line.
#[derive(Debug, Serialize)]
pub struct LineEntry {
    /// The kind waited for.
    pub kind: String,
    /// 1 for the head; `None` for a dead waiter's entry.
    pub position: Option<u32>,
    /// Its priority (higher goes first).
    pub priority: i64,
    /// When it began waiting (RFC 3339).
    pub start: String,
    /// The waiter's pid.
    pub pid: Option<u32>,
    /// The waiter's owner.
    pub owner: Option<String>,
    /// The waiter's command.
    pub command: Option<String>,
    /// Its log, when its record names one.
    pub log: Option<String>,
    /// Whether the waiter lives.
    pub live: bool,
    /// The entry's file name.
    pub name: String,
}

/// One credential's budget (`budget show --json`'s and `slots --json`'s `budgets`).
#[derive(Debug, Serialize)]
pub struct Budget {
    /// The credential's number (a credential is never named by its key).
    pub credential: usize,
    /// The key's hash, for the metrics' labels (a rank moves between keys); not in the JSON,
    /// which numbers credentials.
    #[serde(skip)]
    pub key: String,
    /// Whose budget: `github`, `anthropic`, `openai`, or a configured provider.
    pub provider: String,
    /// When its state was last written (RFC 3339).
    pub updated: String,
    /// Until when its calls are paused, after a secondary rate limit or a 429.
    pub paused_until: Option<String>,
    /// A model provider's calls taken whose responses are not yet recorded.
    pub in_flight: usize,
    /// Calls waiting for the budget in a proxy.
    pub waiting: u64,
    /// Each resource's window.
    pub resources: Vec<BudgetResource>,
}

/// One resource's window.
#[derive(Debug, Serialize)]
pub struct BudgetResource {
    /// The resource (`core`, `requests`, `input_tokens`...).
    pub name: String,
    /// The window's limit, when known.
    pub limit: Option<u64>,
    /// What the provider said remained when last seen.
    pub remaining: u64,
    /// Units granted since.
    pub granted: u64,
    /// What is left to grant now.
    pub left: u64,
    /// When the window resets (RFC 3339).
    pub reset: String,
    /// Units granted in this window by consumer.
    pub by_consumer: BTreeMap<String, u64>,
    /// The units the calls in flight hold of it.
    pub in_flight: u64,
    /// Carried over from the window before, not yet reported.
    pub assumed: bool,
}

/// `fleet status --json`.
#[derive(Debug, Serialize)]
pub struct FleetStatus {
    /// The document's version.
    pub version: u32,
    /// The etcd endpoints.
    pub endpoints: String,
    /// The fleet pool's name.
    pub pool: String,
    /// Its cap, when set.
    pub cap: Option<u32>,
    /// The places held.
    pub held: usize,
    /// Its keys, in line order.
    pub keys: Vec<FleetKey>,
}

/// One key of a fleet pool, in line order.
#[derive(Debug, Serialize)]
pub struct FleetKey {
    /// The key in etcd.
    pub key: String,
    /// Its epoch (the etcd revision that created it).
    pub epoch: i64,
    /// Whether it is within the cap (holds a place) or waits.
    pub holds: bool,
    /// The holder's host.
    pub host: Option<String>,
    /// The holder's pid.
    pub pid: Option<u32>,
    /// The holder's owner.
    pub owner: Option<String>,
    /// Since when (RFC 3339).
    pub since: Option<String>,
    /// The holder's command.
    pub command: Option<String>,
}
