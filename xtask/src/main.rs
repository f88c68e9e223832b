//! `cargo xtask`: maintenance tasks of the worklane workspace.
//!
//! - `cargo xtask ci`: runs exactly the steps CI runs (`.ci/run` installs the prerequisites,
//!   then calls this), in order, stopping at the first failure.
//! - `cargo xtask reclaim-guards [--dir DIR] [--apply]`: in a maintenance window (STOP or a
//!   drain in force, nothing live), removes guard inodes no resource file needs and temp
//!   aliases older than a minute. A dry run unless `--apply`. Exit 0 done, 1 refused (it says
//!   what is live), 64 usage, 78 any other error (the directory, its config, a file it cannot
//!   list, stat or unlink).

#![allow(clippy::print_stdout)]

mod reclaim;

use std::process::{Command, ExitCode};

/// The crates that must compile for macOS: every crate that does not link SQLite.
const MACOS_CRATES: &[&str] = &[
    "worklane-guard",
    "worklane-slotfile",
    "worklane-identity",
    "worklane-lease",
    "worklane-admission",
    "worklane-budget",
    "worklane",
];

/// The macOS target of the compile check.
const MACOS_TARGET: &str = "x86_64-apple-darwin";

/// One CI step: a description and a cargo command line.
struct Step {
    what: &'static str,
    args: Vec<String>,
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
    // Code compiled only for macOS gets no clippy run here: at least its warnings fail CI.
    macos.push("--config".to_owned());
    macos.push(format!(
        "target.{MACOS_TARGET}.rustflags=[\"-D\", \"warnings\"]"
    ));
    vec![
        Step {
            what: "formatting",
            args: words("fmt --all -- --check"),
        },
        Step {
            what: "clippy, warnings denied",
            args: words("clippy --workspace --all-targets -- -D warnings"),
        },
        Step {
            // The README's test command.
            what: "tests",
            args: words("test --workspace"),
        },
        Step {
            what: "macOS compile check",
            args: macos,
        },
    ]
}

fn ci() -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for step in steps() {
        eprintln!("==> {}: cargo {}", step.what, step.args.join(" "));
        #[allow(
            clippy::disallowed_methods,
            reason = "not a test: CI runs its cargo steps one after another, holding no guard"
        )]
        let ran = Command::new(&cargo).args(&step.args).status();
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

const USAGE: &str = "usage: cargo xtask ci | cargo xtask reclaim-guards [--dir DIR] [--apply]";

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
                    return ExitCode::from(64);
                }
            },
            other => {
                eprintln!("xtask reclaim-guards: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(64);
            }
        }
    }
    let env = worklane_slotfile::Environment::from_process();
    match reclaim::run(&env, dir.as_deref(), apply, &mut std::io::stdout()) {
        Ok(reclaim::Outcome::Done { .. }) => ExitCode::SUCCESS,
        Ok(reclaim::Outcome::Refused(_)) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask reclaim-guards: {e}");
            ExitCode::from(78)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("reclaim-guards") => reclaim_guards(&args[1..]),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(64)
        }
    }
}
