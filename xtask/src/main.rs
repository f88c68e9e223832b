//! `cargo xtask`: maintenance tasks of the worklane workspace.
//!
//! - `cargo xtask ci`: runs exactly the steps CI runs (`.ci/run` installs the prerequisites,
//!   then calls this), in order, stopping at the first failure.
//! - `cargo xtask reclaim-guards [--dir DIR] [--apply]`: in a maintenance window (STOP or a
//!   drain in force, nothing live), removes guard inodes no resource file needs and temp
//!   aliases older than a minute. A dry run unless `--apply`. Exit with the CLI's codes: 0
//!   done, 69 refused for want of a window (no STOP or drain in force), 75 refused because
//!   something is live (it says what), 64 usage, 78 any other error (the directory, its
//!   config, a file it cannot list, stat or unlink).
//! - `cargo xtask conformance [--worklane PATH] [--only ID] [--list] [-v]`: builds the CLI
//!   and runs the protocol conformance kit (`conformance/run.py`) against it (or against the
//!   binary at PATH, such as the one `dist` made), once PROTOCOL.md is seen to cite every case
//!   under its section.
//! - `cargo xtask man [DIR]`: writes the man pages, `worklane.1` and `worklane-<command>.1`
//!   for every command (nested ones as `worklane-lease-run.1`), into DIR (default
//!   `target/man`), by running the CLI's own `worklane man --all DIR`.
//! - `cargo xtask dist [DIR]`: builds the `worklane` binary to install (on `*-linux-gnu`
//!   hosts: for musl, statically linked at a fixed address, so that it starts in a fraction of
//!   a dynamically linked build's time), checks that it takes a slot and runs a command on a
//!   scratch directory, and copies it into DIR (default `target/dist`).
//! - `cargo xtask mutants [--crate NAME]... [--shard K/N] [--iterate] [--list]`: mutation
//!   testing of the library crates with `cargo mutants` (installed separately), each crate
//!   measured by its own tests; see MUTANTS.md.
//! - `cargo xtask bench [--measurement-time SECS] [--table-only]`: builds the release binaries
//!   the benches run, runs every bench of `worklane-benches` but `fleet` (which needs etcd) with
//!   short measurement times, and prints a Markdown table of the medians to stdout: the
//!   "Current" table of BENCHMARKS.md. `--table-only` prints the table of the results already
//!   in `target/criterion` without running anything.
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! `cargo xtask` is an alias in `.cargo/config.toml` for `run --quiet --package xtask --`.
//! `ci` runs CI's steps in order (`steps()`); before `cargo package` it removes cargo's
//! extractions of our earlier packages (`forget_packaged_siblings`), which cargo would otherwise
//! reuse. `conformance` builds the CLI (and `lease-holder`, worklane-lease's helper, in a build
//! of its own so that the crate's test seams never reach the CLI) and runs the conformance kit
//! against them.
//! `man [DIR]` runs `cargo run -p worklane -- man --all DIR`: the pages come from the built CLI
//! (`ops::man_pages` walks the clap `Command`, one page per command that is not hidden) rather
//! than from a library target of the CLI crate, which would make its clap types a public API and
//! link clap and SQLite into xtask.
//! `bench` (`src/bench.rs`) builds `PREREQUISITES` (the release binaries the benches run), runs
//! `BENCHES` (every bench but `fleet`) with `WARM_UP_SECS` and `MEASUREMENT_SECS`, then turns each
//! `new/estimates.json` under criterion's directory (`collect`) into the Markdown table of
//! BENCHMARKS.md's "Current" section (`markdown_table`, a pure function of the estimates' texts,
//! unit-tested without a bench).
//! `reclaim-guards` (`src/reclaim.rs`, `run`) resolves the directory like the CLI (`--dir` sets
//! `AGENT_SLOTS_DIR`), refuses unless STOP or a drain is in force (`Outcome::NoWindow`, exit
//! 69), then refuses if any `Pool::snapshot` entry counts as held or any guard
//! (`worklane_guard::reclaim::scan`) is held (`Outcome::Live`, exit 75; its exit codes are the
//! CLI's, in its `exit` module, checked against `crates/cli/src/exit.rs` by a test);
//! otherwise it plans (dry run) or applies `reclaim::remove_guard` for guards whose resource file
//! is absent (re-checked while held) and `remove_temp_alias` (dry run: `is_stale_temp_alias`)
//! for aliases at least
//! `TEMP_MIN_AGE_MS` old. `mutants [--crate NAME]... [--shard K/N] [--list]` runs
//! `cargo mutants` (installed separately) on each library crate with `.cargo/mutants.toml`
//! (test helpers excluded), each crate's mutants measured by its own tests, output under
//! `target/mutants/`. `ci` runs in order, stopping at the first failure: `fmt --all -- --check`;
//! `clippy --workspace --all-targets -- -D warnings`; `test --workspace`; `package --workspace`
//! without testkit, xtask and the benches (each published crate's package built against its
//! siblings' packages); the conformance kit; the fleet's clippy and tests against etcd;
//! `dist` (below), then the CLI's integration tests (`WORKLANE_TEST_BINARY`) and the
//! conformance kit (`conformance --worklane PATH`) against the binary it made; `check` of
//! `MACOS_CRATES` (guard, slotfile, identity, lease, transport, admission, budget, run, the `worklane` CLI and
//! the dispatcher's client half: the crates without SQLite) for `x86_64-apple-darwin`, with `-D warnings` for that target (its
//! macOS-only code gets no clippy run). It runs `$CARGO` (else `cargo`) and exits 64 on bad usage.
//! `dist [DIR]` (`dist.rs`) builds the binary to install: on `*-linux-gnu`, for the musl twin of
//! the host's target (`musl_target`), static and not position-independent
//! (`relocation-model=static`), after checking that the musl target and a musl C compiler are
//! there (`missing_for_musl`). Why each choice, measured: glibc's start probes the caches with
//! `cpuid` (trapped by a hypervisor), a static PIE copies every page it relocates, and musl's
//! allocator maps and unmaps pages for small allocations, so the CLI sets dlmalloc as its global
//! allocator when built for musl (`crates/cli/src/main.rs`); the build uses the workspace's
//! `release-lto` profile (fat LTO, one codegen unit). It then runs the binary once
//! (`run -n -- true` on a scratch directory) and copies it into `target/dist`. `.ci/run`
//! is the CI entry: it installs what a fresh machine lacks, then runs `cargo xtask ci`.

#![allow(clippy::print_stdout)]

mod bench;
/// The CLI's error-chain formatter, the same file: both binaries print an error's chain alike.
#[path = "../../crates/cli/src/chain.rs"]
mod chain;
mod dist;
mod reclaim;

use std::os::fd::AsFd;
use std::process::{Command, ExitCode};

/// The exit codes xtask shares with the `worklane` CLI (`crates/cli/src/exit.rs`, sysexits
/// values), so that a script treats a refusal of either the same way.
mod exit {
    /// The command line is wrong.
    pub(crate) const USAGE: u8 = 64;
    /// Refused by the machine's state an operator sets: no maintenance window is open.
    pub(crate) const UNAVAILABLE: u8 = 69;
    /// Busy: something is live; try again later.
    pub(crate) const TEMP_FAIL: u8 = 75;
    /// The directory, its config or a file in it is wrong.
    pub(crate) const CONFIG: u8 = 78;
}

/// The crates that must compile for macOS: every crate that does not link SQLite (the
/// dispatcher without its `server` feature).
const MACOS_CRATES: &[&str] = &[
    "worklane-guard",
    "worklane-slotfile",
    "worklane-journal",
    "worklane-identity",
    "worklane-lease",
    "worklane-transport",
    "worklane-admission",
    "worklane-dispatch",
    "worklane-budget",
    "worklane-run",
    "worklane-fleet",
    "worklane",
];

/// The macOS target of the compile check.
const MACOS_TARGET: &str = "x86_64-apple-darwin";

/// One CI step: a description and a cargo command line.
struct Step {
    what: &'static str,
    args: Vec<String>,
    /// Variables set for the step's cargo.
    env: Vec<(&'static str, std::path::PathBuf)>,
}

/// Where the packaging step builds: a directory of its own, emptied before each run. Cargo
/// takes a registry crate's compiled artifacts for unchanged as long as its name, version
/// and source are: built in the workspace's target directory, a sibling's package from an
/// earlier run (with an older API) would be linked instead of today's.
/// Where `cargo xtask dist` leaves the binary by default.
fn dist_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), std::path::PathBuf::from)
        .join("dist")
}

fn package_target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), std::path::PathBuf::from)
        .join("package-check")
}

/// Removes cargo's extractions of our own packages from earlier `cargo package` runs. Cargo
/// verifies each package against its siblings' packages through a temporary registry whose
/// sources it extracts into `$CARGO_HOME/registry/src/-<hash>/` (a directory name starting
/// with `-`), and it never extracts a `name-version` again once that directory exists: a
/// second run would build against the first run's sources (a sibling's API as it was) and
/// fail. Only those temporary registries' `worklane-*` directories are removed.
fn forget_packaged_siblings() {
    let _ = std::fs::remove_dir_all(package_target_dir());
    let home = std::env::var_os("CARGO_HOME").map_or_else(
        || std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
        std::path::PathBuf::from,
    );
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        return;
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let Ok(crates) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for krate in crates.flatten() {
            if krate.file_name().to_string_lossy().starts_with("worklane") {
                let _ = std::fs::remove_dir_all(krate.path());
            }
        }
    }
}

fn steps() -> Vec<Step> {
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let mut macos = words("check");
    for krate in MACOS_CRATES {
        macos.push("-p".to_owned());
        macos.push((*krate).to_owned());
    }
    macos.push("--target".to_owned());
    macos.push(MACOS_TARGET.to_owned());
    // The dispatcher's SQLite is C, compiled by the build script: no macOS cross compiler
    // here, so the check leaves that default feature off.
    macos.push("--no-default-features".to_owned());
    // Code compiled only for macOS gets no clippy run here: at least its warnings fail CI.
    macos.push("--config".to_owned());
    macos.push(format!(
        "target.{MACOS_TARGET}.rustflags=[\"-D\", \"warnings\"]"
    ));
    vec![
        Step {
            what: "formatting",
            args: words("fmt --all -- --check"),
            env: Vec::new(),
        },
        Step {
            what: "clippy, warnings denied",
            args: words("clippy --workspace --all-targets -- -D warnings"),
            env: Vec::new(),
        },
        Step {
            // Every public item documented, every intra-doc link resolved.
            what: "docs, warnings denied",
            args: {
                let mut args = words(
                    "doc --no-deps --workspace --exclude xtask --exclude worklane-benches --config",
                );
                args.push("build.rustdocflags=[\"-D\", \"warnings\"]".to_owned());
                args
            },
            env: Vec::new(),
        },
        Step {
            // The README's test command.
            what: "tests",
            args: words("test --workspace"),
            env: Vec::new(),
        },
        Step {
            // Every published crate packages and its package builds on its own, siblings
            // taken from the packages just made (not from the workspace). `--allow-dirty`:
            // the check is of the packages, so it also runs before a commit.
            what: "packaging",
            args: {
                let mut args = words(
                    "package --workspace --exclude worklane-testkit --exclude xtask \
                     --exclude worklane-benches --allow-dirty --target-dir",
                );
                args.push(package_target_dir().display().to_string());
                args
            },
            env: Vec::new(),
        },
        Step {
            // The protocol's conformance kit against worklane itself (python3, stdlib only).
            what: "protocol conformance kit",
            args: words("run --quiet -p xtask -- conformance"),
            env: Vec::new(),
        },
        Step {
            what: "fleet clippy, with its etcd client and the CLI's --fleet",
            args: words(
                "clippy -p worklane-fleet -p worklane --features worklane-fleet/etcd,worklane/fleet \
                 --all-targets -- -D warnings",
            ),
            env: Vec::new(),
        },
        Step {
            // A 3-member etcd cluster started by the tests themselves (etcd from Debian's
            // etcd-server; the client's build needs protoc, from protobuf-compiler).
            what: "fleet tests against a real etcd",
            args: words("test -p worklane-fleet --features etcd"),
            env: Vec::new(),
        },
        Step {
            what: "the CLI's --fleet against a real etcd",
            args: words("test -p worklane --features fleet --test all fleet::"),
            env: Vec::new(),
        },
        Step {
            what: "the CLI's proxy (feature proxy: hyper, tokio, rustls), clippy",
            args: words("clippy -p worklane --features proxy --all-targets -- -D warnings"),
            env: Vec::new(),
        },
        Step {
            what: "the CLI's proxy, its tests",
            args: words("test -p worklane --features proxy --test all proxy::"),
            env: Vec::new(),
        },
        Step {
            what: "`worklane top` (feature `top`: ratatui on crossterm): clippy",
            args: words("clippy -p worklane --features top --all-targets -- -D warnings"),
            env: Vec::new(),
        },
        Step {
            // Driven in a tmux session: send-keys to type, capture-pane to read the screen.
            what: "`worklane top` in tmux",
            args: words("test -p worklane --features top --test all top::"),
            env: Vec::new(),
        },
        Step {
            // The binary to install: statically linked, and run once on a scratch directory.
            what: "the distributed binary",
            args: words("run --quiet -p xtask -- dist"),
            env: Vec::new(),
        },
        Step {
            // The shipped binary (musl, static) must behave as the debug build does: the CLI's
            // tests, then the protocol's kit, run against it.
            what: "the CLI's tests against the distributed binary",
            args: words("test -p worklane --test all"),
            env: vec![("WORKLANE_TEST_BINARY", dist_dir().join("worklane"))],
        },
        Step {
            what: "protocol conformance kit against the distributed binary",
            args: {
                let mut args = words("run --quiet -p xtask -- conformance --worklane");
                args.push(dist_dir().join("worklane").display().to_string());
                args
            },
            env: Vec::new(),
        },
        Step {
            what: "macOS compile check",
            args: macos,
            env: Vec::new(),
        },
    ]
}

fn ci() -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for step in steps() {
        if step.args.first().is_some_and(|a| a == "package") {
            forget_packaged_siblings();
        }
        let env: String = step
            .env
            .iter()
            .map(|(k, v)| format!("{k}={} ", v.display()))
            .collect();
        eprintln!("==> {}: {env}cargo {}", step.what, step.args.join(" "));
        #[allow(
            clippy::disallowed_methods,
            reason = "not a test: CI runs its cargo steps one after another, holding no guard"
        )]
        let ran = Command::new(&cargo)
            .args(&step.args)
            .envs(step.env.iter().map(|(k, v)| (k, v)))
            .status();
        match ran {
            Ok(status) if status.success() => {}
            Ok(status) => {
                eprintln!("xtask ci: {} failed ({status})", step.what);
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("xtask ci: cannot run cargo for {}: {e}", step.what);
                return ExitCode::FAILURE;
            }
        }
    }
    eprintln!("xtask ci: all steps passed");
    ExitCode::SUCCESS
}

const USAGE: &str = "usage: cargo xtask ci | \
                     cargo xtask conformance [--worklane PATH] [--only ID] [--list] [-v] | \
                     cargo xtask reclaim-guards [--dir DIR] [--apply] | \
                     cargo xtask man [DIR] | cargo xtask dist [DIR] | \
                     cargo xtask bench [--measurement-time SECS] [--table-only] | \
                     cargo xtask mutants [--crate NAME]... [--shard K/N] [--iterate] [--list]";

/// `cargo xtask conformance [RUNNER ARGS]`: builds the CLI (and `lease-holder`, the lease
/// crate's helper the kit's `lock` action runs) and runs the protocol conformance kit
/// (`conformance/run.py`, Python 3) against it, through the kit's worklane adapter, after
/// checking that PROTOCOL.md cites every case under its section (`run.py --check-citations`).
fn conformance(args: &[String]) -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = workspace_root();
    // `--worklane PATH`: the kit runs against that binary (the distributed one) instead of a
    // debug build made here.
    let (given, args) = match args {
        [flag, path, rest @ ..] if flag == "--worklane" => (
            Some(std::path::absolute(path).unwrap_or_else(|_| path.into())),
            rest,
        ),
        [flag] if flag == "--worklane" => {
            eprintln!("xtask conformance: --worklane takes the binary's path\n{USAGE}");
            return ExitCode::from(exit::USAGE);
        }
        _ => (None, args),
    };
    // Two builds: the helper needs the lease crate's test seams, which must not reach the CLI
    // under test (one build would unify the features).
    let builds: [(&str, &[&str]); 2] = [
        (
            "the worklane CLI",
            &["build", "--quiet", "--package", "worklane"],
        ),
        (
            "lease-holder",
            &[
                "build",
                "--quiet",
                "--package",
                "worklane-lease",
                "--features",
                "test-seams",
                "--bin",
                "lease-holder",
            ],
        ),
    ];
    for (what, args) in builds
        .into_iter()
        .filter(|(what, _)| given.is_none() || *what != "the worklane CLI")
    {
        #[allow(
            clippy::disallowed_methods,
            reason = "not a test: builds the CLI and runs the kit in the foreground, holding no \
                      guard"
        )]
        let built = Command::new(&cargo).args(args).current_dir(&root).status();
        if !built.is_ok_and(|s| s.success()) {
            eprintln!("xtask conformance: cannot build {what}");
            return ExitCode::FAILURE;
        }
    }
    let debug = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from)
        .join("debug");
    let run = |args: &[String]| {
        #[allow(
            clippy::disallowed_methods,
            reason = "not a test: runs the kit in the foreground, holding no guard"
        )]
        Command::new("python3")
            .arg(root.join("conformance").join("run.py"))
            .args(args)
            .env(
                "WORKLANE",
                given.clone().unwrap_or_else(|| debug.join("worklane")),
            )
            .env("WORKLANE_LEASE_HOLDER", debug.join("lease-holder"))
            .current_dir(&root)
            .status()
    };
    // Whatever is asked (a subset, a listing), the citations must be the cases'.
    match run(&["--check-citations".to_owned()]) {
        Ok(status) if status.success() => {}
        Ok(_) => return ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask conformance: cannot run python3 conformance/run.py: {e}");
            return ExitCode::FAILURE;
        }
    }
    let ran = run(args);
    match ran {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask conformance: cannot run python3 conformance/run.py: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask man [DIR]`: the man pages of every command, from the clap definitions, by
/// `cargo run -p worklane -- man --all DIR`.
///
/// The pages come from the binary rather than from a library: the CLI crate is a binary only,
/// and giving it a library target just to hand its clap `Command` to xtask would make its
/// argument types a public API (every field documented, kept stable) and link clap and the
/// dispatcher's SQLite into xtask. Running the built CLI renders exactly the pages of the
/// binary that gets installed.
fn man(args: &[String]) -> ExitCode {
    let dir = match args {
        [] => std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| workspace_root().join("target"), std::path::PathBuf::from)
            .join("man"),
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
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
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
        .current_dir(workspace_root())
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

/// The crates whose tests mutation testing measures (MUTANTS.md).
const MUTATED_CRATES: &[&str] = &[
    "guard",
    "slotfile",
    "identity",
    "lease",
    "transport",
    "admission",
    "dispatch",
    "budget",
];

/// `cargo xtask mutants`: runs `cargo mutants` over each crate (all of them, or each
/// `--crate`), one shard of it with `--shard K/N`, with the exclusions of
/// `.cargo/mutants.toml` (test helpers). Each crate's mutants are tested by that crate's own
/// tests; results go to `target/mutants/<crate>[-K-of-N]/mutants.out`. A full run takes hours
/// on 2 cores: shard it. `--iterate` tests again only what the last run there did not catch
/// (after new tests, the survivors).
fn mutants(args: &[String]) -> ExitCode {
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
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut failed = false;
    for krate in &crates {
        let mut cmd = Command::new(&cargo);
        cmd.args(["mutants", "--package", &format!("worklane-{krate}")]);
        if list {
            cmd.arg("--list");
        } else {
            let mut name = (*krate).clone();
            if let Some(shard) = &shard {
                name.push('-');
                name.push_str(&shard.replace('/', "-of-"));
                cmd.args(["--shard", shard]);
            }
            let out = workspace_root().join("target/mutants").join(name);
            if let Err(e) = std::fs::create_dir_all(&out) {
                eprintln!("xtask mutants: cannot create {}: {e}", out.display());
                return ExitCode::FAILURE;
            }
            cmd.arg("--output").arg(&out);
            if iterate {
                cmd.arg("--iterate");
            }
        }
        cmd.current_dir(workspace_root());
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

/// `cargo xtask bench`: builds what the benches run ([`bench::PREREQUISITES`]), runs
/// [`bench::BENCHES`] with short warm-up and measurement times, then prints the Markdown table
/// of every result criterion holds (`target/criterion`, or `$CARGO_TARGET_DIR/criterion`).
/// Criterion keeps the results of earlier runs, so a bench left out of this run (`fleet`)
/// keeps its last row; remove `target/criterion` first for a table of this run alone.
fn bench(args: &[String]) -> ExitCode {
    let mut measurement = bench::MEASUREMENT_SECS.to_owned();
    let mut table_only = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--table-only" => table_only = true,
            "--measurement-time" => match args.next() {
                Some(secs) if secs.parse::<f64>().is_ok_and(|s| s > 0.0) => {
                    measurement.clone_from(secs);
                }
                other => {
                    eprintln!(
                        "xtask bench: --measurement-time takes seconds above 0 (got {other:?})"
                    );
                    return ExitCode::from(exit::USAGE);
                }
            },
            other => {
                eprintln!("xtask bench: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(exit::USAGE);
            }
        }
    }
    let root = workspace_root();
    if !table_only {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut runs: Vec<Vec<String>> = bench::PREREQUISITES
            .iter()
            .map(|args| args.iter().map(|a| (*a).to_owned()).collect())
            .collect();
        let mut run = vec![
            "bench".to_owned(),
            "-p".to_owned(),
            "worklane-benches".to_owned(),
        ];
        for name in bench::BENCHES {
            run.push("--bench".to_owned());
            run.push((*name).to_owned());
        }
        run.extend(
            [
                "--",
                "--warm-up-time",
                bench::WARM_UP_SECS,
                "--measurement-time",
                &measurement,
            ]
            .map(str::to_owned),
        );
        runs.push(run);
        for args in runs {
            eprintln!("==> cargo {}", args.join(" "));
            #[allow(
                clippy::disallowed_methods,
                reason = "not a test: builds and benches run in the foreground, holding no guard"
            )]
            // Criterion reports on stdout: that goes to stderr, so that stdout is the table.
            let ran = std::io::stderr()
                .as_fd()
                .try_clone_to_owned()
                .and_then(|err| {
                    Command::new(&cargo)
                        .args(&args)
                        .current_dir(&root)
                        .stdout(err)
                        .status()
                });
            match ran {
                Ok(status) if status.success() => {}
                Ok(status) => {
                    eprintln!("xtask bench: cargo {} failed ({status})", args.join(" "));
                    return ExitCode::FAILURE;
                }
                Err(e) => {
                    eprintln!("xtask bench: cannot run cargo: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let dir = std::env::var_os("CRITERION_HOME").map_or_else(
        || {
            std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| root.join("target"), std::path::PathBuf::from)
                .join("criterion")
        },
        std::path::PathBuf::from,
    );
    match bench::collect(&dir).and_then(|found| bench::markdown_table(&found)) {
        Ok(table) => {
            print!("{table}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace's root directory (xtask's parent).
/// The workspace's target directory (`CARGO_TARGET_DIR` or `target`).
fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), std::path::PathBuf::from)
}

fn workspace_root() -> std::path::PathBuf {
    let xtask = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_owned()
}

/// `Some((k, n))` for `K/N` with `0 <= k < n`.
fn parse_shard(text: &str) -> Option<(u32, u32)> {
    let (k, n) = text.split_once('/')?;
    let (k, n) = (k.parse().ok()?, n.parse().ok()?);
    (k < n).then_some((k, n))
}

fn reclaim_guards(args: &[String]) -> ExitCode {
    let mut dir = None;
    let mut apply = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--apply" => apply = true,
            "--dir" => match args.next() {
                Some(d) => dir = Some(std::path::PathBuf::from(d)),
                None => {
                    eprintln!("xtask reclaim-guards: --dir needs a directory\n{USAGE}");
                    return ExitCode::from(exit::USAGE);
                }
            },
            other => {
                eprintln!("xtask reclaim-guards: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(exit::USAGE);
            }
        }
    }
    let env = worklane_slotfile::Environment::from_process();
    match reclaim::run(&env, dir.as_deref(), apply, &mut std::io::stdout()) {
        Ok(outcome) => ExitCode::from(reclaim_code(&outcome)),
        Err(e) => {
            eprintln!("xtask reclaim-guards: {e}");
            ExitCode::from(exit::CONFIG)
        }
    }
}

/// The exit code of a reclaim run: 0 done, 69 no window, 75 something live.
fn reclaim_code(outcome: &reclaim::Outcome) -> u8 {
    match outcome {
        reclaim::Outcome::Done { .. } => 0,
        reclaim::Outcome::NoWindow(_) => exit::UNAVAILABLE,
        reclaim::Outcome::Live(_) => exit::TEMP_FAIL,
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("reclaim-guards") => reclaim_guards(&args[1..]),
        Some("mutants") => mutants(&args[1..]),
        Some("man") => man(&args[1..]),
        Some("conformance") => conformance(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("dist") => dist::dist(&args[1..], &target_dir(), &workspace_root()),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(exit::USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{exit, parse_shard, reclaim, reclaim_code};

    #[test]
    fn a_refused_reclaim_exits_with_the_clis_codes() {
        assert_eq!(
            reclaim_code(&reclaim::Outcome::NoWindow(Vec::new())),
            69,
            "no window: unavailable, as a STOP or drain is in the CLI"
        );
        assert_eq!(
            reclaim_code(&reclaim::Outcome::Live(Vec::new())),
            75,
            "something live: busy, try again later"
        );
        let done = reclaim::Outcome::Done {
            removed: Vec::new(),
            busy: Vec::new(),
        };
        assert_eq!(reclaim_code(&done), 0);
    }

    #[test]
    fn the_shared_codes_are_the_clis() {
        let cli = std::fs::read_to_string(super::workspace_root().join("crates/cli/src/exit.rs"))
            .expect("the CLI's exit codes");
        for (name, code) in [
            ("USAGE", exit::USAGE),
            ("UNAVAILABLE", exit::UNAVAILABLE),
            ("TEMP_FAIL", exit::TEMP_FAIL),
            ("CONFIG", exit::CONFIG),
        ] {
            let line = format!("pub(crate) const {name}: u8 = {code};");
            assert!(cli.contains(&line), "crates/cli/src/exit.rs has `{line}`");
        }
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
