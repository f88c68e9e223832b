//! What every module of the CLI's tests shares: the test's site (a temp slot directory and
//! the scope of its processes), a started `worklane`, bounded waits, and the driver helpers.

pub(crate) use std::io::BufRead;
pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::process::{Command, ExitStatus, Output, Stdio};
pub(crate) use std::time::{Duration, Instant};
pub(crate) use worklane_testkit::{Child, Gated, Scope};

/// The binary under test: this build's, or the one `WORKLANE_TEST_BINARY` names (CI runs the
/// suite again against the binary `cargo xtask dist` builds, linked with another libc).
pub(crate) fn worklane_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("WORKLANE_TEST_BINARY")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_worklane").to_owned())
    })
}

pub(crate) struct Site {
    /// Declared first, so dropped first: the test's processes end before its directory goes.
    pub(crate) scope: Scope,
    pub(crate) temp: tempfile::TempDir,
}

impl Site {
    pub(crate) fn new(config: Option<&str>) -> Site {
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
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.scope.mark(&mut cmd);
        cmd
    }

    pub(crate) fn slots(&self) -> PathBuf {
        self.temp.path().join("slots")
    }

    /// The dispatcher's private state directory (its queue database).
    pub(crate) fn state(&self) -> PathBuf {
        self.temp.path().join("dispatcher-state")
    }

    /// A scratch file path for the children's own records.
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.temp.path().join(name)
    }

    pub(crate) fn worklane(&self) -> Command {
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

    pub(crate) fn output(&self, args: &[&str]) -> Output {
        self.worklane()
            .args(args)
            .output_gated()
            .expect("run worklane")
    }

    pub(crate) fn code(&self, args: &[&str]) -> i32 {
        let out = self.output(args);
        out.status.code().unwrap_or(-1)
    }

    /// Starts `worklane ARGS -- sh SCRIPT` in the background.
    pub(crate) fn spawn(&self, args: &[&str], script: &str, key: &str) -> Running {
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

    pub(crate) fn write_script(&self, name: &str, text: &str) -> String {
        let path = self.file(name);
        std::fs::write(&path, text).expect("script");
        path.display().to_string()
    }
}

/// Waits (bounded: a watchdog, not a timing assertion) until `cond` holds.
/// A `worklane` started by a test. If the test ends (or fails) while it still runs, it is sent
/// SIGTERM, which it forwards to its command's group, and SIGKILLed after 5 s; whatever of its
/// command is left then ends with the test's `Scope`.
pub(crate) struct Running(Option<Child>);

impl Running {
    pub(crate) fn new(child: Child) -> Running {
        Running(Some(child))
    }

    /// Waits for it and collects its output, as `Child::wait_with_output` does.
    pub(crate) fn wait_with_output(mut self) -> std::io::Result<Output> {
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

pub(crate) fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_until_within(what, Duration::from_secs(30), cond);
}

/// [`wait_until`] with a bound of its own, for a wait whose work is many process starts (a
/// loaded machine runs them slower, never wrongly).
pub(crate) fn wait_until_within(what: &str, bound: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn wait_exit(child: &mut Child, what: &str) -> ExitStatus {
    let mut status = None;
    wait_until(what, || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    status.expect("exited")
}

/// `script` as a dispatched driver runs it: `$T` is the test's directory, from `LANE_T` (a
/// driver gets no variable of the dispatcher's own, and the filter keeps `LANE_`).
pub(crate) fn driven(script: &str) -> String {
    format!("export T=\"$LANE_T\"; {script}")
}

/// A child script that reports it is up, then runs until its release file appears.
pub(crate) const HOLD: &str =
    r#"touch "$T/up.$K"; while [ ! -e "$T/release.$K" ]; do sleep 0.02; done"#;

/// The signal masks (`SigBlk`, `SigIgn`, `SigCgt`, `SigPnd`, `ShdPnd`) and state of `pid` and
/// of every process below it, from `/proc`.
pub(crate) fn signal_states(pid: u32) -> String {
    let mut out = String::new();
    let mut pending = vec![pid];
    while let Some(pid) = pending.pop() {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let keep: Vec<&str> = status
            .lines()
            .filter(|l| {
                [
                    "Name:", "State:", "SigBlk:", "SigIgn:", "SigCgt:", "SigPnd:", "ShdPnd:",
                ]
                .iter()
                .any(|k| l.starts_with(k))
            })
            .collect();
        out.push_str(&format!("[{pid}: {}] ", keep.join(" ").replace('\t', " ")));
        if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
            pending.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Whether this test process ignores `signal` (its bit in `SigIgn` of `/proc/self/status`), as
/// `nohup` leaves SIGHUP and a non-interactive shell's `&` leaves SIGINT and SIGQUIT: such a
/// signal stays ignored in everything the test starts, by design and by POSIX.
pub(crate) fn ignored_on_entry(signal: rustix::process::Signal) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << (signal.as_raw() - 1)) != 0)
}
