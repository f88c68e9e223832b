//! The machine's caps: `{"max_agents": N, "max_test_runs": M}`.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// Default cap on concurrent agents.
pub const DEFAULT_MAX_AGENTS: u32 = 2;
/// Default cap on concurrent coordinator test runs.
pub const DEFAULT_MAX_TEST_RUNS: u32 = 2;
/// Valid range of `max_test_runs`.
pub const TEST_RUNS_RANGE: std::ops::RangeInclusive<u32> = 1..=8;

/// The machine's caps. Unknown fields in the file are ignored (and kept by writers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Concurrent agents across all harnesses (>= 1).
    pub max_agents: u32,
    /// Concurrent coordinator test runs (1..=8).
    pub max_test_runs: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_agents: DEFAULT_MAX_AGENTS,
            max_test_runs: DEFAULT_MAX_TEST_RUNS,
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
    /// The file is JSON but not an object.
    #[error("config {path} must be a JSON object like {{\"max_agents\": 2, \"max_test_runs\": 2}}")]
    NotAnObject {
        /// The config file.
        path: PathBuf,
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
}

impl Config {
    /// Parses and validates config bytes read from `path` (used in messages).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Config, Error> {
        let value: Value = serde_json::from_slice(bytes).map_err(|source| Error::Syntax {
            path: path.to_owned(),
            source,
        })?;
        let Value::Object(map) = value else {
            return Err(Error::NotAnObject {
                path: path.to_owned(),
            });
        };
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
        Ok(Config {
            max_agents: field(
                "max_agents",
                DEFAULT_MAX_AGENTS,
                1,
                u32::MAX,
                "a whole number of at least 1",
            )?,
            max_test_runs: field(
                "max_test_runs",
                DEFAULT_MAX_TEST_RUNS,
                *TEST_RUNS_RANGE.start(),
                *TEST_RUNS_RANGE.end(),
                "a whole number from 1 to 8",
            )?,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, Error> {
        Config::parse(s.as_bytes(), Path::new("/etc/worklane/slots.json"))
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(parse("{}").expect("empty object"), Config::default());
        let c = parse(r#"{"max_agents": 7, "max_test_runs": 8, "note": "kept"}"#).expect("valid");
        assert_eq!(
            c,
            Config {
                max_agents: 7,
                max_test_runs: 8
            }
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
    fn malformed_json_and_non_objects() {
        let err = parse("{max_agents: 2}").expect_err("not JSON");
        assert!(matches!(err, Error::Syntax { .. }), "{err:?}");
        assert!(err.to_string().contains("slots.json"), "names the file");
        let err = parse("[2]").expect_err("not an object");
        assert!(matches!(err, Error::NotAnObject { .. }), "{err:?}");
    }
}
