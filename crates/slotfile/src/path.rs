//! `SlotPath`: the only handle to a file in a slot directory, and every operation on it.

#![allow(
    clippy::disallowed_methods,
    reason = "this module writes slot files: temp files locked, renamed, linked and unlinked"
)]

use crate::dir::SlotDir;
use crate::name;
use crate::read;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, OFlags};
use rustix::io::Errno;
use std::io::Write;
use std::path::PathBuf;
use worklane_guard::mode::from_bits as mode;
use worklane_guard::{Guard, random_token};

mod log;
mod removal;

/// Mode for lock records: everyone may read who holds what; only replacement (a directory
/// write) changes them.
pub const RECORD_MODE: u32 = 0o644;
/// Mode for shared state that coordinators of the group replace (budgets, STOP, config).
pub const SHARED_MODE: u32 = 0o660;

/// How a temp file is created: write-only, new (never an existing file, never through a
/// symbolic link), never inherited by a child.
const TEMP_FLAGS: OFlags = OFlags::WRONLY
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// How a log is created: for appending only, new (never an existing file, never through a
/// symbolic link), never inherited by a child.
const LOG_FLAGS: OFlags = OFlags::WRONLY
    .union(OFlags::APPEND)
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// A file in a slot directory: the directory's descriptor and one validated name.
///
/// Only this crate makes, reads, lists, removes or writes one. It is deliberately not a path:
/// it implements neither `AsRef<Path>` nor `Display`, so it cannot be handed to `std::fs` or
/// formatted into one by mistake.
///
/// ```compile_fail
/// fn leak(p: worklane_slotfile::SlotPath) {
///     let _ = std::fs::read(p);
/// }
/// ```
///
/// ```compile_fail
/// fn leak(p: &worklane_slotfile::SlotPath) -> &std::path::Path {
///     p.as_ref()
/// }
/// ```
///
/// ```compile_fail
/// fn leak(p: &worklane_slotfile::SlotPath) -> String {
///     format!("{p}")
/// }
/// ```
///
/// ```compile_fail
/// fn leak(p: worklane_slotfile::SlotPath) -> std::path::PathBuf {
///     p.into()
/// }
/// ```
///
/// What does compile is the slot-file API itself:
///
/// ```
/// fn touch(p: &worklane_slotfile::SlotPath) -> Result<(), Box<dyn std::error::Error>> {
///     p.replace(b"{}", worklane_slotfile::SHARED_MODE)?;
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct SlotPath {
    dir: SlotDir,
    name: Box<str>,
}

impl std::fmt::Debug for SlotPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotPath")
            .field("dir", &self.dir.path())
            .field("name", &self.name)
            .finish()
    }
}

impl PartialEq for SlotPath {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.dir.path() == other.dir.path()
    }
}

impl Eq for SlotPath {}

/// Outcome of [`SlotPath::publish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Publish {
    /// The file now exists with our bytes.
    Published,
    /// Another file already had the name; nothing was changed.
    AlreadyExists,
}

/// Outcome of [`SlotPath::remove_if_unchanged`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Removal {
    /// The file held exactly the expected bytes and is gone.
    Removed,
    /// The file holds other bytes (someone else's); it was kept.
    Changed,
    /// There was no file.
    Absent,
}

/// A step of a write, reported to the crash-test seam [`SlotPath::replace_observed`] (feature
/// `test-seams`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    not(feature = "test-seams"),
    allow(unreachable_pub, reason = "exported with the test-seams feature")
)]
#[non_exhaustive]
pub enum Step {
    /// The temp file is complete (mode set, bytes written); it is not yet renamed or linked.
    TempWritten,
}

/// Errors of writes ([`SlotPath::replace`], [`SlotPath::publish`]).
pub mod write {
    use std::path::PathBuf;

    /// Why a slot file could not be written. Nothing half-written is ever visible.
    #[derive(Debug, thiserror::Error)]
    #[error("cannot {op} {path}")]
    pub struct Error {
        /// What was being done.
        pub op: &'static str,
        /// The file (or its temp name).
        pub path: PathBuf,
        /// The system error.
        #[source]
        pub source: std::io::Error,
    }
}

/// Errors of removals.
pub mod remove {
    use std::path::PathBuf;

    /// Why a slot file could not be removed.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// Its current contents could not be read for comparison.
        #[error("cannot check {path} before removing it")]
        Read {
            /// The file.
            path: PathBuf,
            /// Why.
            #[source]
            source: crate::read::Error,
        },
        /// The unlink failed.
        #[error("cannot remove {path}")]
        Io {
            /// The file.
            path: PathBuf,
            /// The system error.
            #[source]
            source: std::io::Error,
        },
    }
}

/// Gives the new file `fd` the directory's group `gid` (`fchown` through the descriptor) when
/// it got another one (a directory without the setgid bit gives the creator's group). Best
/// effort: a writer that is not a member of that group may not (`EPERM`), and its file keeps
/// the writer's group.
fn give_group(fd: &OwnedFd, gid: u32) {
    let differs = rustix::fs::fstat(fd).map_or(true, |stat| stat.st_gid != gid);
    if differs {
        let _ = rustix::fs::fchown(fd, None, Some(rustix::fs::Gid::from_raw(gid)));
    }
}

impl SlotPath {
    /// The file `name` of `dir`, a name already checked (a listing keeps only valid names).
    pub(crate) fn new(dir: SlotDir, name: &str) -> SlotPath {
        SlotPath {
            dir,
            name: name.into(),
        }
    }

    /// The file `name` of `dir`, refused unless `name` is one ordinary path component that may
    /// be a resource (see [`SlotDir::file`]).
    pub(crate) fn named(dir: SlotDir, name: &str) -> Result<SlotPath, name::Error> {
        match worklane_guard::check_resource_name(name) {
            Ok(()) => Ok(SlotPath::new(dir, name)),
            Err(problem) => Err(name::Error {
                dir: dir.path().to_owned(),
                name: name.to_owned(),
                problem,
            }),
        }
    }

    /// The file's name within its directory.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The directory it is in.
    #[must_use]
    pub fn dir(&self) -> &SlotDir {
        &self.dir
    }

    /// The file's path, for messages only.
    pub(crate) fn shown(&self) -> PathBuf {
        self.dir.path().join(&*self.name)
    }

    /// Reads the whole file: `Ok(None)` if there is none. Refuses symlinks, FIFOs and other
    /// non-regular files, and files over 64 KiB.
    pub fn read(&self) -> Result<Option<Vec<u8>>, read::Error> {
        read::read_at(
            Some(self.dir.as_fd()),
            std::path::Path::new(&*self.name),
            &self.shown(),
        )
    }

    /// [`SlotPath::read`] that also says who may have written the file (owner, mode, links),
    /// taken from the very file read (one open, `fstat` and `read`), so the writer and the
    /// bytes belong together: for a reader that acts on what a file says only if its writer
    /// may ask for it.
    pub fn read_with_owner(&self) -> Result<Option<(Vec<u8>, read::Written)>, read::Error> {
        read::read_owned_at(
            Some(self.dir.as_fd()),
            std::path::Path::new(&*self.name),
            &self.shown(),
        )
    }

    /// When the file's contents last changed (its mtime, milliseconds since the Unix epoch):
    /// `Ok(None)` if there is none. Like [`SlotPath::read`], refuses a symlink (never followed)
    /// or a non-regular file. A file replaced whole gets a new mtime on every replace.
    pub fn modified_ms(&self) -> Result<Option<u64>, read::Error> {
        let stat =
            match rustix::fs::statat(self.dir.as_fd(), &*self.name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => stat,
                Err(Errno::NOENT) => return Ok(None),
                Err(e) => {
                    return Err(read::Error::Io {
                        path: self.shown(),
                        source: e.into(),
                    });
                }
            };
        match rustix::fs::FileType::from_raw_mode(stat.st_mode) {
            rustix::fs::FileType::RegularFile => {}
            rustix::fs::FileType::Symlink => {
                return Err(read::Error::Symlink { path: self.shown() });
            }
            other => {
                return Err(read::Error::NotRegular {
                    path: self.shown(),
                    kind: worklane_guard::describe_file_type(other),
                });
            }
        }
        // The field types differ by platform (u64 nanoseconds on Linux, i64 on macOS).
        #[allow(
            clippy::unnecessary_cast,
            clippy::useless_conversion,
            clippy::unnecessary_fallible_conversions
        )]
        let (secs, nanos) = (
            i64::try_from(stat.st_mtime).unwrap_or(0),
            i64::try_from(stat.st_mtime_nsec).unwrap_or(0),
        );
        let ms = secs.saturating_mul(1000).saturating_add(nanos / 1_000_000);
        Ok(Some(u64::try_from(ms).unwrap_or(0)))
    }

    /// Replaces the file with `bytes`, mode exactly `mode`: a temp file with a random name is
    /// created exclusively, given its mode through its descriptor, written, then renamed over
    /// the file. Readers see the old bytes or the new, never a mix.
    pub fn replace(&self, bytes: &[u8], mode: u32) -> Result<(), write::Error> {
        self.replace_with(bytes, mode, &mut |_| {})
    }

    /// Crash-test seam (feature `test-seams`): [`SlotPath::replace`] that calls `at` at each
    /// [`Step`].
    #[cfg(feature = "test-seams")]
    pub fn replace_observed(
        &self,
        bytes: &[u8],
        mode: u32,
        at: &mut dyn FnMut(Step),
    ) -> Result<(), write::Error> {
        self.replace_with(bytes, mode, at)
    }

    /// Replaces a file whose contents matter only while the machine stays up (lock records:
    /// a record of an earlier boot is stale whatever it holds), as [`SlotPath::replace`] does
    /// for readers (old bytes or new, never a mix), but without the write-back that a rename
    /// over a file with data starts on ext4 (`auto_da_alloc`), which the next removal of the
    /// record then waits for: on Linux the temp file is exchanged with the file
    /// (`renameat2(RENAME_EXCHANGE)`) and the temp name, now holding the old bytes, is
    /// removed. Where the exchange is not supported, or there is no file to exchange with,
    /// this is [`SlotPath::replace`]. After a power loss the new bytes may read as an empty
    /// file, which every reader takes for a stale record (PROTOCOL.md section 4). A directory
    /// under the name fails the write, as `replace`'s rename over it does, and stays.
    pub fn rewrite(&self, bytes: &[u8], mode: u32) -> Result<(), write::Error> {
        self.replace_with_exchange(bytes, mode, &mut |_| {}, true)
    }

    /// Crash-test seam (feature `test-seams`): [`SlotPath::rewrite`] that calls `at` at each
    /// [`Step`].
    #[cfg(feature = "test-seams")]
    pub fn rewrite_observed(
        &self,
        bytes: &[u8],
        mode: u32,
        at: &mut dyn FnMut(Step),
    ) -> Result<(), write::Error> {
        self.replace_with_exchange(bytes, mode, at, true)
    }

    fn replace_with(
        &self,
        bytes: &[u8],
        mode: u32,
        at: &mut dyn FnMut(Step),
    ) -> Result<(), write::Error> {
        self.replace_with_exchange(bytes, mode, at, false)
    }

    fn replace_with_exchange(
        &self,
        bytes: &[u8],
        mode: u32,
        at: &mut dyn FnMut(Step),
        exchange: bool,
    ) -> Result<(), write::Error> {
        // `_held` keeps the temp file's lock until the rename is done (see `write_temp`).
        let (temp, _held) = self.write_temp(bytes, mode)?;
        at(Step::TempWritten);
        let dir = self.dir.as_fd();
        // No exchange off Linux: the rename below.
        #[cfg(target_os = "linux")]
        if exchange && self.exchange(&temp)? {
            return Ok(());
        }
        #[cfg(not(target_os = "linux"))]
        let _ = exchange;
        let renamed = rustix::fs::renameat(dir, temp.as_str(), dir, &*self.name);
        if let Err(e) = renamed {
            let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
            return Err(self.error("rename a temp file over", e));
        }
        Ok(())
    }

    /// Exchanges the written temp file `temp` with the file and removes the temp name (which
    /// then holds the old bytes). `Ok(false)` when the exchange cannot be made here (no file
    /// to exchange with, a filesystem or system without it): the caller renames instead.
    #[cfg(target_os = "linux")]
    fn exchange(&self, temp: &str) -> Result<bool, write::Error> {
        let dir = self.dir.as_fd();
        match rustix::fs::renameat_with(
            dir,
            temp,
            dir,
            &*self.name,
            rustix::fs::RenameFlags::EXCHANGE,
        ) {
            Ok(()) => match rustix::fs::unlinkat(dir, temp, AtFlags::empty()) {
                // A directory had the name (the exchange, unlike a rename over it, takes one):
                // it goes back to its name and the write fails as `replace`'s rename does,
                // rather than leave it under a temp name, which no sweep removes.
                Err(Errno::ISDIR) => {
                    let _ = rustix::fs::renameat_with(
                        dir,
                        temp,
                        dir,
                        &*self.name,
                        rustix::fs::RenameFlags::EXCHANGE,
                    );
                    let _ = rustix::fs::unlinkat(dir, temp, AtFlags::empty());
                    Err(self.error("rename a temp file over", Errno::ISDIR))
                }
                // The old bytes under the temp name: a leftover if this fails otherwise (or a
                // crash comes first), swept as any unheld temp file is (section 4).
                _ => Ok(true),
            },
            Err(Errno::NOENT | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => Ok(false),
            Err(e) => {
                let _ = rustix::fs::unlinkat(dir, temp, AtFlags::empty());
                Err(self.error("exchange a temp file with", e))
            }
        }
    }

    /// Publishes the file with `bytes` and mode exactly `mode` if no file has its name: the same
    /// temp file as [`SlotPath::replace`], then an exclusive hard link to the name. A lock
    /// published this way is never visible half-written. The temp name is removed in every case.
    pub fn publish(&self, bytes: &[u8], mode: u32) -> Result<Publish, write::Error> {
        self.publish_with(bytes, mode, &mut |_| {})
    }

    /// Crash-test seam (feature `test-seams`): [`SlotPath::publish`] that calls `at` at each
    /// [`Step`].
    #[cfg(feature = "test-seams")]
    pub fn publish_observed(
        &self,
        bytes: &[u8],
        mode: u32,
        at: &mut dyn FnMut(Step),
    ) -> Result<Publish, write::Error> {
        self.publish_with(bytes, mode, at)
    }

    fn publish_with(
        &self,
        bytes: &[u8],
        mode: u32,
        at: &mut dyn FnMut(Step),
    ) -> Result<Publish, write::Error> {
        let (temp, _held) = self.write_temp(bytes, mode)?;
        at(Step::TempWritten);
        let dir = self.dir.as_fd();
        let linked = rustix::fs::linkat(dir, temp.as_str(), dir, &*self.name, AtFlags::empty());
        let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
        match linked {
            Ok(()) => Ok(Publish::Published),
            Err(Errno::EXIST) => Ok(Publish::AlreadyExists),
            Err(e) => Err(self.error("publish (link) a temp file as", e)),
        }
    }

    /// Creates `.{name}.tmp-{random}` exclusively, locks it (`flock(LOCK_EX)`: a temp file
    /// whose lock is free belongs to a dead writer, see [`SlotDir::sweep_temps`]), gives it the
    /// directory's group and sets its mode through the descriptor, writes `bytes`, and returns
    /// its name and the descriptor, which the caller keeps open (holding the lock) until the
    /// temp is renamed or linked. On failure the temp file is removed.
    fn write_temp(&self, bytes: &[u8], mode_bits: u32) -> Result<(String, OwnedFd), write::Error> {
        let dir = self.dir.as_fd();
        let (temp, fd): (String, OwnedFd) = loop {
            let temp = format!(".{}.tmp-{}", self.name, random_token());
            match rustix::fs::openat(dir, temp.as_str(), TEMP_FLAGS, mode(0o600)) {
                Ok(fd) => break (temp, fd),
                // A leftover from a crash, or a collision: draw another name.
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(self.error("create a temp file for", e)),
            }
        };
        // A fresh inode nobody else has opened: the lock is free (EINTR aside).
        let locked = loop {
            match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Err(Errno::INTR) => continue,
                other => break other,
            }
        };
        give_group(&fd, self.dir.gid());
        let mut file = std::fs::File::from(fd);
        let written = locked
            .map_err(|e| self.error("lock a temp file for", e))
            .and_then(|()| {
                rustix::fs::fchmod(&file, mode(mode_bits))
                    .map_err(|e| self.error("set the mode of a temp file for", e))
            })
            .and_then(|()| {
                file.write_all(bytes).map_err(|source| write::Error {
                    op: "write a temp file for",
                    path: self.shown(),
                    source,
                })
            });
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
            return Err(e);
        }
        Ok((temp, OwnedFd::from(file)))
    }

    fn error(&self, op: &'static str, e: Errno) -> write::Error {
        write::Error {
            op,
            path: self.shown(),
            source: e.into(),
        }
    }

    /// Device and inode of this file's guard (`.{name}.flock`), without opening or locking it:
    /// `None` when there is no regular file at the guard's name. For tools that look for the
    /// processes holding a copy of the guard's descriptor.
    #[must_use]
    pub fn guard_id(&self) -> Option<worklane_guard::FileId> {
        let name = worklane_guard::guard_name(&self.name);
        let stat =
            rustix::fs::statat(self.dir.as_fd(), name.as_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let id = worklane_guard::FileId {
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
        };
        (rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile)
            .then_some(id)
    }

    /// Tries to take this file's guard (`.{name}.flock`): `Ok(None)` when busy.
    pub fn try_guard(&self) -> Result<Option<Guard>, worklane_guard::acquire::Error> {
        Guard::try_acquire_on(
            &self.dir,
            self.dir.path(),
            &self.name,
            self.dir.checked_filesystem(),
        )
    }
}
