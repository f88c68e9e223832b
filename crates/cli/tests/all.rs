//! Integration tests of the `worklane` binary: real processes in temp slot directories
//! (`AGENT_SLOTS_DIR`), real signals, real child commands that record what they saw.
//!
//! Every process is started through the fork gate and marked with its test's `Scope`, so that
//! whatever a test started, however it left its group or parent, is gone when the test ends,
//! passed or failed.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};
use worklane_testkit::{Child, Gated, Scope};

/// The binary under test: this build's, or the one `WORKLANE_TEST_BINARY` names (CI runs the
/// suite again against the binary `cargo xtask dist` builds, linked with another libc).
fn worklane_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("WORKLANE_TEST_BINARY")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_worklane").to_owned())
    })
}

struct Site {
    /// Declared first, so dropped first: the test's processes end before its directory goes.
    scope: Scope,
    temp: tempfile::TempDir,
}

impl Site {
    fn new(config: Option<&str>) -> Site {
        let temp = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(temp.path().join("slots")).expect("slots dir");
        if let Some(config) = config {
            std::fs::write(temp.path().join("slots/config.json"), config).expect("config");
        }
        Site {
            scope: Scope::new(),
            temp,
        }
    }

    /// A command marked as this test's, so that it and everything it starts end with the test.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.scope.mark(&mut cmd);
        cmd
    }

    fn slots(&self) -> PathBuf {
        self.temp.path().join("slots")
    }

    /// The dispatcher's private state directory (its queue database).
    fn state(&self) -> PathBuf {
        self.temp.path().join("dispatcher-state")
    }

    /// A scratch file path for the children's own records.
    fn file(&self, name: &str) -> PathBuf {
        self.temp.path().join(name)
    }

    fn worklane(&self) -> Command {
        let mut cmd = self.command(worklane_bin());
        // `LANE_T` too: a dispatched driver gets only the variables the environment filter
        // keeps (`LANE_` is one of its prefixes), never the dispatcher's own.
        cmd.env("AGENT_SLOTS_DIR", self.slots())
            .env_remove("AGENT_SLOTS_CONFIG")
            .env("WORKLANE_STATE_DIR", self.state())
            .env("T", self.temp.path())
            .env("LANE_T", self.temp.path())
            .stdin(Stdio::null());
        cmd
    }

    fn output(&self, args: &[&str]) -> Output {
        self.worklane()
            .args(args)
            .output_gated()
            .expect("run worklane")
    }

    fn code(&self, args: &[&str]) -> i32 {
        let out = self.output(args);
        out.status.code().unwrap_or(-1)
    }

    /// Starts `worklane ARGS -- sh SCRIPT` in the background.
    fn spawn(&self, args: &[&str], script: &str, key: &str) -> Running {
        Running::new(
            self.worklane()
                .args(args)
                .args(["--", "sh", "-c", script])
                .env("K", key)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("spawn worklane"),
        )
    }

    fn write_script(&self, name: &str, text: &str) -> String {
        let path = self.file(name);
        std::fs::write(&path, text).expect("script");
        path.display().to_string()
    }
}

/// Waits (bounded: a watchdog, not a timing assertion) until `cond` holds.
/// A `worklane` started by a test. If the test ends (or fails) while it still runs, it is sent
/// SIGTERM, which it forwards to its command's group, and SIGKILLed after 5 s; whatever of its
/// command is left then ends with the test's `Scope`.
struct Running(Option<Child>);

impl Running {
    fn new(child: Child) -> Running {
        Running(Some(child))
    }

    /// Waits for it and collects its output, as `Child::wait_with_output` does.
    fn wait_with_output(mut self) -> std::io::Result<Output> {
        self.0.take().expect("running").wait_with_output()
    }
}

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("running")
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("running")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let Some(child) = self.0.as_mut() else {
            return;
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        if let Some(pid) = i32::try_from(child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_exit(child: &mut Child, what: &str) -> ExitStatus {
    let mut status = None;
    wait_until(what, || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    status.expect("exited")
}

/// `script` as a dispatched driver runs it: `$T` is the test's directory, from `LANE_T` (a
/// driver gets no variable of the dispatcher's own, and the filter keeps `LANE_`).
fn driven(script: &str) -> String {
    format!("export T=\"$LANE_T\"; {script}")
}

/// A child script that reports it is up, then runs until its release file appears.
const HOLD: &str = r#"touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#;

mod cap {
    use super::*;

    pub(super) const OVERLAP: &str = r#"
bump() { flock "$T/count.lock" sh -c "$1"; }
bump 'n=$(cat "$T/n" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$T/n"; echo $n >> "$T/log"; if [ $n -ge 4 ]; then touch "$T/reached"; fi'
i=0; while [ ! -e "$T/reached" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
sleep 0.1
bump 'n=$(cat "$T/n"); echo $((n-1)) > "$T/n"'
"#;

    /// Starts `n` runs of `sh SCRIPT` at once (`SCRIPT` counts how many run at a time into
    /// `$T/log` through `$T/n`), waits until each has succeeded, and returns the counts.
    pub(super) fn overlaps(site: &Site, script: &str, n: usize) -> Vec<u32> {
        let script = site.write_script("overlap.sh", script);
        let children: Vec<Running> = (0..n)
            .map(|i| {
                Running::new(
                    site.worklane()
                        .args(["run", "--", "sh", &script])
                        .env("K", i.to_string())
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped())
                        .spawn_gated()
                        .expect("spawn"),
                )
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().expect("wait");
            assert!(
                out.status.success(),
                "every run completes: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let log = std::fs::read_to_string(site.file("log")).expect("the children's log");
        log.lines().map(|l| l.parse().expect("a count")).collect()
    }

    #[test]
    fn eight_runs_under_a_cap_of_four_overlap_to_four_and_never_more() {
        let site = Site::new(Some(r#"{"max_agents": 4}"#));
        let counts = overlaps(&site, OVERLAP, 8);
        assert_eq!(
            counts.len(),
            8,
            "every child recorded its start: {counts:?}"
        );
        let max = counts.iter().copied().max().expect("counts");
        assert_eq!(
            max, 4,
            "the overlap reaches the cap and never exceeds it: {counts:?}"
        );
    }

    #[test]
    fn with_no_wait_exactly_four_run_and_four_exit_75() {
        let site = Site::new(Some(r#"{"max_agents": 4}"#));
        let script = r#"touch "$T/up.$K"; while [ ! -e "$T/go" ]; do sleep 0.02; done"#;
        let mut children: Vec<Running> = (0..8)
            .map(|i| site.spawn(&["run", "--no-wait"], script, &i.to_string()))
            .collect();
        let mut refused = 0;
        let mut exited = [false; 8];
        wait_until("four refusals", || {
            for (i, c) in children.iter_mut().enumerate() {
                if !exited[i]
                    && let Some(status) = c.try_wait().expect("try_wait")
                {
                    exited[i] = true;
                    assert_eq!(status.code(), Some(75), "a refused run exits 75");
                    refused += 1;
                }
            }
            refused >= 4
        });
        wait_until("four runs up", || {
            (0..8)
                .filter(|i| site.file(&format!("up.{i}")).exists())
                .count()
                == 4
        });
        std::fs::write(site.file("go"), b"").expect("go");
        for (i, c) in children.iter_mut().enumerate() {
            if !exited[i] {
                let status = wait_exit(c, "a running child");
                assert!(status.success(), "the admitted runs complete: {status}");
            }
        }
        assert_eq!(refused, 4, "exactly four were refused");
        let up = (0..8)
            .filter(|i| site.file(&format!("up.{i}")).exists())
            .count();
        assert_eq!(up, 4, "exactly four ran");
    }

    #[test]
    fn lowering_the_cap_admits_nobody_until_fewer_run() {
        let site = Site::new(Some(r#"{"max_agents": 4}"#));
        let mut holders: Vec<Running> = (0..4)
            .map(|i| site.spawn(&["run"], HOLD, &i.to_string()))
            .collect();
        wait_until("four holders", || {
            (0..4).all(|i| site.file(&format!("up.{i}")).exists())
        });
        std::fs::write(site.slots().join("config.json"), r#"{"max_agents": 2}"#).expect("cap");
        for (i, holder) in holders.iter_mut().enumerate().take(2) {
            std::fs::write(site.file(&format!("release.{i}")), b"").expect("release");
            let status = wait_exit(holder, "a released holder");
            assert!(status.success());
            assert_eq!(
                site.code(&["run", "--no-wait", "--", "true"]),
                75,
                "{} still run under a cap of 2: nobody is admitted",
                3 - i
            );
        }
        std::fs::write(site.file("release.2"), b"").expect("release");
        wait_exit(&mut holders[2], "a released holder");
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "one runs under a cap of 2: admitted"
        );
        std::fs::write(site.file("release.3"), b"").expect("release");
        wait_exit(&mut holders[3], "the last holder");
    }

    #[test]
    fn a_sigkilled_run_and_its_child_free_the_slot() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut run = site.spawn(&["run"], r#"echo $$ > "$T/child.pid"; exec sleep 600"#, "0");
        wait_until("the child's pid", || {
            std::fs::read_to_string(site.file("child.pid")).is_ok_and(|s| s.ends_with('\n'))
        });
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            75,
            "the slot is held"
        );
        let child: i32 = std::fs::read_to_string(site.file("child.pid"))
            .expect("pid")
            .trim()
            .parse()
            .expect("a pid");
        run.kill().expect("SIGKILL worklane run");
        run.wait().expect("reap");
        let pid = rustix::process::Pid::from_raw(child).expect("pid");
        // The parent-death signal may have ended it already.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        // A SIGKILL is delivered, not done, when kill(2) returns: the child's descriptors
        // (the guard's copy among them) close when it has exited, a zombie or gone.
        wait_until("the child to have exited", || {
            std::fs::read_to_string(format!("/proc/{child}/stat")).map_or(true, |stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z'))
            })
        });
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "the dead run's slot is taken over at once"
        );
    }
}

mod exits {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn an_inherited_ignored_sigchld_does_not_lose_the_status() {
        // A parent that ignores SIGCHLD passes it on through exec; the kernel would then reap
        // the command itself and its status would be lost (exit 71 before the fix).
        let site = Site::new(None);
        let out = site
            .command("env")
            .args(["--ignore-signal=CHLD", worklane_bin()])
            .args(["run", "--", "sh", "-c", "exit 7"])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::null())
            .output_gated()
            .expect("run env");
        assert_eq!(
            out.status.code(),
            Some(7),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn the_commands_status_is_the_exit_status() {
        let site = Site::new(None);
        assert_eq!(site.code(&["run", "--", "sh", "-c", "exit 7"]), 7);
        assert_eq!(
            site.code(&["run", "--", "sh", "-c", "exit 200"]),
            200,
            "above 127 too"
        );
        assert_eq!(site.code(&["run", "--", "true"]), 0);
        let out = site.output(&["run", "--", "sh", "-c", "kill -TERM $$"]);
        assert_eq!(
            (out.status.code(), out.status.signal()),
            (None, Some(15)),
            "a command ended by signal N ends the wrapper by N too (a shell shows 128+N)"
        );
        let out = site.output(&["run", "--", "sh", "-c", "kill -USR1 $$"]);
        assert_eq!(
            out.status.signal(),
            Some(10),
            "any signal, once the slot is let go"
        );
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "released first"
        );
        let out = site.output(&["run", "--", "/nonexistent/command"]);
        assert_eq!(out.status.code(), Some(127), "not found");
        assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
        assert_eq!(site.code(&["run"]), 64, "usage error without a command");
        let broken = Site::new(Some("{"));
        assert_eq!(
            broken.code(&["run", "--limit", "5m", "--", "true"]),
            64,
            "--limit without --kind test is a usage error, even with a broken config"
        );
        assert_eq!(site.code(&["no-such-command"]), 64);
    }

    #[test]
    fn a_timed_out_wait_exits_75_and_says_what_blocked_it() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        // Spawned and watched, so that a wait that ignores its timeout fails instead of hanging.
        let mut waiter = site
            .worklane()
            .args(["run", "--timeout", "300ms", "--", "true"])
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn worklane");
        let status = wait_exit(&mut waiter, "the waiter's timeout");
        assert_eq!(status.code(), Some(75), "a timed-out wait exits 75");
        let mut err = String::new();
        std::io::Read::read_to_string(&mut waiter.stderr.take().expect("stderr"), &mut err)
            .expect("read stderr");
        assert!(
            err.contains("timed out") && err.contains("at cap: 1 of 1"),
            "says it timed out and what blocked it: {err}"
        );
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
    }

    #[test]
    fn sigterm_is_forwarded_to_the_command() {
        let site = Site::new(None);
        let script = r#"trap 'echo got-term > "$T/term"; exit 9' TERM; touch "$T/up.$K"; while :; do sleep 0.02; done"#;
        let mut run = site.spawn(&["run"], script, "0");
        wait_until("the command", || site.file("up.0").exists());
        let pid = rustix::process::Pid::from_raw(run.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("TERM");
        let status = wait_exit(&mut run, "worklane run");
        assert_eq!(
            status.code(),
            Some(9),
            "the command's own status after its trap"
        );
        assert_eq!(
            std::fs::read_to_string(site.file("term"))
                .expect("trap ran")
                .trim(),
            "got-term"
        );
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "released"
        );
    }

    #[test]
    fn a_script_without_a_shebang_runs_with_the_shell_as_execvp_does() {
        let site = Site::new(None);
        let script = site.file("no-shebang");
        std::fs::write(&script, "echo ran-by-sh > \"$T/ran\"\nexit 3\n").expect("script");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let out = site.output(&["run", "--", script.to_str().expect("utf-8")]);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(site.file("ran"))
                .expect("ran")
                .trim(),
            "ran-by-sh"
        );
    }

    /// The command starts as a program started by a shell would: no signal blocked (worklane
    /// blocks them all around its start), SIGPIPE at its default (std ignores it in
    /// worklane) and no handler caught.
    #[test]
    fn the_command_starts_with_no_signal_blocked_and_sigpipe_at_its_default() {
        let site = Site::new(None);
        // grep itself is the command (a shell would block signals around its own forks).
        let out = site.output(&[
            "run",
            "--",
            "grep",
            "-E",
            "^Sig(Blk|Ign):",
            "/proc/self/status",
        ]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mask = |name: &str| {
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or_else(|| panic!("{name} in {text}"));
            u64::from_str_radix(line.trim(), 16).expect("hex")
        };
        assert_eq!(mask("SigBlk:"), 0, "nothing blocked: {text}");
        assert_eq!(
            mask("SigIgn:") & (1 << 12),
            0,
            "SIGPIPE not ignored: {text}"
        );
    }

    #[test]
    fn a_command_that_is_not_executable_exits_126_and_says_so() {
        let site = Site::new(None);
        let script = site.file("not-executable");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("script");
        let out = site.output(&["run", "--", script.to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(126), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("permission denied"),
            "{out:?}"
        );
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "the slot is free again"
        );
    }

    #[test]
    fn every_catchable_job_signal_is_forwarded_and_the_slot_kept_meanwhile() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        for (signal, name) in [
            (rustix::process::Signal::USR1, "USR1"),
            (rustix::process::Signal::USR2, "USR2"),
            (rustix::process::Signal::ALARM, "ALRM"),
            (rustix::process::Signal::QUIT, "QUIT"),
            (rustix::process::Signal::HUP, "HUP"),
        ] {
            let script = format!(
                r#"trap 'echo {name} >> "$T/got"; touch "$T/seen.$K"' {name}; touch "$T/up.$K"; while [ ! -e "$T/seen.$K" ]; do sleep 0.02; done; while [ ! -e "$T/end.$K" ]; do sleep 0.02; done"#
            );
            let mut run = site.spawn(&["run"], &script, name);
            wait_until("the command", || site.file(&format!("up.{name}")).exists());
            let pid = rustix::process::Pid::from_raw(run.id() as i32).expect("pid");
            rustix::process::kill_process(pid, signal).expect("signal");
            wait_until("the command's trap", || {
                site.file(&format!("seen.{name}")).exists()
            });
            assert!(
                run.try_wait().expect("try_wait").is_none(),
                "{name}: the wrapper lives on"
            );
            assert_eq!(
                site.code(&["run", "--no-wait", "--", "true"]),
                75,
                "{name}: the slot is still the command's"
            );
            std::fs::write(site.file(&format!("end.{name}")), b"").expect("end");
            assert!(wait_exit(&mut run, "worklane run").success(), "{name}");
        }
        let got = std::fs::read_to_string(site.file("got")).expect("got");
        assert_eq!(got, "USR1\nUSR2\nALRM\nQUIT\nHUP\n");
    }

    #[test]
    fn signals_the_caller_ignores_stay_ignored_in_the_command() {
        let site = Site::new(None);
        // As `nohup` and `trap '' HUP INT` leave them: HUP (bit 0), INT (bit 1), USR1 (bit 9).
        let out = site
            .command("sh")
            .args([
                "-c",
                r#"trap '' HUP INT USR1; exec "$0" run -- sh -c 'grep SigIgn /proc/self/status'"#,
            ])
            .arg(worklane_bin())
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::null())
            .output_gated()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mask = text
            .trim()
            .strip_prefix("SigIgn:")
            .map(str::trim)
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .expect("a SigIgn line");
        for (bit, name) in [(0, "HUP"), (1, "INT"), (9, "USR1")] {
            assert!(mask & (1 << bit) != 0, "{name} is still ignored: {text}");
        }
        assert!(
            mask & (1 << 14) == 0,
            "TERM, never ignored by the caller, is not: {text}"
        );
    }

    #[test]
    fn a_malformed_config_exits_78_naming_the_file() {
        for (config, field) in [
            (r#"{"max_agents": 0}"#, "max_agents"),
            (r#"{"max_test_runs": 9}"#, "max_test_runs"),
            ("{", "JSON"),
            (
                r#"{"max_agents": 1, "max_agents": 8}"#,
                "`max_agents` appears more than once",
            ),
            (r#"{"max_agents": 1000000000000}"#, "from 1 to 4294967295"),
        ] {
            let site = Site::new(Some(config));
            let out = site.output(&["run", "--", "true"]);
            assert_eq!(out.status.code(), Some(78), "{config}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("config.json"), "names the file: {err}");
            assert!(err.contains(field), "names the problem: {err}");
        }
    }

    #[test]
    fn completions_and_man_page_are_generated() {
        let site = Site::new(None);
        let out = site.output(&["completions", "bash"]);
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("worklane"),
            "bash completions"
        );
        let out = site.output(&["man"]);
        assert!(out.status.success());
        let man = String::from_utf8_lossy(&out.stdout);
        assert!(man.contains(".TH worklane"), "a roff man page");
        assert!(
            man.contains("stop\\-all") || man.contains("stop-all"),
            "lists the commands"
        );
    }
}

/// The start of the command (a `clone(CLONE_VM | CLONE_VFORK)`: worklane waits, unable to stop,
/// until its child has exec'd) against signals that reach the child before its exec.
mod start {
    use super::*;
    use rustix::process::{Pid, Signal};
    use std::os::unix::process::CommandExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The state letter of `/proc/PID/stat` (`T` stopped, `D` in the kernel, ...).
    fn state(pid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.chars().next()
    }

    /// `pid`'s children and their states, for a message.
    fn children(pid: u32) -> String {
        let listed =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        listed
            .split_whitespace()
            .map(|c| format!("{c} {:?}", c.parse().ok().and_then(state)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The child between clone and exec shares worklane's memory: every signal worklane
    /// catches must be one whose handler the child puts back to its default first (the list
    /// in `sys::spawn`), or a signal arriving there would run worklane's handler in the
    /// child. The command itself starts with no handler (the child's own, for job-control
    /// stops, is reset by the exec).
    #[test]
    fn worklane_catches_only_signals_its_child_resets_and_the_command_none() {
        let site = Site::new(None);
        let out = site.output(&[
            "run",
            "--",
            "sh",
            "-c",
            "grep SigCgt /proc/$PPID/status; exec cat /proc/self/status",
        ]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let masks: Vec<u64> = text
            .lines()
            .filter_map(|l| l.strip_prefix("SigCgt:"))
            .map(|h| u64::from_str_radix(h.trim(), 16).expect("hex"))
            .collect();
        let [worklane, command] = masks[..] else {
            panic!("two SigCgt lines: {text}");
        };
        let reset = [
            Signal::PIPE,
            Signal::SEGV,
            Signal::BUS,
            Signal::CHILD,
            Signal::TERM,
            Signal::INT,
            Signal::HUP,
            Signal::QUIT,
            Signal::USR1,
            Signal::USR2,
            Signal::ALARM,
        ]
        .iter()
        .fold(0u64, |m, s| m | 1 << (s.as_raw() - 1));
        assert_eq!(
            worklane & !reset,
            0,
            "worklane catches signals its child leaves caught: {worklane:#x}"
        );
        assert_eq!(command, 0, "the command starts with no handler: {text}");
    }

    /// The child's stack holds what execvp(3) puts on it: a path buffer per entry of `PATH`
    /// tried, and for a file without `#!` an argument vector for `/bin/sh` as long as the
    /// command's. A name found after hundreds of entries of a `PATH` longer than `PATH_MAX`,
    /// a script without a shebang, fifty thousand arguments: all arrive.
    #[test]
    fn a_long_argument_list_reaches_a_script_found_late_in_a_long_path() {
        let site = Site::new(None);
        let bin = site.file("bin");
        std::fs::create_dir(&bin).expect("mkdir");
        let script = bin.join("count-args");
        std::fs::write(&script, "echo \"$# $1 ${50000}\"\n").expect("script");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let mut path: String = (0..400)
            .map(|i| format!("{}/missing-{i:04}:", site.temp.path().display()))
            .collect();
        path.push_str(bin.to_str().expect("utf-8"));
        path.push_str(":/usr/bin:/bin");
        assert!(path.len() > 4096, "longer than PATH_MAX");
        let args: Vec<String> = (1..=50_000).map(|i| i.to_string()).collect();
        let out = site
            .worklane()
            .args(["run", "--", "count-args"])
            .args(&args)
            .env("PATH", &path)
            .output_gated()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "50000 1 50000");
    }

    /// An entry of `PATH` of `PATH_MAX` bytes or more is passed over, as execvp(3) (glibc)
    /// passes over it for `env` and `flock`: the program is found in the entries after it.
    /// Tried, it failed with ENAMETOOLONG, which ended the search: 126.
    #[test]
    fn an_entry_of_path_longer_than_path_max_is_passed_over() {
        let site = Site::new(None);
        let long = format!("/{}", "d".repeat(5000));
        let out = site
            .worklane()
            .args(["run", "--", "sh", "-c", "echo found"])
            .env("PATH", format!("{long}:/usr/bin:/bin"))
            .output_gated()
            .expect("run");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "found");
    }

    /// The search stops, as execvp(3) does, at an error other than "not here" or "not ours
    /// to run": a symbolic-link loop in the first directory of `PATH` is the answer (126),
    /// and the program of the same name in the next one never runs.
    #[test]
    fn the_search_stops_at_a_link_loop_as_execvp_does() {
        let site = Site::new(None);
        let first = site.file("first");
        let second = site.file("second");
        std::fs::create_dir(&first).expect("mkdir");
        std::fs::create_dir(&second).expect("mkdir");
        std::os::unix::fs::symlink("tool", first.join("tool")).expect("a link to itself");
        let tool = second.join("tool");
        std::fs::write(&tool, "#!/bin/sh\necho ran > \"$T/ran\"\n").expect("script");
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let out = site
            .worklane()
            .args(["run", "--", "tool"])
            .env(
                "PATH",
                format!("{}:{}:/usr/bin:/bin", first.display(), second.display()),
            )
            .output_gated()
            .expect("run");
        assert_eq!(out.status.code(), Some(126), "{out:?}");
        assert!(
            !site.file("ran").exists(),
            "the second directory's tool ran"
        );
    }

    /// A directory is no command, named by its path or found in `PATH` (where execvp(3)
    /// goes on past it): 126, as a shell says, and the slot let go.
    #[test]
    fn a_directory_as_the_command_exits_126() {
        let site = Site::new(None);
        let bin = site.file("bin");
        std::fs::create_dir_all(bin.join("tool")).expect("mkdir");
        let out = site.output(&["run", "--", bin.to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(126), "{out:?}");
        let out = site
            .worklane()
            .args(["run", "--", "tool"])
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output_gated()
            .expect("run");
        assert_eq!(out.status.code(), Some(126), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("tool: permission denied"),
            "{out:?}"
        );
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "released"
        );
    }

    /// SIGUSR1 to worklane again and again from the moment its handler is in place, across
    /// the start of the command: blocked in worklane while the child shares its memory,
    /// never handled there, then forwarded. Every run ends, its command having got the
    /// signal (its trap's status, or killed by it before the trap was set).
    #[test]
    fn a_signal_storm_across_the_start_is_forwarded_and_never_hangs() {
        use std::os::unix::process::ExitStatusExt;
        let site = Site::new(None);
        let caught = |pid: u32| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
            Some(u64::from_str_radix(mask.trim(), 16).ok()? & (1 << 9) != 0)
        };
        for round in 0..30 {
            let mut run = site
                .worklane()
                .args(["run", "--", "sh", "-c"])
                .arg(r#"trap 'exit 5' USR1; while :; do sleep 0.01; done"#)
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("spawn worklane");
            let pid = run.id();
            // Until the handler is in place, SIGUSR1 would end worklane by its default.
            while caught(pid) == Some(false) {
                std::thread::yield_now();
            }
            let done = Arc::new(AtomicBool::new(false));
            let storm = {
                let done = Arc::clone(&done);
                std::thread::spawn(move || {
                    let target = Pid::from_raw(pid as i32).expect("pid");
                    while !done.load(Ordering::SeqCst) {
                        if rustix::process::kill_process(target, Signal::USR1).is_err() {
                            return;
                        }
                        std::thread::sleep(Duration::from_micros(200));
                    }
                })
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            let status = loop {
                if let Some(status) = run.try_wait().expect("try_wait") {
                    break Some(status);
                }
                if Instant::now() > deadline {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            done.store(true, Ordering::SeqCst);
            storm.join().expect("the storm");
            let status = status.unwrap_or_else(|| panic!("run {round} hung: {:?}", state(pid)));
            assert!(
                status.code() == Some(5) || status.signal() == Some(Signal::USR1.as_raw()),
                "run {round}: the command got SIGUSR1: {status}"
            );
        }
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "released"
        );
    }

    /// A caller that starts worklane with signals blocked (the mask is inherited through exec,
    /// as from a thread that blocked them to wait for them itself): the command starts with
    /// none blocked, and worklane still passes SIGTERM on and sees its command end at once.
    /// A blocked signal never reached worklane's handler, so SIGTERM was never forwarded and
    /// the command ran on.
    #[test]
    fn signals_the_caller_blocked_are_still_forwarded_and_the_command_starts_unblocked() {
        let site = Site::new(None);
        let mut run = Running::new(
            site.command("python3")
                .args([
                    "-c",
                    "import os, signal, sys\n\
                     signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, \
                     signal.SIGCHLD, signal.SIGHUP})\n\
                     os.execv(sys.argv[1], sys.argv[1:])",
                    worklane_bin(),
                    "run",
                    "--",
                    "sh",
                    "-c",
                    r#"grep SigBlk /proc/self/status > "$T/blocked"; trap 'echo got-term > "$T/term"; exit 9' TERM; touch "$T/up"; while :; do sleep 0.02; done"#,
                ])
                .env("AGENT_SLOTS_DIR", site.slots())
                .env("WORKLANE_STATE_DIR", site.state())
                .env_remove("AGENT_SLOTS_CONFIG")
                .env("T", site.temp.path())
                .stdin(Stdio::null())
                .spawn_gated()
                .expect("spawn python3"),
        );
        wait_until("the command", || site.file("up").exists());
        let blocked = std::fs::read_to_string(site.file("blocked")).expect("blocked");
        assert_eq!(
            blocked.trim().strip_prefix("SigBlk:").map(str::trim),
            Some("0000000000000000"),
            "the command starts with nothing blocked: {blocked}"
        );
        let pid = Pid::from_raw(run.id() as i32).expect("pid");
        rustix::process::kill_process(pid, Signal::TERM).expect("TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = run.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "SIGTERM to worklane never reached its command (term file: {})",
                site.file("term").exists()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(
            status.code(),
            Some(9),
            "the command's status after its trap"
        );
        assert_eq!(
            std::fs::read_to_string(site.file("term"))
                .expect("the trap ran")
                .trim(),
            "got-term"
        );
    }

    /// Ctrl-Z at the moment `worklane run` starts its command, again and again, with a
    /// job-control shell's answer: the job (worklane's group) is sent SIGTSTP, and SIGCONT
    /// once the shell sees worklane stopped. A SIGTSTP that reached the child before its exec
    /// used to stop it there (blocked across the clone, pending, acted on at the unmask, and,
    /// without a terminal, after the child had left the job's group for its own): worklane,
    /// waiting for the exec, never stopped, so the shell never continued anything, and the
    /// run hung for good (SIGTERM and SIGINT are blocked there; only SIGKILL ended it). Now
    /// a stop meant for the job stops worklane, and the command runs or stops after its exec.
    #[test]
    fn ctrl_z_at_the_moment_of_the_start_never_hangs_the_run() {
        let site = Site::new(None);
        for interactive in [false, true] {
            for round in 0..60 {
                let mut cmd = site.worklane();
                cmd.args(["run", "--", "true"]).process_group(0);
                if interactive {
                    // A terminal on stdin (a pty's master side is one): the command stays in
                    // worklane's group, as in a shell's foreground job.
                    let tty = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open("/dev/ptmx")
                        .expect("open a pty");
                    cmd.stdin(tty);
                }
                let mut run = cmd.spawn_gated().expect("spawn worklane");
                let pid = run.id();
                let group = Pid::from_raw(pid as i32).expect("pid");
                let done = Arc::new(AtomicBool::new(false));
                let shell = {
                    let done = Arc::clone(&done);
                    std::thread::spawn(move || {
                        // Stops at varied moments, each followed by time to run.
                        let mut pause = u64::from(pid);
                        while !done.load(Ordering::SeqCst) {
                            if rustix::process::kill_process_group(group, Signal::TSTP).is_err() {
                                return;
                            }
                            std::thread::sleep(Duration::from_micros(200));
                            if state(pid) == Some('T') {
                                let _ = rustix::process::kill_process_group(group, Signal::CONT);
                            }
                            pause = (pause * 1_103_515_245 + 12_345) % (1 << 31);
                            std::thread::sleep(Duration::from_micros(100 + pause % 1_500));
                        }
                    })
                };
                let deadline = Instant::now() + Duration::from_secs(10);
                let status = loop {
                    if let Some(status) = run.try_wait().expect("try_wait") {
                        break Some(status);
                    }
                    if Instant::now() > deadline {
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                };
                done.store(true, Ordering::SeqCst);
                shell.join().expect("the shell thread");
                let Some(status) = status else {
                    let seen =
                        format!("worklane {:?}, its children: {}", state(pid), children(pid));
                    let _ = rustix::process::kill_process(group, Signal::KILL);
                    panic!(
                        "run {round} (terminal: {interactive}) hung after a stop at its start: \
                         {seen}"
                    );
                };
                assert!(
                    status.success(),
                    "run {round} (terminal: {interactive}): {status}"
                );
            }
        }
    }
}

mod output {
    use super::*;
    use std::io::Read;

    /// Every command that prints, with the exit code it has on an idle machine.
    const PRINTING: &[&[&str]] = &[
        &["slots"],
        &["slots", "--json"],
        &["why"],
        &["why", "--json"],
        &["budget", "show"],
        &["budget", "show", "--json"],
        &["resume-all"],
        &["undrain"],
        &["completions", "bash"],
        &["man"],
        &["--help"],
        &["--version"],
    ];

    /// A pipe whose reader is already closed: every write to it fails with EPIPE.
    fn closed_pipe() -> Stdio {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        Stdio::from(writer)
    }

    fn dev_full() -> Stdio {
        Stdio::from(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .expect("/dev/full"),
        )
    }

    fn assert_no_panic(out: &Output, what: &str) {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(101), "{what}: a Rust panic: {err}");
        assert!(!err.contains("panicked"), "{what}: a Rust panic: {err}");
    }

    #[test]
    fn a_closed_pipe_ends_every_command_quietly() {
        let site = Site::new(None);
        for args in PRINTING {
            let out = site
                .worklane()
                .args(*args)
                .stdout(closed_pipe())
                .stderr(Stdio::piped())
                .spawn_gated()
                .and_then(|c| c.wait_with_output())
                .expect("run worklane");
            let what = args.join(" ");
            assert_no_panic(&out, &what);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{what}: a closed pipe is a normal end: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.stderr.is_empty(),
                "{what}: nothing to say about a reader that left: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn a_closed_pipe_keeps_the_commands_own_status() {
        let site = Site::new(None);
        let out = site
            .worklane()
            .args(["run", "--", "sh", "-c", "exit 3"])
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .spawn_gated()
            .and_then(|c| c.wait_with_output())
            .expect("run");
        assert_no_panic(&out, "run");
        assert_eq!(out.status.code(), Some(3), "the command's status");
        assert_eq!(site.code(&["stop-all", "test"]), 0, "STOP written");
        for args in [&["why"][..], &["why", "--json"]] {
            let out = site
                .worklane()
                .args(args)
                .stdout(closed_pipe())
                .stderr(Stdio::piped())
                .spawn_gated()
                .and_then(|c| c.wait_with_output())
                .expect("why");
            assert_no_panic(&out, "why");
            assert_eq!(
                out.status.code(),
                Some(69),
                "{args:?}: the answer's code survives a reader that left"
            );
        }
    }

    #[test]
    fn a_reader_that_leaves_after_one_byte_never_causes_a_panic() {
        // As `worklane slots | head -c1`: the reader goes away while worklane still writes.
        let site = Site::new(None);
        let held = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        for round in 0..40 {
            let args: &[&str] = if round % 2 == 0 {
                &["slots"]
            } else {
                &["slots", "--json"]
            };
            let mut child = site
                .worklane()
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("spawn slots");
            let mut stdout = child.stdout.take().expect("stdout");
            let mut byte = [0_u8; 1];
            stdout.read_exact(&mut byte).expect("one byte");
            drop(stdout);
            let out = child.wait_with_output().expect("wait");
            assert_no_panic(&out, &format!("round {round}"));
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::write(site.file("release.0"), b"").expect("release");
        drop(held);
    }

    #[test]
    fn a_failed_write_is_a_message_and_exit_74() {
        let site = Site::new(None);
        for args in PRINTING {
            let out = site
                .worklane()
                .args(*args)
                .stdout(dev_full())
                .stderr(Stdio::piped())
                .spawn_gated()
                .and_then(|c| c.wait_with_output())
                .expect("run worklane");
            let what = args.join(" ");
            assert_no_panic(&out, &what);
            assert_eq!(out.status.code(), Some(74), "{what}: a failed write");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("cannot write to stdout"),
                "{what}: the message names stdout: {err}"
            );
        }
    }

    #[test]
    fn a_failed_write_to_stderr_never_panics() {
        let site = Site::new(None);
        let out = site
            .worklane()
            .args(["set-test-slots", "99"])
            .stderr(dev_full())
            .stdout(Stdio::piped())
            .spawn_gated()
            .and_then(|c| c.wait_with_output())
            .expect("set-test-slots");
        assert_eq!(
            out.status.code(),
            Some(64),
            "the usage error's code, though its message could not be written"
        );
        let out = site
            .worklane()
            .arg("--no-such-flag")
            .stderr(dev_full())
            .stdout(Stdio::piped())
            .spawn_gated()
            .and_then(|c| c.wait_with_output())
            .expect("bad flag");
        assert_eq!(out.status.code(), Some(64), "clap's usage error");
        let out = site
            .worklane()
            .args(["slots"])
            .stdout(dev_full())
            .stderr(dev_full())
            .stdin(Stdio::null())
            .spawn_gated()
            .and_then(|c| c.wait_with_output())
            .expect("slots");
        assert_eq!(out.status.code(), Some(74), "both streams full");
    }
}

mod operator {
    use super::*;

    #[test]
    fn stop_halts_running_commands_refuses_new_ones_and_resume_admits() {
        let site = Site::new(None);
        let polite = site.spawn(&["run"], r#"touch "$T/up.$K"; exec sleep 600"#, "0");
        let stubborn = site.spawn(
            &["run"],
            r#"trap '' TERM; touch "$T/up.$K"; exec sleep 600"#,
            "1",
        );
        wait_until("both commands", || {
            site.file("up.0").exists() && site.file("up.1").exists()
        });
        let out = site.output(&["stop-all", "incident", "42"]);
        assert!(out.status.success(), "stop-all writes STOP");
        let stop: serde_json::Value =
            serde_json::from_slice(&std::fs::read(site.slots().join("STOP")).expect("STOP"))
                .expect("STOP is JSON");
        assert_eq!(stop["reason"], "incident 42");
        assert!(
            stop["at"].as_str().is_some_and(|a| a.ends_with('Z')),
            "{stop}"
        );
        let mut polite = polite;
        let mut stubborn = stubborn;
        let status = wait_exit(&mut polite, "the polite command");
        assert_eq!(status.code(), Some(128 + 15), "halted by SIGTERM");
        let status = wait_exit(&mut stubborn, "the stubborn command");
        assert_eq!(status.code(), Some(128 + 9), "SIGKILL after the grace");
        let out = site.output(&["run", "--", "true"]);
        assert_eq!(out.status.code(), Some(69), "refused under STOP");
        assert!(String::from_utf8_lossy(&out.stderr).contains("incident 42"));
        assert_eq!(site.code(&["resume-all"]), 0);
        assert_eq!(
            site.code(&["run", "--", "true"]),
            0,
            "admitted after resume"
        );
    }

    fn write_drain(site: &Site, until: &str) {
        std::fs::write(
            site.slots().join("update-drain.json"),
            format!(r#"{{"since": "2026-01-01T00:00:00Z", "until": "{until}", "to": "9.9"}}"#),
        )
        .expect("drain flag");
    }

    #[test]
    fn a_drain_refuses_and_is_ignored_when_past_too_far_or_unreadable() {
        let site = Site::new(None);
        assert_eq!(site.code(&["drain", "--until", "30m", "--to", "2.0"]), 0);
        let out = site.output(&["run", "--", "true"]);
        assert_eq!(out.status.code(), Some(69), "a drain in force refuses");
        assert!(String::from_utf8_lossy(&out.stderr).contains("2.0"));
        assert_eq!(site.code(&["run", "--kind", "full-run", "--", "true"]), 69);
        assert_eq!(site.code(&["undrain"]), 0);
        assert_eq!(site.code(&["run", "--", "true"]), 0, "undrained");
        assert_eq!(site.code(&["drain", "--until", "30m"]), 0, "no --to");
        let flag: serde_json::Value = serde_json::from_slice(
            &std::fs::read(site.slots().join("update-drain.json")).expect("the flag"),
        )
        .expect("json");
        assert!(
            flag.get("to").is_some_and(serde_json::Value::is_null),
            "`to` is written, null without --to: {flag}"
        );
        assert_eq!(site.code(&["undrain"]), 0);

        write_drain(&site, "2020-01-01T00:00:00Z");
        assert_eq!(
            site.code(&["run", "--", "true"]),
            0,
            "past its until: ignored"
        );
        let far = worklane_lease::rfc3339_ms(
            worklane_lease::Clock::now_ms(&worklane_lease::SystemClock) + 5 * 3_600_000,
        );
        write_drain(&site, &far);
        assert_eq!(
            site.code(&["run", "--", "true"]),
            0,
            "more than 4 h ahead: ignored"
        );
        std::fs::write(site.slots().join("update-drain.json"), b"{not json").expect("write");
        assert_eq!(site.code(&["run", "--", "true"]), 0, "unreadable: ignored");
        assert_eq!(
            site.code(&["drain", "--until", "5h"]),
            64,
            "refuses to write a useless drain"
        );
    }

    #[test]
    fn one_full_run_at_a_time_and_the_idle_probe() {
        let site = Site::new(None);
        assert_eq!(site.code(&["idle"]), 0, "idle");
        let mut run = site.spawn(&["run", "--kind", "full-run"], HOLD, "0");
        wait_until("the full run", || site.file("up.0").exists());
        assert_eq!(
            site.code(&["run", "--kind", "full-run", "--no-wait", "--", "true"]),
            75
        );
        assert_eq!(site.code(&["idle"]), 75, "not idle during a full run");
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut run, "the full run").success());
        assert_eq!(site.code(&["idle"]), 0, "idle again");
    }

    #[test]
    fn set_test_slots_on_a_config_it_cannot_write_is_a_config_error() {
        let site = Site::new(None);
        let config = site.file(".slots.json");
        let out = site
            .worklane()
            .env("AGENT_SLOTS_CONFIG", &config)
            .args(["set-test-slots", "3"])
            .output_gated()
            .expect("run worklane");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(78),
            "the config path is configuration, not usage: {err}"
        );
        assert!(err.contains(".slots.json"), "names the file: {err}");
        assert!(!config.exists(), "nothing written");
    }

    #[test]
    fn the_test_run_cap_is_set_by_set_test_slots() {
        let site = Site::new(Some(r#"{"max_agents": 1, "admission": "waiter"}"#));
        assert_eq!(site.code(&["set-test-slots", "9"]), 64, "out of range");
        assert_eq!(site.code(&["set-test-slots", "2"]), 0);
        let config: serde_json::Value = serde_json::from_slice(
            &std::fs::read(site.slots().join("config.json")).expect("config"),
        )
        .expect("json");
        assert_eq!(config["max_test_runs"], 2);
        assert_eq!(config["admission"], "waiter", "other fields survive");
        let mut holders: Vec<Running> = (0..2)
            .map(|i| {
                site.spawn(
                    &["run", "--kind", "test", "--limit", "10m"],
                    HOLD,
                    &i.to_string(),
                )
            })
            .collect();
        wait_until("two test runs", || {
            site.file("up.0").exists() && site.file("up.1").exists()
        });
        assert_eq!(
            site.code(&["run", "--kind", "test", "--no-wait", "--", "true"]),
            75
        );
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "agents are apart"
        );
        for (i, h) in holders.iter_mut().enumerate() {
            std::fs::write(site.file(&format!("release.{i}")), b"").expect("release");
            assert!(wait_exit(h, "a test run").success());
        }
    }
}

mod roles {
    use super::*;

    #[test]
    fn a_role_refuses_a_second_holder_and_admits_another_role() {
        let site = Site::new(None);
        let mut holder = site.spawn(
            &[
                "lease",
                "run",
                "--role",
                "builder",
                "--agent-identity",
                "holder-id",
                "--profile",
                "nightly",
            ],
            HOLD,
            "0",
        );
        wait_until("the role holder", || site.file("up.0").exists());
        let out = site.output(&["lease", "run", "--role", "builder", "--", "true", "second"]);
        assert_eq!(out.status.code(), Some(75), "the same role is refused");
        let err = String::from_utf8_lossy(&out.stderr);
        for (part, what) in [
            (format!("pid {}", holder.id()), "the holder's pid"),
            ("role builder".to_owned(), "the role"),
            (
                "agentIdentity holder-id".to_owned(),
                "the holder's agentIdentity",
            ),
            ("profile nightly".to_owned(), "the holder's profile"),
            ("entrypoint `sh -c".to_owned(), "the holder's entrypoint"),
            ("refused `true second`".to_owned(), "our own entrypoint"),
            (
                "lapses by itself 60 s".to_owned(),
                "when a dead holder's lease lapses",
            ),
        ] {
            assert!(err.contains(&part), "names {what} ({part:?}): {err}");
        }
        assert!(out.stdout.is_empty(), "nothing on stdout without --json");
        assert_eq!(
            site.code(&["lease", "run", "--role", "reviewer", "--", "true"]),
            0,
            "a different role coexists"
        );
        let record: serde_json::Value = serde_json::from_slice(
            &std::fs::read(site.slots().join("role-builder.lease")).expect("lease record"),
        )
        .expect("json");
        assert_eq!(record["role"], "builder");
        assert_eq!(record["ttlMs"], 60_000);
        assert!(record["lastPulse"].as_u64().is_some(), "{record}");
        assert!(record["agentIdentity"].as_str().is_some(), "{record}");
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the role holder").success());
        assert!(
            !site.slots().join("role-builder.lease").exists(),
            "released on exit"
        );
    }

    /// `lease run --json ARGS`: its exit code, the JSON object on stdout and stderr.
    fn refused_json(site: &Site, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
        let out = site
            .worklane()
            .args(["lease", "run", "--json"])
            .args(args)
            .output_gated()
            .expect("lease run --json");
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            text.lines().count(),
            1,
            "one JSON object on one line: {text}{err}"
        );
        let doc = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}{err}"));
        (out.status.code(), doc, err)
    }

    #[test]
    fn lease_run_json_prints_the_refusal_structured() {
        let site = Site::new(None);
        let holder = site.spawn(
            &[
                "lease",
                "run",
                "--role",
                "builder",
                "--agent-identity",
                "holder-id",
                "--profile",
                "nightly",
            ],
            HOLD,
            "0",
        );
        wait_until("the role holder", || site.file("up.0").exists());
        let record: serde_json::Value = serde_json::from_slice(
            &std::fs::read(site.slots().join("role-builder.lease")).expect("lease record"),
        )
        .expect("json");
        let (code, doc, err) = refused_json(&site, &["--role", "builder", "--", "true", "second"]);
        assert_eq!(code, Some(75), "refused: {doc}");
        assert_eq!(doc["version"], 1, "{doc}");
        assert_eq!(doc["refused"], "held", "{doc}");
        assert_eq!(doc["role"], "builder", "{doc}");
        assert_eq!(doc["resource"], "role-builder.lease", "{doc}");
        assert_eq!(
            doc["entrypoint"], "true second",
            "our own entrypoint: {doc}"
        );
        assert_eq!(doc["state"], "fresh", "{doc}");
        assert!(
            doc["why"]
                .as_str()
                .is_some_and(|w| w.contains("within its TTL")),
            "{doc}"
        );
        assert_eq!(
            doc["message"].as_str().map(|m| format!("worklane: {m}\n")),
            Some(err.clone()),
            "the message is the one on stderr"
        );
        let h = &doc["holder"];
        assert_eq!(h["pid"], holder.id(), "the holder's pid: {doc}");
        assert_eq!(h["role"], "builder", "{doc}");
        assert_eq!(h["agentIdentity"], "holder-id", "{doc}");
        assert_eq!(h["profile"], "nightly", "{doc}");
        assert!(
            h["entrypoint"]
                .as_str()
                .is_some_and(|e| e.starts_with("sh -c")),
            "the holder's entrypoint: {doc}"
        );
        for field in ["owner", "acquiredAt", "startedAt", "ttlMs", "epoch"] {
            assert_eq!(h[field], record[field], "{field} as in the record: {doc}");
        }
        assert!(h["lastPulse"].as_u64().is_some(), "lastPulse in ms: {doc}");
        std::fs::write(site.file("release.0"), b"").expect("release");
        drop(holder);

        assert_eq!(site.code(&["stop-all", "maintenance"]), 0);
        let (code, doc, _) = refused_json(&site, &["--role", "other", "--", "true"]);
        assert_eq!(code, Some(69), "STOP refuses: {doc}");
        assert_eq!(doc["refused"], "stop", "{doc}");
        assert!(doc["holder"].is_null(), "{doc}");
        assert!(
            doc["why"]
                .as_str()
                .is_some_and(|w| w.contains("maintenance")),
            "{doc}"
        );
    }

    #[test]
    fn a_role_record_that_cannot_lapse_says_so_and_odd_files_are_busy() {
        let site = Site::new(None);
        let lease = site.slots().join("role-odd.lease");
        let shown = lease.display().to_string();
        let big = vec![b' '; 70 * 1024];
        type Plant = Box<dyn Fn(&Path)>;
        let cases: Vec<(&str, Plant, &str, &str)> = vec![
            (
                "no pulse",
                Box::new(|p| std::fs::write(p, br#"{"pid": 1}"#).expect("write")),
                "busy",
                "without a pulse never lapses by itself",
            ),
            (
                "garbage",
                Box::new(|p| std::fs::write(p, b"garbage").expect("write")),
                "malformed",
                "not a lease never lapses by itself",
            ),
            (
                "a directory",
                Box::new(|p| std::fs::create_dir(p).expect("mkdir")),
                "malformed",
                "is a directory",
            ),
            (
                "over 64 KiB",
                Box::new(move |p| std::fs::write(p, &big).expect("write")),
                "malformed",
                "larger than 64 KiB",
            ),
            (
                "a symbolic link",
                Box::new(|p| std::os::unix::fs::symlink("/etc/hostname", p).expect("symlink")),
                "malformed",
                "symbolic link",
            ),
        ];
        for (what, plant, state, says) in cases {
            plant(&lease);
            let (code, doc, err) = refused_json(&site, &["--role", "odd", "--", "true"]);
            assert_eq!(code, Some(75), "{what}: busy, not an error: {err}");
            assert_eq!(doc["state"], state, "{what}: {doc}");
            assert!(err.contains(says), "{what}: says {says:?}: {err}");
            assert!(
                err.contains("never lapses by itself") && err.contains(&shown),
                "{what}: says it never lapses and where it is: {err}"
            );
            assert!(
                !err.contains("lapses by itself 60 s") && !err.contains("TTL after its last"),
                "{what}: no lapse promised: {err}"
            );
            assert!(
                lease.symlink_metadata().is_ok(),
                "{what}: the file is left alone"
            );
            match std::fs::symlink_metadata(&lease).expect("stat").is_dir() {
                true => std::fs::remove_dir(&lease).expect("rmdir"),
                false => std::fs::remove_file(&lease).expect("rm"),
            }
        }
        assert_eq!(
            site.code(&["lease", "run", "--role", "odd", "--", "true"]),
            0,
            "free once removed"
        );
    }
}

mod nesting {
    use super::*;

    /// Runs `worklane run --kind KIND -- sh -c SCRIPT` to its end; `$W` in the script is the
    /// worklane binary.
    fn outer(site: &Site, kind: &str, script: &str) -> Output {
        site.worklane()
            .args(["run", "--kind", kind, "--", "sh", "-c", script])
            .env("W", worklane_bin())
            .output_gated()
            .expect("outer run")
    }

    fn read(site: &Site, name: &str) -> String {
        std::fs::read_to_string(site.file(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .trim()
            .to_owned()
    }

    #[test]
    fn a_run_inside_a_run_of_the_same_kind_is_refused_at_once() {
        let site = Site::new(Some(r#"{"max_agents": 1, "max_test_runs": 1}"#));
        // --timeout: were the nesting missed, the inner run would wait for its parent's slot
        // and exit 75 after it, instead of hanging the test.
        let inner = r#""$W" run --kind KIND --timeout 20s -- true 2> "$T/err.KIND"; echo $? > "$T/code.KIND""#;
        for kind in ["agent", "test", "full-run"] {
            let out = outer(&site, kind, &inner.replace("KIND", kind));
            assert!(
                out.status.success(),
                "{kind}: the outer run: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let err = read(&site, &format!("err.{kind}"));
            assert_eq!(
                read(&site, &format!("code.{kind}")),
                "64",
                "{kind}: refused at once as a usage error: {err}"
            );
            assert!(
                err.contains("already runs inside") && err.contains("unset"),
                "{kind}: says why and how to proceed: {err}"
            );
        }
    }

    #[test]
    fn the_command_learns_its_slot_and_other_kinds_nest_freely() {
        let site = Site::new(Some(r#"{"max_agents": 1, "max_test_runs": 1}"#));
        let script = r#"echo "$WORKLANE_AGENT_SLOT" > "$T/var"
"$W" run --kind test --no-wait -- sh -c 'echo "$WORKLANE_TEST_SLOT" > "$T/test.var"'; echo $? > "$T/test"
"$W" run --kind full-run --no-wait -- true; echo $? > "$T/full"
"$W" lease run --role nested -- true; echo $? > "$T/role""#;
        let out = outer(&site, "agent", script);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            read(&site, "var"),
            site.slots().join("agent-0.lock").display().to_string(),
            "WORKLANE_AGENT_SLOT names the slot's lock file"
        );
        assert_eq!(
            read(&site, "test.var"),
            site.slots().join("test-0.lock").display().to_string(),
            "WORKLANE_TEST_SLOT in a test run"
        );
        assert_eq!(read(&site, "test"), "0", "a test run inside an agent");
        assert_eq!(read(&site, "full"), "0", "a full run inside an agent");
        assert_eq!(read(&site, "role"), "0", "a role lease inside an agent");
    }

    #[test]
    fn unsetting_the_variable_or_another_directory_takes_a_slot_of_its_own() {
        let site = Site::new(Some(r#"{"max_agents": 2}"#));
        let other = site.file("other");
        std::fs::create_dir(&other).expect("other slot dir");
        let script = r#"env -u WORKLANE_AGENT_SLOT "$W" run --no-wait -- true; echo $? > "$T/unset"
AGENT_SLOTS_DIR="$T/other" "$W" run --no-wait -- true; echo $? > "$T/other.code""#;
        let out = outer(&site, "agent", script);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            read(&site, "unset"),
            "0",
            "unset: a second slot beside the parent's"
        );
        assert_eq!(
            read(&site, "other.code"),
            "0",
            "another slot directory is another pool"
        );
    }
}

mod terminal {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn ctrl_c_on_a_terminal_stops_a_shell_loop_of_runs() {
        let site = Site::new(None);
        // A script's loop, on a pseudo-terminal: Ctrl-C reaches the shell, worklane and the
        // command (the terminal's foreground group); the shell stops the loop only if its job
        // died of SIGINT.
        let inner = format!(
            r#"bash -c 'for i in 1 2 3; do {wl} run -- sh -c "touch \"$T/up.\$0\"; exec sleep 100" $i; echo next-$i; done; echo loop-done'"#,
            wl = worklane_bin()
        );
        let mut shell = site
            .command("script")
            .args(["-qfec", &inner, "/dev/null"])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env("T", site.temp.path())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn_gated()
            .expect("spawn script");
        let mut stdin = shell.stdin.take().expect("stdin");
        wait_until("the first command", || site.file("up.1").exists());
        stdin.write_all(b"\x03").expect("Ctrl-C");
        stdin.flush().expect("flush");
        let mut stdout = shell.stdout.take().expect("stdout");
        let status = wait_exit(&mut shell, "the shell");
        drop(stdin);
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        assert!(
            !text.contains("next-1") && !text.contains("loop-done"),
            "the loop stopped at the first Ctrl-C: {text:?} ({status})"
        );
        assert!(!site.file("up.2").exists(), "no second run: {text:?}");
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "the slot was let go"
        );
    }

    #[test]
    fn a_run_waiting_on_a_terminal_shows_what_blocks_it() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        // script(1) gives the waiting run a pseudo-terminal as stdin, stdout and stderr.
        let inner = format!("{} run -- true", worklane_bin());
        let mut waiter = site
            .command("script")
            .args(["-qfec", &inner, "/dev/null"])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn_gated()
            .expect("spawn script");
        let _keep_stdin_open = waiter.stdin.take();
        let mut stdout = waiter.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        wait_until("the waiting line", || {
            while let Ok(chunk) = rx.try_recv() {
                seen.extend(chunk);
            }
            String::from_utf8_lossy(&seen).contains("1st in line, 1 of 1 held")
        });
        let text = String::from_utf8_lossy(&seen).into_owned();
        assert!(
            text.contains("waiting for an agent slot"),
            "says what it waits for: {text:?}"
        );
        assert!(text.contains("waited"), "and for how long: {text:?}");
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        let status = wait_exit(&mut waiter, "the waiting run");
        assert!(
            status.success(),
            "the waiting run gets the slot and runs: {status}"
        );
    }

    #[test]
    fn a_run_waiting_without_a_terminal_is_silent() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        let out = site.output(&["run", "--timeout", "300ms", "--", "true"]);
        assert_eq!(out.status.code(), Some(75), "timed out");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("waiting for"),
            "no live line without a terminal: {err:?}"
        );
        assert!(err.contains("timed out"), "only the final refusal: {err:?}");
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
    }
}

mod roles_and_stop {
    use super::*;

    #[test]
    fn a_role_must_be_a_plain_name() {
        let site = Site::new(None);
        for bad in ["", ".hidden", "a/b", "a b"] {
            let out = site.output(&["lease", "run", "--role", bad, "--", "true"]);
            assert_eq!(
                out.status.code(),
                Some(64),
                "--role {bad:?} is a usage error"
            );
            assert!(String::from_utf8_lossy(&out.stderr).contains("--role"));
        }
        assert!(
            std::fs::read_dir(site.slots())
                .expect("list")
                .next()
                .is_none(),
            "nothing written for a refused role"
        );
    }

    #[test]
    fn a_halt_takes_the_commands_whole_group_with_it() {
        let site = Site::new(None);
        // The command's child ignores SIGTERM and records its pid; the command itself exits
        // on SIGTERM, leaving the child behind in its process group.
        let script = r#"sh -c 'trap "" TERM; echo $$ > "$T/straggler"; exec sleep 600' &
touch "$T/up.$K"; wait"#;
        let mut run = site.spawn(&["run"], script, "0");
        wait_until("the straggler", || {
            std::fs::read_to_string(site.file("straggler")).is_ok_and(|s| s.ends_with('\n'))
                && site.file("up.0").exists()
        });
        let straggler: i32 = std::fs::read_to_string(site.file("straggler"))
            .expect("pid")
            .trim()
            .parse()
            .expect("a pid");
        assert_eq!(site.code(&["stop-all", "drill"]), 0);
        wait_exit(&mut run, "the halted run");
        let pid = rustix::process::Pid::from_raw(straggler).expect("pid");
        wait_until("the straggler to be gone", || {
            let stat = std::fs::read_to_string(format!("/proc/{straggler}/stat"));
            // Gone, or a zombie waiting for init to reap it.
            stat.map_or(true, |s| {
                s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
            })
        });
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    /// Whether `/proc/PID` is gone or a zombie (waiting for a parent to reap it).
    fn gone_or_zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
        })
    }

    fn read_pid(path: &Path) -> i32 {
        std::fs::read_to_string(path)
            .expect("pid file")
            .trim()
            .parse()
            .expect("a pid")
    }

    #[test]
    fn a_halt_reaches_a_descendant_that_left_the_group_and_was_orphaned() {
        let site = Site::new(None);
        // `setsid -f` forks a process into a session (and group) of its own whose parent exits
        // at once: out of the command's group, and orphaned. It ignores SIGTERM.
        // It waits (at most 5 s) until setsid, its first parent, has exited before it records
        // its parent.
        let script = r#"setsid -f sh -c 'trap "" TERM; i=0; while [ "$(cat /proc/$(cut -d" " -f4 /proc/$$/stat)/comm)" = setsid ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; cut -d" " -f4 /proc/$$/stat > "$T/escapee.ppid"; echo $$ > "$T/escapee"; exec sleep 600'
touch "$T/up.$K"; exec sleep 600"#;
        let mut run = site.spawn(&["run"], script, "0");
        wait_until("the escapee", || {
            std::fs::read_to_string(site.file("escapee")).is_ok_and(|s| s.ends_with('\n'))
                && site.file("up.0").exists()
        });
        let escapee = read_pid(&site.file("escapee"));
        let runner = i32::try_from(run.id()).expect("pid");
        let adopted = read_pid(&site.file("escapee.ppid"));
        assert_eq!(
            adopted, runner,
            "the orphan is re-parented to worklane, its subreaper, not to init"
        );
        assert_eq!(site.code(&["stop-all", "drill"]), 0);
        wait_exit(&mut run, "the halted run");
        wait_until("the escapee to be gone", || gone_or_zombie(escapee));
        if let Some(pid) = rustix::process::Pid::from_raw(escapee) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    #[test]
    fn orphans_that_exit_during_a_run_are_reaped_at_once() {
        let site = Site::new(None);
        // A background job whose shell exits: the job is orphaned to worklane, records its
        // parent, and exits; its zombie must not wait for the run to end.
        let script = r#"sh -c 'sh -c "i=0; while [ \"\$(cat /proc/\$(cut -d\" \" -f4 /proc/\$\$/stat)/comm)\" = sh ] && [ \$i -lt 500 ]; do sleep 0.01; i=\$((i+1)); done; cut -d\" \" -f4 /proc/\$\$/stat > \"\$T/orphan.ppid\"; echo \$\$ > \"\$T/orphan\"" &'
touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#;
        let mut run = site.spawn(&["run"], script, "0");
        wait_until("the orphan", || {
            std::fs::read_to_string(site.file("orphan")).is_ok_and(|s| s.ends_with('\n'))
        });
        let orphan = read_pid(&site.file("orphan"));
        let runner = i32::try_from(run.id()).expect("pid");
        assert_eq!(
            read_pid(&site.file("orphan.ppid")),
            runner,
            "adopted by worklane"
        );
        wait_until("the orphan to be reaped while the run goes on", || {
            !Path::new(&format!("/proc/{orphan}")).exists()
        });
        assert!(run.try_wait().expect("try_wait").is_none(), "still running");
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut run, "the run").success());
    }

    #[test]
    fn a_halt_with_a_terminal_reaches_the_commands_children() {
        let site = Site::new(None);
        // With a terminal on stdin the command shares worklane's process group, so the halt
        // must find its child by descent. The child ignores SIGTERM, and SIGHUP too, so the
        // terminal's hangup when the session ends cannot do the halt's work.
        let inner = format!(
            "{} run -- sh -c {}",
            worklane_bin(),
            r#"'sh -c "trap \"\" TERM HUP; echo \$\$ > \"\$T/straggler\"; exec sleep 600" & touch "$T/up.0"; wait'"#
        );
        let mut run = site
            .command("script")
            .args(["-qfec", &inner, "/dev/null"])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .env("T", site.file(""))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn_gated()
            .expect("spawn script");
        let _keep_stdin_open = run.stdin.take();
        wait_until("the straggler", || {
            std::fs::read_to_string(site.file("straggler")).is_ok_and(|s| s.ends_with('\n'))
                && site.file("up.0").exists()
        });
        let straggler = read_pid(&site.file("straggler"));
        assert_eq!(site.code(&["stop-all", "drill"]), 0);
        wait_exit(&mut run, "the halted run");
        wait_until("the straggler to be gone", || gone_or_zombie(straggler));
        if let Some(pid) = rustix::process::Pid::from_raw(straggler) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    #[test]
    fn stop_halts_a_role_holder_too() {
        let site = Site::new(None);
        let mut holder = site.spawn(
            &["lease", "run", "--role", "planner"],
            r#"touch "$T/up.$K"; exec sleep 600"#,
            "0",
        );
        wait_until("the role holder", || site.file("up.0").exists());
        assert_eq!(site.code(&["stop-all", "everything"]), 0);
        let status = wait_exit(&mut holder, "the halted role holder");
        assert_eq!(status.code(), Some(128 + 15), "halted by SIGTERM");
        assert!(
            !site.slots().join("role-planner.lease").exists(),
            "its lease is released"
        );
        let out = site.output(&[
            "lease",
            "run",
            "--role",
            "planner",
            "--",
            "sh",
            "-c",
            r#"touch "$T/ran""#,
        ]);
        assert_eq!(
            out.status.code(),
            Some(69),
            "a new role holder is refused under STOP"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("everything") && err.contains("resume-all"),
            "names the STOP and what lifts it: {err}"
        );
        assert!(
            !site.file("ran").exists(),
            "the refused command never started"
        );
        assert!(
            !site.slots().join("role-planner.lease").exists(),
            "and no lease was taken"
        );
        assert_eq!(site.code(&["resume-all"]), 0);
        assert_eq!(
            site.code(&["lease", "run", "--role", "planner", "--", "true"]),
            0,
            "admitted after resume"
        );
    }

    #[test]
    fn a_lost_role_lease_halts_the_command_and_exits_69() {
        let site = Site::new(None);
        let mut holder = site.spawn(
            &["lease", "run", "--role", "keeper", "--ttl", "2s"],
            r#"touch "$T/up.$K"; exec sleep 600"#,
            "0",
        );
        wait_until("the role holder", || site.file("up.0").exists());
        // An operator removes the record: the holder's next pulse finds the lease is not its
        // own any more, and must stop its command rather than go on.
        std::fs::remove_file(site.slots().join("role-keeper.lease")).expect("remove the lease");
        let status = wait_exit(&mut holder, "the holder of a lost lease");
        let mut err = String::new();
        std::io::Read::read_to_string(&mut holder.stderr.take().expect("stderr"), &mut err)
            .expect("read stderr");
        assert_eq!(status.code(), Some(69), "a lost lease exits 69: {err}");
        assert!(err.contains("lost"), "says the lease was lost: {err}");
        assert!(
            err.contains("SIGKILL after 0.5 s"),
            "a 2 s lease's command gets a grace of TTL/4, so it is gone before the lease \
             could lapse: {err}"
        );
        assert!(
            !site.slots().join("role-keeper.lease").exists(),
            "nothing was written back"
        );
    }

    #[test]
    fn a_ttl_below_the_pulse_interval_is_a_usage_error() {
        let site = Site::new(None);
        let out = site.output(&[
            "lease", "run", "--role", "r", "--ttl", "100ms", "--", "true",
        ]);
        assert_eq!(out.status.code(), Some(64), "too short to keep pulsed");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("use at least 2 s"),
            "says what to use"
        );
        let out = site.output(&[
            "lease", "run", "--role", "r", "--ttl", "1999ms", "--", "true",
        ]);
        assert_eq!(
            out.status.code(),
            Some(64),
            "too short to halt the command before the lease lapses"
        );
        let out = site.output(&["lease", "run", "--role", "r", "--ttl", "2s", "--", "true"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "2 s is the shortest TTL accepted"
        );
    }
}

mod slots_json {
    use super::*;

    #[test]
    fn slots_json_field_by_field() {
        let site = Site::new(Some(r#"{"max_agents": 3, "max_test_runs": 4}"#));
        let mut holder = site.spawn(&["run", "--owner", "harness-a"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        std::fs::write(site.slots().join("agent-5.lock"), b"{broken").expect("malformed slot");
        // STOP written by hand: `stop-all` would wait for the holder to halt.
        std::fs::write(
            site.slots().join("STOP"),
            br#"{"by":"ops","at":"2026-01-01T00:00:00.000Z","reason":"maintenance"}"#,
        )
        .expect("STOP");
        let out = site.output(&["slots", "--json"]);
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("slots --json");
        assert_eq!(v["dir"], site.slots().display().to_string());
        assert_eq!(v["max_agents"], 3);
        assert_eq!(v["max_test_runs"], 4);
        assert_eq!(
            v["agents_held"], 2,
            "the live slot and the malformed one count"
        );
        assert_eq!(v["test_runs_held"], 0);
        assert_eq!(v["full_run_held"], false);
        assert_eq!(v["stop"]["reason"], "maintenance");
        assert_eq!(v["drain"]["state"], "none");
        let slots = v["slots"].as_array().expect("slots array");
        assert_eq!(slots.len(), 2, "{slots:?}");
        let held = &slots[0];
        assert_eq!(held["name"], "agent-0.lock");
        assert_eq!(held["kind"], "agent");
        assert_eq!(held["pid"], holder.id());
        assert_eq!(held["owner"], "harness-a");
        assert_eq!(held["state"], "held");
        assert_eq!(held["counts"], true);
        assert!(held["epoch"].as_u64().is_some_and(|e| e >= 1));
        assert!(
            held["command"]
                .as_str()
                .is_some_and(|c| c.starts_with("sh -c"))
        );
        let since = held["since"].as_str().expect("since");
        assert!(worklane_lease::parse_rfc3339_ms(since).is_some(), "{since}");
        let broken = &slots[1];
        assert_eq!(broken["name"], "agent-5.lock");
        assert_eq!(broken["state"], "malformed");
        assert_eq!(broken["counts"], true);
        assert_eq!(broken["pid"], serde_json::Value::Null);
        assert!(
            broken["reason"]
                .as_str()
                .is_some_and(|r| r.contains("malformed"))
        );
        std::fs::write(site.file("release.0"), b"").expect("release");
        // Under STOP the holder is halted anyway; either way it ends.
        wait_exit(&mut holder, "the holder");
    }

    #[test]
    fn the_human_view_names_holders() {
        let site = Site::new(None);
        let mut holder = site.spawn(&["run", "--owner", "harness-b"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        let out = site.output(&["slots"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("agents: 1 of 2 held"), "{text}");
        assert!(text.contains("harness-b"), "{text}");
        assert!(text.contains(&holder.id().to_string()), "{text}");
        std::fs::write(site.file("release.0"), b"").expect("release");
        wait_exit(&mut holder, "the holder");
    }
}

mod queue {
    use super::*;

    #[test]
    fn a_queued_full_run_runs_detached_once_the_lock_is_free() {
        let site = Site::new(None);
        let mut blocker = site.spawn(&["run", "--kind", "full-run"], HOLD, "0");
        wait_until("the first full run", || site.file("up.0").exists());
        let out = site.output(&[
            "queue",
            "full-run",
            "--",
            "sh",
            "-c",
            r#"cut -d" " -f6 /proc/$$/stat > "$T/queued.sid"; echo ran > "$T/queued.out""#,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        let log: PathBuf = said
            .split("log ")
            .nth(1)
            .map(|l| PathBuf::from(l.trim()))
            .expect("names its log");
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !site.file("queued.out").exists(),
            "waits while another full run holds it"
        );
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut blocker, "the first full run").success());
        wait_until("the queued run", || site.file("queued.out").exists());
        let sid: i32 = std::fs::read_to_string(site.file("queued.sid"))
            .expect("sid")
            .trim()
            .parse()
            .expect("a session id");
        // Read our own session from /proc rather than getsid(2): in a container
        // whose session leader lives outside our pid namespace the kernel reports
        // session 0, which rustix's getsid refuses to represent as a Pid.
        let stat = std::fs::read_to_string("/proc/self/stat").expect("our stat");
        let ours: i32 = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(3))
            .and_then(|field| field.parse().ok())
            .expect("our session id");
        assert!(
            sid > 0,
            "setsid makes the runner lead a session visible to us"
        );
        assert_ne!(sid, ours, "the runner lives in a session of its own");
        wait_until("the log's last line", || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("exited with status 0"))
        });
        let _ = std::fs::remove_file(&log);
        assert!(
            Path::new(&site.slots())
                .join(".full-run.lock.flock")
                .exists()
        );
    }

    /// `queue ls --json`'s queued full runs.
    fn full_runs(site: &Site) -> Vec<serde_json::Value> {
        let out = site.output(&["queue", "ls", "--json"]);
        assert!(out.status.success(), "{out:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        doc["full_runs"].as_array().expect("full_runs").clone()
    }

    #[test]
    fn a_queued_full_run_is_listed_in_line_and_cancelled_with_a_line_in_its_log() {
        let site = Site::new(None);
        let mut blocker = site.spawn(&["run", "--kind", "full-run"], HOLD, "0");
        wait_until("the first full run", || site.file("up.0").exists());
        // Queued from a shell that leaves its stdout open as descriptor 3 too: the runner must
        // close it, or this caller would wait for the runner (hours) to see its output end.
        let mut queue = site.command("sh");
        queue
            .args([
                "-c",
                r#"exec "$W" queue full-run --priority 3 -- sh -c 'echo ran > "$T/never"' 3>&1"#,
            ])
            .env("W", worklane_bin())
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .env("T", site.temp.path())
            .env("TMPDIR", site.temp.path())
            .stdin(Stdio::null());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(queue.output_gated());
        });
        // A watchdog, not a timing assertion: without the close this never returns while the
        // first full run holds the lock.
        let out = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("queue full-run's output ends when it exits, not when its runner does")
            .expect("run sh");
        assert!(out.status.success(), "{out:?}");
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        let id = said
            .split_whitespace()
            .find(|w| w.starts_with("fr-"))
            .expect("names its id")
            .to_owned();
        let pid: u32 = id["fr-".len()..].parse().expect("fr-<pid>");
        let log = PathBuf::from(said.split("log ").nth(1).expect("names its log").trim());

        wait_until("the runner in line", || full_runs(&site).len() == 1);
        let listed = &full_runs(&site)[0];
        assert_eq!(listed["id"], id.as_str(), "{listed}");
        assert_eq!(listed["pid"], pid, "{listed}");
        assert_eq!(listed["state"], "waiting", "{listed}");
        assert_eq!(listed["position"], 1, "{listed}");
        assert_eq!(listed["priority"], 3, "{listed}");
        assert_eq!(
            listed["log"],
            log.display().to_string().as_str(),
            "{listed}"
        );
        assert!(
            listed["command"]
                .as_str()
                .is_some_and(|c| c.contains("never")),
            "{listed}"
        );
        let text = site.output(&["queue", "ls"]);
        let text = String::from_utf8_lossy(&text.stdout).into_owned();
        assert!(
            text.contains(&format!("{id}  waiting, 1. in line  priority 3")),
            "{text}"
        );
        // `slots` shows its place in the full-run line.
        let slots = site.output(&["slots", "--json"]);
        let slots: serde_json::Value = serde_json::from_slice(&slots.stdout).expect("slots json");
        let line = slots["line"].as_array().expect("line");
        assert!(
            line.iter().any(|e| e["kind"] == "full-run"
                && e["owner"] == "queued full run"
                && e["pid"] == pid
                && e["live"] == true),
            "{slots}"
        );

        assert_eq!(site.code(&["queue", "cancel", "fr-x"]), 64, "not an id");
        assert_eq!(
            site.code(&["queue", "cancel", &format!("fr-{}", u32::MAX)]),
            75,
            "no such queued run"
        );
        let cancelled = site.output(&["queue", "cancel", &id]);
        assert!(cancelled.status.success(), "{cancelled:?}");
        assert!(
            String::from_utf8_lossy(&cancelled.stdout).contains("cancelled"),
            "{cancelled:?}"
        );
        assert!(full_runs(&site).is_empty(), "out of the line");
        wait_until("the log's cancel line", || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("cancelled"))
        });
        // The lock freed, the cancelled run never starts.
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut blocker, "the first full run").success());
        let again = site.output(&["run", "--kind", "full-run", "--no-wait", "--", "true"]);
        assert!(again.status.success(), "the lock is free: {again:?}");
        assert!(!site.file("never").exists(), "a cancelled run never runs");
    }

    /// A caller that blocks SIGTERM (the mask survives exec, into the detached runner) cannot
    /// make its queued full run uncancellable: the runner unblocks what it handles.
    #[test]
    fn a_queued_full_run_from_a_caller_that_blocks_sigterm_is_still_cancelled() {
        let site = Site::new(None);
        let mut blocker = site.spawn(&["run", "--kind", "full-run"], HOLD, "0");
        wait_until("the first full run", || site.file("up.0").exists());
        let out = site
            .command("python3")
            .args([
                "-c",
                "import os, signal, sys\n\
                 signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n\
                 os.execv(sys.argv[1], sys.argv[1:])",
                worklane_bin(),
                "queue",
                "full-run",
                "--",
                "sh",
                "-c",
                r#"echo ran > "$T/never""#,
            ])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .env("T", site.temp.path())
            .env("TMPDIR", site.temp.path())
            .stdin(Stdio::null())
            .output_gated()
            .expect("run python3");
        assert!(out.status.success(), "{out:?}");
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        let id = said
            .split_whitespace()
            .find(|w| w.starts_with("fr-"))
            .expect("names its id")
            .to_owned();
        let log = PathBuf::from(said.split("log ").nth(1).expect("names its log").trim());
        wait_until("the runner in line", || full_runs(&site).len() == 1);
        let cancelled = site.output(&["queue", "cancel", &id]);
        assert!(cancelled.status.success(), "{cancelled:?}");
        wait_until("the log's cancel line", || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("cancelled"))
        });
        assert!(full_runs(&site).is_empty(), "out of the line");
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut blocker, "the first full run").success());
        let again = site.output(&["run", "--kind", "full-run", "--no-wait", "--", "true"]);
        assert!(again.status.success(), "the lock is free: {again:?}");
        assert!(!site.file("never").exists(), "a cancelled run never runs");
    }

    #[test]
    fn a_running_queued_full_run_is_listed_and_not_cancelled_as_queued() {
        let site = Site::new(None);
        let out = site
            .worklane()
            .env("TMPDIR", site.temp.path())
            .env("K", "1")
            .args(["queue", "full-run", "--", "sh", "-c", HOLD])
            .output_gated()
            .expect("queue");
        assert!(out.status.success(), "{out:?}");
        wait_until("the queued run", || site.file("up.1").exists());
        let listed = full_runs(&site);
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0]["state"], "running", "{listed:?}");
        let id = listed[0]["id"].as_str().expect("id").to_owned();
        let refused = site.output(&["queue", "cancel", &id]);
        assert_eq!(refused.status.code(), Some(75), "{refused:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("no longer queued"),
            "{refused:?}"
        );
        std::fs::write(site.file("release.1"), b"").expect("release");
        wait_until("the run's end", || full_runs(&site).is_empty());
    }
}

mod budget {
    use super::*;

    const TOKEN: &str = "ghp_cli_test_token_not_real";

    fn budget(site: &Site, args: &[&str]) -> Output {
        site.worklane()
            .arg("budget")
            .args(args)
            .env("GITHUB_TOKEN", TOKEN)
            .output_gated()
            .expect("run worklane budget")
    }

    fn reset_in(secs: u64) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        format!("X-RateLimit-Reset: {}", now + secs)
    }

    #[test]
    fn a_shared_budget_is_observed_taken_and_shown_without_its_key() {
        let site = Site::new(None);
        let reset = reset_in(600);
        let out = budget(
            &site,
            &[
                "observe",
                "--status",
                "200",
                "--header",
                "X-RateLimit-Limit: 5000",
                "--header",
                "x-ratelimit-remaining: 2",
                "--header",
                &reset,
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = budget(&site, &["take", "--consumer", "backlog", "--json"]);
        assert!(out.status.success());
        let took: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(took["go"], true);
        assert_eq!(took["counted"], true);
        assert_eq!(took["left"], 1);
        assert!(
            budget(&site, &["take", "--consumer", "triage"])
                .status
                .success()
        );

        let out = site.output(&["slots", "--json"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let v: serde_json::Value = serde_json::from_str(&text).expect("slots --json");
        let credential = &v["budgets"][0];
        assert_eq!(credential["credential"], 1, "numbered");
        let core = &credential["resources"][0];
        assert_eq!(core["name"], "core");
        assert_eq!(core["limit"], 5000);
        assert_eq!(core["remaining"], 2);
        assert_eq!(core["granted"], 2);
        assert_eq!(core["left"], 0);
        assert_eq!(core["by_consumer"]["backlog"], 1);
        assert_eq!(core["by_consumer"]["triage"], 1);
        let key = std::fs::read_dir(site.slots())
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find_map(|n| {
                n.strip_prefix("github-budget-")
                    .and_then(|k| k.strip_suffix(".json"))
                    .map(str::to_owned)
            })
            .expect("a state file");
        let shown = String::from_utf8_lossy(&budget(&site, &["show"]).stdout).into_owned();
        assert!(shown.contains("credential #1"), "{shown}");
        for text in [&text, &shown] {
            assert!(!text.contains(&key), "never named by key: {text}");
            assert!(!text.contains(TOKEN), "the token never shows");
        }
    }

    #[test]
    fn a_paused_credential_refuses_the_call_after_10_s_with_75() {
        let site = Site::new(None);
        let out = budget(
            &site,
            &["observe", "--status", "429", "--header", "Retry-After: 600"],
        );
        assert!(out.status.success());
        let out = budget(&site, &["take", "--consumer", "backlog", "--json"]);
        assert_eq!(out.status.code(), Some(75), "the call must not be made");
        let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(said["go"], false);
        assert_eq!(said["kind"], "secondary_rate_limited");
        assert_eq!(said["status"], 429);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("paused until"), "{err}");
    }

    #[test]
    fn bad_budget_input_is_a_usage_error() {
        let site = Site::new(None);
        let out = site
            .worklane()
            .args(["budget", "take", "--consumer", "c"])
            .env_remove("GITHUB_TOKEN")
            .output_gated()
            .expect("run");
        assert_eq!(out.status.code(), Some(64));
        assert!(String::from_utf8_lossy(&out.stderr).contains("$GITHUB_TOKEN"));
        let out = budget(
            &site,
            &["observe", "--status", "200", "--header", "no colon"],
        );
        assert_eq!(out.status.code(), Some(64));
        assert!(String::from_utf8_lossy(&out.stderr).contains("Name: value"));
        let out = budget(&site, &["take", "--consumer", "c", "--resource", "../x"]);
        assert_eq!(out.status.code(), Some(64));
    }

    #[test]
    fn the_ledger_never_holds_a_call_back_for_its_own_trouble() {
        // A cap the config gets wrong is no reason to stop an API call.
        let site = Site::new(Some(r#"{"max_test_runs": 9}"#));
        assert_eq!(
            site.code(&["run", "--", "true"]),
            78,
            "the slot pool refuses the config"
        );
        let reset = reset_in(600);
        let args = [
            "observe",
            "--status",
            "200",
            "--header",
            "X-RateLimit-Remaining: 3",
            "--header",
            &reset,
        ];
        assert!(budget(&site, &args).status.success());
        let out = budget(&site, &["take", "--consumer", "c", "--json"]);
        assert!(out.status.success());
        let took: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(took["counted"], true, "the budget is kept all the same");

        // No slot directory to be had: the call goes, unaccounted, and says why.
        let file = site.file("not-a-dir");
        std::fs::write(&file, b"").expect("write");
        let out = site
            .worklane()
            .args(["budget", "take", "--consumer", "c", "--json"])
            .env("GITHUB_TOKEN", TOKEN)
            .env("AGENT_SLOTS_DIR", &file)
            .output_gated()
            .expect("run");
        assert!(out.status.success(), "the call may go");
        let took: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(took["go"], true);
        assert_eq!(took["counted"], false);
        assert!(
            took["unaccounted"]
                .as_str()
                .is_some_and(|w| w.contains("not-a-dir"))
        );
    }

    #[test]
    fn a_secondary_limit_named_by_the_caller_pauses_the_credential() {
        let site = Site::new(None);
        let forbidden = [
            "observe",
            "--status",
            "403",
            "--header",
            "X-RateLimit-Remaining: 4000",
        ];
        assert!(budget(&site, &forbidden).status.success());
        let shown = |site: &Site| -> serde_json::Value {
            serde_json::from_slice(&budget(site, &["show", "--json"]).stdout).expect("json")
        };
        assert!(
            shown(&site)["budgets"][0]["paused_until"].is_null(),
            "a 403 with calls left may be a permission error: no pause"
        );
        let mut secondary = forbidden.to_vec();
        secondary.push("--secondary-limit");
        assert!(budget(&site, &secondary).status.success());
        assert!(
            shown(&site)["budgets"][0]["paused_until"].is_string(),
            "the body said secondary rate limit: paused"
        );
    }
}

/// The slot directory belongs to root and the caller (SPEC 3): anything else exits 78 naming
/// the owner, the mode and the fix; and a member of its group that cannot read a budget state
/// hears about it.
mod ownership {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    const OTHER: u32 = 1000;
    pub(super) const SHARED: u32 = 23_456;

    pub(super) fn root_only() {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test gives files to other users (chown) and drops to one (setpriv), so it \
             runs as root"
        );
    }

    #[test]
    fn a_squatted_or_world_writable_directory_exits_78_naming_owner_mode_and_fix() {
        root_only();
        let site = Site::new(None);
        let slots = site.slots();
        std::os::unix::fs::chown(&slots, Some(OTHER), Some(OTHER)).expect("chown");
        std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        for args in [
            &["run", "--", "true"][..],
            &["stop-all", "squatted"],
            &["slots"],
            &["set-test-slots", "3"],
        ] {
            let out = site.output(args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(78), "{args:?}: {err}");
            for part in ["uid 1000", "0777", "rm -r"] {
                assert!(err.contains(part), "{args:?} names {part:?}: {err}");
            }
        }
        assert!(
            std::fs::read_dir(&slots).expect("list").next().is_none(),
            "nothing was written into it"
        );
        std::os::unix::fs::chown(&slots, Some(0), Some(0)).expect("chown");
        let out = site.output(&["run", "--", "true"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "root's, but 0777: {err}");
        assert!(err.contains("chmod o-w"), "the fix: {err}");
        std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
        assert_eq!(site.code(&["run", "--", "true"]), 0, "fixed");
    }

    #[test]
    fn a_symbolic_link_exits_78_in_every_spelling() {
        let site = Site::new(None);
        let link = site.file("link");
        std::os::unix::fs::symlink(site.slots(), &link).expect("symlink");
        let link = link.display().to_string();
        for spelling in [link.clone(), format!("{link}/"), format!("{link}/.")] {
            let out = site
                .worklane()
                .args(["run", "--", "true"])
                .env("AGENT_SLOTS_DIR", &spelling)
                .output_gated()
                .expect("run");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(78), "{spelling}: {err}");
            assert!(err.contains("symbolic link"), "{spelling}: {err}");
        }
    }

    #[test]
    fn a_guard_only_its_owner_can_open_is_skipped_by_other_users() {
        root_only();
        let site = Site::new(Some(r#"{"max_agents": 2}"#));
        let slots = site.slots();
        std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod");
        std::os::unix::fs::chown(&slots, Some(0), Some(SHARED)).expect("chown");
        std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
        // root's guard of index 0, mode 0600: nobody else can open it.
        let guard = slots.join(".agent-0.lock.flock");
        std::fs::write(&guard, b"").expect("guard");
        std::fs::set_permissions(&guard, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let out = as_member(&site, &["run", "--no-wait", "--", "true"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "the index is skipped, not an error for every take: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = site.output(&["slots", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("json ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        let named = doc["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .any(|p| {
                p["name"] == ".agent-0.lock.flock"
                    && p["fix"].as_str().is_some_and(|f| f.contains("chmod"))
            });
        assert!(named, "slots names it with its fix: {doc}");
    }

    /// Runs `worklane budget ARGS` as user 65534, primary group 12345, member of `SHARED`.
    fn budget_as_member(site: &Site, args: &[&str]) -> Output {
        let mut all = vec!["budget"];
        all.extend_from_slice(args);
        as_member(site, &all)
    }

    /// Runs `worklane ARGS` as that member.
    pub(super) fn as_member(site: &Site, args: &[&str]) -> Output {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=12345",
                &format!("--groups={SHARED}"),
            ])
            .arg(worklane_bin())
            .args(args)
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .env("GITHUB_TOKEN", "ghp_cli_test_token_not_real")
            .stdin(Stdio::null())
            .output_gated()
            .expect("run setpriv")
    }

    #[test]
    fn a_member_that_cannot_read_the_budget_is_told_loudly_and_replaces_nothing() {
        root_only();
        let site = Site::new(None);
        let slots = site.slots();
        std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod");
        std::os::unix::fs::chown(&slots, None, Some(SHARED)).expect("chgrp");
        std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
        // Root spends the window; its state then loses the group (as a state written before
        // the directory was setgid did), so the member cannot read it.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let reset = format!("X-RateLimit-Reset: {}", now + 600);
        let out = site
            .worklane()
            .args(["budget", "observe", "--status", "200"])
            .args(["--header", "X-RateLimit-Remaining: 0", "--header", &reset])
            .env("GITHUB_TOKEN", "ghp_cli_test_token_not_real")
            .output_gated()
            .expect("observe");
        assert!(out.status.success());
        let state = std::fs::read_dir(&slots)
            .expect("list")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "json"))
            .expect("a state file");
        assert_eq!(
            std::fs::metadata(&state).expect("stat").gid(),
            SHARED,
            "written with the directory's group"
        );
        std::os::unix::fs::chown(&state, None, Some(0)).expect("chgrp");
        let before = std::fs::read(&state).expect("read");

        let out = budget_as_member(&site, &["take", "--consumer", "member", "--json"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the call may go: {err}");
        let took: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(took["go"], true);
        assert_eq!(took["counted"], false);
        assert!(
            took["unaccounted"]
                .as_str()
                .is_some_and(|w| w.contains("cannot read")),
            "--json says why: {took}"
        );
        assert!(
            err.contains("unaccounted") && err.contains("cannot read"),
            "and stderr says it too: {err}"
        );
        let out = budget_as_member(&site, &["take", "--consumer", "member"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success());
        assert!(err.contains("cannot read"), "loud without --json: {err}");
        let out = as_member(&site, &["why", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("why --json");
        let quota = &doc["provider_quota"];
        assert_eq!(quota["blocks"], false, "the call would go: {doc}");
        assert!(
            quota.to_string().contains("unaccounted"),
            "but `why` says it would be unaccounted: {quota}"
        );

        let out = budget_as_member(
            &site,
            &[
                "observe",
                "--status",
                "200",
                "--header",
                "X-RateLimit-Remaining: 4999",
                "--header",
                &reset,
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success());
        assert!(
            err.contains("not recorded") && err.contains("cannot read"),
            "{err}"
        );
        assert_eq!(
            std::fs::read(&state).expect("read"),
            before,
            "the state the member could not read is not replaced"
        );
    }
}

/// A damaged file never silences STOP, resume, the drain or the views (issue 26): a config,
/// STOP, drain flag or budget state that is not JSON, out of range, a directory, a FIFO, a
/// link, over 64 KiB or unreadable by the caller, and a dispatcher that answers with garbage, a
/// refusal or nothing. Each is shown as a problem naming the file, what is wrong and the fix;
/// takes may still refuse (78 for the config). Every case runs as root and as an unprivileged
/// member of the slot directory's group (through `setpriv`): root reads what a member cannot.
mod damage {
    use super::ownership::{SHARED, as_member, root_only};
    use super::*;
    use serde_json::Value;
    use std::os::unix::fs::PermissionsExt;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Who {
        Root,
        Member,
    }

    const BOTH: [Who; 2] = [Who::Root, Who::Member];

    /// How a file is damaged.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Damage {
        /// Not JSON (a typo).
        NotJson,
        /// JSON of the right shape with a value out of range (for the config).
        OutOfRange,
        /// A key written twice.
        Duplicated,
        /// An empty directory at the name.
        Directory,
        /// A directory with a file in it.
        FullDirectory,
        /// A FIFO (a read must not block on it).
        Fifo,
        /// A symbolic link to a good file (never followed).
        Symlink,
        /// Over 64 KiB.
        Oversized,
        /// A good file only root can read (mode 0600).
        Unreadable,
    }

    /// A slot directory shared with the group `SHARED` (setgid 2770), reachable by the member.
    fn shared_site(config: Option<&str>) -> Site {
        root_only();
        let site = Site::new(config);
        std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod the temp dir");
        std::os::unix::fs::chown(site.slots(), Some(0), Some(SHARED)).expect("chown");
        std::fs::set_permissions(site.slots(), std::fs::Permissions::from_mode(0o2770))
            .expect("chmod the slot directory");
        site
    }

    /// Puts `damage` at `path`; `good` is what a good file there holds.
    fn damage(site: &Site, path: &Path, how: Damage, good: &str) {
        let _ = std::fs::remove_dir_all(path);
        let _ = std::fs::remove_file(path);
        match how {
            Damage::NotJson => std::fs::write(path, r#"{"max_agents": "4""#).expect("write"),
            Damage::OutOfRange => std::fs::write(path, r#"{"max_test_runs": 9}"#).expect("write"),
            Damage::Duplicated => {
                std::fs::write(path, r#"{"max_agents": 1, "max_agents": 8}"#).expect("write")
            }
            Damage::Directory => std::fs::create_dir(path).expect("mkdir"),
            Damage::FullDirectory => {
                std::fs::create_dir(path).expect("mkdir");
                std::fs::write(path.join("kept"), b"an operator's file").expect("write");
            }
            Damage::Fifo => rustix::fs::mknodat(
                rustix::fs::CWD,
                path,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o666),
                0,
            )
            .expect("mkfifo"),
            Damage::Symlink => {
                let target = site.file(&format!(
                    "link-target-{}",
                    path.file_name().expect("name").to_string_lossy()
                ));
                std::fs::write(&target, good).expect("write the target");
                std::os::unix::fs::symlink(&target, path).expect("symlink");
            }
            Damage::Oversized => {
                std::fs::write(path, format!("{}{good}", " ".repeat(70 * 1024))).expect("write")
            }
            Damage::Unreadable => {
                std::fs::write(path, good).expect("write");
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .expect("chmod");
            }
        }
    }

    fn run(site: &Site, who: Who, args: &[&str]) -> Output {
        match who {
            Who::Root => site.output(args),
            Who::Member => as_member(site, args),
        }
    }

    fn text(out: &Output) -> String {
        format!(
            "exit {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// `ARGS` exits `code`; returns its stdout.
    fn expect(site: &Site, who: Who, args: &[&str], code: i32, case: &str) -> String {
        let out = run(site, who, args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{case}, {who:?}: `worklane {}`: {}",
            args.join(" "),
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(site: &Site, who: Who, args: &[&str], code: i32, case: &str) -> Value {
        let out = expect(site, who, args, code, case);
        serde_json::from_str(&out).unwrap_or_else(|e| {
            panic!(
                "{case}, {who:?}: `worklane {}` prints JSON ({e}): {out}",
                args.join(" ")
            )
        })
    }

    /// The problem named `name` in `doc["problems"]`, if any.
    fn problem<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
        doc["problems"]
            .as_array()
            .expect("problems is an array")
            .iter()
            .find(|p| p["name"] == name)
    }

    /// A problem's `what` and `fix` say something.
    fn said(p: &Value, case: &str) {
        for key in ["what", "fix"] {
            assert!(
                p[key].as_str().is_some_and(|s| s.len() > 10),
                "{case}: the problem's {key} says what: {p}"
            );
        }
    }

    // ---- the config ---------------------------------------------------------------------

    /// Every operator command and view with the config damaged so that `who` cannot use it.
    fn config_cannot_be_used(site: &Site, who: Who, case: &str) {
        let file = site.slots().join("config.json");
        let shown = file.display().to_string();
        let stop = site.slots().join("STOP");
        let flag = site.slots().join("update-drain.json");
        let config_problem = |doc: &Value, what: &str| {
            let p = &doc["config_problem"];
            assert_eq!(p["file"], shown.as_str(), "{case}, {who:?}, {what}: {doc}");
            for key in ["what", "fix"] {
                assert!(
                    p[key].as_str().is_some_and(|s| s.len() > 10),
                    "{case}, {who:?}, {what}: config_problem.{key}: {doc}"
                );
            }
        };
        let says_problem = |out: &str, what: &str| {
            assert!(
                out.contains("config problem: ") && out.contains(&shown) && out.contains("fix: "),
                "{case}, {who:?}: `{what}` shows the config's problem: {out}"
            );
        };

        let out = expect(site, who, &["stop-all", "incident"], 0, case);
        assert!(out.contains("STOP written"), "{case}, {who:?}: {out}");
        assert!(stop.is_file(), "{case}, {who:?}: STOP is written");
        says_problem(&expect(site, who, &["slots"], 0, case), "slots");
        let doc = json(site, who, &["slots", "--json"], 0, case);
        config_problem(&doc, "slots --json");
        assert_eq!(
            doc["max_agents"], 0,
            "{case}, {who:?}: no cap in force: {doc}"
        );
        assert!(
            doc["stop"].is_object(),
            "{case}, {who:?}: STOP in force: {doc}"
        );
        let doc = json(site, who, &["why", "--json"], 69, case);
        config_problem(&doc, "why --json");
        says_problem(&expect(site, who, &["why"], 69, case), "why");
        let doc = json(site, who, &["queue", "ls", "--json"], 0, case);
        config_problem(&doc, "queue ls --json");
        says_problem(&expect(site, who, &["queue", "ls"], 0, case), "queue ls");
        let doc = json(site, who, &["budget", "show", "--json"], 0, case);
        config_problem(&doc, "budget show --json");
        says_problem(
            &expect(site, who, &["budget", "show"], 0, case),
            "budget show",
        );
        expect(site, who, &["idle"], 0, case);
        expect(
            site,
            who,
            &["reconcile", "a-00000000000000000000000000000000"],
            64,
            case,
        );
        let out = expect(site, who, &["resume-all"], 0, case);
        assert!(out.contains("STOP removed"), "{case}, {who:?}: {out}");
        assert!(!stop.exists(), "{case}, {who:?}: STOP is gone");
        // Without STOP, the config is what blocks a take, and `why` says so with 78.
        let doc = json(site, who, &["why", "--json"], 78, case);
        assert_eq!(
            doc["blocked_by"], "resource_admission",
            "{case}, {who:?}: {doc}"
        );
        assert!(
            doc["resource_admission"]["why"]
                .as_str()
                .is_some_and(|w| w.contains(&shown)),
            "{case}, {who:?}: names the file: {doc}"
        );
        expect(site, who, &["drain", "--until", "30m"], 0, case);
        assert!(flag.is_file(), "{case}, {who:?}: the drain flag is written");
        expect(site, who, &["undrain"], 0, case);
        assert!(!flag.exists(), "{case}, {who:?}: the drain flag is gone");
        // `config get` is the config's own reader: 78, with the same problem and fix.
        let out = run(site, who, &["config", "get"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(78),
            "{case}, {who:?}: {}",
            text(&out)
        );
        assert!(
            err.contains(&shown) && err.contains("fix: "),
            "{case}, {who:?}: config get names the file and the fix: {err}"
        );
        // Takes still refuse, naming the file and the fix.
        for take in [
            &["run", "--", "true"][..],
            &["run", "--kind", "full-run", "--", "true"],
            &["lease", "run", "--role", "r", "--", "true"],
            &["queue", "full-run", "--", "true"],
            &["enqueue", "--", "true"],
        ] {
            let out = run(site, who, take);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(78),
                "{case}, {who:?}: {take:?}: {}",
                text(&out)
            );
            assert!(
                err.contains(&shown) && err.contains("fix: "),
                "{case}, {who:?}: {take:?} names the file and the fix: {err}"
            );
        }
    }

    /// The same commands when the config is good for `who`.
    fn config_is_good(site: &Site, who: Who, case: &str) {
        let doc = json(site, who, &["slots", "--json"], 0, case);
        assert!(doc["config_problem"].is_null(), "{case}, {who:?}: {doc}");
        expect(site, who, &["run", "--", "true"], 0, case);
    }

    fn broken_config(how: Damage) {
        let site = shared_site(None);
        let case = format!("config {how:?}");
        damage(
            &site,
            &site.slots().join("config.json"),
            how,
            r#"{"max_agents": 4}"#,
        );
        for who in BOTH {
            if how == Damage::Unreadable && who == Who::Root {
                // Root reads a file of mode 0600: for root it is a good config.
                config_is_good(&site, who, &case);
            } else {
                config_cannot_be_used(&site, who, &case);
            }
        }
    }

    #[test]
    fn a_config_that_is_not_json() {
        broken_config(Damage::NotJson);
    }

    #[test]
    fn a_config_with_a_value_out_of_range() {
        broken_config(Damage::OutOfRange);
    }

    #[test]
    fn a_config_with_a_key_written_twice() {
        broken_config(Damage::Duplicated);
    }

    #[test]
    fn a_directory_at_the_config() {
        broken_config(Damage::Directory);
    }

    #[test]
    fn a_fifo_at_the_config() {
        broken_config(Damage::Fifo);
    }

    #[test]
    fn a_symlink_at_the_config() {
        broken_config(Damage::Symlink);
    }

    #[test]
    fn an_oversized_config() {
        broken_config(Damage::Oversized);
    }

    #[test]
    fn a_config_only_root_can_read() {
        broken_config(Damage::Unreadable);
    }

    #[test]
    fn a_config_named_by_agent_slots_config_outside_the_directory() {
        // AGENT_SLOTS_CONFIG names the file: the problem names that file, the rest works.
        let site = shared_site(None);
        let file = site.file("caps.json");
        std::fs::write(&file, "{").expect("write");
        let out = site
            .worklane()
            .env("AGENT_SLOTS_CONFIG", &file)
            .args(["slots", "--json"])
            .output_gated()
            .expect("slots");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(
            doc["config_problem"]["file"],
            file.display().to_string(),
            "{doc}"
        );
        let out = site
            .worklane()
            .env("AGENT_SLOTS_CONFIG", &file)
            .args(["stop-all", "x"])
            .output_gated()
            .expect("stop-all");
        assert!(out.status.success(), "{}", text(&out));
    }

    #[test]
    fn a_run_waiting_when_the_config_breaks_exits_78_with_the_fix() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        let waiter = Running::new(
            site.worklane()
                .args(["run", "--", "true"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("spawn the waiter"),
        );
        wait_until("the waiter in line", || {
            std::fs::read_dir(site.slots())
                .expect("list")
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("line-agent."))
        });
        std::fs::write(site.slots().join("config.json"), r#"{"max_agents": "1""#).expect("break");
        let out = waiter.wait_with_output().expect("the waiter");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{err}");
        assert!(
            err.contains("config.json") && err.contains("fix: correct the JSON"),
            "names the file and the fix: {err}"
        );
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
    }

    // ---- STOP ---------------------------------------------------------------------------

    const GOOD_STOP: &str =
        r#"{"by": "alice@build1", "at": "2026-11-30T04:55:19.924Z", "reason": "kept"}"#;

    fn broken_stop(how: Damage) {
        let site = shared_site(None);
        let stop = site.slots().join("STOP");
        for who in BOTH {
            let case = format!("STOP {how:?}");
            damage(&site, &stop, how, GOOD_STOP);
            // Root reads a STOP only root may read: it is a good STOP to root.
            let readable = how == Damage::Unreadable && who == Who::Root;
            let doc = json(&site, who, &["slots", "--json"], 0, &case);
            assert!(
                doc["stop"].is_object(),
                "{case}, {who:?}: a STOP in force: {doc}"
            );
            match problem(&doc, "STOP") {
                Some(p) if !readable => said(p, &case),
                None if readable => {}
                other => panic!("{case}, {who:?}: STOP's problem: {other:?} in {doc}"),
            }
            let out = expect(&site, who, &["slots"], 0, &case);
            assert!(out.contains("STOP in force"), "{case}, {who:?}: {out}");
            if !readable {
                assert!(
                    out.contains("STOP: the STOP file"),
                    "{case}, {who:?}: {out}"
                );
            }
            let doc = json(&site, who, &["why", "--json"], 69, &case);
            assert_eq!(
                doc["blocked_by"], "resource_admission",
                "{case}, {who:?}: {doc}"
            );
            expect(&site, who, &["run", "--", "true"], 69, &case);
            expect(&site, who, &["queue", "ls"], 0, &case);
            expect(&site, who, &["budget", "show"], 0, &case);
            expect(&site, who, &["drain", "--until", "30m"], 0, &case);
            expect(&site, who, &["undrain"], 0, &case);

            // resume-all lifts it, whatever it is, but a directory with files in it.
            let out = run(&site, who, &["resume-all"]);
            if how == Damage::FullDirectory {
                let err = String::from_utf8_lossy(&out.stderr);
                assert_ne!(
                    out.status.code(),
                    Some(0),
                    "{case}, {who:?}: {}",
                    text(&out)
                );
                assert!(
                    err.contains("stays in force") && err.contains("rm -r"),
                    "{case}, {who:?}: says STOP stays and the fix: {err}"
                );
                assert!(
                    stop.join("kept").exists(),
                    "{case}, {who:?}: nothing deleted"
                );
            } else {
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{case}, {who:?}: {}",
                    text(&out)
                );
                assert!(
                    std::fs::symlink_metadata(&stop).is_err(),
                    "{case}, {who:?}: resume-all removed it"
                );
                expect(&site, who, &["run", "--", "true"], 0, &case);
            }

            // stop-all replaces it, whatever it is, but a directory with files in it, which is
            // a STOP in force all the same: it says so and halts what runs, exit 0.
            damage(&site, &stop, how, GOOD_STOP);
            let doc = json(&site, who, &["stop-all", "--json", "replaced"], 0, &case);
            if how == Damage::FullDirectory {
                assert_eq!(doc["written"], false, "{case}, {who:?}: {doc}");
                said(problem(&doc, "STOP").expect("STOP's problem"), &case);
                let out = expect(&site, who, &["stop-all", "again"], 0, &case);
                assert!(out.contains("already in force"), "{case}, {who:?}: {out}");
                std::fs::remove_dir_all(&stop).expect("clean up");
            } else {
                assert_eq!(doc["written"], true, "{case}, {who:?}: {doc}");
                let written: Value =
                    serde_json::from_slice(&std::fs::read(&stop).expect("a STOP file"))
                        .expect("JSON");
                assert_eq!(written["reason"], "replaced", "{case}, {who:?}");
                expect(&site, who, &["resume-all"], 0, &case);
            }
        }
    }

    #[test]
    fn a_stop_that_is_not_json() {
        broken_stop(Damage::NotJson);
    }

    #[test]
    fn an_empty_directory_at_stop() {
        broken_stop(Damage::Directory);
    }

    #[test]
    fn a_directory_with_files_at_stop() {
        broken_stop(Damage::FullDirectory);
    }

    #[test]
    fn a_fifo_at_stop() {
        broken_stop(Damage::Fifo);
    }

    #[test]
    fn a_symlink_at_stop() {
        broken_stop(Damage::Symlink);
    }

    #[test]
    fn an_oversized_stop() {
        broken_stop(Damage::Oversized);
    }

    #[test]
    fn a_stop_only_root_can_read() {
        broken_stop(Damage::Unreadable);
    }

    // ---- the drain flag -----------------------------------------------------------------

    /// A drain flag in force for an hour.
    fn good_drain() -> String {
        let now = worklane_lease::Clock::now_ms(&worklane_lease::SystemClock);
        format!(
            r#"{{"since": "{}", "until": "{}", "to": "9.9"}}"#,
            worklane_lease::rfc3339_ms(now),
            worklane_lease::rfc3339_ms(now + 3_600_000)
        )
    }

    fn broken_drain(how: Damage) {
        let site = shared_site(None);
        let flag = site.slots().join("update-drain.json");
        for who in BOTH {
            let case = format!("drain flag {how:?}");
            damage(&site, &flag, how, &good_drain());
            // Root reads a flag only root may read: a drain in force for root.
            let readable = how == Damage::Unreadable && who == Who::Root;
            let doc = json(&site, who, &["slots", "--json"], 0, &case);
            if readable {
                assert_eq!(doc["drain"]["state"], "in-force", "{case}, {who:?}: {doc}");
                assert!(problem(&doc, "update-drain.json").is_none(), "{doc}");
            } else {
                assert_eq!(
                    doc["drain"]["state"], "unreadable",
                    "{case}, {who:?}: {doc}"
                );
                said(
                    problem(&doc, "update-drain.json").expect("the flag's problem"),
                    &case,
                );
                let out = expect(&site, who, &["slots"], 0, &case);
                assert!(
                    out.contains("update-drain.json: "),
                    "{case}, {who:?}: {out}"
                );
            }
            let admitted = if readable { 69 } else { 0 };
            expect(&site, who, &["run", "--", "true"], admitted, &case);
            expect(&site, who, &["why", "--json"], admitted, &case);
            expect(&site, who, &["stop-all", "x"], 0, &case);
            expect(&site, who, &["resume-all"], 0, &case);

            let out = run(&site, who, &["undrain", "--json"]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{case}, {who:?}: {}",
                text(&out)
            );
            let doc: Value = serde_json::from_slice(&out.stdout).expect("undrain --json");
            if how == Damage::FullDirectory {
                assert_eq!(doc["removed"], false, "{case}, {who:?}: {doc}");
                said(
                    problem(&doc, "update-drain.json").expect("what stays"),
                    &case,
                );
                assert!(
                    flag.join("kept").exists(),
                    "{case}, {who:?}: nothing deleted"
                );
            } else {
                assert_eq!(doc["removed"], true, "{case}, {who:?}: {doc}");
                assert!(std::fs::symlink_metadata(&flag).is_err(), "{case}, {who:?}");
            }

            damage(&site, &flag, how, &good_drain());
            let out = run(&site, who, &["drain", "--until", "30m"]);
            if how == Damage::FullDirectory {
                let err = String::from_utf8_lossy(&out.stderr);
                assert_ne!(
                    out.status.code(),
                    Some(0),
                    "{case}, {who:?}: {}",
                    text(&out)
                );
                assert!(
                    err.contains("no drain is in force") && err.contains("rm -r"),
                    "{case}, {who:?}: {err}"
                );
                std::fs::remove_dir_all(&flag).expect("clean up");
            } else {
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{case}, {who:?}: {}",
                    text(&out)
                );
                let doc = json(&site, who, &["slots", "--json"], 0, &case);
                assert_eq!(doc["drain"]["state"], "in-force", "{case}, {who:?}: {doc}");
                expect(&site, who, &["undrain"], 0, &case);
            }
        }
    }

    #[test]
    fn a_drain_flag_that_is_not_json() {
        broken_drain(Damage::NotJson);
    }

    #[test]
    fn an_empty_directory_at_the_drain_flag() {
        broken_drain(Damage::Directory);
    }

    #[test]
    fn a_directory_with_files_at_the_drain_flag() {
        broken_drain(Damage::FullDirectory);
    }

    #[test]
    fn a_fifo_at_the_drain_flag() {
        broken_drain(Damage::Fifo);
    }

    #[test]
    fn a_symlink_at_the_drain_flag() {
        broken_drain(Damage::Symlink);
    }

    #[test]
    fn an_oversized_drain_flag() {
        broken_drain(Damage::Oversized);
    }

    #[test]
    fn a_drain_flag_only_root_can_read() {
        broken_drain(Damage::Unreadable);
    }

    // ---- a budget state -----------------------------------------------------------------

    fn broken_budget(how: Damage) {
        let site = shared_site(None);
        // A real state first, to learn its file name and what a good one holds.
        let reset = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
            + 600;
        let out = site
            .worklane()
            .args(["budget", "observe", "--status", "200"])
            .args(["--header", "X-RateLimit-Remaining: 10"])
            .args(["--header", &format!("X-RateLimit-Reset: {reset}")])
            .env("GITHUB_TOKEN", "ghp_damage_test_token_not_real")
            .output_gated()
            .expect("observe");
        assert!(out.status.success(), "{}", text(&out));
        let state = std::fs::read_dir(site.slots())
            .expect("list")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "json"))
            .expect("a budget state");
        let name = state
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let good = String::from_utf8(std::fs::read(&state).expect("read")).expect("utf-8");
        damage(&site, &state, how, &good);
        let case = format!("budget state {how:?}");
        for who in BOTH {
            let readable = how == Damage::Unreadable && who == Who::Root;
            let doc = json(&site, who, &["budget", "show", "--json"], 0, &case);
            assert_eq!(doc["version"], 1, "{case}, {who:?}: {doc}");
            if readable {
                assert_eq!(doc["budgets"].as_array().map(Vec::len), Some(1), "{doc}");
                assert!(problem(&doc, &name).is_none(), "{case}, {who:?}: {doc}");
                continue;
            }
            assert_eq!(
                doc["budgets"],
                serde_json::json!([]),
                "{case}, {who:?}: {doc}"
            );
            said(problem(&doc, &name).expect("the state's problem"), &case);
            let out = expect(&site, who, &["budget", "show"], 0, &case);
            assert!(out.contains(&name), "{case}, {who:?}: {out}");
            for view in [&["slots", "--json"][..], &["why", "--json"]] {
                let doc = json(&site, who, view, 0, &case);
                said(problem(&doc, &name).expect("the state's problem"), &case);
            }
            expect(&site, who, &["stop-all", "x"], 0, &case);
            expect(&site, who, &["resume-all"], 0, &case);
            expect(&site, who, &["drain", "--until", "30m"], 0, &case);
            expect(&site, who, &["undrain"], 0, &case);
        }
    }

    #[test]
    fn a_budget_state_that_is_not_json() {
        broken_budget(Damage::NotJson);
    }

    #[test]
    fn a_directory_at_a_budget_state() {
        broken_budget(Damage::Directory);
    }

    #[test]
    fn a_fifo_at_a_budget_state() {
        broken_budget(Damage::Fifo);
    }

    #[test]
    fn a_symlink_at_a_budget_state() {
        broken_budget(Damage::Symlink);
    }

    #[test]
    fn an_oversized_budget_state() {
        broken_budget(Damage::Oversized);
    }

    #[test]
    fn a_budget_state_only_root_can_read() {
        broken_budget(Damage::Unreadable);
    }

    // ---- a dispatcher status entry --------------------------------------------------------

    #[test]
    fn a_dispatcher_status_entry_that_is_not_one() {
        let site = shared_site(None);
        for (how, name) in [
            (Damage::NotJson, "queue-garbled.json"),
            (Damage::Directory, "queue-dir.json"),
            (Damage::Fifo, "queue-fifo.json"),
            (Damage::Symlink, "queue-link.json"),
        ] {
            damage(&site, &site.slots().join(name), how, "{}");
        }
        for who in BOTH {
            let case = "status entries";
            for view in [&["slots", "--json"][..], &["why", "--json"]] {
                let doc = json(&site, who, view, 0, case);
                for name in [
                    "queue-garbled.json",
                    "queue-dir.json",
                    "queue-fifo.json",
                    "queue-link.json",
                ] {
                    said(
                        problem(&doc, name).unwrap_or_else(|| panic!("{name}: {doc}")),
                        case,
                    );
                }
            }
            expect(&site, who, &["stop-all", "x"], 0, case);
            expect(&site, who, &["resume-all"], 0, case);
        }
    }

    // ---- the dispatcher's answer --------------------------------------------------------

    /// What a process at the dispatcher's socket does with `queue ls`'s request.
    #[derive(Debug, Clone, Copy)]
    enum Answer {
        /// A line that is not a reply.
        Garbage,
        /// A refusal.
        Refusal,
        /// Nothing: it accepts and never answers.
        Silence,
    }

    fn dispatcher_answers(answer: Answer) {
        let site = shared_site(None);
        let socket = site.slots().join("dispatcher.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777))
            .expect("chmod the socket");
        let serving = listener.try_clone().expect("clone the listener");
        std::thread::spawn(move || {
            for stream in serving.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut request = String::new();
                let _ = std::io::BufReader::new(&stream).read_line(&mut request);
                let reply = match answer {
                    Answer::Garbage => "this is no reply\n",
                    Answer::Refusal => {
                        "{\"version\":1,\"ok\":false,\"error\":\"permission\",\"message\":\"not you\"}\n"
                    }
                    // Held open and unanswered until the test's process ends.
                    Answer::Silence => {
                        std::mem::forget(stream);
                        continue;
                    }
                };
                let _ = std::io::Write::write_all(&mut stream, reply.as_bytes());
            }
        });
        let case = format!("dispatcher {answer:?}");
        for who in BOTH {
            let doc = json(&site, who, &["queue", "ls", "--json"], 0, &case);
            said(
                problem(&doc, "dispatcher.sock").expect("the dispatcher's problem"),
                &case,
            );
            assert!(
                doc["dispatcher"]
                    .as_str()
                    .is_some_and(|d| d.contains("did not answer")),
                "{case}, {who:?}: {doc}"
            );
            let out = expect(&site, who, &["queue", "ls"], 0, &case);
            assert!(out.contains("dispatcher.sock: "), "{case}, {who:?}: {out}");
        }
        drop(listener);
    }

    #[test]
    fn a_dispatcher_that_answers_garbage() {
        dispatcher_answers(Answer::Garbage);
    }

    #[test]
    fn a_dispatcher_that_refuses_to_list() {
        dispatcher_answers(Answer::Refusal);
    }

    #[test]
    fn a_dispatcher_that_never_answers() {
        dispatcher_answers(Answer::Silence);
    }
}

/// What `stop-all` says it did, `-q`, and how `slots` names dispatched work (issue 26).
mod operator_output {
    use super::*;
    use serde_json::Value;

    /// A record that names a command but that `stop-all` will not act on (group-writable: it
    /// proves nothing), so the run counts as still running until `stop-all` gives up.
    fn unprovable_record(site: &Site, from: &str) {
        let mut record: Value = serde_json::from_slice(
            &std::fs::read(site.slots().join(from)).expect("a live run's record"),
        )
        .expect("JSON");
        record["pid"] = Value::from(4242);
        record["command"] = Value::from("make unprovable");
        record["commandProcess"] = serde_json::json!({"pid": 4243, "start": 1, "group": false});
        let path = site.slots().join("agent-7.lock");
        std::fs::write(&path, record.to_string()).expect("write");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o664))
            .expect("chmod");
    }

    fn ok_stdout(out: &Output, what: &str) -> String {
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn stop_all_names_each_run_it_halted_and_each_one_still_running() {
        let site = Site::new(Some(r#"{"max_agents": 8}"#));
        let mut polite = site.spawn(&["run"], HOLD, "0");
        wait_until("the run", || site.file("up.0").exists());
        unprovable_record(&site, "agent-0.lock");
        let out = ok_stdout(&site.output(&["stop-all", "incident"]), "stop-all");
        assert!(out.contains("STOP written"), "{out}");
        assert!(
            out.contains("halted agent-0.lock (pid ")
                && out.contains("`sh -c touch")
                && out.contains("(by its supervisor)"),
            "names the run it halted, with its command: {out}"
        );
        assert!(
            out.contains("still running after")
                && out.contains("agent-7.lock (pid 4243, `make unprovable`)")
                && out.contains("written by others"),
            "names what still runs and why: {out}"
        );
        assert_eq!(wait_exit(&mut polite, "the halted run").code(), Some(143));
        assert_eq!(site.code(&["resume-all"]), 0);

        // --json: the same, as one object.
        let mut polite = site.spawn(&["run"], HOLD, "1");
        wait_until("the run", || site.file("up.1").exists());
        let out = ok_stdout(
            &site.output(&["stop-all", "--json", "again"]),
            "stop-all --json",
        );
        let doc: Value = serde_json::from_str(&out).expect("one JSON object");
        let halted = doc["halted"].as_array().expect("halted");
        assert_eq!(halted.len(), 1, "{doc}");
        assert_eq!(halted[0]["resource"], "agent-0.lock", "{doc}");
        assert_eq!(halted[0]["by"], "supervisor", "{doc}");
        let left = doc["still_running"].as_array().expect("still_running");
        assert_eq!(left.len(), 1, "{doc}");
        assert_eq!(left[0]["resource"], "agent-7.lock", "{doc}");
        assert_eq!(left[0]["pid"], 4243, "{doc}");
        assert!(
            left[0]["why"]
                .as_str()
                .is_some_and(|w| w.contains("written by others")),
            "{doc}"
        );
        assert_eq!(wait_exit(&mut polite, "the halted run").code(), Some(143));
        assert_eq!(site.code(&["resume-all"]), 0);

        // -q: what was halted goes unsaid; what still runs is said all the same.
        let out = ok_stdout(&site.output(&["-q", "stop-all", "quiet"]), "stop-all -q");
        assert!(
            !out.contains("STOP written") && !out.contains("halted"),
            "no success line under -q: {out}"
        );
        assert!(out.contains("agent-7.lock (pid 4243"), "{out}");
    }

    #[test]
    fn quiet_drops_the_success_lines_but_never_data_json_or_errors() {
        let site = Site::new(None);
        for args in [
            &["-q", "stop-all", "x"][..],
            &["--quiet", "resume-all"],
            &["drain", "-q", "--until", "30m"],
            &["undrain", "--quiet"],
            &["-q", "set-test-slots", "3"],
            &["-q", "config", "set", "max_agents", "3"],
        ] {
            let out = site.output(args);
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.stdout.is_empty(),
                "{args:?} prints nothing under -q: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        let out = site.output(&["-q", "undrain"]);
        assert!(out.stdout.is_empty() && out.status.success(), "{out:?}");
        let out = site.output(&["-q", "undrain", "--json"]);
        let doc: Value = serde_json::from_slice(&out.stdout).expect("--json is data");
        assert_eq!(doc["removed"], false, "{doc}");
        let out = site.output(&["-q", "slots"]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("slot directory:"),
            "a view is data: {out:?}"
        );
        let out = site.output(&["-q", "drain", "--until", "5h"]);
        assert_eq!(out.status.code(), Some(64), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("4 h"),
            "errors still go to stderr: {out:?}"
        );
        let queued = site
            .worklane()
            .env("TMPDIR", site.temp.path())
            .args(["-q", "queue", "full-run", "--", "true"])
            .output_gated()
            .expect("queue");
        assert!(queued.status.success(), "{queued:?}");
        assert!(queued.stdout.is_empty(), "{queued:?}");
        // Its log: in a directory of root's own under TMPDIR, 0700, the log 0600.
        let logs = site.temp.path().join("worklane-0");
        wait_until("the queued run's end", || {
            std::fs::read_dir(&logs)
                .expect("list")
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("worklane-full-run-")
                })
                .any(|e| {
                    std::fs::read_to_string(e.path())
                        .is_ok_and(|log| log.contains("exited with status 0"))
                })
        });
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(mode(&logs), 0o700, "the logs' directory is root's alone");
        for log in std::fs::read_dir(&logs).expect("list").flatten() {
            assert_eq!(
                mode(&log.path()),
                0o600,
                "{}: the log is root's alone",
                log.path().display()
            );
        }
    }

    #[test]
    fn slots_names_dispatched_work_by_its_command_and_a_queued_lane_by_lane_and_attempt() {
        let site = Site::new(Some(r#"{"max_agents": 2}"#));
        let _dispatcher = super::dispatcher::start(&site, &[]);
        // The driver gets the launcher's filtered environment alone (no `K`, no `T`): the key
        // is written into the script, `T` comes from `LANE_T`.
        let enqueue = |lane: &str, key: &str| {
            let out = site
                .worklane()
                .args(["enqueue", "--lane", lane, "--", "sh", "-c"])
                .arg(super::driven(&HOLD.replace("$K", key)))
                .output_gated()
                .expect("enqueue");
            ok_stdout(&out, "enqueue").trim().to_owned()
        };
        let running = enqueue("one", "1");
        wait_until("the first attempt's command", || site.file("up.1").exists());
        let mut holder = site.spawn(&["run", "--owner", "holder"], HOLD, "h");
        wait_until("the holder", || site.file("up.h").exists());
        let queued = enqueue("two", "2");
        let text = ok_stdout(&site.output(&["slots"]), "slots");
        let row = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("a row for {name}: {text}"))
                .to_owned()
        };
        assert!(
            row("lane-one.lock").contains(r#"sh -c export T="$LANE_T"; touch"#),
            "a claimed lane is named by its command: {text}"
        );
        assert!(
            row("lane-two.lock").contains(&format!("lane two, attempt {queued}")),
            "a queued lane by its lane and attempt: {text}"
        );
        assert!(
            !text.contains("worklane claim") && !text.contains("worklane enqueue"),
            "no row is named after worklane's own commands: {text}"
        );
        let doc: Value = serde_json::from_str(&ok_stdout(
            &site.output(&["slots", "--json"]),
            "slots --json",
        ))
        .expect("json");
        let slot = |name: &str| {
            doc["slots"]
                .as_array()
                .expect("slots")
                .iter()
                .find(|s| s["name"] == name)
                .cloned()
                .unwrap_or_else(|| panic!("{name} in {doc}"))
        };
        assert_eq!(slot("lane-one.lock")["attempt"], running.as_str(), "{doc}");
        assert_eq!(slot("lane-two.lock")["attempt"], queued.as_str(), "{doc}");
        assert_eq!(
            slot("lane-one.lock")["owner"],
            "worklane claim",
            "the record's own owner is kept in JSON: {doc}"
        );
        for key in ["1", "h"] {
            std::fs::write(site.file(&format!("release.{key}")), b"").expect("release");
        }
        assert!(wait_exit(&mut holder, "the holder").success());
        wait_until("the queued attempt's command", || {
            site.file("up.2").exists()
        });
        std::fs::write(site.file("release.2"), b"").expect("release");
    }
}

mod why {
    use super::*;

    fn why(site: &Site, args: &[&str], token: Option<&str>) -> (Option<i32>, serde_json::Value) {
        let mut cmd = site.worklane();
        cmd.arg("why").args(args).arg("--json");
        match token {
            Some(t) => cmd.env("GITHUB_TOKEN", t),
            None => cmd.env_remove("GITHUB_TOKEN"),
        };
        let out = cmd.output_gated().expect("run worklane why");
        let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "why --json: {e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), doc)
    }

    /// Records a secondary limit (Retry-After 600 s) for `token`'s budget.
    fn pause_budget(site: &Site, token: &str) {
        let observed = site
            .worklane()
            .args(["budget", "observe", "--status", "429"])
            .args(["--header", "Retry-After: 600"])
            .env("GITHUB_TOKEN", token)
            .status_gated()
            .expect("observe");
        assert!(observed.success());
    }

    #[test]
    fn nothing_blocks_on_an_idle_machine_and_release_is_never_decided() {
        let site = Site::new(None);
        let (code, doc) = why(&site, &[], None);
        assert_eq!(code, Some(0));
        assert!(doc["blocked_by"].is_null());
        assert_eq!(doc["resource_admission"]["blocks"], false);
        assert!(
            doc["provider_quota"]["blocks"].is_null(),
            "no token: not asked"
        );
        assert!(doc["task_ownership"]["blocks"].is_null());
        assert_eq!(doc["release_authority"]["decided_here"], false);
        assert!(doc["release_authority"]["blocks"].is_null());
        let (_, doc) = why(&site, &[], Some(""));
        assert!(
            doc["provider_quota"]["blocks"].is_null(),
            "an empty token is no token"
        );
        let out = site.output(&["why", "--resource", "a b"]);
        assert_eq!(out.status.code(), Some(64), "not a resource name");
    }

    #[test]
    fn stop_and_the_cap_block_admission_with_their_codes() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        let (code, doc) = why(&site, &[], None);
        assert_eq!(code, Some(75), "at cap: busy");
        assert_eq!(doc["blocked_by"], "resource_admission");
        assert!(
            doc["resource_admission"]["why"]
                .as_str()
                .is_some_and(|w| w.contains("1 of 1")),
            "{doc}"
        );
        let (code, _) = why(&site, &["--kind", "test"], None);
        assert_eq!(code, Some(0), "the test-run cap is apart");
        assert_eq!(site.code(&["stop-all", "drill"]), 0);
        let (code, doc) = why(&site, &["--kind", "test"], None);
        assert_eq!(code, Some(69), "STOP refuses every kind");
        assert!(
            doc["resource_admission"]["why"]
                .as_str()
                .is_some_and(|w| w.contains("drill")),
            "{doc}"
        );
        wait_exit(&mut holder, "the halted holder");
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    #[test]
    fn a_paused_budget_blocks_the_quota_at_once() {
        let site = Site::new(None);
        pause_budget(&site, "ghp_why_token");
        // (A take would wait 10 s here; `why` reads the state and answers.)
        let (code, doc) = why(&site, &[], Some("ghp_why_token"));
        assert_eq!(code, Some(75));
        assert_eq!(doc["blocked_by"], "provider_quota");
        assert!(
            doc["provider_quota"]["why"]
                .as_str()
                .is_some_and(|w| w.contains("secondary_rate_limited")),
            "{doc}"
        );
        let (code, _) = why(&site, &[], Some("another token"));
        assert_eq!(code, Some(0), "another credential has its own budget");
    }

    #[test]
    fn a_held_role_blocks_ownership_and_names_its_holder() {
        let site = Site::new(None);
        let mut holder = site.spawn(
            &["lease", "run", "--role", "planner"],
            r#"touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#,
            "0",
        );
        wait_until("the role holder", || site.file("up.0").exists());
        let (code, doc) = why(&site, &["--role", "planner"], None);
        assert_eq!(code, Some(75));
        assert_eq!(doc["blocked_by"], "task_ownership");
        let said = doc["task_ownership"]["why"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(said.contains(&format!("pid {}", holder.id())), "{said}");
        let (code, _) = why(&site, &["--role", "reviewer"], None);
        assert_eq!(code, Some(0), "another role is free");
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the role holder").success());
        let (code, _) = why(&site, &["--role", "planner"], None);
        assert_eq!(code, Some(0), "released");
    }

    #[test]
    fn stop_comes_before_the_quota_and_any_lock_can_be_asked_about() {
        let site = Site::new(None);
        pause_budget(&site, "ghp_why_token");
        assert_eq!(site.code(&["stop-all", "drill"]), 0);
        let (code, doc) = why(&site, &[], Some("ghp_why_token"));
        assert_eq!(code, Some(69), "the first blocker in order: admission");
        assert_eq!(doc["blocked_by"], "resource_admission");
        assert_eq!(doc["provider_quota"]["blocks"], true, "both are reported");
        assert_eq!(site.code(&["resume-all"]), 0);

        // A lease of the operator's own naming, and a bare guard held without a record.
        let mut holder = site.spawn(
            &["lease", "run", "--role", "x"],
            r#"touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#,
            "0",
        );
        wait_until("the role holder", || site.file("up.0").exists());
        std::fs::rename(
            site.slots().join("role-x.lease"),
            site.slots().join("deploy.lease"),
        )
        .expect("rename the fresh lease");
        let (code, doc) = why(&site, &["--lock", "deploy.lease"], None);
        assert_eq!(code, Some(75), "a fresh lease of any name blocks: {doc}");
        // flock(1) holds the guard for `cat`, which says so once it runs (the lock taken) and
        // ends when we close its input: killing flock alone would leave its command behind,
        // still holding the lock.
        let mut guard_holder = site
            .command("flock")
            .arg(site.slots().join(".bare.lock.flock"))
            .args(["sh", "-c", "echo held; exec cat >/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn_gated()
            .expect("flock");
        let mut line = String::new();
        std::io::BufReader::new(guard_holder.stdout.as_mut().expect("flock's stdout"))
            .read_line(&mut line)
            .expect("read flock's report");
        assert_eq!(line.trim(), "held", "flock(1) must report the guard held");
        let (code, doc) = why(&site, &["--lock", "bare.lock"], None);
        assert_eq!(
            code,
            Some(75),
            "a held guard without a record blocks: {doc}"
        );
        drop(guard_holder.stdin.take());
        let status = guard_holder.wait().expect("wait for flock");
        assert!(status.success(), "flock and its cat end cleanly: {status}");
        let out = site.output(&["why", "--lock", "../etc/passwd"]);
        assert_eq!(
            out.status.code(),
            Some(64),
            "not a file of the slot directory"
        );
        std::fs::write(site.file("release.0"), b"").expect("release");
        let _ = wait_exit(&mut holder, "the role holder");
    }
}

mod supervisor_gone {
    //! The slot lives exactly as long as any process of the run (the command inherits the
    //! slot's guard), a holder killed in another pid namespace frees it at once, the command
    //! learns its fencing epoch, and STOP reaches a command whose supervisor cannot act.
    use super::*;
    use rustix::process::{Pid, Signal};
    use std::os::unix::process::ExitStatusExt;

    fn pid_of(path: &Path) -> i32 {
        let mut text = String::new();
        wait_until("a pid file", || {
            text = std::fs::read_to_string(path).unwrap_or_default();
            text.ends_with('\n')
        });
        text.trim().parse().expect("a pid")
    }

    /// Whether `pid` is gone or a zombie.
    fn gone(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
        })
    }

    fn signal(pid: i32, signal: Signal) {
        let _ = rustix::process::kill_process(Pid::from_raw(pid).expect("pid"), signal);
    }

    /// Kills `pid` when dropped (a test that fails midway leaves nothing behind).
    struct KillOnDrop(i32);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            signal(self.0, Signal::CONT);
            signal(self.0, Signal::KILL);
        }
    }

    #[test]
    fn killing_the_supervisor_does_not_free_the_slot_its_command_uses() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        // The command ignores SIGTERM, so it outlives the parent-death signal.
        let mut run = site.spawn(
            &["run"],
            r#"trap '' TERM; echo $$ > "$T/cmd.pid"; exec sleep 60"#,
            "0",
        );
        let command = pid_of(&site.file("cmd.pid"));
        let _cleanup = KillOnDrop(command);
        run.kill().expect("SIGKILL the supervisor only");
        run.wait().expect("reap");
        assert!(!gone(command), "the command runs on");
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            75,
            "its slot is still held: two agents never run at cap 1"
        );
        let out = site.output(&["slots", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(doc["agents_held"], 1, "slots counts it: {doc}");
        signal(command, Signal::KILL);
        wait_until("the command's end", || gone(command));
        let mut code = 0;
        wait_until("the slot free once the command is gone", || {
            code = site.code(&["run", "--no-wait", "--", "true"]);
            code == 0
        });
    }

    #[test]
    fn a_command_whose_supervisor_dies_is_told_with_sigterm() {
        let site = Site::new(None);
        let mut run = site.spawn(&["run"], r#"echo $$ > "$T/cmd.pid"; exec sleep 60"#, "0");
        let command = pid_of(&site.file("cmd.pid"));
        let _cleanup = KillOnDrop(command);
        run.kill().expect("SIGKILL the supervisor");
        run.wait().expect("reap");
        wait_until("the parent-death signal to end the command", || {
            gone(command)
        });
    }

    #[test]
    fn a_run_killed_in_another_pid_namespace_frees_its_slot_at_once() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut contained = Running::new(
            site.command("unshare")
                .args(["--pid", "--fork", "--kill-child", "--mount-proc"])
                .arg(worklane_bin())
                .args(["run", "--", "sh", "-c", r#"touch "$T/up"; exec sleep 60"#])
                .env("AGENT_SLOTS_DIR", site.slots())
                .env("WORKLANE_STATE_DIR", site.state())
                .env("T", site.temp.path())
                .stdin(Stdio::null())
                .spawn_gated()
                .expect("spawn unshare"),
        );
        wait_until("the contained run", || site.file("up").exists());
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            75,
            "held from the other namespace"
        );
        contained.kill().expect("SIGKILL the namespace");
        contained.wait().expect("reap");
        let mut code = 0;
        wait_until("the slot taken over", || {
            code = site.code(&["run", "--no-wait", "--", "true"]);
            code != 75
        });
        assert_eq!(
            code, 0,
            "a dead holder's record from another namespace is taken over"
        );
    }

    #[test]
    fn the_command_gets_its_resource_and_epoch() {
        let site = Site::new(None);
        for _ in 0..2 {
            let out = site.output(&[
                "run",
                "--",
                "sh",
                "-c",
                r#"echo "$WORKLANE_RESOURCE $WORKLANE_EPOCH" >> "$T/fencing""#,
            ]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let out = site.output(&[
            "lease",
            "run",
            "--role",
            "deployer",
            "--",
            "sh",
            "-c",
            r#"echo "$WORKLANE_RESOURCE $WORKLANE_EPOCH" >> "$T/fencing""#,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(site.file("fencing")).expect("written");
        assert_eq!(
            text, "agent-0.lock 1\nagent-0.lock 2\nrole-deployer.lease 1\n",
            "each run sees its own resource and a growing epoch"
        );
    }

    fn record(site: &Site, name: &str) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(site.slots().join(name)).expect("record"))
            .expect("a JSON record")
    }

    #[test]
    fn the_record_names_the_command_process() {
        let site = Site::new(None);
        let _run = site.spawn(&["run"], r#"echo $$ > "$T/cmd.pid"; exec sleep 60"#, "0");
        let command = pid_of(&site.file("cmd.pid"));
        let mut named = serde_json::Value::Null;
        wait_until("the record to name the command", || {
            named = record(&site, "agent-0.lock")["commandProcess"].clone();
            !named.is_null()
        });
        assert_eq!(named["pid"], command, "{named}");
        assert_eq!(named["group"], true, "no terminal: a group of its own");
        assert!(named["start"].as_u64().is_some(), "{named}");
        assert_eq!(record(&site, "agent-0.lock")["holdsGuard"], true);
    }

    #[test]
    fn stop_all_halts_a_command_whose_supervisor_is_stopped() {
        let site = Site::new(None);
        let mut run = site.spawn(&["run"], r#"echo $$ > "$T/cmd.pid"; exec sleep 60"#, "0");
        let command = pid_of(&site.file("cmd.pid"));
        let _cleanup = KillOnDrop(command);
        wait_until("the record to name the command", || {
            !record(&site, "agent-0.lock")["commandProcess"].is_null()
        });
        let supervisor = i32::try_from(run.id()).expect("pid");
        signal(supervisor, Signal::STOP);
        let out = site.output(&["stop-all", "incident"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            gone(command),
            "stop-all returns once the command is halted: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        // Continued by stop-all (it holds a copy of the slot's guard): it lets go and exits
        // with nobody resuming it by hand.
        let status = wait_exit(&mut run, "the supervisor");
        assert_eq!(
            status.code().or(status.signal().map(|s| 128 + s)),
            Some(128 + 15),
            "the command died of SIGTERM, and the supervisor says so as a shell shows it"
        );
        assert_eq!(site.code(&["resume-all"]), 0);
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "the slot is free once the supervisor has gone"
        );
    }

    /// The state letter of `/proc/<pid>/stat` (`T`: stopped).
    fn state(pid: i32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.chars().next()
    }

    #[test]
    fn stop_all_continues_a_supervisor_stopped_before_it_named_its_command() {
        let site = Site::new(None);
        // A supervisor stopped between starting its command and writing `commandProcess`
        // into its record: stop-all knows no command to halt, and the supervisor cannot act.
        let sleeper = site
            .command("sleep")
            .arg("100")
            .spawn_gated()
            .expect("spawn sleep");
        let pid = i32::try_from(sleeper.id()).expect("pid");
        let _cleanup = KillOnDrop(pid);
        signal(pid, Signal::STOP);
        wait_until("the supervisor stopped", || state(pid) == Some('T'));
        let record = worklane_lease::Record {
            holder: worklane_identity::Recorded::new(
                worklane_identity::ProcessIdentity::of(sleeper.id()).expect("identity"),
                worklane_identity::Place::current().expect("place").clone(),
            ),
            owner: Some("sh".into()),
            ..worklane_lease::Record::default()
        };
        std::fs::write(site.slots().join("agent-0.lock"), record.to_bytes()).expect("record");
        let out = site.output(&["stop-all", "incident"]);
        assert!(out.status.success(), "{out:?}");
        wait_until("the supervisor continued", || state(pid) != Some('T'));
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    #[test]
    fn stop_all_halts_a_run_suspended_with_ctrl_z_on_a_terminal() {
        use std::io::Write;
        let site = Site::new(None);
        // On a pseudo-terminal, under a shell with job control (as at a prompt): the run is a
        // job, a foreground process group of its own; Ctrl-Z stops that group, worklane and its
        // command (which stays in it so that it can read the terminal), and the shell goes
        // on. (Without job control the group would be orphaned, and the kernel drops a
        // terminal's stop signals to orphaned groups.)
        let inner = format!(
            r#"bash -c 'set -m; {wl} run -- sh -c "echo \$PPID > \"$T/wl.pid\"; echo \$\$ > \"$T/cmd.pid\"; exec sleep 100"; sleep 100'"#,
            wl = worklane_bin()
        );
        let mut shell = site
            .command("script")
            .args(["-qfec", &inner, "/dev/null"])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env("T", site.temp.path())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn_gated()
            .expect("spawn script");
        let mut stdin = shell.stdin.take().expect("stdin");
        let command = pid_of(&site.file("cmd.pid"));
        let supervisor = pid_of(&site.file("wl.pid"));
        let _cleanup = (KillOnDrop(command), KillOnDrop(supervisor));
        stdin.write_all(b"\x1a").expect("Ctrl-Z");
        stdin.flush().expect("flush");
        wait_until("Ctrl-Z to stop the run", || {
            state(supervisor) == Some('T') && state(command) == Some('T')
        });
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "cap 2: one slot is held by the suspended run, one is free"
        );
        let out = site.output(&["stop-all", "incident"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // stop-all waits about 5 s for the halt; on a loaded machine the continued
        // supervisor may still be at it then, so the halt itself is awaited here (bounded).
        wait_until("the suspended command to be halted", || gone(command));
        // The supervisor, continued by stop-all, lets go of its slot and exits by itself.
        wait_until("the suspended supervisor to exit", || gone(supervisor));
        assert_eq!(site.code(&["resume-all"]), 0);
        let snapshot = site.output(&["slots", "--json"]);
        let snapshot: serde_json::Value =
            serde_json::from_slice(&snapshot.stdout).expect("slots json");
        assert_eq!(snapshot["agents_held"], 0, "{snapshot}");
        drop(stdin);
        let _ = shell.kill();
        let _ = shell.wait();
    }

    #[test]
    fn stop_all_halts_an_orphaned_command_that_ignores_sigterm() {
        let site = Site::new(None);
        let mut run = site.spawn(
            &["run"],
            r#"trap '' TERM; echo $$ > "$T/cmd.pid"; exec sleep 60"#,
            "0",
        );
        let command = pid_of(&site.file("cmd.pid"));
        let _cleanup = KillOnDrop(command);
        wait_until("the record to name the command", || {
            !record(&site, "agent-0.lock")["commandProcess"].is_null()
        });
        run.kill().expect("SIGKILL the supervisor");
        run.wait().expect("reap");
        let out = site.output(&["stop-all"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(gone(command), "SIGKILLed after the grace");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("halted"), "says what it did: {text}");
        assert_eq!(site.code(&["resume-all"]), 0);
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "the slot is free"
        );
    }

    #[test]
    fn stop_all_never_signals_a_process_a_record_names_falsely() {
        let site = Site::new(None);
        // A process of root's, and a record that an unprivileged writer (uid 65534) planted,
        // naming it as its command.
        let mut victim = site
            .command("sleep")
            .arg("60")
            .spawn_gated()
            .expect("sleep");
        let victim_pid = victim.id();
        let start = std::fs::read_to_string(format!("/proc/{victim_pid}/stat"))
            .expect("stat")
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').nth(19).map(str::to_owned))
            .expect("field 22");
        let place = record_place(&site);
        let forged = format!(
            r#"{{"pid":{victim_pid},"owner":"x","acquiredAt":"2026-01-01T00:00:00.000Z","place":{place},"identity":{{"boot":"{}","start":{start}}},"commandProcess":{{"pid":{victim_pid},"start":{start},"group":false}}}}"#,
            serde_json::from_str::<serde_json::Value>(&place).expect("place")["boot"]
                .as_str()
                .expect("boot")
        );
        let path = site.slots().join("agent-5.lock");
        std::fs::write(&path, &forged).expect("plant");
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
        let out = site.output(&["stop-all"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            victim.try_wait().expect("try_wait"),
            None,
            "a process of another user than the record's writer is never signalled: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        // A root-owned file the group may write (as STOP, epoch markers and budgets are,
        // mode 0660), rewritten in place by a member and renamed to a lock's name: root owns
        // it, but anyone in the group wrote its bytes.
        std::fs::remove_file(&path).expect("rm");
        assert_eq!(site.code(&["resume-all"]), 0);
        std::fs::write(&path, &forged).expect("plant");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o660))
            .expect("chmod 0660");
        let out = site.output(&["stop-all"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            victim.try_wait().expect("try_wait"),
            None,
            "a record others than its owner could write proves nothing: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let _ = victim.kill();
        let _ = victim.wait();
    }

    #[test]
    fn stop_all_halts_what_is_left_of_a_run_whose_leader_and_supervisor_died() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        // The leader dies of the parent-death signal; its background child, in its group and
        // holding the inherited guard, ignores SIGTERM and runs on.
        let mut run = site.spawn(
            &["run"],
            r#"sh -c 'trap "" TERM; exec sleep 60' & echo $! > "$T/child.pid"; echo $$ > "$T/cmd.pid"; wait"#,
            "0",
        );
        let leader = pid_of(&site.file("cmd.pid"));
        let child = pid_of(&site.file("child.pid"));
        let _cleanup = KillOnDrop(child);
        wait_until("the record to name the command", || {
            !record(&site, "agent-0.lock")["commandProcess"].is_null()
        });
        run.kill().expect("SIGKILL the supervisor");
        run.wait().expect("reap");
        wait_until("the leader to die of the parent-death signal", || {
            gone(leader)
        });
        assert!(!gone(child), "the child runs on");
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            75,
            "the child keeps the slot"
        );
        let out = site.output(&["stop-all"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            gone(child),
            "the guard's holder is halted: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    #[test]
    fn what_a_finished_run_leaves_running_keeps_its_slot_until_it_exits() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        // The command exits at once, leaving a background process with its inherited guard.
        let out = site.output(&[
            "run",
            "--",
            "sh",
            "-c",
            r#"sleep 60 >/dev/null 2>&1 & echo $! > "$T/left.pid""#,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let left = pid_of(&site.file("left.pid"));
        let _cleanup = KillOnDrop(left);
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            75,
            "the leftover still runs in the slot: at cap 1"
        );
        let doc: serde_json::Value =
            serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("json");
        assert_eq!(doc["agents_held"], 1, "{doc}");
        let slot = &doc["slots"][0];
        assert_eq!(slot["name"], "agent-0.lock", "{doc}");
        assert_eq!(slot["state"], "held", "{doc}");
        assert_eq!(slot["pid"], serde_json::Value::Null, "no record: {doc}");
        signal(left, Signal::KILL);
        wait_until("the leftover's end", || gone(left));
        let mut code = 75;
        wait_until("the slot free once the leftover is gone", || {
            code = site.code(&["run", "--no-wait", "--", "true"]);
            code == 0
        });
    }

    /// This process's place as a record writes it (from a real run's record).
    fn record_place(site: &Site) -> String {
        let out = site.output(&[
            "run",
            "--",
            "sh",
            "-c",
            r#"cat "$AGENT_SLOTS_DIR/agent-0.lock""#,
        ]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the record");
        doc["place"].to_string()
    }
}

mod strays {
    //! No single stray or broken file stops the pool: each is skipped or counted as
    //! PROTOCOL.md says, and `slots` and `why` name it with its fix.
    use super::*;

    fn json(site: &Site, args: &[&str]) -> serde_json::Value {
        let out = site.output(args);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?} prints JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    fn problem<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
        doc["problems"]
            .as_array()
            .expect("a problems array")
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} is reported: {doc}"))
    }

    #[test]
    fn a_stray_where_a_free_index_guard_belongs_is_skipped_and_named() {
        type Plant = fn(&Path);
        let plants: [(&str, Plant); 4] = [
            ("directory", |p| std::fs::create_dir(p).expect("mkdir")),
            ("FIFO", |p| {
                let status = Command::new("mkfifo")
                    .arg(p)
                    .status_gated()
                    .expect("mkfifo");
                assert!(status.success());
            }),
            ("symbolic link", |p| {
                std::os::unix::fs::symlink("/etc/passwd", p).expect("symlink")
            }),
            ("non-empty file", |p| {
                std::fs::write(p, b"x").expect("write")
            }),
        ];
        for (what, plant) in plants {
            let site = Site::new(Some(r#"{"max_agents": 1}"#));
            let guard = site.slots().join(".agent-0.lock.flock");
            plant(&guard);
            let out = site.output(&["run", "--no-wait", "--", "true"]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "a {what} at a free index's guard is skipped: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let mut holder = site.spawn(&["run"], HOLD, "0");
            wait_until("the holder", || site.file("up.0").exists());
            assert!(
                site.slots().join("agent-1.lock").exists(),
                "{what}: the next index"
            );
            assert_eq!(
                site.code(&["run", "--no-wait", "--", "true"]),
                75,
                "{what}: the stray is not counted, the holder is: at cap 1"
            );
            let doc = json(&site, &["slots", "--json"]);
            assert_eq!(doc["agents_held"], 1, "{what}: {doc}");
            let p = problem(&doc, ".agent-0.lock.flock");
            assert!(p["fix"].as_str().is_some_and(|f| f.contains("rm ")), "{p}");
            let why = json(&site, &["why", "--json"]);
            problem(&why, ".agent-0.lock.flock");
            std::fs::write(site.file("release.0"), b"").expect("release");
            wait_exit(&mut holder, "the holder");
        }
    }

    #[test]
    fn a_garbage_claim_on_slots_lock_is_cleared_by_the_next_take() {
        let site = Site::new(None);
        let claim = site.slots().join("slots.lock.0123456789abcdef.claim");
        std::fs::write(&claim, b"garbage\n").expect("plant");
        let doc = json(&site, &["slots", "--json"]);
        assert!(
            problem(&doc, "slots.lock.0123456789abcdef.claim")["what"]
                .as_str()
                .is_some_and(|w| w.contains("garbage")),
            "{doc}"
        );
        let out = site.output(&["run", "--no-wait", "--", "true"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "not 75 for a slots.lock that looks stuck: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!claim.exists(), "the garbage claim is cleared");
    }

    #[test]
    fn temp_files_of_killed_writers_are_removed_once_a_minute_old_unless_held() {
        let site = Site::new(None);
        let dir = site.slots();
        let old_temp = dir.join(".agent-0.lock.tmp-0123456789abcdef");
        let fresh_temp = dir.join(".slots.lock.tmp-0123456789abcdee");
        let held_temp = dir.join(".STOP.tmp-0123456789abcded");
        let old_alias = dir.join(".agent-0.lock.flock.tmp-0123456789abcdec");
        for path in [&old_temp, &fresh_temp, &held_temp, &old_alias] {
            std::fs::write(path, b"").expect("plant");
        }
        for path in [&old_temp, &held_temp, &old_alias] {
            let status = Command::new("touch")
                .args(["-d", "2 minutes ago"])
                .arg(path)
                .status_gated()
                .expect("touch");
            assert!(status.success());
        }
        // A writer stopped mid-write still holds its temp file's lock.
        let mut writer = Running::new(
            site.command("flock")
                .arg(&held_temp)
                .args(["sh", "-c", r#"touch "$T/locked"; exec sleep 60"#])
                .env("T", site.temp.path())
                .spawn_gated()
                .expect("flock"),
        );
        wait_until("the writer's lock", || site.file("locked").exists());
        let doc = json(&site, &["slots", "--json"]);
        problem(&doc, ".agent-0.lock.tmp-0123456789abcdef");
        assert_eq!(site.code(&["run", "--", "true"]), 0);
        assert!(!old_temp.exists(), "an old temp nobody holds is removed");
        assert!(!old_alias.exists(), "an old guard temp alias is removed");
        assert!(fresh_temp.exists(), "a young temp may be a writer at work");
        assert!(held_temp.exists(), "a held temp belongs to a live writer");
        let _ = writer.kill();
        let _ = writer.wait();
    }

    #[test]
    fn an_exhausted_epoch_skips_its_index_and_is_named() {
        let site = Site::new(None);
        let max = u64::MAX.to_string();
        std::fs::write(site.slots().join(format!("agent-0.lock.epoch.{max}")), b"").expect("plant");
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        assert!(
            site.slots().join("agent-1.lock").exists(),
            "index 0 is skipped"
        );
        let doc = json(&site, &["slots", "--json"]);
        let p = problem(&doc, &format!("agent-0.lock.epoch.{max}"));
        assert!(
            p["what"].as_str().is_some_and(|w| w.contains("epoch")),
            "{p}"
        );
        std::fs::write(site.file("release.0"), b"").expect("release");
        wait_exit(&mut holder, "the holder");
        std::fs::write(site.slots().join(format!("slots.lock.epoch.{max}")), b"").expect("plant");
        let out = site.output(&["run", "--no-wait", "--", "true"]);
        assert_ne!(
            out.status.code(),
            Some(0),
            "slots.lock can no longer be taken"
        );
        let why = json(&site, &["why", "--json"]);
        assert_eq!(why["resource_admission"]["blocks"], true, "{why}");
    }

    #[test]
    fn a_broken_guard_of_slots_lock_fails_takes_with_its_fix_and_why_says_so() {
        let site = Site::new(None);
        std::fs::create_dir(site.slots().join(".slots.lock.flock")).expect("mkdir");
        let out = site.output(&["run", "--no-wait", "--", "true"]);
        let text = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "nobody can count slots");
        assert!(text.contains(".slots.lock.flock"), "names the file: {text}");
        let why = json(&site, &["why", "--json"]);
        assert_eq!(why["resource_admission"]["blocks"], true, "{why}");
        assert!(
            why["resource_admission"]["why"]
                .as_str()
                .is_some_and(|w| w.contains("rm -r")),
            "{why}"
        );
        assert_eq!(
            site.code(&["run", "--kind", "full-run", "--no-wait", "--", "true"]),
            0,
            "the full run does not count under slots.lock"
        );
        std::fs::remove_dir(site.slots().join(".slots.lock.flock")).expect("the fix");
        assert_eq!(site.code(&["run", "--no-wait", "--", "true"]), 0, "fixed");
    }
}

mod line {
    //! The waiting line on real processes: every waiting `worklane run` stands in one order,
    //! by priority then arrival, and only the head takes a free slot.
    use super::*;

    /// The entries of the agents' line in the slot directory (their record names).
    fn entries(site: &Site) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(site.slots())
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("line-agent.") && n.split('.').count() == 4)
            .collect();
        names.sort();
        names
    }

    /// Everything the line leaves in the directory: entries, their epochs and guards.
    fn line_files(site: &Site) -> Vec<String> {
        std::fs::read_dir(site.slots())
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("line-") || n.starts_with(".line-"))
            .collect()
    }

    const RECORD: &str = r#"echo "$K" >> "$T/order""#;

    /// Starts a waiting run of key `key` and waits until it stands in line (`in_line` entries).
    fn join(site: &Site, args: &[&str], key: &str, in_line: usize) -> Running {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        let waiter = site.spawn(&all, RECORD, key);
        wait_until(&format!("waiter {key} in line"), || {
            entries(site).len() == in_line
        });
        waiter
    }

    fn order(site: &Site) -> Vec<String> {
        std::fs::read_to_string(site.file("order"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn twenty_waiters_started_in_turn_at_cap_1_are_admitted_in_arrival_order() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "h");
        wait_until("the holder", || site.file("up.h").exists());
        let waiters: Vec<Running> = (1..=20)
            .map(|i| join(&site, &[], &i.to_string(), i))
            .collect();
        std::fs::write(site.file("release.h"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        for w in waiters {
            let out = w.wait_with_output().expect("a waiter");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let expected: Vec<String> = (1..=20).map(|i| i.to_string()).collect();
        assert_eq!(order(&site), expected, "exactly in arrival order");
        assert!(line_files(&site).is_empty(), "{:?}", line_files(&site));
    }

    #[test]
    fn a_later_waiter_with_a_higher_priority_goes_first() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "h");
        wait_until("the holder", || site.file("up.h").exists());
        let mut low = join(&site, &[], "low", 1);
        let mut negative = join(&site, &["--priority", "-3"], "negative", 2);
        let mut high = join(&site, &["--priority", "5"], "high", 3);
        // Seen from outside: the line in order, with each waiter's pid.
        let out = site.output(&["slots", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("slots --json");
        let line = doc["line"].as_array().expect("line");
        let seen: Vec<(u64, i64, u64)> = line
            .iter()
            .map(|w| {
                (
                    w["position"].as_u64().expect("live"),
                    w["priority"].as_i64().expect("priority"),
                    w["pid"].as_u64().expect("pid"),
                )
            })
            .collect();
        let pid = |w: &Running| u64::from(w.id());
        assert_eq!(
            seen,
            [
                (1, 5, pid(&high)),
                (2, 0, pid(&low)),
                (3, -3, pid(&negative))
            ],
            "{doc}"
        );
        let why = site.output(&["why"]);
        let text = String::from_utf8_lossy(&why.stdout);
        assert!(
            text.contains(&format!("3 waiting in line, first pid {}", high.id())),
            "why names who is first: {text}"
        );
        // A run that does not wait is refused while waiters of its priority stand in line.
        let out = site.output(&["run", "--no-wait", "--", "true"]);
        assert_eq!(out.status.code(), Some(75));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("waiting in line before it"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(site.file("release.h"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        for w in [&mut low, &mut negative, &mut high] {
            assert!(wait_exit(w, "a waiter").success());
        }
        assert_eq!(order(&site), ["high", "low", "negative"]);
    }

    #[test]
    fn a_sigkilled_waiter_at_the_head_is_skipped_and_a_timed_out_one_leaves() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "h");
        wait_until("the holder", || site.file("up.h").exists());
        let mut head = join(&site, &[], "head", 1);
        let mut second = join(&site, &[], "second", 2);
        let mut impatient = join(&site, &["--timeout", "1s"], "impatient", 3);
        let mut last = join(&site, &[], "last", 4);
        let out = wait_exit(&mut impatient, "the impatient waiter");
        assert_eq!(out.code(), Some(75), "a timed out wait exits 75");
        wait_until("the impatient waiter's entry to go", || {
            entries(&site).len() == 3
        });
        head.kill().expect("SIGKILL the head");
        head.wait().expect("reap");
        // Its entry stays until a waiter behind it looks (at the latest 250 ms on) and
        // retires it; the release below may come first.
        std::fs::write(site.file("release.h"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        for w in [&mut second, &mut last] {
            assert!(wait_exit(w, "a waiter").success());
        }
        assert_eq!(
            order(&site),
            ["second", "last"],
            "the rest keep their order"
        );
        assert!(
            line_files(&site).is_empty(),
            "the dead entry was retired: {:?}",
            line_files(&site)
        );
    }

    #[test]
    fn runs_and_dispatched_rows_at_one_cap_interleave_in_line_order() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let _dispatcher = super::dispatcher::start(&site, &[]);
        let mut holder = site.spawn(&["run"], HOLD, "h");
        wait_until("the holder", || site.file("up.h").exists());
        let enqueue = |key: &str| {
            let out = site
                .worklane()
                .args(["enqueue", "--", "sh", "-c"])
                .arg(driven(&format!(r#"echo {key} >> "$T/order""#)))
                .output_gated()
                .expect("enqueue");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        // Row A, then a waiting run R, then row B: one line, A R B.
        enqueue("rowA");
        wait_until("row A standing in line", || entries(&site).len() == 1);
        let mut run = join(&site, &[], "run", 2);
        enqueue("rowB");
        assert_eq!(
            entries(&site).len(),
            2,
            "the dispatcher stands once, for its first row"
        );
        std::fs::write(site.file("release.h"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        assert!(wait_exit(&mut run, "the run").success());
        wait_until("all three", || order(&site).len() == 3);
        assert_eq!(order(&site), ["rowA", "run", "rowB"], "in line order");
        wait_until("the line to empty", || entries(&site).is_empty());
    }

    #[test]
    fn stop_refuses_the_whole_line() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "h");
        wait_until("the holder", || site.file("up.h").exists());
        let mut waiters: Vec<Running> = (1..=3)
            .map(|i| join(&site, &[], &i.to_string(), i))
            .collect();
        assert_eq!(site.code(&["stop-all", "maintenance"]), 0);
        for w in &mut waiters {
            assert_eq!(
                wait_exit(w, "a waiter").code(),
                Some(69),
                "refused, not waiting"
            );
        }
        assert!(line_files(&site).is_empty(), "{:?}", line_files(&site));
        assert!(order(&site).is_empty(), "none ran");
        let _ = wait_exit(&mut holder, "the holder halted by STOP");
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    #[test]
    fn eight_waiters_at_cap_2_never_run_more_than_2() {
        let site = Site::new(Some(r#"{"max_agents": 2}"#));
        let script = r#"
bump() { flock "$T/count.lock" sh -c "$1"; }
bump 'n=$(cat "$T/n" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$T/n"; echo $n >> "$T/log"'
sleep 0.1
bump 'n=$(cat "$T/n"); echo $((n-1)) > "$T/n"'
"#;
        let counts = super::cap::overlaps(&site, script, 8);
        assert_eq!(counts.len(), 8, "{counts:?}");
        assert!(
            counts.iter().all(|n| *n <= 2),
            "never more than 2: {counts:?}"
        );
        assert!(line_files(&site).is_empty(), "{:?}", line_files(&site));
    }
}

mod dispatcher {
    //! The dispatcher flow on real processes: a dispatcher serving a temp slot directory,
    //! launchers that enqueue and exit, drivers that claim and run, kills at each step.
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// Starts `worklane dispatcher` and waits for its socket.
    pub(super) fn start(site: &Site, extra: &[&str]) -> Running {
        start_crashing(site, extra, "")
    }

    /// Starts a dispatcher that SIGKILLs itself at `crash` (the test seam; "" for none).
    pub(super) fn start_crashing(site: &Site, extra: &[&str], crash: &str) -> Running {
        let running = Running::new(
            site.worklane()
                .arg("dispatcher")
                .args(extra)
                .env("WORKLANE_TEST_DISPATCHER_CRASH", crash)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("spawn the dispatcher"),
        );
        let socket = site.slots().join("dispatcher.sock");
        wait_until("the dispatcher's socket", || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        running
    }

    /// A dispatcher started by a caller that blocks SIGTERM and SIGINT (the mask survives
    /// exec) still stops on SIGTERM: it unblocks what it handles.
    #[test]
    fn a_dispatcher_whose_caller_blocked_sigterm_still_stops_on_it() {
        let site = Site::new(None);
        let mut dispatcher = Running::new(
            site.command("python3")
                .args([
                    "-c",
                    "import os, signal, sys\n\
                     signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})\n\
                     os.execv(sys.argv[1], sys.argv[1:])",
                    worklane_bin(),
                    "dispatcher",
                ])
                .env("AGENT_SLOTS_DIR", site.slots())
                .env("WORKLANE_STATE_DIR", site.state())
                .env_remove("AGENT_SLOTS_CONFIG")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn_gated()
                .expect("spawn the dispatcher"),
        );
        let socket = site.slots().join("dispatcher.sock");
        wait_until("the dispatcher's socket", || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        let pid = rustix::process::Pid::from_raw(dispatcher.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("TERM");
        let status = wait_exit(&mut dispatcher, "the dispatcher after SIGTERM");
        assert!(status.success(), "it stopped as SIGTERM asks: {status:?}");
    }

    #[test]
    fn a_queue_longer_than_the_soft_descriptor_limit_is_kept_and_drivers_get_the_old_limit() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        // A dispatcher started with a soft limit of 40 descriptors (the hard limit as it is).
        let _dispatcher = Running::new(
            site.command("sh")
                .args(["-c", r#"ulimit -Sn 40 && exec "$0" dispatcher"#])
                .arg(worklane_bin())
                .env("AGENT_SLOTS_DIR", site.slots())
                .env("WORKLANE_STATE_DIR", site.state())
                .env("T", site.temp.path())
                .env_remove("AGENT_SLOTS_CONFIG")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn_gated()
                .expect("spawn the dispatcher"),
        );
        let socket = site.slots().join("dispatcher.sock");
        wait_until("the dispatcher's socket", || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        assert_eq!(site.code(&["stop-all", "queueing"]), 0);
        let first = enqueue(&site, &[], r#"ulimit -n > "$T/limit""#);
        assert!(
            first.status.success(),
            "{}",
            String::from_utf8_lossy(&first.stderr)
        );
        for i in 0..59 {
            let out = enqueue(&site, &[], "true");
            assert!(
                out.status.success(),
                "enqueue {i} beyond the soft limit: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(queue_len(&site), 60, "every row kept, each lane held");
        assert_eq!(site.code(&["resume-all"]), 0);
        wait_until("the first driver", || site.file("limit").exists());
        wait_until("its line", || {
            std::fs::read_to_string(site.file("limit")).is_ok_and(|t| t.ends_with('\n'))
        });
        assert_eq!(
            std::fs::read_to_string(site.file("limit"))
                .expect("limit")
                .trim(),
            "40",
            "the driver runs with the limit the dispatcher was started with"
        );
    }

    #[test]
    fn a_dispatcher_out_of_descriptors_refuses_with_the_reason_and_serves_on() {
        // Two limits of each parity: whichever step of an enqueue finds none left (accepting,
        // receiving the lane's descriptor, opening its guard to check it), the launcher is
        // told why.
        for limit in [40, 41, 42, 43] {
            out_of_descriptors(limit);
        }
    }

    fn out_of_descriptors(limit: u32) {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        // Soft and hard limit the same: nothing to raise it to.
        let mut dispatcher = Running::new(
            site.command("sh")
                .args([
                    "-c",
                    &format!(r#"ulimit -n {limit} && exec "$0" dispatcher"#),
                ])
                .arg(worklane_bin())
                .env("AGENT_SLOTS_DIR", site.slots())
                .env("WORKLANE_STATE_DIR", site.state())
                .env("T", site.temp.path())
                .env_remove("AGENT_SLOTS_CONFIG")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn_gated()
                .expect("spawn the dispatcher"),
        );
        let socket = site.slots().join("dispatcher.sock");
        wait_until("the dispatcher's socket", || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        assert_eq!(site.code(&["stop-all", "queueing"]), 0);
        let mut refused = None;
        for _ in 0..60 {
            let out = enqueue(&site, &[], "true");
            if !out.status.success() {
                refused = Some(String::from_utf8_lossy(&out.stderr).into_owned());
                break;
            }
        }
        let refused = refused.expect("a queue of 60 does not fit");
        assert!(
            refused.contains("no descriptor left"),
            "limit {limit}: {refused}"
        );
        assert!(
            dispatcher.try_wait().expect("try_wait").is_none(),
            "the dispatcher serves on"
        );
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    pub(super) fn enqueue(site: &Site, args: &[&str], script: &str) -> Output {
        site.worklane()
            .arg("enqueue")
            .args(args)
            .args(["--", "sh", "-c", &driven(script)])
            .output_gated()
            .expect("enqueue")
    }

    pub(super) fn lane_free(site: &Site, lane: &str) -> bool {
        Command::new("flock")
            .arg("-n")
            .arg(site.slots().join(format!(".lane-{lane}.lock.flock")))
            .arg("true")
            .status_gated()
            .expect("flock")
            .success()
    }

    #[test]
    fn five_enqueued_at_cap_1_run_one_at_a_time_by_priority_then_start() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let _dispatcher = start(&site, &[]);
        // Held back by STOP while all five are queued, so that only the order decides.
        assert_eq!(site.code(&["stop-all", "queueing"]), 0);
        let script = r#"echo "start $L" >> "$T/order"; sleep 0.1; echo "end $L" >> "$T/order""#;
        for (lane, priority) in [("a", "0"), ("b", "5"), ("c", "0"), ("d", "5"), ("e", "-1")] {
            let out = enqueue(
                &site,
                &["--lane", lane, "--priority", priority],
                &script.replace("$L", lane),
            );
            assert!(
                out.status.success(),
                "{lane}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                String::from_utf8_lossy(&out.stdout).starts_with("a-"),
                "prints the attempt id"
            );
        }
        let listed = site.output(&["queue", "ls", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
        assert_eq!(doc["attempts"].as_array().map(Vec::len), Some(5), "{doc}");
        let why = site.output(&["why", "--json"]);
        let why: serde_json::Value = serde_json::from_slice(&why.stdout).expect("why --json");
        let queued = why["queued"].as_array().expect("queued");
        assert_eq!(queued.len(), 5, "{why}");
        assert!(
            queued.iter().all(|q| q["held_by"]
                .as_str()
                .is_some_and(|h| h.starts_with("resource admission") && h.contains("queueing"))),
            "each is held by STOP, the resource-admission question: {why}"
        );
        assert!(
            queued[0]["waited_ms"].as_u64().is_some(),
            "and for how long: {why}"
        );
        assert_eq!(site.code(&["resume-all"]), 0);
        wait_until("all five to end", || {
            std::fs::read_to_string(site.file("order")).is_ok_and(|t| t.lines().count() == 10)
        });
        let order = std::fs::read_to_string(site.file("order")).expect("order");
        assert_eq!(
            order,
            "start b\nend b\nstart d\nend d\nstart a\nend a\nstart c\nend c\nstart e\nend e\n",
            "one at a time, by priority then original start"
        );
    }

    #[test]
    fn no_dispatcher_is_69_and_a_taken_lane_is_75() {
        let site = Site::new(None);
        let out = enqueue(&site, &["--lane", "x"], "true");
        assert_eq!(
            out.status.code(),
            Some(69),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("worklane dispatcher"),
            "says how to start one"
        );
        assert!(lane_free(&site, "x"), "the lane is released again");
        let _dispatcher = start(&site, &[]);
        assert_eq!(site.code(&["stop-all", "hold"]), 0);
        let out = enqueue(&site, &["--lane", "x"], "true");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !lane_free(&site, "x"),
            "the dispatcher holds the lane after enqueue exited"
        );
        let out = site.output(&["slots", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(doc["queue"]["dispatcher"]["alive"], true, "{doc}");
        let attempts = doc["queue"]["attempts"].as_array().expect("attempts");
        assert_eq!(attempts.len(), 1, "{doc}");
        assert_eq!(attempts[0]["lane"], "x");
        assert_eq!(attempts[0]["state"], "queued");
        assert_eq!(
            attempts[0]["dispatcher"]["pid"],
            _dispatcher.id(),
            "the entry names the dispatcher that keeps the wait"
        );
        let out = enqueue(&site, &["--lane", "x"], "true");
        assert_eq!(
            out.status.code(),
            Some(75),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    /// The names in the slot directory that belong to lane `lane` (record, epoch, claims,
    /// guard).
    fn lane_files(site: &Site, lane: &str) -> Vec<String> {
        let lock = format!("lane-{lane}.lock");
        let mut names: Vec<String> = std::fs::read_dir(site.slots())
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&lock) || n.starts_with(&format!(".{lock}")))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_lane_of_its_own_leaves_no_files_when_its_attempt_ends_or_is_cancelled() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let _dispatcher = start(&site, &[]);
        let reserved = enqueue(&site, &["--lane", "q-0123456789abcdef"], "true");
        assert_eq!(reserved.status.code(), Some(64), "a reserved lane name");
        assert!(
            String::from_utf8_lossy(&reserved.stderr).contains("reserved"),
            "{}",
            String::from_utf8_lossy(&reserved.stderr)
        );
        let lane_of = |attempt: &str| -> String {
            let out = site.output(&["queue", "ls", "--json"]);
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            doc["attempts"]
                .as_array()
                .and_then(|a| a.iter().find(|a| a["attempt"] == attempt))
                .and_then(|a| a["lane"].as_str())
                .expect("the attempt's lane")
                .to_owned()
        };
        // Run to its end: the driver retires the lane once the command is over.
        assert_eq!(site.code(&["stop-all", "hold"]), 0);
        let out = enqueue(&site, &[], r#"echo ran > "$T/ran-own""#);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let lane = lane_of(&attempt);
        assert!(lane.starts_with("q-"), "a lane of its own: {lane}");
        assert!(
            !lane_files(&site, &lane).is_empty(),
            "while queued its lock has its files"
        );
        assert_eq!(site.code(&["resume-all"]), 0);
        wait_until("the attempt to run and its lane to go", || {
            site.file("ran-own").exists() && lane_files(&site, &lane).is_empty()
        });
        assert!(
            site.slots().join(format!("queue-{attempt}.log")).exists(),
            "its log stays for the operator"
        );
        // Cancelled while queued: the dispatcher retires it.
        assert_eq!(site.code(&["stop-all", "hold"]), 0);
        let out = enqueue(&site, &[], "true");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let lane = lane_of(&attempt);
        assert_eq!(site.code(&["queue", "cancel", &attempt]), 0);
        assert_eq!(
            lane_files(&site, &lane),
            Vec::<String>::new(),
            "cancel removes them"
        );
        // A named lane keeps its guard and epoch (its next holder's fencing needs them).
        let out = enqueue(&site, &["--lane", "named"], "true");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_eq!(site.code(&["queue", "cancel", &attempt]), 0);
        let kept = lane_files(&site, "named");
        assert!(
            kept.iter().any(|n| n.contains(".epoch."))
                && kept.iter().any(|n| n.ends_with(".flock")),
            "{kept:?}"
        );
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    fn queue_len(site: &Site) -> usize {
        let out = site.output(&["queue", "ls", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("queue ls");
        doc["attempts"].as_array().map_or(0, Vec::len)
    }

    const COUNT_RUNS: &str = r#"echo x >> "$T/ran""#;

    fn runs(site: &Site) -> usize {
        std::fs::read_to_string(site.file("ran")).map_or(0, |t| t.lines().count())
    }

    #[test]
    fn a_dispatcher_killed_after_the_insert_before_the_reply_loses_no_row() {
        let site = Site::new(None);
        assert_eq!(site.code(&["stop-all", "hold"]), 0);
        let mut dying = start_crashing(&site, &[], "after-insert");
        let out = enqueue(&site, &["--lane", "i"], COUNT_RUNS);
        assert_ne!(out.status.code(), Some(0), "no reply came");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("queue ls"),
            "the launcher says where to look: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let status = wait_exit(&mut dying, "the dispatcher's crash");
        assert_eq!(
            status.signal(),
            Some(9),
            "it SIGKILLed itself after the insert"
        );
        assert!(lane_free(&site, "i"), "nobody holds the lane meanwhile");
        let _dispatcher = start(&site, &[]);
        assert_eq!(queue_len(&site), 1, "the committed row was recovered");
        assert_eq!(site.code(&["resume-all"]), 0);
        wait_until("the recovered attempt to run", || runs(&site) == 1);
        wait_until("the queue to empty", || queue_len(&site) == 0);
        assert_eq!(runs(&site), 1, "exactly once");
    }

    /// A `--driver` command is run as `worklane run` runs its command, whichever libc the
    /// binary was linked with: a script without a `#!` line is run by `/bin/sh`, which gets
    /// the script's path, then its arguments. The installed binary (musl) started drivers
    /// with musl's execvp(3), which refuses such a file (ENOEXEC): the attempt was queued
    /// again at once, again and again, and never ran.
    #[test]
    fn a_driver_script_without_a_shebang_is_run_by_sh_with_its_arguments() {
        let site = Site::new(None);
        let script = site.write_script(
            "plain-driver",
            "T=\"$LANE_T\"\necho \"$0|$1|$2\" > \"$T/driver-ran.tmp\" && mv \"$T/driver-ran.tmp\" \"$T/driver-ran\"\n",
        );
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let _dispatcher = start(&site, &[]);
        let out = site
            .worklane()
            .args(["enqueue", "--driver", "--", &script, "one", "two words"])
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_until("the driver script", || site.file("driver-ran").exists());
        assert_eq!(
            std::fs::read_to_string(site.file("driver-ran"))
                .expect("driver-ran")
                .trim_end(),
            format!("{script}|one|two words"),
            "sh ran the script with its path as $0, then the arguments"
        );
    }

    /// The states of every attempt `queue ls --json` lists, by attempt id.
    pub(super) fn states(site: &Site) -> std::collections::BTreeMap<String, serde_json::Value> {
        let out = site.output(&["queue", "ls", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("queue ls");
        doc["attempts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| (a["attempt"].as_str().unwrap_or("").to_owned(), a.clone()))
            .collect()
    }

    /// A driver that cannot be started is tried again with a backoff, a bounded number of
    /// times, then parked as `failed` (its failures and last error shown) while the rows
    /// behind it run; the dispatcher lives through hundreds of failed starts (std's `spawn`
    /// reaps such a child itself, by its pid; the reaper of exited drivers could take it
    /// first, and std then panicked: `driver::STARTING` closes that by construction), and its
    /// log says each attempt's failure once, not once per try.
    #[test]
    fn a_driver_that_cannot_start_is_parked_as_failed_and_the_line_moves_on() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut dispatcher = start(&site, &["--start-attempts", "8", "--start-backoff", "1ms"]);
        let stderr = dispatcher.stderr.take().expect("stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        assert_eq!(site.code(&["stop-all", "hold"]), 0);
        let mut broken = Vec::new();
        for i in 0..40 {
            let out = site
                .worklane()
                .args(["enqueue", "--lane", &format!("x{i}"), "--driver", "--"])
                .arg("/nonexistent/worklane-driver")
                .output_gated()
                .expect("enqueue");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            broken.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
        }
        // Behind all forty (a later start): it runs once they are parked, nobody cancelling.
        let good = enqueue(&site, &["--lane", "good"], r#"touch "$T/good-ran""#);
        assert!(good.status.success());
        assert_eq!(site.code(&["resume-all"]), 0);
        wait_until("the good row to run", || site.file("good-ran").exists());
        wait_until("every broken row parked", || {
            let states = states(&site);
            broken
                .iter()
                .all(|id| states.get(id).is_some_and(|a| a["state"] == "failed"))
        });
        let why = site.output(&["why", "--json"]);
        let why: serde_json::Value = serde_json::from_slice(&why.stdout).expect("why --json");
        let parked_said = why["queued"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                e["held_by"].as_str().is_some_and(|h| {
                    h.contains("parked as failed after 8") && h.contains("queue retry")
                })
            })
            .count();
        assert_eq!(
            parked_said,
            broken.len(),
            "why says each is parked, and the fix: {why}"
        );
        let parked_rows = states(&site);
        for id in &broken {
            let row = &parked_rows[id];
            assert_eq!(
                row["failures"], 8,
                "tried the bounded number of times: {row}"
            );
            assert!(
                row["last_error"]
                    .as_str()
                    .is_some_and(|e| e.contains("No such file")),
                "the last error is kept: {row}"
            );
        }
        assert!(
            matches!(dispatcher.try_wait(), Ok(None)),
            "the dispatcher lives through 320 failed starts"
        );
        // Its log: at most one line per attempt about its failures (the rest counted).
        drop(site.output(&["queue", "ls"]));
        let mut said = std::collections::BTreeMap::<String, u32>::new();
        let mut parked = 0;
        while let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
            assert!(
                !line.contains("panicked"),
                "the dispatcher panicked: {line}"
            );
            if line.contains("parked as failed") {
                parked += 1;
            }
            if line.contains("cannot start the driver of") {
                let id = broken
                    .iter()
                    .find(|id| line.contains(id.as_str()))
                    .cloned()
                    .unwrap_or_default();
                *said.entry(id).or_default() += 1;
            }
        }
        assert_eq!(
            said.len(),
            broken.len(),
            "each attempt's failure is said: {said:?}"
        );
        assert!(
            said.values().all(|n| *n == 2),
            "its first failure and its parking, not once per try: {said:?}"
        );
        assert_eq!(parked, broken.len(), "each parking is said");
        // Parked rows are retried on demand, and cancelled.
        let retry = site.output(&["queue", "retry", &broken[0]]);
        assert!(
            retry.status.success(),
            "{}",
            String::from_utf8_lossy(&retry.stderr)
        );
        wait_until("the retried row parked again", || {
            states(&site)
                .get(&broken[0])
                .is_some_and(|a| a["state"] == "failed" && a["failures"] == 8)
        });
        let cancel = site.output(&["queue", "cancel", &broken[1]]);
        assert!(
            cancel.status.success(),
            "{}",
            String::from_utf8_lossy(&cancel.stderr)
        );
        assert!(!states(&site).contains_key(&broken[1]), "cancelled: gone");
        assert!(lane_free(&site, "x1"), "and its lane free");
    }

    #[test]
    fn a_dispatcher_killed_after_admitting_before_the_driver_starts_admits_it_again() {
        let site = Site::new(None);
        assert_eq!(site.code(&["stop-all", "hold"]), 0);
        let mut dying = start_crashing(&site, &[], "after-admit");
        let out = enqueue(&site, &["--lane", "a"], COUNT_RUNS);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(site.code(&["resume-all"]), 0);
        let status = wait_exit(&mut dying, "the dispatcher's crash at admission");
        assert_eq!(status.signal(), Some(9));
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "its reserved slot is free"
        );
        let _dispatcher = start(&site, &[]);
        wait_until("the attempt to run", || runs(&site) == 1);
        wait_until("the queue to empty", || queue_len(&site) == 0);
        assert_eq!(runs(&site), 1, "exactly once, never two drivers");
    }

    #[test]
    fn a_dispatcher_killed_after_removing_a_claimed_row_leaves_nobody_holding_it() {
        let site = Site::new(None);
        let mut dying = start_crashing(&site, &[], "after-claim-remove");
        let out = enqueue(&site, &["--lane", "c"], COUNT_RUNS);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let status = wait_exit(&mut dying, "the dispatcher's crash at the claim");
        assert_eq!(status.signal(), Some(9));
        wait_until("the lane to be free", || lane_free(&site, "c"));
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "and the slot"
        );
        let out = site.output(&["reconcile", &attempt, "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(
            doc["holder"],
            serde_json::Value::Null,
            "nobody holds it: {doc}"
        );
        let _dispatcher = start(&site, &[]);
        assert_eq!(queue_len(&site), 0, "the row was removed before the crash");
        assert_eq!(
            runs(&site),
            0,
            "and its command never ran: the reply was lost"
        );
    }

    #[test]
    fn the_config_sets_waiter_mode_and_the_dispatcher_alone_its_environment_filter() {
        let site = Site::new(Some(r#"{"admission": "waiter"}"#));
        let _dispatcher = start(&site, &[]);
        let out = enqueue(&site, &["--lane", "w"], "true");
        assert_eq!(
            out.status.code(),
            Some(69),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("waiter"),
            "says why: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(_dispatcher);
        // The driver's environment as each dispatcher keeps it from one enqueue.
        let driven = |site: &Site| {
            let out = site
                .worklane()
                .args(["enqueue", "--lane", "e", "--"])
                .args([
                    "sh",
                    "-c",
                    // The directory as whichever variable reached the driver names it.
                    r#"env | grep -E '^(MY_|LANE_X)' | sort > "${LANE_T:-$MY_T}/env""#,
                ])
                .env("MY_T", site.temp.path())
                .env("MY_STAGE", "kept")
                .env("MY_PIN", "dropped: a secret word")
                .env(
                    "MY_TOKEN",
                    "dropped: a default secret word, whatever is set",
                )
                .env("LANE_X", "a default prefix")
                .output_gated()
                .expect("enqueue");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            wait_until("the driver's environment", || {
                site.file("env").exists()
                    && std::fs::read_to_string(site.file("env")).is_ok_and(|t| !t.is_empty())
            });
            std::fs::read_to_string(site.file("env")).expect("env")
        };
        // A config (which any member of the group may write) that widens the filter and
        // empties its words is ignored, and the dispatcher says so.
        let planted = Site::new(Some(
            r#"{"env_allow_prefixes": ["MY_", "A", "B"], "env_secret_words": ["@@@@"]}"#,
        ));
        let mut dispatcher = start(&planted, &[]);
        let lines = super::queue_trouble::lines_of(&mut dispatcher);
        std::fs::remove_file(planted.file("env")).ok();
        assert_eq!(
            driven(&planted),
            "LANE_X=a default prefix\n",
            "the default filter, not the config's"
        );
        let log = super::queue_trouble::drain(&lines);
        assert!(
            log.iter()
                .any(|l| l.contains("env_allow_prefixes") && l.contains("--env-allow-prefix")),
            "says the config's setting is ignored and what to give instead: {log:?}"
        );
        drop(dispatcher);
        // The dispatcher's own flags decide; the default words stay a floor.
        let site = Site::new(None);
        let _dispatcher = start(
            &site,
            &["--env-allow-prefix", "MY_", "--env-secret-word", "PIN"],
        );
        assert_eq!(
            driven(&site),
            format!("MY_STAGE=kept\nMY_T={}\n", site.temp.path().display()),
            "only the flags' prefixes, less the secret words"
        );
        let bad = Site::new(None);
        let out = bad.output(&["dispatcher", "--env-allow-prefix", ""]);
        assert_eq!(
            out.status.code(),
            Some(64),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn reconcile_tells_dispatcher_driver_and_nobody_apart() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let _dispatcher = start(&site, &[]);
        assert_eq!(site.code(&["stop-all", "hold"]), 0);
        let out = enqueue(
            &site,
            &["--lane", "r"],
            r#"echo $$ > "$T/driver.pid"; while [ ! -e "$T/go" ]; do sleep 0.02; done"#,
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let holder = |site: &Site| {
            let out = site.output(&["reconcile", &attempt, "--json"]);
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            doc["holder"].clone()
        };
        assert_eq!(holder(&site), "dispatcher", "queued");
        assert_eq!(site.code(&["resume-all"]), 0);
        wait_until("the driver's command", || site.file("driver.pid").exists());
        assert_eq!(holder(&site), "driver", "claimed and running");
        assert!(!lane_free(&site, "r"), "the driver holds the lane");
        std::fs::write(site.file("go"), b"").expect("go");
        wait_until("the lane to be free", || lane_free(&site, "r"));
        assert_eq!(holder(&site), serde_json::Value::Null, "done: nobody");
    }

    #[test]
    fn a_killed_driver_frees_lane_and_slot() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let _dispatcher = start(&site, &[]);
        let out = enqueue(
            &site,
            &["--lane", "k"],
            r#"echo $PPID > "$T/claim.pid"; exec sleep 60"#,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_until("the driver", || {
            std::fs::read_to_string(site.file("claim.pid")).is_ok_and(|t| t.ends_with('\n'))
        });
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            75,
            "the driver holds the one slot"
        );
        let claim: i32 = std::fs::read_to_string(site.file("claim.pid"))
            .expect("pid")
            .trim()
            .parse()
            .expect("a pid");
        let pid = rustix::process::Pid::from_raw(claim).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::KILL)
            .expect("SIGKILL the driver");
        // Its command gets SIGTERM (the parent-death signal) and with it the last copies go.
        wait_until("the lane free", || lane_free(&site, "k"));
        let mut code = 75;
        wait_until("the slot free", || {
            code = site.code(&["run", "--no-wait", "--", "true"]);
            code == 0
        });
    }

    #[test]
    fn runs_and_enqueued_work_share_one_cap() {
        let site = Site::new(Some(r#"{"max_agents": 4}"#));
        let _dispatcher = start(&site, &[]);
        let script = site.write_script("overlap.sh", super::cap::OVERLAP);
        for i in 0..8 {
            let out = site
                .worklane()
                .args(["enqueue", "--lane", &format!("o{i}"), "--", "sh", "-c"])
                .arg(driven(&format!("sh {script}")))
                .output_gated()
                .expect("enqueue");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let runs: Vec<Running> = (0..8)
            .map(|i| {
                Running::new(
                    site.worklane()
                        .args(["run", "--", "sh", &script])
                        .env("K", i.to_string())
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn_gated()
                        .expect("spawn"),
                )
            })
            .collect();
        for run in runs {
            let out = run.wait_with_output().expect("wait");
            assert!(out.status.success(), "every run completes");
        }
        wait_until("all sixteen to have run", || {
            std::fs::read_to_string(site.file("log")).is_ok_and(|t| t.lines().count() == 16)
        });
        let log = std::fs::read_to_string(site.file("log")).expect("log");
        let max = log
            .lines()
            .map(|l| l.parse::<u32>().expect("a count"))
            .max();
        assert_eq!(
            max,
            Some(4),
            "never more than 4 at once across both kinds: {log}"
        );
    }

    #[test]
    fn one_dispatcher_per_directory_and_a_restart_recovers_the_queue() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut first = start(&site, &[]);
        let second = site.output(&["dispatcher"]);
        assert_eq!(second.status.code(), Some(75), "a second one is refused");
        assert!(
            String::from_utf8_lossy(&second.stderr).contains(&first.id().to_string()),
            "naming the first: {}",
            String::from_utf8_lossy(&second.stderr)
        );
        assert_eq!(site.code(&["stop-all", "hold"]), 0);
        let out = enqueue(&site, &["--lane", "s"], r#"touch "$T/ran""#);
        assert!(out.status.success());
        let pid =
            rustix::process::Pid::from_raw(i32::try_from(first.id()).expect("pid")).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let status = wait_exit(&mut first, "the dispatcher");
        assert!(status.success(), "a clean stop");
        assert!(
            lane_free(&site, "s"),
            "its lanes are freed with its descriptors"
        );
        let _again = start(&site, &[]);
        assert!(
            !lane_free(&site, "s"),
            "recovered: the new dispatcher holds the lane again"
        );
        assert_eq!(site.code(&["resume-all"]), 0);
        wait_until("the recovered attempt to run", || site.file("ran").exists());
    }
}

/// Whose rights a dispatched driver gets (issue: a member of the directory's group could run
/// commands as root): the enqueuer's, from the connection's peer credentials, never more.
/// Every test here runs its subjects as an unprivileged member of the directory's group.
mod queue_rights {
    use super::dispatcher::{enqueue, start, states};
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    pub(super) const SHARED: u32 = 23_457;
    pub(super) const MEMBER: u32 = 65_534;
    pub(super) const MEMBER_GID: u32 = 12_346;

    /// A site whose slot directory is root's, group `SHARED`, mode 2770 (a member can use it),
    /// with `out/` a directory anyone may write (a driver of another user's says what it saw).
    pub(super) fn shared_site(config: Option<&str>) -> Site {
        assert!(
            rustix::process::geteuid().is_root(),
            "these tests give the directory to a group and drop to a member (setpriv)"
        );
        let site = Site::new(config);
        std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod");
        std::os::unix::fs::chown(site.slots(), Some(0), Some(SHARED)).expect("chown");
        std::fs::set_permissions(site.slots(), std::fs::Permissions::from_mode(0o2770))
            .expect("chmod");
        std::fs::create_dir(site.file("out")).expect("out");
        std::fs::set_permissions(site.file("out"), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        site
    }

    /// `worklane ARGS` as the member (uid 65534, primary group 12346, in `SHARED`).
    pub(super) fn as_member(site: &Site) -> Command {
        let mut cmd = site.command("setpriv");
        cmd.args([
            &format!("--reuid={MEMBER}"),
            &format!("--regid={MEMBER_GID}"),
            &format!("--groups={SHARED}"),
        ])
        .arg(worklane_bin())
        .env("AGENT_SLOTS_DIR", site.slots())
        .env("WORKLANE_STATE_DIR", site.state())
        .env_remove("AGENT_SLOTS_CONFIG")
        .env("LANE_OUT", site.file("out"))
        .env("SECRET_OF_THE_ENQUEUER", "not for the driver")
        .stdin(Stdio::null());
        cmd
    }

    const WHO: &str = r#"{ id -u; id -g; id -G; echo "HOME=$HOME USER=$USER LOGNAME=$LOGNAME SHELL=$SHELL PATH=$PATH"; env | grep -c SECRET; head -1 /etc/shadow; } > "$LANE_OUT/who.tmp" 2>&1; mv "$LANE_OUT/who.tmp" "$LANE_OUT/who""#;

    fn who(site: &Site) -> Vec<String> {
        wait_until("the driver's report", || site.file("out/who").exists());
        std::fs::read_to_string(site.file("out/who"))
            .expect("who")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn assert_member(lines: &[String]) {
        assert_eq!(lines[0], MEMBER.to_string(), "its uid: {lines:?}");
        assert_eq!(lines[1], MEMBER_GID.to_string(), "its gid: {lines:?}");
        let mut groups: Vec<&str> = lines[2].split_whitespace().collect();
        groups.sort_unstable();
        let mut want = [MEMBER_GID.to_string(), SHARED.to_string()];
        want.sort_unstable();
        assert_eq!(groups, want, "exactly its groups: {lines:?}");
        assert!(
            lines[3].starts_with("HOME=/nonexistent USER=nobody LOGNAME=nobody SHELL=")
                && lines[3].ends_with("PATH=/usr/local/bin:/usr/bin:/bin"),
            "its account's variables: {lines:?}"
        );
        assert_eq!(
            lines[4], "0",
            "none of the enqueuer's or dispatcher's other variables"
        );
        assert!(
            lines[5].contains("Permission denied"),
            "it cannot read what root can: {lines:?}"
        );
    }

    #[test]
    fn a_member_s_driver_runs_as_that_member_with_its_groups_and_nothing_of_root_s() {
        let site = shared_site(None);
        let _dispatcher = start(&site, &[]);
        let out = as_member(&site)
            .args(["enqueue", "--lane", "x", "--driver", "--", "sh", "-c", WHO])
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_member(&who(&site));
        let log = site.slots().join(format!("queue-{attempt}.log"));
        let meta = std::fs::metadata(&log).expect("the driver's log");
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o777),
            (MEMBER, SHARED, 0o640),
            "its log is the member's, readable by the group"
        );
    }

    #[test]
    fn a_member_s_claimed_command_runs_as_that_member_too() {
        let site = shared_site(None);
        let _dispatcher = start(&site, &[]);
        let out = as_member(&site)
            .args(["enqueue", "--lane", "y", "--", "sh", "-c", WHO])
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_member(&who(&site));
    }

    #[test]
    fn a_dispatcher_that_is_not_root_queues_only_its_own_user_s_work() {
        let site = shared_site(None);
        // The member's dispatcher keeps its state in a directory of the member's own.
        let state = site.file("member-state");
        std::fs::create_dir(&state).expect("mkdir");
        std::os::unix::fs::chown(&state, Some(MEMBER), Some(MEMBER_GID)).expect("chown");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let mut dispatcher = Running::new(
            as_member(&site)
                .arg("dispatcher")
                .env("WORKLANE_STATE_DIR", &state)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn_gated()
                .expect("spawn the dispatcher as the member"),
        );
        let socket = site.slots().join("dispatcher.sock");
        wait_until("the member's dispatcher", || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        let out = enqueue(&site, &["--lane", "root-s"], "touch \"$T/root-ran\"");
        let err = String::from_utf8_lossy(&out.stderr);
        // Root's client believes no member's socket (a member may serve one of its own at the
        // directory's name): nothing is sent, neither the lane's descriptor nor the command.
        assert_eq!(out.status.code(), Some(69), "root's work is refused: {err}");
        assert!(
            err.contains(&format!("served by uid {MEMBER}")) && err.contains("nothing was sent"),
            "saying why and what to do: {err}"
        );
        assert!(
            super::dispatcher::lane_free(&site, "root-s"),
            "the refused lane is free again (the descriptor was not kept)"
        );
        let out = as_member(&site)
            .args([
                "enqueue", "--lane", "own", "--driver", "--", "sh", "-c", WHO,
            ])
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = who(&site);
        assert_eq!(
            lines[0],
            MEMBER.to_string(),
            "its own work runs as itself: {lines:?}"
        );
        assert!(dispatcher.try_wait().expect("try_wait").is_none());
        assert!(states(&site).is_empty() || !site.file("root-ran").exists());
    }

    #[test]
    fn a_claim_from_another_user_is_refused_and_the_row_stays() {
        let site = shared_site(Some(r#"{"max_agents": 1}"#));
        let _dispatcher = start(&site, &[]);
        // Root's row, whose driver hands its token to the member and waits.
        let script = r#"echo "$WORKLANE_ATTEMPT $WORKLANE_TOKEN" > "$T/token"; sleep 30"#;
        let out = site
            .worklane()
            .args(["enqueue", "--lane", "c", "--driver", "--", "sh", "-c"])
            .arg(super::driven(script))
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_until("the driver's token", || {
            std::fs::read_to_string(site.file("token")).is_ok_and(|t| t.ends_with('\n'))
        });
        let token = std::fs::read_to_string(site.file("token")).expect("token");
        let (attempt, token) = token.trim().split_once(' ').expect("two words");
        let out = as_member(&site)
            .args(["claim", "--", "true"])
            .env("WORKLANE_ATTEMPT", attempt)
            .env("WORKLANE_TOKEN", token)
            .env("WORKLANE_SOCKET", site.slots().join("dispatcher.sock"))
            .output_gated()
            .expect("claim as the member");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{err}");
        assert!(
            err.contains("enqueued by uid 0") && err.contains("(permission)"),
            "whose it is: {err}"
        );
        assert_eq!(
            states(&site)[attempt]["state"],
            "starting",
            "the row stays with the dispatcher"
        );
    }
}

/// The dispatcher under hostile connections, a full disk and a damaged database: it serves
/// on, says what is wrong, and loses nothing.
mod queue_trouble {
    use super::dispatcher::{enqueue, start, start_crashing, states};
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::ExitStatusExt;

    /// How long `queue ls` took, and its output.
    fn timed_ls(site: &Site) -> (Duration, Output) {
        let began = Instant::now();
        let out = site.output(&["queue", "ls", "--json"]);
        (began.elapsed(), out)
    }

    /// 200 connections that never send and a client that sends a byte every 1.5 s hold
    /// nothing up: `queue ls` is answered at once and a row enqueued meanwhile is admitted
    /// and its driver started at once. (The bound asserted, 1.5 s, is generous: under the
    /// 2 s each silent connection was once allowed, one after another, and far above the
    /// few milliseconds it takes: 6.5 ms for `queue ls`, 33 ms from enqueue to the driver,
    /// measured on the development machine.)
    #[test]
    fn silent_and_slow_connections_do_not_hold_the_queue() {
        let site = Site::new(Some(r#"{"max_agents": 2}"#));
        let _dispatcher = start(&site, &[]);
        let socket = site.slots().join("dispatcher.sock");
        let silent: Vec<UnixStream> = (0..200)
            .map(|_| UnixStream::connect(&socket).expect("connect"))
            .collect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let loris = {
            let socket = socket.clone();
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut sent = 0;
                let mut stream = UnixStream::connect(&socket).expect("connect");
                for byte in br#"{"op":"list"}"#.iter().cycle() {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    if stream.write_all(&[*byte]).is_err() {
                        // Cut off by the whole-message deadline: a new one starts over.
                        stream = UnixStream::connect(&socket).expect("connect");
                    }
                    sent += 1;
                    for _ in 0..15 {
                        if stop.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
                sent
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let (took, out) = timed_ls(&site);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            took < Duration::from_millis(1500),
            "answered at once, not after them: {took:?}"
        );
        let began = Instant::now();
        let out = enqueue(&site, &["--lane", "now"], r#"touch "$T/admitted""#);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_until("the row's driver", || site.file("admitted").exists());
        let took = began.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "admitted on time: {took:?}"
        );
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = loris.join();
        drop(silent);
    }

    /// A peer outside the directory's group is refused at accept, before it sends anything,
    /// so silent strangers cannot hold root's requests.
    #[test]
    fn a_stranger_is_refused_at_once_without_a_word_of_its_own() {
        use std::os::unix::fs::PermissionsExt;
        let site = Site::new(None);
        let _dispatcher = start(&site, &[]);
        let socket = site.slots().join("dispatcher.sock");
        // Let the stranger reach the socket, to test the check behind the mode.
        std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::fs::set_permissions(site.slots(), std::fs::Permissions::from_mode(0o2755))
            .expect("chmod");
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let script = "import socket,sys,json\n\
            conns=[]\n\
            for _ in range(5):\n\
            \x20   s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(5); conns.append(s)\n\
            for s in conns:\n\
            \x20   print(json.loads(s.makefile().readline()).get('error'))\n";
        let strangers = site
            .command("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["/usr/bin/python3", "-c", script])
            .arg(&socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("python3 as a stranger");
        let (took, out) = timed_ls(&site);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            took < Duration::from_millis(1500),
            "root is answered at once: {took:?}"
        );
        let strangers = strangers.wait_with_output().expect("strangers");
        assert!(
            strangers.status.success(),
            "each stranger heard its refusal without sending: {}",
            String::from_utf8_lossy(&strangers.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&strangers.stdout),
            "permission\n".repeat(5),
            "refused, each"
        );
    }

    /// A tmpfs of `size` mounted over `at` (mode 2770), unmounted when dropped: a disk that
    /// can be filled.
    struct Tmpfs(PathBuf);

    impl Tmpfs {
        fn mount(at: &Path, size: &str) -> Tmpfs {
            assert!(
                rustix::process::geteuid().is_root(),
                "mounting a tmpfs needs root"
            );
            let status = Command::new("mount")
                .args([
                    "-t",
                    "tmpfs",
                    "-o",
                    &format!("size={size},mode=2770"),
                    "tmpfs",
                ])
                .arg(at)
                .status_gated()
                .expect("mount");
            assert!(status.success(), "mount a tmpfs at {}", at.display());
            Tmpfs(at.to_owned())
        }

        /// Writes `fill` until the disk is full.
        fn fill(&self) -> PathBuf {
            let path = self.0.join("fill");
            let mut file = std::fs::File::create(&path).expect("fill");
            let chunk = vec![0u8; 64 * 1024];
            loop {
                match file.write(&chunk) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => {
                        assert_eq!(e.raw_os_error(), Some(28), "full: {e}");
                        break;
                    }
                }
            }
            path
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status_gated();
        }
    }

    /// The lines the dispatcher writes on its stderr, as they come.
    pub(super) fn lines_of(running: &mut Running) -> std::sync::mpsc::Receiver<String> {
        let stderr = running.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    }

    pub(super) fn drain(lines: &std::sync::mpsc::Receiver<String>) -> Vec<String> {
        let mut all = Vec::new();
        while let Ok(line) = lines.recv_timeout(Duration::from_millis(300)) {
            all.push(line);
        }
        all
    }

    const COUNT: &str = r#"echo "$WORKLANE_ATTEMPT" >> "$T/ran""#;

    fn ran(site: &Site) -> Vec<String> {
        std::fs::read_to_string(site.file("ran"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// With the disk full while rows wait, the dispatcher keeps serving and holding its
    /// lanes, says what fails (its log, `queue ls`), and once space returns runs every row
    /// exactly once.
    #[test]
    fn a_full_disk_is_survived_and_said_and_nothing_is_lost_or_run_twice() {
        let site = Site::new(None);
        let disk = Tmpfs::mount(&site.slots(), "4m");
        std::fs::write(site.slots().join("config.json"), r#"{"max_agents": 1}"#).expect("config");
        let mut dispatcher = start(&site, &[]);
        let lines = lines_of(&mut dispatcher);
        assert_eq!(site.code(&["stop-all", "hold"]), 0);
        let mut ids = Vec::new();
        for lane in ["f0", "f1", "f2"] {
            let out = enqueue(&site, &["--lane", lane], COUNT);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            ids.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
        }
        let fill = disk.fill();
        assert_eq!(
            site.code(&["resume-all"]),
            0,
            "STOP is lifted on a full disk"
        );
        let mut troubled = None;
        wait_until("the dispatcher to report its trouble", || {
            let out = site.output(&["queue", "ls", "--json"]);
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            troubled = doc["trouble"].as_str().map(str::to_owned);
            troubled.is_some()
        });
        let troubled = troubled.expect("trouble");
        assert!(
            troubled.contains("No space left on device"),
            "says why: {troubled}"
        );
        let shown = site.output(&["queue", "ls"]);
        assert!(
            String::from_utf8_lossy(&shown.stdout).contains("TROUBLE: "),
            "and says it to a person: {}",
            String::from_utf8_lossy(&shown.stdout)
        );
        assert!(
            dispatcher.try_wait().expect("try_wait").is_none(),
            "it serves on"
        );
        let why = site.output(&["why", "--json"]);
        let why: serde_json::Value = serde_json::from_slice(&why.stdout).expect("why --json");
        assert!(
            why["queued"].as_array().is_some_and(|q| !q.is_empty()
                && q.iter().all(|e| e["held_by"].as_str().is_some_and(|h| h
                    .contains("cannot admit work now")
                    && h.contains("No space left")))),
            "why names the dispatcher's trouble for each waiting row: {why}"
        );
        assert!(ran(&site).is_empty(), "nothing ran while the disk was full");
        for lane in ["f0", "f1", "f2"] {
            assert!(
                !super::dispatcher::lane_free(&site, lane),
                "it holds lane {lane}"
            );
        }
        std::fs::remove_file(fill).expect("free the disk");
        wait_until("all three to run", || ran(&site).len() == 3);
        wait_until("their rows to end", || states(&site).is_empty());
        let mut got = ran(&site);
        got.sort();
        ids.sort();
        assert_eq!(got, ids, "each row ran exactly once");
        let log = drain(&lines);
        let said = log
            .iter()
            .filter(|l| l.contains("No space left on device"))
            .count();
        assert!(said >= 1, "the log says it: {log:?}");
        assert!(said <= 4, "a few lines, not one per try: {log:?}");
        assert!(
            dispatcher.try_wait().expect("try_wait").is_none(),
            "still serving"
        );
        drop(dispatcher);
    }

    /// How a test damages the queue database of a dispatcher it stopped.
    #[derive(Debug, Clone, Copy)]
    enum Damage {
        /// Emptied (after a clean stop: no WAL).
        Emptied,
        /// Its every byte replaced by random ones (after a clean stop).
        Garbage,
        /// Random bytes over its second page and on (after a clean stop).
        Pages,
        /// Random bytes written into its WAL's frames (after a SIGKILL: the rows are there).
        WalBytes,
        /// Its WAL replaced by garbage (after a SIGKILL).
        WalReplaced,
        /// One byte of its WAL's second frame flipped (after a SIGKILL): SQLite would drop that
        /// frame and every later one.
        WalFrame,
    }

    fn random_bytes(n: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; n];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .expect("urandom");
        bytes
    }

    fn damage(db: &Path, how: Damage) {
        use std::os::unix::fs::FileExt;
        let wal = db.with_file_name("queue.db-wal");
        match how {
            Damage::Emptied => std::fs::write(db, b"").expect("empty"),
            Damage::Garbage => {
                let len = std::fs::metadata(db).expect("db").len();
                std::fs::write(db, random_bytes(usize::try_from(len).expect("len")))
                    .expect("garbage");
            }
            Damage::Pages => {
                let len = std::fs::metadata(db).expect("db").len();
                assert!(len > 4096, "more than one page: {len}");
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(db)
                    .expect("db");
                file.write_all_at(
                    &random_bytes(usize::try_from(len - 4096).expect("len")),
                    4096,
                )
                .expect("pages");
            }
            Damage::WalBytes => {
                let len = std::fs::metadata(&wal).expect("a WAL after SIGKILL").len();
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&wal)
                    .expect("wal");
                file.write_all_at(&random_bytes(usize::try_from(len - 32).expect("len")), 32)
                    .expect("frames");
            }
            Damage::WalReplaced => {
                let len = std::fs::metadata(&wal).expect("a WAL after SIGKILL").len();
                std::fs::write(&wal, random_bytes(usize::try_from(len).expect("len")))
                    .expect("replace");
            }
            Damage::WalFrame => {
                let mut bytes = std::fs::read(&wal).expect("a WAL after SIGKILL");
                let page = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
                let page = usize::try_from(page).expect("page size");
                let at = 32 + (24 + page) + 24 + page / 2;
                assert!(
                    bytes.len() > 32 + 3 * (24 + page),
                    "frames after the second"
                );
                bytes[at] ^= 0x01;
                std::fs::write(&wal, &bytes).expect("flip a byte");
                std::fs::write(wal.with_file_name("flipped-wal"), &bytes).expect("keep");
            }
        }
    }

    /// After each kind of damage to the queue database, the restarted dispatcher says so
    /// loudly, moves a database it finds damaged aside (never deletes it), and accounts for
    /// every row: recovered and run, or listed as lost with its arguments; no status entry is
    /// left naming the dead dispatcher, and a lost lane can be enqueued again.
    #[test]
    fn a_damaged_queue_database_is_said_moved_aside_and_its_rows_accounted_for() {
        for how in [
            Damage::Emptied,
            Damage::Garbage,
            Damage::Pages,
            Damage::WalBytes,
            Damage::WalReplaced,
            Damage::WalFrame,
        ] {
            damaged(how);
        }
    }

    fn damaged(how: Damage) {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let clean = matches!(how, Damage::Emptied | Damage::Garbage | Damage::Pages);
        let mut first = if clean {
            start(&site, &[])
        } else {
            // Killed where nothing checkpoints the WAL: the rows are in it.
            start_crashing(&site, &[], "")
        };
        assert_eq!(site.code(&["stop-all", "hold"]), 0);
        let mut ids = Vec::new();
        for i in 0..3 {
            let out = enqueue(&site, &["--lane", &format!("d{i}")], COUNT);
            assert!(
                out.status.success(),
                "{how:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            ids.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
        }
        let pid =
            rustix::process::Pid::from_raw(i32::try_from(first.id()).expect("pid")).expect("pid");
        let signal = if clean {
            rustix::process::Signal::TERM
        } else {
            rustix::process::Signal::KILL
        };
        rustix::process::kill_process(pid, signal).expect("stop the dispatcher");
        let status = wait_exit(&mut first, "the first dispatcher");
        assert!(
            clean == status.success() || status.signal() == Some(9),
            "{how:?}: {status:?}"
        );
        damage(&site.state().join("queue.db"), how);
        let mut second = start(&site, &[]);
        let lines = lines_of(&mut second);
        assert_eq!(site.code(&["resume-all"]), 0);
        let out = site.output(&["queue", "ls", "--all", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("queue ls");
        let history = doc["history"].as_array().cloned().unwrap_or_default();
        let lost: Vec<&serde_json::Value> =
            history.iter().filter(|e| e["outcome"] == "lost").collect();
        let listed: Vec<String> = doc["attempts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["attempt"].as_str().map(str::to_owned))
            .collect();
        for id in &ids {
            let is_lost = lost.iter().any(|e| e["attempt"] == id.as_str());
            let was_run = ran(&site).contains(id)
                || history
                    .iter()
                    .any(|e| e["attempt"] == id.as_str() && e["outcome"] != "lost");
            assert!(
                listed.contains(id) || is_lost || was_run,
                "{how:?}: attempt {id} is neither kept nor said lost: {doc}"
            );
        }
        for entry in &lost {
            assert!(
                entry["args"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|v| v == "claim")),
                "{how:?}: a lost attempt names its command: {entry}"
            );
            let lane = entry["lane"].as_str().expect("lane");
            assert!(
                !site.slots().join(format!("queue-{lane}.json")).exists(),
                "{how:?}: no stale status entry for lost lane {lane}"
            );
            let again = enqueue(&site, &["--lane", lane], COUNT);
            assert!(
                again.status.success(),
                "{how:?}: lost lane {lane} can be enqueued again: {}",
                String::from_utf8_lossy(&again.stderr)
            );
        }
        let moved: Vec<String> = std::fs::read_dir(site.state())
            .expect("list")
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("queue.db.damaged-"))
            .collect();
        let log = drain(&lines);
        if !lost.is_empty() {
            assert!(
                log.iter().any(|l| l.contains("LOST attempt")),
                "{how:?}: the log says what was lost: {log:?}"
            );
        }
        if matches!(how, Damage::Garbage | Damage::Pages) {
            assert!(
                !moved.is_empty(),
                "{how:?}: the damaged database is moved aside"
            );
            assert!(
                log.iter().any(|l| l.contains("DAMAGED")) && doc["damage"].is_string(),
                "{how:?}: and said so, in the log and in queue ls: {log:?} {doc}"
            );
            assert_eq!(
                lost.len(),
                3,
                "{how:?}: its three rows are lost, and said: {doc}"
            );
        }
        if matches!(how, Damage::WalFrame) {
            let copies: Vec<String> = std::fs::read_dir(site.state())
                .expect("list")
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("queue.db-wal.damaged-"))
                .collect();
            assert_eq!(
                copies.len(),
                1,
                "{how:?}: a copy of the log is kept: {copies:?}"
            );
            assert_eq!(
                std::fs::read(site.state().join(&copies[0])).expect("copy"),
                std::fs::read(site.state().join("flipped-wal")).expect("flipped"),
                "{how:?}: as it was before SQLite replayed it"
            );
            assert!(
                log.iter()
                    .any(|l| l.contains("DAMAGED") && l.contains("write-ahead log"))
                    && doc["damage"]
                        .as_str()
                        .is_some_and(|d| d.contains("write-ahead log")),
                "{how:?}: said, in the log and in queue ls: {log:?} {doc}"
            );
            assert!(
                moved.is_empty(),
                "{how:?}: the database itself stays in use"
            );
        }
        if matches!(how, Damage::Emptied | Damage::WalReplaced) {
            assert_eq!(
                lost.len() + listed.len(),
                3,
                "{how:?}: each row accounted for: {doc}"
            );
        }
        wait_until("the recovered and re-enqueued rows to run", || {
            states(&site).is_empty()
        });
        let mut got = ran(&site);
        got.sort();
        got.dedup();
        assert_eq!(got.len(), ran(&site).len(), "{how:?}: nothing ran twice");
        drop(second);
    }

    /// A socket systemd passes (socket activation) with a mode that lets anyone connect is
    /// narrowed to the directory's group before the dispatcher serves on it, and it says so.
    #[test]
    fn a_passed_socket_that_others_may_use_is_narrowed_before_serving() {
        use std::os::unix::fs::PermissionsExt;
        let site = Site::new(None);
        let socket = site.slots().join("dispatcher.sock");
        // As systemd does: bind, listen, pass as descriptor 3 with LISTEN_PID and LISTEN_FDS.
        let script = "import os, socket, sys\n\
            s = socket.socket(socket.AF_UNIX)\n\
            s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(16)\n\
            os.dup2(s.fileno(), 3); os.set_inheritable(3, True)\n\
            os.environ['LISTEN_PID'] = str(os.getpid()); os.environ['LISTEN_FDS'] = '1'\n\
            os.execv(sys.argv[2], [sys.argv[2], 'dispatcher'])\n";
        let mut dispatcher = Running::new(
            site.command("python3")
                .args(["-c", script])
                .arg(&socket)
                .arg(worklane_bin())
                .env("AGENT_SLOTS_DIR", site.slots())
                .env("WORKLANE_STATE_DIR", site.state())
                .env_remove("AGENT_SLOTS_CONFIG")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("python3 as systemd"),
        );
        let lines = lines_of(&mut dispatcher);
        wait_until("the dispatcher on the passed socket", || {
            timed_ls(&site).1.status.success()
                && std::fs::metadata(&socket).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o660)
        });
        let log = drain(&lines);
        assert!(
            log.iter()
                .any(|l| l.contains("had mode 0666") && l.contains("SocketMode=0660")),
            "it says what it changed and what the unit should say: {log:?}"
        );
        let out = site.output(&["queue", "ls", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("queue ls");
        assert!(
            doc["dispatcher_pid"].is_u64(),
            "served on the passed socket: {doc}"
        );
    }

    /// A connection that sends part of a request and stops is closed at the whole-message
    /// deadline; the dispatcher answers others meanwhile.
    #[test]
    fn half_a_request_is_cut_off_at_its_deadline() {
        let site = Site::new(None);
        let _dispatcher = start(&site, &[]);
        let socket = site.slots().join("dispatcher.sock");
        let mut half = UnixStream::connect(&socket).expect("connect");
        half.write_all(br#"{"op":"li"#).expect("half a request");
        half.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let (_, out) = timed_ls(&site);
        assert!(out.status.success(), "served beside it");
        let mut rest = Vec::new();
        let began = Instant::now();
        let _ = half.read_to_end(&mut rest);
        assert!(
            began.elapsed() < Duration::from_secs(9),
            "closed at the deadline, not left open"
        );
    }
}

/// How dispatched work ends, and what is kept of it: the attempt's log says its start, end and
/// status; running attempts are listed and cancelled; ended ones are in a bounded history
/// that `reconcile` and `queue ls --all` read, pruned after its retention.
mod queue_history {
    use super::dispatcher::{enqueue, start, states};
    use super::*;

    fn history(site: &Site) -> Vec<serde_json::Value> {
        let out = site.output(&["queue", "ls", "--all", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("queue ls");
        doc["history"].as_array().cloned().unwrap_or_default()
    }

    fn log_of(site: &Site, attempt: &str) -> String {
        std::fs::read_to_string(site.slots().join(format!("queue-{attempt}.log")))
            .unwrap_or_default()
    }

    #[test]
    fn an_attempt_s_log_says_its_start_end_and_status_and_the_history_keeps_it() {
        let site = Site::new(None);
        let _dispatcher = start(&site, &[]);
        let out = enqueue(&site, &["--lane", "f"], "echo failing; exit 3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        wait_until("the attempt to end", || {
            history(&site)
                .iter()
                .any(|e| e["attempt"] == attempt.as_str())
        });
        let ended = history(&site)
            .into_iter()
            .find(|e| e["attempt"] == attempt.as_str())
            .expect("ended");
        assert_eq!(
            (&ended["outcome"], &ended["status"], &ended["lane"]),
            (
                &serde_json::json!("exited"),
                &serde_json::json!(3),
                &serde_json::json!("f")
            ),
            "{ended}"
        );
        assert!(ended["started_at_ms"].as_u64().is_some(), "it ran: {ended}");
        let log = log_of(&site, &attempt);
        for part in [
            format!("start 1 of attempt {attempt} (lane f) as uid 0"),
            format!("attempt {attempt} claimed (lane lane-f.lock"),
            "failing".to_owned(),
            format!("attempt {attempt} ended after"),
            ": exit status 3".to_owned(),
            format!("attempt {attempt} exited with exit status 3"),
        ] {
            assert!(log.contains(&part), "the log says {part:?}: {log}");
        }
        let out = site.output(&["reconcile", &attempt]);
        assert_eq!(out.status.code(), Some(0));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.contains("ended at") && said.contains("exit status 3"),
            "reconcile reads the history: {said}"
        );
        let out = site.output(&["reconcile", &attempt, "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(doc["holder"], serde_json::Value::Null, "{doc}");
        assert_eq!(doc["ended"]["status"], 3, "{doc}");
        let out = site.output(&["reconcile", "a-0123456789abcdef0123456789abcdef"]);
        assert_eq!(
            out.status.code(),
            Some(64),
            "a made-up id is an error: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let shown = site.output(&["queue", "ls", "--all"]);
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(
            text.contains(&attempt) && text.contains("exited with exit status 3"),
            "queue ls --all shows it: {text}"
        );
    }

    #[test]
    fn a_running_attempt_is_listed_and_cancel_halts_it_as_stop_would() {
        let site = Site::new(None);
        let _dispatcher = start(&site, &[]);
        let script = r#"trap 'echo got TERM >> "$T/term"; exit 0' TERM; echo $$ > "$T/pid"; while :; do sleep 0.05; done"#;
        let out = enqueue(&site, &["--lane", "r"], script);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        wait_until("the command", || {
            std::fs::read_to_string(site.file("pid")).is_ok_and(|t| t.ends_with('\n'))
        });
        wait_until("the row to be running", || {
            states(&site)
                .get(&attempt)
                .is_some_and(|a| a["state"] == "running")
        });
        let row = states(&site)[&attempt].clone();
        assert!(
            row["driver_pid"].as_u64().is_some(),
            "its driver's pid: {row}"
        );
        let shown = site.output(&["queue", "ls"]);
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(
            text.contains("running") && text.contains("driver pid ") && text.contains("since "),
            "queue ls lists it with its driver and since when: {text}"
        );
        let out = site.output(&["queue", "cancel", &attempt]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("being halted"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        wait_until("the attempt to end", || {
            history(&site)
                .iter()
                .any(|e| e["attempt"] == attempt.as_str())
        });
        // (Twice, on a slow machine: from `worklane claim`'s halt on the marker, then as the
        // dispatcher's own SIGTERM, a second later, forwarded.)
        let term = std::fs::read_to_string(site.file("term")).expect("term");
        assert!(
            term.starts_with("got TERM\n") && term.lines().all(|l| l == "got TERM"),
            "the command was sent SIGTERM, as STOP sends it: {term:?}"
        );
        let ended = history(&site)
            .into_iter()
            .find(|e| e["attempt"] == attempt.as_str())
            .expect("ended");
        assert_eq!(ended["outcome"], "cancelled", "{ended}");
        assert!(
            ended["detail"]
                .as_str()
                .is_some_and(|d| d.contains("queue cancel (uid 0)")),
            "who halted it: {ended}"
        );
        let log = log_of(&site, &attempt);
        assert!(
            log.contains("halted (cancelled by `worklane queue cancel` (uid 0)"),
            "its log says who halted it: {log}"
        );
        assert!(
            !site
                .slots()
                .join(format!("queue-{attempt}.cancel"))
                .exists(),
            "the cancel marker is gone with the attempt"
        );
        assert!(super::dispatcher::lane_free(&site, "r"), "its lane is free");
    }

    /// A driver that claims after the interval (as a slow driver in another language did): it
    /// is halted at the expiry, the row is queued again after a backoff and its driver started
    /// again, appending to the same log; the
    /// row behind it runs meanwhile, nobody cancelling anything; the dispatcher's log and the
    /// slots' epochs grow by a few lines and a few steps per start, not thousands a second.
    #[test]
    fn a_driver_that_claims_late_is_started_again_and_the_line_moves_on() {
        let site = Site::new(Some(r#"{"max_agents": 2}"#));
        let mut dispatcher = start(&site, &["--claim-interval", "1s"]);
        let stderr = dispatcher.stderr.take().expect("stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let late = format!(
            r#"echo start >> "$LANE_T/starts"; sleep 1.5; exec {} claim -- true"#,
            worklane_bin()
        );
        let out = site
            .worklane()
            .args([
                "enqueue", "--lane", "late", "--driver", "--", "sh", "-c", &late,
            ])
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let behind = enqueue(&site, &["--lane", "behind"], r#"touch "$T/behind-ran""#);
        assert!(behind.status.success());
        wait_until("the row behind to run", || site.file("behind-ran").exists());
        let starts =
            || std::fs::read_to_string(site.file("starts")).map_or(0, |t| t.lines().count());
        wait_until("three starts of the late driver", || starts() >= 3);
        let log = log_of(&site, &attempt);
        for n in 1..=3 {
            assert!(
                log.contains(&format!("start {n} of attempt {attempt}")),
                "start {n} appends to the same log: {log}"
            );
        }
        // Each expiry halts the late driver (it never gets to claim) and counts as a failed
        // start, said on the row.
        let row = states(&site).remove(&attempt).expect("the late row");
        assert!(
            row["failures"].as_u64().is_some_and(|n| n >= 2)
                && row["last_error"]
                    .as_str()
                    .is_some_and(|e| e.contains("did not claim it within the claim interval")),
            "each expiry is a failed start: {row}"
        );
        let out = site.output(&["queue", "cancel", &attempt]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen = starts();
        let mut mentions = 0;
        while let Ok(line) = lines.recv_timeout(Duration::from_millis(300)) {
            if line.contains(&attempt) {
                mentions += 1;
            }
        }
        assert!(
            mentions <= 3 * seen + 3,
            "a few log lines per start ({mentions} for {seen} starts)"
        );
        let epoch = std::fs::read_dir(site.slots())
            .expect("list")
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| n.strip_prefix("slots.lock.epoch.")?.parse::<u64>().ok())
            .max()
            .expect("slots.lock's epoch");
        assert!(
            epoch <= 20 * (seen as u64) + 20,
            "slots.lock taken a few times per start, not in a loop: epoch {epoch} after {seen}"
        );
    }

    #[test]
    fn ended_attempts_and_their_logs_go_after_the_retention_or_when_pruned() {
        let site = Site::new(None);
        let dispatcher = start(&site, &["--retention", "2s"]);
        let out = enqueue(&site, &["--lane", "kept"], "true");
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let log = site.slots().join(format!("queue-{attempt}.log"));
        wait_until("the attempt to end", || {
            history(&site)
                .iter()
                .any(|e| e["attempt"] == attempt.as_str())
        });
        assert!(log.exists(), "its log is kept for now");
        wait_until("the retention to pass", || !log.exists());
        assert!(
            history(&site)
                .iter()
                .all(|e| e["attempt"] != attempt.as_str()),
            "forgotten with its log"
        );
        drop(dispatcher);
        let _dispatcher = start(&site, &[]);
        let out = enqueue(&site, &["--lane", "pruned"], "true");
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let log = site.slots().join(format!("queue-{attempt}.log"));
        wait_until("the attempt to end", || {
            history(&site)
                .iter()
                .any(|e| e["attempt"] == attempt.as_str())
        });
        assert!(log.exists());
        let out = site.output(&["queue", "prune"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("forgot 1 ended attempt"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(!log.exists(), "queue prune removes the log");
        assert!(history(&site).is_empty(), "and forgets the attempt");
    }
}

/// Model providers' budgets from the command line: a take prints its reservation, the
/// response's headers (from stdin) and usage settle it, a 429 pauses every caller of the key,
/// and the key is never written or printed.
mod model_budgets {
    use super::*;
    use std::io::Write;

    const KEY: &str = "sk-ant-cli-test-key-not-real";

    fn budget(site: &Site, args: &[&str], stdin: &str) -> Output {
        let mut child = site
            .worklane()
            .arg("budget")
            .args(args)
            .env("ANTHROPIC_API_KEY", KEY)
            .env("MISTRAL_KEY", KEY)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn worklane budget");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("wait")
    }

    fn reset_in(secs: u64) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis();
        let at = u64::try_from(now).expect("ms") + secs * 1000;
        // RFC 3339, as Anthropic writes its resets.
        let out = Command::new("date")
            .args([
                "-u",
                "-d",
                &format!("@{}", at / 1000),
                "+%Y-%m-%dT%H:%M:%SZ",
            ])
            .output_gated()
            .expect("date");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn everything_written(site: &Site) -> String {
        let mut all = String::new();
        for entry in std::fs::read_dir(site.slots()).expect("list").flatten() {
            if let Ok(text) = std::fs::read_to_string(entry.path()) {
                all.push_str(&text);
            }
            all.push_str(&entry.file_name().to_string_lossy());
        }
        all
    }

    #[test]
    fn a_take_reserves_the_response_settles_and_a_429_pauses_everyone_on_the_key() {
        let site = Site::new(None);
        let reset = reset_in(60);
        let headers = format!(
            "anthropic-ratelimit-requests-limit: 50\n\
             anthropic-ratelimit-requests-remaining: 3\n\
             anthropic-ratelimit-requests-reset: {reset}\n\
             anthropic-ratelimit-tokens-remaining: 5000\n\
             anthropic-ratelimit-tokens-reset: {reset}\n"
        );
        let seen = budget(
            &site,
            &[
                "observe",
                "--provider",
                "anthropic",
                "--status",
                "200",
                "--headers-file",
                "-",
            ],
            &headers,
        );
        assert!(
            seen.status.success(),
            "{}",
            String::from_utf8_lossy(&seen.stderr)
        );
        let take = budget(
            &site,
            &[
                "take",
                "--provider",
                "anthropic",
                "--consumer",
                "agent-1",
                "--tokens",
                "1000",
                "--output-tokens",
                "500",
            ],
            "",
        );
        assert!(
            take.status.success(),
            "{}",
            String::from_utf8_lossy(&take.stderr)
        );
        let reservation = String::from_utf8_lossy(&take.stdout).trim().to_owned();
        assert_eq!(
            reservation.len(),
            16,
            "it prints its reservation: {reservation:?}"
        );
        let shown = budget(&site, &["show", "--json"], "");
        let doc: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("show --json");
        let anthropic = doc["budgets"]
            .as_array()
            .and_then(|b| b.iter().find(|v| v["provider"] == "anthropic"))
            .cloned()
            .expect("the provider's budget is shown");
        let tokens = anthropic["resources"]
            .as_array()
            .and_then(|r| r.iter().find(|w| w["name"] == "tokens"))
            .cloned()
            .expect("its tokens window");
        assert_eq!(
            tokens["left"], 3500,
            "1 500 tokens reserved in flight: {tokens}"
        );
        // The response comes back with its usage (the final stream event's): settled.
        let stream = site.file("stream.txt");
        std::fs::write(
            &stream,
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":1}}}\n\n\
             event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":120}}\n\n",
        )
        .expect("stream");
        let settled = budget(
            &site,
            &[
                "observe",
                "--provider",
                "anthropic",
                "--status",
                "200",
                "--reservation",
                &reservation,
                "--usage-json",
                stream.to_str().expect("utf-8"),
                "--headers-file",
                "-",
            ],
            &format!(
                "anthropic-ratelimit-requests-remaining: 2\nanthropic-ratelimit-requests-reset: {reset}\n"
            ),
        );
        assert!(
            settled.status.success(),
            "{}",
            String::from_utf8_lossy(&settled.stderr)
        );
        let shown = budget(&site, &["show", "--json"], "");
        let doc: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("show --json");
        let tokens = doc["budgets"][0]["resources"]
            .as_array()
            .and_then(|r| r.iter().find(|w| w["name"] == "tokens"))
            .cloned()
            .expect("tokens");
        assert_eq!(
            tokens["granted"], 1020,
            "the estimate replaced by the usage (input from the first event, output from the last): {tokens}"
        );
        // A 429 with retry-after pauses every caller of the key.
        let paused = budget(
            &site,
            &[
                "observe",
                "--provider",
                "anthropic",
                "--status",
                "429",
                "--header",
                "retry-after: 30",
            ],
            "",
        );
        assert!(paused.status.success());
        let refused = budget(
            &site,
            &[
                "take",
                "--provider",
                "anthropic",
                "--consumer",
                "agent-2",
                "--wait-max",
                "0",
                "--json",
            ],
            "",
        );
        assert_eq!(
            refused.status.code(),
            Some(75),
            "{}",
            String::from_utf8_lossy(&refused.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&refused.stdout).expect("json");
        assert_eq!(
            (doc["go"].as_bool(), doc["kind"].as_str()),
            (Some(false), Some("secondary_rate_limited")),
            "{doc}"
        );
        let why = site
            .worklane()
            .args(["why", "--provider", "anthropic", "--json"])
            .env("ANTHROPIC_API_KEY", KEY)
            .output_gated()
            .expect("why");
        let doc: serde_json::Value = serde_json::from_slice(&why.stdout).expect("why --json");
        assert_eq!(doc["provider_quota"]["blocks"], true, "{doc}");
        assert!(
            doc["provider_quota"]["why"]
                .as_str()
                .is_some_and(|w| w.contains("429")),
            "{doc}"
        );
        let written = everything_written(&site);
        for out in [&seen, &take, &shown, &settled, &refused, &why] {
            assert!(!String::from_utf8_lossy(&out.stdout).contains(KEY));
            assert!(!String::from_utf8_lossy(&out.stderr).contains(KEY));
        }
        assert!(
            !written.contains(KEY),
            "the key is in no file of the slot directory"
        );
    }

    #[test]
    fn a_provider_of_ones_own_is_described_in_the_config() {
        let site = Site::new(Some(
            r#"{"budget_providers": {"mistral": {"dimensions": {"requests": {"limit": "x-ratelimit-limit-req", "remaining": "x-ratelimit-remaining-req", "reset": "x-ratelimit-reset-req", "format": "duration"}}}}}"#,
        ));
        let seen = budget(
            &site,
            &[
                "observe",
                "--provider",
                "mistral",
                "--token-env",
                "MISTRAL_KEY",
                "--status",
                "200",
                "--header",
                "x-ratelimit-remaining-req: 1",
                "--header",
                "x-ratelimit-reset-req: 1m0s",
            ],
            "",
        );
        assert!(
            seen.status.success(),
            "{}",
            String::from_utf8_lossy(&seen.stderr)
        );
        let take = |consumer: &str| {
            budget(
                &site,
                &[
                    "take",
                    "--provider",
                    "mistral",
                    "--token-env",
                    "MISTRAL_KEY",
                    "--consumer",
                    consumer,
                    "--wait-max",
                    "0",
                ],
                "",
            )
        };
        assert!(take("a").status.success(), "the one request left");
        assert_eq!(take("b").status.code(), Some(75), "none left now");
        assert!(site.slots().read_dir().expect("list").flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("mistral-budget-")
        }));
        let bad = Site::new(Some(
            r#"{"budget_providers": {"mistral": {"dimensions": {"requests": {"format": "unix"}}}}}"#,
        ));
        let out = budget(
            &bad,
            &[
                "take",
                "--provider",
                "mistral",
                "--token-env",
                "MISTRAL_KEY",
                "--consumer",
                "a",
            ],
            "",
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{err}");
        assert!(
            err.contains("budget_providers.mistral") && err.contains("config"),
            "names the file and the field: {err}"
        );
        let unknown = budget(
            &site,
            &[
                "take",
                "--provider",
                "nobody",
                "--token-env",
                "MISTRAL_KEY",
                "--consumer",
                "a",
            ],
            "",
        );
        assert_eq!(
            unknown.status.code(),
            Some(78),
            "{}",
            String::from_utf8_lossy(&unknown.stderr)
        );
    }
}

mod python_examples {
    //! The Python launcher and driver of examples/python, written from PROTOCOL.md with the
    //! standard library alone, against a real dispatcher.
    use super::*;

    #[test]
    fn a_python_launcher_and_driver_join_a_real_dispatcher() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python");
        let _dispatcher = super::dispatcher::start(&site, &[]);
        let slots = site.slots();
        let slots = slots.to_str().expect("utf-8");
        let out = site
            .command("python3")
            .arg(examples.join("launcher.py"))
            .args([slots, "py", "2", "python3"])
            .arg(examples.join("driver.py"))
            .args([
                slots,
                "sh",
                "-c",
                r#"echo "$WORKLANE_ATTEMPT" > "$LANE_T/ran"; sleep 0.2"#,
            ])
            .env("LANE_T", site.temp.path())
            .output_gated()
            .expect("python3 launcher.py");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(attempt.starts_with("a-"), "the attempt id: {attempt}");
        wait_until("the Python driver's command", || {
            std::fs::read_to_string(site.file("ran")).is_ok_and(|t| t.trim() == attempt)
        });
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            75,
            "the Python driver holds the one slot while its command runs"
        );
        wait_until("the lane to be free again", || {
            Command::new("flock")
                .arg("-n")
                .arg(site.slots().join(".lane-py.lock.flock"))
                .arg("true")
                .status_gated()
                .expect("flock")
                .success()
        });
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "and the slot"
        );
    }
}

/// The options a script replacing `flock -n F cmd` relies on: `--dir`, `-n`, `-w`, `-E`.
mod flock_like {
    use super::*;

    fn slots_dir_of(out: &Output) -> String {
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "slots --json prints JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        doc["dir"].as_str().expect("dir").to_owned()
    }

    #[test]
    fn dir_names_the_slot_directory_and_its_config_for_every_subcommand() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let other = site.file("other");
        std::fs::create_dir(&other).expect("other dir");
        // The option wins over the variable, before or after the subcommand.
        for args in [
            vec![
                "--dir",
                site.slots().to_str().expect("utf-8"),
                "slots",
                "--json",
            ],
            vec![
                "slots",
                "--json",
                "--dir",
                site.slots().to_str().expect("utf-8"),
            ],
        ] {
            let out = site
                .worklane()
                .env("AGENT_SLOTS_DIR", &other)
                .args(&args)
                .output_gated()
                .expect("slots");
            assert!(out.status.success(), "{args:?}: {out:?}");
            assert_eq!(
                slots_dir_of(&out),
                site.slots().display().to_string(),
                "{args:?}: --dir names the directory"
            );
        }
        // A relative path is taken from the current directory; its config.json is the cap.
        let mut holder = Running::new(
            site.worklane()
                .env_remove("AGENT_SLOTS_DIR")
                .current_dir(site.temp.path())
                .args(["--dir", "slots", "run", "--", "sh", "-c", HOLD])
                .env("K", "0")
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("spawn"),
        );
        wait_until("the holder", || site.file("up.0").exists());
        let out = site
            .worklane()
            .env_remove("AGENT_SLOTS_DIR")
            .args(["run", "-n", "--dir"])
            .arg(site.slots())
            .args(["--", "true"])
            .output_gated()
            .expect("run");
        assert_eq!(
            out.status.code(),
            Some(75),
            "the cap of 1 from <dir>/config.json is reached: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The command of a run finds the directory too (it is passed on as AGENT_SLOTS_DIR).
        let out = site
            .worklane()
            .env_remove("AGENT_SLOTS_DIR")
            .arg("--dir")
            .arg(site.slots())
            .args(["run", "--kind", "test", "--", "sh", "-c"])
            .arg(r#"printf %s "$AGENT_SLOTS_DIR""#)
            .output_gated()
            .expect("run");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            site.slots().display().to_string(),
            "the command sees the directory worklane used"
        );
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
    }

    #[test]
    fn short_options_and_the_conflict_exit_code_keep_a_flock_scripts_contract() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        assert_eq!(
            site.code(&["run", "-n", "--", "true"]),
            75,
            "-n is --no-wait"
        );
        assert_eq!(
            site.code(&["run", "-n", "-E", "1", "--", "true"]),
            1,
            "-E sets the busy code, as flock -n -E 1"
        );
        assert_eq!(
            site.code(&["run", "--conflict-exit-code", "3", "-w", "0", "--", "true"]),
            3,
            "-w is --timeout, and a timed-out wait exits with -E's code"
        );
        assert_eq!(
            site.code(&["run", "-E", "300", "-n", "--", "true"]),
            64,
            "an exit code is 0 to 255"
        );
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        assert_eq!(
            site.code(&["run", "-n", "-E", "1", "--", "sh", "-c", "exit 7"]),
            7,
            "a run that is not refused exits with its command's status"
        );
        site.code(&["stop-all", "test"]);
        assert_eq!(
            site.code(&["run", "-n", "-E", "1", "--", "true"]),
            69,
            "a STOP is no conflict: still 69"
        );
    }
}

/// `worklane config`: the config file in force, read and written from the command line.
mod config {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn stdout(site: &Site, args: &[&str]) -> String {
        let out = site.output(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn file(site: &Site) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(site.slots().join("config.json")).expect("read"))
            .expect("the written config is JSON")
    }

    #[test]
    fn an_unknown_key_is_a_config_error_naming_the_key_and_the_file() {
        let site = Site::new(Some(r#"{"max_agent": 3}"#));
        for args in [&["run", "--", "true"][..], &["config", "get", "max_agents"]] {
            let out = site.output(args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(78), "{args:?}: {err}");
            assert!(err.contains("`max_agent`"), "{args:?} names the key: {err}");
            assert!(
                err.contains(&site.slots().join("config.json").display().to_string()),
                "{args:?} names the file: {err}"
            );
        }
        // A view shows it, with the command that fixes it.
        let out = site.output(&["slots"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(
            text.contains("`max_agent`") && text.contains("fix: worklane config unset max_agent"),
            "slots names the key and the fix: {text}"
        );
        // A write keeps the file's other keys, so it refuses while the bad one is there...
        let out = site.output(&["config", "set", "max_agents", "3"]);
        assert_eq!(
            out.status.code(),
            Some(78),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            file(&site),
            serde_json::json!({"max_agent": 3}),
            "untouched"
        );
        // ...and unset removes it.
        assert!(stdout(&site, &["config", "unset", "max_agent"]).contains("removed"));
        stdout(&site, &["config", "set", "max_agents", "3"]);
        assert_eq!(stdout(&site, &["config", "get", "max_agents"]), "3\n");
    }

    #[test]
    fn set_replaces_the_file_keeping_its_other_keys_and_get_reads_it() {
        let site = Site::new(Some(r#"{"admission": "waiter", "max_test_runs": 3}"#));
        assert_eq!(
            stdout(&site, &["config", "get", "max_agents"]),
            "2\n",
            "the default"
        );
        assert_eq!(stdout(&site, &["config", "get", "admission"]), "waiter\n");
        assert_eq!(
            stdout(&site, &["config", "get", "env_allow_prefixes"]),
            "WORKLANE_,LANE_,GIT_AUTHOR_,GIT_COMMITTER_\n",
            "a list's default, comma-separated"
        );
        let said = stdout(&site, &["config", "set", "max_agents", "5"]);
        assert!(said.contains("max_agents = 5"), "{said}");
        stdout(&site, &["config", "set", "max_test_runs", "4"]);
        // What crosses from one user's enqueue to a driver is the dispatcher's own setting,
        // never the group-writable config's.
        let refused = site.output(&["config", "set", "env_secret_words", "TOKEN,KEY"]);
        assert_eq!(refused.status.code(), Some(64), "a usage error");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(
            said.contains("--env-secret-word"),
            "names the dispatcher's flag: {said}"
        );
        assert_eq!(
            file(&site),
            serde_json::json!({
                "admission": "waiter",
                "max_test_runs": 4,
                "max_agents": 5,
            }),
            "every other key kept"
        );
        let mode = std::fs::metadata(site.slots().join("config.json"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644, "readable by every harness");
        let names: Vec<String> = std::fs::read_dir(site.slots())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("config.json"))
            .collect();
        assert_eq!(
            names,
            ["config.json"],
            "no temp file left: replaced by rename"
        );
        assert_eq!(stdout(&site, &["config", "get", "max_agents"]), "5\n");
        let doc: serde_json::Value =
            serde_json::from_str(&stdout(&site, &["config", "get", "--json"])).expect("json");
        assert_eq!(doc["version"], 1);
        assert_eq!(doc["exists"], true);
        assert_eq!(doc["values"]["max_agents"], 5);
        assert_eq!(doc["values"]["max_test_runs"], 4);
        assert_eq!(
            doc["set"],
            serde_json::json!(["max_agents", "max_test_runs", "admission"])
        );
        let all = stdout(&site, &["config", "get"]);
        assert!(all.contains("max_agents = 5\n"), "{all}");
        assert!(
            all.contains(
                "env_allow_prefixes = WORKLANE_,LANE_,GIT_AUTHOR_,GIT_COMMITTER_ (default)"
            ),
            "{all}"
        );
        // Bad values are usage errors and write nothing; unknown keys are clap's.
        let before = file(&site);
        for args in [
            &["config", "set", "max_agents", "0"][..],
            &["config", "set", "max_test_runs", "9"],
            &["config", "set", "admission", "queue"],
            &["config", "set", "env_allow_prefixes", "A,,B"],
            &["config", "set", "max_agent", "3"],
            &["config", "get", "nope"],
        ] {
            assert_eq!(site.code(args), 64, "{args:?}");
        }
        assert_eq!(file(&site), before, "nothing written by a refused set");
        // The cap written is the cap in force.
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&stdout(&site, &["slots", "--json"]))
                .expect("json")["max_agents"],
            5
        );
    }

    #[test]
    fn slots_says_which_config_file_is_in_force() {
        let site = Site::new(None);
        let path = site.slots().join("config.json").display().to_string();
        let doc: serde_json::Value =
            serde_json::from_str(&stdout(&site, &["slots", "--json"])).expect("json");
        assert_eq!(
            doc["config"],
            serde_json::json!({"path": path, "exists": false})
        );
        let text = stdout(&site, &["slots"]);
        assert!(
            text.contains(&format!(
                "config: {path} (absent: the defaults are in force)"
            )),
            "{text}"
        );
        // AGENT_SLOTS_CONFIG names another file: config set writes there, slots names it.
        let caps = site.file("caps.json");
        let out = site
            .worklane()
            .env("AGENT_SLOTS_CONFIG", &caps)
            .args(["config", "set", "max_agents", "4"])
            .output_gated()
            .expect("config set");
        assert!(out.status.success(), "{out:?}");
        assert!(
            !site.slots().join("config.json").exists(),
            "not the slot directory's"
        );
        let out = site
            .worklane()
            .env("AGENT_SLOTS_CONFIG", &caps)
            .args(["slots"])
            .output_gated()
            .expect("slots");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("config: {}\n", caps.display())),
            "{text}"
        );
        assert!(text.contains("agents: 0 of 4 held"), "{text}");
    }
}

/// `--status-fd N`: worklane's own events as JSON lines, apart from the command's output.
mod status_fd {
    use super::*;

    /// `sh -c 'exec worklane ARGS 3>&1 1>&2'`: descriptor 3 is the pipe the test reads as
    /// stdout; worklane's (and the command's) stdout goes to stderr.
    fn through_fd_3(site: &Site) -> Command {
        let mut cmd = site.command("sh");
        cmd.args(["-c", r#"exec "$0" "$@" 3>&1 1>&2"#])
            .arg(worklane_bin())
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .env("T", site.temp.path())
            .stdin(Stdio::null());
        cmd
    }

    /// Runs worklane with the status on descriptor 3: its exit status, the events, stderr.
    fn with_status(site: &Site, args: &[&str]) -> (ExitStatus, Vec<serde_json::Value>, String) {
        let out = through_fd_3(site)
            .args(args)
            .output_gated()
            .expect("worklane");
        let events = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect();
        (
            out.status,
            events,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Whether the command found descriptor 3 open (printed on its stdout, here stderr).
    const PROBE: &str =
        r#"if { true >&3; } 2>/dev/null; then echo "fd3=open"; else echo "fd3=closed"; fi"#;

    #[test]
    fn a_run_says_taken_then_end_and_its_command_never_gets_the_descriptor() {
        let site = Site::new(None);
        let script = format!("{PROBE}; exit 7");
        let (status, events, err) = with_status(
            &site,
            &["run", "--status-fd", "3", "--", "sh", "-c", &script],
        );
        assert_eq!(status.code(), Some(7), "the command's status: {err}");
        assert_eq!(events.len(), 2, "taken and end: {events:?}");
        assert_eq!(events[0]["version"], 1);
        assert_eq!(events[0]["event"], "taken");
        assert_eq!(events[0]["kind"], "agent");
        assert_eq!(events[0]["slot"], "agent-0.lock");
        assert!(events[0]["epoch"].as_u64().is_some(), "{events:?}");
        assert_eq!(
            events[1],
            serde_json::json!({"version": 1, "event": "end", "exit": 7, "halted_by": null})
        );
        assert!(err.contains("fd3=closed"), "not passed on: {err}");

        // A command ended by a signal: worklane ends by it too, and says so first.
        let (status, events, _) = with_status(
            &site,
            &[
                "run",
                "--kind",
                "test",
                "--status-fd",
                "3",
                "--",
                "sh",
                "-c",
                "kill -TERM $$",
            ],
        );
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(15), "ends by the command's signal");
        assert_eq!(events[0]["kind"], "test");
        assert_eq!(
            events.last(),
            Some(
                &serde_json::json!({"version": 1, "event": "end", "exit": 143, "halted_by": "signal"})
            )
        );
    }

    #[test]
    fn refusals_and_errors_are_told_apart_from_the_commands_status() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        for (args, code) in [
            (&["run", "-n", "--status-fd", "3", "--", "true"][..], 75),
            (
                &["run", "-n", "-E", "1", "--status-fd", "3", "--", "true"],
                1,
            ),
        ] {
            let (status, events, err) = with_status(&site, args);
            assert_eq!(status.code(), Some(code), "{args:?}: {err}");
            assert_eq!(events.len(), 1, "{events:?}");
            assert_eq!(events[0]["event"], "refused", "{events:?}");
            assert_eq!(events[0]["exit"], code, "{events:?}");
            assert!(
                events[0]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("at cap")),
                "{events:?}"
            );
        }
        // A usage error after the descriptor was claimed is worklane's, not the command's.
        let (status, events, _) = with_status(
            &site,
            &["run", "--limit", "1m", "--status-fd", "3", "--", "true"],
        );
        assert_eq!(status.code(), Some(64));
        assert_eq!(events[0]["event"], "error", "{events:?}");
        assert_eq!(events[0]["exit"], 64, "{events:?}");
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        assert_eq!(site.code(&["stop-all", "test"]), 0);
        let (status, events, _) = with_status(&site, &["run", "--status-fd", "3", "--", "true"]);
        assert_eq!(status.code(), Some(69));
        assert_eq!(events[0]["event"], "refused");
        assert_eq!(events[0]["exit"], 69);
    }

    #[test]
    fn a_descriptor_that_is_not_open_for_writing_is_a_usage_error_naming_it() {
        let site = Site::new(None);
        for (args, says) in [
            (
                &["run", "--status-fd", "9", "--", "true"][..],
                "--status-fd 9: it is not open",
            ),
            (&["run", "--status-fd", "1", "--", "true"], "--status-fd 1"),
            (
                &[
                    "lease",
                    "run",
                    "--role",
                    "r",
                    "--status-fd",
                    "7",
                    "--",
                    "true",
                ],
                "--status-fd 7: it is not open",
            ),
        ] {
            let out = site.output(args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
            assert!(err.contains(says), "{args:?}: {err}");
        }
        let out = site
            .command("sh")
            .args(["-c", r#"exec "$0" "$@" 3</dev/null"#])
            .arg(worklane_bin())
            .args(["run", "--status-fd", "3", "--", "true"])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .output_gated()
            .expect("worklane");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{err}");
        assert!(err.contains("for reading only"), "{err}");
        assert!(
            !site.slots().join("agent-0.lock").exists(),
            "nothing was taken"
        );
    }

    #[test]
    fn a_lease_run_says_taken_refused_and_halted_by_stop() {
        let site = Site::new(None);
        let (status, events, err) = with_status(
            &site,
            &[
                "lease",
                "run",
                "--role",
                "r",
                "--status-fd",
                "3",
                "--",
                "sh",
                "-c",
                PROBE,
            ],
        );
        assert!(status.success(), "{err}");
        assert_eq!(events[0]["event"], "taken");
        assert_eq!(events[0]["kind"], "role");
        assert_eq!(events[0]["slot"], "role-r.lease");
        assert_eq!(events[1]["exit"], 0);
        assert!(err.contains("fd3=closed"), "not passed on: {err}");

        let mut holder = Running::new(
            through_fd_3(&site)
                .args([
                    "lease",
                    "run",
                    "--role",
                    "r",
                    "--status-fd",
                    "3",
                    "--",
                    "sh",
                    "-c",
                ])
                .arg(r#"touch "$T/up.0"; exec sleep 600"#)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn_gated()
                .expect("spawn"),
        );
        wait_until("the role holder", || site.file("up.0").exists());
        let (status, events, _) = with_status(
            &site,
            &[
                "lease",
                "run",
                "--role",
                "r",
                "--status-fd",
                "3",
                "--",
                "true",
            ],
        );
        assert_eq!(status.code(), Some(75));
        assert_eq!(events[0]["event"], "refused", "{events:?}");
        assert_eq!(events[0]["exit"], 75, "{events:?}");
        assert_eq!(site.code(&["stop-all", "test"]), 0);
        let status = wait_exit(&mut holder, "the halted holder");
        assert_eq!(status.code(), Some(143));
        let mut out = String::new();
        std::io::Read::read_to_string(&mut holder.stdout.take().expect("stdout"), &mut out)
            .expect("read");
        let last: serde_json::Value =
            serde_json::from_str(out.lines().last().expect("an event")).expect("json");
        assert_eq!(
            last,
            serde_json::json!({"version": 1, "event": "end", "exit": 143, "halted_by": "stop"})
        );
    }

    #[test]
    fn a_waiting_run_says_so_once_then_taken() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        let file = site.file("status");
        let mut waiter = Running::new(
            site.command("sh")
                .args(["-c", r#"exec "$0" "$@" 3>"$T/status""#])
                .arg(worklane_bin())
                .args(["run", "--status-fd", "3", "--", "true"])
                .env("AGENT_SLOTS_DIR", site.slots())
                .env("WORKLANE_STATE_DIR", site.state())
                .env("T", site.temp.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn_gated()
                .expect("spawn"),
        );
        let read = || -> Vec<serde_json::Value> {
            std::fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        };
        wait_until("the waiting event", || !read().is_empty());
        let first = read();
        assert_eq!(first[0]["event"], "waiting", "{first:?}");
        assert_eq!(first[0]["kind"], "agent", "{first:?}");
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        assert!(wait_exit(&mut waiter, "the waiter").success());
        let all: Vec<String> = read()
            .iter()
            .map(|e| e["event"].as_str().unwrap_or("?").to_owned())
            .collect();
        assert_eq!(all, ["waiting", "taken", "end"], "waiting is said once");
    }
}

/// `lease run --wait/--timeout`, `budget take --wait-max` and `budget observe --headers-file`.
mod waits {
    use super::*;

    const TOKEN: &str = "ghp_cli_wait_token_not_real";

    fn events(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|e| e["event"].as_str().unwrap_or("?").to_owned())
            .collect()
    }

    /// `worklane lease run --wait ... --status-fd 3 -- true`, its events in `$T/<name>`.
    fn waiter(site: &Site, name: &str, extra: &[&str]) -> Running {
        Running::new(
            site.command("sh")
                .args(["-c", r#"exec "$0" "$@" 3>"$T/$N""#])
                .arg(worklane_bin())
                .args(["lease", "run", "--role", "r", "--status-fd", "3"])
                .args(extra)
                .args(["--", "true"])
                .env("AGENT_SLOTS_DIR", site.slots())
                .env("WORKLANE_STATE_DIR", site.state())
                .env("T", site.temp.path())
                .env("N", name)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("spawn"),
        )
    }

    #[test]
    fn lease_run_waits_for_a_held_role_until_it_is_free_or_the_timeout() {
        let site = Site::new(None);
        let mut holder = site.spawn(&["lease", "run", "--role", "r"], HOLD, "0");
        wait_until("the role holder", || site.file("up.0").exists());
        assert_eq!(
            site.code(&["lease", "run", "--role", "r", "--", "true"]),
            75,
            "without --wait a held role refuses at once, as before"
        );
        assert_eq!(
            site.code(&[
                "lease",
                "run",
                "--role",
                "r",
                "--timeout",
                "0",
                "--",
                "true"
            ]),
            75,
            "a timeout of 0 tries once"
        );
        let mut timed = waiter(&site, "timed", &["-w", "300ms"]);
        let status = wait_exit(&mut timed, "the timed-out waiter");
        assert_eq!(status.code(), Some(75), "gave up after its timeout");
        assert_eq!(events(&site.file("timed")), ["waiting", "refused"]);

        let mut patient = waiter(&site, "patient", &["--wait"]);
        wait_until("the waiter to wait", || {
            events(&site.file("patient")) == ["waiting"]
        });
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        let status = wait_exit(&mut patient, "the waiter");
        assert!(status.success(), "took the role once it was free: {status}");
        assert_eq!(
            events(&site.file("patient")),
            ["waiting", "taken", "end"],
            "waited, then held it"
        );
    }

    #[test]
    fn a_stop_refuses_a_waiting_lease_run_with_69() {
        let site = Site::new(None);
        let _holder = site.spawn(&["lease", "run", "--role", "r"], HOLD, "0");
        wait_until("the role holder", || site.file("up.0").exists());
        let mut waiting = waiter(&site, "w", &["--wait"]);
        wait_until("the waiter to wait", || {
            events(&site.file("w")) == ["waiting"]
        });
        assert_eq!(site.code(&["stop-all", "test"]), 0);
        let status = wait_exit(&mut waiting, "the waiter");
        assert_eq!(status.code(), Some(69), "STOP refuses a waiter too");
        assert_eq!(events(&site.file("w")), ["waiting", "refused"]);
    }

    fn budget(site: &Site, args: &[&str]) -> Output {
        site.worklane()
            .arg("budget")
            .args(args)
            .env("GITHUB_TOKEN", TOKEN)
            .output_gated()
            .expect("run worklane budget")
    }

    fn observe_dump(site: &Site, dump: &str) -> Output {
        let path = site.file("headers");
        std::fs::write(&path, dump).expect("dump");
        budget(
            site,
            &["observe", "--headers-file", path.to_str().expect("utf-8")],
        )
    }

    fn now_s() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
    }

    #[test]
    fn take_with_wait_max_0_refuses_at_once_with_retry_at() {
        let site = Site::new(None);
        // A 429 with Retry-After, as curl -D writes it (CRLF), after a redirect.
        let out = observe_dump(
            &site,
            "HTTP/1.1 302 Found\r\nLocation: /x\r\n\r\nHTTP/2 429 \r\nretry-after: 600\r\n\r\n",
        );
        assert!(out.status.success(), "{out:?}");
        let out = budget(
            &site,
            &["take", "--consumer", "c", "--wait-max", "0", "--json"],
        );
        assert_eq!(out.status.code(), Some(75), "{out:?}");
        let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(said["kind"], "secondary_rate_limited", "{said}");
        let slots: serde_json::Value =
            serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("slots");
        assert_eq!(
            said["retry_at"], slots["budgets"][0]["paused_until"],
            "retry when the pause ends: {said}"
        );
        assert!(
            said["retry_at"].as_str().is_some_and(|t| t.ends_with('Z')),
            "RFC 3339: {said}"
        );
    }

    #[test]
    fn a_header_dump_is_observed_from_a_file_or_stdin() {
        let site = Site::new(None);
        let reset = now_s() + 600;
        let dump = format!(
            "HTTP/1.1 200 OK\nX-RateLimit-Limit: 5000\nX-RateLimit-Remaining: 1\nX-RateLimit-Reset: {reset}\n\n"
        );
        let mut child = site
            .worklane()
            .args(["budget", "observe", "--headers-file", "-"])
            .env("GITHUB_TOKEN", TOKEN)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn");
        std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), dump.as_bytes())
            .expect("write the dump");
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success(), "{out:?}");
        let out = budget(&site, &["take", "--consumer", "c", "--json"]);
        let took: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(took["left"], 0, "the window the dump said: {took}");
        let out = budget(
            &site,
            &["take", "--consumer", "c", "--wait-max", "0", "--json"],
        );
        assert_eq!(out.status.code(), Some(75), "{out:?}");
        let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(said["kind"], "rate_limited", "{said}");
        let slots: serde_json::Value =
            serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("slots");
        assert_eq!(
            said["retry_at"], slots["budgets"][0]["resources"][0]["reset"],
            "retry at the window's reset: {said}"
        );
        // Bad input is a usage error.
        let out = observe_dump(&site, "X-RateLimit-Remaining: 3\n");
        assert_eq!(out.status.code(), Some(64), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("no status line"));
        assert_eq!(
            budget(
                &site,
                &[
                    "observe",
                    "--status",
                    "200",
                    "--header",
                    "X-RateLimit-Remaining: 1",
                    "--headers-file",
                    "-"
                ]
            )
            .status
            .code(),
            Some(64),
            "one source of headers"
        );
        assert_eq!(
            budget(&site, &["observe"]).status.code(),
            Some(64),
            "a status is needed"
        );
    }
}

/// `worklane man`: one page per command, as `cargo xtask man` installs them.
mod man {
    use super::*;

    #[test]
    fn man_all_writes_a_page_per_command_and_man_prints_one() {
        let site = Site::new(None);
        let dir = site.file("man");
        let out = site.output(&["man", "--all", dir.to_str().expect("utf-8")]);
        assert!(out.status.success(), "{out:?}");
        let mut written: Vec<String> = std::fs::read_dir(&dir)
            .expect("the pages' directory")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        written.sort();
        let listed = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            listed.lines().count(),
            written.len(),
            "each page listed: {listed}"
        );
        for name in [
            "worklane.1",
            "worklane-run.1",
            "worklane-lease.1",
            "worklane-lease-run.1",
            "worklane-config-set.1",
            "worklane-budget-observe.1",
            "worklane-queue-full-run.1",
            "worklane-man.1",
        ] {
            assert!(written.iter().any(|n| n == name), "{name} in {written:?}");
        }
        let page = std::fs::read_to_string(dir.join("worklane-run.1")).expect("run's page");
        assert!(page.contains(".TH worklane-run 1"), "{page}");
        assert!(page.contains("status\\-fd"), "run's own options: {page}");
        let version = env!("CARGO_PKG_VERSION");
        for name in &written {
            let page = std::fs::read_to_string(dir.join(name)).expect("a page");
            let title = page
                .lines()
                .find(|l| l.starts_with(".TH "))
                .unwrap_or_else(|| panic!("{name} has a title: {page}"));
            assert!(
                title.contains(&format!("\"worklane {version}\"")),
                "{name}'s footer is worklane's version, as the top page's: {title}"
            );
            if name != "worklane.1" {
                assert!(
                    page.contains(".SH \"EXIT STATUS\"\n.TP\n\\fB"),
                    "{name} lists its exit codes: {page}"
                );
            }
        }
        let stop_all = std::fs::read_to_string(dir.join("worklane-stop-all.1")).expect("page");
        let codes = stop_all
            .split(".SH \"EXIT STATUS\"")
            .nth(1)
            .expect("EXIT STATUS");
        assert!(
            codes.contains("\\fB0\\fR\nSTOP is in force") && codes.contains("\\fB78\\fR"),
            "stop-all's own codes: {codes}"
        );

        let out = site.output(&["man", "lease", "run"]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            out.stdout,
            std::fs::read(dir.join("worklane-lease-run.1")).expect("page"),
            "`man lease run` prints the page --all writes"
        );
        let out = site.output(&["man", "no-such"]);
        assert_eq!(out.status.code(), Some(64), "{out:?}");
    }
}

/// `--fleet` against a real 3-member etcd cluster that each test starts on loopback and stops
/// (`cargo test -p worklane --features fleet`; CI runs it).
/// `run --jobs`: a build's jobserver backed by the machine's job slots.
mod jobs;

/// `run --weight` and the config's `shares`.
mod weights;

/// `worklane proxy`.
mod proxy;

/// What a member of the slot directory's group cannot do to a root dispatcher and its
/// clients (issue 32's reproductions).
mod trust;

/// The dispatcher's bounds: what a waiting row costs, and what one client can hold up (issue
/// 33).
mod bounds;

/// docs/json.md against the real output: each documented example has the same keys and value
/// types, recursively, as the document its command prints (values may differ), so a schema
/// that drifts from the code fails here.
mod json_docs {
    use super::*;
    use serde_json::Value;
    use std::collections::BTreeMap;

    /// The examples of docs/json.md by name: each `<!-- example: NAME -->` and the documents
    /// of the fenced block that follows it (one, or one per line for a stream of events).
    pub(super) fn examples() -> BTreeMap<String, Vec<Value>> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/json.md");
        let text = std::fs::read_to_string(path).expect("docs/json.md");
        let mut out = BTreeMap::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("<!-- example: ") {
            rest = &rest[at + "<!-- example: ".len()..];
            let end = rest.find(" -->").expect("an example's name ends with -->");
            let name = rest[..end].to_owned();
            let open = rest
                .find("```json\n")
                .expect("a ```json block after the name");
            let body = &rest[open + "```json\n".len()..];
            let close = body.find("\n```").expect("the block closes");
            let docs: Vec<Value> = serde_json::Deserializer::from_str(&body[..close])
                .into_iter()
                .collect::<Result<_, _>>()
                .unwrap_or_else(|e| panic!("example {name:?} is JSON: {e}"));
            assert!(!docs.is_empty(), "example {name:?} has a document");
            assert!(
                out.insert(name.clone(), docs).is_none(),
                "example {name:?} is documented once"
            );
            rest = &body[close..];
        }
        out
    }

    fn kind(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    /// Whether `real` has the shape of `example`: the same keys, the same types, recursively.
    fn same_shape(example: &Value, real: &Value, at: &str) -> Result<(), String> {
        match (example, real) {
            (Value::Object(e), Value::Object(r)) => {
                let missing: Vec<_> = e.keys().filter(|k| !r.contains_key(*k)).collect();
                let extra: Vec<_> = r.keys().filter(|k| !e.contains_key(*k)).collect();
                if !missing.is_empty() || !extra.is_empty() {
                    return Err(format!(
                        "{at}: documented but not printed {missing:?}, printed but not \
                         documented {extra:?}"
                    ));
                }
                e.iter()
                    .try_for_each(|(k, v)| same_shape(v, &r[k], &format!("{at}.{k}")))
            }
            (Value::Array(e), Value::Array(r)) => all_match(e, r, &format!("{at}[]")),
            _ if kind(example) == kind(real) => Ok(()),
            _ => Err(format!(
                "{at}: documented as {} ({example}), printed as {} ({real})",
                kind(example),
                kind(real)
            )),
        }
    }

    /// Every printed element has the shape of some documented one, and every documented one
    /// is printed in some element (so an example cannot drift unseen).
    fn all_match(examples: &[Value], reals: &[Value], at: &str) -> Result<(), String> {
        for real in reals {
            let errors: Vec<String> = examples
                .iter()
                .filter_map(|e| same_shape(e, real, at).err())
                .collect();
            if errors.len() == examples.len() {
                return Err(format!(
                    "{at}: {real} matches no documented element: {}",
                    if errors.is_empty() {
                        "the example is empty".to_owned()
                    } else {
                        errors.join("; ")
                    }
                ));
            }
        }
        for example in examples {
            if !reals.iter().any(|r| same_shape(example, r, at).is_ok()) {
                return Err(format!(
                    "{at}: the documented {example} is not printed here: {reals:?}"
                ));
            }
        }
        Ok(())
    }

    /// Checks `reals` against the example `name`.
    pub(super) fn check(examples: &BTreeMap<String, Vec<Value>>, name: &str, reals: &[Value]) {
        let example = examples
            .get(name)
            .unwrap_or_else(|| panic!("docs/json.md documents {name:?}"));
        if let Err(e) = all_match(example, reals, name) {
            panic!("docs/json.md drifted from `worklane {name}`: {e}");
        }
    }

    fn doc(out: &Output, what: &str) -> Value {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{what} prints one JSON document ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    fn lines(text: &[u8]) -> Vec<Value> {
        String::from_utf8_lossy(text)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect()
    }

    const TOKEN: &str = "ghp_json_docs_token_not_real";

    /// `worklane ARGS` with the status on descriptor 3, read back as the events.
    fn status_events(site: &Site, args: &[&str]) -> Vec<Value> {
        let out = site
            .command("sh")
            .args(["-c", r#"exec "$0" "$@" 3>&1 1>&2"#])
            .arg(worklane_bin())
            .args(args)
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .output_gated()
            .expect("worklane");
        lines(&out.stdout)
    }

    #[test]
    fn every_documented_example_has_the_shape_of_the_real_output() {
        let examples = examples();
        let mut checked = Vec::new();
        let mut check = |name: &str, reals: Vec<Value>| {
            check(&examples, name, &reals);
            checked.push(name.to_owned());
        };
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        // A stray directory where the first agent guard belongs: a problem, skipped.
        std::fs::create_dir(site.slots().join(".agent-0.lock.flock")).expect("stray");
        let mut holder = site.spawn(&["run", "--owner", "harness"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        let mut role = site.spawn(&["lease", "run", "--role", "reviewer"], HOLD, "r");
        wait_until("the role holder", || site.file("up.r").exists());
        let budget = |args: &[&str]| {
            site.worklane()
                .arg("budget")
                .args(args)
                .env("GITHUB_TOKEN", TOKEN)
                .output_gated()
                .expect("budget")
        };
        let reset = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
            + 600;
        let observed = budget(&[
            "observe",
            "--status",
            "200",
            "--header",
            "X-RateLimit-Limit: 5000",
            "--header",
            "X-RateLimit-Remaining: 4999",
            "--header",
            &format!("X-RateLimit-Reset: {reset}"),
        ]);
        assert!(observed.status.success(), "{observed:?}");
        let taken = budget(&["take", "--consumer", "ci", "--json"]);
        assert!(taken.status.success(), "{taken:?}");
        check("budget take --json", vec![doc(&taken, "budget take")]);
        // A waiter in line, its events on descriptor 3 in a file.
        let mut waiter = Running::new(
            site.command("sh")
                .args(["-c", r#"exec "$0" "$@" 3>"$T/events""#])
                .arg(worklane_bin())
                .args(["run", "--owner", "waiter", "--status-fd", "3", "--", "true"])
                .env("AGENT_SLOTS_DIR", site.slots())
                .env("WORKLANE_STATE_DIR", site.state())
                .env_remove("AGENT_SLOTS_CONFIG")
                .env("T", site.temp.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn_gated()
                .expect("spawn the waiter"),
        );
        wait_until("the waiter in line", || {
            std::fs::read(site.file("events")).is_ok_and(|e| !e.is_empty())
        });

        let slots = site.output(&["slots", "--json"]);
        check("slots --json", vec![doc(&slots, "slots --json")]);
        let why = site
            .worklane()
            .args(["why", "--role", "reviewer", "--json"])
            .env("GITHUB_TOKEN", TOKEN)
            .output_gated()
            .expect("why");
        assert_eq!(why.status.code(), Some(75), "{why:?}");
        check("why --json", vec![doc(&why, "why --json")]);
        let refused = site.output(&["lease", "run", "--role", "reviewer", "--json", "--", "true"]);
        assert_eq!(refused.status.code(), Some(75), "{refused:?}");
        check("lease run --json", vec![doc(&refused, "lease run --json")]);
        let shown = budget(&["show", "--json"]);
        check(
            "budget show --json",
            vec![doc(&shown, "budget show --json")],
        );
        let config = site.output(&["config", "get", "--json"]);
        check("config get --json", vec![doc(&config, "config get --json")]);
        let reconciled =
            site.output(&["reconcile", "a-00000000000000000000000000000000", "--json"]);
        check(
            "reconcile --json",
            vec![doc(&reconciled, "reconcile --json")],
        );
        let mut events = status_events(&site, &["run", "-n", "--status-fd", "3", "--", "true"]);
        events.extend(status_events(
            &site,
            &["run", "--limit", "1m", "--status-fd", "3", "--", "true"],
        ));

        // A credential paused by a secondary limit: its take is refused.
        let paused = site
            .worklane()
            .args([
                "budget",
                "observe",
                "--status",
                "429",
                "--header",
                "Retry-After: 60",
            ])
            .env("GITHUB_TOKEN", "ghp_json_docs_paused_not_real")
            .output_gated()
            .expect("observe");
        assert!(paused.status.success(), "{paused:?}");
        let refused_take = site
            .worklane()
            .args([
                "budget",
                "take",
                "--consumer",
                "ci",
                "--wait-max",
                "0",
                "--json",
            ])
            .env("GITHUB_TOKEN", "ghp_json_docs_paused_not_real")
            .output_gated()
            .expect("take");
        assert_eq!(refused_take.status.code(), Some(75), "{refused_take:?}");
        check(
            "budget take --json (refused)",
            vec![doc(&refused_take, "budget take --json")],
        );

        // The holder goes: the waiter takes the slot, runs and ends.
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        assert!(wait_exit(&mut waiter, "the waiter").success());
        let mut all = lines(&std::fs::read(site.file("events")).expect("events"));
        all.extend(events);
        check("run --status-fd", all);
        std::fs::write(site.file("release.r"), b"").expect("release");
        assert!(wait_exit(&mut role, "the role holder").success());

        // A queued full run, running.
        let queued = site
            .worklane()
            .env("TMPDIR", site.temp.path())
            .env("K", "1")
            .args(["queue", "full-run", "--", "sh", "-c", HOLD])
            .output_gated()
            .expect("queue");
        assert!(queued.status.success(), "{queued:?}");
        wait_until("the queued run", || site.file("up.1").exists());
        let listed = site.output(&["queue", "ls", "--json"]);
        check("queue ls --json", vec![doc(&listed, "queue ls --json")]);
        std::fs::write(site.file("release.1"), b"").expect("release");
        wait_until("the queued run's end", || site.code(&["idle"]) == 0);

        // The operator's commands: a drain, a full run queued behind it and cancelled, the
        // drain ended; a STOP that halts a run, lifted.
        let drained = site.output(&["drain", "--json", "--until", "30m", "--to", "1.2.3"]);
        check("drain --json", vec![doc(&drained, "drain --json")]);
        let queued = site
            .worklane()
            .env("TMPDIR", site.temp.path())
            .args(["queue", "full-run", "--json", "--", "true"])
            .output_gated()
            .expect("queue");
        let queued = doc(&queued, "queue full-run --json");
        check("queue full-run --json", vec![queued.clone()]);
        let id = queued["id"].as_str().expect("an id").to_owned();
        wait_until("the queued run in line", || {
            doc(&site.output(&["queue", "ls", "--json"]), "queue ls")["full_runs"]
                .as_array()
                .is_some_and(|runs| runs.iter().any(|r| r["id"] == id.as_str()))
        });
        let cancelled = site.output(&["queue", "cancel", "--json", &id]);
        check(
            "queue cancel --json",
            vec![doc(&cancelled, "queue cancel --json")],
        );
        let undrained = site.output(&["undrain", "--json"]);
        check("undrain --json", vec![doc(&undrained, "undrain --json")]);
        let mut halted = site.spawn(&["run", "--owner", "harness"], HOLD, "s");
        wait_until("the run to halt", || site.file("up.s").exists());
        let stopped = site.output(&["stop-all", "--json", "maintenance", "window"]);
        check("stop-all --json", vec![doc(&stopped, "stop-all --json")]);
        assert_eq!(wait_exit(&mut halted, "the halted run").code(), Some(143));
        let resumed = site.output(&["resume-all", "--json"]);
        check(
            "resume-all --json",
            vec![doc(&resumed, "resume-all --json")],
        );
        // What happened, from the journal: the runs, the STOP that halted one, its lifting,
        // the refused budget take.
        let journal = site.output(&[
            "events",
            "--json",
            "--kind",
            "slot-taken",
            "--kind",
            "slot-released",
            "--kind",
            "stop",
            "--kind",
            "halt",
            "--kind",
            "resume",
            "--kind",
            "budget-refused",
        ]);
        assert!(journal.status.success(), "{journal:?}");
        check("events --json", lines(&journal.stdout));

        // A budget state that is not JSON and a config that is not JSON either.
        let broken = Site::new(Some(r#"{"max_agents": "4""#));
        std::fs::write(
            broken.slots().join("github-budget-5e1d2a4c9b7f3e60.json"),
            b"not json",
        )
        .expect("write");
        let shown = broken.output(&["budget", "show", "--json"]);
        check(
            "budget show --json (problems)",
            vec![doc(&shown, "budget show --json")],
        );

        // Every documented example is checked here, but the fleet's (`fleet::`, with etcd).
        let mut documented: Vec<String> = examples.keys().cloned().collect();
        documented.retain(|name| name != "fleet status --json");
        checked.sort();
        assert_eq!(
            checked, documented,
            "each example of docs/json.md is checked"
        );
    }
}

#[cfg(feature = "fleet")]
mod fleet {
    use super::*;
    use worklane_testkit::etcd::Cluster;

    /// `worklane ARGS -- sh -c SCRIPT` in the background with the fleet's endpoints.
    fn spawn(site: &Site, cluster: &Cluster, args: &[&str], script: &str, key: &str) -> Running {
        Running::new(
            site.worklane()
                .env("WORKLANE_FLEET", cluster.endpoints())
                .args(args)
                .args(["--", "sh", "-c", script])
                .env("K", key)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("spawn worklane"),
        )
    }

    fn fleet(site: &Site, cluster: &Cluster, args: &[&str]) -> Output {
        site.worklane()
            .env("WORKLANE_FLEET", cluster.endpoints())
            .args(args)
            .output_gated()
            .expect("run worklane")
    }

    const HOLD_EPOCH: &str = r#"echo "$WORKLANE_EPOCH $WORKLANE_HOST_EPOCH" > "$T/epoch.$K"; touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#;

    #[test]
    fn two_hosts_share_the_fleet_cap_and_each_holder_gets_the_fleet_epoch() {
        let cluster = Cluster::start();
        let hosts = [
            Site::new(Some(r#"{"max_agents": 3}"#)),
            Site::new(Some(r#"{"max_agents": 3}"#)),
        ];
        let set = fleet(
            &hosts[0],
            &cluster,
            &["fleet", "set-cap", "--pool", "agents", "2"],
        );
        assert!(set.status.success(), "{set:?}");
        let mut runs: Vec<(usize, String, Running)> = Vec::new();
        for i in 0..6 {
            let host = i % 2;
            let key = i.to_string();
            let run = spawn(&hosts[host], &cluster, &["run", "-n"], HOLD_EPOCH, &key);
            runs.push((host, key, run));
        }
        // Each run either holds (its command is up) or was refused (it exited).
        let mut refused = Vec::new();
        for (host, key, run) in &mut runs {
            let site = &hosts[*host];
            wait_until("each run to hold or be refused", || {
                site.file(&format!("up.{key}")).exists() || matches!(run.try_wait(), Ok(Some(_)))
            });
            if let Ok(Some(status)) = run.try_wait() {
                refused.push(status.code());
            }
        }
        assert_eq!(
            refused.len(),
            4,
            "exactly the fleet's cap of 2 hold: {refused:?}"
        );
        assert!(refused.iter().all(|c| *c == Some(75)), "busy: {refused:?}");
        let status = fleet(&hosts[1], &cluster, &["fleet", "status", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
        assert_eq!(doc["cap"], 2, "{doc}");
        assert_eq!(doc["held"], 2, "{doc}");
        let mut epochs = Vec::new();
        for (host, key, run) in &mut runs {
            let site = &hosts[*host];
            if site.file(&format!("up.{key}")).exists() {
                let text =
                    std::fs::read_to_string(site.file(&format!("epoch.{key}"))).expect("epoch");
                let mut parts = text.split_whitespace();
                let fleet_epoch: i64 = parts
                    .next()
                    .and_then(|e| e.parse().ok())
                    .expect("fleet epoch");
                assert!(parts.next().is_some(), "the slot's own epoch too: {text:?}");
                assert!(
                    doc["keys"]
                        .as_array()
                        .expect("keys")
                        .iter()
                        .any(|k| k["epoch"] == fleet_epoch && k["holds"] == true),
                    "WORKLANE_EPOCH is the fleet key's create revision: {fleet_epoch} in {doc}"
                );
                epochs.push(fleet_epoch);
                std::fs::write(site.file(&format!("release.{key}")), b"").expect("release");
                assert!(wait_exit(run, "a holder").success());
            }
        }
        assert_eq!(epochs.len(), 2);
        let after = fleet(&hosts[0], &cluster, &["fleet", "status", "--json"]);
        let after: serde_json::Value = serde_json::from_slice(&after.stdout).expect("json");
        assert_eq!(after["held"], 0, "both released: {after}");
    }

    #[test]
    fn a_pool_without_a_cap_or_an_unreachable_fleet_refuses_and_frees_the_host_slot() {
        let cluster = Cluster::start();
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let out = fleet(&site, &cluster, &["run", "--pool", "nocap", "--", "true"]);
        assert_eq!(out.status.code(), Some(69), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no cap set"),
            "{out:?}"
        );
        assert_eq!(
            site.code(&["run", "-n", "--", "true"]),
            0,
            "the host's slot was let go"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("port")
            .local_addr()
            .expect("addr")
            .port();
        let nowhere = format!("http://127.0.0.1:{port}");
        let out = site.output(&["run", "--fleet", &nowhere, "--", "true"]);
        assert_eq!(out.status.code(), Some(69), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&nowhere),
            "names the endpoints: {out:?}"
        );
        assert_eq!(site.code(&["run", "-n", "--", "true"]), 0, "let go again");
    }

    #[test]
    fn a_fleet_role_has_one_holder_across_two_hosts() {
        let cluster = Cluster::start();
        let hosts = [Site::new(None), Site::new(None)];
        let role = ["lease", "run", "--role", "coordinator"];
        let mut first = spawn(&hosts[0], &cluster, &role, HOLD_EPOCH, "0");
        wait_until("the first holder", || hosts[0].file("up.0").exists());
        // The other host's own role file is free: only the fleet refuses.
        let refused = fleet(&hosts[1], &cluster, &[&role[..], &["--", "true"]].concat());
        assert_eq!(refused.status.code(), Some(75), "{refused:?}");
        let err = String::from_utf8_lossy(&refused.stderr);
        for part in ["coordinator", &format!("pid {}", first.id()), "since"] {
            assert!(err.contains(part), "names {part}: {err}");
        }
        let mut second = spawn(
            &hosts[1],
            &cluster,
            &[&role[..], &["--wait"]].concat(),
            HOLD_EPOCH,
            "1",
        );
        std::fs::write(hosts[0].file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut first, "the first holder").success());
        wait_until("the waiting holder on the other host", || {
            hosts[1].file("up.1").exists()
        });
        let epoch = |site: &Site, k: &str| -> i64 {
            std::fs::read_to_string(site.file(&format!("epoch.{k}")))
                .expect("epoch")
                .split_whitespace()
                .next()
                .and_then(|e| e.parse().ok())
                .expect("a fleet epoch")
        };
        assert!(
            epoch(&hosts[1], "1") > epoch(&hosts[0], "0"),
            "the fleet epoch grows across hosts"
        );
        std::fs::write(hosts[1].file("release.1"), b"").expect("release");
        assert!(wait_exit(&mut second, "the second holder").success());
    }

    #[test]
    fn two_hosts_share_one_budget_in_the_fleet() {
        let cluster = Cluster::start();
        let hosts = [Site::new(None), Site::new(None)];
        let token = "ghp_cli_fleet_budget_not_real";
        let reset = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("now")
            .as_secs()
            + 3600)
            .to_string();
        let observed = hosts[0]
            .worklane()
            .env("WORKLANE_FLEET", cluster.endpoints())
            .env("GITHUB_TOKEN", token)
            .args([
                "budget",
                "observe",
                "--status",
                "200",
                "--header",
                "X-RateLimit-Remaining: 2",
                "--header",
                &format!("X-RateLimit-Reset: {reset}"),
                "--header",
                "X-RateLimit-Resource: core",
            ])
            .output_gated()
            .expect("observe");
        assert!(observed.status.success(), "{observed:?}");
        let take = |site: &Site| {
            site.worklane()
                .env("WORKLANE_FLEET", cluster.endpoints())
                .env("GITHUB_TOKEN", token)
                .args([
                    "budget",
                    "take",
                    "--consumer",
                    "t",
                    "--wait-max",
                    "0",
                    "--json",
                ])
                .output_gated()
                .expect("take")
        };
        let outs = [take(&hosts[0]), take(&hosts[1]), take(&hosts[1])];
        let codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
        assert_eq!(
            codes,
            [Some(0), Some(0), Some(75)],
            "2 calls left for both hosts: {outs:?}"
        );
        let last: serde_json::Value = serde_json::from_slice(&outs[2].stdout).expect("json");
        assert_eq!(last["kind"], "rate_limited", "{last}");
        assert!(last["retry_at"].as_str().is_some(), "{last}");
        let shown = hosts[1]
            .worklane()
            .env("WORKLANE_FLEET", cluster.endpoints())
            .args(["budget", "show", "--json"])
            .output_gated()
            .expect("show");
        let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("json");
        let shown = &shown["budgets"];
        assert_eq!(shown[0]["resources"][0]["name"], "core", "{shown}");
        assert_eq!(shown[0]["resources"][0]["left"], 0, "{shown}");
        assert_eq!(shown[0]["resources"][0]["granted"], 2, "{shown}");
        // The hosts' own ledgers were not used.
        for site in &hosts {
            let local = site.output(&["budget", "show", "--json"]);
            let local: serde_json::Value = serde_json::from_slice(&local.stdout).expect("json");
            assert_eq!(
                local["budgets"],
                serde_json::json!([]),
                "no host ledger written: {local}"
            );
        }
    }

    #[test]
    fn fleet_status_json_has_the_documented_shape() {
        let cluster = Cluster::start();
        let site = Site::new(None);
        let set = fleet(
            &site,
            &cluster,
            &["fleet", "set-cap", "--pool", "agents", "2"],
        );
        assert!(set.status.success(), "{set:?}");
        let mut run = spawn(&site, &cluster, &["run"], HOLD_EPOCH, "0");
        wait_until("the fleet holder", || site.file("up.0").exists());
        let out = fleet(&site, &cluster, &["fleet", "status", "--json"]);
        assert!(out.status.success(), "{out:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        super::json_docs::check(&super::json_docs::examples(), "fleet status --json", &[doc]);
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut run, "the fleet holder").success());
    }

    #[test]
    fn slots_and_why_show_the_fleet_and_name_it_when_it_blocks() {
        let cluster = Cluster::start();
        let site = Site::new(None);
        // No cap yet: the fleet blocks what the host would admit.
        let why = fleet(&site, &cluster, &["why", "--json"]);
        assert_eq!(why.status.code(), Some(69), "{why:?}");
        let doc: serde_json::Value = serde_json::from_slice(&why.stdout).expect("json");
        assert_eq!(doc["blocked_by"], "resource_admission", "{doc}");
        assert!(
            doc["resource_admission"]["why"]
                .as_str()
                .is_some_and(|w| w.contains("no cap set")),
            "{doc}"
        );
        let set = fleet(&site, &cluster, &["fleet", "set-cap", "1"]);
        assert!(set.status.success(), "{set:?}");
        let free = fleet(&site, &cluster, &["why"]);
        assert_eq!(free.status.code(), Some(0), "room in both: {free:?}");
        assert!(
            String::from_utf8_lossy(&free.stdout).contains("0 of 1 held"),
            "{free:?}"
        );
        let mut run = spawn(&site, &cluster, &["run"], HOLD_EPOCH, "0");
        wait_until("the fleet holder", || site.file("up.0").exists());
        let why = fleet(&site, &cluster, &["why", "--json"]);
        assert_eq!(why.status.code(), Some(75), "{why:?}");
        let doc: serde_json::Value = serde_json::from_slice(&why.stdout).expect("json");
        assert!(
            doc["resource_admission"]["why"].as_str().is_some_and(|w| w
                .contains("is full (1 of 1 held")
                && w.contains(&run.id().to_string())),
            "the fleet named, with its holder's pid: {doc}"
        );
        let slots = fleet(&site, &cluster, &["slots", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&slots.stdout).expect("json");
        assert_eq!(doc["fleet"]["pool"], "agents", "{doc}");
        assert_eq!(doc["fleet"]["held"], 1, "{doc}");
        assert_eq!(doc["fleet"]["keys"][0]["pid"], run.id(), "{doc}");
        let text = fleet(&site, &cluster, &["slots"]);
        assert!(
            String::from_utf8_lossy(&text.stdout).contains("fleet pool \"agents\""),
            "{text:?}"
        );
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut run, "the fleet holder").success());
        // An etcd that does not answer never fails `slots`; it is shown.
        let nowhere = "http://127.0.0.1:9";
        let out = site.output(&["slots", "--json", "--fleet", nowhere]);
        assert!(out.status.success(), "{out:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert!(
            doc["fleet"]["error"]
                .as_str()
                .is_some_and(|e| e.contains(nowhere)),
            "{doc}"
        );
    }

    #[test]
    fn losing_the_whole_fleet_halts_the_command_before_its_lease_can_lapse() {
        let mut cluster = Cluster::start();
        let site = Site::new(None);
        let set = fleet(&site, &cluster, &["fleet", "set-cap", "1"]);
        assert!(set.status.success(), "{set:?}");
        let mut run = spawn(
            &site,
            &cluster,
            &["run", "--fleet-ttl", "2s"],
            HOLD_EPOCH,
            "0",
        );
        wait_until("the run to hold", || site.file("up.0").exists());
        for i in 0..3 {
            cluster.kill(i);
        }
        let status = wait_exit(&mut run, "the halted run");
        assert_eq!(status.code(), Some(143), "halted with SIGTERM: {status}");
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(&mut run.stderr.take().expect("stderr"), &mut err);
        assert!(
            err.contains("fleet pool") && err.contains("unconfirmed"),
            "{err}"
        );
    }
}

mod logging {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// A slot whose supervisor was SIGKILLed: its record stays, its guard is free.
    fn leave_a_dead_holder(site: &Site) {
        let out = site.output(&["run", "--", "sh", "-c", "kill -9 $PPID"]);
        assert_eq!(out.status.signal(), Some(9), "the supervisor died: {out:?}");
        // Its command (which held the guard's copy) has exited too: output() waits for every
        // holder of the output pipe.
        assert!(
            site.slots().join("agent-0.lock").exists(),
            "the record is left behind"
        );
    }

    #[test]
    fn a_takeover_is_logged_with_v_and_not_without() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        leave_a_dead_holder(&site);
        let quiet = site.output(&["run", "-n", "--", "true"]);
        assert!(quiet.status.success(), "{quiet:?}");
        assert!(
            !String::from_utf8_lossy(&quiet.stderr).contains("taking over"),
            "nothing logged without -v: {quiet:?}"
        );
        leave_a_dead_holder(&site);
        let loud = site.output(&["-v", "run", "-n", "--", "true"]);
        assert!(loud.status.success(), "{loud:?}");
        let err = String::from_utf8_lossy(&loud.stderr);
        assert!(
            err.contains("worklane: info worklane_lease")
                && err.contains("taking over agent-0.lock"),
            "the takeover, at info: {err}"
        );
        leave_a_dead_holder(&site);
        let env = site
            .worklane()
            .env("WORKLANE_LOG", "info")
            .args(["run", "-n", "--", "true"])
            .output_gated()
            .expect("run");
        assert!(
            String::from_utf8_lossy(&env.stderr).contains("taking over agent-0.lock"),
            "WORKLANE_LOG=info too: {env:?}"
        );
        let bad = site
            .worklane()
            .env("WORKLANE_LOG", "loud")
            .args(["slots"])
            .output_gated()
            .expect("slots");
        assert_eq!(bad.status.code(), Some(64), "{bad:?}");
    }
}

mod journal {
    //! `worklane events` and `worklane metrics` on real processes, and a journal that a
    //! member of the directory's group may not write.
    use super::ownership::{SHARED, as_member, root_only};
    use super::*;
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::os::unix::fs::PermissionsExt;

    /// The lines a `worklane` prints on stdout, as they come.
    fn lines_of(running: &mut Running) -> std::sync::mpsc::Receiver<String> {
        let stdout = running.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    }

    fn next_json(lines: &std::sync::mpsc::Receiver<String>) -> serde_json::Value {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the follower prints the next event");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }

    /// A member whose journal is read-only takes, waits and is refused exactly as when it can
    /// write it; the journal is left as it was.
    #[test]
    fn a_read_only_journal_never_changes_a_members_take() {
        root_only();
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let slots = site.slots();
        std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod");
        std::os::unix::fs::chown(&slots, Some(0), Some(SHARED)).expect("chgrp");
        std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
        assert_eq!(
            site.code(&["run", "--", "true"]),
            0,
            "root writes the journal"
        );
        let journal = slots.join("journal.jsonl");
        let codes = |site: &Site| {
            let free = as_member(site, &["run", "--no-wait", "--", "true"]);
            let mut holder = site.spawn(&["run", "--owner", "holder"], HOLD, "h");
            wait_until("the holder", || site.file("up.h").exists());
            let busy = as_member(site, &["run", "--no-wait", "--", "true"]);
            std::fs::write(site.file("release.h"), b"").expect("release");
            assert!(wait_exit(&mut holder, "the holder").success());
            std::fs::remove_file(site.file("up.h")).expect("rm");
            std::fs::remove_file(site.file("release.h")).expect("rm");
            (free.status.code(), busy.status.code())
        };
        let writable = codes(&site);
        assert_eq!(writable, (Some(0), Some(75)), "taken, then at cap");
        let by_member =
            worklane_journal::read(&worklane_slotfile::SlotDir::open(&slots).expect("open"))
                .expect("read")
                .entries
                .iter()
                .filter(|e| matches!(&e.event, worklane_journal::Event::SlotRefused { .. }))
                .count();
        assert_eq!(by_member, 1, "the member wrote its refusal while it could");
        std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let member_lines = || {
            worklane_journal::read(&worklane_slotfile::SlotDir::open(&slots).expect("open"))
                .expect("read")
                .entries
                .iter()
                .filter(|e| e.event.kind().starts_with("slot-"))
                .count()
        };
        let before = member_lines();
        let read_only = codes(&site);
        assert_eq!(
            read_only, writable,
            "the same outcomes with a read-only journal"
        );
        let after = member_lines();
        assert_eq!(
            after - before,
            2,
            "only root's holder wrote (taken, released): the member's events were dropped"
        );
    }

    /// `events --follow --json` prints what there is, then each new event as it comes, across
    /// rotations (a cap of 64 KiB, rounds of events it reads before the next round).
    #[test]
    fn events_follow_prints_new_events_across_rotations() {
        let site = Site::new(Some(r#"{"journal_max_bytes": 65536}"#));
        assert_eq!(site.code(&["run", "--", "true"]), 0);
        let mut follower = Running::new(
            site.worklane()
                .args(["events", "--follow", "--json"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn_gated()
                .expect("events --follow"),
        );
        let lines = lines_of(&mut follower);
        let first = next_json(&lines);
        assert_eq!(first["kind"], "slot-taken", "what there is first: {first}");
        assert_eq!(next_json(&lines)["kind"], "slot-released");
        let dir = worklane_slotfile::SlotDir::open(&site.slots()).expect("open");
        let journal = worklane_journal::Journal::of(&dir);
        journal.set_max_bytes(65536);
        let reason = "r".repeat(200);
        for round in 0..8 {
            for i in 0..50 {
                journal.emit(worklane_journal::Event::Stop {
                    by: format!("{round}.{i}"),
                    reason: reason.clone(),
                });
            }
            for i in 0..50 {
                let event = next_json(&lines);
                assert_eq!(event["by"], format!("{round}.{i}"), "in order, each once");
            }
        }
        assert!(site.slots().join("journal.1.jsonl").exists(), "it rotated");
        assert_eq!(site.code(&["run", "--", "true"]), 0);
        assert_eq!(
            next_json(&lines)["kind"],
            "slot-taken",
            "a new file, followed"
        );
        drop(follower);
    }

    #[test]
    fn events_filters_by_kind_and_time_and_refuses_what_it_cannot_read() {
        let site = Site::new(None);
        assert_eq!(site.code(&["run", "--", "true"]), 0);
        assert_eq!(site.code(&["stop-all", "x"]), 0);
        assert_eq!(site.code(&["resume-all"]), 0);
        let out = site.output(&["events", "--kind", "slot"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(
            text.contains("slot-taken") && text.contains("slot-released"),
            "{text}"
        );
        let out = site.output(&["events", "--kind", "stop", "--kind", "resume", "--json"]);
        let kinds: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).expect("json")["kind"].to_string()
            })
            .collect();
        assert_eq!(kinds, [r#""stop""#, r#""resume""#]);
        let out = site.output(&["events", "--since", "2999-01-01T00:00:00Z"]);
        assert!(out.stdout.is_empty(), "nothing after then");
        assert_eq!(site.code(&["events", "--since", "10m"]), 0);
        assert_eq!(site.code(&["events", "--since", "soon"]), 64);
        assert_eq!(site.code(&["events", "--kind", "slots"]), 64);
        std::fs::remove_file(site.slots().join("journal.jsonl")).expect("rm");
        std::fs::create_dir(site.slots().join("journal.jsonl")).expect("a directory there");
        let out = site.output(&["events"]);
        assert_eq!(out.status.code(), Some(71), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("journal.jsonl"),
            "names the file: {out:?}"
        );
    }

    /// A careful reader of the Prometheus text format (0.0.4): every sample belongs to a
    /// family with a TYPE; histograms have ordered cumulative buckets whose +Inf is the count.
    fn parse_exposition(text: &str) -> BTreeMap<String, f64> {
        let mut types: BTreeMap<String, String> = BTreeMap::new();
        let mut samples = BTreeMap::new();
        assert!(text.ends_with('\n'), "ends with a newline");
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE NAME KIND");
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                assert!(
                    types.insert(name.to_owned(), kind.to_owned()).is_none(),
                    "{line}"
                );
                continue;
            }
            if line.starts_with("# HELP ") || line.is_empty() {
                continue;
            }
            assert!(!line.starts_with('#'), "no other comment: {line}");
            let (series, value) = line.rsplit_once(' ').expect("SERIES VALUE");
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|e| panic!("{line}: {e}")),
            };
            let name = series.split('{').next().expect("name");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':'),
                "{line}"
            );
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
                })
                .unwrap_or(name);
            assert!(types.contains_key(family), "{line}: its family has a TYPE");
            if let Some(labels) = series.strip_prefix(name)
                && !labels.is_empty()
            {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                for pair in labels[1..labels.len() - 1].split(',') {
                    let (k, v) = pair.split_once('=').expect("k=v");
                    assert!(
                        !k.is_empty() && v.starts_with('"') && v.ends_with('"'),
                        "{line}"
                    );
                }
            }
            assert!(
                samples.insert(series.to_owned(), value).is_none(),
                "once: {line}"
            );
        }
        for (family, kind) in &types {
            if kind != "histogram" {
                continue;
            }
            let buckets: Vec<f64> = samples
                .iter()
                .filter(|(s, _)| s.starts_with(&format!("{family}_bucket{{")))
                .map(|(_, v)| *v)
                .collect();
            let mut sorted = buckets.clone();
            sorted.sort_by(f64::total_cmp);
            let inf = samples[&format!("{family}_bucket{{le=\"+Inf\"}}")];
            assert_eq!(
                inf,
                samples[&format!("{family}_count")],
                "{family}: +Inf is the count"
            );
            assert_eq!(sorted.last(), Some(&inf), "{family}: cumulative");
        }
        samples
    }

    #[test]
    fn metrics_parse_and_agree_with_slots_json() {
        let site = Site::new(Some(r#"{"max_agents": 1, "max_test_runs": 3}"#));
        let mut holder = site.spawn(&["run", "--owner", "holder"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        let mut waiter = site.spawn(&["run", "--owner", "waiter"], HOLD, "1");
        wait_until("the waiter in line", || {
            let doc: serde_json::Value =
                serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("json");
            doc["line"].as_array().is_some_and(|l| !l.is_empty())
        });
        let check = |stop: f64, drain: f64, waiters: usize| {
            let doc: serde_json::Value =
                serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("json");
            let out = site.output(&["metrics"]);
            assert!(out.status.success(), "{out:?}");
            let m = parse_exposition(&String::from_utf8_lossy(&out.stdout));
            let number = |v: &serde_json::Value| v.as_f64().expect("a number");
            assert_eq!(
                m["worklane_holders{kind=\"agent\"}"],
                number(&doc["agents_held"])
            );
            assert_eq!(
                m["worklane_holders{kind=\"test\"}"],
                number(&doc["test_runs_held"])
            );
            assert_eq!(
                m["worklane_cap{kind=\"agent\"}"],
                number(&doc["max_agents"])
            );
            assert_eq!(
                m["worklane_cap{kind=\"test\"}"],
                number(&doc["max_test_runs"])
            );
            let waiting = doc["line"]
                .as_array()
                .expect("line")
                .iter()
                .filter(|w| w["kind"] == "agent" && w["live"] == true)
                .count();
            assert_eq!(m["worklane_waiters{kind=\"agent\"}"], waiting as f64);
            assert_eq!(waiting, waiters, "{doc}");
            assert_eq!(m["worklane_stop"], stop);
            assert_eq!(
                m["worklane_stop"],
                f64::from(u8::from(!doc["stop"].is_null()))
            );
            assert_eq!(m["worklane_drain"], drain);
            assert_eq!(
                m["worklane_drain"],
                f64::from(u8::from(doc["drain"]["state"] == "in-force"))
            );
            m
        };
        let m = check(0.0, 0.0, 1);
        assert_eq!(m["worklane_holders{kind=\"agent\"}"], 1.0);
        assert_eq!(
            m["worklane_queue_wait_seconds_count"], 1.0,
            "the holder's take"
        );
        // A drain refuses the waiter at once.
        assert_eq!(site.code(&["drain", "--until", "10m"]), 0);
        assert_eq!(wait_exit(&mut waiter, "the waiter").code(), Some(69));
        check(0.0, 1.0, 0);
        assert_eq!(site.code(&["undrain"]), 0);
        std::fs::write(site.file("release.0"), b"").expect("release");
        assert!(wait_exit(&mut holder, "the holder").success());
        assert_eq!(site.code(&["stop-all", "metrics"]), 0);
        let m = check(1.0, 0.0, 0);
        assert_eq!(m["worklane_holders{kind=\"agent\"}"], 0.0);
        assert_eq!(m["worklane_run_seconds_count"], 1.0, "one run ended");
        assert_eq!(m["worklane_queue_wait_seconds_count"], 1.0, "one take");
        assert_eq!(site.code(&["resume-all"]), 0);
    }

    /// `--textfile` rewrites the file while a reader reads it over and over: every read is a
    /// whole exposition, and no temp file is left.
    #[test]
    fn the_textfile_is_never_seen_half_written() {
        let site = Site::new(None);
        assert_eq!(site.code(&["run", "--", "true"]), 0);
        let out_dir = site.file("textfile");
        std::fs::create_dir(&out_dir).expect("mkdir");
        let path = out_dir.join("worklane.prom");
        assert_eq!(
            site.code(&["metrics", "--textfile", path.to_str().expect("utf-8")]),
            0
        );
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (path, done) = (path.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let text = std::fs::read_to_string(&path).expect("always there");
                    parse_exposition(&text);
                    assert!(text.contains("worklane_journal_skipped_lines "), "whole");
                    reads += 1;
                }
                reads
            })
        };
        for _ in 0..30 {
            assert_eq!(
                site.code(&["metrics", "--textfile", path.to_str().expect("utf-8")]),
                0
            );
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().expect("reader") > 0);
        let names: Vec<_> = std::fs::read_dir(&out_dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["worklane.prom"], "no temp file left");
    }

    fn get(port: u16, request: &str) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.write_all(request.as_bytes()).expect("send");
        let mut reply = String::new();
        stream.read_to_string(&mut reply).expect("reply");
        reply
    }

    #[test]
    fn listen_serves_get_metrics_and_nothing_else() {
        let site = Site::new(None);
        let mut server = Running::new(
            site.worklane()
                .args(["metrics", "--listen", "0"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("metrics --listen"),
        );
        let mut said = String::new();
        std::io::BufReader::new(server.stderr.take().expect("stderr"))
            .read_line(&mut said)
            .expect("it says where");
        let port: u16 = said
            .trim()
            .strip_prefix("worklane: serving http://127.0.0.1:")
            .and_then(|rest| rest.strip_suffix("/metrics"))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("on the loopback address: {said}"));
        let reply = get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert!(reply.contains("text/plain; version=0.0.4"), "{reply}");
        let body = reply.split_once("\r\n\r\n").expect("a body").1;
        parse_exposition(body);
        assert!(get(port, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(port, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        drop(server);
    }
}

/// `worklane top` (feature `top`) in a tmux session of 80x24: typed into with send-keys, read
/// with capture-pane.
#[cfg(feature = "top")]
mod top {
    use super::*;

    struct Tmux {
        name: String,
    }

    impl Tmux {
        fn capture(&self) -> String {
            let out = Command::new("tmux")
                .args(["capture-pane", "-p", "-t", &self.name])
                .output_gated()
                .expect("tmux capture-pane");
            String::from_utf8_lossy(&out.stdout).into_owned()
        }

        fn shows(&self, what: &str, text: &str) -> String {
            let mut screen = String::new();
            wait_until(what, || {
                screen = self.capture();
                screen.contains(text)
            });
            screen
        }
    }

    impl Drop for Tmux {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["kill-session", "-t", &self.name])
                .output_gated();
        }
    }

    #[test]
    fn top_shows_a_new_holder_and_stop_and_q_gives_the_terminal_back() {
        let site = Site::new(None);
        let name = format!("worklane-top-{}", std::process::id());
        let script = format!(
            "echo before-top; {} top; echo \"exit=$?\" > {}; exec sleep 60",
            worklane_bin(),
            site.file("exit").display()
        );
        let started = Command::new("tmux")
            .args(["new-session", "-d", "-s", &name, "-x", "80", "-y", "24"])
            .arg("-e")
            .arg(format!("AGENT_SLOTS_DIR={}", site.slots().display()))
            .arg("-e")
            .arg(format!("WORKLANE_TEST_ROOT={}", site.temp.path().display()))
            .args(["sh", "-c", &script])
            .output_gated()
            .expect("tmux new-session");
        assert!(started.status.success(), "{started:?}");
        let tmux = Tmux { name };
        tmux.shows("top's first screen", "worklane top");
        let mut holder = site.spawn(&["run", "--owner", "holder"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        let screen = tmux.shows("the new holder on screen", "agent-0.lock");
        assert!(screen.contains("holder"), "its owner: {screen}");
        assert!(screen.contains("slot-taken"), "and its event: {screen}");
        assert!(
            screen.lines().count() <= 24 && screen.lines().all(|l| l.chars().count() <= 80),
            "within 80x24: {screen}"
        );
        assert_eq!(site.code(&["stop-all", "top", "test"]), 0);
        tmux.shows("the STOP banner", "STOP by");
        assert!(wait_exit(&mut holder, "the halted holder").code().is_some());
        let sent = Command::new("tmux")
            .args(["send-keys", "-t", &tmux.name, "q"])
            .output_gated()
            .expect("send-keys");
        assert!(sent.status.success());
        wait_until("top to exit", || site.file("exit").exists());
        assert_eq!(
            std::fs::read_to_string(site.file("exit"))
                .expect("exit")
                .trim(),
            "exit=0",
            "q exits 0"
        );
        let screen = tmux.shows("the terminal as it was", "before-top");
        assert!(
            !screen.contains("worklane top"),
            "the alternate screen is gone: {screen}"
        );
    }
}
