//! Following the journal as it grows: woken by inotify (Linux), across rotations, by inode.

use crate::names::{CURRENT, PREVIOUS};
use crate::read::{Batch, Lines, drain, error::Error, open, open_both};
use rustix::fd::OwnedFd;
use std::time::Duration;
use worklane_slotfile::{Meta, SlotDir};

/// How long a follower sleeps between looks where it cannot be woken (no inotify).
pub const LOOK_EVERY: Duration = Duration::from_millis(250);

/// A file the follower holds open, with what it has read of its last line.
struct Held {
    fd: OwnedFd,
    meta: Meta,
    name: &'static str,
    lines: Lines,
}

impl Held {
    fn drain(&mut self, into: &mut Batch) -> Result<(), Error> {
        drain(&self.fd, self.name, &mut self.lines, into)
    }
}

/// A reader that follows the journal: [`Follow::start`] reads what is there, then each
/// [`Follow::next`] waits for new lines.
///
/// It knows the journal's files by inode, through descriptors it holds: when a rotation
/// renames the current file away, it keeps reading that file (now the previous one: a writer
/// that looked just before the rotation appends its line there) and reads the new current
/// file from its start; the file before that is read to its end and let go. A follower that
/// falls two rotations behind (half the cap written while it did not read) reads the previous
/// file from its start; one that falls further behind misses the files rotated away meanwhile.
pub struct Follow {
    dir: SlotDir,
    previous: Option<Held>,
    current: Option<Held>,
    #[cfg(target_os = "linux")]
    inotify: Option<OwnedFd>,
}

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follow")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Follow {
    /// Starts following the journal of `dir`: returns the follower and every line there now
    /// (the previous file, then the current one). The directory is watched before anything
    /// is read, so no line appended meanwhile is missed.
    pub fn start(dir: &SlotDir) -> Result<(Follow, Batch), Error> {
        let mut follow = Follow {
            dir: dir.clone(),
            previous: None,
            current: None,
            #[cfg(target_os = "linux")]
            inotify: watch(dir)?,
        };
        let (previous, current) = open_both(dir)?;
        let held = |file: Option<(OwnedFd, Meta)>, name| {
            file.map(|(fd, meta)| Held {
                fd,
                meta,
                name,
                lines: Lines::default(),
            })
        };
        follow.previous = held(previous, PREVIOUS);
        follow.current = held(current, CURRENT);
        let batch = follow.look()?;
        Ok((follow, batch))
    }

    /// Waits for new lines and returns them: at most `timeout` when given (an empty batch
    /// then), else until there are some.
    pub fn next(&mut self, timeout: Option<Duration>) -> Result<Batch, Error> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            let batch = self.look()?;
            if !batch.entries.is_empty() || batch.skipped > 0 {
                return Ok(batch);
            }
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Ok(batch);
                    }
                    Some(left)
                }
                None => None,
            };
            self.wait(left);
        }
    }

    /// Reads what is new in the files held, and, when the name now refers to another file
    /// (a rotation), that file from its start.
    fn look(&mut self) -> Result<Batch, Error> {
        let mut batch = Batch::default();
        for held in [&mut self.previous, &mut self.current]
            .into_iter()
            .flatten()
        {
            held.drain(&mut batch)?;
        }
        let now = self
            .dir
            .file(CURRENT)
            .ok()
            .and_then(|p| p.meta().ok().flatten())
            .map(|m| m.id);
        // No file at the name: between a rotation's rename and its new file (or before the
        // first event): the files held are read on until one appears.
        let Some(now) = now else {
            return Ok(batch);
        };
        if self.current.as_ref().is_some_and(|c| c.meta.id == now) {
            return Ok(batch);
        }
        // Rotated: the file before the previous one goes (read to its end above; an
        // unfinished line in it now is a torn one), and the current one is the previous one.
        if let Some(mut gone) = self.previous.take() {
            gone.drain(&mut batch)?;
            gone.lines.finish(&mut batch);
        }
        let previous_now = self
            .dir
            .file(PREVIOUS)
            .ok()
            .and_then(|p| p.meta().ok().flatten())
            .map(|m| m.id);
        match self.current.take() {
            Some(mut held) if Some(held.meta.id) == previous_now => {
                held.name = PREVIOUS;
                self.previous = Some(held);
            }
            held => {
                // Rotated twice (or first seen after a rotation): the file held is gone, and
                // the previous one is new to this follower: read from its start.
                if let Some(mut gone) = held {
                    gone.drain(&mut batch)?;
                    gone.lines.finish(&mut batch);
                }
                if let Some((fd, meta)) = open(&self.dir, PREVIOUS)? {
                    let mut held = Held {
                        fd,
                        meta,
                        name: PREVIOUS,
                        lines: Lines::default(),
                    };
                    held.drain(&mut batch)?;
                    self.previous = Some(held);
                }
            }
        }
        if let Some((fd, meta)) = open(&self.dir, CURRENT)? {
            let mut held = Held {
                fd,
                meta,
                name: CURRENT,
                lines: Lines::default(),
            };
            held.drain(&mut batch)?;
            self.current = Some(held);
        }
        Ok(batch)
    }

    /// Sleeps until the journal's files change (or `left` passes).
    fn wait(&mut self, left: Option<Duration>) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.inotify {
            wait_inotify(fd, left);
            return;
        }
        std::thread::sleep(left.map_or(LOOK_EVERY, |l| l.min(LOOK_EVERY)));
    }
}

/// An inotify instance on `dir` for the journal's files: appended to (`IN_MODIFY`), created,
/// renamed to or from.
#[cfg(target_os = "linux")]
fn watch(dir: &SlotDir) -> Result<Option<OwnedFd>, Error> {
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
    let failed = |e: rustix::io::Errno| Error::Watch {
        dir: dir.path().to_owned(),
        source: e.into(),
    };
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).map_err(failed)?;
    let flags = WatchFlags::MODIFY
        | WatchFlags::CREATE
        | WatchFlags::MOVED_TO
        | WatchFlags::MOVED_FROM
        | WatchFlags::ONLYDIR;
    inotify::add_watch(&fd, dir.path(), flags).map_err(failed)?;
    Ok(Some(fd))
}

/// Waits until an event names a journal file (or the kernel dropped events), or `left` passes.
#[cfg(target_os = "linux")]
fn wait_inotify(fd: &OwnedFd, left: Option<Duration>) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let deadline = left.map(|l| std::time::Instant::now() + l);
    loop {
        let spec = deadline.map(|d| {
            let l = d.saturating_duration_since(std::time::Instant::now());
            Timespec {
                tv_sec: i64::try_from(l.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(l.subsec_nanos()),
            }
        });
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut fds, spec.as_ref()) {
            Ok(0) => return,
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => {
                std::thread::sleep(LOOK_EVERY);
                return;
            }
        }
        if journal_changed(fd) {
            return;
        }
    }
}

/// Reads every queued event: whether one names a journal file or the queue overflowed.
#[cfg(target_os = "linux")]
fn journal_changed(fd: &OwnedFd) -> bool {
    use rustix::fs::inotify::{ReadFlags, Reader};
    use std::mem::MaybeUninit;
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    let mut reader = Reader::new(fd, &mut buf);
    let mut changed = false;
    loop {
        match reader.next() {
            Ok(event) => {
                let name = event.file_name().and_then(|n| n.to_str().ok());
                if event.events().contains(ReadFlags::QUEUE_OVERFLOW)
                    || matches!(name, Some(CURRENT | PREVIOUS))
                {
                    changed = true;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return changed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{BOUND, within};
    use crate::{Event, Journal};
    use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
    use std::time::Instant;

    /// `follow` waiting on another thread: its wake said on the receiver, the follower given
    /// back by the thread.
    fn waiting(mut follow: Follow) -> (Receiver<()>, std::thread::JoinHandle<Follow>) {
        let (woken, rx) = channel();
        let waiter = std::thread::spawn(move || {
            follow.wait(None);
            let _ = woken.send(());
            follow
        });
        (rx, waiter)
    }

    fn kinds(batch: &Batch) -> Vec<&'static str> {
        batch.entries.iter().map(|e| e.event.kind()).collect()
    }

    fn stop(by: &str) -> Event {
        Event::Stop {
            by: by.to_owned(),
            reason: String::new(),
        }
    }

    fn stopped_by(batch: &Batch) -> Vec<String> {
        batch
            .entries
            .iter()
            .map(|e| match &e.event {
                Event::Stop { by, .. } => by.clone(),
                other => panic!("only stops were written: {other:?}"),
            })
            .collect()
    }

    /// A journal file's name made (a link: created and nothing written), given to another
    /// file, or taken from one (a rotation's rename, or the first half of one) wakes a
    /// waiting follower.
    #[test]
    fn a_waiting_follower_is_woken_by_a_journal_file_named_or_renamed() {
        let _deadline = crate::testing::deadline();
        type Change = fn(&std::path::Path);
        let changes: [(&str, Change); 3] = [
            ("linked", |p| {
                std::fs::hard_link(p.join("other"), p.join(CURRENT)).expect("link");
            }),
            ("renamed to", |p| {
                std::fs::rename(p.join("other"), p.join(PREVIOUS)).expect("rename");
            }),
            ("renamed from", |p| {
                std::fs::rename(p.join(CURRENT), p.join("elsewhere")).expect("rename");
            }),
        ];
        for (what, change) in changes {
            let temp = tempfile::tempdir().expect("temp");
            let dir = SlotDir::open(temp.path()).expect("open");
            std::fs::write(temp.path().join("other"), b"").expect("other");
            if what == "renamed from" {
                Journal::of(&dir).emit(Event::Undrain);
            }
            let (follow, _) = Follow::start(&dir).expect("follow");
            let (rx, waiter) = waiting(follow);
            change(temp.path());
            rx.recv_timeout(BOUND)
                .unwrap_or_else(|e| panic!("woken by a journal file {what}: {e}"));
            waiter.join().expect("the waiter");
        }
    }

    /// A follower with nothing new to read sleeps until a journal file changes: a write to
    /// another file of the directory does not wake it (nor would a look every
    /// [`LOOK_EVERY`]), an append does.
    #[test]
    fn a_waiting_follower_is_woken_by_an_append_and_by_nothing_else() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let journal = Journal::of(&dir);
        journal.emit(Event::Undrain);
        let (follow, first) = Follow::start(&dir).expect("follow");
        assert_eq!(first.entries.len(), 1, "what is there");
        let (rx, waiter) = waiting(follow);
        // Queued for the follower whether it waits already or not.
        std::fs::write(temp.path().join("agent-0.lock"), b"another file").expect("write");
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(1)),
            Err(RecvTimeoutError::Timeout),
            "woken by something other than an append"
        );
        journal.emit(stop("a"));
        rx.recv_timeout(BOUND).expect("woken by the append");
        let mut follow = waiter.join().expect("the waiter");
        let next = follow.next(Some(Duration::ZERO)).expect("read");
        assert_eq!(kinds(&next), ["stop"]);
    }

    /// With nothing new, `next` waits out its timeout and then returns an empty batch, and
    /// `wait` sleeps its time: neither returns early (a caller following on a timeout would
    /// turn that into a busy loop, or take the empty batch for the timeout passed).
    #[test]
    fn with_nothing_new_a_follower_waits_out_its_timeout() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        Journal::of(&dir).emit(Event::Undrain);
        let (mut follow, _) = Follow::start(&dir).expect("follow");
        let timeout = Duration::from_millis(150);
        let start = Instant::now();
        let batch = follow.next(Some(timeout)).expect("read");
        let waited = start.elapsed();
        assert_eq!(batch, Batch::default(), "nothing new");
        assert!(waited >= timeout, "next returned after {waited:?}");
        let start = Instant::now();
        follow.wait(Some(timeout));
        let waited = start.elapsed();
        assert!(waited >= timeout, "wait returned after {waited:?}");
    }

    /// `next(None)` waits as long as it takes, for lines: it returns the line appended while
    /// it waits, not an empty batch (bounded here by running it on a thread of its own).
    #[test]
    fn next_without_a_timeout_returns_the_line_appended_meanwhile() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let (mut follow, first) = Follow::start(&dir).expect("follow");
        assert_eq!(first, Batch::default(), "no journal yet");
        let (read, got) = channel();
        std::thread::spawn(move || {
            let _ = read.send(follow.next(None).map(|batch| kinds(&batch)));
        });
        Journal::of(&dir).emit(Event::Undrain);
        let kinds = got
            .recv_timeout(BOUND)
            .expect("next(None) returned")
            .expect("read");
        assert_eq!(kinds, ["undrain"]);
    }

    /// New lines are returned as soon as they are there, not at the timeout: a line appended
    /// before `next` is called, and one appended while it waits.
    #[test]
    fn next_returns_new_lines_at_once() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let journal = Journal::of(&dir);
        let (follow, _) = Follow::start(&dir).expect("follow");
        journal.emit(stop("before"));
        let (mut follow, before) = within("next with a line there", move || {
            let mut follow = follow;
            let batch = follow.next(Some(Duration::from_secs(3600))).expect("read");
            (follow, batch)
        });
        assert_eq!(stopped_by(&before), ["before"]);
        let (read, got) = channel();
        std::thread::spawn(move || {
            let _ = read.send(follow.next(Some(Duration::from_secs(3600))));
        });
        journal.emit(stop("while"));
        let meanwhile = got
            .recv_timeout(BOUND)
            .expect("next returned")
            .expect("read");
        assert_eq!(stopped_by(&meanwhile), ["while"]);
    }

    /// A torn piece alone (what a writer killed mid-line leaves) is news: `next` returns it,
    /// counted, at once, not an empty batch at its timeout.
    #[test]
    fn a_torn_piece_alone_is_returned_at_once() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        Journal::of(&dir).emit(Event::Undrain);
        let (mut follow, _) = Follow::start(&dir).expect("follow");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(temp.path().join(CURRENT))
            .expect("the journal");
        std::io::Write::write_all(&mut file, b"{\"version\":1,\"at\":\"2026\n").expect("torn");
        let start = Instant::now();
        let batch = follow.next(Some(BOUND)).expect("read");
        assert_eq!(
            (batch.entries.len(), batch.skipped),
            (0, 1),
            "after {:?}",
            start.elapsed()
        );
    }

    /// Two rotations while the follower did not look: the file it held is gone (read to its
    /// end), the previous file is one it never saw (read from its start), then the current
    /// one: every line, in order.
    #[test]
    fn a_follower_two_rotations_behind_reads_the_file_it_never_saw() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let journal = Journal::of(&dir);
        let rotate = || {
            std::fs::rename(temp.path().join(CURRENT), temp.path().join(PREVIOUS)).expect("rotate");
        };
        journal.emit(stop("first file"));
        let (mut follow, first) = Follow::start(&dir).expect("follow");
        assert_eq!(stopped_by(&first), ["first file"]);
        journal.emit(stop("first file, later"));
        rotate();
        journal.emit(stop("second file"));
        rotate();
        journal.emit(stop("third file"));
        let batch = follow.next(Some(BOUND)).expect("read");
        assert_eq!(
            stopped_by(&batch),
            ["first file, later", "second file", "third file"]
        );
        assert_eq!(batch.skipped, 0);
        // One rotation: the file held is the previous one now, read on.
        let mut previous = std::fs::OpenOptions::new()
            .append(true)
            .open(temp.path().join(CURRENT))
            .expect("the journal");
        rotate();
        let line = crate::line::encode(&crate::Entry {
            version: crate::VERSION,
            at: crate::clock::now(),
            pid: 1,
            dropped: 0,
            event: stop("third file, after its rotation"),
        })
        .expect("a line");
        std::io::Write::write_all(&mut previous, &line).expect("a late line");
        journal.emit(stop("fourth file"));
        let batch = follow.next(Some(BOUND)).expect("read");
        assert_eq!(
            stopped_by(&batch),
            ["third file, after its rotation", "fourth file"]
        );
    }

    #[test]
    fn a_follower_shows_its_directory() {
        let _deadline = crate::testing::deadline();
        let temp = tempfile::tempdir().expect("temp");
        let dir = SlotDir::open(temp.path()).expect("open");
        let (follow, _) = Follow::start(&dir).expect("follow");
        let shown = format!("{follow:?}");
        assert!(
            shown.starts_with("Follow {") && shown.contains(&format!("{:?}", dir.path())),
            "{shown}"
        );
    }
}
