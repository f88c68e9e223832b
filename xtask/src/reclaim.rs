//! `cargo xtask reclaim-guards [--dir DIR] [--apply]`: in a quiescent maintenance window,
//! remove the guard inodes no resource file needs and the temp aliases crashed publishers left.
//!
//! The window: STOP or a drain in force, and nothing live: no guard held, no lock record or
//! role lease that counts as held. Otherwise nothing is touched and the refusal says what is
//! live. A dry run (the default) says what `--apply` would remove.
//!
//! [`run`] resolves the directory like the CLI (`--dir` sets `AGENT_SLOTS_DIR`), refuses unless
//! STOP or a drain is in force ([`Outcome::NoWindow`], exit 69), then refuses if any
//! `Pool::snapshot` entry counts as held or any guard (`worklane_guard::reclaim::scan`) is held
//! ([`Outcome::Live`], exit 75); otherwise it plans (dry run) or applies
//! `reclaim::remove_guard` for guards whose resource file is absent (re-checked while held) and
//! `remove_temp_alias` (dry run: `is_stale_temp_alias`) for aliases at least
//! [`TEMP_MIN_AGE_MS`] old. Its exit codes are the CLI's ([`reclaim_code`], from `exit.rs`,
//! which a test checks against `crates/cli/src/exit.rs`): 0 done, 69 no window, 75 something
//! live, 64 usage, 78 any other error (the directory, its config, a file it cannot list, stat
//! or unlink).

use crate::{USAGE, exit};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use worklane_admission::{DrainState, Pool};
use worklane_guard::reclaim::{self, Entry, Removal};
use worklane_lease::{Clock, SystemClock};
use worklane_slotfile::{Environment, SlotDir};
use worklane_stdx::chain;

/// A temp alias younger than this may belong to a publisher at work: left alone.
pub(crate) const TEMP_MIN_AGE_MS: u64 = 60_000;

/// A slot's state as a person reads it.
fn state_words(state: &worklane_admission::SlotState) -> String {
    use worklane_admission::SlotState;
    match state {
        SlotState::GuardHeld => "a live process holds its guard".to_owned(),
        SlotState::Live(why) => why.to_string(),
        SlotState::Dead(why) => format!("free to take over: {why}"),
    }
}

/// How a reclaim run ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not a maintenance window (no STOP, no drain in force): nothing was touched. What is
    /// live is said all the same.
    NoWindow(Vec<String>),
    /// A window, but something is live: nothing was touched.
    Live(Vec<String>),
    /// Done (or, in a dry run, planned): what was (or would be) removed, and guards found
    /// busy while applying.
    Done {
        removed: Vec<String>,
        busy: Vec<String>,
    },
}

/// `cargo xtask reclaim-guards [--dir DIR] [--apply]`: its arguments read, [`run`] in the
/// process's environment, the report on stdout and the outcome as an exit code.
pub(crate) fn reclaim_guards(args: &[String]) -> ExitCode {
    let mut dir = None;
    let mut apply = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--apply" => apply = true,
            "--dir" => match args.next() {
                Some(d) => dir = Some(std::path::PathBuf::from(d)),
                None => {
                    eprintln!("xtask reclaim-guards: --dir needs a directory\n{USAGE}");
                    return ExitCode::from(exit::USAGE);
                }
            },
            other => {
                eprintln!("xtask reclaim-guards: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(exit::USAGE);
            }
        }
    }
    let env = Environment::from_process();
    match run(&env, dir.as_deref(), apply, &mut std::io::stdout()) {
        Ok(outcome) => ExitCode::from(reclaim_code(&outcome)),
        Err(e) => {
            eprintln!("xtask reclaim-guards: {e}");
            ExitCode::from(exit::CONFIG)
        }
    }
}

/// The exit code of a reclaim run: 0 done, 69 no window, 75 something live.
fn reclaim_code(outcome: &Outcome) -> u8 {
    match outcome {
        Outcome::Done { .. } => 0,
        Outcome::NoWindow(_) => exit::UNAVAILABLE,
        Outcome::Live(_) => exit::TEMP_FAIL,
    }
}

/// Runs the reclaim in `env`'s slot directory, or `dir` when given, writing a report to
/// `out`. `Err` is a problem with the directory or its config.
pub(crate) fn run(
    env: &Environment,
    dir: Option<&Path>,
    apply: bool,
    out: &mut dyn Write,
) -> Result<Outcome, String> {
    let env = match dir {
        Some(dir) => {
            let dir =
                std::path::absolute(dir).map_err(|e| format!("--dir {}: {e}", dir.display()))?;
            env.clone().var("AGENT_SLOTS_DIR", dir)
        }
        None => env.clone(),
    };
    let pool = Pool::new(SlotDir::resolve_in(&env).map_err(|e| chain(&e))?);
    let slot_dir = pool.dir().clone();
    let path = slot_dir.path().to_owned();

    // What is live, in words: said whether or not this is a window, so that an operator
    // outside one sees what would hold it up.
    let mut live = Vec::new();
    let mut named = std::collections::HashSet::new();
    for view in pool.snapshot().map_err(|e| chain(&e))?.slots {
        if view.state.is_held() {
            live.push(format!(
                "{} is live: {}",
                view.name,
                state_words(&view.state)
            ));
            named.insert(view.name.clone());
        }
    }
    let entries = reclaim::scan(&slot_dir, &path).map_err(|e| chain(&e))?;
    for entry in &entries {
        if let Entry::Guard { resource } = entry
            && !named.contains(resource)
            && worklane_guard::is_held(&slot_dir, &path, resource).map_err(|e| chain(&e))?
        {
            live.push(format!("the guard of {resource} is held"));
        }
    }
    live.sort();
    live.dedup();

    let stop = pool.stop().map_err(|e| chain(&e))?;
    let draining = matches!(pool.drain().map_err(|e| chain(&e))?, DrainState::InForce(_));
    if stop.is_none() && !draining {
        let why = format!(
            "{} is not in a maintenance window: write STOP (`worklane stop-all maintenance`) or \
             a drain (`worklane drain --until 30m`) first, and let every holder finish",
            path.display()
        );
        let _ = writeln!(out, "refused: {why}");
        if live.is_empty() {
            let _ = writeln!(out, "nothing is live now");
        } else {
            let _ = writeln!(out, "live now ({}):", live.len());
            for line in &live {
                let _ = writeln!(out, "  {line}");
            }
        }
        let mut said = vec![why];
        said.extend(live);
        return Ok(Outcome::NoWindow(said));
    }
    if !live.is_empty() {
        let _ = writeln!(
            out,
            "refused: {} is not quiescent; nothing was removed:",
            path.display()
        );
        for line in &live {
            let _ = writeln!(out, "  {line}");
        }
        return Ok(Outcome::Live(live));
    }

    let exists = |name: &str| {
        rustix::fs::statat(&slot_dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
    };
    let now = SystemClock.now_ms();
    let mut removed = Vec::new();
    let mut busy = Vec::new();
    for entry in entries {
        match entry {
            Entry::Guard { resource } => {
                if exists(&resource) {
                    continue;
                }
                let name = worklane_guard::guard_name(&resource);
                if !apply {
                    removed.push(name);
                    continue;
                }
                match reclaim::remove_guard(&slot_dir, &path, &resource, || !exists(&resource))
                    .map_err(|e| chain(&e))?
                {
                    Removal::Removed => removed.push(name),
                    Removal::Busy => busy.push(name),
                    Removal::Needed => {}
                }
            }
            Entry::TempAlias { name } => {
                let gone = if apply {
                    reclaim::remove_temp_alias(&slot_dir, &path, &name, now, TEMP_MIN_AGE_MS)
                } else {
                    reclaim::is_stale_temp_alias(&slot_dir, &path, &name, now, TEMP_MIN_AGE_MS)
                };
                if gone.map_err(|e| chain(&e))? {
                    removed.push(name);
                }
            }
        }
    }
    removed.sort();
    let verb = if apply { "removed" } else { "would remove" };
    let _ = writeln!(
        out,
        "{} ({}): {verb} {} file(s){}",
        path.display(),
        if stop.is_some() {
            "STOP in force"
        } else {
            "drain in force"
        },
        removed.len(),
        if apply {
            ""
        } else {
            "; run again with --apply to remove them"
        }
    );
    for name in &removed {
        let _ = writeln!(out, "  {name}");
    }
    for name in &busy {
        let _ = writeln!(
            out,
            "  {name}: busy, left alone (a holder started meanwhile)"
        );
    }
    Ok(Outcome::Done { removed, busy })
}

#[cfg(test)]
mod tests {
    use super::{Outcome, reclaim_code, run};
    use std::path::Path;
    use std::time::{Duration, SystemTime};
    use worklane_admission::{Stop, stop};
    use worklane_lease::{Acquired, Clock, Options, Request, acquire};
    use worklane_slotfile::{Environment, SlotDir};
    use worklane_stdx::{assert_no_part_repeats, chain};
    use worklane_testkit::{Gated, gate};

    // Tests run on several threads, and a child being started by one holds copies of every
    // descriptor of the process until it execs. A reclaim must find every guard these tests
    // released free, so every release here runs with the fork gate quiet, and every process
    // is started through the gate.

    struct Site {
        temp: tempfile::TempDir,
    }

    impl Site {
        fn new() -> Site {
            let temp = tempfile::tempdir().expect("temp dir");
            Site { temp }
        }

        fn path(&self, name: &str) -> std::path::PathBuf {
            self.temp.path().join(name)
        }

        fn dir(&self) -> SlotDir {
            SlotDir::open(self.temp.path()).expect("open")
        }

        fn stop(&self) {
            let record = Stop {
                by: "test".into(),
                at: "2026-11-30T06:00:00.000Z".into(),
                reason: "maintenance".into(),
            };
            stop::write(&self.dir(), &record).expect("STOP");
        }

        /// The reclaim, with the gate quiet: it takes (and releases) every guard it removes or
        /// keeps, and a later step may need one free.
        fn run(&self, apply: bool) -> (Outcome, String) {
            let mut out = Vec::new();
            let outcome = gate::quietly(|| {
                run(
                    &Environment::from_process(),
                    Some(self.temp.path()),
                    apply,
                    &mut out,
                )
            })
            .expect("run");
            (outcome, String::from_utf8(out).expect("utf-8"))
        }

        /// A guard whose resource file is gone, as a rotated budget key leaves.
        fn orphan_guard(&self, resource: &str) {
            gate::quietly(|| {
                drop(
                    worklane_guard::Guard::try_acquire(self.dir(), self.temp.path(), resource)
                        .expect("guard")
                        .expect("free"),
                );
            });
        }

        /// Acquires `name` with the gate quiet (a TTL lease releases its guard before this
        /// returns); the lease must be released with [`release`].
        fn acquire(
            &self,
            name: &str,
            request: &Request,
            options: &Options,
        ) -> worklane_lease::Lease {
            match gate::quietly(|| acquire(&self.dir(), name, request, options)).expect("acquire") {
                Acquired::Held(lease) => lease,
                Acquired::Refused(r) => panic!("{name} must be free: {r}"),
            }
        }

        /// A lock record of this machine whose holder has exited.
        fn dead_record(&self, name: &str) {
            let lease = self.acquire(name, &Request::new("gone"), &Options::process());
            let ours = std::fs::read(self.path(name)).expect("record");
            release(lease);
            let mut dead = std::process::Command::new("true")
                .spawn_gated()
                .expect("spawn");
            let pid = dead.id();
            dead.wait().expect("reap");
            let mut record: serde_json::Value = serde_json::from_slice(&ours).expect("json");
            record["pid"] = pid.into();
            std::fs::write(self.path(name), serde_json::to_vec(&record).expect("json"))
                .expect("plant");
        }

        fn old_temp_alias(&self, name: &str) {
            let path = self.path(name);
            std::fs::write(&path, b"").expect("alias");
            std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("open")
                .set_modified(SystemTime::now() - Duration::from_secs(3600))
                .expect("mtime");
        }
    }

    /// Releases a lease with the gate quiet.
    fn release(lease: worklane_lease::Lease) {
        gate::quietly(|| lease.release()).expect("release");
    }

    fn exists(p: &Path) -> bool {
        p.symlink_metadata().is_ok()
    }

    #[test]
    fn outside_a_maintenance_window_nothing_is_touched() {
        let site = Site::new();
        site.orphan_guard("github-budget-0123456789abcdef.lock");
        let (outcome, said) = site.run(true);
        assert!(matches!(outcome, Outcome::NoWindow(_)), "{said}");
        assert!(said.contains("stop-all"), "says what to do: {said}");
        assert!(
            said.contains("nothing is live now"),
            "and what is live: {said}"
        );
        assert!(exists(
            &site.path(".github-budget-0123456789abcdef.lock.flock")
        ));
    }

    #[test]
    fn a_live_holder_refuses_the_reclaim_and_is_named() {
        let site = Site::new();
        site.orphan_guard("old.lock");
        site.stop();
        let lease = site.acquire(
            "agent-0.lock",
            &Request::new("harness"),
            &Options::process(),
        );
        let (outcome, said) = site.run(true);
        assert!(matches!(outcome, Outcome::Live(_)), "{said}");
        assert!(
            said.contains("agent-0.lock is live: a live process holds its guard"),
            "names the live holder, in words: {said}"
        );
        assert!(!said.contains("GuardHeld"), "no debug text: {said}");
        assert!(exists(&site.path(".old.lock.flock")), "nothing removed");
        // Outside a window, what is live is said too.
        std::fs::remove_file(site.path("STOP")).expect("lift STOP");
        let (outcome, said) = site.run(false);
        assert!(matches!(outcome, Outcome::NoWindow(_)), "{said}");
        assert!(said.contains("not in a maintenance window"), "{said}");
        assert!(
            said.contains("live now (1):") && said.contains("agent-0.lock is live"),
            "{said}"
        );
        site.stop();
        release(lease);

        // A held guard with no record behind it is live too.
        let held = worklane_guard::Guard::try_acquire(site.dir(), site.temp.path(), "x.lock")
            .expect("guard")
            .expect("free");
        let (outcome, said) = site.run(true);
        assert!(matches!(outcome, Outcome::Live(_)), "{said}");
        assert!(said.contains("x.lock"), "{said}");
        gate::quietly(|| drop(held));
    }

    #[test]
    fn in_a_quiet_window_unneeded_guards_and_old_aliases_go_and_the_rest_stays() {
        let site = Site::new();
        site.orphan_guard("github-budget-0123456789abcdef.lock");
        site.orphan_guard("agent-7.lock");
        // A resource that still exists keeps its guard: a budget state, and a lock record whose
        // holder is dead (it does not block the window, and a taker will need its guard).
        std::fs::write(site.path("kept.json"), b"{}").expect("state");
        site.orphan_guard("kept.json");
        site.dead_record("agent-3.lock");
        site.old_temp_alias(".agent-7.lock.flock.tmp-0123456789abcdef");
        std::fs::write(site.path(".agent-8.lock.flock.tmp-fedcba9876543210"), b"")
            .expect("young alias");
        site.stop();

        let (outcome, said) = site.run(false);
        let Outcome::Done { removed, busy } = outcome else {
            panic!("refused: {said}")
        };
        assert_eq!(
            removed,
            vec![
                ".agent-7.lock.flock".to_owned(),
                ".agent-7.lock.flock.tmp-0123456789abcdef".to_owned(),
                ".github-budget-0123456789abcdef.lock.flock".to_owned(),
            ],
            "{said}"
        );
        assert!(busy.is_empty());
        assert!(
            said.contains("--apply"),
            "a dry run says how to act: {said}"
        );
        assert!(
            exists(&site.path(".agent-7.lock.flock")),
            "a dry run removes nothing"
        );

        let (outcome, said) = site.run(true);
        assert!(matches!(outcome, Outcome::Done { .. }), "{said}");
        for gone in [
            ".agent-7.lock.flock",
            ".agent-7.lock.flock.tmp-0123456789abcdef",
            ".github-budget-0123456789abcdef.lock.flock",
        ] {
            assert!(!exists(&site.path(gone)), "{gone} removed: {said}");
        }
        for kept in [
            ".kept.json.flock",
            "kept.json",
            ".agent-3.lock.flock",
            "agent-3.lock",
            "STOP",
            ".agent-8.lock.flock.tmp-fedcba9876543210",
        ] {
            assert!(exists(&site.path(kept)), "{kept} kept: {said}");
        }
        // A reclaimed resource works as before: its guard is published again.
        let lease = site.acquire(
            "agent-7.lock",
            &Request::new("harness"),
            &Options::process(),
        );
        release(lease);
    }

    #[test]
    fn a_fresh_role_lease_between_pulses_refuses_the_reclaim() {
        // A TTL lease holds its guard only while it writes: between pulses only its record
        // says it is live.
        let site = Site::new();
        site.orphan_guard("old.lock");
        site.stop();
        let lease = site.acquire(
            "role-planner.lease",
            &Request::new("planner").field("role", "planner"),
            &Options::ttl(Duration::from_secs(60)),
        );
        assert!(
            !gate::quietly(|| {
                worklane_guard::is_held(site.dir(), site.temp.path(), "role-planner.lease")
            })
            .expect("probe"),
            "the guard is free between pulses"
        );
        let (outcome, said) = site.run(true);
        assert!(matches!(outcome, Outcome::Live(_)), "{said}");
        assert!(said.contains("role-planner.lease"), "{said}");
        assert!(exists(&site.path(".old.lock.flock")));
        release(lease);
    }

    /// A run that fails, and its message.
    fn failed(dir: &Path) -> String {
        let mut out = Vec::new();
        gate::quietly(|| run(&Environment::from_process(), Some(dir), true, &mut out))
            .expect_err("the run fails")
    }

    #[test]
    fn its_errors_are_said_with_each_part_once() {
        // The errors a reclaim meets, met for real: each is said as the CLI says one (the same
        // formatter), and no part repeats its cause, so nothing needs deduplicating.
        let site = Site::new();
        std::fs::write(site.path("config.json"), b"{").expect("a broken config");
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", site.temp.path());
        let config = SlotDir::resolve_in(&env).expect_err("the config is broken");
        assert_no_part_repeats(&config);
        assert_eq!(failed(site.temp.path()), chain(&config), "a broken config");

        let site = Site::new();
        site.stop();
        std::fs::create_dir(site.path(".x.lock.flock")).expect("a directory as a guard");
        let guard =
            gate::quietly(|| worklane_guard::is_held(site.dir(), site.temp.path(), "x.lock"))
                .expect_err("a directory is no guard");
        assert_no_part_repeats(&guard);
        assert_eq!(
            failed(site.temp.path()),
            chain(&guard),
            "a guard that cannot be probed"
        );
    }

    #[test]
    fn a_drain_alone_opens_the_window() {
        let site = Site::new();
        site.orphan_guard("old.lock");
        let pool = worklane_admission::Pool::new(
            SlotDir::resolve_in(
                &Environment::from_process().var("AGENT_SLOTS_DIR", site.temp.path()),
            )
            .expect("resolve"),
        );
        let now = worklane_lease::SystemClock.now_ms();
        pool.write_drain(&worklane_admission::Drain {
            since: worklane_lease::rfc3339_ms(now),
            until: worklane_lease::rfc3339_ms(now + 600_000),
            to: None,
        })
        .expect("drain");
        let (outcome, said) = site.run(true);
        assert!(matches!(outcome, Outcome::Done { .. }), "{said}");
        assert!(said.contains("drain in force"), "{said}");
        assert!(!exists(&site.path(".old.lock.flock")));
    }

    #[test]
    fn a_refused_reclaim_exits_with_the_clis_codes() {
        assert_eq!(
            reclaim_code(&Outcome::NoWindow(Vec::new())),
            69,
            "no window: unavailable, as a STOP or drain is in the CLI"
        );
        assert_eq!(
            reclaim_code(&Outcome::Live(Vec::new())),
            75,
            "something live: busy, try again later"
        );
        let done = Outcome::Done {
            removed: Vec::new(),
            busy: Vec::new(),
        };
        assert_eq!(reclaim_code(&done), 0);
    }
}
