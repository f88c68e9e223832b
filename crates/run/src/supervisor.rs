//! [`Supervisor`]: a command run under a held slot or role lease, with everything `worklane
//! run` and `worklane lease run` promise: the command inherits the guard (the slot lives as
//! long as any process of the run), learns its resource and fencing epoch, is named in the
//! record (so `stop-all` can halt it when its supervisor cannot), and is halted on STOP; a
//! role lease is pulsed and its loss halts the command before the lease can lapse.

use crate::jobs::Jobs;
use crate::supervise::{self, Error, GRACE, Launch, Outcome, Started, Watch};
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;
use worklane_admission::{Kind, Pool, Slot, Take, Wait};
use worklane_journal::Event;
use worklane_lease::{Lease, held};

/// The shortest TTL a role lease may be supervised with. The supervisor checks every
/// [`CHECK_EVERY`](crate::CHECK_EVERY), pulses every TTL/20 (at such a check), and halts the command once its
/// lease has gone unconfirmed for more than TTL/2; with the grace of [`lease_grace`] the
/// command is gone by TTL/2 + one pulse interval rounded up to a check + TTL/4 after its last
/// confirmed pulse, before the lease lapses at TTL, for every TTL from 2 s up (with about
/// TTL/8 to spare for the last pulse's own write).
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// The SIGTERM-to-SIGKILL grace of a role holder's command: the usual [`GRACE`], but at most a
/// quarter of the TTL, so a command halted at TTL/2 is gone before its lease can lapse and a
/// successor start.
#[must_use]
pub fn lease_grace(ttl: Duration) -> Duration {
    GRACE.min(ttl / 4)
}

/// What is held while the command runs.
enum Hold<'a> {
    Slot(&'a mut Slot),
    Role { lease: &'a mut Lease, ttl: Duration },
}

/// Runs one command under a held slot (or role lease) of `pool`, with `worklane run`'s
/// guarantees; see the crate's documentation for the example.
///
/// Built with [`Supervisor::new`] (a slot) or [`Supervisor::role`] (a TTL role lease), given
/// more with [`env`](Supervisor::env), [`inherit`](Supervisor::inherit),
/// [`grace_at_most`](Supervisor::grace_at_most) and [`watch`](Supervisor::watch), and run with
/// [`run`](Supervisor::run), which returns once the command and everything it left behind
/// after a halt have ended. The slot or lease stays the caller's to release.
#[must_use = "a supervisor does nothing until it runs a command"]
pub struct Supervisor<'a> {
    pool: &'a Pool,
    hold: Hold<'a>,
    grace: Duration,
    env: Vec<(&'static str, OsString)>,
    inherit: Vec<OwnedFd>,
    watch: Option<&'a mut dyn Watch>,
    jobs: Option<Jobs>,
    kill_tree_on_exit: bool,
    limits: Limits,
    /// Whether the run gets a cgroup of its own where it can (off only through the test
    /// seam [`Supervisor::without_cgroup`]).
    contained: bool,
}

/// What a run's cgroup is limited to (`--memory-max`, `--cpu-max`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Bytes of memory (`memory.max`).
    pub memory: Option<u64>,
    /// CPUs (`cpu.max`: 1.5 is one and a half).
    pub cpus: Option<f64>,
}

impl<'a> Supervisor<'a> {
    /// A command's supervision under `slot`: it inherits a copy of the slot's guard and gets
    /// `WORKLANE_RESOURCE` and `WORKLANE_EPOCH`; STOP halts it (SIGTERM, SIGKILL after
    /// [`GRACE`]).
    pub fn new(pool: &'a Pool, slot: &'a mut Slot) -> Result<Supervisor<'a>, Error> {
        let inherit = match slot.lease().guard() {
            Some(guard) => vec![supervise::inheritable(guard)?],
            None => Vec::new(),
        };
        let env = fencing_env(slot.lease());
        Ok(Supervisor {
            pool,
            hold: Hold::Slot(slot),
            grace: GRACE,
            env,
            inherit,
            watch: None,
            jobs: None,
            kill_tree_on_exit: false,
            limits: Limits::default(),
            contained: true,
        })
    }

    /// A command's supervision under a TTL role `lease` (of `ttl`, at least [`MIN_TTL`]):
    /// pulsed every TTL/20; a lost lease, one unconfirmed for TTL/2, or STOP halts the command
    /// with the grace of [`lease_grace`]. The command does not inherit a TTL lease's guard (it
    /// lapses by time, not by its holders).
    pub fn role(pool: &'a Pool, lease: &'a mut Lease, ttl: Duration) -> Supervisor<'a> {
        let env = fencing_env(lease);
        Supervisor {
            pool,
            hold: Hold::Role { lease, ttl },
            grace: lease_grace(ttl),
            env,
            inherit: Vec::new(),
            watch: None,
            jobs: None,
            kill_tree_on_exit: false,
            limits: Limits::default(),
            contained: true,
        }
    }

    /// Sets `name` to `value` in the command's environment (replacing what this supervisor
    /// set under that name, `WORKLANE_EPOCH` included).
    pub fn env(mut self, name: &'static str, value: impl Into<OsString>) -> Supervisor<'a> {
        self.env.retain(|(set, _)| *set != name);
        self.env.push((name, value.into()));
        self
    }

    /// Gives the command a copy of `fd` too (another guard it must keep held, as a claimed
    /// lane's).
    pub fn inherit(mut self, fd: impl AsFd) -> Result<Supervisor<'a>, Error> {
        self.inherit.push(supervise::inheritable(fd)?);
        Ok(self)
    }

    /// Shortens the grace between a halt's SIGTERM and its SIGKILL to at most `grace` (a
    /// fleet place's TTL/4).
    pub fn grace_at_most(mut self, grace: Duration) -> Supervisor<'a> {
        self.grace = self.grace.min(grace);
        self
    }

    /// Adds the caller's own watch: told of the start, asked at every check after STOP and the
    /// lease (its reason halts the command), and told of a halt, which it reports instead of
    /// the default log line.
    pub fn watch(mut self, watch: &'a mut dyn Watch) -> Supervisor<'a> {
        self.watch = Some(watch);
        self
    }

    /// Ends what the command leaves running when it ends (SIGTERM to every process of the
    /// run, SIGKILL after the grace), as systemd's `KillMode=control-group` does; by default it
    /// runs on, keeping the slot.
    pub fn kill_tree_on_exit(mut self, kill: bool) -> Supervisor<'a> {
        self.kill_tree_on_exit = kill;
        self
    }

    /// Limits the run's cgroup (memory, CPUs) where the hierarchy gives those controllers;
    /// where it does not, the run says once what is unavailable and why, and goes on.
    pub fn limits(mut self, limits: Limits) -> Supervisor<'a> {
        self.limits = limits;
        self
    }

    /// Runs the command without a cgroup of its own, as where there is none (an unprivileged
    /// user without a delegated subtree): a halt then reaches its processes through the
    /// process table alone. A test seam (feature `test-seams`).
    #[cfg(feature = "test-seams")]
    pub fn without_cgroup(mut self) -> Supervisor<'a> {
        self.contained = false;
        self
    }

    /// Gives the command's build a jobserver backed by the machine's job slots (`max_jobs`):
    /// one job slot is taken for the command itself before it starts (waiting in the job line;
    /// refused under STOP or a drain), and every token its tree reads is backed by one more,
    /// taken in the line and released when the token comes back. See [`crate::jobs`] and the
    /// crate's documentation for the rules; Linux only (elsewhere the run is an error).
    pub fn jobs(mut self, jobs: Jobs) -> Supervisor<'a> {
        self.jobs = Some(jobs);
        self
    }

    /// Runs `command` (program and arguments) to its end. An error is a command that could
    /// not be run; how it ended is the [`Outcome`] (its status, the halt's reason, the signal
    /// that killed it, whether the role lease was lost).
    pub fn run(self, command: &[OsString]) -> Result<Outcome, Error> {
        let Supervisor {
            pool,
            mut hold,
            grace,
            mut env,
            mut inherit,
            watch,
            jobs,
            kill_tree_on_exit,
            limits,
            contained,
        } = self;
        let mut command = command.to_vec();
        let mut build = None;
        if let Some(jobs) = jobs {
            let (program, args) = command.split_first().ok_or(Error::NoCommand)?;
            let (args, asked) = crate::jobs::make_jobs(program, args);
            let share = [jobs.share, asked.flatten()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(u32::MAX)
                .max(1);
            command = std::iter::once(program.clone()).chain(args).collect();
            let request = worklane_lease::Request::new("build")
                .field("command", supervise::describe(&command));
            let implicit = take_job_slot(pool, &request)?;
            if let Some(guard) = implicit.lease().guard() {
                inherit.push(supervise::inheritable(guard)?);
            }
            let mut server = crate::start_jobs::start_jobserver(pool, &request, share, jobs.style)?;
            if jobs.shim {
                server.add_shims()?;
            }
            inherit.extend(server.inherit());
            for (name, value) in server.env() {
                env.retain(|(set, _)| set != name);
                env.push((name, value.clone()));
            }
            build = Some((implicit, server));
        }
        let cgroup = if contained {
            run_cgroup(pool, &mut hold, limits)
        } else {
            None
        };
        let launch = Launch {
            command: &command,
            grace,
            inherit,
            env,
            cgroup,
            kill_tree_on_exit,
        };
        let mut held = Held {
            pool,
            hold,
            job: build.as_mut().map(|(implicit, _)| implicit),
            extra: watch,
            role: None,
            lost: false,
            command_pid: 0,
            halted: None,
        };
        if let Hold::Role { ttl, .. } = &held.hold {
            held.role = Some(Pulse::new(*ttl));
        }
        let outcome = supervise::supervise(launch, &mut held);
        if let (Ok(outcome), Hold::Slot(slot)) = (&outcome, &mut held.hold) {
            slot.note_usage(outcome.cpu_usec);
        }
        let lost = held.lost;
        if let Ok(outcome) = &outcome {
            held.journal_halt(outcome);
        }
        // The tree has ended: every token returns at once, then the build's own slot.
        if let Some((implicit, server)) = build {
            server.end();
            let _ = implicit.release();
        }
        let mut outcome = outcome?;
        outcome.lease_lost = lost;
        Ok(outcome)
    }
}

/// The run's cgroup (Linux, cgroup v2), named in the record (`cgroup`) so that `stop-all` can
/// reach it when this supervisor cannot; `None` (containment off, said once at debug level:
/// `slots` and `why` say it to the operator) where there is none to make.
fn run_cgroup(
    pool: &Pool,
    hold: &mut Hold<'_>,
    limits: Limits,
) -> Option<crate::cgroup::RunCgroup> {
    let limited = limits != Limits::default();
    let (resource, epoch) = match hold {
        Hold::Slot(slot) => (slot.name().to_owned(), slot.lease().epoch()),
        Hold::Role { lease, .. } => (lease.resource().to_owned(), lease.epoch()),
    };
    let key = worklane_identity::cgroup::dir_key_of(pool.dir()).ok()?;
    let cgroup = match crate::cgroup::RunCgroup::create(&key, &resource, epoch) {
        Ok(cgroup) => cgroup,
        Err(off) => {
            if limited {
                log::warn!("{resource}: no memory or CPU limit: no cgroup of its own: {off}");
            } else {
                log::debug!("{resource}: no cgroup of its own (containment off): {off}");
            }
            return None;
        }
    };
    for unavailable in cgroup.limit(limits.memory, limits.cpus) {
        log::warn!("{resource}: {unavailable}; the run goes on without it");
    }
    // What a record's `cgroup` obliges (its slot held while the cgroup runs) is declared
    // before the first record names one (PROTOCOL.md section 0). A slot's record is written
    // under the same hold of `slots.lock` as the declaration: an operator's drop of the
    // extension, which looks at the slots' records, then comes before both or sees the
    // record. A role lease's record is no slot's (a drop does not look at it) and its TTL
    // runs from its take: it declares without waiting on `slots.lock` when `cgroups` is
    // named already, as before.
    let mut fields = serde_json::Map::new();
    fields.insert(
        worklane_identity::cgroup::RECORD_FIELD.to_owned(),
        cgroup.path().into(),
    );
    let cannot_declare = |e: &worklane_admission::protocol::Error| {
        log::warn!(
            "{resource}: cannot declare the protocol extension \"cgroups\": {}",
            chain(e)
        );
    };
    let named = match hold {
        Hold::Slot(slot) => {
            match pool.using_extension(worklane_admission::protocol::CGROUPS, || {
                slot.annotate(fields).map_err(|e| chain(&e))
            }) {
                Ok(named) => named,
                Err(e) => {
                    cannot_declare(&e);
                    Err(
                        "the directory does not declare cgroups, so the record may not name \
                         one (only this supervisor can halt what leaves the command's group)"
                            .to_owned(),
                    )
                }
            }
        }
        Hold::Role { lease, .. } => {
            if let Err(e) = pool.declare_extension(worklane_admission::protocol::CGROUPS) {
                cannot_declare(&e);
            }
            lease.annotate(fields).map_err(|e| chain(&e))
        }
    };
    if let Err(why) = named {
        log::warn!("cannot name the run's cgroup in {resource}: {why}");
    }
    Some(cgroup)
}

/// The build's own job slot (its implicit token), waiting in the job line.
fn take_job_slot(pool: &Pool, request: &worklane_lease::Request) -> Result<Slot, Error> {
    let request = request.clone().field("implicit", true);
    let taken = pool
        .take(
            Kind::Job,
            &request,
            Wait {
                timeout: None,
                priority: 0,
                on_wait: &mut |_| {},
            },
        )
        .map_err(|source| Error::JobSlot { source })?;
    match taken {
        Take::Held(slot) => Ok(slot),
        Take::Blocked(blocker) => Err(Error::JobsRefused {
            blocker: blocker.to_string(),
        }),
    }
}

/// `WORKLANE_RESOURCE` and `WORKLANE_EPOCH` of a held lease, for the command to check at the
/// effect it protects.
fn fencing_env(lease: &Lease) -> Vec<(&'static str, OsString)> {
    vec![
        ("WORKLANE_RESOURCE", lease.resource().into()),
        ("WORKLANE_EPOCH", lease.epoch().to_string().into()),
    ]
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

/// A role lease's pulse: when the last was tried and when one last succeeded.
struct Pulse {
    ttl: Duration,
    every: Duration,
    last_attempt: BootInstant,
    last_ok: BootInstant,
}

impl Pulse {
    fn new(ttl: Duration) -> Pulse {
        Pulse {
            ttl,
            every: (ttl / 20).max(Duration::from_millis(50)),
            last_attempt: BootInstant::now(),
            last_ok: BootInstant::now(),
        }
    }

    /// Pulses `lease` when one is due: a reason when the lease is lost or has gone unconfirmed
    /// for over TTL/2 (`true` for the latter, which the lease itself cannot journal).
    fn check(&mut self, lease: &mut Lease) -> Option<(String, bool)> {
        if self.last_attempt.elapsed() < self.every {
            return None;
        }
        self.last_attempt = BootInstant::now();
        // A pulse stamps `lastPulse` before it writes; successors count the TTL from that
        // stamp, so the lease counts as confirmed from the attempt, not from the write's end.
        let attempted = self.last_attempt;
        match lease.pulse() {
            Ok(()) => {
                self.last_ok = attempted;
                None
            }
            Err(e @ held::Error::LeaseLost { .. }) => Some((chain(&e), false)),
            Err(e) if self.last_ok.elapsed() > self.ttl / 2 => Some((
                format!("cannot verify the role lease for over TTL/2: {}", chain(&e)),
                true,
            )),
            Err(_) => None,
        }
    }
}

use worklane_stdx::chain;

/// The built-in watch of a [`Supervisor`]: the record names the command, STOP halts it, a role
/// lease is pulsed, and the caller's own watch is asked last.
struct Held<'a, 'b> {
    pool: &'a Pool,
    hold: Hold<'a>,
    /// The build's own job slot, named like the held slot.
    job: Option<&'b mut Slot>,
    extra: Option<&'a mut dyn Watch>,
    role: Option<Pulse>,
    lost: bool,
    /// The command's pid, once started.
    command_pid: u32,
    /// A halt for STOP: its reason and when it began.
    halted: Option<(String, std::time::Instant)>,
}

impl Held<'_, '_> {
    /// A halt by STOP, in the journal (`halt`), once the command has ended.
    fn journal_halt(&self, outcome: &Outcome) {
        let Some((reason, since)) = &self.halted else {
            return;
        };
        let resource = match &self.hold {
            Hold::Slot(slot) => slot.name().to_owned(),
            Hold::Role { lease, .. } => lease.resource().to_owned(),
        };
        self.pool.journal().emit(Event::Halt {
            resource,
            command_pid: self.command_pid,
            by: "supervisor".to_owned(),
            reason: reason.clone(),
            signal: outcome.ended_by.map(crate::signal_name),
            status: outcome.ended_by.is_none().then_some(outcome.code),
            took_ms: u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
    }
}

impl Watch for Held<'_, '_> {
    fn starting(&mut self) {
        if let Some(extra) = self.extra.as_mut() {
            extra.starting();
        }
    }

    fn started(&mut self, command: &Started) {
        self.command_pid = command.pid;
        // Without it only `stop-all`'s enforcement is lost (the supervisor still halts the
        // command on STOP), so the run goes on with a warning.
        let (named, resource) = match &mut self.hold {
            Hold::Slot(slot) => (
                slot.annotate(command.fields()).map_err(|e| chain(&e)),
                slot.name().to_owned(),
            ),
            Hold::Role { lease, .. } => (
                lease.annotate(command.fields()).map_err(|e| chain(&e)),
                lease.resource().to_owned(),
            ),
        };
        if let Err(why) = named {
            log::warn!("cannot name the command in {resource}: {why}");
        }
        if let Some(job) = self.job.as_mut()
            && let Err(e) = job.annotate(command.fields())
        {
            log::warn!("cannot name the command in {}: {}", job.name(), chain(&e));
        }
        if let Some(extra) = self.extra.as_mut() {
            extra.started(command);
        }
    }

    fn check(&mut self) -> Option<String> {
        // An emergency STOP halts everything, role holders included.
        if let Some(stop) = self.pool.stop().ok().flatten() {
            let reason = stop.to_string();
            self.halted = Some((reason.clone(), std::time::Instant::now()));
            return Some(reason);
        }
        if let Some(extra) = self.extra.as_mut()
            && let Some(reason) = extra.check()
        {
            return Some(reason);
        }
        if let (Hold::Role { lease, .. }, Some(pulse)) = (&mut self.hold, self.role.as_mut())
            && let Some((reason, unconfirmed)) = pulse.check(lease)
        {
            self.lost = true;
            if unconfirmed {
                self.pool.journal().emit(Event::RoleLost {
                    role: lease
                        .record()
                        .extra_str("role")
                        .unwrap_or_default()
                        .to_owned(),
                    resource: lease.resource().to_owned(),
                    why: reason.clone(),
                });
            }
            return Some(reason);
        }
        None
    }

    fn halting(&mut self, reason: &str, grace: Duration) {
        match self.extra.as_mut() {
            Some(extra) => extra.halting(reason, grace),
            None => log::warn!(
                "{reason}: halting the command (SIGTERM, then SIGKILL after {} ms)",
                grace.as_millis()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{GRACE, MIN_TTL, lease_grace};
    use crate::CHECK_EVERY;
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
