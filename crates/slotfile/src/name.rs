//! Errors of naming a file in a slot directory.

use std::path::PathBuf;
use worklane_guard::NameProblem;

/// Why a name cannot be a slot file.
#[derive(Debug, thiserror::Error)]
#[error("{name:?} cannot be a file in slot directory {dir}: {problem}")]
pub struct Error {
    /// The directory.
    pub dir: PathBuf,
    /// The name given.
    pub name: String,
    /// What is wrong with it.
    pub problem: NameProblem,
}
