//! The permanent guard inode of a worklane resource and its nonblocking exclusive kernel lock.
//!
//! Every resource file `F` in a slot directory (a lock record, a budget file) has a guard
//! `.F.flock` beside it: an empty file, published once with mode 0444 and never unlinked,
//! renamed or replaced by ordinary code. Whoever holds `flock(LOCK_EX)` on an open file
//! description of the guard may inspect and change `F`; everyone else gets "busy" at once.
//!
//! - [`Guard::try_acquire`] opens (creating if needed), checks and locks a guard, or reports busy;
//!   [`Guard::try_acquire_on`] does the same in a directory whose filesystem
//!   [`CheckedFilesystem::of`] accepted once (a guard on that device skips its own `fstatfs`).
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
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! Owns the guard `.F.flock` of a resource `F` and its lock. A guard is published once: after an
//! `fstatfs` of the directory accepts its filesystem, created `O_RDONLY | O_EXCL` under a random
//! temp alias `.F.flock.tmp-<16 hex>`, given mode 0444 (`GUARD_MODE`) by `fchmod` on its
//! descriptor, hard-linked into place with `linkat` (`EEXIST`: someone else published first, use
//! theirs), and the temp alias unlinked. `Guard::try_acquire(dir, dir_path,
//! resource)` opens it relative to the directory descriptor
//! (`O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY`), checks that the descriptor is
//! above 2 and an empty regular file on an accepted filesystem (`fstatfs`), then calls
//! `flock(LOCK_EX | LOCK_NB)`, and finally checks with `statat` that the name still refers to the
//! inode it locked (else it closes and opens again, at most 3 rounds, then reports busy), so that
//! a guard reclaimed in a maintenance window is never held twice.
//!
//! API boundary: `Guard::try_acquire` returns `Ok(Some(Guard))` (held), `Ok(None)` (busy) or an
//! `acquire::Error`. `Guard` is `#[must_use]` and `AsFd`, with `file_id() -> FileId {dev, ino}`
//! and `release()`. `Guard::from_received(fd, dir, dir_path, resource)` rebuilds a guard from a
//! descriptor passed by another process: it compares device and inode with the guard at the
//! name, then re-asserts `flock(LOCK_EX | LOCK_NB)` on that descriptor (`NotHeld` if another
//! description holds it). It then checks the name still refers to that inode (`NotTheGuard` if not). Also exported: `is_held` (a nonblocking probe), `guard_path`,
//! `guard_name`, `guard_temp_name`, `is_reserved`, `check_resource_name`
//! (`NameProblem`), `random_token` (the temp-name token, `TOKEN_LEN` hex digits: splitmix64 of a
//! per-process OS-seeded value, the pid and a counter), `describe_file_type` (the words of its
//! errors' `kind`), `filesystem::{of, classify_linux, classify_macos}`, `mode::{from_bits, of}`
//! (permission bits to and from the platform's `mode_t`). slotfile
//! uses `check_resource_name` for every slot name, `random_token` for its temp names (and
//! admission for its lane names and line entries),
//! `describe_file_type` in its read errors, `mode` for every mode it sets or reports, and `Guard::try_acquire` through
//! `SlotPath::try_guard`. The normalization behind `is_reserved` (`normalize`,
//! `is_default_ignorable`) is private: no other crate needs it.
//!
//! The `reclaim` module (`classify`, `scan`, `remove_guard`, `is_stale_temp_alias`,
//! `remove_temp_alias`) is the only code
//! that unlinks a guard, for `cargo xtask reclaim-guards` in a maintenance window: a guard is
//! unlinked only while held, and only if the caller, asked while it is held, says no resource
//! file needs it.
//!
//! The test seams `Guard::try_acquire_observed`, `try_acquire_seams`, `from_received_seams` and
//! `reclaim::remove_guard_seams` (a callback before the link, before the lock, after the unlink)
//! exist only with the `test-seams` feature.

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
pub use filesystem::CheckedFilesystem;
pub use guard::{GUARD_MODE, Guard, guard_path, is_held};
pub use name::{
    GUARD_SUFFIX, GUARD_TEMP_INFIX, NAME_MAX, NameProblem, RESOURCE_NAME_MAX, TOKEN_LEN,
    check_resource_name, guard_name, guard_temp_name, is_reserved,
};
pub use token::random_token;
