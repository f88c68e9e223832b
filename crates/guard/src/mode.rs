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

    #[test]
    fn a_stat_s_mode_is_its_permission_bits_without_the_file_type() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("f");
        std::fs::write(&file, b"").expect("a file");
        for bits in [0o2750, 0o640, 0o4711, 0o1777] {
            rustix::fs::chmod(&file, super::from_bits(bits)).expect("chmod");
            let stat = rustix::fs::stat(&file).expect("stat");
            assert_eq!(super::of(&stat), bits, "{bits:o} of a regular file");
        }
        rustix::fs::chmod(dir.path(), super::from_bits(0o2710)).expect("chmod the directory");
        let stat = rustix::fs::stat(dir.path()).expect("stat the directory");
        assert_eq!(
            super::of(&stat),
            0o2710,
            "a directory's type bits are not among its permission bits"
        );
    }
}
