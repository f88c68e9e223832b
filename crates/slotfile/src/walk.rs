//! Opening the slot directory so that only root and the caller decide what it is.
//!
//! The path is walked from `/` one component at a time, each opened relative to its parent's
//! descriptor with `O_NOFOLLOW | O_DIRECTORY`, and each checked on that descriptor (`fstat`):
//!
//! - every directory on the way (a *parent*) is owned by root or the caller (effective uid), is
//!   not writable by others unless it is sticky (as `/tmp` and `/var/tmp` are), and is writable by
//!   its group only if it is sticky or its group is the slot directory's own group (whose members
//!   can already replace every file in the slot directory, so they gain nothing by being able
//!   to rename it);
//! - a symbolic link on the way is followed only if it is owned by root or the caller; its
//!   target is read (`readlinkat`) and walked the same way, at most [`MAX_LINKS`] links;
//! - the slot directory itself (the last component) is never a symbolic link in any spelling:
//!   `link`, `link/` and `link/.` all end in the component `link`. It is owned by root or the
//!   caller and not writable by others, sticky or not;
//! - a `..` in the path is refused (the kernel would resolve it after following links, which a
//!   reader of the path does not expect); a `..` inside a trusted link's target steps back to
//!   the directory the walk came from, as the kernel does.
//!
//! A missing slot directory is created relative to its verified parent's descriptor
//! (`mkdirat` 0700, then opened without following a link, checked to be ours, and `fchmod` to
//! [`DIR_MODE`](crate::DIR_MODE) setgid, whatever the umask).

#![allow(
    clippy::disallowed_methods,
    reason = "this module removes a slot directory it created and then refused"
)]

use crate::open::{Error, Problem};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use worklane_guard::mode::of as permission_bits;

/// Mode of a slot directory that worklane creates: owner and group (coordinator users) write,
/// and setgid, so that every file created in it gets the directory's group.
pub const DIR_MODE: u32 = 0o2770;

/// The most symbolic links followed on the way to a slot directory (as the kernel's
/// `MAXSYMLINKS`).
pub const MAX_LINKS: usize = 40;

/// Flags for a parent: Linux opens it with `O_PATH`, which needs no read permission (search
/// permission is all a path lookup needs). Elsewhere it is opened for reading.
#[cfg(any(target_os = "linux", target_os = "android"))]
const PARENT: OFlags = OFlags::PATH;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const PARENT: OFlags = OFlags::RDONLY;

/// How every directory of the walk is opened: as a directory, never through a symbolic link
/// at its name, never inherited by a child.
const DIR: OFlags = OFlags::DIRECTORY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);
/// A directory on the way ([`PARENT`] access).
const ON_THE_WAY: OFlags = PARENT.union(DIR);
/// The slot directory itself: opened for reading (listing).
const FINAL: OFlags = OFlags::RDONLY.union(DIR);

const S_ISVTX: u32 = 0o1000;

/// Runs between an open refused because a link sat at the name and the `lstat` that says what
/// sits there now: the moment another process may have replaced the link by a directory. A
/// no-op but in this module's unit tests, which replace it exactly then.
#[cfg(not(test))]
fn after_refused_open(_at: &Path) {}
#[cfg(test)]
use tests::after_refused_open;

/// The opened slot directory and what its `fstat` said.
pub(crate) struct Opened {
    pub(crate) fd: OwnedFd,
    pub(crate) gid: u32,
}

/// One step of the walk.
enum Step {
    /// Enter this name in the current directory.
    Name(OsString),
    /// `..` from a link's target: back to the directory the walk came from.
    Up,
}

/// A directory on the way that its group may write: allowed only for the slot directory's
/// group, known once the slot directory is open.
struct Loose {
    at: PathBuf,
    uid: u32,
    gid: u32,
    mode: u32,
}

struct Walk<'a> {
    /// The path as given, for messages.
    path: &'a Path,
    caller: u32,
    /// The directories walked through, from `/`: descriptor and real path.
    stack: Vec<(OwnedFd, PathBuf)>,
    loose: Vec<Loose>,
    links: usize,
}

/// Opens the slot directory at `path`, creating it when missing and `create` is set.
pub(crate) fn open(path: &Path, create: bool) -> Result<Opened, Error> {
    let absolute = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map_err(|source| Error::Io {
                op: "find the current directory for",
                path: path.to_owned(),
                source,
            })?
            .join(path)
    };
    let mut steps = VecDeque::new();
    for component in absolute.components() {
        match component {
            Component::Normal(name) => steps.push_back(Step::Name(name.to_owned())),
            Component::ParentDir => {
                return Err(Error::ParentComponent {
                    path: path.to_owned(),
                });
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let mut walk = Walk {
        path,
        caller: rustix::process::geteuid().as_raw(),
        stack: Vec::new(),
        loose: Vec::new(),
        links: 0,
    };
    let root_path = PathBuf::from("/");
    if steps.is_empty() {
        // The root itself: opened for reading, as any slot directory is.
        let fd = rustix::fs::open("/", FINAL, Mode::empty()).map_err(|e| walk.io("open", e))?;
        return walk.finish(fd, std::ffi::OsStr::new("/"), &root_path, false);
    }
    let root = rustix::fs::open("/", ON_THE_WAY, Mode::empty())
        .map_err(|e| walk.parent_io(&root_path, e))?;
    walk.enter(root, root_path)?;
    walk.run(steps, create)
}

impl Walk<'_> {
    fn io(&self, op: &'static str, e: Errno) -> Error {
        Error::Io {
            op,
            path: self.path.to_owned(),
            source: e.into(),
        }
    }

    fn parent_io(&self, parent: &Path, e: Errno) -> Error {
        Error::Parent {
            path: self.path.to_owned(),
            parent: parent.to_owned(),
            source: e.into(),
        }
    }

    fn refuse(&self, at: &Path, stat: &Stat, problem: Problem) -> Error {
        Error::Unsafe {
            path: self.path.to_owned(),
            at: at.to_owned(),
            owner: stat.st_uid,
            group: stat.st_gid,
            mode: permission_bits(stat),
            caller: self.caller,
            problem,
        }
    }

    fn trusted(&self, uid: u32) -> bool {
        uid == 0 || uid == self.caller
    }

    /// Checks a directory on the way and makes it the current one.
    fn enter(&mut self, fd: OwnedFd, at: PathBuf) -> Result<(), Error> {
        let stat = rustix::fs::fstat(&fd).map_err(|e| self.parent_io(&at, e))?;
        let mode = permission_bits(&stat);
        if !self.trusted(stat.st_uid) {
            return Err(self.refuse(&at, &stat, Problem::ParentOwner));
        }
        let sticky = mode & S_ISVTX != 0;
        if mode & 0o002 != 0 && !sticky {
            return Err(self.refuse(&at, &stat, Problem::ParentWritable));
        }
        if mode & 0o020 != 0 && !sticky {
            self.loose.push(Loose {
                at: at.clone(),
                uid: stat.st_uid,
                gid: stat.st_gid,
                mode,
            });
        }
        self.stack.push((fd, at));
        Ok(())
    }

    fn current(&self) -> (BorrowedFd<'_>, &Path) {
        let (fd, at) = self.stack.last().expect("the walk starts at /");
        (fd.as_fd(), at)
    }

    fn run(mut self, mut steps: VecDeque<Step>, create: bool) -> Result<Opened, Error> {
        let mut created = false;
        while let Some(step) = steps.pop_front() {
            let name = match step {
                Step::Up => {
                    // `/..` is `/`, as for the kernel.
                    if self.stack.len() > 1 {
                        self.stack.pop();
                    }
                    continue;
                }
                Step::Name(name) => name,
            };
            let last = steps.is_empty();
            let (dir, here) = self.current();
            let at = here.join(&name);
            let flags = if last { FINAL } else { ON_THE_WAY };
            match rustix::fs::openat(dir, name.as_os_str(), flags, Mode::empty()) {
                Ok(fd) if last => return self.finish(fd, &name, &at, created),
                Ok(fd) => self.enter(fd, at)?,
                // O_NOFOLLOW on a link: ELOOP, or ENOTDIR with O_DIRECTORY on Linux.
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    after_refused_open(&at);
                    let stat = rustix::fs::statat(dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(|e| self.parent_io(&at, e))?;
                    match FileType::from_raw_mode(stat.st_mode) {
                        FileType::Symlink if last => {
                            return Err(Error::Symlink {
                                path: self.path.to_owned(),
                            });
                        }
                        FileType::Symlink => {
                            let target = self.follow(&name, &at, &stat)?;
                            for step in target.into_iter().rev() {
                                steps.push_front(step);
                            }
                        }
                        // Replaced by a directory since the open: look again (bounded by the
                        // link count, as a link may be swapped back).
                        FileType::Directory => {
                            self.count_link()?;
                            steps.push_front(Step::Name(name));
                        }
                        _ if last => {
                            return Err(Error::NotADirectory {
                                path: self.path.to_owned(),
                            });
                        }
                        _ => {
                            return Err(Error::ParentNotADirectory {
                                path: self.path.to_owned(),
                                parent: at,
                            });
                        }
                    }
                }
                Err(Errno::NOENT) if last && create && !created => {
                    match rustix::fs::mkdirat(
                        dir,
                        name.as_os_str(),
                        worklane_guard::mode::from_bits(0o700),
                    ) {
                        Ok(()) => created = true,
                        // A concurrent creator won: theirs is opened and checked.
                        Err(Errno::EXIST) => {}
                        Err(e) => return Err(self.io("create", e)),
                    }
                    steps.push_front(Step::Name(name));
                }
                Err(Errno::NOENT) if last => {
                    return Err(Error::Missing {
                        path: self.path.to_owned(),
                    });
                }
                Err(Errno::NOENT) => {
                    return Err(Error::MissingParent {
                        path: self.path.to_owned(),
                        parent: at,
                    });
                }
                Err(e) if last => return Err(self.io("open", e)),
                Err(e) => return Err(self.parent_io(&at, e)),
            }
        }
        // Not reached: the last step is always the path's own last name, which returns.
        Err(Error::Missing {
            path: self.path.to_owned(),
        })
    }

    fn count_link(&mut self) -> Result<(), Error> {
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(Error::TooManyLinks {
                path: self.path.to_owned(),
            });
        }
        Ok(())
    }

    /// Checks the link `name` (at `at`, described by `stat`) and reads its target as steps; an
    /// absolute target restarts the walk at `/`.
    fn follow(&mut self, name: &OsString, at: &Path, stat: &Stat) -> Result<Vec<Step>, Error> {
        if !self.trusted(stat.st_uid) {
            return Err(Error::UntrustedLink {
                path: self.path.to_owned(),
                link: at.to_owned(),
                owner: stat.st_uid,
                caller: self.caller,
            });
        }
        self.count_link()?;
        let (dir, _) = self.current();
        let target = rustix::fs::readlinkat(dir, name.as_os_str(), Vec::new())
            .map_err(|e| self.parent_io(at, e))?;
        let target = PathBuf::from(std::ffi::OsStr::from_bytes(target.as_bytes()));
        if target.is_absolute() {
            self.stack.truncate(1);
        }
        Ok(target
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(Step::Name(n.to_owned())),
                Component::ParentDir => Some(Step::Up),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
            })
            .collect())
    }

    /// The last component, `name` at `at`, is open: when this walk created it, make it setgid
    /// 2770 first; then check it, and the group of every group-writable parent. A directory this
    /// walk created and must refuse is removed again (it is empty and ours).
    fn finish(
        self,
        fd: OwnedFd,
        name: &std::ffi::OsStr,
        at: &Path,
        created: bool,
    ) -> Result<Opened, Error> {
        let mut stat = rustix::fs::fstat(&fd).map_err(|e| self.io("inspect", e))?;
        // Someone else's directory at the name (ours replaced meanwhile) is checked as found.
        let ours = created && stat.st_uid == self.caller;
        if ours {
            // Exact mode through the descriptor, whatever the creator's umask. (Linux silently
            // leaves the setgid bit off if the caller is not in the group the directory got
            // from a setgid parent; files are then given the group one by one.)
            rustix::fs::fchmod(&fd, worklane_guard::mode::from_bits(DIR_MODE))
                .map_err(|e| self.io("set the mode of", e))?;
            stat = rustix::fs::fstat(&fd).map_err(|e| self.io("inspect", e))?;
        }
        let Err(problem) = self.check_last(at, &stat) else {
            return Ok(Opened {
                fd,
                gid: stat.st_gid,
            });
        };
        if let (true, Some((parent, _))) = (ours, self.stack.last()) {
            let _ = rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR);
        }
        Err(problem)
    }

    fn check_last(&self, at: &Path, stat: &Stat) -> Result<(), Error> {
        if !self.trusted(stat.st_uid) {
            return Err(self.refuse(at, stat, Problem::Owner));
        }
        if permission_bits(stat) & 0o002 != 0 {
            return Err(self.refuse(at, stat, Problem::Writable));
        }
        match self.loose.iter().find(|l| l.gid != stat.st_gid) {
            None => Ok(()),
            Some(l) => Err(Error::Unsafe {
                path: self.path.to_owned(),
                at: l.at.clone(),
                owner: l.uid,
                group: l.gid,
                mode: l.mode,
                caller: self.caller,
                problem: Problem::ParentGroupWritable {
                    dir_group: stat.st_gid,
                },
            }),
        }
    }
}

#[cfg(test)]
mod tests;
