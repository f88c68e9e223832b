//! Taking a resource's guard as its liveness holds it.

use crate::liveness::GuardHold;
use crate::retry::Backoff;
use std::time::Duration;
use worklane_guard::Guard;
use worklane_slotfile::SlotPath;

/// How often a contender retries a guard that is held only while a record changes.
const BRIEF_GUARD_TRIES: u32 = 200;
const BRIEF_GUARD_PAUSE: Duration = Duration::from_micros(500);

/// Takes `path`'s guard: once under [`GuardHold::ForLife`] (busy means a live holder), or
/// retried for about 100 ms under [`GuardHold::WhileChanging`] (busy means someone is in the
/// middle of a change, which takes microseconds).
pub(crate) fn take_guard(
    path: &SlotPath,
    hold: GuardHold,
) -> Result<Option<Guard>, worklane_guard::acquire::Error> {
    let retries = match hold {
        GuardHold::ForLife => 0,
        GuardHold::WhileChanging => BRIEF_GUARD_TRIES - 1,
    };
    let mut backoff = Backoff::new(BRIEF_GUARD_PAUSE).retries(retries);
    loop {
        if let Some(guard) = path.try_guard()? {
            return Ok(Some(guard));
        }
        let Some(pause) = backoff.next() else {
            return Ok(None);
        };
        std::thread::sleep(pause);
    }
}
