//! A caller's wait for a role held by another: tries again every `every` until it holds the
//! role, a STOP refuses it, or (not waiting, or its timeout spent) it is refused.

use super::{Error, RoleRequest, RoleTake};
use crate::Pool;
use std::time::{Duration, Instant};
use worklane_lease::Refusal;

/// A wait for a role: whether to wait at all, for how long, and how often to look. Its tries
/// after the first are a waiter's, whose refusals are its wait, not news (journaled once).
#[derive(Debug)]
pub struct RoleWait {
    wait: bool,
    timeout: Option<Duration>,
    every: Duration,
    started: Instant,
    tries: u32,
}

impl RoleWait {
    /// A wait starting now: `wait` false tries once; `timeout` bounds the wait (`None`: until
    /// held); `every` is the pause between tries.
    #[must_use]
    pub fn new(wait: bool, timeout: Option<Duration>, every: Duration) -> RoleWait {
        RoleWait {
            wait,
            timeout,
            every,
            started: Instant::now(),
            tries: 0,
        }
    }

    /// How long it has waited.
    #[must_use]
    pub fn waited(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether to wait on after a refusal now: waiting, and its timeout not spent.
    #[must_use]
    pub fn goes_on(&self) -> bool {
        let left = self.timeout.map(|t| t.saturating_sub(self.waited()));
        self.wait && left != Some(Duration::ZERO)
    }

    /// Sleeps until the next try: `every`, or what is left of the timeout if less.
    pub fn nap(&self) {
        let left = self.timeout.map(|t| t.saturating_sub(self.waited()));
        std::thread::sleep(left.map_or(self.every, |left| left.min(self.every)));
    }

    /// Tries for the role in `pool` ([`Pool::try_take_role`]) until held, stopped, or refused
    /// with no wait left; `waiting` is told each refusal it waits out and the time waited so
    /// far. A holder's release, or its lease lapsing one TTL after its last pulse, is seen at
    /// the next try.
    pub fn take(
        &mut self,
        pool: &Pool,
        request: &RoleRequest,
        mut waiting: impl FnMut(&Refusal, Duration),
    ) -> Result<RoleTake, Error> {
        loop {
            self.tries += 1;
            let refusal = match pool.try_take_role(request, self.tries > 1)? {
                RoleTake::Refused(refusal) => refusal,
                other => return Ok(other),
            };
            if !self.goes_on() {
                return Ok(RoleTake::Refused(refusal));
            }
            waiting(&refusal, self.waited());
            self.nap();
        }
    }
}
