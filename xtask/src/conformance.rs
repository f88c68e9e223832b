//! `cargo xtask conformance [--worklane PATH] [--only ID] [--list] [-v]`: the protocol
//! conformance kit (`conformance/run.py`, Python 3) against the CLI.
//!
//! [`conformance`] builds the CLI (and `lease-holder`, worklane-lease's helper, in a build of
//! its own so that the crate's test seams never reach the CLI), or takes the binary at
//! `--worklane PATH` (such as the one `dist` made), and runs the kit against them, once
//! PROTOCOL.md is seen to cite every case under its section.

use crate::{USAGE, exit};
use std::process::{Command, ExitCode};

/// `cargo xtask conformance [RUNNER ARGS]`: builds the CLI (and `lease-holder`, the lease
/// crate's helper the kit's `lock` action runs) and runs the protocol conformance kit
/// (`conformance/run.py`, Python 3) against it, through the kit's worklane adapter, after
/// checking that PROTOCOL.md cites every case under its section (`run.py --check-citations`).
pub(crate) fn conformance(args: &[String]) -> ExitCode {
    let cargo = crate::cargo();
    let root = crate::workspace_root();
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
    let debug = crate::target_dir().join("debug");
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
