//! Test helper: acquires a guard in a process of its own so the integration tests can kill it,
//! change its umask, close its standard input or let a child inherit its descriptor.
//!
//! `guard-holder try DIR RESOURCE`: prints `held`, `busy` or `error: <message and its causes>`.
//! `guard-holder hold DIR RESOURCE`: prints `held`, then keeps the guard until stdin closes.
//! `guard-holder hold-inherit DIR RESOURCE`: prints `child <pid>` of a `cat` that inherited a
//! duplicate of the held descriptor and reads this helper's standard input (so it ends when
//! the test closes that pipe, even if the test fails before it kills it), drops its own copy
//! and waits for that child.
//! `guard-holder fork-tokens`: draws a token, forks, and prints `child <token>` and
//! `parent <token>`, the next token each process draws (see `fork_tokens`).
#![allow(clippy::print_stdout, missing_docs)]

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use worklane_guard::Guard;

/// Closes descriptor 0. Rust's runtime reopens closed standard streams on `/dev/null` before
/// `main`, so a closed stdin can only be made from inside the process.
#[allow(unsafe_code)]
fn close_stdin() {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: descriptor 0 is open (the runtime guarantees it) and owned by nobody else in this
    // single-threaded helper; `std::io::stdin()` is never used after this point.
    drop(unsafe { OwnedFd::from_raw_fd(0) });
}

/// Draws a token, so that this process has its token seed; forks a child that draws the next
/// token (in `pre_exec`, which runs in the child between fork and exec, with a copy of the seed
/// and the counter); then draws the next token here. Prints both.
#[allow(unsafe_code)]
fn fork_tokens() -> ExitCode {
    let _first = worklane_guard::random_token();
    let (mut reader, writer) = std::io::pipe().expect("create a pipe");
    let mut child = Command::new("true");
    child.stdin(Stdio::null()).stdout(Stdio::null());
    // SAFETY: this helper is single-threaded, so in the forked child no lock (the allocator's
    // included) can be held by a thread that no longer exists: the closure may allocate. It
    // touches only the child's copies of the token state and of the pipe's write end.
    unsafe {
        child.pre_exec(move || {
            let token = worklane_guard::random_token();
            (&writer).write_all(token.as_bytes())
        });
    }
    #[allow(
        clippy::disallowed_methods,
        reason = "a single-threaded helper process, not a test binary: no gate to keep"
    )]
    let status = child.status().expect("run the forked child");
    // The closure, and with it this process's write end, goes with the command.
    drop(child);
    let mut forked = String::new();
    reader
        .read_to_string(&mut forked)
        .expect("read the child's token");
    let here = worklane_guard::random_token();
    println!("child {forked}");
    println!("parent {here}");
    if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args == ["fork-tokens"] {
        return fork_tokens();
    }
    let [mode, dir, resource] = args.as_slice() else {
        eprintln!("usage: guard-holder try|hold|hold-inherit DIR RESOURCE");
        return ExitCode::from(64);
    };
    let dir_path = Path::new(dir);
    let dir_fd = match std::fs::File::open(dir_path) {
        Ok(f) => f,
        Err(e) => {
            println!("error: open {dir}: {e}");
            return ExitCode::from(2);
        }
    };
    // Keep the directory off descriptors 0-2, so that with a closed standard stream it is the
    // guard's own open that lands there (the case under test).
    let dir_fd = rustix::io::fcntl_dupfd_cloexec(&dir_fd, 3).expect("move the directory fd");
    if std::env::var_os("GUARD_HOLDER_CLOSE_STDIN").is_some() {
        close_stdin();
    }
    let guard = match Guard::try_acquire(&dir_fd, dir_path, resource) {
        Ok(Some(g)) => g,
        Ok(None) => {
            println!("busy");
            return ExitCode::from(1);
        }
        Err(e) => {
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                message = format!("{message}: {cause}");
                source = cause.source();
            }
            println!("error: {message}");
            if std::env::var_os("GUARD_HOLDER_CLOSE_STDIN").is_some() {
                // Whether the refused descriptor was closed again (lstat opens nothing).
                let open = std::fs::symlink_metadata("/proc/self/fd/0").is_ok();
                println!("fd 0 {}", if open { "open" } else { "closed" });
            }
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout();
    match mode.as_str() {
        "try" => {
            println!("held");
        }
        "hold" => {
            println!("held");
            let _ = out.flush();
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            drop(guard);
        }
        "hold-inherit" => {
            // A duplicate without close-on-exec, so `cat` inherits the open file description.
            // This process is single-threaded, so no other child can inherit it by accident.
            let dup = rustix::io::dup(&guard).expect("dup the guard descriptor");
            #[allow(
                clippy::disallowed_methods,
                reason = "a single-threaded helper: no other thread can fork while it starts cat"
            )]
            let child = Command::new("cat")
                .stdin(Stdio::inherit())
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn cat");
            drop(dup);
            drop(guard);
            println!("child {}", child.id());
            let _ = out.flush();
            // Wait, so that when this process exits the child's descriptors are closed too.
            let mut child = child;
            let _ = child.wait();
        }
        other => {
            println!("error: unknown mode {other}");
            return ExitCode::from(64);
        }
    }
    let _ = out.flush();
    ExitCode::SUCCESS
}
