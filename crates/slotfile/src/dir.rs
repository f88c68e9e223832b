//! The opened slot directory.

use crate::config::{self, Config};
use crate::env::{Environment, Layout, Locations, resolve};
use crate::path::SlotPath;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Mode of a slot directory that worklane creates: owner and group (coordinator users) write,
/// and setgid, so that every file created in it gets the directory's group.
pub const DIR_MODE: u32 = 0o2770;

/// An opened slot directory: a held descriptor (`O_DIRECTORY`, last component not followed)
/// through which every slot file is reached. Cheap to clone.
#[derive(Clone)]
pub struct SlotDir {
    inner: Arc<Inner>,
}

struct Inner {
    fd: OwnedFd,
    path: PathBuf,
    /// The directory's group, as `fstat` said when it was opened: every file written in it is
    /// given this group.
    gid: u32,
    /// A directory stream kept open and rewound for each listing (saves reopening `.`).
    listing: Mutex<Option<rustix::fs::Dir>>,
}

impl std::fmt::Debug for SlotDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotDir")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// Errors of opening a slot directory.
pub mod open {
    use std::path::{Path, PathBuf};

    /// Why a slot directory could not be opened.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// Resolution or the test-isolation rule refused it.
        #[error(transparent)]
        Resolve(#[from] super::resolve::Error),
        /// The path has a `..` component.
        #[error(
            "slot directory {path} has a `..` component, which is never resolved; give the \
             path without it"
        )]
        ParentComponent {
            /// The path.
            path: PathBuf,
        },
        /// The path is a symbolic link (in any spelling: `link`, `link/`, `link/.`).
        #[error(
            "slot directory {path} is a symbolic link, which is never followed; use the real directory's path"
        )]
        Symlink {
            /// The path.
            path: PathBuf,
        },
        /// A symbolic link on the way to the directory belongs to another user, who could
        /// redirect it.
        #[error(
            "the symbolic link {link} on the way to slot directory {path} is owned by uid \
             {owner}, not by root or you (uid {caller}), so that user could redirect it; use a \
             path without it"
        )]
        UntrustedLink {
            /// The path.
            path: PathBuf,
            /// The link.
            link: PathBuf,
            /// The link's owner.
            owner: u32,
            /// The caller's effective uid.
            caller: u32,
        },
        /// More than [`MAX_LINKS`](crate::MAX_LINKS) symbolic links on the way.
        #[error("more than 40 symbolic links on the way to slot directory {path}")]
        TooManyLinks {
            /// The path.
            path: PathBuf,
        },
        /// The path is not a directory.
        #[error(
            "slot directory {path} is not a directory; move that file aside or point \
             AGENT_SLOTS_DIR at a directory"
        )]
        NotADirectory {
            /// The path.
            path: PathBuf,
        },
        /// A component on the way is not a directory.
        #[error("{parent}, on the way to slot directory {path}, is not a directory")]
        ParentNotADirectory {
            /// The path.
            path: PathBuf,
            /// The component that is not a directory.
            parent: PathBuf,
        },
        /// The directory is missing and is not one worklane creates.
        #[error(
            "slot directory {path} does not exist; create it (mode 2770, owned by root or you, \
             group of the coordinators) or unset AGENT_SLOTS_DIR"
        )]
        Missing {
            /// The path.
            path: PathBuf,
        },
        /// A directory on the way does not exist (worklane creates only the last component).
        #[error(
            "{parent}, on the way to slot directory {path}, does not exist; worklane creates \
             only the slot directory itself"
        )]
        MissingParent {
            /// The path.
            path: PathBuf,
            /// The missing directory.
            parent: PathBuf,
        },
        /// The directory, or a directory on the way, could be changed by a user other than
        /// root and the caller.
        #[error("{}", unsafe_message(path, at, *owner, *group, *mode, *caller, problem))]
        Unsafe {
            /// The path.
            path: PathBuf,
            /// The directory refused (the slot directory's real path, or a parent's).
            at: PathBuf,
            /// Its owner's uid.
            owner: u32,
            /// Its group's gid.
            group: u32,
            /// Its permission bits (`& 0o7777`).
            mode: u32,
            /// The caller's effective uid.
            caller: u32,
            /// What is wrong.
            problem: Problem,
        },
        /// A system call on a directory on the way failed.
        #[error("cannot open {parent}, on the way to slot directory {path}")]
        Parent {
            /// The path.
            path: PathBuf,
            /// The directory on the way.
            parent: PathBuf,
            /// The system error.
            #[source]
            source: std::io::Error,
        },
        /// A system call failed.
        #[error("cannot {op} slot directory {path}")]
        Io {
            /// What was being done.
            op: &'static str,
            /// The path.
            path: PathBuf,
            /// The system error.
            #[source]
            source: std::io::Error,
        },
    }

    /// Why a directory is refused by [`Error::Unsafe`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[non_exhaustive]
    pub enum Problem {
        /// The slot directory is owned by a user other than root and the caller.
        Owner,
        /// The slot directory is writable by others (sticky or not).
        Writable,
        /// A directory on the way is owned by a user other than root and the caller.
        ParentOwner,
        /// A directory on the way is writable by others and not sticky.
        ParentWritable,
        /// A directory on the way is writable by its group, is not sticky, and its group is
        /// not the slot directory's.
        ParentGroupWritable {
            /// The slot directory's group.
            dir_group: u32,
        },
    }

    fn unsafe_message(
        path: &Path,
        at: &Path,
        owner: u32,
        group: u32,
        mode: u32,
        caller: u32,
        problem: &Problem,
    ) -> String {
        let (path, at) = (path.display(), at.display());
        match problem {
            Problem::Owner => format!(
                "slot directory {path} is owned by uid {owner} (mode {mode:04o}), not by root or \
                 you (uid {caller}): its owner controls every slot, cap and STOP in it; if you \
                 did not make it, another user may have created it to take over: remove it \
                 (`rm -r {at}`) and run again, or use a directory owned by root or you (such as \
                 /var/lib/worklane/agent-slots, see the README)"
            ),
            Problem::Writable => format!(
                "slot directory {path} is writable by every user (mode {mode:04o}, owner uid \
                 {owner}): any user could remove a holder's records and guards, change the caps \
                 or write STOP; run `chmod o-w {at}` as its owner (mode 2770 is what worklane \
                 creates), or remove it if you did not make it"
            ),
            Problem::ParentOwner => format!(
                "{at}, on the way to slot directory {path}, is owned by uid {owner} (mode \
                 {mode:04o}), not by root or you (uid {caller}), so that user could replace the \
                 slot directory; use a slot directory whose every parent is owned by root or you"
            ),
            Problem::ParentWritable => format!(
                "{at}, on the way to slot directory {path}, is writable by every user and not \
                 sticky (mode {mode:04o}, owner uid {owner}), so any user could replace the slot \
                 directory; run `chmod o-w {at}` (or `chmod +t {at}`, as /tmp is), or use \
                 another directory"
            ),
            Problem::ParentGroupWritable { dir_group } => format!(
                "{at}, on the way to slot directory {path}, is writable by its group (gid \
                 {group}, mode {mode:04o}, owner uid {owner}) and not sticky, and that is not the \
                 slot directory's group (gid {dir_group}), so members of gid {group} could \
                 replace the slot directory; run `chmod g-w {at}`, or give the slot directory \
                 that group"
            ),
        }
    }
}

/// Errors of [`SlotDir::resolve`].
pub mod resolved {
    /// Why the machine's slot state could not be resolved.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// The directory could not be resolved or opened.
        #[error(transparent)]
        Open(#[from] super::open::Error),
        /// The config is unreadable or invalid.
        #[error(transparent)]
        Config(#[from] super::config::Error),
    }
}

/// Errors of naming a file in a slot directory.
pub mod name {
    use std::path::PathBuf;
    use worklane_guard::NameProblem;

    /// Why a name cannot be a slot file.
    #[derive(Debug, thiserror::Error)]
    #[error("{name:?} cannot be a file in slot directory {dir}: {problem}")]
    pub struct Error {
        /// The directory.
        pub dir: PathBuf,
        /// The name given.
        pub name: String,
        /// What is wrong with it.
        pub problem: NameProblem,
    }
}

/// The machine's slot state, resolved: the opened directory, where everything is, the caps.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The opened slot directory.
    pub dir: SlotDir,
    /// Where the directory, config and drain flag are.
    pub locations: Locations,
    /// The caps in force.
    pub config: Config,
    /// The environment it was resolved in: later reads of the config or the drain flag apply
    /// its test-isolation rule.
    pub env: Environment,
}

impl SlotDir {
    /// Resolves the machine's slot directory and config from this process's environment, opens
    /// the directory (creating `$AGENT_SLOTS_DIR` or `/var/tmp/agent-slots` with mode 2770 if
    /// missing) and loads the config. This is the only way to reach the machine's directory;
    /// in a test run it is refused unless the directory lies inside the test's temp root.
    pub fn resolve() -> Result<Resolved, resolved::Error> {
        Self::resolve_in(&Environment::from_process())
    }

    /// [`SlotDir::resolve`] with an injected environment.
    pub fn resolve_in(env: &Environment) -> Result<Resolved, resolved::Error> {
        let locations = env.locate().map_err(open::Error::from)?;
        let create = locations.layout != Layout::System;
        let dir = Self::open_checked(&locations.slot_dir, create)?;
        let config = Config::load_in(env, &locations.config)?;
        Ok(Resolved {
            dir,
            locations,
            config,
            env: env.clone(),
        })
    }

    /// Resolves and opens the machine's slot directory as [`SlotDir::resolve`] does, without
    /// loading the config: for callers that need the directory but not the caps (the API
    /// budget ledger, which must not fail because a cap is misconfigured).
    pub fn resolve_dir() -> Result<SlotDir, open::Error> {
        Self::resolve_dir_in(&Environment::from_process())
    }

    /// [`SlotDir::resolve_dir`] with an injected environment.
    pub fn resolve_dir_in(env: &Environment) -> Result<SlotDir, open::Error> {
        let locations = env.locate()?;
        let create = locations.layout != Layout::System;
        Self::open_checked(&locations.slot_dir, create)
    }

    /// Opens an existing directory at `path` as a slot directory (for tools and tests given an
    /// explicit directory). The test-isolation rule applies as in [`SlotDir::resolve`].
    pub fn open(path: &Path) -> Result<SlotDir, open::Error> {
        Self::open_in(&Environment::from_process(), path)
    }

    /// [`SlotDir::open`] with an injected environment.
    pub fn open_in(env: &Environment, path: &Path) -> Result<SlotDir, open::Error> {
        env.check_isolated("slot directory", path)?;
        Self::open_checked(path, false)
    }

    /// Opens `path` as a slot directory (creating it when missing and `create` is set) with the
    /// ownership checks of [`crate::walk`].
    fn open_checked(path: &Path, create: bool) -> Result<SlotDir, open::Error> {
        let opened = crate::walk::open(path, create)?;
        Ok(SlotDir {
            inner: Arc::new(Inner {
                fd: opened.fd,
                path: path.to_owned(),
                gid: opened.gid,
                listing: Mutex::new(None),
            }),
        })
    }

    /// The directory's group (its gid when it was opened): every file written in it is given
    /// this group.
    pub(crate) fn gid(&self) -> u32 {
        self.inner.gid
    }

    /// The directory's path, for messages.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Names the file `name` in this directory. Refuses anything that is not one ordinary path
    /// component: `/`, NUL, `.`/`..`, a leading `.` (kept for guards and temp files), a guard
    /// name or guard temp alias in any spelling, or a name too long for its guard.
    pub fn file(&self, name: &str) -> Result<SlotPath, name::Error> {
        worklane_guard::check_resource_name(name).map_err(|problem| name::Error {
            dir: self.path().to_owned(),
            name: name.to_owned(),
            problem,
        })?;
        Ok(SlotPath::new(self.clone(), name))
    }

    /// Every ordinary file name in the directory, as slot paths, sorted by name. Guards, temp
    /// files (leading `.`), and names that are not valid UTF-8 or not valid slot names are
    /// skipped.
    pub fn list(&self) -> Result<Vec<SlotPath>, open::Error> {
        self.list_prefixed("")
    }

    /// [`SlotDir::list`], restricted to names starting with `prefix` (filtered before any
    /// other work, for callers that look for one resource's claims or epoch).
    pub fn list_prefixed(&self, prefix: &str) -> Result<Vec<SlotPath>, open::Error> {
        let mut names = Vec::new();
        self.each_name(|name| {
            if name.starts_with(prefix) && worklane_guard::check_resource_name(name).is_ok() {
                names.push(name.to_owned());
            }
        })?;
        names.sort();
        Ok(names
            .into_iter()
            .map(|n| SlotPath::new(self.clone(), &n))
            .collect())
    }

    /// [`SlotDir::list`] and [`SlotDir::hidden_names`] from one reading of the directory, for
    /// callers that need both (the slot count: records, and guards held with no record).
    pub fn list_with_hidden(&self) -> Result<(Vec<SlotPath>, Vec<String>), open::Error> {
        let mut names = Vec::new();
        let mut hidden = Vec::new();
        self.each_name(|name| {
            if name.starts_with('.') {
                hidden.push(name.to_owned());
            } else if worklane_guard::check_resource_name(name).is_ok() {
                names.push(name.to_owned());
            }
        })?;
        names.sort();
        hidden.sort();
        let files = names
            .into_iter()
            .map(|n| SlotPath::new(self.clone(), &n))
            .collect();
        Ok((files, hidden))
    }

    /// Calls `each` with every UTF-8 name in the directory (`.` and `..` excepted), through one
    /// directory stream kept open and rewound.
    pub(crate) fn each_name(&self, mut each: impl FnMut(&str)) -> Result<(), open::Error> {
        let io = |e: Errno| open::Error::Io {
            op: "list",
            path: self.path().to_owned(),
            source: e.into(),
        };
        let mut stream = self
            .inner
            .listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = match stream.as_mut() {
            Some(dir) => {
                dir.rewind();
                dir
            }
            None => stream.insert(rustix::fs::Dir::read_from(self.as_fd()).map_err(io)?),
        };
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(io)?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name != "." && name != ".." {
                each(name);
            }
        }
        Ok(())
    }
}

impl AsFd for SlotDir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}
