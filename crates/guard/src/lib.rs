//! The permanent guard inode of a worklane resource and its nonblocking exclusive kernel lock.
//!
//! Every resource file `F` in a slot directory (a lock record, a budget file) has a guard
//! `.F.flock` beside it: an empty file, published once with mode 0444 and never unlinked,
//! renamed or replaced by ordinary code. Whoever holds `flock(LOCK_EX)` on an open file
//! description of the guard may inspect and change `F`; everyone else gets "busy" at once.
//!
//! - [`Guard::try_acquire`] opens (creating if needed), checks and locks a guard, or reports busy.
//! - [`Guard`] is held while it exists; [`AsFd`](std::os::fd::AsFd) lets a holder pass the
//!   descriptor to another process, and [`Guard::from_received`] rebuilds it there after
//!   comparing device and inode.
//! - [`is_reserved`] tells whether a name is (or normalizes to) a guard or guard temp alias, so
//!   that the slot-file layer refuses to touch one.
//! - [`filesystem`] holds the accepted and refused filesystem tables, as plain functions.
//!
//! # Limitations
//!
//! - `flock` is advisory: it excludes only processes that take the same guard. A process that
//!   writes `F` without the guard is outside the protocol.
//! - Local filesystems only (ext2/3/4, XFS, Btrfs, tmpfs on Linux; APFS and HFS+ with
//!   `MNT_LOCAL` on macOS). Everything else is refused by name.
//! - A holder killed with SIGKILL releases the lock when the kernel closes its descriptors, and
//!   so do its children only once they have closed every inherited duplicate. A holder stopped
//!   forever (SIGSTOP) keeps it.
//! - The fork window. Starting a process (`fork`, `posix_spawn`, `Command::spawn`) copies every
//!   descriptor of the process into the child, and a copy of a guard's descriptor shares its
//!   open file description, so the child holds the lock as well: until its `execve` closes the
//!   copy (a guard's descriptor is close-on-exec), for its whole life if it never execs, and
//!   beyond exec for a duplicate made without close-on-exec. Exclusion never suffers (a copy
//!   keeps a lock held, it never frees one), but in a multithreaded program "released" is not
//!   yet "free": a guard dropped by one thread while another thread is starting a process
//!   stays held until that child has exec'd, and everyone, this process's own next acquisition
//!   included, finds it busy meanwhile. `Command::spawn` returning does not close the window:
//!   under `posix_spawn` the parent resumes once the child's memory is replaced, a moment
//!   before the kernel closes the child's close-on-exec descriptors. A program that needs a
//!   released guard free at once (to hand a resource over, or in tests) must keep such
//!   releases and process starts apart: release only where no other thread can be starting a
//!   process, or make the two exclude each other (a process-wide reader-writer lock: starts
//!   shared, releases exclusive) and hold each start until its child has closed its copies
//!   (read to end-of-file a close-on-exec pipe whose write end has the highest descriptor
//!   number: `execve` closes close-on-exec descriptors in ascending order). worklane's own
//!   test binaries do this (`crates/testkit`). A program that cannot should take a guard found
//!   busy with no record behind it as momentary and retry briefly, as the slot pool does.
//! - Direct `unlink` or `rename` of a guard by a directory writer, or replacing the directory
//!   itself while holders run, defeats it. [`reclaim`] is the one way to remove guards: in a
//!   quiescent window, each while held; an acquirer checks after locking that the name still
//!   refers to its inode.
//!
//! # Example
//!
//! ```
//! use worklane_guard::Guard;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let fd = std::fs::File::open(dir.path())?;
//! let held = Guard::try_acquire(&fd, dir.path(), "agent-0.lock")?.expect("nobody else holds it");
//! // A second open file description is refused while the first holds the lock.
//! assert!(Guard::try_acquire(&fd, dir.path(), "agent-0.lock")?.is_none());
//! drop(held);
//! assert!(Guard::try_acquire(&fd, dir.path(), "agent-0.lock")?.is_some());
//! # Ok(()) }
//! ```

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod acquire;
mod check;
mod file;
pub mod filesystem;
mod guard;
pub mod mode;
mod name;
mod publish;
pub mod reclaim;
mod sys;
mod token;

pub use file::{FileId, describe_file_type};
pub use guard::{GUARD_MODE, Guard, guard_path, is_held};
pub use name::{
    GUARD_SUFFIX, GUARD_TEMP_INFIX, NAME_MAX, NameProblem, RESOURCE_NAME_MAX, TOKEN_LEN,
    check_resource_name, guard_name, guard_temp_name, is_reserved,
};
pub use token::random_token;
