//! What a proxy serves, where, and how long it waits.

use crate::{Listen, Upstream};
use std::time::Duration;
use worklane_budget::Provider;
use worklane_slotfile::SlotDir;

/// How long a request waits for the budget by default before the proxy answers 429: 10 s.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(10);
/// How long requests in flight may go on after shutdown began, by default: 30 s.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(30);
/// The name under which the proxy's takes are counted in a window's `byConsumer`.
pub const DEFAULT_CONSUMER: &str = "worklane-proxy";

/// A proxy's configuration. [`Config::new`] sets the defaults; every field is public, so
/// `Config { max_wait, ..Config::new(provider, upstream, listen) }` changes one.
#[derive(Debug, Clone)]
pub struct Config {
    /// The model provider whose budget every request takes from: Anthropic, OpenAI, or a
    /// [`Provider::Generic`] profile (GitHub is refused: its budget is taken call by call).
    pub provider: Provider,
    /// Where requests go.
    pub upstream: Upstream,
    /// Where the proxy listens.
    pub listen: Listen,
    /// How long a request waits for the budget (a spent window, a pause) before the proxy
    /// answers 429 itself, in the provider's error shape, without asking the upstream.
    pub max_wait: Duration,
    /// After shutdown began, how long requests and streams in flight may go on; those still
    /// running then are cut (and their reservations settled).
    pub drain: Duration,
    /// The slot directory whose budget files are shared; `None`: the machine's, resolved as
    /// every worklane command resolves it (`AGENT_SLOTS_DIR`, `/var/lib/worklane/agent-slots`,
    /// `/var/tmp/agent-slots`).
    pub dir: Option<SlotDir>,
    /// The consumer name the proxy's takes are counted under (1 to 32 letters, digits, `-`,
    /// `_`, `.`; anything else counts as `(other)`).
    pub consumer: String,
}

impl Config {
    /// A configuration with the defaults: [`DEFAULT_MAX_WAIT`], [`DEFAULT_DRAIN`], the
    /// machine's slot directory, consumer [`DEFAULT_CONSUMER`].
    #[must_use]
    pub fn new(provider: Provider, upstream: Upstream, listen: Listen) -> Config {
        Config {
            provider,
            upstream,
            listen,
            max_wait: DEFAULT_MAX_WAIT,
            drain: DEFAULT_DRAIN,
            dir: None,
            consumer: DEFAULT_CONSUMER.to_owned(),
        }
    }
}
