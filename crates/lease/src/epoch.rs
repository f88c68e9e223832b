//! The fencing epoch of a resource: `<lock>.epoch`, a decimal number that only grows.
//!
//! Each successful acquisition or takeover advances it under the resource's guard before its
//! record is published, and writes the new value into the record. A protected effect that
//! remembers the highest epoch it has seen can refuse a holder that was since replaced. The
//! file survives release and crashes; a crash after advancing it only leaves a gap.

use crate::acquire::Error;
use worklane_slotfile::{SHARED_MODE, SlotPath};

/// The epoch file's name for the lock `lock`.
#[must_use]
pub fn epoch_name(lock: &str) -> String {
    format!("{lock}.epoch")
}

/// Reads the current epoch of `lock` (0 when none was ever taken).
pub fn current(lock: &SlotPath) -> Result<u64, Error> {
    let file = lock.dir().file(&epoch_name(lock.name()))?;
    match file.read()? {
        None => Ok(0),
        Some(raw) => {
            let text = String::from_utf8_lossy(&raw);
            text.trim().parse().map_err(|_| Error::Epoch {
                path: file.dir().path().join(file.name()).display().to_string(),
                found: text.into_owned(),
            })
        }
    }
}

/// Advances the epoch of `lock` by one and returns the new value. Must run under the guard.
pub(crate) fn advance(lock: &SlotPath) -> Result<u64, Error> {
    let next = current(lock)?.saturating_add(1);
    let file = lock.dir().file(&epoch_name(lock.name()))?;
    file.replace(format!("{next}\n").as_bytes(), SHARED_MODE)?;
    Ok(next)
}
