//! Each key of the config as `config get`/`set` knows it: its name, its default, and its
//! value as given on the command line.

use crate::cli::ConfigKey;
use serde_json::Value;
use worklane_dispatch::env::{DEFAULT_PREFIXES, DEFAULT_SECRET_WORDS};
use worklane_slotfile::{
    AGENTS_RANGE, DEFAULT_JOURNAL_MAX_BYTES, DEFAULT_MAX_AGENTS, DEFAULT_MAX_TEST_RUNS,
    JOURNAL_BYTES_RANGE, TEST_RUNS_RANGE,
};

impl ConfigKey {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ConfigKey::MaxAgents => "max_agents",
            ConfigKey::MaxTestRuns => "max_test_runs",
            ConfigKey::MaxJobs => "max_jobs",
            ConfigKey::Admission => "admission",
            ConfigKey::EnvAllowPrefixes => "env_allow_prefixes",
            ConfigKey::EnvSecretWords => "env_secret_words",
            ConfigKey::BudgetProviders => "budget_providers",
            ConfigKey::Shares => "shares",
            ConfigKey::JournalMaxBytes => "journal_max_bytes",
            ConfigKey::MaxMemory => "max_memory",
            ConfigKey::MaxCpu => "max_cpu",
        }
    }

    pub(super) const ALL: [ConfigKey; 11] = [
        ConfigKey::MaxAgents,
        ConfigKey::MaxTestRuns,
        ConfigKey::MaxJobs,
        ConfigKey::Admission,
        ConfigKey::EnvAllowPrefixes,
        ConfigKey::EnvSecretWords,
        ConfigKey::BudgetProviders,
        ConfigKey::Shares,
        ConfigKey::JournalMaxBytes,
        ConfigKey::MaxMemory,
        ConfigKey::MaxCpu,
    ];

    /// Its value when the file does not set it.
    pub(super) fn default_value(self) -> Value {
        let strings =
            |s: &[&str]| Value::from(s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        match self {
            ConfigKey::MaxAgents => Value::from(DEFAULT_MAX_AGENTS),
            ConfigKey::MaxTestRuns => Value::from(DEFAULT_MAX_TEST_RUNS),
            ConfigKey::MaxJobs => Value::from(worklane_slotfile::config::default_max_jobs()),
            ConfigKey::Admission => Value::from("dispatcher"),
            ConfigKey::EnvAllowPrefixes => strings(DEFAULT_PREFIXES),
            ConfigKey::EnvSecretWords => strings(DEFAULT_SECRET_WORDS),
            ConfigKey::BudgetProviders
            | ConfigKey::Shares
            | ConfigKey::MaxMemory
            | ConfigKey::MaxCpu => Value::Object(serde_json::Map::new()),
            ConfigKey::JournalMaxBytes => Value::from(DEFAULT_JOURNAL_MAX_BYTES),
        }
    }

    /// VALUE as given on the command line, as this key's JSON value; `Err` says what it must
    /// be (a usage error).
    pub(super) fn parse(self, text: &str) -> Result<Value, String> {
        let whole = |range: std::ops::RangeInclusive<u32>| {
            text.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| range.contains(n))
                .map(Value::from)
                .ok_or_else(|| format!("a whole number from {} to {}", range.start(), range.end()))
        };
        match self {
            ConfigKey::MaxAgents => whole(AGENTS_RANGE),
            ConfigKey::MaxTestRuns => whole(TEST_RUNS_RANGE),
            ConfigKey::MaxJobs => whole(worklane_slotfile::config::JOBS_RANGE),
            ConfigKey::JournalMaxBytes => text
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| JOURNAL_BYTES_RANGE.contains(n))
                .map(Value::from)
                .ok_or_else(|| {
                    format!(
                        "a whole number of bytes from {} to {}",
                        JOURNAL_BYTES_RANGE.start(),
                        JOURNAL_BYTES_RANGE.end()
                    )
                }),
            ConfigKey::Admission => match text {
                "dispatcher" | "waiter" => Ok(Value::from(text)),
                _ => Err("dispatcher or waiter".to_owned()),
            },
            ConfigKey::EnvAllowPrefixes | ConfigKey::EnvSecretWords => {
                let items: Vec<String> = if text.trim_start().starts_with('[') {
                    serde_json::from_str(text).map_err(|_| LIST.to_owned())?
                } else if text.is_empty() {
                    Vec::new()
                } else {
                    text.split(',').map(str::to_owned).collect()
                };
                if items.iter().any(String::is_empty) {
                    return Err(LIST.to_owned());
                }
                Ok(Value::from(items))
            }
            // Checked whole with the file's other keys before it is written.
            ConfigKey::MaxMemory | ConfigKey::MaxCpu => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(limits)) => Ok(Value::Object(limits)),
                _ => Err(format!(
                    "a JSON object of kinds (agent, test, full-run) and {}",
                    match self {
                        ConfigKey::MaxMemory => "bytes, e.g. {\"agent\": 4294967296}",
                        _ => "CPUs, e.g. {\"agent\": 1.5}",
                    }
                )),
            },
            ConfigKey::Shares => match serde_json::from_str::<Value>(text) {
                // Checked whole with the file's other keys before it is written (the cap a
                // share may not pass is the file's).
                Ok(Value::Object(shares)) => Ok(Value::Object(shares)),
                _ => Err("a JSON object of owners and whole numbers of units, e.g. \
                          {\"uid:1001\": 4, \"group:ci\": 2, \"*\": 2}"
                    .to_owned()),
            },
            ConfigKey::BudgetProviders => {
                const OBJECT: &str = "a JSON object of provider profiles by name, e.g. \
                    {\"mine\": {\"dimensions\": {\"requests\": {\"limit\": \"x-limit\", \
                    \"remaining\": \"x-remaining\", \"reset\": \"x-reset\", \"format\": \
                    \"duration\"}}}}";
                let Ok(Value::Object(providers)) = serde_json::from_str::<Value>(text) else {
                    return Err(OBJECT.to_owned());
                };
                for (name, profile) in &providers {
                    if !worklane_budget::provider::is_provider_name(name) {
                        return Err(format!(
                            "{OBJECT}; {name:?} is not a name of one's own (1 to 32 lowercase \
                             letters, digits or `-`, not github, anthropic or openai)"
                        ));
                    }
                    worklane_budget::Profile::from_json(profile)
                        .map_err(|why| format!("provider {name:?}: {why}"))?;
                }
                Ok(Value::Object(providers))
            }
        }
    }
}

/// What a list key takes on the command line.
const LIST: &str = "a comma-separated list of non-empty strings (A,B) or a JSON array of them";
