//! The schema: one [`Entry`] per line, its [`Event`] told by `kind`, and how a line is made
//! (at most [`MAX_LINE`] bytes) and found again in bytes that a killed writer may have torn.

use serde::{Deserialize, Serialize};

/// The schema version every line carries; raised only when a field changes meaning or goes
/// away (a field may be added without raising it, so a reader ignores fields it does not know).
pub const VERSION: u32 = 1;

/// The longest line, its newline included: one `write(2)` of at most this many bytes.
pub const MAX_LINE: usize = 4096;

/// How every line begins, byte for byte. JSON escapes every `"` inside a string, so these
/// bytes appear nowhere else in a line: a reader that meets a torn line finds the next event
/// by them.
pub const MARKER: &[u8] = b"{\"version\":";

/// One line of the journal: when, who wrote it, and what happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// [`VERSION`].
    pub version: u32,
    /// When it happened: RFC 3339 UTC with milliseconds (`2026-11-30T04:55:19.924Z`).
    pub at: String,
    /// The process that wrote it.
    pub pid: u32,
    /// Events this writer could not append since its last line (a full disk, an unwritable
    /// journal), counted here once it can again.
    pub dropped: u64,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

/// What happened. Serialized with its name as `kind` (`slot-taken`) beside its fields; every
/// field is always written (`null` when not known), so each kind has one shape. Credentials
/// are named by their key (the 16 hex digits of their budget files' names), never by token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Event {
    /// A slot was taken.
    SlotTaken {
        /// Its file (`agent-0.lock`).
        #[serde(default)]
        slot: String,
        /// `agent`, `test` or `full-run`.
        #[serde(default)]
        slot_kind: String,
        /// Its holder's owner, as recorded.
        #[serde(default)]
        owner: String,
        /// Its fencing epoch.
        #[serde(default)]
        epoch: u64,
        /// How long the take waited in line (0: it did not wait).
        #[serde(default)]
        waited_ms: u64,
    },
    /// A slot was released by its holder.
    SlotReleased {
        /// Its file.
        #[serde(default)]
        slot: String,
        /// `agent`, `test` or `full-run`.
        #[serde(default)]
        slot_kind: String,
        /// Its holder's owner.
        #[serde(default)]
        owner: String,
        /// How long it was held by this process.
        #[serde(default)]
        held_ms: u64,
    },
    /// A take was refused (STOP, a drain, the cap with `--no-wait`, a wait that timed out).
    SlotRefused {
        /// The kind asked for.
        #[serde(default)]
        slot_kind: String,
        /// Who asked.
        #[serde(default)]
        owner: String,
        /// `stop`, `drain`, `at-cap`, `full-run-held`, `counting` or `in-line`.
        #[serde(default)]
        blocker: String,
        /// The refusal in words.
        #[serde(default)]
        why: String,
        /// How long it waited first (0: it did not wait).
        #[serde(default)]
        waited_ms: u64,
    },
    /// A take waits in line: said when it joins and when it reaches the head.
    SlotWaiting {
        /// The kind waited for.
        #[serde(default)]
        slot_kind: String,
        /// Who waits.
        #[serde(default)]
        owner: String,
        /// Its place in line, 1 for the head.
        #[serde(default)]
        position: u32,
        /// How many of its kind wait, itself included.
        #[serde(default)]
        in_line: u32,
        /// What it waits for, in words.
        #[serde(default)]
        why: String,
    },
    /// A waiter left the line without its slot and could not say so itself (it was killed):
    /// said by the waiter that found its entry dead and retired it.
    SlotLeft {
        /// The kind it waited for.
        #[serde(default)]
        slot_kind: String,
        /// Who waited (from its entry's record; empty when that could not be read).
        #[serde(default)]
        owner: String,
        /// Its pid, as its entry recorded it.
        waiter_pid: Option<u32>,
        /// From its joining to its entry's retirement.
        #[serde(default)]
        waited_ms: u64,
    },
    /// A slot's holder was found dead with nobody taking its slot over (killed, its command
    /// ended since): said by the first worklane process that looked at the slot afterwards
    /// (`slots`, `why`, `metrics`, `top`), which removed its record under its guard. A slot
    /// taken over instead says `takeover`.
    HolderGone {
        /// The slot's file (`agent-3.lock`).
        #[serde(default)]
        slot: String,
        /// `agent`, `test`, `job` or `full-run`.
        #[serde(default)]
        slot_kind: String,
        /// The dead holder's pid, as recorded.
        stale_pid: Option<u32>,
        /// The dead holder's owner.
        stale_owner: Option<String>,
        /// When it had taken the slot (its `acquiredAt`).
        stale_since: Option<String>,
        /// The proof of death, in words.
        #[serde(default)]
        proof: String,
    },
    /// A dead holder's lock was taken over.
    Takeover {
        /// The lock or lease file.
        #[serde(default)]
        resource: String,
        /// The new holder's owner.
        #[serde(default)]
        owner: String,
        /// The dead holder's pid, as recorded.
        stale_pid: Option<u32>,
        /// The dead holder's owner.
        stale_owner: Option<String>,
        /// When the dead holder had taken it (its `acquiredAt`).
        stale_since: Option<String>,
        /// The claim file of the takeover (`<lock>.<hash16>.claim`): the hash names the record
        /// taken over.
        #[serde(default)]
        claim: String,
        /// The proof of death, in words (its guard free while it declared it held, no such
        /// process, another start, another boot, a lapsed pulse).
        #[serde(default)]
        proof: String,
    },
    /// A command was halted by an emergency STOP.
    Halt {
        /// The lock or lease file it ran under.
        #[serde(default)]
        resource: String,
        /// The command's pid.
        #[serde(default)]
        command_pid: u32,
        /// `supervisor` (its `worklane run` halted it) or `worklane` (`stop-all` signalled it:
        /// its supervisor could not).
        #[serde(default)]
        by: String,
        /// The STOP, in words.
        #[serde(default)]
        reason: String,
        /// The signal that ended it (`SIGTERM`, `SIGKILL`), or null when it exited by itself.
        signal: Option<String>,
        /// Its exit status when it exited by itself.
        status: Option<u8>,
        /// From the first signal to its end.
        #[serde(default)]
        took_ms: u64,
    },
    /// An emergency STOP was written.
    Stop {
        /// Who wrote it.
        #[serde(default)]
        by: String,
        /// Why.
        #[serde(default)]
        reason: String,
    },
    /// STOP was lifted.
    Resume {
        /// Who had written the STOP lifted (empty when it was unreadable).
        #[serde(default)]
        by: String,
        /// Its reason.
        #[serde(default)]
        reason: String,
    },
    /// An update drain was set.
    Drain {
        /// Until when.
        #[serde(default)]
        until: String,
        /// The version being installed, if named.
        to: Option<String>,
    },
    /// The drain was ended early.
    Undrain,
    /// A role lease was taken.
    RoleTaken {
        /// The role.
        #[serde(default)]
        role: String,
        /// Its lease file (`role-<role>.lease`).
        #[serde(default)]
        resource: String,
        /// Its holder's owner.
        #[serde(default)]
        owner: String,
        /// Its TTL.
        ttl_ms: Option<u64>,
        /// Its fencing epoch.
        #[serde(default)]
        epoch: u64,
    },
    /// A role lease was refused: someone holds it.
    RoleRefused {
        /// The role.
        #[serde(default)]
        role: String,
        /// Its lease file.
        #[serde(default)]
        resource: String,
        /// Who asked.
        #[serde(default)]
        owner: String,
        /// The holder's pid.
        holder_pid: Option<u32>,
        /// The holder's owner.
        holder_owner: Option<String>,
        /// Why it counts as held.
        #[serde(default)]
        why: String,
    },
    /// A held role lease was lost: its record is another's now, or its pulse went unconfirmed
    /// too long.
    RoleLost {
        /// The role.
        #[serde(default)]
        role: String,
        /// Its lease file.
        #[serde(default)]
        resource: String,
        /// Why, in words.
        #[serde(default)]
        why: String,
    },
    /// A build under `run --jobs` runs more processes at once than its job tokens allow: a
    /// part of it was given its own `-jN` and escapes the machine's `max_jobs` (said once per
    /// build).
    JobsEscaped {
        /// The build's command.
        #[serde(default)]
        command: String,
        /// Its processes working at once (with no child of their own).
        #[serde(default)]
        processes: u64,
        /// The job tokens it held (its own included).
        #[serde(default)]
        tokens: u64,
    },
    /// What the events of the files rotations dropped added up to (the first line of a file
    /// a rotation made, PROTOCOL.md 17.3): the counts `worklane metrics` carries on.
    Totals {
        /// The carried tally.
        #[serde(default)]
        totals: crate::tally::Tally,
    },
    /// A role lease was released by its holder (its record removed: the role is free).
    RoleReleased {
        /// The role.
        #[serde(default)]
        role: String,
        /// Its lease file.
        #[serde(default)]
        resource: String,
        /// Its holder's owner.
        #[serde(default)]
        owner: String,
    },
    /// The dispatcher queued an attempt.
    DispatchEnqueued {
        /// The attempt (`a-<32 hex>`).
        #[serde(default)]
        attempt: String,
        /// Its lane.
        #[serde(default)]
        lane: String,
        /// Its priority.
        #[serde(default)]
        priority: i64,
        /// Who enqueued it.
        #[serde(default)]
        uid: u32,
    },
    /// The dispatcher admitted an attempt: an agent slot is taken for it.
    DispatchAdmitted {
        /// The attempt.
        #[serde(default)]
        attempt: String,
        /// Its lane.
        #[serde(default)]
        lane: String,
        /// The slot taken for it.
        #[serde(default)]
        slot: String,
        /// How long it had waited, from its original queue start.
        #[serde(default)]
        waited_ms: u64,
    },
    /// An admitted attempt's driver claimed it.
    DispatchClaimed {
        /// The attempt.
        #[serde(default)]
        attempt: String,
        /// Its lane.
        #[serde(default)]
        lane: String,
        /// The slot handed over.
        #[serde(default)]
        slot: String,
        /// From its admission to this claim.
        #[serde(default)]
        admitted_ms: u64,
    },
    /// An admitted attempt went unclaimed past the claim interval and is queued again.
    DispatchExpired {
        /// The attempt.
        #[serde(default)]
        attempt: String,
        /// Its lane.
        #[serde(default)]
        lane: String,
        /// How long it was starting.
        #[serde(default)]
        starting_ms: u64,
    },
    /// A dispatcher's start found a stored attempt and kept or dropped it.
    DispatchRecovered {
        /// The attempt.
        #[serde(default)]
        attempt: String,
        /// Its lane.
        #[serde(default)]
        lane: String,
        /// Kept (queued again) or dropped.
        #[serde(default)]
        kept: bool,
        /// Why, in words.
        #[serde(default)]
        why: String,
    },
    /// An attempt was cancelled.
    DispatchCancelled {
        /// The attempt.
        #[serde(default)]
        attempt: String,
        /// Its lane.
        #[serde(default)]
        lane: String,
        /// Its state when cancelled (`queued`, `starting`, `failed`, `running`).
        #[serde(default)]
        state: String,
        /// Who cancelled it.
        #[serde(default)]
        uid: u32,
    },
    /// A credential's calls were paused (a secondary rate limit, a provider's pause status).
    BudgetPaused {
        /// `github`, `anthropic`, `openai` or a provider of the config.
        #[serde(default)]
        provider: String,
        /// The credential's key (16 hex digits, as in its budget files' names).
        #[serde(default)]
        credential: String,
        /// Until when.
        #[serde(default)]
        until: String,
    },
    /// A call was refused by the budget (none left, or paused, for its whole wait).
    BudgetRefused {
        /// The provider.
        #[serde(default)]
        provider: String,
        /// The credential's key.
        #[serde(default)]
        credential: String,
        /// The resource or dimension that refused it.
        #[serde(default)]
        resource: String,
        /// `rate_limited` or `secondary_rate_limited`.
        #[serde(default)]
        refusal: String,
        /// When a call may go again, if known.
        retry_at: Option<String>,
        /// Who asked.
        #[serde(default)]
        consumer: String,
        /// How long it waited first.
        #[serde(default)]
        waited_ms: u64,
    },
    /// A stray or broken file was found (and, when `fixed`, removed).
    BrokenFile {
        /// Its name in the slot directory.
        #[serde(default)]
        name: String,
        /// What is wrong with it and what that does.
        #[serde(default)]
        what: String,
        /// What fixes it (or fixed it).
        #[serde(default)]
        fix: String,
        /// Whether worklane fixed it already.
        #[serde(default)]
        fixed: bool,
    },
    /// A kind this version does not know (a newer writer's): its fields are not kept.
    #[serde(other)]
    Unknown,
}

impl Event {
    /// Its `kind` as written (`slot-taken`).
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Event::SlotTaken { .. } => "slot-taken",
            Event::SlotReleased { .. } => "slot-released",
            Event::SlotRefused { .. } => "slot-refused",
            Event::SlotWaiting { .. } => "slot-waiting",
            Event::Takeover { .. } => "takeover",
            Event::HolderGone { .. } => "holder-gone",
            Event::Halt { .. } => "halt",
            Event::Stop { .. } => "stop",
            Event::Resume { .. } => "resume",
            Event::Drain { .. } => "drain",
            Event::Undrain => "undrain",
            Event::RoleTaken { .. } => "role-taken",
            Event::RoleRefused { .. } => "role-refused",
            Event::RoleLost { .. } => "role-lost",
            Event::RoleReleased { .. } => "role-released",
            Event::Totals { .. } => "totals",
            Event::JobsEscaped { .. } => "jobs-escaped",
            Event::SlotLeft { .. } => "slot-left",
            Event::DispatchEnqueued { .. } => "dispatch-enqueued",
            Event::DispatchAdmitted { .. } => "dispatch-admitted",
            Event::DispatchClaimed { .. } => "dispatch-claimed",
            Event::DispatchExpired { .. } => "dispatch-expired",
            Event::DispatchRecovered { .. } => "dispatch-recovered",
            Event::DispatchCancelled { .. } => "dispatch-cancelled",
            Event::BudgetPaused { .. } => "budget-paused",
            Event::BudgetRefused { .. } => "budget-refused",
            Event::BrokenFile { .. } => "broken-file",
            Event::Unknown => "unknown",
        }
    }
}

/// Every `kind` this version writes, in the order of [`Event`].
pub const KINDS: [&str; 27] = [
    "slot-taken",
    "slot-released",
    "slot-refused",
    "slot-waiting",
    "holder-gone",
    "takeover",
    "halt",
    "stop",
    "resume",
    "drain",
    "undrain",
    "role-taken",
    "role-refused",
    "role-lost",
    "role-released",
    "totals",
    "jobs-escaped",
    "slot-left",
    "dispatch-enqueued",
    "dispatch-admitted",
    "dispatch-claimed",
    "dispatch-expired",
    "dispatch-recovered",
    "dispatch-cancelled",
    "budget-paused",
    "budget-refused",
    "broken-file",
];

/// The longest a free-text field is kept when a line would pass [`MAX_LINE`].
const SHORT_TEXT: usize = 256;

/// `entry` as one line (newline included), at most [`MAX_LINE`] bytes: when it would be
/// longer, every string longer than 256 bytes is cut (on a character boundary, `…` added);
/// `None` if it is still too long (it is then dropped and counted).
pub(crate) fn encode(entry: &Entry) -> Option<Vec<u8>> {
    let mut line = serde_json::to_vec(entry).ok()?;
    if line.len() < MAX_LINE {
        line.push(b'\n');
        return Some(line);
    }
    let mut value = serde_json::to_value(entry).ok()?;
    shorten(&mut value);
    // Back through the type, which writes its fields in their order (`version` first).
    let shortened: Entry = serde_json::from_value(value).ok()?;
    let mut line = serde_json::to_vec(&shortened).ok()?;
    (line.len() < MAX_LINE && line.starts_with(MARKER)).then(|| {
        line.push(b'\n');
        line
    })
}

fn shorten(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) if text.len() > SHORT_TEXT => {
            let mut cut = SHORT_TEXT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        serde_json::Value::Object(map) => map.values_mut().for_each(shorten),
        serde_json::Value::Array(items) => items.iter_mut().for_each(shorten),
        _ => {}
    }
}

/// What one line's bytes (without its newline) hold: the entry, and how many torn fragments
/// before it were skipped; `None` with the count when no entry could be read.
pub(crate) fn decode(line: &[u8]) -> Decoded {
    if line.is_empty() {
        return Decoded::default();
    }
    if let Some(decoded) = whole(line) {
        return decoded;
    }
    // A writer killed mid-line left a fragment that the next line was appended to: each
    // marker after the first byte starts another event; the last one may be whole.
    let starts: Vec<usize> = (1..line.len())
        .filter(|&i| line[i..].starts_with(MARKER))
        .collect();
    let torn = starts.len() as u64;
    match starts.last().and_then(|&last| whole(&line[last..])) {
        Some(mut decoded) => {
            decoded.torn += torn;
            decoded
        }
        None => Decoded {
            torn: torn.max(1) + u64::from(!starts.is_empty()),
            ..Decoded::default()
        },
    }
}

/// What one line held: its entry, the torn pieces skipped, and whether it was a whole line
/// with a field of the wrong type.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub(crate) entry: Option<Entry>,
    pub(crate) torn: u64,
    pub(crate) mistyped: u64,
}

/// `bytes` as one whole line, if it is one: an entry (a field written `null`, as every field
/// not known is, taken as not given: its default), or a whole line whose fields do not fit
/// its kind (mistyped). `None` when it is not a whole JSON object beginning as lines do (torn).
fn whole(bytes: &[u8]) -> Option<Decoded> {
    if let Ok(entry) = serde_json::from_slice::<Entry>(bytes) {
        return Some(Decoded {
            entry: Some(entry),
            ..Decoded::default()
        });
    }
    if !bytes.starts_with(MARKER) {
        return None;
    }
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_slice(bytes) else {
        return None;
    };
    fields.retain(|_, value| !value.is_null());
    Some(
        match serde_json::from_value::<Entry>(serde_json::Value::Object(fields)) {
            Ok(entry) => Decoded {
                entry: Some(entry),
                ..Decoded::default()
            },
            Err(_) => Decoded {
                mistyped: 1,
                ..Decoded::default()
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line's entry and torn pieces, none of it mistyped.
    fn decode(line: &[u8]) -> (Option<Entry>, u64) {
        let decoded = super::decode(line);
        assert_eq!(decoded.mistyped, 0, "{}", String::from_utf8_lossy(line));
        (decoded.entry, decoded.torn)
    }

    #[test]
    fn a_field_not_known_may_be_null_and_a_wrong_type_is_mistyped_not_torn() {
        // Another implementation's slot-waiting that did not know its place in line.
        let line = br#"{"version":1,"at":"2026-11-30T04:55:19.924Z","pid":7,"dropped":0,"kind":"slot-waiting","slot_kind":"agent","owner":"x","position":null,"in_line":null,"why":null}"#;
        let (read, torn) = decode(line);
        assert_eq!(torn, 0);
        assert_eq!(
            read.map(|e| e.event),
            Some(Event::SlotWaiting {
                slot_kind: "agent".to_owned(),
                owner: "x".to_owned(),
                position: 0,
                in_line: 0,
                why: String::new(),
            }),
            "null read as not given"
        );
        // A field of the wrong type: a whole line, skipped apart from torn ones.
        let wrong = br#"{"version":1,"at":"2026-11-30T04:55:19.924Z","pid":7,"dropped":0,"kind":"slot-waiting","slot_kind":"agent","owner":"x","position":"first","in_line":2,"why":""}"#;
        let decoded = super::decode(wrong);
        assert_eq!(
            (decoded.entry.is_none(), decoded.torn, decoded.mistyped),
            (true, 0, 1)
        );
        // A torn piece before a mistyped line: one of each.
        let mut both = br#"{"version":1,"at":"2026-11-3"#.to_vec();
        both.extend_from_slice(wrong);
        let decoded = super::decode(&both);
        assert_eq!((decoded.torn, decoded.mistyped), (1, 1));
        // `at` is never null: without it a line is mistyped.
        let timeless = br#"{"version":1,"at":null,"pid":7,"dropped":0,"kind":"undrain"}"#;
        assert_eq!(super::decode(timeless).mistyped, 1);
    }

    fn entry(event: Event) -> Entry {
        Entry {
            version: VERSION,
            at: "2026-11-30T04:55:19.924Z".to_owned(),
            pid: 42,
            dropped: 0,
            event,
        }
    }

    #[test]
    fn a_line_starts_with_the_marker_and_reads_back() {
        let e = entry(Event::SlotTaken {
            slot: "agent-0.lock".to_owned(),
            slot_kind: "agent".to_owned(),
            owner: "a \"quoted\" {\"version\": owner".to_owned(),
            epoch: 3,
            waited_ms: 0,
        });
        let line = encode(&e).expect("short");
        assert!(
            line.starts_with(MARKER),
            "{}",
            String::from_utf8_lossy(&line)
        );
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(
            line.windows(MARKER.len()).filter(|w| *w == MARKER).count(),
            1,
            "the marker appears once, even with it quoted in a field"
        );
        assert_eq!(decode(&line[..line.len() - 1]), (Some(e), 0));
    }

    #[test]
    fn every_kind_is_named_as_written() {
        let gone = Event::HolderGone {
            slot: "agent-1.lock".to_owned(),
            slot_kind: "agent".to_owned(),
            stale_pid: None,
            stale_owner: None,
            stale_since: None,
            proof: "no such process".to_owned(),
        };
        assert_eq!(gone.kind(), "holder-gone");
        let line = encode(&entry(gone.clone())).expect("short");
        assert_eq!(decode(&line[..line.len() - 1]), (Some(entry(gone)), 0));
        let undrain = serde_json::to_value(entry(Event::Undrain)).expect("json");
        assert_eq!(undrain["kind"], "undrain");
        assert_eq!(Event::Undrain.kind(), "undrain");
        assert!(
            KINDS.contains(&"broken-file")
                && KINDS.contains(&"role-released")
                && KINDS.contains(&"holder-gone")
                && KINDS.len() == 27
        );
        let unknown: Entry = serde_json::from_str(
            r#"{"version":1,"at":"x","pid":1,"dropped":0,"kind":"from-the-future","n":1}"#,
        )
        .expect("an unknown kind reads");
        assert_eq!(unknown.event, Event::Unknown);
    }

    #[test]
    fn a_long_line_is_cut_to_fit() {
        let e = entry(Event::BrokenFile {
            name: "x".repeat(5000),
            what: "é".repeat(3000),
            fix: "rm".to_owned(),
            fixed: false,
        });
        let line = encode(&e).expect("cut to fit");
        assert!(line.len() <= MAX_LINE, "{}", line.len());
        let (read, skipped) = decode(&line[..line.len() - 1]);
        let Some(Entry {
            event: Event::BrokenFile { name, what, .. },
            ..
        }) = read
        else {
            panic!("reads back");
        };
        assert_eq!(skipped, 0);
        assert!(name.ends_with('…') && name.len() < 300, "{}", name.len());
        assert!(what.ends_with('…'));
    }

    #[test]
    fn a_torn_fragment_is_skipped_and_the_event_after_it_kept() {
        let whole = encode(&entry(Event::Undrain)).expect("line");
        let whole = &whole[..whole.len() - 1];
        let mut torn = whole[..17].to_vec();
        torn.extend_from_slice(&whole[..12]);
        torn.extend_from_slice(whole);
        assert_eq!(decode(&torn), (Some(entry(Event::Undrain)), 2));
        assert_eq!(decode(&whole[..20]), (None, 1), "a fragment alone");
        assert_eq!(decode(b"garbage"), (None, 1));
        assert_eq!(decode(b""), (None, 0), "an empty line is nothing");
    }
}
