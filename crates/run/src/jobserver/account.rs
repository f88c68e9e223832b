//! The accountant: the tokens out, the standby, lost tokens returned, other builds' turn in the
//! job line, and a build that escapes its share.

use super::*;

impl Shared {
    /// The accountant: wakes on every read or write of the FIFO (inotify), and settles the
    /// accounts; every [`LOST_CHECK`] it also looks for lost tokens, however often the FIFO
    /// woke it meanwhile (a busy build's FIFO may never be quiet that long).
    pub(super) fn account(&self, inotify: &OwnedFd) {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut last_look = std::time::Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            let mut fds = [rustix::event::PollFd::new(
                inotify,
                rustix::event::PollFlags::IN,
            )];
            let timeout =
                rustix::event::Timespec::try_from(LOST_CHECK.saturating_sub(last_look.elapsed()))
                    .ok();
            let woken = matches!(rustix::event::poll(&mut fds, timeout.as_ref()), Ok(n) if n > 0);
            if woken {
                // A busy build reads and writes tokens in bursts: the events of a moment are
                // taken together (a token is topped up at most this much later).
                std::thread::sleep(COALESCE);
                let mut reader = rustix::fs::inotify::Reader::new(inotify, &mut buf);
                // One read empties what came; the events themselves say nothing more.
                let _ = reader.next();
            }
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let look = last_look.elapsed() >= LOST_CHECK;
            if look {
                last_look = std::time::Instant::now();
            }
            let mut ledger = lock(&self.ledger);
            self.settle(&mut ledger, look);
        }
    }

    /// Brings the accounts in line with the FIFO: surplus bytes read back, slots released
    /// for tokens that came back (or were lost), the taker told whether a standby is wanted.
    ///
    /// The slots held are always `written - read - lost`: every byte this side wrote had a
    /// slot, a byte read back returns one, and a token judged lost gives its slot up at once.
    /// Tokens out (in clients' hands) are `written - read - in the FIFO`; a lost one still
    /// counted there either never comes back or comes back later, and `lost` is never more
    /// than the tokens out, so one that came back stops being lost (and its byte, for which
    /// no slot is held, is read back). Only this side's own counters decide the slots, so a
    /// client reading between two looks at the FIFO can never make a slot go that backs a
    /// token it holds.
    pub(super) fn settle(&self, ledger: &mut Ledger, look_for_lost: bool) {
        self.look_for_escape(ledger);
        let fionread = || rustix::io::ioctl_fionread(&self.fifo).unwrap_or(0);
        let circulating = ledger.written - ledger.read;
        let in_fifo = fionread();
        if in_fifo > circulating {
            // Bytes no token of ours accounts for (a client wrote one it never read): read
            // back and dropped, never counted as a token returned.
            let _ = self.drain(in_fifo - circulating);
        }
        let out = circulating.saturating_sub(fionread());
        ledger.lost = ledger.lost.min(out);
        if look_for_lost && out > ledger.lost {
            let (threads, holders) = crate::sys::tree_use(&self.fifo_path);
            let short = match (threads, holders) {
                (Some(threads), Some(holders)) => {
                    lost_tokens(out, threads, holders).saturating_sub(ledger.lost)
                }
                _ => 0,
            };
            let before = ledger.suspect.map(|(since, seen)| (since.elapsed(), seen));
            let (lost, remember) = judge_loss(before, short, LOST_CHECK);
            match remember {
                Remember::Clear => ledger.suspect = None,
                Remember::Keep => {}
                Remember::Set(seen) => ledger.suspect = Some((std::time::Instant::now(), seen)),
            }
            if lost > 0 {
                log::info!("jobserver: {lost} token(s) lost with their readers: returned");
                ledger.lost += lost;
            }
        } else if out <= ledger.lost {
            ledger.suspect = None;
        }
        let in_fifo = fionread();
        let others_wait = in_fifo > 0 && self.others_wait(ledger);
        let keep = u64::from(!others_wait).min(in_fifo);
        if in_fifo > keep {
            ledger.read += self.drain(in_fifo - keep);
        }
        // A lost token that came back left a byte no slot is held for: read back.
        let backed = |l: &Ledger| l.written - l.read - l.lost;
        let held = ledger.held.len() as u64;
        if backed(ledger) > held {
            ledger.read += self.drain(backed(ledger) - held);
        }
        let needed = usize::try_from(backed(ledger)).unwrap_or(usize::MAX);
        let mut changed = false;
        while ledger.held.len() > needed {
            if let Some(slot) = ledger.held.pop() {
                let _ = slot.release();
                changed = true;
            }
        }
        if changed {
            self.send_batch(ledger);
        }
        let want = fionread() == 0
            && (ledger.held.len() as u64) < u64::from(self.tokens_max)
            && !self.stop.load(Ordering::SeqCst);
        if want != ledger.want {
            ledger.want = want;
            self.wanted.notify_all();
        }
    }

    /// Says once (stderr and the journal's `jobs-escaped`) when the build runs more processes
    /// at once than its tokens allow, seen at two looks [`ESCAPE_LOOK`] apart: something in
    /// it was given its own `-jN` (`sh -c 'make -j8'`, `env make -j8`, `ninja -j8`: GNU make
    /// and ninja drop an inherited jobserver then) and runs outside the machine's `max_jobs`.
    /// The tree's working processes (those with no child of their own) above three per
    /// token held (the build's own included: a recipe may be a pipeline) are the sign.
    pub(super) fn look_for_escape(&self, ledger: &mut Ledger) {
        if ledger.escape_said
            || ledger
                .escape_look
                .is_some_and(|(at, _)| at.elapsed() < ESCAPE_LOOK)
        {
            return;
        }
        let Some(table) = crate::sys::table() else {
            return;
        };
        let working = crate::tree::leaves(std::process::id(), &table) as u64;
        let in_fifo = rustix::io::ioctl_fionread(&self.fifo).unwrap_or(0);
        let tokens = (ledger.written - ledger.read)
            .saturating_sub(in_fifo)
            .saturating_add(1);
        let over = working > tokens.saturating_mul(3);
        let before = ledger.escape_look.is_some_and(|(_, seen)| seen);
        ledger.escape_look = Some((std::time::Instant::now(), over));
        if !(over && before) {
            return;
        }
        ledger.escape_said = true;
        let command = self
            .request
            .fields
            .get("command")
            .and_then(|v| v.as_str())
            .unwrap_or("the build")
            .to_owned();
        log::warn!(
            "the build `{command}` runs {working} processes at once while it holds {tokens} job \
             token(s): a part of it was given its own -jN (`sh -c 'make -j8'`, `env make \
             -j8`, `ninja -j8`: make and ninja then drop the jobserver) and runs outside the \
             machine's max_jobs; give it no -j (make and ninja then read the jobserver), or \
             run it with --jobs-shim"
        );
        self.pool
            .journal()
            .emit(worklane_journal::Event::JobsEscaped {
                command,
                processes: working,
                tokens,
            });
    }

    /// Whether a build stands in the job line (a live entry), looked up at most every
    /// [`LINE_LOOK`] (a look lists the slot directory; a busy build returns tokens far more
    /// often).
    pub(super) fn others_wait(&self, ledger: &mut Ledger) -> bool {
        if let Some((at, waiting)) = ledger.line_seen
            && at.elapsed() < LINE_LOOK
        {
            return waiting;
        }
        let waiting = self
            .pool
            .standing(Kind::Job, i64::MIN, u64::MAX, None)
            .is_ok_and(|s| s.ahead > 0);
        ledger.line_seen = Some((std::time::Instant::now(), waiting));
        waiting
    }

    /// Reads up to `n` bytes back from the FIFO; returns how many came.
    pub(super) fn drain(&self, n: u64) -> u64 {
        let mut got = 0;
        let mut buf = [0u8; 64];
        while got < n {
            let want = usize::try_from(n - got).unwrap_or(64).min(64);
            match rustix::io::read(&self.fifo, &mut buf[..want]) {
                Ok(0) | Err(_) => break,
                Ok(k) => got += k as u64,
            }
        }
        got
    }

    /// The taker: while a standby is wanted, takes a job slot in the machine's line, then
    /// writes its token.
    pub(super) fn take_standbys(&self) {
        loop {
            {
                let mut ledger = lock(&self.ledger);
                while !ledger.want && !self.stop.load(Ordering::SeqCst) {
                    ledger = self
                        .wanted
                        .wait(ledger)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let taken = self.pool.take_unless(
                Kind::Job,
                &self.request,
                Wait {
                    timeout: None,
                    priority: 0,
                    on_wait: &mut |_| {},
                },
                &self.stop,
            );
            match taken {
                Ok(Take::Held(slot)) => {
                    let mut ledger = lock(&self.ledger);
                    if self.stop.load(Ordering::SeqCst) {
                        let _ = slot.release();
                        return;
                    }
                    ledger.held.push(slot);
                    self.send_batch(&mut ledger);
                    if rustix::io::write(&self.fifo, b"+").is_ok_and(|n| n == 1) {
                        ledger.written += 1;
                    }
                    self.settle(&mut ledger, false);
                }
                // STOP or a drain in force (a refusal), or the config unusable: look again
                // in a while (the supervision halts the command on STOP).
                Ok(Take::Blocked(_)) | Err(_) => {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    }

    /// Puts the guards of the slots held into the keeper socket as a new batch, then takes
    /// the old batch out (so every guard stays in flight throughout).
    pub(super) fn send_batch(&self, ledger: &mut Ledger) {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let guards: Vec<BorrowedFd<'_>> = ledger
            .held
            .iter()
            .filter_map(|slot| slot.lease().guard().map(AsFd::as_fd))
            .collect();
        let mut sent = 0;
        for chunk in guards.chunks(CHUNK) {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(CHUNK))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            control.push(SendAncillaryMessage::ScmRights(chunk));
            if rustix::net::sendmsg(
                &self.keep_send,
                &[IoSlice::new(b"k")],
                &mut control,
                SendFlags::DONTWAIT.union(SendFlags::NOSIGNAL),
            )
            .is_ok()
            {
                sent += 1;
            }
        }
        let old = std::mem::replace(&mut ledger.in_flight, sent);
        for _ in 0..old {
            self.recv_one();
        }
    }

    /// Takes one message of an old batch out of the keeper socket, closing its descriptors.
    pub(super) fn recv_one(&self) {
        use rustix::net::{RecvAncillaryBuffer, RecvFlags};
        let mut byte = [0u8; 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(CHUNK))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let _ = rustix::net::recvmsg(
            &self.keep_recv,
            &mut [IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::DONTWAIT.union(RecvFlags::CMSG_CLOEXEC),
        );
        // Dropping the received descriptors closes them.
        drop(control.drain().collect::<Vec<_>>());
    }
}
