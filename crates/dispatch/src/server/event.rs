//! What the server tells its caller: each step of the loop, and what happened to a connection.

use super::*;

/// What the loop reports to its caller (the CLI logs it).
#[derive(Debug)]
pub enum Event {
    /// An attempt was admitted and its driver started (pid).
    Started {
        /// The attempt.
        attempt: String,
        /// The driver's pid.
        pid: u32,
    },
    /// An admitted attempt's driver could not be started.
    StartFailed {
        /// The attempt.
        attempt: String,
        /// Why, in words (the launch's error and its causes).
        error: String,
        /// What became of the attempt.
        failure: StartFailure,
    },
    /// A starting attempt's driver ended before it claimed: a failed start.
    DriverEnded {
        /// The attempt.
        attempt: String,
        /// How the driver ended.
        why: String,
        /// What became of the attempt.
        failure: StartFailure,
    },
    /// A running attempt ended (kept in the history).
    Ended(EndedView),
    /// A request was answered.
    Answered {
        /// The request's op.
        op: &'static str,
        /// The reply's error code, if refused.
        refused: Option<String>,
    },
    /// Starting attempts expired back to the queue.
    Expired(Vec<String>),
    /// A step of the loop failed: retried after `retry_in`, the loop serving on.
    Trouble {
        /// The error and its causes.
        error: String,
        /// How many times in a row it failed.
        failures: u32,
        /// When it is tried again.
        retry_in: Duration,
    },
    /// A failing step succeeded again.
    Recovered {
        /// How many times it had failed.
        failures: u32,
    },
    /// Ended attempts past their retention were forgotten and their logs removed.
    Swept {
        /// How many logs went.
        logs: usize,
    },
    /// A connection failed (a peer that went away, a malformed message, a stranger).
    Connection(ConnectionError),
    /// The loop went round (at least every [`TICK`]): it is alive.
    Tick,
}

/// Why one connection failed: its own trouble, reported as an [`Event`], never the server's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// A waiting connection could not be accepted.
    #[error("cannot accept a connection")]
    Accept(#[source] std::io::Error),
    /// Out of descriptors, with none kept spare to refuse it with: the connection waits, and
    /// the listener is looked at again every tick until a descriptor is free.
    #[error(
        "a connection waits: the dispatcher has no descriptor left to accept it, nor a spare \
         one to refuse it with (it holds one per queued lane); raise its limit of open files \
         (LimitNOFILE= under systemd)"
    )]
    NoDescriptorToAccept(#[source] std::io::Error),
    /// The peer's credentials could not be read: it is refused.
    #[error("cannot read a connection's peer credentials")]
    Credentials(#[source] transport::Error),
    /// The peer is neither root, the directory's owner nor in its group: refused at once.
    #[error(
        "refused a connection of uid {uid} (pid {pid:?}): not root, the owner or a member of the group"
    )]
    Stranger {
        /// Its uid.
        uid: u32,
        /// Its pid, where known.
        pid: Option<u32>,
    },
    /// The request did not arrive whole within [`REQUEST_TIMEOUT`] (or its reply was not
    /// read within as long): closed.
    #[error("closed a connection of uid {uid} that took more than {} s to {what}", REQUEST_TIMEOUT.as_secs())]
    Timeout {
        /// Its uid.
        uid: u32,
        /// `send its request` or `read its reply`.
        what: &'static str,
    },
    /// A new connection of the same uid (or any, at the overall limit) closed this, the
    /// oldest.
    #[error("closed the oldest connection of uid {uid}: too many open at once")]
    Evicted {
        /// Its uid.
        uid: u32,
    },
    /// The request could not be received whole.
    #[error("cannot receive a request")]
    Receive(#[source] transport::Error),
    /// The reply could not be sent.
    #[error("cannot send the reply to a {op}")]
    Reply {
        /// The request's op.
        op: &'static str,
        /// Why.
        #[source]
        source: transport::Error,
    },
}
