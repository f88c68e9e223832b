//! `cargo xtask`: maintenance tasks of the worklane workspace.
//!
//! - `cargo xtask ci`: runs exactly the steps CI runs (`.ci/run` installs the prerequisites,
//!   then calls this), in order, stopping at the first failure.

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
        match Command::new(&cargo).args(&step.args).status() {
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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        _ => {
            eprintln!("usage: cargo xtask ci");
            ExitCode::from(64)
        }
    }
}
