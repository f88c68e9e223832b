//! The dispatcher's part of the host's config (`config.json`, or the file
//! `$AGENT_SLOTS_CONFIG` names): how the host admits work, `admission` (`"dispatcher"`, the
//! default, or `"waiter"`).
//!
//! What crosses from one user's enqueue to the driver (the environment filter) is never read
//! from the config, which every member of the slot directory's group may write: it is the
//! dispatcher's own setting ([`crate::env::EnvFilter`], from its command line). The config's
//! old keys for it are reported as ignored ([`Config::ignored`]).

use crate::service::Mode;
use std::path::{Path, PathBuf};

/// The config keys an older worklane read for the environment filter, which the dispatcher
/// ignores now, each with the dispatcher's flag that replaces it.
pub const IGNORED: [(&str, &str); 2] = [
    ("env_allow_prefixes", "--env-allow-prefix"),
    ("env_secret_words", "--env-secret-word"),
];

/// The dispatcher's part of the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// How the host admits work.
    pub mode: Mode,
    /// The keys of [`IGNORED`] the file sets, with the flag that replaces each.
    pub ignored: Vec<(&'static str, &'static str)>,
}

/// Why the config could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read the config")]
    Read(#[source] worklane_slotfile::read::Error),
    /// `admission` is neither `"dispatcher"` nor `"waiter"`.
    #[error("config {path}: field `admission` must be \"dispatcher\" or \"waiter\"")]
    Admission {
        /// The file.
        path: PathBuf,
    },
}

/// Reads the dispatcher's part of the config at `path` (absent: the defaults). Its other keys
/// are the slot pool's, checked there.
pub fn read(path: &Path) -> Result<Config, Error> {
    let raw = worklane_slotfile::read::read_path(path).map_err(Error::Read)?;
    let doc = raw
        .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw).ok())
        .unwrap_or_default();
    let mode = match doc.get("admission").map(|v| v.as_str()) {
        None | Some(Some("dispatcher")) => Mode::Dispatcher,
        Some(Some("waiter")) => Mode::Waiter,
        Some(_) => {
            return Err(Error::Admission {
                path: path.to_owned(),
            });
        }
    };
    let ignored = IGNORED
        .into_iter()
        .filter(|(key, _)| doc.get(key).is_some())
        .collect();
    Ok(Config { mode, ignored })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_is_read_and_the_old_filter_keys_are_said_ignored() {
        let temp = tempfile::tempdir().expect("temp");
        let path = temp.path().join("config.json");
        assert_eq!(
            read(&path).expect("absent"),
            Config {
                mode: Mode::Dispatcher,
                ignored: Vec::new()
            }
        );
        std::fs::write(
            &path,
            r#"{"admission": "waiter", "env_secret_words": ["X"], "max_agents": 3}"#,
        )
        .expect("write");
        assert_eq!(
            read(&path).expect("read"),
            Config {
                mode: Mode::Waiter,
                ignored: vec![("env_secret_words", "--env-secret-word")]
            }
        );
        std::fs::write(&path, r#"{"admission": "queue"}"#).expect("write");
        let err = read(&path).expect_err("bad");
        assert!(matches!(err, Error::Admission { .. }), "{err:?}");
        assert!(err.to_string().contains("admission"), "{err}");
    }
}
