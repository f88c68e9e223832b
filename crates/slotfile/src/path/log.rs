//! Logs: a file another process writes as its output, created with its mode and group, or
//! reopened only if it is provably the caller's or its owner's.

use super::*;

impl SlotPath {
    /// Creates this file new (it must not exist) for appending, with mode exactly `mode` and the
    /// directory's group, and returns its descriptor (close-on-exec): for a log that another
    /// process writes as its output. Never follows a link; an existing file is
    /// `AlreadyExists`-shaped I/O error.
    pub fn create_log(&self, mode_bits: u32) -> Result<OwnedFd, write::Error> {
        let fd = rustix::fs::openat(self.dir.as_fd(), &*self.name, LOG_FLAGS, mode(0o600))
            .map_err(|e| self.error("create", e))?;
        give_group(&fd, self.dir.gid());
        rustix::fs::fchmod(&fd, mode(mode_bits)).map_err(|e| self.error("set the mode of", e))?;
        Ok(fd)
    }

    /// Opens this file for appending another process's output, creating it if it is missing,
    /// with mode exactly `mode_bits` and the directory's group; `owner`, when given (and this
    /// process may give files away, as root), becomes its owner, so that the user whose
    /// output it is can read it. A file already there is reopened only if it is a regular
    /// file with one link, owned by this process's user or by `owner`: a FIFO, a hard link to
    /// another file or a file of someone else's is refused (`InvalidData`), never written or
    /// given away. Never follows a link; the descriptor is close-on-exec.
    pub fn open_log(&self, mode_bits: u32, owner: Option<u32>) -> Result<OwnedFd, write::Error> {
        let flags = OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(self.dir.as_fd(), &*self.name, flags, mode(0o600))
            .map_err(|e| self.error("open", e))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| self.error("examine", e))?;
        let me = rustix::process::geteuid().as_raw();
        let ours = stat.st_uid == me || owner.is_some_and(|o| o == stat.st_uid);
        let regular =
            rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile;
        if !regular || stat.st_nlink != 1 || !ours {
            return Err(write::Error {
                op: "reuse",
                path: self.shown(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "it is a {} (uid {}, {} link(s)), not a log this process made: move it aside",
                        worklane_guard::describe_file_type(rustix::fs::FileType::from_raw_mode(
                            stat.st_mode
                        )),
                        stat.st_uid,
                        stat.st_nlink
                    ),
                ),
            });
        }
        rustix::fs::fcntl_setfl(&fd, OFlags::APPEND)
            .map_err(|e| self.error("set the flags of", e))?;
        match owner.filter(|o| *o != stat.st_uid) {
            Some(owner) => rustix::fs::fchown(
                &fd,
                Some(rustix::fs::Uid::from_raw(owner)),
                Some(rustix::fs::Gid::from_raw(self.dir.gid())),
            )
            .map_err(|e| self.error("give away", e))?,
            None => give_group(&fd, self.dir.gid()),
        }
        rustix::fs::fchmod(&fd, mode(mode_bits)).map_err(|e| self.error("set the mode of", e))?;
        Ok(fd)
    }
}
