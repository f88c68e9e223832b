//! The arguments of the dispatcher's commands: `queue`, `dispatcher`, `enqueue`, `claim`.

use super::*;

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
    /// The most attempts one user other than root may have waiting (queued, starting or
    /// failed): an enqueue beyond is refused (75), so one user's rows never starve the others
    /// of the dispatcher's descriptors.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_rows_per_user: u64,
    /// The most connections one user may have open to the dispatcher at once: a new one
    /// beyond closes that user's oldest, so one user's connections never crowd out another's.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub(crate) max_connections_per_user: u64,
    /// The dispatcher's own directory for its queue database, mode 0700 (default: for root
    /// /var/lib/worklane/dispatcher/KEY, else ~/.local/state/worklane/dispatcher/KEY, KEY
    /// naming the slot directory). Never in the slot directory, which the group may write.
    #[arg(long, env = "WORKLANE_STATE_DIR", value_name = "DIR")]
    pub(crate) state_dir: Option<std::path::PathBuf>,
    /// A prefix of the variables an enqueue's environment may hand to its driver (repeat it;
    /// given, the list replaces the default: WORKLANE_, LANE_, GIT_AUTHOR_, GIT_COMMITTER_).
    #[arg(long = "env-allow-prefix", value_name = "PREFIX")]
    pub(crate) env_allow_prefixes: Vec<String>,
    /// A word that marks a variable as a secret, never kept (repeat it; added to the default
    /// words, which no setting removes).
    #[arg(long = "env-secret-word", value_name = "WORD")]
    pub(crate) env_secret_words: Vec<String>,
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
    /// How many units of the agents' cap the work holds when it runs (1 up to the cap).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) weight: u32,
    /// The owner tag a share of the config may name (`"shares": {"owner:TAG": N}`); without
    /// it the work counts against the enqueuer's uid and groups.
    #[arg(long, value_name = "TAG")]
    pub(crate) owner: Option<String>,
    /// The driver `worklane claim` gives the command's build a jobserver (`run --jobs`; N:
    /// this tree's share). Not with --driver, whose own command decides.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "0", conflicts_with = "driver")]
    pub(crate) jobs: Option<u32>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct ClaimArgs {
    /// Print the claim as JSON on stderr before COMMAND runs.
    #[arg(long)]
    pub(crate) json: bool,
    /// Give the command's build a jobserver backed by the machine's job slots, as `run
    /// --jobs` does (N: this tree's share).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "0")]
    pub(crate) jobs: Option<u32>,
    /// How the jobserver is named to the build (as `run --jobs-style`).
    #[arg(long, value_enum, default_value_t = super::JobsStyleArg::Fds, requires = "jobs")]
    pub(crate) jobs_style: super::JobsStyleArg,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}
