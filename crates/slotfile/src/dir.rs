//! The opened slot directory.

use crate::config::{self, Config};
use crate::env::{Environment, Layout, Locations, resolve};
use crate::path::SlotPath;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Mode of a slot directory that worklane creates: owner and group (coordinator users) write.
pub const DIR_MODE: u32 = 0o770;

/// An opened slot directory: a held descriptor (`O_DIRECTORY`, last component not followed)
/// through which every slot file is reached. Cheap to clone.
#[derive(Clone)]
pub struct SlotDir {
    inner: Arc<Inner>,
}

struct Inner {
    fd: OwnedFd,
    path: PathBuf,
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
    use std::path::PathBuf;

    /// Why a slot directory could not be opened.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// Resolution or the test-isolation rule refused it.
        #[error(transparent)]
        Resolve(#[from] super::resolve::Error),
        /// The path is a symbolic link.
        #[error(
            "slot directory {path} is a symbolic link, which is never followed; use the real directory's path"
        )]
        Symlink {
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
        /// The directory is missing and is not one worklane creates.
        #[error(
            "slot directory {path} does not exist; create it (mode 0770, owned by the coordinator group) or unset AGENT_SLOTS_DIR"
        )]
        Missing {
            /// The path.
            path: PathBuf,
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
    /// the directory (creating `$AGENT_SLOTS_DIR` or `/var/tmp/agent-slots` with mode 0770 if
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

    fn open_checked(path: &Path, create: bool) -> Result<SlotDir, open::Error> {
        let io = |op| {
            move |e: Errno| open::Error::Io {
                op,
                path: path.to_owned(),
                source: e.into(),
            }
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let (mut tried, mut created) = (false, false);
        let fd = loop {
            match rustix::fs::open(path, flags, Mode::empty()) {
                Ok(fd) => break fd,
                Err(Errno::NOENT) if create && !tried => {
                    tried = true;
                    // Created private, then opened to 0770 through the descriptor below. A
                    // concurrent creator winning (EEXIST) is fine: theirs is used.
                    match rustix::fs::mkdir(path, Mode::from_bits_truncate(0o700)) {
                        Ok(()) => created = true,
                        Err(Errno::EXIST) => {}
                        Err(e) => return Err(io("create")(e)),
                    }
                }
                Err(Errno::NOENT) => {
                    return Err(open::Error::Missing {
                        path: path.to_owned(),
                    });
                }
                Err(Errno::LOOP) => {
                    return Err(open::Error::Symlink {
                        path: path.to_owned(),
                    });
                }
                // With O_DIRECTORY, Linux reports a symlink as ENOTDIR: tell the two apart.
                Err(Errno::NOTDIR) => {
                    let link = rustix::fs::lstat(path).is_ok_and(|s| {
                        rustix::fs::FileType::from_raw_mode(s.st_mode)
                            == rustix::fs::FileType::Symlink
                    });
                    let path = path.to_owned();
                    return Err(match link {
                        true => open::Error::Symlink { path },
                        false => open::Error::NotADirectory { path },
                    });
                }
                Err(e) => return Err(io("open")(e)),
            }
        };
        if created {
            // Exact mode through the descriptor, whatever the creator's umask.
            rustix::fs::fchmod(&fd, crate::path::mode(DIR_MODE)).map_err(io("set the mode of"))?;
        }
        Ok(SlotDir {
            inner: Arc::new(Inner {
                fd,
                path: path.to_owned(),
                listing: Mutex::new(None),
            }),
        })
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
