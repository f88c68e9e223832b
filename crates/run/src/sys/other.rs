//! Every platform but Linux: no process table is read, so a halt reaches the command's group
//! (or pid) only, nothing is observed for STOP's enforcement (supervisors alone halt their
//! commands), and there are no subreapers. The same signatures as `linux/proc.rs`.

use crate::enforce::Seen;
use crate::tree::Entry;
use std::collections::{HashMap, HashSet};
use worklane_guard::FileId;

/// No process table.
pub(crate) fn table() -> Option<Vec<Entry>> {
    None
}

/// No subreapers.
pub(crate) fn become_subreaper() -> bool {
    false
}

/// Nothing is observed.
pub(crate) fn observe(_pid: u32) -> Option<Seen> {
    None
}

/// No process's descriptors are seen.
pub(crate) fn guard_holders(_guards: &HashSet<FileId>) -> HashMap<FileId, Vec<u32>> {
    HashMap::new()
}
