//! A directory of one user's own, for state that nobody else may write: the dispatcher's
//! queue database, which holds who enqueued each row and so whom its driver runs as.
//!
//! The slot directory cannot hold such state: every member of its group may replace any name
//! in it, so a root process that trusts, follows or opens a file there by name lends the
//! member its rights. A [`PrivateDir`] is walked from `/` one component at a time, each
//! opened relative to its parent's descriptor with `O_NOFOLLOW | O_DIRECTORY`, and checked on
//! that descriptor:
//!
//! - the path holds no symbolic link at all (a file opened by its path later, as SQLite opens
//!   its database, must find the same directories; SQLite's `SQLITE_OPEN_NOFOLLOW` refuses a
//!   link anywhere in the path);
//! - every directory on the way is owned by root or the caller and writable by nobody else
//!   unless it is sticky (as `/tmp` is): nobody else can rename what lies below it;
//! - the directory itself is owned by the caller and has no permission bit for its group or
//!   others (0700): it is created so when `create` is given, and every missing parent with
//!   0755 (less the umask: never writable by others).
//!
//! Files in it are opened relative to its descriptor, never following a link and never
//! blocking on a FIFO, and each is judged by its `fstat` ([`Entry`]).

#![allow(
    clippy::disallowed_methods,
    reason = "this module moves aside and removes files in a directory of the caller's own"
)]

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::path::{Component, Path, PathBuf};

/// The mode of a private directory and of every file worklane creates in it.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// The mode of a missing parent made on the way (less the umask): writable by its owner only.
const PARENT_MODE: u32 = 0o755;

const S_ISVTX: u32 = 0o1000;

/// Why a private directory could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The path is not absolute, or holds a `..`.
    #[error(
        "private directory {path}: give an absolute path without `..` (its real path, as \
         `realpath` prints it)"
    )]
    NotPlain {
        /// The path.
        path: PathBuf,
    },
    /// A symbolic link on the way, or at the name.
    #[error(
        "private directory {path}: {at} is a symbolic link, and the path of a private \
         directory holds none (a file in it is opened by its path too); give its real path, \
         as `realpath` prints it"
    )]
    Link {
        /// The path.
        path: PathBuf,
        /// The link.
        at: PathBuf,
    },
    /// Something other than a directory on the way or at the name.
    #[error("private directory {path}: {at} is not a directory")]
    NotADirectory {
        /// The path.
        path: PathBuf,
        /// What is not a directory.
        at: PathBuf,
    },
    /// The directory, or one on the way, lets someone else change what it holds.
    #[error(
        "private directory {path}: {at} is owned by uid {owner} with mode {mode:04o}, and {why}; \
         {fix}"
    )]
    Unsafe {
        /// The path.
        path: PathBuf,
        /// The directory refused.
        at: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// What is wrong, in words.
        why: &'static str,
        /// What to do.
        fix: String,
    },
    /// The directory is missing (and was not to be created).
    #[error("private directory {path} does not exist")]
    Missing {
        /// The path.
        path: PathBuf,
    },
    /// A system call failed.
    #[error("cannot {op} {at}, on the way to private directory {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// Where.
        at: PathBuf,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
}

/// What a name in a private directory is, by `fstatat` without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its type.
    pub kind: FileType,
    /// Its owner.
    pub uid: u32,
    /// Its permission bits.
    pub mode: u32,
    /// Its hard links.
    pub links: u64,
    /// Its size in bytes.
    pub size: u64,
}

impl Entry {
    fn of(stat: &rustix::fs::Stat) -> Entry {
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        Entry {
            kind: FileType::from_raw_mode(stat.st_mode),
            uid: stat.st_uid,
            mode: worklane_guard::mode::of(stat),
            links: stat.st_nlink as u64,
            size: u64::try_from(stat.st_size).unwrap_or(0),
        }
    }

    /// Why this file cannot be trusted as `uid`'s own private file, if it cannot: not a
    /// regular file, owned by someone else, writable by its group or others, or with another
    /// name (a hard link) somewhere else.
    #[must_use]
    pub fn untrusted_by(&self, uid: u32) -> Option<String> {
        if self.kind != FileType::RegularFile {
            return Some(format!(
                "it is {}, not a regular file",
                worklane_guard::describe_file_type(self.kind)
            ));
        }
        if self.uid != uid {
            return Some(format!("it is owned by uid {}, not by uid {uid}", self.uid));
        }
        if self.mode & 0o022 != 0 {
            return Some(format!(
                "its mode {:04o} lets its group or others write it",
                self.mode
            ));
        }
        if self.links != 1 {
            return Some(format!(
                "it has {} names (hard links), so another may change it",
                self.links
            ));
        }
        None
    }
}

/// A directory of the caller's own (mode 0700), opened and checked as the module says.
#[derive(Debug)]
pub struct PrivateDir {
    fd: OwnedFd,
    path: PathBuf,
    uid: u32,
}

impl AsFd for PrivateDir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// How a directory of the walk is opened: as a directory, never through a link at its name,
/// never inherited. Linux opens those on the way with `O_PATH` (search permission suffices).
const DIR: OFlags = OFlags::DIRECTORY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);
#[cfg(any(target_os = "linux", target_os = "android"))]
const ON_THE_WAY: OFlags = OFlags::PATH.union(DIR);
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const ON_THE_WAY: OFlags = OFlags::RDONLY.union(DIR);
const FINAL: OFlags = OFlags::RDONLY.union(DIR);
/// How a file in it is opened: never through a link, never blocking on a FIFO, never a
/// controlling terminal, never inherited.
const FILE: OFlags = OFlags::NOFOLLOW
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

impl PrivateDir {
    /// Opens the private directory at `path` (absolute, without links), creating it and its
    /// missing parents with mode 0700 when `create` is set.
    pub fn open(path: &Path, create: bool) -> Result<PrivateDir, Error> {
        let caller = rustix::process::geteuid().as_raw();
        let plain = || Error::NotPlain {
            path: path.to_owned(),
        };
        if !path.is_absolute() {
            return Err(plain());
        }
        let mut names = Vec::new();
        for component in path.components() {
            match component {
                Component::Normal(name) => names.push(name.to_owned()),
                Component::RootDir | Component::CurDir => {}
                Component::ParentDir | Component::Prefix(_) => return Err(plain()),
            }
        }
        let io = |op: &'static str, at: &Path, e: Errno| Error::Io {
            op,
            path: path.to_owned(),
            at: at.to_owned(),
            source: e.into(),
        };
        let root = PathBuf::from("/");
        let mut here = root.clone();
        let mut dir =
            rustix::fs::open("/", ON_THE_WAY, Mode::empty()).map_err(|e| io("open", &root, e))?;
        let Some((last, parents)) = names.split_last() else {
            return Err(plain());
        };
        check_parent(path, &here, &dir, caller)?;
        for (i, name) in parents.iter().chain(std::iter::once(last)).enumerate() {
            let is_last = i == parents.len();
            let at = here.join(name);
            let flags = if is_last { FINAL } else { ON_THE_WAY };
            let mut created = false;
            let fd = loop {
                match rustix::fs::openat(&dir, name.as_os_str(), flags, Mode::empty()) {
                    Ok(fd) => break fd,
                    Err(Errno::LOOP | Errno::NOTDIR) => {
                        let stat =
                            rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                                .map_err(|e| io("inspect", &at, e))?;
                        return Err(match FileType::from_raw_mode(stat.st_mode) {
                            FileType::Symlink => Error::Link {
                                path: path.to_owned(),
                                at,
                            },
                            _ => Error::NotADirectory {
                                path: path.to_owned(),
                                at,
                            },
                        });
                    }
                    Err(Errno::NOENT) if create && !created => {
                        // The directory itself 0700; a parent made on the way 0755, as
                        // /var/lib/worklane is (others reach the slot directory through it).
                        let mode = if is_last {
                            PRIVATE_DIR_MODE
                        } else {
                            PARENT_MODE
                        };
                        match rustix::fs::mkdirat(
                            &dir,
                            name.as_os_str(),
                            worklane_guard::mode::from_bits(mode),
                        ) {
                            Ok(()) | Err(Errno::EXIST) => created = true,
                            Err(e) => return Err(io("create", &at, e)),
                        }
                    }
                    Err(Errno::NOENT) => {
                        return Err(Error::Missing {
                            path: path.to_owned(),
                        });
                    }
                    Err(e) => return Err(io("open", &at, e)),
                }
            };
            if created && is_last {
                // Exact mode through the descriptor, whatever the umask; only a directory of
                // ours (one a racing creator made is judged as found).
                if let Ok(stat) = rustix::fs::fstat(&fd)
                    && stat.st_uid == caller
                {
                    let _ =
                        rustix::fs::fchmod(&fd, worklane_guard::mode::from_bits(PRIVATE_DIR_MODE));
                }
            }
            if is_last {
                let stat = rustix::fs::fstat(&fd).map_err(|e| io("inspect", &at, e))?;
                let mode = worklane_guard::mode::of(&stat);
                let refuse = |why, fix: String| Error::Unsafe {
                    path: path.to_owned(),
                    at: at.clone(),
                    owner: stat.st_uid,
                    mode,
                    why,
                    fix,
                };
                if stat.st_uid != caller {
                    return Err(refuse(
                        "a private directory is owned by the user who keeps its state",
                        format!(
                            "if you did not make it, another user may have: remove it and run \
                             again, or `chown {caller} {}`",
                            at.display()
                        ),
                    ));
                }
                if mode & 0o077 != 0 {
                    return Err(refuse(
                        "a private directory gives its group and others no access (0700)",
                        format!("run `chmod 700 {}`", at.display()),
                    ));
                }
                return Ok(PrivateDir {
                    fd,
                    path: at,
                    uid: caller,
                });
            }
            check_parent(path, &at, &fd, caller)?;
            dir = fd;
            here = at;
        }
        Err(Error::Missing {
            path: path.to_owned(),
        })
    }

    /// Its real path (it holds no link), for a library that opens files by path (SQLite).
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `path` of the file `name` in it.
    #[must_use]
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// What `name` is, without following a link: `None` when there is nothing of that name.
    pub fn entry(&self, name: &str) -> std::io::Result<Option<Entry>> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(Entry::of(&stat))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens `name` for reading, never following a link nor blocking on a FIFO, and says what
    /// it is by its descriptor: `None` when there is nothing of that name.
    pub fn open_read(&self, name: &str) -> std::io::Result<Option<(std::fs::File, Entry)>> {
        match rustix::fs::openat(&self.fd, name, OFlags::RDONLY.union(FILE), Mode::empty()) {
            Ok(fd) => {
                let entry = Entry::of(&rustix::fs::fstat(&fd)?);
                Ok(Some((std::fs::File::from(fd), entry)))
            }
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates `name` anew (`O_EXCL`, never through a link) with exactly `mode` (set through
    /// the descriptor, whatever the umask), for writing.
    pub fn create_new(&self, name: &str, mode: u32) -> std::io::Result<std::fs::File> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY
                .union(OFlags::CREATE)
                .union(OFlags::EXCL)
                .union(FILE),
            worklane_guard::mode::from_bits(mode & 0o600),
        )?;
        rustix::fs::fchmod(&fd, worklane_guard::mode::from_bits(mode))?;
        Ok(std::fs::File::from(fd))
    }

    /// Moves `name` aside to `<name>.<suffix>` (the name it went to), `None` when there was
    /// nothing of that name. Whatever `name` is (a link, a FIFO, a directory), it is renamed,
    /// never followed.
    pub fn set_aside(&self, name: &str, suffix: &str) -> std::io::Result<Option<String>> {
        let to = format!("{name}.{suffix}");
        match rustix::fs::renameat(&self.fd, name, &self.fd, to.as_str()) {
            Ok(()) => Ok(Some(to)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes the file `name` (never following a link): `false` when there was none.
    pub fn remove(&self, name: &str) -> std::io::Result<bool> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The uid it belongs to (the caller's when it was opened).
    #[must_use]
    pub fn uid(&self) -> u32 {
        self.uid
    }
}

/// A directory on the way, `at`: owned by root or `caller`, and writable by nobody else unless
/// it is sticky.
fn check_parent(path: &Path, at: &Path, fd: &OwnedFd, caller: u32) -> Result<(), Error> {
    let stat = rustix::fs::fstat(fd).map_err(|e| Error::Io {
        op: "inspect",
        path: path.to_owned(),
        at: at.to_owned(),
        source: e.into(),
    })?;
    let mode = worklane_guard::mode::of(&stat);
    let refuse = |why, fix: String| Error::Unsafe {
        path: path.to_owned(),
        at: at.to_owned(),
        owner: stat.st_uid,
        mode,
        why,
        fix,
    };
    if stat.st_uid != 0 && stat.st_uid != caller {
        return Err(refuse(
            "a directory on the way to a private directory is owned by root or you, so that \
             nobody else can replace what lies below it",
            "choose a private directory under directories owned by root or you".to_owned(),
        ));
    }
    if mode & 0o022 != 0 && mode & S_ISVTX == 0 {
        return Err(refuse(
            "a directory on the way that its group or others may write, and that is not \
             sticky, lets them rename what lies below it",
            format!(
                "run `chmod go-w {}`, or choose another private directory",
                at.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode_of(path: &Path) -> u32 {
        std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
    }

    #[test]
    fn a_missing_directory_is_made_0700_and_its_parents_writable_by_their_owner_alone() {
        let temp = tempfile::tempdir().expect("temp");
        let path = temp.path().join("a/b/state");
        let dir = PrivateDir::open(&path, true).expect("made");
        assert_eq!(dir.path(), path);
        assert_eq!(mode_of(&path), 0o700, "the directory");
        for p in [temp.path().join("a"), temp.path().join("a/b")] {
            assert_eq!(
                mode_of(&p) & 0o022,
                0,
                "{}: no write but its owner's",
                p.display()
            );
        }
        assert!(
            matches!(
                PrivateDir::open(&temp.path().join("none"), false),
                Err(Error::Missing { .. })
            ),
            "not made without create"
        );
    }

    #[test]
    fn links_shared_modes_and_relative_paths_are_refused() {
        let temp = tempfile::tempdir().expect("temp");
        let real = temp.path().join("real");
        std::fs::create_dir(&real).expect("dir");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::os::unix::fs::symlink(&real, temp.path().join("link")).expect("link");
        assert!(
            matches!(
                PrivateDir::open(&temp.path().join("link"), false),
                Err(Error::Link { .. })
            ),
            "a link at the name"
        );
        assert!(
            matches!(
                PrivateDir::open(&temp.path().join("link/inner"), true),
                Err(Error::Link { .. })
            ),
            "a link on the way"
        );
        assert!(
            !real.join("inner").exists(),
            "nothing made through the link"
        );
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o750)).expect("chmod");
        assert!(
            matches!(
                PrivateDir::open(&real, false),
                Err(Error::Unsafe { mode: 0o750, .. })
            ),
            "the group may read it"
        );
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o770)).expect("chmod");
        assert!(
            matches!(
                PrivateDir::open(&real.join("inner"), true),
                Err(Error::Unsafe { mode: 0o770, .. })
            ),
            "a parent its group may write"
        );
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        assert!(
            PrivateDir::open(&real.join("inner"), true).is_ok(),
            "a sticky parent, as /tmp"
        );
        assert!(matches!(
            PrivateDir::open(Path::new("relative/state"), true),
            Err(Error::NotPlain { .. })
        ));
        assert!(matches!(
            PrivateDir::open(&real.join("../real"), true),
            Err(Error::NotPlain { .. })
        ));
    }

    #[test]
    fn files_are_judged_by_their_descriptor_and_set_aside_whatever_they_are() {
        let temp = tempfile::tempdir().expect("temp");
        let dir = PrivateDir::open(&temp.path().join("s"), true).expect("dir");
        let me = rustix::process::geteuid().as_raw();
        assert_eq!(dir.uid(), me, "the caller's");
        drop(dir.create_new("db", 0o600).expect("create"));
        let (_, entry) = dir.open_read("db").expect("open").expect("there");
        assert_eq!(
            (entry.kind, entry.mode, entry.links),
            (FileType::RegularFile, 0o600, 1)
        );
        assert_eq!(entry.untrusted_by(me), None, "ours");
        assert!(entry.untrusted_by(me + 1).is_some(), "another's");
        std::fs::set_permissions(dir.join("db"), std::fs::Permissions::from_mode(0o620))
            .expect("chmod");
        assert!(
            dir.entry("db")
                .expect("entry")
                .expect("there")
                .untrusted_by(me)
                .is_some_and(|why| why.contains("0620")),
            "group-writable"
        );
        std::fs::hard_link(dir.join("db"), dir.join("twin")).expect("link");
        assert!(
            dir.entry("db")
                .expect("entry")
                .expect("there")
                .untrusted_by(me)
                .is_some(),
            "two names"
        );
        assert!(dir.create_new("db", 0o600).is_err(), "O_EXCL");
        std::os::unix::fs::symlink("/etc/passwd", dir.join("ln")).expect("symlink");
        assert!(dir.open_read("ln").is_err(), "a link is not followed");
        assert_eq!(
            dir.entry("ln").expect("entry").expect("there").kind,
            FileType::Symlink
        );
        assert_eq!(
            dir.set_aside("ln", "refused").expect("aside").as_deref(),
            Some("ln.refused")
        );
        assert!(
            std::fs::symlink_metadata(dir.join("ln.refused"))
                .expect("moved")
                .file_type()
                .is_symlink(),
            "the link itself moved, its target untouched"
        );
        assert_eq!(dir.set_aside("none", "x").expect("aside"), None);
        assert!(dir.remove("twin").expect("remove"));
        assert!(!dir.remove("twin").expect("remove"));
    }

    /// The parents of a private directory are owned by root or the caller: a directory of
    /// anyone else on the way could have what lies below it replaced.
    #[test]
    fn a_parent_owned_by_another_user_is_refused_and_root_s_or_the_caller_s_are_not() {
        let me = rustix::process::geteuid().as_raw();
        assert_eq!(
            me, 0,
            "this test gives a directory away, which needs root (as CI runs)"
        );
        let temp = tempfile::tempdir().expect("temp");
        let theirs = temp.path().join("theirs");
        std::fs::create_dir(&theirs).expect("dir");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
        match PrivateDir::open(&theirs.join("state"), true) {
            Err(Error::Unsafe { owner: 65534, .. }) => {}
            other => panic!("a parent of uid 65534 must be refused: {other:?}"),
        }
        assert!(!theirs.join("state").exists(), "nothing made under it");
        std::os::unix::fs::chown(&theirs, Some(me), None).expect("chown back");
        assert!(
            PrivateDir::open(&theirs.join("state"), true).is_ok(),
            "the caller's (root's) own parent, under root's /"
        );
    }
}
