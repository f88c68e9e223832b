//! Bounded, safe reads: regular files only, no symlink followed, never blocking on a FIFO, at
//! most [`MAX_READ`] bytes.

use rustix::fd::BorrowedFd;
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest file a slot-file read accepts: 64 KiB.
pub const MAX_READ: u64 = 64 * 1024;

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
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let opened = match dir {
        Some(dir) => rustix::fs::openat(dir, name, flags, Mode::empty()),
        None => rustix::fs::open(name, flags, Mode::empty()),
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
            kind: describe(kind),
        });
    }
    let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
    if size > MAX_READ {
        return Err(Error::TooLarge {
            path: path.to_owned(),
            size,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    std::fs::File::from(fd)
        .take(MAX_READ + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > MAX_READ {
        return Err(Error::TooLarge {
            path: path.to_owned(),
            size: bytes.len() as u64,
        });
    }
    Ok(Some(bytes))
}

/// Reads the file at `path` (outside any slot directory, e.g. a system config) with the same
/// rules: regular file, no symlink as the last component, at most 64 KiB. `Ok(None)` if absent.
///
/// In a test run, a path outside the test's temporary root is refused before it is opened.
pub fn read_path(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    crate::env::check_process_isolated("file", path)?;
    read_at(None, path, path)
}

pub(crate) fn io(path: &Path, e: Errno) -> Error {
    Error::Io {
        path: path.to_owned(),
        source: e.into(),
    }
}

pub(crate) fn describe(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "file of unknown type",
    }
}
