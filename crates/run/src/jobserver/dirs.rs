//! The jobserver's private directory in the temp directory (`worklane-jobs-*`, mode 0700,
//! locked for its life) and the sweep of those a killed supervisor left.

use super::*;
use rustix::fs::OFlags;

/// The prefix of the jobservers' private directories in the temp directory.
const DIR_PREFIX: &str = "worklane-jobs-";

/// A jobserver's directory as it is locked and swept: never through a link, closed at exec.
const OPEN_DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// The temp directory, for the removals relative to it.
const OPEN_TEMP: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

/// A directory left this long unlocked is a killed supervisor's; a younger one may be between
/// its `mkdir` and its lock.
const LEFT_AFTER: Duration = Duration::from_secs(60);

/// Opens `dir` and locks it for the jobserver's life; `None` if it cannot (the directory is
/// then never swept while the jobserver lives: only a free lock lets a sweep remove one).
// The jobserver's own private directory in the temp directory, not the slot directory: its
// lock says only that its jobserver lives, and no guard or record is involved.
#[allow(clippy::disallowed_methods)]
pub(super) fn lock_dir(dir: &std::path::Path) -> Option<OwnedFd> {
    let fd = rustix::fs::open(dir, OPEN_DIR, rustix::fs::Mode::empty()).ok()?;
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
    use rustix::fs::{AtFlags, Mode};
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    let Ok(temp_fd) = rustix::fs::open(temp, OPEN_TEMP, Mode::empty()) else {
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
        let Ok(dir) = rustix::fs::openat(&temp_fd, &name, OPEN_DIR, Mode::empty()) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn aged(path: &std::path::Path, secs: u64) {
        std::fs::File::open(path)
            .and_then(|f| f.set_modified(SystemTime::now() - Duration::from_secs(secs)))
            .expect("age it");
    }

    /// A jobserver's directory in `temp`, with its FIFO's name in it, `secs` old.
    fn left(temp: &std::path::Path, name: &str, secs: u64) -> PathBuf {
        let dir = temp.join(name);
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(dir.join("jobserver"), "").expect("its FIFO's name");
        aged(&dir, secs);
        dir
    }

    #[test]
    fn a_jobservers_directory_is_locked_through_a_descriptor_closed_at_exec() {
        let temp = tempfile::tempdir().expect("temp");
        let dir = temp.path().join("worklane-jobs-mine");
        std::fs::create_dir(&dir).expect("mkdir");
        let lock = lock_dir(&dir).expect("locked");
        assert!(
            rustix::io::fcntl_getfd(&lock).is_ok_and(|f| f.contains(rustix::io::FdFlags::CLOEXEC)),
            "a command the supervisor starts does not inherit it"
        );
        assert!(lock_dir(&dir).is_none(), "held: a second lock is refused");
        let file = temp.path().join("a-file");
        std::fs::write(&file, "").expect("file");
        assert!(lock_dir(&file).is_none(), "only a directory");
        let link = temp.path().join("a-link");
        std::os::unix::fs::symlink(temp.path(), &link).expect("symlink");
        assert!(lock_dir(&link).is_none(), "never through a link");
    }

    #[test]
    fn only_this_users_unlocked_directories_a_minute_old_are_swept() {
        let temp = tempfile::tempdir().expect("temp");
        let t = temp.path();
        let killed = left(t, "worklane-jobs-killed", 120);
        let at_minute = left(t, "worklane-jobs-minute", LEFT_AFTER.as_secs());
        let young = left(t, "worklane-jobs-young", 0);
        let live = left(t, "worklane-jobs-live", 120);
        let _lock = lock_dir(&live).expect("a live jobserver's lock");
        let others = left(t, "worklane-jobs-others", 120);
        std::os::unix::fs::chown(&others, Some(65534), Some(65534)).expect("chown");
        aged(&others, 120);
        let unrelated = left(t, "unrelated", 120);
        // A link at a jobserver's name, to an old directory of this user's.
        let target = left(t, "target", 120);
        std::os::unix::fs::symlink(&target, t.join("worklane-jobs-link")).expect("symlink");
        sweep_left_dirs(t);
        assert!(!killed.exists(), "a killed supervisor's goes, FIFO and all");
        assert!(!at_minute.exists(), "a minute old is old enough");
        for (dir, why) in [
            (&young, "a young one may be between its mkdir and its lock"),
            (&live, "a live jobserver holds its lock"),
            (&others, "another user's"),
            (&unrelated, "not a jobserver's"),
        ] {
            assert!(dir.join("jobserver").exists(), "{why}: {}", dir.display());
        }
        assert!(
            target.join("jobserver").exists() && t.join("worklane-jobs-link").exists(),
            "a link is never followed"
        );
    }

    #[test]
    fn a_sweep_of_a_directory_that_cannot_be_read_does_nothing() {
        sweep_left_dirs(std::path::Path::new("/nonexistent-worklane-temp"));
    }
}
