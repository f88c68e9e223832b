//! Retiring a resource that will never be taken again (a lane of its own, a waiter's place in
//! line): its files removed under its guard, then the guard's name.

use worklane_guard::reclaim::{self, Removal};
use worklane_slotfile::SlotDir;

/// Removes what resource `name` left once nobody will take it again: under its guard (taken
/// here, nonblocking, so the caller must have let its own go), its record, every epoch file
/// and any claim, then the guard's name while still held (an acquirer that opened the guard
/// meanwhile finds the name gone and opens it again, see `worklane_guard::reclaim`).
///
/// A guard someone holds is left alone with every file: [`Removal::Busy`]. A file that cannot
/// be removed leaves the guard in place: [`Removal::Needed`]. Since the name is never used
/// again, its fencing epoch has nothing left to fence; never call this for a name that may be
/// taken again.
pub fn retire(dir: &SlotDir, name: &str) -> Result<Removal, reclaim::Error> {
    reclaim::remove_guard(dir, dir.path(), name, || {
        let Ok(listed) = dir.list_prefixed(name) else {
            return false;
        };
        for path in listed {
            let file = path.name();
            let ours = file == name
                || crate::epoch::parse_epoch_name(name, file).is_some()
                || crate::claim::is_claim_of(name, file);
            if ours && path.remove().is_err() {
                return false;
            }
        }
        true
    })
}
