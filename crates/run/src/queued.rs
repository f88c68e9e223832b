//! Queued full runs (`worklane queue full-run`): a detached runner waits in the full-run line
//! (PROTOCOL.md 12.9), then runs its command holding `full-run.lock`. Here: which runners
//! wait or run ([`list`]), and a cancel that signals a runner only when its record proves the
//! process is it ([`cancel`]); and the runner's own mechanism ([`runner`]: its log, and its
//! wait in the line until it holds `full-run.lock`, [`runner::wait_turn`]).
//!
//! A line entry is a file any member of the slot directory's group may have put there, naming
//! any pid: a cancel trusts it only as `stop-all` trusts a record (the [`crate::enforce`]
//! rule): only its owner can have written it (no group or other write bit, one name), the
//! process at the pid is that owner's, on this host, boot and pid namespace, and has the start
//! the record names; the signal goes through a pidfd rechecked for that start.

pub mod runner;

use crate::enforce::{Target, send};
use std::time::{Duration, Instant};
use worklane_admission::{FULL_RUN_LOCK, Kind, Pool};
use worklane_identity::{Field, Place};
use worklane_lease::Record;
use worklane_slotfile::Written;

/// The `owner` of a queued full run's records (its line entry, then `full-run.lock`).
pub const QUEUED_OWNER: &str = "queued full run";

/// How a queued full run is named in `queue ls` and `queue cancel`: `fr-<runner pid>`.
pub const ID_PREFIX: &str = "fr-";

/// How long [`cancel`] waits for a signalled runner to leave the line.
pub const CANCEL_PATIENCE: Duration = Duration::from_secs(5);

/// Where a queued full run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// In the full-run line, at this place (1 is next).
    Waiting {
        /// Its place in line.
        position: u32,
    },
    /// Holding `full-run.lock`: its command runs.
    Running,
}

/// A queued full run as its runner's record names it.
#[derive(Debug, Clone)]
pub struct Queued {
    /// The runner's pid.
    pub pid: u32,
    /// Where it is.
    pub state: State,
    /// Its priority in line (0 once running).
    pub priority: i64,
    /// Since when: its place's start, or when it took the lock (RFC 3339).
    pub since: String,
    /// Its command line, as recorded.
    pub command: Option<String>,
    /// Its log, as recorded.
    pub log: Option<String>,
    record: Record,
    writer: Option<Written>,
}

/// Every queued full run: those waiting in the full-run line (live entries whose record is a
/// runner's), then the one running, if `full-run.lock` is held by a runner.
pub fn list(pool: &Pool) -> Result<Vec<Queued>, worklane_admission::look::Error> {
    let mut out = Vec::new();
    let mut position = 0u32;
    for view in pool.line_views()? {
        if view.entry.kind != Kind::FullRun.label() || !view.live {
            continue;
        }
        position += 1;
        let Some(record) = view.record else {
            continue;
        };
        if record.owner.as_deref() != Some(QUEUED_OWNER) {
            continue;
        }
        let Some(pid) = record.pid() else { continue };
        out.push(Queued {
            pid,
            state: State::Waiting { position },
            priority: view.entry.priority,
            since: worklane_lease::rfc3339_ms(view.entry.start_ms),
            command: record.extra_str("command").map(str::to_owned),
            log: record.extra_str("log").map(str::to_owned),
            record,
            writer: view.writer,
        });
    }
    if !pool.idle()? {
        let path = pool.dir().file(FULL_RUN_LOCK).map_err(|source| {
            worklane_admission::look::Error::Name {
                name: FULL_RUN_LOCK.to_owned(),
                source,
            }
        })?;
        if let Ok(Some((raw, writer))) = path.read_with_owner()
            && let Ok(record) = Record::parse(&raw)
            && record.owner.as_deref() == Some(QUEUED_OWNER)
            && let Some(pid) = record.pid()
        {
            out.push(Queued {
                pid,
                state: State::Running,
                priority: 0,
                since: record.acquired_at.clone().unwrap_or_default(),
                command: record.extra_str("command").map(str::to_owned),
                log: record.extra_str("log").map(str::to_owned),
                record,
                writer: Some(writer),
            });
        }
    }
    Ok(out)
}

/// What [`cancel`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// The runner was sent SIGTERM and left the line: its command never ran.
    Left {
        /// Its log, as recorded.
        log: Option<String>,
    },
    /// No queued full run waits with that pid.
    NotQueued,
    /// It runs already (since then): a cancel of a waiting run does not end a running one.
    Running {
        /// Since when.
        since: String,
    },
    /// Its record does not prove the process at the pid is the runner (or this user may not
    /// signal it): nothing was signalled.
    Unproven {
        /// Why, in words.
        why: String,
    },
    /// It was sent SIGTERM but is still in line after [`CANCEL_PATIENCE`].
    StillThere,
}

/// Cancels the queued full run whose runner is `pid`, if it still waits: SIGTERM to the
/// runner (it leaves the line and logs why), only when its record proves the process is it
/// (the module's rule); then waits up to [`CANCEL_PATIENCE`] for it to leave.
pub fn cancel(pool: &Pool, pid: u32) -> Result<Cancelled, worklane_admission::look::Error> {
    let Some(queued) = list(pool)?.into_iter().find(|q| q.pid == pid) else {
        return Ok(Cancelled::NotQueued);
    };
    if queued.state == State::Running {
        return Ok(Cancelled::Running {
            since: queued.since,
        });
    }
    let target = match proven(&queued) {
        Ok(target) => target,
        Err(why) => return Ok(Cancelled::Unproven { why }),
    };
    send(&target, rustix::process::Signal::TERM);
    let deadline = Instant::now() + CANCEL_PATIENCE;
    while Instant::now() < deadline {
        if !list(pool)?.iter().any(|q| q.pid == pid) {
            return Ok(Cancelled::Left { log: queued.log });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Cancelled::StillThere)
}

/// The runner a queued full run's record names, as a target to signal, if the record proves
/// it (the module's rule); else why not.
fn proven(queued: &Queued) -> Result<Target, String> {
    let writer = queued
        .writer
        .ok_or_else(|| "its record could not be read".to_owned())?;
    if !writer.only_by_owner() {
        return Err(format!(
            "its record (mode {:o}, {} name(s)) may have been written by others than its owner \
             (uid {})",
            writer.mode, writer.links, writer.uid
        ));
    }
    let (Field::Present(place), Field::Present(identity)) =
        (&queued.record.holder.place, &queued.record.holder.identity)
    else {
        return Err("its record names no place or start".to_owned());
    };
    let here = Place::current().map_err(|e| format!("this host's place is unknown: {e}"))?;
    if place.host != here.host || place.boot != here.boot || place.pidns != here.pidns {
        return Err("its record names another host, boot or pid namespace".to_owned());
    }
    let seen = crate::sys::observe(queued.pid)
        .ok_or_else(|| format!("pid {} cannot be seen", queued.pid))?;
    if seen.uid != writer.uid {
        return Err(format!(
            "pid {} belongs to uid {}, but its record is uid {}'s",
            queued.pid, seen.uid, writer.uid
        ));
    }
    if seen.start != identity.start {
        return Err(format!(
            "pid {} started at {}, not at the {} its record names: another process has that pid",
            queued.pid, seen.start, identity.start
        ));
    }
    Ok(Target {
        pid: queued.pid,
        start: seen.start,
        group: false,
    })
}
