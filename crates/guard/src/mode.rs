//! Permission bits, the one way every worklane crate reads and sets them: `mode_t` is 16 bits
//! on macOS and 32 on Linux, so the casts live here once. (Shared with `worklane-slotfile`,
//! which sets and reports the modes of slot files and directories.)

use rustix::fs::{Mode, RawMode, Stat};

/// The permission bits of `bits` (`& 0o7777`: setuid, setgid, sticky and rwx for all three)
/// as the platform's [`Mode`], for `openat`, `mkdirat` and `fchmod`.
#[must_use]
#[allow(clippy::unnecessary_cast)]
pub fn from_bits(bits: u32) -> Mode {
    Mode::from_bits_truncate((bits & 0o7777) as RawMode)
}

/// The permission bits of a file as `stat` gave them (`st_mode & 0o7777`, without the file
/// type), as one `u32` on every platform.
#[must_use]
#[allow(clippy::unnecessary_cast)]
pub fn of(stat: &Stat) -> u32 {
    (stat.st_mode as u32) & 0o7777
}

#[cfg(test)]
mod tests {
    #[test]
    #[allow(clippy::unnecessary_cast, reason = "`mode_t` is 16 bits on macOS")]
    fn only_the_permission_bits_are_kept() {
        assert_eq!(
            super::from_bits(0o2770).bits() as u32,
            0o2770,
            "setgid and rwx"
        );
        assert_eq!(
            super::from_bits(0o100644).bits() as u32,
            0o644,
            "a file type in the bits is dropped"
        );
    }
}
