use crate::filesystem::{Accepted, Refused};
use rustix::fd::BorrowedFd;

/// No filesystem check exists for this platform, so every guard is refused.
pub(crate) fn filesystem_of(_fd: BorrowedFd<'_>) -> std::io::Result<Result<Accepted, Refused>> {
    Ok(Err(Refused {
        name: format!("{} (unsupported platform)", std::env::consts::OS),
    }))
}
