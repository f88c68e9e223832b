//! `cargo xtask mutants [--crate NAME]... [--shard K/N] [--iterate] [--list]`: mutation testing
//! of the library crates (MUTANTS.md).
//!
//! It runs `cargo mutants` (installed separately) on each library crate with
//! `.cargo/mutants.toml` (test helpers excluded), each crate's mutants measured by its own
//! tests, output under `target/mutants/`.

use crate::{USAGE, exit};
use std::process::{Command, ExitCode};

/// The crates whose tests mutation testing measures (MUTANTS.md).
const MUTATED_CRATES: &[&str] = &[
    "stdx",
    "guard",
    "slotfile",
    "identity",
    "lease",
    "journal",
    "transport",
    "admission",
    "dispatch",
    "budget",
    "run",
    "proxy",
    "config",
    "view",
    "fleet",
];

/// What `cargo mutants` is given for `krate` beyond `.cargo/mutants.toml`: the crate is built
/// with its default features (and the `test-seams` its own tests turn on), so code behind
/// another feature is not compiled, and its mutants, which would build and pass untouched,
/// are left out rather than reported missed (MUTANTS.md says which, and why).
fn measured(krate: &str) -> &'static [&'static str] {
    match krate {
        // The `dispatcher` feature: the admission dispatcher as a process and its drivers.
        // The suite's tests wait on processes, each within its own bound (20 s): a mutant
        // that breaks every command's start (the clone's child made to return at once) makes
        // dozens of them wait theirs out, 16 at a time (`TEST_THREADS`), and fails them in
        // about three minutes rather than being cut off as a timeout.
        "run" => &[
            "--timeout",
            "240",
            "--exclude",
            "crates/run/src/driver.rs",
            "--exclude",
            "crates/run/src/dispatcher.rs",
            "--exclude",
            "crates/run/src/dispatcher/log.rs",
            "--exclude-re",
            r"^crates/run/src/sys/mod\.rs:\d+:\d+: replace detach ",
        ],
        // The dispatcher's loop on a real socket: every client wait has its bound (10 s), and
        // a mutant that stops the loop serving makes a dozen tests wait theirs out, two at a
        // time: it fails within about 80 s, which the automatic timeout (three times the
        // suite's 9 s) would cut off as a timeout.
        "dispatch" => &["--timeout", "120"],
        // The etcd-backed fleet: its tests start a real etcd cluster on loopback (the Debian
        // package `.ci/run` installs) and build etcd-client (which needs `protoc`); each
        // mutant's run is about a minute.
        "fleet" => &["--features", "etcd", "--timeout", "300"],
        _ => &[],
    }
}

/// `cargo xtask mutants`: runs `cargo mutants` over each crate (all of them, or each
/// `--crate`), one shard of it with `--shard K/N`, with the exclusions of
/// `.cargo/mutants.toml` (test helpers). Each crate's mutants are tested by that crate's own
/// tests; results go to `target/mutants/<crate>[-K-of-N]/mutants.out`. A full run takes hours
/// on 2 cores: shard it. `--iterate` tests again only what the last run there did not catch
/// (after new tests, the survivors).
pub(crate) fn mutants(args: &[String]) -> ExitCode {
    let mut crates = Vec::new();
    let mut shard = None;
    let mut list = false;
    let mut iterate = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--crate" => match args.next() {
                Some(name) if MUTATED_CRATES.contains(&name.trim_start_matches("worklane-")) => {
                    crates.push(name.trim_start_matches("worklane-").to_owned());
                }
                other => {
                    eprintln!(
                        "xtask mutants: --crate takes one of {} (got {other:?})",
                        MUTATED_CRATES.join(", ")
                    );
                    return ExitCode::from(exit::USAGE);
                }
            },
            "--shard" => match args.next() {
                Some(k_n) if parse_shard(k_n).is_some() => shard = Some(k_n.clone()),
                other => {
                    eprintln!("xtask mutants: --shard takes K/N with 0 <= K < N (got {other:?})");
                    return ExitCode::from(exit::USAGE);
                }
            },
            "--list" => list = true,
            "--iterate" => iterate = true,
            other => {
                eprintln!("xtask mutants: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(exit::USAGE);
            }
        }
    }
    if crates.is_empty() {
        crates = MUTATED_CRATES.iter().map(|c| (*c).to_owned()).collect();
    }
    let cargo = crate::cargo();
    let mut failed = false;
    for krate in &crates {
        let mut cmd = Command::new(&cargo);
        cmd.args(["mutants", "--package", &format!("worklane-{krate}")]);
        cmd.args(measured(krate));
        // Each mutant is built in cargo-mutants' own copy of the tree, in that copy's target
        // directory. A `CARGO_TARGET_DIR` shared with the worktree would give both the same
        // artifacts (cargo names a workspace member's by its path within the workspace): a
        // build in the worktree meanwhile looks newer than a mutant's change, so the mutant
        // is tested unbuilt and reported missed, and a mutant's build is left behind for the
        // worktree's next test.
        cmd.env_remove("CARGO_TARGET_DIR");
        if let Some(threads) = test_threads(krate) {
            cmd.env("RUST_TEST_THREADS", threads);
        }
        if list {
            cmd.arg("--list");
        } else {
            let mut name = (*krate).clone();
            if let Some(shard) = &shard {
                name.push('-');
                name.push_str(&shard.replace('/', "-of-"));
                cmd.args(["--shard", shard]);
            }
            let out = crate::workspace_root().join("target/mutants").join(name);
            if let Err(e) = std::fs::create_dir_all(&out) {
                eprintln!("xtask mutants: cannot create {}: {e}", out.display());
                return ExitCode::FAILURE;
            }
            cmd.arg("--output").arg(&out);
            if iterate {
                cmd.arg("--iterate");
            }
        }
        cmd.current_dir(crate::workspace_root());
        eprintln!("==> cargo mutants for worklane-{krate}");
        #[allow(
            clippy::disallowed_methods,
            reason = "not a test: cargo mutants runs in the foreground, holding no guard"
        )]
        let ran = cmd.status();
        match ran {
            // cargo mutants exits 2 when mutants were missed, 3 on timeouts: a result, not a
            // failure to run.
            Ok(status) if matches!(status.code(), Some(0 | 2 | 3)) => {}
            Ok(status) => {
                eprintln!("xtask mutants: worklane-{krate}: cargo mutants failed ({status})");
                failed = true;
            }
            Err(e) => {
                eprintln!(
                    "xtask mutants: cannot run cargo mutants ({e}); install it with \
                     `cargo install cargo-mutants --locked`"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// How many of `krate`'s tests run at once in a mutation run, when not the number of CPUs:
/// run's tests mostly wait on the processes they start.
fn test_threads(krate: &str) -> Option<&'static str> {
    (krate == "run").then_some("16")
}

/// `Some((k, n))` for `K/N` with `0 <= k < n`.
fn parse_shard(text: &str) -> Option<(u32, u32)> {
    let (k, n) = text.split_once('/')?;
    let (k, n) = (k.parse().ok()?, n.parse().ok()?);
    (k < n).then_some((k, n))
}

#[cfg(test)]
mod tests {
    use super::{MUTATED_CRATES, measured, parse_shard};

    #[test]
    fn every_file_left_out_exists() {
        for krate in MUTATED_CRATES {
            let args = measured(krate);
            for pair in args.chunks(2) {
                if pair[0] == "--exclude" {
                    assert!(
                        crate::workspace_root().join(pair[1]).is_file(),
                        "{krate}: {} (moved? say so in measured())",
                        pair[1]
                    );
                }
            }
        }
    }

    /// Every library crate of the workspace is measured: all of `crates/` but the CLI (a
    /// binary, tested by its process tests) and the test kit (test support).
    #[test]
    fn every_library_crate_is_measured() {
        let mut found: Vec<String> = std::fs::read_dir(crate::workspace_root().join("crates"))
            .expect("crates/")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|name| !matches!(name.as_str(), "cli" | "testkit"))
            .collect();
        found.sort();
        let mut measured: Vec<String> = MUTATED_CRATES.iter().map(|c| (*c).to_owned()).collect();
        measured.sort();
        assert_eq!(measured, found, "MUTATED_CRATES names every library crate");
    }

    #[test]
    fn shards_are_k_of_n() {
        assert_eq!(parse_shard("0/4"), Some((0, 4)));
        assert_eq!(parse_shard("3/4"), Some((3, 4)));
        for bad in ["4/4", "1", "a/b", "1/0", "-1/2", ""] {
            assert_eq!(parse_shard(bad), None, "{bad:?}");
        }
    }
}
