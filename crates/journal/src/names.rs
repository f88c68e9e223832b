//! The journal's files in the slot directory.

/// The file events are appended to.
pub const CURRENT: &str = "journal.jsonl";
/// The file before the last rotation; read before [`CURRENT`].
pub const PREVIOUS: &str = "journal.1.jsonl";
/// The mode of both: the directory's group reads and appends.
pub(crate) const MODE: u32 = 0o660;
