//! Permission bits as the platform's `Mode`.

use rustix::fs::Mode;

/// Permission bits (`& 0o7777`) as the platform's `Mode`.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn mode(bits: u32) -> Mode {
    Mode::from_bits_truncate((bits & 0o7777) as rustix::fs::RawMode)
}
