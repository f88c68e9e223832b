//! Errors of opening a slot directory.

use std::path::{Path, PathBuf};

/// Why a slot directory could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Resolution or the test-isolation rule refused it.
    #[error(transparent)]
    Resolve(#[from] crate::resolve::Error),
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
