//! `queue ls --json`, `enqueue --json`, `claim --json`, `reconcile --json`, `queue full-run --json`,
//! `queue cancel --json`.

use super::*;

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
    pub(crate) attempts: Vec<worklane_dispatch::wire::AttemptView>,
    /// Each attempt's log, in the same order.
    pub(crate) logs: Vec<String>,
    /// Why there are no attempts, when no dispatcher answered (absent when one did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dispatcher: Option<String>,
    /// `queue ls --all`: the ended attempts, newest first (absent without `--all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) history: Option<Vec<worklane_dispatch::wire::EndedView>>,
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
        ended: worklane_dispatch::wire::EndedView,
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
