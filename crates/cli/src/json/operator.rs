//! `why --json`, `stop-all --json` and the other operator commands', `config get --json`,
//! `fleet status --json`.

use super::*;

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
    pub(crate) containment: Containment,
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
