//! One request answered: the message parsed, the service asked, its decision made a reply.

use super::*;

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
            Err(e) => (
                "unknown",
                Reply::refused(
                    code::INTERNAL,
                    format!("the dispatcher failed: {}", chain(&e)),
                ),
                Vec::new(),
            ),
        };
        let bytes = serde_json::to_vec(&reply).unwrap_or_default();
        let sender = transport::Sender::new(&bytes).unwrap_or_else(|_| {
            let short = Reply::refused(
                code::INTERNAL,
                "the reply is longer than a message may be (64 KiB); ask for less",
            );
            transport::Sender::new(&serde_json::to_vec(&short).unwrap_or_default())
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
            return Ok((
                "unknown",
                Reply::refused(
                    code::BAD_REQUEST,
                    format!(
                        "protocol version {unknown} is not known here (this dispatcher speaks \
                         version {})",
                        crate::wire::VERSION
                    ),
                ),
                Vec::new(),
            ));
        }
        let request = match serde_json::from_slice::<Request>(line) {
            Ok(request) => request,
            Err(e) => {
                drop(fds);
                return Ok((
                    "unknown",
                    Reply::refused(code::BAD_REQUEST, format!("not a request: {e}")),
                    Vec::new(),
                ));
            }
        };
        let op = request.op();
        if !fds.is_empty() && !matches!(request, Request::Enqueue(_)) {
            drop(fds);
            return Ok((
                op,
                Reply::refused(code::DESCRIPTORS, format!("a {op} carries no descriptor")),
                Vec::new(),
            ));
        }
        let dir = self.dispatcher.pool().dir().clone();
        Ok(match request {
            Request::Enqueue(entry) => {
                let reply = self.dispatcher.enqueue(entry, fds, caller)?;
                if let (true, Some(id)) = (reply.ok, reply.attempt.as_deref()) {
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
                    if !admitted.iter().any(|a| a == id) {
                        self.write_entry(id);
                    }
                }
                ("enqueue", reply, Vec::new())
            }
            Request::Claim { attempt, token } => {
                match self.dispatcher.claim_by(&attempt, &token, caller, pidfd)? {
                    Ok(claimed) => {
                        self.at(CrashPoint::AfterClaimRemove);
                        if let Some(lane) = claimed.reply.lane.as_deref() {
                            let name = lane.trim_start_matches("lane-").trim_end_matches(".lock");
                            let _ = status::remove_entry(&dir, name);
                        }
                        ("claim", claimed.reply, claimed.fds)
                    }
                    Err(refused) => ("claim", refused, Vec::new()),
                }
            }
            Request::List { all } => {
                let mut reply = Reply::ok();
                reply.attempts = Some(self.dispatcher.list()?);
                reply.pid = Some(std::process::id());
                if all {
                    reply.history = Some(self.dispatcher.history()?);
                }
                reply.trouble = self.trouble.as_ref().map(|t| {
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
                reply.damage = (!said.is_empty())
                    .then(|| format!("{} when this dispatcher started", said.join("; ")));
                ("list", reply, Vec::new())
            }
            Request::Cancel { attempt } => {
                let lane = self.dispatcher.view(&attempt)?.map(|a| (a.lane, a.state));
                let reply = self.dispatcher.cancel(&attempt, caller)?;
                if reply.ok
                    && let Some((lane, state)) = lane
                    && state != "running"
                {
                    let _ = status::remove_entry(&dir, &lane);
                }
                self.dispatcher.stand()?;
                ("cancel", reply, Vec::new())
            }
            Request::Retry { attempt } => {
                let reply = self.dispatcher.retry(&attempt, caller)?;
                if reply.ok {
                    self.write_entry(&attempt);
                    self.dispatcher.stand()?;
                }
                ("retry", reply, Vec::new())
            }
            Request::Prune { older_than_ms } => (
                "prune",
                self.dispatcher.prune(caller, older_than_ms)?,
                Vec::new(),
            ),
        })
    }
}
