//! The API budget of a credential shared by the fleet: the local ledger's state (the same
//! JSON, `worklane_budget::State`) kept at `/worklane/v1/budget/<key>` and changed only by
//! compare-and-swap on the key's mod revision, with the same rules (take before the call,
//! observe the answer's headers, pause after a secondary limit). The token never leaves the
//! host: the key is the ledger's own hash of it.

use crate::client::{Doing, Error, Fleet};
use crate::keys;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use std::time::{Duration, Instant};
use worklane_budget::state::Decision;
use worklane_budget::{CredentialKey, Observation, State, WaitWhy};

/// How often a waiting take looks again (at most).
pub const BUDGET_POLL: Duration = Duration::from_millis(250);

/// How many writes in a row a take or an observation may lose to other hosts' before it
/// gives up ([`Error::Contended`]). Each lost write is another host's that went through, so
/// the budget is moving; but a host that loses this many in a row is starved, and says so
/// rather than trying for ever.
pub const MAX_LOST_WRITES: u32 = 256;

/// A take's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetTake {
    /// The call may go; `counted` when a unit was taken from a known window, leaving `left`.
    Go {
        /// Whether a unit was taken from a known window.
        counted: bool,
        /// Calls left in that window after this one.
        left: Option<u64>,
    },
    /// The call must not go before `until` (ms since the Unix epoch); waiting was not asked
    /// for that long.
    Refused {
        /// When it may go.
        until: u64,
        /// Why.
        why: WaitWhy,
    },
}

/// The state and its mod revision (0: no key).
fn read(fleet: &Fleet, key: &str) -> Result<(State, i64), Error> {
    let k = key.to_owned();
    let got = fleet.inner.call(
        || Doing::ReadingBudget {
            key: key.to_owned(),
        },
        |mut c| {
            let k = k.clone();
            async move { c.get(k, None).await }
        },
    )?;
    Ok(match got.kvs().first() {
        // A value that is not a state is taken afresh, as the local ledger does.
        Some(kv) => (
            State::parse(kv.value()).unwrap_or_default(),
            kv.mod_revision(),
        ),
        None => (State::default(), 0),
    })
}

/// Writes `bytes` if the key is still at `revision` (0: still absent); whether it was.
fn swap(fleet: &Fleet, key: &str, revision: i64, bytes: Vec<u8>) -> Result<bool, Error> {
    let compare = if revision == 0 {
        Compare::create_revision(key.to_owned(), CompareOp::Equal, 0)
    } else {
        Compare::mod_revision(key.to_owned(), CompareOp::Equal, revision)
    };
    let txn = Txn::new()
        .when([compare])
        .and_then([TxnOp::put(key.to_owned(), bytes, None)]);
    #[cfg(feature = "test-seams")]
    if let Some(hook) = &fleet.before_budget_write {
        hook();
    }
    let done = fleet.inner.call(
        || Doing::WritingBudget {
            key: key.to_owned(),
        },
        |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        },
    )?;
    Ok(done.succeeded())
}

/// How long a take that must wait until `until` (ms since the Unix epoch; it is `at` now)
/// sleeps before it looks again, having waited `waited` of its `max_wait` (less than it): to
/// `until` (1 ms at least), at most [`BUDGET_POLL`], and never past `max_wait`.
fn nap(until: u64, at: u64, waited: Duration, max_wait: Duration) -> Duration {
    Duration::from_millis(until.saturating_sub(at).max(1))
        .min(BUDGET_POLL)
        .min(max_wait.saturating_sub(waited))
}

/// Counts a lost write to `key`: the error once [`MAX_LOST_WRITES`] were lost in a row.
fn lost_one(lost: &mut u32, key: &str) -> Result<(), Error> {
    *lost += 1;
    if *lost >= MAX_LOST_WRITES {
        return Err(Error::Contended {
            key: key.to_owned(),
            lost: *lost,
        });
    }
    Ok(())
}

impl Fleet {
    /// Takes one call of `resource` from the fleet's budget of `credential` for `consumer`,
    /// waiting at most `max_wait` while the window is spent or the credential paused. `now`
    /// is the wall clock in ms (the windows' resets are wall-clock times).
    pub fn budget_take(
        &self,
        credential: &CredentialKey,
        resource: &str,
        consumer: &str,
        max_wait: Duration,
        now: &dyn Fn() -> u64,
    ) -> Result<BudgetTake, Error> {
        let key = keys::budget(credential.as_str());
        let started = Instant::now();
        let mut lost = 0;
        loop {
            let (mut state, revision) = read(self, &key)?;
            let at = now();
            match state.decide(resource, consumer, at) {
                Decision::Go { counted: false } => {
                    return Ok(BudgetTake::Go {
                        counted: false,
                        left: None,
                    });
                }
                Decision::Go { counted: true } => {
                    let left = state.window(resource, at).map(|w| w.left());
                    if swap(self, &key, revision, state.to_bytes(at))? {
                        return Ok(BudgetTake::Go {
                            counted: true,
                            left,
                        });
                    }
                    // Another host changed it first: decide again on what it wrote.
                    lost_one(&mut lost, &key)?;
                }
                Decision::Wait { until, why } => {
                    // Waiting for the window is not losing: the count starts again.
                    lost = 0;
                    let waited = started.elapsed();
                    if waited >= max_wait {
                        return Ok(BudgetTake::Refused { until, why });
                    }
                    std::thread::sleep(nap(until, at, waited, max_wait));
                }
            }
        }
    }

    /// Records an answer's rate-limit headers in the fleet's budget of `credential`.
    pub fn budget_observe(
        &self,
        credential: &CredentialKey,
        observation: &Observation,
        now: &dyn Fn() -> u64,
    ) -> Result<(), Error> {
        let key = keys::budget(credential.as_str());
        let mut lost = 0;
        loop {
            let (mut state, revision) = read(self, &key)?;
            let at = now();
            state.apply(observation, at);
            if swap(self, &key, revision, state.to_bytes(at))? {
                return Ok(());
            }
            lost_one(&mut lost, &key)?;
        }
    }

    /// Every credential's budget in the fleet, as stored (keys are hashes: no token).
    pub fn budgets(&self) -> Result<Vec<State>, Error> {
        let prefix = format!("{}budget/", keys::PREFIX);
        let p = prefix.clone();
        let got = self.inner.call(
            || Doing::ReadingBudgets,
            |mut c| {
                let p = p.clone();
                async move {
                    c.get(p, Some(etcd_client::GetOptions::new().with_prefix()))
                        .await
                }
            },
        )?;
        Ok(got
            .kvs()
            .iter()
            .map(|kv| State::parse(kv.value()).unwrap_or_default())
            .collect())
    }

    /// The fleet's budget of `credential` (empty if none was written).
    pub fn budget_show(&self, credential: &CredentialKey) -> Result<State, Error> {
        Ok(read(self, &keys::budget(credential.as_str()))?.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_take_naps_to_the_reset_at_most_a_poll_and_never_past_its_wait() {
        let ms = Duration::from_millis;
        let hour = 3_600_000;
        // The reset an hour away: a poll's nap, then what is left of the wait.
        assert_eq!(nap(hour, 0, ms(0), ms(10_000)), BUDGET_POLL);
        assert_eq!(
            nap(hour, 0, ms(250), ms(260)),
            ms(10),
            "never past the wait"
        );
        assert_eq!(nap(hour, 0, ms(250), ms(500)), ms(250));
        // The reset sooner than a poll: to it, and 1 ms at least when it is due.
        assert_eq!(nap(1_040, 1_000, ms(0), ms(10_000)), ms(40));
        assert_eq!(nap(1_000, 1_000, ms(0), ms(10_000)), ms(1));
        assert_eq!(nap(900, 1_000, ms(0), ms(10_000)), ms(1), "a reset passed");
    }
}
