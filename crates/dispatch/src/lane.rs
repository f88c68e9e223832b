//! Lanes: the resource a queued attempt holds (`lane-<name>.lock`), named by the launcher or
//! of its own. A lane of its own (`q-` and 16 lowercase hex digits, made by [`own_lane`]) is
//! used once: when its attempt is over, [`retire_own_lane`] removes what it left (its record,
//! epoch file and guard), so a day of enqueues does not leave the slot directory thousands of
//! files longer for every listing.

use worklane_guard::Guard;
use worklane_guard::reclaim::{self, Removal};
use worklane_slotfile::SlotDir;

/// The lock of lane `name`.
#[must_use]
pub fn lane_lock(name: &str) -> String {
    format!("lane-{name}.lock")
}

/// Takes lane `lane`'s guard if nobody holds it (without waiting), and returns it held: the
/// lane's work is over. `None` when someone holds it, or when it cannot be looked at (no
/// valid name, a broken file at the guard's name): then nobody may assume it free.
#[must_use]
pub fn take_if_free(dir: &SlotDir, lane: &str) -> Option<Guard> {
    dir.file(&lane_lock(lane))
        .ok()
        .and_then(|path| path.try_guard().ok())
        .flatten()
}

/// Whether someone holds lane `lane`'s guard now (a probe that takes it a moment if it is
/// free). `false` when it cannot be looked at.
#[must_use]
pub fn is_held(dir: &SlotDir, lane: &str) -> bool {
    dir.file(&lane_lock(lane))
        .ok()
        .is_some_and(|path| matches!(path.try_guard(), Ok(None)))
}

/// Whether `name` can name a lane: 1 to 64 ASCII letters, digits, `-`, `_` or `.`, not
/// starting with `.`.
#[must_use]
pub fn valid_lane(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A new lane of its own: `q-` and 16 random lowercase hex digits.
#[must_use]
pub fn own_lane() -> String {
    format!("q-{}", worklane_guard::random_token())
}

/// Whether `name` has the shape of a lane of its own (`q-` and 16 lowercase hex digits). Such
/// names are reserved: a launcher that names its lane may not choose one.
#[must_use]
pub fn is_own_lane(name: &str) -> bool {
    name.strip_prefix("q-").is_some_and(|hex| {
        hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Removes what the lane of its own `lane` left once its attempt is over (its record, epoch
/// files, claims and guard: [`worklane_lease::retire`]). A guard someone holds, such as a
/// process the attempt's command left running, is left alone with everything else. Lanes of
/// other names are never touched (`Ok(None)`).
pub fn retire_own_lane(dir: &SlotDir, lane: &str) -> Result<Option<Removal>, reclaim::Error> {
    if !is_own_lane(lane) {
        return Ok(None);
    }
    worklane_lease::retire(dir, &lane_lock(lane)).map(Some)
}
