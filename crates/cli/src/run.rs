//! `worklane run` and `worklane lease run`.

use crate::cli::{KindArg, LeaseRunArgs, RunArgs};
use crate::exit::{self, Failure};
use crate::out::errln;
use crate::role::Refused;
use crate::status::{HaltedBy, Status};
use crate::supervise::{Launch, Outcome, Started, Watch, describe, inheritable, supervise};
use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use worklane_admission::{Blocker, Kind, Pool, Slot, Take, Wait, Waiting};
use worklane_lease::{Acquired, Lease, Options, Request, TtlLiveness, acquire, held};

/// A live "waiting" line on a terminal; silent otherwise.
struct Progress {
    shown: bool,
    on_terminal: bool,
    what: &'static str,
}

impl Progress {
    fn new(what: &'static str) -> Progress {
        Progress {
            shown: false,
            on_terminal: crate::out::stderr_is_terminal() && !crate::out::quiet(),
            what,
        }
    }

    fn update(&mut self, waiting: &Waiting<'_>) {
        self.show(&waiting_line(waiting), waiting.waited);
    }

    fn show(&mut self, line: &str, waited: Duration) {
        if !self.on_terminal {
            return;
        }
        crate::out::to_stderr(format_args!(
            "\r\x1b[2Kworklane: waiting for {}: {line}; waited {}s",
            self.what,
            waited.as_secs()
        ));
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown {
            crate::out::to_stderr(format_args!("\r\x1b[2K"));
            self.shown = false;
        }
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, ... `11th`, `12th`, `13th`, `21st`.
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// What the waiting line says: `3rd in line, 2 of 2 held`, or the blocker itself when it is
/// not the line or the cap.
fn waiting_line(waiting: &Waiting<'_>) -> String {
    let place = format!("{} in line", ordinal(waiting.position));
    match waiting.blocker {
        Blocker::AtCap { held, cap } | Blocker::InLine { held, cap, .. } => {
            format!("{place}, {held} of {cap} held")
        }
        other => format!("{place}: {other}"),
    }
}

fn basename(command: &[std::ffi::OsString]) -> String {
    command
        .first()
        .map(|p| {
            std::path::Path::new(p)
                .file_name()
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default()
}

pub(crate) fn run(args: RunArgs) -> Result<ExitCode, Failure> {
    // Claimed before anything opens a descriptor, so N can only be the caller's.
    let mut status = Status::claim(args.status_fd)?;
    let result = run_holding(args, &mut status);
    if let Err(failure) = &result {
        status.failed(failure);
    }
    result
}

/// The `kind` word of `--status-fd` and messages.
fn kind_word(kind: KindArg) -> &'static str {
    match kind {
        KindArg::Agent => "agent",
        KindArg::Test => "test",
        KindArg::FullRun => "full-run",
    }
}

/// What halted the command, for `--status-fd`'s `end`: a halt worklane made (`halt`), else a
/// signal that ended it.
fn halted_by(outcome: &Outcome, halt: HaltedBy) -> Option<HaltedBy> {
    if outcome.halted.is_some() {
        Some(halt)
    } else if outcome.signal.is_some() {
        Some(HaltedBy::Signal)
    } else {
        None
    }
}

fn run_holding(args: RunArgs, status: &mut Status) -> Result<ExitCode, Failure> {
    let started = std::time::Instant::now();
    let limit_ms = args
        .limit
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let (kind, what) = match args.kind {
        KindArg::Agent => (Kind::Agent, "an agent slot"),
        KindArg::Test => (Kind::Test { limit_ms }, "a test-run slot"),
        KindArg::FullRun => (Kind::FullRun, "the full-run lock"),
    };
    if limit_ms.is_some() && args.kind != KindArg::Test {
        return Err(Failure::new(
            exit::USAGE,
            "--limit applies only to --kind test",
        ));
    }
    // Usage is checked before the configuration, so a usage error is never hidden by a 78.
    let pool = crate::taking_pool()?;
    let nested = std::env::var_os(crate::nesting::var(args.kind));
    crate::nesting::refuse_nested(args.kind, pool.dir().path(), nested)?;
    let owner = args
        .owner
        .clone()
        .unwrap_or_else(|| basename(&args.command));
    let request = Request::new(owner).field("command", describe(&args.command));
    let mut progress = Progress::new(what);
    let taken = if args.no_wait {
        let now = pool.clock().now_ms();
        pool.try_take_at(kind, &request, args.priority, now)
            .map_err(crate::config::take_refused)?
    } else {
        pool.take(
            kind,
            &request,
            Wait {
                timeout: args.timeout,
                priority: args.priority,
                on_wait: &mut |waiting| {
                    progress.update(waiting);
                    status.waiting(kind_word(args.kind), &waiting_line(waiting));
                },
            },
        )
        // A config broken while it waited: 78, naming the fix, as at the start.
        .map_err(crate::config::take_refused)?
    };
    progress.clear();
    let slot = match taken {
        Take::Held(slot) => slot,
        Take::Blocked(blocker) if blocker.is_operator_refusal() => {
            let failure = Failure::new(exit::UNAVAILABLE, format!("refused {what}: {blocker}"));
            status.refused(&failure);
            return Err(failure);
        }
        Take::Blocked(blocker) => {
            let why = if args.no_wait {
                "not waiting"
            } else {
                "timed out"
            };
            let failure = Failure::new(
                args.conflict_exit_code,
                format!(
                    "cannot take {what} ({why}): {blocker}; try again later (`worklane slots` \
                     shows who holds what)"
                ),
            );
            status.refused(&failure);
            return Err(failure);
        }
    };
    // Past this host: a place in the fleet pool too, taken after the slot (so a host at its
    // cap never holds a fleet place it cannot use), within what is left of --timeout.
    let left = args.timeout.map(|t| t.saturating_sub(started.elapsed()));
    let mut slot = slot;
    let fleet = crate::fleet::take(
        &args.fleet,
        &request.owner,
        &describe(&args.command),
        args.no_wait,
        left,
        args.conflict_exit_code,
    );
    let mut fleet = match fleet {
        Ok(fleet) => fleet,
        Err(failure) => {
            if let Err(e) = slot.release() {
                errln!("worklane: releasing {what}: {}", exit::chain(&e));
            }
            if failure.code == exit::UNAVAILABLE || failure.code == args.conflict_exit_code {
                status.refused(&failure);
            }
            return Err(failure);
        }
    };
    status.taken(
        kind_word(args.kind),
        slot.name(),
        fleet
            .as_ref()
            .map_or(slot.lease().epoch(), |f| f.epoch().unsigned_abs()),
    );
    let mut launch = slot_launch(&args.command, &slot)?;
    let nesting = crate::nesting::env(args.kind, pool.dir().path(), slot.name());
    launch.env.push(nesting);
    if let Some(place) = &fleet {
        // The command fences with the fleet's epoch (it grows across hosts); the host slot's
        // own epoch stays at hand.
        launch.env.retain(|(name, _)| *name != "WORKLANE_EPOCH");
        launch
            .env
            .push(("WORKLANE_EPOCH", place.epoch().to_string().into()));
        launch.env.push((
            "WORKLANE_HOST_EPOCH",
            slot.lease().epoch().to_string().into(),
        ));
        launch.env.push(("WORKLANE_FLEET_KEY", place.key().into()));
        launch.grace = launch.grace.min(place.ttl() / 4);
    }
    let mut watch = FleetWatch {
        slot: SlotWatch {
            pool: &pool,
            slot: &mut slot,
        },
        place: fleet.as_mut(),
        lost: false,
    };
    let outcome = supervise(launch, &mut watch);
    let lost = watch.lost;
    if let Some(place) = fleet
        && let Err(e) = place.release()
    {
        errln!("worklane: releasing the fleet place: {e}");
    }
    let released = slot.release();
    let outcome = outcome?;
    if let Err(e) = released {
        errln!("worklane: releasing {what}: {}", exit::chain(&e));
    }
    let halt = if lost {
        HaltedBy::LeaseLost
    } else {
        HaltedBy::Stop
    };
    status.end(outcome.code, halted_by(&outcome, halt));
    if let Some(signal) = outcome.signal {
        crate::sys::die_by(signal);
    }
    Ok(ExitCode::from(outcome.code))
}

/// How a command runs under a held slot: it inherits the slot's guard (the slot lives as long
/// as any process of the run) and learns its resource and fencing epoch.
pub(crate) fn slot_launch<'a>(command: &'a [OsString], slot: &Slot) -> Result<Launch<'a>, Failure> {
    let lease = slot.lease();
    Ok(Launch {
        command,
        grace: crate::supervise::GRACE,
        inherit: lease
            .guard()
            .map(inheritable)
            .transpose()?
            .into_iter()
            .collect(),
        env: fencing_env(lease),
    })
}

/// `WORKLANE_RESOURCE` and `WORKLANE_EPOCH` of a held lease, for the command to check at the
/// effect it protects.
fn fencing_env(lease: &Lease) -> Vec<(&'static str, OsString)> {
    vec![
        ("WORKLANE_RESOURCE", lease.resource().into()),
        ("WORKLANE_EPOCH", lease.epoch().to_string().into()),
    ]
}

/// A run's supervision with a fleet place (`--fleet`): the slot's, and the place kept alive;
/// a place lost (or unconfirmed for half its TTL) halts the command.
struct FleetWatch<'a, 'b> {
    slot: SlotWatch<'a>,
    place: Option<&'b mut crate::fleet::Place>,
    lost: bool,
}

impl Watch for FleetWatch<'_, '_> {
    fn started(&mut self, command: &Started) {
        self.slot.started(command);
    }

    fn check(&mut self) -> Option<String> {
        if let Some(reason) = self.slot.check() {
            return Some(reason);
        }
        let reason = self.place.as_mut()?.check()?;
        self.lost = true;
        Some(reason)
    }
}

/// A slot's supervision: the record names the command, and an emergency STOP halts it.
pub(crate) struct SlotWatch<'a> {
    pub(crate) pool: &'a Pool,
    pub(crate) slot: &'a mut Slot,
}

impl Watch for SlotWatch<'_> {
    fn started(&mut self, command: &Started) {
        // Without it only `stop-all`'s enforcement is lost (the supervisor still halts the
        // command on STOP), so the run goes on with a warning.
        if let Err(e) = self.slot.annotate(command.fields()) {
            errln!(
                "worklane: cannot name the command in {}: {}",
                self.slot.name(),
                exit::chain(&e)
            );
        }
    }

    fn check(&mut self) -> Option<String> {
        self.pool.stop().ok().flatten().map(|stop| stop.to_string())
    }
}

/// The shortest TTL `lease run` accepts. The supervisor checks every
/// [`CHECK_EVERY`](crate::supervise::CHECK_EVERY), pulses every TTL/20 (at such a check),
/// and halts the command once its lease has gone unconfirmed for more than TTL/2; with the
/// grace of [`lease_grace`] the command is gone by TTL/2 + one pulse interval rounded up to a
/// check + TTL/4 after its last confirmed pulse, before the lease lapses at TTL, for every
/// TTL from 2 s up (with about TTL/8 to spare for the last pulse's own write).
const MIN_TTL: Duration = Duration::from_secs(2);

/// The SIGTERM-to-SIGKILL grace of a role holder's command: the usual grace, but at most a
/// quarter of the TTL, so a command halted at TTL/2 is gone before its lease can lapse and a
/// successor start.
fn lease_grace(ttl: Duration) -> Duration {
    crate::supervise::GRACE.min(ttl / 4)
}

pub(crate) fn lease_run(args: LeaseRunArgs) -> Result<ExitCode, Failure> {
    // Claimed before anything opens a descriptor, so N can only be the caller's.
    let mut status = Status::claim(args.status_fd)?;
    let result = lease_run_holding(args, &mut status);
    if let Err(failure) = &result {
        status.failed(failure);
    }
    result
}

fn lease_run_holding(args: LeaseRunArgs, status: &mut Status) -> Result<ExitCode, Failure> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if args.role.is_empty() || args.role.starts_with('.') || !args.role.chars().all(plain) {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--role {:?}: a role is a non-empty name of letters, digits, `-`, `_` and `.` \
                 (not starting with `.`); it names the file role-<ROLE>.lease",
                args.role
            ),
        ));
    }
    if args.ttl < MIN_TTL {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--ttl {} ms is too short: worklane pulses once every {} ms at best and must be \
                 able to halt the command before its lease lapses; use at least {} s",
                args.ttl.as_millis(),
                crate::supervise::CHECK_EVERY.as_millis(),
                MIN_TTL.as_secs()
            ),
        ));
    }
    let pool = crate::taking_pool()?;
    let name = format!("role-{}.lease", args.role);
    let ours = describe(&args.command);
    let identity = args.agent_identity.clone().unwrap_or_else(crate::ops::who);
    let request = Request::new(identity.clone())
        .field("role", args.role.clone())
        .field("profile", args.profile.clone())
        .field("agentIdentity", identity)
        .field("entrypoint", ours.clone());
    let options = Options::with_liveness(Arc::new(TtlLiveness::new(args.ttl)));
    let wait = args.wait || args.timeout.is_some();
    let started = std::time::Instant::now();
    let mut progress = Progress::new("the role");
    // The host's role lease, then the role across the fleet (`--fleet`), tried at once: while
    // the fleet's role is held elsewhere, the host's lease is given back before waiting, so a
    // waiter never holds a TTL lease it does not pulse.
    let owner = request.owner.clone();
    let (mut lease, mut fleet) = loop {
        let lease = loop {
            // An emergency STOP halts role holders too (below), so it refuses a new one up front
            // rather than start the command only to halt it a moment later; a waiter is refused
            // as soon as one is written.
            if let Some(stop) = pool.stop()? {
                progress.clear();
                let failure = Refused::stop(&args.role, &name, &ours, &stop).fail(args.json);
                status.refused(&failure);
                return Err(failure);
            }
            let refusal = match acquire(pool.dir(), &name, &request, &options)? {
                Acquired::Held(lease) => break lease,
                Acquired::Refused(refusal) => refusal,
            };
            let waited = started.elapsed();
            let left = args.timeout.map(|t| t.saturating_sub(waited));
            if !wait || left == Some(Duration::ZERO) {
                progress.clear();
                let refused = Refused::held(&args.role, pool.dir().path(), &refusal, &ours);
                let failure = refused.fail(args.json);
                status.refused(&failure);
                return Err(failure);
            }
            let why = format!("held: {}", refusal.why);
            progress.show(&why, waited);
            status.waiting("role", &why);
            // A role is given up by its holder's release or lapses one TTL after its last pulse;
            // either is seen at the next look.
            let nap = crate::supervise::CHECK_EVERY;
            std::thread::sleep(left.map_or(nap, |left| left.min(nap)));
        };
        let waited = started.elapsed();
        let left = args.timeout.map(|t| t.saturating_sub(waited));
        match crate::fleet::claim_role(&args.fleet, &args.role, &owner, &ours, false, None) {
            Ok(fleet) => break (lease, fleet),
            Err(failure)
                if failure.code == exit::TEMP_FAIL && wait && left != Some(Duration::ZERO) =>
            {
                let _ = lease.release();
                progress.show(&failure.message, waited);
                status.waiting("role", &failure.message);
                let nap = crate::supervise::CHECK_EVERY;
                std::thread::sleep(left.map_or(nap, |left| left.min(nap)));
            }
            Err(failure) => {
                progress.clear();
                let _ = lease.release();
                status.refused(&failure);
                return Err(failure);
            }
        }
    };
    progress.clear();
    status.taken(
        "role",
        lease.resource(),
        fleet
            .as_ref()
            .map_or(lease.epoch(), |f| f.epoch().unsigned_abs()),
    );
    let ttl = args.ttl;
    let mut launch = Launch {
        command: &args.command,
        grace: lease_grace(ttl),
        inherit: Vec::new(),
        env: fencing_env(&lease),
    };
    if let Some(place) = &fleet {
        launch.env.retain(|(name, _)| *name != "WORKLANE_EPOCH");
        launch
            .env
            .push(("WORKLANE_EPOCH", place.epoch().to_string().into()));
        launch
            .env
            .push(("WORKLANE_HOST_EPOCH", lease.epoch().to_string().into()));
        launch.env.push(("WORKLANE_FLEET_KEY", place.key().into()));
        launch.grace = launch.grace.min(place.ttl() / 4);
    }
    let mut watch = RoleWatch {
        pool: &pool,
        lease: &mut lease,
        ttl,
        every: (ttl / 20).max(Duration::from_millis(50)),
        last_attempt: BootInstant::now(),
        last_ok: BootInstant::now(),
        lost: false,
        fleet: fleet.as_mut(),
    };
    let outcome = supervise(launch, &mut watch);
    let lost = watch.lost;
    let outcome = outcome?;
    if let Some(place) = fleet
        && let Err(e) = place.release()
    {
        errln!("worklane: releasing the fleet role: {e}");
    }
    let _ = lease.release();
    if lost {
        status.end(exit::UNAVAILABLE, Some(HaltedBy::LeaseLost));
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "role {} lease lost while the command ran ({}); it was halted",
                args.role,
                outcome.halted.unwrap_or_default()
            ),
        ));
    }
    status.end(outcome.code, halted_by(&outcome, HaltedBy::Stop));
    if let Some(signal) = outcome.signal {
        crate::sys::die_by(signal);
    }
    Ok(ExitCode::from(outcome.code))
}

/// A moment on the boot clock (`CLOCK_BOOTTIME` on Linux), which, unlike `Instant`
/// (`CLOCK_MONOTONIC`), counts a suspend: a contender on this boot measures our lease's age
/// on that clock, so the holder must measure its own silence on it too.
#[derive(Clone, Copy)]
struct BootInstant(u64);

impl BootInstant {
    fn now() -> BootInstant {
        BootInstant(worklane_identity::Place::boot_clock_ms())
    }

    fn elapsed(self) -> Duration {
        Duration::from_millis(BootInstant::now().0.saturating_sub(self.0))
    }
}

/// A role lease's supervision: pulses, and halts the command when the lease is lost, cannot
/// be confirmed for TTL/2, or an emergency STOP is written.
struct RoleWatch<'a> {
    pool: &'a Pool,
    lease: &'a mut Lease,
    ttl: Duration,
    every: Duration,
    last_attempt: BootInstant,
    last_ok: BootInstant,
    lost: bool,
    /// The role across the fleet (`--fleet`), kept alive at each check.
    fleet: Option<&'a mut crate::fleet::Place>,
}

impl Watch for RoleWatch<'_> {
    fn started(&mut self, command: &Started) {
        if let Err(e) = self.lease.annotate(command.fields()) {
            errln!(
                "worklane: cannot name the command in {}: {}",
                self.lease.resource(),
                exit::chain(&e)
            );
        }
    }

    fn check(&mut self) -> Option<String> {
        // An emergency STOP halts everything, role holders included.
        if let Some(stop) = self.pool.stop().ok().flatten() {
            return Some(stop.to_string());
        }
        if let Some(place) = self.fleet.as_mut()
            && let Some(reason) = place.check()
        {
            self.lost = true;
            return Some(reason);
        }
        if self.last_attempt.elapsed() < self.every {
            return None;
        }
        self.last_attempt = BootInstant::now();
        // A pulse stamps `lastPulse` before it writes; successors count the TTL from that
        // stamp, so the lease counts as confirmed from the attempt, not from the write's end.
        let attempted = self.last_attempt;
        match self.lease.pulse() {
            Ok(()) => {
                self.last_ok = attempted;
                None
            }
            Err(e @ held::Error::LeaseLost { .. }) => {
                self.lost = true;
                Some(exit::chain(&e))
            }
            Err(e) if self.last_ok.elapsed() > self.ttl / 2 => {
                self.lost = true;
                Some(format!(
                    "cannot verify the role lease for over TTL/2: {}",
                    exit::chain(&e)
                ))
            }
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MIN_TTL, lease_grace};
    use crate::supervise::{CHECK_EVERY, GRACE};
    use std::time::Duration;

    #[test]
    fn a_role_holders_command_is_gone_before_its_lease_can_lapse() {
        // Unconfirmed for just over TTL/2, noticed at the next pulse attempt (every TTL/20,
        // at least 50 ms, on a 250 ms check), killed a grace later.
        for ms in [
            2_000, 2_500, 4_000, 6_000, 12_000, 13_000, 60_000, 3_600_000,
        ] {
            let ttl = Duration::from_millis(ms);
            assert!(ttl >= MIN_TTL);
            let every = (ttl / 20).max(Duration::from_millis(50));
            let checks = every.as_millis().div_ceil(CHECK_EVERY.as_millis());
            let noticed = CHECK_EVERY * u32::try_from(checks.max(1)).expect("checks");
            let gone_by = ttl / 2 + noticed + lease_grace(ttl);
            assert!(
                gone_by + ttl / 8 <= ttl,
                "TTL {ms} ms: gone by {gone_by:?}, leaving less than TTL/8"
            );
        }
        assert_eq!(
            lease_grace(Duration::from_secs(60)),
            GRACE,
            "the usual grace"
        );
        assert_eq!(
            lease_grace(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
    }
}

#[cfg(test)]
mod line_tests {
    use super::*;

    #[test]
    fn places_in_line_are_ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd",
                "101st", "111th", "112th"
            ]
        );
    }

    #[test]
    fn the_waiting_line_says_the_place_and_the_count() {
        let at = |blocker: &Blocker, position| {
            waiting_line(&Waiting {
                blocker,
                waited: Duration::from_secs(12),
                position,
                in_line: 3,
            })
        };
        assert_eq!(
            at(
                &Blocker::InLine {
                    ahead: 2,
                    held: 2,
                    cap: 2
                },
                3
            ),
            "3rd in line, 2 of 2 held"
        );
        assert_eq!(
            at(&Blocker::AtCap { held: 1, cap: 1 }, 1),
            "1st in line, 1 of 1 held"
        );
        assert!(
            at(&Blocker::Counting, 1).starts_with("1st in line: slots.lock has been held"),
            "{}",
            at(&Blocker::Counting, 1)
        );
    }
}
