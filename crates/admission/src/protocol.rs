//! `protocol.json`: the protocol level of the slot directory and the extensions in use, so that
//! an implementation that cannot keep a rule in force there refuses to act instead of breaking
//! it (PROTOCOL.md section 0, modelled on git's `core.repositoryformatversion` and
//! `extensions.*`).
//!
//! No file is level 1 with no extension. A take, a lease and an enqueue in a directory whose
//! level is above [`LEVEL`], or that names an extension not in [`KNOWN`], is refused
//! ([`Unsupported`]); the views still read the directory and say why. An extension is declared
//! under `slots.lock` the first time it is used (never removed by a take), and removed only by
//! an operator's command that checks nothing uses it.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use worklane_slotfile::{SHARED_MODE, SlotDir, SlotPath};

/// The file's name in the slot directory.
pub const PROTOCOL_FILE: &str = "protocol.json";

/// The protocol level this implementation keeps: PROTOCOL.md's, with the waiting line.
pub const LEVEL: u32 = 1;

/// Weights and shares (PROTOCOL.md 12.10): a slot may count for more than one unit of its
/// cap, and an owner's units may be bounded by its share. An implementation that does not
/// count weights takes past the cap.
pub const WEIGHTS: &str = "weights";

/// A run's cgroup (PROTOCOL.md 12.7): a slot whose record names its run's cgroup counts as
/// held while that cgroup has processes, whatever its guard. An implementation that does not
/// know it takes over a slot whose run's daemons still work.
pub const CGROUPS: &str = "cgroups";

/// The extensions this implementation knows and keeps.
pub const KNOWN: [&str; 2] = [CGROUPS, WEIGHTS];

/// What `protocol.json` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protocol {
    /// The file's format: 1.
    pub version: u32,
    /// The protocol level.
    pub level: u32,
    /// The extensions in use, sorted, each once.
    #[serde(default)]
    pub extensions: Vec<String>,
}

impl Default for Protocol {
    fn default() -> Protocol {
        Protocol {
            version: 1,
            level: 1,
            extensions: Vec::new(),
        }
    }
}

/// Why this implementation may not act in a directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// The directory is at a level above this implementation's.
    #[error(
        "the slot directory is at protocol level {level} ({PROTOCOL_FILE}) and this worklane \
         keeps level {LEVEL}: upgrade worklane (every program that takes slots here) to one of \
         level {level} or above"
    )]
    Level {
        /// The directory's level.
        level: u32,
    },
    /// The directory names an extension this implementation does not know.
    #[error(
        "the slot directory uses the protocol extension {name:?} ({PROTOCOL_FILE}), which this \
         worklane does not know: upgrade worklane (every program that takes slots here) to one \
         that knows it, or, if nothing uses it any more, `worklane protocol drop {name}` with \
         a worklane that knows it"
    )]
    Extension {
        /// Its name.
        name: String,
    },
    /// The file cannot be read or does not parse: what it asks cannot be known.
    #[error(
        "{PROTOCOL_FILE} cannot be read ({detail}): what the directory's protocol asks is not \
         known; repair it (`{{\"version\": 1, \"level\": 1, \"extensions\": []}}` with the \
         extensions in use) or remove it if no extension is in use"
    )]
    Unreadable {
        /// Why.
        detail: String,
    },
}

/// Reads `dir`'s `protocol.json`: the default (level 1, no extension) when there is none.
pub fn read(dir: &SlotDir) -> Result<Protocol, Unsupported> {
    let unreadable = |detail: String| Unsupported::Unreadable { detail };
    let file = dir
        .file(PROTOCOL_FILE)
        .map_err(|e| unreadable(e.to_string()))?;
    match file.read() {
        Ok(None) => Ok(Protocol::default()),
        Ok(Some(raw)) => {
            let protocol: Protocol =
                serde_json::from_slice(&raw).map_err(|e| unreadable(e.to_string()))?;
            if protocol.version != 1 {
                return Err(unreadable(format!(
                    "its format is version {}; this worklane reads version 1",
                    protocol.version
                )));
            }
            Ok(protocol)
        }
        Err(e) => Err(unreadable(e.to_string())),
    }
}

/// Whether this implementation may act under `protocol`.
pub fn check(protocol: &Protocol) -> Result<(), Unsupported> {
    if protocol.level > LEVEL {
        return Err(Unsupported::Level {
            level: protocol.level,
        });
    }
    match protocol
        .extensions
        .iter()
        .find(|e| !KNOWN.contains(&e.as_str()))
    {
        Some(name) => Err(Unsupported::Extension { name: name.clone() }),
        None => Ok(()),
    }
}

/// [`read`] then [`check`]: whether this implementation may take, lease or enqueue in `dir`.
pub fn check_dir(dir: &SlotDir) -> Result<Protocol, Unsupported> {
    let protocol = read(dir)?;
    check(&protocol)?;
    Ok(protocol)
}

/// Adds `extension` to `protocol.json` (`file`) if it is not named yet; `Ok(true)` when it
/// was added. The caller holds `slots.lock` (every declaration is made under it, so two are
/// never lost to each other) and has read `protocol` ([`check_dir`]) under it.
pub(crate) fn declare(
    file: &SlotPath,
    mut protocol: Protocol,
    extension: &str,
) -> Result<bool, worklane_slotfile::write::Error> {
    if protocol.extensions.iter().any(|e| e == extension) {
        return Ok(false);
    }
    protocol.extensions.push(extension.to_owned());
    protocol.extensions.sort();
    protocol.extensions.dedup();
    write(file, &protocol)?;
    Ok(true)
}

/// Writes `protocol` as `protocol.json` (`file`: temp file, mode 0660, rename).
pub(crate) fn write(
    file: &SlotPath,
    protocol: &Protocol,
) -> Result<(), worklane_slotfile::write::Error> {
    let mut bytes = serde_json::to_vec(protocol).unwrap_or_default();
    bytes.push(b'\n');
    file.replace(&bytes, SHARED_MODE)
}

/// Why `protocol.json` could not be changed
/// ([`Pool::declare_extension`](crate::Pool::declare_extension),
/// [`Pool::drop_extension`](crate::Pool::drop_extension)), or asks what this worklane cannot
/// keep ([`Pool::protocol`](crate::Pool::protocol)). Each variant names the step that failed
/// and what it was done on; the cause is its source. (A take that declares an extension says
/// its own steps: [`take::Error`](crate::take::Error).)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The directory's protocol asks what this worklane cannot keep, or names an extension it
    /// cannot check.
    #[error("cannot act in the slot directory {}", dir.display())]
    Protocol {
        /// The slot directory.
        dir: PathBuf,
        /// Why.
        #[source]
        why: Unsupported,
    },
    /// The directory could not be looked at (a file's name, the listing, a slot's guard or
    /// record), to name `protocol.json` or to see what uses the extension.
    #[error(transparent)]
    Look(#[from] crate::look::Error),
    /// `slots.lock` stayed held by another process for about 2 s.
    #[error(
        "slots.lock in {} stayed held for 2 s: is its holder stopped? (`worklane slots` names it)",
        dir.display()
    )]
    SlotsLockBusy {
        /// The slot directory.
        dir: PathBuf,
    },
    /// `slots.lock` could not be taken (not busy: broken).
    #[error("cannot take slots.lock to count {kind} slots")]
    Count {
        /// The kind counted (`agent`).
        kind: &'static str,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::acquire::Error>,
    },
    /// `slots.lock` could not be released after the change.
    #[error("cannot release slots.lock after counting {kind} slots")]
    Counted {
        /// The kind counted (`agent`).
        kind: &'static str,
        /// Why.
        #[source]
        source: worklane_lease::held::Error,
    },
    /// `protocol.json` could not be written.
    #[error("cannot write protocol.json in {}", dir.display())]
    WriteProtocol {
        /// The slot directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: worklane_slotfile::write::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protocol(level: u32, extensions: &[&str]) -> Protocol {
        Protocol {
            version: 1,
            level,
            extensions: extensions.iter().map(|e| (*e).to_owned()).collect(),
        }
    }

    #[test]
    fn a_higher_level_or_an_unknown_extension_is_refused_and_known_ones_pass() {
        assert_eq!(check(&Protocol::default()), Ok(()));
        assert_eq!(check(&protocol(1, &["weights"])), Ok(()));
        assert_eq!(check(&protocol(0, &[])), Ok(()), "a lower level is kept");
        assert_eq!(
            check(&protocol(2, &[])),
            Err(Unsupported::Level { level: 2 })
        );
        assert_eq!(
            check(&protocol(1, &["weights", "freezer"])),
            Err(Unsupported::Extension {
                name: "freezer".into()
            })
        );
        let said = Unsupported::Extension {
            name: "freezer".into(),
        }
        .to_string();
        assert!(
            said.contains("\"freezer\"") && said.contains("upgrade worklane"),
            "{said}"
        );
    }
}
