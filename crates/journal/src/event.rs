//! The schema: one [`Entry`] per line, its [`Event`] told by `kind` (how a line is made of it
//! and read back: `line.rs`).

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
        /// The CPU time its run used, µs, from the run's cgroup (null without one).
        #[serde(default)]
        cpu_usec: Option<u64>,
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
