//! The schema: its version and the migrations that bring a database to it.

/// The queue database's name in the dispatcher's state directory.
pub const DATABASE: &str = "queue.db";

/// The schema version this code writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 4;

/// How many ended attempts the history keeps at most (the oldest go first).
pub const MAX_ENDED: u32 = 1000;

/// The schema, by version: `MIGRATIONS[v - 1]` takes a database from version `v - 1` to `v`.
pub(super) const MIGRATIONS: &[&str] = &[
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
