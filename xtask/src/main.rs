//! `cargo xtask`: maintenance tasks of the worklane workspace, one file per task.
//!
//! - `cargo xtask ci` (`ci.rs`): runs exactly the steps CI runs (`.ci/run` installs the
//!   prerequisites, then calls this), in order, stopping at the first failure.
//! - `cargo xtask reclaim-guards [--dir DIR] [--apply]` (`reclaim.rs`): in a maintenance window
//!   (STOP or a drain in force, nothing live), removes guard inodes no resource file needs and
//!   temp aliases older than a minute. A dry run unless `--apply`. Exit with the CLI's codes: 0
//!   done, 69 refused for want of a window (no STOP or drain in force), 75 refused because
//!   something is live (it says what), 64 usage, 78 any other error (the directory, its
//!   config, a file it cannot list, stat or unlink).
//! - `cargo xtask conformance [--worklane PATH] [--only ID] [--list] [-v]` (`conformance.rs`):
//!   builds the CLI and runs the protocol conformance kit (`conformance/run.py`) against it (or
//!   against the binary at PATH, such as the one `dist` made), once PROTOCOL.md is seen to cite
//!   every case under its section.
//! - `cargo xtask man [DIR]` (`man.rs`): writes the man pages, `worklane.1` and
//!   `worklane-<command>.1` for every command (nested ones as `worklane-lease-run.1`), into DIR
//!   (default `target/man`), by running the CLI's own `worklane man --all DIR`.
//! - `cargo xtask dist [DIR]` (`dist.rs`): builds the `worklane` binary to install (on
//!   `*-linux-gnu` hosts: for musl, statically linked at a fixed address, so that it starts in a
//!   fraction of a dynamically linked build's time), checks that it takes a slot and runs a
//!   command on a scratch directory, and copies it into DIR (default `target/dist`).
//! - `cargo xtask mutants [--crate NAME]... [--shard K/N] [--iterate] [--list]`
//!   (`mutants.rs`): mutation testing of the library crates with `cargo mutants` (installed
//!   separately), each crate measured by its own tests; see MUTANTS.md.
//! - `cargo xtask bench [--measurement-time SECS] [--table-only]` (`bench.rs`): builds the
//!   release binaries the benches run, runs every bench of `worklane-benches` but `fleet` (which
//!   needs etcd) with short measurement times, and prints a Markdown table of the medians to
//!   stdout: the "Current" table of BENCHMARKS.md. `--table-only` prints the table of the
//!   results already in `target/criterion` without running anything.
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! `cargo xtask` is an alias in `.cargo/config.toml` for `run --quiet --package xtask --`.
//! `main` reads the task's name and hands the rest of the command line to the task's file,
//! whose entry is named after the task (`ci::ci`, `reclaim::reclaim_guards`, `man::man`, ...);
//! no task, or an unknown one, prints `USAGE` and exits 64. How each task is built is said in
//! its own file. What every task shares is here: `USAGE`, the exit codes shared with the CLI
//! (`exit.rs`), the workspace's root and target directories (`workspace_root`, `target_dir`),
//! and the cargo to run (`cargo`: `$CARGO`, else `cargo`). `.ci/run` is the CI entry: it
//! installs what a fresh machine lacks, then runs `cargo xtask ci`.

#![allow(clippy::print_stdout)]

mod bench;
mod ci;
#[cfg(test)]
mod circles;
mod conformance;
mod dist;
mod exit;
mod man;
mod mutants;
mod reclaim;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What `cargo xtask` takes: printed when no task or an unknown one is named, and after a
/// task's own complaint about its arguments.
const USAGE: &str = "usage: cargo xtask ci | \
                     cargo xtask conformance [--worklane PATH] [--only ID] [--list] [-v] | \
                     cargo xtask reclaim-guards [--dir DIR] [--apply] | \
                     cargo xtask man [DIR] | cargo xtask dist [DIR] | \
                     cargo xtask bench [--measurement-time SECS] [--table-only] | \
                     cargo xtask mutants [--crate NAME]... [--shard K/N] [--iterate] [--list]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci::ci(),
        Some("reclaim-guards") => reclaim::reclaim_guards(&args[1..]),
        Some("mutants") => mutants::mutants(&args[1..]),
        Some("man") => man::man(&args[1..]),
        Some("conformance") => conformance::conformance(&args[1..]),
        Some("bench") => bench::bench(&args[1..]),
        Some("dist") => dist::dist(&args[1..], &target_dir(), &workspace_root()),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(exit::USAGE)
        }
    }
}

/// The workspace's root directory (xtask's parent).
fn workspace_root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_owned()
}

/// The workspace's target directory (`CARGO_TARGET_DIR` or `target`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
}

/// The cargo the tasks run: the one that runs xtask (`$CARGO`), else `cargo` on `PATH`.
fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}
