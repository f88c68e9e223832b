//! Shared helpers of the criterion benches in `benches/`; figures in `BENCHMARKS.md`.

use std::path::{Path, PathBuf};

/// The directories a filesystem-sensitive bench runs in, with their labels: the temp dir's
/// filesystem (`disk`), and `/dev/shm` (`tmpfs`) where it exists.
#[must_use]
pub fn filesystems() -> Vec<(&'static str, PathBuf)> {
    let mut dirs = vec![("disk", std::env::temp_dir())];
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        dirs.push(("tmpfs", shm.to_owned()));
    }
    dirs
}

/// `target/<profile>/<name>`, beside the `deps/` directory the bench runs from: a binary of
/// another package, which cargo does not build for a bench. Panics with `build`, the command
/// that builds it, when it is missing.
#[must_use]
pub fn sibling_binary(name: &str, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("the bench runs from target/<profile>/deps")
        .join(name);
    assert!(
        bin.is_file(),
        "{} is missing: run `{build}` first",
        bin.display()
    );
    bin
}
