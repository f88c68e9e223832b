//! Taking a slot by waiting in line: a place of its kind's line, a look at each change, and
//! what the waiter is told.

use super::blocker::Blocker;
use super::take::Take;
use super::{Kind, Pool};
use crate::Ask;
use crate::error::take::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use worklane_journal::Event;
use worklane_lease::{Backoff, Request};

/// A refusal that ends a wait at once: STOP or a drain.
fn is_refusal(take: &Take) -> bool {
    matches!(take, Take::Blocked(b) if b.is_operator_refusal())
}

/// A duration in whole milliseconds.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// How a blocking take waits.
pub struct Wait<'a> {
    /// Give up after this long (`None`: wait for ever).
    pub timeout: Option<Duration>,
    /// Its place in line: a higher priority goes first (default 0); equal priorities go in
    /// order of arrival.
    pub priority: i64,
    /// Called on each look at the line with what blocks, how long we have waited and where it
    /// stands.
    pub on_wait: &'a mut dyn FnMut(&Waiting<'_>),
}

/// What a waiting take reports each time it looks.
#[derive(Debug)]
pub struct Waiting<'a> {
    /// What keeps it waiting.
    pub blocker: &'a Blocker,
    /// How long it has waited.
    pub waited: Duration,
    /// Its place in the line of its kind: 1 is the head.
    pub position: u32,
    /// Entries of its kind in line, itself included.
    pub in_line: u32,
}

/// The longest a waiter sleeps between looks when no change in the directory wakes it (a
/// SIGKILLed holder or waiter removes no file; only its freed guard tells).
pub const LOOK_AGAIN_AT_MOST: Duration = Duration::from_millis(250);

impl Pool {
    /// Takes a slot of `kind`, waiting in line (`crate::line`) while the cap, another full
    /// run or waiters before it block it: it stands in the line of its kind at
    /// `wait.priority`, and takes a slot only at the head. A STOP or drain in force is a
    /// refusal, returned at once as `Ok(Take::Blocked)`; otherwise `Ok(Take::Blocked)` comes
    /// only on timeout, with the last blocker. It leaves the line on every way out.
    ///
    /// It looks again as soon as a slot of its kind is released or a place before it is left
    /// (inotify on Linux), and at least every [`LOOK_AGAIN_AT_MOST`].
    pub fn take(&self, kind: Kind, request: &Request, wait: Wait<'_>) -> Result<Take, Error> {
        self.take_for(kind, request, &Ask::default(), wait)
    }

    /// [`Pool::take`] that also gives up, leaving the line, once `cancelled` is set (seen at
    /// the next look: within [`LOOK_AGAIN_AT_MOST`]), with `Ok(Take::Blocked)` and the last
    /// blocker: for a waiter another thread may call off (a jobserver whose build ended).
    pub fn take_unless(
        &self,
        kind: Kind,
        request: &Request,
        wait: Wait<'_>,
        cancelled: &AtomicBool,
    ) -> Result<Take, Error> {
        self.take_for_unless(kind, request, &Ask::default(), wait, cancelled)
    }

    /// [`Pool::take`] for `ask`: `ask.weight()` units of the kind's cap, all at once, counted
    /// against the share of `ask.owner()` (see [`Pool::try_take_for`]). Its entry in line
    /// says its weight and owner. At the head of the line it keeps its place until its
    /// weight is free: nobody behind it takes the units freed meanwhile (PROTOCOL.md 12.10).
    /// A weight that could never be admitted (0, above the cap or its owner's share) is an
    /// error at once; one that the cap, lowered while it waits, no longer admits, at the next
    /// look.
    pub fn take_for(
        &self,
        kind: Kind,
        request: &Request,
        ask: &Ask,
        wait: Wait<'_>,
    ) -> Result<Take, Error> {
        self.take_for_unless(kind, request, ask, wait, &AtomicBool::new(false))
    }

    /// [`Pool::take_for`] that gives up once `cancelled` is set, as [`Pool::take_unless`].
    pub fn take_for_unless(
        &self,
        kind: Kind,
        request: &Request,
        ask: &Ask,
        wait: Wait<'_>,
        cancelled: &AtomicBool,
    ) -> Result<Take, Error> {
        let started = Instant::now();
        let deadline = wait.timeout.map(|t| started + t);
        // A take that finds nobody in line before it and a slot free goes at once, with no
        // entry of its own (the common case, and the cheap one); otherwise it joins the line.
        let now = self.clock.now_ms();
        match self.try_take_until(
            kind,
            request,
            ask,
            deadline,
            Some((wait.priority, now, None)),
            0,
        )? {
            Take::Held(slot) => return Ok(Take::Held(slot)),
            refused @ Take::Blocked(_) if is_refusal(&refused) => {
                self.journal_refused(kind, request, &refused, 0);
                return Ok(refused);
            }
            Take::Blocked(_) => {}
        }
        let place = self.join_line_for(kind, wait.priority, self.clock.now_ms(), request, ask)?;
        // Made only when a look finds it must wait: a take that goes at once watches nothing.
        let mut watch = None;
        let mut pause = Backoff::new(Duration::from_millis(25)).doubling_to(LOOK_AGAIN_AT_MOST);
        // Whether it was at the head when it last said its place (`None`: not said yet).
        let mut said: Option<bool> = None;
        loop {
            let me = place.entry();
            let waited_ms = millis(started.elapsed());
            let (blocker, position, in_line) = if self.fair(kind)? {
                // With shares the order depends on what each owner holds: every look is decided
                // under `slots.lock`, from the count (so every waiter sees one order).
                let own = Some((me.priority, me.start_ms, Some(me)));
                match self.try_take_until(kind, request, ask, deadline, own, waited_ms)? {
                    Take::Held(slot) => {
                        let _ = place.leave();
                        return Ok(Take::Held(slot));
                    }
                    Take::Blocked(blocker) => {
                        let ahead = match &blocker {
                            Blocker::InLine { ahead, .. } => *ahead,
                            _ => 0,
                        };
                        let in_line = self.line_length(kind)?;
                        (blocker, ahead.saturating_add(1), in_line)
                    }
                }
            } else {
                let standing = self.standing(kind, me.priority, me.start_ms, Some(me))?;
                let blocker = if standing.ahead == 0 {
                    match self.try_take_until(kind, request, ask, deadline, None, waited_ms)? {
                        Take::Held(slot) => {
                            // Best effort: once its record is gone the entry is out of the
                            // line; a file left behind is litter, never a reason to fail the
                            // take.
                            let _ = place.leave();
                            return Ok(Take::Held(slot));
                        }
                        Take::Blocked(blocker) => blocker,
                    }
                } else if let Some(blocker) = self.operator_blocker()? {
                    blocker
                } else {
                    self.in_line(kind, standing.ahead, None)?
                };
                (blocker, standing.ahead.saturating_add(1), standing.in_line)
            };
            let waited = started.elapsed();
            if blocker.is_operator_refusal()
                || wait.timeout.is_some_and(|t| waited >= t)
                || cancelled.load(Ordering::SeqCst)
            {
                let _ = place.leave();
                let refused = Take::Blocked(blocker);
                self.journal_refused(kind, request, &refused, millis(waited));
                return Ok(refused);
            }
            // Said when it joins, and when it reaches the head: not at every step of the line
            // (a busy line would write a line per waiter per release).
            let head = position == 1;
            if said.is_none() || (head && said != Some(true)) {
                said = Some(head);
                self.journal.emit(Event::SlotWaiting {
                    slot_kind: kind.label().to_owned(),
                    owner: request.owner.clone(),
                    position,
                    in_line,
                    why: blocker.to_string(),
                });
            }
            (wait.on_wait)(&Waiting {
                blocker: &blocker,
                waited,
                position,
                in_line,
            });
            let mut nap = pause.pause();
            if let Some(t) = wait.timeout {
                nap = nap.min(t.saturating_sub(waited));
            }
            let Some(watch) = watch.as_mut() else {
                // Watching from now on, then one more look: a release since the last look
                // made no event this watch could see.
                watch = Some(self.watches.watch(&self.dir));
                continue;
            };
            if watch.wait(nap, &|name| Pool::wakes(kind, name)) {
                // Woken by a change: a holder's release removes its record a moment before
                // it closes its guard, so a look that comes too soon is repeated shortly.
                pause.restart(Duration::from_millis(2));
            } else {
                // Without end: only the caller's timeout ends the wait.
                let _ = pause.next();
            }
        }
    }
}

impl Pool {
    /// Whether `kind`'s line goes in the fair order of shares (agents, when the config in force
    /// gives shares).
    fn fair(&self, kind: Kind) -> Result<bool, Error> {
        Ok(kind == Kind::Agent && !self.config()?.shares.is_empty())
    }
}
