//! Removing a file of the slot directory: only if unchanged, whatever it holds, an empty
//! directory at its name, and renaming it.

use super::*;

impl SlotPath {
    /// Removes the file only if its entire current contents equal `expected`.
    ///
    /// The comparison and the unlink are two steps: callers that race other writers hold the
    /// file's guard ([`SlotPath::try_guard`]) around this call, as the lease layer does.
    pub fn remove_if_unchanged(&self, expected: &[u8]) -> Result<Removal, remove::Error> {
        let current = read::read_compare(self.dir.as_fd(), &self.name, expected, &self.shown())
            .map_err(|source| remove::Error::Read {
                path: self.shown(),
                source,
            })?;
        match current {
            None => Ok(Removal::Absent),
            Some(false) => Ok(Removal::Changed),
            Some(true) => match self.unlink()? {
                true => Ok(Removal::Removed),
                false => Ok(Removal::Absent),
            },
        }
    }

    /// Removes the file whatever it holds (for operator commands such as resume, which removes
    /// STOP). `Ok(false)` if there was none.
    pub fn remove(&self) -> Result<bool, remove::Error> {
        self.unlink()
    }

    /// Removes whatever is at the name: a file of any kind ([`SlotPath::remove`]), or an
    /// empty directory (as an operator's `mkdir STOP` leaves). A directory with entries in it
    /// is left as it is (`Io`, "Directory not empty"): what it holds is not worklane's to
    /// delete. `Ok(false)` if there was nothing.
    pub fn remove_entry(&self) -> Result<bool, remove::Error> {
        let dir = self.dir.as_fd();
        let failed = match rustix::fs::unlinkat(dir, &*self.name, AtFlags::empty()) {
            Ok(()) => return Ok(true),
            Err(Errno::NOENT) => return Ok(false),
            // Linux says EISDIR for a directory, POSIX allows EPERM.
            Err(e @ (Errno::ISDIR | Errno::PERM)) => {
                match rustix::fs::unlinkat(dir, &*self.name, AtFlags::REMOVEDIR) {
                    Ok(()) => return Ok(true),
                    Err(Errno::NOENT) => return Ok(false),
                    // Not a directory after all: the unlink's own error says why.
                    Err(Errno::NOTDIR) => e,
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        Err(remove::Error::Io {
            path: self.shown(),
            source: failed.into(),
        })
    }

    pub(super) fn unlink(&self) -> Result<bool, remove::Error> {
        match rustix::fs::unlinkat(self.dir.as_fd(), &*self.name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(remove::Error::Io {
                path: self.shown(),
                source: e.into(),
            }),
        }
    }

    /// Renames this file to `new_name` in the same directory with one `renameat`, replacing any
    /// file of that name, and returns the new path. For files whose name is their content (the
    /// lease layer's epoch markers); everything else is written with [`SlotPath::replace`].
    pub fn rename(&self, new_name: &str) -> Result<SlotPath, write::Error> {
        let to = SlotPath::named(self.dir.clone(), new_name).map_err(|e| write::Error {
            op: "rename",
            path: self.shown(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
        })?;
        let dir = self.dir.as_fd();
        rustix::fs::renameat(dir, &*self.name, dir, &*to.name)
            .map_err(|e| self.error("rename", e))?;
        Ok(to)
    }
}
