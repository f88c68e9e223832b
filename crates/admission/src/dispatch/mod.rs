//! The admission dispatcher (seed 000): waiting work as durable rows, admitted centrally under
//! the slot pool, and lanes handed over as held lock descriptors.
//!
//! - [`env`](mod@env): the environment a queued attempt keeps (allowed prefixes, no secret-shaped
//!   names, values under 4,096 characters).
//! - [`lane`]: lane names, and retiring a lane of its own when its attempt is over.
//! - [`store`] (feature `dispatcher`): the SQLite queue, one row per attempt.
//! - [`wire`]: the messages (`enqueue`, `claim`, `list`, `cancel`) and their replies.
//! - [`transport`]: one JSON line per message over a Unix stream
//!   socket, descriptors as `SCM_RIGHTS`, peer credentials.

pub mod driver;
pub mod env;
pub mod lane;
#[cfg(feature = "dispatcher")]
pub mod server;
#[cfg(feature = "dispatcher")]
pub mod service;
pub mod status;
#[cfg(feature = "dispatcher")]
pub mod store;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod sys;
pub mod transport;
pub mod wire;
