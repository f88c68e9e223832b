//! The slot pool: agent slots, test-run slots, the full-run lock, and what blocks them.

use crate::Error;
use crate::drain::{DRAIN_FILE, DrainState};
use crate::stop::{self, Stop};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use worklane_lease::{
    Acquired, Clock, Judgement, Lease, LiveWhy, Liveness, Options, ProcessLiveness, Record,
    Refusal, Request, SystemClock, TtlLiveness, acquire,
};
use worklane_slotfile::{Config, Environment, Locations, Resolved, SlotDir, SlotPath};

/// The lock held while counting and taking slots.
pub const SLOTS_LOCK: &str = "slots.lock";
/// The full-run lock.
pub const FULL_RUN_LOCK: &str = "full-run.lock";

/// What kind of slot to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One running agent: `agent-<i>.lock`, capped by `max_agents`.
    Agent,
    /// One coordinator test run: `test-<i>.lock`, capped by `max_test_runs`.
    Test {
        /// The run's own time limit, recorded as `limit_ms`.
        limit_ms: Option<u64>,
    },
    /// The machine's one full test run: `full-run.lock`.
    FullRun,
}

impl Kind {
    /// The kind's name as the CLI and `slots --json` show it.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::Test { .. } => "test",
            Kind::FullRun => "full-run",
        }
    }

    fn prefix(self) -> Option<&'static str> {
        match self {
            Kind::Agent => Some("agent"),
            Kind::Test { .. } => Some("test"),
            Kind::FullRun => None,
        }
    }
}

/// What keeps a slot from being taken now.
#[derive(Debug, Clone, PartialEq)]
pub enum Blocker {
    /// An emergency STOP is in force.
    Stop(Stop),
    /// An update drain is in force.
    Drain(crate::drain::Drain),
    /// The kind's cap is reached.
    AtCap {
        /// Live slots of the kind.
        held: u32,
        /// The cap.
        cap: u32,
    },
    /// Another full run holds the full-run lock.
    FullRunHeld(Box<Refusal>),
    /// Another process has held `slots.lock` for over 2 s (counting takes milliseconds: it
    /// may be stopped, and the machine's pool with it, until it continues or dies).
    Counting,
    /// Waiters of the kind stand in line before this place (the line, `crate::line`).
    InLine {
        /// Live entries before it (the first proved live, the rest as listed).
        ahead: u32,
        /// Records of the kind's slots present (as listed, not probed).
        held: u32,
        /// The kind's cap.
        cap: u32,
    },
}

impl Blocker {
    /// Whether this is a refusal by an operator (STOP or drain) rather than contention.
    #[must_use]
    pub fn is_operator_refusal(&self) -> bool {
        matches!(self, Blocker::Stop(_) | Blocker::Drain(_))
    }
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocker::Stop(stop) => write!(f, "{stop} (worklane resume-all lifts it)"),
            Blocker::Drain(drain) => write!(
                f,
                "an update is draining the machine: {drain} (worklane undrain ends it early)"
            ),
            Blocker::AtCap { held, cap } => write!(f, "at cap: {held} of {cap} held"),
            Blocker::FullRunHeld(refusal) => write!(f, "a full run is in progress: {refusal}"),
            Blocker::InLine { ahead, held, cap } => {
                write!(f, "{ahead} waiting in line before it, {held} of {cap} held")
            }
            Blocker::Counting => f.write_str(
                "slots.lock has been held for over 2 s (is its holder stopped? `worklane slots` \
                 names it)",
            ),
        }
    }
}

/// A held slot. Dropping it releases the slot.
#[derive(Debug)]
#[must_use = "the slot is released as soon as it is dropped"]
pub struct Slot {
    kind: Kind,
    lease: Lease,
}

impl Slot {
    /// The slot's kind.
    #[must_use]
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The slot's file name (`agent-3.lock`).
    #[must_use]
    pub fn name(&self) -> &str {
        self.lease.resource()
    }

    /// The held lease (its record, epoch, guard).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Adds fields to the slot's record (see `Lease::annotate`), e.g. the process that runs
    /// under it.
    pub fn annotate(
        &mut self,
        fields: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), Error> {
        self.lease.annotate(fields).map_err(Error::Held)
    }

    /// Gives the slot up without releasing it: its record stays and its held guard is returned,
    /// for a holder that passes the guard's descriptor to another process, which takes the
    /// slot over with [`Pool::adopt`].
    #[must_use]
    pub fn hand_over(self) -> Option<worklane_guard::Guard> {
        self.lease.hand_over()
    }

    /// Releases the slot now, reporting errors.
    pub fn release(self) -> Result<(), Error> {
        self.lease.release().map_err(Error::Held)
    }
}

/// The outcome of a nonblocking take.
#[derive(Debug)]
#[must_use]
// Returned once per take and moved straight into a binding: boxing the held slot would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Take {
    /// The slot is ours.
    Held(Slot),
    /// It cannot be taken now.
    Blocked(Blocker),
}

/// One slot or lease file as seen by [`Pool::snapshot`].
#[derive(Debug, Clone, PartialEq)]
pub struct SlotView {
    /// File name.
    pub name: String,
    /// `agent`, `test`, `full-run`, `role` or `lock`.
    pub kind: &'static str,
    /// The record, when it parses.
    pub record: Option<Record>,
    /// The verdict on its holder.
    pub state: SlotState,
}

/// The verdict on a slot's holder.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotState {
    /// Its kernel guard is held: a live process owns it.
    GuardHeld,
    /// Judged live or unknown from its record (guard free); counts as held.
    Live(LiveWhy),
    /// Its holder is dead: free to take over.
    Dead(worklane_lease::DeadWhy),
}

impl SlotState {
    /// Whether the slot counts as held.
    #[must_use]
    pub fn is_held(&self) -> bool {
        !matches!(self, SlotState::Dead(_))
    }
}

/// Everything `worklane slots` shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The slot directory.
    pub dir: PathBuf,
    /// The caps in force.
    pub config: Config,
    /// STOP, if in force.
    pub stop: Option<Stop>,
    /// The drain flag.
    pub drain: DrainState,
    /// Every slot, run and lease file, sorted by name.
    pub slots: Vec<SlotView>,
    /// Stray and broken files, each with what it does and its fix.
    pub problems: Vec<crate::Problem>,
    /// The waiting lines, each kind's in order.
    pub line: Vec<crate::line::LineView>,
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

/// The machine's slot pool in one slot directory.
#[derive(Clone)]
pub struct Pool {
    dir: SlotDir,
    locations: Locations,
    env: Environment,
    clock: Arc<dyn Clock>,
    /// When this pool (and its clones) last swept temp files, on its clock (0: never).
    last_sweep_ms: Arc<AtomicU64>,
    /// The inotify instances its waiting takes use, kept for reuse (`crate::watch`).
    watches: Arc<crate::watch::Watches>,
}

/// How often one pool sweeps temp files: only temps older than a minute are removed, so a
/// long-lived pool (the dispatcher) lists the directory for them at most every 10 s instead of
/// at every take. A pool's first take always sweeps.
pub const SWEEP_EVERY_MS: u64 = worklane_slotfile::TEMP_MIN_AGE_MS / 6;

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("dir", &self.dir)
            .field("config", &self.locations.config)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// The pool of a resolved slot directory (see `SlotDir::resolve`).
    #[must_use]
    pub fn new(resolved: Resolved) -> Pool {
        Pool {
            dir: resolved.dir,
            locations: resolved.locations,
            env: resolved.env,
            clock: Arc::new(SystemClock),
            last_sweep_ms: Arc::new(AtomicU64::new(0)),
            watches: Arc::default(),
        }
    }

    /// Uses `clock` for drain decisions and record times.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Pool {
        self.clock = clock;
        // Sweep times are on the clock: a new clock starts a new count.
        self.last_sweep_ms = Arc::new(AtomicU64::new(0));
        self
    }

    /// The clock it decides by.
    #[must_use]
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    /// The slot directory.
    #[must_use]
    pub fn dir(&self) -> &SlotDir {
        &self.dir
    }

    /// Where the directory, config and drain flag are.
    #[must_use]
    pub fn locations(&self) -> &Locations {
        &self.locations
    }

    /// The caps, re-read from the config file (an operator may change them while we run).
    pub fn config(&self) -> Result<Config, Error> {
        Ok(Config::load_in(&self.env, &self.locations.config)?)
    }

    /// The emergency STOP, if in force.
    pub fn stop(&self) -> Result<Option<Stop>, Error> {
        stop::read(&self.dir)
    }

    fn drain_dir(&self) -> Result<SlotDir, Error> {
        if self.locations.drain_dir == self.locations.slot_dir {
            Ok(self.dir.clone())
        } else {
            Ok(SlotDir::open_in(&self.env, &self.locations.drain_dir)?)
        }
    }

    /// The drain flag and whether it is in force now.
    pub fn drain(&self) -> Result<DrainState, Error> {
        let raw = match self.drain_dir() {
            Ok(dir) => match dir.file(DRAIN_FILE)?.read() {
                Ok(None) => None,
                Ok(Some(raw)) => Some(Ok(raw)),
                Err(e) => Some(Err(e.to_string())),
            },
            // A missing /var/lib/worklane means no flag.
            Err(Error::Open(worklane_slotfile::open::Error::Missing { .. })) => None,
            Err(e) => Some(Err(e.to_string())),
        };
        Ok(DrainState::decide(raw, self.clock.now_ms()))
    }

    /// Writes the drain flag (`update-drain.json`, mode 0644).
    pub fn write_drain(&self, drain: &crate::drain::Drain) -> Result<(), Error> {
        let mut bytes = serde_json::to_vec(drain).unwrap_or_default();
        bytes.push(b'\n');
        self.drain_dir()?.file(DRAIN_FILE)?.replace(&bytes, 0o644)?;
        Ok(())
    }

    /// Removes the drain flag; `Ok(false)` if there was none.
    pub fn remove_drain(&self) -> Result<bool, Error> {
        Ok(self.drain_dir()?.file(DRAIN_FILE)?.remove()?)
    }

    /// What STOP or drain blocks every new slot, if anything.
    pub fn operator_blocker(&self) -> Result<Option<Blocker>, Error> {
        if let Some(stop) = self.stop()? {
            return Ok(Some(Blocker::Stop(stop)));
        }
        if let DrainState::InForce(drain) = self.drain()? {
            return Ok(Some(Blocker::Drain(drain)));
        }
        Ok(None)
    }

    fn options(&self) -> Options {
        Options::process().clock(Arc::clone(&self.clock))
    }

    /// Tries once to take a slot of `kind` for `request`. It waits only for another counter
    /// to release `slots.lock` (milliseconds; at most about 2 s before [`Blocker::Counting`]).
    ///
    /// It takes its turn in the line too: while a live waiter of its kind stands in line at
    /// priority 0 or above, it is [`Blocker::InLine`] ([`Pool::try_take_at`] for another
    /// priority).
    pub fn try_take(&self, kind: Kind, request: &Request) -> Result<Take, Error> {
        self.try_take_at(kind, request, 0, self.clock.now_ms())
    }

    /// [`Pool::try_take`] for a place of `priority` that started waiting at `start_ms` (the
    /// dispatcher's rows keep their original start): refused while a live entry of the line
    /// stands before it.
    pub fn try_take_at(
        &self,
        kind: Kind,
        request: &Request,
        priority: i64,
        start_ms: u64,
    ) -> Result<Take, Error> {
        self.try_take_until(kind, request, None, Some((priority, start_ms, None)))
    }

    /// [`Pool::try_take`] for the holder of the place `own` in line: refused while a live entry
    /// stands before that place (its own entry does not count).
    pub fn try_take_as(
        &self,
        kind: Kind,
        request: &Request,
        own: &crate::line::Entry,
    ) -> Result<Take, Error> {
        self.try_take_until(
            kind,
            request,
            None,
            Some((own.priority, own.start_ms, Some(own))),
        )
    }

    /// [`Blocker::InLine`] for `ahead` entries: the kind's cap and its records as listed.
    fn in_line(&self, kind: Kind, ahead: u32) -> Result<Blocker, Error> {
        let names = self.dir.list()?;
        let (held, cap) = match kind.prefix() {
            Some(prefix) => (
                names
                    .iter()
                    .filter(|p| slot_index(prefix, p.name()).is_some())
                    .count(),
                self.cap(kind)?,
            ),
            None => (
                names.iter().filter(|p| p.name() == FULL_RUN_LOCK).count(),
                1,
            ),
        };
        Ok(Blocker::InLine {
            ahead,
            held: u32::try_from(held).unwrap_or(u32::MAX),
            cap,
        })
    }

    /// Whether a change to `name` may let a waiter of `kind` on: a slot of its kind released,
    /// a place in its line left, STOP, the drain flag or the config changed.
    pub(crate) fn wakes(kind: Kind, name: &str) -> bool {
        let slot = match kind.prefix() {
            Some(prefix) => slot_index(prefix, name).is_some(),
            None => name == FULL_RUN_LOCK,
        };
        slot || crate::line::Entry::parse(name).is_some_and(|e| e.kind == kind.label())
            || matches!(name, crate::STOP_FILE | DRAIN_FILE | "config.json")
    }

    /// [`Pool::try_take`] that also gives up on a busy `slots.lock` at `deadline`.
    ///
    /// `line`: the place (priority, start, own entry) whose turn in the waiting line it checks,
    /// or `None` for a waiter already found at the head. For agents and test runs the check is
    /// made under `slots.lock` from the count's own listing; for the full run, before.
    fn try_take_until(
        &self,
        kind: Kind,
        request: &Request,
        deadline: Option<Instant>,
        line: Option<(i64, u64, Option<&crate::line::Entry>)>,
    ) -> Result<Take, Error> {
        if let Some(blocker) = self.operator_blocker()? {
            return Ok(Take::Blocked(blocker));
        }
        let mut request = request.clone();
        if let Kind::Test {
            limit_ms: Some(limit),
        } = kind
        {
            request = request.field("limit_ms", limit);
        }
        let Some((prefix, cap)) = kind.prefix().map(|p| (p, self.cap(kind))) else {
            if let Some((priority, start_ms, own)) = line {
                let listed = self.dir.list_prefixed(crate::line::LINE_PREFIX)?;
                let ahead = self.ahead_in(kind, &listed, priority, start_ms, own)?;
                if ahead > 0 {
                    return Ok(Take::Blocked(self.in_line(kind, ahead)?));
                }
            }
            return match self.acquire_settled(FULL_RUN_LOCK, &request)? {
                Acquired::Held(lease) => Ok(Take::Held(Slot { kind, lease })),
                Acquired::Refused(refusal) => {
                    Ok(Take::Blocked(Blocker::FullRunHeld(Box::new(refusal))))
                }
            };
        };
        let cap = cap?;
        let Some(counting) = self.hold_slots_lock(deadline)? else {
            return Ok(Take::Blocked(Blocker::Counting));
        }; // Re-check under slots.lock: a STOP written a moment ago wins.
        if let Some(blocker) = self.operator_blocker()? {
            return Ok(Take::Blocked(blocker));
        }
        let (files, hidden) = self.dir.list_with_hidden()?;
        if let Some((priority, start_ms, own)) = line {
            let ahead = self.ahead_in(kind, &files, priority, start_ms, own)?;
            if ahead > 0 {
                counting.release().map_err(Error::Held)?;
                return Ok(Take::Blocked(self.in_line(kind, ahead)?));
            }
        }
        let slots = self.kind_slots_in(prefix, files, &hidden)?;
        let held: Vec<u32> = slots
            .iter()
            .filter(|(_, _, state)| state.is_held())
            .map(|(i, _, _)| *i)
            .collect();
        let live = u32::try_from(held.len()).unwrap_or(u32::MAX);
        if live >= cap {
            counting.release().map_err(Error::Held)?;
            return Ok(Take::Blocked(Blocker::AtCap { held: live, cap }));
        }
        let mut index = 0u32;
        let taken = loop {
            if !held.contains(&index) {
                let name = format!("{prefix}-{index}.lock");
                match self.acquire_settled(&name, &request) {
                    Ok(Acquired::Held(lease)) => break lease,
                    Ok(Acquired::Refused(_)) => {}
                    // A stray file where this index's guard belongs: nobody can hold this
                    // index, so it is skipped (and counted only if a record stands there);
                    // `worklane slots` names the file.
                    Err(Error::Lease(worklane_lease::Error::Guard(e))) if broken_guard(&e) => {}
                    // An epoch that cannot grow: that index cannot be taken again (never
                    // reused with the same epoch); `worklane slots` names the file.
                    Err(Error::Lease(worklane_lease::Error::Epoch { .. })) => {}
                    Err(e) => return Err(e),
                }
            }
            index += 1;
        };
        self.sweep();
        counting.release().map_err(Error::Held)?;
        Ok(Take::Held(Slot { kind, lease: taken }))
    }

    /// Removes temp files that killed writers left (older than a minute, held by nobody), so
    /// the directory cannot grow without bound. Best effort: what it cannot remove stays for
    /// the next take, and `worklane slots` reports it.
    ///
    /// At most once per [`SWEEP_EVERY_MS`] per pool; a clock that went back sweeps at once.
    fn sweep(&self) {
        let now = self.clock.now_ms();
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        if last != 0 && now >= last && now - last < SWEEP_EVERY_MS {
            return;
        }
        self.last_sweep_ms.store(now.max(1), Ordering::Relaxed);
        let _ = self
            .dir
            .sweep_temps(now, worklane_slotfile::TEMP_MIN_AGE_MS);
    }

    /// Takes `slots.lock`, waiting up to about 2 s (or until `deadline`, if sooner) for another
    /// counter to finish (counting takes microseconds to milliseconds). It is always tried at
    /// least once. `None` only if it stays busy that long.
    fn hold_slots_lock(&self, deadline: Option<Instant>) -> Result<Option<Lease>, Error> {
        let request = Request::new("counting slots");
        for _ in 0..2000 {
            if let Acquired::Held(lease) =
                acquire(&self.dir, SLOTS_LOCK, &request, &self.options())?
            {
                return Ok(Some(lease));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(None)
    }

    /// Acquires `name`, retrying for a few milliseconds while its guard is held with no record
    /// behind it: that is a momentary probe (`worklane slots`, the idle probe, a child being
    /// forked by another thread), never a holder, which always has a record.
    fn acquire_settled(&self, name: &str, request: &Request) -> Result<Acquired, Error> {
        let mut tries = 0;
        loop {
            let got = acquire(&self.dir, name, request, &self.options())?;
            match &got {
                Acquired::Refused(r) if r.why == LiveWhy::GuardHeld && r.holder.is_none() => {
                    tries += 1;
                    if tries >= 50 {
                        return Ok(got);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                _ => return Ok(got),
            }
        }
    }

    fn cap(&self, kind: Kind) -> Result<u32, Error> {
        let config = self.config()?;
        Ok(match kind {
            Kind::Agent => config.max_agents,
            Kind::Test { .. } => config.max_test_runs,
            Kind::FullRun => 1,
        })
    }

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
        match self.try_take_until(kind, request, deadline, Some((wait.priority, now, None)))? {
            Take::Held(slot) => return Ok(Take::Held(slot)),
            Take::Blocked(blocker) if blocker.is_operator_refusal() => {
                return Ok(Take::Blocked(blocker));
            }
            Take::Blocked(_) => {}
        }
        let place = self.join_line(kind, wait.priority, request)?;
        // Made only when a look finds it must wait: a take that goes at once watches nothing.
        let mut watch = None;
        let mut pause = Duration::from_millis(25);
        loop {
            let me = place.entry();
            let standing = self.standing(kind, me.priority, me.start_ms, Some(me))?;
            let blocker = if standing.ahead == 0 {
                match self.try_take_until(kind, request, deadline, None)? {
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
            if blocker.is_operator_refusal() {
                let _ = place.leave();
                return Ok(Take::Blocked(blocker));
            }
            let waited = started.elapsed();
            if wait.timeout.is_some_and(|t| waited >= t) {
                let _ = place.leave();
                return Ok(Take::Blocked(blocker));
            }
            (wait.on_wait)(&Waiting {
                blocker: &blocker,
                waited,
                position: standing.ahead.saturating_add(1),
                in_line: standing.in_line,
            });
            let mut nap = pause;
            if let Some(t) = wait.timeout {
                nap = nap.min(t.saturating_sub(waited));
            }
            let Some(watch) = watch.as_mut() else {
                // Watching from now on, then one more look: a release since the last look
                // made no event this watch could see.
                watch = Some(self.watches.watch(&self.dir));
                continue;
            };
            pause = if watch.wait(nap, &|name| Pool::wakes(kind, name)) {
                // Woken by a change: a holder's release removes its record a moment before
                // it closes its guard, so a look that comes too soon is repeated shortly.
                Duration::from_millis(2)
            } else {
                (pause * 2).min(LOOK_AGAIN_AT_MOST)
            };
        }
    }

    /// Slots of one kind: `(index, path, state)` for every `<prefix>-<i>.lock`.
    fn kind_slots_in(
        &self,
        prefix: &str,
        files: Vec<SlotPath>,
        hidden: &[String],
    ) -> Result<Vec<(u32, SlotPath, SlotState)>, Error> {
        let mut out = Vec::new();
        for path in files {
            let Some(index) = slot_index(prefix, path.name()) else {
                continue;
            };
            let state = self.state_of(&path, &ProcessLiveness)?;
            out.push((index, path, state));
        }
        for (index, path) in self.recordless_held(prefix, hidden)? {
            if !out.iter().any(|(i, _, _)| *i == index) {
                out.push((index, path, SlotState::GuardHeld));
            }
        }
        Ok(out)
    }

    /// The slots of `prefix` whose guard is held with no record behind it: the holder's record
    /// is released, but processes of its run (which inherited the guard's descriptor, such as
    /// a daemon the command left running) still hold it. They count as live until they exit.
    ///
    /// A guard found busy is probed again twice, a millisecond apart: a reader's momentary
    /// probe (`worklane slots`, the idle probe) lasts microseconds.
    fn recordless_held(
        &self,
        prefix: &str,
        hidden: &[String],
    ) -> Result<Vec<(u32, SlotPath)>, Error> {
        let mut held = Vec::new();
        for name in hidden {
            let Some(worklane_guard::reclaim::Entry::Guard { resource }) =
                worklane_guard::reclaim::classify(name)
            else {
                continue;
            };
            let Some(index) = slot_index(prefix, &resource) else {
                continue;
            };
            let path = self.dir.file(&resource)?;
            if path.read().is_ok_and(|r| r.is_some()) {
                continue;
            }
            let busy = (0..3).all(|attempt| {
                if attempt > 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                matches!(path.try_guard(), Ok(None))
            });
            if busy {
                held.push((index, path));
            }
        }
        Ok(held)
    }

    /// Judges one slot: a held guard is live; with the guard free, the record decides.
    ///
    /// A slot whose own files are broken (its record a symbolic link, a FIFO or over 64 KiB,
    /// its guard not an empty regular file) cannot be judged, so it counts as held and is
    /// reported; it never fails the count of every other slot.
    fn state_of(&self, path: &SlotPath, liveness: &dyn Liveness) -> Result<SlotState, Error> {
        Ok(self.observe(path, liveness)?.0)
    }

    /// The state of one slot file and, when its guard was free, the record bytes that state
    /// was judged from (read under the guard, so the two belong together).
    fn observe(
        &self,
        path: &SlotPath,
        liveness: &dyn Liveness,
    ) -> Result<(SlotState, Option<Vec<u8>>), Error> {
        use worklane_guard::acquire::Error as GuardError;
        use worklane_slotfile::read::Error as ReadError;
        let guard = match path.try_guard() {
            Ok(Some(guard)) => guard,
            Ok(None) => return Ok((SlotState::GuardHeld, None)),
            Err(
                e @ (GuardError::Symlink { .. }
                | GuardError::NotRegular { .. }
                | GuardError::NotEmpty { .. }),
            ) => {
                return Ok((
                    SlotState::Live(LiveWhy::Other(format!("its guard is broken: {e}"))),
                    None,
                ));
            }
            Err(e) => return Err(e.into()),
        };
        let raw = match path.read() {
            Ok(raw) => raw,
            Err(
                e @ (ReadError::Symlink { .. }
                | ReadError::NotRegular { .. }
                | ReadError::TooLarge { .. }),
            ) => {
                return Ok((
                    SlotState::Live(LiveWhy::Malformed {
                        detail: e.to_string(),
                    }),
                    None,
                ));
            }
            Err(e) => return Err(e.into()),
        };
        let state = match &raw {
            None => SlotState::Dead(worklane_lease::DeadWhy::Other("no record".into())),
            Some(raw) => match Record::parse(raw) {
                Err(e) => SlotState::Live(LiveWhy::Malformed {
                    detail: e.to_string(),
                }),
                Ok(record) => match liveness.judge(&record, &worklane_lease::Now::of(&*self.clock))
                {
                    Judgement::Live(why) => SlotState::Live(why),
                    Judgement::Dead(why) => SlotState::Dead(why),
                },
            },
        };
        drop(guard);
        Ok((state, raw))
    }

    /// Whether the machine is idle for a full run started outside any harness: no live full
    /// run (decided from the lock, not from processes).
    pub fn idle(&self) -> Result<bool, Error> {
        let path = self.dir.file(FULL_RUN_LOCK)?;
        Ok(!self.state_of(&path, &ProcessLiveness)?.is_held())
    }

    /// Takes over the slot `name` whose held guard another process handed to this one (`fd`,
    /// received over `SCM_RIGHTS`): checks that `fd` is that slot's guard and holds its lock,
    /// then rewrites the record to name this process, keeping the epoch.
    pub fn adopt(
        &self,
        name: &str,
        fd: std::os::fd::OwnedFd,
        request: &Request,
    ) -> Result<Slot, Error> {
        let kind = if slot_index("agent", name).is_some() {
            Kind::Agent
        } else if slot_index("test", name).is_some() {
            Kind::Test { limit_ms: None }
        } else if name == FULL_RUN_LOCK {
            Kind::FullRun
        } else {
            return Err(Error::NotASlot {
                name: name.to_owned(),
            });
        };
        let guard = worklane_guard::Guard::from_received(fd, &self.dir, self.dir.path(), name)?;
        let lease = worklane_lease::adopt(&self.dir, name, guard, request, &self.options())?;
        Ok(Slot { kind, lease })
    }

    /// Every slot, run, lease and lock file with its verdict, plus caps, STOP and drain.
    pub fn snapshot(&self) -> Result<Snapshot, Error> {
        let mut slots = Vec::new();
        let (files, hidden) = self.dir.list_with_hidden()?;
        for path in files {
            let name = path.name();
            let (kind, liveness): (&'static str, Box<dyn Liveness>) =
                if slot_index("agent", name).is_some() {
                    ("agent", Box::new(ProcessLiveness))
                } else if slot_index("test", name).is_some() {
                    ("test", Box::new(ProcessLiveness))
                } else if name == FULL_RUN_LOCK {
                    ("full-run", Box::new(ProcessLiveness))
                } else if name.starts_with("role-") && name.ends_with(".lease") {
                    ("role", Box::new(TtlLiveness::default()))
                } else if name.ends_with(".lease") {
                    ("lease", Box::new(TtlLiveness::default()))
                } else if name.ends_with(".lock") {
                    ("lock", Box::new(ProcessLiveness))
                } else {
                    continue;
                };
            // The state first, then the record: a free guard's record is the one the state was
            // judged from; a held guard's record is read after the probe, so it never names a
            // holder that had already left before it. A record that cannot be read is shown
            // without one; its state says why.
            let (state, raw) = self.observe(&path, liveness.as_ref())?;
            let raw = match raw {
                Some(raw) => Some(raw),
                None if matches!(state, SlotState::GuardHeld) => path.read().ok().flatten(),
                None => None,
            };
            let record = raw.and_then(|raw| Record::parse(&raw).ok());
            slots.push(SlotView {
                name: name.to_owned(),
                kind,
                record,
                state,
            });
        }
        // Guards held with no record: what a finished run left running still holds its slot.
        for (prefix, kind) in [("agent", "agent"), ("test", "test")] {
            for (_, path) in self.recordless_held(prefix, &hidden)? {
                if !slots.iter().any(|v| v.name == path.name()) {
                    slots.push(SlotView {
                        name: path.name().to_owned(),
                        kind,
                        record: None,
                        state: SlotState::GuardHeld,
                    });
                }
            }
        }
        slots.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Snapshot {
            dir: self.dir.path().to_owned(),
            config: self.config()?,
            stop: self.stop()?,
            drain: self.drain()?,
            slots,
            problems: crate::problems::scan(&self.dir, self.clock.now_ms()),
            line: self.line_views()?,
        })
    }
}

/// A command that a lock or lease record names as running under it (`commandProcess`, written
/// by `worklane run`, `lease run` and the queued full run), read without any lock: the input
/// of STOP's enforcement, which halts such commands when their supervisor cannot.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCommand {
    /// The lock or lease file naming it.
    pub resource: String,
    /// The record (its holder is the supervisor).
    pub record: Record,
    /// The command's pid, in the record's pid namespace.
    pub pid: u32,
    /// The command's start identity when recorded.
    pub start: Option<u64>,
    /// Whether the command leads a process group of its own (signalled whole).
    pub group: bool,
    /// Who may have written the record file (owner, mode, links): a record that others than
    /// its owner could have written proves nothing about the command it names.
    pub writer: worklane_slotfile::Written,
    /// The resource's guard (device and inode), when there is one: the processes holding a
    /// copy of its descriptor are the run's (process-liveness locks).
    pub guard: Option<worklane_guard::FileId>,
}

impl Pool {
    /// Every command named by a record in the directory. Files that cannot be read or parsed,
    /// or name no command, are skipped: this is a best-effort view for enforcement.
    pub fn recorded_commands(&self) -> Result<Vec<RecordedCommand>, Error> {
        let mut found = Vec::new();
        for path in self.dir.list()? {
            let name = path.name();
            if !(name.ends_with(".lock") || name.ends_with(".lease")) {
                continue;
            }
            let Ok(Some((raw, writer))) = path.read_with_owner() else {
                continue;
            };
            let Ok(record) = Record::parse(&raw) else {
                continue;
            };
            let Some(command) = record.extra.get("commandProcess") else {
                continue;
            };
            let Some(pid) = command
                .get("pid")
                .and_then(serde_json::Value::as_u64)
                .and_then(|p| u32::try_from(p).ok())
                .filter(|&p| p > 0)
            else {
                continue;
            };
            found.push(RecordedCommand {
                resource: name.to_owned(),
                pid,
                start: command.get("start").and_then(serde_json::Value::as_u64),
                group: command.get("group") == Some(&serde_json::Value::Bool(true)),
                guard: name.ends_with(".lock").then(|| path.guard_id()).flatten(),
                record,
                writer,
            });
        }
        Ok(found)
    }
}

/// Whether a guard error means a stray file sits where the guard belongs (a directory, FIFO,
/// symbolic link or non-empty file), which no process following the protocol can hold.
fn broken_guard(e: &worklane_guard::acquire::Error) -> bool {
    use worklane_guard::acquire::Error as G;
    match e {
        G::Symlink { .. } | G::NotRegular { .. } | G::NotEmpty { .. } => true,
        // A guard this user may not open (its mode, or a group it is not in).
        G::Io { source, .. } => source.kind() == std::io::ErrorKind::PermissionDenied,
        _ => false,
    }
}

/// `Some(i)` when `name` is `<prefix>-<i>.lock` with `i` a plain decimal number.
#[must_use]
pub fn slot_index(prefix: &str, name: &str) -> Option<u32> {
    let digits = name
        .strip_prefix(prefix)?
        .strip_prefix('-')?
        .strip_suffix(".lock")?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::slot_index;

    #[test]
    fn a_waiter_wakes_for_its_kinds_slots_its_line_stop_drain_and_config() {
        use super::{Kind, Pool};
        let test = Kind::Test { limit_ms: None };
        for (kind, name, wakes) in [
            (Kind::Agent, "agent-3.lock", true),
            (Kind::Agent, "test-3.lock", false),
            (test, "test-0.lock", true),
            (Kind::FullRun, "full-run.lock", true),
            (Kind::Agent, "full-run.lock", false),
            (Kind::Agent, "line-agent.0.5.0123456789abcdef", true),
            (Kind::Agent, "line-test.0.5.0123456789abcdef", false),
            (test, "line-test.0.5.0123456789abcdef", true),
            (
                Kind::Agent,
                "line-agent.0.5.0123456789abcdef.epoch.1",
                false,
            ),
            (Kind::FullRun, "STOP", true),
            (Kind::Agent, "update-drain.json", true),
            (Kind::Agent, "config.json", true),
            (Kind::Agent, "slots.lock", false),
            (Kind::Agent, ".agent-0.lock.tmp-0123456789abcdef", false),
            (Kind::Agent, "queue-x.json", false),
        ] {
            assert_eq!(Pool::wakes(kind, name), wakes, "{} {name}", kind.label());
        }
    }

    #[test]
    fn only_a_stray_file_or_a_forbidden_guard_is_a_broken_guard() {
        use std::path::PathBuf;
        use worklane_guard::acquire::Error as G;
        let path = PathBuf::from("/slots/.agent-0.lock.flock");
        let io = |kind: std::io::ErrorKind| G::Io {
            op: "open",
            path: path.clone(),
            source: std::io::Error::from(kind),
        };
        let broken = [
            G::Symlink { path: path.clone() },
            G::NotRegular {
                path: path.clone(),
                kind: "directory",
            },
            G::NotEmpty {
                path: path.clone(),
                size: 3,
            },
            io(std::io::ErrorKind::PermissionDenied),
        ];
        for e in &broken {
            assert!(super::broken_guard(e), "skipped: {e}");
        }
        let not = [
            G::StdStreamClosed {
                path: path.clone(),
                fd: 0,
            },
            G::NotHeld { path: path.clone() },
            io(std::io::ErrorKind::OutOfMemory),
        ];
        for e in &not {
            assert!(!super::broken_guard(e), "an error, not a skip: {e}");
        }
    }

    #[test]
    fn slot_names() {
        assert_eq!(slot_index("agent", "agent-0.lock"), Some(0));
        assert_eq!(slot_index("agent", "agent-17.lock"), Some(17));
        for bad in [
            "agent-.lock",
            "agent-01.lock",
            "agent-1.lock.epoch",
            "agent-1.lock.0123456789abcdef.claim",
            "agent-x.lock",
            "test-1.lock",
            "agent-+1.lock",
        ] {
            assert_eq!(slot_index("agent", bad), None, "{bad}");
        }
    }
}
