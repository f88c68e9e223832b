//! The local socket transport of worklane, below the dispatcher and the budget proxy.
//!
//! - [`message`]: one request and one reply per connection over a Unix stream socket, each
//!   one line of JSON of at most [`MAX_MESSAGE`] bytes, sent whole ([`send`], [`recv`], and
//!   [`Reader`] / [`Sender`] for a nonblocking socket); descriptors travel as `SCM_RIGHTS`,
//!   at most [`MAX_FDS`] per message, and every descriptor received is close-on-exec and
//!   closes itself when dropped.
//! - [`peer`](mod@peer): the kernel's word for who is at the other end ([`peer()`], [`groups_of`],
//!   [`peer_pidfd`]).
//! - [`mode`]: narrowing a listening socket's mode through one descriptor, never by a name
//!   another user may swap.
//! - [`trust`]: who may use a socket of the slot directory ([`Trust::admits`]) and whom a
//!   client may believe serves one ([`Trust::serves`]).
//!
//! # Limitations
//!
//! - Unix only. The pid and the groups of a peer are told on Linux; macOS tells neither
//!   (`getpeereid`), and other systems nothing, so there every peer is refused.
//! - A peer's credentials are those of when it connected (or made the pair): a process that
//!   changed its uid since is judged as it was.
//!
//! # Example
//!
//! ```
//! use worklane_transport::{recv, send};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (a, b) = std::os::unix::net::UnixStream::pair()?;
//! send(&a, br#"{"op":"list"}"#, &[])?;
//! let (line, fds) = recv(&b)?;
//! assert_eq!((line.as_slice(), fds.len()), (&br#"{"op":"list"}"#[..], 0));
//! # Ok(()) }
//! ```

pub mod message;
pub mod mode;
pub mod peer;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod sys;
pub mod trust;

pub use message::{Error, MAX_FDS, MAX_MESSAGE, Message, Reader, Sender, recv, send};
pub use peer::{Peer, groups_of, peer, peer_groups, peer_pidfd};
pub use trust::{Admitted, Refused, Trust};
