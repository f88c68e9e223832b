//! Test helper: one slot-file operation in a process of its own.
//!
//! - `publish DIR NAME CONTENT MODE`: waits for one line on stdin (a start barrier), publishes,
//!   prints `published`, `exists` or `error: MESSAGE`.
//! - `replace DIR NAME CONTENT MODE`: replaces, prints `ok` or `error: MESSAGE`.
//! - `rewrite DIR NAME CONTENT MODE`: rewrites (a lock record's exchange), prints `ok` or
//!   `error: MESSAGE`.
//! - `replace-hang DIR NAME CONTENT`: writes the temp file, prints `written`, then waits for
//!   stdin to close before renaming (the test SIGKILLs it there).
//! - `resolve`: resolves the machine's slot directory, prints `ok DIR` or `error: MESSAGE`.
//! - `open DIR`: opens DIR as a slot directory, prints `ok` or `error: MESSAGE`.
//! - `read DIR NAME`: prints `ok CONTENT`, `absent` or `error: MESSAGE`.
//! - `private DIR`: opens DIR as a private directory, creating it, prints `ok` or
//!   `error: MESSAGE`.
#![allow(clippy::print_stdout, missing_docs)]

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::ExitCode;
use worklane_slotfile::{Publish, SlotDir, SlotPath, Step};

fn file(dir: &str, name: &str) -> SlotPath {
    let dir = SlotDir::open(Path::new(dir)).expect("open the slot directory");
    dir.file(name).expect("a valid slot file name")
}

fn mode(arg: &str) -> u32 {
    u32::from_str_radix(arg, 8).expect("an octal mode")
}

/// Prints `error: ` and the error with its causes, and exits 2.
fn failed(e: &dyn std::error::Error) -> ExitCode {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    println!("error: {message}");
    let _ = std::io::stdout().flush();
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["publish", dir, name, content, m] => {
            let path = file(dir, name);
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
            match path.publish(content.as_bytes(), mode(m)) {
                Ok(Publish::Published) => println!("published"),
                Ok(Publish::AlreadyExists) => println!("exists"),
                Err(e) => return failed(&e),
            }
        }
        ["replace", dir, name, content, m] => {
            match file(dir, name).replace(content.as_bytes(), mode(m)) {
                Ok(()) => println!("ok"),
                Err(e) => return failed(&e),
            }
        }
        ["rewrite", dir, name, content, m] => {
            match file(dir, name).rewrite(content.as_bytes(), mode(m)) {
                Ok(()) => println!("ok"),
                Err(e) => return failed(&e),
            }
        }
        ["replace-hang", dir, name, content] => {
            let path = file(dir, name);
            path.replace_observed(content.as_bytes(), 0o644, &mut |step| {
                if step == Step::TempWritten {
                    println!("written");
                    let _ = std::io::stdout().flush();
                    let _ = std::io::stdin().read_to_end(&mut Vec::new());
                }
            })
            .expect("replace");
            println!("renamed");
        }
        ["open", dir] => match SlotDir::open(Path::new(dir)) {
            Ok(_) => println!("ok"),
            Err(e) => return failed(&e),
        },
        ["read", dir, name] => match file(dir, name).read() {
            Ok(Some(bytes)) => println!("ok {}", String::from_utf8_lossy(&bytes)),
            Ok(None) => println!("absent"),
            Err(e) => return failed(&e),
        },
        ["private", dir] => match worklane_slotfile::PrivateDir::open(Path::new(dir), true) {
            Ok(_) => println!("ok"),
            Err(e) => return failed(&e),
        },
        ["resolve"] => match SlotDir::resolve() {
            Ok(r) => println!("ok {}", r.dir.path().display()),
            Err(e) => println!("error: {e}"),
        },
        _ => {
            eprintln!("usage: see the module documentation");
            return ExitCode::from(64);
        }
    }
    let _ = std::io::stdout().flush();
    ExitCode::SUCCESS
}
