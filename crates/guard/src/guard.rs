//! The held guard: open, check, lock, release.

use crate::acquire;
use crate::check::{Shown, check_descriptor, io, lock_nonblocking, still_named};
use crate::file::FileId;
use crate::filesystem::CheckedFilesystem;
use crate::name::{check_resource_name, guard_name};
use crate::publish::publish;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::path::{Path, PathBuf};

/// The mode a guard is published with. Any mode works for locking (a privacy tidy may chmod a
/// guard to 0660); 0444 lets other coordinator users open it read-only and keeps ordinary
/// writers from putting bytes in it.
pub const GUARD_MODE: u32 = 0o444;

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
        Self::acquire_with(
            dir.as_fd(),
            dir_path,
            resource,
            None,
            &mut || {},
            &mut || {},
        )
    }

    /// [`Guard::try_acquire`] in a directory whose filesystem `checked` accepted already
    /// ([`CheckedFilesystem::of`] on the same open `dir`): a guard on that device is not asked
    /// of the kernel again. `None` checks each guard's filesystem, as [`Guard::try_acquire`].
    pub fn try_acquire_on(
        dir: impl AsFd,
        dir_path: &Path,
        resource: &str,
        checked: Option<CheckedFilesystem>,
    ) -> Result<Option<Guard>, Error> {
        Self::acquire_with(
            dir.as_fd(),
            dir_path,
            resource,
            checked,
            &mut || {},
            &mut || {},
        )
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
        Self::acquire_with(
            dir.as_fd(),
            dir_path,
            resource,
            None,
            before_link,
            &mut || {},
        )
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
        Self::acquire_with(
            dir.as_fd(),
            dir_path,
            resource,
            None,
            before_link,
            before_lock,
        )
    }

    /// [`Guard::try_acquire`], calling the test seams' `before_link` and `before_lock`.
    fn acquire_with(
        dir: BorrowedFd<'_>,
        dir_path: &Path,
        resource: &str,
        checked: Option<CheckedFilesystem>,
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
            let (fd, id) = open_checked(dir, shown, checked, Some(&mut *before_link))?;
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
        let got = check_descriptor(&fd, shown, None)?;
        let (expected, want) = open_checked(dir, shown, None, None)?;
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
            let want = open_checked(dir, shown, None, None)
                .map_or(FileId { dev: 0, ino: 0 }, |(_, id)| id);
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

/// How a guard is opened: read-only (a guard is never written), never through a symlink, never
/// blocking (a FIFO planted at the name would block an open without `O_NONBLOCK` forever), not
/// inherited by programs this process executes, and never becoming a controlling terminal
/// should a terminal device sit at the name.
const OPEN_GUARD: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOCTTY);

/// Opens the guard named `name` in `dir` without following a symlink or blocking on a FIFO,
/// creating it first when `create` is given (the hook runs just before the link), and checks
/// every property a guard must have.
fn open_checked(
    dir: BorrowedFd<'_>,
    shown: Shown<'_>,
    checked: Option<CheckedFilesystem>,
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
    let id = check_descriptor(&fd, shown, checked)?;
    Ok((fd, id))
}

/// How often an acquisition opens the guard again when its name no longer names the inode
/// it locked.
const ATTEMPTS: usize = 3;

/// The path of the guard of `resource` in the directory `dir_path` (for messages and tools).
#[must_use]
pub fn guard_path(dir_path: &Path, resource: &str) -> PathBuf {
    dir_path.join(guard_name(resource))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::FILESYSTEM_CHECKS;

    fn checks() -> usize {
        FILESYSTEM_CHECKS.with(std::cell::Cell::get)
    }

    fn open_dir(path: &Path) -> OwnedFd {
        rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .expect("open the directory")
    }

    #[test]
    fn a_guard_on_the_checked_filesystem_is_not_asked_again_and_one_elsewhere_is() {
        let temp = tempfile::tempdir().expect("temp dir");
        let fd = open_dir(temp.path());
        let checked = CheckedFilesystem::of(&fd)
            .expect("fstatfs")
            .expect("the tests' temp directory is on a local filesystem");
        // Published first: the publication checks the directory itself, once.
        drop(Guard::try_acquire(&fd, temp.path(), "a.lock").expect("publish"));

        let before = checks();
        let held = Guard::try_acquire_on(&fd, temp.path(), "a.lock", Some(checked))
            .expect("acquire")
            .expect("free");
        assert_eq!(checks(), before, "the checked device is not asked again");
        assert!(checked.covers(held.file_id()));
        drop(held);

        // Without a checked filesystem, and with one of another device (a file mounted over
        // the guard's name would be on another), the guard's own filesystem is asked.
        let elsewhere = CheckedFilesystem {
            dev: checked.dev ^ 1,
        };
        for (given, what) in [(None, "none given"), (Some(elsewhere), "another device")] {
            let before = checks();
            let held = Guard::try_acquire_on(&fd, temp.path(), "a.lock", given)
                .expect("acquire")
                .expect("free");
            assert_eq!(
                checks(),
                before + 1,
                "{what}: the guard's filesystem is asked"
            );
            drop(held);
        }
        let before = checks();
        drop(Guard::try_acquire(&fd, temp.path(), "a.lock").expect("acquire"));
        assert_eq!(checks(), before + 1, "try_acquire asks every time");
    }

    #[test]
    fn a_filesystem_without_local_flock_is_not_checked_for_guards() {
        // procfs is refused for guards (as NFS or FUSE would be): nothing is known of it, so
        // every guard there would be asked, and refused, on its own.
        let proc = open_dir(Path::new("/proc"));
        assert_eq!(CheckedFilesystem::of(&proc).expect("fstatfs /proc"), None);
        let temp = tempfile::tempdir().expect("temp dir");
        let stat = rustix::fs::stat(temp.path()).expect("stat");
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let dev = stat.st_dev as u64;
        assert_eq!(
            CheckedFilesystem::of(open_dir(temp.path())).expect("fstatfs"),
            Some(CheckedFilesystem { dev }),
            "an accepted filesystem is known by its device"
        );
    }
}
