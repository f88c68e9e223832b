//! The jobserver's private directory in the temp directory (`worklane-jobs-*`, mode 0700,
//! locked for its life) and the sweep of those a killed supervisor left.

use super::*;

/// The prefix of the jobservers' private directories in the temp directory.
const DIR_PREFIX: &str = "worklane-jobs-";

/// A directory left this long unlocked is a killed supervisor's; a younger one may be between
/// its `mkdir` and its lock.
const LEFT_AFTER: Duration = Duration::from_secs(60);

/// Opens `dir` and locks it for the jobserver's life; `None` if it cannot (the directory is
/// then never swept while the jobserver lives: only a free lock lets a sweep remove one).
// The jobserver's own private directory in the temp directory, not the slot directory: its
// lock says only that its jobserver lives, and no guard or record is involved.
#[allow(clippy::disallowed_methods)]
pub(super) fn lock_dir(dir: &std::path::Path) -> Option<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(fd)
}

/// Removes the private directories (and their FIFO) that jobservers of this user left in
/// `temp` when their supervisor was killed: each `worklane-jobs-*` directory owned by this
/// user, not a link, at least [`LEFT_AFTER`] old, whose lock is free (a live jobserver holds
/// it for its life). Another user's, a link, or anything else is left alone.
// Names in the temp directory, never in the slot directory: removed relative to descriptors
// judged by `fstat` (no link followed), the lock tried as `lock_dir` takes it.
#[allow(clippy::disallowed_methods)]
pub(crate) fn sweep_left_dirs(temp: &std::path::Path) {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    let Ok(temp_fd) = rustix::fs::open(
        temp,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let me = rustix::process::geteuid();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let Ok(dir) = rustix::fs::openat(
            &temp_fd,
            &name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let Ok(stat) = rustix::fs::fstat(&dir) else {
            continue;
        };
        let age = now.saturating_sub(u64::try_from(stat.st_mtime).unwrap_or(u64::MAX));
        if stat.st_uid != me.as_raw() || age < LEFT_AFTER.as_secs() {
            continue;
        }
        if rustix::fs::flock(&dir, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            // A live jobserver's.
            continue;
        }
        let _ = rustix::fs::unlinkat(&dir, "jobserver", AtFlags::empty());
        if rustix::fs::unlinkat(&temp_fd, &name, AtFlags::REMOVEDIR).is_ok() {
            log::info!(
                "removed {}, left by a jobserver whose supervisor was killed",
                temp.join(&name).display()
            );
        }
    }
}

/// A new directory only this user can enter, for the FIFO: under `$TMPDIR` (else `/tmp`).
/// mkdir(2) never follows a link at the name and fails on anything there, so a name another
/// user made first is passed over for the next.
pub(super) fn private_dir() -> Result<PathBuf, Error> {
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for attempt in 0..64u32 {
        let dir = base.join(format!(
            "{DIR_PREFIX}{}-{nanos:08x}-{attempt}",
            std::process::id()
        ));
        match rustix::fs::mkdir(&dir, rustix::fs::Mode::RWXU) {
            Ok(()) => return Ok(dir),
            Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(io("making the jobserver's directory")(e)),
        }
    }
    Err(io("making the jobserver's directory")(
        rustix::io::Errno::EXIST,
    ))
}
