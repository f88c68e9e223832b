//! The dispatcher's client: where its socket is, whom a client may believe serves it, and one
//! request with its reply.
//!
//! A client checks who serves the socket before it sends anything ([`connect`]): the name is
//! in the slot directory, where any member of its group can rename the dispatcher's socket
//! away and serve one of its own. Only root, the directory's owner or the client's own user
//! may serve it ([`worklane_transport::Trust::serves`], by the kernel's `SO_PEERCRED`); anyone
//! else is told nothing: no descriptor, no command, no environment.
//!
//! # Example
//!
//! ```no_run
//! use worklane_dispatch::client;
//! use worklane_dispatch::wire::Request;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = worklane_slotfile::SlotDir::resolve()?.dir;
//! let path = client::socket_path(&dir, None);
//! let stream = client::connect(&dir, &path)?;
//! let (reply, _fds) = client::ask(&stream, &Request::List { all: false }, &[])?;
//! println!("{} attempts", reply.attempts.map_or(0, |a| a.len()));
//! # Ok(()) }
//! ```

use crate::wire::{Reply, Request, request_line};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use worklane_slotfile::SlotDir;
use worklane_transport::Trust;

/// The dispatcher socket's name in the slot directory.
pub const SOCKET: &str = "dispatcher.sock";

/// The lock the one dispatcher of a slot directory holds for its life.
pub const DISPATCHER_LOCK: &str = "dispatcher.lock";

/// The socket of the dispatcher of `dir`: `given` (a `--socket`, or `$WORKLANE_SOCKET` as the
/// caller read it), else [`SOCKET`] in the directory.
#[must_use]
pub fn socket_path(dir: &SlotDir, given: Option<&Path>) -> PathBuf {
    given.map_or_else(|| dir.path().join(SOCKET), Path::to_owned)
}

/// Why a request could not be made or answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Nothing accepts connections at the socket.
    #[error("no dispatcher answers at {path}")]
    Unavailable {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The kernel did not say who serves the socket.
    #[error("cannot tell who serves {path}")]
    Peer {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: worklane_transport::Error,
    },
    /// The slot directory could not be examined (its owner decides whom to believe).
    #[error("cannot examine the slot directory {dir}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The socket is served by a user who is not root, the directory's owner or the caller:
    /// not the dispatcher. Nothing was sent.
    #[error(
        "refused to use {path}: it is served by uid {uid} (pid {}), which is neither root, the \
         slot directory's owner (uid {owner}) nor you (uid {me}), so it is not the dispatcher: \
         another user may have put a socket of its own at that name; nothing was sent",
        pid.map_or_else(|| "?".to_owned(), |p| p.to_string())
    )]
    NotTheDispatcher {
        /// The socket.
        path: PathBuf,
        /// Who serves it.
        uid: u32,
        /// Its pid, where told.
        pid: Option<u32>,
        /// The slot directory's owner.
        owner: u32,
        /// The caller.
        me: u32,
    },
    /// The request or its reply could not be carried.
    #[error("the request to the dispatcher failed")]
    Transport(#[source] worklane_transport::Error),
    /// The dispatcher answered something that is no reply.
    #[error("the dispatcher's reply is not one")]
    NotAReply(#[source] serde_json::Error),
}

/// Connects to the dispatcher's socket at `path` for the slot directory `dir`, and checks who
/// serves it before anything is sent (the module's documentation says whom it believes).
pub fn connect(dir: &SlotDir, path: &Path) -> Result<UnixStream, Error> {
    let stream = UnixStream::connect(path).map_err(|source| Error::Unavailable {
        path: path.to_owned(),
        source,
    })?;
    let server = worklane_transport::peer(&stream).map_err(|source| Error::Peer {
        path: path.to_owned(),
        source,
    })?;
    let trust = Trust::of_dir(dir).map_err(|source| Error::Dir {
        dir: dir.path().to_owned(),
        source,
    })?;
    let me = rustix::process::geteuid().as_raw();
    if !trust.serves(server.uid, me) {
        return Err(Error::NotTheDispatcher {
            path: path.to_owned(),
            uid: server.uid,
            pid: server.pid,
            owner: trust.owner,
            me,
        });
    }
    Ok(stream)
}

/// Sends one request on a connected `stream` (with `fds`, as `SCM_RIGHTS`) and reads its
/// reply and the descriptors that came with it.
pub fn ask(
    stream: &UnixStream,
    request: &Request,
    fds: &[BorrowedFd<'_>],
) -> Result<(Reply, Vec<OwnedFd>), Error> {
    let line = request_line(request);
    worklane_transport::send(stream, &line, fds).map_err(Error::Transport)?;
    let (reply, fds) = worklane_transport::recv(stream).map_err(Error::Transport)?;
    let reply: Reply = serde_json::from_slice(&reply).map_err(Error::NotAReply)?;
    Ok((reply, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_is_the_given_one_or_the_directory_s() {
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("dir");
        assert_eq!(socket_path(&dir, None), temp.path().join(SOCKET));
        assert_eq!(
            socket_path(&dir, Some(Path::new("/run/w.sock"))),
            Path::new("/run/w.sock")
        );
    }

    #[test]
    fn a_socket_nobody_serves_is_unavailable_and_named() {
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("dir");
        let path = socket_path(&dir, None);
        let err = connect(&dir, &path).expect_err("nobody");
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        assert!(err.to_string().contains("dispatcher.sock"), "{err}");
    }

    #[test]
    fn a_request_and_its_reply_travel_whole() {
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("dir");
        let path = socket_path(&dir, None);
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let server = std::thread::spawn(move || {
            let (conn, _) = listener.accept().expect("accept");
            let (line, _) = worklane_transport::recv(&conn).expect("request");
            let reply = br#"{"version": 1, "ok": true, "attempts": []}"#;
            worklane_transport::send(&conn, reply, &[]).expect("reply");
            line
        });
        let stream = connect(&dir, &path).expect("this process serves it: its own user");
        let (reply, fds) = ask(&stream, &Request::List { all: true }, &[]).expect("asked");
        assert!(reply.ok && fds.is_empty(), "{reply:?}");
        let line = server.join().expect("server");
        let sent: serde_json::Value = serde_json::from_slice(&line).expect("json");
        assert_eq!(
            (sent["op"].as_str(), sent["all"].as_bool()),
            (Some("list"), Some(true))
        );
    }
}
