//! `worklane config get | set | unset` and `set-test-slots`: the config file in force, read
//! and rewritten from the command line.
//!
//! A write reads the file, changes one key, checks the whole result as every reader will
//! (the caps and the unknown-key rule of `worklane_slotfile::Config`, the dispatcher's keys
//! here), and replaces the file atomically through its `SlotPath` (temp file, fchmod, rename),
//! keeping every other key. A file that is not a valid config is never rewritten, except by an
//! `unset` that makes it one (so `worklane config unset max_agent` repairs a misspelling).

use crate::cli::{ConfigCommand, ConfigKey};
use crate::exit::{self, Failure};
use crate::out::{outln, sayln};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use worklane_slotfile::{Config, Environment, SlotDir, TEST_RUNS_RANGE};

mod key;

use worklane_view::config_problem::{Problem, describe_file};

/// The mode a written config gets (readable by every harness, as before).
const CONFIG_MODE: u32 = 0o644;

/// The config file in force and its directory, opened for a write.
struct Target {
    path: PathBuf,
    file: worklane_slotfile::SlotPath,
}

/// Where the config in force is: resolved as every harness resolves it, without loading it
/// (a broken file must still be repairable), with its directory opened and checked as every
/// directory worklane writes in.
fn target() -> Result<Target, Failure> {
    let env = Environment::from_process();
    let path = env
        .locate()
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?
        .config;
    // The slot directory is created (and checked) as for any command, even when the config
    // lies elsewhere: a config write is an operator's first step on a new machine.
    SlotDir::resolve_dir_in(&env).map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Failure::new(
            exit::CONFIG,
            format!("config path {} has no directory", path.display()),
        ));
    };
    let name = name.to_string_lossy();
    let dir = SlotDir::open(parent).map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    // The config path is configuration, not a command-line argument: a name worklane cannot
    // write (a dot-file, a guard-like name) is a configuration error.
    let file = dir.file(&name).map_err(|e| {
        Failure::new(
            exit::CONFIG,
            format!(
                "cannot write config {}: {}; edit it by hand, or move it to a plain name",
                path.display(),
                exit::chain(&e)
            ),
        )
    })?;
    Ok(Target { path, file })
}

/// The file's keys (none when it does not exist); 78 for a file that is not a JSON object.
fn read_keys(path: &Path, raw: Option<Vec<u8>>) -> Result<Map<String, Value>, Failure> {
    let Some(raw) = raw else {
        return Ok(Map::new());
    };
    // Syntax and repeated keys are reported as every reader reports them.
    use worklane_slotfile::config::Error as E;
    if let Err(e @ (E::Syntax { .. } | E::DuplicateKey { .. } | E::NotAnObject { .. })) =
        Config::parse(&raw, path)
    {
        return Err(Failure::new(
            exit::CONFIG,
            format!("{}; fix it by hand", exit::chain(&e)),
        ));
    }
    match serde_json::from_slice::<Value>(&raw) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Failure::new(
            exit::CONFIG,
            format!(
                "config {} is not a JSON object; fix it by hand",
                path.display()
            ),
        )),
    }
}

/// Checks a whole config as its readers will: the caps and unknown keys as
/// `worklane_slotfile::Config` does, the dispatcher's keys as the dispatcher does.
fn check(path: &Path, keys: &Map<String, Value>) -> Result<(), Failure> {
    let bytes = serde_json::to_vec(keys).unwrap_or_default();
    Config::parse(&bytes, path).map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    for key in [
        ConfigKey::Admission,
        ConfigKey::EnvAllowPrefixes,
        ConfigKey::EnvSecretWords,
    ] {
        let Some(value) = keys.get(key.name()) else {
            continue;
        };
        let valid = match key {
            ConfigKey::Admission => matches!(value.as_str(), Some("dispatcher" | "waiter")),
            _ => value.as_array().is_some_and(|items| {
                items
                    .iter()
                    .all(|i| i.as_str().is_some_and(|s| !s.is_empty()))
            }),
        };
        if !valid {
            let expected = match key {
                ConfigKey::Admission => "\"dispatcher\" or \"waiter\"",
                _ => "an array of non-empty strings",
            };
            return Err(Failure::new(
                exit::CONFIG,
                format!(
                    "config {}: field `{}` is {value}, but it must be {expected}",
                    path.display(),
                    key.name()
                ),
            ));
        }
    }
    Ok(())
}

/// Changes the config file in force with `change`, checks the result and replaces the file
/// atomically, keeping every other key. Returns the file's path.
fn edit(change: impl FnOnce(&mut Map<String, Value>)) -> Result<PathBuf, Failure> {
    let Target { path, file } = target()?;
    let raw = file
        .read()
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    let mut keys = read_keys(&path, raw)?;
    change(&mut keys);
    check(&path, &keys)?;
    let mut bytes = serde_json::to_vec_pretty(&Value::Object(keys)).unwrap_or_default();
    bytes.push(b'\n');
    file.replace(&bytes, CONFIG_MODE)?;
    Ok(path)
}

/// The config in force, read and checked as its readers read it: its path, whether the file
/// exists, and its keys.
fn in_force() -> Result<(PathBuf, bool, Map<String, Value>), Failure> {
    let env = Environment::from_process();
    let path = env
        .locate()
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?
        .config;
    // What every take reads, reported as every view reports it: the file, what, the fix.
    if let Err(e) = Config::load_in(&env, &path) {
        let problem = Problem::of(&e);
        return Err(Failure::new(
            exit::CONFIG,
            format!("{}; fix: {}", problem.what, problem.fix),
        ));
    }
    let raw = worklane_slotfile::read::read_path_in(&env, &path)
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    let exists = raw.is_some();
    let keys = read_keys(&path, raw)?;
    check(&path, &keys)?;
    Ok((path, exists, keys))
}

/// A value as a shell script reads it: numbers and strings bare, lists comma-separated.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

fn get(key: Option<ConfigKey>, as_json: bool) -> Result<ExitCode, Failure> {
    let (path, exists, keys) = in_force()?;
    let value = |k: ConfigKey| {
        keys.get(k.name())
            .cloned()
            .unwrap_or_else(|| k.default_value())
    };
    if let Some(key) = key {
        let value = value(key);
        if as_json {
            outln!("{value}")?;
        } else {
            outln!("{}", plain(&value))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if as_json {
        let shown = crate::json::Config {
            version: crate::json::VERSION,
            file: path.display().to_string(),
            exists,
            values: ConfigKey::ALL
                .iter()
                .map(|k| (k.name().to_owned(), value(*k)))
                .collect(),
            set: ConfigKey::ALL
                .iter()
                .filter(|k| keys.contains_key(k.name()))
                .map(|k| k.name().to_owned())
                .collect(),
        };
        outln!("{}", crate::json::pretty(&shown))?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{}", describe_file(&path, exists))?;
    for k in ConfigKey::ALL {
        let default = if keys.contains_key(k.name()) {
            ""
        } else {
            " (default)"
        };
        outln!("{} = {}{default}", k.name(), plain(&value(k)))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `set-test-slots N`: `config set max_test_runs N` under its older name.
pub(crate) fn set_test_slots(n: u32) -> Result<ExitCode, Failure> {
    if !TEST_RUNS_RANGE.contains(&n) {
        return Err(Failure::new(
            exit::USAGE,
            format!("set-test-slots {n}: the cap on test runs must be from 1 to 8"),
        ));
    }
    let path = edit(|keys| {
        keys.insert("max_test_runs".to_owned(), Value::from(n));
    })?;
    sayln!("max_test_runs = {n} in {}", path.display())?;
    Ok(ExitCode::SUCCESS)
}

/// Shares are what only an implementation that counts weights keeps: `protocol.json` names
/// the `weights` extension from the first config that sets them, and the operator is told.
fn declare_weights() -> Result<(), Failure> {
    let pool = crate::pool()?;
    if pool.declare_extension(worklane_admission::protocol::WEIGHTS)? {
        sayln!(
            "the slot directory now uses the protocol extension \"weights\" (protocol.json): \
             implementations that do not count weights and shares refuse to take slots here \
             (`worklane protocol show`)"
        )?;
    }
    Ok(())
}

pub(crate) fn command(command: ConfigCommand) -> Result<ExitCode, Failure> {
    match command {
        ConfigCommand::Get { key, json } => get(key, json),
        ConfigCommand::Set { key, value } => {
            if matches!(key, ConfigKey::EnvAllowPrefixes | ConfigKey::EnvSecretWords) {
                return Err(Failure::new(
                    exit::USAGE,
                    format!(
                        "config set {}: the dispatcher no longer reads what crosses from one \
                         user's enqueue to the driver from the config, which every member of \
                         the slot directory's group may write; give it to the dispatcher \
                         itself: `worklane dispatcher {}` (in its systemd unit's ExecStart)",
                        key.name(),
                        match key {
                            ConfigKey::EnvAllowPrefixes => "--env-allow-prefix PREFIX ...",
                            _ => "--env-secret-word WORD ...",
                        }
                    ),
                ));
            }
            let parsed = key.parse(&value).map_err(|expected| {
                Failure::new(
                    exit::USAGE,
                    format!(
                        "config set {} {value:?}: the value must be {expected}",
                        key.name()
                    ),
                )
            })?;
            let shown = plain(&parsed);
            let sets_shares = key == ConfigKey::Shares
                && parsed.as_object().is_some_and(|shares| !shares.is_empty());
            let path = edit(|keys| {
                keys.insert(key.name().to_owned(), parsed);
            })?;
            sayln!("{} = {shown} in {}", key.name(), path.display())?;
            if sets_shares {
                declare_weights()?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Unset { key } => {
            let mut had = false;
            let path = edit(|keys| had = keys.remove(&key).is_some())?;
            if had {
                sayln!("{key} removed from {}", path.display())?;
            } else {
                sayln!("{key} was not set in {}", path.display())?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_the_config_knows_can_be_named() {
        let names: Vec<&str> = ConfigKey::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            worklane_slotfile::config::KEYS,
            "the same keys, in order"
        );
        use clap::ValueEnum;
        for key in ConfigKey::ALL {
            let possible = key.to_possible_value().expect("a value");
            assert_eq!(possible.get_name(), key.name(), "spelt as in the file");
        }
    }

    #[test]
    fn values_are_parsed_per_key() {
        assert_eq!(ConfigKey::MaxAgents.parse("4"), Ok(Value::from(4)));
        assert!(ConfigKey::MaxAgents.parse("0").is_err());
        assert!(ConfigKey::MaxAgents.parse("4294967296").is_err());
        assert!(ConfigKey::MaxAgents.parse("two").is_err());
        assert!(ConfigKey::MaxTestRuns.parse("9").is_err());
        assert_eq!(
            ConfigKey::JournalMaxBytes.parse("1048576"),
            Ok(Value::from(1_048_576))
        );
        assert!(ConfigKey::JournalMaxBytes.parse("1024").is_err());
        assert_eq!(
            ConfigKey::Admission.parse("waiter"),
            Ok(Value::from("waiter"))
        );
        assert!(ConfigKey::Admission.parse("queue").is_err());
        assert_eq!(
            ConfigKey::EnvAllowPrefixes.parse("CI_,WORKLANE_"),
            Ok(serde_json::json!(["CI_", "WORKLANE_"]))
        );
        assert_eq!(
            ConfigKey::EnvSecretWords.parse(r#"["TOKEN"]"#),
            Ok(serde_json::json!(["TOKEN"]))
        );
        assert_eq!(
            ConfigKey::EnvSecretWords.parse(""),
            Ok(serde_json::json!([]))
        );
        assert!(ConfigKey::EnvAllowPrefixes.parse("A,,B").is_err());
        assert!(ConfigKey::EnvAllowPrefixes.parse("[1]").is_err());
    }
}
