use crate::filesystem::{Accepted, Refused, classify_linux};
use rustix::fd::BorrowedFd;

/// Classifies the filesystem holding `fd` by `fstatfs(2)`'s `f_type`.
///
/// See <https://man7.org/linux/man-pages/man2/fstatfs.2.html>.
pub(crate) fn filesystem_of(fd: BorrowedFd<'_>) -> std::io::Result<Result<Accepted, Refused>> {
    let stat = rustix::fs::fstatfs(fd)?;
    // `f_type` is a signed or unsigned word depending on the architecture.
    #[allow(clippy::unnecessary_cast, clippy::cast_lossless)]
    let f_type = stat.f_type as i64;
    Ok(classify_linux(f_type))
}
