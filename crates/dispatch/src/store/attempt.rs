//! The queue's model: an attempt, where it is, who enqueued it, and how it ended.

use std::collections::BTreeMap;

/// Where an attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for admission (or for its next start after a failed one).
    Queued,
    /// Admitted: offered to a driver that must claim it with its token before the deadline.
    Starting,
    /// Claimed: its driver holds the lane and the slot; the row stays until the lane is free.
    Running,
    /// Its driver could not be started the bounded number of times: parked, its lane still
    /// held, until `queue retry` or `queue cancel`.
    Failed,
}

impl State {
    /// The word stored and shown: `queued`, `starting`, `running` or `failed`.
    #[must_use]
    pub fn word(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Starting => "starting",
            State::Running => "running",
            State::Failed => "failed",
        }
    }

    pub(super) fn parse(word: &str) -> Option<State> {
        match word {
            "queued" => Some(State::Queued),
            "starting" => Some(State::Starting),
            "running" => Some(State::Running),
            "failed" => Some(State::Failed),
            _ => None,
        }
    }
}

/// Who enqueued an attempt, from the peer credentials of the enqueue's connection (never from
/// the message): the driver runs with exactly these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueuer {
    /// The effective uid.
    pub uid: u32,
    /// The effective gid.
    pub gid: u32,
    /// The supplementary groups.
    pub groups: Vec<u32>,
}

/// A cancel asked of a running attempt: its driver is being halted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancel {
    /// When it was asked, ms since the Unix epoch.
    pub at_ms: u64,
    /// Who asked (uid).
    pub by: u32,
}

/// One attempt: a row of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The stable attempt id (`a-<32 hex>`), kept across expiry and recovery.
    pub id: String,
    /// The lane's name (its lock is `lane-<lane>.lock`).
    pub lane: String,
    /// Where it is.
    pub state: State,
    /// The admitted-start token, while starting.
    pub token: Option<String>,
    /// When it was first queued (ms since the Unix epoch), kept as given.
    pub queued_at_ms: u64,
    /// Higher goes first (default 0), kept as given.
    pub priority: i64,
    /// Where the launcher placed it (free text, e.g. a worktree).
    pub placement: String,
    /// The driver command.
    pub args: Vec<String>,
    /// The stage it is at (free text).
    pub stage: String,
    /// The filtered environment the driver gets.
    pub env: BTreeMap<String, String>,
    /// When it entered its state (ms since the Unix epoch).
    pub state_at_ms: u64,
    /// The lane's fencing epoch when the dispatcher received it (from the launcher's record),
    /// if known: at recovery, a lane still at that epoch was acquired by nobody in between.
    pub lane_epoch: Option<u64>,
    /// Who enqueued it; `None` for a row queued before worklane recorded it (such a row is
    /// never started: see [`crate::service`]).
    pub enqueuer: Option<Enqueuer>,
    /// Whether its lane is one of its own (`q-<16 hex>`, declared so by the launcher), retired
    /// when the attempt ends.
    pub own_lane: bool,
    /// Its driver's failed starts since it was queued (or retried).
    pub failures: u32,
    /// The last failed start's error, as shown.
    pub last_error: Option<String>,
    /// Not admitted before this time (ms since the Unix epoch): the backoff after a failed
    /// start; 0 for none.
    pub retry_at_ms: u64,
    /// The pid of the driver started for it last (starting), or of the claimer (running).
    pub driver_pid: Option<u32>,
    /// How many times its driver was started.
    pub starts: u32,
    /// A cancel asked while it runs.
    pub cancel: Option<Cancel>,
    /// Its row is damaged (not stored: found when read): it is `failed` and never started.
    pub damaged: bool,
    /// How many units of the agents' cap it takes when admitted (1 for a row queued before
    /// weights).
    pub weight: u32,
    /// The tag of the owner it runs for (`enqueue --owner`), which the config's shares may name
    /// (`owner:<tag>`); its enqueuer's uid and groups otherwise decide its share.
    pub owner: Option<String>,
}

impl Attempt {
    /// A new queued attempt, with no failure, driver or cancel yet.
    #[must_use]
    pub fn queued(
        id: String,
        lane: String,
        queued_at_ms: u64,
        priority: i64,
        now_ms: u64,
    ) -> Attempt {
        Attempt {
            id,
            lane,
            state: State::Queued,
            token: None,
            queued_at_ms,
            priority,
            placement: String::new(),
            args: Vec::new(),
            stage: String::new(),
            env: BTreeMap::new(),
            state_at_ms: now_ms,
            lane_epoch: None,
            enqueuer: None,
            own_lane: false,
            failures: 0,
            last_error: None,
            retry_at_ms: 0,
            driver_pid: None,
            starts: 0,
            cancel: None,
            damaged: false,
            weight: 1,
            owner: None,
        }
    }

    /// What it asks of the pool: its weight, for its enqueuer (uid, gid and groups) with its
    /// tag. `None` for a row without an enqueuer, which is never started.
    #[must_use]
    pub fn ask(&self) -> Option<worklane_admission::Ask> {
        let enqueuer = self.enqueuer.as_ref()?;
        let mut owner = worklane_admission::Owner::of_uid(enqueuer.uid)
            .with_groups(std::iter::once(enqueuer.gid).chain(enqueuer.groups.iter().copied()));
        if let Some(tag) = &self.owner {
            owner = owner.with_tag(tag.clone());
        }
        Some(
            worklane_admission::Ask::new()
                .with_weight(self.weight)
                .with_owner(owner),
        )
    }

    /// The name of its driver's log in the slot directory.
    #[must_use]
    pub fn log_name(&self) -> String {
        log_name(&self.id)
    }
}

/// The log a driver writes, named after its attempt, in the slot directory.
#[must_use]
pub fn log_name(attempt: &str) -> String {
    format!("queue-{attempt}.log")
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its driver exited with a status.
    Exited,
    /// Its driver was killed by a signal.
    Killed,
    /// Its lane was found free, its driver not this dispatcher's to reap (started by an
    /// earlier one): the status is in its log.
    Ended,
    /// Cancelled (queued, starting, failed, or running and halted).
    Cancelled,
    /// Lost: its row was in a damaged queue database.
    Lost,
}

impl Outcome {
    /// The word stored and shown.
    #[must_use]
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Exited => "exited",
            Outcome::Killed => "killed",
            Outcome::Ended => "ended",
            Outcome::Cancelled => "cancelled",
            Outcome::Lost => "lost",
        }
    }

    pub(super) fn parse(word: &str) -> Option<Outcome> {
        [
            Outcome::Exited,
            Outcome::Killed,
            Outcome::Ended,
            Outcome::Cancelled,
            Outcome::Lost,
        ]
        .into_iter()
        .find(|o| o.word() == word)
    }
}

/// An ended attempt, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The attempt id.
    pub id: String,
    /// Its lane.
    pub lane: String,
    /// Its driver command.
    pub args: Vec<String>,
    /// Who enqueued it, where known.
    pub uid: Option<u32>,
    /// When it was first queued, ms.
    pub queued_at_ms: u64,
    /// When its driver claimed it (running since), ms, if it ran.
    pub started_at_ms: Option<u64>,
    /// When it ended, ms.
    pub ended_at_ms: u64,
    /// How.
    pub outcome: Outcome,
    /// The driver's exit status, if it exited.
    pub status: Option<i32>,
    /// The signal that killed the driver, if one did.
    pub signal: Option<i32>,
    /// Who or what ended it, in words (`cancelled by uid 0`, `halted by queue cancel`, the
    /// damaged database's new name...).
    pub detail: String,
    /// Its log's name in the slot directory, if it had one.
    pub log: Option<String>,
}
