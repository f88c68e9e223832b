//! [`Journal`]: one slot directory's journal as this process writes it, shared by every
//! handle on the same directory, and the [`emit`] every library calls.

use crate::append::{Open, Trouble, append};
use crate::clock::now;
use crate::event::{Entry, Event, VERSION};
use crate::line::encode;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use worklane_slotfile::{DEFAULT_JOURNAL_MAX_BYTES, JOURNAL_BYTES_RANGE, SlotDir};

/// The journal of one slot directory, as this process appends to it. Cheap to clone; every
/// handle of one directory in a process ([`Journal::of`]) shares one descriptor, one cap and
/// one count of dropped events.
///
/// [`Journal::emit`] never fails and never waits on another process: an event that cannot be
/// appended (a full disk, a journal this user may not write, a stray file at its name) is
/// dropped and counted, and the count is written in this process's next line that goes
/// through ([`Entry::dropped`]).
#[derive(Clone)]
pub struct Journal {
    shared: Option<Arc<Shared>>,
}

struct Shared {
    dir: SlotDir,
    max_bytes: AtomicU64,
    dropped: AtomicU64,
    file: Mutex<Writer>,
}

#[derive(Default)]
struct Writer {
    open: Option<Open>,
    /// A descriptor every line goes to instead (feature `test-seams`).
    #[cfg(feature = "test-seams")]
    sink: Option<rustix::fd::OwnedFd>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.shared {
            Some(shared) => f
                .debug_struct("Journal")
                .field("dir", &shared.dir.path())
                .field("max_bytes", &shared.max_bytes.load(Ordering::Relaxed))
                .finish_non_exhaustive(),
            None => f.write_str("Journal(off)"),
        }
    }
}

/// The journals this process writes, by directory: held weakly, so a journal's descriptor
/// closes with its last handle.
static OPEN: Mutex<Vec<(PathBuf, Weak<Shared>)>> = Mutex::new(Vec::new());

impl Journal {
    /// The journal of `dir`: the one this process already writes for that directory, or a new
    /// one (at the default cap until [`Journal::set_max_bytes`] says the config's).
    #[must_use]
    pub fn of(dir: &SlotDir) -> Journal {
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|(_, weak)| weak.strong_count() > 0);
        if let Some(shared) = open
            .iter()
            .find(|(path, _)| path == dir.path())
            .and_then(|(_, weak)| weak.upgrade())
        {
            return Journal {
                shared: Some(shared),
            };
        }
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            max_bytes: AtomicU64::new(DEFAULT_JOURNAL_MAX_BYTES),
            dropped: AtomicU64::new(0),
            file: Mutex::new(Writer::default()),
        });
        open.push((dir.path().to_owned(), Arc::downgrade(&shared)));
        Journal {
            shared: Some(shared),
        }
    }

    /// A journal that writes nothing: for a harness that keeps no journal of its own events
    /// (and for measuring what the journal costs).
    #[must_use]
    pub fn off() -> Journal {
        Journal { shared: None }
    }

    /// Whether events are written.
    #[must_use]
    pub fn is_on(&self) -> bool {
        self.shared.is_some()
    }

    /// Sets the cap (the config's `journal_max_bytes`), brought within
    /// [`JOURNAL_BYTES_RANGE`]: the current and previous file together stay under it.
    pub fn set_max_bytes(&self, max_bytes: u64) {
        if let Some(shared) = &self.shared {
            let max = max_bytes.clamp(*JOURNAL_BYTES_RANGE.start(), *JOURNAL_BYTES_RANGE.end());
            shared.max_bytes.store(max, Ordering::Relaxed);
        }
    }

    /// The cap in force.
    #[must_use]
    pub fn max_bytes(&self) -> u64 {
        self.shared
            .as_ref()
            .map_or(0, |s| s.max_bytes.load(Ordering::Relaxed))
    }

    /// Events this process could not append since its last line that went through.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.shared
            .as_ref()
            .map_or(0, |s| s.dropped.load(Ordering::Relaxed))
    }

    /// Appends `event`, stamped with the time and this process's pid, as one line. Never
    /// fails and never waits on another process: see [`Journal`].
    pub fn emit(&self, event: Event) {
        let Some(shared) = &self.shared else {
            return;
        };
        let mut writer = shared.file.lock().unwrap_or_else(PoisonError::into_inner);
        let carried = shared.dropped.load(Ordering::Relaxed);
        let entry = Entry {
            version: VERSION,
            at: now(),
            pid: std::process::id(),
            dropped: carried,
            event,
        };
        let written = match encode(&entry) {
            Some(line) => write(shared, &mut writer, &line),
            None => Err(Trouble::Short),
        };
        match written {
            Ok(()) => {
                shared.dropped.fetch_sub(carried, Ordering::Relaxed);
            }
            Err(trouble) => {
                shared.dropped.fetch_add(1, Ordering::Relaxed);
                // Said once per process, loud enough to be seen (a `run` is one process: its
                // dropped count never reaches a line of its own).
                static WARNED: AtomicBool = AtomicBool::new(false);
                if WARNED.swap(true, Ordering::Relaxed) {
                    log::debug!(
                        "journal of {}: {} event dropped: {trouble}",
                        shared.dir.path().display(),
                        entry.event.kind()
                    );
                } else {
                    log::warn!(
                        "the event journal in {} cannot be appended to ({trouble}): this \
                         process's events are dropped; `worklane slots` says how to fix it",
                        shared.dir.path().display()
                    );
                }
            }
        }
    }

    /// Test seam (feature `test-seams`): every later line of this process's journal of the
    /// directory goes to `fd` instead (`/dev/full` for a disk that is full).
    #[cfg(feature = "test-seams")]
    pub fn sink(&self, fd: rustix::fd::OwnedFd) {
        if let Some(shared) = &self.shared {
            shared
                .file
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .sink = Some(fd);
        }
    }
}

fn write(shared: &Shared, writer: &mut Writer, line: &[u8]) -> Result<(), Trouble> {
    #[cfg(feature = "test-seams")]
    if let Some(sink) = &writer.sink {
        return match rustix::io::write(sink, line) {
            Ok(n) if n == line.len() => Ok(()),
            Ok(_) => Err(Trouble::Short),
            Err(e) => Err(Trouble::Io(e.into())),
        };
    }
    let half = shared.max_bytes.load(Ordering::Relaxed) / 2;
    append(&shared.dir, &mut writer.open, line, half)
}

/// Appends `event` to the journal of `dir` ([`Journal::of`] and [`Journal::emit`]): the call
/// every library makes where something happens. Never fails, never waits.
pub fn emit(dir: &SlotDir, event: Event) {
    Journal::of(dir).emit(event);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{CURRENT, PREVIOUS};
    use crate::read;

    fn kinds(dir: &SlotDir) -> Vec<&'static str> {
        read(dir)
            .expect("read")
            .entries
            .iter()
            .map(|e| e.event.kind())
            .collect()
    }

    #[test]
    fn emit_appends_to_the_directory_s_journal() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        emit(&dir, Event::Undrain);
        emit(&dir, Event::Undrain);
        assert_eq!(kinds(&dir), ["undrain", "undrain"]);
        assert_eq!(Journal::of(&dir).dropped(), 0, "nothing dropped");
    }

    #[test]
    fn a_journal_that_is_off_writes_nothing() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        assert!(Journal::of(&dir).is_on());
        let off = Journal::off();
        assert!(!off.is_on());
        off.set_max_bytes(1024 * 1024);
        off.emit(Event::Undrain);
        assert_eq!((off.max_bytes(), off.dropped()), (0, 0));
        assert_eq!(format!("{off:?}"), "Journal(off)");
        let names: Vec<_> = std::fs::read_dir(temp.path()).expect("ls").collect();
        assert!(names.is_empty(), "{names:?}");
    }

    #[test]
    fn the_cap_is_the_default_until_set_and_kept_in_range() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let journal = Journal::of(&dir);
        assert_eq!(journal.max_bytes(), DEFAULT_JOURNAL_MAX_BYTES);
        journal.set_max_bytes(100 * 1024);
        assert_eq!(journal.max_bytes(), 100 * 1024);
        assert_eq!(
            Journal::of(&dir).max_bytes(),
            100 * 1024,
            "shared by the handles"
        );
        journal.set_max_bytes(1);
        assert_eq!(journal.max_bytes(), *JOURNAL_BYTES_RANGE.start());
        journal.set_max_bytes(u64::MAX);
        assert_eq!(journal.max_bytes(), *JOURNAL_BYTES_RANGE.end());
    }

    /// Handles on the same directory share one journal, also after every handle of an
    /// earlier one was dropped (its entry in the registry is gone with it, not found first).
    #[test]
    fn a_journal_made_again_is_shared_by_its_handles() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let first = Journal::of(&dir);
        first.set_max_bytes(100 * 1024);
        drop(first);
        let again = Journal::of(&dir);
        assert_eq!(
            again.max_bytes(),
            DEFAULT_JOURNAL_MAX_BYTES,
            "a new journal: the default cap"
        );
        again.set_max_bytes(200 * 1024);
        assert_eq!(
            Journal::of(&dir).max_bytes(),
            200 * 1024,
            "the live journal, not a third one"
        );
    }

    /// The cap set is the one the journal rotates at: the current file is renamed before a
    /// line would take it past half of it, not at half the default.
    #[test]
    fn the_journal_rotates_at_half_the_cap_set() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let journal = Journal::of(&dir);
        let cap = *JOURNAL_BYTES_RANGE.start();
        journal.set_max_bytes(cap);
        let size = |name| std::fs::metadata(temp.path().join(name)).map(|m| m.len());
        let mut before = 0;
        // Bounded: a journal that grows by nothing (events dropped, or lines of no bytes)
        // would never rotate.
        for emitted in 0.. {
            if size(PREVIOUS).is_ok() {
                break;
            }
            before = size(CURRENT).unwrap_or(0);
            assert!(before <= cap, "no rotation at {before} bytes");
            assert!(
                emitted < cap,
                "{emitted} events and no rotation: {before} bytes written"
            );
            journal.emit(Event::Undrain);
        }
        let line = size(CURRENT).expect("the new current file");
        assert_eq!(
            size(PREVIOUS).expect("rotated"),
            before,
            "the file as it was"
        );
        // Rotated by the first line that would take it past half the cap (an `undrain` line
        // is under 200 bytes): the current file never passes half the cap.
        assert!(
            before <= cap / 2 && cap / 2 - before < 200,
            "{before} {line}"
        );
        assert_eq!(journal.dropped(), 0);
        assert_eq!(kinds(&dir).last(), Some(&"undrain"));
    }

    /// The `test-seams` sink: every line goes to its descriptor, none to the journal.
    #[cfg(feature = "test-seams")]
    #[test]
    fn a_sink_takes_every_line() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let elsewhere = tempfile::tempdir().expect("temp");
        let sunk = elsewhere.path().join("sink");
        let journal = Journal::of(&dir);
        journal.sink(std::fs::File::create(&sunk).expect("sink").into());
        journal.emit(Event::Undrain);
        journal.emit(Event::Undrain);
        assert_eq!(journal.dropped(), 0, "written whole");
        assert!(!temp.path().join(CURRENT).exists(), "the journal untouched");
        let text = std::fs::read_to_string(&sunk).expect("the sink");
        let kinds: Vec<_> = text
            .lines()
            .map(|l| {
                crate::line::decode(l.as_bytes())
                    .entry
                    .expect("a line")
                    .event
            })
            .collect();
        assert_eq!(kinds, [Event::Undrain, Event::Undrain]);
    }
}
