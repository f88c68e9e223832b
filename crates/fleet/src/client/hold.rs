//! A held place ([`Hold`]) and its keepalive: the etcd lease kept alive by [`Hold::pulse`],
//! the halt rule measured on the boot clock, and the release.

use super::{Doing, Fleet, Lost, Unavailable};
use crate::decide;
use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use std::sync::Arc;
use std::time::Duration;
use worklane_identity::Place;

/// A moment on the boot clock, in milliseconds (`Place::boot_clock_ms`: `CLOCK_BOOTTIME` on
/// Linux, which counts a suspend, as etcd's own clock does while this host sleeps; the
/// monotonic clock elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct BootInstant(u64);

impl BootInstant {
    pub(super) fn now() -> BootInstant {
        BootInstant(Place::boot_clock_ms())
    }

    fn saturating_duration_since(self, earlier: BootInstant) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

/// A held place (a pool's or a role's): its key lives as long as its etcd lease, which
/// [`Hold::pulse`] keeps alive. Dropping it revokes the lease (best effort).
pub struct Hold {
    fleet: Fleet,
    what: String,
    key: String,
    lease: i64,
    ttl: Duration,
    epoch: i64,
    keeper: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    /// When the last keepalive that etcd confirmed was sent.
    confirmed: BootInstant,
    /// When the last keepalive was tried.
    tried: BootInstant,
    released: bool,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("what", &self.what)
            .field("key", &self.key)
            .field("lease", &self.lease)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl Hold {
    pub(super) fn new(
        fleet: Fleet,
        what: String,
        key: String,
        lease: i64,
        ttl: Duration,
        epoch: i64,
        granted: BootInstant,
    ) -> Hold {
        // The lease is confirmed as of its grant's sending: etcd counts its TTL from then, so
        // a holder stopped between the grant and the put has that much less of it.
        Hold {
            fleet,
            what,
            key,
            lease,
            ttl,
            epoch,
            keeper: None,
            confirmed: granted,
            tried: granted,
            released: false,
        }
    }

    /// The fencing epoch: the key's create revision, larger than every earlier holder's.
    #[must_use]
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// The key held.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lease's TTL as etcd granted it.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Keeps the lease alive: call it often (every 250 ms is right). It sends a keepalive
    /// every [`decide::pulse_every`] and returns [`Lost`] when the lease is gone in etcd or
    /// has gone unconfirmed for half its TTL ([`decide::must_halt`]): then stop using what
    /// it protects at once.
    pub fn pulse(&mut self) -> Result<(), Lost> {
        self.check()?;
        let now = BootInstant::now();
        // After a keepalive that got no answer, the next call tries again at once (a new
        // stream: the client may reach another member); otherwise every `pulse_every`.
        if self.keeper.is_some()
            && now.saturating_duration_since(self.tried) < decide::pulse_every(self.ttl)
        {
            return Ok(());
        }
        self.tried = now;
        let sent = now;
        let budget = (self.ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
        let inner = Arc::clone(&self.fleet.inner);
        let lease = self.lease;
        let keeper = self.keeper.take();
        let outcome = inner.runtime.block_on(async {
            tokio::time::timeout(budget, async {
                let (mut keeper, mut stream) = match keeper {
                    Some(pair) => pair,
                    // Opening the stream sends a first keepalive and reads its answer: a TTL
                    // of 0 there is etcd saying the lease is gone, which the client reports
                    // as this error (and no stream).
                    None => match inner.client.clone().lease_keep_alive(lease).await {
                        Ok(pair) => pair,
                        Err(etcd_client::Error::LeaseKeepAliveError(_)) => {
                            return Ok((Some(0), None));
                        }
                        Err(e) => return Err(e),
                    },
                };
                keeper.keep_alive().await?;
                let answer = stream.message().await?;
                Ok::<_, etcd_client::Error>((answer.map(|a| a.ttl()), Some((keeper, stream))))
            })
            .await
        });
        match outcome {
            Ok(Ok((Some(ttl), Some(pair)))) if ttl > 0 => {
                self.keeper = Some(pair);
                self.confirmed = sent;
                Ok(())
            }
            Ok(Ok((Some(_), _))) => Err(Lost::Expired {
                what: self.what.clone(),
            }),
            // No answer, an error or a closed stream: a new stream next time, and the halt
            // rule decides, now (the keepalive may have waited its whole budget past it).
            _ => {
                log::debug!(
                    "fleet keepalive of {} not confirmed; trying again",
                    self.what
                );
                self.check()
            }
        }
    }

    /// The halt rule alone, without asking etcd: [`Lost::Unconfirmed`] once the last
    /// confirmed keepalive was sent half the TTL ago or more.
    pub(super) fn check(&self) -> Result<(), Lost> {
        let unconfirmed = BootInstant::now().saturating_duration_since(self.confirmed);
        if decide::must_halt(unconfirmed, self.ttl) {
            log::warn!(
                "fleet lease of {} unconfirmed for {} ms (TTL {} ms): giving it up",
                self.what,
                unconfirmed.as_millis(),
                self.ttl.as_millis()
            );
            return Err(Lost::Unconfirmed {
                what: self.what.clone(),
                unconfirmed_ms: unconfirmed.as_millis(),
                ttl_ms: self.ttl.as_millis(),
                endpoints: self.fleet.inner.endpoints.clone(),
            });
        }
        Ok(())
    }

    /// Gives the place up: the lease is revoked, which removes the key. A lease etcd no longer
    /// has (it expired, or an earlier send of this revoke was applied and its answer lost) is
    /// released already.
    pub fn release(mut self) -> Result<(), Unavailable> {
        self.released = true;
        let what = self.what.clone();
        let lease = self.lease;
        match self.fleet.inner.call(
            || Doing::Releasing { what },
            |mut c| async move { c.lease_revoke(lease).await },
        ) {
            Ok(_) => Ok(()),
            Err(e) if e.source.as_ref().is_some_and(super::lease_not_found) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(super) fn abandon(&mut self) {
        self.released = true;
        self.fleet.revoke(self.lease);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.released {
            self.abandon();
        }
    }
}
