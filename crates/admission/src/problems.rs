//! Stray and broken files in the slot directory: what each does to the pool and the command
//! that fixes it. Reported by `worklane slots` and `worklane why`; none of them stops every
//! take (PROTOCOL.md says how each is skipped or counted).

use crate::drain::{DRAIN_FILE, DrainState};
use crate::names::{FULL_RUN_LOCK, SLOTS_LOCK, slot_index};
use crate::stop::{STOP_FILE, Stop};
use worklane_guard::reclaim::{self, Entry};
use worklane_lease::Record;
use worklane_slotfile::{Hidden, SlotDir, SlotPath, TEMP_MIN_AGE_MS, is_temp_name};
use worklane_stdx::shell_quote;

/// One stray or broken file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Its name in the slot directory.
    pub name: String,
    /// What is wrong with it and what that does.
    pub what: String,
    /// The command that fixes it.
    pub fix: String,
    /// Whether it stops every take of some kind (a broken guard of `slots.lock` or
    /// `full-run.lock`), as opposed to being skipped.
    pub blocks: Option<&'static str>,
}

fn quoted(dir: &SlotDir, name: &str) -> String {
    let path = dir.path().join(name).display().to_string();
    format!("'{}'", path.replace('\'', r"'\''"))
}

/// Every stray or broken file of `dir`, at `now_ms`; `listed` and `hidden` are one listing of
/// its ordinary and hidden names (`SlotDir::list_with_hidden`), made once by the caller for
/// this and its other uses.
pub(crate) fn scan(
    dir: &SlotDir,
    now_ms: u64,
    listed: &[SlotPath],
    hidden: &[String],
) -> Vec<Problem> {
    let mut found = Vec::new();
    for hidden in dir.hidden_of(hidden.iter().cloned()) {
        let old = now_ms.saturating_sub(hidden.modified_ms) >= TEMP_MIN_AGE_MS;
        match reclaim::classify(&hidden.name) {
            Some(Entry::Guard { resource }) => {
                if let Some(problem) = guard_problem(dir, &hidden, &resource) {
                    found.push(problem);
                }
            }
            Some(Entry::TempAlias { .. }) if old => found.push(leftover(dir, &hidden.name)),
            None if old && is_temp_name(&hidden.name) => found.push(leftover(dir, &hidden.name)),
            _ => {}
        }
    }
    found.extend(protocol_problem(dir));
    found.extend(journal_problem(dir));
    for path in listed {
        let name = path.name();
        if let Some(problem) = exhausted_epoch(dir, name) {
            found.push(problem);
            continue;
        }
        let Some(lock) = claim_of(name) else {
            continue;
        };
        let what = match path.read() {
            Ok(Some(raw)) if Record::parse(&raw).is_ok() => continue,
            Ok(None) => continue,
            Ok(Some(_)) => format!(
                "a takeover claim of {lock} that is not a lock record (garbage); the next take \
                 of {lock} clears it"
            ),
            Err(e) => format!(
                "named like a takeover claim of {lock} but no claim ({e}); the next take of \
                 {lock} unlinks it unless it is a directory, which it then skips"
            ),
        };
        found.push(Problem {
            name: name.to_owned(),
            what,
            fix: format!("rm -r -- {}", quoted(dir, name)),
            blocks: None,
        });
    }
    found
}

/// `protocol.json` when it asks what this worklane cannot keep: every take, lease and enqueue
/// of this worklane is then refused (the views still work).
fn protocol_problem(dir: &SlotDir) -> Option<Problem> {
    let why = crate::protocol::check_dir(dir).err()?;
    Some(Problem {
        name: crate::protocol::PROTOCOL_FILE.to_owned(),
        what: format!("{why}; until then this worklane refuses every take, lease and enqueue here"),
        fix: match &why {
            crate::protocol::Unsupported::Unreadable { .. } => format!(
                "repair or remove {} (see PROTOCOL.md section 0)",
                quoted(dir, crate::protocol::PROTOCOL_FILE)
            ),
            _ => "upgrade worklane on this machine (see PROTOCOL.md's changelog)".to_owned(),
        },
        blocks: Some("every take"),
    })
}

/// The event journal when the directory's group cannot append to it (PROTOCOL.md 17.1: mode
/// 0660, the directory's group): in a directory shared with a group (group write on the
/// directory), a `journal.jsonl` without group read and write, or of another group, drops
/// every member's events (each member says so once on stderr).
fn journal_problem(dir: &SlotDir) -> Option<Problem> {
    use rustix::fs::{AtFlags, FileType};
    const JOURNAL: &str = "journal.jsonl";
    let shared = rustix::fs::fstat(dir).ok()?;
    if shared.st_mode & 0o020 == 0 {
        return None;
    }
    let stat = rustix::fs::statat(dir, JOURNAL, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        // Anything else at the name drops every writer's events: named by the readers'
        // own errors (`events`, `metrics`).
        return None;
    }
    let group_rw = stat.st_mode & 0o060 == 0o060;
    if group_rw && stat.st_gid == shared.st_gid {
        return None;
    }
    let gid = shared.st_gid;
    let path = quoted(dir, JOURNAL);
    Some(Problem {
        name: JOURNAL.to_owned(),
        what: format!(
            "the event journal is mode {:04o}, group {}: the directory's group ({gid}) cannot \
             append to it, so every member's events are dropped (PROTOCOL.md 17.1: 0660, the \
             directory's group)",
            stat.st_mode & 0o7777,
            stat.st_gid
        ),
        fix: format!("chgrp {gid} {path} && chmod 0660 {path} (as its owner or root)"),
        blocks: None,
    })
}

/// `Some(lock)` when `name` is `<lock>.<16 hex>.claim`.
fn claim_of(name: &str) -> Option<&str> {
    let rest = name.strip_suffix(".claim")?;
    let (lock, hex) = rest.rsplit_once('.')?;
    (hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()) && !lock.is_empty())
        .then_some(lock)
}

/// A slot whose `weight` does not count as written (PROTOCOL.md 12.10): a bad one (counted
/// as 1), one above the cap (counted as the cap), or one whose holder cannot be judged
/// (counted as 1). A dead holder's slot counts nothing, and is no problem.
pub(crate) fn weight_problem(dir: &SlotDir, view: &crate::SlotView, cap: u32) -> Option<Problem> {
    use crate::weight::Weight;
    if !matches!(view.kind, "agent" | "test") || view.units == 0 {
        return None;
    }
    let holder = view
        .record
        .as_ref()
        .and_then(|r| r.holder.pid.present().copied())
        .map_or_else(
            || "its holder".to_owned(),
            |pid| format!("its holder, pid {pid}"),
        );
    let name = view.name.as_str();
    let what = match &view.weight {
        Weight::Bad(raw) => format!(
            "its weight {raw} is not a whole number from 1 to 4294967295: it counts as 1 unit"
        ),
        Weight::Units(n) if view.units < (*n).min(cap) => format!(
            "its weight {n} is not counted, since its holder cannot be judged ({}): it counts \
             as 1 unit, as a record without a weight",
            match &view.state {
                crate::SlotState::Live(why) => why.to_string(),
                other => format!("{other:?}"),
            }
        ),
        Weight::Units(n) if *n > cap => format!(
            "its weight {n} is above the cap of {cap}: it counts as {cap} units, the whole cap, \
             until {holder} ends"
        ),
        Weight::Units(_) | Weight::Absent => return None,
    };
    let fix = match &view.weight {
        Weight::Units(n) if *n > cap && view.units >= cap => format!(
            "let {holder} end, or raise the cap to {n} (`worklane config set max_{}s {n}`)",
            if view.kind == "agent" {
                "agent"
            } else {
                "test_run"
            }
        ),
        _ => format!(
            "have the harness that wrote it write a whole-number weight; once {holder} has \
             ended (and only then), rm -- {}",
            quoted(dir, name)
        ),
    };
    Some(Problem {
        name: name.to_owned(),
        what,
        fix,
        blocks: None,
    })
}

fn leftover(dir: &SlotDir, name: &str) -> Problem {
    Problem {
        name: name.to_owned(),
        what: "a temp file left by a killed writer, over a minute old; the next agent or \
               test-run take removes it unless a writer still holds it"
            .to_owned(),
        fix: format!("rm -- {}", quoted(dir, name)),
        blocks: None,
    }
}

/// What a lock that can no longer be taken stops: every take of a kind for `slots.lock` and
/// `full-run.lock`, one index for a slot.
fn blocked_by(resource: &str) -> Option<&'static str> {
    match resource {
        SLOTS_LOCK => Some("agent and test-run slots"),
        FULL_RUN_LOCK => Some("the full run"),
        _ => None,
    }
}

/// An epoch marker at `u64::MAX`: its lock can never be acquired again.
fn exhausted_epoch(dir: &SlotDir, name: &str) -> Option<Problem> {
    let (lock, digits) = name.rsplit_once(".epoch.")?;
    (digits == u64::MAX.to_string()).then(|| Problem {
        name: name.to_owned(),
        what: format!(
            "the fencing epoch of {lock} is at its largest value, so {lock} can never be taken \
             again{}",
            if blocked_by(lock).is_some() {
                ""
            } else {
                " (takes skip it)"
            }
        ),
        fix: format!(
            "in a quiescent window, only if nothing fences on {lock}'s epoch: rm -- {} (its \
             epochs start over at 1)",
            quoted(dir, name)
        ),
        blocks: blocked_by(lock),
    })
}

fn guard_problem(dir: &SlotDir, hidden: &Hidden, resource: &str) -> Option<Problem> {
    let name = hidden.name.as_str();
    let what = match hidden.is_regular() {
        true if hidden.size == 0 && hidden.mode & 0o044 == 0 => format!(
            "the guard of {resource} has mode {:04o}: only its owner can open it, so every \
             other user's take of {resource} fails",
            hidden.mode
        ),
        true if hidden.size == 0 => return None,
        true => format!("the guard of {resource} holds {} bytes", hidden.size),
        false => format!(
            "a {} sits where the guard of {resource} belongs",
            hidden.kind
        ),
    };
    let blocks = blocked_by(resource);
    let effect = if let Some(what) = blocks {
        format!("no process can take {resource}, so every take of {what} fails")
    } else if slot_index("agent", resource).is_some() || slot_index("test", resource).is_some() {
        format!("no process can hold {resource}: takes skip that index")
    } else {
        format!("no process can take {resource}")
    };
    // A regular file with bytes may be a real guard someone wrote into while a holder had it
    // locked: only remove it when nothing runs. Anything else can never be held by a process
    // following the protocol.
    if hidden.is_regular() && hidden.size == 0 {
        // Only unreadable: its owner (and root) can still take it.
        return Some(Problem {
            name: name.to_owned(),
            what,
            fix: format!("chmod 0444 -- {}", quoted(dir, name)),
            blocks: None,
        });
    }
    let fix = if hidden.is_regular() {
        format!(
            "in a quiescent window (`worklane stop-all`, nothing held): rm -- {}",
            quoted(dir, name)
        )
    } else {
        format!(
            "rm -r -- {} (nobody can hold it; worklane recreates the guard)",
            quoted(dir, name)
        )
    };
    Some(Problem {
        name: name.to_owned(),
        what: format!("{what}: {effect}"),
        fix,
        blocks,
    })
}

/// What is wrong with the STOP file, when it is there but not a STOP as `stop-all` writes
/// one (a directory, FIFO or link, a file over 64 KiB or one this user cannot read, not
/// JSON): every harness treats it as a STOP in force all the same.
pub fn stop_problem(dir: &SlotDir) -> Option<Problem> {
    let file = dir.file(STOP_FILE).ok()?;
    let wrong = match file.read() {
        Ok(None) => return None,
        Ok(Some(raw)) => match serde_json::from_slice::<Stop>(&raw) {
            Ok(_) => return None,
            Err(e) => format!("is not a STOP record ({e})"),
        },
        Err(e) => format!("cannot be read as one ({})", worklane_stdx::chain(&e)),
    };
    let path = quoted(dir, STOP_FILE);
    Some(Problem {
        name: STOP_FILE.to_owned(),
        what: format!(
            "the STOP file {wrong}: every harness treats it as a STOP in force, but nobody can \
             tell who wrote it or why"
        ),
        fix: format!(
            "`worklane resume-all` lifts it, `worklane stop-all REASON` replaces it with a \
             readable one (a directory with files in it: look inside, then rm -r -- {path})"
        ),
        blocks: Some("every take"),
    })
}

/// What is wrong with the drain flag (in `drain_dir`), when it is there but ignored for a
/// reason an operator should see: it cannot be read (every harness then ignores it), or it says more than 4 h.
pub fn drain_problem(drain_dir: &std::path::Path, drain: &DrainState) -> Option<Problem> {
    use crate::drain::Ignored;
    let path = drain_dir.join(DRAIN_FILE).display().to_string();
    let quoted = format!("'{}'", path.replace('\'', r"'\''"));
    let (what, fix) = match drain {
        DrainState::Ignored(Ignored::Unreadable { detail }) => (
            format!(
                "the drain flag cannot be read ({detail}): every harness ignores it, so no \
                 drain is in force"
            ),
            format!("rm -r -- {quoted}, then `worklane drain --until TIME` if a drain is wanted"),
        ),
        DrainState::Ignored(Ignored::TooFarAhead { drain }) => (
            format!("the drain flag ({drain}) ends more than 4 h ahead: every harness ignores it"),
            "`worklane drain --until TIME` within 4 h (again when the update takes longer), \
             or `worklane undrain`"
                .to_owned(),
        ),
        _ => return None,
    };
    Some(Problem {
        name: DRAIN_FILE.to_owned(),
        what,
        fix,
        blocks: None,
    })
}

/// The STOP in force that `stop-all` could not replace (`why`: a directory with files in it
/// sits at its name): what [`stop_problem`] says of it, or that a STOP is in force, with why
/// it could not be replaced. It is in force all the same.
pub fn stop_not_replaced(dir: &SlotDir, why: &dyn std::error::Error) -> Problem {
    let mut problem = stop_problem(dir).unwrap_or(Problem {
        name: STOP_FILE.to_owned(),
        what: "a STOP is in force that could not be replaced".to_owned(),
        fix: "`worklane resume-all`, then `worklane stop-all REASON`".to_owned(),
        blocks: Some("every take"),
    });
    problem.what = format!(
        "{}; it could not be replaced: {}",
        problem.what,
        worklane_stdx::chain(why)
    );
    problem
}

/// What stays, and its fix, when `resume-all` could not remove the STOP of `dir`: said after
/// why.
#[must_use]
pub fn stop_not_removed(dir: &SlotDir) -> String {
    format!(
        "the STOP stays in force: a directory with files in it sits at its name (look inside, \
         then rm -r -- {})",
        shell_quote(&dir.path().join(STOP_FILE).display().to_string())
    )
}

/// What stays, and its fix, when `drain` could not write the flag in `drain_dir`: said after
/// why.
#[must_use]
pub fn drain_not_written(drain_dir: &std::path::Path) -> String {
    format!(
        "no drain is in force (if a directory with files in it sits at its name: look inside, \
         then rm -r -- {})",
        shell_quote(&drain_dir.join(DRAIN_FILE).display().to_string())
    )
}

/// What sits at the drain flag's name in `drain_dir` when `undrain` could not remove it
/// (`why`) and it is no drain flag in force: every harness ignores it, so the drain is over.
pub fn drain_not_removed(drain_dir: &std::path::Path, why: &dyn std::error::Error) -> Problem {
    Problem {
        name: DRAIN_FILE.to_owned(),
        what: format!(
            "something that is no drain flag sits at its name and could not be removed ({}): \
             every harness ignores it",
            worklane_stdx::chain(why)
        ),
        fix: format!(
            "look inside, then rm -r -- {}",
            shell_quote(&drain_dir.join(DRAIN_FILE).display().to_string())
        ),
        blocks: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_names() {
        assert_eq!(
            claim_of("slots.lock.0123456789abcdef.claim"),
            Some("slots.lock")
        );
        assert_eq!(
            claim_of("slots.lock.0123456789ABCDEF.claim"),
            Some("slots.lock")
        );
        assert_eq!(claim_of("slots.lock.0123.claim"), None);
        assert_eq!(claim_of(".0123456789abcdef.claim"), None);
        assert_eq!(claim_of("slots.lock"), None);
    }

    #[test]
    fn what_stays_when_stop_or_the_drain_flag_cannot_be_changed() {
        let temp = tempfile::tempdir().expect("a temp dir");
        let dir = SlotDir::open(temp.path()).expect("the slot dir");
        let why = std::io::Error::other("Directory not empty");
        let stop = stop_not_replaced(&dir, &why);
        assert_eq!(stop.name, STOP_FILE);
        assert_eq!(
            stop.what,
            "a STOP is in force that could not be replaced; it could not be replaced: \
             Directory not empty"
        );
        assert_eq!(stop.blocks, Some("every take"));
        let plain = temp.path().join(STOP_FILE).display().to_string();
        assert!(
            stop_not_removed(&dir).ends_with(&format!("rm -r -- {})", shell_quote(&plain))),
            "{}",
            stop_not_removed(&dir)
        );
        let drain = drain_not_removed(temp.path(), &why);
        assert_eq!(
            drain.what,
            "something that is no drain flag sits at its name and could not be removed \
             (Directory not empty): every harness ignores it"
        );
        assert!(drain.fix.starts_with("look inside, then rm -r -- "));
        assert!(drain_not_written(temp.path()).starts_with("no drain is in force"));
    }
}
