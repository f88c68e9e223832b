//! Where the dispatcher keeps what it trusts: a state directory of its own user, mode 0700,
//! outside the slot directory (whose every name any member of its group may replace).
//!
//! The queue database there records who enqueued each row, and so whom its driver runs as; a
//! root dispatcher that read rows from a file a member could write would run the member's
//! rows as root. So the database lives in a [`PrivateDir`]: every directory on its path is
//! owned by root or the dispatcher's user and writable by nobody else, it holds no link, and
//! the directory itself is the user's, 0700 (PROTOCOL.md section 14).
//!
//! Which directory: `--state-dir` (or `$WORKLANE_STATE_DIR`) as given; else, for root,
//! `/var/lib/worklane/dispatcher/<key>`, and for another user
//! `$XDG_STATE_HOME/worklane/dispatcher/<key>` (`~/.local/state/...` without it), where
//! `<key>` names the slot directory served ([`key_of`]): one dispatcher per slot directory,
//! each with its own database.
//!
//! A database an older worklane kept in the slot directory (`queue.db`) is taken over once
//! ([`adopt_legacy`]) if it is provably the dispatcher's own: a regular file of its user that
//! nobody else may write, with one name. Anything else there is set aside and reported, never
//! read.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use worklane_slotfile::{Environment, PrivateDir, SlotDir};

/// The variable that names the state directory, as `--state-dir` does.
pub const STATE_DIR_VAR: &str = "WORKLANE_STATE_DIR";

/// Where a root dispatcher keeps its state, one subdirectory per slot directory.
pub const SYSTEM_STATE_BASE: &str = "/var/lib/worklane/dispatcher";

/// The legacy database's names in the slot directory, main file first.
const LEGACY: [&str; 3] = ["queue.db", "queue.db-wal", "queue.db-shm"];

/// Why the state directory could not be found or opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No directory can be named: not root, and neither `$XDG_STATE_HOME` nor `$HOME` set.
    #[error(
        "the dispatcher has no state directory: give --state-dir (or set {STATE_DIR_VAR}) to a \
         directory of your own, mode 0700"
    )]
    NoHome,
    /// In a test run, a state directory outside the test's own temporary root.
    #[error("the dispatcher's state directory {path} is refused in a test run")]
    Isolated {
        /// The directory.
        path: PathBuf,
        /// Why (the isolation rule).
        #[source]
        source: worklane_slotfile::resolve::Error,
    },
    /// The directory is unsafe, or could not be opened or made.
    #[error("cannot use {path} as the dispatcher's state directory")]
    Open {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: worklane_slotfile::private::Error,
    },
}

/// The name of the subdirectory that keeps the state of the dispatcher of `slot_dir`: the
/// directory's last name (or `root`) and 16 hex digits of the SHA-256 of its whole path, so
/// that two slot directories of one name never share a database.
#[must_use]
pub fn key_of(slot_dir: &Path) -> String {
    let digest = Sha256::digest(slot_dir.as_os_str().as_encoded_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let name: String = slot_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".to_owned())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    format!("{name}-{hex}")
}

/// The state directory of the dispatcher of `slot_dir` running as `euid`: `given` as it is,
/// else the default of the module's documentation, from `vars` (`XDG_STATE_HOME`, `HOME`).
pub fn path_for(
    given: Option<&Path>,
    slot_dir: &Path,
    euid: u32,
    vars: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<PathBuf, Error> {
    if let Some(given) = given {
        return Ok(given.to_owned());
    }
    let base = if euid == 0 {
        PathBuf::from(SYSTEM_STATE_BASE)
    } else if let Some(xdg) = vars("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        PathBuf::from(xdg).join("worklane/dispatcher")
    } else if let Some(home) = vars("HOME").filter(|v| !v.is_empty()) {
        PathBuf::from(home).join(".local/state/worklane/dispatcher")
    } else {
        return Err(Error::NoHome);
    };
    Ok(base.join(key_of(slot_dir)))
}

/// Opens (creating it when missing) the state directory of the dispatcher of `slot_dir`:
/// [`path_for`] with this process's user and variables, refused in a test run outside the
/// test's root (`env`), then checked as a [`PrivateDir`].
pub fn open(given: Option<&Path>, slot_dir: &Path, env: &Environment) -> Result<PrivateDir, Error> {
    let euid = rustix::process::geteuid().as_raw();
    let path = path_for(given, slot_dir, euid, |name| std::env::var_os(name))?;
    env.check_isolated("dispatcher state directory", &path)
        .map_err(|source| Error::Isolated {
            path: path.clone(),
            source,
        })?;
    PrivateDir::open(&path, true).map_err(|source| Error::Open { path, source })
}

/// What [`adopt_legacy`] did with a database an older worklane kept in the slot directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Legacy {
    /// None was there.
    None,
    /// It was the dispatcher's own: copied into the state directory, and the old files
    /// renamed to `<name>.migrated-<ms>` in the slot directory.
    Adopted,
    /// It was not provably the dispatcher's own: renamed to `<name>.refused-<ms>` in the slot
    /// directory, never read.
    Refused {
        /// Why, in words.
        why: String,
    },
    /// The state directory has a database already: the old one is left where it is (and
    /// never read).
    Ignored,
}

/// Takes over `queue.db` (with its `-wal`; the `-shm` is rebuilt by SQLite) left in the slot
/// directory `slots` by an older worklane, into `state`: only if each file, opened without
/// following a link, is a regular file of `state`'s user that nobody else may write, with one
/// name; the copy is made 0600 in `state` before the database is opened. A state directory
/// that has a database already wins. A failure to copy is an error (nothing is renamed, so
/// the next start tries again).
pub fn adopt_legacy(slots: &SlotDir, state: &PrivateDir, now_ms: u64) -> std::io::Result<Legacy> {
    let mut opened = Vec::new();
    for name in &LEGACY[..2] {
        let path = slots.file(name).map_err(std::io::Error::other)?;
        match path.open_stream() {
            Ok(Some((fd, _))) => opened.push((*name, std::fs::File::from(fd))),
            Ok(None) => {}
            // A link, a FIFO or a directory at the name: set aside, never followed or opened.
            Err(
                e @ (worklane_slotfile::read::Error::Symlink { .. }
                | worklane_slotfile::read::Error::NotRegular { .. }),
            ) => {
                set_aside(slots, &format!("refused-{now_ms}"))?;
                return Ok(Legacy::Refused { why: e.to_string() });
            }
            Err(e) => return Err(std::io::Error::other(e)),
        }
    }
    if opened.first().is_none_or(|(name, _)| *name != LEGACY[0]) {
        // No database (a WAL alone is nothing to take over).
        return Ok(Legacy::None);
    }
    if state.entry(crate::store::DATABASE)?.is_some() {
        return Ok(Legacy::Ignored);
    }
    let me = state.uid();
    for (name, file) in &opened {
        let stat = rustix::fs::fstat(file)?;
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let why = if stat.st_uid != me {
            Some(format!(
                "{name} is owned by uid {}, not by uid {me}",
                stat.st_uid
            ))
        } else if stat.st_mode & 0o022 != 0 {
            Some(format!(
                "{name} has mode {:04o}: its group or others may write it",
                stat.st_mode & 0o7777
            ))
        } else if stat.st_nlink as u64 != 1 {
            Some(format!("{name} has {} names (hard links)", stat.st_nlink))
        } else {
            None
        };
        if let Some(why) = why {
            set_aside(slots, &format!("refused-{now_ms}"))?;
            return Ok(Legacy::Refused { why });
        }
    }
    for (name, mut from) in opened {
        let temp = format!("{name}.adopting");
        let _ = state.remove(&temp);
        let mut to = state.create_new(&temp, 0o600)?;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = from.read(&mut buf)?;
            if n == 0 {
                break;
            }
            to.write_all(&buf[..n])?;
        }
        to.sync_all()?;
    }
    // The copy is whole: it takes the database's names (the WAL first, so that a database
    // never stands without its committed frames).
    for name in [LEGACY[1], LEGACY[0]] {
        let temp = format!("{name}.adopting");
        if state.entry(&temp)?.is_some() {
            rename_in(state, &temp, name)?;
        }
    }
    set_aside(slots, &format!("migrated-{now_ms}"))?;
    Ok(Legacy::Adopted)
}

/// Renames `from` to `to` in `state` (a private directory: nobody else changes its names).
fn rename_in(state: &PrivateDir, from: &str, to: &str) -> std::io::Result<()> {
    #[allow(
        clippy::disallowed_methods,
        reason = "a rename inside the dispatcher's private directory, not the slot directory"
    )]
    rustix::fs::renameat(state, from, state, to)?;
    Ok(())
}

/// Renames each legacy database file in the slot directory to `<name>.<suffix>` (by its name,
/// never following what it is).
fn set_aside(slots: &SlotDir, suffix: &str) -> std::io::Result<()> {
    for name in LEGACY {
        let path = slots.file(name).map_err(std::io::Error::other)?;
        match path.rename(&format!("{name}.{suffix}")) {
            Ok(_) => {}
            Err(e) if e.source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(std::io::Error::other(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_names_the_directory_and_tells_two_of_one_name_apart() {
        let a = key_of(Path::new("/var/tmp/agent-slots"));
        let b = key_of(Path::new("/srv/agent-slots"));
        assert!(
            a.starts_with("agent-slots-") && a.len() == "agent-slots-".len() + 16,
            "{a}"
        );
        assert_ne!(a, b, "two paths, two keys");
        assert_eq!(a, key_of(Path::new("/var/tmp/agent-slots")), "stable");
        assert!(key_of(Path::new("/")).starts_with("root-"));
        assert!(
            key_of(Path::new("/x/a bé")).starts_with("a_b_-"),
            "only plain characters"
        );
    }

    #[test]
    fn the_default_is_the_system_s_for_root_and_the_user_s_otherwise() {
        let slots = Path::new("/var/tmp/agent-slots");
        let key = key_of(slots);
        let none = |_: &str| None;
        assert_eq!(
            path_for(None, slots, 0, none).expect("root"),
            Path::new(SYSTEM_STATE_BASE).join(&key)
        );
        let home = |n: &str| (n == "HOME").then(|| "/home/ann".into());
        assert_eq!(
            path_for(None, slots, 1000, home).expect("home"),
            Path::new("/home/ann/.local/state/worklane/dispatcher").join(&key)
        );
        let xdg = |n: &str| match n {
            "XDG_STATE_HOME" => Some("/st".into()),
            "HOME" => Some("/home/ann".into()),
            _ => None,
        };
        assert_eq!(
            path_for(None, slots, 1000, xdg).expect("xdg"),
            Path::new("/st/worklane/dispatcher").join(&key)
        );
        assert!(matches!(
            path_for(None, slots, 1000, none),
            Err(Error::NoHome)
        ));
        assert_eq!(
            path_for(Some(Path::new("/given")), slots, 1000, none).expect("given"),
            Path::new("/given"),
            "given as it is"
        );
    }
}
