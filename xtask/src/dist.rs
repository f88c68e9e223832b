//! `cargo xtask dist [DIR]`: the `worklane` binary to install, built for speed of start.
//!
//! On `*-linux-gnu` hosts the binary is linked statically (`-C target-feature=+crt-static`,
//! a static PIE, so its addresses are still randomised): a dynamically linked Rust binary
//! spends about as long in the loader (three shared libraries, then the relocations of its
//! own data) as `worklane run` spends on its protocol, and `worklane` is started once per
//! command it wraps. glibc's static library needs nothing at run time here: worklane makes
//! no name-service lookups (users, groups, hosts). Other hosts get the ordinary release
//! build. The binary is then run once on a scratch slot directory (`run -n -- true`), so a
//! build that cannot take a slot and start a command is never handed out.

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

/// The `cargo build` arguments of the distributed binary for `host`.
pub(crate) fn build_args(host: &str) -> Vec<String> {
    let mut args: Vec<String> = ["build", "--release", "--locked", "--package", "worklane"]
        .map(str::to_owned)
        .to_vec();
    if host.ends_with("-linux-gnu") {
        // With an explicit --target the flags reach the binary and its dependencies but not
        // build scripts and proc-macros, which cannot be linked statically.
        args.extend([
            "--target".to_owned(),
            host.to_owned(),
            "--config".to_owned(),
            format!("target.{host}.rustflags=[\"-C\", \"target-feature=+crt-static\"]"),
        ]);
    }
    args
}

/// Where cargo leaves the binary built with [`build_args`].
fn built_binary(target_dir: &Path, host: &str) -> PathBuf {
    if host.ends_with("-linux-gnu") {
        target_dir.join(host).join("release").join("worklane")
    } else {
        target_dir.join("release").join("worklane")
    }
}

pub(crate) fn dist(args: &[String], target_dir: &Path, root: &Path) -> ExitCode {
    let out = match args {
        [] => target_dir.join("dist"),
        [dir] if !dir.starts_with('-') => PathBuf::from(dir),
        _ => {
            eprintln!("xtask dist: takes at most one directory\n{}", crate::USAGE);
            return ExitCode::from(crate::exit::USAGE);
        }
    };
    let Some(host) = host_triple() else {
        eprintln!("xtask dist: cannot read the host's target triple from `rustc -vV`");
        return ExitCode::FAILURE;
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    #[allow(
        clippy::disallowed_methods,
        reason = "not a test: builds the binary in the foreground, holding no guard"
    )]
    let built = Command::new(&cargo)
        .args(build_args(&host))
        .current_dir(root)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("xtask dist: the release build failed");
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
    eprintln!("xtask dist: {} ({host})", binary.display());
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
    fn a_gnu_linux_host_gets_a_static_build_for_its_own_target_and_others_the_plain_one() {
        let gnu = build_args("x86_64-unknown-linux-gnu");
        let at = gnu.iter().position(|a| a == "--target").expect("--target");
        assert_eq!(gnu[at + 1], "x86_64-unknown-linux-gnu");
        assert!(
            gnu.iter().any(|a| a.contains("target-feature=+crt-static")
                && a.starts_with("target.x86_64-unknown-linux-gnu.")),
            "{gnu:?}"
        );
        assert_eq!(
            built_binary(Path::new("t"), "x86_64-unknown-linux-gnu"),
            Path::new("t/x86_64-unknown-linux-gnu/release/worklane")
        );
        let mac = build_args("aarch64-apple-darwin");
        assert!(
            !mac.iter()
                .any(|a| a == "--target" || a.contains("crt-static"))
        );
        assert_eq!(
            built_binary(Path::new("t"), "aarch64-apple-darwin"),
            Path::new("t/release/worklane")
        );
    }
}
