//! The queue's durable rows: SQLite (WAL), one row per attempt, a versioned schema, and a
//! bounded history of the attempts that ended.
//!
//! A row is committed before its enqueue is acknowledged, and admission order comes from an
//! index (`priority` descending, then the original queue start, then the attempt id), never
//! from a scan. [`Store::open_checked`] runs SQLite's `quick_check` first and moves a damaged
//! database aside (never deletes it), so a dispatcher starts on a sound one and says why.

use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};

mod attempt;
mod error;
mod open;
mod rows;
mod schema;
#[cfg(test)]
mod tests;

pub use attempt::{Attempt, Cancel, Ended, Enqueuer, Outcome, State, log_name};
pub use error::Error;
pub use open::{Aside, Damage};
use rows::{Raw, ended_from_row};
use schema::MIGRATIONS;
pub use schema::{DATABASE, MAX_ENDED, SCHEMA_VERSION};

/// The queue's durable rows.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

const COLUMNS: &str = "id, lane, state, token, queued_at_ms, priority, placement, args, stage, \
                       env, state_at_ms, lane_epoch, uid, gid, groups, own_lane, failures, \
                       last_error, retry_at_ms, driver_pid, starts, cancel_at_ms, cancel_by, \
                       weight, owner";

const ENDED_COLUMNS: &str = "id, lane, args, uid, queued_at_ms, started_at_ms, ended_at_ms, \
                             outcome, status, signal, detail, log";

impl Store {
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

fn to_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}
