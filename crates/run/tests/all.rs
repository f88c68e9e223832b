//! What a Rust caller of `worklane-run` sees, on real processes and real files: a helper
//! program (`run-holder`, `tests/holder`) takes a slot or a role lease and runs a command
//! under `Supervisor`, in a process of its own that the tests SIGKILL, SIGSTOP and signal.
//!
//! Tests run on several threads, and a child being started by one holds copies of every
//! descriptor of the process until it execs, a guard's included: processes are started
//! through the fork gate, and every take or release in this process runs with the gate quiet.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use worklane_admission::{Kind, Pool, Stop, Take};
use worklane_lease::Request;
use worklane_slotfile::{Environment, SlotDir};
use worklane_testkit::gate;
use worklane_testkit::{Child, Gated};

/// A slot directory of its own, capped at one agent.
struct Site {
    temp: tempfile::TempDir,
    pool: Pool,
}

impl Site {
    fn new() -> Site {
        let temp = tempfile::tempdir().expect("temp dir");
        let slots = temp.path().join("slots");
        std::fs::create_dir(&slots).expect("slot directory");
        std::fs::write(slots.join("config.json"), r#"{"max_agents": 1}"#).expect("config");
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", &slots);
        let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
        Site { temp, pool }
    }

    /// A slot directory whose config allows `agents` agents and `jobs` job slots.
    fn with_caps(agents: u32, jobs: u32) -> Site {
        let site = Site::new();
        std::fs::write(
            site.temp.path().join("slots/config.json"),
            format!(r#"{{"max_agents": {agents}, "max_jobs": {jobs}}}"#),
        )
        .expect("config");
        site
    }

    /// `run-holder slot OPTIONS -- sh -c SCRIPT`, `$T` its directory, `$CTR` a counter.
    fn build(&self, options: &[&str], script: &str) -> Holder {
        self.build_of(options, &["sh", "-c", script])
    }

    /// `run-holder slot OPTIONS -- COMMAND`, as [`Site::build`].
    fn build_of(&self, options: &[&str], command: &[&str]) -> Holder {
        self.build_in(options, command, &[])
    }

    /// [`Site::build_of`] with variables of its own in the supervisor's environment (and so
    /// in its command's), as `TMPDIR`.
    fn build_in(
        &self,
        options: &[&str],
        command: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Holder {
        let mut args = vec!["slot"];
        args.extend_from_slice(options);
        let mut cmd = self.holder_command(&args);
        cmd.arg("--")
            .args(command)
            .env("T", self.temp.path())
            .env("CTR", self.path("counter"))
            .envs(env.iter().copied())
            .current_dir(self.temp.path())
            .stdin(Stdio::null());
        Holder::start(&mut cmd)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.temp.path().join(name)
    }

    /// `run-holder ARGS -- COMMAND`, its stdout piped, started in this site's directory.
    fn holder(&self, args: &[&str], command: &[&str]) -> Holder {
        let mut cmd = self.holder_command(args);
        cmd.arg("--").args(command).stdin(Stdio::null());
        Holder::start(&mut cmd)
    }

    /// `run-holder queue PRIORITY [PROBE]`: a queued full run's runner, which keeps
    /// `full-run.lock` once it holds it until [`Holder::close`].
    fn runner(&self, priority: i64, probe: Option<&str>) -> Holder {
        let mut cmd = self.holder_command(&["queue", &priority.to_string()]);
        cmd.args(probe).arg("--").stdin(Stdio::piped());
        Holder::start(&mut cmd)
    }

    fn holder_command(&self, args: &[&str]) -> Command {
        // SIGINT and SIGQUIT at their defaults whatever started the tests (a shell's
        // background job, cargo-mutants, ignore them): run-holder forwards only the signals
        // its caller does not ignore.
        let mut cmd = Command::new("env");
        cmd.arg("--default-signal=INT,QUIT")
            .arg(env!("CARGO_BIN_EXE_run-holder"));
        // No jobserver of whatever runs the tests (cargo-mutants makes one) reaches a build:
        // a build that was not given its own would use it.
        for var in ["MAKEFLAGS", "MFLAGS", "CARGO_MAKEFLAGS"] {
            cmd.env_remove(var);
        }
        cmd.args(args)
            .env("AGENT_SLOTS_DIR", self.temp.path().join("slots"))
            .env("WORKLANE_TEST_ROOT", self.temp.path())
            .stdout(Stdio::piped());
        cmd
    }

    /// Whether an agent slot can be taken now (released at once if it can).
    fn slot_is_free(&self) -> bool {
        gate::quietly(
            || match self.pool.try_take(Kind::Agent, &Request::new("test")) {
                Ok(Take::Held(slot)) => {
                    drop(slot);
                    true
                }
                Ok(Take::Blocked(_)) => false,
                Err(e) => panic!("take: {e}"),
            },
        )
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
}

/// A `run-holder` running, its lines read by a thread of their own so that every wait for
/// one has a deadline.
struct Holder {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Holder {
    fn start(cmd: &mut Command) -> Holder {
        let mut child = cmd.spawn_gated().expect("start run-holder");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if send.send(line.trim_end().to_owned()).is_err() {
                    break;
                }
            }
        });
        Holder { child, lines }
    }

    /// The next line it prints (empty at its end); at most 20 s.
    fn line(&mut self) -> String {
        match self.lines.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => String::new(),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("run-holder (pid {}) said nothing for 20 s", self.pid())
            }
        }
    }

    /// Waits (at most 30 s) for it to end (after its last line it still releases what it
    /// holds).
    fn end(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for run-holder") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "run-holder (pid {}) did not end within 30 s",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Closes its stdin: a runner holding `full-run.lock` lets go of it and ends.
    fn close(&mut self) {
        drop(self.child.stdin.take());
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid =
            rustix::process::Pid::from_raw(i32::try_from(self.pid()).expect("pid")).expect("pid");
        rustix::process::kill_process(pid, signal).expect("signal run-holder");
    }
}

/// Waits (bounded, polling) until `path` holds a pid, and returns it.
fn pid_in(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never held a pid",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` is alive (a zombie counts as gone: it holds no descriptor).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Waits (bounded) until `done` says yes; false if it never did.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

fn sigkill(pid: u32) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid");
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
}

mod cgroups;
mod jobs;
mod process;
mod queued;
mod roles;
mod supervise;

mod supervisor {
    use super::*;

    #[test]
    fn the_command_learns_its_slot_and_its_status_is_the_outcome() {
        let site = Site::new();
        let mut holder = site.holder(
            &["slot"],
            &[
                "sh",
                "-c",
                r#"test "$WORKLANE_RESOURCE" = agent-0.lock && test -n "$WORKLANE_EPOCH" && exit 7"#,
            ],
        );
        assert_eq!(holder.line(), "held agent-0.lock");
        assert_eq!(
            holder.line(),
            "outcome 7 - - false",
            "the command saw its slot and its epoch, and its status came back"
        );
        assert!(holder.end().success(), "run-holder exits 0");
        assert!(site.slot_is_free(), "the slot is released after the run");
    }

    #[test]
    fn a_command_killed_by_a_signal_says_which() {
        let site = Site::new();
        let mut holder = site.holder(&["slot"], &["sh", "-c", "kill -USR1 $$"]);
        assert_eq!(holder.line(), "held agent-0.lock");
        assert_eq!(
            holder.line(),
            "outcome 138 - 10 false",
            "128+10 and the signal, for the caller to end by it"
        );
    }

    #[test]
    fn a_missing_program_is_an_error_naming_it() {
        let site = Site::new();
        let mut holder = site.holder(&["slot"], &["no-such-program-of-worklane"]);
        assert_eq!(holder.line(), "held agent-0.lock");
        assert_eq!(
            holder.line(),
            "error no-such-program-of-worklane: command not found"
        );
    }

    #[test]
    fn a_signal_to_the_supervisor_reaches_the_command() {
        let site = Site::new();
        let ready = site.path("ready");
        let script = format!(
            "trap 'exit 42' USR2; echo $$ > {}; while :; do sleep 0.05; done",
            ready.display()
        );
        let mut holder = site.holder(&["slot"], &["sh", "-c", &script]);
        assert_eq!(holder.line(), "held agent-0.lock");
        pid_in(&ready);
        holder.signal(rustix::process::Signal::USR2);
        assert_eq!(
            holder.line(),
            "outcome 42 - - false",
            "SIGUSR2 was forwarded to the command, whose trap exited 42"
        );
    }

    #[test]
    fn stop_halts_the_command_and_says_why() {
        let site = Site::new();
        let ready = site.path("ready");
        let script = format!("echo $$ > {}; exec sleep 60", ready.display());
        let mut holder = site.holder(&["slot"], &["sh", "-c", &script]);
        assert_eq!(holder.line(), "held agent-0.lock");
        let command = pid_in(&ready);
        site.write_stop();
        let outcome = holder.line();
        assert!(
            outcome.starts_with("outcome 143 STOP_by_test"),
            "halted by SIGTERM for STOP: {outcome}"
        );
        assert!(!alive(command), "the command is gone");
        let (pid, halt) = one_halt(&site);
        assert_eq!(pid, holder.pid(), "its supervisor says it");
        let worklane_journal::Event::Halt {
            resource,
            command_pid,
            by,
            reason,
            signal,
            status,
            ..
        } = halt
        else {
            panic!("a halt");
        };
        assert_eq!(
            (resource.as_str(), command_pid, by.as_str()),
            ("agent-0.lock", command, "supervisor")
        );
        assert!(reason.contains("halt everything"), "{reason}");
        assert_eq!(
            (signal.as_deref(), status),
            (Some("SIGTERM"), None),
            "ended by the halt's SIGTERM"
        );
    }

    #[test]
    fn a_supervisor_killed_while_its_command_runs_leaves_the_slot_held() {
        let site = Site::new();
        let ready = site.path("ready");
        // The command outlives its supervisor: it ignores the SIGTERM that the supervisor's
        // death sends it (PR_SET_PDEATHSIG) and keeps the slot's guard it inherited.
        let script = format!("trap '' TERM; echo $$ > {}; exec sleep 60", ready.display());
        let mut holder = site.holder(&["slot"], &["sh", "-c", &script]);
        assert_eq!(holder.line(), "held agent-0.lock");
        let command = pid_in(&ready);
        holder.signal(rustix::process::Signal::KILL);
        assert!(
            eventually(|| !alive(holder.pid())),
            "the supervisor is gone"
        );
        assert!(alive(command), "the command runs on");
        assert!(
            !site.slot_is_free(),
            "at cap 1 no second agent starts while the first one's command runs"
        );
        sigkill(command);
        assert!(
            eventually(|| site.slot_is_free()),
            "the slot is free once the last process of the run has gone"
        );
    }

    #[test]
    fn a_lost_role_lease_halts_the_command() {
        let site = Site::new();
        let ready = site.path("ready");
        let script = format!("echo $$ > {}; exec sleep 60", ready.display());
        let mut holder = site.holder(&["role", "merger", "2000"], &["sh", "-c", &script]);
        assert_eq!(holder.line(), "held role-merger.lease");
        let command = pid_in(&ready);
        // Another holder's record replaces ours: the next pulse finds the lease lost.
        let lease = site.pool.dir().file("role-merger.lease").expect("name");
        let mut stolen = lease.read().expect("read").expect("a record");
        stolen.extend_from_slice(b" ");
        lease.replace(&stolen, 0o644).expect("replace the record");
        let outcome = holder.line();
        assert!(
            outcome.starts_with("outcome 143 ") && outcome.ends_with(" - true"),
            "halted for the lease, and said so: {outcome}"
        );
        assert!(!alive(command), "the command is gone");
    }
}

mod enforce {
    use super::*;

    #[test]
    fn stop_halts_the_command_of_a_stopped_supervisor() {
        let site = Site::new();
        let ready = site.path("ready");
        let script = format!("echo $$ > {}; exec sleep 60", ready.display());
        let mut holder = site.holder(&["slot"], &["sh", "-c", &script]);
        assert_eq!(holder.line(), "held agent-0.lock");
        let command = pid_in(&ready);
        // The record names the command once the supervisor has seen it start.
        assert!(
            eventually(|| {
                site.pool
                    .recorded_commands()
                    .is_ok_and(|c| c.iter().any(|c| c.pid == command))
            }),
            "the record names the command"
        );
        holder.signal(rustix::process::Signal::STOP);
        site.write_stop();
        let report = worklane_run::enforce::enforce_stop(&site.pool);
        assert!(
            report.left.is_empty(),
            "nothing left running: {:?}",
            report.left
        );
        assert!(
            report
                .halted
                .iter()
                .any(|h| h.run.resource == "agent-0.lock"),
            "the run is reported halted: {:?}",
            report.halted
        );
        assert!(!alive(command), "the command is gone");
        holder.signal(rustix::process::Signal::CONT);
        let outcome = holder.line();
        assert!(
            outcome.starts_with("outcome "),
            "the continued supervisor reports its command's end: {outcome}"
        );
        assert!(holder.end().success());
        let (pid, halt) = one_halt(&site);
        assert_eq!(pid, std::process::id(), "enforcement says it");
        let worklane_journal::Event::Halt {
            resource,
            command_pid,
            by,
            signal,
            ..
        } = halt
        else {
            panic!("a halt");
        };
        assert_eq!(
            (resource.as_str(), command_pid, by.as_str()),
            ("agent-0.lock", command, "worklane")
        );
        assert!(signal.is_some(), "the signal it sent");
    }
}

mod enforce_guard {
    use super::*;

    #[test]
    fn a_run_whose_command_is_gone_is_found_by_the_processes_holding_its_guard() {
        let site = Site::new();
        // Without a cgroup, the guard's holders are all that tie the child to the run.
        let mut holder = site.build(
            &["--no-cgroup"],
            r#"sleep 60 & echo $! > "$T/child.tmp"; mv "$T/child.tmp" "$T/child"; wait"#,
        );
        assert_eq!(holder.line(), "held agent-0.lock");
        let child = pid_in(&site.path("child"));
        assert!(
            eventually(|| {
                site.pool
                    .recorded_commands()
                    .is_ok_and(|c| c.iter().any(|c| c.guard.is_some()))
            }),
            "the record names the command and the slot has its guard"
        );
        // The supervisor SIGKILLed: its death's SIGTERM ends the command (the shell); its
        // child runs on, holding the slot's guard.
        holder.signal(rustix::process::Signal::KILL);
        let _ = holder.end();
        let command = site.pool.recorded_commands().expect("records")[0].pid;
        assert!(eventually(|| !alive(command)), "the command ended");
        assert!(alive(child), "its child runs on");
        site.write_stop();
        let report = worklane_run::enforce::enforce_stop(&site.pool);
        assert!(report.left.is_empty(), "{:?}", report.left);
        assert_eq!(
            report
                .halted
                .iter()
                .map(|h| (h.run.resource.as_str(), h.by_worklane))
                .collect::<Vec<_>>(),
            [("agent-0.lock", true)],
            "{:?}",
            report.halted
        );
        assert!(!alive(child), "found by the guard it holds, and halted");
    }
}

/// The one `halt` of the site's journal, with its writer's pid.
fn one_halt(site: &Site) -> (u32, worklane_journal::Event) {
    let batch = worklane_journal::read(site.pool.dir()).expect("read the journal");
    let halts: Vec<_> = batch
        .entries
        .into_iter()
        .filter(|e| e.event.kind() == "halt")
        .collect();
    assert_eq!(halts.len(), 1, "one halt: {halts:?}");
    let entry = halts.into_iter().next().expect("one");
    (entry.pid, entry.event)
}
