//! `worklane`: hold a machine-wide slot or role lease while a command runs, and operate the
//! slot pool. Every exit code is documented in one place, `exit.rs` (and `worklane --help`).
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! The CLI composes the libraries: it knows clap, the terminal, exit codes and JSON, and owns
//! no mechanism. Processes are started, supervised and signalled by `worklane-run` (a command
//! under a slot or role lease, STOP's enforcement, the dispatcher's drivers, the queued
//! runner's detached start), decisions are made by `worklane-admission`, `-lease` and
//! `-budget`. This crate reads no `/proc` and installs signal handlers only through
//! `worklane_run::process`. It has no `unsafe`: `--dir` is exported by executing worklane again
//! with `AGENT_SLOTS_DIR` set, before anything else runs.
//!
//! Split the ripgrep way:
//!
//! - `cli/`: the raw clap arguments, one file per family of command, the value parsers
//!   (`parse.rs`: durations, resources, providers) and the `EXIT_CODES` text of `--help`;
//! - `exit.rs`: every exit code as a constant, `Failure {code, message}`, and the mapping of
//!   each library error to a code; `chain.rs`: an error with its causes, each part once (xtask
//!   includes the same file);
//! - `out.rs`: the one writer of stdout and stderr (`outln!`, `errln!`, `sayln!` for a line
//!   that only says a command succeeded, dropped under `-q`): a closed pipe ends the output
//!   quietly, any other failed write is 74, nothing panics; `logging.rs`: the one `log` logger
//!   (`-v`, `WORKLANE_LOG`);
//! - `main.rs`: `pool()` (the pool without its config, for STOP, resume, the drain and every
//!   view, so a broken config never silences them) and `taking_pool()` (the config must be
//!   usable: 78 naming the fix), then one call per command;
//! - commands: `run.rs` (`run`: the take, the progress line of `progress.rs`, `--status-fd`
//!   events of `status.rs`, the nesting refusal of `nesting.rs`, then
//!   `worklane_run::Supervisor`), `lease_run.rs` (`lease run`; a refusal's words in `role.rs`),
//!   `watch.rs` (what the CLI adds to a supervision: the halt said on stderr, a fleet place, a
//!   cancel marker, a runner's SIGTERM), `queue/` (`queue full-run` and its detached runner,
//!   `queue ls`, `queue cancel`), `dispatch/` (feature `dispatcher`: the service around
//!   `worklane_dispatch`, `enqueue`, `claim`, `queue retry|prune`, `reconcile`;
//!   `dispatch_off.rs` without it), `ops.rs` (`stop-all` with its enforcement report,
//!   `resume-all`, `drain`, `undrain`, `idle`, `completions`), `config/` (`config
//!   get|set|unset`, `set-test-slots`), `slots.rs` (`slots`), `why/` (the four permission
//!   questions), `budget/` (`budget show|take|observe|release`, GitHub's and the model
//!   providers'), `events.rs` (the event journal, read or followed; a line for a person is
//!   `worklane_journal`'s `Entry::describe`), `metrics.rs` (the Prometheus exposition; its
//!   textfile and HTTP listener in `metrics/serve.rs`), `fleet.rs` (feature `fleet`; `fleet_off.rs` exits 69),
//!   `man/` (clap_mangen's pages with each command's exit codes);
//! - `shared/`: what several commands use, so that no command imports another's helpers:
//!   `who` and `ask`; `budget.rs` (the ledger, a key, a provider as the command line names
//!   them) and `budget_view.rs` (the budgets' health view); `config_problem.rs` (a config that
//!   cannot be used, as every view shows it and a take refuses with it); `views.rs` (what a
//!   view shows besides the snapshot) and `slots_json.rs` (the `slots` document, for `slots`,
//!   `metrics` and `top`). A command names
//!   `shared/`, the facades `fleet` and `dispatch` (each with its `_off` twin) and the
//!   plumbing (`exit`, `out`, `json`, `cli`, `status`, `progress`, `watch`, `nesting`), never
//!   another command;
//! - `json/`: the `#[derive(Serialize)]` type of every `--json` document, each with `version`;
//!   the schema and an example per command are `docs/json.md`, checked against real output by
//!   the CLI test `json_docs`.
//!
//! `main.rs` parses, dispatches and returns `ExitCode`; clap errors exit 64; help and the version
//! are printed by clap and judged by `out` as every other output is.

#![forbid(unsafe_code)]

mod budget;
mod cli;
mod config;
#[cfg(feature = "dispatcher")]
mod dispatch;
#[cfg(not(feature = "dispatcher"))]
#[path = "dispatch_off.rs"]
mod dispatch;
mod events;
mod exit;
#[cfg(feature = "fleet")]
mod fleet;
#[cfg(not(feature = "fleet"))]
#[path = "fleet_off.rs"]
mod fleet;
mod json;
mod lease_run;
mod logging;
mod man;
mod metrics;
mod ops;
mod out;
mod progress;
mod protocol;
#[cfg(feature = "proxy")]
mod proxy;
#[cfg(not(feature = "proxy"))]
#[path = "proxy_off.rs"]
mod proxy;
mod queue;
mod queue_say;
mod role;
mod run;
mod shared;
mod slots;
mod status;
#[cfg(feature = "top")]
mod top;
#[cfg(not(feature = "top"))]
#[path = "top_off.rs"]
mod top;
mod watch;
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

/// The machine's pool for a take: its protocol (`protocol.json`) must be one this worklane
/// keeps and its config usable, or the take is refused (78, naming the file, what is wrong and
/// the fix) before anything is taken.
fn taking_pool() -> Result<Pool, Failure> {
    let pool = pool()?;
    pool.protocol()?;
    pool.config()
        .map_err(crate::shared::take_refused::take_refused)?;
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
/// pool, the budget ledger, a queued full run's runner, a dispatcher's drivers) sees it: when
/// the environment does not say it yet, worklane executes itself again, with the same
/// arguments and `AGENT_SLOTS_DIR` set (same pid and descriptors; a process's environment can
/// be changed safely only by its exec, not once it runs).
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
    if std::env::var_os(worklane_slotfile::SLOTS_DIR_VAR).as_deref() == Some(dir.as_os_str()) {
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| {
        Failure::new(
            exit::OS_ERROR,
            format!("--dir: cannot find worklane itself to run it with AGENT_SLOTS_DIR set: {e}"),
        )
    })?;
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(exe)
        .arg0(std::env::args_os().next().unwrap_or_default())
        .args(std::env::args_os().skip(1))
        .env(worklane_slotfile::SLOTS_DIR_VAR, &dir)
        .exec();
    Err(Failure::new(
        exit::OS_ERROR,
        format!("--dir: cannot run worklane again with AGENT_SLOTS_DIR set: {e}"),
    ))
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
        Command::Protocol(command) => protocol::command(command),
        Command::Lease(LeaseCommand::Run(args)) => lease_run::lease_run(args),
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
        Command::Proxy(args) => proxy::proxy(&args),
        Command::Events(args) => events::events(&args),
        Command::Metrics(args) => metrics::metrics(&args),
        Command::Top => top::top(),
        Command::Completions { shell } => ops::completions(shell),
        Command::Man { command, all } => man::man(&command, all.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(failure) => failure.exit(),
    }
}
