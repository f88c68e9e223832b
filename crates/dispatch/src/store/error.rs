//! Errors of the queue database (`store::Error`).

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
            Error::Open { source, .. } | Error::Query { source, .. } => source.sqlite_error_code(),
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
