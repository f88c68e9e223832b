//! The command line as parsed by clap: raw arguments, validated into settings by each command.
//! Here the top of it (`Cli`, `Command`, the exit codes `--help` lists); the arguments of each
//! family of commands in its own file; the parsers of values clap calls.

mod observe;
mod operator;
mod parse;
mod queue;
mod run;

pub(crate) use observe::*;
pub(crate) use operator::*;
pub(crate) use parse::*;
pub(crate) use queue::*;
pub(crate) use run::*;

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::time::Duration;

/// Machine-wide admission and ownership for fleets of agent harnesses.
///
/// Exit codes: the command's own status when a command ran (128+N if a signal N ended it);
/// 64 usage error; 69 refused because STOP or a drain is in force, or a held role lease was
/// lost; 70 internal error; 71 system error; 74 output could not be written; 75 busy (at cap with --no-wait, timeout, another
/// full run, a role held by someone else, not idle, an API budget spent or paused); 78
/// configuration error (the slot directory; the config file, for a take);
/// 126 the command cannot be executed; 127 the command was not found.
#[derive(Debug, Parser)]
#[command(name = "worklane", version, about, long_about = None, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    /// The slot directory, as `AGENT_SLOTS_DIR` names it (this option wins over the variable
    /// and is passed on to every process worklane starts); a relative PATH is taken from the
    /// current directory. The config is then PATH/config.json unless AGENT_SLOTS_CONFIG is
    /// set.
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) dir: Option<std::path::PathBuf>,
    /// Show what worklane does on stderr (takeovers, cleared claims, retired waiters): -v
    /// info, -vv debug, -vvv trace; WORKLANE_LOG=LEVEL wins over it.
    #[arg(short = 'v', long = "verbose", global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    /// For scripts: do not print the lines that say a command succeeded (STOP written, drain
    /// removed, cancelled...) nor the live line of a waiting run. Views, ids and --json output
    /// are printed as always; errors and warnings still go to stderr, and the exit code says
    /// what happened.
    #[arg(short = 'q', long, global = true)]
    pub(crate) quiet: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

pub(crate) const EXIT_CODES: &str = "\
Exit codes:
  N    the command's own status (128+N if signal N ended it)
  64   usage error (also: a run nested in a run of the same kind)
  69   refused: STOP or a drain is in force (why: they block), or a held role
       lease was lost
  70   internal error          71  system error
  74   output could not be written (stdout; a closed pipe is no error)
  75   busy: at cap (--no-wait), timed out, full run or role held, not idle,
       API budget spent or paused (budget take), a blocker other than STOP or
       a drain (why); `run -E N` exits N instead when at cap or timed out
  78   configuration error: slot directory; config file, for a take (STOP,
       resume, drain and the views show the config's problem and go on)
  126  command cannot be executed   127  command not found

Environment: AGENT_SLOTS_DIR (or --dir), AGENT_SLOTS_CONFIG. `run` gives its command
WORKLANE_AGENT_SLOT, WORKLANE_TEST_SLOT or WORKLANE_FULL_RUN_SLOT (see README.md).";

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Hold a slot while COMMAND runs; obey STOP; exit with COMMAND's status.
    Run(RunArgs),
    /// Show every held slot, run and lease, the caps, STOP, drain and the API budgets.
    Slots {
        /// Print JSON (schema in docs/json.md) instead of a table.
        #[arg(long)]
        json: bool,
        /// Past this host: show the fleet pool too.
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// Emergency stop: every `worklane run`, `lease run` and queued full run halts its command
    /// within about 5 s and no new slot is taken until `resume-all`.
    StopAll {
        /// Why, shown to everyone refused.
        reason: Vec<String>,
        /// Print what was written, halted and is still running as JSON (schema in
        /// docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Lift an emergency stop.
    ResumeAll {
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read or change the config file in force: the caps and the dispatcher's settings.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Set the machine's cap on concurrent coordinator test runs (1 to 8); the same as
    /// `config set max_test_runs N`.
    SetTestSlots {
        /// The new cap.
        n: u32,
    },
    /// Drain the machine for an update: no new slot of any kind until TIME.
    Drain {
        /// Until when: an RFC 3339 time (2026-11-30T06:00:00Z) or a duration from now (30m).
        #[arg(long)]
        until: String,
        /// The version being installed.
        #[arg(long)]
        to: Option<String>,
        /// Print the flag written as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a drain now.
    Undrain {
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The idle probe: exit 0 only when no full run is live (checks the lock, not processes).
    Idle,
    /// The slot directory's protocol (`protocol.json`): its level and the extensions in use,
    /// and what this worklane keeps.
    #[command(subcommand)]
    Protocol(ProtocolCommand),
    /// Role leases: one owner per role on this machine.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// The fleet on etcd: pools shared by several hosts (their caps and holders).
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Serve the admission queue of this slot directory in the foreground (one per
    /// directory): keep waiting work as rows, admit it under the slot pool, hand lanes over.
    Dispatcher(DispatcherArgs),
    /// Hand COMMAND's lane to the dispatcher as a queued attempt and exit; the dispatcher
    /// starts its driver when the pool has room.
    Enqueue(EnqueueArgs),
    /// Claim an admitted attempt (from WORKLANE_ATTEMPT, WORKLANE_TOKEN, WORKLANE_SOCKET) and
    /// run COMMAND holding its lane and slot, as `run` does.
    Claim(ClaimArgs),
    /// Tell who holds an attempt now: the dispatcher (queued or starting), a driver, or nobody.
    Reconcile {
        /// The attempt id (`a-...`).
        attempt: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Queue work: the dispatcher's attempts, or a full run in a detached runner.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// The API rate-limit budget each credential shares across the machine.
    #[command(subcommand)]
    Budget(BudgetCommand),
    /// Which of the four permission questions blocks work now: resource admission, provider
    /// quota, task ownership, release authority (exit 0 when nothing blocks, 69 for STOP or a
    /// drain, 78 for a config that cannot be used, 75 for any other blocker). Takes nothing,
    /// waits for nothing, writes no record.
    Why(WhyArgs),
    /// Serve a model provider's API on this machine, taking every request from the shared
    /// budget first (`ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL` point agents at it). Needs the
    /// `proxy` feature; without it, exits 69.
    Proxy(ProxyArgs),
    /// What happened on the machine: the event journal (slots taken and released, takeovers,
    /// halts by STOP, drains, role leases, the dispatcher's rows, budget pauses), oldest first.
    Events(EventsArgs),
    /// The machine's numbers in the Prometheus text format: holders, caps, waiters, STOP and
    /// drain, dispatcher rows, takeovers and halts, waits and run times, budgets.
    Metrics(MetricsArgs),
    /// The machine live in the terminal: holders, the line, STOP and drain, role leases,
    /// dispatcher rows, budgets, the last events; `q` quits (a build with the `top` feature).
    Top,
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of worklane or of one of its commands, or write every page.
    Man {
        /// The command whose page to print, e.g. `lease run` (default: worklane's own).
        command: Vec<String>,
        /// Write every page into DIR instead: worklane.1 and `worklane-<command>.1` for every
        /// command, nested ones as worklane-lease-run.1.
        #[arg(long, value_name = "DIR", conflicts_with = "command")]
        all: Option<std::path::PathBuf>,
    },
    /// The detached runner behind `queue full-run` (not for direct use).
    #[command(hide = true)]
    QueuedFullRun {
        #[arg(long)]
        idle_probe: Option<String>,
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        priority: i64,
        #[arg(long)]
        log: Option<std::path::PathBuf>,
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum KindArg {
    Agent,
    Test,
    FullRun,
    /// One build job (`job-<i>.lock`, capped by `max_jobs`): what `run --jobs` takes for its
    /// command and for each token its build reads.
    Job,
}

impl KindArg {
    /// The pool's kind (a test run without a time limit).
    pub(crate) fn kind(self) -> worklane_admission::Kind {
        match self {
            KindArg::Agent => worklane_admission::Kind::Agent,
            KindArg::Test => worklane_admission::Kind::Test { limit_ms: None },
            KindArg::FullRun => worklane_admission::Kind::FullRun,
            KindArg::Job => worklane_admission::Kind::Job,
        }
    }
}
