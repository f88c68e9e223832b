//! The held guard: open, check, lock, release.

#![allow(
    clippy::disallowed_methods,
    reason = "this module publishes a guard (link, temp alias unlinked) and takes its lock"
)]

use crate::name::{check_resource_name, guard_name, guard_temp_name};
use crate::token::random_token;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use std::path::{Path, PathBuf};

/// The mode a guard is published with. Any mode works for locking (a privacy tidy may chmod a
/// guard to 0660); 0444 lets other coordinator users open it read-only and keeps ordinary
/// writers from putting bytes in it.
pub const GUARD_MODE: u32 = 0o444;

/// Device and inode of a file: what identifies a guard across descriptors and processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    /// `st_dev` of the file.
    pub dev: u64,
    /// `st_ino` of the file.
    pub ino: u64,
}

/// Errors of [`Guard::try_acquire`] and [`Guard::from_received`].
pub mod acquire {
    use super::FileId;
    use crate::filesystem::Refused;
    use crate::name::NameProblem;
    use std::path::PathBuf;

    /// Why a guard could not be acquired. Busy is not among them: it is `Ok(None)`.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// The resource name cannot carry a guard.
        #[error("cannot guard resource {resource:?} in {dir}: {problem}")]
        InvalidName {
            /// Directory the resource lives in.
            dir: PathBuf,
            /// The name given.
            resource: String,
            /// What is wrong with it.
            problem: NameProblem,
        },
        /// A symbolic link sits at the guard name.
        #[error(
            "guard {path} is a symbolic link and is never followed; remove the link during a \
             quiescent maintenance window (worklane recreates the guard)"
        )]
        Symlink {
            /// The guard's path.
            path: PathBuf,
        },
        /// Something other than a regular file sits at the guard name.
        #[error(
            "guard {path} is a {kind}, not an empty regular file; remove it during a quiescent \
             maintenance window (worklane recreates the guard)"
        )]
        NotRegular {
            /// The guard's path.
            path: PathBuf,
            /// What it is instead.
            kind: &'static str,
        },
        /// The guard file has contents.
        #[error(
            "guard {path} holds {size} bytes but a guard is always empty; move it aside during a \
             quiescent maintenance window (worklane recreates the guard)"
        )]
        NotEmpty {
            /// The guard's path.
            path: PathBuf,
            /// Its size in bytes.
            size: u64,
        },
        /// Opening the guard landed on a closed standard stream.
        #[error(
            "guard {path} opened as descriptor {fd}, a closed standard stream, and was closed \
             again; keep descriptors 0, 1 and 2 open (redirect unused ones to /dev/null)"
        )]
        StdStreamClosed {
            /// The guard's path.
            path: PathBuf,
            /// The descriptor number it landed on.
            fd: i32,
        },
        /// The guard's filesystem does not give local `flock` semantics.
        #[error("guard {path} is on a filesystem where worklane does not lock")]
        Filesystem {
            /// The guard's path.
            path: PathBuf,
            /// The filesystem verdict.
            #[source]
            refused: Refused,
        },
        /// A received descriptor refers to another file than the expected guard.
        #[error(
            "the received descriptor is not guard {path}: it is device {} inode {}, the guard is \
             device {} inode {}",
            got.dev, got.ino, want.dev, want.ino
        )]
        NotTheGuard {
            /// The guard's path.
            path: PathBuf,
            /// What the descriptor refers to.
            got: FileId,
            /// What the guard at the path is.
            want: FileId,
        },
        /// A received descriptor is the guard, but another open file description holds it.
        #[error(
            "the received descriptor for guard {path} does not hold its lock: another process \
             does, so the sender never held it"
        )]
        NotHeld {
            /// The guard's path.
            path: PathBuf,
        },
        /// A system call failed.
        #[error("cannot {op} guard {path}")]
        Io {
            /// What was being done.
            op: &'static str,
            /// The guard's (or its temp alias's) path.
            path: PathBuf,
            /// The system error.
            #[source]
            source: std::io::Error,
        },
    }
}

use acquire::Error;

/// A held guard: the exclusive `flock` on the open file description of `.F.flock`.
///
/// The lock is held for exactly as long as this value (or a duplicate of its descriptor made
/// with `dup`, `fork` or `SCM_RIGHTS`) exists. Dropping it closes the descriptor; it never calls
/// `LOCK_UN`, which would end the lock for every duplicate too, and it never unlinks the guard.
#[derive(Debug)]
#[must_use = "the guard is released as soon as it is dropped"]
pub struct Guard {
    fd: OwnedFd,
    id: FileId,
}

impl Guard {
    /// Tries to take the guard of resource file `resource` in the directory `dir` (whose path
    /// `dir_path` is used only in messages). Creates the guard inode first if it does not exist.
    ///
    /// Returns `Ok(None)` when another open file description holds it (busy), never blocks.
    pub fn try_acquire(
        dir: impl AsFd,
        dir_path: &Path,
        resource: &str,
    ) -> Result<Option<Guard>, Error> {
        Self::acquire_with(dir.as_fd(), dir_path, resource, &mut || {}, &mut || {})
    }

    /// Test seam (feature `test-seams`): [`Guard::try_acquire`] that calls `before_link` when it
    /// publishes a new guard, after the complete temp alias exists and before it is linked to
    /// the guard name (a rival publishing first).
    #[cfg(feature = "test-seams")]
    pub fn try_acquire_observed(
        dir: impl AsFd,
        dir_path: &Path,
        resource: &str,
        before_link: &mut dyn FnMut(),
    ) -> Result<Option<Guard>, Error> {
        Self::acquire_with(dir.as_fd(), dir_path, resource, before_link, &mut || {})
    }

    /// Test seam (feature `test-seams`): [`Guard::try_acquire_observed`] that also calls
    /// `before_lock` after the guard is opened and before it is locked (a guard unlinked in
    /// that moment).
    #[cfg(feature = "test-seams")]
    pub fn try_acquire_seams(
        dir: impl AsFd,
        dir_path: &Path,
        resource: &str,
        before_link: &mut dyn FnMut(),
        before_lock: &mut dyn FnMut(),
    ) -> Result<Option<Guard>, Error> {
        Self::acquire_with(dir.as_fd(), dir_path, resource, before_link, before_lock)
    }

    /// [`Guard::try_acquire`], calling the test seams' `before_link` and `before_lock`.
    fn acquire_with(
        dir: BorrowedFd<'_>,
        dir_path: &Path,
        resource: &str,
        before_link: &mut dyn FnMut(),
        before_lock: &mut dyn FnMut(),
    ) -> Result<Option<Guard>, Error> {
        check_resource_name(resource).map_err(|problem| Error::InvalidName {
            dir: dir_path.to_owned(),
            resource: resource.to_owned(),
            problem,
        })?;
        let name = guard_name(resource);
        let shown = Shown {
            dir: dir_path,
            name: &name,
        };
        // The lock belongs to the inode we opened. Guards are never unlinked while in use, but
        // a maintenance reclaim (`cargo xtask reclaim-guards`) may unlink an idle one; a
        // process that opened it just before then would lock an inode nobody else can reach
        // while others lock the new guard. So after locking, the name must still be our
        // inode; if not, the lock is dropped and the guard opened again by name.
        for _ in 0..ATTEMPTS {
            let (fd, id) = open_checked(dir, shown, Some(&mut *before_link))?;
            before_lock();
            if !lock_nonblocking(&fd, shown)? {
                return Ok(None);
            }
            if still_named(dir, shown, id)? {
                return Ok(Some(Guard { fd, id }));
            }
        }
        // The guard changed under us at every attempt: someone is churning it. Busy.
        Ok(None)
    }

    /// Rebuilds a held guard from a descriptor received from another process (for example over
    /// `SCM_RIGHTS`), after checking that it refers to the guard of `resource` in `dir` (device
    /// and inode both compared) and that its open file description holds the lock.
    ///
    /// Re-asserting the lock is `flock(LOCK_EX | LOCK_NB)` on the received descriptor: it
    /// succeeds when the sender's description holds the lock (or nobody does, in which case the
    /// receiver now holds it), and fails with [`acquire::Error::NotHeld`] when another
    /// description holds it. The descriptor is closed on every refusal.
    pub fn from_received(
        fd: OwnedFd,
        dir: impl AsFd,
        dir_path: &Path,
        resource: &str,
    ) -> Result<Guard, Error> {
        Self::received_with(fd, dir.as_fd(), dir_path, resource, &mut || {})
    }

    /// Test seam (feature `test-seams`): [`Guard::from_received`] that calls `before_lock` after
    /// the descriptor is compared with the guard at the name and before the lock is re-asserted
    /// (a guard reclaimed in that moment).
    #[cfg(feature = "test-seams")]
    pub fn from_received_seams(
        fd: OwnedFd,
        dir: impl AsFd,
        dir_path: &Path,
        resource: &str,
        before_lock: &mut dyn FnMut(),
    ) -> Result<Guard, Error> {
        Self::received_with(fd, dir.as_fd(), dir_path, resource, before_lock)
    }

    /// [`Guard::from_received`], calling the test seam's `before_lock`.
    fn received_with(
        fd: OwnedFd,
        dir: BorrowedFd<'_>,
        dir_path: &Path,
        resource: &str,
        before_lock: &mut dyn FnMut(),
    ) -> Result<Guard, Error> {
        check_resource_name(resource).map_err(|problem| Error::InvalidName {
            dir: dir_path.to_owned(),
            resource: resource.to_owned(),
            problem,
        })?;
        let name = guard_name(resource);
        let shown = Shown {
            dir: dir_path,
            name: &name,
        };
        let got = check_descriptor(&fd, shown)?;
        let (expected, want) = open_checked(dir, shown, None)?;
        drop(expected);
        if got != want {
            return Err(Error::NotTheGuard {
                path: shown.path(),
                got,
                want,
            });
        }
        before_lock();
        if !lock_nonblocking(&fd, shown)? {
            return Err(Error::NotHeld { path: shown.path() });
        }
        // As in `try_acquire`: the name must still refer to the inode now locked (a guard
        // reclaimed between the comparison and the lock is a ghost nobody else can reach).
        if !still_named(dir, shown, got)? {
            let want =
                open_checked(dir, shown, None).map_or(FileId { dev: 0, ino: 0 }, |(_, id)| id);
            return Err(Error::NotTheGuard {
                path: shown.path(),
                got,
                want,
            });
        }
        Ok(Guard { fd, id: got })
    }

    /// Device and inode of the guard file.
    #[must_use]
    pub fn file_id(&self) -> FileId {
        self.id
    }

    /// Releases the guard now by closing this descriptor. The same as dropping it; a duplicate
    /// of the descriptor held elsewhere keeps the lock until it closes too.
    pub fn release(self) {
        // Taking `self` by value is the whole release: it is dropped, and its descriptor
        // closed, as this call returns.
    }
}

impl AsFd for Guard {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Whether the guard of `resource` is held by anyone right now (a nonblocking probe that takes
/// and immediately releases the lock when it is free).
pub fn is_held(dir: impl AsFd, dir_path: &Path, resource: &str) -> Result<bool, Error> {
    Ok(Guard::try_acquire(dir, dir_path, resource)?.is_none())
}

/// A file in a directory, turned into a path only when a message needs one (the success path
/// allocates no path).
#[derive(Clone, Copy)]
struct Shown<'a> {
    dir: &'a Path,
    name: &'a str,
}

impl Shown<'_> {
    fn path(self) -> PathBuf {
        self.dir.join(self.name)
    }
}

fn io<'a>(op: &'static str, shown: Shown<'a>) -> impl FnOnce(Errno) -> Error + 'a {
    move |e| Error::Io {
        op,
        path: shown.path(),
        source: e.into(),
    }
}

/// How a guard is opened: read-only (a guard is never written), never through a symlink, never
/// blocking (a FIFO planted at the name would block an open without `O_NONBLOCK` forever), not
/// inherited by programs this process executes, and never becoming a controlling terminal
/// should a terminal device sit at the name.
const OPEN_GUARD: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOCTTY);

/// How a guard's temp alias is created: read-only (a guard is never written, and should this
/// descriptor land on a closed standard stream for a moment, a stray print to it fails instead
/// of filling the guard with bytes; `fchmod` needs no write access), only if the name is new
/// (`O_EXCL`, which also never follows a symlink; `O_NOFOLLOW` says so again), and not inherited
/// by programs this process executes.
const CREATE_TEMP_ALIAS: OFlags = OFlags::RDONLY
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Opens the guard named `name` in `dir` without following a symlink or blocking on a FIFO,
/// creating it first when `create` is given (the hook runs just before the link), and checks
/// every property a guard must have.
fn open_checked(
    dir: BorrowedFd<'_>,
    shown: Shown<'_>,
    mut create: Option<&mut dyn FnMut()>,
) -> Result<(OwnedFd, FileId), Error> {
    let fd = loop {
        match rustix::fs::openat(dir, shown.name, OPEN_GUARD, Mode::empty()) {
            Ok(fd) => break fd,
            // Published at most once: a guard missing again right after is an error.
            Err(Errno::NOENT) => match create.take() {
                Some(before_link) => publish(dir, shown, before_link)?,
                None => return Err(io("open", shown)(Errno::NOENT)),
            },
            Err(Errno::LOOP) => {
                return Err(Error::Symlink { path: shown.path() });
            }
            Err(Errno::NXIO) => {
                return Err(Error::NotRegular {
                    path: shown.path(),
                    kind: "socket or device without a reader",
                });
            }
            Err(e) => return Err(io("open", shown)(e)),
        }
    };
    let id = check_descriptor(&fd, shown)?;
    Ok((fd, id))
}

/// How often an acquisition opens the guard again when its name no longer names the inode
/// it locked.
const ATTEMPTS: usize = 3;

/// Whether the guard's name still refers to the inode `id` (not unlinked or replaced).
fn still_named(dir: BorrowedFd<'_>, shown: Shown<'_>, id: FileId) -> Result<bool, Error> {
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
/// filesystem with local `flock`. Closes it (by dropping) on refusal.
fn check_descriptor(fd: &OwnedFd, shown: Shown<'_>) -> Result<FileId, Error> {
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
    check_filesystem(fd.as_fd(), shown)?;
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    Ok(FileId {
        dev: stat.st_dev as u64,
        ino: stat.st_ino as u64,
    })
}

/// Refuses a guard (or a directory about to hold one) on a filesystem without local `flock`.
fn check_filesystem(fd: BorrowedFd<'_>, shown: Shown<'_>) -> Result<(), Error> {
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

/// Permission bits as the platform's `Mode` (`mode_t` is 16 bits on macOS, 32 on Linux).
#[allow(clippy::unnecessary_cast)]
fn mode(bits: u32) -> Mode {
    Mode::from_bits_truncate((bits & 0o7777) as rustix::fs::RawMode)
}

/// What a file type is called in this crate's errors ("regular file", "FIFO", ...): the
/// `kind` of [`acquire::Error::NotRegular`]. `worklane-slotfile` names file types in its
/// errors and reports with the same words.
#[must_use]
pub fn describe_file_type(kind: FileType) -> &'static str {
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

/// `flock(LOCK_EX | LOCK_NB)` on `fd`: `Ok(true)` when held, `Ok(false)` when busy.
///
/// See <https://man7.org/linux/man-pages/man2/flock.2.html>.
fn lock_nonblocking(fd: &OwnedFd, shown: Shown<'_>) -> Result<bool, Error> {
    loop {
        match rustix::fs::flock(fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(true),
            Err(Errno::WOULDBLOCK) => return Ok(false),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(io("flock", shown)(e)),
        }
    }
}

/// Publishes the guard `name`: an empty file created exclusively under a random temp alias,
/// given mode 0444 through its own descriptor (so no umask can change it), then hard-linked to
/// `name` (already there: someone else published first, theirs is used), then the temp alias
/// is unlinked. A crash before the link leaves no guard; after it, a complete guard.
///
/// The directory's filesystem is checked first, so nothing is created where no guard could be
/// used (the guard's own descriptor is checked again after opening).
fn publish(
    dir: BorrowedFd<'_>,
    shown: Shown<'_>,
    before_link: &mut dyn FnMut(),
) -> Result<(), Error> {
    check_filesystem(dir, shown)?;
    // A temp alias a minute old is removed by ordinary operation (the slot directory's temp
    // sweep); a publisher stopped that long between creating and linking its alias finds it
    // gone (ENOENT) and starts again with a new one.
    for _ in 0..3 {
        match publish_once(dir, shown, before_link) {
            Err(Error::Io { source, .. })
                if source.raw_os_error() == Some(Errno::NOENT.raw_os_error()) =>
            {
                continue;
            }
            other => return other,
        }
    }
    publish_once(dir, shown, before_link)
}

fn publish_once(
    dir: BorrowedFd<'_>,
    shown: Shown<'_>,
    before_link: &mut dyn FnMut(),
) -> Result<(), Error> {
    let name = shown.name;
    let resource = &name[1..name.len() - crate::name::GUARD_SUFFIX.len()];
    let temp = loop {
        let temp = guard_temp_name(resource, &random_token());
        match rustix::fs::openat(dir, temp.as_str(), CREATE_TEMP_ALIAS, mode(0o400)) {
            Ok(fd) => {
                let chmod = rustix::fs::fchmod(&fd, mode(GUARD_MODE));
                drop(fd);
                if let Err(e) = chmod {
                    let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
                    let temp_shown = Shown {
                        dir: shown.dir,
                        name: &temp,
                    };
                    return Err(io("set the mode of the temp alias of", temp_shown)(e));
                }
                break temp;
            }
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(io("create a temp alias for", shown)(e)),
        }
    };
    before_link();
    let linked = rustix::fs::linkat(dir, temp.as_str(), dir, name, AtFlags::empty());
    // The temp alias goes in every path; if removing it fails, it is a harmless extra link.
    let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
    match linked {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(io("publish (link) the temp alias of", shown)(e)),
    }
}

/// The path of the guard of `resource` in the directory `dir_path` (for messages and tools).
#[must_use]
pub fn guard_path(dir_path: &Path, resource: &str) -> PathBuf {
    dir_path.join(guard_name(resource))
}

#[cfg(test)]
mod tests {
    use super::describe_file_type;
    use rustix::fs::FileType;

    #[test]
    fn every_file_type_has_its_own_name() {
        let named = [
            (FileType::RegularFile, "regular file"),
            (FileType::Directory, "directory"),
            (FileType::Symlink, "symbolic link"),
            (FileType::Fifo, "FIFO"),
            (FileType::Socket, "socket"),
            (FileType::CharacterDevice, "character device"),
            (FileType::BlockDevice, "block device"),
            (FileType::Unknown, "file of unknown type"),
        ];
        for (kind, name) in named {
            assert_eq!(
                describe_file_type(kind),
                name,
                "what a {kind:?} is called in messages"
            );
        }
    }
}
