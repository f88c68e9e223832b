//! The arguments of the commands that hold something while a command runs: `run`, `lease run`
//! and the fleet's options.

use super::*;

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
    /// Who holds the slot, shown to others (default: the command's name); also the owner tag
    /// a share of the config may name (`"shares": {"owner:TAG": N}`).
    #[arg(long)]
    pub(crate) owner: Option<String>,
    /// How many units of the cap the run holds at once (1 up to the cap): a heavy agent takes
    /// two. All or nothing: it waits until that many are free.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) weight: u32,
    /// Write worklane's own events as JSON lines to descriptor N (3 or above, open for
    /// writing; not passed on to the command): taken, then end with the exit status, or
    /// refused or error (schema in docs/json.md).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    pub(crate) status_fd: Option<i32>,
    /// Give the command's build a jobserver backed by the machine's job slots (`max_jobs`):
    /// MAKEFLAGS and CARGO_MAKEFLAGS name it, the command holds one job slot itself, and each
    /// token its tree reads holds one more. N caps this tree's share (default: what the
    /// machine gives); a make's own -jN is taken as its share.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "0")]
    pub(crate) jobs: Option<u32>,
    /// How the jobserver is named to the build: fds (`--jobserver-auth=R,W`, every make
    /// since 3.78, cargo, ninja) or fifo (`fifo:PATH`, make 4.4).
    #[arg(long, value_enum, default_value_t = JobsStyleArg::Fds, requires = "jobs")]
    pub(crate) jobs_style: JobsStyleArg,
    /// Put `make` and `ninja` first on the command's PATH as shims that take out any -jN (a
    /// make or ninja started through `sh -c`, `env`, `nice` then reads the jobserver instead
    /// of running past max_jobs).
    #[arg(long, requires = "jobs")]
    pub(crate) jobs_shim: bool,
    /// When the command ends, end what it left running too (SIGTERM to every process of the
    /// run, SIGKILL after the grace), as systemd's KillMode=control-group does: the whole
    /// cgroup with containment on, else the command's group and descendants. By default
    /// they run on, as under the bare command, and keep the slot.
    #[arg(long)]
    pub(crate) kill_tree_on_exit: bool,
    /// Limit the run's memory (its cgroup's memory.max): bytes, or with K, M, G or T (powers
    /// of 1024). Where the memory controller is not enabled, the run says so and goes on.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) memory_max: Option<u64>,
    /// Limit the run's CPU (its cgroup's cpu.max): CPUs, 1.5 for one and a half. Where the
    /// cpu controller is not enabled, the run says so and goes on.
    #[arg(long, value_name = "CPUS", value_parser = parse_cpus)]
    pub(crate) cpu_max: Option<f64>,
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

/// `--jobs-style`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum JobsStyleArg {
    /// `--jobserver-auth=R,W`: two inherited descriptors.
    Fds,
    /// `--jobserver-auth=fifo:PATH`.
    Fifo,
}

impl RunArgs {
    /// The jobserver asked for, if any.
    pub(crate) fn jobs(&self) -> Option<worklane_run::Jobs> {
        jobs(self.jobs, self.jobs_style, self.jobs_shim)
    }
}

/// `--jobs [N]` and `--jobs-style` as the library takes them (N 0: no share of its own).
pub(crate) fn jobs(n: Option<u32>, style: JobsStyleArg, shim: bool) -> Option<worklane_run::Jobs> {
    n.map(|n| worklane_run::Jobs {
        shim,
        share: Some(n).filter(|&n| n > 0),
        style: match style {
            JobsStyleArg::Fds => worklane_run::Style::Fds,
            JobsStyleArg::Fifo => worklane_run::Style::Fifo,
        },
    })
}

/// `--memory-max`: bytes, or a whole number with K, M, G or T (powers of 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    let (digits, shift) = match text.chars().last() {
        Some('K' | 'k') => (&text[..text.len() - 1], 10),
        Some('M' | 'm') => (&text[..text.len() - 1], 20),
        Some('G' | 'g') => (&text[..text.len() - 1], 30),
        Some('T' | 't') => (&text[..text.len() - 1], 40),
        _ => (text, 0),
    };
    let n: u64 = digits.parse().map_err(|_| {
        format!("{text:?} is not a size: a whole number of bytes, or with K, M, G or T")
    })?;
    n.checked_mul(1u64 << shift)
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| format!("{text:?}: a size from 1 byte to 16 EiB"))
}

/// `--cpu-max`: CPUs, above 0 (1.5 is one and a half).
fn parse_cpus(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(cpus) if (0.01..=4096.0).contains(&cpus) => Ok(cpus),
        _ => Err(format!(
            "{text:?} is not a number of CPUs from 0.01 to 4096 (1.5 is one and a half)"
        )),
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn sizes_and_cpus_are_read_or_refused_with_what_they_must_be() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        for bad in ["", "0", "G", "1.5G", "-1", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_cpus("1.5"), Ok(1.5));
        for bad in ["0", "-1", "NaN", "inf", "x", "5000"] {
            assert!(parse_cpus(bad).is_err(), "{bad:?}");
        }
    }
}
