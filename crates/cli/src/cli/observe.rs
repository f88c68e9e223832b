//! The arguments of `events` and `metrics`: what happened, and the numbers of the machine.

use clap::Args;

/// `worklane events`.
#[derive(Debug, Args)]
pub(crate) struct EventsArgs {
    /// Keep printing events as they are appended (woken by inotify), across rotations, until
    /// interrupted.
    #[arg(short = 'f', long)]
    pub(crate) follow: bool,
    /// Only events since TIME: a duration back from now (10m, 2h, 1d) or an RFC 3339 time
    /// (2026-11-30T04:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub(crate) since: Option<String>,
    /// Only events of kind K (slot-taken, takeover, halt...) or of its family (slot, role,
    /// dispatch, budget); repeat it for several.
    #[arg(long = "kind", value_name = "K")]
    pub(crate) kinds: Vec<String>,
    /// Print each event as its JSON line (schema in docs/json.md).
    #[arg(long)]
    pub(crate) json: bool,
}

/// `worklane metrics`.
#[derive(Debug, Args)]
pub(crate) struct MetricsArgs {
    /// Write the exposition to PATH instead of printing it, atomically (a temp file in PATH's
    /// directory, then renamed over it): for node_exporter's textfile collector.
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    pub(crate) textfile: Option<std::path::PathBuf>,
    /// Serve it at http://ADDR/metrics until interrupted (GET only, one request per
    /// connection). ADDR is HOST:PORT or a PORT on the loopback address; without ADDR,
    /// 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9464")]
    pub(crate) listen: Option<String>,
}
