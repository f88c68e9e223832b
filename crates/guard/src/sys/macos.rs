use crate::filesystem::{Accepted, Refused, classify_macos, fstypename_from_c};
use rustix::fd::BorrowedFd;

/// Classifies the filesystem holding `fd` by `fstatfs(2)`'s `f_fstypename` and `f_flags`.
///
/// See <https://developer.apple.com/library/archive/documentation/System/Conceptual/ManPages_iPhoneOS/man2/fstatfs.2.html>.
pub(crate) fn filesystem_of(fd: BorrowedFd<'_>) -> std::io::Result<Result<Accepted, Refused>> {
    let stat = rustix::fs::fstatfs(fd)?;
    #[allow(clippy::cast_sign_loss)]
    let raw: Vec<u8> = stat.f_fstypename.iter().map(|&c| c as u8).collect();
    Ok(classify_macos(&fstypename_from_c(&raw), stat.f_flags))
}
