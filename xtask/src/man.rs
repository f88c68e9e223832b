//! `cargo xtask man [DIR]`: writes the man pages, `worklane.1` and `worklane-<command>.1` for
//! every command (nested ones as `worklane-lease-run.1`), into DIR (default `target/man`).
//!
//! It runs `cargo run -p worklane -- man --all DIR`: the pages come from the built CLI (its
//! `man::pages` walks the clap `Command`, one page per command that is not hidden); why not
//! from a library target of the CLI crate is said on [`man()`].

use crate::{USAGE, exit};
use std::process::{Command, ExitCode};

/// `cargo xtask man [DIR]`: the man pages of every command, from the clap definitions, by
/// `cargo run -p worklane -- man --all DIR`.
///
/// The pages come from the binary rather than from a library: the CLI crate is a binary only,
/// and giving it a library target just to hand its clap `Command` to xtask would make its
/// argument types a public API (every field documented, kept stable) and link clap and the
/// dispatcher's SQLite into xtask. Running the built CLI renders exactly the pages of the
/// binary that gets installed.
pub(crate) fn man(args: &[String]) -> ExitCode {
    let dir = match args {
        [] => crate::target_dir().join("man"),
        [dir] if !dir.starts_with('-') => std::path::PathBuf::from(dir),
        _ => {
            eprintln!("xtask man: takes at most one directory\n{USAGE}");
            return ExitCode::from(exit::USAGE);
        }
    };
    // Taken from where xtask was called, as the user wrote it; cargo runs in the workspace.
    let dir = match std::path::absolute(&dir) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("xtask man: {}: {e}", dir.display());
            return ExitCode::from(exit::USAGE);
        }
    };
    let cargo = crate::cargo();
    #[allow(
        clippy::disallowed_methods,
        reason = "not a test: runs the CLI in the foreground, holding no guard"
    )]
    let ran = Command::new(&cargo)
        .args([
            "run",
            "--quiet",
            "--package",
            "worklane",
            "--",
            "man",
            "--all",
        ])
        .arg(&dir)
        .current_dir(crate::workspace_root())
        .status();
    match ran {
        Ok(status) if status.success() => {
            eprintln!("xtask man: pages written to {}", dir.display());
            ExitCode::SUCCESS
        }
        Ok(status) => {
            eprintln!("xtask man: `worklane man --all` failed ({status})");
            ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1))
        }
        Err(e) => {
            eprintln!("xtask man: cannot run cargo: {e}");
            ExitCode::FAILURE
        }
    }
}
