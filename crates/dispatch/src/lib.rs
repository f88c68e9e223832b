//! The admission dispatcher of worklane (seed 000): waiting work as durable rows in SQLite,
//! admitted centrally under the machine's slot pool, and lanes handed over as held lock
//! descriptors on a Unix socket.
//!
//! - `service::Dispatcher` (feature `server`, default): the decisions (enqueue, admit, claim, expire, cancel, retry,
//!   recover) on the `store` (SQLite), the slot pool and the held lane guards; who may do what from
//!   the caller's peer credentials.
//! - `server::Server` (feature `server`): the service loop (one `poll` over the socket, the slot directory's
//!   changes and every connection).
//! - [`wire`]: the messages (`enqueue`, `claim`, `list`, `cancel`, `retry`, `prune`) and their
//!   replies, carried by `worklane-transport`.
//! - [`env`](mod@env): the environment a queued attempt keeps (allowed prefixes, no
//!   secret-shaped names, values under 4,096 characters); [`driver`]: a driver's account and
//!   the environment it starts with.
//! - [`wal`]: whether a SQLite write-ahead log lost frames, read before SQLite replays it.
//! - `state` (feature `server`): the dispatcher's private state directory, where its database
//!   lives, and the takeover of a database an older worklane kept in the slot directory.
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
//! `env.rs` (`EnvFilter`: allowed prefixes, secret words after
//! the prefix, 4 095 characters), `lane.rs` (lane names; lanes of their own, `q-<16 hex>`, are
//! retired when their attempt ends: `retire_own_lane`, called by `worklane claim` after its
//! release and by `Dispatcher::cancel`), `store.rs` (`Store`: SQLite WAL, `user_version` migrations,
//! one row per attempt and per lane, admission order from the `attempts_order` index, each
//! statement prepared once per connection; schema 2 added `lane_epoch`, the epoch the launcher's
//! record named at enqueue; schema 3 the enqueuer's uid, gid and groups, the failed starts and
//! their backoff, the driver's pid, the `running` and `failed` states and the bounded history of
//! ended attempts; schema 4 the row's `weight` (1 for older rows) and `owner` tag;
//! `open_checked` runs `quick_check` and moves a damaged database aside),
//! `wire.rs` (the typed messages and refusal codes), `transport.rs` (one JSON line per message,
//! `SCM_RIGHTS`, close-on-exec, peer credentials and groups; `Reader` and `Sender` take a
//! message bit by bit on a nonblocking socket), `sys.rs` (the crate's one `unsafe`:
//! `SO_PEERGROUPS` through `libc`, Linux), `driver.rs` (a driver's account from `/etc/passwd`
//! and its environment, built fresh), `service.rs` (`Dispatcher`: enqueue, admit, claim,
//! expire, cancel, retry, the start failures and their backoff, on the store, the pool and the
//! held lane guards; who may do what decided from the caller's peer credentials; no socket;
//! `service/recover.rs`: recovery, which resumes a lane nobody acquired since its row was queued
//! by its guard alone, acquires the others in one `acquire_each`, ends running rows whose lane is
//! free, parks rows without an enqueuer and reports status entries no row backs as lost;
//! `service/runs.rs`: running attempts, their ends from the reaped exits and the lane probes,
//! cancel by marker, SIGTERM and SIGKILL, prune and the retention sweep),
//! `server.rs` (`Server`: one `poll` over the listener, an inotify watch of the slot directory
//! and every connection, all nonblocking; peers checked at accept; a whole-message deadline and
//! a per-uid limit; ticks, heartbeats; a failing step backed off and reported, never the end of
//! the loop; the driver launch and the reaped exits are the caller's callbacks), `status.rs`
//! (the `queue-<lane>.json` entries).
//! `Slot::hand_over` and `Pool::adopt` pass a held slot between processes (`Lease::hand_over`,
//! `lease::adopt` underneath), keeping its epoch.

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
