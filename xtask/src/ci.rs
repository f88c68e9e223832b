//! `cargo xtask ci`: runs exactly the steps CI runs, in order, stopping at the first failure.
//! `.ci/run` is CI's entry: it installs what a fresh machine lacks, then runs this.
//!
//! The steps (`steps()`): `fmt --all -- --check`; `clippy --workspace --all-targets -- -D
//! warnings`; `doc` with rustdoc's warnings denied; `test --workspace`; `package --workspace`
//! without testkit, xtask and the benches (each published crate's package built against its
//! siblings' packages); the conformance kit; the fleet's clippy and tests against etcd; the
//! clippy and tests of the CLI's `proxy` and `top` features; `dist` (`dist.rs`), then the CLI's
//! integration tests (`WORKLANE_TEST_BINARY`) and the conformance kit (`conformance --worklane
//! PATH`) against the binary it made; `check` of `MACOS_CRATES` (the crates that build without
//! SQLite, the dispatcher among them) for `x86_64-apple-darwin`, with `-D warnings` for that
//! target (its macOS-only code gets no clippy run). Before `cargo package` it removes cargo's
//! extractions of our earlier packages (`forget_packaged_siblings`), which cargo would
//! otherwise reuse. Each step runs `$CARGO` (else `cargo`).

use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// The crates that must compile for macOS: every crate that does not link SQLite (the
/// dispatcher without its `server` feature).
const MACOS_CRATES: &[&str] = &[
    "worklane-stdx",
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
    "worklane-config",
    "worklane-view",
    "worklane",
];

/// The macOS target of the compile check.
const MACOS_TARGET: &str = "x86_64-apple-darwin";

/// One CI step: a description and a cargo command line.
struct Step {
    what: &'static str,
    args: Vec<String>,
    /// Variables set for the step's cargo.
    env: Vec<(&'static str, PathBuf)>,
}

/// Where `cargo xtask dist` leaves the binary by default.
fn dist_dir() -> PathBuf {
    crate::target_dir().join("dist")
}

/// Where the packaging step builds: a directory of its own, emptied before each run. Cargo
/// takes a registry crate's compiled artifacts for unchanged as long as its name, version
/// and source are: built in the workspace's target directory, a sibling's package from an
/// earlier run (with an older API) would be linked instead of today's.
fn package_target_dir() -> PathBuf {
    crate::target_dir().join("package-check")
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
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
        PathBuf::from,
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

/// CI's steps, in the order they run.
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
            // With the binary's own unit tests of its fleet module (what each error exits).
            what: "the CLI's --fleet against a real etcd",
            args: words("test -p worklane --features fleet --bin worklane --test all fleet::"),
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

/// Runs every step of [`steps`] in order; the first that fails (or cannot start) ends the run.
pub(crate) fn ci() -> ExitCode {
    let cargo = crate::cargo();
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
