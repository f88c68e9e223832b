//! The worklane slot directory: where it is, its config, and every write of an ordinary file
//! into it.
//!
//! - [`SlotDir::resolve`] finds the machine's directory (`$AGENT_SLOTS_DIR`, else
//!   `/var/lib/worklane/agent-slots` when it exists, else `/var/tmp/agent-slots`) and its config,
//!   and, with [`SlotDir::resolve_located`] and [`SlotDir::resolve_dir`] (the directory
//!   without its config loaded), is the only way to reach it. [`Environment`] injects variables and a root for tests.
//! - [`SlotPath`] is the only handle to a file in it: not a path, so it cannot reach `std::fs`.
//!   Through it a file is [read](SlotPath::read) (bounded, no links, no FIFOs),
//!   [replaced](SlotPath::replace) (temp + fchmod + rename), [published](SlotPath::publish)
//!   (temp + exclusive link), or [removed if unchanged](SlotPath::remove_if_unchanged).
//! - No name that is, or normalizes to, a guard or guard temp alias can become a `SlotPath`: the
//!   guard inodes belong to `worklane-guard` alone.
//! - In a test run (see [`Environment::test_run`]) any directory outside the test's temporary
//!   root is refused before it is opened, so a test can never touch the machine's real slots.
//! - The directory belongs to root and the caller: it is reached by walking its path from `/`
//!   without following a link in any form at its end, and refused ([`open::Error::Unsafe`] and
//!   its siblings) when it, a directory or a link on the way, could be changed by another user.
//!   A directory worklane creates is setgid 2770 ([`DIR_MODE`]), and every file written is given
//!   the directory's group, so every member of that group reads and replaces every file.
//!
//! # Limitations
//!
//! - Writes survive a killed process (the old file or the new, never a mix) but are not
//!   fsynced: after a power loss a just-written file may be empty, and its reader reports it
//!   as malformed rather than guessing.
//! - A crash between creating a temp file and renaming or linking it leaves a hidden
//!   `.{name}.tmp-{random}` file. It blocks nothing (temp names are random, never pid-based),
//!   and [`SlotDir::sweep_temps`] removes it once it is a minute old: a writer holds its temp
//!   file's `flock` until the rename or link, so a temp whose lock is free is a dead writer's.
//! - Remove-if-unchanged compares then unlinks; it is atomic only among processes that hold the
//!   file's guard around it.
//! - Giving a file the directory's group is best effort: a writer outside that group keeps its
//!   own. On platforms without `O_PATH` (macOS) every parent of the directory must be readable
//!   by the caller, as each is opened for reading to be walked.
//!
//! # Example
//!
//! ```
//! use worklane_slotfile::{Environment, Publish, RECORD_MODE, SlotDir};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let temp = tempfile::tempdir()?;
//! let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path().join("slots"));
//! let slots = SlotDir::resolve_in(&env)?;
//! assert_eq!(slots.config.max_agents, 2, "embedded default cap");
//!
//! let lock = slots.dir.file("agent-0.lock")?;
//! assert_eq!(lock.publish(br#"{"pid":1}"#, RECORD_MODE)?, Publish::Published);
//! assert_eq!(lock.publish(br#"{"pid":2}"#, RECORD_MODE)?, Publish::AlreadyExists);
//! assert_eq!(lock.read()?.as_deref(), Some(&br#"{"pid":1}"#[..]));
//! assert!(slots.dir.file(".agent-0.lock.flock").is_err(), "guards are not slot files");
//! # Ok(()) }
//! ```

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
mod dir;
mod env;
mod list;
pub mod name;
pub mod open;
mod path;
pub mod read;
mod sweep;
mod walk;

pub use config::{
    AGENTS_RANGE, Config, DEFAULT_MAX_AGENTS, DEFAULT_MAX_TEST_RUNS, TEST_RUNS_RANGE,
};
pub use dir::{Located, Resolved, SlotDir, resolved};
pub use env::{
    DEFAULT_SLOTS_DIR, Environment, Layout, Locations, SLOTS_CONFIG_VAR, SLOTS_DIR_VAR,
    SYSTEM_CONFIG, SYSTEM_SLOTS_DIR, SYSTEM_STATE_DIR, TEST_ROOT_VAR, TestRun, TestSignal, resolve,
};
#[cfg(feature = "test-seams")]
pub use path::Step;
pub use path::{Publish, RECORD_MODE, Removal, SHARED_MODE, SlotPath, remove, write};
pub use read::{MAX_READ, Written};
pub use sweep::{Hidden, Swept, TEMP_MIN_AGE_MS, is_temp_name};
pub use walk::{DIR_MODE, MAX_LINKS};
