//! Enforcement against real processes: `sleep` children of this test, stopped, continued and
//! killed, named by records written into a temp slot directory. Time is the loop's own
//! [`Clock`]: a test clock that moves only when the loop sleeps, and at each sleep asks the
//! test what must hold at that moment (so the grace's boundaries are pinned to the tick, and a
//! signal sent early is seen as pending in `/proc/<pid>/status` or as the process gone).
//! Every wait for a process to change has a deadline.

use super::*;
use std::cell::{Cell, RefCell};
use std::process::{Command, Stdio};
use worklane_admission::Stop;
use worklane_slotfile::{Environment, SlotDir};
use worklane_testkit::{Child, Gated};

/// The uid of `nobody`'s processes (started through `setpriv`; the tests run as root).
const NOBODY: u32 = 65534;

/// `args` started with stdin from `/dev/null`, leading a process group of its own when
/// `own_group`.
fn start(args: &[&str], own_group: bool) -> Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(args[0]);
    cmd.args(&args[1..]).stdin(Stdio::null());
    if own_group {
        cmd.process_group(0);
    }
    cmd.spawn_gated().expect("start a process")
}

fn sleeper() -> Child {
    start(&["sleep", "60"], true)
}

/// `sleep` as `nobody`, once it runs as that user.
fn nobodys_sleeper() -> Child {
    let child = start(
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sleep",
            "60",
        ],
        true,
    );
    let pid = child.id();
    assert!(
        within(|| observe(pid).is_some_and(|s| s.uid == NOBODY)),
        "setpriv's sleep never ran as nobody"
    );
    child
}

/// Waits, for at most 10 s, until `done`; whether it came.
fn within(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    done()
}

fn start_of(pid: u32) -> u64 {
    observe(pid).expect("the process is seen").start
}

/// Gone, or a zombie (it has exited; its parent, this test, has not reaped it).
fn dead(pid: u32) -> bool {
    observe(pid).is_none_or(|s| matches!(s.state, b'Z' | b'X'))
}

/// Waits for `pid` to have ended.
fn ends(pid: u32, why: &str) {
    assert!(within(|| dead(pid)), "pid {pid} never ended: {why}");
}

/// Alive, and no signal sent to it waits to be delivered: nothing has signalled it, or what
/// did was discarded (an ignored signal, SIGCONT to a running process).
fn untouched(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_owned()
    };
    let state = field("State:");
    !state.starts_with('Z')
        && !state.starts_with('X')
        && u64::from_str_radix(&field("SigPnd:"), 16) == Ok(0)
        && u64::from_str_radix(&field("ShdPnd:"), 16) == Ok(0)
}

/// Waits (within [`within`]'s bound) until process `pid` ignores SIGTERM: `env
/// --ignore-signal=TERM` sets that up after its own `exec`, so a SIGTERM sent before would
/// end it.
fn wait_ignoring_term(pid: u32) {
    assert!(
        within(
            || std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("SigIgn:"))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                    .is_some_and(|ignored| ignored & (1 << 14) != 0)
            })
        ),
        "process {pid} never ignored SIGTERM"
    );
}

fn signal(pid: u32, signal: Signal) {
    let pid = Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid");
    rustix::process::kill_process(pid, signal).expect("signal a test process");
}

/// SIGSTOPs `pid` and waits until it shows stopped.
fn stop(pid: u32) {
    signal(pid, Signal::STOP);
    assert!(
        within(|| observe(pid).is_some_and(|s| s.state == b'T')),
        "pid {pid} never stopped"
    );
}

fn running(pid: u32) -> bool {
    observe(pid).is_some_and(|s| !matches!(s.state, b'T' | b't' | b'Z' | b'X'))
}

/// A process that has ended and been reaped: its pid and start, as a record of a supervisor
/// SIGKILLed since names it.
fn gone() -> ProcessIdentity {
    let mut child = sleeper();
    let identity = ProcessIdentity {
        pid: child.id(),
        start: start_of(child.id()),
    };
    child.kill().expect("kill");
    child.wait().expect("reap");
    identity
}

fn identity(child: &Child) -> ProcessIdentity {
    ProcessIdentity {
        pid: child.id(),
        start: start_of(child.id()),
    }
}

fn local() -> Place {
    Place::current().expect("this machine's place").clone()
}

const ROOT_HERE: Me = Me {
    uid: 0,
    pid: u32::MAX,
    pgid: u32::MAX,
    sid: u32::MAX,
};

mod sending {
    use super::*;

    #[test]
    fn a_single_process_is_signalled_only_while_it_is_the_process_observed() {
        let child = sleeper();
        let pid = child.id();
        let start = start_of(pid);
        send(
            &Target {
                pid,
                start: start + 1,
                group: false,
            },
            Signal::KILL,
        );
        assert!(
            untouched(pid),
            "a process of another start (the pid reused since) is never signalled"
        );
        send(
            &Target {
                pid,
                start,
                group: false,
            },
            Signal::KILL,
        );
        ends(pid, "the process observed is signalled");
    }

    #[test]
    fn a_group_is_signalled_whole() {
        let mut leader = start(&["sh", "-c", "sleep 60 & wait"], true);
        let pid = leader.id();
        let member = || {
            crate::sys::table()
                .expect("a process table")
                .iter()
                .find(|e| e.ppid == pid)
                .map(|e| e.pid)
        };
        assert!(
            within(|| member().is_some()),
            "the shell never started its member"
        );
        let member = member().expect("the member");
        send(
            &Target {
                pid,
                start: start_of(pid),
                group: true,
            },
            Signal::KILL,
        );
        ends(pid, "the group's leader is signalled");
        ends(member, "and every member of its group");
        let _ = leader.wait();
    }
}

/// A record naming `holder` as its supervisor, written as a `worklane run` writes it.
fn record(holder: ProcessIdentity, place: &Place) -> Record {
    Record {
        holder: Recorded::new(holder, place.clone()),
        epoch: Some(1),
        ..Record::default()
    }
}

/// The command `child` as a record's `commandProcess` names it.
fn names(record: &mut Record, child: &Child, group: bool) {
    record.extra.extend(
        crate::supervise::Started {
            pid: child.id(),
            start: Some(start_of(child.id())),
            group,
        }
        .fields(),
    );
    record
        .extra
        .insert("command".into(), "sleep 60".to_owned().into());
}

fn in_memory(record: Record, writer: Written) -> RecordedCommand {
    RecordedCommand {
        resource: "agent-0.lock".into(),
        record,
        pid: 1,
        start: None,
        group: false,
        writer,
        guard: None,
    }
}

fn by(uid: u32) -> Written {
    Written {
        uid,
        mode: 0o644,
        links: 1,
    }
}

mod stopped_supervisor {
    use super::*;

    #[test]
    fn only_a_stopped_supervisor_the_record_proves_is_ours_to_continue() {
        let place = local();
        let sup = sleeper();
        let pid = sup.id();
        let start = start_of(pid);
        let continued = Some(Target {
            pid,
            start,
            group: false,
        });
        let of = |start: u64, writer: Written, me: &Me| {
            stopped_supervisor(
                &in_memory(record(ProcessIdentity { pid, start }, &place), writer),
                me,
            )
        };
        assert_eq!(of(start, by(0), &ROOT_HERE), None, "it runs: not stopped");
        stop(pid);
        assert_eq!(
            of(start, by(0), &ROOT_HERE),
            continued,
            "stopped, and the record's"
        );
        assert_eq!(
            of(start + 1, by(0), &ROOT_HERE),
            None,
            "another start: the pid was reused"
        );
        assert_eq!(
            of(start, by(1000), &ROOT_HERE),
            None,
            "a process of another user than the record's writer"
        );
        assert_eq!(
            of(
                start,
                Written {
                    uid: 0,
                    mode: 0o664,
                    links: 1
                },
                &ROOT_HERE
            ),
            None,
            "a record others could have written"
        );
        let user = Me {
            uid: 1000,
            ..ROOT_HERE
        };
        assert_eq!(of(start, by(0), &user), None, "not ours to signal");
        let mut unnamed = record(ProcessIdentity { pid, start }, &place);
        unnamed.holder.identity = worklane_identity::Field::Missing;
        assert_eq!(
            stopped_supervisor(&in_memory(unnamed, by(0)), &ROOT_HERE),
            None,
            "a record without the supervisor's start proves nothing"
        );
    }

    #[test]
    fn another_users_stopped_supervisor_is_continued_by_root_or_that_user() {
        let place = local();
        let sup = nobodys_sleeper();
        let pid = sup.id();
        let start = start_of(pid);
        stop(pid);
        let command = in_memory(record(ProcessIdentity { pid, start }, &place), by(NOBODY));
        let continued = Some(Target {
            pid,
            start,
            group: false,
        });
        assert_eq!(stopped_supervisor(&command, &ROOT_HERE), continued, "root");
        let nobody = Me {
            uid: NOBODY,
            ..ROOT_HERE
        };
        assert_eq!(stopped_supervisor(&command, &nobody), continued, "its user");
        let other = Me {
            uid: 1000,
            ..ROOT_HERE
        };
        assert_eq!(stopped_supervisor(&command, &other), None, "anyone else");
    }
}

/// A slot directory of its own in a temp directory.
struct Site {
    _temp: tempfile::TempDir,
    pool: Pool,
}

impl Site {
    fn new() -> Site {
        let temp = tempfile::tempdir().expect("temp dir");
        let slots = temp.path().join("slots");
        std::fs::create_dir(&slots).expect("slot directory");
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", &slots);
        let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
        Site { _temp: temp, pool }
    }

    /// Writes `record` as `name`, mode `mode`, owned by `uid`.
    fn write(&self, name: &str, record: &Record, mode: u32, uid: u32) {
        let file = self.pool.dir().file(name).expect("a slot name");
        file.replace(&record.to_bytes(), mode)
            .expect("write the record");
        let path = self.pool.dir().path().join(name);
        std::os::unix::fs::chown(&path, Some(uid), Some(uid)).expect("chown the record");
        let (_, writer) = file
            .read_with_owner()
            .expect("read back")
            .expect("the record");
        assert_eq!(
            (writer.uid, writer.mode & 0o777),
            (uid, mode),
            "{name} as meant"
        );
    }

    fn write_stop(&self) {
        worklane_admission::stop::write(
            self.pool.dir(),
            &Stop {
                by: "test".into(),
                at: "2026-12-04T00:00:00Z".into(),
                reason: "halt everything".into(),
            },
        )
        .expect("write STOP");
    }

    /// The `halt` events of the site's journal: (resource, command pid, by, signal).
    fn halts(&self) -> Vec<(String, u32, String, Option<String>)> {
        worklane_journal::read(self.pool.dir())
            .expect("read the journal")
            .entries
            .into_iter()
            .filter_map(|e| match e.event {
                worklane_journal::Event::Halt {
                    resource,
                    command_pid,
                    by,
                    signal,
                    ..
                } => Some((resource, command_pid, by, signal)),
                _ => None,
            })
            .collect()
    }
}

mod continue_unnamed {
    use super::*;

    #[test]
    fn only_stopped_supervisors_that_named_no_command_in_records_that_prove_them_are_continued() {
        let site = Site::new();
        let place = local();
        let mut elsewhere = local();
        elsewhere.host.push_str("-elsewhere");
        let mut other_ns = local();
        other_ns.pidns = Some(other_ns.pidns.unwrap_or(0) + 1);
        // Each record's supervisor, stopped unless said otherwise.
        let sups: Vec<Child> = (0..9).map(|_| sleeper()).collect();
        let nobody = nobodys_sleeper();
        for s in sups.iter().chain([&nobody]) {
            stop(s.id());
        }
        let id = |i: usize| identity(&sups[i]);
        site.write("agent-0.lock", &record(id(0), &place), 0o644, 0);
        site.write("role-merger.lease", &record(id(1), &place), 0o600, 0);
        site.write("agent-1.lock", &record(id(2), &place), 0o664, 0);
        let mut named = record(id(3), &place);
        names(&mut named, &sleeper(), true);
        site.write("agent-2.lock", &named, 0o644, 0);
        site.write("agent-3.lock", &record(id(4), &elsewhere), 0o644, 0);
        site.write("agent-4.lock", &record(id(5), &other_ns), 0o644, 0);
        let reused = ProcessIdentity {
            pid: sups[6].id(),
            start: start_of(sups[6].id()) + 1,
        };
        site.write("agent-5.lock", &record(reused, &place), 0o644, 0);
        site.write("agent-6.lock", &record(id(7), &place), 0o644, NOBODY);
        signal(sups[8].id(), Signal::CONT);
        assert!(within(|| running(sups[8].id())), "continued by the test");
        site.write("agent-7.lock", &record(id(8), &place), 0o644, 0);
        site.write(
            "agent-8.lock",
            &record(identity(&nobody), &place),
            0o644,
            NOBODY,
        );

        let mut continued = BTreeSet::new();
        let user = Me {
            uid: 1000,
            ..ROOT_HERE
        };
        assert_eq!(
            continue_unnamed(&site.pool, &place, &user, &mut continued),
            vec![],
            "none of them is uid 1000's to continue"
        );
        assert!(continued.is_empty());
        let woken = continue_unnamed(&site.pool, &place, &ROOT_HERE, &mut continued);
        let run = |name: &str, child: &Child| {
            (
                Target {
                    pid: child.id(),
                    start: start_of(child.id()),
                    group: false,
                },
                Run {
                    resource: name.to_owned(),
                    pid: child.id(),
                    command: None,
                },
            )
        };
        assert_eq!(
            woken,
            vec![
                run("agent-0.lock", &sups[0]),
                run("agent-8.lock", &nobody),
                run("role-merger.lease", &sups[1]),
            ],
            "a slot's and a role's supervisor stopped before they named their command, \
             and nobody's in a record nobody wrote"
        );
        for (target, run) in &woken {
            assert!(within(|| running(target.pid)), "{run} was continued");
        }
        for (i, why) in [
            (2, "a record others could have written"),
            (
                3,
                "a supervisor that named its command (it is judged with the others)",
            ),
            (4, "another host's"),
            (5, "another pid namespace's"),
            (6, "a record of another start (the pid reused)"),
            (7, "a supervisor of another user than the record's writer"),
        ] {
            assert_eq!(
                observe(sups[i].id()).map(|s| s.state),
                Some(b'T'),
                "left stopped: {why}"
            );
        }
        assert_eq!(
            continued,
            [sups[0].id(), sups[1].id(), nobody.id()]
                .into_iter()
                .collect(),
            "remembered"
        );
        stop(sups[0].id());
        assert_eq!(
            continue_unnamed(&site.pool, &place, &ROOT_HERE, &mut continued),
            vec![],
            "each is continued once"
        );
    }
}

/// A clock that moves only when the loop sleeps, and then calls `each` with the time since
/// the start: what the test checks, or does, at that moment.
struct Ticks<F: FnMut(Duration)> {
    start: Instant,
    now: Cell<Duration>,
    each: RefCell<F>,
}

impl<F: FnMut(Duration)> Ticks<F> {
    fn new(each: F) -> Ticks<F> {
        Ticks {
            start: Instant::now(),
            now: Cell::new(Duration::ZERO),
            each: RefCell::new(each),
        }
    }
}

impl<F: FnMut(Duration)> Clock for Ticks<F> {
    fn now(&self) -> Instant {
        self.start + self.now.get()
    }

    fn sleep(&self, pause: Duration) {
        let now = self.now.get() + pause;
        self.now.set(now);
        (self.each.borrow_mut())(now);
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn halted(name: &str, pid: u32, command: bool, by_worklane: bool) -> Halted {
    Halted {
        run: Run {
            resource: name.to_owned(),
            pid,
            command: command.then(|| "sleep 60".to_owned()),
        },
        by_worklane,
    }
}

mod enforce_stop {
    use super::*;

    #[test]
    fn a_command_whose_supervisor_is_gone_gets_sigterm_at_once() {
        let site = Site::new();
        site.write_stop();
        let command = sleeper();
        let pid = command.id();
        let mut rec = record(gone(), &local());
        names(&mut rec, &command, true);
        site.write("agent-0.lock", &rec, 0o644, 0);
        let clock = Ticks::new(|now| {
            assert_eq!(now, ms(50), "one look after the signal is enough");
            ends(pid, "SIGTERM, at once");
        });
        let report = enforce_stop_on(&site.pool, &clock);
        assert_eq!(report.halted, [halted("agent-0.lock", pid, true, true)]);
        assert!(report.left.is_empty(), "{:?}", report.left);
        assert_eq!(report.took, ms(50), "done as soon as nothing is left");
        assert_eq!(
            site.halts(),
            [(
                "agent-0.lock".to_owned(),
                pid,
                "worklane".to_owned(),
                Some("SIGTERM".to_owned())
            )],
            "enforcement journals the halt it made, and by which signal"
        );
    }

    #[test]
    fn a_command_that_outlives_sigterm_gets_sigkill_a_grace_later() {
        let site = Site::new();
        let command = start(&["env", "--ignore-signal=TERM", "sleep", "60"], true);
        let pid = command.id();
        wait_ignoring_term(pid);
        let mut rec = record(gone(), &local());
        names(&mut rec, &command, true);
        site.write("agent-0.lock", &rec, 0o644, 0);
        let clock = Ticks::new(|now| {
            if now <= GRACE {
                assert!(
                    untouched(pid),
                    "{now:?}: it ignores SIGTERM, and SIGKILL waits"
                );
            } else {
                assert_eq!(now, GRACE + ms(50), "SIGKILLed at the grace");
                ends(pid, "SIGKILL a grace after SIGTERM");
            }
        });
        let report = enforce_stop_on(&site.pool, &clock);
        assert_eq!(report.halted, [halted("agent-0.lock", pid, true, true)]);
        assert!(report.left.is_empty(), "{:?}", report.left);
        assert_eq!(report.took, GRACE + ms(50));
        assert_eq!(
            site.halts(),
            [(
                "agent-0.lock".to_owned(),
                pid,
                "worklane".to_owned(),
                Some("SIGKILL".to_owned())
            )]
        );
    }

    #[test]
    fn a_live_supervisor_is_left_a_check_and_its_grace_then_its_command_is_killed() {
        let site = Site::new();
        let supervisor = sleeper();
        let command = sleeper();
        let pid = command.id();
        let mut rec = record(identity(&supervisor), &local());
        names(&mut rec, &command, true);
        site.write("agent-0.lock", &rec, 0o644, 0);
        let kill_at = CHECK_EVERY + GRACE + ms(500);
        let clock = Ticks::new(|now| {
            if now <= kill_at {
                assert!(untouched(pid), "{now:?}: its supervisor halts it");
            } else {
                assert_eq!(now, kill_at + ms(50));
                ends(pid, "SIGKILL once the supervisor had its check and grace");
            }
        });
        let report = enforce_stop_on(&site.pool, &clock);
        assert_eq!(report.halted, [halted("agent-0.lock", pid, true, true)]);
        assert_eq!(report.took, kill_at + ms(50));
        assert!(untouched(supervisor.id()), "the supervisor is left alone");
        assert_eq!(
            site.halts(),
            [(
                "agent-0.lock".to_owned(),
                pid,
                "worklane".to_owned(),
                Some("SIGKILL".to_owned())
            )]
        );
    }

    #[test]
    fn a_command_its_supervisor_halts_is_reported_as_the_supervisors_halt() {
        let site = Site::new();
        let supervisor = sleeper();
        let command = sleeper();
        let pid = command.id();
        let mut rec = record(identity(&supervisor), &local());
        names(&mut rec, &command, true);
        site.write("agent-0.lock", &rec, 0o644, 0);
        let clock = Ticks::new(|now| {
            assert!(
                untouched(pid),
                "{now:?}: the supervisor acts, not enforcement"
            );
            if now == ms(100) {
                // The supervisor halts its command.
                signal(pid, Signal::TERM);
                ends(pid, "its supervisor's SIGTERM");
            }
        });
        let report = enforce_stop_on(&site.pool, &clock);
        assert_eq!(report.halted, [halted("agent-0.lock", pid, true, false)]);
        assert_eq!(report.took, ms(100));
        assert_eq!(site.halts(), [], "the supervisor journals its own halt");
    }

    #[test]
    fn a_stopped_supervisor_is_continued_and_its_command_halted() {
        let site = Site::new();
        let supervisor = sleeper();
        let command = sleeper();
        let pid = command.id();
        stop(supervisor.id());
        let mut rec = record(identity(&supervisor), &local());
        names(&mut rec, &command, true);
        site.write("agent-0.lock", &rec, 0o644, 0);
        let clock = Ticks::new(|now| {
            assert_eq!(now, ms(50));
            ends(pid, "SIGTERM at once: its supervisor cannot act");
            assert!(
                within(|| running(supervisor.id())),
                "the supervisor is continued, to let go of the slot"
            );
        });
        let report = enforce_stop_on(&site.pool, &clock);
        assert_eq!(report.halted, [halted("agent-0.lock", pid, true, true)]);
        assert_eq!(
            site.halts(),
            [(
                "agent-0.lock".to_owned(),
                pid,
                "worklane".to_owned(),
                Some("SIGTERM".to_owned())
            )]
        );
    }

    #[test]
    fn a_continued_supervisor_counts_as_running_until_it_is_gone() {
        let site = Site::new();
        let mut supervisor = sleeper();
        let sup = supervisor.id();
        stop(sup);
        site.write(
            "agent-0.lock",
            &record(identity(&supervisor), &local()),
            0o644,
            0,
        );
        // Another run, over: its command and its supervisor are gone.
        let mut over = record(gone(), &local());
        over.extra.extend(
            crate::supervise::Started {
                pid: gone().pid,
                start: Some(1),
                group: true,
            }
            .fields(),
        );
        site.write("agent-1.lock", &over, 0o644, 0);
        let clock = Ticks::new(|now| {
            assert!(
                within(|| observe(sup).is_none_or(|s| s.state != b'T')),
                "continued"
            );
            if now == ms(100) {
                // It exits (and stays a zombie until the test reaps it).
                signal(sup, Signal::KILL);
                ends(sup, "the supervisor exits");
            }
            assert!(now <= ms(100), "{now:?}: waited on after it was gone");
        });
        let report = enforce_stop_on(&site.pool, &clock);
        assert_eq!(report.took, ms(100), "waited on while it ran, not after");
        assert_eq!(report.halted, [halted("agent-0.lock", sup, false, false)]);
        assert!(report.left.is_empty(), "{:?}", report.left);
        let _ = supervisor.wait();
    }

    #[test]
    fn a_continued_supervisor_that_names_its_command_is_judged_with_the_others() {
        let site = Site::new();
        let supervisor = sleeper();
        let sup = supervisor.id();
        stop(sup);
        let mut rec = record(identity(&supervisor), &local());
        site.write("agent-0.lock", &rec, 0o644, 0);
        let command = sleeper();
        let pid = command.id();
        let kill_at = CHECK_EVERY + GRACE + ms(500);
        let clock = Ticks::new(|now| {
            if now == ms(100) {
                // Continued, it names its command.
                assert!(within(|| running(sup)), "continued");
                names(&mut rec, &command, true);
                site.write("agent-0.lock", &rec, 0o644, 0);
            }
            if now <= kill_at {
                assert!(untouched(pid), "{now:?}: its supervisor, running, halts it");
            } else {
                ends(pid, "killed after the supervisor's check and grace");
            }
        });
        let report = enforce_stop_on(&site.pool, &clock);
        assert!(report.left.is_empty(), "{:?}", report.left);
        assert!(
            report
                .halted
                .contains(&halted("agent-0.lock", pid, true, true)),
            "the command it named was running at STOP: {:?}",
            report.halted
        );
    }

    #[test]
    fn a_run_nothing_can_prove_is_left_with_the_reason_when_enforcement_gives_up() {
        let site = Site::new();
        let mut elsewhere = local();
        elsewhere.host.push_str("-elsewhere");
        let command = sleeper();
        let mut rec = record(gone(), &elsewhere);
        names(&mut rec, &command, true);
        site.write("agent-0.lock", &rec, 0o644, 0);
        let give_up = CHECK_EVERY + GRACE + ms(1500);
        let clock = Ticks::new(|now| {
            assert!(untouched(command.id()), "never signalled");
            assert!(
                now <= give_up,
                "{now:?}: enforcement gives up at {give_up:?}"
            );
        });
        let report = enforce_stop_on(&site.pool, &clock);
        assert_eq!(report.took, give_up);
        assert!(report.halted.is_empty());
        assert_eq!(
            report.left,
            [Left {
                run: Run {
                    resource: "agent-0.lock".into(),
                    pid: command.id(),
                    command: Some("sleep 60".into()),
                },
                why: Some(
                    "it runs on another host, boot or pid namespace; its own supervisor halts it"
                        .into()
                ),
            }]
        );
    }
}

mod cgroups {
    use super::*;

    /// The cgroup of the run holding `agent-0.lock` at epoch 1 in `site`, with `child` moved
    /// into it.
    fn run_cgroup(site: &Site, child: &Child) -> crate::cgroup::RunCgroup {
        let key = worklane_identity::cgroup::dir_key_of(site.pool.dir()).expect("key");
        let cgroup = crate::cgroup::RunCgroup::create(&key, "agent-0.lock", 1)
            .expect("cgroup v2 containment on this machine");
        std::io::Write::write_all(
            &mut cgroup.procs_file().expect("cgroup.procs"),
            child.id().to_string().as_bytes(),
        )
        .expect("move it in");
        cgroup
    }

    /// A record of a run whose supervisor and command are gone, naming `cgroup`; and the
    /// command's pid.
    fn leftover(cgroup: &crate::cgroup::RunCgroup) -> (Record, u32) {
        let mut rec = record(gone(), &local());
        let command = gone();
        rec.extra.extend(
            crate::supervise::Started {
                pid: command.pid,
                start: Some(command.start),
                group: true,
            }
            .fields(),
        );
        rec.extra.insert(
            worklane_identity::cgroup::RECORD_FIELD.to_owned(),
            cgroup.path().into(),
        );
        (rec, command.pid)
    }

    fn gone_from_the_hierarchy(cgroup: &crate::cgroup::RunCgroup) -> bool {
        !worklane_identity::cgroup::unified()
            .expect("unified")
            .join(&cgroup.path()[1..])
            .exists()
    }

    #[test]
    fn what_a_gone_run_left_in_its_cgroup_gets_sigterm_then_sigkill_a_grace_later() {
        let site = Site::new();
        let daemon = start(&["env", "--ignore-signal=TERM", "sleep", "60"], true);
        let pid = daemon.id();
        wait_ignoring_term(pid);
        let cgroup = run_cgroup(&site, &daemon);
        let (rec, command) = leftover(&cgroup);
        site.write("agent-0.lock", &rec, 0o644, 0);
        let clock = Ticks::new(|now| {
            if now <= GRACE {
                assert!(
                    untouched(pid),
                    "{now:?}: SIGTERM is ignored; SIGKILL waits its grace"
                );
            } else {
                ends(pid, "SIGKILL a grace after SIGTERM, through its cgroup");
            }
        });
        let report = enforce_stop_on(&site.pool, &clock);
        assert!(report.left.is_empty(), "{:?}", report.left);
        assert!(
            report.took > GRACE,
            "waited for the cgroup to empty: {:?}",
            report.took
        );
        assert_eq!(
            report.halted,
            [Halted {
                run: Run {
                    resource: "agent-0.lock".into(),
                    pid: command,
                    command: None,
                },
                by_worklane: true
            }]
        );
        assert_eq!(
            site.halts(),
            [(
                "agent-0.lock".to_owned(),
                command,
                "worklane".to_owned(),
                Some("SIGKILL".to_owned())
            )],
            "journaled as killed"
        );
        assert!(gone_from_the_hierarchy(&cgroup), "emptied, it is removed");
    }

    #[test]
    fn a_cgroup_named_by_a_record_others_could_have_written_is_left_alone() {
        let site = Site::new();
        let daemon = sleeper();
        let cgroup = run_cgroup(&site, &daemon);
        site.write("agent-0.lock", &leftover(&cgroup).0, 0o664, 0);
        let clock = Ticks::new(|now| {
            assert!(untouched(daemon.id()), "{now:?}: never signalled");
        });
        let report = enforce_stop_on(&site.pool, &clock);
        assert!(report.halted.is_empty(), "{:?}", report.halted);
        let mut daemon = daemon;
        let _ = daemon.kill();
        let _ = daemon.wait();
        assert!(
            within(|| cgroup.remove_if_empty()),
            "the test's cgroup removed"
        );
    }

    #[test]
    fn an_emptied_cgroup_a_gone_run_left_is_removed() {
        let site = Site::new();
        let mut daemon = sleeper();
        let cgroup = run_cgroup(&site, &daemon);
        let _ = daemon.kill();
        let _ = daemon.wait();
        assert!(within(|| cgroup.pids().is_empty()), "emptied");
        site.write("agent-0.lock", &leftover(&cgroup).0, 0o644, 0);
        let report = enforce_stop_on(&site.pool, &Ticks::new(|_| {}));
        assert!(
            report.halted.is_empty() && report.left.is_empty(),
            "{report:?}"
        );
        assert!(gone_from_the_hierarchy(&cgroup), "removed by enforcement");
    }
}
