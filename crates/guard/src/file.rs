//! What a file is: its device and inode, and what its type is called in messages.

use rustix::fs::FileType;

/// Device and inode of a file: what identifies a guard across descriptors and processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    /// `st_dev` of the file.
    pub dev: u64,
    /// `st_ino` of the file.
    pub ino: u64,
}

/// What a file type is called in this crate's errors ("regular file", "FIFO", ...): the
/// `kind` of [`acquire::Error::NotRegular`](crate::acquire::Error::NotRegular). `worklane-slotfile` names file types in its
/// errors and reports with the same words.
#[must_use]
pub fn describe_file_type(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "file of unknown type",
    }
}

#[cfg(test)]
mod tests {
    use super::describe_file_type;
    use rustix::fs::FileType;

    #[test]
    fn every_file_type_has_its_own_name() {
        let named = [
            (FileType::RegularFile, "regular file"),
            (FileType::Directory, "directory"),
            (FileType::Symlink, "symbolic link"),
            (FileType::Fifo, "FIFO"),
            (FileType::Socket, "socket"),
            (FileType::CharacterDevice, "character device"),
            (FileType::BlockDevice, "block device"),
            (FileType::Unknown, "file of unknown type"),
        ];
        for (kind, name) in named {
            assert_eq!(
                describe_file_type(kind),
                name,
                "what a {kind:?} is called in messages"
            );
        }
    }
}
