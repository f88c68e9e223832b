//! Reading a record or claim that anyone in the directory's group may have put there.

use crate::liveness::LiveWhy;
use crate::record::Record;
use worklane_slotfile::{SlotPath, read};

/// Reads the lock record at `path`, tolerantly: `Ok(None)` when there is none or it does not
/// parse as a record (a reader that only looks, such as a view, treats both as "no record";
/// an acquisition judges a malformed record itself). A symbolic link, a FIFO, a directory or a
/// file over 64 KiB at the name is an error, as [`SlotPath::read`] says.
pub fn read_record(path: &SlotPath) -> Result<Option<Record>, read::Error> {
    Ok(path.read()?.and_then(|raw| Record::parse(&raw).ok()))
}

/// Reads a file that anyone in the directory's group may have put there: a symbolic link, a
/// FIFO, a directory or a file over 64 KiB where a record or claim belongs is not an error of
/// ours but a hostile or broken file, returned as `Ok(Err(why))`; only a failing system call
/// is an error.
pub(crate) fn read_hostile(
    path: &SlotPath,
) -> Result<Result<Option<Vec<u8>>, LiveWhy>, read::Error> {
    use read::Error as ReadError;
    match path.read() {
        Ok(raw) => Ok(Ok(raw)),
        Err(
            e @ (ReadError::Symlink { .. }
            | ReadError::NotRegular { .. }
            | ReadError::TooLarge { .. }),
        ) => Ok(Err(LiveWhy::Malformed {
            detail: e.to_string(),
        })),
        Err(e) => Err(e),
    }
}
