//! Taking a slot by waiting in line: a place of its kind's line, a look at each change, and
//! what the waiter is told.

use super::take::{Blocker, Take};
use super::{Kind, Pool};
use crate::Error;
use std::time::{Duration, Instant};
use worklane_journal::Event;
use worklane_lease::{Backoff, Request};

/// A refusal that ends a wait at once: STOP or a drain.
fn is_refusal(take: &Take) -> bool {
    matches!(take, Take::Blocked(b) if b.is_operator_refusal())
}

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
        let started = Instant::now();
        let deadline = wait.timeout.map(|t| started + t);
        // A take that finds nobody in line before it and a slot free goes at once, with no
        // entry of its own (the common case, and the cheap one); otherwise it joins the line.
        let now = self.clock.now_ms();
        match self.try_take_until(kind, request, deadline, Some((wait.priority, now, None)), 0)? {
            Take::Held(slot) => return Ok(Take::Held(slot)),
            refused @ Take::Blocked(_) if is_refusal(&refused) => {
                self.journal_refused(kind, request, &refused, 0);
                return Ok(refused);
            }
            Take::Blocked(_) => {}
        }
        let place = self.join_line(kind, wait.priority, request)?;
        // Made only when a look finds it must wait: a take that goes at once watches nothing.
        let mut watch = None;
        let mut pause = Backoff::new(Duration::from_millis(25)).doubling_to(LOOK_AGAIN_AT_MOST);
        let mut said: Option<(u32, u32)> = None;
        loop {
            let me = place.entry();
            let standing = self.standing(kind, me.priority, me.start_ms, Some(me))?;
            let waited_ms = millis(started.elapsed());
            let blocker = if standing.ahead == 0 {
                match self.try_take_until(kind, request, deadline, None, waited_ms)? {
                    Take::Held(slot) => {
                        // Best effort: once its record is gone the entry is out of the line; a file
                        // left behind is litter, never a reason to fail the take.
                        let _ = place.leave();
                        return Ok(Take::Held(slot));
                    }
                    Take::Blocked(blocker) => blocker,
                }
            } else if let Some(blocker) = self.operator_blocker()? {
                blocker
            } else {
                self.in_line(kind, standing.ahead)?
            };
            let waited = started.elapsed();
            if blocker.is_operator_refusal() || wait.timeout.is_some_and(|t| waited >= t) {
                let _ = place.leave();
                let refused = Take::Blocked(blocker);
                self.journal_refused(kind, request, &refused, millis(waited));
                return Ok(refused);
            }
            let position = standing.ahead.saturating_add(1);
            // Said when it joins, and whenever its place changes.
            if said != Some((position, standing.in_line)) {
                said = Some((position, standing.in_line));
                self.journal.emit(Event::SlotWaiting {
                    slot_kind: kind.label().to_owned(),
                    owner: request.owner.clone(),
                    position,
                    in_line: standing.in_line,
                    why: blocker.to_string(),
                });
            }
            (wait.on_wait)(&Waiting {
                blocker: &blocker,
                waited,
                position,
                in_line: standing.in_line,
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
