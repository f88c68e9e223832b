//! The pool's files by name: the locks every taker knows (`slots.lock`, `full-run.lock`), a
//! slot's index in its name, and the two ways the pool names and replaces a file of the slot
//! directory. A leaf: the pool, STOP and the problems' scan all use it.

use worklane_slotfile::SlotDir;

/// The lock held while counting and taking slots.
pub const SLOTS_LOCK: &str = "slots.lock";
/// The full-run lock.
pub const FULL_RUN_LOCK: &str = "full-run.lock";

/// Replaces `file` with `bytes` (see `SlotPath::replace`); when that fails because an empty
/// directory sits at its name (an operator's `mkdir STOP`), the directory is removed and the
/// replace tried once more. The first error stands otherwise.
pub(crate) fn replace_over_empty_dir(
    file: &worklane_slotfile::SlotPath,
    bytes: &[u8],
    mode: u32,
) -> Result<(), worklane_slotfile::write::Error> {
    match file.replace(bytes, mode) {
        Ok(()) => Ok(()),
        Err(first) => {
            let is_dir = first.source.kind() == std::io::ErrorKind::IsADirectory;
            if is_dir && matches!(file.remove_entry(), Ok(true)) {
                file.replace(bytes, mode)
            } else {
                Err(first)
            }
        }
    }
}

/// The file `name` in `dir`.
pub(crate) fn file_in(
    dir: &SlotDir,
    name: &str,
) -> Result<worklane_slotfile::SlotPath, crate::look::Error> {
    dir.file(name).map_err(|source| crate::look::Error::Name {
        name: name.to_owned(),
        source,
    })
}

/// `Some(i)` when `name` is `<prefix>-<i>.lock` with `i` a plain decimal number.
#[must_use]
pub fn slot_index(prefix: &str, name: &str) -> Option<u32> {
    let digits = name
        .strip_prefix(prefix)?
        .strip_prefix('-')?
        .strip_suffix(".lock")?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
