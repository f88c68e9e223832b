//! The queue's durable rows: SQLite (WAL), one row per attempt, a versioned schema, and a
//! bounded history of the attempts that ended.
//!
//! A row is committed before its enqueue is acknowledged, and admission order comes from an
//! index (`priority` descending, then the original queue start, then the attempt id), never
//! from a scan. [`Store::open_checked`] runs SQLite's `quick_check` first and moves a damaged
//! database aside (never deletes it), so a dispatcher starts on a sound one and says why.

use rusqlite::{Connection, OptionalExtension, params};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use worklane_slotfile::PrivateDir;

/// The queue database's name in the dispatcher's state directory.
pub const DATABASE: &str = "queue.db";

/// The schema version this code writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 4;

/// How many ended attempts the history keeps at most (the oldest go first).
pub const MAX_ENDED: u32 = 1000;

/// The schema, by version: `MIGRATIONS[v - 1]` takes a database from version `v - 1` to `v`.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE attempts (
        id           TEXT PRIMARY KEY NOT NULL,
        lane         TEXT NOT NULL,
        state        TEXT NOT NULL CHECK (state IN ('queued', 'starting')),
        token        TEXT,
        queued_at_ms INTEGER NOT NULL,
        priority     INTEGER NOT NULL,
        placement    TEXT NOT NULL,
        args         TEXT NOT NULL,
        stage        TEXT NOT NULL,
        env          TEXT NOT NULL,
        state_at_ms  INTEGER NOT NULL
    ) STRICT;
    CREATE UNIQUE INDEX attempts_lane ON attempts (lane);
    CREATE INDEX attempts_order ON attempts (state, priority DESC, queued_at_ms, id);
",
    "
    ALTER TABLE attempts ADD COLUMN lane_epoch INTEGER;
",
    // Version 3: who enqueued (the peer's credentials), the start failures and their backoff,
    // the driver's pid, the `running` and `failed` states, a cancel asked of a running attempt,
    // and the history of ended attempts. SQLite cannot change a CHECK: the table is rebuilt.
    "
    CREATE TABLE attempts_v3 (
        id           TEXT PRIMARY KEY NOT NULL,
        lane         TEXT NOT NULL,
        state        TEXT NOT NULL CHECK (state IN ('queued', 'starting', 'running', 'failed')),
        token        TEXT,
        queued_at_ms INTEGER NOT NULL,
        priority     INTEGER NOT NULL,
        placement    TEXT NOT NULL,
        args         TEXT NOT NULL,
        stage        TEXT NOT NULL,
        env          TEXT NOT NULL,
        state_at_ms  INTEGER NOT NULL,
        lane_epoch   INTEGER,
        uid          INTEGER,
        gid          INTEGER,
        groups       TEXT,
        own_lane     INTEGER NOT NULL DEFAULT 0,
        failures     INTEGER NOT NULL DEFAULT 0,
        last_error   TEXT,
        retry_at_ms  INTEGER NOT NULL DEFAULT 0,
        driver_pid   INTEGER,
        starts       INTEGER NOT NULL DEFAULT 0,
        cancel_at_ms INTEGER,
        cancel_by    INTEGER
    ) STRICT;
    INSERT INTO attempts_v3 (id, lane, state, token, queued_at_ms, priority, placement, args,
                             stage, env, state_at_ms, lane_epoch, own_lane)
        SELECT id, lane, state, token, queued_at_ms, priority, placement, args, stage, env,
               state_at_ms, lane_epoch,
               length(lane) = 18 AND substr(lane, 1, 2) = 'q-'
                   AND substr(lane, 3) NOT GLOB '*[^0-9a-f]*'
        FROM attempts;
    DROP TABLE attempts;
    ALTER TABLE attempts_v3 RENAME TO attempts;
    CREATE UNIQUE INDEX attempts_lane ON attempts (lane);
    CREATE INDEX attempts_order ON attempts (state, priority DESC, queued_at_ms, id);
    CREATE TABLE ended (
        id            TEXT PRIMARY KEY NOT NULL,
        lane          TEXT NOT NULL,
        args          TEXT NOT NULL,
        uid           INTEGER,
        queued_at_ms  INTEGER NOT NULL,
        started_at_ms INTEGER,
        ended_at_ms   INTEGER NOT NULL,
        outcome       TEXT NOT NULL,
        status        INTEGER,
        signal        INTEGER,
        detail        TEXT NOT NULL,
        log           TEXT
    ) STRICT;
    CREATE INDEX ended_order ON ended (ended_at_ms, id);
",
    // Version 4: the units of the cap an attempt takes (a row written before weights takes 1)
    // and the tag of the owner whose share it counts against (`enqueue --owner`).
    "
    ALTER TABLE attempts ADD COLUMN weight INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE attempts ADD COLUMN owner TEXT;
",
];

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

    fn parse(word: &str) -> Option<State> {
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
    /// never started: see [`super::service`]).
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

    fn parse(word: &str) -> Option<Outcome> {
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

/// Errors of the queue database.
pub mod db {
    use std::path::PathBuf;

    /// Why the queue's store failed.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// The database could not be opened or migrated.
        #[error("cannot open the queue database {path}")]
        Open {
            /// The database file.
            path: PathBuf,
            /// What SQLite said.
            #[source]
            source: rusqlite::Error,
        },
        /// The database was written by a newer worklane.
        #[error(
            "the queue database {path} has schema version {found}, newer than this worklane's \
             {supported}; upgrade worklane or move the database aside"
        )]
        TooNew {
            /// The database file.
            path: PathBuf,
            /// Its version.
            found: i64,
            /// The newest this code knows.
            supported: i64,
        },
        /// A file of the state directory could not be examined, made or moved aside.
        #[error("cannot {op} {name} in the dispatcher's state directory {dir}")]
        State {
            /// What was being done.
            op: &'static str,
            /// The file.
            name: String,
            /// The state directory.
            dir: PathBuf,
            /// Why.
            #[source]
            source: std::io::Error,
        },
        /// A damaged database could not be moved aside.
        #[error("cannot move the damaged queue database {path} aside to {to}")]
        MoveAside {
            /// The database file (or its `-wal` / `-shm`).
            path: PathBuf,
            /// Where it was to go.
            to: PathBuf,
            /// Why.
            #[source]
            source: std::io::Error,
        },
        /// A statement failed.
        #[error("queue database {path}: cannot {op}")]
        Query {
            /// The database file.
            path: PathBuf,
            /// What was being done.
            op: &'static str,
            /// What SQLite said.
            #[source]
            source: rusqlite::Error,
        },
        /// A stored row's state is not one of the four.
        #[error(
            "queue database {path}: row {id} is damaged (state {state:?}); remove it with \
             `worklane queue cancel {id}`"
        )]
        BadState {
            /// The database file.
            path: PathBuf,
            /// The attempt id.
            id: String,
            /// The state stored.
            state: String,
        },
        /// A stored row's weight is not a whole number from 1 to 4294967295.
        #[error(
            "queue database {path}: row {id} is damaged (its weight is {weight}); remove it \
             with `worklane queue cancel {id}`"
        )]
        BadWeight {
            /// The database file.
            path: PathBuf,
            /// The attempt id.
            id: String,
            /// The weight stored.
            weight: i64,
        },
        /// A stored row's JSON column (its arguments or environment) cannot be parsed.
        #[error(
            "queue database {path}: row {id} is damaged (its {column} cannot be parsed); remove \
             it with `worklane queue cancel {id}`"
        )]
        BadColumn {
            /// The database file.
            path: PathBuf,
            /// The attempt id.
            id: String,
            /// The column, in words (`arguments`, `environment`).
            column: &'static str,
            /// What the JSON parser said.
            #[source]
            source: serde_json::Error,
        },
    }

    impl Error {
        /// Whether this is the disk's trouble (full, over quota, failing) rather than the
        /// database's: retried later, never a reason to move the database aside.
        #[must_use]
        pub fn is_disk_trouble(&self) -> bool {
            let code = match self {
                Error::Open { source, .. } | Error::Query { source, .. } => {
                    source.sqlite_error_code()
                }
                _ => None,
            };
            matches!(
                code,
                Some(
                    rusqlite::ErrorCode::DiskFull
                        | rusqlite::ErrorCode::SystemIoFailure
                        | rusqlite::ErrorCode::CannotOpen
                        | rusqlite::ErrorCode::DatabaseBusy
                        | rusqlite::ErrorCode::DatabaseLocked
                        | rusqlite::ErrorCode::OutOfMemory
                        | rusqlite::ErrorCode::ReadOnly
                )
            )
        }
    }
}

use db::Error;

/// Judges the write-ahead log of the state directory `dir` ([`crate::wal::check`]) before
/// SQLite opens the database; if it lost frames, copies it as it is to
/// `queue.db-wal.damaged-<now_ms>` (mode 0600) and says so.
fn keep_damaged_wal(dir: &PrivateDir, now_ms: u64) -> std::io::Result<Option<Damage>> {
    use std::io::{Seek, Write};
    let name = "queue.db-wal";
    let Some((mut wal, _)) = dir.open_read(name)? else {
        return Ok(None);
    };
    let Some(verdict) = crate::wal::check(std::io::BufReader::new(&wal))? else {
        return Ok(None);
    };
    if !verdict.damaged() {
        return Ok(None);
    }
    let copy = format!("{name}.damaged-{now_ms}");
    let mut to = dir.create_new(&copy, 0o600)?;
    wal.rewind()?;
    std::io::copy(&mut wal, &mut to)?;
    to.flush()?;
    to.sync_all()?;
    Ok(Some(Damage {
        moved_to: dir.join(&copy),
        why: verdict.describe(),
        aside: Aside::WalCopy,
    }))
}

/// The queue's durable rows.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// A damaged queue database that [`Store::open_checked`] moved aside, or a damaged
/// write-ahead log of which [`Store::open_private`] kept a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The damaged database's new name (its `-wal` and `-shm`, if any, beside it with the same
    /// suffix), or the copy of the damaged log.
    pub moved_to: PathBuf,
    /// What was wrong, as SQLite (or the log's check) said it.
    pub why: String,
    /// What was set aside.
    pub aside: Aside,
}

/// What [`Damage`] set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aside {
    /// The database, with its `-wal` and `-shm`: a new one was made.
    Database,
    /// A copy of its write-ahead log as it was, kept before SQLite replayed the transactions
    /// before the damage (and dropped the rest): the database is in use.
    WalCopy,
}

impl Damage {
    /// The damage and what was done, in one sentence for the dispatcher's log and `list`.
    #[must_use]
    pub fn sentence(&self) -> String {
        match self.aside {
            Aside::Database => format!(
                "the queue database was damaged ({}); it was moved to {} and a new one made",
                self.why,
                self.moved_to.display()
            ),
            Aside::WalCopy => format!(
                "the queue database's write-ahead log was damaged ({}); the transactions before \
                 the damage were kept, and a copy of the log as it was is at {}",
                self.why,
                self.moved_to.display()
            ),
        }
    }
}

const COLUMNS: &str = "id, lane, state, token, queued_at_ms, priority, placement, args, stage, \
                       env, state_at_ms, lane_epoch, uid, gid, groups, own_lane, failures, \
                       last_error, retry_at_ms, driver_pid, starts, cancel_at_ms, cancel_by, \
                       weight, owner";

const ENDED_COLUMNS: &str = "id, lane, args, uid, queued_at_ms, started_at_ms, ended_at_ms, \
                             outcome, status, signal, detail, log";

impl Store {
    /// Opens (creating if needed) the database at `path`, in WAL mode, migrated to
    /// [`SCHEMA_VERSION`]. No check of its pages: see [`Store::open_checked`].
    pub fn open(path: &Path) -> Result<Store, Error> {
        Store::open_with(path, rusqlite::OpenFlags::default())
    }

    fn open_with(path: &Path, flags: rusqlite::OpenFlags) -> Result<Store, Error> {
        let open = |source| Error::Open {
            path: path.to_owned(),
            source,
        };
        let mut conn = Connection::open_with_flags(path, flags).map_err(open)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open)?;
        // WAL with NORMAL survives a crash of the process; a row committed before an enqueue
        // is acknowledged is never lost to one.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(open)?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(open)?;
        if version > SCHEMA_VERSION {
            return Err(Error::TooNew {
                path: path.to_owned(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let tx = conn.transaction().map_err(open)?;
        for (i, migration) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(version).unwrap_or(0))
        {
            tx.execute_batch(migration).map_err(open)?;
            tx.pragma_update(
                None,
                "user_version",
                i64::try_from(i + 1).unwrap_or(i64::MAX),
            )
            .map_err(open)?;
        }
        tx.commit().map_err(open)?;
        Ok(Store {
            conn,
            path: path.to_owned(),
        })
    }

    /// Opens the database at `path` as [`Store::open`] does, after checking it: a file SQLite
    /// calls no database or corrupt, or whose `PRAGMA quick_check` finds damage, is moved
    /// aside (with its `-wal` and `-shm`) to `<path>.damaged-<now_ms>` and a new one is made;
    /// the [`Damage`] says where it went and why. The disk's own trouble (full, failing) is an
    /// error, never a reason to move a database aside.
    pub fn open_checked(path: &Path, now_ms: u64) -> Result<(Store, Option<Damage>), Error> {
        Store::open_checked_with(path, now_ms, rusqlite::OpenFlags::default())
    }

    /// The queue database [`DATABASE`] of the dispatcher's private state directory `dir`, as
    /// [`Store::open_checked`] opens it, and first judged as files of `dir`'s user: the
    /// database, its `-wal` and its `-shm` must each be a regular file of that user that no
    /// one else may write, with one name. If one is not, all three are moved aside
    /// (`<name>.refused-<now_ms>`), never used, and the refusal is the [`Damage`] reported; a
    /// new database is made, mode 0600. SQLite opens it with `SQLITE_OPEN_NOFOLLOW`: a link
    /// anywhere in its path is refused.
    pub fn open_private(dir: &PrivateDir, now_ms: u64) -> Result<(Store, Option<Damage>), Error> {
        let state = |op: &'static str, name: &str| {
            let (name, dir) = (name.to_owned(), dir.path().to_owned());
            move |source| Error::State {
                op,
                name,
                dir,
                source,
            }
        };
        let names = [DATABASE, "queue.db-wal", "queue.db-shm"];
        let mut refused = Vec::new();
        for name in names {
            if let Some(why) = dir
                .entry(name)
                .map_err(state("examine", name))?
                .and_then(|entry| entry.untrusted_by(dir.uid()))
            {
                refused.push(format!("{name}: {why}"));
            }
        }
        let mut refusal = None;
        if !refused.is_empty() {
            let suffix = format!("refused-{now_ms}");
            for name in names {
                dir.set_aside(name, &suffix)
                    .map_err(state("move aside", name))?;
            }
            refusal = Some(Damage {
                aside: Aside::Database,
                moved_to: dir.join(&format!("{DATABASE}.{suffix}")),
                why: format!(
                    "refused as not the dispatcher's own ({}), never opened",
                    refused.join("; ")
                ),
            });
        }
        match dir.create_new(DATABASE, 0o600) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(state("create", DATABASE)(e)),
        }
        // A damaged write-ahead log loses its transactions from the damage on when SQLite
        // replays it, and is overwritten by the next writes: a copy of it is kept first.
        let wal_damage = if refusal.is_none() {
            keep_damaged_wal(dir, now_ms).map_err(state("check", "queue.db-wal"))?
        } else {
            None
        };
        let flags = rusqlite::OpenFlags::default() | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let (store, damage) = Store::open_checked_with(&dir.join(DATABASE), now_ms, flags)?;
        // A database made again after damage, and its -wal and -shm, were created by SQLite
        // with its own mode: each is made 0600 through its descriptor.
        for name in names {
            if let Some((file, entry)) = dir.open_read(name).map_err(state("open", name))?
                && entry.mode != 0o600
            {
                rustix::fs::fchmod(&file, rustix::fs::Mode::from_raw_mode(0o600))
                    .map_err(|e| state("set the mode of", name)(e.into()))?;
            }
        }
        Ok((store, refusal.or(damage).or(wal_damage)))
    }

    fn open_checked_with(
        path: &Path,
        now_ms: u64,
        flags: rusqlite::OpenFlags,
    ) -> Result<(Store, Option<Damage>), Error> {
        let why = match Store::open_with(path, flags) {
            Ok(store) => match store.quick_check() {
                Ok(None) => return Ok((store, None)),
                Ok(Some(why)) => why,
                Err(e) if is_damage(&e) => e.to_string() + ": " + &source_text(&e),
                Err(e) => return Err(e),
            },
            Err(e) if is_damage(&e) => source_text(&e),
            Err(e) => return Err(e),
        };
        let moved_to = aside(path, now_ms);
        for suffix in ["", "-wal", "-shm"] {
            let from = with_suffix(path, suffix);
            let to = with_suffix(&moved_to, suffix);
            match std::fs::rename(&from, &to) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !suffix.is_empty() => {}
                Err(source) => {
                    return Err(Error::MoveAside {
                        path: from,
                        to,
                        source,
                    });
                }
            }
        }
        let store = Store::open_with(path, flags)?;
        Ok((
            store,
            Some(Damage {
                moved_to,
                why,
                aside: Aside::Database,
            }),
        ))
    }

    /// `PRAGMA quick_check`: `None` when it says `ok`, else what it found (its first lines).
    fn quick_check(&self) -> Result<Option<String>, Error> {
        let mut statement = self
            .conn
            .prepare("PRAGMA quick_check(8)")
            .map_err(self.query("check the database"))?;
        let lines: Vec<String> = statement
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(self.query("check the database"))?
            .collect::<Result<_, _>>()
            .map_err(self.query("check the database"))?;
        Ok((lines != ["ok"]).then(|| lines.join("; ")))
    }

    /// The database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn query(&self, op: &'static str) -> impl FnOnce(rusqlite::Error) -> Error + '_ {
        move |source| Error::Query {
            path: self.path.clone(),
            op,
            source,
        }
    }

    /// Stores a new attempt (committed when this returns).
    pub fn insert(&self, attempt: &Attempt) -> Result<(), Error> {
        let (uid, gid, groups) = match &attempt.enqueuer {
            Some(e) => (
                Some(e.uid),
                Some(e.gid),
                Some(serde_json::to_string(&e.groups).unwrap_or_default()),
            ),
            None => (None, None, None),
        };
        self.conn
            .prepare_cached(&format!(
                "INSERT INTO attempts ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, \
                 ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, \
                 ?25)"
            ))
            .and_then(|mut statement| {
                statement.execute(params![
                    attempt.id,
                    attempt.lane,
                    attempt.state.word(),
                    attempt.token,
                    to_i64(attempt.queued_at_ms),
                    attempt.priority,
                    attempt.placement,
                    serde_json::to_string(&attempt.args).unwrap_or_default(),
                    attempt.stage,
                    serde_json::to_string(&attempt.env).unwrap_or_default(),
                    to_i64(attempt.state_at_ms),
                    attempt.lane_epoch.map(to_i64),
                    uid,
                    gid,
                    groups,
                    attempt.own_lane,
                    attempt.failures,
                    attempt.last_error,
                    to_i64(attempt.retry_at_ms),
                    attempt.driver_pid,
                    attempt.starts,
                    attempt.cancel.map(|c| to_i64(c.at_ms)),
                    attempt.cancel.map(|c| c.by),
                    attempt.weight,
                    attempt.owner,
                ])
            })
            .map_err(self.query("insert an attempt"))?;
        Ok(())
    }

    /// Sets an attempt's state, token and state time; `false` if there is no such row.
    pub fn set_state(
        &self,
        id: &str,
        state: State,
        token: Option<&str>,
        at_ms: u64,
    ) -> Result<bool, Error> {
        self.change(
            "update an attempt",
            "UPDATE attempts SET state = ?2, token = ?3, state_at_ms = ?4 WHERE id = ?1",
            params![id, state.word(), token, to_i64(at_ms)],
        )
    }

    /// An admitted attempt's driver started as `pid`: counted, and remembered.
    pub fn started(&self, id: &str, pid: u32) -> Result<bool, Error> {
        self.change(
            "record a driver's start",
            "UPDATE attempts SET driver_pid = ?2, starts = starts + 1 WHERE id = ?1",
            params![id, pid],
        )
    }

    /// An admitted attempt's driver could not be started: queued again (or parked as
    /// `failed`) with its count of failures, the error, and when it may be tried again.
    pub fn start_failed(
        &self,
        id: &str,
        state: State,
        failures: u32,
        error: &str,
        retry_at_ms: u64,
        at_ms: u64,
    ) -> Result<bool, Error> {
        self.change(
            "record a failed start",
            "UPDATE attempts SET state = ?2, token = NULL, failures = ?3, last_error = ?4, \
             retry_at_ms = ?5, state_at_ms = ?6 WHERE id = ?1",
            params![
                id,
                state.word(),
                failures,
                error,
                to_i64(retry_at_ms),
                to_i64(at_ms)
            ],
        )
    }

    /// A queued attempt is not admitted before `until_ms` (its driver of an earlier start is
    /// still being halted).
    pub fn defer(&self, id: &str, until_ms: u64) -> Result<bool, Error> {
        self.change(
            "defer an attempt",
            "UPDATE attempts SET retry_at_ms = max(retry_at_ms, ?2) WHERE id = ?1 AND state = \
             'queued'",
            params![id, to_i64(until_ms)],
        )
    }

    /// A claimed attempt runs: its token cleared, its driver `pid` the claimer.
    pub fn running(&self, id: &str, pid: Option<u32>, at_ms: u64) -> Result<bool, Error> {
        self.change(
            "mark an attempt running",
            "UPDATE attempts SET state = 'running', token = NULL, driver_pid = ?2, \
             state_at_ms = ?3 WHERE id = ?1",
            params![id, pid, to_i64(at_ms)],
        )
    }

    /// A cancel was asked of a running attempt.
    pub fn cancel_asked(&self, id: &str, cancel: Cancel) -> Result<bool, Error> {
        self.change(
            "record a cancel",
            "UPDATE attempts SET cancel_at_ms = ?2, cancel_by = ?3 WHERE id = ?1",
            params![id, to_i64(cancel.at_ms), cancel.by],
        )
    }

    /// A failed (or legacy) attempt is queued again from the start: no failures, no backoff;
    /// `enqueuer` replaces the recorded one where given.
    pub fn retry(&self, id: &str, enqueuer: Option<&Enqueuer>, at_ms: u64) -> Result<bool, Error> {
        let changed = self.change(
            "queue an attempt again",
            "UPDATE attempts SET state = 'queued', token = NULL, failures = 0, \
             retry_at_ms = 0, state_at_ms = ?2 WHERE id = ?1",
            params![id, to_i64(at_ms)],
        )?;
        if let (true, Some(e)) = (changed, enqueuer) {
            self.change(
                "record who retried an attempt",
                "UPDATE attempts SET uid = ?2, gid = ?3, groups = ?4 WHERE id = ?1",
                params![
                    id,
                    e.uid,
                    e.gid,
                    serde_json::to_string(&e.groups).unwrap_or_default()
                ],
            )?;
        }
        Ok(changed)
    }

    fn change(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<bool, Error> {
        let n = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute(params))
            .map_err(self.query(op))?;
        Ok(n > 0)
    }

    /// Removes an attempt; `false` if there was none.
    pub fn remove(&self, id: &str) -> Result<bool, Error> {
        self.change(
            "remove an attempt",
            "DELETE FROM attempts WHERE id = ?1",
            params![id],
        )
    }

    /// Ends an attempt: its row removed (if there is one) and `ended` kept in the history, in
    /// one transaction; the history is cut to its newest [`MAX_ENDED`].
    pub fn end(&mut self, ended: &Ended) -> Result<(), Error> {
        let path = self.path.clone();
        let query = |op| {
            let path = path.clone();
            move |source| Error::Query { path, op, source }
        };
        let tx = self.conn.transaction().map_err(query("end an attempt"))?;
        tx.execute("DELETE FROM attempts WHERE id = ?1", params![ended.id])
            .map_err(query("remove an ended attempt"))?;
        tx.execute(
            &format!(
                "INSERT OR REPLACE INTO ended ({ENDED_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, \
                 ?7, ?8, ?9, ?10, ?11, ?12)"
            ),
            params![
                ended.id,
                ended.lane,
                serde_json::to_string(&ended.args).unwrap_or_default(),
                ended.uid,
                to_i64(ended.queued_at_ms),
                ended.started_at_ms.map(to_i64),
                to_i64(ended.ended_at_ms),
                ended.outcome.word(),
                ended.status,
                ended.signal,
                ended.detail,
                ended.log,
            ],
        )
        .map_err(query("keep an ended attempt"))?;
        tx.execute(
            "DELETE FROM ended WHERE id IN (SELECT id FROM ended ORDER BY ended_at_ms DESC, id \
             DESC LIMIT -1 OFFSET ?1)",
            params![MAX_ENDED],
        )
        .map_err(query("cut the history"))?;
        tx.commit().map_err(query("end an attempt"))?;
        Ok(())
    }

    /// The ended attempt `id`, if the history keeps it.
    pub fn ended(&self, id: &str) -> Result<Option<Ended>, Error> {
        self.conn
            .prepare_cached(&format!("SELECT {ENDED_COLUMNS} FROM ended WHERE id = ?1"))
            .and_then(|mut statement| statement.query_row(params![id], ended_from_row))
            .optional()
            .map_err(self.query("read an ended attempt"))
    }

    /// The history, newest first, at most `limit`.
    pub fn history(&self, limit: u32) -> Result<Vec<Ended>, Error> {
        let mut statement = self
            .conn
            .prepare_cached(&format!(
                "SELECT {ENDED_COLUMNS} FROM ended ORDER BY ended_at_ms DESC, id DESC LIMIT ?1"
            ))
            .map_err(self.query("read the history"))?;
        let rows = statement
            .query_map(params![limit], ended_from_row)
            .map_err(self.query("read the history"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.query("read the history"))
    }

    /// Removes from the history every attempt that ended before `before_ms` (of `uid` only,
    /// where given) and returns them (their logs are the caller's to remove).
    pub fn prune(&self, before_ms: u64, uid: Option<u32>) -> Result<Vec<Ended>, Error> {
        let mut statement = self
            .conn
            .prepare_cached(&format!(
                "DELETE FROM ended WHERE ended_at_ms < ?1 AND (?2 IS NULL OR uid = ?2) \
                 RETURNING {ENDED_COLUMNS}"
            ))
            .map_err(self.query("prune the history"))?;
        let rows = statement
            .query_map(params![to_i64(before_ms), uid], ended_from_row)
            .map_err(self.query("prune the history"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.query("prune the history"))
    }

    /// The attempt `id`, if stored.
    pub fn get(&self, id: &str) -> Result<Option<Attempt>, Error> {
        let raw = self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM attempts WHERE id = ?1"))
            .and_then(|mut statement| statement.query_row(params![id], Raw::from_row))
            .optional()
            .map_err(self.query("read an attempt"))?;
        Ok(raw.map(|r| r.into_attempt(&self.path)))
    }

    /// The next attempt to admit at `now_ms`: of the queued ones not waiting out a backoff, the
    /// one with the highest priority, then the oldest original start, then the smallest id
    /// (from the `attempts_order` index).
    ///
    /// A damaged row met on the way (a column that does not parse) is parked as `failed`, its
    /// damage as its error, and the next is looked at: one broken row never holds the rest.
    pub fn next_queued(&self, now_ms: u64) -> Result<Option<Attempt>, Error> {
        loop {
            let raw = self
                .conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM attempts INDEXED BY attempts_order WHERE state = \
                     'queued' AND retry_at_ms <= ?1 ORDER BY priority DESC, queued_at_ms, id \
                     LIMIT 1"
                ))
                .and_then(|mut statement| {
                    statement.query_row(params![to_i64(now_ms)], Raw::from_row)
                })
                .optional()
                .map_err(self.query("choose the next attempt"))?;
            let Some(attempt) = raw.map(|r| r.into_attempt(&self.path)) else {
                return Ok(None);
            };
            if !attempt.damaged {
                return Ok(Some(attempt));
            }
            let error = attempt.last_error.clone().unwrap_or_default();
            if !self.start_failed(&attempt.id, State::Failed, 0, &error, 0, now_ms)? {
                return Ok(None);
            }
        }
    }

    /// The first queued attempt of each owner (enqueuer's uid and tag) at `now_ms`, each the
    /// one [`Store::next_queued`] would choose among that owner's rows, in admission order:
    /// the candidates of the fair choice among owners when the config gives shares. Damaged
    /// rows met are parked as `next_queued` parks them.
    pub fn queued_heads(&self, now_ms: u64) -> Result<Vec<Attempt>, Error> {
        loop {
            let heads = self.select_at(
                &format!(
                    "SELECT {COLUMNS} FROM (SELECT *, row_number() OVER (PARTITION BY uid, owner \
                     ORDER BY priority DESC, queued_at_ms, id) AS place FROM attempts WHERE \
                     state = 'queued' AND retry_at_ms <= ?1) WHERE place = 1 \
                     ORDER BY priority DESC, queued_at_ms, id"
                ),
                now_ms,
                "choose the next attempt of each owner",
            )?;
            let Some(damaged) = heads.iter().find(|a| a.damaged) else {
                return Ok(heads);
            };
            let error = damaged.last_error.clone().unwrap_or_default();
            if !self.start_failed(&damaged.id, State::Failed, 0, &error, 0, now_ms)? {
                return Ok(heads.into_iter().filter(|a| !a.damaged).collect());
            }
        }
    }

    fn select_at(&self, sql: &str, now_ms: u64, op: &'static str) -> Result<Vec<Attempt>, Error> {
        let mut statement = self.conn.prepare_cached(sql).map_err(self.query(op))?;
        let rows = statement
            .query_map(params![to_i64(now_ms)], Raw::from_row)
            .map_err(self.query(op))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(self.query(op))?.into_attempt(&self.path));
        }
        Ok(out)
    }

    /// How many rows of `uid` wait (queued, starting or failed: each holds its lane's
    /// descriptor in the dispatcher; a running one holds nothing of it).
    pub fn waiting_of(&self, uid: u32) -> Result<u64, Error> {
        self.conn
            .prepare_cached("SELECT count(*) FROM attempts WHERE uid = ?1 AND state != 'running'")
            .and_then(|mut statement| statement.query_row(params![uid], |row| row.get::<_, i64>(0)))
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(self.query("count a user's waiting attempts"))
    }

    /// The earliest end of a backoff still ahead of `now_ms`, if a queued attempt waits one.
    pub fn next_retry(&self, now_ms: u64) -> Result<Option<u64>, Error> {
        self.conn
            .prepare_cached(
                "SELECT min(retry_at_ms) FROM attempts WHERE state = 'queued' AND retry_at_ms > ?1",
            )
            .and_then(|mut statement| {
                statement.query_row(params![to_i64(now_ms)], |row| row.get::<_, Option<i64>>(0))
            })
            .map(|at| at.and_then(|at| u64::try_from(at).ok()))
            .map_err(self.query("find the next retry"))
    }

    /// Every attempt, in admission order (running first, then starting, failed and queued).
    pub fn all(&self) -> Result<Vec<Attempt>, Error> {
        self.select(
            &format!(
                "SELECT {COLUMNS} FROM attempts ORDER BY \
                 CASE state WHEN 'running' THEN 0 WHEN 'starting' THEN 1 WHEN 'failed' THEN 2 \
                 ELSE 3 END, priority DESC, queued_at_ms, id"
            ),
            "list the attempts",
        )
    }

    /// The attempts in state `state`, in admission order, from the `attempts_order` index:
    /// what expiry (starting) and the end of runs (running) look at, without reading the
    /// queued rows.
    pub fn in_state(&self, state: State) -> Result<Vec<Attempt>, Error> {
        let sql = format!(
            "SELECT {COLUMNS} FROM attempts INDEXED BY attempts_order \
             WHERE state = '{}' ORDER BY priority DESC, queued_at_ms, id",
            state.word()
        );
        self.select(&sql, "list the attempts in one state")
    }

    /// The starting attempts (at most as many as the pool has slots).
    pub fn starting(&self) -> Result<Vec<Attempt>, Error> {
        self.in_state(State::Starting)
    }

    /// The attempt of lane `lane`, if one is stored (from the `attempts_lane` index).
    pub fn lane_row(&self, lane: &str) -> Result<Option<Attempt>, Error> {
        let raw = self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM attempts INDEXED BY attempts_lane WHERE lane = ?1"
            ))
            .and_then(|mut statement| statement.query_row(params![lane], Raw::from_row))
            .optional()
            .map_err(self.query("look up a lane"))?;
        Ok(raw.map(|r| r.into_attempt(&self.path)))
    }

    /// Whether an attempt of lane `lane` is stored (from the `attempts_lane` index).
    pub fn lane_queued(&self, lane: &str) -> Result<bool, Error> {
        self.conn
            .prepare_cached("SELECT 1 FROM attempts INDEXED BY attempts_lane WHERE lane = ?1")
            .and_then(|mut statement| statement.exists(params![lane]))
            .map_err(self.query("look up a lane"))
    }

    fn select(&self, sql: &str, op: &'static str) -> Result<Vec<Attempt>, Error> {
        let mut statement = self.conn.prepare_cached(sql).map_err(self.query(op))?;
        let rows = statement
            .query_map([], Raw::from_row)
            .map_err(self.query(op))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(self.query(op))?.into_attempt(&self.path));
        }
        Ok(out)
    }
}

/// Whether an error is SQLite finding the file no database, or damaged.
fn is_damage(error: &Error) -> bool {
    let code = match error {
        Error::Open { source, .. } | Error::Query { source, .. } => source.sqlite_error_code(),
        _ => None,
    };
    matches!(
        code,
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
    )
}

/// The innermost text of an error, for a [`Damage`]'s `why`.
fn source_text(error: &Error) -> String {
    let mut text = String::new();
    let mut cause: Option<&dyn std::error::Error> = std::error::Error::source(error);
    while let Some(c) = cause {
        text = c.to_string();
        cause = c.source();
    }
    text
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Where a damaged database goes: `<path>.damaged-<now_ms>`, or with `-<n>` added if that is
/// taken.
fn aside(path: &Path, now_ms: u64) -> PathBuf {
    let base = with_suffix(path, &format!(".damaged-{now_ms}"));
    if std::fs::symlink_metadata(&base).is_err() {
        return base;
    }
    (1..)
        .map(|n| with_suffix(&base, &format!("-{n}")))
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .unwrap_or(base)
}

fn to_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn ended_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Ended> {
    let args: String = row.get(2)?;
    let outcome: String = row.get(7)?;
    Ok(Ended {
        id: row.get(0)?,
        lane: row.get(1)?,
        args: serde_json::from_str(&args).unwrap_or_default(),
        uid: row.get(3)?,
        queued_at_ms: u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0),
        started_at_ms: row
            .get::<_, Option<i64>>(5)?
            .and_then(|v| u64::try_from(v).ok()),
        ended_at_ms: u64::try_from(row.get::<_, i64>(6)?).unwrap_or(0),
        // A word this code does not know (a newer writer's) reads as the plainest one.
        outcome: Outcome::parse(&outcome).unwrap_or(Outcome::Ended),
        status: row.get(8)?,
        signal: row.get(9)?,
        detail: row.get(10)?,
        log: row.get(11)?,
    })
}

/// A row as SQLite returns it, before its JSON columns are parsed.
struct Raw {
    id: String,
    lane: String,
    state: String,
    token: Option<String>,
    queued_at_ms: i64,
    priority: i64,
    placement: String,
    args: String,
    stage: String,
    env: String,
    state_at_ms: i64,
    lane_epoch: Option<i64>,
    uid: Option<u32>,
    gid: Option<u32>,
    groups: Option<String>,
    own_lane: bool,
    failures: u32,
    last_error: Option<String>,
    retry_at_ms: i64,
    driver_pid: Option<u32>,
    starts: u32,
    cancel_at_ms: Option<i64>,
    cancel_by: Option<u32>,
    weight: i64,
    owner: Option<String>,
}

impl Raw {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
        Ok(Raw {
            id: row.get(0)?,
            lane: row.get(1)?,
            state: row.get(2)?,
            token: row.get(3)?,
            queued_at_ms: row.get(4)?,
            priority: row.get(5)?,
            placement: row.get(6)?,
            args: row.get(7)?,
            stage: row.get(8)?,
            env: row.get(9)?,
            state_at_ms: row.get(10)?,
            lane_epoch: row.get(11)?,
            uid: row.get(12)?,
            gid: row.get(13)?,
            groups: row.get(14)?,
            own_lane: row.get(15)?,
            failures: row.get(16)?,
            last_error: row.get(17)?,
            retry_at_ms: row.get(18)?,
            driver_pid: row.get(19)?,
            starts: row.get(20)?,
            cancel_at_ms: row.get(21)?,
            cancel_by: row.get(22)?,
            weight: row.get(23)?,
            owner: row.get(24)?,
        })
    }

    /// The attempt of this row; a row that does not parse (its state, arguments, environment
    /// or groups damaged) comes back `failed` and `damaged`, its damage as its last error, with
    /// what could be read, so that it is listed, never started, and can be cancelled.
    fn into_attempt(self, path: &Path) -> Attempt {
        let id = self.id.clone();
        let lane = self.lane.clone();
        let (queued_at_ms, priority, state_at_ms) =
            (self.queued_at_ms, self.priority, self.state_at_ms);
        let (uid, gid) = (self.uid, self.gid);
        let owner = self.owner.clone();
        match self.parse(path) {
            Ok(attempt) => attempt,
            Err(damage) => Attempt {
                state: State::Failed,
                last_error: Some(crate::service::chain(&damage)),
                enqueuer: uid.zip(gid).map(|(uid, gid)| Enqueuer {
                    uid,
                    gid,
                    groups: Vec::new(),
                }),
                damaged: true,
                owner,
                ..Attempt::queued(
                    id,
                    lane,
                    u64::try_from(queued_at_ms).unwrap_or(0),
                    priority,
                    u64::try_from(state_at_ms).unwrap_or(0),
                )
            },
        }
    }

    fn parse(self, path: &Path) -> Result<Attempt, Error> {
        let column = |column: &'static str| {
            let id = self.id.clone();
            move |source| Error::BadColumn {
                path: path.to_owned(),
                id,
                column,
                source,
            }
        };
        let state = State::parse(&self.state).ok_or_else(|| Error::BadState {
            path: path.to_owned(),
            id: self.id.clone(),
            state: self.state.clone(),
        })?;
        let weight = u32::try_from(self.weight)
            .ok()
            .filter(|&w| w >= 1)
            .ok_or_else(|| Error::BadWeight {
                path: path.to_owned(),
                id: self.id.clone(),
                weight: self.weight,
            })?;
        let args = serde_json::from_str(&self.args).map_err(column("arguments"))?;
        let env = serde_json::from_str(&self.env).map_err(column("environment"))?;
        let enqueuer = match (self.uid, self.gid) {
            (Some(uid), Some(gid)) => Some(Enqueuer {
                uid,
                gid,
                groups: match &self.groups {
                    Some(groups) => serde_json::from_str(groups).map_err(column("groups"))?,
                    None => Vec::new(),
                },
            }),
            _ => None,
        };
        Ok(Attempt {
            id: self.id,
            lane: self.lane,
            state,
            token: self.token,
            queued_at_ms: u64::try_from(self.queued_at_ms).unwrap_or(0),
            priority: self.priority,
            placement: self.placement,
            args,
            stage: self.stage,
            env,
            state_at_ms: u64::try_from(self.state_at_ms).unwrap_or(0),
            lane_epoch: self.lane_epoch.and_then(|e| u64::try_from(e).ok()),
            enqueuer,
            own_lane: self.own_lane,
            failures: self.failures,
            last_error: self.last_error,
            retry_at_ms: u64::try_from(self.retry_at_ms).unwrap_or(0),
            driver_pid: self.driver_pid,
            starts: self.starts,
            cancel: match (self.cancel_at_ms, self.cancel_by) {
                (Some(at), Some(by)) => Some(Cancel {
                    at_ms: u64::try_from(at).unwrap_or(0),
                    by,
                }),
                _ => None,
            },
            damaged: false,
            weight,
            owner: self.owner,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(id: &str, lane: &str, priority: i64, queued_at_ms: u64) -> Attempt {
        Attempt {
            placement: "wt".into(),
            args: vec!["worklane".into(), "claim".into()],
            stage: "build".into(),
            env: BTreeMap::from([("LANE_X".to_owned(), "1".to_owned())]),
            lane_epoch: Some(1),
            enqueuer: Some(Enqueuer {
                uid: 1001,
                gid: 1002,
                groups: vec![4, 27],
            }),
            ..Attempt::queued(id.into(), lane.into(), queued_at_ms, priority, queued_at_ms)
        }
    }

    #[test]
    fn rows_round_trip_and_come_out_by_priority_then_start() {
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::open(&dir.path().join("queue.db")).expect("open");
        store.insert(&attempt("a-3", "c", 0, 30)).expect("insert");
        store.insert(&attempt("a-1", "a", 0, 10)).expect("insert");
        store.insert(&attempt("a-2", "b", 5, 20)).expect("insert");
        assert_eq!(
            store.next_queued(0).expect("next").expect("one").id,
            "a-2",
            "priority first"
        );
        assert!(
            store
                .set_state("a-2", State::Starting, Some("t"), 40)
                .expect("set")
        );
        assert_eq!(
            store.next_queued(0).expect("next").expect("one").id,
            "a-1",
            "then the oldest start"
        );
        let back = store.get("a-2").expect("get").expect("stored");
        assert_eq!(
            (back.state, back.token.as_deref(), back.state_at_ms),
            (State::Starting, Some("t"), 40)
        );
        assert_eq!(back.queued_at_ms, 20, "the original start is kept");
        assert_eq!(back.env.get("LANE_X").map(String::as_str), Some("1"));
        assert!(store.remove("a-1").expect("remove"));
        assert!(!store.remove("a-1").expect("remove"), "gone");
        let ids: Vec<String> = store
            .all()
            .expect("all")
            .into_iter()
            .map(|a| a.id)
            .collect();
        assert_eq!(
            ids,
            ["a-2", "a-3"],
            "starting first, then the queue's order"
        );
    }

    #[test]
    fn weight_and_owner_round_trip_and_each_owner_has_one_head() {
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::open(&dir.path().join("queue.db")).expect("open");
        let of = |id: &str, uid: u32, owner: Option<&str>, priority: i64, start: u64| Attempt {
            weight: 3,
            owner: owner.map(str::to_owned),
            enqueuer: Some(Enqueuer {
                uid,
                gid: uid,
                groups: vec![],
            }),
            ..attempt(id, id, priority, start)
        };
        store.insert(&of("a-1", 1001, None, 0, 10)).expect("insert");
        store.insert(&of("a-2", 1001, None, 0, 5)).expect("insert");
        store
            .insert(&of("a-3", 1001, Some("nightly"), 0, 1))
            .expect("insert");
        store.insert(&of("a-4", 1002, None, 1, 50)).expect("insert");
        store
            .insert(&attempt("a-5", "e", 0, 20))
            .expect("a row of weight 1, of uid 1001 untagged too");
        let back = store.get("a-3").expect("get").expect("stored");
        assert_eq!((back.weight, back.owner.as_deref()), (3, Some("nightly")));
        assert_eq!(store.get("a-5").expect("get").expect("row").weight, 1);
        let heads: Vec<String> = store
            .queued_heads(0)
            .expect("heads")
            .into_iter()
            .map(|a| a.id)
            .collect();
        assert_eq!(
            heads,
            ["a-4", "a-3", "a-2"],
            "one head per enqueuer and tag (uid 1001 untagged: a-2, its earliest start), in \
             admission order"
        );
        store
            .set_state("a-2", State::Starting, Some("t"), 30)
            .expect("admitted");
        let heads: Vec<String> = store
            .queued_heads(0)
            .expect("heads")
            .into_iter()
            .map(|a| a.id)
            .collect();
        assert_eq!(heads, ["a-4", "a-3", "a-1"], "queued rows only");
        let ask = back.ask().expect("an enqueuer");
        assert_eq!(
            (ask.weight(), ask.owner().uid(), ask.owner().tag()),
            (3, 1001, Some("nightly"))
        );
        assert_eq!(ask.owner().groups(), [1001], "its gid, then its groups");
    }

    #[test]
    fn a_row_of_weight_zero_is_damaged_and_never_started() {
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::open(&dir.path().join("queue.db")).expect("open");
        store.insert(&attempt("a-1", "a", 0, 10)).expect("insert");
        store.insert(&attempt("a-2", "b", 0, 20)).expect("insert");
        store
            .conn
            .execute("UPDATE attempts SET weight = 0 WHERE id = 'a-1'", [])
            .expect("damage");
        let row = store.get("a-1").expect("get").expect("kept");
        assert!(row.damaged && row.state == State::Failed, "{row:?}");
        assert!(
            row.last_error
                .as_deref()
                .is_some_and(|e| e.contains("weight is 0")),
            "{row:?}"
        );
        assert_eq!(
            store.next_queued(0).expect("next").expect("one").id,
            "a-2",
            "the damaged row does not hold the next"
        );
    }

    #[test]
    fn state_changes_and_removals_say_whether_a_row_was_there() {
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::open(&dir.path().join("q.db")).expect("open");
        store.insert(&attempt("a-1", "l", 0, 5)).expect("insert");
        assert!(
            store
                .set_state("a-1", State::Starting, Some("t"), 9)
                .expect("update")
        );
        assert!(
            !store
                .set_state("a-2", State::Starting, Some("t"), 9)
                .expect("update"),
            "no row"
        );
        let row = store.get("a-1").expect("get").expect("row");
        assert_eq!(
            (row.state, row.token.as_deref(), row.state_at_ms),
            (State::Starting, Some("t"), 9)
        );
        assert!(store.remove("a-1").expect("remove"));
        assert!(!store.remove("a-1").expect("remove"), "gone already");
    }

    #[test]
    fn starting_rows_and_queued_lanes_are_looked_up_alone() {
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::open(&dir.path().join("queue.db")).expect("open");
        for (id, lane, priority, start) in
            [("a-1", "x", 0, 10), ("a-2", "y", 3, 20), ("a-3", "z", 0, 5)]
        {
            store
                .insert(&attempt(id, lane, priority, start))
                .expect("insert");
        }
        assert!(store.starting().expect("starting").is_empty(), "none yet");
        for id in ["a-1", "a-2"] {
            assert!(
                store
                    .set_state(id, State::Starting, Some("t"), 40)
                    .expect("set")
            );
        }
        let ids: Vec<String> = store
            .starting()
            .expect("starting")
            .into_iter()
            .map(|a| a.id)
            .collect();
        assert_eq!(ids, ["a-2", "a-1"], "only the starting ones, in order");
        assert!(
            store.lane_queued("z").expect("lookup"),
            "a queued row's lane"
        );
        assert!(
            store.lane_queued("x").expect("lookup"),
            "a starting row's lane"
        );
        assert!(!store.lane_queued("w").expect("lookup"), "no row");
        assert!(store.remove("a-3").expect("remove"));
        assert!(!store.lane_queued("z").expect("lookup"), "its row gone");
    }

    #[test]
    fn one_attempt_per_lane() {
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::open(&dir.path().join("queue.db")).expect("open");
        store
            .insert(&attempt("a-1", "docs", 0, 10))
            .expect("insert");
        assert!(
            store.insert(&attempt("a-2", "docs", 0, 11)).is_err(),
            "a lane is one attempt"
        );
    }

    #[test]
    fn the_schema_is_versioned_and_a_newer_one_is_refused() {
        let dir = tempfile::tempdir().expect("temp");
        let path = dir.path().join("queue.db");
        drop(Store::open(&path).expect("create"));
        let reopened = Store::open(&path).expect("reopen at the same version");
        drop(reopened);
        let conn = Connection::open(&path).expect("raw");
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .expect("bump");
        drop(conn);
        let err = Store::open(&path).expect_err("newer");
        assert!(err.to_string().contains("newer"), "{err}");
    }

    #[test]
    fn a_damaged_row_is_named_with_its_column_and_the_parsers_cause() {
        let dir = tempfile::tempdir().expect("temp");
        let path = dir.path().join("queue.db");
        let store = Store::open(&path).expect("open");
        store
            .insert(&attempt("a-1", "docs", 0, 10))
            .expect("insert");
        store
            .insert(&attempt("a-2", "next", 0, 20))
            .expect("insert");
        store
            .conn
            .execute("UPDATE attempts SET args = 'not json' WHERE id = 'a-1'", [])
            .expect("damage the arguments");
        let raw = store
            .conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM attempts WHERE id = 'a-1'"),
                [],
                Raw::from_row,
            )
            .expect("raw");
        let err = raw.parse(&path).expect_err("damaged");
        let Error::BadColumn {
            id, column, source, ..
        } = &err
        else {
            panic!("a damaged column: {err:?}")
        };
        assert_eq!((id.as_str(), *column), ("a-1", "arguments"), "{err}");
        assert!(source.is_syntax(), "the parser's own error: {source:?}");
        assert!(
            !err.to_string().contains(&source.to_string()),
            "the cause is not repeated in the message: {err}"
        );
        // Read, it is failed and damaged, never started, with its damage as its error.
        let row = store.get("a-1").expect("get").expect("listed");
        assert!(row.damaged && row.state == State::Failed, "{row:?}");
        assert!(
            row.last_error
                .as_deref()
                .is_some_and(|e| e.contains("arguments") && e.contains("queue cancel a-1")),
            "{row:?}"
        );
        assert_eq!(row.enqueuer.map(|e| e.uid), Some(1001), "whose it is, kept");
        assert_eq!(
            store.next_queued(100).expect("next").map(|a| a.id),
            Some("a-2".to_owned()),
            "the damaged row does not hold the next"
        );
        let parked: String = store
            .conn
            .query_row("SELECT state FROM attempts WHERE id = 'a-1'", [], |r| {
                r.get(0)
            })
            .expect("state");
        assert_eq!(parked, "failed", "parked on the way");
        // The schema's CHECK keeps a state out; a damaged file is not held to it.
        store
            .conn
            .pragma_update(None, "ignore_check_constraints", true)
            .expect("pragma");
        store
            .conn
            .execute("UPDATE attempts SET state = 'gone' WHERE id = 'a-2'", [])
            .expect("damage the state");
        let all = store.all().expect("listed, damage and all");
        let gone = all.iter().find(|a| a.id == "a-2").expect("a-2");
        assert!(
            gone.damaged
                && gone
                    .last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("\"gone\"")),
            "{gone:?}"
        );
    }

    #[test]
    fn a_version_1_queue_is_migrated_with_its_rows() {
        let dir = tempfile::tempdir().expect("temp");
        let path = dir.path().join("queue.db");
        let conn = Connection::open(&path).expect("raw");
        conn.execute_batch(MIGRATIONS[0]).expect("version 1 schema");
        conn.pragma_update(None, "user_version", 1)
            .expect("version");
        conn.execute(
            "INSERT INTO attempts (id, lane, state, token, queued_at_ms, priority, placement, \
             args, stage, env, state_at_ms) VALUES ('a-1', 'l', 'queued', NULL, 7, 2, '', \
             '[\"true\"]', '', '{}', 7)",
            [],
        )
        .expect("a version 1 row");
        drop(conn);
        let store = Store::open(&path).expect("migrate");
        let version: i64 = store
            .conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .expect("version");
        assert_eq!(version, SCHEMA_VERSION);
        let row = store.get("a-1").expect("get").expect("kept");
        assert_eq!(
            (row.queued_at_ms, row.priority, row.lane_epoch),
            (7, 2, None)
        );
        assert_eq!(
            (row.weight, row.owner),
            (1, None),
            "a row queued before weights takes one unit"
        );
        store.insert(&attempt("a-2", "m", 0, 9)).expect("a new row");
        assert_eq!(
            store.get("a-2").expect("get").expect("row").lane_epoch,
            Some(1)
        );
    }

    #[test]
    fn admission_order_comes_from_the_index() {
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::open(&dir.path().join("queue.db")).expect("open");
        let plan: String = store
            .conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT id FROM attempts INDEXED BY attempts_order \
                 WHERE state = 'queued' ORDER BY priority DESC, queued_at_ms, id LIMIT 1",
                [],
                |row| row.get(3),
            )
            .expect("plan");
        assert!(
            plan.contains("attempts_order"),
            "an index search, not a scan: {plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "no sort step: {plan}");
    }

    fn ended(id: &str, at: u64, uid: Option<u32>) -> Ended {
        Ended {
            id: id.to_owned(),
            lane: "l".into(),
            args: vec!["true".into()],
            uid,
            queued_at_ms: 1,
            started_at_ms: Some(2),
            ended_at_ms: at,
            outcome: Outcome::Exited,
            status: Some(3),
            signal: None,
            detail: "d".into(),
            log: Some(log_name(id)),
        }
    }

    #[test]
    fn a_row_waiting_out_its_backoff_is_passed_over_until_its_end() {
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::open(&dir.path().join("queue.db")).expect("open");
        store.insert(&attempt("a-1", "a", 0, 10)).expect("insert");
        store.insert(&attempt("a-2", "b", 0, 20)).expect("insert");
        assert!(
            store
                .start_failed("a-1", State::Queued, 1, "no driver", 500, 100)
                .expect("failed")
        );
        assert_eq!(
            store.next_queued(499).expect("next").expect("one").id,
            "a-2"
        );
        assert_eq!(
            store.next_queued(500).expect("next").expect("one").id,
            "a-1",
            "at its end"
        );
        assert_eq!(store.next_retry(100).expect("retry"), Some(500));
        assert_eq!(store.next_retry(500).expect("retry"), None, "none ahead");
        let row = store.get("a-1").expect("get").expect("row");
        assert_eq!(
            (
                row.failures,
                row.last_error.as_deref(),
                row.retry_at_ms,
                row.state_at_ms
            ),
            (1, Some("no driver"), 500, 100)
        );
        assert!(
            store
                .start_failed("a-2", State::Failed, 5, "gone", 0, 101)
                .expect("park")
        );
        assert!(
            store
                .next_queued(1_000)
                .expect("next")
                .is_some_and(|a| a.id == "a-1")
        );
        assert!(store.retry("a-2", None, 102).expect("retry"));
        let row = store.get("a-2").expect("get").expect("row");
        assert_eq!(
            (row.state, row.failures, row.retry_at_ms),
            (State::Queued, 0, 0)
        );
        assert!(store.started("a-2", 77).expect("started"));
        assert!(store.started("a-2", 78).expect("started"));
        let row = store.get("a-2").expect("get").expect("row");
        assert_eq!((row.driver_pid, row.starts), (Some(78), 2));
        assert!(store.running("a-2", Some(79), 103).expect("running"));
        assert!(
            store
                .cancel_asked("a-2", Cancel { at_ms: 104, by: 5 })
                .expect("cancel")
        );
        let row = store.get("a-2").expect("get").expect("row");
        assert_eq!(
            (row.state, row.driver_pid, row.cancel),
            (State::Running, Some(79), Some(Cancel { at_ms: 104, by: 5 }))
        );
        assert_eq!(
            store.in_state(State::Running).expect("running").len(),
            1,
            "found by its state"
        );
    }

    #[test]
    fn the_history_keeps_the_newest_and_prunes_by_age_and_owner() {
        let dir = tempfile::tempdir().expect("temp");
        let mut store = Store::open(&dir.path().join("queue.db")).expect("open");
        store.insert(&attempt("a-x", "x", 0, 1)).expect("insert");
        store.end(&ended("a-x", 5, Some(1001))).expect("end");
        assert!(store.get("a-x").expect("get").is_none(), "its row is gone");
        assert!(
            !store.lane_queued("x").expect("lane"),
            "its lane free for a new row"
        );
        let kept = store.ended("a-x").expect("ended").expect("kept");
        assert_eq!(kept, ended("a-x", 5, Some(1001)), "kept whole");
        for i in 0..MAX_ENDED + 5 {
            store
                .end(&ended(&format!("a-{i:05}"), 10 + u64::from(i), Some(1002)))
                .expect("end");
        }
        let history = store.history(u32::MAX).expect("history");
        assert_eq!(history.len(), MAX_ENDED as usize, "cut to its bound");
        assert_eq!(
            history[0].id,
            format!("a-{:05}", MAX_ENDED + 4),
            "newest first"
        );
        assert!(
            store.ended("a-x").expect("ended").is_none(),
            "the oldest went first"
        );
        let pruned = store.prune(20, Some(1001)).expect("prune");
        assert!(pruned.is_empty(), "another owner's are kept");
        let pruned = store.prune(20, Some(1002)).expect("prune");
        assert_eq!(
            pruned.iter().map(|e| e.ended_at_ms).collect::<Vec<_>>(),
            (15..20).collect::<Vec<_>>(),
            "only those that ended before the time"
        );
        let all = store.prune(u64::MAX, None).expect("prune all");
        assert_eq!(all.len(), MAX_ENDED as usize - 5);
        assert!(store.history(10).expect("history").is_empty());
    }

    #[test]
    fn a_sound_database_opens_checked_and_a_damaged_one_is_moved_aside() {
        let dir = tempfile::tempdir().expect("temp");
        let path = dir.path().join("queue.db");
        let (store, damage) = Store::open_checked(&path, 7).expect("new");
        assert_eq!(damage, None, "a new one is sound");
        store.insert(&attempt("a-1", "l", 0, 5)).expect("insert");
        drop(store);
        let (store, damage) = Store::open_checked(&path, 8).expect("again");
        assert_eq!(damage, None);
        assert!(store.get("a-1").expect("get").is_some(), "its rows kept");
        drop(store);
        std::fs::write(&path, vec![0x5a; 8192]).expect("garbage");
        let (store, damage) = Store::open_checked(&path, 9).expect("moved aside");
        let damage = damage.expect("damage found");
        assert_eq!(damage.moved_to, dir.path().join("queue.db.damaged-9"));
        assert_eq!(
            std::fs::read(&damage.moved_to).expect("kept").len(),
            8192,
            "moved, never deleted"
        );
        assert!(!damage.why.is_empty(), "SQLite's words: {damage:?}");
        assert!(store.all().expect("all").is_empty(), "a new, empty queue");
        drop(store);
        std::fs::write(&path, vec![0x5a; 8192]).expect("garbage again");
        let (_, damage) = Store::open_checked(&path, 9).expect("moved aside again");
        assert_eq!(
            damage.expect("damage").moved_to,
            dir.path().join("queue.db.damaged-9-1"),
            "a name of its own when the first is taken"
        );
    }

    #[test]
    fn a_version_2_queue_is_migrated_with_its_lanes_of_their_own() {
        let dir = tempfile::tempdir().expect("temp");
        let path = dir.path().join("queue.db");
        let conn = Connection::open(&path).expect("raw");
        conn.execute_batch(MIGRATIONS[0]).expect("version 1");
        conn.execute_batch(MIGRATIONS[1]).expect("version 2");
        conn.pragma_update(None, "user_version", 2)
            .expect("version");
        for (id, lane) in [
            ("a-1", "q-0123456789abcdef"),
            ("a-2", "docs"),
            ("a-3", "q-0123"),
        ] {
            conn.execute(
                "INSERT INTO attempts (id, lane, state, token, queued_at_ms, priority, placement, \
                 args, stage, env, state_at_ms, lane_epoch) VALUES (?1, ?2, 'starting', 't', 7, \
                 0, '', '[\"true\"]', '', '{}', 7, 3)",
                params![id, lane],
            )
            .expect("a version 2 row");
        }
        drop(conn);
        let store = Store::open(&path).expect("migrate");
        let own: Vec<(String, bool)> = ["a-1", "a-2", "a-3"]
            .iter()
            .map(|id| {
                let row = store.get(id).expect("get").expect("kept");
                (row.id, row.own_lane)
            })
            .collect();
        assert_eq!(
            own,
            [
                ("a-1".into(), true),
                ("a-2".into(), false),
                ("a-3".into(), false)
            ],
            "a lane of the reserved shape was one of its own"
        );
        let row = store.get("a-1").expect("get").expect("row");
        assert_eq!(
            (
                row.state,
                row.token.as_deref(),
                row.lane_epoch,
                row.enqueuer
            ),
            (State::Starting, Some("t"), Some(3), None),
            "kept, with no enqueuer recorded"
        );
        assert!(
            store
                .set_state("a-1", State::Failed, None, 9)
                .expect("the new states")
        );
    }
}
