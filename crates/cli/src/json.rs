//! The JSON documents the CLI prints, one `#[derive(Serialize)]` type per document (and per
//! nested object), so that a document's shape is read here and nowhere else. The schema, with
//! an example of each document, is `docs/json.md`; a CLI test checks every example there
//! against the real output of its command.
//!
//! Two documents have their types beside the code that fills them: the `lease run --json`
//! refusal (`role.rs`) and the `--status-fd` events (`status.rs`). Every document that is an
//! object carries `version` ([`VERSION`]) first. One output is not an object and stays as it
//! has always been: `config get KEY --json`, the key's bare value. A view's document carries
//! `config_problem` ([`ConfigProblem`], null when the config is good) and its `problems`.

use serde::Serialize;
use std::collections::BTreeMap;

/// The `version` of every document; raised when a field changes meaning or goes away.
pub(crate) const VERSION: u32 = 1;

/// Serializes a document on one line (plain data: it cannot fail).
pub(crate) fn line(doc: &impl Serialize) -> String {
    serde_json::to_string(doc).unwrap_or_default()
}

/// Serializes a document indented, as `slots --json` and `budget show --json` print it.
pub(crate) fn pretty(doc: &impl Serialize) -> String {
    serde_json::to_string_pretty(doc).unwrap_or_default()
}

// ---- slots --json ----------------------------------------------------------------------------

/// `slots --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Slots {
    pub(crate) version: u32,
    pub(crate) dir: String,
    pub(crate) config: ConfigFile,
    pub(crate) max_agents: u32,
    pub(crate) max_test_runs: u32,
    pub(crate) agents_held: usize,
    pub(crate) test_runs_held: usize,
    pub(crate) full_run_held: bool,
    pub(crate) stop: Option<Stop>,
    pub(crate) drain: Drain,
    pub(crate) slots: Vec<Slot>,
    pub(crate) problems: Vec<Problem>,
    pub(crate) queue: Queue,
    pub(crate) line: Vec<LineEntry>,
    pub(crate) budgets: Vec<Budget>,
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
    pub(crate) state: &'static str,
    pub(crate) counts: bool,
    pub(crate) reason: String,
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

// ---- budget show --json, budget take --json ------------------------------------------------

/// `budget show --json`.
#[derive(Debug, Serialize)]
pub(crate) struct BudgetShow {
    pub(crate) version: u32,
    pub(crate) budgets: Vec<Budget>,
    /// Budget state files left out of `budgets`, and why.
    pub(crate) problems: Vec<Problem>,
    pub(crate) config_problem: Option<ConfigProblem>,
}

/// One credential's budget (`budget show --json`'s and `slots --json`'s `budgets`).
#[derive(Debug, Serialize)]
pub(crate) struct Budget {
    pub(crate) credential: usize,
    pub(crate) updated: String,
    pub(crate) paused_until: Option<String>,
    pub(crate) resources: Vec<BudgetResource>,
}

/// One resource's window.
#[derive(Debug, Serialize)]
pub(crate) struct BudgetResource {
    pub(crate) name: String,
    pub(crate) limit: Option<u64>,
    pub(crate) remaining: u64,
    pub(crate) granted: u64,
    pub(crate) left: u64,
    pub(crate) reset: String,
    pub(crate) by_consumer: BTreeMap<String, u64>,
}

/// `budget take --json`: the call may go, or not.
#[derive(Debug, Serialize)]
pub(crate) struct Take {
    pub(crate) version: u32,
    #[serde(flatten)]
    pub(crate) answer: TakeAnswer,
}

/// The two answers of `budget take`, told apart by `go`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum TakeAnswer {
    /// `go: true`: counted, or unaccounted (and why).
    Go {
        go: True,
        counted: bool,
        left: Option<u64>,
        unaccounted: Option<String>,
    },
    /// `go: false`: do not make the call.
    Refused {
        go: False,
        kind: &'static str,
        status: u16,
        retry_at: Option<String>,
        message: String,
    },
}

/// `true`, always (a field whose value tells the variant).
#[derive(Debug)]
pub(crate) struct True;

/// `false`, always.
#[derive(Debug)]
pub(crate) struct False;

impl Serialize for True {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(true)
    }
}

impl Serialize for False {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(false)
    }
}

// ---- why --json ----------------------------------------------------------------------------

/// `why --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Why {
    pub(crate) version: u32,
    pub(crate) resource_admission: Answer,
    pub(crate) provider_quota: Answer,
    pub(crate) task_ownership: Answer,
    pub(crate) release_authority: Answer,
    /// The first blocking question's key, if any.
    pub(crate) blocked_by: Option<&'static str>,
    pub(crate) problems: Vec<Problem>,
    pub(crate) queued: Vec<QueuedAttempt>,
    pub(crate) config_problem: Option<ConfigProblem>,
}

/// One question's answer.
#[derive(Debug, Serialize)]
pub(crate) struct Answer {
    pub(crate) asked: String,
    /// `None` when not asked, or not worklane's to decide.
    pub(crate) blocks: Option<bool>,
    pub(crate) decided_here: bool,
    pub(crate) why: String,
}

/// An attempt the dispatcher keeps, and what holds it.
#[derive(Debug, Serialize)]
pub(crate) struct QueuedAttempt {
    pub(crate) attempt: String,
    pub(crate) lane: String,
    pub(crate) state: String,
    pub(crate) waited_ms: u64,
    pub(crate) held_by: String,
}

// ---- queue ls --json -----------------------------------------------------------------------

/// `queue ls --json`.
#[derive(Debug, Serialize)]
pub(crate) struct QueueList {
    pub(crate) version: u32,
    pub(crate) full_runs: Vec<FullRun>,
    #[serde(flatten)]
    pub(crate) dispatcher: DispatcherList,
    /// The dispatcher's answer when it was not a list.
    pub(crate) problems: Vec<Problem>,
    pub(crate) config_problem: Option<ConfigProblem>,
}

/// A queued full run.
#[derive(Debug, Serialize)]
pub(crate) struct FullRun {
    /// `fr-<runner pid>`.
    pub(crate) id: String,
    pub(crate) pid: u32,
    /// `waiting` or `running`.
    pub(crate) state: &'static str,
    pub(crate) position: Option<u32>,
    pub(crate) priority: i64,
    pub(crate) since: String,
    pub(crate) command: Option<String>,
    pub(crate) log: Option<String>,
}

/// The dispatcher's part of `queue ls --json`.
#[derive(Debug, Serialize)]
pub(crate) struct DispatcherList {
    pub(crate) dispatcher_pid: Option<u32>,
    /// The attempts as the dispatcher lists them (its wire type, PROTOCOL.md 14).
    pub(crate) attempts: Vec<worklane_admission::dispatch::wire::AttemptView>,
    /// Each attempt's log, in the same order.
    pub(crate) logs: Vec<String>,
    /// Why there are no attempts, when no dispatcher answered (absent when one did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dispatcher: Option<String>,
    /// `queue ls --all`: the ended attempts, newest first (absent without `--all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) history: Option<Vec<worklane_admission::dispatch::wire::EndedView>>,
    /// The dispatcher's own trouble while it lasts (a step that keeps failing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) trouble: Option<String>,
    /// The damaged queue database the dispatcher moved aside at its start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) damage: Option<String>,
}

impl DispatcherList {
    /// No dispatcher answered: no attempts, and `why`.
    pub(crate) fn none(why: String) -> DispatcherList {
        DispatcherList {
            dispatcher_pid: None,
            attempts: Vec::new(),
            logs: Vec::new(),
            dispatcher: Some(why),
            history: None,
            trouble: None,
            damage: None,
        }
    }
}

// ---- enqueue --json, claim --json, reconcile --json ----------------------------------------

/// `enqueue --json`.
#[cfg_attr(not(feature = "dispatcher"), allow(dead_code))]
#[derive(Debug, Serialize)]
pub(crate) struct Enqueued<'a> {
    pub(crate) version: u32,
    pub(crate) attempt: &'a str,
    pub(crate) lane: &'a str,
}

/// `claim --json` (on stderr: stdout is the command's).
#[cfg_attr(not(feature = "dispatcher"), allow(dead_code))]
#[derive(Debug, Serialize)]
pub(crate) struct Claimed<'a> {
    pub(crate) version: u32,
    pub(crate) attempt: &'a str,
    pub(crate) lane: &'a str,
    pub(crate) slot: &'a str,
    pub(crate) lane_epoch: u64,
    pub(crate) slot_epoch: u64,
}

/// `reconcile --json`: who holds an attempt.
#[cfg_attr(not(feature = "dispatcher"), allow(dead_code))]
#[derive(Debug, Serialize)]
pub(crate) struct Reconciled<'a> {
    pub(crate) version: u32,
    pub(crate) attempt: &'a str,
    #[serde(flatten)]
    pub(crate) holder: Holder,
}

/// Who holds an attempt: `holder` and what goes with it.
#[cfg_attr(not(feature = "dispatcher"), allow(dead_code))]
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Holder {
    /// The dispatcher keeps its row.
    Dispatcher {
        holder: &'static str,
        state: String,
        lane: String,
        pid: Option<u32>,
    },
    /// A driver holds its lane.
    Driver {
        holder: &'static str,
        lane: String,
        pid: Option<u32>,
    },
    /// Nobody: it ended, as the history tells.
    Ended {
        holder: Nobody,
        ended: worklane_admission::dispatch::wire::EndedView,
    },
    /// Nobody: its lane is free.
    FreeLane { holder: Nobody, lane: String },
    /// Nobody: no row and no lane names it.
    Nowhere { holder: Nobody },
}

#[cfg_attr(not(feature = "dispatcher"), allow(dead_code))]
impl Holder {
    /// The dispatcher keeps the row.
    pub(crate) fn dispatcher(state: String, lane: String, pid: Option<u32>) -> Holder {
        Holder::Dispatcher {
            holder: "dispatcher",
            state,
            lane,
            pid,
        }
    }

    /// A driver holds the lane.
    pub(crate) fn driver(lane: String, pid: Option<u32>) -> Holder {
        Holder::Driver {
            holder: "driver",
            lane,
            pid,
        }
    }
}

/// `null`, always: nobody holds it.
#[cfg_attr(not(feature = "dispatcher"), allow(dead_code))]
#[derive(Debug)]
pub(crate) struct Nobody;

impl Serialize for Nobody {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_none()
    }
}

// ---- stop-all, resume-all, drain, undrain --json ------------------------------------------

/// `stop-all --json`.
#[derive(Debug, Serialize)]
pub(crate) struct StopAll {
    pub(crate) version: u32,
    pub(crate) dir: String,
    /// The STOP in force: the one written, or (`written` false) the one found that could not
    /// be replaced.
    pub(crate) stop: Stop,
    pub(crate) written: bool,
    pub(crate) halted: Vec<HaltedRun>,
    pub(crate) still_running: Vec<RunningRun>,
    pub(crate) took_ms: u64,
    /// Why STOP could not be replaced, when it could not.
    pub(crate) problems: Vec<Problem>,
}

/// A run that was running when STOP was written and has halted.
#[derive(Debug, Serialize)]
pub(crate) struct HaltedRun {
    pub(crate) resource: String,
    pub(crate) pid: u32,
    pub(crate) command: Option<String>,
    /// `supervisor` (its own supervisor halted it) or `worklane` (`stop-all` signalled it).
    pub(crate) by: &'static str,
}

/// A run still running when `stop-all` stopped waiting.
#[derive(Debug, Serialize)]
pub(crate) struct RunningRun {
    pub(crate) resource: String,
    pub(crate) pid: u32,
    pub(crate) command: Option<String>,
    /// Why worklane did not signal it, when it did not.
    pub(crate) why: Option<String>,
}

/// `resume-all --json`.
#[derive(Debug, Serialize)]
pub(crate) struct ResumeAll {
    pub(crate) version: u32,
    pub(crate) dir: String,
    pub(crate) removed: bool,
    /// The STOP lifted, as it was read (null when there was none).
    pub(crate) stop: Option<Stop>,
}

/// `drain --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Drained {
    pub(crate) version: u32,
    /// The flag written.
    pub(crate) file: String,
    pub(crate) drain: DrainFlag,
}

/// `undrain --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Undrained {
    pub(crate) version: u32,
    pub(crate) file: String,
    pub(crate) removed: bool,
    /// What is still at the flag's name when it could not be removed (ignored by every
    /// harness: no drain is in force).
    pub(crate) problems: Vec<Problem>,
}

// ---- queue full-run --json, queue cancel --json --------------------------------------------

/// `queue full-run --json`.
#[derive(Debug, Serialize)]
pub(crate) struct QueuedFullRun {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) pid: u32,
    pub(crate) command: String,
    pub(crate) log: String,
}

/// `queue cancel --json`.
#[cfg_attr(not(feature = "dispatcher"), allow(dead_code))]
#[derive(Debug, Serialize)]
pub(crate) struct Cancelled<'a> {
    pub(crate) version: u32,
    pub(crate) id: &'a str,
    /// `attempt` (a dispatcher's attempt) or `full-run` (a queued full run).
    pub(crate) kind: &'static str,
    /// The queued full run's log; null for an attempt.
    pub(crate) log: Option<String>,
    /// A running attempt: how its driver is being halted (absent otherwise); `queue ls --all`
    /// tells how it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) halting: Option<String>,
}

// ---- config get --json -------------------------------------------------------------------

/// `config get --json` without a key (with a key, the key's bare value is printed).
#[derive(Debug, Serialize)]
pub(crate) struct Config {
    pub(crate) version: u32,
    /// The config file in force.
    pub(crate) file: String,
    /// Whether it exists (when not, every key has its default).
    pub(crate) exists: bool,
    /// Every key with its value in force.
    pub(crate) values: serde_json::Map<String, serde_json::Value>,
    /// The keys the file sets (the others have their defaults).
    pub(crate) set: Vec<String>,
}

// ---- fleet status --json -------------------------------------------------------------------

/// `fleet status --json`.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
#[derive(Debug, Serialize)]
pub(crate) struct FleetStatus {
    pub(crate) version: u32,
    pub(crate) endpoints: String,
    pub(crate) pool: String,
    pub(crate) cap: Option<u32>,
    pub(crate) held: usize,
    pub(crate) keys: Vec<FleetKey>,
}

/// One key of a fleet pool, in line order.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
#[derive(Debug, Serialize)]
pub(crate) struct FleetKey {
    pub(crate) key: String,
    pub(crate) epoch: i64,
    /// Whether it is within the cap (holds a place) or waits.
    pub(crate) holds: bool,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
    pub(crate) owner: Option<String>,
    pub(crate) since: Option<String>,
    pub(crate) command: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variants_keep_their_shapes() {
        let take = Take {
            version: VERSION,
            answer: TakeAnswer::Go {
                go: True,
                counted: true,
                left: Some(3),
                unaccounted: None,
            },
        };
        assert_eq!(
            line(&take),
            r#"{"version":1,"go":true,"counted":true,"left":3,"unaccounted":null}"#
        );
        let nowhere = Reconciled {
            version: VERSION,
            attempt: "a-1",
            holder: Holder::Nowhere { holder: Nobody },
        };
        assert_eq!(
            line(&nowhere),
            r#"{"version":1,"attempt":"a-1","holder":null}"#
        );
        assert_eq!(
            line(&Drain::InForce(DrainFlag {
                since: "s".into(),
                until: "u".into(),
                to: None
            })),
            r#"{"state":"in-force","since":"s","until":"u","to":null}"#
        );
        assert_eq!(line(&Drain::None), r#"{"state":"none"}"#);
        let list = QueueList {
            version: VERSION,
            full_runs: Vec::new(),
            dispatcher: DispatcherList::none("none".into()),
            problems: Vec::new(),
            config_problem: None,
        };
        assert_eq!(
            line(&list),
            r#"{"version":1,"full_runs":[],"dispatcher_pid":null,"attempts":[],"logs":[],"dispatcher":"none","problems":[],"config_problem":null}"#
        );
    }
}
