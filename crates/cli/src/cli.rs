//! The command line as parsed by clap: raw arguments, validated into settings by each command.

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

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print KEY's value in force (its default when the file does not set it); without KEY,
    /// the file in force and every key.
    Get {
        /// The key.
        key: Option<ConfigKey>,
        /// Print JSON: KEY's value, or without KEY `{"version", "file", "exists", "values",
        /// "set"}`.
        #[arg(long)]
        json: bool,
    },
    /// Set KEY to VALUE in the config file in force, keeping its other keys; the file is
    /// checked whole and replaced atomically. A list takes A,B or a JSON array.
    Set {
        /// The key.
        key: ConfigKey,
        /// The value: a whole number for the caps, dispatcher or waiter for admission, a list
        /// for env_allow_prefixes and env_secret_words.
        value: String,
    },
    /// Remove KEY from the config file, so that its default holds (any key, so that a
    /// misspelt one can be removed).
    Unset {
        /// The key, as written in the file.
        key: String,
    },
}

/// A key of the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ConfigKey {
    /// The cap on concurrent agents (1 to 4294967295, default 2).
    #[value(name = "max_agents")]
    MaxAgents,
    /// The cap on concurrent test runs (1 to 8, default 2).
    #[value(name = "max_test_runs")]
    MaxTestRuns,
    /// How waiting work is admitted: dispatcher (the default) or waiter.
    #[value(name = "admission")]
    Admission,
    /// The variable prefixes a queued attempt keeps (replaces the defaults).
    #[value(name = "env_allow_prefixes")]
    EnvAllowPrefixes,
    /// The words that make a variable secret-shaped (replaces the defaults).
    #[value(name = "env_secret_words")]
    EnvSecretWords,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum KindArg {
    Agent,
    Test,
    FullRun,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// What to hold.
    #[arg(long, value_enum, default_value_t = KindArg::Agent)]
    pub(crate) kind: KindArg,
    /// Wait for a slot (the default).
    #[arg(long, overrides_with = "no_wait")]
    pub(crate) wait: bool,
    /// Exit 75 (or -E's code) at once instead of waiting for a slot.
    #[arg(short = 'n', long)]
    pub(crate) no_wait: bool,
    /// Give up waiting after DUR (e.g. 90s, 5m, 1h30m) and exit 75 (or -E's code).
    #[arg(short = 'w', long, value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
    /// The exit code when the run is refused because it is busy (at cap with --no-wait, timed
    /// out), as flock(1) -E has it; default 75. A STOP or a drain still exits 69.
    #[arg(short = 'E', long, value_name = "N", default_value_t = crate::exit::TEMP_FAIL)]
    pub(crate) conflict_exit_code: u8,
    /// Place in the waiting line: higher goes first, default 0; equal priorities go in order
    /// of arrival (the same scale as `enqueue --priority`).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub(crate) priority: i64,
    /// Time limit recorded in a test-run slot (`limit_ms`), e.g. 30m.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) limit: Option<Duration>,
    /// Who holds the slot, shown to others (default: the command's name).
    #[arg(long)]
    pub(crate) owner: Option<String>,
    /// Write worklane's own events as JSON lines to descriptor N (3 or above, open for
    /// writing; not passed on to the command): taken, then end with the exit status, or
    /// refused or error (schema in docs/json.md).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    pub(crate) status_fd: Option<i32>,
    /// Past this host: also take a place in a fleet pool on etcd.
    #[command(flatten)]
    pub(crate) fleet: FleetArgs,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}

/// The fleet's etcd and the place taken in it (`run --fleet`, `worklane fleet`).
#[derive(Debug, Clone, Args)]
pub(crate) struct FleetArgs {
    /// The fleet's etcd and the TTL of the place's lease (the same options as `lease run`'s).
    #[command(flatten)]
    pub(crate) lease: FleetRoleArgs,
    /// The fleet pool (its cap is set with `worklane fleet set-cap`).
    #[arg(long, default_value = "agents", value_name = "NAME")]
    pub(crate) pool: String,
}

/// The fleet's etcd for a budget shared by the fleet (`budget take|observe|show --fleet`).
#[derive(Debug, Clone, Args)]
pub(crate) struct FleetAt {
    /// The fleet's etcd endpoints (http://HOST:PORT, comma-separated): use the budget the
    /// fleet shares there (changed by compare-and-swap) instead of this host's.
    #[arg(
        long = "fleet",
        env = "WORKLANE_FLEET",
        value_name = "URL[,URL...]",
        value_delimiter = ','
    )]
    pub(crate) endpoints: Vec<String>,
}

/// The fleet's etcd and the TTL of what is held there (`run`, `lease run`, `fleet`, `slots`,
/// `why`).
#[derive(Debug, Clone, Args)]
pub(crate) struct FleetRoleArgs {
    /// The fleet's etcd endpoints (http://HOST:PORT, comma-separated): past this host, a place
    /// in a fleet pool (`run`) or the role across the fleet (`lease run`), held as long as the
    /// command runs.
    #[arg(
        long = "fleet",
        env = "WORKLANE_FLEET",
        value_name = "URL[,URL...]",
        value_delimiter = ','
    )]
    pub(crate) endpoints: Vec<String>,
    /// The TTL of the fleet place's or role's etcd lease: a holder that cannot renew it for
    /// half of it halts its command.
    #[arg(long, value_parser = parse_duration, default_value = "15s", value_name = "DUR")]
    pub(crate) fleet_ttl: Duration,
}

#[derive(Debug, Subcommand)]
pub(crate) enum FleetCommand {
    /// Set the cap of a fleet pool (kept in etcd; a pool without one admits nobody).
    SetCap {
        #[command(flatten)]
        fleet: FleetArgs,
        /// The cap.
        cap: u32,
    },
    /// Show a fleet pool: its cap, its holders (host, pid, since) and who waits.
    Status {
        #[command(flatten)]
        fleet: FleetArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum LeaseCommand {
    /// Hold the TTL lease of ROLE, with a heartbeat, while COMMAND runs.
    Run(LeaseRunArgs),
}

#[derive(Debug, Args)]
pub(crate) struct LeaseRunArgs {
    /// The role (one owner per role on this machine; different roles coexist).
    #[arg(long)]
    pub(crate) role: String,
    /// How long the lease stays held without a pulse: at least 2s, default 60s (pulses every
    /// TTL/20, but not more often than every 250 ms).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub(crate) ttl: Duration,
    /// The profile recorded in the lease.
    #[arg(long, default_value = "default")]
    pub(crate) profile: String,
    /// Who holds it (default: USER@HOST).
    #[arg(long)]
    pub(crate) agent_identity: Option<String>,
    /// While someone else holds the role, wait for it (trying again every 250 ms) instead of
    /// exiting 75 at once; a STOP still refuses with 69.
    #[arg(long)]
    pub(crate) wait: bool,
    /// Wait for the role, but give up after DUR (e.g. 90s, 5m, 1h30m) and exit 75; implies
    /// --wait.
    #[arg(short = 'w', long, value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
    /// On a refusal, also print it as one JSON object on stdout (schema in docs/json.md).
    #[arg(long)]
    pub(crate) json: bool,
    /// Write worklane's own events as JSON lines to descriptor N, as `run --status-fd` does.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    pub(crate) status_fd: Option<i32>,
    /// Past this host: also claim the role across the fleet on etcd.
    #[command(flatten)]
    pub(crate) fleet: FleetRoleArgs,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum QueueCommand {
    /// List the attempts the dispatcher holds (queued, starting, running and failed), with
    /// their logs.
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Also the history of ended attempts (how each ended, its log).
        #[arg(long)]
        all: bool,
    },
    /// Queue a failed attempt again from the start (its failed starts forgotten).
    Retry {
        /// The attempt id (`a-...`), as `queue ls` shows it.
        attempt: String,
    },
    /// Forget ended attempts and remove their logs: yours, or everyone's for root and the slot
    /// directory's owner.
    Prune {
        /// Only those that ended longer ago than this (e.g. `1h`, `2d`); default: all.
        #[arg(long, value_parser = parse_duration)]
        older_than: Option<Duration>,
    },
    /// Drop a queued, starting or failed attempt (`a-...`: its row goes, its lane and slot are
    /// freed), halt a running one's driver as STOP would, or take a queued full run still
    /// waiting out of its line (`fr-<runner pid>`).
    Cancel {
        /// The attempt id (`a-...`) or queued full run (`fr-<pid>`), as `queue ls` shows it.
        attempt: String,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run COMMAND as a full run in a detached runner, once the full-run lock is free, no STOP
    /// or drain is in force, and the idle probe (if given) passes; survives this shell.
    FullRun {
        /// A shell command that must exit 0 before the run starts (e.g. a project's idle_probe).
        #[arg(long)]
        idle_probe: Option<String>,
        /// Its place in the full-run line: higher goes first; default 0.
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        priority: i64,
        /// Print the run's id, runner pid and log as JSON.
        #[arg(long)]
        json: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct DispatcherArgs {
    /// The socket to serve (default: dispatcher.sock in the slot directory).
    #[arg(long)]
    pub(crate) socket: Option<std::path::PathBuf>,
    /// How long an admitted attempt waits for its driver's claim before it is queued again.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub(crate) claim_interval: Duration,
    /// How many times a driver that cannot be started is tried before its attempt is parked
    /// as failed (`queue retry` queues it again).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) start_attempts: u32,
    /// The wait after a driver's first failed start; it doubles with each failure, up to a
    /// minute.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub(crate) start_backoff: Duration,
    /// How long ended attempts stay in the history (`queue ls --all`) and their logs in the
    /// slot directory.
    #[arg(long, value_parser = parse_duration, default_value = "7d")]
    pub(crate) retention: Duration,
}

#[derive(Debug, Args)]
pub(crate) struct EnqueueArgs {
    /// The lane (its lock is lane-NAME.lock); default: a lane of its own.
    #[arg(long)]
    pub(crate) lane: Option<String>,
    /// Higher goes first (the same scale as everywhere in worklane); default 0.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub(crate) priority: i64,
    /// The stage the work is at (free text, shown in `queue ls`).
    #[arg(long, default_value = "")]
    pub(crate) stage: String,
    /// Where the work was placed (free text, e.g. a worktree).
    #[arg(long, default_value = "")]
    pub(crate) placement: String,
    /// COMMAND is itself the driver and claims over the socket (a harness in another
    /// language); without it, the driver is `worklane claim -- COMMAND`.
    #[arg(long)]
    pub(crate) driver: bool,
    /// The dispatcher's socket (default: WORKLANE_SOCKET, else dispatcher.sock in the slot
    /// directory).
    #[arg(long)]
    pub(crate) socket: Option<std::path::PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct ClaimArgs {
    /// Print the claim as JSON on stderr before COMMAND runs.
    #[arg(long)]
    pub(crate) json: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct WhyArgs {
    /// The slot asked about.
    #[arg(long, value_enum, default_value_t = KindArg::Agent)]
    pub(crate) kind: KindArg,
    /// The API resource asked about.
    #[arg(long, default_value = "core", value_parser = parse_resource)]
    pub(crate) resource: String,
    /// The environment variable holding the API token (read, hashed, never printed).
    #[arg(long, default_value = "GITHUB_TOKEN")]
    pub(crate) token_env: String,
    /// Ask who owns this role's lease.
    #[arg(long, conflicts_with = "lock")]
    pub(crate) role: Option<String>,
    /// Ask who owns this lock file (a name in the slot directory, e.g. full-run.lock).
    #[arg(long)]
    pub(crate) lock: Option<String>,
    /// Past this host: resource admission also asks the fleet pool on etcd.
    #[command(flatten)]
    pub(crate) fleet: FleetArgs,
    /// Print JSON (schema in docs/json.md).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum BudgetCommand {
    /// Show the budgets of the credentials used recently (numbered, never named by key).
    Show {
        /// Print JSON (schema in docs/json.md) instead of text.
        #[arg(long)]
        json: bool,
        /// Show the budgets the fleet shares in etcd instead of this host's.
        #[command(flatten)]
        fleet: FleetAt,
    },
    /// Take one unit before an API call: exit 0 when the call may go, 75 when the budget is
    /// spent or paused and stayed so for --wait-max (default 10s; the call must not be made).
    Take(BudgetTakeArgs),
    /// Record what an API response said (its rate-limit headers and status); never waits.
    Observe(BudgetObserveArgs),
}

#[derive(Debug, Args)]
pub(crate) struct BudgetTakeArgs {
    /// The rate-limit resource the call counts against.
    #[arg(long, default_value = "core", value_parser = parse_resource)]
    pub(crate) resource: String,
    /// Who makes the call (counted per consumer in the window).
    #[arg(long)]
    pub(crate) consumer: String,
    /// The environment variable holding the API token (read, hashed, never printed).
    #[arg(long, default_value = "GITHUB_TOKEN")]
    pub(crate) token_env: String,
    /// How long to wait for calls to be left or a pause to end before refusing (75): 0
    /// refuses at once; default 10s. A take that loses a race for the last call may wait up
    /// to 10 s more.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10s")]
    pub(crate) wait_max: Duration,
    /// Take from the budget the fleet shares in etcd.
    #[command(flatten)]
    pub(crate) fleet: FleetAt,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BudgetObserveArgs {
    /// The response's HTTP status.
    #[arg(
        long,
        required_unless_present = "headers_file",
        conflicts_with = "headers_file"
    )]
    pub(crate) status: Option<u16>,
    /// A response header as "Name: value" (repeat; X-RateLimit-* and Retry-After are read).
    #[arg(long, conflicts_with = "headers_file")]
    pub(crate) header: Vec<String>,
    /// Read the status and headers from a raw HTTP header dump, as `curl -D FILE` writes it
    /// (a status line, then `Name: value` lines; CRLF or LF; of several responses, such as
    /// redirects, the last counts); `-` reads stdin.
    #[arg(long, value_name = "FILE")]
    pub(crate) headers_file: Option<std::path::PathBuf>,
    /// The response body says a secondary rate limit was exceeded (pause every caller even
    /// without Retry-After).
    #[arg(long)]
    pub(crate) secondary_limit: bool,
    /// Record it in the budget the fleet shares in etcd.
    #[command(flatten)]
    pub(crate) fleet: FleetAt,
    /// The environment variable holding the API token (read, hashed, never printed).
    #[arg(long, default_value = "GITHUB_TOKEN")]
    pub(crate) token_env: String,
}

/// An API rate-limit resource name, as the budget ledger accepts it.
pub(crate) fn parse_resource(text: &str) -> Result<String, String> {
    if worklane_budget::observe::is_resource_name(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?}: a resource is 1 to 32 letters, digits, `_` or `-` (core, graphql, search)"
        ))
    }
}

/// What every duration message suggests.
const DURATION_FORMS: &str = "use e.g. 500ms, 90s, 5m, 2h, 1d, 1h30m, or a plain number of seconds";

/// Parses a duration: a plain number of seconds (`90`), or one or more parts of a number and a
/// unit (`ms`, `s`, `m`, `h`, `d`) from the largest unit to the smallest, each unit at most
/// once: `500ms`, `90s`, `5m`, `2h`, `1d`, `1h30m`, `2m30s`, `1s500ms`. A number without a
/// unit after a part (`1h30`) is refused rather than guessed.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("an empty duration: {DURATION_FORMS}"));
    }
    let too_long = || format!("{text:?} is too long a duration");
    if text.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = text.parse().map_err(|_| too_long())?;
        return secs
            .checked_mul(1000)
            .map(Duration::from_millis)
            .ok_or_else(too_long);
    }
    let mut rest = text;
    let mut total: u64 = 0;
    // The unit of the part before, with its rank (0 for `d` .. 4 for `ms`).
    let mut before: Option<(&str, u8)> = None;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, after) = rest.split_at(digits_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        if digits.is_empty() {
            return Err(format!(
                "{text:?} is not a duration: expected a number at {rest:?}; {DURATION_FORMS}"
            ));
        }
        let (rank, per_unit_ms): (u8, u64) = match unit {
            "d" => (0, 86_400_000),
            "h" => (1, 3_600_000),
            "m" => (2, 60_000),
            "s" => (3, 1_000),
            "ms" => (4, 1),
            "" => {
                let (prev, _) = before.unwrap_or_default();
                return Err(format!(
                    "{text:?}: {digits} after {prev:?} has no unit; give every part its unit \
                     (e.g. 1h30m, 2m30s)"
                ));
            }
            _ => {
                // `1hm`: a unit and then another with no number between them.
                let empty = ["ms", "d", "h", "m", "s"].iter().find_map(|known| {
                    unit.strip_prefix(known)
                        .filter(|tail| ["d", "h", "m", "s"].iter().any(|u| tail.starts_with(u)))
                });
                return Err(match empty {
                    Some(tail) => format!(
                        "{text:?} is not a duration: expected a number at {tail:?}; \
                         {DURATION_FORMS}"
                    ),
                    None => format!(
                        "{text:?}: unknown unit {unit:?}; use ms, s, m, h or d (e.g. 1h30m)"
                    ),
                });
            }
        };
        if let Some((prev, prev_rank)) = before
            && prev_rank >= rank
        {
            return Err(format!(
                "{text:?}: {unit:?} after {prev:?}; give the units from the largest to the \
                 smallest, each once (e.g. 1h30m)"
            ));
        }
        let n: u64 = digits.parse().map_err(|_| too_long())?;
        total = n
            .checked_mul(per_unit_ms)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(too_long)?;
        before = Some((unit, rank));
        rest = next;
    }
    Ok(Duration::from_millis(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration(" 0 "), Ok(Duration::ZERO));
        for bad in ["", "m", "5x", "-1s", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn compound_durations_add_their_parts() {
        for (text, ms) in [
            ("1h30m", 5_400_000),
            ("2m30s", 150_000),
            ("1h", 3_600_000),
            ("1d2h3m4s5ms", 93_784_005),
            ("1s500ms", 1_500),
            ("0h5m", 300_000),
            ("1h0m", 3_600_000),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn bad_compound_durations_say_what_is_wrong() {
        for (text, says) in [
            ("1h30", "has no unit"),
            ("2m30", "has no unit"),
            ("1hm", "expected a number at \"m\""),
            ("h30m", "expected a number"),
            ("1h 30m", "unknown unit"),
            ("1m1h", "from the largest to the smallest"),
            ("1s1s", "from the largest to the smallest"),
            ("500ms1s", "from the largest to the smallest"),
            ("1h30x", "unknown unit \"x\""),
            ("1H", "unknown unit"),
            ("abc", "expected a number"),
            ("   ", "empty"),
        ] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    #[test]
    fn overflowing_durations_are_refused_not_wrapped() {
        for text in [
            "18446744073709551616",
            "18446744073709551615",
            "99999999999999999999ms",
            "213503982335d",
            "5124095576030431h",
            "1d18446744073709551615ms",
        ] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.contains("too long"), "{text:?}: {err}");
        }
        assert_eq!(
            parse_duration("18446744073709551615ms"),
            Ok(Duration::from_millis(u64::MAX)),
            "the largest count of milliseconds"
        );
    }

    proptest::proptest! {
        #[test]
        fn a_duration_written_in_parts_is_their_sum(
            d in 0u64..1000, h in 0u64..1000, m in 0u64..1000, s in 0u64..1000, ms in 0u64..1000
        ) {
            let text = format!("{d}d{h}h{m}m{s}s{ms}ms");
            let want = (((d * 24 + h) * 60 + m) * 60 + s) * 1000 + ms;
            proptest::prop_assert_eq!(parse_duration(&text), Ok(Duration::from_millis(want)));
        }

        #[test]
        fn no_text_makes_the_parser_panic(text in "[0-9a-z. ]{0,12}") {
            let _ = parse_duration(&text);
        }
    }

    #[test]
    fn resources_are_plain_names() {
        assert_eq!(parse_resource("graphql"), Ok("graphql".to_owned()));
        for bad in ["", "a b", "../core", &"x".repeat(33)] {
            assert!(parse_resource(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
