//! Test support for worklane's own test binaries. Not published; a dev-dependency only.
//!
//! Each test binary runs its tests on several threads of one process. When one of them starts
//! a child, the child is a copy of the whole process until it execs: it holds a duplicate of
//! every descriptor, close-on-exec ones included, and with a duplicate of a guard it holds the
//! guard's `flock` (the lock belongs to the open file description). A test that releases a
//! guard and then expects another process, or its own next acquisition, to find it free fails
//! whenever another test's child is between fork and exec at that moment.
//!
//! - [`gate`] closes that window. Every start of a process goes through it
//!   ([`Gated::spawn_gated`], [`Gated::output_gated`], [`Gated::status_gated`]; clippy refuses
//!   `Command::spawn`, `output` and `status` elsewhere), and a release that must be seen
//!   goes through [`gate::quiet`], [`gate::quietly`] or [`gate::QuietDrop`]: the two never
//!   overlap, and a start returns only once its child's close-on-exec copies are closed.
//! - [`Child`] is a started child that is SIGKILLed and reaped when dropped, so a failing
//!   test leaves no process behind.
//! - [`Scope`] marks every process a test starts, its descendants included, and SIGKILLs
//!   whatever still carries the mark when the scope ends: for tests whose processes leave
//!   their group or session on purpose.
//!
//! # Limitations
//!
//! - The gate covers the threads of one test binary that use it. A library call that starts a
//!   process inside a test binary must be made through it too (none does on Linux today).
//! - The proof that a child closed its copies relies on the kernel closing close-on-exec
//!   descriptors in ascending order during `execve` (it does), and on the test process
//!   having fewer than about a thousand descriptors open.
//! - [`Scope`] finds processes by an environment variable; a process that clears its
//!   environment before it starts another escapes it.
//!
//! # Example
//!
//! ```
//! use std::process::Command;
//! use worklane_testkit::{Gated, gate};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("lock");
//! let file = std::fs::File::create(&path).unwrap();
//! rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
//! // Released while no other thread of this process is between fork and exec:
//! gate::quietly(|| drop(file));
//! let free = Command::new("flock").arg("-n").arg(&path).arg("true").status_gated().unwrap();
//! assert!(free.success(), "another process finds the lock free");
//! ```
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! Test support for the workspace's own test binaries. `gate` is the fork gate: a process-wide
//! `RwLock` that starting a process takes shared (`Gated::spawn_gated` / `output_gated` /
//! `status_gated` on `Command`) and a release that must be seen takes exclusively (`quiet()`,
//! `quietly(..)`, `QuietDrop<T>`, which drops or `end`s its value quietly). A start returns only
//! once its child has closed its copies of the process's descriptors: it opens a close-on-exec
//! canary pipe whose write end has the highest descriptor number and reads it to end-of-file
//! (`execve` closes close-on-exec descriptors in ascending order; `Command::spawn` alone returns a
//! moment too early under `posix_spawn`). The quiet thread may itself start processes. `Child`
//! (what `spawn_gated` returns) is SIGKILLed and reaped when dropped unwaited. `Scope` (Linux)
//! marks commands with `WORKLANE_TEST_SCOPE=<unique>` and, when it ends, SIGKILLs (through a
//! pidfd, after re-checking the mark) every live process carrying the mark, until none is left.
//! `WORKLANE_TEST_FORK_STORM=MS[xN]` starts N threads (4) that keep starting children lingering
//! MS ms between fork and exec, to flush out a release that should have been quiet.

#![deny(unsafe_code)]
#![deny(missing_docs)]

mod child;
pub mod etcd;
pub mod gate;
#[cfg(target_os = "linux")]
mod scope;
mod storm;
pub mod subject;

pub use child::Child;
pub use gate::Gated;
#[cfg(target_os = "linux")]
pub use scope::{SCOPE_VAR, Scope};
