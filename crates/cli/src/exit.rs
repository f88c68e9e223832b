//! Exit codes, in one place, and the error that carries one.

/// 64: the command line is wrong.
pub(crate) const USAGE: u8 = 64;
/// 69: refused by an operator (STOP, drain) or a held lease was lost.
pub(crate) const UNAVAILABLE: u8 = 69;
/// 70: a bug in worklane.
pub(crate) const SOFTWARE: u8 = 70;
/// 71: a system call failed.
pub(crate) const OS_ERROR: u8 = 71;
/// 74: output could not be written (stdout failed other than on a closed pipe).
pub(crate) const IO_ERROR: u8 = 74;
/// 75: busy; try again later.
pub(crate) const TEMP_FAIL: u8 = 75;
/// 78: configuration error.
pub(crate) const CONFIG: u8 = 78;
/// 126: the command cannot be executed.
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// 127: the command was not found.
pub(crate) const NOT_FOUND: u8 = 127;

/// A failure with the exit code it maps to and a message for a person.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

/// Errors are rendered with their chain of causes (shared with xtask, see `chain.rs`).
pub(crate) use worklane_stdx::chain;

impl From<worklane_slotfile::resolved::Error> for Failure {
    fn from(e: worklane_slotfile::resolved::Error) -> Failure {
        Failure::new(CONFIG, chain(&e))
    }
}

/// A guard refused for its filesystem is a slot directory in the wrong place: configuration.
fn guard_code(e: &worklane_guard::acquire::Error) -> u8 {
    match e {
        worklane_guard::acquire::Error::Filesystem { .. } => CONFIG,
        _ => OS_ERROR,
    }
}

/// Opening the slot directory wrongly placed or shaped is configuration; a failing system
/// call on it (listing, say) is a system error, whichever layer met it.
fn open_code(e: &worklane_slotfile::open::Error) -> u8 {
    match e {
        worklane_slotfile::open::Error::Io { .. } => OS_ERROR,
        _ => CONFIG,
    }
}

/// An epoch file's name refused is a lock name misused; a listing that failed is the
/// directory's problem; anything else is a system error.
fn epoch_code(e: &worklane_lease::epoch::Error) -> u8 {
    use worklane_lease::epoch::Error as E;
    match e {
        E::Name { .. } => USAGE,
        E::List { source, .. } => open_code(source),
        _ => OS_ERROR,
    }
}

fn lease_code(e: &worklane_lease::acquire::Error) -> u8 {
    use worklane_lease::acquire::Error as E;
    match e {
        E::Name { .. } | E::ReservedField { .. } | E::NameTooLong { .. } => USAGE,
        E::Guard { source, .. } => guard_code(source),
        E::List { source, .. } => open_code(source),
        E::EpochFiles { source, .. } => epoch_code(source),
        _ => OS_ERROR,
    }
}

fn adopt_code(e: &worklane_lease::adopt::Error) -> u8 {
    use worklane_lease::adopt::Error as E;
    match e {
        E::Name { .. } | E::ReservedField { .. } => USAGE,
        E::Epoch { source, .. } => epoch_code(source),
        _ => OS_ERROR,
    }
}

/// The exit code of a look at the slot directory that failed, by its step and cause.
fn look_code(e: &worklane_admission::look::Error) -> u8 {
    use worklane_admission::look::Error as E;
    match e {
        E::List { source, .. } => open_code(source),
        E::Probe { source, .. } => guard_code(source),
        _ => OS_ERROR,
    }
}

/// The exit code of a take that failed, by the step that failed and its cause.
fn take_code(e: &worklane_admission::take::Error) -> u8 {
    use worklane_admission::take::Error as E;
    match e {
        E::Config { .. } | E::Protocol { .. } => CONFIG,
        E::Look(look) => look_code(look),
        E::Count { source, .. } | E::Take { source, .. } | E::JoinLine { source, .. } => {
            lease_code(source)
        }
        // A weight no cap or share could ever admit: the caller asked wrongly.
        E::Weight { .. } | E::WeightOverShare { .. } => USAGE,
        _ => OS_ERROR,
    }
}

/// The exit code of a slot's adoption, annotation or release that failed.
fn slot_code(e: &worklane_admission::slot::Error) -> u8 {
    use worklane_admission::slot::Error as E;
    match e {
        E::AdoptGuard { source, .. } => guard_code(source),
        E::Adopt { source, .. } => adopt_code(source),
        E::Look(look) => look_code(look),
        _ => OS_ERROR,
    }
}

/// The exit code of an operator's change to STOP or the drain flag that failed.
fn operator_code(e: &worklane_admission::operator::Error) -> u8 {
    use worklane_admission::operator::Error as E;
    match e {
        E::DrainDir { source, .. } => open_code(source),
        E::Look(look) => look_code(look),
        _ => OS_ERROR,
    }
}

/// The exit code of a change to `protocol.json` that failed, or of a protocol not kept.
fn protocol_code(e: &worklane_admission::protocol::Error) -> u8 {
    use worklane_admission::protocol::Error as E;
    match e {
        E::Protocol { .. } => CONFIG,
        E::Look(look) => look_code(look),
        E::Count { source, .. } => lease_code(source),
        _ => OS_ERROR,
    }
}

/// The exit code of a try for a role that failed.
fn role_code(e: &worklane_admission::role::Error) -> u8 {
    use worklane_admission::role::Error as E;
    match e {
        E::Protocol { .. } => CONFIG,
        E::Look(look) => look_code(look),
        E::Role { source, .. } => lease_code(source),
        _ => OS_ERROR,
    }
}

/// Each error of the slot pool, by operation, with its code and its chain of causes.
macro_rules! from_pool_error {
    ($($error:ty => $code:ident),* $(,)?) => {$(
        impl From<$error> for Failure {
            fn from(e: $error) -> Failure {
                Failure::new($code(&e), chain(&e))
            }
        }
    )*};
}

from_pool_error! {
    worklane_admission::look::Error => look_code,
    worklane_admission::take::Error => take_code,
    worklane_admission::slot::Error => slot_code,
    worklane_admission::operator::Error => operator_code,
    worklane_admission::protocol::Error => protocol_code,
    worklane_admission::role::Error => role_code,
}

/// Leaving a place in line fails only on the system's side.
impl From<worklane_admission::line::Error> for Failure {
    fn from(e: worklane_admission::line::Error) -> Failure {
        Failure::new(OS_ERROR, chain(&e))
    }
}

/// A queued runner's wait: a look's or a take's code.
impl From<worklane_run::queued::runner::WaitError> for Failure {
    fn from(e: worklane_run::queued::runner::WaitError) -> Failure {
        use worklane_run::queued::runner::WaitError as E;
        match e {
            E::Look(e) => Failure::from(e),
            E::Take(e) => Failure::from(e),
            _ => Failure::new(OS_ERROR, chain(&e)),
        }
    }
}

impl From<worklane_lease::acquire::Error> for Failure {
    fn from(e: worklane_lease::acquire::Error) -> Failure {
        let code = lease_code(&e);
        Failure::new(code, chain(&e))
    }
}

impl From<worklane_lease::adopt::Error> for Failure {
    fn from(e: worklane_lease::adopt::Error) -> Failure {
        let code = adopt_code(&e);
        Failure::new(code, chain(&e))
    }
}

impl From<worklane_slotfile::write::Error> for Failure {
    fn from(e: worklane_slotfile::write::Error) -> Failure {
        Failure::new(OS_ERROR, chain(&e))
    }
}

impl From<worklane_run::supervise::Error> for Failure {
    fn from(e: worklane_run::supervise::Error) -> Failure {
        use worklane_run::supervise::Error as E;
        match &e {
            E::NoCommand => Failure::new(USAGE, "no command given after --"),
            E::NotFound { .. } => Failure::new(NOT_FOUND, chain(&e)),
            E::PermissionDenied { .. } | E::Start { .. } => Failure::new(CANNOT_EXECUTE, chain(&e)),
            // STOP or a drain refuses the build's own job slot as it refuses any slot.
            E::JobsRefused { .. } => Failure::new(UNAVAILABLE, chain(&e)),
            E::JobSlot { source } => Failure::new(take_code(source), chain(&e)),
            _ => Failure::new(OS_ERROR, chain(&e)),
        }
    }
}

impl From<worklane_slotfile::name::Error> for Failure {
    fn from(e: worklane_slotfile::name::Error) -> Failure {
        Failure::new(USAGE, chain(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use worklane_stdx::assert_no_part_repeats;

    #[test]
    fn library_errors_map_to_the_documented_codes() {
        let config = worklane_slotfile::Config::parse(b"{", std::path::Path::new("config.json"))
            .expect_err("a broken config");
        let failure = Failure::from(worklane_admission::take::Error::Config { source: config });
        assert_eq!(
            failure.code, CONFIG,
            "a config re-read while running: {}",
            failure.message
        );
        assert!(
            failure.message.contains("config.json"),
            "{}",
            failure.message
        );
        let reserved = Failure::from(worklane_lease::acquire::Error::ReservedField {
            field: "pid".into(),
        });
        assert_eq!(reserved.code, USAGE, "{}", reserved.message);
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = worklane_slotfile::SlotDir::open(temp.path()).expect("open");
        let name = dir
            .file("role-a/b.lease")
            .expect_err("not one path component");
        assert_eq!(Failure::from(name).code, USAGE, "a bad role name");
        let identity = Failure::from(worklane_lease::acquire::Error::Process {
            resource: "agent-0.lock".into(),
            source: worklane_identity::process::Error::NotFound { pid: 7 },
        });
        assert_eq!(identity.code, OS_ERROR, "{}", identity.message);

        // The same directory problem maps alike through either layer.
        let io = || worklane_slotfile::open::Error::Io {
            op: "list",
            path: temp.path().to_owned(),
            source: std::io::Error::other("EIO"),
        };
        let missing = || worklane_slotfile::open::Error::Missing {
            path: temp.path().join("nope"),
        };
        assert_eq!(
            Failure::from(worklane_admission::look::Error::List {
                dir: temp.path().to_owned(),
                source: io()
            })
            .code,
            OS_ERROR
        );
        assert_eq!(
            Failure::from(worklane_lease::acquire::Error::List {
                resource: "agent-0.lock".into(),
                source: io()
            })
            .code,
            OS_ERROR
        );
        assert_eq!(
            Failure::from(worklane_admission::look::Error::List {
                dir: temp.path().to_owned(),
                source: missing()
            })
            .code,
            CONFIG
        );
        assert_eq!(
            Failure::from(worklane_lease::acquire::Error::List {
                resource: "agent-0.lock".into(),
                source: missing()
            })
            .code,
            CONFIG
        );
    }

    #[test]
    fn a_look_maps_and_renders_alike_in_every_operation() {
        use worklane_admission::{look, operator, protocol, role, slot, take};
        let temp = tempfile::tempdir().expect("temp dir");
        let missing = || look::Error::List {
            dir: temp.path().to_owned(),
            source: worklane_slotfile::open::Error::Missing {
                path: temp.path().join("nope"),
            },
        };
        let alone = chain(&missing());
        for (what, failure) in [
            ("a view", Failure::from(missing())),
            ("a take", Failure::from(take::Error::from(missing()))),
            ("a slot", Failure::from(slot::Error::from(missing()))),
            (
                "an operator",
                Failure::from(operator::Error::from(missing())),
            ),
            (
                "protocol.json",
                Failure::from(protocol::Error::from(missing())),
            ),
            ("a role", Failure::from(role::Error::from(missing()))),
        ] {
            assert_eq!(failure.code, CONFIG, "{what}: {}", failure.message);
            assert_eq!(failure.message, alone, "{what}: the look's own words");
        }
    }

    #[test]
    fn real_errors_render_each_part_once() {
        use worklane_lease::{Options, Request, acquire};
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = worklane_slotfile::SlotDir::open(temp.path()).expect("open");
        let take = |name: &str| {
            acquire(&dir, name, &Request::new("test"), &Options::process())
                .expect_err("cannot be acquired")
        };

        let name = take("a/b.lock");
        std::fs::create_dir(temp.path().join(".dir.lock.flock")).expect("a directory guard");
        let guard = take("dir.lock");
        std::fs::write(
            temp.path().join(format!("max.lock.epoch.{}", u64::MAX)),
            b"",
        )
        .expect("the last epoch");
        let epoch = take("max.lock");
        let missing = worklane_slotfile::SlotDir::open(&temp.path().join("nope"))
            .expect_err("no such directory");
        let config = worklane_slotfile::Config::parse(b"{", std::path::Path::new("config.json"))
            .expect_err("a broken config");

        for (what, error, code) in [
            ("a bad name", &name as &dyn std::error::Error, USAGE),
            ("a directory as the guard", &guard, OS_ERROR),
            ("an epoch that cannot grow", &epoch, OS_ERROR),
        ] {
            assert_no_part_repeats(error);
            let failure = Failure::from(match what {
                "a bad name" => take("a/b.lock"),
                "a directory as the guard" => take("dir.lock"),
                _ => take("max.lock"),
            });
            assert_eq!(failure.code, code, "{what}: {}", failure.message);
            assert_eq!(
                failure.message,
                chain(error),
                "{what}: rendered alike twice"
            );
        }
        assert!(
            chain(&epoch).starts_with("cannot advance the epoch of lease max.lock at "),
            "the step and the lease first: {}",
            chain(&epoch)
        );
        assert!(
            chain(&guard).starts_with("cannot take the guard of lease dir.lock: "),
            "{}",
            chain(&guard)
        );
        // The slot pool's steps and the budget ledger's troubles, met for real.
        let pool_dir = tempfile::tempdir().expect("temp dir");
        let env =
            worklane_slotfile::Environment::from_process().var("AGENT_SLOTS_DIR", pool_dir.path());
        let pool = worklane_admission::Pool::new(
            worklane_slotfile::SlotDir::resolve_in(&env).expect("resolve"),
        );
        std::fs::create_dir(pool_dir.path().join(".full-run.lock.flock"))
            .expect("a directory as the full run's guard");
        let request = worklane_lease::Request::new("test");
        let taken = pool
            .try_take(worklane_admission::Kind::FullRun, &request)
            .expect_err("the guard is a directory");
        std::fs::write(pool_dir.path().join("config.json"), b"{").expect("a broken config");
        let caps = pool
            .try_take(worklane_admission::Kind::Agent, &request)
            .expect_err("the config is broken");
        for (what, error, code, first) in [
            (
                "a guard that is a directory",
                taken,
                OS_ERROR,
                "cannot take a slot of kind full-run: cannot take the guard of lease \
                 full-run.lock: ",
            ),
            (
                "a broken config",
                caps,
                CONFIG,
                "cannot load the pool's caps: ",
            ),
        ] {
            assert_no_part_repeats(&error);
            let text = chain(&error);
            assert!(
                text.starts_with(first),
                "{what}: the pool's step first: {text}"
            );
            let failure = Failure::from(error);
            assert_eq!(failure.code, code, "{what}: {}", failure.message);
            assert_eq!(failure.message, text, "{what}: rendered with its chain");
        }
        let key = worklane_budget::CredentialKey::of_token("ghp_test_token_not_real");
        std::fs::create_dir(temp.path().join(format!(".{}.flock", key.lock_name())))
            .expect("a directory as the budget lock's guard");
        let grant = worklane_budget::Ledger::new(dir.clone())
            .take(&key, "core", "test")
            .expect("a broken lock lets the call go");
        let trouble = grant.unaccounted.expect("unaccounted, saying why");
        assert!(
            matches!(trouble, worklane_budget::Trouble::Lock { .. }),
            "{trouble:?}"
        );
        assert_no_part_repeats(&trouble);
        assert!(
            chain(&trouble).starts_with(&format!(
                "cannot take the budget lock {}: cannot take the guard of lease {}: ",
                key.lock_name(),
                key.lock_name()
            )),
            "{}",
            chain(&trouble)
        );
        assert_no_part_repeats(&worklane_admission::operator::Error::DrainDir {
            dir: temp.path().join("nope"),
            source: missing,
        });
        assert_no_part_repeats(&worklane_admission::take::Error::Config { source: config });
    }
}
