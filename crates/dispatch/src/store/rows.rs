//! Rows as SQLite returns them, decoded into the model.

use super::*;

pub(super) fn ended_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Ended> {
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
pub(super) struct Raw {
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
    pub(super) fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
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
    pub(super) fn into_attempt(self, path: &Path) -> Attempt {
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
                last_error: Some(worklane_stdx::chain(&damage)),
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

    pub(super) fn parse(self, path: &Path) -> Result<Attempt, Error> {
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
