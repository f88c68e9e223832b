//! The queue's durable rows: SQLite (WAL), one row per attempt, a versioned schema.
//!
//! A row is committed before its enqueue is acknowledged, and admission order comes from an
//! index (`priority` descending, then the original queue start, then the attempt id), never
//! from a scan.

use rusqlite::{Connection, OptionalExtension, params};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The schema version this code writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 2;

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
];

/// Where an attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for admission.
    Queued,
    /// Admitted: offered to a driver that must claim it with its token before the deadline.
    Starting,
}

impl State {
    /// The word stored and shown: `queued` or `starting`.
    #[must_use]
    pub fn word(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Starting => "starting",
        }
    }

    fn parse(word: &str) -> Option<State> {
        match word {
            "queued" => Some(State::Queued),
            "starting" => Some(State::Starting),
            _ => None,
        }
    }
}

/// One attempt: a row of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The stable attempt id (`a-<32 hex>`), kept across expiry and recovery.
    pub id: String,
    /// The lane's name (its lock is `lane-<lane>.lock`).
    pub lane: String,
    /// Queued or starting.
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
        /// A stored row's state is neither `queued` nor `starting`.
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
}

use db::Error;

/// The queue's durable rows.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

const COLUMNS: &str = "id, lane, state, token, queued_at_ms, priority, placement, args, stage, \
                       env, state_at_ms, lane_epoch";

impl Store {
    /// Opens (creating if needed) the database at `path`, in WAL mode, migrated to
    /// [`SCHEMA_VERSION`].
    pub fn open(path: &Path) -> Result<Store, Error> {
        let open = |source| Error::Open {
            path: path.to_owned(),
            source,
        };
        let mut conn = Connection::open(path).map_err(open)?;
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

    fn query(&self, op: &'static str) -> impl FnOnce(rusqlite::Error) -> Error + '_ {
        move |source| Error::Query {
            path: self.path.clone(),
            op,
            source,
        }
    }

    /// Stores a new attempt (committed when this returns).
    pub fn insert(&self, attempt: &Attempt) -> Result<(), Error> {
        self.conn
            .prepare_cached(&format!("INSERT INTO attempts ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"))
            .and_then(|mut statement| statement.execute(params![
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
                ]))
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
        let n = self
            .conn
            .prepare_cached(
                "UPDATE attempts SET state = ?2, token = ?3, state_at_ms = ?4 WHERE id = ?1",
            )
            .and_then(|mut statement| {
                statement.execute(params![id, state.word(), token, to_i64(at_ms)])
            })
            .map_err(self.query("update an attempt"))?;
        Ok(n > 0)
    }

    /// Removes an attempt; `false` if there was none.
    pub fn remove(&self, id: &str) -> Result<bool, Error> {
        let n = self
            .conn
            .prepare_cached("DELETE FROM attempts WHERE id = ?1")
            .and_then(|mut statement| statement.execute(params![id]))
            .map_err(self.query("remove an attempt"))?;
        Ok(n > 0)
    }

    /// The attempt `id`, if stored.
    pub fn get(&self, id: &str) -> Result<Option<Attempt>, Error> {
        let raw = self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM attempts WHERE id = ?1"))
            .and_then(|mut statement| statement.query_row(params![id], Raw::from_row))
            .optional()
            .map_err(self.query("read an attempt"))?;
        raw.map(|r| r.into_attempt(&self.path)).transpose()
    }

    /// The next attempt to admit: the queued one with the highest priority, then the oldest
    /// original start, then the smallest id (from the `attempts_order` index).
    pub fn next_queued(&self) -> Result<Option<Attempt>, Error> {
        let raw = self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM attempts INDEXED BY attempts_order WHERE state = 'queued' \
                 ORDER BY priority DESC, queued_at_ms, id LIMIT 1"
            ))
            .and_then(|mut statement| statement.query_row([], Raw::from_row))
            .optional()
            .map_err(self.query("choose the next attempt"))?;
        raw.map(|r| r.into_attempt(&self.path)).transpose()
    }

    /// Every attempt, in admission order (starting ones first).
    pub fn all(&self) -> Result<Vec<Attempt>, Error> {
        self.select(
            &format!(
                "SELECT {COLUMNS} FROM attempts ORDER BY state DESC, priority DESC, queued_at_ms, id"
            ),
            "list the attempts",
        )
    }

    /// The starting attempts (at most as many as the pool has slots), from the
    /// `attempts_order` index: what expiry looks at, without reading the queued rows.
    pub fn starting(&self) -> Result<Vec<Attempt>, Error> {
        self.select(
            &format!(
                "SELECT {COLUMNS} FROM attempts INDEXED BY attempts_order \
                 WHERE state = 'starting' ORDER BY priority DESC, queued_at_ms, id"
            ),
            "list the starting attempts",
        )
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
            out.push(row.map_err(self.query(op))?.into_attempt(&self.path)?);
        }
        Ok(out)
    }
}

fn to_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
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
        })
    }

    fn into_attempt(self, path: &Path) -> Result<Attempt, Error> {
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
        let args = serde_json::from_str(&self.args).map_err(column("arguments"))?;
        let env = serde_json::from_str(&self.env).map_err(column("environment"))?;
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(id: &str, lane: &str, priority: i64, queued_at_ms: u64) -> Attempt {
        Attempt {
            id: id.to_owned(),
            lane: lane.to_owned(),
            state: State::Queued,
            token: None,
            queued_at_ms,
            priority,
            placement: "wt".into(),
            args: vec!["worklane".into(), "claim".into()],
            stage: "build".into(),
            env: BTreeMap::from([("LANE_X".to_owned(), "1".to_owned())]),
            state_at_ms: queued_at_ms,
            lane_epoch: Some(1),
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
            store.next_queued().expect("next").expect("one").id,
            "a-2",
            "priority first"
        );
        assert!(
            store
                .set_state("a-2", State::Starting, Some("t"), 40)
                .expect("set")
        );
        assert_eq!(
            store.next_queued().expect("next").expect("one").id,
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
            .conn
            .execute("UPDATE attempts SET args = 'not json' WHERE id = 'a-1'", [])
            .expect("damage the arguments");
        let err = store.get("a-1").expect_err("damaged");
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
        // The schema's CHECK keeps a state out; a damaged file is not held to it.
        store
            .conn
            .pragma_update(None, "ignore_check_constraints", true)
            .expect("pragma");
        store
            .conn
            .execute("UPDATE attempts SET state = 'gone' WHERE id = 'a-1'", [])
            .expect("damage the state");
        let err = store.all().expect_err("damaged");
        assert!(
            matches!(&err, Error::BadState { state, .. } if state == "gone"),
            "{err:?}"
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
}
