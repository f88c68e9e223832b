//! The machine's caps: `{"max_agents": N, "max_test_runs": M, "max_jobs": J}`, the owners'
//! shares of the agents' cap (`"shares": {"uid:1001": 4, "*": 2}`, [`Shares`]), and the event
//! journal's (`"journal_max_bytes"`).

mod shares;

pub use shares::{MAX_OWNER_NAME, ShareKey, Shares};

use serde_json::Value;
use std::path::{Path, PathBuf};

/// Default cap on concurrent agents.
pub const DEFAULT_MAX_AGENTS: u32 = 2;
/// Default cap on concurrent coordinator test runs.
pub const DEFAULT_MAX_TEST_RUNS: u32 = 2;
/// Valid range of `max_test_runs`.
pub const TEST_RUNS_RANGE: std::ops::RangeInclusive<u32> = 1..=8;
/// Valid range of `max_agents`: at least one, at most what a 32-bit count holds.
pub const AGENTS_RANGE: std::ops::RangeInclusive<u32> = 1..=u32::MAX;
/// Valid range of `max_jobs`: a build's job slots are files of the slot directory, so the cap
/// stays within what a directory listing counts in a moment.
pub const JOBS_RANGE: std::ops::RangeInclusive<u32> = 1..=4096;

/// The default cap on concurrent build jobs machine-wide: the CPUs this process may run on
/// (`available_parallelism`: online CPUs, less an affinity mask or a cgroup quota), within
/// [`JOBS_RANGE`]. Asked once per process: every load of the config needs it, and the
/// question costs about twenty system calls (`/proc/self/cgroup`, the quota's files, the
/// affinity mask), more than the rest of a take's reading of the config.
#[must_use]
pub fn default_max_jobs() -> u32 {
    static CPUS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| {
        std::thread::available_parallelism()
            .ok()
            .and_then(|n| u32::try_from(n.get()).ok())
            .unwrap_or(1)
            .clamp(*JOBS_RANGE.start(), *JOBS_RANGE.end())
    })
}

/// Default cap on the event journal: its current and previous file together, 16 MiB.
pub const DEFAULT_JOURNAL_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Valid range of `journal_max_bytes`: from 64 KiB (a few hundred events) to 1 GiB.
pub const JOURNAL_BYTES_RANGE: std::ops::RangeInclusive<u64> = 64 * 1024..=1024 * 1024 * 1024;

/// Every key a config file may hold: the caps, the owners' shares and the journal's cap, read
/// here, the dispatcher's settings (`admission`, `env_allow_prefixes`, `env_secret_words`),
/// read by the dispatcher, and the model providers' profiles (`budget_providers`), read by the
/// budget's callers. Any other key is refused ([`Error::UnknownKey`]): a misspelt `max_agent`
/// would otherwise leave the default cap in force without a word.
pub const KEYS: [&str; 11] = [
    "max_agents",
    "max_test_runs",
    "max_jobs",
    "admission",
    "env_allow_prefixes",
    "env_secret_words",
    "budget_providers",
    "shares",
    "journal_max_bytes",
    "max_memory",
    "max_cpu",
];

/// The kinds whose runs `max_memory` and `max_cpu` may limit.
pub const LIMITED_KINDS: [&str; 3] = ["agent", "test", "full-run"];

/// The machine's caps and the owners' shares. A key outside [`KEYS`] makes the whole file an
/// error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Concurrent agent units across all harnesses (>= 1): a take of weight N holds N.
    pub max_agents: u32,
    /// Concurrent coordinator test-run units (1..=8).
    pub max_test_runs: u32,
    /// Concurrent build jobs machine-wide, the jobserver's tokens (1..=4096; default the
    /// CPUs this process may run on).
    pub max_jobs: u32,
    /// The owners' ceilings of agent units (`shares`); empty when the file has none.
    pub shares: Shares,
    /// The event journal's cap: its current and previous file together stay under it
    /// ([`JOURNAL_BYTES_RANGE`]).
    pub journal_max_bytes: u64,
    /// Each kind's memory limit of a run's cgroup, bytes (`max_memory`: `{"agent": 4294967296}`).
    pub max_memory: std::collections::BTreeMap<String, u64>,
    /// Each kind's CPU limit of a run's cgroup, in thousandths of a CPU (`max_cpu`:
    /// `{"agent": 1.5}` is 1500).
    pub max_cpu_milli: std::collections::BTreeMap<String, u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_agents: DEFAULT_MAX_AGENTS,
            max_test_runs: DEFAULT_MAX_TEST_RUNS,
            max_jobs: default_max_jobs(),
            shares: Shares::default(),
            journal_max_bytes: DEFAULT_JOURNAL_MAX_BYTES,
            max_memory: std::collections::BTreeMap::new(),
            max_cpu_milli: std::collections::BTreeMap::new(),
        }
    }
}

/// Why a config file could not be used. Every message names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read config {path}")]
    Read {
        /// The config file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: crate::read::Error,
    },
    /// The file is not JSON.
    #[error(
        "config {path} is not valid JSON; fix or remove it (defaults: max_agents 2, max_test_runs 2)"
    )]
    Syntax {
        /// The config file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A key appears twice in one object: JSON parsers disagree on which one counts, so
    /// neither does.
    #[error(
        "config {path}: key `{key}` appears more than once; keep one (JSON readers disagree on \
         which of two counts)"
    )]
    DuplicateKey {
        /// The config file.
        path: PathBuf,
        /// The repeated key, with the keys of the objects around it (`outer.inner`).
        key: String,
    },
    /// The file is JSON but not an object.
    #[error("config {path} must be a JSON object like {{\"max_agents\": 2, \"max_test_runs\": 2}}")]
    NotAnObject {
        /// The config file.
        path: PathBuf,
    },
    /// A key that is none of [`KEYS`] (a misspelling, or a setting of another tool).
    #[error(
        "config {path}: unknown key `{key}`; the keys are max_agents, max_test_runs, \
         max_jobs, admission, env_allow_prefixes, env_secret_words, budget_providers, shares, \
         journal_max_bytes, max_memory and max_cpu (fix its spelling or remove it)"
    )]
    UnknownKey {
        /// The config file.
        path: PathBuf,
        /// The key, as written.
        key: String,
    },
    /// A field has a wrong type or value.
    #[error("config {path}: field `{field}` is {value}, but it must be {expected}")]
    Field {
        /// The config file.
        path: PathBuf,
        /// The field.
        field: &'static str,
        /// The value found, as JSON.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// A key of `shares` names no owner.
    #[error(
        "config {path}: `shares` names the unknown owner `{key}`; an owner is `uid:<number>`, \
         `group:<name or gid>`, `owner:<tag>` or `*`"
    )]
    ShareOwner {
        /// The config file.
        path: PathBuf,
        /// The key, as written.
        key: String,
    },
    /// A share is not a whole number from 1 to `max_agents`.
    #[error(
        "config {path}: the share of `{key}` is {value}, but it must be a whole number from 1 \
         to max_agents ({max_agents}): a share is a ceiling of agent units"
    )]
    Share {
        /// The config file.
        path: PathBuf,
        /// The owner, as written.
        key: String,
        /// The value found, as JSON.
        value: String,
        /// The cap in force in the same file.
        max_agents: u32,
    },
}

impl Error {
    /// The config file this error is about.
    #[must_use]
    pub fn path(&self) -> &Path {
        match self {
            Error::Read { path, .. }
            | Error::Syntax { path, .. }
            | Error::DuplicateKey { path, .. }
            | Error::NotAnObject { path }
            | Error::UnknownKey { path, .. }
            | Error::Field { path, .. }
            | Error::ShareOwner { path, .. }
            | Error::Share { path, .. } => path,
        }
    }
}

/// A per-kind object (`max_memory`, `max_cpu`): each key one of [`LIMITED_KINDS`], each value
/// read by `value`.
fn per_kind(
    value: Option<&serde_json::Value>,
    path: &Path,
    field: &'static str,
    read: impl Fn(&serde_json::Value) -> Option<u64>,
) -> Result<std::collections::BTreeMap<String, u64>, Error> {
    let expected = match field {
        "max_memory" => {
            "an object of kinds (agent, test, full-run) and whole numbers of bytes above 0, \
             like {\"agent\": 4294967296}"
        }
        _ => {
            "an object of kinds (agent, test, full-run) and numbers of CPUs from 0.01 to 4096, \
              like {\"agent\": 1.5}"
        }
    };
    let wrong = |v: &serde_json::Value| Error::Field {
        path: path.to_owned(),
        field,
        value: v.to_string(),
        expected,
    };
    let Some(value) = value else {
        return Ok(std::collections::BTreeMap::new());
    };
    let serde_json::Value::Object(map) = value else {
        return Err(wrong(value));
    };
    let mut out = std::collections::BTreeMap::new();
    for (kind, v) in map {
        if !LIMITED_KINDS.contains(&kind.as_str()) {
            return Err(wrong(value));
        }
        out.insert(kind.clone(), read(v).ok_or_else(|| wrong(value))?);
    }
    Ok(out)
}

impl Config {
    /// Parses and validates config bytes read from `path` (used in messages).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Config, Error> {
        let value: Value = serde_json::from_slice(bytes).map_err(|source| Error::Syntax {
            path: path.to_owned(),
            source,
        })?;
        if let Some(key) = duplicate_key(bytes) {
            return Err(Error::DuplicateKey {
                path: path.to_owned(),
                key,
            });
        }
        let Value::Object(map) = value else {
            return Err(Error::NotAnObject {
                path: path.to_owned(),
            });
        };
        if let Some(key) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(Error::UnknownKey {
                path: path.to_owned(),
                key: key.clone(),
            });
        }
        let field =
            |name: &'static str, default: u32, min: u32, max: u32, expected| match map.get(name) {
                None => Ok(default),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| (min..=max).contains(n))
                    .ok_or_else(|| Error::Field {
                        path: path.to_owned(),
                        field: name,
                        value: v.to_string(),
                        expected,
                    }),
            };
        let max_agents = field(
            "max_agents",
            DEFAULT_MAX_AGENTS,
            *AGENTS_RANGE.start(),
            *AGENTS_RANGE.end(),
            "a whole number from 1 to 4294967295",
        )?;
        let max_test_runs = field(
            "max_test_runs",
            DEFAULT_MAX_TEST_RUNS,
            *TEST_RUNS_RANGE.start(),
            *TEST_RUNS_RANGE.end(),
            "a whole number from 1 to 8",
        )?;
        let shares = match map.get("shares") {
            None => Shares::default(),
            Some(value) => Shares::parse(value, path, max_agents)?,
        };
        Ok(Config {
            max_agents,
            max_test_runs,
            max_jobs: field(
                "max_jobs",
                default_max_jobs(),
                *JOBS_RANGE.start(),
                *JOBS_RANGE.end(),
                "a whole number from 1 to 4096",
            )?,
            shares,
            journal_max_bytes: match map.get("journal_max_bytes") {
                None => DEFAULT_JOURNAL_MAX_BYTES,
                Some(v) => v
                    .as_u64()
                    .filter(|n| JOURNAL_BYTES_RANGE.contains(n))
                    .ok_or_else(|| Error::Field {
                        path: path.to_owned(),
                        field: "journal_max_bytes",
                        value: v.to_string(),
                        expected: "a whole number of bytes from 65536 (64 KiB) to 1073741824 \
                                   (1 GiB)",
                    })?,
            },
            max_memory: per_kind(map.get("max_memory"), path, "max_memory", |v| {
                v.as_u64().filter(|&n| n > 0)
            })?,
            max_cpu_milli: per_kind(map.get("max_cpu"), path, "max_cpu", |v| {
                v.as_f64()
                    .filter(|c| (0.01..=4096.0).contains(c))
                    .map(|c| (c * 1000.0).round() as u64)
            })?,
        })
    }

    /// Loads the config at `path`: defaults when the file does not exist, an error naming the
    /// file and field for anything malformed. The file is read like every slot file: regular
    /// files only, at most 64 KiB, never blocking on a FIFO. In a test run, a path outside the
    /// test's temporary root is refused before it is opened.
    pub fn load(path: &Path) -> Result<Config, Error> {
        Config::load_in(&crate::env::Environment::from_process(), path)
    }

    /// [`Config::load`] with the test-isolation rule of an injected environment.
    pub fn load_in(env: &crate::env::Environment, path: &Path) -> Result<Config, Error> {
        match crate::read::read_path_in(env, path) {
            Ok(None) => Ok(Config::default()),
            Ok(Some(bytes)) => Config::parse(&bytes, path),
            Err(source) => Err(Error::Read {
                path: PathBuf::from(path),
                source,
            }),
        }
    }
}

/// The first key repeated within one object of the JSON text `bytes` (with the keys of the
/// objects around it, `outer.inner`), or `None`. `serde_json` keeps the last of two equal keys
/// without a word; a config whose meaning depends on the reader's choice is refused instead.
/// Only called on text that parsed, so a syntax error here cannot happen and reads as `None`.
fn duplicate_key(bytes: &[u8]) -> Option<String> {
    use serde::de::DeserializeSeed;
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let seed = Unique {
        path: String::new(),
        found: &mut found,
    };
    seed.deserialize(&mut de).ok()?;
    found
}

/// A JSON value read only to find repeated keys: the first one found goes to `found`.
struct Unique<'a> {
    path: String,
    found: &'a mut Option<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Unique<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Unique<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(Unique {
                path: self.path.clone(),
                found: &mut *self.found,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = match self.path.is_empty() {
                true => key.clone(),
                false => format!("{}.{key}", self.path),
            };
            if !seen.insert(key) && self.found.is_none() {
                *self.found = Some(path.clone());
            }
            map.next_value_seed(Unique {
                path,
                found: &mut *self.found,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, Error> {
        Config::parse(s.as_bytes(), Path::new("/etc/worklane/slots.json"))
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(parse("{}").expect("empty object"), Config::default());
        let c = parse(
            r#"{"max_agents": 7, "max_test_runs": 8, "admission": "waiter",
                "env_allow_prefixes": ["CI_"], "env_secret_words": []}"#,
        )
        .expect("valid: the dispatcher's keys are known too");
        assert_eq!(
            c,
            Config {
                max_agents: 7,
                max_test_runs: 8,
                max_jobs: default_max_jobs(),
                shares: Shares::default(),
                journal_max_bytes: DEFAULT_JOURNAL_MAX_BYTES,
                ..Config::default()
            }
        );
    }

    #[test]
    fn run_limits_are_read_per_kind_and_anything_else_is_an_error_naming_the_field() {
        let c =
            parse(r#"{"max_memory": {"agent": 4294967296, "test": 1}, "max_cpu": {"agent": 1.5}}"#)
                .expect("valid");
        assert_eq!(c.max_memory.get("agent"), Some(&4_294_967_296));
        assert_eq!(c.max_memory.get("test"), Some(&1));
        assert_eq!(c.max_cpu_milli.get("agent"), Some(&1500));
        assert!(!c.max_cpu_milli.contains_key("test"));
        for (text, field) in [
            (r#"{"max_memory": 5}"#, "max_memory"),
            (r#"{"max_memory": {"agents": 5}}"#, "max_memory"),
            (r#"{"max_memory": {"agent": 0}}"#, "max_memory"),
            (r#"{"max_memory": {"agent": "4G"}}"#, "max_memory"),
            (r#"{"max_cpu": {"agent": 0}}"#, "max_cpu"),
            (r#"{"max_cpu": {"job": 1}}"#, "max_cpu"),
            (r#"{"max_cpu": {"agent": 5000}}"#, "max_cpu"),
        ] {
            let e = parse(text).expect_err(text);
            assert!(e.to_string().contains(field), "{text}: {e}");
            // Each field's error says what it takes: bytes for memory, CPUs for the CPU.
            let unit = if field == "max_memory" {
                "whole numbers of bytes"
            } else {
                "numbers of CPUs from 0.01 to 4096"
            };
            assert!(e.to_string().contains(unit), "{text}: {e}");
        }
    }

    #[test]
    fn the_default_job_cap_is_the_cpus_this_process_may_run_on() {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let want = u32::try_from(cpus)
            .unwrap_or(u32::MAX)
            .clamp(*JOBS_RANGE.start(), *JOBS_RANGE.end());
        assert_eq!(default_max_jobs(), want);
        assert_eq!(
            parse("{}").expect("empty").max_jobs,
            want,
            "a config without max_jobs"
        );
    }

    #[test]
    fn shares_are_read_by_owner() {
        let c = parse(
            r#"{"max_agents": 8, "shares": {"uid:1001": 4, "group:ci": 2,
                "owner:nightly": 1, "*": 2}}"#,
        )
        .expect("valid shares");
        assert_eq!(
            c.shares,
            Shares::of([
                (ShareKey::Uid(1001), 4),
                (ShareKey::Group("ci".into()), 2),
                (ShareKey::Tag("nightly".into()), 1),
                (ShareKey::Anyone, 2),
            ])
        );
        assert_eq!(
            parse(r#"{"shares": {}}"#).expect("no owner named").shares,
            Shares::default()
        );
        assert_eq!(
            parse(r#"{"max_agents": 3, "shares": {"*": 3}}"#)
                .expect("a share of the whole cap")
                .shares
                .ceiling(&ShareKey::Uid(5)),
            Some(3)
        );
    }

    #[test]
    fn every_bad_share_names_file_owner_and_value() {
        for (text, key, value) in [
            (r#"{"max_agents": 8, "shares": {"uid:1": 0}}"#, "uid:1", "0"),
            (r#"{"max_agents": 8, "shares": {"uid:1": 9}}"#, "uid:1", "9"),
            (r#"{"max_agents": 8, "shares": {"*": 2.5}}"#, "*", "2.5"),
            (r#"{"max_agents": 8, "shares": {"*": -1}}"#, "*", "-1"),
            (r#"{"max_agents": 8, "shares": {"*": "2"}}"#, "*", "\"2\""),
            (r#"{"max_agents": 8, "shares": {"*": null}}"#, "*", "null"),
            (r#"{"max_agents": 8, "shares": {"*": 1e30}}"#, "*", "1e+30"),
            (r#"{"shares": {"group:ci": 3}}"#, "group:ci", "3"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(
                matches!(&err, Error::Share { key: k, value: v, .. } if k == key && v == value),
                "{text}: wrong error {err:?}"
            );
            let msg = err.to_string();
            assert!(msg.contains("slots.json"), "names the file: {msg}");
            assert!(msg.contains(&format!("`{key}`")), "names the owner: {msg}");
            assert!(msg.contains(value), "names the value: {msg}");
            assert!(msg.contains("max_agents ("), "names the cap: {msg}");
        }
        for (text, key) in [
            (r#"{"shares": {"user:alice": 1}}"#, "user:alice"),
            (r#"{"shares": {"uid:alice": 1}}"#, "uid:alice"),
            (r#"{"shares": {"ci": 1}}"#, "ci"),
            (r#"{"shares": {"owner:": 1}}"#, "owner:"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(
                matches!(&err, Error::ShareOwner { key: k, .. } if k == key),
                "{text}: wrong error {err:?}"
            );
            let msg = err.to_string();
            assert!(msg.contains("slots.json"), "names the file: {msg}");
            assert!(msg.contains(&format!("`{key}`")), "names the owner: {msg}");
        }
        for text in [
            r#"{"shares": [1]}"#,
            r#"{"shares": 2}"#,
            r#"{"shares": null}"#,
        ] {
            let err = parse(text).expect_err(text);
            assert!(
                matches!(
                    &err,
                    Error::Field {
                        field: "shares",
                        ..
                    }
                ),
                "{text}: wrong error {err:?}"
            );
            assert!(err.to_string().contains("slots.json"), "{err}");
        }
        let err = parse(r#"{"shares": {"uid:1": 1, "uid:1": 2}}"#).expect_err("twice");
        assert!(
            matches!(&err, Error::DuplicateKey { key, .. } if key == "shares.uid:1"),
            "{err:?}"
        );
    }

    #[test]
    fn every_bad_value_names_file_and_field() {
        for (text, field) in [
            (r#"{"max_agents": 0}"#, "max_agents"),
            (r#"{"max_agents": -1}"#, "max_agents"),
            (r#"{"max_agents": 2.5}"#, "max_agents"),
            (r#"{"max_agents": "4"}"#, "max_agents"),
            (r#"{"max_agents": null}"#, "max_agents"),
            (r#"{"max_test_runs": 0}"#, "max_test_runs"),
            (r#"{"max_test_runs": 9}"#, "max_test_runs"),
            (r#"{"max_test_runs": true}"#, "max_test_runs"),
            (r#"{"max_jobs": 0}"#, "max_jobs"),
            (r#"{"max_jobs": 4097}"#, "max_jobs"),
            (r#"{"max_jobs": 1.5}"#, "max_jobs"),
            (r#"{"journal_max_bytes": 0}"#, "journal_max_bytes"),
            (r#"{"journal_max_bytes": 65535}"#, "journal_max_bytes"),
            (r#"{"journal_max_bytes": 1073741825}"#, "journal_max_bytes"),
            (r#"{"journal_max_bytes": "16M"}"#, "journal_max_bytes"),
            (r#"{"journal_max_bytes": 1e6}"#, "journal_max_bytes"),
        ] {
            let err = parse(text).expect_err(text);
            let msg = err.to_string();
            assert!(
                matches!(&err, Error::Field { field: f, .. } if *f == field),
                "{text}: wrong error {err:?}"
            );
            assert!(
                msg.contains("/etc/worklane/slots.json"),
                "names the file: {msg}"
            );
            assert!(msg.contains(field), "names the field: {msg}");
        }
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        for (text, key) in [
            (r#"{"max_agent": 3}"#, "max_agent"),
            (r#"{"max_agents": 3, "note": "kept"}"#, "note"),
            (r#"{"Max_Agents": 3}"#, "Max_Agents"),
            (r#"{"max_agents ": 3}"#, "max_agents "),
        ] {
            let err = parse(text).expect_err(text);
            assert!(
                matches!(&err, Error::UnknownKey { key: k, .. } if k == key),
                "{text}: wrong error {err:?}"
            );
            let msg = err.to_string();
            assert!(msg.contains(&format!("`{key}`")), "names the key: {msg}");
            assert!(msg.contains("slots.json"), "names the file: {msg}");
        }
    }

    #[test]
    fn a_repeated_key_is_refused_by_name() {
        for (text, key) in [
            (r#"{"max_agents": 1, "max_agents": 8}"#, "max_agents"),
            (
                r#"{"max_test_runs": 2, "note": 1, "max_test_runs": 2}"#,
                "max_test_runs",
            ),
            (r#"{"note": 1, "note": 2}"#, "note"),
            (r#"{"a": {"b": 1, "b": 2}}"#, "a.b"),
            (r#"{"a": [{"b": 1}, {"c": 1, "c": 1}]}"#, "a.c"),
            (r#"{"max_\u0061gents": 1, "max_agents": 8}"#, "max_agents"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(
                matches!(&err, Error::DuplicateKey { key: k, .. } if k == key),
                "{text}: wrong error {err:?}"
            );
            let msg = err.to_string();
            assert!(msg.contains(&format!("`{key}`")), "names the key: {msg}");
            assert!(msg.contains("slots.json"), "names the file: {msg}");
        }
        for text in [
            r#"{"a": {"b": 1}, "c": {"b": 2}}"#,
            r#"{"a": [{"b": 1}, {"b": 2}]}"#,
        ] {
            assert!(
                matches!(parse(text), Err(Error::UnknownKey { .. })),
                "equal keys in different objects are no repeat (only the unknown key counts)"
            );
        }
    }

    #[test]
    fn the_journal_cap_is_read_with_its_bounds() {
        assert_eq!(
            parse("{}").expect("empty").journal_max_bytes,
            16 * 1024 * 1024,
            "16 MiB by default"
        );
        for n in [65_536u64, 1_048_576, 1_073_741_824] {
            let text = format!(r#"{{"journal_max_bytes": {n}}}"#);
            assert_eq!(parse(&text).expect(&text).journal_max_bytes, n, "{text}");
        }
        let msg = parse(r#"{"journal_max_bytes": 1024}"#)
            .expect_err("too small")
            .to_string();
        assert!(
            msg.contains("/etc/worklane/slots.json") && msg.contains("1024"),
            "names the file and the value: {msg}"
        );
        assert!(msg.contains("from 65536"), "says the range: {msg}");
    }

    #[test]
    fn an_out_of_range_cap_says_the_range() {
        for text in [
            r#"{"max_agents": 1000000000000}"#,
            r#"{"max_agents": 4294967296}"#,
            r#"{"max_agents": 0}"#,
        ] {
            let msg = parse(text).expect_err(text).to_string();
            assert!(
                msg.contains("from 1 to 4294967295"),
                "{text}: says the allowed range: {msg}"
            );
        }
        assert_eq!(
            parse(r#"{"max_agents": 4294967295}"#)
                .expect("the largest cap")
                .max_agents,
            u32::MAX
        );
    }

    #[test]
    fn every_error_names_its_file() {
        for text in [
            "{",
            "[1]",
            r#"{"a": 1, "a": 1}"#,
            r#"{"max_agent": 1}"#,
            r#"{"max_agents": 0}"#,
            r#"{"shares": {"x": 1}}"#,
            r#"{"shares": {"*": 0}}"#,
        ] {
            let err = parse(text).expect_err(text);
            assert_eq!(
                err.path(),
                Path::new("/etc/worklane/slots.json"),
                "{text}: {err:?}"
            );
        }
        let dir = tempfile::tempdir().expect("temp");
        let err = Config::load_in(&crate::env::Environment::from_process(), dir.path())
            .expect_err("a directory is no config");
        assert_eq!(err.path(), dir.path(), "{err:?}");
    }

    #[test]
    fn malformed_json_and_non_objects() {
        let err = parse("{max_agents: 2}").expect_err("not JSON");
        assert!(matches!(err, Error::Syntax { .. }), "{err:?}");
        assert!(err.to_string().contains("slots.json"), "names the file");
        let err = parse("[2]").expect_err("not an object");
        assert!(matches!(err, Error::NotAnObject { .. }), "{err:?}");
    }
}
