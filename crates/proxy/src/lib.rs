//! `worklane-proxy`: a local reverse proxy in front of a model provider's API (Anthropic,
//! OpenAI, or one the config describes) that makes every request take from worklane's shared
//! budget ledger first, so agents nobody can change (Claude Code, the providers' SDKs, aider:
//! whatever honours `ANTHROPIC_BASE_URL` or `OPENAI_BASE_URL`) obey the machine's budget.
//!
//! For each request the proxy:
//! - hashes the client's key (`x-api-key`, else `Authorization: Bearer`) into the ledger's
//!   [`CredentialKey`](worklane_budget::CredentialKey); the key itself is forwarded to the
//!   upstream and never kept, logged or written;
//! - estimates what the request needs (one request; input tokens from its size, output
//!   tokens from its `max_tokens`: [`BYTES_PER_TOKEN`], [`DEFAULT_OUTPUT_TOKENS`],
//!   [`PEEK_LIMIT`]) and takes it from the slot directory's ledger, the same files as
//!   `worklane budget take --provider` (PROTOCOL.md section 13.1): several proxies and direct
//!   takers share one budget per key, the machine's;
//! - while the budget is spent or paused, waits up to [`Config::max_wait`] (10 s); past it
//!   answers 429 itself, in the provider's own error shape, with `retry-after`
//!   ([`ANSWERED_HEADER`] marks every answer the proxy makes), and the upstream is not asked;
//! - forwards the request (method, path, query, headers but the hop-by-hop ones; `Host` the
//!   upstream's; the body streamed) and streams the response back frame by frame: a server-
//!   sent event leaves as it arrives, an upstream error comes back unchanged;
//! - records the response's rate-limit headers in the ledger (a pause asked for pauses every
//!   client of the key, through any proxy, and every direct taker), and settles the take's
//!   reservation: at once when the headers report every dimension (they count the request
//!   already), a stream's head settling the dimensions it reports and its body the rest with
//!   the usage read as it passes (a JSON body's `usage`, a stream's events); a response cut
//!   short (the client went away) keeps its estimate counted, a response that reports
//!   nothing gives it back, and a request that got no response gives its reservation back;
//! - takes only for generation calls (`worklane_budget::is_generation`: a `POST` to
//!   `.../messages`, `.../chat/completions`, `.../completions`, `.../responses`,
//!   `.../embeddings`); a token count, a model list, a batch or a file goes unaccounted.
//!
//! It listens on loopback (or a Unix socket, whose peers must be root, the slot directory's
//! owner or members of its group); a [`Trigger`] or the shutdown future stops it gracefully.
//!
//! # Limitations
//!
//! - HTTP/1.1 on both legs (no h2c from clients, no HTTP/2 to the upstream; TLS from rustls
//!   with Mozilla's roots, `webpki-roots`, not the system store).
//! - The budget is only as good as its estimates and the provider's headers: output is
//!   reserved at `max_tokens` and input at a quarter of the body's bytes until the response
//!   says better; a body longer than [`PEEK_LIMIT`] is estimated from its length alone.
//! - A response compressed despite the proxy's `accept-encoding: identity`, or a JSON body
//!   over 2 MiB, is observed by its headers alone.
//! - Requests without a key are forwarded unaccounted; a key in a query string (some APIs
//!   take one) is not recognised.
//! - Waiting happens in the proxy: a refused take is tried again when the window resets or
//!   the pause ends, when this proxy records a response of the key, and every second.
//! - A proxy killed with SIGKILL leaves its requests' reservations in the ledger until they
//!   expire (10 min).
//! - One thread per API key in use makes that key's ledger calls (a key unused for 10 min
//!   gives its thread up).
//!
//! # Example
//!
//! ```no_run
//! use worklane_proxy::{Config, Provider, Proxy};
//!
//! let config = Config::new(
//!     Provider::Anthropic,
//!     "https://api.anthropic.com".parse()?,
//!     "127.0.0.1:8480".parse()?,
//! );
//! let proxy = Proxy::bind(config)?;
//! let trigger = proxy.trigger(); // `trigger.fire()` from a signal handler's thread
//! # drop(trigger);
//! let served = proxy.run(std::future::pending())?; // blocks until fired
//! println!("{} connection(s) cut at the end", served.cut);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Then `ANTHROPIC_BASE_URL=http://127.0.0.1:8480 claude` (or any SDK) goes through it.
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! Owns the HTTP front of the model budgets; knows nothing of the ledger's files (those are
//! `worklane-budget`'s) and nothing of clap or terminals. hyper 1 on tokio on both legs, no
//! HTTP of its own.
//!
//! - `listen.rs`, `upstream.rs`, `config.rs`: what a proxy serves and where (`Listen`:
//!   `IP:PORT`, `PORT`, `unix:PATH`; `Upstream`: scheme, host, path prefix; `Config` and its
//!   defaults).
//! - `bind.rs`: `Proxy::bind` checks the provider (GitHub refused), opens the slot directory
//!   (`SlotDir::resolve_dir` unless given) and reads its owner and group (the Unix socket's
//!   trust), makes the upstream client (hyper-util's pooled client, hyper-rustls with ring
//!   and webpki roots, http or https) and binds the socket (a stale Unix socket nobody
//!   answers on is replaced, mode 0660).
//! - `serve.rs`: the accept loop (a `poll_fn` over the shutdown future, the trigger, the
//!   finished connections and the listener; no `select!`), one task per connection (hyper's
//!   HTTP/1.1 server, `graceful_shutdown` once the proxy stops), then the drain: connections
//!   get `Config::drain`, those left are aborted, and the lanes are closed. `handle`:
//!   credential, body prefix, estimate, take, forward; `forward_to`: the upstream call and
//!   the observed response.
//! - `forward.rs`: hop-by-hop headers, the credential, the upstream request; `read_prefix`
//!   (up to `PEEK_LIMIT`, frames kept) and `Outgoing` (those frames replayed, then the rest
//!   streamed, its size hint exact when the client's was); `Observing`, the response body
//!   wrapper: each frame is fed to the usage scan and passed on in the same poll; what is
//!   left of the reservation (`Settle`) is settled when the body ends (also on its last data
//!   frame when the body's length is known, since hyper may not poll again) or when it is
//!   dropped before. `forward_to` (in `serve.rs`) decides at the head: a head reporting every
//!   dimension settles the reservation there (the provider counted the request before it
//!   answered: exact, one call, in the order the provider answered); a stream's partial head
//!   is recorded at once and its usage settled at the end; a JSON body's partial head is
//!   observed once, at the end, with the usage.
//! - `lanes.rs`: one lane per credential key: a channel of ledger calls (take, observe,
//!   release) and a thread that makes them in order, a batch at a time (one wake-up each way;
//!   tokio's blocking pool cost four per call, and the order needs one thread anyway).
//!   Ordering is the point: a response's observation is queued before its client can send
//!   the next request, so that request's take sees it. Takes are tried with no ledger wait;
//!   the request waits between tries (`LOOK_AGAIN`, the reset or pause end, or a `watch`
//!   bumped by each recorded response). `Reservation` queues its release when dropped
//!   unsettled. An observation whose lock is busy is tried for up to 1 s, then the
//!   reservation is released instead of left in flight. The thread ends when the lane's map
//!   entry (dropped after 10 min idle, or at shutdown) and every reservation are gone.
//!   A take known to stay refused past the request's wait (a pause, a spent requests
//!   window) is answered at once; a request that waits is counted in the lane's `waiting`,
//!   which the thread writes to the state (`Ledger::note_waiting`) when it changes and every
//!   second while it is not 0; only the refusal a client gets is journaled
//!   (`try_take_model` journals nothing, `journal_model_refusal` once).
//! - `estimate.rs`, `usage.rs`: pure functions with unit tests and proptests (the estimate
//!   rule; which body's usage is read, by its headers, and how much of it is kept). The usage
//!   itself is read by `worklane-budget` (`Usage::of_body`, and `StreamUsage` for a stream's
//!   events, chunks cut anywhere), the same reading as `worklane budget observe --usage-json`.
//! - `answer.rs`: the proxy's own 429, 502, 400 and 403, in Anthropic's or OpenAI's error
//!   shape (`#[derive(Serialize)]` types), marked with `x-worklane-proxy`.
//! - `peer.rs`: the Unix socket's rule, the dispatcher's (root, the directory's owner, its
//!   group primary or supplementary), on credentials read by `worklane-admission`'s
//!   transport (`SO_PEERCRED`, `SO_PEERGROUPS`).

mod answer;
pub mod bind;
mod config;
mod estimate;
mod forward;
mod lanes;
mod line;
pub mod listen;
mod peer;
pub mod serve;
pub mod upstream;
mod usage;

pub use answer::ANSWERED_HEADER;
pub use bind::Proxy;
pub use config::{Config, DEFAULT_CONSUMER, DEFAULT_DRAIN, DEFAULT_MAX_WAIT};
pub use estimate::{BYTES_PER_TOKEN, DEFAULT_OUTPUT_TOKENS, PEEK_LIMIT};
pub use listen::Listen;
pub use serve::{Served, Trigger};
pub use upstream::Upstream;
pub use usage::{MAX_EVENT_LINE, MAX_JSON_BODY};
pub use worklane_budget::Provider;
