//! Change watching for a waiter: [`Changes`] watches a pool's keys or a role's key from the
//! revision after the waiter's last read, and [`Fleet::wait_for_change`] waits on it, opening
//! it again when it breaks and polling when etcd refuses it.

use super::{Fleet, POLL_EVERY, REQUEST_TIMEOUT, unreachable};
use etcd_client::{WatchOptions, WatchStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A watch on a key (or the keys under a prefix), for a waiter: it reports changes after the
/// revision the waiter last read, so that none between its read and its wait is missed.
pub(super) struct Changes {
    key: String,
    prefix: bool,
    /// The first revision not yet seen: the last read's, plus one.
    from: i64,
    /// The open watch, if any: it delivers every change from the revision it started at.
    stream: Option<WatchStream>,
    /// Since when no watch could be kept open (its stream broke, its member could not be
    /// reached), if so.
    broken_since: Option<Instant>,
}

/// What one wait for a change saw.
enum Seen {
    /// A change, or a reason to read again (a canceled watch, a refused one).
    Change,
    /// Nothing before the deadline.
    Quiet,
    /// The watch broke, or its member could not be reached.
    Broken,
}

impl Changes {
    pub(super) fn new(key: String, prefix: bool) -> Changes {
        Changes {
            key,
            prefix,
            from: 0,
            stream: None,
            broken_since: None,
        }
    }

    /// The waiter read the keys at `revision`: changes up to it are known.
    pub(super) fn read_at(&mut self, revision: i64) {
        if revision > 0 {
            self.from = self.from.max(revision + 1);
        }
    }
}

impl Fleet {
    /// Waits at most `max` for a change of the watched keys after the last read; whether
    /// the waiter should read again (a change came, or the watch was canceled). A watch
    /// that etcd refuses to open makes this a sleep of [`POLL_EVERY`], then `true` (polling).
    /// A watch that broke, or whose member could not be reached, is opened again from the
    /// same revision after [`POLL_EVERY`] without reading; only once none could be kept open
    /// for [`REQUEST_TIMEOUT`] (etcd may be gone altogether) does this say to read again, so
    /// that the read fails and says so.
    pub(super) fn wait_for_change(&self, changes: &mut Changes, max: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + max;
        let inner = Arc::clone(&self.inner);
        let mut stream = changes.stream.take();
        let key = changes.key.clone();
        // From the revision after the last read: a change between that read and this watch is
        // reported too. (No read yet: from now.)
        let mut options = WatchOptions::new();
        if changes.from > 0 {
            options = options.with_start_revision(changes.from);
        }
        if changes.prefix {
            options = options.with_prefix();
        }
        let (seen, stream) = inner.runtime.block_on(async {
            let mut stream = match stream.take() {
                Some(stream) => stream,
                None => {
                    let opened = tokio::time::timeout_at(
                        deadline.min(tokio::time::Instant::now() + REQUEST_TIMEOUT),
                        inner.client.clone().watch(key, Some(options)),
                    )
                    .await;
                    match opened {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            // A member that cannot be reached (dead, or its connection
                            // broken): open it again from the same revision after a pause,
                            // which loses nothing. etcd refusing the watch: poll.
                            let refused = !unreachable(&e);
                            log::debug!(
                                "fleet watch cannot be opened ({e}): {}",
                                if refused {
                                    "polling"
                                } else {
                                    "opening it again"
                                }
                            );
                            tokio::time::sleep_until(
                                deadline.min(tokio::time::Instant::now() + POLL_EVERY),
                            )
                            .await;
                            return (if refused { Seen::Change } else { Seen::Broken }, None);
                        }
                        // Not even opened before the deadline: nothing learned.
                        Err(_) => return (Seen::Quiet, None),
                    }
                }
            };
            loop {
                match tokio::time::timeout_at(deadline, stream.message()).await {
                    Err(_) => return (Seen::Quiet, Some(stream)),
                    Ok(Ok(Some(response))) => {
                        if response.canceled() {
                            // Compacted past our revision, or cancelled by etcd: read again
                            // and watch afresh.
                            return (Seen::Change, None);
                        }
                        if !response.events().is_empty() {
                            return (Seen::Change, Some(stream));
                        }
                        // The creation's confirmation, or a progress notice: keep waiting.
                    }
                    // The stream ended or failed (its member died, say): open a new one
                    // next time, from the same revision (so nothing is missed and nothing
                    // needs reading again: a read or claim now could fall in the election
                    // of a new leader), after a pause, so that a member that keeps closing
                    // streams is not asked in a tight loop.
                    Ok(Ok(None) | Err(_)) => {
                        tokio::time::sleep_until(
                            deadline.min(tokio::time::Instant::now() + POLL_EVERY),
                        )
                        .await;
                        return (Seen::Broken, None);
                    }
                }
            }
        });
        changes.stream = stream;
        match seen {
            Seen::Change => {
                changes.broken_since = None;
                true
            }
            Seen::Quiet => {
                if changes.stream.is_some() {
                    changes.broken_since = None;
                }
                false
            }
            Seen::Broken => {
                let since = *changes.broken_since.get_or_insert_with(Instant::now);
                if since.elapsed() < REQUEST_TIMEOUT {
                    return false;
                }
                changes.broken_since = None;
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::client::unreachable;
    use etcd_client::{Client, GetOptions};
    use worklane_testkit::etcd::Cluster;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    }

    /// The classification of errors real clients get: a member nobody listens for, a member
    /// killed under an open connection, and etcd's own refusal.
    #[test]
    fn an_error_is_unreachable_only_when_no_answer_came_from_etcd() {
        let runtime = runtime();
        // No member listens on the port at all: the connect is refused.
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("address").port()
        };
        let refused = runtime.block_on(async {
            let mut client = Client::connect([format!("127.0.0.1:{port}")], None)
                .await
                .expect("a client connects lazily");
            let Err(e) = client.watch("k", None).await else {
                panic!("a watch opened with nobody listening");
            };
            e
        });
        assert!(unreachable(&refused), "a refused connect: {refused:?}");

        let mut cluster = Cluster::start();
        let first = cluster.endpoints().split(',').next().unwrap().to_owned();
        let (answered, killed) = runtime.block_on(async {
            let mut client = Client::connect([first], None).await.expect("connect");
            // etcd's own refusal: a read at a revision it has not reached.
            let answered = client
                .get("k", Some(GetOptions::new().with_revision(1 << 40)))
                .await
                .expect_err("a future revision is refused");
            // A watch open on the member's connection, then the member killed.
            let _open = client.watch("k", None).await.expect("a watch opens");
            cluster.kill(0);
            let Err(killed) = client.watch("k", None).await else {
                panic!("a watch opened on a dead member");
            };
            (answered, killed)
        });
        assert!(
            !unreachable(&answered),
            "etcd answered, with a refusal: {answered:?}"
        );
        assert!(unreachable(&killed), "a member killed: {killed:?}");

        // Errors that are not a status: an I/O error is the connection's; an argument the
        // client refused to send never reached etcd, but says nothing of its members.
        let io =
            etcd_client::Error::IoError(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(unreachable(&io));
        assert!(!unreachable(&etcd_client::Error::InvalidArgs("x".into())));
    }
}
