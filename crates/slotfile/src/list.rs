//! Naming and listing the files of a slot directory: every way to get a [`SlotPath`].

use crate::dir::SlotDir;
use crate::name;
use crate::open;
use crate::path::SlotPath;

impl SlotDir {
    /// Names the file `name` in this directory. Refuses anything that is not one ordinary path
    /// component: `/`, NUL, `.`/`..`, a leading `.` (kept for guards and temp files), a guard
    /// name or guard temp alias in any spelling, or a name too long for its guard.
    pub fn file(&self, name: &str) -> Result<SlotPath, name::Error> {
        SlotPath::named(self.clone(), name)
    }

    /// Every ordinary file name in the directory, as slot paths, sorted by name. Guards, temp
    /// files (leading `.`), and names that are not valid UTF-8 or not valid slot names are
    /// skipped.
    pub fn list(&self) -> Result<Vec<SlotPath>, open::Error> {
        self.list_prefixed("")
    }

    /// [`SlotDir::list`], restricted to names starting with `prefix` (filtered before any
    /// other work, for callers that look for one resource's claims or epoch).
    pub fn list_prefixed(&self, prefix: &str) -> Result<Vec<SlotPath>, open::Error> {
        let mut names = Vec::new();
        self.each_name(|name| {
            if name.starts_with(prefix) && worklane_guard::check_resource_name(name).is_ok() {
                names.push(name.to_owned());
            }
        })?;
        names.sort();
        Ok(names
            .into_iter()
            .map(|n| SlotPath::new(self.clone(), &n))
            .collect())
    }

    /// [`SlotDir::list`] and [`SlotDir::hidden_names`] from one reading of the directory, for
    /// callers that need both (the slot count: records, and guards held with no record).
    pub fn list_with_hidden(&self) -> Result<(Vec<SlotPath>, Vec<String>), open::Error> {
        let mut names = Vec::new();
        let mut hidden = Vec::new();
        self.each_name(|name| {
            if name.starts_with('.') {
                hidden.push(name.to_owned());
            } else if worklane_guard::check_resource_name(name).is_ok() {
                names.push(name.to_owned());
            }
        })?;
        names.sort();
        hidden.sort();
        let files = names
            .into_iter()
            .map(|n| SlotPath::new(self.clone(), &n))
            .collect();
        Ok((files, hidden))
    }
}
