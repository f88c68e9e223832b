//! The event journal of a worklane slot directory: what happened on the machine, one JSON
//! line per state change, appended by every process that changes something.
//!
//! - [`Event`] is the schema (slot taken, released, refused, waiting; takeover; halt by STOP;
//!   STOP, resume, drain, undrain; role lease taken, refused, lost; the dispatcher's enqueue,
//!   admission, claim, expiry, recovery and cancel; budget pause and refusal; a broken file),
//!   and [`Entry`] one line: [`VERSION`], time, writer's pid, events it had to drop, the event.
//! - [`emit`] (or a [`Journal`] handle, [`Journal::of`]) appends one: each line is a single
//!   `write(2)` of at most [`MAX_LINE`] bytes on an `O_APPEND` descriptor, so lines of
//!   concurrent writers never interleave. It never fails and never waits on another
//!   process: an event it cannot append is dropped and counted, and the count rides on the
//!   writer's next line that goes through.
//! - The journal is [`CURRENT`] and, after a rotation, [`PREVIOUS`]: when a line would take
//!   the current file past half the cap ([`Journal::set_max_bytes`], the config's
//!   `journal_max_bytes`, 16 MiB by default), it is renamed over the previous one under its
//!   guard, so the two together stay under the cap. Both are mode 0660 with the directory's
//!   group: every member appends and reads.
//! - [`read()`] reads both files in order; [`Follow`] follows them as they grow, woken by
//!   inotify, across rotations. A line a killed writer tore is skipped and counted
//!   ([`Batch::skipped`]); the line after it is kept. A whole line whose field has the wrong
//!   type is counted apart ([`Batch::mistyped`]); a `null` field is read as not known.
//!
//! PROTOCOL.md ("The event journal") says all of it for a harness in any language.
//!
//! # Limitations
//!
//! - Appends are not fsynced: a power loss may lose the last lines. The journal says what
//!   happened; the slot files say what is.
//! - A writer SIGKILLed in the middle of its `write(2)` leaves a fragment of its line: readers
//!   skip it and count it. A line being written at the instant of a read looks the same, and
//!   is read whole by the next read.
//! - A writer that looked at the current file just before a rotation appends its line to the
//!   file renamed away (read as the previous file); if two rotations pass between its look and
//!   its write, that line is lost, uncounted, or (written again when the writer finds its file
//!   gone, after a rotation had tallied it) counted twice by the totals. A follower reads the renamed file to its end
//!   before it moves on, but not lines appended to it after that.
//! - The count of dropped events lives in the writing process: a process that never appends
//!   again (a journal it may never write) takes its count with it (it says so once, as a
//!   warning). A process that never read the config rotates at the default cap.
//! - The time of an event is the wall clock of its writer, read before the write: lines of
//!   concurrent writers may be a few milliseconds out of order.
//! - Following wakes on inotify on Linux; elsewhere it looks every [`LOOK_EVERY`].
//!
//! # Example
//!
//! ```
//! use worklane_journal::{Event, Journal, read};
//! use worklane_slotfile::SlotDir;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let temp = tempfile::tempdir()?;
//! let dir = SlotDir::open(temp.path())?;
//! let journal = Journal::of(&dir);
//! journal.emit(Event::Stop { by: "alice@build1".into(), reason: "maintenance".into() });
//! journal.emit(Event::Resume { by: "alice@build1".into(), reason: "maintenance".into() });
//!
//! let batch = read(&dir)?;
//! let kinds: Vec<&str> = batch.entries.iter().map(|e| e.event.kind()).collect();
//! assert_eq!(kinds, ["stop", "resume"]);
//! assert_eq!(batch.skipped, 0);
//! assert_eq!(batch.entries[0].pid, std::process::id());
//! # Ok(()) }
//! ```
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! - `event.rs`: the schema (`serde`, `kind` as the tag, every field always written).
//! - `line.rs`: the line's encoding (cut to [`MAX_LINE`] by shortening strings over 256 bytes,
//!   else dropped) and decoding (a line that does not parse is searched for [`MARKER`], the
//!   bytes every line begins with and no line holds elsewhere, to keep the event after a torn
//!   fragment; `null` fields read as not known, a wrong type counted apart).
//! - `journal.rs`: [`Journal`], one per directory per process (a registry of weak handles by
//!   path), its cap, its count of dropped events, the [`emit`] libraries call.
//! - `clock.rs`: the time stamp ([`time_of_ms`], [`ms_of_time`]), used by the append and by
//!   the rotation's `totals` line.
//! - `append.rs`: per event, `statat` of [`CURRENT`] (its inode and size), a reopen when the
//!   inode is not the one held, the rotation when due, one `write(2)`. The current file is
//!   created by slotfile's publish (temp file, mode and group set, link), so it never appears
//!   without its mode; rotation takes the current file's guard without waiting (busy: someone
//!   else rotates), checks the size again under it, renames, publishes the new file holding
//!   one `totals` line: what the current file carried plus the tally of the previous file,
//!   which the rotation drops. A writer that finds no current file publishes it under the same
//!   guard; busy, with a previous file there, it appends to that one (a rotation is between
//!   its rename and its publish, which must keep the name for its `totals` line).
//! - `tally.rs`: [`tally::Tally`], what events add up to (takeovers, halts, dropped, waits and
//!   holds in histograms), carried across rotations; [`tally::total`] is what a reader of
//!   both files counts, what `worklane metrics` exposes.
//! - `words.rs`: an entry as a line for a person ([`Entry::describe`], [`Event::what`]), as
//!   `worklane events` and `worklane top` show it.
//! - `read.rs`: [`Lines`] splits bytes into lines across reads; [`read()`] opens both files
//!   (the previous one checked again after the current one is opened, against a rotation
//!   between the opens).
//! - `follow.rs`: [`Follow`], inotify on the directory (`IN_MODIFY`, created, renamed), the
//!   current file held by descriptor and compared by inode after each read.
//!
//! Only slotfile touches the directory: the journal's files are published, renamed, opened
//! for appending and opened for reading through `SlotPath`, and the lock is the file's guard.

#![deny(unsafe_code)]
#![deny(missing_docs)]

mod append;
mod clock;
mod event;
mod follow;
mod journal;
mod line;
mod names;
mod read;
pub mod tally;
#[cfg(test)]
mod testing;
mod words;

pub use clock::{ms_of_time, time_of_ms};
pub use event::{Entry, Event, KINDS, MARKER, MAX_LINE, VERSION};
pub use follow::{Follow, LOOK_EVERY};
pub use journal::{Journal, emit};
pub use names::{CURRENT, PREVIOUS};
pub use read::{Batch, Lines, error, read};
