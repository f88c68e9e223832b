//! Where a process runs and who it is, so a lock record can be judged by proof, not by age.
//!
//! - [`Place`]: host, boot id, pid namespace and time namespace of a process; the current one
//!   is read once and cached ([`Place::current`]).
//! - [`ProcessIdentity`]: a pid and the start identity that tells it from a later process
//!   reusing the pid ([`ProcessIdentity::of`], [`ProcessIdentity::of_self`]).
//! - [`Recorded`]: the `pid`, `place` and `identity` fields of a lock record, read tolerantly
//!   ([`Field`] keeps "missing" and "malformed" apart).
//! - [`probe()`]: judges a record [`Verdict::Alive`], [`Verdict::Gone`] (with a [`GoneReason`] that
//!   proves it) or [`Verdict::Unknown`] (with an [`UnknownReason`] a person can act on).
//!
//! Linux reads `/proc` and `uname`; Darwin runs `/usr/sbin/sysctl` once and `/bin/ps` per
//! probe. The crate compiles on other Unixes too, where reading a place or an identity fails at
//! run time with `Unsupported` ([`place::Error::Unsupported`],
//! [`process::Error::Unsupported`]), so every probe there is [`Verdict::Unknown`]. Everything
//! that parses or decides is plain Rust, tested on every platform.
//!
//! # Limitations
//!
//! - A verdict is a snapshot: an [`Alive`](Verdict::Alive) process can end right after. A
//!   [`Gone`](Verdict::Gone) one never comes back: a reused pid carries another start.
//! - Records from another host, pid namespace or time namespace are
//!   [`Unknown`](Verdict::Unknown): a pid names some other process there. Judge them from
//!   where they were written.
//! - `/proc` must be the one of this process's pid namespace. With `hidepid`, processes of
//!   other users are [`Unknown`](Verdict::Unknown), never gone.
//! - Darwin start identity has one-second resolution: a pid reused within the second it was
//!   freed looks like the recorded process, and stays busy.
//! - A zombie is gone (it has exited) even though its pid stays taken until its parent reaps it.
//! - This crate knows nothing about files, locks or JSON records beyond the three fields it
//!   reads; deciding what to do with a verdict is the caller's.
//!
//! # Example
//!
//! ```
//! use worklane_identity::{GoneReason, Place, ProcessIdentity, Recorded, Verdict, probe};
//!
//! // What a holder writes into its lock record.
//! let me = Recorded::new(ProcessIdentity::of_self()?, Place::current()?.clone());
//! let json = serde_json::to_string(&me)?;
//!
//! // What a contender reads back and judges.
//! let read: Recorded = serde_json::from_str(&json)?;
//! assert_eq!(probe(&read), Verdict::Alive);
//!
//! // The same pid with another start is a later process: the recorded one is gone.
//! let mut other = ProcessIdentity::of_self()?;
//! other.start += 1;
//! let stale = Recorded::new(other, Place::current()?.clone());
//! assert!(matches!(probe(&stale), Verdict::Gone(GoneReason::PidReused { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! Where a process runs and who it is, so that a lock record is judged by proof, never by age.
//! It owns:
//!
//! - `Place {host, boot, pidns, timens}`, read once per process. The host is the `uname`
//!   nodename. Linux: `/proc/sys/kernel/random/boot_id` and the inodes of
//!   `/proc/self/ns/{pid,time}`. Darwin: `kern.bootsessionuuid` via `/usr/sbin/sysctl`, with no
//!   namespaces;
//! - `ProcessIdentity {pid, start}`. Linux: field 22 of `/proc/<pid>/stat`. Darwin: `ps`
//!   `lstart` as epoch seconds (the date checked and counted with `jiff`), from `/bin/ps -o
//!   lstart=,state=` with `LC_ALL=C TZ=UTC`;
//! - the tolerant `Recorded {pid, place, identity}` view of a record, with each field a
//!   `Field<T>`: `Missing`, `Malformed` or `Present`;
//! - `probe(&Recorded) -> Verdict`: `Alive`, `Gone(GoneReason)` or `Unknown(UnknownReason)`.
//!
//! API boundary: lease calls `probe` (in `ProcessLiveness`) and writes `Recorded::new(..)`;
//! admission reaches it only through lease; the CLI prints the reasons' `Display` text (the
//! `reason` column of `worklane slots`).
//!
//! Linux code is in `sys/linux.rs` and Darwin code in `sys/macos.rs`, with the same signatures
//! (`read_place`, `snapshot`). The parsers (`proc_stat`, `ps`, `uuid`) and the decision
//! (`probe::decide`, behind the `Observe` seam) are pure and tested on every platform; a parser's
//! `Malformed` (the part that was wrong) is the typed source of `process::Error::Malformed` and
//! `place::Error::MalformedBootId`, which name the file or program read. Other
//! platforms compile `sys/other.rs`, whose `read_place` and `snapshot` fail with
//! `place::Error::Unsupported` and `process::Error::Unsupported` (naming the platform), so every
//! probe there is `Unknown` (`PlaceUnavailable`) and nothing is ever judged gone.

#![forbid(unsafe_code)]

pub mod cgroup;
pub mod place;
pub mod process;

mod parse;
mod probe;
pub mod proc_stat;
mod ps;
mod record;
mod uuid;
mod verdict;

mod sys;

pub use crate::parse::Malformed;
pub use crate::place::Place;
pub use crate::probe::probe;
pub use crate::process::ProcessIdentity;
pub use crate::record::{Field, RecordIdentity, Recorded};
pub use crate::verdict::{GoneReason, UnknownReason, Verdict};
