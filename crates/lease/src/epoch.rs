//! The fencing epoch of a resource, carried by a name: the empty file `<lock>.epoch.<N>`.
//!
//! Each successful acquisition or takeover advances it under the resource's guard before its
//! record is published, and writes the new value into the record. A protected effect that
//! remembers the highest epoch it has seen can refuse a holder that was since replaced.
//!
//! The number lives in the file's name, not its contents, so advancing it is one `renameat` of
//! an empty file (`<lock>.epoch.N` to `<lock>.epoch.N+1`): atomic, and with no data to write
//! back (replacing a file that holds data makes ext4 flush it, which cost more than the rest
//! of an acquisition together). A crash leaves the old name or the new, never neither. The
//! first acquisition ever publishes `<lock>.epoch.1`. Readers take the largest number present.

use std::path::PathBuf;
use worklane_slotfile::{Publish, SHARED_MODE, SlotPath, name, open, write};

/// Why the epoch of a lock could not be read or advanced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An epoch file's name is refused (a lock name too long for its markers).
    #[error("cannot name an epoch file of {lock}")]
    Name {
        /// The lock.
        lock: String,
        /// Why.
        #[source]
        source: name::Error,
    },
    /// The directory could not be listed for the lock's epoch files.
    #[error("cannot list the epoch files of {lock}")]
    List {
        /// The lock.
        lock: String,
        /// Why.
        #[source]
        source: open::Error,
    },
    /// The first epoch file could not be created.
    #[error("cannot create the first epoch file of {lock}")]
    Create {
        /// The lock.
        lock: String,
        /// Why.
        #[source]
        source: write::Error,
    },
    /// The epoch file could not be renamed to the next epoch.
    #[error("cannot rename the epoch file of {lock} to epoch {next}")]
    Rename {
        /// The lock.
        lock: String,
        /// The epoch it was to be advanced to.
        next: u64,
        /// Why.
        #[source]
        source: write::Error,
    },
}

/// Why the epoch of a lock cannot be advanced though its files are there to read: a refusal
/// of the lease layer itself, not a failing call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Stuck {
    /// The first epoch file appeared between the listing and its creation: only a writer
    /// outside the lock's guard makes one.
    #[error("an epoch file was created outside the lock's guard")]
    Stray,
    /// The epoch is already `u64::MAX`: no later holder could be told apart.
    #[error(
        "the epoch is already {current}, the largest there is, so no later holder could be told \
         apart"
    )]
    Exhausted {
        /// The epoch.
        current: u64,
    },
}

/// Why [`advance`] did not advance the epoch.
#[derive(Debug)]
pub(crate) enum Advance {
    /// A call failed.
    Failed(Error),
    /// The epoch files are there but cannot be advanced.
    Stuck {
        /// The epoch file.
        path: PathBuf,
        /// Why.
        stuck: Stuck,
    },
}

impl From<Error> for Advance {
    fn from(error: Error) -> Advance {
        Advance::Failed(error)
    }
}

/// The prefix of the epoch file names of the lock `lock`: `<lock>.epoch.`.
#[must_use]
pub fn epoch_prefix(lock: &str) -> String {
    format!("{lock}.epoch.")
}

/// The epoch carried by `name`, if it is an epoch file of `lock` (a decimal number without
/// leading zeros).
#[must_use]
pub fn parse_epoch_name(lock: &str, name: &str) -> Option<u64> {
    let digits = name.strip_prefix(lock)?.strip_prefix(".epoch.")?;
    let plain = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !(digits.len() > 1 && digits.starts_with('0'));
    plain.then(|| digits.parse().ok()).flatten()
}

/// The current epoch of `lock` (0 when it was never taken).
pub fn current(lock: &SlotPath) -> Result<u64, Error> {
    let listed = lock
        .dir()
        .list_prefixed(&epoch_prefix(lock.name()))
        .map_err(|source| Error::List {
            lock: lock.name().to_owned(),
            source,
        })?;
    Ok(largest(lock.name(), &listed).map_or(0, |(n, _)| n))
}

/// The current epoch of `lock` when a record read under its guard claims `claimed`: that value
/// when `<lock>.epoch.<claimed>` is present and `<lock>.epoch.<claimed+1>` is not (two lookups
/// instead of a listing), else the largest present, as [`current`]. Under a guard held since
/// the epoch was last advanced nobody following the protocol can have changed it, which is
/// when [`adopt`](crate::adopt()) and the dispatcher's recovery ask.
pub fn current_claimed(lock: &SlotPath, claimed: Option<u64>) -> Result<u64, Error> {
    if let Some(n) = claimed.filter(|n| *n > 0 && *n < u64::MAX) {
        let present = |n: u64| -> Result<bool, Error> {
            let file = lock
                .dir()
                .file(&format!("{}{n}", epoch_prefix(lock.name())))
                .map_err(|source| Error::Name {
                    lock: lock.name().to_owned(),
                    source,
                })?;
            Ok(file.modified_ms().is_ok_and(|m| m.is_some()))
        };
        if present(n)? && !present(n + 1)? {
            return Ok(n);
        }
    }
    current(lock)
}

fn largest<'a>(lock: &str, listed: &'a [SlotPath]) -> Option<(u64, &'a SlotPath)> {
    listed
        .iter()
        .filter_map(|p| parse_epoch_name(lock, p.name()).map(|n| (n, p)))
        .max_by_key(|(n, _)| *n)
}

/// Advances the epoch of `lock` by one and returns the new value. Must run under the guard;
/// `listed` is the directory's listing taken under it.
pub(crate) fn advance(lock: &SlotPath, listed: &[SlotPath]) -> Result<u64, Advance> {
    let name = lock.name();
    let Some((current, file)) = largest(name, listed) else {
        let first = lock
            .dir()
            .file(&format!("{}1", epoch_prefix(name)))
            .map_err(|source| Error::Name {
                lock: name.to_owned(),
                source,
            })?;
        let published = first
            .publish(b"", SHARED_MODE)
            .map_err(|source| Error::Create {
                lock: name.to_owned(),
                source,
            })?;
        return match published {
            Publish::Published => Ok(1),
            // Only a writer outside the protocol can have made it since our listing.
            Publish::AlreadyExists => Err(Advance::Stuck {
                path: first.dir().path().join(first.name()),
                stuck: Stuck::Stray,
            }),
        };
    };
    // Epochs strictly increase or acquisition fails: an epoch that cannot grow would give
    // every later holder the same fencing token.
    let Some(next) = current.checked_add(1) else {
        return Err(Advance::Stuck {
            path: file.dir().path().join(file.name()),
            stuck: Stuck::Exhausted { current },
        });
    };
    file.rename(&format!("{name}.epoch.{next}"))
        .map_err(|source| Error::Rename {
            lock: name.to_owned(),
            next,
            source,
        })?;
    // Older names can only be left by hand or by a writer outside the protocol: tidy them.
    for (_, stale) in listed
        .iter()
        .filter_map(|p| parse_epoch_name(name, p.name()).map(|n| (n, p)))
        .filter(|(n, _)| *n < current)
    {
        let _ = stale.remove();
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::{current, current_claimed, parse_epoch_name};

    /// A record's claimed epoch is taken from two lookups when its file is there and the next
    /// one is not; anything else is the largest listed (here a gap only a writer outside the
    /// protocol leaves, which tells the two ways apart).
    #[test]
    fn a_claimed_epoch_is_looked_up_and_anything_else_listed() {
        let temp = tempfile::tempdir().expect("temp");
        for n in [0, 3, 5] {
            std::fs::write(temp.path().join(format!("a.lock.epoch.{n}")), b"").expect("epoch");
        }
        let dir = worklane_slotfile::SlotDir::open(temp.path()).expect("open");
        let lock = dir.file("a.lock").expect("name");
        assert_eq!(current(&lock).expect("listed"), 5);
        for (claimed, want, why) in [
            (Some(3), 3, "present, and 4 is not: taken as claimed"),
            (Some(5), 5, "the largest, as claimed"),
            (Some(4), 5, "not present: listed"),
            (Some(0), 5, "0 is never an epoch a holder claims: listed"),
            (Some(u64::MAX), 5, "no next to look up: listed"),
            (None, 5, "nothing claimed: listed"),
        ] {
            assert_eq!(
                current_claimed(&lock, claimed).expect("current"),
                want,
                "{claimed:?}: {why}"
            );
        }
    }

    #[test]
    fn epoch_names() {
        assert_eq!(parse_epoch_name("a.lock", "a.lock.epoch.1"), Some(1));
        assert_eq!(parse_epoch_name("a.lock", "a.lock.epoch.907"), Some(907));
        assert_eq!(
            parse_epoch_name("a.lock", "a.lock.epoch.0"),
            Some(0),
            "a lone zero is a plain number, not a leading zero"
        );
        assert_eq!(
            parse_epoch_name("a.lock", "a.lock.epoch.10"),
            Some(10),
            "a zero that does not lead"
        );
        for bad in [
            "a.lock.epoch.",
            "a.lock.epoch.01",
            "a.lock.epoch.x",
            "a.lock.epoch",
            "b.lock.epoch.1",
        ] {
            assert_eq!(parse_epoch_name("a.lock", bad), None, "{bad}");
        }
    }
}
