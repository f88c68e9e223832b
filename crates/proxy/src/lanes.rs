//! The proxy's side of the shared ledger: one lane per credential, whose thread makes this
//! process's ledger calls for that credential one after another, in the order they were
//! asked (the ledger locks files and may sleep; the reactor never waits on it). A thread of
//! its own rather than tokio's blocking pool: a call then costs one wake-up each way, not
//! four, and the lane's order needs one thread at a time anyway.
//!
//! The order matters: a response's observation is queued when its body ends, before the
//! client can have sent its next request, so that request's take always sees what the
//! response said. Waiting for a spent window or a pause happens here, between takes, without
//! a thread: a take is tried at once (the ledger's own wait is not used), and a refused one
//! is tried again when the window resets or the pause ends, when this proxy records another
//! response of the credential, and at least every [`LOOK_AGAIN`] (another process may have).
//!
//! The calls queued at once are made together, under one take of the budget's lock and one
//! write ([`Ledger::change_model_batch`]), and a batch that only settles waits up to
//! [`LINGER`] for a take to come: a client that sends its next request as its response ends
//! waits for one ledger call, not for the settlement's and then its own (BENCHMARKS.md).

use crate::line::{Line, Ticket};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
use worklane_budget::{
    CredentialKey, Ledger, ModelChange, Need, Observed, Provider, ProviderObservation, Refused,
    Trouble, Usage,
};
use worklane_lease::{Clock, SystemClock};

/// A refused take is tried again at least this often (the ledger's own waits look as often).
pub(crate) const LOOK_AGAIN: Duration = Duration::from_secs(1);
/// How long an observation tries the budget's lock before it gives the reservation back
/// instead: the ledger tries it once, which under load would leave reservations in flight.
const OBSERVE_PATIENCE: Duration = Duration::from_secs(1);
const OBSERVE_POLL: Duration = Duration::from_millis(10);
/// A lane unused for this long is dropped when another one is made (its worker ends once
/// its last reservation is settled).
const IDLE_LANE: Duration = Duration::from_secs(600);
/// At most this many calls are made in one trip to a blocking thread.
const BATCH: usize = 64;
/// How long a batch that only settles (a response's settlement, a release) waits for a take
/// to come and be made with it. A client that sends its next request as its response ends
/// has it taken in the same call as that response's settlement, so the request waits for
/// one ledger call rather than two; a settlement is recorded at most this much later, which
/// delays nothing a client waits for.
const LINGER: Duration = Duration::from_millis(2);

/// What a lane's worker does.
enum Op {
    Take {
        need: Need,
        reply: oneshot::Sender<Result<Reservation, Refused>>,
    },
    Observe {
        reservation: Option<String>,
        observation: ProviderObservation,
        /// Only the response's head (a stream's): it settles the dimensions it reports.
        head: bool,
    },
    Release {
        reservation: String,
    },
    /// A client was refused after its whole wait: one `budget-refused` event.
    Refused {
        refused: Refused,
    },
    /// The number of requests waiting changed: say so in the state.
    Waiting,
}

/// The ledger, the provider and how takes are named.
struct Ctx {
    ledger: Ledger,
    /// The ledger's clock: an observation's patience counts by it as well as by the
    /// monotonic clock, as the ledger's own lock waits do, and a refused take's wait for a
    /// reset from it, as the refusal's times are the ledger's (tests run them on a clock of
    /// their own).
    clock: Arc<dyn Clock>,
    provider: Provider,
    consumer: String,
    /// This proxy's id in the states' `waiting` (PROTOCOL.md 13.1).
    waiter: String,
    /// How long a batch that only settles waits for a take ([`LINGER`]).
    linger: Duration,
}

/// The way into a lane. The lane's thread ends once every one is dropped (the map's, the
/// reservations', the takes' in progress) and its calls are made.
struct LaneTx(mpsc::Sender<Op>);

impl LaneTx {
    fn send(&self, op: Op) -> bool {
        self.0.send(op).is_ok()
    }
}

struct Lane {
    ops: Arc<LaneTx>,
    changed: watch::Receiver<u64>,
    /// Requests of this lane waiting for the budget.
    waiting: Arc<AtomicU64>,
    /// Their order.
    line: Arc<Line>,
    used: Instant,
}

/// One request counted as waiting while it lives.
struct Waiter {
    ops: Arc<LaneTx>,
    waiting: Arc<AtomicU64>,
}

impl Waiter {
    fn new(ops: &Arc<LaneTx>, waiting: &Arc<AtomicU64>) -> Waiter {
        waiting.fetch_add(1, Ordering::SeqCst);
        ops.send(Op::Waiting);
        Waiter {
            ops: Arc::clone(ops),
            waiting: Arc::clone(waiting),
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        self.ops.send(Op::Waiting);
    }
}

/// Every lane of one proxy.
pub(crate) struct Lanes {
    ctx: Arc<Ctx>,
    lanes: Mutex<HashMap<CredentialKey, Lane>>,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// What one take reserved: settled by its response's observation ([`Reservation::settle`]),
/// given back when dropped unsettled (the request never got a response).
#[must_use = "dropping a reservation gives it back"]
pub(crate) struct Reservation {
    id: Option<String>,
    ops: Arc<LaneTx>,
    settled: bool,
    /// What the take reserved.
    need: Need,
}

impl Reservation {
    /// Records what a response's head said (its windows, a pause), without settling the
    /// reservation: queued as the head arrives, so that responses are recorded in the order
    /// the upstream answered them, not the order their bodies ended.
    pub(crate) fn record(&self, observation: ProviderObservation) {
        let _ = self.ops.send(Op::Observe {
            reservation: self.id.clone(),
            observation,
            head: true,
        });
    }

    /// What the take reserved, as a usage: what a response cut short settles with (the
    /// upstream counted the request; what it did not report stays counted at the estimate).
    pub(crate) fn estimate(&self) -> Usage {
        Usage {
            input_tokens: self.need.input_tokens,
            output_tokens: self.need.output_tokens,
        }
    }

    /// Settles what the take reserved with what the response's body said it used (an
    /// observation without windows).
    pub(crate) fn settle(mut self, observation: ProviderObservation) {
        self.settled = true;
        let _ = self.ops.send(Op::Observe {
            reservation: self.id.take(),
            observation,
            head: false,
        });
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled
            && let Some(reservation) = self.id.take()
        {
            let _ = self.ops.send(Op::Release { reservation });
        }
    }
}

/// Why a take did not go.
pub(crate) enum NotTaken {
    /// The budget stayed spent or paused for the whole wait.
    Refused {
        /// The ledger's last refusal.
        refused: Refused,
        /// How long the request waited.
        waited: Duration,
    },
    /// The proxy is shutting down (its runtime ended the lane's worker): nothing was taken.
    Closed,
}

impl Lanes {
    pub(crate) fn new(ledger: Ledger, provider: Provider, consumer: String) -> Lanes {
        Lanes {
            ctx: Arc::new(Ctx {
                ledger,
                clock: Arc::new(SystemClock),
                provider,
                consumer,
                waiter: Ledger::waiter_id(),
                linger: LINGER,
            }),
            lanes: Mutex::new(HashMap::new()),
            workers: Mutex::new(Vec::new()),
        }
    }

    /// The lane of `key` (made, with its thread, on first use); `None` when no thread can be
    /// started.
    fn lane(&self, key: &CredentialKey) -> Option<LaneRef> {
        let mut lanes = self
            .lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if let Some(lane) = lanes.get_mut(key) {
            lane.used = now;
            return Some(LaneRef {
                ops: Arc::clone(&lane.ops),
                changed: lane.changed.clone(),
                waiting: Arc::clone(&lane.waiting),
                line: Arc::clone(&lane.line),
            });
        }
        lanes.retain(|_, lane| !idle(lane.used, now));
        let (tx, rx) = mpsc::channel();
        let ops = Arc::new(LaneTx(tx));
        let (changed_tx, changed) = watch::channel(0u64);
        let changed_tx = Arc::new(changed_tx);
        let line = Arc::new(Line::new(Arc::clone(&changed_tx)));
        let ctx = Arc::clone(&self.ctx);
        let weak = Arc::downgrade(&ops);
        let key_copy = key.clone();
        let waiting = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&waiting);
        let worker = std::thread::Builder::new()
            .name("worklane-proxy-ledger".to_owned())
            .spawn(move || work(&ctx, &key_copy, &rx, &weak, &changed_tx, &counted));
        let worker = match worker {
            Ok(worker) => worker,
            Err(e) => {
                log::error!("cannot start a thread for the budget ledger's calls: {e}");
                return None;
            }
        };
        let mut workers = self
            .workers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        workers.retain(|w| !w.is_finished());
        workers.push(worker);
        lanes.insert(
            key.clone(),
            Lane {
                ops: Arc::clone(&ops),
                changed: changed.clone(),
                waiting: Arc::clone(&waiting),
                line: Arc::clone(&line),
                used: now,
            },
        );
        Some(LaneRef {
            ops,
            changed,
            waiting,
            line,
        })
    }

    /// Takes what a request needs from `key`'s budget, waiting up to `max_wait` while it is
    /// spent or paused. Requests that wait do so in line: only the first tries the budget;
    /// one that finds others waiting goes behind them without trying (at the end of its wait
    /// it tries once wherever it stands).
    pub(crate) async fn take(
        &self,
        key: &CredentialKey,
        need: Need,
        max_wait: Duration,
    ) -> Result<Reservation, NotTaken> {
        // The runtime's clock, as its naps are: a test runs it paused, each nap exact.
        let started = tokio::time::Instant::now();
        let Some(LaneRef {
            ops,
            mut changed,
            waiting,
            line,
        }) = self.lane(key)
        else {
            return Err(NotTaken::Closed);
        };
        // Counted as waiting from its first refusal (or its joining the line) until it goes,
        // is refused or is dropped; its place in line as long.
        let mut waiter = None;
        let mut ticket: Option<Ticket> = None;
        loop {
            changed.borrow_and_update();
            let waited = started.elapsed();
            let behind = waited < max_wait
                && match &ticket {
                    Some(ticket) => !ticket.first(),
                    None => !line.is_empty(),
                };
            if behind {
                if ticket.is_none() {
                    ticket = Some(line.join());
                }
                if waiter.is_none() {
                    waiter = Some(Waiter::new(&ops, &waiting));
                }
                let nap = LOOK_AGAIN.min(max_wait - waited);
                let sleep = std::pin::pin!(tokio::time::sleep(nap));
                let change = std::pin::pin!(changed.changed());
                first_of(sleep, change).await;
                continue;
            }
            let (reply, answer) = oneshot::channel();
            if !ops.send(Op::Take { need, reply }) {
                return Err(NotTaken::Closed);
            }
            let refused = match answer.await {
                Ok(Ok(reservation)) => return Ok(reservation),
                Ok(Err(refused)) => refused,
                Err(_) => return Err(NotTaken::Closed),
            };
            let waited = started.elapsed();
            if waited >= max_wait {
                return Err(refuse(&ops, refused, waited));
            }
            let (until, sure) = match &refused {
                // The provider's pause holds every caller until it ends; a spent requests
                // window gets a request back only from a call that went away.
                Refused::SecondaryRateLimited { until, .. } => (*until, true),
                Refused::RateLimited {
                    reset_at, resource, ..
                } => (*reset_at, resource == "requests"),
                _ => (0, false),
            };
            // The refusal's times are the ledger's: counted from its clock.
            let ahead = Duration::from_millis(until.saturating_sub(self.ctx.clock.now_ms()).max(1));
            if sure && ahead > max_wait - waited {
                // The same answer after the whole wait: given now, with its retry-after.
                return Err(refuse(&ops, refused, waited));
            }
            if waiter.is_none() {
                log::debug!("a request waits for the budget: {refused}");
                waiter = Some(Waiter::new(&ops, &waiting));
            }
            if ticket.is_none() {
                ticket = Some(line.join());
            }
            let nap = ahead.min(LOOK_AGAIN).min(max_wait - waited);
            let sleep = std::pin::pin!(tokio::time::sleep(nap));
            let change = std::pin::pin!(changed.changed());
            first_of(sleep, change).await;
        }
    }

    /// Ends every lane once its reservations are settled, waiting up to `bound` for their
    /// last calls.
    pub(crate) async fn close(&self, bound: Duration) {
        self.lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        let workers = std::mem::take(
            &mut *self
                .workers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let all = tokio::task::spawn_blocking(move || {
            for worker in workers {
                let _ = worker.join();
            }
        });
        if tokio::time::timeout(bound, all).await.is_err() {
            log::warn!(
                "the budget ledger's last calls did not end within {} ms; reservations still \
                 in flight expire after 10 min",
                bound.as_millis()
            );
        }
    }
}

/// Whether a lane last used at `used` is idle at `now`: unused for [`IDLE_LANE`] or longer.
fn idle(used: Instant, now: Instant) -> bool {
    now.duration_since(used) >= IDLE_LANE
}

/// The way into a lane, for one take.
struct LaneRef {
    ops: Arc<LaneTx>,
    changed: watch::Receiver<u64>,
    waiting: Arc<AtomicU64>,
    line: Arc<Line>,
}

/// The refusal a client gets after waiting `waited`, journaled once (by the lane, which may
/// write files).
fn refuse(ops: &LaneTx, refused: Refused, waited: Duration) -> NotTaken {
    let waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
    let refused = match refused {
        Refused::RateLimited {
            resource, reset_at, ..
        } => Refused::RateLimited {
            resource,
            reset_at,
            waited_ms,
        },
        Refused::SecondaryRateLimited { until, .. } => {
            Refused::SecondaryRateLimited { until, waited_ms }
        }
        other => other,
    };
    ops.send(Op::Refused {
        refused: refused.clone(),
    });
    NotTaken::Refused { refused, waited }
}

/// Waits for whichever of two futures ends first.
async fn first_of<A: Future, B: Future>(
    mut a: std::pin::Pin<&mut A>,
    mut b: std::pin::Pin<&mut B>,
) {
    std::future::poll_fn(|cx| {
        if a.as_mut().poll(cx).is_ready() || b.as_mut().poll(cx).is_ready() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

/// A lane's thread: its calls, in order, a batch at a time, until every way in is gone.
fn work(
    ctx: &Ctx,
    key: &CredentialKey,
    rx: &mpsc::Receiver<Op>,
    ops: &Weak<LaneTx>,
    changed: &watch::Sender<u64>,
    waiting: &AtomicU64,
) {
    // What the state was last told of this lane's waiting requests, and when.
    let mut told: (u64, Option<Instant>) = (0, None);
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        drain(rx, &mut batch);
        if batch.len() < BATCH
            && batch.iter().any(Op::is_call)
            && !batch.iter().any(|op| matches!(op, Op::Take { .. }))
            && let Ok(op) = rx.recv_timeout(ctx.linger)
        {
            batch.push(op);
            drain(rx, &mut batch);
        }
        if run(ctx, key, batch, ops) {
            changed.send_modify(|n| *n = n.wrapping_add(1));
        }
        // Said when it changes, and again every second while requests wait (a waiting
        // request tries again at least that often, so the lane runs); a word older than 5 s
        // is not counted by readers.
        let now = waiting.load(Ordering::SeqCst);
        let stale = told.1.is_none_or(|at| at.elapsed() >= LOOK_AGAIN);
        if now != told.0 || (now > 0 && stale) {
            let said = ctx
                .ledger
                .note_waiting(&ctx.provider, key, &ctx.waiter, now);
            if matches!(said, Observed::Recorded) {
                told = (now, Some(Instant::now()));
            }
        }
    }
    if told.0 > 0 {
        let _ = ctx.ledger.note_waiting(&ctx.provider, key, &ctx.waiter, 0);
    }
}

/// Moves what else is queued (up to [`BATCH`]) into `batch`.
fn drain(rx: &mpsc::Receiver<Op>, batch: &mut Vec<Op>) {
    while batch.len() < BATCH {
        match rx.try_recv() {
            Ok(op) => batch.push(op),
            Err(_) => break,
        }
    }
}

impl Op {
    /// Whether it is a ledger call (a take, an observation or a release).
    fn is_call(&self) -> bool {
        matches!(
            self,
            Op::Take { .. } | Op::Observe { .. } | Op::Release { .. }
        )
    }

    /// The ledger call it is, for [`Ledger::change_model_batch`].
    fn change<'a>(&'a self, consumer: &'a str) -> Option<ModelChange<'a>> {
        match self {
            Op::Take { need, .. } => Some(ModelChange::Take {
                need: *need,
                consumer,
            }),
            Op::Observe {
                reservation,
                observation,
                head,
            } => Some(ModelChange::Observe {
                reservation: reservation.as_deref(),
                observation,
                head: *head,
            }),
            Op::Release { reservation } => Some(ModelChange::Release { reservation }),
            Op::Refused { .. } | Op::Waiting => None,
        }
    }
}

/// Makes a batch of calls; `true` when a response or a release was recorded (a waiting take
/// may go now). Two calls or more are made together, under one lock and one write
/// ([`Ledger::change_model_batch`]); when the ledger cannot (its lock stays busy, its state
/// cannot be read or written), nothing was recorded and each is made alone, with its own
/// handling of that trouble.
fn run(ctx: &Ctx, key: &CredentialKey, batch: Vec<Op>, ops: &Weak<LaneTx>) -> bool {
    let mut made = None;
    if batch.iter().filter(|op| op.is_call()).count() >= 2 {
        let changes: Vec<ModelChange<'_>> = batch
            .iter()
            .filter_map(|op| op.change(&ctx.consumer))
            .collect();
        match ctx.ledger.change_model_batch(&ctx.provider, key, &changes) {
            Ok(taken) => made = Some(taken.into_iter()),
            Err(trouble) => log::debug!(
                "{} calls of the {} budget are made one at a time: {}",
                changes.len(),
                ctx.provider.name(),
                chain(&trouble)
            ),
        }
    }
    let mut recorded = false;
    for op in batch {
        match op {
            Op::Take { need, reply } => {
                // One try: a refused take is tried again by its request, and journaled once,
                // when its client is refused.
                let taken = match made.as_mut().and_then(Iterator::next) {
                    Some(taken) => taken,
                    None => ctx
                        .ledger
                        .try_take_model(&ctx.provider, key, need, &ctx.consumer),
                };
                log::trace!("take of {need:?}: {:?}", taken.as_ref().map(|g| g.left));
                let taken = match taken {
                    Ok(grant) => {
                        if let Some(trouble) = &grant.unaccounted {
                            log::warn!(
                                "a request goes unaccounted by the {} budget: {}",
                                ctx.provider.name(),
                                chain(trouble)
                            );
                        }
                        match ops.upgrade() {
                            Some(ops) => Ok(Reservation {
                                id: grant.reservation,
                                ops,
                                settled: false,
                                need,
                            }),
                            None => {
                                if let Some(id) = grant.reservation {
                                    release(ctx, key, &id);
                                }
                                continue;
                            }
                        }
                    }
                    Err(refused) => Err(refused),
                };
                // A request gone meanwhile drops the reservation, which queues its release.
                let _ = reply.send(taken);
            }
            Op::Observe {
                reservation,
                observation,
                head,
            } => {
                log::trace!(
                    "observe {} ({}): {:?} {:?}",
                    observation.status,
                    if head { "head" } else { "settles" },
                    observation.windows,
                    observation.usage
                );
                if made.is_none() {
                    observe(ctx, key, reservation.as_deref(), head, &observation);
                }
                recorded = true;
            }
            Op::Release { reservation } => {
                log::trace!("release");
                if made.is_none() {
                    release(ctx, key, &reservation);
                }
                recorded = true;
            }
            Op::Refused { refused } => {
                ctx.ledger
                    .journal_model_refusal(&ctx.provider, key, &ctx.consumer, &refused);
            }
            Op::Waiting => {}
        }
    }
    recorded
}

/// Records a response, trying the lock for up to [`OBSERVE_PATIENCE`]; when it cannot, the
/// reservation is given back rather than left in flight.
fn observe(
    ctx: &Ctx,
    key: &CredentialKey,
    reservation: Option<&str>,
    head: bool,
    observation: &ProviderObservation,
) {
    let (started, start_ms) = (Instant::now(), ctx.clock.now_ms());
    let elapsed = || {
        Duration::from_millis(ctx.clock.now_ms().saturating_sub(start_ms)).max(started.elapsed())
    };
    loop {
        let observed = match (head, reservation) {
            (true, Some(id)) => ctx
                .ledger
                .observe_model_head(&ctx.provider, key, id, observation),
            _ => ctx
                .ledger
                .observe_model(&ctx.provider, key, reservation, observation),
        };
        match observed {
            Observed::Recorded => return,
            Observed::Skipped(trouble) => {
                if matches!(trouble, Trouble::LockBusy { .. }) && elapsed() < OBSERVE_PATIENCE {
                    std::thread::sleep(OBSERVE_POLL);
                    continue;
                }
                log::warn!(
                    "a response of {} was not recorded in its budget: {}",
                    ctx.provider.name(),
                    chain(&trouble)
                );
                // A head's reservation is settled by its body (or given back as it drops).
                if !head && let Some(id) = reservation {
                    release(ctx, key, id);
                }
                return;
            }
        }
    }
}

fn release(ctx: &Ctx, key: &CredentialKey, reservation: &str) {
    if let Observed::Skipped(trouble) = ctx.ledger.release(&ctx.provider, key, reservation) {
        log::warn!(
            "a reservation of the {} budget was not given back (it expires after 10 min): {}",
            ctx.provider.name(),
            chain(&trouble)
        );
    }
}

pub(crate) use worklane_stdx::chain;

#[cfg(test)]
mod tests {
    use super::*;
    use worklane_budget::provider::SeenWindow;
    use worklane_budget::{Dimension, Sleep};
    use worklane_lease::{Acquired, Lease, ManualClock, Options, Request};
    use worklane_slotfile::SlotDir;

    const PROVIDER: Provider = Provider::Anthropic;

    /// A slot directory of the test's own, and a manual clock for its ledgers.
    struct Site {
        temp: tempfile::TempDir,
        dir: SlotDir,
        clock: ManualClock,
    }

    impl Site {
        fn new() -> Site {
            let temp = tempfile::tempdir().expect("temp dir");
            let dir = SlotDir::open(temp.path()).expect("the slot directory");
            Site {
                temp,
                dir,
                // The wall clock's time: the ledger sweeps state files older than 2 h by it.
                clock: ManualClock::at(SystemClock.now_ms()),
            }
        }

        fn ledger(&self) -> Ledger {
            Ledger::new(self.dir.clone()).clock(Arc::new(self.clock.clone()))
        }

        /// `key`'s state file.
        fn state(&self, key: &CredentialKey) -> serde_json::Value {
            let path = self.temp.path().join(key.state_name_of(PROVIDER.name()));
            serde_json::from_slice(&std::fs::read(path).expect("the state")).expect("JSON")
        }

        /// The budget's lock, held as another process's call would hold it.
        fn hold_lock(&self, key: &CredentialKey) -> Lease {
            let lock = key.lock_name_of(PROVIDER.name());
            match worklane_lease::acquire(
                &self.dir,
                &lock,
                &Request::new("holder"),
                &Options::process(),
            )
            .expect("acquire")
            {
                Acquired::Held(lease) => lease,
                Acquired::Refused(r) => panic!("refused: {r}"),
            }
        }
    }

    /// Lets the manual clock advance instead of sleeping, and releases a held lock once the
    /// clock reaches `free_at`, as its holder finishing would.
    struct FreeAt {
        clock: ManualClock,
        free_at: u64,
        held: Mutex<Option<Lease>>,
    }

    impl Sleep for FreeAt {
        fn sleep(&self, duration: Duration) {
            self.clock
                .advance(u64::try_from(duration.as_millis()).expect("ms"));
            if self.clock.now_ms() >= self.free_at
                && let Some(lease) = self.held.lock().expect("not poisoned").take()
            {
                lease.release().expect("release");
            }
        }
    }

    fn window(site: &Site, dimension: Dimension) -> SeenWindow {
        SeenWindow {
            dimension,
            limit: Some(1_000_000),
            remaining: 1_000_000,
            reset_at: site.clock.now_ms() + 60_000,
        }
    }

    /// The windows known, and one take of 100 input and 50 output tokens in flight: its id.
    fn one_take(site: &Site, key: &CredentialKey) -> String {
        let ledger = site.ledger();
        let known = ProviderObservation {
            status: 200,
            windows: [
                Dimension::Requests,
                Dimension::Tokens,
                Dimension::InputTokens,
                Dimension::OutputTokens,
            ]
            .map(|d| window(site, d))
            .to_vec(),
            ..ProviderObservation::default()
        };
        assert!(matches!(
            ledger.observe_model(&PROVIDER, key, None, &known),
            Observed::Recorded
        ));
        let need = Need {
            input_tokens: 100,
            output_tokens: 50,
        };
        let grant = ledger
            .try_take_model(&PROVIDER, key, need, "test")
            .expect("the take goes");
        grant.reservation.expect("a reservation")
    }

    /// A lane's context on `site`'s ledger whose lock, held now, is freed when the manual
    /// clock reaches `free_at` (its waits pass on that clock at once).
    fn busy_until(site: &Site, key: &CredentialKey, free_at: u64) -> (Ctx, Arc<FreeAt>) {
        let sleeper = Arc::new(FreeAt {
            clock: site.clock.clone(),
            free_at,
            held: Mutex::new(Some(site.hold_lock(key))),
        });
        let ledger = site
            .ledger()
            .sleeper(Arc::clone(&sleeper) as Arc<dyn Sleep>);
        let ctx = Ctx {
            ledger,
            clock: Arc::new(site.clock.clone()),
            provider: PROVIDER,
            consumer: "test".to_owned(),
            waiter: Ledger::waiter_id(),
            linger: LINGER,
        };
        (ctx, sleeper)
    }

    /// The tokens window's `granted` and the reservations in flight.
    fn counted(site: &Site, key: &CredentialKey) -> (u64, usize) {
        let state = site.state(key);
        (
            state["resources"]["tokens"]["granted"]
                .as_u64()
                .unwrap_or_else(|| panic!("a tokens window: {state}")),
            state["inFlight"]
                .as_object()
                .map_or(0, serde_json::Map::len),
        )
    }

    #[test]
    fn a_lane_is_idle_from_ten_minutes_unused() {
        let now = Instant::now();
        let used = now.checked_sub(IDLE_LANE).expect("an instant 10 min ago");
        assert!(idle(used, now), "unused for exactly IDLE_LANE");
        assert!(
            !idle(used + Duration::from_nanos(1), now),
            "a nanosecond less"
        );
        assert!(!idle(now, now), "just used");
    }

    /// A lane's context on `site`'s ledger.
    fn plain(site: &Site) -> Ctx {
        Ctx {
            ledger: site.ledger(),
            clock: Arc::new(site.clock.clone()),
            provider: PROVIDER,
            consumer: "test".to_owned(),
            waiter: Ledger::waiter_id(),
            linger: LINGER,
        }
    }

    /// A lane's thread makes its calls a batch of at most `BATCH` at a time, and wakes the
    /// waiting requests once for each batch that recorded a response or a release (a batch of
    /// words of waiting wakes nobody, and writes nothing while no request waits).
    #[test]
    fn a_lane_works_a_batch_at_a_time_and_wakes_waiters_once_a_batch() {
        let site = Site::new();
        let ctx = plain(&site);
        let run_all = |key: &CredentialKey, calls: Vec<Op>| {
            let (ops, rx) = ops();
            for call in calls {
                assert!(ops.send(call));
            }
            let weak = Arc::downgrade(&ops);
            drop(ops);
            let (changed, woken) = watch::channel(0u64);
            work(&ctx, key, &rx, &weak, &changed, &AtomicU64::new(0));
            *woken.borrow()
        };
        let quiet = CredentialKey::of_token("sk-quiet-not-real");
        let woken = run_all(&quiet, (0..3).map(|_| Op::Waiting).collect());
        assert_eq!(woken, 0, "words of waiting wake nobody");
        assert!(
            !site
                .temp
                .path()
                .join(quiet.state_name_of(PROVIDER.name()))
                .exists(),
            "nobody waits, as the state was last told: nothing written"
        );
        // 3 words and 62 releases: a batch of 64, then one of 1.
        let busy = CredentialKey::of_token("sk-busy-lane-not-real");
        let calls = (0..3)
            .map(|_| Op::Waiting)
            .chain((0..62).map(|i| Op::Release {
                reservation: format!("{i:016x}"),
            }))
            .collect();
        assert_eq!(
            run_all(&busy, calls),
            2,
            "two batches, each woke the waiters once"
        );
    }

    /// A lane says in the state how many of its requests wait when the number changes, and
    /// at its end says none if the last word it wrote was not none.
    #[test]
    fn a_lane_s_last_word_of_waiting_is_none() {
        let site = Site::new();
        let key = CredentialKey::of_token("sk-last-word-not-real");
        let waiting = Arc::new(AtomicU64::new(0));
        let (ops, rx) = ops();
        let weak = Arc::downgrade(&ops);
        let worker = std::thread::spawn({
            let (ctx, key, waiting) = (plain(&site), key.clone(), Arc::clone(&waiting));
            move || {
                let (changed, _woken) = watch::channel(0u64);
                work(&ctx, &key, &rx, &weak, &changed, &waiting);
            }
        });
        let said = || {
            let path = site.temp.path().join(key.state_name_of(PROVIDER.name()));
            std::fs::read(path).ok().map(|bytes| {
                let state: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
                state["waiting"]
                    .as_object()
                    .map_or(0, |w| w.values().filter_map(|v| v["calls"].as_u64()).sum())
            })
        };
        waiting.store(1, Ordering::SeqCst);
        assert!(ops.send(Op::Waiting));
        let started = Instant::now();
        while said() != Some(1) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the lane says a request waits"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // The request went without its word reaching the lane (as when that write found the
        // lock busy); the lane ends.
        waiting.store(0, Ordering::SeqCst);
        drop(ops);
        worker.join().expect("the lane's thread");
        assert_eq!(said(), Some(0), "its last word: none waits");
    }

    /// A way into a lane whose calls the test reads.
    fn ops() -> (Arc<LaneTx>, mpsc::Receiver<Op>) {
        let (tx, rx) = mpsc::channel();
        (Arc::new(LaneTx(tx)), rx)
    }

    fn reservation(ops: &Arc<LaneTx>) -> Reservation {
        Reservation {
            id: Some("r1".to_owned()),
            ops: Arc::clone(ops),
            settled: false,
            need: Need {
                input_tokens: 7,
                output_tokens: 3,
            },
        }
    }

    /// What a reservation queues: its head recorded (the reservation kept), its settlement
    /// (nothing more when it drops), or its release when dropped unsettled; and what it
    /// reserved, as a usage.
    #[test]
    fn a_reservation_queues_its_head_its_settlement_or_its_release() {
        let (ops, calls) = ops();
        assert!(ops.send(Op::Waiting), "a lane that listens takes a call");
        assert!(matches!(calls.try_recv(), Ok(Op::Waiting)));
        let settled = reservation(&ops);
        assert_eq!(
            settled.estimate(),
            Usage {
                input_tokens: 7,
                output_tokens: 3
            }
        );
        settled.record(ProviderObservation {
            status: 201,
            ..ProviderObservation::default()
        });
        assert!(matches!(
            calls.try_recv(),
            Ok(Op::Observe { reservation: Some(id), observation, head: true })
                if id == "r1" && observation.status == 201
        ));
        settled.settle(ProviderObservation {
            status: 202,
            ..ProviderObservation::default()
        });
        assert!(matches!(
            calls.try_recv(),
            Ok(Op::Observe { reservation: Some(id), observation, head: false })
                if id == "r1" && observation.status == 202
        ));
        assert!(
            calls.try_recv().is_err(),
            "a settled reservation is not released"
        );
        drop(reservation(&ops));
        assert!(matches!(
            calls.try_recv(),
            Ok(Op::Release { reservation }) if reservation == "r1"
        ));
        drop(calls);
        assert!(!ops.send(Op::Waiting), "a lane that ended takes no call");
    }

    /// A waiting request is counted, and the lane told, while it lives.
    #[test]
    fn a_waiter_is_counted_while_it_lives() {
        let (ops, calls) = ops();
        let waiting = Arc::new(AtomicU64::new(0));
        let first = Waiter::new(&ops, &waiting);
        let second = Waiter::new(&ops, &waiting);
        assert_eq!(waiting.load(Ordering::SeqCst), 2);
        drop(first);
        assert_eq!(waiting.load(Ordering::SeqCst), 1);
        drop(second);
        assert_eq!(waiting.load(Ordering::SeqCst), 0);
        assert_eq!(
            calls
                .try_iter()
                .filter(|c| matches!(c, Op::Waiting))
                .count(),
            4,
            "each change told"
        );
    }

    /// `first_of` ends when either future ends, and not before.
    #[test]
    fn first_of_ends_with_either() {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut poll = |a: bool, b: bool| {
            let mut a = std::pin::pin!(async move {
                if !a {
                    std::future::pending::<()>().await;
                }
            });
            let mut b = std::pin::pin!(async move {
                if !b {
                    std::future::pending::<()>().await;
                }
            });
            let mut both = std::pin::pin!(first_of(a.as_mut(), b.as_mut()));
            both.as_mut().poll(&mut cx).is_ready()
        };
        assert!(!poll(false, false), "neither ended");
        assert!(poll(true, false) && poll(false, true) && poll(true, true));
    }

    /// A take with nobody waiting for the budget goes at once, without joining the line; one
    /// that finds another request in line waits behind it, however much the budget has left,
    /// and goes when that one leaves.
    #[test]
    fn a_take_goes_at_once_with_nobody_in_line_and_waits_behind_a_request_in_line() {
        let site = Site::new();
        let lanes = Lanes::new(site.ledger(), PROVIDER, "test".to_owned());
        let key = CredentialKey::of_token("sk-line-not-real");
        let lane = lanes.lane(&key).expect("the lane");
        let need = Need {
            input_tokens: 1,
            output_tokens: 1,
        };
        let bound = Duration::from_secs(20);
        let wait = Duration::from_secs(60);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(async {
                let mut changed = lane.changed.clone();
                changed.borrow_and_update();
                let taken = tokio::time::timeout(bound, lanes.take(&key, need, wait))
                    .await
                    .unwrap_or_else(|_| panic!("an empty line: the take goes at once"));
                assert!(taken.is_ok(), "it goes");
                assert!(
                    !changed.has_changed().expect("the lane"),
                    "it never joined the line (leaving it wakes the lane)"
                );
                assert_eq!(lane.waiting.load(Ordering::SeqCst), 0);
                let ahead = lane.line.join();
                let behind = lanes.take(&key, need, wait);
                let mut behind = std::pin::pin!(behind);
                let early = tokio::time::timeout(Duration::from_millis(300), behind.as_mut()).await;
                assert!(early.is_err(), "it waits behind the request in line");
                assert_eq!(lane.waiting.load(Ordering::SeqCst), 1, "counted waiting");
                drop(ahead);
                let taken = tokio::time::timeout(bound, behind)
                    .await
                    .unwrap_or_else(|_| panic!("it goes when the one ahead leaves"));
                assert!(taken.is_ok(), "it goes");
                assert_eq!(lane.waiting.load(Ordering::SeqCst), 0);
            });
    }

    /// Runs `test` on a runtime whose clock is paused (a nap passes at once, exactly as long
    /// as asked), in a thread of its own: one that never ends fails the test after 20 s.
    fn paused<T: Send + 'static>(test: impl Future<Output = T> + Send + 'static) -> T {
        let (done, result) = mpsc::channel();
        std::thread::spawn(move || {
            let out = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .expect("a runtime")
                .block_on(test);
            let _ = done.send(out);
        });
        result
            .recv_timeout(Duration::from_secs(20))
            .expect("the test's waits end")
    }

    /// How long a take of `key` waits on the paused clock, with `max_wait`, and whether it
    /// went; behind a request that stays in line when `behind`.
    fn waits(site: Site, key: CredentialKey, max_wait: Duration, behind: bool) -> (Duration, bool) {
        paused(async move {
            let lanes = Lanes::new(site.ledger(), PROVIDER, "test".to_owned());
            let lane = lanes.lane(&key).expect("the lane");
            let _ahead = behind.then(|| lane.line.join());
            let need = Need {
                input_tokens: 1,
                output_tokens: 1,
            };
            let started = tokio::time::Instant::now();
            let taken = lanes.take(&key, need, max_wait).await;
            (started.elapsed(), taken.is_ok())
        })
    }

    /// A request behind another in line waits its whole wait, in naps of at most a second,
    /// the last one cut to what is left, then tries once wherever it stands (and goes, with
    /// the budget free): after exactly its wait, not a nap later.
    #[test]
    fn a_take_behind_another_tries_once_when_its_wait_is_over() {
        let key = CredentialKey::of_token("sk-behind-not-real");
        let (waited, went) = waits(Site::new(), key, Duration::from_millis(1_500), true);
        assert!(went, "it went at the end of its wait");
        assert!(
            (Duration::from_millis(1_500)..Duration::from_millis(1_510)).contains(&waited),
            "after its 1.5 s: {waited:?}"
        );
    }

    /// A take refused for a window that may come back early (tokens: a reservation given back
    /// frees some) tries again every second, the last nap cut to what is left of its wait,
    /// and is refused when the wait is over: after exactly its wait, not a nap later.
    #[test]
    fn a_take_refused_for_tokens_tries_until_its_wait_is_over() {
        let site = Site::new();
        let key = CredentialKey::of_token("sk-spent-tokens-not-real");
        let spent = ProviderObservation {
            status: 200,
            windows: vec![
                window(&site, Dimension::Requests),
                SeenWindow {
                    remaining: 0,
                    ..window(&site, Dimension::Tokens)
                },
            ],
            ..ProviderObservation::default()
        };
        assert!(matches!(
            site.ledger().observe_model(&PROVIDER, &key, None, &spent),
            Observed::Recorded
        ));
        let (waited, went) = waits(site, key, Duration::from_millis(1_500), false);
        assert!(!went, "refused: the tokens stayed spent");
        assert!(
            (Duration::from_millis(1_500)..Duration::from_millis(1_510)).contains(&waited),
            "after its 1.5 s: {waited:?}"
        );
    }

    /// A refusal sure to last past the rest of the wait (a spent requests window resetting
    /// after it) is answered at once, also after the request waited in line: what is left of
    /// its wait is compared, not the whole wait.
    #[test]
    fn a_sure_refusal_after_a_wait_in_line_is_answered_at_once() {
        let site = Site::new();
        let key = CredentialKey::of_token("sk-sure-after-line-not-real");
        let spent = ProviderObservation {
            status: 200,
            windows: vec![SeenWindow {
                remaining: 0,
                reset_at: site.clock.now_ms() + 10_000,
                ..window(&site, Dimension::Requests)
            }],
            ..ProviderObservation::default()
        };
        assert!(matches!(
            site.ledger().observe_model(&PROVIDER, &key, None, &spent),
            Observed::Recorded
        ));
        let (waited, went) = paused(async move {
            let lanes = Lanes::new(site.ledger(), PROVIDER, "test".to_owned());
            let lane = lanes.lane(&key).expect("the lane");
            let ahead = lane.line.join();
            let take = tokio::spawn(async move {
                let need = Need {
                    input_tokens: 1,
                    output_tokens: 1,
                };
                let started = tokio::time::Instant::now();
                let taken = lanes.take(&key, need, Duration::from_secs(10)).await;
                (started.elapsed(), taken.is_ok())
            });
            tokio::time::sleep(Duration::from_millis(1_200)).await;
            drop(ahead);
            take.await.expect("the take")
        });
        assert!(!went, "refused: the window resets after the wait");
        assert!(
            (Duration::from_millis(1_200)..Duration::from_millis(1_210)).contains(&waited),
            "refused as soon as it tried, after its 1.2 s in line: {waited:?}"
        );
    }

    /// A clock that follows the runtime's (paused) one from `base_ms`, read from any thread:
    /// the ledger's time passes exactly as the take's naps do.
    struct RuntimeClock {
        runtime: tokio::runtime::Handle,
        started: tokio::time::Instant,
        base_ms: u64,
    }

    impl Clock for RuntimeClock {
        fn now_ms(&self) -> u64 {
            let _inside = self.runtime.enter();
            let passed = tokio::time::Instant::now().duration_since(self.started);
            self.base_ms + u64::try_from(passed.as_millis()).expect("ms")
        }
    }

    /// A refusal sure to last exactly the rest of the wait (a spent requests window that
    /// resets as the wait ends) is not answered at once: the take looks again, and goes
    /// when the window resets, at the end of its wait.
    #[test]
    fn a_window_resetting_as_the_wait_ends_is_waited_for() {
        let site = Site::new();
        let key = CredentialKey::of_token("sk-reset-at-the-end-not-real");
        let wait = Duration::from_secs(2);
        let base_ms = site.clock.now_ms();
        let spent = ProviderObservation {
            status: 200,
            windows: vec![SeenWindow {
                remaining: 0,
                reset_at: base_ms + 2_000,
                ..window(&site, Dimension::Requests)
            }],
            ..ProviderObservation::default()
        };
        assert!(matches!(
            site.ledger().observe_model(&PROVIDER, &key, None, &spent),
            Observed::Recorded
        ));
        let dir = site.dir.clone();
        let (waited, went) = paused(async move {
            let clock: Arc<dyn Clock> = Arc::new(RuntimeClock {
                runtime: tokio::runtime::Handle::current(),
                started: tokio::time::Instant::now(),
                base_ms,
            });
            let lanes = Lanes {
                ctx: Arc::new(Ctx {
                    ledger: Ledger::new(dir).clock(Arc::clone(&clock)),
                    clock,
                    provider: PROVIDER,
                    consumer: "test".to_owned(),
                    waiter: Ledger::waiter_id(),
                    linger: LINGER,
                }),
                lanes: Mutex::default(),
                workers: Mutex::default(),
            };
            let need = Need {
                input_tokens: 1,
                output_tokens: 1,
            };
            let started = tokio::time::Instant::now();
            let went = lanes.take(&key, need, wait).await.is_ok();
            (started.elapsed(), went)
        });
        assert!(went, "it went as the window reset");
        assert!(
            (Duration::from_secs(2)..Duration::from_millis(2_010)).contains(&waited),
            "at the end of its 2 s: {waited:?}"
        );
    }

    /// One lane per key, made on first use with its thread; a lane unused for
    /// `IDLE_LANE` is dropped when another is made; each live lane's thread is kept for
    /// `close` to join, and `close` ends every lane and joins their threads.
    #[test]
    fn one_lane_per_key_an_idle_one_dropped_and_every_thread_joined_at_close() {
        let site = Site::new();
        let lanes = Lanes::new(site.ledger(), PROVIDER, "test".to_owned());
        let [a, b, c] = ["a", "b", "c"].map(|t| CredentialKey::of_token(&format!("sk-{t}")));
        let first = lanes.lane(&a).expect("a lane");
        let again = lanes.lane(&a).expect("a lane");
        assert!(Arc::ptr_eq(&first.ops, &again.ops), "one lane for one key");
        let other = lanes.lane(&b).expect("b's lane");
        assert!(!Arc::ptr_eq(&first.ops, &other.ops), "a lane per key");
        let keys = |lanes: &Lanes| {
            let mut keys: Vec<CredentialKey> =
                lanes.lanes.lock().expect("lanes").keys().cloned().collect();
            keys.sort_by_key(|k| k.state_name_of("p"));
            keys
        };
        let mut both = vec![a.clone(), b.clone()];
        both.sort_by_key(|k| k.state_name_of("p"));
        assert_eq!(keys(&lanes), both, "a lane in use is kept");
        let threads = |lanes: &Lanes| lanes.workers.lock().expect("workers").len();
        assert_eq!(
            threads(&lanes),
            2,
            "each lane's thread is kept, to be joined"
        );
        // a's lane was last used longer ago than IDLE_LANE: the next lane made drops it.
        lanes
            .lanes
            .lock()
            .expect("lanes")
            .get_mut(&a)
            .expect("a")
            .used -= IDLE_LANE + Duration::from_secs(1);
        let third = lanes.lane(&c).expect("c's lane");
        let mut kept = vec![b.clone(), c.clone()];
        kept.sort_by_key(|k| k.state_name_of("p"));
        assert_eq!(keys(&lanes), kept, "the idle lane is dropped");
        assert_eq!(
            threads(&lanes),
            3,
            "its thread lives on while a way in is held, and is still joined"
        );
        drop((first, again, other, third));
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(lanes.close(Duration::from_secs(60)));
        assert!(keys(&lanes).is_empty(), "every lane ended");
        assert_eq!(threads(&lanes), 0, "every thread joined");
    }

    /// The epoch of `key`'s budget lock now (reading it takes the lock once more).
    fn lock_epoch(site: &Site, key: &CredentialKey) -> u64 {
        let lease = site.hold_lock(key);
        let epoch = lease.epoch();
        lease.release().expect("release");
        epoch
    }

    /// A take's answer, waited for at most a minute (a lane that never answers fails the
    /// test rather than hanging it).
    fn answer_of(
        answer: oneshot::Receiver<Result<Reservation, Refused>>,
    ) -> Result<Reservation, Refused> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(answer.blocking_recv()));
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the lane answers the take within a minute")
            .expect("the lane answers")
    }

    /// A response's settlement waits for the next request's take, and the two are one call
    /// of the ledger (its lock taken once): the request waits for one call, not two. A take
    /// alone does not wait for anything.
    #[test]
    fn a_settlement_and_the_next_take_are_one_call_of_the_ledger() {
        let site = Site::new();
        let key = CredentialKey::of_token("sk-one-call-not-real");
        let id = one_take(&site, &key);
        let before = lock_epoch(&site, &key);
        let (ops, rx) = ops();
        let weak = Arc::downgrade(&ops);
        let worker = std::thread::spawn({
            let key = key.clone();
            let mut ctx = plain(&site);
            // Longer than the test: a take alone that waited would fail it.
            ctx.linger = Duration::from_secs(3600);
            move || {
                let (changed, _woken) = watch::channel(0u64);
                work(&ctx, &key, &rx, &weak, &changed, &AtomicU64::new(0));
            }
        });
        let need = Need {
            input_tokens: 100,
            output_tokens: 50,
        };
        assert!(
            ops.send(Op::Observe {
                reservation: Some(id),
                observation: ProviderObservation {
                    status: 200,
                    ..ProviderObservation::default()
                }
                .with_usage(Some(Usage {
                    input_tokens: 10,
                    output_tokens: 5,
                })),
                head: false,
            })
        );
        // The next request comes a little later, as a client's does.
        std::thread::sleep(Duration::from_millis(50));
        let (reply, answer) = oneshot::channel();
        assert!(ops.send(Op::Take { need, reply }));
        let mut next = answer_of(answer).expect("the take goes");
        assert_eq!(
            counted(&site, &key),
            (15 + 150, 1),
            "the response settled at its usage, then the next request reserved"
        );
        assert_eq!(
            lock_epoch(&site, &key),
            before + 2,
            "one take of the lock for both (and one to read its epoch)"
        );
        next.settled = true;
        drop(next);
        // A take with nothing before it goes at once.
        let (reply, answer) = oneshot::channel();
        assert!(ops.send(Op::Take { need, reply }));
        let mut alone = answer_of(answer).expect("the take goes");
        alone.settled = true;
        drop((alone, ops));
        worker.join().expect("the lane's thread");
        assert_eq!(counted(&site, &key), (15 + 150 + 150, 2));
    }

    /// A batch whose lock stays busy past a take's patience is made a call at a time, each
    /// with its own patience: the settlement waits on, then the take goes.
    #[test]
    fn a_batch_the_ledger_cannot_make_is_made_a_call_at_a_time() {
        let site = Site::new();
        let key = CredentialKey::of_token("sk-one-at-a-time-not-real");
        let id = one_take(&site, &key);
        let start = site.clock.now_ms();
        let (ctx, sleeper) = busy_until(&site, &key, start + 700);
        let (ops, _rx) = ops();
        let (reply, mut answer) = oneshot::channel();
        let recorded = run(
            &ctx,
            &key,
            vec![
                Op::Observe {
                    reservation: Some(id),
                    observation: ProviderObservation {
                        status: 200,
                        ..ProviderObservation::default()
                    }
                    .with_usage(Some(Usage {
                        input_tokens: 10,
                        output_tokens: 5,
                    })),
                    head: false,
                },
                Op::Take {
                    need: Need {
                        input_tokens: 100,
                        output_tokens: 50,
                    },
                    reply,
                },
            ],
            &Arc::downgrade(&ops),
        );
        assert!(recorded, "the settlement was recorded");
        assert!(
            sleeper.held.lock().expect("not poisoned").is_none(),
            "the lock was freed meanwhile"
        );
        let mut next = answer.try_recv().expect("answered").expect("the take goes");
        next.settled = true;
        assert!(next.id.is_some(), "counted");
        assert_eq!(counted(&site, &key), (15 + 150, 1), "settled, then taken");
    }

    /// A take queued with words of waiting is one ledger call: under a lock that stays busy
    /// it goes unaccounted after the half second a take waits, not after a batch's half
    /// second and then its own.
    #[test]
    fn a_take_beside_words_of_waiting_waits_for_the_lock_once() {
        let site = Site::new();
        let key = CredentialKey::of_token("sk-take-and-words-not-real");
        let start = site.clock.now_ms();
        let (ctx, _sleeper) = busy_until(&site, &key, start + 60_000);
        let (ops, _rx) = ops();
        let (reply, mut answer) = oneshot::channel();
        run(
            &ctx,
            &key,
            vec![
                Op::Waiting,
                Op::Take {
                    need: Need::default(),
                    reply,
                },
                Op::Waiting,
            ],
            &Arc::downgrade(&ops),
        );
        let mut went = answer
            .try_recv()
            .expect("answered")
            .expect("it goes, unaccounted");
        went.settled = true;
        assert!(went.id.is_none(), "not counted: the lock stayed busy");
        assert_eq!(
            site.clock.now_ms() - start,
            worklane_budget::ledger::LOCK_PATIENCE_MS,
            "one wait for the lock"
        );
    }

    /// A response's settlement that finds the budget's lock busy tries it for 1 s (on the
    /// ledger's clock): freed within that second, the usage settles the reservation; freed
    /// after it, while the reservation is given back instead, the estimate goes back; never
    /// freed, the reservation is left in flight (it expires).
    #[test]
    fn a_settlement_waits_a_second_for_a_busy_lock_then_gives_the_reservation_back() {
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 5,
        };
        let settles = ProviderObservation {
            status: 200,
            ..ProviderObservation::default()
        }
        .with_usage(Some(usage));
        // The first try gives up at 500 ms, the second at 1 000 ms: the observation's
        // patience is over then, and the release tries until 1 500 ms.
        for (free_in, expected, what) in [
            (700, (15, 0), "settled by its usage, on the second try"),
            (1_200, (0, 0), "given back after the second of patience"),
            (3_000, (150, 1), "left in flight: not even given back"),
        ] {
            let site = Site::new();
            let key = CredentialKey::of_token("sk-busy-not-real");
            let id = one_take(&site, &key);
            assert_eq!(counted(&site, &key), (150, 1), "the take's estimate");
            let start = site.clock.now_ms();
            let (ctx, sleeper) = busy_until(&site, &key, start + free_in);
            observe(&ctx, &key, Some(&id), false, &settles);
            if let Some(lease) = sleeper.held.lock().expect("not poisoned").take() {
                lease.release().expect("release");
            }
            assert_eq!(
                counted(&site, &key),
                expected,
                "a lock freed {free_in} ms after the response: {what}"
            );
        }
    }

    /// A stream's head settles the windows it reports at once and leaves the rest of the
    /// reservation in flight for its body; when its lock stays busy, the reservation is not
    /// given back (its body settles it).
    #[test]
    fn a_head_settles_what_it_reports_and_leaves_the_rest_to_its_body() {
        for (free_in, in_flight) in [(0, 1), (1_200, 1)] {
            let site = Site::new();
            let head = ProviderObservation {
                status: 200,
                windows: vec![window(&site, Dimension::Requests)],
                ..ProviderObservation::default()
            };
            let key = CredentialKey::of_token("sk-head-not-real");
            let id = one_take(&site, &key);
            let start = site.clock.now_ms();
            let (ctx, sleeper) = busy_until(&site, &key, start + free_in);
            if free_in == 0 {
                sleeper.held.lock().expect("not poisoned").take();
            }
            observe(&ctx, &key, Some(&id), true, &head);
            let state = site.state(&key);
            let units = &state["inFlight"][&id]["units"];
            assert_eq!(
                counted(&site, &key).1,
                in_flight,
                "lock free in {free_in} ms: the body settles the reservation: {state}"
            );
            if free_in == 0 {
                assert!(
                    units.get("requests").is_none() && units["tokens"] == 150,
                    "the head settled the request alone: {units}"
                );
            }
        }
    }
}
