//! Reclaiming guards in a quiescent maintenance window: the only code that unlinks a guard.
//!
//! Guard inodes accumulate (one per distinct resource name ever used, such as rotating budget
//! keys); they are never removed while the machine runs normally. In a maintenance window the
//! operator's tool (`cargo xtask reclaim-guards`) lists them with [`scan`] and removes, with
//! [`remove_guard`], those no resource file needs, each while holding it; and removes temp
//! aliases a crashed publisher left ([`remove_temp_alias`]). An acquirer that opened a guard
//! just before it was unlinked finds, after locking, that the name no longer refers to its
//! inode and opens the guard again (see [`Guard::try_acquire`]), so a reclaimed guard is never
//! held twice.

#![allow(
    clippy::disallowed_methods,
    reason = "this module is the only code that unlinks a guard or a guard temp alias"
)]

use crate::guard::Guard;
use crate::name::{GUARD_SUFFIX, GUARD_TEMP_INFIX, TOKEN_LEN, guard_name};
use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::{AtFlags, FileType};
use rustix::io::Errno;
use std::path::{Path, PathBuf};

/// A guard-space entry of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `.F.flock`: the guard of resource `F`.
    Guard {
        /// The resource `F`.
        resource: String,
    },
    /// `.F.flock.tmp-<16 hex>`: a publication temp alias.
    TempAlias {
        /// The alias's file name.
        name: String,
    },
}

/// What [`remove_guard`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Unlinked while held.
    Removed,
    /// Someone holds it: left alone.
    Busy,
    /// While held, the caller found it still needed: left alone.
    Needed,
}

/// A reclaim step failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Taking the guard failed.
    #[error(transparent)]
    Acquire(#[from] crate::acquire::Error),
    /// A system call failed.
    #[error("cannot {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
}

/// Tells a guard-space name apart: `Some` for a guard or a guard's temp alias (exactly as this
/// crate names them), `None` for anything else.
#[must_use]
pub fn classify(name: &str) -> Option<Entry> {
    let rest = name.strip_prefix('.')?;
    if let Some((resource, token)) = rest.rsplit_once(GUARD_TEMP_INFIX) {
        let hex = token.len() == TOKEN_LEN
            && token
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        return (hex && !resource.is_empty()).then(|| Entry::TempAlias {
            name: name.to_owned(),
        });
    }
    let resource = rest.strip_suffix(GUARD_SUFFIX)?;
    (!resource.is_empty()).then(|| Entry::Guard {
        resource: resource.to_owned(),
    })
}

/// Lists the guards and temp aliases in `dir`.
pub fn scan(dir: impl AsFd, dir_path: &Path) -> Result<Vec<Entry>, Error> {
    let io = |op| {
        move |e: Errno| Error::Io {
            op,
            path: dir_path.to_owned(),
            source: e.into(),
        }
    };
    let mut entries = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir).map_err(io("list"))? {
        let entry = entry.map_err(io("list"))?;
        if let Some(found) = entry.file_name().to_str().ok().and_then(classify) {
            entries.push(found);
        }
    }
    Ok(entries)
}

/// Removes the guard of `resource` in `dir` if `unneeded()`, asked while the guard is held,
/// says no resource file needs it. Busy guards are left alone.
pub fn remove_guard(
    dir: impl AsFd,
    dir_path: &Path,
    resource: &str,
    unneeded: impl FnOnce() -> bool,
) -> Result<Removal, Error> {
    remove_with(dir.as_fd(), dir_path, resource, unneeded, &mut || {})
}

/// Test seam (feature `test-seams`): [`remove_guard`] that calls `unlinked` after the guard's
/// name is unlinked and before the guard is released (an acquirer arriving in that moment).
#[cfg(feature = "test-seams")]
pub fn remove_guard_seams(
    dir: impl AsFd,
    dir_path: &Path,
    resource: &str,
    unneeded: impl FnOnce() -> bool,
    unlinked: &mut dyn FnMut(),
) -> Result<Removal, Error> {
    remove_with(dir.as_fd(), dir_path, resource, unneeded, unlinked)
}

/// [`remove_guard`], calling the test seam's `unlinked`.
fn remove_with(
    dir: BorrowedFd<'_>,
    dir_path: &Path,
    resource: &str,
    unneeded: impl FnOnce() -> bool,
    unlinked: &mut dyn FnMut(),
) -> Result<Removal, Error> {
    let Some(guard) = Guard::try_acquire(dir, dir_path, resource)? else {
        return Ok(Removal::Busy);
    };
    if !unneeded() {
        return Ok(Removal::Needed);
    }
    let name = guard_name(resource);
    match rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => {
            return Err(Error::Io {
                op: "unlink",
                path: dir_path.join(&name),
                source: e.into(),
            });
        }
    }
    unlinked();
    // Released only now: anyone who opened the old inode meanwhile finds its name gone after
    // locking it, and opens the guard again.
    drop(guard);
    Ok(Removal::Removed)
}

/// Whether `name` is a temp alias left by a crash: named as one, a regular file, last changed
/// at least `min_age_ms` before `now_ms` (milliseconds since the Unix epoch). A publisher's
/// alias lives for microseconds, so an old one is a leftover. What [`remove_temp_alias`]
/// removes, for a dry run to report.
pub fn is_stale_temp_alias(
    dir: impl AsFd,
    dir_path: &Path,
    name: &str,
    now_ms: u64,
    min_age_ms: u64,
) -> Result<bool, Error> {
    if !matches!(classify(name), Some(Entry::TempAlias { .. })) {
        return Ok(false);
    }
    let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::NOENT) => return Ok(false),
        Err(e) => {
            return Err(Error::Io {
                op: "stat",
                path: dir_path.join(name),
                source: e.into(),
            });
        }
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Ok(false);
    }
    #[allow(
        clippy::unnecessary_cast,
        clippy::useless_conversion,
        clippy::unnecessary_fallible_conversions
    )]
    let mtime_ms = u64::try_from(stat.st_mtime)
        .unwrap_or(0)
        .saturating_mul(1000);
    Ok(now_ms.saturating_sub(mtime_ms) >= min_age_ms)
}

/// Removes the temp alias `name` if [`is_stale_temp_alias`]. Returns whether it was removed.
pub fn remove_temp_alias(
    dir: impl AsFd,
    dir_path: &Path,
    name: &str,
    now_ms: u64,
    min_age_ms: u64,
) -> Result<bool, Error> {
    let dir = dir.as_fd();
    if !is_stale_temp_alias(dir, dir_path, name, now_ms, min_age_ms)? {
        return Ok(false);
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(Error::Io {
            op: "unlink",
            path: dir_path.join(name),
            source: e.into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, classify};

    #[test]
    fn guard_space_names_are_told_apart() {
        assert_eq!(
            classify(".agent-0.lock.flock"),
            Some(Entry::Guard {
                resource: "agent-0.lock".to_owned()
            })
        );
        assert_eq!(
            classify(".agent-0.lock.flock.tmp-0123456789abcdef"),
            Some(Entry::TempAlias {
                name: ".agent-0.lock.flock.tmp-0123456789abcdef".to_owned()
            })
        );
        for other in [
            "agent-0.lock",
            ".flock",
            "..flock.tmp-0123456789abcdef",
            ".agent-0.lock.flock.tmp-0123",
            ".agent-0.lock.flock.tmp-0123456789ABCDEF",
            ".agent-0.lock.tmp-0123456789abcdef",
            "agent-0.lock.flock",
        ] {
            assert_eq!(classify(other), None, "{other:?}");
        }
    }
}
