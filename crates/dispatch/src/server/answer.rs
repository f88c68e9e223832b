//! One request answered: the message parsed, the service asked, what its decision asks of
//! the loop done (an admission round, the status entries, the line), and the decision made a
//! reply ([`reply`]).

use super::*;
use reply::Refusal;

impl<'a> Server<'a> {
    /// The reply to one whole request of `caller`, and what to send with it.
    pub(super) fn answer(
        &mut self,
        line: &[u8],
        fds: Vec<OwnedFd>,
        caller: &Caller,
        pidfd: Option<OwnedFd>,
    ) -> Outgoing {
        let (op, reply, send) = match self.dispatch(line, fds, caller, pidfd) {
            Ok(answer) => answer,
            // The dispatcher's own failure (its database, the directory): the client is
            // told, the service goes on.
            Err(e) => ("unknown", reply::failed(&chain(&e)), Vec::new()),
        };
        let bytes = serde_json::to_vec(&reply).unwrap_or_default();
        let sender = transport::Sender::new(&bytes).unwrap_or_else(|_| {
            transport::Sender::new(&serde_json::to_vec(&reply::too_long()).unwrap_or_default())
                .expect("a short refusal fits a message")
        });
        Outgoing {
            sender,
            fds: send,
            op,
            refused: reply.error,
        }
    }

    pub(super) fn dispatch(
        &mut self,
        line: &[u8],
        fds: Vec<OwnedFd>,
        caller: &Caller,
        pidfd: Option<OwnedFd>,
    ) -> Result<(&'static str, Reply, Vec<Guard>), ServiceError> {
        if let Some(unknown) = crate::wire::unknown_version(line) {
            drop(fds);
            return Ok(("unknown", reply::unknown_version(&unknown), Vec::new()));
        }
        let request = match serde_json::from_slice::<Request>(line) {
            Ok(request) => request,
            Err(e) => {
                drop(fds);
                return Ok(("unknown", reply::not_a_request(&e), Vec::new()));
            }
        };
        let op = request.op();
        if !fds.is_empty() && !matches!(request, Request::Enqueue(_)) {
            drop(fds);
            return Ok((op, reply::no_descriptor(op), Vec::new()));
        }
        let dir = self.dispatcher.pool().dir().clone();
        Ok(match request {
            Request::Enqueue(entry) => match self.dispatcher.enqueue(entry, fds, caller)? {
                Ok(enqueued) => {
                    self.at(CrashPoint::AfterInsert);
                    // Admitted at once, its entry is written as starting; else as queued. (A
                    // crash before either leaves a row without an entry, which the next
                    // dispatcher writes: the entries are a view, the database the truth.) A
                    // failing admission is the loop's trouble, not this enqueue's.
                    let admitted = match self.tick() {
                        Ok(ids) => ids,
                        Err(e) => {
                            self.troubled(chain(&e));
                            Vec::new()
                        }
                    };
                    if !admitted.contains(&enqueued.attempt) {
                        self.write_entry(&enqueued.attempt);
                    }
                    ("enqueue", reply::enqueued(&enqueued), Vec::new())
                }
                Err(refused) => ("enqueue", refused.reply(), Vec::new()),
            },
            Request::Claim { attempt, token } => {
                match self.dispatcher.claim_by(&attempt, &token, caller, pidfd)? {
                    Ok(claimed) => {
                        self.at(CrashPoint::AfterClaimRemove);
                        // The lane's own name: a lane may be named `lane-x` (its lock then
                        // `lane-lane-x.lock`), so it is never cut out of the lock's name.
                        let lane = claimed.lane.clone();
                        let (reply, fds) = reply::claimed(claimed);
                        let _ = status::remove_entry(&dir, &lane);
                        ("claim", reply, fds)
                    }
                    Err(refused) => ("claim", refused.reply(), Vec::new()),
                }
            }
            Request::List { all } => {
                let attempts = self.dispatcher.list()?;
                let history = if all {
                    Some(self.dispatcher.history()?)
                } else {
                    None
                };
                let trouble = self.trouble.as_ref().map(|t| {
                    format!(
                        "failing since {} tries: {} (next try within {} s)",
                        t.failures,
                        t.error,
                        t.next
                            .saturating_duration_since(Instant::now())
                            .as_secs()
                            .max(1)
                    )
                });
                let recovery = self.dispatcher.recovery();
                let refused = match &recovery.legacy {
                    crate::state::Legacy::Refused { why } => Some(format!(
                        "a queue database in the slot directory was refused ({why}): none of \
                         its rows was read, and it was renamed queue.db*.refused-*"
                    )),
                    _ => None,
                };
                let damage = recovery.damage.as_ref().map(|d| d.sentence());
                let said: Vec<String> = damage.into_iter().chain(refused).collect();
                let damage = (!said.is_empty())
                    .then(|| format!("{} when this dispatcher started", said.join("; ")));
                (
                    "list",
                    reply::listed(attempts, history, trouble, damage),
                    Vec::new(),
                )
            }
            Request::Cancel { attempt } => {
                let lane = self.dispatcher.view(&attempt)?.map(|a| (a.lane, a.state));
                let reply = match self.dispatcher.cancel(&attempt, caller)? {
                    Ok(cancelled) => {
                        if let Some((lane, state)) = lane
                            && state != "running"
                        {
                            let _ = status::remove_entry(&dir, &lane);
                        }
                        reply::cancelled(&attempt, cancelled)
                    }
                    Err(refused) => refused.reply(),
                };
                self.dispatcher.stand()?;
                ("cancel", reply, Vec::new())
            }
            Request::Retry { attempt } => {
                let reply = match self.dispatcher.retry(&attempt, caller)? {
                    Ok(()) => {
                        self.write_entry(&attempt);
                        self.dispatcher.stand()?;
                        reply::retried(&attempt)
                    }
                    Err(refused) => refused.reply(),
                };
                ("retry", reply, Vec::new())
            }
            Request::Prune { older_than_ms } => (
                "prune",
                reply::pruned(self.dispatcher.prune(caller, older_than_ms)?),
                Vec::new(),
            ),
        })
    }
}
