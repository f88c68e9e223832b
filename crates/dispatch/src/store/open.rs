//! Opening the queue database: created, migrated, checked, a damaged one moved aside, and in
//! the dispatcher's private state directory judged file by file first.

use super::Error;
use super::{DATABASE, MIGRATIONS, SCHEMA_VERSION, Store};
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use worklane_slotfile::PrivateDir;

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
