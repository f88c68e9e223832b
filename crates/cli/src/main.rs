//! `worklane`: hold a machine-wide slot or role lease while a command runs, and operate the
//! slot pool. Every exit code is documented in one place, `exit.rs` (and `worklane --help`).
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! (`fleet.rs`, feature `fleet`: `run --fleet` takes a fleet place after the host slot and keeps
//! it alive from the supervisor's check; `worklane fleet set-cap|status`. `fleet_off.rs` without
//! the feature: `--fleet` exits 69. `logging.rs`: the one `log` logger, `-v` / `WORKLANE_LOG`;
//! the libraries only call the `log` macros. `json.rs`: every JSON document's `Serialize` type,
//! schema in docs/json.md. `supervise.rs` runs the command on one thread: signal handlers set
//! flags and wake a `poll` on a self-pipe, SIGCHLD included.)
//!
//! The operator and harness command line, split the ripgrep way:
//!
//! - `cli.rs`: the raw clap arguments (`Cli`, `Command`, `RunArgs`, `LeaseRunArgs`,
//!   `QueueCommand`, `BudgetCommand`, `BudgetTakeArgs`, `BudgetObserveArgs`, `WhyArgs`),
//!   `parse_duration`, `parse_resource` (the `--resource` check of `budget take` and `why`), and the `EXIT_CODES` text shown by `--help`;
//! - `chain.rs`: `chain`, an error with its causes, each part as it is (no library message
//!   repeats its cause, so nothing is deduplicated). The one formatter of both binaries: xtask
//!   includes the same file with `#[path]` rather than a library exporting it for a sibling;
//! - `exit.rs`: every exit code as a constant, `Failure {code, message}`, and the mapping of each library error to a code;
//! - `out.rs`: the one writer of stdout and stderr (`outln!`, `errln!`, `bytes`; `sayln!` for a
//!   line that only says a command succeeded, dropped under `-q`): a closed pipe on
//!   stdout ends the output quietly (later output is dropped, the exit code is the command's
//!   own), any other failed write is a `Failure` with 74; stderr is best effort. Nothing in it
//!   panics;
//! - `main.rs`: `pool()` resolves the machine's pool without its config (`Pool::open`), for STOP,
//!   resume, the drain, every view and `dispatch.rs`; `taking_pool()` also loads the config and
//!   refuses with 78 and the fix (`config::take_refused`), for every take (`run`, `lease run`,
//!   `queue full-run` and its runner; `dispatcher` and `enqueue` are checked before they start);
//! - `config.rs` also holds `Problem` (a config that cannot be used: file, what, fix, as every view
//!   shows it) and `shell_quote`; `slots.rs`'s `Around` gathers what a view shows besides the
//!   snapshot (the config's problem, budgets and the states left out of them, the dispatcher's
//!   status entries, a damaged STOP or drain flag from `ops::stop_problem`/`drain_problem`) and
//!   their `problems`, for `slots` and `why`;
//! - `supervise.rs`: spawning the command (`Launch`: the command, the grace, an inheritable copy
//!   of the slot's guard descriptor so the slot lives as long as any process of the run, and
//!   `WORKLANE_RESOURCE` / `WORKLANE_EPOCH`; a `Watch` is told the `Started` process, whose
//!   `commandProcess` fields go into the record, and is asked every check whether to halt) in
//!   its own process group when stdin is not a terminal,
//!   forwarding SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM and (without a terminal) SIGINT and
//!   SIGQUIT through `signal-hook`'s registry (`FORWARDED`, `sys::on_signal`), except those the caller ignores, which stay
//!   ignored for the command (`sys::is_ignored`), a SIGCHLD
//!   handler (an inherited ignored SIGCHLD would let the kernel discard the command's status), the
//!   halt check every `CHECK_EVERY`, SIGTERM then SIGKILL after the grace the caller
//!   gives (`GRACE`; `lease run` gives less) to the group and every descendant, SIGKILL of what is left of a halted command once it exits but before it
//!   is reaped (`waitid` with `WNOWAIT`, so its pid and pgid cannot be reused meanwhile), the 128+N
//!   status and, unless worklane halted it, the signal that ended the command (`Outcome::signal`:
//!   `run` and `lease run` end by it after letting go, `sys::die_by`); `describe` renders a command line for records (at most 512 bytes);
//! - `dispatch.rs` (feature `dispatcher`; `dispatch_off.rs` says the commands are missing
//!   otherwise): the `dispatcher` service process (`dispatcher.lock`, the socket or systemd's
//!   with its mode checked, signals, `sd_notify` READY/STOPPING/WATCHDOG, its log with repeated
//!   lines quieted), `enqueue`, `claim` (which also halts its command on the attempt's cancel
//!   marker), `queue ls`/`cancel`/`retry`/`prune`, `reconcile`; `driver.rs` starts each driver
//!   (as its enqueuer when root, its log appended) and reaps them: the reaper learns of an
//!   exited child with `waitid(WNOWAIT)` and reaps under `STARTING`, the lock `launch` holds
//!   across `Command::spawn`, so that a driver whose exec failed is reaped by std, which would
//!   panic if another took it;
//! - `sys.rs`: the CLI's one module with `unsafe`: `spawn` starts the command (Linux:
//!   `clone(CLONE_VM | CLONE_VFORK)` on a stack of its own, as `posix_spawn` does, so no page
//!   table is copied; every signal blocked across the clone; the child sets its process group,
//!   puts the caught signals and SIGPIPE back to their defaults, sets `PR_SET_PDEATHSIG`
//!   (SIGTERM) and re-checks its parent so a supervisor that died first is noticed, empties its
//!   signal mask and tries the paths `search` prepared (glibc's execvp order and default
//!   `PATH`, a file without `#!` run by `/bin/sh`, `EACCES` remembered: the same with musl,
//!   whose execvp differs), leaving the errno of a failure in the shared `Start`;
//!   elsewhere std's `Command`), and `Child::wait` reaps it; `on_signal` installs one handler
//!   per caught signal that sets its flag and sends a byte on the supervisor's wake-up socket,
//!   and `on_flag` (the dispatcher's and the queued runner's) one that sets a flag; both then
//!   unblock the signal, since a mask the caller blocked survives exec;
//!   `detach` (`setsid`, the descriptor limit the
//!   dispatcher started with, the enqueuer's groups, gid and uid, exactly the environment given,
//!   and on Linux the same search and `execve`s as `spawn`'s, all in
//!   `pre_exec`, from an `Exec` prepared before the fork) for drivers; `raise_nofile` (the dispatcher's soft
//!   limit of open files to the hard one); `is_ignored` (a signal's inherited `SIG_IGN`, asked
//!   of sigaction(2)); `die_by` (core dumps off, the default
//!   disposition, the signal raised); `systemd_listener` takes descriptor 3 under socket
//!   activation; `set_slots_dir` exports `--dir` as `AGENT_SLOTS_DIR` before any thread starts;
//!   `claim_writable_fd` takes `--status-fd`'s inherited descriptor (open for writing, made
//!   close-on-exec) as an `OwnedFd` before anything else opens one;
//! - `status.rs`: `--status-fd`'s events (`waiting`, `taken`, then one of `end`, `refused`,
//!   `error`), a `#[derive(Serialize)]` type with `version`, written best effort;
//! - `enforce.rs`: STOP's enforcement after `stop-all` writes STOP: `judge` (a plain function)
//!   decides per recorded command whether it is gone, untouchable (another place, another
//!   process at the pid, or, for root, a process not owned by the record's writer) or running
//!   with or without a supervisor able to act; `enforce_stop` signals (SIGCONT+SIGTERM at once
//!   for the unsupervised, SIGKILL a grace later or once a live supervisor's grace is over) and
//!   reports (`Report {halted: Vec<Halted {run, by_worklane}>, left: Vec<Left {run, why}>}`, each
//!   `Run {resource, pid, command}`), within about 5 s;
//! - `tree.rs`: the halt's reach beyond the group: `parse_stat` and `descendants` (plain
//!   functions), the Linux `/proc` table (refused when `/proc/self` is not our pid, and trusted for
//!   a halt only if it shows the command as our child), `become_subreaper` (PR_SET_CHILD_SUBREAPER,
//!   only when `/proc` is ours, so orphans stay descendants), `kill_descendants` (SIGKILL passes
//!   until none is alive, at most 16) and `reap_orphans` (called by the exit waiter, so orphans
//!   do not pile up as zombies); one lock spans each table read and the kills or reaps made from
//!   it, so a pid read as ours is not reaped and reused before it is signalled;
//! - one module per command group: `run.rs` (`run`, with the progress line; `lease run`: `--role`
//!   and `--ttl` checks (at least `MIN_TTL`), refusal under STOP, pulsing every TTL/20, the halt grace
//!   `lease_grace` = min(`GRACE`, TTL/4) so the command is gone before the lease can lapse), `role.rs`
//!   (a refused `lease run`: the message naming the holder's pid, agentIdentity, profile and
//!   entrypoint and our own, advice true to the verdict (only a pulsing lease lapses), and the
//!   `Refused` JSON object of `--json`, a `#[derive(Serialize)]` type with `version`),
//!   `nesting.rs` (the `WORKLANE_<KIND>_SLOT` variable a run gives its command, and the refusal
//!   (64) of a run of the same kind in the same directory, by device and inode, inside it),
//!   `slots.rs` (`slots`, the
//!   state words, `to_json` / `slot_json`), `json.rs` (the `#[derive(Serialize)]` type of every
//!   `--json` document but the two that live beside their code, `role.rs`'s refusal and
//!   `status.rs`'s events; every object carries `version`; the schema and an example per command
//!   are `docs/json.md`, and the CLI test `json_docs` checks each example against the real
//!   output), `ops.rs` (`stop-all`, `resume-all`,
//!   `drain`, `undrain`, `idle`, `completions`), `man.rs` (`man`: clap_mangen's pages with
//!   `worklane VERSION` in every footer and each command's EXIT STATUS), `config.rs` (`config get`/`set`/`unset`
//!   and `set-test-slots`: one read-change-check-replace path for the config file in force), `queue.rs` (`queue full-run` and its
//!   hidden `queued-full-run` runner, which calls `setsid`), `budget.rs` (`budget show`, `take`,
//!   `observe`: the token from `--token-env`, hashed at once; `take --wait-max`, decided from
//!   `Ledger::peek` because the ledger's own wait is a fixed `MAX_WAIT_MS`, and `retry_at`; the
//!   `--headers-file` dump parser; the health view's JSON and text, also shown by `slots`), `why.rs` (`why`: the four permission questions answered from a
//!   `Pool::snapshot`, `Ledger::peek` and the release-authority constant; nothing is taken).
//!
//! `main.rs` parses, dispatches and returns `ExitCode`; clap errors exit 64; help and the version
//! are printed by clap and judged by `out` as every other output is.

#![deny(unsafe_code)]

mod around;
mod budget;
mod chain;
mod cli;
mod config;
#[cfg(feature = "dispatcher")]
mod dispatch;
#[cfg(not(feature = "dispatcher"))]
#[path = "dispatch_off.rs"]
mod dispatch;
#[cfg(feature = "dispatcher")]
mod driver;
mod enforce;
mod exit;
#[cfg(feature = "fleet")]
mod fleet;
#[cfg(not(feature = "fleet"))]
#[path = "fleet_off.rs"]
mod fleet;
mod json;
mod logging;
mod man;
mod nesting;
mod ops;
mod out;
mod queue;
mod queued;
mod role;
mod run;
mod slots;
mod status;
mod supervise;
mod sys;
mod tree;
mod why;

use clap::Parser;
use cli::{BudgetCommand, Cli, Command, FleetCommand, LeaseCommand, QueueCommand};
use exit::Failure;
use std::process::ExitCode;

/// With musl (the binary `cargo xtask dist` builds), dlmalloc: musl's own allocator maps and
/// unmaps a page for each new group of small allocations, about 130 system calls in one
/// `worklane run`, where dlmalloc keeps what it gets (BENCHMARKS.md).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;
use worklane_admission::Pool;
use worklane_slotfile::SlotDir;

/// The machine's pool, its config not loaded: what STOP, resume, the drain and every view use,
/// so that a broken config (not JSON, unreadable, a directory) never silences them. The views
/// show the config's problem; a take made through this pool reads the config then (78).
/// Only a slot directory that cannot be used is an error here (78 naming it and the fix).
fn pool() -> Result<Pool, Failure> {
    let located =
        SlotDir::resolve_located().map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    Ok(Pool::open(located))
}

/// The machine's pool for a take: its config must be usable, or the take is refused (78,
/// naming the file, what is wrong and the fix) before anything is taken.
fn taking_pool() -> Result<Pool, Failure> {
    let pool = pool()?;
    pool.config().map_err(config::take_refused)?;
    Ok(pool)
}

/// The dispatcher and `enqueue` take (the dispatcher's own lock and the slots it admits rows
/// to, a lane): like every take they are refused (78) while the config cannot be used, before
/// they start. (`dispatch.rs` resolves its pool with [`pool`].)
fn before_take() -> Result<(), Failure> {
    taking_pool().map(drop)
}

/// `--dir PATH`: the slot directory for this process and every process it starts, exactly as
/// `AGENT_SLOTS_DIR=PATH` would name it (a relative PATH taken from the current directory).
/// Exported rather than passed along, so that every path that resolves the directory (the
/// pool, the budget ledger, a queued full run's runner, a dispatcher's drivers) sees it.
fn use_slot_dir(dir: &std::path::Path) -> Result<(), Failure> {
    if dir.as_os_str().is_empty() {
        return Err(Failure::new(exit::USAGE, "--dir needs a directory"));
    }
    let dir = std::path::absolute(dir).map_err(|e| {
        Failure::new(
            exit::USAGE,
            format!("--dir {}: cannot make it absolute: {e}", dir.display()),
        )
    })?;
    sys::set_slots_dir(&dir);
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and the version go to stdout through clap's own writer, judged as every
            // other output is; a usage error goes to stderr, best effort.
            let printed = e.print();
            if e.use_stderr() {
                return ExitCode::from(exit::USAGE);
            }
            return match out::after_clap(printed) {
                Ok(()) => ExitCode::SUCCESS,
                Err(failure) => failure.exit(),
            };
        }
    };
    match logging::level(cli.verbose, std::env::var("WORKLANE_LOG").ok().as_deref()) {
        Ok(level) => logging::init(level),
        Err(why) => return Failure::new(exit::USAGE, why).exit(),
    }
    if cli.quiet {
        out::set_quiet();
    }
    if let Some(dir) = &cli.dir
        && let Err(failure) = use_slot_dir(dir)
    {
        return failure.exit();
    }
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Slots { json, fleet } => slots::show(json, &fleet),
        Command::StopAll { reason, json } => ops::stop_all(&reason.join(" "), json),
        Command::ResumeAll { json } => ops::resume_all(json),
        Command::SetTestSlots { n } => config::set_test_slots(n),
        Command::Config(command) => config::command(command),
        Command::Drain { until, to, json } => ops::drain(&until, to, json),
        Command::Undrain { json } => ops::undrain(json),
        Command::Idle => ops::idle(),
        Command::Lease(LeaseCommand::Run(args)) => run::lease_run(args),
        Command::Fleet(FleetCommand::SetCap { fleet: args, cap }) => fleet::set_cap(&args, cap),
        Command::Fleet(FleetCommand::Status { fleet: args, json }) => fleet::status(&args, json),
        Command::Dispatcher(args) => before_take().and_then(|()| dispatch::serve(&args)),
        Command::Enqueue(args) => before_take().and_then(|()| dispatch::enqueue(&args)),
        // A driver adopts the slot and lane its attempt was admitted with: no cap is read.
        Command::Claim(args) => dispatch::claim(&args),
        Command::Reconcile { attempt, json } => dispatch::reconcile(&attempt, json),
        Command::Queue(QueueCommand::Ls { json, all }) => queue::list(json, all),
        Command::Queue(QueueCommand::Retry { attempt }) => dispatch::retry(&attempt),
        Command::Queue(QueueCommand::Prune { older_than }) => dispatch::prune(older_than),
        Command::Queue(QueueCommand::Cancel { attempt, json }) => queue::cancel(&attempt, json),
        Command::Queue(QueueCommand::FullRun {
            idle_probe,
            priority,
            json,
            command,
        }) => queue::queue_full_run(idle_probe, priority, json, command),
        Command::QueuedFullRun {
            idle_probe,
            priority,
            log,
            command,
        } => queue::runner(idle_probe, priority, log, command),
        Command::Budget(BudgetCommand::Show { json, fleet }) => budget::show(json, &fleet),
        Command::Budget(BudgetCommand::Take(args)) => budget::take(&args),
        Command::Budget(BudgetCommand::Observe(args)) => budget::observe(&args),
        Command::Budget(BudgetCommand::Release(args)) => budget::release(&args),
        Command::Why(args) => why::why(&args),
        Command::Completions { shell } => ops::completions(shell),
        Command::Man { command, all } => man::man(&command, all.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(failure) => failure.exit(),
    }
}
