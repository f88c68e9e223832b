//! Test helper: a lease contender in a process of its own.
//!
//! `lease-holder DIR NAME OWNER [--ttl MS] [--clock-file PATH] [--pause-at STEP] [--wait-start]`
//! acquires `NAME` in `DIR` and prints `held EPOCH PID` or `refused WHY` (or `error: name
//! CLASS: WHY` when PROTOCOL.md section 2 refuses NAME, CLASS from the typed error: the
//! conformance kit's `lock` action runs this helper for it). Held, it then obeys
//! lines on stdin: `pulse`, `ensure`, `release` (each answered `ok`, `lost`, `busy` or
//! `error: ...`); end of input drops the lease and exits.
//!
//! - `--ttl MS`: TTL liveness with that TTL (default: process liveness).
//! - `--clock-file PATH`: the clock reads milliseconds from PATH each time it is asked.
//! - `--pause-at STEP`: at that acquisition step, print `at STEP` and block on stdin (the test
//!   kills the process there).
//! - `--wait-start`: read one line from stdin before acquiring (a start barrier).
//!
//! `lease-holder DIR NAME OWNER --cycles N` instead acquires and releases N times, spinning on
//! refusals, and under each lease checks and bumps a counter in `DIR/counter` with an
//! exclusive in-use marker `DIR/inuse`: a marker already there means two owners at once, and
//! the helper prints `DOUBLE` and exits 3.
//!
//! `lease-holder DIR NAME OWNER --fork-acquire` acquires and releases `NAME` once (so this
//! process has read its own identity), then forks a child that acquires it between fork and
//! exec, and prints `forked RECORD_PID CHILD_PID`: the pid the child's record names and the
//! child's own (see `fork_acquire`).
#![allow(clippy::print_stdout, missing_docs)]

use std::io::{BufRead, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;
use worklane_guard::NameProblem;
use worklane_lease::{
    Acquired, Clock, Control, Options, ProcessLiveness, Request, Step, TtlLiveness, acquire, held,
};
use worklane_slotfile::SlotDir;

struct FileClock(PathBuf);

impl Clock for FileClock {
    fn now_ms(&self) -> u64 {
        std::fs::read_to_string(&self.0)
            .expect("read the clock file")
            .trim()
            .parse()
            .expect("the clock file holds milliseconds")
    }
}

fn step_name(step: Step) -> &'static str {
    match step {
        Step::GuardTaken => "guard-taken",
        Step::RecordInspected => "record-inspected",
        Step::EpochAdvanced => "epoch-advanced",
        Step::ClaimTaken => "claim-taken",
        Step::StaleRemoved => "stale-removed",
        Step::Published => "published",
        _ => "other",
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn answer(result: Result<(), held::Error>) -> &'static str {
    match result {
        Ok(()) => "ok",
        Err(held::Error::LeaseLost { .. }) => "lost",
        Err(held::Error::Busy { .. }) => "busy",
        Err(_) => "error",
    }
}

/// The rule of PROTOCOL.md section 2 that refused a lock's name, as the conformance kit's
/// `lock` action reports it (`error name CLASS`): read from the typed error, never its text.
fn name_class(error: &acquire::Error) -> Option<&'static str> {
    match error {
        acquire::Error::NameTooLong { .. } => Some("too-long"),
        acquire::Error::Name { source, .. } => Some(match source.problem {
            NameProblem::Empty => "empty",
            NameProblem::Dots => "dots",
            NameProblem::Slash => "slash",
            NameProblem::Nul => "nul",
            NameProblem::LeadingDot => "leading-dot",
            NameProblem::Reserved => "reserved",
            NameProblem::TooLong => "too-long",
        }),
        _ => None,
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, name, owner, rest @ ..] = args.as_slice() else {
        eprintln!("usage: lease-holder DIR NAME OWNER [options]");
        return ExitCode::from(64);
    };
    let (mut ttl, mut clock, mut pause, mut wait, mut cycles) = (None, None, None, false, None);
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--ttl" => ttl = it.next().and_then(|v| v.parse::<u64>().ok()),
            "--clock-file" => clock = it.next().map(PathBuf::from),
            "--pause-at" => pause = it.next().cloned(),
            "--wait-start" => wait = true,
            "--cycles" => cycles = it.next().and_then(|v| v.parse::<u64>().ok()),
            "--fork-acquire" => {
                let dir = SlotDir::open(Path::new(dir)).expect("open the slot directory");
                return fork_acquire(&dir, name, owner);
            }
            other => {
                eprintln!("unknown flag {other}");
                return ExitCode::from(64);
            }
        }
    }
    let mut options = match ttl {
        Some(ms) => Options::with_liveness(Arc::new(TtlLiveness::new(Duration::from_millis(ms)))),
        None => Options::with_liveness(Arc::new(ProcessLiveness)),
    };
    if let Some(path) = clock {
        options = options.clock(Arc::new(FileClock(path)));
    }
    if let Some(pause) = pause {
        options = options.with_hook(move |step| {
            if step_name(step) == pause {
                say(&format!("at {pause}"));
                let mut line = String::new();
                let _ = std::io::stdin().lock().read_line(&mut line);
                return Control::Crash;
            }
            Control::Continue
        });
    }
    let dir = SlotDir::open(Path::new(dir)).expect("open the slot directory");
    if let Some(n) = cycles {
        return stress(&dir, name, owner, &options, n);
    }
    if wait {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    }
    let request = Request::new(owner.as_str()).field("role", "test");
    let mut lease = match acquire(&dir, name, &request, &options) {
        Ok(Acquired::Held(lease)) => lease,
        Ok(Acquired::Refused(refusal)) => {
            say(&format!("refused {}", refusal.why));
            return ExitCode::from(1);
        }
        Err(e) => {
            match name_class(&e) {
                Some(class) => say(&format!("error: name {class}: {e}")),
                None => say(&format!("error: {e}")),
            }
            return ExitCode::from(2);
        }
    };
    say(&format!("held {} {}", lease.epoch(), std::process::id()));
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "pulse" => say(answer(lease.pulse())),
            "ensure" => say(answer(lease.ensure_held())),
            "release" => {
                say(answer(lease.release()));
                return ExitCode::SUCCESS;
            }
            other => say(&format!("error: unknown command {other}")),
        }
    }
    drop(lease);
    ExitCode::SUCCESS
}

fn stress(dir: &SlotDir, name: &str, owner: &str, options: &Options, n: u64) -> ExitCode {
    let counter = dir.path().join("counter");
    let inuse = dir.path().join("inuse");
    let request = Request::new(owner);
    for _ in 0..n {
        // Refused for 10 s on end, while each of the others holds it for microseconds at a
        // time: nobody is releasing it. Said, so that the test fails rather than hangs.
        let since = std::time::Instant::now();
        let lease = loop {
            match acquire(dir, name, &request, options) {
                Ok(Acquired::Held(lease)) => break lease,
                Ok(Acquired::Refused(_))
                    if since.elapsed() > std::time::Duration::from_secs(10) =>
                {
                    say("starved: refused for 10 s on end");
                    return ExitCode::from(4);
                }
                Ok(Acquired::Refused(_)) => std::thread::yield_now(),
                Err(e) => {
                    say(&format!("error: {e}"));
                    return ExitCode::from(2);
                }
            }
        };
        if std::fs::File::create_new(&inuse).is_err() {
            say("DOUBLE");
            return ExitCode::from(3);
        }
        let value: u64 = std::fs::read_to_string(&counter)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        std::fs::write(&counter, format!("{}", value + 1)).expect("write the counter");
        std::fs::remove_file(&inuse).expect("remove the marker");
        lease.release().expect("release");
    }
    say("done");
    ExitCode::SUCCESS
}

/// Acquires and releases `name` here, so this process has read (and cached) its identity;
/// forks a child that acquires `name` in `pre_exec` (between fork and exec, with a copy of
/// that cache) and writes the pid its record names and its own pid; prints both.
#[allow(unsafe_code)]
fn fork_acquire(dir: &SlotDir, name: &str, owner: &str) -> ExitCode {
    let request = Request::new(owner);
    let options = Options::process();
    match acquire(dir, name, &request, &options) {
        Ok(Acquired::Held(lease)) => lease.release().expect("release"),
        other => {
            say(&format!("error: the first acquisition: {other:?}"));
            return ExitCode::from(2);
        }
    }
    let (mut reader, writer) = std::io::pipe().expect("create a pipe");
    let mut child = Command::new("true");
    child.stdin(Stdio::null()).stdout(Stdio::null());
    let (dir, name) = (dir.clone(), name.to_owned());
    // SAFETY: this helper is single-threaded, so in the forked child no lock (the allocator's
    // and the identity cache's included) can be held by a thread that no longer exists: the
    // closure may allocate and take locks. It touches only the child's copies of the slot
    // directory, the lease state and the pipe's write end.
    unsafe {
        child.pre_exec(move || {
            let text = match acquire(&dir, &name, &request, &options) {
                Ok(Acquired::Held(lease)) => {
                    let pid = lease.record().pid().map_or(0, |p| p);
                    lease.release().map_err(std::io::Error::other)?;
                    format!("{pid} {}", std::process::id())
                }
                other => format!("error {other:?}"),
            };
            (&writer).write_all(text.as_bytes())
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
        .expect("read the child's answer");
    say(&format!("forked {forked}"));
    if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}
