//! What killed writers leave behind: temp files that nobody holds, removed by ordinary
//! operation so that the directory cannot grow without bound.
//!
//! A writer holds `flock(LOCK_EX)` on its temp file (`.{name}.tmp-{16 hex}`) from its creation
//! until after the rename or link (see `SlotPath::replace`), so a temp file whose lock can be
//! taken belongs to a writer that is gone. Guard temp aliases (`.F.flock.tmp-{16 hex}`) belong
//! to `worklane-guard`, which removes them by age ([`worklane_guard::reclaim`]).

#![allow(
    clippy::disallowed_methods,
    reason = "this module removes the temp files of dead writers, after taking their lock"
)]

use crate::dir::SlotDir;
use crate::open;
use crate::read::READ_FLAGS;
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode};
use rustix::io::Errno;
use worklane_guard::reclaim::{self, Entry};

/// The age past which a temp file nobody holds is removed: a live writer keeps one for
/// microseconds, so a minute leaves a wide margin for a writer that was merely slow.
pub const TEMP_MIN_AGE_MS: u64 = 60_000;

/// Whether `name` is a slot-file temp name: `.{name}.tmp-{16 lowercase hex}` (and not a guard
/// temp alias, which `worklane-guard` owns).
#[must_use]
pub fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let Some((base, token)) = rest.rsplit_once(".tmp-") else {
        return false;
    };
    !base.is_empty()
        && token.len() == worklane_guard::TOKEN_LEN
        && token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && !matches!(reclaim::classify(name), Some(Entry::TempAlias { .. }))
}

/// What a sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Names removed.
    pub removed: Vec<String>,
    /// Old temp names left because their writer still holds them (or they could not be
    /// removed); each with why.
    pub kept: Vec<(String, String)>,
}

/// A hidden name of the directory (guard, guard temp alias, temp file) as `lstat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    /// Its name.
    pub name: String,
    /// What it is ("regular file", "directory", "FIFO", "symbolic link", ...).
    pub kind: &'static str,
    /// Its size in bytes.
    pub size: u64,
    /// Its mtime, milliseconds since the Unix epoch.
    pub modified_ms: u64,
    /// Its permission bits.
    pub mode: u32,
}

impl Hidden {
    /// Whether it is a regular file.
    #[must_use]
    pub fn is_regular(&self) -> bool {
        self.kind == worklane_guard::describe_file_type(FileType::RegularFile)
    }
}

impl SlotDir {
    /// Every hidden name with its type, size and age (names that vanish meanwhile are left
    /// out), for tools that report what ordinary listings skip.
    pub fn hidden(&self) -> Result<Vec<Hidden>, open::Error> {
        Ok(self.hidden_of(self.hidden_names()?))
    }

    /// [`SlotDir::hidden`] of names already listed ([`SlotDir::list_with_hidden`]'s): each
    /// looked at now, those that vanished meanwhile left out.
    #[must_use]
    pub fn hidden_of(&self, names: impl IntoIterator<Item = String>) -> Vec<Hidden> {
        let mut found = Vec::new();
        for name in names {
            let Ok(stat) =
                rustix::fs::statat(self.as_fd(), name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
            let modified_ms = u64::try_from(stat.st_mtime as i64)
                .unwrap_or(0)
                .saturating_mul(1000);
            found.push(Hidden {
                name,
                kind: worklane_guard::describe_file_type(FileType::from_raw_mode(stat.st_mode)),
                size: u64::try_from(stat.st_size).unwrap_or(u64::MAX),
                modified_ms,
                mode: worklane_guard::mode::of(&stat),
            });
        }
        found
    }

    /// Every hidden name in the directory (a leading `.`: guards, temp aliases, temp files),
    /// sorted, for tools that inspect what ordinary listings skip.
    pub fn hidden_names(&self) -> Result<Vec<String>, open::Error> {
        let mut names = Vec::new();
        self.each_name(|name| {
            if name.starts_with('.') {
                names.push(name.to_owned());
            }
        })?;
        names.sort();
        Ok(names)
    }

    /// Removes the temp files older than `min_age_ms` at `now_ms` (milliseconds since the Unix
    /// epoch) that no writer holds, and the guard temp aliases older than that. Never touches
    /// anything else; a failure to remove one is reported in [`Swept::kept`], not an error.
    pub fn sweep_temps(&self, now_ms: u64, min_age_ms: u64) -> Result<Swept, open::Error> {
        let mut swept = Swept::default();
        for name in self.hidden_names()? {
            if matches!(reclaim::classify(&name), Some(Entry::TempAlias { .. })) {
                match reclaim::remove_temp_alias(self, self.path(), &name, now_ms, min_age_ms) {
                    Ok(true) => swept.removed.push(name),
                    Ok(false) => {}
                    Err(e) => swept.kept.push((name, e.to_string())),
                }
            } else if is_temp_name(&name) {
                match self.remove_unheld_temp(&name, now_ms, min_age_ms) {
                    Ok(true) => swept.removed.push(name),
                    Ok(false) => {}
                    Err(why) => swept.kept.push((name, why)),
                }
            }
        }
        Ok(swept)
    }

    /// Removes the temp file `name` if it is a regular file older than `min_age_ms` whose lock
    /// can be taken: `Ok(false)` when it is too young, gone or not a regular file, `Err` (why)
    /// when a writer holds it or the system refuses.
    fn remove_unheld_temp(&self, name: &str, now_ms: u64, min_age_ms: u64) -> Result<bool, String> {
        let fd = match rustix::fs::openat(self.as_fd(), name, READ_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::LOOP | Errno::NXIO) => return Ok(false),
            Err(e) => return Err(format!("cannot open it: {e}")),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat it: {e}"))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Ok(false);
        }
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        let mtime_ms = u64::try_from(stat.st_mtime as i64)
            .unwrap_or(0)
            .saturating_mul(1000);
        if now_ms.saturating_sub(mtime_ms) < min_age_ms {
            return Ok(false);
        }
        match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => return Err("its writer still holds it".to_owned()),
            Err(e) => return Err(format!("cannot lock it: {e}")),
        }
        // The name must still be the file we locked (a writer's temp names are its own, but
        // the directory is shared).
        let now = match rustix::fs::statat(self.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(now) => now,
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(format!("cannot stat it: {e}")),
        };
        if (now.st_dev, now.st_ino) != (stat.st_dev, stat.st_ino) {
            return Ok(false);
        }
        match rustix::fs::unlinkat(self.as_fd(), name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(format!("cannot remove it: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_temp_name;

    #[test]
    fn temp_names() {
        assert!(is_temp_name(".agent-0.lock.tmp-0123456789abcdef"));
        assert!(is_temp_name(".STOP.tmp-0123456789abcdef"));
        for other in [
            "agent-0.lock.tmp-0123456789abcdef",
            ".agent-0.lock.tmp-0123456789ABCDEF",
            ".agent-0.lock.tmp-0123",
            "..tmp-0123456789abcdef",
            ".agent-0.lock.flock.tmp-0123456789abcdef",
            ".agent-0.lock.flock",
        ] {
            assert!(!is_temp_name(other), "{other}");
        }
    }
}
