//! Taking a place: a pool's ([`Fleet::take`], in line by create revision) or a role's
//! ([`Fleet::claim_role`], its one key created only if absent), waiting for it if asked, and
//! the outcomes ([`Taken`], [`Refusal`]).

use super::hold::Hold;
use super::watch::Changes;
use super::{Doing, Error, Fleet, KEEP_EVERY, Lost};
use crate::decide::{self, Standing};
use crate::keys;
use crate::value::Holder;
use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use std::time::{Duration, Instant};

/// How a take or claim waits.
pub struct Wait<'a> {
    /// Give up after this long; `Some(ZERO)`: do not wait; `None`: wait for ever.
    pub timeout: Option<Duration>,
    /// Called on each look with who is ahead.
    pub on_wait: &'a mut dyn FnMut(&Waiting),
}

/// What a waiting take sees on each look.
#[derive(Debug)]
pub struct Waiting {
    /// Keys created before it (holders and earlier waiters).
    pub ahead: usize,
    /// The pool's cap.
    pub cap: u32,
}

/// The outcome of a take or claim.
#[derive(Debug)]
pub enum Taken {
    /// Held: keep it alive with [`Hold::pulse`], give it up with [`Hold::release`].
    Held(Box<Hold>),
    /// Not held.
    Refused(Refusal),
}

/// Why a take or claim was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The pool has no cap in etcd: it admits nobody until one is set.
    NoCap {
        /// The pool.
        pool: String,
    },
    /// Every place of the pool is held (and waiting was not asked, or timed out).
    Full {
        /// The pool.
        pool: String,
        /// Its cap.
        cap: u32,
        /// Who holds its places, as far as their values tell.
        holders: Vec<Holder>,
    },
    /// The role is held by another.
    RoleHeld {
        /// The role.
        role: String,
        /// Its holder, if its value could be read.
        holder: Option<Holder>,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoCap { pool } => write!(
                f,
                "fleet pool {pool:?} has no cap set, so it admits nobody: set one with \
                 `worklane fleet set-cap --pool {pool} N`"
            ),
            Refusal::Full { pool, cap, holders } => {
                write!(f, "fleet pool {pool:?} is full ({cap} of {cap} held")?;
                for (i, h) in holders.iter().enumerate() {
                    write!(f, "{}{h}", if i == 0 { ": " } else { "; " })?;
                }
                write!(f, ")")
            }
            Refusal::RoleHeld { role, holder } => match holder {
                Some(h) => write!(f, "fleet role {role:?} is held by {h}"),
                None => write!(
                    f,
                    "fleet role {role:?} is held (its holder's value is unreadable)"
                ),
            },
        }
    }
}

impl Fleet {
    /// Takes a place in `pool` for `holder`: one of its first `cap` keys by creation. The key
    /// is put at once (attached to a lease of its own), so a waiter keeps its place in line;
    /// it is removed on refusal. The held place's epoch is its key's create revision.
    pub fn take(&self, pool: &str, holder: &Holder, wait: Wait<'_>) -> Result<Taken, Error> {
        keys::check_name("pool", pool)?;
        let what = format!("pool {pool}");
        let (lease, ttl, granted) = self.grant(&what)?;
        let key = keys::pool_holder(pool, &format!("{lease:016x}"));
        // The key is named after the lease: present already, it is this take's own, put by
        // an earlier send of this request whose answer was lost (the connection broke after
        // etcd applied it), and its create revision is the epoch.
        let put = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                holder.to_bytes(),
                Some(etcd_client::PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let put = self.inner.call(
            || Doing::JoiningPool {
                pool: pool.to_owned(),
            },
            |mut c| {
                let put = put.clone();
                async move { c.txn(put).await }
            },
        );
        let epoch = match put {
            Ok(r) if r.succeeded() => r.header().map_or(0, |h| h.revision()),
            Ok(r) => own_key_created(&r, lease).unwrap_or(0),
            // The lease expired between its grant and the put (this process was stopped
            // past its TTL): nothing to revoke, nothing held.
            Err(e) if e.source.as_ref().is_some_and(super::lease_not_found) => {
                return Err(Error::GivenUp(Lost::Expired { what }));
            }
            Err(e) => {
                self.revoke(lease);
                return Err(e.into());
            }
        };
        let mut hold = Hold::new(self.clone(), what, key.clone(), lease, ttl, epoch, granted);
        let started = Instant::now();
        let mut changes = Changes::new(keys::pool_root(pool), true);
        loop {
            let (cap, listed, revision) = match self.read_pool(pool) {
                Ok(read) => read,
                Err(e) => {
                    hold.abandon();
                    return Err(e);
                }
            };
            let Some(cap) = cap else {
                hold.abandon();
                return Ok(Taken::Refused(Refusal::NoCap {
                    pool: pool.to_owned(),
                }));
            };
            match decide::standing(&listed, &key, cap) {
                // The read says the place is ours, but not that our lease will outlive the
                // halt rule's margin: a waiter suspended past half its TTL (while it waited
                // or read) must give the place up, not report it held.
                Standing::Holds => {
                    return match hold.check() {
                        Ok(()) => Ok(Taken::Held(Box::new(hold))),
                        Err(lost) => {
                            hold.abandon();
                            Err(self.lost_while_waiting(pool, lost))
                        }
                    };
                }
                Standing::Gone => {
                    hold.abandon();
                    return Err(Error::LostWhileWaiting {
                        pool: pool.to_owned(),
                    });
                }
                Standing::Waits { ahead } => {
                    changes.read_at(revision);
                    if wait.timeout.is_some_and(|t| started.elapsed() >= t) {
                        hold.abandon();
                        let holders = decide::holders(&listed, cap)
                            .into_iter()
                            .filter_map(|l| l.holder.clone())
                            .collect();
                        return Ok(Taken::Refused(Refusal::Full {
                            pool: pool.to_owned(),
                            cap,
                            holders,
                        }));
                    }
                    (wait.on_wait)(&Waiting { ahead, cap });
                    // Until a key of the pool changes (a holder left, the cap was set), the
                    // timeout comes or the recheck is due, keeping the place alive.
                    let looked = Instant::now();
                    loop {
                        if let Err(lost) = hold.pulse() {
                            hold.abandon();
                            return Err(self.lost_while_waiting(pool, lost));
                        }
                        let left = wait_left(wait.timeout, started, looked, self.recheck);
                        if left.is_zero()
                            || self.wait_for_change(&mut changes, left.min(KEEP_EVERY))
                        {
                            break;
                        }
                    }
                }
            }
        }
    }

    /// The error of a take whose place in `pool` was lost while it waited.
    fn lost_while_waiting(&self, pool: &str, lost: Lost) -> Error {
        match lost {
            Lost::Unconfirmed { .. } => Error::GivenUp(lost),
            Lost::Expired { .. } => Error::LostWhileWaiting {
                pool: pool.to_owned(),
            },
        }
    }

    /// Claims `role` for `holder`: its one key, created only if absent. The epoch is the
    /// key's create revision.
    pub fn claim_role(&self, role: &str, holder: &Holder, wait: Wait<'_>) -> Result<Taken, Error> {
        keys::check_name("role", role)?;
        let key = keys::role(role);
        let mut value = holder.clone();
        value.role = Some(role.to_owned());
        let started = Instant::now();
        let mut changes = Changes::new(key.clone(), false);
        loop {
            let what = format!("role {role}");
            let (lease, ttl, granted) = self.grant(&what)?;
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    value.to_bytes(),
                    Some(etcd_client::PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = match self.inner.call(
                || Doing::ClaimingRole {
                    role: role.to_owned(),
                },
                |mut c| {
                    let txn = txn.clone();
                    async move { c.txn(txn).await }
                },
            ) {
                Ok(r) => r,
                Err(e) if e.source.as_ref().is_some_and(super::lease_not_found) => {
                    return Err(Error::GivenUp(Lost::Expired { what }));
                }
                Err(e) => {
                    self.revoke(lease);
                    return Err(e.into());
                }
            };
            // The key under this claim's own lease: put by an earlier send of this request
            // whose answer was lost (the connection broke after etcd applied it). Held.
            let own = own_key_created(&response, lease);
            if response.succeeded() || own.is_some() {
                let epoch = own.unwrap_or_else(|| response.header().map_or(0, |h| h.revision()));
                let hold = Hold::new(self.clone(), what, key, lease, ttl, epoch, granted);
                // As a take does: a claimant stopped past half the TTL since its grant must
                // not report the role held (etcd may expire the lease before the halt rule,
                // counted from later, would stop it).
                return match hold.check() {
                    Ok(()) => Ok(Taken::Held(Box::new(hold))),
                    Err(lost) => {
                        let mut hold = hold;
                        hold.abandon();
                        Err(Error::GivenUp(lost))
                    }
                };
            }
            self.revoke(lease);
            let holder = response.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(get) => {
                    get.kvs().first().and_then(|kv| Holder::parse(kv.value()))
                }
                _ => None,
            });
            if wait.timeout.is_none_or(|t| started.elapsed() < t) {
                (wait.on_wait)(&Waiting { ahead: 1, cap: 1 });
                // Until the role's key changes (its holder left or lapsed), the timeout comes
                // or the recheck is due.
                changes.read_at(response.header().map_or(0, |h| h.revision()));
                let looked = Instant::now();
                loop {
                    let left = wait_left(wait.timeout, started, looked, self.recheck);
                    if left.is_zero() || self.wait_for_change(&mut changes, left) {
                        break;
                    }
                }
                continue;
            }
            return Ok(Taken::Refused(Refusal::RoleHeld {
                role: role.to_owned(),
                holder,
            }));
        }
    }
}

/// The create revision of the key a transaction's `get` found, if that key is attached to
/// `lease` (so was written by the holder of that lease: this process).
fn own_key_created(response: &etcd_client::TxnResponse, lease: i64) -> Option<i64> {
    response.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => get
            .kvs()
            .first()
            .filter(|kv| kv.lease() == lease)
            .map(etcd_client::KeyValue::create_revision),
        _ => None,
    })
}

/// How long a waiter may wait now before it must look again: until its timeout (`None`:
/// none) counted from `started`, and at most `recheck` after its last look.
fn wait_left(
    timeout: Option<Duration>,
    started: Instant,
    looked: Instant,
    recheck: Duration,
) -> Duration {
    let recheck = recheck.saturating_sub(looked.elapsed());
    match timeout {
        Some(t) => t.saturating_sub(started.elapsed()).min(recheck),
        None => recheck,
    }
}
