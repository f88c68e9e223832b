//! The checks every guard descriptor must pass, the lock call, and how a guard is named in
//! messages.

#![allow(
    clippy::disallowed_methods,
    reason = "this module takes a guard's lock"
)]

use crate::acquire::Error;
use crate::file::{FileId, describe_file_type};
use crate::filesystem::CheckedFilesystem;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, FlockOperation};
use rustix::io::Errno;
use std::path::{Path, PathBuf};

/// A file in a directory, turned into a path only when a message needs one (the success path
/// allocates no path).
#[derive(Clone, Copy)]
pub(crate) struct Shown<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) name: &'a str,
}

impl Shown<'_> {
    pub(crate) fn path(self) -> PathBuf {
        self.dir.join(self.name)
    }
}

pub(crate) fn io<'a>(op: &'static str, shown: Shown<'a>) -> impl FnOnce(Errno) -> Error + 'a {
    move |e| Error::Io {
        op,
        path: shown.path(),
        source: e.into(),
    }
}

#[cfg(test)]
thread_local! {
    /// How many times this thread asked the kernel for a filesystem's type (the tests' count of
    /// the checks a known filesystem saves).
    pub(crate) static FILESYSTEM_CHECKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether the guard's name still refers to the inode `id` (not unlinked or replaced).
pub(crate) fn still_named(
    dir: BorrowedFd<'_>,
    shown: Shown<'_>,
    id: FileId,
) -> Result<bool, Error> {
    match rustix::fs::statat(dir, shown.name, AtFlags::SYMLINK_NOFOLLOW) {
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        Ok(stat) => Ok(FileId {
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
        } == id),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(io("stat", shown)(e)),
    }
}

/// Checks a guard descriptor: above the standard streams, an empty regular file, on a
/// filesystem with local `flock` (asked of the kernel unless the file is on `checked`'s
/// device, whose filesystem was accepted already). Closes it (by dropping) on refusal.
pub(crate) fn check_descriptor(
    fd: &OwnedFd,
    shown: Shown<'_>,
    checked: Option<CheckedFilesystem>,
) -> Result<FileId, Error> {
    let raw = fd.as_raw_fd();
    if raw <= 2 {
        return Err(Error::StdStreamClosed {
            path: shown.path(),
            fd: raw,
        });
    }
    let stat = rustix::fs::fstat(fd).map_err(io("fstat", shown))?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return Err(Error::NotRegular {
            path: shown.path(),
            kind: describe_file_type(kind),
        });
    }
    if stat.st_size != 0 {
        return Err(Error::NotEmpty {
            path: shown.path(),
            size: u64::try_from(stat.st_size).unwrap_or(u64::MAX),
        });
    }
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    let id = FileId {
        dev: stat.st_dev as u64,
        ino: stat.st_ino as u64,
    };
    if !checked.is_some_and(|c| c.covers(id)) {
        check_filesystem(fd.as_fd(), shown)?;
    }
    Ok(id)
}

/// Refuses a guard (or a directory about to hold one) on a filesystem without local `flock`.
pub(crate) fn check_filesystem(fd: BorrowedFd<'_>, shown: Shown<'_>) -> Result<(), Error> {
    #[cfg(test)]
    FILESYSTEM_CHECKS.with(|n| n.set(n.get() + 1));
    match crate::sys::filesystem_of(fd) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(refused)) => Err(Error::Filesystem {
            path: shown.path(),
            refused,
        }),
        Err(source) => Err(Error::Io {
            op: "fstatfs",
            path: shown.path(),
            source,
        }),
    }
}

/// `flock(LOCK_EX | LOCK_NB)` on `fd`: `Ok(true)` when held, `Ok(false)` when busy.
///
/// See <https://man7.org/linux/man-pages/man2/flock.2.html>.
pub(crate) fn lock_nonblocking(fd: &OwnedFd, shown: Shown<'_>) -> Result<bool, Error> {
    loop {
        match rustix::fs::flock(fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(true),
            Err(Errno::WOULDBLOCK) => return Ok(false),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(io("flock", shown)(e)),
        }
    }
}
