//! A `worklane run` inside the command of another `worklane run`.
//!
//! The outer run names the slot it holds in its command's environment, one variable per kind
//! (`WORKLANE_AGENT_SLOT`, `WORKLANE_TEST_SLOT`, `WORKLANE_FULL_RUN_SLOT`: the path of the
//! slot's lock file). An inner run of the same kind in the same slot directory would wait for
//! a second slot while its own parent holds one: forever at a cap of 1 (always for the full
//! run). It is refused at once instead (`worklane run` exits 64), saying so. Runs of different kinds nest freely:
//! an agent that runs its tests under `--kind test` is the intended use, and `lease run`
//! holds a role, not a slot.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use worklane_admission::Kind;

/// The variable that names the slot of `kind` the command runs inside.
pub fn var(kind: &Kind) -> &'static str {
    match kind {
        Kind::Agent => "WORKLANE_AGENT_SLOT",
        Kind::Test { .. } => "WORKLANE_TEST_SLOT",
        Kind::FullRun => "WORKLANE_FULL_RUN_SLOT",
        Kind::Job => "WORKLANE_JOB_SLOT",
    }
}

/// The variable for the command of a run holding slot `name` of `kind` in `dir`.
pub fn env(kind: &Kind, dir: &Path, name: &str) -> (&'static str, OsString) {
    (var(kind), dir.join(name).into_os_string())
}

/// Refuses a run of `kind` in `dir` when `outer` (the value of [`var`] in our environment)
/// names a slot in the same directory: the same directory by device and inode, so another
/// spelling of its path is no way around it. A variable that names no directory here (left
/// over, from another machine) is ignored.
pub fn refuse_nested(kind: &Kind, dir: &Path, outer: Option<OsString>) -> Result<(), Nested> {
    let Some(outer) = outer.map(PathBuf::from) else {
        return Ok(());
    };
    let (Some(parent), Some(name)) = (outer.parent(), outer.file_name()) else {
        return Ok(());
    };
    let same = match (std::fs::metadata(parent), std::fs::metadata(dir)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    };
    if !same {
        return Ok(());
    }
    Err(Nested {
        kind: *kind,
        name: name.to_string_lossy().into_owned(),
        dir: dir.to_owned(),
    })
}

/// A run refused because its command already runs inside a slot of the same kind of the same
/// slot directory.
#[derive(Debug, thiserror::Error)]
#[error(
    "this command already runs inside {what}, {name} in {dir} (${var}, set by the `worklane \
     run` around it); a nested `worklane run` of the same kind would wait for another while \
     its own parent holds one, forever at a cap of 1: run the command without `worklane run` \
     to use the parent's slot, or unset {var} for it if it must take a slot of its own beside \
     the parent's",
    what = what(kind),
    var = var(kind),
    dir = dir.display()
)]
pub struct Nested {
    /// The kind of both runs.
    pub kind: Kind,
    /// The outer run's slot (its lock file's name).
    pub name: String,
    /// The slot directory.
    pub dir: PathBuf,
}

fn what(kind: &Kind) -> &'static str {
    match kind {
        Kind::Agent => "an agent slot",
        Kind::Test { .. } => "a test-run slot",
        Kind::FullRun => "the full-run lock",
        Kind::Job => "a job slot",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_slot_in_the_same_directory_refuses() {
        let temp = tempfile::tempdir().expect("temp");
        let dir = temp.path().join("slots");
        std::fs::create_dir(&dir).expect("mkdir");
        let (name, value) = env(&Kind::Agent, &dir, "agent-0.lock");
        assert_eq!(name, "WORKLANE_AGENT_SLOT");
        assert!(
            refuse_nested(&Kind::Agent, &dir, None).is_ok(),
            "no outer run"
        );
        let refused = refuse_nested(&Kind::Agent, &dir, Some(value.clone()))
            .expect_err("nested in the same directory");
        let message = refused.to_string();
        for part in [
            "agent-0.lock",
            "WORKLANE_AGENT_SLOT",
            "unset",
            "an agent slot",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
        // Another spelling of the same directory.
        let dotted = dir.join(".").join("agent-0.lock").into_os_string();
        assert!(
            refuse_nested(&Kind::Agent, &dir, Some(dotted)).is_err(),
            "the directory is compared by inode, not by spelling"
        );
        let other = temp.path().join("other");
        std::fs::create_dir(&other).expect("mkdir");
        assert!(
            refuse_nested(&Kind::Agent, &other, Some(value)).is_ok(),
            "another slot directory is another machine's pool"
        );
        let gone = temp.path().join("gone/agent-0.lock").into_os_string();
        assert!(
            refuse_nested(&Kind::Agent, &dir, Some(gone)).is_ok(),
            "a variable naming no directory here is ignored"
        );
        assert!(
            refuse_nested(&Kind::Agent, &dir, Some(OsString::from("/"))).is_ok(),
            "a variable naming no file is ignored"
        );
    }
}
