//! The fleet on etcd: connect, pools (cap and holders), roles, and the held place's lease.
//!
//! Every call blocks: the client drives etcd-client on a current-thread tokio runtime of its
//! own, one request at a time, with a deadline on each.

use crate::decide::{self, Listed, Standing};
use crate::keys;
use crate::value::Holder;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaseKeepAliveStream, LeaseKeeper,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions, WatchStream,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest one request to etcd may take before it counts as unanswered.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a waiting take wakes to keep its place in line alive ([`Hold::pulse`]) while
/// it watches its pool for a change.
pub const KEEP_EVERY: Duration = Duration::from_millis(250);

/// The longest a waiter goes without reading its pool or role again, change or not: a
/// watch that stopped delivering without an error (a member cut off from the others) cannot
/// keep it waiting longer.
pub const RECHECK_EVERY: Duration = Duration::from_secs(5);

/// How long a waiter whose watch cannot be opened (etcd refused it) sleeps before it reads
/// again: it then polls, as before watches. Also the pause before a watch that broke, or
/// whose member could not be reached, is opened again (from the same revision, without
/// reading again: nothing is missed), and the shortest recheck ([`Fleet::with_recheck`]).
pub const POLL_EVERY: Duration = Duration::from_millis(100);

/// Errors of [`Fleet::connect`].
pub mod connect {
    /// Why no client could be made.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// No endpoint given.
        #[error("no etcd endpoint given: name at least one, as http://HOST:PORT")]
        NoEndpoint,
        /// The runtime could not start.
        #[error("cannot start the fleet client's runtime")]
        Runtime(#[source] std::io::Error),
        /// The endpoints did not answer.
        #[error("cannot reach etcd at {endpoints}")]
        Unreachable {
            /// The endpoints, comma-separated.
            endpoints: String,
            /// The client's error.
            #[source]
            source: etcd_client::Error,
        },
    }
}

/// What the fleet client was doing when etcd did not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Doing {
    /// Setting a pool's cap.
    SettingCap {
        /// The pool.
        pool: String,
    },
    /// Reading a pool's cap and keys.
    ReadingPool {
        /// The pool.
        pool: String,
    },
    /// Granting the lease of a place (`pool agents`, `role coordinator`).
    GrantingLease {
        /// The place.
        what: String,
    },
    /// Revoking a lease no longer needed.
    RevokingLease,
    /// Putting a waiter's key into a pool.
    JoiningPool {
        /// The pool.
        pool: String,
    },
    /// Claiming a role.
    ClaimingRole {
        /// The role.
        role: String,
    },
    /// Giving a held place up.
    Releasing {
        /// The place.
        what: String,
    },
    /// Reading a credential's budget.
    ReadingBudget {
        /// Its key.
        key: String,
    },
    /// Writing a credential's budget.
    WritingBudget {
        /// Its key.
        key: String,
    },
    /// Reading every credential's budget.
    ReadingBudgets,
}

impl std::fmt::Display for Doing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Doing::SettingCap { pool } => write!(f, "setting the cap of pool {pool:?}"),
            Doing::ReadingPool { pool } => write!(f, "reading pool {pool:?}"),
            Doing::GrantingLease { what } => write!(f, "granting a lease for {what}"),
            Doing::RevokingLease => f.write_str("revoking a lease"),
            Doing::JoiningPool { pool } => write!(f, "joining pool {pool:?}"),
            Doing::ClaimingRole { role } => write!(f, "claiming role {role:?}"),
            Doing::Releasing { what } => write!(f, "releasing {what}"),
            Doing::ReadingBudget { key } => write!(f, "reading the budget {key}"),
            Doing::WritingBudget { key } => write!(f, "writing the budget {key}"),
            Doing::ReadingBudgets => f.write_str("reading the fleet's budgets"),
        }
    }
}

/// A request etcd did not answer, or answered with an error: what was being done, where.
#[derive(Debug, thiserror::Error)]
#[error("etcd at {endpoints} did not answer while {doing}")]
pub struct Unavailable {
    /// The endpoints, comma-separated.
    pub endpoints: String,
    /// What was being done.
    pub doing: Doing,
    /// The client's error, or `None` on a timeout.
    #[source]
    pub source: Option<etcd_client::Error>,
}

/// Errors of taking or claiming ([`Fleet::take`], [`Fleet::claim_role`]) and of the pool's
/// administration ([`Fleet::set_cap`], [`Fleet::status`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A pool or role name that cannot be part of a key.
    #[error(transparent)]
    Name(#[from] keys::NameError),
    /// etcd did not answer.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    /// The cap stored in etcd is not a whole number.
    #[error(
        "the cap of pool {pool:?} in etcd ({key}) is {value:?}, not a whole number: set it again with `worklane fleet set-cap`"
    )]
    BadCap {
        /// The pool.
        pool: String,
        /// Its cap's key.
        key: String,
        /// What the key holds.
        value: String,
    },
    /// The place's lease went unconfirmed for half its TTL before the take or claim could
    /// report it held (etcd did not answer in time, or this process was stopped): it was
    /// given up, since etcd may expire the lease before the holder would know.
    #[error("the place was given up before it could be used")]
    GivenUp(#[source] Lost),
    /// A waiting take's own key vanished: its lease expired while it waited.
    #[error("the place taken in pool {pool:?} was lost while waiting (its etcd lease expired)")]
    LostWhileWaiting {
        /// The pool.
        pool: String,
    },
}

/// Why a held place must be given up (see [`Hold::pulse`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Lost {
    /// No keepalive was confirmed for half the TTL: the lease may lapse before long.
    #[error(
        "the fleet lease of {what} has gone unconfirmed for {unconfirmed_ms} ms, half its TTL \
         of {ttl_ms} ms or more (etcd at {endpoints} did not answer in time, or this process \
         was stopped)"
    )]
    Unconfirmed {
        /// The place (`pool agents`, `role coordinator`).
        what: String,
        /// How long since the last confirmed keepalive was sent.
        unconfirmed_ms: u128,
        /// The TTL.
        ttl_ms: u128,
        /// The endpoints.
        endpoints: String,
    },
    /// etcd says the lease is gone (it expired, or was revoked).
    #[error("the fleet lease of {what} has expired in etcd: another holder may hold it now")]
    Expired {
        /// The place.
        what: String,
    },
}

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

/// A pool's state in etcd, for `worklane fleet status`.
#[derive(Debug, Clone)]
pub struct PoolStatus {
    /// The pool.
    pub pool: String,
    /// Its cap, if set.
    pub cap: Option<u32>,
    /// Its keys in order of creation: the first `cap` hold, the rest wait.
    pub keys: Vec<Listed>,
}

pub(crate) struct Inner {
    runtime: tokio::runtime::Runtime,
    client: Client,
    endpoints: String,
}

impl Inner {
    /// Runs one request, made by `request` from a client handle, with the deadline. A request
    /// that fails at once (an endpoint that is down: the client balances over all of them)
    /// is tried again, every 50 ms, until the deadline.
    pub(crate) fn call<T, F, Fut>(
        &self,
        doing: impl FnOnce() -> Doing,
        request: F,
    ) -> Result<T, Unavailable>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        let outcome = self.runtime.block_on(async {
            let mut last = None;
            loop {
                match tokio::time::timeout_at(deadline, request(self.client.clone())).await {
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(e)) => last = Some(e),
                    Err(_) => return Err(last),
                }
                if tokio::time::Instant::now() + Duration::from_millis(50) >= deadline {
                    return Err(last);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        outcome.map_err(|source| Unavailable {
            endpoints: self.endpoints.clone(),
            doing: doing(),
            source,
        })
    }
}

/// A connection to the fleet's etcd.
#[derive(Clone)]
pub struct Fleet {
    pub(crate) inner: Arc<Inner>,
    ttl: Duration,
    recheck: Duration,
    /// Called between a lease's grant and the put that uses it (tests only).
    #[cfg(feature = "test-seams")]
    after_grant: Option<fn()>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("endpoints", &self.inner.endpoints)
            .field("ttl", &self.ttl)
            .field("recheck", &self.recheck)
            .finish()
    }
}

impl Fleet {
    /// Connects to etcd at `endpoints` (`http://HOST:PORT`); holders' leases get `ttl`
    /// (rounded up to whole seconds, as etcd counts them).
    pub fn connect(endpoints: &[String], ttl: Duration) -> Result<Fleet, connect::Error> {
        if endpoints.is_empty() {
            return Err(connect::Error::NoEndpoint);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(connect::Error::Runtime)?;
        let joined = endpoints.join(",");
        let options = ConnectOptions::new()
            .with_connect_timeout(REQUEST_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT);
        let client = runtime
            .block_on(async {
                tokio::time::timeout(
                    REQUEST_TIMEOUT * 2,
                    Client::connect(endpoints, Some(options)),
                )
                .await
            })
            .map_err(|_| connect::Error::Unreachable {
                endpoints: joined.clone(),
                source: etcd_client::Error::InvalidArgs("connecting timed out".into()),
            })?
            .map_err(|source| connect::Error::Unreachable {
                endpoints: joined.clone(),
                source,
            })?;
        Ok(Fleet {
            inner: Arc::new(Inner {
                runtime,
                client,
                endpoints: joined,
            }),
            ttl,
            recheck: RECHECK_EVERY,
            #[cfg(feature = "test-seams")]
            after_grant: None,
        })
    }

    /// How long a waiter goes at most without reading its pool or role again, whatever its
    /// watch says ([`RECHECK_EVERY`] unless set here). At least [`POLL_EVERY`]: a shorter
    /// one (zero) would make a waiter read again as fast as etcd answers.
    #[must_use]
    pub fn with_recheck(mut self, every: Duration) -> Fleet {
        self.recheck = every.max(POLL_EVERY);
        self
    }

    /// Test seam: `hook` runs between each lease's grant and the put that uses it (a test
    /// stops the process there).
    #[cfg(feature = "test-seams")]
    #[must_use]
    pub fn with_after_grant(mut self, hook: fn()) -> Fleet {
        self.after_grant = Some(hook);
        self
    }

    /// The endpoints, comma-separated.
    #[must_use]
    pub fn endpoints(&self) -> &str {
        &self.inner.endpoints
    }

    /// The TTL holders' leases get.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Sets the cap of `pool`.
    pub fn set_cap(&self, pool: &str, cap: u32) -> Result<(), Error> {
        keys::check_name("pool", pool)?;
        self.inner.call(
            || Doing::SettingCap {
                pool: pool.to_owned(),
            },
            |mut c| async move { c.put(keys::pool_cap(pool), cap.to_string(), None).await },
        )?;
        Ok(())
    }

    /// The cap and keys of `pool`, read at one revision.
    pub fn status(&self, pool: &str) -> Result<PoolStatus, Error> {
        keys::check_name("pool", pool)?;
        let (cap, keys, _) = self.read_pool(pool)?;
        Ok(PoolStatus {
            pool: pool.to_owned(),
            cap,
            keys,
        })
    }

    /// The pool's cap and keys, and the revision they were read at.
    fn read_pool(&self, pool: &str) -> Result<(Option<u32>, Vec<Listed>, i64), Error> {
        let sorted = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let txn = Txn::new().and_then([
            TxnOp::get(keys::pool_cap(pool), None),
            TxnOp::get(keys::pool_holders(pool), Some(sorted)),
        ]);
        let response = self.inner.call(
            || Doing::ReadingPool {
                pool: pool.to_owned(),
            },
            |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            },
        )?;
        let revision = response.header().map_or(0, |h| h.revision());
        let mut cap = None;
        let mut listed = Vec::new();
        for (i, op) in response.op_responses().into_iter().enumerate() {
            let TxnOpResponse::Get(get) = op else {
                continue;
            };
            if i == 0 {
                if let Some(kv) = get.kvs().first() {
                    let text = String::from_utf8_lossy(kv.value()).into_owned();
                    cap = Some(text.trim().parse::<u32>().map_err(|_| Error::BadCap {
                        pool: pool.to_owned(),
                        key: keys::pool_cap(pool),
                        value: text.clone(),
                    })?);
                }
            } else {
                listed.extend(get.kvs().iter().map(|kv| Listed {
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    create_revision: kv.create_revision(),
                    holder: Holder::parse(kv.value()),
                }));
            }
        }
        Ok((cap, listed, revision))
    }

    /// Grants a lease of the fleet's TTL: its id, the TTL etcd gave, and when the grant was
    /// sent (etcd counts the TTL from about then, so the halt rule must too).
    fn grant(&self, doing: &str) -> Result<(i64, Duration, BootInstant), Error> {
        let seconds = i64::try_from(self.ttl.as_millis().div_ceil(1000).max(1)).unwrap_or(i64::MAX);
        let sent = BootInstant::now();
        let granted = self.inner.call(
            || Doing::GrantingLease {
                what: doing.to_owned(),
            },
            |mut c| async move { c.lease_grant(seconds, None).await },
        )?;
        let ttl = Duration::from_secs(u64::try_from(granted.ttl()).unwrap_or(0).max(1));
        #[cfg(feature = "test-seams")]
        if let Some(hook) = self.after_grant {
            hook();
        }
        Ok((
            granted.id(),
            ttl.min(self.ttl.max(Duration::from_secs(1))),
            sent,
        ))
    }

    fn revoke(&self, lease: i64) {
        let _ = self.inner.call(
            || Doing::RevokingLease,
            |mut c| async move { c.lease_revoke(lease).await },
        );
    }

    /// Takes a place in `pool` for `holder`: one of its first `cap` keys by creation. The key
    /// is put at once (attached to a lease of its own), so a waiter keeps its place in line;
    /// it is removed on refusal. The held place's epoch is its key's create revision.
    pub fn take(&self, pool: &str, holder: &Holder, wait: Wait<'_>) -> Result<Taken, Error> {
        keys::check_name("pool", pool)?;
        let what = format!("pool {pool}");
        let (lease, ttl, granted) = self.grant(&what)?;
        let key = keys::pool_holder(pool, &format!("{lease:016x}"));
        let put = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                holder.to_bytes(),
                Some(etcd_client::PutOptions::new().with_lease(lease)),
            )]);
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
            Ok(r) => r.header().map_or(0, |h| h.revision()),
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
                Err(e) => {
                    self.revoke(lease);
                    return Err(e.into());
                }
            };
            if response.succeeded() {
                let epoch = response.header().map_or(0, |h| h.revision());
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

/// A watch on a key (or the keys under a prefix), for a waiter: it reports changes after the
/// revision the waiter last read, so that none between its read and its wait is missed.
struct Changes {
    key: String,
    prefix: bool,
    /// The first revision not yet seen: the last read's, plus one.
    from: i64,
    /// The open watch, if any: it delivers every change from the revision it started at.
    stream: Option<WatchStream>,
    /// Since when no watch could be kept open (its stream broke, its member could not be
    /// reached), if so.
    broken_since: Option<Instant>,
}

/// What one wait for a change saw.
enum Seen {
    /// A change, or a reason to read again (a canceled watch, a refused one).
    Change,
    /// Nothing before the deadline.
    Quiet,
    /// The watch broke, or its member could not be reached.
    Broken,
}

impl Changes {
    fn new(key: String, prefix: bool) -> Changes {
        Changes {
            key,
            prefix,
            from: 0,
            stream: None,
            broken_since: None,
        }
    }

    /// The waiter read the keys at `revision`: changes up to it are known.
    fn read_at(&mut self, revision: i64) {
        if revision > 0 {
            self.from = self.from.max(revision + 1);
        }
    }
}

impl Fleet {
    /// Waits at most `max` for a change of the watched keys after the last read; whether
    /// the waiter should read again (a change came, or the watch was canceled). A watch
    /// that etcd refuses to open makes this a sleep of [`POLL_EVERY`], then `true` (polling).
    /// A watch that broke, or whose member could not be reached, is opened again from the
    /// same revision after [`POLL_EVERY`] without reading; only once none could be kept open
    /// for [`REQUEST_TIMEOUT`] (etcd may be gone altogether) does this say to read again, so
    /// that the read fails and says so.
    fn wait_for_change(&self, changes: &mut Changes, max: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + max;
        let inner = Arc::clone(&self.inner);
        let mut stream = changes.stream.take();
        let key = changes.key.clone();
        // From the revision after the last read: a change between that read and this watch is
        // reported too. (No read yet: from now.)
        let mut options = WatchOptions::new();
        if changes.from > 0 {
            options = options.with_start_revision(changes.from);
        }
        if changes.prefix {
            options = options.with_prefix();
        }
        let (seen, stream) = inner.runtime.block_on(async {
            let mut stream = match stream.take() {
                Some(stream) => stream,
                None => {
                    let opened = tokio::time::timeout_at(
                        deadline.min(tokio::time::Instant::now() + REQUEST_TIMEOUT),
                        inner.client.clone().watch(key, Some(options)),
                    )
                    .await;
                    match opened {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            // A member that cannot be reached (dead, or its connection
                            // broken): open it again from the same revision after a pause,
                            // which loses nothing. etcd refusing the watch: poll.
                            let refused = !unreachable(&e);
                            log::debug!(
                                "fleet watch cannot be opened ({e}): {}",
                                if refused {
                                    "polling"
                                } else {
                                    "opening it again"
                                }
                            );
                            tokio::time::sleep_until(
                                deadline.min(tokio::time::Instant::now() + POLL_EVERY),
                            )
                            .await;
                            return (if refused { Seen::Change } else { Seen::Broken }, None);
                        }
                        // Not even opened before the deadline: nothing learned.
                        Err(_) => return (Seen::Quiet, None),
                    }
                }
            };
            loop {
                match tokio::time::timeout_at(deadline, stream.message()).await {
                    Err(_) => return (Seen::Quiet, Some(stream)),
                    Ok(Ok(Some(response))) => {
                        if response.canceled() {
                            // Compacted past our revision, or cancelled by etcd: read again
                            // and watch afresh.
                            return (Seen::Change, None);
                        }
                        if !response.events().is_empty() {
                            return (Seen::Change, Some(stream));
                        }
                        // The creation's confirmation, or a progress notice: keep waiting.
                    }
                    // The stream ended or failed (its member died, say): open a new one
                    // next time, from the same revision (so nothing is missed and nothing
                    // needs reading again: a read or claim now could fall in the election
                    // of a new leader), after a pause, so that a member that keeps closing
                    // streams is not asked in a tight loop.
                    Ok(Ok(None) | Err(_)) => {
                        tokio::time::sleep_until(
                            deadline.min(tokio::time::Instant::now() + POLL_EVERY),
                        )
                        .await;
                        return (Seen::Broken, None);
                    }
                }
            }
        });
        changes.stream = stream;
        match seen {
            Seen::Change => {
                changes.broken_since = None;
                true
            }
            Seen::Quiet => {
                if changes.stream.is_some() {
                    changes.broken_since = None;
                }
                false
            }
            Seen::Broken => {
                let since = *changes.broken_since.get_or_insert_with(Instant::now);
                if since.elapsed() < REQUEST_TIMEOUT {
                    return false;
                }
                changes.broken_since = None;
                true
            }
        }
    }
}

/// Whether `e` says that the member asked could not be reached (rather than that etcd
/// answered with a refusal).
fn unreachable(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        // gRPC's UNAVAILABLE (14): what the client says of a member it cannot connect to.
        etcd_client::Error::GRpcStatus(status) => status.code() as i32 == 14,
        _ => false,
    }
}

/// A moment on the boot clock (`CLOCK_BOOTTIME` on Linux, which counts a suspend, as etcd's
/// own clock does while this host sleeps; the monotonic clock elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct BootInstant(Duration);

impl BootInstant {
    fn now() -> BootInstant {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let id = rustix::time::ClockId::Boottime;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let id = rustix::time::ClockId::Monotonic;
        let t = rustix::time::clock_gettime(id);
        BootInstant(Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        ))
    }

    fn saturating_duration_since(self, earlier: BootInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
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
    fn new(
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
                    None => inner.client.clone().lease_keep_alive(lease).await?,
                };
                keeper.keep_alive().await?;
                let answer = stream.message().await?;
                Ok::<_, etcd_client::Error>((answer.map(|a| a.ttl()), (keeper, stream)))
            })
            .await
        });
        match outcome {
            Ok(Ok((Some(ttl), pair))) if ttl > 0 => {
                self.keeper = Some(pair);
                self.confirmed = sent;
                Ok(())
            }
            Ok(Ok((Some(_), _))) => Err(Lost::Expired {
                what: self.what.clone(),
            }),
            // No answer, an error or a closed stream: a new stream next time, and the halt
            // rule decides.
            _ => {
                log::debug!(
                    "fleet keepalive of {} not confirmed; trying again",
                    self.what
                );
                Ok(())
            }
        }
    }

    /// The halt rule alone, without asking etcd: [`Lost::Unconfirmed`] once the last
    /// confirmed keepalive was sent half the TTL ago or more.
    fn check(&self) -> Result<(), Lost> {
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

    /// Gives the place up: the lease is revoked, which removes the key.
    pub fn release(mut self) -> Result<(), Unavailable> {
        self.released = true;
        let what = self.what.clone();
        let lease = self.lease;
        self.fleet
            .inner
            .call(
                || Doing::Releasing { what },
                |mut c| async move { c.lease_revoke(lease).await },
            )
            .map(drop)
    }

    fn abandon(&mut self) {
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
