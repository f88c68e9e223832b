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
//! - A file appended to as a stream (the event journal) is opened for appending or reading
//!   through the same handle ([`SlotPath::open_append`], [`SlotPath::open_stream`],
//!   [`SlotPath::meta`]): never created by its name, never through a link.
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
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! Owns where the slot directory and config are (`Environment::locate` returns
//! `Locations {slot_dir, config, drain_dir, layout}`), the test-isolation rule,
//! `Config {max_agents, max_test_runs, shares}` (parsed with a check for keys written twice, which
//! `serde_json` would silently resolve to the last), the opened `SlotDir` (a held descriptor,
//! `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`, and the directory's gid from `fstat`), and `SlotPath`,
//! the only handle to a file in it. `walk.rs` opens the directory (PROTOCOL.md section 1,
//! "Ownership"): the path is walked from `/` component by component with `openat(O_NOFOLLOW |
//! O_DIRECTORY)` relative to the parent's descriptor (`O_PATH` for parents on Linux, `O_RDONLY`
//! elsewhere), each directory checked by `fstat` on its descriptor (owner root or the effective
//! uid; not writable by others unless sticky; group-writable and not sticky only with the slot
//! directory's group, checked once that is open), links on the way followed only when root's or
//! the caller's (read with `readlinkat`, at most `MAX_LINKS` 40, `..` in a target popping the stack
//! of opened parents), the last component never followed, a `..` in the given path refused. A
//! missing directory (outside the `/var/lib` layout) is created by `mkdirat` 0700 relative to the
//! verified parent, opened, and if ours `fchmod` 2770 (`DIR_MODE`, setgid); a created directory
//! that is then refused is removed again. Every refusal is `open::Error::Unsafe {path, at, owner,
//! group, mode, caller, problem}` (`open::Problem`) or a link/`..`/missing variant. The file
//! operations:
//!
//! - `read`: regular files only, no symbolic link followed, never blocks on a FIFO, at most
//!   `MAX_READ` bytes;
//! - `read_with_owner()`: the same read, with the file's owner uid from the same open file;
//! - `replace(bytes, mode)`: temp `.{name}.tmp-<16 hex>` created `O_EXCL | O_NOFOLLOW | O_CLOEXEC`
//!   at 0600 and `flock`ed (held until the rename or link, so a temp whose lock is free is a dead
//!   writer's), `fchown` to the directory's group when `fstat` shows another (best effort: `EPERM`
//!   for a writer outside the group is ignored), `fchmod` to `mode`, write, `renameat`;
//! - `rewrite(bytes, mode)` (lock records: pulses, the command's pid, adoption, the dispatcher's
//!   run-queue entries): the same temp, exchanged with the file on Linux
//!   (`renameat2(RENAME_EXCHANGE)`) and the temp name, now the old bytes, unlinked; `renameat`
//!   where there is no file or no exchange. ext4 writes a file's data back at once when it is
//!   renamed over one with data, and the release's unlink then waits for that I/O: records,
//!   stale after any reboot, need no such flush (PROTOCOL.md section 4);
//! - `publish(bytes, mode)`: the same temp, then `linkat`: `Publish::{Published, AlreadyExists}`;
//!   the temp is removed on every path;
//! - `remove_if_unchanged(expected)` (`Removal::{Removed, Changed, Absent}`; reads at most
//!   `expected.len() + 1` bytes, no `fstat`), `remove()`, `remove_entry()` (any file, or an empty
//!   directory: what an operator's STOP or drain flag may be; a directory with entries stays),
//!   `rename(new_name)` (one `renameat`, for
//!   the epoch markers), `modified_ms()` (the mtime by `statat` without following a link; a
//!   non-regular file is refused), `try_guard()`. `SlotDir::list()` and `list_prefixed(prefix)` skip guards,
//!   temp files, non-UTF-8 names and names that are not valid slot names, through one directory
//!   stream kept open and rewound. `sweep.rs`: `hidden()` (guards, aliases and temps with type,
//!   size and mtime, for reports) and `sweep_temps(now, min_age)`, which removes temp files
//!   older than `TEMP_MIN_AGE_MS` whose lock it can take (re-checking the inode) and, through
//!   `worklane_guard::reclaim`, guard temp aliases of that age.
//!
//! API boundary: `SlotDir::resolve()` returns `Resolved {dir, locations, config, env}`;
//! `SlotDir::resolve_located()` resolves and opens the same directory without loading the config
//! (`Located {dir, locations, env}`: what STOP, the drain and the views need, so that a broken
//! config cannot silence them), and `SlotDir::resolve_dir()` the directory alone (for the budget
//! ledger, which must not fail over a cap); these three are the only ways to reach the
//! machine's directory; `config::Error::path()` names the config file of any config error; `SlotDir::open(path)` opens an explicit one;
//! `resolve_in` and `open_in` take an injected `Environment` (variables, root, executable, temp
//! directory), and `Config::load_in` and `read::read_path_in` apply its test-isolation rule to
//! later reads.
//! Errors are named by operation: `resolve::Error`, `open::Error`, `resolved::Error`,
//! `name::Error`, `write::Error`, `remove::Error`, `config::Error`, `read::Error`.
//! `replace_observed` and `publish_observed` (with `Step::TempWritten`) are the crash-test seam,
//! present only with the `test-seams` feature.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
mod dir;
mod env;
mod list;
pub mod name;
pub mod open;
mod path;
pub mod private;
pub mod read;
mod stream;
mod sweep;
mod walk;

pub use config::{
    AGENTS_RANGE, Config, DEFAULT_JOURNAL_MAX_BYTES, DEFAULT_MAX_AGENTS, DEFAULT_MAX_TEST_RUNS,
    JOURNAL_BYTES_RANGE, ShareKey, Shares, TEST_RUNS_RANGE,
};
pub use dir::{Located, Resolved, SlotDir, resolved};
pub use env::{
    DEFAULT_SLOTS_DIR, Environment, Layout, Locations, SLOTS_CONFIG_VAR, SLOTS_DIR_VAR,
    SYSTEM_CONFIG, SYSTEM_SLOTS_DIR, SYSTEM_STATE_DIR, TEST_ROOT_VAR, TestRun, TestSignal, resolve,
};
#[cfg(feature = "test-seams")]
pub use path::Step;
pub use path::{Publish, RECORD_MODE, Removal, SHARED_MODE, SlotPath, remove, write};
pub use private::{PRIVATE_DIR_MODE, PrivateDir};
pub use read::{MAX_READ, Written};
pub use stream::{Meta, meta_of_fd};
pub use sweep::{Hidden, Swept, TEMP_MIN_AGE_MS, is_temp_name};
pub use walk::{DIR_MODE, MAX_LINKS};
