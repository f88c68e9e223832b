//! The run-queue status view: one JSON entry per queued lane in the slot directory,
//! `queue-<lane>.json`, replaced whole through `SlotPath`, naming the dispatcher's pid and
//! heartbeat, the attempt and its state. Tools that watch the run queue read it to see who
//! keeps the wait; it is a view, never the queue's truth (that is the database).

use super::wire::AttemptView;
use serde::Serialize;
use worklane_lease::rfc3339_ms;
use worklane_slotfile::{SlotDir, name, remove, write};

/// The entry's file name for lane `lane`.
#[must_use]
pub fn entry_name(lane: &str) -> String {
    format!("queue-{lane}.json")
}

/// The dispatcher as an entry names it.
#[derive(Debug, Clone, Serialize)]
struct Keeper {
    pid: u32,
    heartbeat: String,
}

/// One entry (schema version 1).
#[derive(Debug, Clone, Serialize)]
struct Entry<'a> {
    version: u32,
    lane: &'a str,
    attempt: &'a str,
    state: &'a str,
    start: String,
    priority: i64,
    stage: &'a str,
    placement: &'a str,
    since: String,
    slot: Option<&'a str>,
    dispatcher: Keeper,
}

/// Why an entry could not be written or removed. Each variant names the step and the lane;
/// the slot-file layer's cause is its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lane's entry name is not a valid file name.
    #[error("cannot name the run-queue entry of lane {lane}")]
    Name {
        /// The lane.
        lane: String,
        /// Why.
        #[source]
        source: name::Error,
    },
    /// The entry could not be written.
    #[error("cannot write the run-queue entry of lane {lane}")]
    Write {
        /// The lane.
        lane: String,
        /// Why.
        #[source]
        source: write::Error,
    },
    /// The entry could not be removed.
    #[error("cannot remove the run-queue entry of lane {lane}")]
    Remove {
        /// The lane.
        lane: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<remove::Error>,
    },
}

/// The entry of `lane` in `dir`, or why its name is refused.
fn entry_path(dir: &SlotDir, lane: &str) -> Result<worklane_slotfile::SlotPath, Error> {
    dir.file(&entry_name(lane)).map_err(|source| Error::Name {
        lane: lane.to_owned(),
        source,
    })
}

/// Writes (replaces) the entry of `attempt`, kept by dispatcher `pid` at `now_ms`.
pub fn write_entry(
    dir: &SlotDir,
    attempt: &AttemptView,
    pid: u32,
    now_ms: u64,
) -> Result<(), Error> {
    let entry = Entry {
        version: 1,
        lane: &attempt.lane,
        attempt: &attempt.attempt,
        state: &attempt.state,
        start: rfc3339_ms(attempt.start_ms),
        priority: attempt.priority,
        stage: &attempt.stage,
        placement: &attempt.placement,
        since: rfc3339_ms(attempt.state_at_ms),
        slot: attempt.slot.as_deref(),
        dispatcher: Keeper {
            pid,
            heartbeat: rfc3339_ms(now_ms),
        },
    };
    let mut bytes = serde_json::to_vec(&entry).unwrap_or_default();
    bytes.push(b'\n');
    entry_path(dir, &attempt.lane)?
        .rewrite(&bytes, worklane_slotfile::RECORD_MODE)
        .map_err(|source| Error::Write {
            lane: attempt.lane.clone(),
            source,
        })?;
    Ok(())
}

/// Removes the entry of lane `lane` (claimed, cancelled or dropped).
pub fn remove_entry(dir: &SlotDir, lane: &str) -> Result<(), Error> {
    entry_path(dir, lane)?
        .remove()
        .map_err(|source| Error::Remove {
            lane: lane.to_owned(),
            source: Box::new(source),
        })?;
    Ok(())
}
