//! `worklane config get | set | unset` and `set-test-slots`: the config file in force, read
//! and rewritten from the command line by `worklane_config` (which checks the whole file as
//! every reader will and replaces it atomically, keeping every other key).

use crate::cli::ConfigCommand;
use crate::exit::{self, Failure};
use crate::out::{outln, sayln};
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use worklane_config::Key as ConfigKey;
use worklane_config::file::{Error as E, InForce, plain};
use worklane_slotfile::{Environment, TEST_RUNS_RANGE};
use worklane_view::config_problem::{Problem, describe_file};

/// A config error as a failure: 78, but for a write the filesystem refused (71). A config in
/// force that cannot be used is said as every view says it: what, and the fix.
fn failure(e: E) -> Failure {
    match e {
        E::Write(e) => Failure::from(e),
        E::Invalid(e) => {
            let problem = Problem::of(&e);
            Failure::new(
                exit::CONFIG,
                format!("{}; fix: {}", problem.what, problem.fix),
            )
        }
        e => Failure::new(exit::CONFIG, exit::chain(&e)),
    }
}

/// Changes the config file in force with `change` (`worklane_config::file::edit`).
fn edit(change: impl FnOnce(&mut Map<String, Value>)) -> Result<PathBuf, Failure> {
    worklane_config::file::edit(&Environment::from_process(), change).map_err(|e| match e {
        // A change that would not be read is the change's fault: said plainly.
        E::Invalid(e) => Failure::new(exit::CONFIG, exit::chain(&e)),
        e => failure(e),
    })
}

fn in_force() -> Result<InForce, Failure> {
    worklane_config::file::in_force(&Environment::from_process()).map_err(failure)
}

fn get(key: Option<ConfigKey>, as_json: bool) -> Result<ExitCode, Failure> {
    let InForce { path, exists, keys } = in_force()?;
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
