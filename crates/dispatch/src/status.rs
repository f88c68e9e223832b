//! The run-queue status view: one JSON entry per queued lane in the slot directory,
//! `queue-<lane>.json`, replaced whole through `SlotPath`, naming the dispatcher's pid and
//! heartbeat, the attempt and its state. Tools that watch the run queue read it to see who
//! keeps the wait; it is a view, never the queue's truth (that is the database).

use crate::wire::AttemptView;
use serde::Serialize;
use worklane_lease::rfc3339_ms;
use worklane_slotfile::{SlotDir, name, remove, write};

/// The entry's file name for lane `lane`.
#[must_use]
pub fn entry_name(lane: &str) -> String {
    format!("queue-{lane}.json")
}

/// The dispatcher as an entry names it.
#[derive(Debug, Clone, Serialize)]
struct Keeper {
    pid: u32,
    heartbeat: String,
}

/// One entry (schema version 1).
#[derive(Debug, Clone, Serialize)]
struct Entry<'a> {
    version: u32,
    lane: &'a str,
    attempt: &'a str,
    state: &'a str,
    start: String,
    priority: i64,
    stage: &'a str,
    placement: &'a str,
    since: String,
    slot: Option<&'a str>,
    /// The driver command, so that a queue whose database is lost can still say what each
    /// lane was to run.
    args: &'a [String],
    /// Its driver's failed starts since it was queued, and the last one's error.
    failures: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<&'a str>,
    /// When its driver is started again, after a failed start.
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_at: Option<String>,
    dispatcher: Keeper,
}

/// Why an entry could not be written or removed. Each variant names the step and the lane;
/// the slot-file layer's cause is its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lane's entry name is not a valid file name.
    #[error("cannot name the run-queue entry of lane {lane}")]
    Name {
        /// The lane.
        lane: String,
        /// Why.
        #[source]
        source: name::Error,
    },
    /// The entry could not be written.
    #[error("cannot write the run-queue entry of lane {lane}")]
    Write {
        /// The lane.
        lane: String,
        /// Why.
        #[source]
        source: write::Error,
    },
    /// The entry could not be removed.
    #[error("cannot remove the run-queue entry of lane {lane}")]
    Remove {
        /// The lane.
        lane: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<remove::Error>,
    },
}

/// The entry of `lane` in `dir`, or why its name is refused.
fn entry_path(dir: &SlotDir, lane: &str) -> Result<worklane_slotfile::SlotPath, Error> {
    dir.file(&entry_name(lane)).map_err(|source| Error::Name {
        lane: lane.to_owned(),
        source,
    })
}

/// Writes (replaces) the entry of `attempt`, kept by dispatcher `pid` at `now_ms`.
pub fn write_entry(
    dir: &SlotDir,
    attempt: &AttemptView,
    pid: u32,
    now_ms: u64,
) -> Result<(), Error> {
    let entry = Entry {
        version: 1,
        lane: &attempt.lane,
        attempt: &attempt.attempt,
        state: &attempt.state,
        start: rfc3339_ms(attempt.start_ms),
        priority: attempt.priority,
        stage: &attempt.stage,
        placement: &attempt.placement,
        since: rfc3339_ms(attempt.state_at_ms),
        slot: attempt.slot.as_deref(),
        args: &attempt.args,
        failures: attempt.failures,
        last_error: attempt.last_error.as_deref(),
        retry_at: attempt.retry_at_ms.map(rfc3339_ms),
        dispatcher: Keeper {
            pid,
            heartbeat: rfc3339_ms(now_ms),
        },
    };
    let mut bytes = serde_json::to_vec(&entry).unwrap_or_default();
    bytes.push(b'\n');
    entry_path(dir, &attempt.lane)?
        .rewrite(&bytes, worklane_slotfile::RECORD_MODE)
        .map_err(|source| Error::Write {
            lane: attempt.lane.clone(),
            source,
        })?;
    Ok(())
}

/// A status entry as read back (tolerantly: what cannot be read is left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The lane it names.
    pub lane: String,
    /// The attempt it names, if it does.
    pub attempt: Option<String>,
    /// The driver command, where the entry has it.
    pub args: Vec<String>,
    /// The original queue start, ms, where readable.
    pub start_ms: Option<u64>,
    /// The pid of the dispatcher that wrote it.
    pub dispatcher_pid: Option<u32>,
    /// Who may have written it: its file's owner, mode and links, from the file read.
    pub written: worklane_slotfile::Written,
}

/// A file at a status entry's name that is not one.
#[derive(Debug)]
pub struct Unreadable {
    /// Its file name.
    pub name: String,
    /// What is wrong with it, in words (`is not JSON (...)`, `cannot be read (...)`).
    pub why: String,
}

/// Every file `queue-<lane>.json` of `dir`, as it reads: the entries (JSON objects, each
/// with its lane from the file's name and who may have written it), and the files that are
/// not ones. The one reader of the status entries: recovery ([`read_entries`]) and the views
/// (`worklane slots`, `why`) both go through it.
#[must_use]
pub fn read_all(dir: &SlotDir) -> (Vec<Read>, Vec<Unreadable>) {
    let mut entries = Vec::new();
    let mut unreadable = Vec::new();
    for path in dir.list_prefixed("queue-").unwrap_or_default() {
        let Some(lane) = path
            .name()
            .strip_prefix("queue-")
            .and_then(|n| n.strip_suffix(".json"))
            .map(str::to_owned)
        else {
            continue;
        };
        let why = match path.read_with_owner() {
            Ok(None) => continue,
            Ok(Some((raw, written))) => match serde_json::from_slice::<serde_json::Value>(&raw) {
                Ok(value @ serde_json::Value::Object(_)) => {
                    entries.push(Read {
                        lane,
                        value,
                        written,
                    });
                    continue;
                }
                Ok(_) => "is JSON but not an object".to_owned(),
                Err(e) => format!("is not JSON ({e})"),
            },
            Err(e) => format!("cannot be read ({})", worklane_stdx::chain(&e)),
        };
        unreadable.push(Unreadable {
            name: path.name().to_owned(),
            why,
        });
    }
    (entries, unreadable)
}

/// A status entry as read: its lane (from its file's name), its JSON object, and who may
/// have written it.
#[derive(Debug, Clone)]
pub struct Read {
    /// The lane its file names.
    pub lane: String,
    /// The entry, a JSON object.
    pub value: serde_json::Value,
    /// Who may have written it: its file's owner, mode and links, from the file read.
    pub written: worklane_slotfile::Written,
}

/// Every status entry in `dir` ([`read_all`]) that, if it names a lane, names the one of its
/// file, with the fields recovery reads and who may have written it: any member of the
/// directory's group may have put one there.
#[must_use]
pub fn read_entries(dir: &SlotDir) -> Vec<Found> {
    #[derive(serde::Deserialize)]
    struct Raw {
        #[serde(default)]
        lane: Option<String>,
        #[serde(default)]
        attempt: Option<String>,
        #[serde(default)]
        args: Option<Vec<String>>,
        #[serde(default)]
        start: Option<String>,
        #[serde(default)]
        dispatcher: Option<serde_json::Value>,
    }
    read_all(dir)
        .0
        .into_iter()
        .filter_map(|found| {
            let entry: Raw = serde_json::from_value(found.value).ok()?;
            if entry
                .lane
                .as_ref()
                .is_some_and(|named| *named != found.lane)
            {
                return None;
            }
            Some(Found {
                written: found.written,
                lane: found.lane,
                attempt: entry.attempt,
                args: entry.args.unwrap_or_default(),
                start_ms: entry
                    .start
                    .as_deref()
                    .and_then(worklane_lease::parse_rfc3339_ms),
                dispatcher_pid: entry
                    .dispatcher
                    .as_ref()
                    .and_then(|d| d.get("pid"))
                    .and_then(serde_json::Value::as_u64)
                    .and_then(|p| u32::try_from(p).ok()),
            })
        })
        .collect()
}

/// Removes the entry of lane `lane` (claimed, cancelled or dropped).
pub fn remove_entry(dir: &SlotDir, lane: &str) -> Result<(), Error> {
    entry_path(dir, lane)?
        .remove()
        .map_err(|source| Error::Remove {
            lane: lane.to_owned(),
            source: Box::new(source),
        })?;
    Ok(())
}
