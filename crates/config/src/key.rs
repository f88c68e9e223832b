//! Each key of the config as `config get`/`set` knows it: its name, its default, and its
//! value as given on the command line.

use serde_json::Value;
use worklane_dispatch::env::{DEFAULT_PREFIXES, DEFAULT_SECRET_WORDS};
use worklane_slotfile::{
    AGENTS_RANGE, DEFAULT_JOURNAL_MAX_BYTES, DEFAULT_MAX_AGENTS, DEFAULT_MAX_TEST_RUNS,
    JOURNAL_BYTES_RANGE, TEST_RUNS_RANGE,
};

/// A key of the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Key {
    /// The cap on concurrent agents (1 to 4294967295, default 2).
    #[cfg_attr(feature = "clap", value(name = "max_agents"))]
    MaxAgents,
    /// The cap on concurrent test runs (1 to 8, default 2).
    #[cfg_attr(feature = "clap", value(name = "max_test_runs"))]
    MaxTestRuns,
    /// The cap on concurrent build jobs machine-wide, the jobservers' tokens (1 to 4096,
    /// default the CPUs).
    #[cfg_attr(feature = "clap", value(name = "max_jobs"))]
    MaxJobs,
    /// How waiting work is admitted: dispatcher (the default) or waiter.
    #[cfg_attr(feature = "clap", value(name = "admission"))]
    Admission,
    /// The variable prefixes a queued attempt keeps (replaces the defaults).
    #[cfg_attr(feature = "clap", value(name = "env_allow_prefixes"))]
    EnvAllowPrefixes,
    /// The words that make a variable secret-shaped (replaces the defaults).
    #[cfg_attr(feature = "clap", value(name = "env_secret_words"))]
    EnvSecretWords,
    /// Model providers of one's own for the budget ledger: a JSON object of profiles by name
    /// (PROTOCOL.md 13.1).
    #[cfg_attr(feature = "clap", value(name = "budget_providers"))]
    BudgetProviders,
    /// The owners' shares of the agents' cap: a JSON object of owners (`uid:N`, `group:NAME`,
    /// `owner:TAG`, `*`) and whole numbers of units (PROTOCOL.md 12.10).
    #[cfg_attr(feature = "clap", value(name = "shares"))]
    Shares,
    /// The event journal's cap in bytes, its two files together (65536 to 1073741824, default
    /// 16777216).
    #[cfg_attr(feature = "clap", value(name = "journal_max_bytes"))]
    JournalMaxBytes,
    /// Each kind's memory limit of a run's cgroup: a JSON object of kinds (agent, test,
    /// full-run) and bytes, e.g. {"agent": 4294967296} (`run --memory-max` overrides it).
    #[cfg_attr(feature = "clap", value(name = "max_memory"))]
    MaxMemory,
    /// Each kind's CPU limit of a run's cgroup: a JSON object of kinds and CPUs, e.g.
    /// {"agent": 1.5} (`run --cpu-max` overrides it).
    #[cfg_attr(feature = "clap", value(name = "max_cpu"))]
    MaxCpu,
}

impl Key {
    /// Its name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Key::MaxAgents => "max_agents",
            Key::MaxTestRuns => "max_test_runs",
            Key::MaxJobs => "max_jobs",
            Key::Admission => "admission",
            Key::EnvAllowPrefixes => "env_allow_prefixes",
            Key::EnvSecretWords => "env_secret_words",
            Key::BudgetProviders => "budget_providers",
            Key::Shares => "shares",
            Key::JournalMaxBytes => "journal_max_bytes",
            Key::MaxMemory => "max_memory",
            Key::MaxCpu => "max_cpu",
        }
    }

    /// Every key, in the order `config get` shows them.
    pub const ALL: [Key; 11] = [
        Key::MaxAgents,
        Key::MaxTestRuns,
        Key::MaxJobs,
        Key::Admission,
        Key::EnvAllowPrefixes,
        Key::EnvSecretWords,
        Key::BudgetProviders,
        Key::Shares,
        Key::JournalMaxBytes,
        Key::MaxMemory,
        Key::MaxCpu,
    ];

    /// Its value when the file does not set it.
    pub fn default_value(self) -> Value {
        let strings =
            |s: &[&str]| Value::from(s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        match self {
            Key::MaxAgents => Value::from(DEFAULT_MAX_AGENTS),
            Key::MaxTestRuns => Value::from(DEFAULT_MAX_TEST_RUNS),
            Key::MaxJobs => Value::from(worklane_slotfile::config::default_max_jobs()),
            Key::Admission => Value::from("dispatcher"),
            Key::EnvAllowPrefixes => strings(DEFAULT_PREFIXES),
            Key::EnvSecretWords => strings(DEFAULT_SECRET_WORDS),
            Key::BudgetProviders | Key::Shares | Key::MaxMemory | Key::MaxCpu => {
                Value::Object(serde_json::Map::new())
            }
            Key::JournalMaxBytes => Value::from(DEFAULT_JOURNAL_MAX_BYTES),
        }
    }

    /// VALUE as given on the command line, as this key's JSON value; `Err` says what it must
    /// be (a usage error).
    pub fn parse(self, text: &str) -> Result<Value, String> {
        let whole = |range: std::ops::RangeInclusive<u32>| {
            text.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| range.contains(n))
                .map(Value::from)
                .ok_or_else(|| format!("a whole number from {} to {}", range.start(), range.end()))
        };
        match self {
            Key::MaxAgents => whole(AGENTS_RANGE),
            Key::MaxTestRuns => whole(TEST_RUNS_RANGE),
            Key::MaxJobs => whole(worklane_slotfile::config::JOBS_RANGE),
            Key::JournalMaxBytes => text
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
            Key::Admission => match text {
                "dispatcher" | "waiter" => Ok(Value::from(text)),
                _ => Err("dispatcher or waiter".to_owned()),
            },
            Key::EnvAllowPrefixes | Key::EnvSecretWords => {
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
            Key::MaxMemory | Key::MaxCpu => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(limits)) => Ok(Value::Object(limits)),
                _ => Err(format!(
                    "a JSON object of kinds (agent, test, full-run) and {}",
                    match self {
                        Key::MaxMemory => "bytes, e.g. {\"agent\": 4294967296}",
                        _ => "CPUs, e.g. {\"agent\": 1.5}",
                    }
                )),
            },
            Key::Shares => match serde_json::from_str::<Value>(text) {
                // Checked whole with the file's other keys before it is written (the cap a
                // share may not pass is the file's).
                Ok(Value::Object(shares)) => Ok(Value::Object(shares)),
                _ => Err("a JSON object of owners and whole numbers of units, e.g. \
                          {\"uid:1001\": 4, \"group:ci\": 2, \"*\": 2}"
                    .to_owned()),
            },
            Key::BudgetProviders => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_the_config_knows_can_be_named() {
        let names: Vec<&str> = Key::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            worklane_slotfile::config::KEYS,
            "the same keys, in order"
        );
        #[cfg(feature = "clap")]
        for key in Key::ALL {
            use clap::ValueEnum;
            let possible = key.to_possible_value().expect("a value");
            assert_eq!(possible.get_name(), key.name(), "spelt as in the file");
        }
    }

    #[test]
    fn values_are_parsed_per_key() {
        assert_eq!(Key::MaxAgents.parse("4"), Ok(Value::from(4)));
        assert!(Key::MaxAgents.parse("0").is_err());
        assert!(Key::MaxAgents.parse("4294967296").is_err());
        assert!(Key::MaxAgents.parse("two").is_err());
        assert!(Key::MaxTestRuns.parse("9").is_err());
        assert_eq!(
            Key::JournalMaxBytes.parse("1048576"),
            Ok(Value::from(1_048_576))
        );
        assert!(Key::JournalMaxBytes.parse("1024").is_err());
        assert_eq!(Key::Admission.parse("waiter"), Ok(Value::from("waiter")));
        assert!(Key::Admission.parse("queue").is_err());
        assert_eq!(
            Key::EnvAllowPrefixes.parse("CI_,WORKLANE_"),
            Ok(serde_json::json!(["CI_", "WORKLANE_"]))
        );
        assert_eq!(
            Key::EnvSecretWords.parse(r#"["TOKEN"]"#),
            Ok(serde_json::json!(["TOKEN"]))
        );
        assert_eq!(Key::EnvSecretWords.parse(""), Ok(serde_json::json!([])));
        assert!(Key::EnvAllowPrefixes.parse("A,,B").is_err());
        assert!(Key::EnvAllowPrefixes.parse("[1]").is_err());
    }

    #[test]
    fn the_json_keys_take_objects_and_say_what_they_must_be() {
        assert_eq!(
            Key::MaxMemory.parse(r#"{"agent": 4294967296}"#),
            Ok(serde_json::json!({"agent": 4_294_967_296_u64}))
        );
        assert_eq!(
            Key::MaxCpu.parse(r#"{"agent": 1.5}"#),
            Ok(serde_json::json!({"agent": 1.5}))
        );
        let memory = Key::MaxMemory.parse("4G").expect_err("not an object");
        assert!(memory.contains("bytes"), "{memory}");
        let cpu = Key::MaxCpu.parse("[1]").expect_err("not an object");
        assert!(cpu.contains("CPUs"), "{cpu}");
        assert_eq!(
            Key::Shares.parse(r#"{"uid:1001": 4, "*": 2}"#),
            Ok(serde_json::json!({"uid:1001": 4, "*": 2}))
        );
        assert!(Key::Shares.parse("4").is_err());
        let profile = r#"{"mine": {"dimensions": {"requests": {"limit": "x-limit", "remaining": "x-remaining", "reset": "x-reset", "format": "duration"}}}}"#;
        let parsed = Key::BudgetProviders
            .parse(profile)
            .expect("a provider of one's own");
        assert!(parsed["mine"].is_object());
        let reserved = Key::BudgetProviders
            .parse(&profile.replace("mine", "github"))
            .expect_err("a built-in name");
        assert!(reserved.contains("not a name of one's own"), "{reserved}");
        assert!(Key::BudgetProviders.parse("[]").is_err());
        let broken = Key::BudgetProviders
            .parse(r#"{"mine": {"dimensions": 3}}"#)
            .expect_err("a broken profile");
        assert!(broken.starts_with("provider \"mine\""), "{broken}");
    }

    #[test]
    fn each_key_has_the_default_its_readers_use() {
        assert_eq!(Key::MaxAgents.default_value(), Value::from(2));
        assert_eq!(Key::MaxTestRuns.default_value(), Value::from(2));
        assert_eq!(
            Key::MaxJobs.default_value(),
            Value::from(worklane_slotfile::config::default_max_jobs())
        );
        assert_eq!(Key::Admission.default_value(), Value::from("dispatcher"));
        assert_eq!(
            Key::JournalMaxBytes.default_value(),
            Value::from(16 * 1024 * 1024)
        );
        assert!(
            Key::EnvAllowPrefixes
                .default_value()
                .as_array()
                .is_some_and(|a| !a.is_empty())
        );
        for key in [
            Key::Shares,
            Key::MaxMemory,
            Key::MaxCpu,
            Key::BudgetProviders,
        ] {
            assert_eq!(key.default_value(), serde_json::json!({}), "{key:?}");
        }
    }
}
