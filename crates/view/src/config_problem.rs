//! A config that cannot be used, as the views show it and as a take refuses with it: the
//! file, what is wrong, and the command that fixes it.

use std::path::{Path, PathBuf};
use worklane_slotfile::{Config, Environment};

use worklane_stdx::shell_quote;
/// Why the config in force cannot be used, as the views show it (one line of text, the
/// `config_problem` of their JSON): the file, what is wrong, and the command that fixes it.
/// While there is one, every take is refused (78); STOP, resume, the drain and the views
/// work.
pub struct Problem {
    /// The config file.
    pub file: PathBuf,
    /// What is wrong with it.
    pub what: String,
    /// The command (or step) that fixes it.
    pub fix: String,
}

impl Problem {
    /// The problem a config error is, with its fix.
    pub fn of(e: &worklane_slotfile::config::Error) -> Problem {
        Problem {
            file: e.path().to_owned(),
            what: worklane_stdx::chain(e),
            fix: fix(e.path(), e),
        }
    }

    /// The config's problem now, if the config in force cannot be used (none when even its
    /// place cannot be resolved: the slot directory's error then says why).
    pub fn now() -> Option<Problem> {
        let env = Environment::from_process();
        let file = env.locate().ok()?.config;
        Config::load_in(&env, &file).err().map(|e| Problem::of(&e))
    }

    /// The pool's config problem, if any.
    pub fn of_pool(pool: &worklane_admission::Pool) -> Option<Problem> {
        match pool.config() {
            Err(worklane_admission::take::Error::Config { source }) => Some(Problem::of(&source)),
            _ => None,
        }
    }

    /// As the documents show it.
    pub fn json(&self) -> crate::doc::ConfigProblem {
        crate::doc::ConfigProblem {
            file: self.file.display().to_string(),
            what: self.what.clone(),
            fix: self.fix.clone(),
        }
    }

    /// The line a view prints.
    pub fn line(&self) -> String {
        format!(
            "config problem: {}; fix: {} (until then every take is refused with 78)",
            self.what, self.fix
        )
    }
}

/// The command (or step) that fixes a config that cannot be used.
pub fn fix(file: &Path, e: &worklane_slotfile::config::Error) -> String {
    use worklane_slotfile::config::Error as E;
    use worklane_slotfile::read::Error as R;
    let q = shell_quote(&file.display().to_string());
    match e {
        E::Read {
            source: R::Io { source, .. },
            ..
        } if source.kind() == std::io::ErrorKind::PermissionDenied => format!(
            "let every harness read it: chmod a+r -- {q} (and let them search its directory)"
        ),
        E::Read {
            source: R::Symlink { .. },
            ..
        } => format!(
            "worklane never follows a link at the config's name: replace {q} with the file it \
             points to, or name that file in AGENT_SLOTS_CONFIG"
        ),
        E::Read {
            source: R::NotRegular { .. } | R::TooLarge { .. },
            ..
        } => format!(
            "look at it, then rm -r -- {q} (the defaults then hold) and set the caps again with \
             `worklane config set max_agents N`"
        ),
        E::Read { .. } => format!("check {q} and its filesystem, then try again"),
        E::Syntax { .. } => format!(
            "correct the JSON in {q} by hand, or remove it (the defaults: max_agents 2, \
             max_test_runs 2)"
        ),
        E::DuplicateKey { key, .. } => format!("keep one `{key}` in {q}"),
        E::NotAnObject { .. } => format!(
            "write a JSON object in {q}, like {{\"max_agents\": 2}}, or remove it (the defaults \
             then hold)"
        ),
        E::UnknownKey { key, .. } => format!("worklane config unset {}", shell_quote(key)),
        E::Field {
            field, expected, ..
        } => format!("worklane config set {field} N, N {expected}"),
        _ => format!("correct or remove {q}"),
    }
}

/// `config: PATH`, saying when the file does not exist and the defaults hold.
pub fn describe_file(path: &Path, exists: bool) -> String {
    if exists {
        format!("config: {}", path.display())
    } else {
        format!(
            "config: {} (absent: the defaults are in force)",
            path.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Problem;
    use worklane_slotfile::config::Error as E;
    use worklane_slotfile::read::Error as R;

    /// A config whose read failed with `error` (made here: the tests run as root, whom no
    /// permission refuses, and EIO cannot be made on demand).
    fn failed_with(error: std::io::Error) -> E {
        E::Read {
            path: "/etc/worklane/slots.json".into(),
            source: R::Io {
                path: "/etc/worklane/slots.json".into(),
                source: error,
            },
        }
    }

    #[test]
    fn a_config_nobody_may_read_is_made_readable_and_another_io_error_is_checked() {
        let denied = Problem::of(&failed_with(std::io::ErrorKind::PermissionDenied.into()));
        assert_eq!(
            denied.fix,
            "let every harness read it: chmod a+r -- /etc/worklane/slots.json (and let them \
             search its directory)"
        );
        assert_eq!(
            denied.file,
            std::path::Path::new("/etc/worklane/slots.json")
        );
        let eio = Problem::of(&failed_with(std::io::Error::from_raw_os_error(5)));
        assert_eq!(
            eio.fix,
            "check /etc/worklane/slots.json and its filesystem, then try again"
        );
        assert!(
            eio.what
                .starts_with("cannot read config /etc/worklane/slots.json"),
            "{}",
            eio.what
        );
    }

    /// Where the parent test tells its child the slot directory is.
    const CHILD_DIR: &str = "WORKLANE_VIEW_TEST_NOW_DIR";
    const TEST_NAME: &str =
        "config_problem::tests::the_config_problem_now_is_that_of_the_process_s";

    /// `Problem::now` reads this process's environment, which only a process started with a
    /// slot directory of its own can be given: the test runs its own binary again with one,
    /// and in that run it is the subject.
    #[test]
    fn the_config_problem_now_is_that_of_the_process_s() {
        if let Some(dir) = std::env::var_os(CHILD_DIR) {
            let dir = std::path::PathBuf::from(dir);
            let problem = Problem::now().expect("the subject's config cannot be used");
            assert_eq!(problem.file, dir.join("config.json"));
            assert!(
                problem.fix.starts_with("correct the JSON in "),
                "{}",
                problem.fix
            );
            return;
        }
        let temp = tempfile::tempdir().expect("temp dir");
        std::fs::write(temp.path().join("config.json"), b"{not json").expect("config");
        worklane_testkit::subject::run_again_as_subject(TEST_NAME, |subject| {
            subject
                .env("AGENT_SLOTS_DIR", temp.path())
                .env_remove("AGENT_SLOTS_CONFIG")
                .env(CHILD_DIR, temp.path());
        });
    }
}
