//! The fleet on etcd: the connection ([`Fleet`]), a pool's cap and status, and the one way
//! every request is sent ([`Inner::call`]). Every call blocks: the client drives etcd-client on
//! a current-thread tokio runtime of its own, one request at a time, with a deadline on each.
//!
//! - `error.rs`: the errors, one per operation, and [`Doing`], the step etcd did not answer.
//! - `take.rs`: taking a pool's place or claiming a role, waiting if asked; the outcomes.
//! - `watch.rs`: change watching, which wakes a waiter when its pool or role changes.
//! - `hold.rs`: a held place and its keepalive, with the halt rule on the boot clock.

mod error;
mod hold;
mod take;
mod watch;

pub use error::{Doing, Error, Lost, Unavailable, connect};
pub use hold::Hold;
pub use take::{Refusal, Taken, Wait, Waiting};

use crate::decide::Listed;
use crate::keys;
use crate::value::Holder;
use etcd_client::{
    Client, ConnectOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use hold::BootInstant;
use std::sync::Arc;
use std::time::Duration;

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
    /// Test seam ([`Fleet::lose_answer`]): how many answers from now the one that is lost is
    /// (0: none), and what happens before the request is sent again.
    #[cfg(feature = "test-seams")]
    lose_answer: std::sync::atomic::AtomicU32,
    #[cfg(feature = "test-seams")]
    meanwhile: std::sync::Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

impl Inner {
    /// Runs one request, made by `request` from a client handle, with the deadline. A request
    /// that fails at once for want of an answer (an endpoint that is down: the client
    /// balances over all of them) is tried again, every 50 ms, until the deadline; one etcd
    /// refused fails at once.
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
                    #[cfg(feature = "test-seams")]
                    Ok(Ok(_)) if self.answer_lost() => {
                        last = Some(etcd_client::Error::IoError(std::io::Error::from(
                            std::io::ErrorKind::ConnectionReset,
                        )));
                    }
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(e)) => {
                        let again = worth_another_try(&e);
                        last = Some(e);
                        if !again {
                            return Err(last);
                        }
                    }
                    Err(_) => return Err(last),
                }
                if !room_for_another_try(tokio::time::Instant::now(), deadline) {
                    return Err(last);
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        });
        outcome.map_err(|source| Unavailable {
            endpoints: self.endpoints.clone(),
            doing: doing(),
            source,
        })
    }
}

#[cfg(feature = "test-seams")]
impl Inner {
    /// Whether the answer just received is to be lost ([`Fleet::lose_answer`]); if so, what
    /// was to happen meanwhile has happened (on a thread of its own: it may use a connection
    /// of its own, whose runtime cannot run inside this one's).
    fn answer_lost(&self) -> bool {
        use std::sync::atomic::Ordering;
        let mut lost = false;
        let _ = self
            .lose_answer
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                lost = n == 1;
                n.checked_sub(1)
            });
        if lost {
            let meanwhile = self
                .meanwhile
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(meanwhile) = meanwhile {
                std::thread::scope(|s| {
                    s.spawn(|| meanwhile());
                });
            }
        }
        lost
    }
}

/// Whether `e` says that the member asked could not be reached, or did not answer in time
/// (rather than that etcd answered with a refusal). A gRPC status etcd sent carries no
/// source; one the client made from its own connection's failure does (a refused connect is
/// `UNAVAILABLE`, 14; a connection that broke under an open request, its member killed, is
/// `UNKNOWN` or `CANCELLED` with the transport's error as its source). The client's own
/// timeout is `CANCELLED` (1) without a source, and a deadline `DEADLINE_EXCEEDED` (4): no
/// answer either.
pub(crate) fn unreachable(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            matches!(status.code() as i32, 1 | 4 | 14)
                || std::error::Error::source(status).is_some()
        }
        _ => false,
    }
}

/// Whether a request that failed with `e` is worth sending again: no answer came from etcd
/// (a member down or its connection broken: the client may reach another; etcd's own "no
/// leader" and "timed out" are `UNAVAILABLE` too), or etcd said it has too many requests
/// (`RESOURCE_EXHAUSTED`, 8). Any other answer is etcd's refusal, the same the next time.
fn worth_another_try(e: &etcd_client::Error) -> bool {
    unreachable(e)
        || matches!(e, etcd_client::Error::GRpcStatus(status) if status.code() as i32 == 8)
}

/// Whether `e` is etcd saying that a lease does not exist (`NOT_FOUND`, 5: it expired, or was
/// revoked; etcd answers nothing else with that code).
pub(crate) fn lease_not_found(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(status) if status.code() as i32 == 5)
}

/// The pause before a request that failed at once is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Whether a request that failed at once at `now` is tried again before `deadline`: only if
/// the pause before it ends before the deadline.
fn room_for_another_try(now: tokio::time::Instant, deadline: tokio::time::Instant) -> bool {
    now + RETRY_PAUSE < deadline
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
    /// Called before each compare-and-swap of a budget (tests only).
    #[cfg(feature = "test-seams")]
    pub(crate) before_budget_write: Option<Arc<dyn Fn() + Send + Sync>>,
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
                #[cfg(feature = "test-seams")]
                lose_answer: std::sync::atomic::AtomicU32::new(0),
                #[cfg(feature = "test-seams")]
                meanwhile: std::sync::Mutex::new(None),
            }),
            ttl,
            recheck: RECHECK_EVERY,
            #[cfg(feature = "test-seams")]
            after_grant: None,
            #[cfg(feature = "test-seams")]
            before_budget_write: None,
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

    /// Test seam: `hook` runs before each compare-and-swap of a budget, after its read (a test
    /// writes the key there, as another host would, to make the write lose).
    #[cfg(feature = "test-seams")]
    #[must_use]
    pub fn with_before_budget_write(mut self, hook: Arc<dyn Fn() + Send + Sync>) -> Fleet {
        self.before_budget_write = Some(hook);
        self
    }

    /// Test seam: the `nth` answer etcd sends from now (1: the next) is lost after etcd has
    /// applied its request, as when the connection breaks between the two; `meanwhile` runs
    /// (another host's write, say), then the request is sent again, as one that failed at
    /// once is.
    #[cfg(feature = "test-seams")]
    pub fn lose_answer(&self, nth: u32, meanwhile: impl Fn() + Send + Sync + 'static) {
        *self
            .inner
            .meanwhile
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(meanwhile));
        self.inner
            .lose_answer
            .store(nth, std::sync::atomic::Ordering::SeqCst);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_request_is_tried_again_only_if_its_pause_ends_before_the_deadline() {
        let now = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        assert!(room_for_another_try(now, now + REQUEST_TIMEOUT));
        assert!(room_for_another_try(now, now + RETRY_PAUSE + ms(1)));
        assert!(
            !room_for_another_try(now, now + RETRY_PAUSE),
            "the pause would end at it"
        );
        assert!(!room_for_another_try(now, now + ms(10)));
        assert!(!room_for_another_try(now + ms(1), now), "past it");
    }
}
