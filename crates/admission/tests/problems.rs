//! `Pool::snapshot().problems`: every stray or broken file, what it does and its fix.
use super::*;
use worklane_admission::{Problem, Snapshot};

fn problem<'a>(snapshot: &'a Snapshot, name: &str) -> &'a Problem {
    snapshot
        .problems
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{name} is reported: {:#?}", snapshot.problems))
}

fn names(snapshot: &Snapshot) -> Vec<&str> {
    let mut names: Vec<&str> = snapshot.problems.iter().map(|p| &p.name[..]).collect();
    names.sort_unstable();
    names
}

/// The path of `name`, quoted for a shell as the fixes quote it.
fn quoted(snapshot: &Snapshot, name: &str) -> String {
    format!("'{}'", snapshot.dir.join(name).display())
}

#[test]
fn strays_where_slot_guards_belong_are_named_with_their_effect_and_fix() {
    let site = Site::new("{}");
    let dir = site.temp.path();
    // A held slot's guard and an unheld one's are what guards should be.
    let held = site.take(Kind::Agent);
    drop(site.take(Kind::Test { limit_ms: None }));
    std::fs::create_dir(dir.join(".agent-1.lock.flock")).expect("a directory");
    strays::fifo(&dir.join(".agent-2.lock.flock"));
    std::os::unix::fs::symlink("/etc/passwd", dir.join(".agent-3.lock.flock")).expect("a symlink");
    std::fs::write(dir.join(".test-1.lock.flock"), b"x").expect("a non-empty guard");
    std::fs::write(dir.join(".agent-4.lock.flock"), b"").expect("an unreadable guard");
    set_mode(&dir.join(".agent-4.lock.flock"), 0o600);
    std::fs::write(dir.join(".agent-5.lock.flock"), b"xy").expect("a non-empty 0600 guard");
    set_mode(&dir.join(".agent-5.lock.flock"), 0o600);
    std::fs::write(dir.join(".agent-6.lock.flock"), b"").expect("a group-readable guard");
    set_mode(&dir.join(".agent-6.lock.flock"), 0o640);
    std::fs::create_dir(dir.join(".other.lock.flock")).expect("a directory");
    let snapshot = site.snapshot();
    assert_eq!(
        names(&snapshot),
        [
            ".agent-1.lock.flock",
            ".agent-2.lock.flock",
            ".agent-3.lock.flock",
            ".agent-4.lock.flock",
            ".agent-5.lock.flock",
            ".other.lock.flock",
            ".test-1.lock.flock",
        ],
        "every broken guard, and no sound one: {:#?}",
        snapshot.problems
    );
    for (name, kind, resource) in [
        (".agent-1.lock.flock", "directory", "agent-1.lock"),
        (".agent-2.lock.flock", "FIFO", "agent-2.lock"),
        (".agent-3.lock.flock", "symbolic link", "agent-3.lock"),
    ] {
        let p = problem(&snapshot, name);
        assert_eq!(
            p.what,
            format!(
                "a {kind} sits where the guard of {resource} belongs: no process can hold \
                     {resource}: takes skip that index"
            ),
            "{name}"
        );
        assert_eq!(
            p.fix,
            format!(
                "rm -r -- {} (nobody can hold it; worklane recreates the guard)",
                quoted(&snapshot, name)
            ),
            "{name}"
        );
        assert_eq!(p.blocks, None, "{name} stops only its own index");
    }
    let p = problem(&snapshot, ".test-1.lock.flock");
    assert_eq!(
        p.what,
        "the guard of test-1.lock holds 1 bytes: no process can hold test-1.lock: takes \
             skip that index",
        "a guard with contents"
    );
    assert_eq!(
        p.fix,
        format!(
            "in a quiescent window (`worklane stop-all`, nothing held): rm -- {}",
            quoted(&snapshot, ".test-1.lock.flock")
        ),
        "a guard with contents may be written into while held: removed only when quiet"
    );
    assert_eq!(
        problem(&snapshot, ".agent-5.lock.flock").what,
        "the guard of agent-5.lock holds 2 bytes: no process can hold agent-5.lock: takes \
             skip that index",
        "contents first, whatever its mode"
    );
    let p = problem(&snapshot, ".agent-4.lock.flock");
    assert_eq!(
        p.what,
        "the guard of agent-4.lock has mode 0600: only its owner can open it, so every \
             other user's take of agent-4.lock fails",
        "an unreadable guard"
    );
    assert_eq!(
        p.fix,
        format!("chmod 0444 -- {}", quoted(&snapshot, ".agent-4.lock.flock")),
        "its fix"
    );
    assert_eq!(p.blocks, None, "its owner can still take it");
    let p = problem(&snapshot, ".other.lock.flock");
    assert_eq!(
        p.what,
        "a directory sits where the guard of other.lock belongs: no process can take \
             other.lock",
        "a lock that is no slot has no index to skip"
    );
    assert_eq!(p.blocks, None, "{p:?}");
    drop(held);
}

#[test]
fn a_broken_guard_of_slots_lock_or_the_full_run_stops_every_take_of_its_kind() {
    let site = Site::new("{}");
    let dir = site.temp.path();
    std::fs::create_dir(dir.join(".slots.lock.flock")).expect("a directory");
    std::fs::write(dir.join(".full-run.lock.flock"), b"x").expect("a non-empty guard");
    let snapshot = site.snapshot();
    let p = problem(&snapshot, ".slots.lock.flock");
    assert_eq!(
        p.what,
        "a directory sits where the guard of slots.lock belongs: no process can take \
             slots.lock, so every take of agent and test-run slots fails",
        "slots.lock"
    );
    assert_eq!(p.blocks, Some("agent and test-run slots"), "{p:?}");
    let p = problem(&snapshot, ".full-run.lock.flock");
    assert_eq!(
        p.what,
        "the guard of full-run.lock holds 1 bytes: no process can take full-run.lock, so \
             every take of the full run fails",
        "full-run.lock"
    );
    assert_eq!(p.blocks, Some("the full run"), "{p:?}");
    for kind in [Kind::Agent, Kind::FullRun] {
        let got = gate::quietly(|| site.pool.try_take(kind, &Request::new("t")));
        assert!(
            got.is_err(),
            "{}: a take fails, naming the file: {got:?}",
            kind.label()
        );
    }
}

#[test]
fn exhausted_epochs_are_named_with_what_they_stop() {
    let site = Site::new("{}");
    let max = u64::MAX;
    for marker in [
        format!("agent-0.lock.epoch.{max}"),
        format!("slots.lock.epoch.{max}"),
        format!("full-run.lock.epoch.{max}"),
        "agent-1.lock.epoch.5".to_owned(),
    ] {
        std::fs::write(site.temp.path().join(marker), b"").expect("plant");
    }
    let snapshot = site.snapshot();
    let agent = format!("agent-0.lock.epoch.{max}");
    let slots = format!("slots.lock.epoch.{max}");
    let full = format!("full-run.lock.epoch.{max}");
    let mut expected = vec![&agent[..], &full[..], &slots[..]];
    expected.sort_unstable();
    assert_eq!(
        names(&snapshot),
        expected,
        "every exhausted epoch, and not one that can still grow"
    );
    let p = problem(&snapshot, &agent);
    assert_eq!(
        p.what,
        "the fencing epoch of agent-0.lock is at its largest value, so agent-0.lock can \
             never be taken again (takes skip it)",
        "an index"
    );
    assert_eq!(
        p.fix,
        format!(
            "in a quiescent window, only if nothing fences on agent-0.lock's epoch: rm -- {} \
                 (its epochs start over at 1)",
            quoted(&snapshot, &agent)
        ),
        "its fix"
    );
    assert_eq!(p.blocks, None, "takes skip an index");
    let p = problem(&snapshot, &slots);
    assert_eq!(
        p.what,
        "the fencing epoch of slots.lock is at its largest value, so slots.lock can never \
             be taken again",
        "slots.lock"
    );
    assert_eq!(p.blocks, Some("agent and test-run slots"), "{p:?}");
    assert_eq!(
        problem(&snapshot, &full).blocks,
        Some("the full run"),
        "full-run.lock"
    );
}

#[test]
fn files_named_like_claims_that_are_no_claims_are_named() {
    let site = Site::new("{}");
    let dir = site.temp.path();
    std::fs::write(dir.join("slots.lock.0123456789abcdef.claim"), b"garbage\n")
        .expect("a garbage claim");
    std::fs::create_dir(dir.join("agent-1.lock.0123456789abcdef.claim"))
        .expect("a directory named like a claim");
    // A claim as a taker writes it (a lock record), and a name that is no claim name.
    site.write_record("agent-0.lock.0123456789abcdef.claim", &dead_record());
    std::fs::write(dir.join("agent-2.lock.0123456789abcde.claim"), b"garbage")
        .expect("no claim name");
    let snapshot = site.snapshot();
    assert_eq!(
        names(&snapshot),
        [
            "agent-1.lock.0123456789abcdef.claim",
            "slots.lock.0123456789abcdef.claim",
        ],
        "{:#?}",
        snapshot.problems
    );
    let p = problem(&snapshot, "slots.lock.0123456789abcdef.claim");
    assert_eq!(
        p.what,
        "a takeover claim of slots.lock that is not a lock record (garbage); the next take \
             of slots.lock clears it",
        "garbage"
    );
    assert_eq!(
        p.fix,
        format!(
            "rm -r -- {}",
            quoted(&snapshot, "slots.lock.0123456789abcdef.claim")
        ),
        "its fix"
    );
    assert_eq!(p.blocks, None, "{p:?}");
    let p = problem(&snapshot, "agent-1.lock.0123456789abcdef.claim");
    assert!(
        p.what
            .starts_with("named like a takeover claim of agent-1.lock but no claim ("),
        "a directory: {p:?}"
    );
}

#[test]
fn temp_files_are_named_from_a_minute_old() {
    let site = Site::new("{}");
    let dir = site.temp.path();
    let born: u64 = 1_796_012_839;
    let temp = ".agent-0.lock.tmp-0123456789abcdef";
    let alias = ".agent-0.lock.flock.tmp-0123456789abcdec";
    let other = ".notes";
    for name in [temp, alias, other] {
        std::fs::write(dir.join(name), b"").expect("plant");
        set_mtime(&dir.join(name), born);
    }
    let at = |now_ms: u64| {
        let pool = site
            .pool
            .clone()
            .with_clock(Arc::new(ManualClock::at(now_ms)));
        gate::quietly(|| pool.snapshot()).expect("snapshot")
    };
    let young = at(born * 1000 + 59_999);
    assert!(
        young.problems.is_empty(),
        "a temp file under a minute old may be a writer at work: {:#?}",
        young.problems
    );
    let old = at(born * 1000 + 60_000);
    assert_eq!(
        names(&old),
        [alias, temp],
        "a temp file and a guard temp alias a minute old, and no other hidden file"
    );
    let p = problem(&old, temp);
    assert_eq!(
        p.what,
        "a temp file left by a killed writer, over a minute old; the next agent or test-run \
             take removes it unless a writer still holds it",
        "what it is"
    );
    assert_eq!(p.fix, format!("rm -- {}", quoted(&old, temp)), "its fix");
    assert_eq!(p.blocks, None, "{p:?}");
}

/// A STOP file that is not one (a directory, not JSON) is a problem that blocks every take
/// (it counts as a STOP in force); a STOP `stop-all` wrote, or none, is none. A drain flag that
/// every harness ignores for a reason an operator should see is one too; one in force is not.
#[test]
fn a_stop_or_drain_flag_that_is_not_one_is_said_with_its_fix() {
    use worklane_admission::drain::{DrainState, Ignored};
    use worklane_admission::{Drain, drain_problem, stop_problem};
    let site = Site::new(r#"{"max_agents": 1}"#);
    let dir = site.pool.dir();
    assert_eq!(stop_problem(dir), None, "no STOP");
    std::fs::write(site.temp.path().join("STOP"), b"not json").expect("write");
    let problem = stop_problem(dir).expect("a STOP that is not one");
    assert_eq!(
        (problem.name.as_str(), problem.blocks),
        ("STOP", Some("every take"))
    );
    assert!(
        problem.what.contains("not a STOP record") && problem.fix.contains("resume-all"),
        "{problem:?}"
    );
    std::fs::remove_file(site.temp.path().join("STOP")).expect("rm");
    std::fs::create_dir(site.temp.path().join("STOP")).expect("mkdir");
    assert!(
        stop_problem(dir).is_some_and(|p| p.what.contains("cannot be read")),
        "a directory"
    );
    std::fs::remove_dir(site.temp.path().join("STOP")).expect("rmdir");
    worklane_admission::stop::write(
        dir,
        &Stop {
            by: "ops".into(),
            at: "2026-12-06T00:00:00.000Z".into(),
            reason: "x".into(),
        },
    )
    .expect("stop-all's STOP");
    assert_eq!(stop_problem(dir), None, "a STOP as stop-all writes it");

    let drain_dir = site.temp.path();
    let drain = Drain {
        since: "a".into(),
        until: "b".into(),
        to: None,
    };
    let unreadable = DrainState::Ignored(Ignored::Unreadable {
        detail: "not JSON".into(),
    });
    let far = DrainState::Ignored(Ignored::TooFarAhead {
        drain: drain.clone(),
    });
    assert!(drain_problem(drain_dir, &unreadable).is_some_and(|p| p.what.contains("not JSON")));
    assert!(drain_problem(drain_dir, &far).is_some_and(|p| p.what.contains("4 h")));
    assert_eq!(drain_problem(drain_dir, &DrainState::InForce(drain)), None);
    assert_eq!(drain_problem(drain_dir, &DrainState::None), None);
}

/// In a directory shared with its group (group write), an event journal its group cannot
/// append to is a problem, with the commands that give it back; one of mode 0660 and the
/// directory's group is none, nor is any journal in a directory of one user.
#[test]
fn a_journal_the_directory_s_group_cannot_append_to_is_said_with_its_fix() {
    use std::os::unix::fs::MetadataExt;
    let site = Site::new("{}");
    let journal = site.temp.path().join("journal.jsonl");
    std::fs::write(&journal, b"").expect("journal.jsonl");
    set_mode(&journal, 0o600);
    set_mode(site.temp.path(), 0o700);
    assert!(
        !names(&site.snapshot()).contains(&"journal.jsonl"),
        "a directory of one user: nobody else appends"
    );
    set_mode(site.temp.path(), 0o2770);
    let snapshot = site.snapshot();
    let found = problem(&snapshot, "journal.jsonl");
    let gid = std::fs::metadata(site.temp.path()).expect("stat").gid();
    let path = quoted(&snapshot, "journal.jsonl");
    assert!(
        found.what.contains("mode 0600") && found.what.contains(&format!("({gid})")),
        "its mode and the group left out: {found:?}"
    );
    assert_eq!(
        (found.fix.as_str(), found.blocks),
        (
            format!("chgrp {gid} {path} && chmod 0660 {path} (as its owner or root)").as_str(),
            None
        )
    );
    set_mode(&journal, 0o660);
    assert!(
        !names(&site.snapshot()).contains(&"journal.jsonl"),
        "0660 and the directory's group: every member appends"
    );
}
