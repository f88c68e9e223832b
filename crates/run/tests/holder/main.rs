#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]
//! Test helper: a Rust caller of `worklane-run` in a process of its own.
//!
//! `run-holder slot [OPTION]... -- CMD...` takes an agent slot of `$AGENT_SLOTS_DIR` without
//! waiting (exit 75 when blocked), prints `held NAME`, runs CMD under `Supervisor::new` (with
//! `--jobs[=N]`, `--jobs-style=fifo`, `--jobs-shim`: a jobserver; `--kill-tree-on-exit`;
//! `--grace-ms=N`; `--env-epoch=E`: `WORKLANE_EPOCH` set to E and `RUN_HOLDER_SET` to `yes`;
//! `--no-cgroup`: the test seam; `--watch=N`: a watch of its own that says `starting`
//! before the command starts, `started group G` once it has, each check, and halts at its
//! Nth; `--log`: warnings said as `log LEVEL MESSAGE`), and prints
//! `outcome CODE HALTED SIGNAL LOST` (`-` for none) or `error MESSAGE` (exit 1); with
//! `--say-left`, `left N` (the processes left in its cgroup) before it; with `--say-cpu`,
//! `cpu MS` (the CPU time this process, the supervisor, used; not its children's) before it;
//! with `--die-by`, it then ends by the signal that ended the command, as `worklane run` does.
//!
//! `run-holder role ROLE TTL_MS -- CMD...` does the same under a TTL role lease
//! `role-ROLE.lease` (`held role-ROLE.lease`).
//!
//! `run-holder queue PRIORITY [PROBE]` is a queued full run's runner without a command: it
//! joins the full-run line (`queued`), says each new reason it waits (`waiting WHAT`), and once
//! it holds `full-run.lock` says `held full-run.lock` and keeps it until its stdin ends; a
//! SIGTERM while it waits makes it leave the line (`cancelled`, exit 143).
//!
//! `run-holder fds N...` takes each inherited descriptor N (`fd N ok cloexec BOOL`, `fd N
//! closed`, `fd N read-only`, `fd N taken`, `fd N other`) and writes `taken N` to each it got;
//! `run-holder listener` takes systemd's socket twice (`listener 3 cloexec BOOL` or
//! `listener none`); `run-holder nofile` raises its descriptor limit twice (`raised from
//! SOFT` or `not raised`, then `now SOFT HARD`); `run-holder detach OUT` starts `sh` detached
//! with a descriptor of its own open (`detached PID open FD`), which writes its descriptors and
//! its stat line to `OUT.fds` and `OUT.stat` (`detach-by-fcntl OUT`: the same, the descriptors
//! marked one by one as without close_range(2)); `run-holder jobserver SHARE fds|fifo` starts a
//! `Jobserver` by hand (`fifo PATH`, `inherit FD...`, `inherit again N`, `env NAME=VALUE`...,
//! `started`), then ends it (`end` on stdin) or drops it (anything else) and says `ended`.
//!
//! `run-holder cgroups` prints where this process's runs' cgroups would go (`probe {:?}`) and
//! makes their directory (`containment {:?}`): what a user other than root gets.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use worklane_admission::{Kind, Pool, Take};
use worklane_lease::{Acquired, Options, Request, TtlLiveness};
use worklane_run::{Outcome, Supervisor};
use worklane_slotfile::{Environment, SlotDir};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn report(outcome: Result<Outcome, worklane_run::supervise::Error>) -> ExitCode {
    match outcome {
        Ok(o) => {
            say(&format!(
                "outcome {} {} {} {}",
                o.code,
                o.halted.map_or("-".to_owned(), |h| h.replace(' ', "_")),
                o.signal.map_or("-".to_owned(), |s| s.to_string()),
                o.lease_lost
            ));
            ExitCode::SUCCESS
        }
        Err(e) => {
            say(&format!("error {e}"));
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if let Some(code) = process_calls(&args) {
        return code;
    }
    if args.len() == 1 && args[0] == "cgroups" {
        say(&format!("probe {:?}", worklane_run::cgroup::probe()));
        say(&format!(
            "containment {:?}",
            worklane_run::cgroup::containment().map(|(_, runs)| runs)
        ));
        return ExitCode::SUCCESS;
    }
    let Some(split) = args.iter().position(|a| a == "--") else {
        eprintln!("usage: run-holder slot|role ROLE TTL_MS -- CMD...");
        return ExitCode::from(64);
    };
    let (head, command) = (&args[..split], &args[split + 1..]);
    let head: Vec<String> = head
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let pool = match SlotDir::resolve_in(&Environment::from_process()) {
        Ok(resolved) => Pool::new(resolved),
        Err(e) => {
            eprintln!("run-holder: {e}");
            return ExitCode::from(78);
        }
    };
    match head
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["slot", options @ ..] => {
            let mut slot = match pool.try_take(Kind::Agent, &Request::new("run-holder")) {
                Ok(Take::Held(slot)) => slot,
                Ok(Take::Blocked(blocker)) => {
                    say(&format!("blocked {blocker}"));
                    return ExitCode::from(75);
                }
                Err(e) => {
                    eprintln!("run-holder: {e}");
                    return ExitCode::from(1);
                }
            };
            say(&format!("held {}", slot.name()));
            let mut watch = options
                .iter()
                .find_map(|o| o.strip_prefix("--watch="))
                .map(|n| Checks {
                    halt_at: n.parse().unwrap_or(1),
                    seen: 0,
                    started: None,
                });
            if options.contains(&"--log") {
                let _ = log::set_logger(&SAY_LOG);
                log::set_max_level(log::LevelFilter::Warn);
            }
            let outcome = Supervisor::new(&pool, &mut slot)
                .and_then(|s| with_options(s, options))
                .map(|s| match watch.as_mut() {
                    Some(watch) => s.watch(watch),
                    None => s,
                })
                .and_then(|s| s.run(command));
            if options.contains(&"--say-left")
                && let Ok(outcome) = &outcome
            {
                say(&format!("left {}", outcome.left_running.len()));
            }
            if options.contains(&"--say-cpu") {
                let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
                let ms = t.tv_sec.saturating_mul(1000) + t.tv_nsec / 1_000_000;
                say(&format!("cpu {ms}"));
            }
            let signal = outcome.as_ref().ok().and_then(|o| o.signal);
            let code = report(outcome);
            let _ = slot.release();
            if options.contains(&"--die-by")
                && let Some(signal) = signal
            {
                worklane_run::process::die_by(signal);
                say("still alive");
            }
            code
        }
        ["queue", priority, probe @ ..] => {
            queue(&pool, priority.parse().unwrap_or(0), probe.first().copied())
        }
        ["role", role, ttl_ms] => {
            let ttl = Duration::from_millis(ttl_ms.parse().unwrap_or(2_000));
            let options = Options::with_liveness(Arc::new(TtlLiveness::new(ttl)));
            let name = format!("role-{role}.lease");
            let request = Request::new("run-holder").field("role", (*role).to_owned());
            let mut lease = match worklane_lease::acquire(pool.dir(), &name, &request, &options) {
                Ok(Acquired::Held(lease)) => lease,
                Ok(Acquired::Refused(refusal)) => {
                    say(&format!("blocked {}", refusal.why));
                    return ExitCode::from(75);
                }
                Err(e) => {
                    eprintln!("run-holder: {e}");
                    return ExitCode::from(1);
                }
            };
            say(&format!("held {name}"));
            let code = report(Supervisor::role(&pool, &mut lease, ttl).run(command));
            let _ = lease.release();
            code
        }
        _ => {
            eprintln!("usage: run-holder slot|role ROLE TTL_MS -- CMD...");
            ExitCode::from(64)
        }
    }
}

/// `fds`, `listener`, `nofile`, `detach`: this process's calls of `worklane_run::process`.
fn process_calls(args: &[OsString]) -> Option<ExitCode> {
    use std::os::fd::AsRawFd;
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let cloexec = |fd: &std::os::fd::OwnedFd| {
        rustix::io::fcntl_getfd(fd).is_ok_and(|f| f.contains(rustix::io::FdFlags::CLOEXEC))
    };
    match args.first().map(String::as_str) {
        Some("fds") => {
            let mut kept = Vec::new();
            for n in &args[1..] {
                let n: i32 = n.parse().unwrap_or(-1);
                match worklane_run::process::take_inherited_fd(n) {
                    Ok(fd) => {
                        say(&format!("fd {n} ok cloexec {}", cloexec(&fd)));
                        kept.push(fd);
                    }
                    Err(worklane_run::process::BadFd::Closed) => say(&format!("fd {n} closed")),
                    Err(worklane_run::process::BadFd::ReadOnly) => {
                        say(&format!("fd {n} read-only"));
                    }
                    Err(worklane_run::process::BadFd::Taken) => say(&format!("fd {n} taken")),
                    Err(worklane_run::process::BadFd::Other(_)) => say(&format!("fd {n} other")),
                }
            }
            for fd in kept {
                let _ = rustix::io::write(&fd, format!("taken {}\n", fd.as_raw_fd()).as_bytes());
            }
            Some(ExitCode::SUCCESS)
        }
        Some("listener") => {
            for _ in 0..2 {
                match worklane_run::process::systemd_listener() {
                    Some(fd) => {
                        say(&format!(
                            "listener {} cloexec {}",
                            fd.as_raw_fd(),
                            cloexec(&fd)
                        ));
                        // Kept open: the number must not be closed twice.
                        std::mem::forget(fd);
                    }
                    None => say("listener none"),
                }
            }
            Some(ExitCode::SUCCESS)
        }
        Some("nofile") => {
            for _ in 0..2 {
                match worklane_run::process::raise_nofile() {
                    Some(before) => say(&format!("raised from {:?}", before.current)),
                    None => say("not raised"),
                }
            }
            let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
            say(&format!("now {:?} {:?}", now.current, now.maximum));
            Some(ExitCode::SUCCESS)
        }
        Some("jobserver") => {
            // A jobserver started by hand (as a caller that runs its build itself would), for
            // the pool of `$AGENT_SLOTS_DIR`: `jobserver SHARE fds|fifo`, then `end` or `drop`
            // on stdin.
            let pool = Pool::new(SlotDir::resolve_in(&Environment::from_process()).ok()?);
            let share = args.get(1)?.parse().ok()?;
            let style = match args.get(2).map(String::as_str) {
                Some("fifo") => worklane_run::Style::Fifo,
                _ => worklane_run::Style::Fds,
            };
            let mut server = match worklane_run::jobserver::Jobserver::start(
                &pool,
                &Request::new("by hand"),
                share,
                style,
            ) {
                Ok(server) => server,
                Err(e) => {
                    say(&format!("error {e}"));
                    return Some(ExitCode::from(1));
                }
            };
            say(&format!("fifo {}", server.fifo().display()));
            let fds = server.inherit();
            say(&format!(
                "inherit {}",
                fds.iter()
                    .map(|fd| fd.as_raw_fd().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
            say(&format!("inherit again {}", server.inherit().len()));
            for (name, value) in server.env() {
                say(&format!("env {name}={}", value.to_string_lossy()));
            }
            say("started");
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            match line.trim() {
                "end" => server.end(),
                _ => drop(server),
            }
            drop(fds);
            say("ended");
            Some(ExitCode::SUCCESS)
        }
        Some(how @ ("detach" | "detach-by-fcntl")) => {
            if how == "detach-by-fcntl" {
                worklane_run::process::cloexec_by_fcntl();
            }
            let out = args.get(1)?;
            // A descriptor of ours that a plain child would inherit.
            let open = rustix::io::dup(std::io::stdout()).ok()?;
            let mut cmd = std::process::Command::new("sh");
            cmd.args([
                "-c",
                &format!("ls /proc/$$/fd > {out}.fds.tmp; mv {out}.fds.tmp {out}.fds; cat /proc/$$/stat > {out}.stat.tmp; mv {out}.stat.tmp {out}.stat"),
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
            match worklane_run::process::start_detached(&mut cmd) {
                Ok(pid) => say(&format!("detached {pid} open {}", open.as_raw_fd())),
                Err(e) => say(&format!("error {e}")),
            }
            Some(ExitCode::SUCCESS)
        }
        _ => None,
    }
}

/// The supervision as `options` ask: `--jobs[=N]`, `--jobs-style=fifo`, `--jobs-shim`,
/// `--kill-tree-on-exit`, `--grace-ms=N`.
fn with_options<'a>(
    mut supervisor: Supervisor<'a>,
    options: &[&str],
) -> Result<Supervisor<'a>, worklane_run::supervise::Error> {
    let mut jobs: Option<worklane_run::Jobs> = None;
    for option in options {
        match *option {
            "--jobs" => jobs = Some(jobs.unwrap_or_default()),
            "--jobs-style=fifo" => {
                jobs = Some(worklane_run::Jobs {
                    style: worklane_run::Style::Fifo,
                    ..jobs.unwrap_or_default()
                });
            }
            "--jobs-shim" => {
                jobs = Some(worklane_run::Jobs {
                    shim: true,
                    ..jobs.unwrap_or_default()
                });
            }
            "--kill-tree-on-exit" => supervisor = supervisor.kill_tree_on_exit(true),
            "--no-cgroup" => supervisor = supervisor.without_cgroup(),
            "--log" | "--die-by" | "--say-left" | "--say-cpu" => {}
            other => {
                if let Some(n) = other.strip_prefix("--jobs=") {
                    jobs = Some(worklane_run::Jobs {
                        share: n.parse().ok(),
                        ..jobs.unwrap_or_default()
                    });
                } else if let Some(epoch) = other.strip_prefix("--env-epoch=") {
                    supervisor = supervisor
                        .env("WORKLANE_EPOCH", epoch)
                        .env("RUN_HOLDER_SET", "yes");
                } else if other.starts_with("--watch=") {
                } else if let Some(ms) = other.strip_prefix("--grace-ms=") {
                    supervisor =
                        supervisor.grace_at_most(Duration::from_millis(ms.parse().unwrap_or(3000)));
                } else {
                    eprintln!("run-holder: unknown option {other}");
                    std::process::exit(64);
                }
            }
        }
    }
    Ok(match jobs {
        Some(jobs) => supervisor.jobs(jobs),
        None => supervisor,
    })
}

/// The caller's own watch (`--watch=N`): says each check (`check K at MS`, the time since the
/// command started) and halts the command at its Nth (reason `watch N`).
struct Checks {
    halt_at: u32,
    seen: u32,
    started: Option<std::time::Instant>,
}

impl worklane_run::Watch for Checks {
    fn starting(&mut self) {
        say("starting");
    }

    fn started(&mut self, command: &worklane_run::Started) {
        self.started = Some(std::time::Instant::now());
        say(&format!("started group {}", command.group));
    }

    fn check(&mut self) -> Option<String> {
        self.seen += 1;
        let ms = self.started.map_or(0, |at| at.elapsed().as_millis());
        say(&format!("check {} at {ms}", self.seen));
        (self.seen == self.halt_at).then(|| format!("watch {}", self.halt_at))
    }
}

/// `--log`: warnings and errors said as `log LEVEL MESSAGE`.
struct SayLog;

static SAY_LOG: SayLog = SayLog;

impl log::Log for SayLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            say(&format!("log {} {}", record.level(), record.args()));
        }
    }

    fn flush(&self) {}
}

fn queue(pool: &Pool, priority: i64, probe: Option<&str>) -> ExitCode {
    use worklane_run::queued::QUEUED_OWNER;
    use worklane_run::queued::runner::{Turn, wait_turn};
    let cancelled = Arc::new(AtomicBool::new(false));
    if let Err(e) =
        worklane_run::process::on_flag(signal_hook::consts::SIGTERM, Arc::clone(&cancelled))
    {
        eprintln!("run-holder: {e}");
        return ExitCode::from(1);
    }
    let request = Request::new(QUEUED_OWNER)
        .field("command", "queued by run-holder")
        .field("log", "/nowhere/run-holder.log");
    let place = match pool.join_line(Kind::FullRun, priority, &request) {
        Ok(place) => place,
        Err(e) => {
            eprintln!("run-holder: {e}");
            return ExitCode::from(1);
        }
    };
    say("queued");
    let mut last = String::new();
    let turn = wait_turn(pool, place, &request, probe, &cancelled, |what| {
        if what != last {
            say(&format!("waiting {what}"));
            last = what;
        }
    });
    match turn {
        Ok(Turn::Held(slot)) => {
            say(&format!("held {}", slot.name()));
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            let _ = slot.release();
            ExitCode::SUCCESS
        }
        Ok(Turn::Cancelled) => {
            say("cancelled");
            ExitCode::from(143)
        }
        Err(e) => {
            say(&format!("error {e}"));
            ExitCode::from(1)
        }
    }
}
