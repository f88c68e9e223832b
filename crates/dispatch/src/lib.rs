//! The admission dispatcher of worklane (seed 000): waiting work as durable rows in SQLite,
//! admitted centrally under the machine's slot pool, and lanes handed over as held lock
//! descriptors on a Unix socket.
//!
//! - [`client`]: where the dispatcher's socket is, whom a client believes serves it, one
//!   request and its reply: what a launcher, a driver or a view needs.
//! - [`wire`]: the messages (`enqueue`, `claim`, `list`, `cancel`, `retry`, `prune`) and their
//!   replies, carried by `worklane-transport`.
//! - `service::Dispatcher` (feature `server`, default): the decisions (enqueue, admit, claim,
//!   expire, cancel, retry, recover) on the `store` (SQLite), the slot pool and the held lane
//!   guards; who may do what from the caller's peer credentials.
//! - `server::Server` (feature `server`): the service loop (one `poll` over the socket, the
//!   slot directory's changes and every connection).
//! - `config` (feature `server`): the dispatcher's part of the host's config (`admission`).
//! - `state` (feature `server`): the dispatcher's private state directory, where its database
//!   lives, and the takeover of a database an older worklane kept in the slot directory.
//! - [`env`](mod@env): the environment a queued attempt keeps (allowed prefixes, no
//!   secret-shaped names, values under 4,096 characters); [`driver`]: a driver's account and
//!   the environment it starts with.
//! - [`wal`]: whether a SQLite write-ahead log lost frames, read before SQLite replays it.
//! - [`lane`]: lane names, and retiring a lane of its own when its attempt is over;
//!   [`status`]: the `queue-<lane>.json` entries other implementations read.
//!
//! # Limitations
//!
//! - Linux and macOS; the database is SQLite compiled in (a C compiler is needed to build).
//! - A dispatcher that is not root starts drivers only as itself, so it queues only its own
//!   user's work.
//! - The database is a file of the dispatcher's own: copied or edited by hand, its rows are
//!   trusted as the dispatcher wrote them (PROTOCOL.md section 14 says where it lives and why
//!   nobody else can write it).
//!
//! # Design
//!
//! The store (`store/`: the model in `attempt.rs`, the schema and its migrations in
//! `schema.rs`, opening and damage in `open.rs`, row decoding in `rows.rs`, the queries in
//! `mod.rs`) is SQLite in WAL mode, one row per attempt and per lane, admission order from the
//! `attempts_order` index; it lives in the private state directory, never in the slot
//! directory. The service (`service.rs` and `service/`: one file per operation, `procs.rs` the
//! pidfds of the drivers and claimers it may signal) decides and never touches a socket: each
//! operation returns a typed outcome or refusal (`service/outcome.rs`: `Enqueued`,
//! `EnqueueRefused`, `Claimed`, `ClaimRefused`, ...), each refusal with the data it names and
//! its words, and builds no reply. The server (`server.rs` and `server/`: connections,
//! answers, events) is the one place that touches the socket, and `server/reply.rs` the one
//! place that maps the service's outcomes and refusals to replies and their codes (PROTOCOL.md
//! 14.2). Starting a driver and reaping it are the caller's callbacks (`worklane-run`'s
//! `Launcher`).

pub mod client;
#[cfg(feature = "server")]
pub mod config;
pub mod driver;
pub mod env;
pub mod lane;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod service;
#[cfg(feature = "server")]
pub mod state;
pub mod status;
#[cfg(feature = "server")]
pub mod store;
pub mod wal;
pub mod wire;
