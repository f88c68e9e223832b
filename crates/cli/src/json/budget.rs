//! `budget show --json`, `budget take --json`.

use super::*;

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
        /// A model provider's take: what its observation (or release) names.
        #[serde(skip_serializing_if = "Option::is_none")]
        reservation: Option<String>,
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
