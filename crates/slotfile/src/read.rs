//! Bounded, safe reads: regular files only, no symlink followed, never blocking on a FIFO, at
//! most [`MAX_READ`] bytes.

use rustix::fd::BorrowedFd;
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use std::path::{Path, PathBuf};

/// The largest file a slot-file read accepts: 64 KiB.
pub const MAX_READ: u64 = 64 * 1024;

/// How every slot file is opened to be read: read-only, never following a symbolic link at the
/// name, never blocking on a FIFO, never inherited by a child, never becoming a controlling
/// terminal.
pub(crate) const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOCTTY);

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A symbolic link sits at the name.
    #[error("{path} is a symbolic link, which slot-file reads never follow; remove it")]
    Symlink {
        /// The file.
        path: PathBuf,
    },
    /// Not a regular file.
    #[error("{path} is a {kind}, not a regular file; remove it")]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// Larger than [`MAX_READ`].
    #[error(
        "{path} is larger than 64 KiB ({size} bytes or more); no slot file is that large: inspect and remove it"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size (or a lower bound).
        size: u64,
    },
    /// A test run tried to read a file outside its temporary root.
    #[error(transparent)]
    Isolation(#[from] crate::env::resolve::Error),
    /// A system call failed.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
}

/// Reads `name` in `dir` (or the path `name` when `dir` is `None`): `Ok(None)` when absent.
pub(crate) fn read_at(
    dir: Option<BorrowedFd<'_>>,
    name: &Path,
    path: &Path,
) -> Result<Option<Vec<u8>>, Error> {
    Ok(read_owned_at(dir, name, path)?.map(|(bytes, _)| bytes))
}

/// Who may have written a file: its owner, its permission bits and its number of links, from
/// `fstat` of the open file that was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The owner's uid.
    pub uid: u32,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// The number of hard links.
    pub links: u64,
}

impl Written {
    /// Whether only its owner (or root) can have written these bytes: no group or other write
    /// bit and a single link (a file with several names may have been written through another).
    #[must_use]
    pub fn only_by_owner(&self) -> bool {
        self.mode & 0o022 == 0 && self.links == 1
    }
}

/// [`read_at`] that also says who may have written the file, from the same open file.
pub(crate) fn read_owned_at(
    dir: Option<BorrowedFd<'_>>,
    name: &Path,
    path: &Path,
) -> Result<Option<(Vec<u8>, Written)>, Error> {
    let opened = match dir {
        Some(dir) => rustix::fs::openat(dir, name, READ_FLAGS, Mode::empty()),
        None => rustix::fs::open(name, READ_FLAGS, Mode::empty()),
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => {
            return Err(Error::Symlink {
                path: path.to_owned(),
            });
        }
        Err(Errno::NXIO) => {
            return Err(Error::NotRegular {
                path: path.to_owned(),
                kind: "socket or device",
            });
        }
        Err(e) => return Err(io(path, e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| io(path, e))?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return Err(Error::NotRegular {
            path: path.to_owned(),
            kind: worklane_guard::describe_file_type(kind),
        });
    }
    let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
    if size > MAX_READ {
        return Err(Error::TooLarge {
            path: path.to_owned(),
            size,
        });
    }
    // One read for the common case: ask for one byte more than fstat reported; a short read
    // of a regular file is its end. A file that grew meanwhile is read on, up to the bound.
    let limit = usize::try_from(MAX_READ).unwrap_or(usize::MAX);
    let mut bytes = vec![0u8; usize::try_from(size).unwrap_or(limit) + 1];
    let mut len = 0;
    loop {
        let n = match rustix::io::read(&fd, &mut bytes[len..]) {
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(io(path, e)),
        };
        len += n;
        if len > limit {
            return Err(Error::TooLarge {
                path: path.to_owned(),
                size: len as u64,
            });
        }
        if n == 0 || len < bytes.len() {
            break;
        }
        bytes.resize((bytes.len() * 2).min(limit + 1), 0);
    }
    bytes.truncate(len);
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let written = Written {
        uid: stat.st_uid,
        mode: worklane_guard::mode::of(&stat),
        links: u64::try_from(stat.st_nlink).unwrap_or(u64::MAX),
    };
    Ok(Some((bytes, written)))
}

/// Whether `name` in `dir` holds exactly `expected`: `Ok(None)` when absent. Reads at most
/// `expected.len() + 1` bytes without following a link or blocking; anything that is not a
/// regular file with those bytes (a FIFO, a directory, other bytes) is `Some(false)`.
pub(crate) fn read_compare(
    dir: BorrowedFd<'_>,
    name: &str,
    expected: &[u8],
    path: &Path,
) -> Result<Option<bool>, Error> {
    let fd = match rustix::fs::openat(dir, name, READ_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP | Errno::NXIO) => return Ok(Some(false)),
        Err(e) => return Err(io(path, e)),
    };
    // One read decides: a short read of a regular file is its end, and a full one has read a
    // byte more than `expected`, so the file is not `expected` whatever follows.
    let mut bytes = vec![0u8; expected.len() + 1];
    let len = loop {
        match rustix::io::read(&fd, &mut bytes) {
            Ok(n) => break n,
            Err(Errno::INTR) => continue,
            // A directory (EISDIR), an empty FIFO (EAGAIN): not our record.
            Err(Errno::ISDIR | Errno::AGAIN) => return Ok(Some(false)),
            Err(e) => return Err(io(path, e)),
        }
    };
    Ok(Some(&bytes[..len] == expected))
}

/// Reads the file at `path` (outside any slot directory, e.g. a system config) with the same
/// rules: regular file, no symlink as the last component, at most 64 KiB. `Ok(None)` if absent.
///
/// In a test run, a path outside the test's temporary root is refused before it is opened.
pub fn read_path(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    read_path_in(&crate::env::Environment::from_process(), path)
}

/// [`read_path`] with the test-isolation rule of an injected environment.
pub fn read_path_in(env: &crate::env::Environment, path: &Path) -> Result<Option<Vec<u8>>, Error> {
    env.check_isolated("file", path)?;
    read_at(None, path, path)
}

pub(crate) fn io(path: &Path, e: Errno) -> Error {
    Error::Io {
        path: path.to_owned(),
        source: e.into(),
    }
}
