//! The config file in force, read and rewritten as a whole.
//!
//! A write reads the file, changes it, checks the whole result as every reader will (the caps
//! and the unknown-key rule of `worklane_slotfile::Config`, the dispatcher's keys as the
//! dispatcher reads them), and replaces the file atomically through its `SlotPath` (temp file,
//! fchmod, rename), keeping every other key. A file that is not a valid config is never
//! rewritten, except by a change that makes it one (so removing a misspelt key repairs it).

use crate::Key;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use worklane_slotfile::{Config, Environment, SlotDir};

/// The mode a written config gets (readable by every harness).
pub const CONFIG_MODE: u32 = 0o644;

/// Why the config could not be read or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Where the config is could not be resolved.
    #[error(transparent)]
    Locate(#[from] worklane_slotfile::resolve::Error),
    /// The slot directory (or the config's directory) could not be opened or created.
    #[error(transparent)]
    Dir(#[from] worklane_slotfile::open::Error),
    /// The config's path has no directory.
    #[error("config path {path} has no directory")]
    NoDirectory {
        /// The path.
        path: PathBuf,
    },
    /// The config's name is not one worklane writes (a dot-file, a guard-like name).
    #[error("cannot write config {path}: {source}; edit it by hand, or move it to a plain name")]
    Name {
        /// The path.
        path: PathBuf,
        /// Why.
        source: worklane_slotfile::name::Error,
    },
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] worklane_slotfile::read::Error),
    /// The file is not a JSON object (or not JSON): it is fixed by hand.
    #[error("{source}; fix it by hand")]
    Unparsable {
        /// What is wrong.
        #[source]
        source: worklane_slotfile::config::Error,
    },
    /// The file is not a JSON object.
    #[error("config {path} is not a JSON object; fix it by hand")]
    NotAnObject {
        /// The file.
        path: PathBuf,
    },
    /// The config (as it is, or as changed) would not be read: a cap out of range, an unknown
    /// key...
    #[error(transparent)]
    Invalid(#[from] worklane_slotfile::config::Error),
    /// A dispatcher's key has a value the dispatcher does not take.
    #[error("config {path}: field `{key}` is {value}, but it must be {expected}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// Its value.
        value: Value,
        /// What it must be.
        expected: &'static str,
    },
    /// The file could not be replaced.
    #[error(transparent)]
    Write(#[from] worklane_slotfile::write::Error),
}

/// The config file in force and its directory, opened for a write.
struct Target {
    path: PathBuf,
    file: worklane_slotfile::SlotPath,
}

/// Where the config in force is: resolved as every harness resolves it, without loading it
/// (a broken file must still be repairable), with its directory opened and checked as every
/// directory worklane writes in.
fn target(env: &Environment) -> Result<Target, Error> {
    let path = env.locate()?.config;
    // The slot directory is created (and checked) as for any command, even when the config
    // lies elsewhere: a config write is an operator's first step on a new machine.
    SlotDir::resolve_dir_in(env)?;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::NoDirectory { path });
    };
    let name = name.to_string_lossy();
    let dir = SlotDir::open(parent)?;
    // The config path is configuration, not a command-line argument: a name worklane cannot
    // write is a configuration error.
    let file = match dir.file(&name) {
        Ok(file) => file,
        Err(source) => return Err(Error::Name { path, source }),
    };
    Ok(Target { path, file })
}

/// The file's keys (none when it does not exist).
fn read_keys(path: &Path, raw: Option<Vec<u8>>) -> Result<Map<String, Value>, Error> {
    let Some(raw) = raw else {
        return Ok(Map::new());
    };
    // Syntax and repeated keys are reported as every reader reports them.
    use worklane_slotfile::config::Error as E;
    if let Err(source @ (E::Syntax { .. } | E::DuplicateKey { .. } | E::NotAnObject { .. })) =
        Config::parse(&raw, path)
    {
        return Err(Error::Unparsable { source });
    }
    match serde_json::from_slice::<Value>(&raw) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Error::NotAnObject {
            path: path.to_owned(),
        }),
    }
}

/// Checks a whole config as its readers will: the caps and unknown keys as
/// `worklane_slotfile::Config` does, the dispatcher's keys as the dispatcher does.
pub fn check(path: &Path, keys: &Map<String, Value>) -> Result<(), Error> {
    let bytes = serde_json::to_vec(keys).unwrap_or_default();
    Config::parse(&bytes, path)?;
    for key in [Key::Admission, Key::EnvAllowPrefixes, Key::EnvSecretWords] {
        let Some(value) = keys.get(key.name()) else {
            continue;
        };
        let valid = match key {
            Key::Admission => matches!(value.as_str(), Some("dispatcher" | "waiter")),
            _ => value.as_array().is_some_and(|items| {
                items
                    .iter()
                    .all(|i| i.as_str().is_some_and(|s| !s.is_empty()))
            }),
        };
        if !valid {
            return Err(Error::Field {
                path: path.to_owned(),
                key: key.name(),
                value: value.clone(),
                expected: match key {
                    Key::Admission => "\"dispatcher\" or \"waiter\"",
                    _ => "an array of non-empty strings",
                },
            });
        }
    }
    Ok(())
}

/// Changes the config file in force in `env` with `change`, checks the result and replaces
/// the file atomically, keeping every other key. Returns the file's path.
pub fn edit(
    env: &Environment,
    change: impl FnOnce(&mut Map<String, Value>),
) -> Result<PathBuf, Error> {
    let Target { path, file } = target(env)?;
    let raw = file.read()?;
    let mut keys = read_keys(&path, raw)?;
    change(&mut keys);
    check(&path, &keys)?;
    let mut bytes = serde_json::to_vec_pretty(&Value::Object(keys)).unwrap_or_default();
    bytes.push(b'\n');
    file.replace(&bytes, CONFIG_MODE)?;
    Ok(path)
}

/// The config in force, as read.
#[derive(Debug)]
pub struct InForce {
    /// Its path.
    pub path: PathBuf,
    /// Whether the file exists (when not, the defaults hold).
    pub exists: bool,
    /// The keys it sets.
    pub keys: Map<String, Value>,
}

impl InForce {
    /// `key`'s value in force: the file's, else its default.
    pub fn value(&self, key: Key) -> Value {
        self.keys
            .get(key.name())
            .cloned()
            .unwrap_or_else(|| key.default_value())
    }
}

/// The config in force in `env`, read and checked as its readers read it.
pub fn in_force(env: &Environment) -> Result<InForce, Error> {
    let path = env.locate()?.config;
    // What every take reads, refused as every take refuses it.
    Config::load_in(env, &path)?;
    let raw = worklane_slotfile::read::read_path_in(env, &path)?;
    let exists = raw.is_some();
    let keys = read_keys(&path, raw)?;
    check(&path, &keys)?;
    Ok(InForce { path, exists, keys })
}

/// A value as a shell script reads it: numbers and strings bare, lists comma-separated.
pub fn plain(value: &Value) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn site() -> (tempfile::TempDir, Environment) {
        let temp = tempfile::tempdir().expect("temp dir");
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
        (temp, env)
    }

    fn set(key: Key, text: &str) -> impl FnOnce(&mut Map<String, Value>) {
        let value = key.parse(text).expect("a valid value");
        move |keys| {
            keys.insert(key.name().to_owned(), value);
        }
    }

    #[test]
    fn a_first_edit_writes_the_file_readable_by_every_harness_and_defaults_hold_for_the_rest() {
        let (temp, env) = site();
        let absent = in_force(&env).expect("no file is the defaults");
        assert!(!absent.exists);
        assert_eq!(absent.value(Key::MaxAgents), Key::MaxAgents.default_value());
        let path = edit(&env, set(Key::MaxAgents, "4")).expect("edit");
        assert_eq!(path, temp.path().join("config.json"));
        let mode = std::fs::metadata(&path)
            .expect("written")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, CONFIG_MODE);
        let now = in_force(&env).expect("read back");
        assert!(now.exists);
        assert_eq!(now.value(Key::MaxAgents), Value::from(4));
        assert_eq!(
            now.value(Key::MaxTestRuns),
            Key::MaxTestRuns.default_value()
        );
    }

    #[test]
    fn an_edit_keeps_every_other_key_and_a_change_no_reader_would_take_changes_nothing() {
        let (temp, env) = site();
        let path = temp.path().join("config.json");
        std::fs::write(&path, br#"{"max_test_runs": 3, "admission": "waiter"}"#).expect("config");
        edit(&env, set(Key::MaxAgents, "5")).expect("edit");
        let keys = in_force(&env).expect("read").keys;
        assert_eq!(keys["max_test_runs"], 3);
        assert_eq!(keys["admission"], "waiter");
        assert_eq!(keys["max_agents"], 5);
        let before = std::fs::read(&path).expect("read");
        let refused = edit(&env, |keys| {
            keys.insert("max_test_runs".to_owned(), Value::from(9));
        });
        assert!(matches!(refused, Err(Error::Invalid(_))), "{refused:?}");
        let refused = edit(&env, |keys| {
            keys.insert("admission".to_owned(), Value::from("queue"));
        });
        assert!(
            matches!(
                refused,
                Err(Error::Field {
                    key: "admission",
                    expected: "\"dispatcher\" or \"waiter\"",
                    ..
                })
            ),
            "{refused:?}"
        );
        let refused = edit(&env, |keys| {
            keys.insert(
                "env_allow_prefixes".to_owned(),
                serde_json::json!(["CI_", ""]),
            );
        });
        assert!(
            matches!(
                refused,
                Err(Error::Field {
                    key: "env_allow_prefixes",
                    expected: "an array of non-empty strings",
                    ..
                })
            ),
            "{refused:?}"
        );
        assert_eq!(std::fs::read(&path).expect("read"), before, "unchanged");
        edit(&env, |keys| {
            keys.insert("env_secret_words".to_owned(), serde_json::json!(["TOKEN"]));
        })
        .expect("a list of non-empty strings is taken");
    }

    #[test]
    fn a_misspelt_key_is_refused_until_it_is_removed() {
        let (temp, env) = site();
        let path = temp.path().join("config.json");
        std::fs::write(&path, br#"{"max_agent": 3}"#).expect("config");
        assert!(matches!(in_force(&env), Err(Error::Invalid(_))));
        assert!(matches!(
            edit(&env, set(Key::MaxAgents, "3")),
            Err(Error::Invalid(_))
        ));
        edit(&env, |keys| {
            keys.remove("max_agent");
        })
        .expect("removing it repairs the file");
        assert!(in_force(&env).expect("usable").keys.is_empty());
    }

    #[test]
    fn a_file_that_is_not_a_json_object_is_fixed_by_hand() {
        let (temp, env) = site();
        let path = temp.path().join("config.json");
        for bad in [
            &b"{not json"[..],
            b"[1, 2]",
            br#"{"max_agents": 2, "max_agents": 3}"#,
        ] {
            std::fs::write(&path, bad).expect("config");
            let refused = edit(&env, |keys| {
                keys.clear();
            })
            .expect_err("never rewritten");
            assert!(matches!(refused, Error::Unparsable { .. }), "{refused:?}");
            assert!(refused.to_string().ends_with("fix it by hand"), "{refused}");
            assert_eq!(std::fs::read(&path).expect("read"), bad, "left as it was");
        }
    }

    #[test]
    fn a_link_at_the_config_s_name_is_never_followed() {
        let (temp, env) = site();
        let elsewhere = temp.path().join("elsewhere.json");
        std::fs::write(&elsewhere, br#"{"max_agents": 1}"#).expect("target");
        std::os::unix::fs::symlink(&elsewhere, temp.path().join("config.json")).expect("link");
        assert!(matches!(
            edit(&env, set(Key::MaxAgents, "2")),
            Err(Error::Read(_))
        ));
        assert!(in_force(&env).is_err());
        assert_eq!(
            std::fs::read(&elsewhere).expect("read"),
            br#"{"max_agents": 1}"#,
            "the link's target is untouched"
        );
    }

    #[test]
    fn a_value_reads_as_a_shell_script_reads_it() {
        assert_eq!(plain(&Value::from(4)), "4");
        assert_eq!(plain(&Value::from("waiter")), "waiter");
        assert_eq!(plain(&serde_json::json!(["CI_", "X_"])), "CI_,X_");
        assert_eq!(plain(&serde_json::json!({"agent": 1})), r#"{"agent":1}"#);
    }
}
