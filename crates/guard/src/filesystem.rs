//! Which filesystems a guard may live on.
//!
//! `flock` is only an exclusion primitive where the kernel implements it locally. Network
//! filesystems emulate it (or not) per server, FUSE depends on the daemon, and overlayfs locks
//! the upper inode of one container's view. So a guard is accepted only on a short list of
//! local filesystems, decided from `fstatfs` on the guard's own descriptor. The tables are plain
//! functions so every platform's tests run them.

/// A filesystem a guard may live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// Short name of the filesystem, for messages.
    pub name: &'static str,
}

/// A filesystem a guard must not live on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{name} filesystem does not give local kernel flock semantics; keep the slot directory on a local ext2/3/4, XFS, Btrfs or tmpfs (Linux) or APFS/HFS+ (macOS) filesystem"
)]
pub struct Refused {
    /// Name of the filesystem (or a description of an unknown one), for messages.
    pub name: String,
}

/// Classifies the filesystem holding the open file or directory `fd`, by `fstatfs(2)`.
///
/// The outer error is the system call's; the inner result is the verdict.
pub fn of(fd: impl rustix::fd::AsFd) -> std::io::Result<Result<Accepted, Refused>> {
    crate::sys::filesystem_of(fd.as_fd())
}

/// A directory's filesystem, accepted once by [`CheckedFilesystem::of`]: a guard opened on
/// the same device is on the same filesystem, so [`crate::Guard::try_acquire_on`] skips its
/// own `fstatfs` (one system call of the six an acquisition makes). A guard on any other device
/// (a file mounted over a guard's name) is checked as before.
///
/// It stands for the device only while the directory it was made from stays open: an open
/// descriptor keeps its filesystem alive (even unmounted lazily), so its device number cannot
/// be given to another filesystem meanwhile. Keep it beside that descriptor (as a slot
/// directory does) and drop both together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedFilesystem {
    pub(crate) dev: u64,
}

impl CheckedFilesystem {
    /// Checks the filesystem of the open directory `dir` (`fstat` and `fstatfs`): `Some` when
    /// guards may live on it, `None` when not (each guard is then refused with the reason, as
    /// without this check).
    pub fn of(dir: impl rustix::fd::AsFd) -> std::io::Result<Option<CheckedFilesystem>> {
        let stat = rustix::fs::fstat(&dir)?;
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let dev = stat.st_dev as u64;
        Ok(of(&dir)?.is_ok().then_some(CheckedFilesystem { dev }))
    }

    /// Whether the file `id` is on this filesystem.
    pub(crate) fn covers(self, id: crate::FileId) -> bool {
        id.dev == self.dev
    }
}

/// Linux `statfs.f_type` magic numbers (from `linux/magic.h`).
mod magic {
    pub(super) const EXT234: i64 = 0xEF53;
    pub(super) const XFS: i64 = 0x5846_5342;
    pub(super) const BTRFS: i64 = 0x9123_683E;
    pub(super) const TMPFS: i64 = 0x0102_1994;
    pub(super) const NFS: i64 = 0x6969;
    pub(super) const CIFS: i64 = 0xFF53_4D42;
    pub(super) const SMB2: i64 = 0xFE53_4D42;
    pub(super) const SMB: i64 = 0x517B;
    pub(super) const FUSE: i64 = 0x6573_5546;
    pub(super) const OVERLAYFS: i64 = 0x794C_7630;
    pub(super) const V9FS: i64 = 0x0102_1997;
    pub(super) const CEPH: i64 = 0x00C3_6400;
    pub(super) const AFS: i64 = 0x5346_414F;
    pub(super) const CODA: i64 = 0x7375_7245;
    pub(super) const NCP: i64 = 0x564C;
    pub(super) const ECRYPTFS: i64 = 0xF15F;
    pub(super) const SQUASHFS: i64 = 0x7371_7368;
    pub(super) const PROC: i64 = 0x9FA0;
}

/// Classifies a Linux `statfs.f_type`.
///
/// The kernel reports `f_type` as a signed word on some architectures, so the value is compared
/// as its low 32 bits.
pub fn classify_linux(f_type: i64) -> Result<Accepted, Refused> {
    let f_type = f_type & 0xFFFF_FFFF;
    let accepted = |name| Ok(Accepted { name });
    let refused = |name: &str| {
        Err(Refused {
            name: name.to_owned(),
        })
    };
    match f_type {
        magic::EXT234 => accepted("ext2/3/4"),
        magic::XFS => accepted("xfs"),
        magic::BTRFS => accepted("btrfs"),
        magic::TMPFS => accepted("tmpfs"),
        magic::NFS => refused("nfs"),
        magic::CIFS => refused("cifs"),
        magic::SMB2 => refused("smb2"),
        magic::SMB => refused("smb"),
        // virtiofs reports the FUSE magic: it is FUSE underneath.
        magic::FUSE => refused("fuse (including virtiofs)"),
        magic::OVERLAYFS => refused("overlayfs"),
        magic::V9FS => refused("9p"),
        magic::CEPH => refused("ceph"),
        magic::AFS => refused("afs"),
        magic::CODA => refused("coda"),
        magic::NCP => refused("ncpfs"),
        magic::ECRYPTFS => refused("ecryptfs"),
        magic::SQUASHFS => refused("squashfs"),
        magic::PROC => refused("proc"),
        other => Err(Refused {
            name: format!("unknown (f_type {other:#x})"),
        }),
    }
}

/// macOS `MNT_LOCAL` mount flag (`sys/mount.h`).
pub const MNT_LOCAL: u32 = 0x0000_1000;

/// Classifies a macOS `statfs` by its `f_fstypename` and `f_flags`.
///
/// Only APFS and HFS+ on a local mount are accepted; the name is compared exactly, never guessed
/// from mount paths or VFS numbers.
pub fn classify_macos(fstypename: &str, flags: u32) -> Result<Accepted, Refused> {
    let local = flags & MNT_LOCAL != 0;
    match (fstypename, local) {
        ("apfs", true) => Ok(Accepted { name: "apfs" }),
        ("hfs", true) => Ok(Accepted { name: "hfs" }),
        ("apfs" | "hfs", false) => Err(Refused {
            name: format!("{fstypename} without MNT_LOCAL"),
        }),
        ("", _) => Err(Refused {
            name: "unnamed".to_owned(),
        }),
        (other, _) => Err(Refused {
            name: other.to_owned(),
        }),
    }
}

/// Reads `f_fstypename` (a NUL-padded C char array) as text.
pub fn fstypename_from_c(raw: &[u8]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_local_filesystems_are_accepted() {
        for (magic, name) in [
            (0xEF53, "ext2/3/4"),
            (0x5846_5342, "xfs"),
            (0x9123_683E, "btrfs"),
            (0x0102_1994, "tmpfs"),
        ] {
            assert_eq!(
                classify_linux(magic).map(|a| a.name),
                Ok(name),
                "{name} must be accepted"
            );
        }
        // btrfs's magic has the top bit set: a signed f_type must still match.
        assert!(
            classify_linux(0x9123_683E_u32 as i32 as i64).is_ok(),
            "sign-extended btrfs magic must be accepted"
        );
    }

    #[test]
    fn linux_remote_and_layered_filesystems_are_refused_by_name() {
        for (magic, name) in [
            (0x6969, "nfs"),
            (0xFF53_4D42, "cifs"),
            (0xFE53_4D42, "smb2"),
            (0x6573_5546, "fuse (including virtiofs)"),
            (0x794C_7630, "overlayfs"),
            (0x0102_1997, "9p"),
        ] {
            let refused = classify_linux(magic).expect_err("must be refused");
            assert_eq!(refused.name, name, "refusal must name the filesystem");
            assert!(
                refused.to_string().starts_with(name),
                "message must name {name}: {refused}"
            );
        }
        let unknown = classify_linux(0x1234_5678).expect_err("unknown must be refused");
        assert!(
            unknown.name.contains("0x12345678"),
            "unknown names its magic: {unknown}"
        );
    }

    #[test]
    fn macos_table() {
        assert_eq!(
            classify_macos("apfs", MNT_LOCAL).map(|a| a.name),
            Ok("apfs")
        );
        assert_eq!(
            classify_macos("hfs", MNT_LOCAL | 1).map(|a| a.name),
            Ok("hfs")
        );
        assert!(
            classify_macos("apfs", 0).is_err(),
            "non-local apfs is refused"
        );
        for name in [
            "nfs", "smbfs", "afpfs", "macfuse", "osxfuse", "webdav", "msdos", "exfat",
        ] {
            let refused = classify_macos(name, MNT_LOCAL).expect_err("must be refused");
            assert_eq!(refused.name, name);
        }
        assert_eq!(
            classify_macos("", MNT_LOCAL).expect_err("empty").name,
            "unnamed"
        );
    }

    #[test]
    fn c_names_are_read_up_to_nul() {
        let mut raw = [0u8; 16];
        raw[..4].copy_from_slice(b"apfs");
        assert_eq!(fstypename_from_c(&raw), "apfs");
        assert_eq!(
            fstypename_from_c(b"hfs"),
            "hfs",
            "an unterminated name is read whole"
        );
    }
}
