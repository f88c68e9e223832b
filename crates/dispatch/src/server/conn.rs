//! Connections: accepted in bounded batches, each peer checked before anything is read,
//! kept within the per-user and total limits, read and answered without blocking, and closed
//! at their deadlines.

use super::*;

impl<'a> Server<'a> {
    /// Accepts the waiting connections, at most [`ACCEPT_BATCH`] a turn (a client that
    /// connects and closes as fast as it can never keeps the loop from serving the connections
    /// it accepted, nor from its ticks): each peer checked before anything is read (a stranger
    /// is told and closed), then kept within the limits.
    pub(super) fn accept_all(&mut self) {
        if let Some(until) = self.accept_paused_until {
            if Instant::now() < until {
                return;
            }
            self.accept_paused_until = None;
        }
        for _ in 0..ACCEPT_BATCH {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    self.pause_reported = false;
                    self.welcome(stream);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        rustix::io::Errno::from_io_error(&e),
                        Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)
                    ) =>
                {
                    if self.spare.is_some() {
                        self.refuse_for_want_of_descriptors(e);
                        break;
                    }
                    // The spare could not be taken again after the last refusal (the number
                    // was taken meanwhile). Taken now, a descriptor is free: accept again.
                    self.spare = spare();
                    if self.spare.is_some() {
                        continue;
                    }
                    // Nothing to accept the connection with, so nothing to refuse it with:
                    // it waits, and the listener is left out of the poll for a tick rather
                    // than waking it at once, again and again. Said once.
                    if !self.pause_reported {
                        self.pause_reported = true;
                        (self.report)(Event::Connection(ConnectionError::NoDescriptorToAccept(e)));
                    }
                    self.accept_paused_until = Some(Instant::now() + TICK);
                    break;
                }
                Err(e) => {
                    (self.report)(Event::Connection(ConnectionError::Accept(e)));
                    break;
                }
            }
        }
    }

    /// A connection just accepted: refused at once unless its peer is trusted; else kept, the
    /// oldest of its uid (or of all) closed if it is one too many.
    pub(super) fn welcome(&mut self, stream: UnixStream) {
        let _ = stream.set_nonblocking(true);
        let admitted = match self.trust.check(&stream) {
            Ok(admitted) => admitted,
            Err(Refused::Credentials(e)) => {
                refuse_now(
                    &stream,
                    code::PERMISSION,
                    "the dispatcher cannot tell who you are (no peer credentials)".to_owned(),
                );
                (self.report)(Event::Connection(ConnectionError::Credentials(e)));
                return;
            }
            Err(refused) => {
                refuse_now(
                    &stream,
                    code::PERMISSION,
                    "only root, the slot directory's owner or a member of its group may use the \
                     dispatcher"
                        .to_owned(),
                );
                if let Refused::Stranger { uid, pid, .. } = refused {
                    (self.report)(Event::Connection(ConnectionError::Stranger { uid, pid }));
                }
                return;
            }
        };
        let (peer, groups) = (admitted.peer, admitted.groups);
        let same = self
            .conns
            .iter()
            .filter(|c| c.caller.uid == peer.uid)
            .count();
        if same >= self.per_user {
            self.evict(Some(peer.uid));
        } else if self.conns.len() >= MAX_CONNECTIONS {
            self.evict(None);
        }
        self.seq += 1;
        self.conns.push(Conn {
            stream,
            caller: Caller {
                pid: peer.pid,
                uid: peer.uid,
                gid: peer.gid,
                groups,
            },
            seq: self.seq,
            deadline: Instant::now() + REQUEST_TIMEOUT,
            reader: transport::Reader::default(),
            out: None,
        });
    }

    /// Closes the oldest connection (of `uid`, where given), telling it why.
    pub(super) fn evict(&mut self, uid: Option<u32>) {
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| uid.is_none_or(|u| c.caller.uid == u))
            .min_by_key(|(_, c)| (c.out.is_some(), c.seq))
            .map(|(i, _)| i);
        if let Some(i) = oldest {
            let conn = self.conns.swap_remove(i);
            refuse_now(
                &conn.stream,
                code::BAD_REQUEST,
                match uid {
                    Some(uid) => format!(
                        "closed: uid {uid} had {} connections open at once, the most one user \
                         may (the dispatcher's --max-connections-per-user), and this was its \
                         oldest",
                        self.per_user
                    ),
                    None => format!(
                        "closed: the dispatcher had {MAX_CONNECTIONS} connections open, the \
                         most it keeps, and this was the oldest"
                    ),
                },
            );
            (self.report)(Event::Connection(ConnectionError::Evicted {
                uid: conn.caller.uid,
            }));
        }
    }

    /// Closes every connection past its deadline.
    pub(super) fn close_overdue(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.conns.len() {
            if self.conns[i].deadline <= now {
                let conn = self.conns.swap_remove(i);
                let what = if conn.out.is_some() {
                    "read its reply"
                } else {
                    "send its request"
                };
                (self.report)(Event::Connection(ConnectionError::Timeout {
                    uid: conn.caller.uid,
                    what,
                }));
            } else {
                i += 1;
            }
        }
    }

    /// Reads from, or writes to, each connection `poll` found ready (`ready` in the order of
    /// the connections when it was called; none was added or removed since), then removes
    /// those that are done.
    pub(super) fn serve_ready(&mut self, ready: &[bool]) {
        let mut done = Vec::new();
        for (i, _) in ready.iter().enumerate().filter(|(_, r)| **r) {
            if i < self.conns.len() && !self.progress(i) {
                done.push(i);
            }
        }
        // From the end, so that each index removed still names its connection.
        for i in done.into_iter().rev() {
            drop(self.conns.swap_remove(i));
        }
    }

    /// Moves connection `i` on: reads its request (and answers it once whole) or sends its
    /// reply. `false` when it is done or failed (the caller removes it).
    pub(super) fn progress(&mut self, i: usize) -> bool {
        if self.conns[i].out.is_none() {
            let read = {
                let conn = &mut self.conns[i];
                conn.reader.read(&conn.stream)
            };
            match read {
                Ok(None) => return true,
                Ok(Some((line, fds))) => {
                    let caller = self.conns[i].caller.clone();
                    // A pidfd of the sender, taken now it is connected: a claim keeps it, so
                    // that a cancel signals exactly the process that claimed.
                    let pidfd = transport::peer_pidfd(&self.conns[i].stream).ok();
                    let out = self.answer(&line, fds, &caller, pidfd);
                    let conn = &mut self.conns[i];
                    conn.deadline = Instant::now() + REQUEST_TIMEOUT;
                    conn.out = Some(out);
                }
                Err(e) => {
                    // A message that cannot be taken whole is answered with why (a peer that
                    // is gone does not read it), so a client never waits on silence.
                    if matches!(e, transport::Error::TooManyFds | transport::Error::TooLong) {
                        refuse_now(&self.conns[i].stream, code::BAD_REQUEST, e.to_string());
                    }
                    (self.report)(Event::Connection(ConnectionError::Receive(e)));
                    return false;
                }
            }
        }
        let conn = &mut self.conns[i];
        let Some(out) = conn.out.as_mut() else {
            return true;
        };
        let borrowed: Vec<_> = out.fds.iter().map(AsFd::as_fd).collect();
        let sent = out.sender.send(&conn.stream, &borrowed);
        drop(borrowed);
        match sent {
            Ok(false) => true,
            Ok(true) => {
                let op = out.op;
                let refused = out.refused.take();
                // Sent: our copies go (after a claim the driver holds the lane and the slot).
                (self.report)(Event::Answered { op, refused });
                false
            }
            Err(source) => {
                let op = out.op;
                // Not sent: our copies go all the same; if it was a claim, nobody holds the
                // lane now and `worklane reconcile` says so.
                (self.report)(Event::Connection(ConnectionError::Reply { op, source }));
                false
            }
        }
    }

    /// Out of descriptors: the spare one is given up to accept the waiting connection, which
    /// is told why and closed (with any descriptor it sent), then the spare is taken again.
    pub(super) fn refuse_for_want_of_descriptors(&mut self, error: std::io::Error) {
        drop(self.spare.take());
        if let Ok((stream, _)) = self.listener.accept() {
            refuse_now(
                &stream,
                code::INTERNAL,
                format!(
                    "the dispatcher has no descriptor left ({error}): it holds one per queued \
                     lane; raise its limit of open files (LimitNOFILE= under systemd)"
                ),
            );
        }
        (self.report)(Event::Connection(ConnectionError::Accept(error)));
        // A wait that comes after this one is said again.
        self.pause_reported = false;
        self.spare = spare();
    }
}

/// A reply on its way out.
pub(super) struct Outgoing {
    pub(super) sender: transport::Sender,
    pub(super) fds: Vec<Guard>,
    pub(super) op: &'static str,
    pub(super) refused: Option<String>,
}

/// One connection: its peer, its deadline, and its request or reply as far as it got.
pub(super) struct Conn {
    pub(super) stream: UnixStream,
    pub(super) caller: Caller,
    /// Accept order, for closing the oldest.
    pub(super) seq: u64,
    pub(super) deadline: Instant,
    pub(super) reader: transport::Reader,
    pub(super) out: Option<Outgoing>,
}

pub(super) fn spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// A refusal sent without waiting on a socket that may not read it (a stranger, an evicted
/// connection): best effort, then the connection is closed.
pub(super) fn refuse_now(stream: &UnixStream, code: &str, message: String) {
    let _ = stream.set_nonblocking(true);
    let reply = Reply::refused(code, message);
    if let Ok(mut sender) = transport::Sender::new(&serde_json::to_vec(&reply).unwrap_or_default())
    {
        let _ = sender.send(stream, &[]);
    }
}
