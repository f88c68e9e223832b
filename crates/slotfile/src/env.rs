//! Where the slot directory and config are, and the test-isolation rule.
//!
//! Everything here works on an injected [`Environment`] (variables, filesystem root, current
//! executable, temp dir), so precedence and isolation are tested without the machine's paths.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable naming the slot directory.
pub const SLOTS_DIR_VAR: &str = "AGENT_SLOTS_DIR";
/// Environment variable naming the config file.
pub const SLOTS_CONFIG_VAR: &str = "AGENT_SLOTS_CONFIG";
/// Environment variable that marks a test run and names its temporary root. Inherited by every
/// child a test starts, so the CLI started by a test is a test run too.
pub const TEST_ROOT_VAR: &str = "WORKLANE_TEST_ROOT";

/// The long-lived system slot directory, used when it exists.
pub const SYSTEM_SLOTS_DIR: &str = "var/lib/worklane/agent-slots";
/// The system directory that holds `update-drain.json` with the system layout.
pub const SYSTEM_STATE_DIR: &str = "var/lib/worklane";
/// The system config, used with the system slot directory when it exists.
pub const SYSTEM_CONFIG: &str = "etc/worklane/slots.json";
/// The default slot directory (created 2770, setgid, when missing).
pub const DEFAULT_SLOTS_DIR: &str = "var/tmp/agent-slots";

/// Every variable resolution reads by name ([`Environment::from_process`] keeps only these,
/// and the `CARGO_BIN_EXE_` ones).
const READ_VARS: [&str; 4] = [TEST_ROOT_VAR, "NEXTEST", SLOTS_DIR_VAR, SLOTS_CONFIG_VAR];

/// The variables `cargo test` sets for an integration test's binaries: one marks a test run.
const CARGO_BIN_EXE_PREFIX: &str = "CARGO_BIN_EXE_";

/// The machine's own paths, which a test run may never use whatever its temp root is.
const MACHINE_PATHS: [&str; 3] = ["/var/lib/worklane", "/var/tmp/agent-slots", "/etc/worklane"];

/// The inputs of resolution: environment variables, the filesystem root the system paths hang
/// from (`/` for real), the current executable and the temp directory.
#[derive(Debug, Clone)]
pub struct Environment {
    vars: BTreeMap<String, OsString>,
    root: PathBuf,
    current_exe: Option<PathBuf>,
    temp_dir: PathBuf,
}

/// Why this process counts as a test run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestSignal {
    /// `WORKLANE_TEST_ROOT` is set (by a test, or inherited from one).
    Marker,
    /// cargo-nextest runs this process or an ancestor (`NEXTEST` is set).
    Nextest,
    /// `cargo test` runs this process or an ancestor (a `CARGO_BIN_EXE_*` variable is set).
    CargoTest,
    /// This executable is a libtest harness built by cargo (`deps/<name>-<16 hex>`).
    TestHarness,
}

impl std::fmt::Display for TestSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Marker => "WORKLANE_TEST_ROOT is set",
            Self::Nextest => "NEXTEST is set",
            Self::CargoTest => "a CARGO_BIN_EXE_* variable from cargo test is set",
            Self::TestHarness => "this executable is a cargo test harness",
        })
    }
}

/// A test run: why it is one and the temporary root its slot directories must lie in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRun {
    /// What marked this process as a test run.
    pub signal: TestSignal,
    /// The directory every slot directory and config of the test must lie in.
    pub root: PathBuf,
}

/// Where the slot directory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `$AGENT_SLOTS_DIR`.
    FromEnv,
    /// `/var/lib/worklane/agent-slots`, for long-lived machines.
    System,
    /// `/var/tmp/agent-slots`, the embedded default.
    Default,
}

/// The resolved locations of one machine's (or one test's) slot state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locations {
    /// The slot directory.
    pub slot_dir: PathBuf,
    /// The config file (it may not exist: then the defaults hold).
    pub config: PathBuf,
    /// Where `update-drain.json` lives: the system state directory with the system layout,
    /// else the slot directory.
    pub drain_dir: PathBuf,
    /// Which rule chose the slot directory.
    pub layout: Layout,
}

/// Errors of resolution.
pub mod resolve {
    use super::TestRun;
    use std::path::PathBuf;

    /// Why the slot directory or config could not be resolved.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// A variable holds a path that is not absolute.
        #[error("{var}={value:?} is not an absolute path; set it to an absolute path")]
        NotAbsolute {
            /// The variable.
            var: &'static str,
            /// Its value.
            value: PathBuf,
        },
        /// A test run tried to use a directory outside its temporary root.
        #[error(
            "refusing {what} {path} in a test run ({}): a test may use only paths inside its \
             own temporary root {}; point AGENT_SLOTS_DIR (and AGENT_SLOTS_CONFIG) at a temp \
             directory",
            run.signal, run.root.display()
        )]
        TestIsolation {
            /// What was being resolved ("slot directory", "config").
            what: &'static str,
            /// The refused path.
            path: PathBuf,
            /// The test run.
            run: TestRun,
        },
    }
}

impl Environment {
    /// The real process: its variables (those resolution reads), `/`, its executable and temp
    /// dir.
    #[must_use]
    pub fn from_process() -> Environment {
        // Only what `test_run` and `locate` read: a copy of every variable cost a fifth of a
        // `worklane run`'s own instructions, for an environment made per file resolved.
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| {
                let k = k.into_string().ok()?;
                (READ_VARS.contains(&k.as_str()) || k.starts_with(CARGO_BIN_EXE_PREFIX))
                    .then_some((k, v))
            })
            .collect();
        Environment {
            vars,
            root: PathBuf::from("/"),
            current_exe: process_exe(),
            temp_dir: std::env::temp_dir(),
        }
    }

    /// An empty environment whose system paths hang from `root` (for tests), with no
    /// executable and `root` as its temp dir.
    #[must_use]
    pub fn with_root(root: impl Into<PathBuf>) -> Environment {
        let root = root.into();
        Environment {
            vars: BTreeMap::new(),
            temp_dir: root.clone(),
            root,
            current_exe: None,
        }
    }

    /// Sets a variable.
    #[must_use]
    pub fn var(mut self, name: &str, value: impl Into<OsString>) -> Environment {
        self.vars.insert(name.to_owned(), value.into());
        self
    }

    /// Removes a variable.
    #[must_use]
    pub fn without(mut self, name: &str) -> Environment {
        self.vars.remove(name);
        self
    }

    /// Sets the current executable.
    #[must_use]
    pub fn exe(mut self, path: impl Into<PathBuf>) -> Environment {
        self.current_exe = Some(path.into());
        self
    }

    /// Sets the temp directory.
    #[must_use]
    pub fn temp_dir(mut self, path: impl Into<PathBuf>) -> Environment {
        self.temp_dir = path.into();
        self
    }

    fn get(&self, name: &str) -> Option<&OsString> {
        debug_assert!(
            READ_VARS.contains(&name),
            "{name} is read but `from_process` does not keep it: add it to READ_VARS"
        );
        self.vars.get(name).filter(|v| !v.is_empty())
    }

    /// Whether this is a test run, and which root it is confined to.
    #[must_use]
    pub fn test_run(&self) -> Option<TestRun> {
        let signal = if self.get(TEST_ROOT_VAR).is_some() {
            TestSignal::Marker
        } else if self.get("NEXTEST").is_some() {
            TestSignal::Nextest
        } else if self
            .vars
            .keys()
            .any(|k| k.starts_with(CARGO_BIN_EXE_PREFIX))
        {
            TestSignal::CargoTest
        } else if self.current_exe.as_deref().is_some_and(is_test_harness) {
            TestSignal::TestHarness
        } else {
            return None;
        };
        let root = match self.get(TEST_ROOT_VAR) {
            Some(root) => PathBuf::from(root),
            None => self.temp_dir.clone(),
        };
        Some(TestRun { signal, root })
    }

    /// Refuses `path` for `what` in a test run unless it lies inside the test's root and
    /// outside the machine's own paths. Decided on the path's text alone: nothing is opened.
    ///
    /// The test run is this environment's, or else the real process's: an environment injected
    /// by test code cannot lift the confinement of the test process itself.
    pub fn check_isolated(&self, what: &'static str, path: &Path) -> Result<(), resolve::Error> {
        let Some(run) = self.test_run().or_else(process_test_run) else {
            return Ok(());
        };
        let clean = path.is_absolute()
            && run.root.is_absolute()
            && !path.components().any(|c| matches!(c, Component::ParentDir));
        let machine = MACHINE_PATHS.iter().any(|m| path.starts_with(m));
        if clean && !machine && path.starts_with(&run.root) && path != run.root {
            Ok(())
        } else {
            Err(resolve::Error::TestIsolation {
                what,
                path: path.to_owned(),
                run,
            })
        }
    }

    fn absolute_var(&self, var: &'static str) -> Result<Option<PathBuf>, resolve::Error> {
        match self.get(var) {
            None => Ok(None),
            Some(v) => {
                let p = PathBuf::from(v);
                if p.is_absolute() {
                    Ok(Some(p))
                } else {
                    Err(resolve::Error::NotAbsolute { var, value: p })
                }
            }
        }
    }

    /// Resolves the slot directory and config by precedence:
    ///
    /// - slot directory: `$AGENT_SLOTS_DIR`; else `/var/lib/worklane/agent-slots` when it is a
    ///   directory; else `/var/tmp/agent-slots`;
    /// - config: `$AGENT_SLOTS_CONFIG`; else `/etc/worklane/slots.json` when the system slot
    ///   directory is in use and that file exists; else `config.json` in the slot directory.
    ///
    /// In a test run every candidate is checked by [`Environment::check_isolated`] before the
    /// filesystem is consulted about it.
    pub fn locate(&self) -> Result<Locations, resolve::Error> {
        let (slot_dir, layout) = match self.absolute_var(SLOTS_DIR_VAR)? {
            Some(dir) => (dir, Layout::FromEnv),
            None => {
                let system = self.root.join(SYSTEM_SLOTS_DIR);
                self.check_isolated("slot directory", &system)?;
                if system.is_dir() {
                    (system, Layout::System)
                } else {
                    (self.root.join(DEFAULT_SLOTS_DIR), Layout::Default)
                }
            }
        };
        self.check_isolated("slot directory", &slot_dir)?;
        let config = match self.absolute_var(SLOTS_CONFIG_VAR)? {
            Some(config) => config,
            None => {
                let system = self.root.join(SYSTEM_CONFIG);
                if layout == Layout::System && system.is_file() {
                    system
                } else {
                    slot_dir.join("config.json")
                }
            }
        };
        self.check_isolated("config", &config)?;
        let drain_dir = match layout {
            Layout::System => self.root.join(SYSTEM_STATE_DIR),
            Layout::FromEnv | Layout::Default => slot_dir.clone(),
        };
        Ok(Locations {
            slot_dir,
            config,
            drain_dir,
            layout,
        })
    }
}

/// This process's executable, read once (`/proc/self/exe` on Linux): it never changes, and
/// an environment is made for every file resolved.
fn process_exe() -> Option<PathBuf> {
    static EXE: OnceLock<Option<PathBuf>> = OnceLock::new();
    EXE.get_or_init(|| std::env::current_exe().ok()).clone()
}

/// The real process's test run, decided once.
fn process_test_run() -> Option<TestRun> {
    static RUN: OnceLock<Option<TestRun>> = OnceLock::new();
    RUN.get_or_init(|| Environment::from_process().test_run())
        .clone()
}

/// Whether `exe` looks like a libtest harness built by cargo: `…/deps/<name>-<16 hex>`.
fn is_test_harness(exe: &Path) -> bool {
    let in_deps = exe
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|d| d == "deps");
    let hashed = exe
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.rsplit_once('-'))
        .is_some_and(|(_, h)| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()));
    in_deps && hashed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_paths_are_recognized() {
        assert!(is_test_harness(Path::new(
            "/t/target/debug/deps/all-0123456789abcdef"
        )));
        assert!(!is_test_harness(Path::new("/t/target/debug/worklane")));
        assert!(!is_test_harness(Path::new("/t/target/debug/deps/worklane")));
        assert!(!is_test_harness(Path::new("/usr/bin/all-0123456789abcdef")));
        assert!(!is_test_harness(Path::new("/t/deps/all-0123456789abcdeg")));
    }

    #[test]
    fn this_unit_test_binary_is_a_test_run() {
        let run = Environment::from_process().test_run();
        assert!(
            run.is_some(),
            "a cargo unit-test process must count as a test run"
        );
    }
}
