//! The emergency STOP file: `{"by", "at", "reason"}` in the slot directory.

use crate::error::operator;
use serde::{Deserialize, Serialize};
use worklane_journal::{Event, Journal};
use worklane_slotfile::{SHARED_MODE, SlotDir};

/// The STOP file's name.
pub const STOP_FILE: &str = "STOP";

/// An emergency stop in force. While the file exists every harness halts its agents and takes
/// no new slot, whatever the file holds: an unreadable STOP is still a STOP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop {
    /// Who wrote it.
    #[serde(default)]
    pub by: String,
    /// When, RFC 3339 UTC.
    #[serde(default)]
    pub at: String,
    /// Why, in the operator's words.
    #[serde(default)]
    pub reason: String,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "STOP by {} at {}",
            or_unknown(&self.by),
            or_unknown(&self.at)
        )?;
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        Ok(())
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "(unknown)" } else { s }
}

/// Reads STOP: `Ok(None)` when there is none. A STOP that is not valid JSON is reported with
/// its reason saying so; it is in force all the same.
pub fn read(dir: &SlotDir) -> Result<Option<Stop>, crate::look::Error> {
    let file = crate::names::file_in(dir, STOP_FILE)?;
    Ok(match file.read() {
        Ok(None) => None,
        Ok(Some(raw)) => Some(serde_json::from_slice(&raw).unwrap_or_else(|e| Stop {
            by: String::new(),
            at: String::new(),
            reason: format!("(STOP file is not valid JSON: {e})"),
        })),
        // Something is at the name (a link, a FIFO, a huge file): treat it as a STOP.
        Err(e) => Some(Stop {
            by: String::new(),
            at: String::new(),
            reason: format!("(STOP file unreadable: {e})"),
        }),
    })
}

/// Writes STOP (replacing any earlier one, whatever file it is; an empty directory at its name
/// is removed first). A directory with entries in it cannot be replaced (`WriteStop`): it is
/// a STOP in force all the same, as [`read`] says.
pub fn write(dir: &SlotDir, stop: &Stop) -> Result<(), operator::Error> {
    let mut bytes = serde_json::to_vec(stop).unwrap_or_default();
    bytes.push(b'\n');
    let file = crate::names::file_in(dir, STOP_FILE)?;
    crate::names::replace_over_empty_dir(&file, &bytes, SHARED_MODE).map_err(|source| {
        operator::Error::WriteStop {
            dir: dir.path().to_owned(),
            source,
        }
    })?;
    Journal::of(dir).emit(Event::Stop {
        by: stop.by.clone(),
        reason: stop.reason.clone(),
    });
    Ok(())
}

/// Removes STOP, whatever file it is, or an empty directory at its name; `Ok(false)` when
/// there was none. A directory with entries in it is left (`RemoveStop`): look inside first.
pub fn remove(dir: &SlotDir) -> Result<bool, operator::Error> {
    // What is lifted, for the journal: read before it goes.
    let lifted = read(dir).ok().flatten();
    let removed = crate::names::file_in(dir, STOP_FILE)?
        .remove_entry()
        .map_err(|source| operator::Error::RemoveStop {
            dir: dir.path().to_owned(),
            source: Box::new(source),
        })?;
    if removed {
        let lifted = lifted.unwrap_or(Stop {
            by: String::new(),
            at: String::new(),
            reason: String::new(),
        });
        Journal::of(dir).emit(Event::Resume {
            by: lifted.by,
            reason: lifted.reason,
        });
    }
    Ok(removed)
}
