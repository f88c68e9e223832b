//! The opened slot directory.

use crate::config::Config;
use crate::env::{Environment, Layout, Locations};
use crate::open;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
    /// The directory's filesystem, accepted for guards when it was opened (`None`: refused or
    /// not known, so each guard asks for itself and is refused with the reason). Valid while
    /// `fd` is open, which this holds.
    checked: Option<worklane_guard::CheckedFilesystem>,
}

impl std::fmt::Debug for SlotDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotDir")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
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
        Open(#[from] crate::open::Error),
        /// The config is unreadable or invalid.
        #[error(transparent)]
        Config(#[from] crate::config::Error),
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

/// The machine's slot directory, resolved and opened, with where its config and drain flag
/// are, but without its config loaded: what STOP, the drain and the views need, so that a
/// config that is broken (not JSON, unreadable, a directory) cannot keep them from working.
/// Whoever needs the caps loads the config from [`Located::locations`] when it needs them,
/// and reports its problem then.
#[derive(Debug, Clone)]
pub struct Located {
    /// The opened slot directory.
    pub dir: SlotDir,
    /// Where the directory, config and drain flag are.
    pub locations: Locations,
    /// The environment it was resolved in: later reads of the config or the drain flag apply
    /// its test-isolation rule.
    pub env: Environment,
}

impl From<Resolved> for Located {
    fn from(resolved: Resolved) -> Located {
        Located {
            dir: resolved.dir,
            locations: resolved.locations,
            env: resolved.env,
        }
    }
}

impl SlotDir {
    /// Resolves the machine's slot directory and config from this process's environment, opens
    /// the directory (creating `$AGENT_SLOTS_DIR` or `/var/tmp/agent-slots` with mode 2770 if
    /// missing) and loads the config. This is the only way to reach the machine's directory,
    /// with [`SlotDir::resolve_located`] and [`SlotDir::resolve_dir`]; in a test run it is
    /// refused unless the directory lies inside the test's temp root.
    pub fn resolve() -> Result<Resolved, resolved::Error> {
        Self::resolve_in(&Environment::from_process())
    }

    /// [`SlotDir::resolve`] with an injected environment.
    pub fn resolve_in(env: &Environment) -> Result<Resolved, resolved::Error> {
        let Located {
            dir,
            locations,
            env,
        } = Self::resolve_located_in(env)?;
        let config = Config::load_in(&env, &locations.config)?;
        Ok(Resolved {
            dir,
            locations,
            config,
            env,
        })
    }

    /// Resolves and opens the machine's slot directory as [`SlotDir::resolve`] does, with
    /// where its config and drain flag are, without loading the config (see [`Located`]).
    pub fn resolve_located() -> Result<Located, open::Error> {
        Self::resolve_located_in(&Environment::from_process())
    }

    /// [`SlotDir::resolve_located`] with an injected environment.
    pub fn resolve_located_in(env: &Environment) -> Result<Located, open::Error> {
        let locations = env.locate()?;
        let create = locations.layout != Layout::System;
        let dir = Self::open_checked(&locations.slot_dir, create)?;
        Ok(Located {
            dir,
            locations,
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
        Ok(Self::resolve_located_in(env)?.dir)
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
        // Asked once here rather than by each guard (an `fstatfs` saved per guard: a take opens
        // about a dozen). A filesystem that cannot be asked is left to each guard's own check.
        let checked = worklane_guard::CheckedFilesystem::of(&opened.fd)
            .ok()
            .flatten();
        Ok(SlotDir {
            inner: Arc::new(Inner {
                fd: opened.fd,
                path: path.to_owned(),
                gid: opened.gid,
                listing: Mutex::new(None),
                checked,
            }),
        })
    }

    /// The directory's filesystem as accepted for guards when it was opened.
    pub(crate) fn checked_filesystem(&self) -> Option<worklane_guard::CheckedFilesystem> {
        self.inner.checked
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_directory_knows_its_filesystem_for_its_guards_from_its_open() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = SlotDir::open(temp.path()).expect("open");
        let checked = dir
            .checked_filesystem()
            .expect("the tests' temp directory is on a local filesystem");
        let guard = dir
            .file("a.lock")
            .expect("name")
            .try_guard()
            .expect("take")
            .expect("free");
        let id = guard.file_id();
        assert_eq!(
            Some(checked),
            worklane_guard::CheckedFilesystem::of(&dir).expect("fstatfs"),
            "its filesystem as the directory's open found it"
        );
        let stat = rustix::fs::stat(temp.path()).expect("stat");
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let dev = stat.st_dev as u64;
        assert_eq!(id.dev, dev, "the guard is on the directory's device");
    }
}
