//! Files read or appended as a stream rather than replaced whole: the event journal
//! (`worklane-journal`), whose one line per event is one `write(2)` on an `O_APPEND`
//! descriptor, and whose readers follow it past the 64 KiB that [`SlotPath::read`] allows.

use crate::path::SlotPath;
use crate::read::{self, READ_FLAGS};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use worklane_guard::FileId;

/// How a stream is opened to be appended to: write-only at its end, never creating it (it is
/// published whole first, so it appears with its mode and group), never through a symbolic
/// link, never blocking on a FIFO, never inherited, never a controlling terminal.
const APPEND_FLAGS: OFlags = OFlags::WRONLY
    .union(OFlags::APPEND)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// What a regular file in the slot directory is, by `statat` without following a link: which
/// inode it is and how large.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Its device and inode: a file renamed over, or removed and made again, has another.
    pub id: FileId,
    /// Its size in bytes.
    pub size: u64,
}

/// The device and inode of an `fstat` or `statat` result.
fn id_of(stat: &rustix::fs::Stat) -> FileId {
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    FileId {
        dev: stat.st_dev as u64,
        ino: stat.st_ino as u64,
    }
}

/// A regular file's [`Meta`], or why it is none.
fn meta_of(stat: &rustix::fs::Stat, path: &SlotPath) -> Result<Meta, read::Error> {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(Meta {
            id: id_of(stat),
            size: u64::try_from(stat.st_size).unwrap_or(0),
        }),
        FileType::Symlink => Err(read::Error::Symlink { path: path.shown() }),
        other => Err(read::Error::NotRegular {
            path: path.shown(),
            kind: worklane_guard::describe_file_type(other),
        }),
    }
}

impl SlotPath {
    /// The file's inode and size (`statat`, never following a link): `Ok(None)` when there is
    /// none; a symbolic link or anything but a regular file is refused as
    /// [`SlotPath::read`] refuses it.
    pub fn meta(&self) -> Result<Option<Meta>, read::Error> {
        match rustix::fs::statat(self.dir().as_fd(), self.name(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => meta_of(&stat, self).map(Some),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(read::io(&self.shown(), e)),
        }
    }

    /// Opens the existing file for appending (`O_APPEND`: each `write(2)` lands at its end,
    /// whoever else appends), with its [`Meta`] from the same descriptor. Never creates it
    /// (publish it first, with [`SlotPath::publish`], so that it appears with its mode and
    /// group), never follows a link, never blocks on a FIFO; anything but a regular file, and
    /// a file with another name (a hard link a member of the group made to a file elsewhere,
    /// where `fs.protected_hardlinks` allows it) that the directory's group may not write, is
    /// refused (`InvalidData`), never written.
    /// `Ok(None)` when there is none.
    pub fn open_append(&self) -> Result<Option<(OwnedFd, Meta)>, crate::write::Error> {
        let error = |op, source: std::io::Error| crate::write::Error {
            op,
            path: self.shown(),
            source,
        };
        let fd = match rustix::fs::openat(
            self.dir().as_fd(),
            self.name(),
            APPEND_FLAGS,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(error("open for appending", e.into())),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| error("examine", e.into()))?;
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let links = stat.st_nlink as u64;
        // A file with a second name may be a file elsewhere that a member linked here (where
        // `fs.protected_hardlinks` allows it): appended to only if the directory's group may
        // write it anyway (as a file being published is for a moment, linked to its name
        // before its temp name goes), so that the append lends nobody anything.
        let group_writes = stat.st_gid == self.dir().gid() && stat.st_mode & 0o020 != 0;
        match meta_of(&stat, self) {
            Ok(_) if links != 1 && !group_writes => Err(error(
                "append to",
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{} has {links} names (hard links), so appending to it may write to a \
                         file elsewhere; remove it",
                        self.shown().display()
                    ),
                ),
            )),
            Ok(meta) => Ok(Some((fd, meta))),
            Err(refused) => Err(error(
                "append to",
                std::io::Error::new(std::io::ErrorKind::InvalidData, refused.to_string()),
            )),
        }
    }

    /// Opens the file for reading as a stream, however large, with its [`Meta`] from the same
    /// descriptor: regular files only, no link followed, never blocking on a FIFO, close-on-exec.
    /// `Ok(None)` when there is none.
    pub fn open_stream(&self) -> Result<Option<(OwnedFd, Meta)>, read::Error> {
        let fd =
            match rustix::fs::openat(self.dir().as_fd(), self.name(), READ_FLAGS, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::LOOP) => return Err(read::Error::Symlink { path: self.shown() }),
                Err(Errno::NXIO) => {
                    return Err(read::Error::NotRegular {
                        path: self.shown(),
                        kind: "socket or device",
                    });
                }
                Err(e) => return Err(read::io(&self.shown(), e)),
            };
        let stat = rustix::fs::fstat(&fd).map_err(|e| read::io(&self.shown(), e))?;
        let meta = meta_of(&stat, self)?;
        Ok(Some((fd, meta)))
    }
}

/// The [`Meta`] of an open regular file (`fstat`): for a reader that holds a stream's
/// descriptor and asks whether the name still refers to it.
pub fn meta_of_fd(fd: impl AsFd) -> std::io::Result<Meta> {
    let stat = rustix::fs::fstat(fd)?;
    Ok(Meta {
        id: id_of(&stat),
        size: u64::try_from(stat.st_size).unwrap_or(0),
    })
}
