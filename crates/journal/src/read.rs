//! Reading the journal: its two files in order, lines split as bytes come, torn lines skipped
//! and counted.

use crate::event::Entry;
use crate::line::decode;
use crate::names::{CURRENT, PREVIOUS};
use rustix::fd::OwnedFd;
use worklane_slotfile::{Meta, SlotDir};

/// The longest unfinished line kept while waiting for its end: a stray writer that never ends
/// its line cannot make a reader hold more.
const MAX_PENDING: usize = 64 * 1024;

/// Errors of reading the journal.
pub mod error {
    /// Why the journal could not be read.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// A journal file's name was refused.
        #[error("cannot name the journal file {name}")]
        Name {
            /// The file's name.
            name: &'static str,
            /// Why.
            #[source]
            source: worklane_slotfile::name::Error,
        },
        /// A journal file could not be opened (a symbolic link, a directory or a FIFO at its
        /// name, no permission).
        #[error("cannot open the journal file {name}")]
        Open {
            /// The file's name.
            name: &'static str,
            /// Why.
            #[source]
            source: worklane_slotfile::read::Error,
        },
        /// A journal file could not be read.
        #[error("cannot read the journal file {name}")]
        Read {
            /// The file's name.
            name: &'static str,
            /// The system error.
            #[source]
            source: std::io::Error,
        },
        /// The directory could not be watched for new lines.
        #[error("cannot watch {} for new journal lines", dir.display())]
        Watch {
            /// The slot directory.
            dir: std::path::PathBuf,
            /// The system error.
            #[source]
            source: std::io::Error,
        },
    }
}

use error::Error;

/// Lines read: the entries in file order, and how many torn or unreadable lines (or pieces of
/// lines) were skipped, and how many whole lines with a field of the wrong type.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Batch {
    /// The entries.
    pub entries: Vec<Entry>,
    /// Torn or unreadable pieces skipped.
    pub skipped: u64,
    /// Whole lines (JSON objects that begin as a line must) skipped because a field of a
    /// known kind has the wrong type: another writer's mistake, not a torn write.
    pub mistyped: u64,
}

impl Batch {
    /// Adds `other`'s entries and skips after this one's.
    pub fn extend(&mut self, other: Batch) {
        self.entries.extend(other.entries);
        self.skipped += other.skipped;
        self.mistyped += other.mistyped;
    }
}

/// Splits bytes into lines as they come, keeping an unfinished last line for the bytes after
/// it.
#[derive(Debug, Default)]
pub struct Lines {
    pending: Vec<u8>,
}

impl Lines {
    /// Reads the lines `bytes` completes into `into`, keeping what follows the last newline.
    pub fn push(&mut self, bytes: &[u8], into: &mut Batch) {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let line: &[u8] = if self.pending.is_empty() {
                &rest[..end]
            } else {
                self.pending.extend_from_slice(&rest[..end]);
                &self.pending
            };
            let decoded = decode(line);
            into.entries.extend(decoded.entry);
            into.skipped += decoded.torn;
            into.mistyped += decoded.mistyped;
            self.pending.clear();
            rest = &rest[end + 1..];
        }
        self.pending.extend_from_slice(rest);
        if self.pending.len() > MAX_PENDING {
            self.pending.clear();
            into.skipped += 1;
        }
    }

    /// Ends the stream: an unfinished last line is a writer's torn line (or one being written
    /// this instant, which a reader cannot tell apart): it is counted as skipped.
    pub fn finish(&mut self, into: &mut Batch) {
        if !self.pending.is_empty() {
            self.pending.clear();
            into.skipped += 1;
        }
    }
}

/// Reads from `fd` to its end into `lines`.
pub(crate) fn drain(
    fd: &OwnedFd,
    name: &'static str,
    lines: &mut Lines,
    into: &mut Batch,
) -> Result<(), Error> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => lines.push(&buf[..n], into),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(Error::Read {
                    name,
                    source: e.into(),
                });
            }
        }
    }
}

/// A journal file opened for reading, with what it was when opened; `None` when there is none.
pub(crate) type Opened = Option<(OwnedFd, Meta)>;

/// Opens the journal file `name` of `dir` for reading.
pub(crate) fn open(dir: &SlotDir, name: &'static str) -> Result<Opened, Error> {
    dir.file(name)
        .map_err(|source| Error::Name { name, source })?
        .open_stream()
        .map_err(|source| Error::Open { name, source })
}

/// The journal's two files, opened together: the previous file is opened first and checked
/// again after the current one is, so that a rotation between the two opens (which would skip
/// a whole file) is seen and the pair opened again.
pub(crate) fn open_both(dir: &SlotDir) -> Result<(Opened, Opened), Error> {
    let mut tries = 0;
    loop {
        let previous = open(dir, PREVIOUS)?;
        #[cfg(test)]
        tests::BETWEEN_OPENS.with_borrow_mut(|hook| {
            if let Some(hook) = hook {
                hook();
            }
        });
        let current = open(dir, CURRENT)?;
        let now = dir
            .file(PREVIOUS)
            .map_err(|source| Error::Name {
                name: PREVIOUS,
                source,
            })?
            .meta()
            .ok()
            .flatten()
            .map(|m| m.id);
        tries += 1;
        if now == previous.as_ref().map(|(_, m)| m.id) || tries >= 8 {
            return Ok((previous, current));
        }
    }
}

/// Reads the whole journal of `dir`: the previous file, then the current one. A missing file
/// is an empty one. An unfinished line at the end of either file is counted as skipped.
pub fn read(dir: &SlotDir) -> Result<Batch, Error> {
    let (previous, current) = open_both(dir)?;
    let mut batch = Batch::default();
    for (file, name) in [(previous, PREVIOUS), (current, CURRENT)] {
        if let Some((fd, _)) = file {
            let mut lines = Lines::default();
            drain(&fd, name, &mut lines, &mut batch)?;
            lines.finish(&mut batch);
        }
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, VERSION};
    use crate::line::encode;

    fn entry(pid: u32) -> Entry {
        Entry {
            version: VERSION,
            at: "2026-11-30T04:55:19.924Z".to_owned(),
            pid,
            dropped: 0,
            event: Event::Undrain,
        }
    }

    fn line(pid: u32) -> Vec<u8> {
        encode(&entry(pid)).expect("line")
    }

    thread_local! {
        /// Test seam: what `open_both` does between its two opens (a rotation at the worst
        /// moment), on this thread.
        pub(super) static BETWEEN_OPENS: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// Reads the journal of `dir` while `rotations` rotations happen, each between the two
    /// opens of one try; returns what was read and how many tries were made.
    fn read_rotated_between_opens(dir: &SlotDir, rotations: u32) -> (Vec<String>, u32) {
        let tries = std::rc::Rc::new(std::cell::Cell::new(0));
        let counted = tries.clone();
        let (journal, path) = (crate::Journal::of(dir), dir.path().to_owned());
        BETWEEN_OPENS.set(Some(Box::new(move || {
            counted.set(counted.get() + 1);
            if counted.get() <= rotations {
                std::fs::rename(path.join(CURRENT), path.join(PREVIOUS)).expect("rotate");
                journal.emit(Event::Stop {
                    by: format!("rotation {}", counted.get()),
                    reason: String::new(),
                });
            }
        })));
        let batch = read(dir);
        BETWEEN_OPENS.set(None);
        let by = batch
            .expect("read")
            .entries
            .into_iter()
            .map(|e| match e.event {
                Event::Stop { by, .. } => by,
                other => panic!("{other:?}"),
            })
            .collect();
        (by, tries.get())
    }

    fn stop(dir: &SlotDir, by: &str) {
        crate::Journal::of(dir).emit(Event::Stop {
            by: by.to_owned(),
            reason: String::new(),
        });
    }

    /// A rotation between the opens of the previous and the current file would skip the file
    /// renamed: it is seen, and the pair opened again.
    #[test]
    fn a_rotation_between_the_two_opens_is_seen_and_both_opened_again() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        stop(&dir, "a");
        std::fs::rename(temp.path().join(CURRENT), temp.path().join(PREVIOUS)).expect("rotate");
        stop(&dir, "b");
        assert_eq!(
            read_rotated_between_opens(&dir, 0),
            (vec!["a".into(), "b".into()], 1)
        );
        // `b` renamed over `a` after `a` was opened: `a` and `rotation 1` would skip `b`.
        assert_eq!(
            read_rotated_between_opens(&dir, 1),
            (vec!["b".into(), "rotation 1".into()], 2)
        );
    }

    /// Rotations without end between the opens: a reader gives up after eight tries, with
    /// what it opened last, rather than wait for ever.
    #[test]
    fn a_reader_tries_eight_times_under_rotations_without_end() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        stop(&dir, "a");
        let (read, tries) = read_rotated_between_opens(&dir, 20);
        assert_eq!(tries, 8);
        // The last pair opened: `rotation 7` came and went between them.
        assert_eq!(read, ["rotation 6", "rotation 8"]);
    }

    #[test]
    fn batches_add_up() {
        let _deadline = crate::testing::deadline();
        let mut batch = Batch {
            entries: vec![entry(1)],
            skipped: 2,
            mistyped: 1,
        };
        batch.extend(Batch {
            entries: vec![entry(2), entry(3)],
            skipped: 3,
            mistyped: 4,
        });
        let pids: Vec<u32> = batch.entries.iter().map(|e| e.pid).collect();
        assert_eq!((pids, batch.skipped, batch.mistyped), (vec![1, 2, 3], 5, 5));
    }

    #[test]
    fn lines_split_across_chunks_read_whole() {
        let _deadline = crate::testing::deadline();
        let mut all = line(1);
        all.extend(line(2));
        all.extend(line(3));
        for cut in 0..all.len() {
            let mut lines = Lines::default();
            let mut batch = Batch::default();
            lines.push(&all[..cut], &mut batch);
            lines.push(&all[cut..], &mut batch);
            lines.finish(&mut batch);
            let pids: Vec<u32> = batch.entries.iter().map(|e| e.pid).collect();
            assert_eq!((pids, batch.skipped), (vec![1, 2, 3], 0), "cut at {cut}");
        }
    }

    #[test]
    fn a_torn_line_is_counted_once_and_the_next_kept() {
        let _deadline = crate::testing::deadline();
        let whole = line(2);
        let mut bytes = line(1)[..30].to_vec();
        bytes.extend(&whole);
        bytes.extend(&line(3)[..10]);
        let mut lines = Lines::default();
        let mut batch = Batch::default();
        lines.push(&bytes, &mut batch);
        assert_eq!(batch.entries.len(), 1);
        assert_eq!(batch.skipped, 1, "the fragment before the second line");
        lines.finish(&mut batch);
        assert_eq!(batch.skipped, 2, "and the unfinished end");
    }

    /// An unfinished line is kept for its end up to [`MAX_PENDING`] bytes: a line of
    /// [`MAX_LINE`](crate::MAX_LINE) bytes that comes in pieces is read whole, and garbage of
    /// exactly `MAX_PENDING` bytes is one torn piece once its newline comes.
    #[test]
    fn an_unfinished_line_is_kept_up_to_max_pending_bytes() {
        let _deadline = crate::testing::deadline();
        let long = encode(&Entry {
            event: Event::Stop {
                by: "x".repeat(3900),
                reason: String::new(),
            },
            ..entry(5)
        })
        .expect("a line");
        assert!(long.len() > 3900 && long.len() <= crate::MAX_LINE);
        let mut lines = Lines::default();
        let mut batch = Batch::default();
        for piece in long.chunks(1000) {
            lines.push(piece, &mut batch);
        }
        let pids: Vec<u32> = batch.entries.iter().map(|e| e.pid).collect();
        assert_eq!((pids, batch.skipped), (vec![5], 0), "read whole");
        let mut lines = Lines::default();
        let mut batch = Batch::default();
        lines.push(&vec![b'x'; MAX_PENDING], &mut batch);
        assert_eq!(batch.skipped, 0, "kept for its end");
        lines.push(b"\n", &mut batch);
        assert_eq!(batch.skipped, 1, "one torn piece");
    }

    /// A whole line with a field of the wrong type is counted as mistyped, each one.
    #[test]
    fn mistyped_lines_are_counted_as_they_come() {
        let _deadline = crate::testing::deadline();
        let wrong = br#"{"version":1,"at":"2026-11-30T04:55:19.924Z","pid":7,"dropped":0,"kind":"slot-waiting","slot_kind":"agent","owner":"x","position":"first","in_line":2,"why":""}"#;
        let mut bytes = wrong.to_vec();
        bytes.push(b'\n');
        bytes.extend(line(1));
        bytes.extend_from_slice(wrong);
        bytes.push(b'\n');
        let mut lines = Lines::default();
        let mut batch = Batch::default();
        lines.push(&bytes, &mut batch);
        let pids: Vec<u32> = batch.entries.iter().map(|e| e.pid).collect();
        assert_eq!((pids, batch.skipped, batch.mistyped), (vec![1], 0, 2));
    }

    #[test]
    fn endless_garbage_is_not_kept_for_ever() {
        let _deadline = crate::testing::deadline();
        let mut lines = Lines::default();
        let mut batch = Batch::default();
        lines.push(&vec![b'x'; MAX_PENDING + 1], &mut batch);
        assert_eq!(batch.skipped, 1);
        lines.push(&line(4), &mut batch);
        assert_eq!(batch.entries.len(), 1);
    }
}
