//! STOP's enforcement: after writing STOP, `stop-all` halts the processes of every run whose
//! supervisor cannot: one that was SIGKILLed (its command runs on, holding the slot) or stopped
//! (SIGSTOP), or one that has not halted its command within its own grace.
//!
//! A run's processes are found two ways: the command a record names (`commandProcess`), and,
//! on Linux, every process holding a copy of the slot's guard descriptor (the command inherits
//! one, and so does everything it starts, so this finds the run even when its leader is gone).
//!
//! A record is written by anyone who may write in the slot directory, so nothing is signalled
//! on a record's word unless: the record could only have been written by its owner (no group or
//! other write bit, one link); it names this host, boot and pid namespace; the process is the
//! one named (same start identity) or holds the slot's guard; it belongs to the record's owner;
//! and it is not pid 1, this process, or this process's group or session leader. So a record
//! can never make `stop-all` signal a process its writer could not signal itself. The
//! decisions are plain functions (`judge`; the stat line is `worklane_identity::proc_stat`'s); only `sys`'s
//! `observe` and `guard_holders` read the machine (Linux `/proc`; elsewhere nothing is observed and
//! supervisors alone halt their commands).

use crate::supervise::{CHECK_EVERY, GRACE};
use crate::sys::{guard_holders, observe};
use rustix::process::{Pid, Signal};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};
use worklane_admission::{Pool, RecordedCommand};
use worklane_guard::FileId;
use worklane_identity::{Field, Place};

/// A process as `/proc/<pid>/stat` and the owner of `/proc/<pid>` show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The one-letter state (`R`, `S`, `T`, `Z`...).
    pub(crate) state: u8,
    /// Its process group.
    pub(crate) pgid: u32,
    /// Its session.
    pub(crate) sid: u32,
    /// Its start identity (field 22).
    pub(crate) start: u64,
    /// The owner of `/proc/<pid>` (its effective uid).
    pub(crate) uid: u32,
}

/// This process, as enforcement must spare it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Me {
    pub(crate) uid: u32,
    pub(crate) pid: u32,
    pub(crate) pgid: u32,
    pub(crate) sid: u32,
}

/// One process to signal: a command's group, or a single process holding the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Target {
    pub(crate) pid: u32,
    pub(crate) start: u64,
    /// Signal the process group `pid` leads rather than the process alone.
    pub(crate) group: bool,
}

/// What to do about one recorded run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Judged {
    /// Nothing of it runs (or nothing is provably its).
    Gone,
    /// It cannot be signalled safely; the reason says why (shown to the operator).
    Untouchable(String),
    /// Processes of it run; `supervised` tells whether its supervisor can still act.
    Running {
        supervised: bool,
        targets: Vec<Target>,
    },
}

/// Decides about `command` from how its processes look: `seen(pid)` observes a process,
/// `holders` are the pids holding its guard.
pub(crate) fn judge(
    command: &RecordedCommand,
    here: &Place,
    me: &Me,
    seen: &dyn Fn(u32) -> Option<Seen>,
    holders: &[u32],
) -> Judged {
    let Field::Present(place) = &command.record.holder.place else {
        return Judged::Untouchable("its record names no place".to_owned());
    };
    if place.host != here.host || place.boot != here.boot || place.pidns != here.pidns {
        return Judged::Untouchable(
            "it runs on another host, boot or pid namespace; its own supervisor halts it"
                .to_owned(),
        );
    }
    if !command.writer.only_by_owner() {
        return Judged::Untouchable(format!(
            "its record (mode {:o}, {} links) may have been written by others than its owner, \
             so it proves nothing",
            command.writer.mode, command.writer.links
        ));
    }
    let writer = command.writer.uid;
    // A process the record's owner could signal itself, and that is not pid 1 or ours.
    let allowed = |pid: u32, s: &Seen| {
        pid > 1
            && pid != me.pid
            && s.uid == writer
            && !matches!(s.state, b'Z' | b'X')
            && (me.uid == 0 || me.uid == writer)
    };
    let supervisor = command.record.pid();
    let mut targets = Vec::new();
    let mut refused = None;
    if let Some(s) = seen(command.pid)
        && command.start == Some(s.start)
    {
        if allowed(command.pid, &s) {
            // The group only while the command still leads it, and never our own group or the
            // leader of our own session.
            let group = command.group
                && s.pgid == command.pid
                && command.pid != me.pgid
                && command.pid != me.sid;
            targets.push(Target {
                pid: command.pid,
                start: s.start,
                group,
            });
        } else if s.uid != writer && !matches!(s.state, b'Z' | b'X') {
            refused = Some(format!(
                "pid {} belongs to uid {}, but its record is uid {}'s",
                command.pid, s.uid, writer
            ));
        } else if me.uid != 0 && me.uid != writer {
            refused = Some(format!(
                "its record is uid {writer}'s; run stop-all as that user or as root"
            ));
        }
    }
    for &pid in holders {
        if Some(pid) == supervisor || targets.iter().any(|t| t.pid == pid) {
            continue;
        }
        if let Some(s) = seen(pid)
            && allowed(pid, &s)
        {
            targets.push(Target {
                pid,
                start: s.start,
                group: false,
            });
        }
    }
    if targets.is_empty() {
        return refused.map_or(Judged::Gone, Judged::Untouchable);
    }
    let identity_start = command.record.holder.identity.present().map(|i| i.start);
    let supervised = supervisor.and_then(seen).is_some_and(|s| {
        Some(s.start) == identity_start && !matches!(s.state, b'Z' | b'X' | b'T' | b't')
    });
    Judged::Running {
        supervised,
        targets,
    }
}

/// The supervisor a record names (its writer: pid and start time), if it is stopped (state
/// `T` or `t`), ours to signal (root, or its own user), and the record proves it: only its
/// owner can have written it, and the process is that owner's (as [`judge`] requires of every
/// process it signals: a member of the group can write a record naming any process).
fn stopped_supervisor(command: &RecordedCommand, me: &Me) -> Option<Target> {
    let pid = command.record.pid()?;
    let start = command.record.holder.identity.present().map(|i| i.start)?;
    let s = observe(pid)?;
    (s.start == start
        && matches!(s.state, b'T' | b't')
        && command.writer.only_by_owner()
        && s.uid == command.writer.uid
        && (me.uid == 0 || me.uid == s.uid))
        .then_some(Target {
            pid,
            start,
            group: false,
        })
}

/// Sends `signal` to `target`, if it is still the process observed (a pidfd pins it on
/// Linux, so a pid reused since cannot be hit).
pub(crate) fn send(target: &Target, signal: Signal) {
    let Some(pid) = i32::try_from(target.pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    if target.group {
        // A group id cannot be reused while its leader (checked just before) or any member
        // lives.
        let _ = rustix::process::kill_process_group(pid, signal);
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let Ok(pidfd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        else {
            return;
        };
        if observe(target.pid).is_some_and(|s| s.start == target.start) {
            let _ = rustix::process::pidfd_send_signal(&pidfd, signal);
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// One run as enforcement names it: the lock or lease file its record is in, the pid it
/// watches (the command's, or a continued supervisor's), and the command line recorded.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Run {
    /// The lock or lease file its record is in.
    pub resource: String,
    /// The pid it watches.
    pub pid: u32,
    /// The command line its record names.
    pub command: Option<String>,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pid {}", self.resource, self.pid)?;
        if let Some(command) = &self.command {
            write!(f, ", `{command}`")?;
        }
        write!(f, ")")
    }
}

/// A run that was running when STOP was written and has halted since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Halted {
    /// The run.
    pub run: Run,
    /// Whether worklane signalled it itself (its supervisor was gone or stopped, or did not
    /// halt it within its grace); otherwise its supervisor halted it.
    pub by_worklane: bool,
}

/// A run still running when enforcement gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// The run.
    pub run: Run,
    /// Why worklane did not signal it, when it did not (it cannot prove the process is the
    /// run's, or may not signal it).
    pub why: Option<String>,
}

/// What enforcement did.
#[derive(Debug, Default)]
pub struct Report {
    /// The runs running when STOP was written that have halted since.
    pub halted: Vec<Halted>,
    /// The runs still running (or not signalled) when enforcement gave up.
    pub left: Vec<Left>,
    /// How long it took.
    pub took: Duration,
}

fn me() -> Me {
    let pid = std::process::id();
    let own = observe(pid);
    Me {
        uid: rustix::process::geteuid().as_raw(),
        pid,
        pgid: own.map_or(0, |s| s.pgid),
        sid: own.map_or(0, |s| s.sid),
    }
}

/// Continues, once each, the supervisors that were stopped (Ctrl-Z, SIGSTOP) before they
/// named their command in their record: no command is known to halt, but the supervisor,
/// continued, names it and halts it at its next check of STOP (and the wait below then sees
/// it like any other run). A record of this host, boot and pid namespace only, whose writer is
/// provably the process (start time) and ours to signal.
fn continue_unnamed(
    pool: &Pool,
    here: &Place,
    me: &Me,
    continued: &mut BTreeSet<u32>,
) -> Vec<(Target, Run)> {
    let mut woken = Vec::new();
    // The records as written, read without taking any guard: a probe of a guard (as
    // `Pool::snapshot` makes) publishes one that a leaving waiter has just removed.
    let Ok(listed) = pool.dir().list() else {
        return woken;
    };
    for path in listed {
        let name = path.name();
        if !(name.ends_with(".lock") || name.ends_with(".lease")) {
            continue;
        }
        let Some((record, writer)) = path
            .read_with_owner()
            .ok()
            .flatten()
            .and_then(|(raw, w)| worklane_lease::Record::parse(&raw).ok().map(|r| (r, w)))
        else {
            continue;
        };
        // Only a record its owner alone can have written proves anything, and only of a
        // process of that owner's.
        if !writer.only_by_owner() {
            continue;
        }
        if record.extra.contains_key(crate::supervise::COMMAND_PROCESS) {
            continue;
        }
        let (Some(pid), Field::Present(identity), Field::Present(place)) =
            (record.pid(), &record.holder.identity, &record.holder.place)
        else {
            continue;
        };
        if place.host != here.host || place.boot != here.boot || place.pidns != here.pidns {
            continue;
        }
        if let Some(s) = observe(pid)
            && s.start == identity.start
            && matches!(s.state, b'T' | b't')
            && s.uid == writer.uid
            && (me.uid == 0 || me.uid == s.uid)
            && continued.insert(pid)
        {
            let target = Target {
                pid,
                start: s.start,
                group: false,
            };
            send(&target, Signal::CONT);
            woken.push((
                target,
                Run {
                    resource: name.to_owned(),
                    pid,
                    command: None,
                },
            ));
        }
    }
    woken
}

/// After STOP is written: waits until nothing of any recorded run is left, signalling the
/// runs whose supervisor cannot (SIGCONT and SIGTERM at once when the supervisor is gone or
/// stopped, SIGKILL a grace later; SIGKILL when a live supervisor has not halted its command a
/// check and its grace after STOP), for at most about 5 s.
#[must_use]
pub fn enforce_stop(pool: &Pool) -> Report {
    enforce_stop_on(pool, &RealClock)
}

/// Time as [`enforce_stop`]'s loop reads it: the machine's monotonic clock, or a test's, which
/// moves only when the loop sleeps (so a test pins the grace's boundaries to the tick).
pub(crate) trait Clock {
    /// Now.
    fn now(&self) -> Instant;
    /// Waits `pause` before the next look.
    fn sleep(&self, pause: Duration);
}

/// The machine's monotonic clock.
struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, pause: Duration) {
        std::thread::sleep(pause);
    }
}

/// [`enforce_stop`] on `clock`.
pub(crate) fn enforce_stop_on(pool: &Pool, clock: &dyn Clock) -> Report {
    let started = clock.now();
    let elapsed = || clock.now().saturating_duration_since(started);
    let give_up = CHECK_EVERY + GRACE + Duration::from_millis(1500);
    let Ok(here) = Place::current() else {
        return Report::default();
    };
    let me = me();
    let mut termed: BTreeMap<Target, Instant> = BTreeMap::new();
    let mut killed: BTreeSet<Target> = BTreeSet::new();
    let mut signalled: BTreeSet<Run> = BTreeSet::new();
    let mut killed_runs: BTreeSet<Run> = BTreeSet::new();
    let mut continued: BTreeSet<u32> = BTreeSet::new();
    // Runs' cgroups (by resource) signalled, and when.
    let mut cgroups_termed: BTreeMap<String, Instant> = BTreeMap::new();
    let mut cgroups_killed: BTreeSet<String> = BTreeSet::new();
    let dir_key = worklane_identity::cgroup::dir_key_of(pool.dir()).unwrap_or_default();
    let mut running_at_stop: Option<Vec<Run>> = None;
    let woken = continue_unnamed(pool, here, &me, &mut continued);
    loop {
        let commands = one_per_command(pool.recorded_commands().unwrap_or_default());
        let guards: HashSet<FileId> = commands.iter().filter_map(|c| c.guard).collect();
        let holders = guard_holders(&guards);
        let mut live: Vec<Left> = Vec::new();
        for command in &commands {
            let held = command
                .guard
                .and_then(|g| holders.get(&g))
                .map_or(&[][..], Vec::as_slice);
            let run = Run {
                resource: command.resource.clone(),
                pid: command.pid,
                command: command
                    .record
                    .extra_str("command")
                    .or_else(|| command.record.extra_str("entrypoint"))
                    .map(str::to_owned),
            };
            let judged = judge(command, here, &me, &observe, held);
            // The run's cgroup, when its supervisor cannot act (gone, or the command gone and
            // what it left running is all that is left): every process in it, those that
            // left the command's group and session too.
            if !matches!(
                judged,
                Judged::Running {
                    supervised: true,
                    ..
                }
            ) && let Some(cgroup) = recorded_cgroup(command, &dir_key)
            {
                // An emptied cgroup goes (a run's own removes it; this one outlived it).
                if cgroup.pids().is_empty() {
                    cgroup.remove_if_empty();
                } else {
                    let now = clock.now();
                    match cgroups_termed.get(&command.resource) {
                        None => {
                            cgroup.signal(Signal::CONT);
                            cgroup.signal(Signal::TERM);
                            cgroups_termed.insert(command.resource.clone(), now);
                            signalled.insert(run.clone());
                        }
                        Some(at) => {
                            if now >= *at + GRACE && cgroups_killed.insert(command.resource.clone())
                            {
                                cgroup.kill();
                                killed_runs.insert(run.clone());
                            }
                        }
                    }
                    if matches!(judged, Judged::Gone) {
                        live.push(Left {
                            run: run.clone(),
                            why: None,
                        });
                    }
                }
            }
            match judged {
                Judged::Gone => {}
                Judged::Untouchable(why) => live.push(Left {
                    run,
                    why: Some(why),
                }),
                Judged::Running {
                    supervised,
                    targets,
                } => {
                    // A supervisor stopped with its job (Ctrl-Z) is continued too: it holds a
                    // copy of the slot's guard, and only it can let go of the slot (it then
                    // finds its command halted and exits).
                    if !supervised
                        && let Some(supervisor) = stopped_supervisor(command, &me)
                        && continued.insert(supervisor.pid)
                    {
                        send(&supervisor, Signal::CONT);
                    }
                    let now = clock.now();
                    for target in &targets {
                        if !supervised && !termed.contains_key(target) {
                            send(target, Signal::CONT);
                            send(target, Signal::TERM);
                            termed.insert(*target, now);
                            signalled.insert(run.clone());
                        }
                        let kill_at = match termed.get(target) {
                            Some(at) => *at + GRACE,
                            // A supervisor that acts kills a check and its grace after STOP.
                            None => started + CHECK_EVERY + GRACE + Duration::from_millis(500),
                        };
                        if now >= kill_at && killed.insert(*target) {
                            send(target, Signal::CONT);
                            send(target, Signal::KILL);
                            signalled.insert(run.clone());
                            killed_runs.insert(run.clone());
                        }
                    }
                    live.push(Left { run, why: None });
                }
            }
        }
        // A supervisor continued above counts as running until it has named its command
        // (then it is judged with the others) or is gone.
        for (target, run) in &woken {
            let named = commands.iter().any(|c| c.record.pid() == Some(target.pid));
            if !named
                && observe(target.pid)
                    .is_some_and(|s| s.start == target.start && !matches!(s.state, b'Z' | b'X'))
            {
                live.push(Left {
                    run: run.clone(),
                    why: Some("continued; it halts its command".to_owned()),
                });
            }
        }
        let at_stop =
            running_at_stop.get_or_insert_with(|| live.iter().map(|l| l.run.clone()).collect());
        // A run first seen later (a supervisor continued above, once it named its command)
        // was running at STOP too.
        for l in &live {
            if !at_stop.contains(&l.run) {
                at_stop.push(l.run.clone());
            }
        }
        if live.is_empty() || elapsed() >= give_up {
            let at_stop = running_at_stop.unwrap_or_default();
            let report = Report {
                halted: at_stop
                    .into_iter()
                    .filter(|run| !live.iter().any(|l| &l.run == run))
                    .map(|run| Halted {
                        by_worklane: signalled.contains(&run),
                        run,
                    })
                    .collect(),
                left: live,
                took: elapsed(),
            };
            journal_halts(pool, &report, &killed_runs);
            return report;
        }
        clock.sleep(Duration::from_millis(50));
    }
}

/// The cgroup `command`'s record names (`cgroup`), if it may be acted on: named as its run's
/// cgroup is, and made by the record's writer (or root), by a writer that alone could have
/// written the record (the trust rule of `commandProcess`).
fn recorded_cgroup(command: &RecordedCommand, dir_key: &str) -> Option<crate::cgroup::RunCgroup> {
    if !command.writer.only_by_owner() {
        return None;
    }
    let path = command
        .record
        .extra_str(worklane_identity::cgroup::RECORD_FIELD)?;
    crate::cgroup::RunCgroup::recorded(
        path,
        dir_key,
        &command.resource,
        command.record.epoch?,
        command.writer.uid,
    )
}

/// One record per command: a `run --jobs` names its command in its agent (or test-run) slot
/// and again in its build's own job slot; it is one command, halted and counted once, under
/// the slot that is not the job slot.
fn one_per_command(mut commands: Vec<RecordedCommand>) -> Vec<RecordedCommand> {
    let is_job = |c: &RecordedCommand| c.resource.starts_with("job-");
    commands.sort_by_key(|c| is_job(c));
    let mut seen = HashSet::new();
    commands.retain(|c| seen.insert((c.pid, c.start, c.record.pid())));
    commands
}

/// The runs enforcement itself halted, in the journal (`halt`, by `worklane`): a supervisor
/// that halted its own command says so itself.
fn journal_halts(pool: &Pool, report: &Report, killed: &BTreeSet<Run>) {
    let reason = pool
        .stop()
        .ok()
        .flatten()
        .map_or_else(|| "STOP".to_owned(), |s| s.to_string());
    for halted in report.halted.iter().filter(|h| h.by_worklane) {
        let signal = if killed.contains(&halted.run) {
            Signal::KILL.as_raw()
        } else {
            Signal::TERM.as_raw()
        };
        pool.journal().emit(worklane_journal::Event::Halt {
            resource: halted.run.resource.clone(),
            command_pid: halted.run.pid,
            by: "worklane".to_owned(),
            reason: reason.clone(),
            signal: Some(crate::signal_name(signal)),
            status: None,
            took_ms: u64::try_from(report.took.as_millis()).unwrap_or(u64::MAX),
        });
    }
}

#[cfg(test)]
mod tests;
