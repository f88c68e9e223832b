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

    /// A scratch file path for the children's own records.
    fn file(&self, name: &str) -> PathBuf {
        self.temp.path().join(name)
    }

    fn worklane(&self) -> Command {
        let mut cmd = self.command(env!("CARGO_BIN_EXE_worklane"));
        cmd.env("AGENT_SLOTS_DIR", self.slots())
            .env_remove("AGENT_SLOTS_CONFIG")
            .env("T", self.temp.path())
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

/// A child script that reports it is up, then runs until its release file appears.
const HOLD: &str = r#"touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#;

mod cap {
    use super::*;

    const OVERLAP: &str = r#"
bump() { flock "$T/count.lock" sh -c "$1"; }
bump 'n=$(cat "$T/n" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$T/n"; echo $n >> "$T/log"; if [ $n -ge 4 ]; then touch "$T/reached"; fi'
i=0; while [ ! -e "$T/reached" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
sleep 0.1
bump 'n=$(cat "$T/n"); echo $((n-1)) > "$T/n"'
"#;

    #[test]
    fn eight_runs_under_a_cap_of_four_overlap_to_four_and_never_more() {
        let site = Site::new(Some(r#"{"max_agents": 4}"#));
        let script = site.write_script("overlap.sh", OVERLAP);
        let children: Vec<Running> = (0..8)
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
        let counts: Vec<u32> = log.lines().map(|l| l.parse().expect("a count")).collect();
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
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill child");
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            0,
            "the dead run's slot is taken over at once"
        );
    }
}

mod exits {
    use super::*;

    #[test]
    fn an_inherited_ignored_sigchld_does_not_lose_the_status() {
        // A parent that ignores SIGCHLD passes it on through exec; the kernel would then reap
        // the command itself and its status would be lost (exit 71 before the fix).
        let site = Site::new(None);
        let out = site
            .command("env")
            .args(["--ignore-signal=CHLD", env!("CARGO_BIN_EXE_worklane")])
            .args(["run", "--", "sh", "-c", "exit 7"])
            .env("AGENT_SLOTS_DIR", site.slots())
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
        assert_eq!(site.code(&["run", "--", "true"]), 0);
        assert_eq!(
            site.code(&["run", "--", "sh", "-c", "kill -TERM $$"]),
            128 + 15,
            "a signal N is 128+N"
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
    fn a_malformed_config_exits_78_naming_the_file() {
        for (config, field) in [
            (r#"{"max_agents": 0}"#, "max_agents"),
            (r#"{"max_test_runs": 9}"#, "max_test_runs"),
            ("{", "JSON"),
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
        let site = Site::new(Some(r#"{"max_agents": 1, "note": "kept"}"#));
        assert_eq!(site.code(&["set-test-slots", "9"]), 64, "out of range");
        assert_eq!(site.code(&["set-test-slots", "2"]), 0);
        let config: serde_json::Value = serde_json::from_slice(
            &std::fs::read(site.slots().join("config.json")).expect("config"),
        )
        .expect("json");
        assert_eq!(config["max_test_runs"], 2);
        assert_eq!(config["note"], "kept", "other fields survive");
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
        let mut holder = site.spawn(&["lease", "run", "--role", "builder"], HOLD, "0");
        wait_until("the role holder", || site.file("up.0").exists());
        let out = site.output(&["lease", "run", "--role", "builder", "--", "true"]);
        assert_eq!(out.status.code(), Some(75), "the same role is refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("pid {}", holder.id())),
            "names the holder's pid: {err}"
        );
        assert!(err.contains("builder"), "names the role: {err}");
        assert!(
            err.contains("sh -c"),
            "names the holder's entrypoint: {err}"
        );
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
}

mod terminal {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_run_waiting_on_a_terminal_shows_what_blocks_it() {
        let site = Site::new(Some(r#"{"max_agents": 1}"#));
        let mut holder = site.spawn(&["run"], HOLD, "0");
        wait_until("the holder", || site.file("up.0").exists());
        // script(1) gives the waiting run a pseudo-terminal as stdin, stdout and stderr.
        let inner = format!("{} run -- true", env!("CARGO_BIN_EXE_worklane"));
        let mut waiter = site
            .command("script")
            .args(["-qfec", &inner, "/dev/null"])
            .env("AGENT_SLOTS_DIR", site.slots())
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
            String::from_utf8_lossy(&seen).contains("at cap: 1 of 1 held")
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
            env!("CARGO_BIN_EXE_worklane"),
            r#"'sh -c "trap \"\" TERM HUP; echo \$\$ > \"\$T/straggler\"; exec sleep 600" & touch "$T/up.0"; wait'"#
        );
        let mut run = site
            .command("script")
            .args(["-qfec", &inner, "/dev/null"])
            .env("AGENT_SLOTS_DIR", site.slots())
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
        assert_eq!(site.code(&["stop-all", "maintenance"]), 0);
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
            site.code(&["slots"]),
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
            shown(&site)[0]["paused_until"].is_null(),
            "a 403 with calls left may be a permission error: no pause"
        );
        let mut secondary = forbidden.to_vec();
        secondary.push("--secondary-limit");
        assert!(budget(&site, &secondary).status.success());
        assert!(
            shown(&site)[0]["paused_until"].is_string(),
            "the body said secondary rate limit: paused"
        );
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
