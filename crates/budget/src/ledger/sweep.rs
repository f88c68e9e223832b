//! The cleanup of stale budget states: a state file unchanged for [`STALE_MS`] is removed
//! under its lock, only if its bytes did not change, by the next take of any budget, at most
//! every [`SWEEP_EVERY_MS`] per process.

use super::{Ledger, STALE_MS, SWEEP_EVERY_MS};
use std::sync::Mutex;
use worklane_slotfile::SlotPath;

/// When this process last swept for stale state files (whichever ledger did it).
static LAST_SWEEP: Mutex<Option<u64>> = Mutex::new(None);

impl Ledger {
    /// Sweeps for stale state files if this process has not for [`SWEEP_EVERY_MS`].
    pub(super) fn sweep_if_due(&self) {
        let now = self.clock.now_ms();
        {
            let mut last = LAST_SWEEP
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // A clock now behind the last sweep (set back) sweeps rather than waits.
            if last.is_some_and(|at| now >= at && now - at < SWEEP_EVERY_MS) {
                return;
            }
            *last = Some(now);
        }
        let _ = self.remove_stale();
    }

    /// Removes every budget state file unchanged for more than [`STALE_MS`], each under its
    /// lock (tried once: a busy budget is in use) and only if its bytes did not change.
    /// Returns how many were removed. [`Ledger::take`] calls this at most every
    /// [`SWEEP_EVERY_MS`] per process.
    pub fn remove_stale(&self) -> Result<usize, worklane_slotfile::open::Error> {
        let now = self.clock.now_ms();
        let mut removed = 0;
        for path in self.dir.list()? {
            let Some((provider, key)) = crate::key::parse_state_name(path.name()) else {
                continue;
            };
            if !unchanged_for(&path, now) {
                continue;
            }
            let Ok(lease) = self.lock(&key.lock_name_of(&provider), 0) else {
                continue;
            };
            if unchanged_for(&path, now)
                && let Ok(Some(bytes)) = path.read()
                && matches!(
                    path.remove_if_unchanged(&bytes),
                    Ok(worklane_slotfile::Removal::Removed)
                )
            {
                removed += 1;
            }
            let _ = lease.release();
        }
        Ok(removed)
    }
}

/// Whether `path` exists and last changed more than [`STALE_MS`] before `now`.
fn unchanged_for(path: &SlotPath, now: u64) -> bool {
    matches!(path.modified_ms(), Ok(Some(at)) if now.saturating_sub(at) > STALE_MS)
}
