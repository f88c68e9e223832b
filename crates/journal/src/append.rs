//! The append: which file the journal's name is now, one `write(2)` to it, and the rotation
//! that keeps the two files under the cap.

use crate::names::{CURRENT, MODE, PREVIOUS};
use rustix::fd::OwnedFd;
use std::io;
use worklane_slotfile::{Meta, SlotDir, SlotPath};

/// The current file as this process has it open.
#[derive(Debug)]
pub(crate) struct Open {
    fd: OwnedFd,
    meta: Meta,
}

/// Why an event could not be appended (it is dropped and counted; nobody waits on it).
#[derive(Debug)]
pub(crate) enum Trouble {
    /// A name or a file operation failed.
    Io(io::Error),
    /// The write was shorter than the line (a disk filled mid-write).
    Short,
}

impl std::fmt::Display for Trouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trouble::Io(e) => write!(f, "{e}"),
            Trouble::Short => f.write_str("the line could not be written whole"),
        }
    }
}

impl From<io::Error> for Trouble {
    fn from(e: io::Error) -> Trouble {
        Trouble::Io(e)
    }
}

fn other(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// Appends `line` to the journal of `dir`: the name's file now (reopened when the name refers
/// to another inode than `open`'s, created when missing), rotated first when `line` would take
/// it past `half` (half the cap: the current and the previous file together stay under it).
///
/// A line that went to a file no name refers to any more (two rotations passed between the
/// look at the name and the write) is written again, once, to the file the name is now.
pub(crate) fn append(
    dir: &SlotDir,
    open: &mut Option<Open>,
    line: &[u8],
    half: u64,
) -> Result<(), Trouble> {
    let current = dir.file(CURRENT).map_err(other)?;
    for _ in 0..2 {
        append_once(&current, open, line, half)?;
        let gone = open
            .as_ref()
            .and_then(|o| rustix::fs::fstat(&o.fd).ok())
            .is_some_and(|stat| stat.st_nlink == 0);
        if !gone {
            return Ok(());
        }
        *open = None;
    }
    Err(io::Error::from(io::ErrorKind::NotFound).into())
}

fn append_once(
    current: &SlotPath,
    open: &mut Option<Open>,
    line: &[u8],
    half: u64,
) -> Result<(), Trouble> {
    let (mut file, mut meta) = now(current)?;
    let len = line.len() as u64;
    // (When `file` is the previous file, a rotation is under way: `rotate` finds its guard
    // busy, or the rotation done and nothing to do, and the name is looked at again.)
    if past_half(meta.size, len, half) && rotate(current, half, len) {
        (file, meta) = now(current)?;
    }
    if open.as_ref().is_none_or(|o| o.meta.id != meta.id) {
        *open = None;
        let Some((fd, opened)) = file.open_append().map_err(other)? else {
            return Err(io::Error::from(io::ErrorKind::NotFound).into());
        };
        *open = Some(Open { fd, meta: opened });
    }
    let Some(file) = open.as_ref() else {
        return Err(io::Error::from(io::ErrorKind::NotFound).into());
    };
    // One write: with O_APPEND the kernel places it at the end whoever else appends, and
    // a writer that dies in it leaves at most a fragment of this one line.
    let written = loop {
        match rustix::io::write(&file.fd, line) {
            Err(rustix::io::Errno::INTR) => {}
            other => break other,
        }
    };
    match written {
        Ok(n) if n == line.len() => Ok(()),
        Ok(_) => Err(Trouble::Short),
        Err(e) => {
            // A descriptor that fails once (the file system went away, the file was made
            // unwritable) is opened again at the next event.
            *open = None;
            Err(io::Error::from(e).into())
        }
    }
}

/// The file a line goes to now, with its inode and size: the current file, published empty
/// (mode 0660, the directory's group) when there is none, under its guard.
///
/// A rotation renames the current file away and then publishes the new one, whose first line
/// carries the totals: a writer that published an empty file in between would take the name
/// from it, and the totals would be lost (the counts of every file rotated away, PROTOCOL.md
/// 17.3). So the current file is published only under its guard, taken without waiting; when
/// another holds it and the previous file is there, a rotation is between its rename and its
/// publish, and the line goes to the file it renamed (the previous one), as the line of a
/// writer that looked just before the rotation does. With no previous file, no rotation is
/// under way (the holder publishes the first file): publishing too is harmless (`EEXIST`:
/// theirs is used).
fn now(current: &SlotPath) -> Result<(SlotPath, Meta), Trouble> {
    if let Some(meta) = current.meta().map_err(other)? {
        return Ok((current.clone(), meta));
    }
    let guard = match current.try_guard() {
        Ok(Some(guard)) => Some(guard),
        Ok(None) => {
            let previous = current.dir().file(PREVIOUS).map_err(other)?;
            if let Some(meta) = previous.meta().map_err(other)? {
                return Ok((previous, meta));
            }
            None
        }
        // A guard that cannot be taken at all (a stray file at its name): rotations go on
        // without it, and so does this.
        Err(_) => None,
    };
    // Published whole (a temp file, its mode and group set, then linked): every appender
    // opens a file that is already shared. Someone else's at the same moment is as good.
    let _ = current.publish(b"", MODE).map_err(other)?;
    drop(guard);
    let meta = current
        .meta()
        .map_err(other)?
        .ok_or_else(|| Trouble::from(io::Error::from(io::ErrorKind::NotFound)))?;
    Ok((current.clone(), meta))
}

/// Rotates the journal when it still holds `half` bytes or more: under the current file's
/// guard (taken without waiting), renames it to the previous file's name (replacing the older
/// one) and publishes a new empty current file. `false` when another process holds the guard
/// (it is rotating: this line goes to the file it finds) or the rename fails.
///
/// A guard that cannot be taken at all (a stray file at its name) does not keep the journal
/// from its cap: the rotation goes on without it, and two rotations racing then lose at
/// most the previous file's older half.
/// Whether a line of `len` bytes would take a file of `size` bytes past half the cap (`half`):
/// the file is not empty and the two add up to more than `half` (PROTOCOL.md 17.3).
fn past_half(size: u64, len: u64, half: u64) -> bool {
    size > 0 && size.saturating_add(len) > half
}

fn rotate(current: &SlotPath, half: u64, len: u64) -> bool {
    let guard = match current.try_guard() {
        Ok(Some(guard)) => Some(guard),
        Ok(None) => return false,
        Err(e) => {
            log::warn!("the journal rotates without its lock: {e}");
            None
        }
    };
    // Under the lock: a rotation since our look has made the file small again (by the same
    // rule as the look: the line no longer takes it past half the cap).
    if current
        .meta()
        .ok()
        .flatten()
        .is_none_or(|m| !past_half(m.size, len, half))
    {
        return true;
    }
    // What the file about to be dropped adds to what the current one carries: the new file's
    // first line, so that the counts of every rotated file go on (PROTOCOL.md 17.3).
    let carried = carried_totals(current);
    let rotated = current.rename(PREVIOUS).is_ok();
    if rotated {
        let _ = current.publish(&carried, MODE);
    }
    drop(guard);
    rotated
}

/// The `totals` line the file after `current` starts with: the totals `current` starts with,
/// plus the tally of every event of the previous file, which the rotation drops. Empty when it
/// cannot be made (the counts then start again from what is read).
fn carried_totals(current: &SlotPath) -> Vec<u8> {
    use crate::read::{Lines, drain, open};
    use crate::tally::Tally;
    use crate::{Entry, Event};
    let dir = current.dir();
    let mut totals = first_totals(current).unwrap_or_default();
    if let Ok(Some((fd, _))) = open(dir, PREVIOUS) {
        let mut batch = crate::Batch::default();
        let mut lines = Lines::default();
        if drain(&fd, PREVIOUS, &mut lines, &mut batch).is_ok() {
            totals.merge(&Tally::of(&batch.entries));
        }
    }
    let line = Entry {
        version: crate::VERSION,
        at: crate::clock::now(),
        pid: std::process::id(),
        dropped: 0,
        event: Event::Totals { totals },
    };
    crate::line::encode(&line).unwrap_or_default()
}

/// The totals the file at `path` starts with, if its first line is a `totals` line.
fn first_totals(path: &SlotPath) -> Option<crate::tally::Tally> {
    let (fd, _) = path.open_stream().ok()??;
    let mut head = vec![0u8; crate::MAX_LINE];
    let mut got = 0;
    while got < head.len() {
        match rustix::io::read(&fd, &mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
    let end = head[..got].iter().position(|&b| b == b'\n')?;
    match crate::line::decode(&head[..end]).entry?.event {
        crate::Event::Totals { totals } => Some(totals),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Entry, Event, VERSION};

    /// A line of exactly `len` bytes, newline included.
    fn line(len: usize) -> Vec<u8> {
        let stop = |n| {
            crate::line::encode(&Entry {
                version: VERSION,
                at: "2026-11-30T04:55:19.924Z".to_owned(),
                pid: 42,
                dropped: 0,
                event: Event::Stop {
                    by: "x".repeat(n),
                    reason: String::new(),
                },
            })
            .expect("line")
        };
        let line = stop(len - stop(0).len());
        assert_eq!(line.len(), len);
        line
    }

    const HALF: u64 = 1000;

    /// The current file holding `before` bytes (one line: an empty file takes any), and a
    /// line of `next` bytes appended: whether the journal rotated first.
    fn rotated_at(before: u64, next: u64) -> bool {
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let size = |name| std::fs::metadata(temp.path().join(name)).map(|m| m.len());
        let mut open = None;
        let first = usize::try_from(before).expect("small");
        append(&dir, &mut open, &line(first), HALF).expect("appended");
        assert_eq!(size(CURRENT).expect("current"), before);
        assert!(size(PREVIOUS).is_err(), "an empty file is never rotated");
        let next_len = usize::try_from(next).expect("small");
        append(&dir, &mut open, &line(next_len), HALF).expect("appended");
        let after = size(CURRENT).expect("current");
        match size(PREVIOUS) {
            Ok(previous) => {
                assert_eq!(previous, before, "the whole file renamed");
                // The new file: the `totals` line, then the line.
                let text = std::fs::read_to_string(temp.path().join(CURRENT)).expect("read");
                let kinds: Vec<_> = text
                    .lines()
                    .map(|l| crate::line::decode(l.as_bytes()).entry.expect("a line"))
                    .map(|e| e.event.kind())
                    .collect();
                assert_eq!(kinds, ["totals", "stop"]);
                true
            }
            Err(_) => {
                assert_eq!(after, before + next, "appended to the current file");
                false
            }
        }
    }

    /// A line that would take the current file past half the cap rotates it first, so the
    /// current file never passes half the cap (PROTOCOL.md 17.3); one that brings it to
    /// exactly half does not.
    #[test]
    fn a_line_that_would_pass_half_the_cap_rotates_first() {
        let _deadline = crate::testing::deadline();
        assert!(!rotated_at(800, 200), "exactly half the cap");
        assert!(rotated_at(800, 201), "one byte past");
        assert!(rotated_at(1000, 200), "a file at half the cap");
    }

    /// Each rotation writes, as the new file's first line, the totals the file it renames
    /// carried plus the tally of the file it drops: after many rotations the whole count of a
    /// read journal is every event ever appended, the dropped files' included
    /// (PROTOCOL.md 17.3).
    #[test]
    fn the_totals_carry_the_count_of_every_file_rotated_away() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let gone = crate::line::encode(&Entry {
            version: VERSION,
            at: "2026-11-30T04:55:19.924Z".to_owned(),
            pid: 42,
            dropped: 0,
            event: Event::HolderGone {
                slot: "agent-0.lock".to_owned(),
                slot_kind: "agent".to_owned(),
                stale_pid: Some(7),
                stale_owner: None,
                stale_since: None,
                proof: "no such process".to_owned(),
            },
        })
        .expect("a line");
        // About four lines a file, the `totals` line included.
        let half = 4 * gone.len() as u64;
        let mut open = None;
        let previous = || std::fs::metadata(temp.path().join(PREVIOUS)).ok();
        let mut rotations = 0;
        let mut last = None;
        for n in 1..=30 {
            append(&dir, &mut open, &gone, half).expect("appended");
            let now = previous().map(|m| std::os::unix::fs::MetadataExt::ino(&m));
            if now != last {
                rotations += 1;
                last = now;
            }
            let read = crate::read(&dir).expect("read");
            assert_eq!(
                crate::tally::total(&read.entries).gone,
                n,
                "every event counted after {n} appends and {rotations} rotations"
            );
        }
        assert!(rotations >= 5, "rotated again and again: {rotations}");
    }

    /// A rotation renames the current file away, then publishes the new one with the totals
    /// as its first line. A writer that finds no current file in between, while the guard is
    /// held, publishes nothing (that would take the name from the rotation, and the totals
    /// would be lost): its line goes to the file just renamed. With the guard free (a rotation
    /// killed in between), the writer publishes the current file.
    #[test]
    fn a_line_between_a_rotation_s_rename_and_its_publish_goes_to_the_file_renamed() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let current = dir.file(CURRENT).expect("name");
        let mut open = None;
        // Near half the cap, as a file a rotation renames is.
        append(&dir, &mut open, &line(950), HALF).expect("appended");
        // A rotation between its rename and its publish: the guard held, no current file.
        let guard = current.try_guard().expect("guard").expect("free");
        std::fs::rename(temp.path().join(CURRENT), temp.path().join(PREVIOUS)).expect("rename");
        for writer in [&mut open, &mut None] {
            append(&dir, writer, &line(160), HALF).expect("appended");
        }
        assert!(
            !temp.path().join(CURRENT).exists(),
            "the current file left to the rotation"
        );
        let size = |name| std::fs::metadata(temp.path().join(name)).map(|m| m.len());
        assert_eq!(
            size(PREVIOUS).expect("previous"),
            950 + 2 * 160,
            "both lines in the file renamed"
        );
        let totals = carried_totals(&current);
        assert!(!totals.is_empty());
        assert_eq!(
            current.publish(&totals, MODE).expect("publish"),
            worklane_slotfile::Publish::Published,
            "the rotation's own file"
        );
        drop(guard);
        append(&dir, &mut open, &line(150), HALF).expect("appended");
        assert_eq!(
            size(CURRENT).expect("current"),
            totals.len() as u64 + 150,
            "the totals line first, then the line"
        );
        // Killed between its rename and its publish: the guard is free, and the next writer
        // makes the current file.
        std::fs::rename(temp.path().join(CURRENT), temp.path().join(PREVIOUS)).expect("rename");
        append(&dir, &mut None, &line(150), HALF).expect("appended");
        assert_eq!(size(CURRENT).expect("made again"), 150);
    }

    #[test]
    fn trouble_says_what_it_is() {
        let _deadline = crate::testing::deadline();
        assert_eq!(
            Trouble::Short.to_string(),
            "the line could not be written whole"
        );
        let io = Trouble::from(io::Error::from(io::ErrorKind::StorageFull));
        assert_eq!(
            io.to_string(),
            io::Error::from(io::ErrorKind::StorageFull).to_string()
        );
    }

    /// A line longer than half the cap goes to an empty file whole: no rotation of nothing.
    #[test]
    fn a_long_line_goes_to_an_empty_file() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let mut open = None;
        append(&dir, &mut open, &line(300), 100).expect("appended");
        assert!(!temp.path().join(PREVIOUS).exists());
        let size = std::fs::metadata(temp.path().join(CURRENT)).expect("current");
        assert_eq!(size.len(), 300);
    }
}
