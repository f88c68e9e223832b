//! `cargo xtask dist [DIR]`: the `worklane` binary to install, built for speed of start.
//!
//! `worklane run` is started once per command it wraps, so its start is its cost. On
//! `*-linux-gnu` hosts the binary is built for the host's musl target (`*-linux-musl`,
//! [`musl_target`]), statically linked and not position-independent (`relocation-model=static`,
//! [`build_args`]), with dlmalloc as its allocator (the CLI sets it as its global allocator when
//! built for musl, in `crates/cli/src/main.rs`); measured as whole processes (BENCHMARKS.md),
//! each step matters:
//! - glibc, even linked statically, spends its start probing the processor's caches with
//!   `cpuid`, which a virtual machine traps (a third of a glibc `true`'s time on the machine
//!   measured); musl's start does not.
//! - A position-independent static binary relocates its own data at every start: every page
//!   holding a pointer is copied on write (about 70 page faults of worklane's 140 before
//!   `main`). A fixed address costs none, and the price is that the binary's own code and
//!   data are not randomised (its stack, heap and mappings still are). worklane is safe Rust
//!   but for one small module, and a user who wants the image randomised installs the plain
//!   `cargo build --release` binary instead.
//! - musl's allocator maps and unmaps a page for each new group of small allocations, about
//!   130 system calls in one `run`; dlmalloc keeps what it gets.
//! - The `release-lto` profile (link-time optimisation, one codegen unit) makes worklane's
//!   code smaller and its start a little cheaper, on every host.
//!
//! The build needs the musl target (`rustup target add <arch>-unknown-linux-musl`) and a musl
//! C compiler for the dispatcher's SQLite (Debian's `musl-tools`); `dist` says which is
//! missing ([`missing_for_musl`]). worklane makes no name-service lookups (users, groups,
//! hosts), which a static binary could not make. Other hosts get the host's own build with that
//! profile. The binary is then copied into DIR (default `target/dist`) and run once there on a
//! scratch slot directory (`run -n -- true`, [`smoke`]), so a build that cannot take a slot and
//! start a command is never handed out; CI also runs the CLI's tests and the protocol
//! conformance kit against it.

use crate::{USAGE, exit};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The host's target triple, from `rustc -vV`.
fn host_triple() -> Option<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    #[allow(
        clippy::disallowed_methods,
        reason = "not a test: asks rustc for its host, holding no guard"
    )]
    let out = Command::new(rustc).arg("-vV").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
}

/// The target the distributed binary is built for on `host`: its musl twin on a Linux host
/// with glibc (`x86_64-unknown-linux-gnu` gives `x86_64-unknown-linux-musl`), else none (the
/// host's own, as a plain release build).
pub(crate) fn musl_target(host: &str) -> Option<String> {
    host.strip_suffix("-linux-gnu")
        .map(|arch| format!("{arch}-linux-musl"))
}

/// The `cargo build` arguments of the distributed binary for `host`.
pub(crate) fn build_args(host: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        "build",
        "--profile",
        PROFILE,
        "--locked",
        "--package",
        "worklane",
    ]
    .map(str::to_owned)
    .to_vec();
    if let Some(musl) = musl_target(host) {
        // With an explicit --target the flags reach the binary and its dependencies but not
        // build scripts and proc-macros, which run on the host.
        args.extend([
            "--target".to_owned(),
            musl.clone(),
            "--config".to_owned(),
            format!(
                "target.{musl}.rustflags=[\"-C\", \"relocation-model=static\", \"-C\", \
                 \"target-feature=+crt-static\"]"
            ),
        ]);
    }
    args
}

/// The cargo profile of the installed binary (the workspace's `Cargo.toml`): release, with
/// link-time optimisation in one codegen unit.
const PROFILE: &str = "release-lto";

/// Where cargo leaves the binary built with [`build_args`].
fn built_binary(target_dir: &Path, host: &str) -> PathBuf {
    match musl_target(host) {
        Some(musl) => target_dir.join(musl).join(PROFILE).join("worklane"),
        None => target_dir.join(PROFILE).join("worklane"),
    }
}

/// What the musl build needs and this machine lacks, each with the command that installs it.
fn missing_for_musl(musl: &str) -> Vec<String> {
    let mut missing = Vec::new();
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    #[allow(
        clippy::disallowed_methods,
        reason = "not a test: asks rustc where the target's library is, holding no guard"
    )]
    let libdir = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", musl])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok());
    let installed = libdir.is_some_and(|dir| {
        std::fs::read_dir(dir.trim()).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("libstd-"))
        })
    });
    if !installed {
        missing.push(format!(
            "the Rust standard library for {musl} (`rustup target add {musl}`)"
        ));
    }
    // cc-rs looks for these, in this order, to compile C for a musl target.
    let arch = musl.split('-').next().unwrap_or(musl);
    let compilers = [format!("{arch}-linux-musl-gcc"), "musl-gcc".to_owned()];
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
    };
    if std::env::var_os(format!("CC_{}", musl.replace('-', "_"))).is_none()
        && !compilers.iter().any(|c| on_path(c))
    {
        missing.push(format!(
            "a C compiler for {musl}, for the dispatcher's SQLite ({} or {} on PATH; Debian: \
             `apt-get install musl-tools`)",
            compilers[0], compilers[1]
        ));
    }
    missing
}

/// `cargo xtask dist [DIR]`: builds the binary in the workspace at `root`, whose target
/// directory is `target_dir`, copies it into DIR (default `target_dir/dist`) and checks the
/// copy with [`smoke`].
pub(crate) fn dist(args: &[String], target_dir: &Path, root: &Path) -> ExitCode {
    let out = match args {
        [] => target_dir.join("dist"),
        [dir] if !dir.starts_with('-') => PathBuf::from(dir),
        _ => {
            eprintln!("xtask dist: takes at most one directory\n{USAGE}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let Some(host) = host_triple() else {
        eprintln!("xtask dist: cannot read the host's target triple from `rustc -vV`");
        return ExitCode::FAILURE;
    };
    if let Some(musl) = musl_target(&host) {
        let missing = missing_for_musl(&musl);
        if !missing.is_empty() {
            eprintln!(
                "xtask dist: the binary is built for {musl}, and this machine lacks {}",
                missing.join(", and ")
            );
            return ExitCode::FAILURE;
        }
    }
    let cargo = crate::cargo();
    #[allow(
        clippy::disallowed_methods,
        reason = "not a test: builds the binary in the foreground, holding no guard"
    )]
    let built = Command::new(&cargo)
        .args(build_args(&host))
        .current_dir(root)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("xtask dist: the build failed");
        return ExitCode::FAILURE;
    }
    let binary = out.join("worklane");
    let copied = std::fs::create_dir_all(&out)
        .and_then(|()| std::fs::copy(built_binary(target_dir, &host), &binary));
    if let Err(e) = copied {
        eprintln!(
            "xtask dist: cannot copy the binary into {}: {e}",
            out.display()
        );
        return ExitCode::FAILURE;
    }
    if let Err(e) = smoke(&binary) {
        eprintln!("xtask dist: {} does not work: {e}", binary.display());
        return ExitCode::FAILURE;
    }
    let target = musl_target(&host).unwrap_or(host);
    eprintln!("xtask dist: {} ({target})", binary.display());
    ExitCode::SUCCESS
}

/// Runs `binary run -n -- true` on a slot directory of its own, which is removed after.
fn smoke(binary: &Path) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("worklane-dist-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    #[allow(
        clippy::disallowed_methods,
        reason = "not a test: runs the built binary once on a scratch directory"
    )]
    let ran = Command::new(binary)
        .args(["run", "-n", "--", "true"])
        .env("AGENT_SLOTS_DIR", &dir)
        .env_remove("AGENT_SLOTS_CONFIG")
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match ran {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "`run -n -- true` ended with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run it: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gnu_linux_host_gets_a_static_fixed_address_musl_build_and_others_the_plain_one() {
        let gnu = build_args("x86_64-unknown-linux-gnu");
        let at = gnu.iter().position(|a| a == "--target").expect("--target");
        assert_eq!(gnu[at + 1], "x86_64-unknown-linux-musl");
        let flags = gnu
            .iter()
            .find(|a| a.starts_with("target.x86_64-unknown-linux-musl.rustflags="))
            .expect("rustflags for the musl target");
        assert!(flags.contains("relocation-model=static"), "{flags}");
        assert!(flags.contains("target-feature=+crt-static"), "{flags}");
        let at = gnu
            .iter()
            .position(|a| a == "--profile")
            .expect("--profile");
        assert_eq!(gnu[at + 1], "release-lto");
        assert_eq!(
            built_binary(Path::new("t"), "x86_64-unknown-linux-gnu"),
            Path::new("t/x86_64-unknown-linux-musl/release-lto/worklane")
        );
        assert_eq!(
            musl_target("aarch64-unknown-linux-gnu").as_deref(),
            Some("aarch64-unknown-linux-musl")
        );
        for other in [
            "aarch64-apple-darwin",
            "x86_64-unknown-freebsd",
            "x86_64-unknown-linux-musl",
        ] {
            assert_eq!(musl_target(other), None, "{other}");
            let args = build_args(other);
            assert!(
                !args
                    .iter()
                    .any(|a| a == "--target" || a.contains("rustflags")),
                "{other}: {args:?}"
            );
            assert_eq!(
                built_binary(Path::new("t"), other),
                Path::new("t/release-lto/worklane")
            );
        }
    }

    #[test]
    fn a_missing_musl_target_is_named_with_the_command_that_installs_it() {
        let missing = missing_for_musl("x86_64-unknown-nosuch-musl");
        assert!(
            missing
                .iter()
                .any(|m| m.contains("rustup target add x86_64-unknown-nosuch-musl")),
            "{missing:?}"
        );
    }
}
