//! The arguments of the operator's commands: `config`, `why`, `budget`.

use super::*;
use worklane_config::Key as ConfigKey;

/// `worklane protocol`.
#[derive(Debug, Subcommand)]
pub(crate) enum ProtocolCommand {
    /// Print the directory's level and extensions, and whether this worklane may take here.
    Show {
        /// Print `{"version", "level", "extensions", "keeps": {"level", "extensions"},
        /// "refused"}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an extension from `protocol.json` once nothing uses it (for `weights`: no live
    /// slot of more than one unit and no `shares` in the config), so that implementations
    /// that do not know it may take here again.
    Drop {
        /// The extension (`weights`).
        extension: String,
    },
}

/// `worklane config`.
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
        /// The value: a whole number for the caps and journal_max_bytes, dispatcher or waiter
        /// for admission, a list for env_allow_prefixes and env_secret_words.
        value: String,
    },
    /// Remove KEY from the config file, so that its default holds (any key, so that a
    /// misspelt one can be removed).
    Unset {
        /// The key, as written in the file.
        key: String,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ProxyArgs {
    /// Whose API and budget: anthropic, openai, or a provider the config's budget_providers
    /// describes.
    #[arg(long, value_parser = parse_provider)]
    pub(crate) provider: String,
    /// Where requests go (default: the provider's public API; required for a configured
    /// provider), an http or https URL.
    #[arg(long, value_name = "URL")]
    pub(crate) upstream: Option<String>,
    /// Where to listen: IP:PORT, PORT (on 127.0.0.1), or unix:PATH (peer-checked as the
    /// dispatcher's socket). Loopback only unless an address says otherwise.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8480")]
    pub(crate) listen: String,
    /// How long a request waits for the budget before the proxy answers 429 itself.
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DUR")]
    pub(crate) max_wait: std::time::Duration,
    /// On SIGTERM or SIGINT, how long requests and streams in flight may finish.
    #[arg(long, value_parser = parse_duration, default_value = "30s", value_name = "DUR")]
    pub(crate) drain: std::time::Duration,
}

#[derive(Debug, Args)]
pub(crate) struct WhyArgs {
    /// The slot asked about.
    #[arg(long, value_enum, default_value_t = KindArg::Agent)]
    pub(crate) kind: KindArg,
    /// The weight asked about (as `run --weight`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) weight: u32,
    /// The owner tag asked about (as `run --owner`), for the share it counts against.
    #[arg(long, value_name = "TAG")]
    pub(crate) owner: Option<String>,
    /// Whose API budget the provider-quota question asks about (github, anthropic, openai,
    /// or a provider the config describes).
    #[arg(long, default_value = "github", value_parser = parse_provider)]
    pub(crate) provider: String,
    /// The API resource asked about (GitHub).
    #[arg(long, default_value = "core", value_parser = parse_resource)]
    pub(crate) resource: String,
    /// The environment variable holding the API token (read, hashed, never printed; default
    /// by provider: GITHUB_TOKEN, ANTHROPIC_API_KEY, OPENAI_API_KEY).
    #[arg(long)]
    pub(crate) token_env: Option<String>,
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
    /// Give back what a model provider's take reserved, for a call that ended without a
    /// response to observe (the client went away).
    Release(BudgetReleaseArgs),
}

#[derive(Debug, Args)]
pub(crate) struct BudgetReleaseArgs {
    /// The provider whose take it was.
    #[arg(long, value_parser = parse_provider)]
    pub(crate) provider: String,
    /// The reservation `budget take` printed.
    #[arg(long)]
    pub(crate) reservation: String,
    /// The environment variable holding the API key (default: the provider's usual one).
    #[arg(long)]
    pub(crate) token_env: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct BudgetTakeArgs {
    /// Whose budget: `github` (its REST and GraphQL resources), `anthropic`, `openai`, or a
    /// provider the config's `budget_providers` describes.
    #[arg(long, default_value = "github", value_parser = parse_provider)]
    pub(crate) provider: String,
    /// The rate-limit resource the call counts against (GitHub).
    #[arg(long, default_value = "core", value_parser = parse_resource)]
    pub(crate) resource: String,
    /// A model provider's call: the input tokens it sends (an estimate), reserved with one
    /// request until its response is observed.
    #[arg(long, alias = "tokens", default_value_t = 0)]
    pub(crate) input_tokens: u64,
    /// A model provider's call: the output tokens it may receive (its `max_tokens`).
    #[arg(long, default_value_t = 0)]
    pub(crate) output_tokens: u64,
    /// Who makes the call (counted per consumer in the window).
    #[arg(long)]
    pub(crate) consumer: String,
    /// The environment variable holding the API token (read, hashed, never printed; default:
    /// GITHUB_TOKEN, ANTHROPIC_API_KEY or OPENAI_API_KEY by provider).
    #[arg(long)]
    pub(crate) token_env: Option<String>,
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
    /// Whose budget (as for `budget take`).
    #[arg(long, default_value = "github", value_parser = parse_provider)]
    pub(crate) provider: String,
    /// A model provider's response: the reservation its take printed, settled by it.
    #[arg(long)]
    pub(crate) reservation: Option<String>,
    /// A model provider's response: its JSON body (or the final stream event) whose `usage`
    /// says what it used; `-` reads stdin.
    #[arg(long, value_name = "FILE")]
    pub(crate) usage_json: Option<std::path::PathBuf>,
    /// The response's HTTP status (with --headers-file, the file then holds only
    /// `Name: value` lines).
    #[arg(long, required_unless_present = "headers_file")]
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
    /// The environment variable holding the API token (read, hashed, never printed; default
    /// by provider, as for `budget take`).
    #[arg(long)]
    pub(crate) token_env: Option<String>,
}
