//! Following the journal as it grows: woken by inotify (Linux), across rotations, by inode.

use crate::names::{CURRENT, PREVIOUS};
use crate::read::{Batch, Lines, drain, error::Error, open, open_both};
use rustix::fd::OwnedFd;
use std::time::Duration;
use worklane_slotfile::{Meta, SlotDir};

/// How long a follower sleeps between looks where it cannot be woken (no inotify).
pub const LOOK_EVERY: Duration = Duration::from_millis(250);

/// A reader that follows the journal: [`Follow::start`] reads what is there, then each
/// [`Follow::next`] waits for new lines. It holds the current file's descriptor and knows it
/// by inode: when a rotation renames it away, the follower reads it to its end, then opens the
/// new current file from its start.
pub struct Follow {
    dir: SlotDir,
    file: Option<(OwnedFd, Meta)>,
    lines: Lines,
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
            file: None,
            lines: Lines::default(),
            #[cfg(target_os = "linux")]
            inotify: watch(dir)?,
        };
        let (previous, current) = open_both(dir)?;
        let mut batch = Batch::default();
        if let Some((fd, _)) = previous {
            let mut lines = Lines::default();
            drain(&fd, PREVIOUS, &mut lines, &mut batch)?;
            lines.finish(&mut batch);
        }
        if let Some((fd, meta)) = current {
            drain(&fd, CURRENT, &mut follow.lines, &mut batch)?;
            follow.file = Some((fd, meta));
        }
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

    /// Reads what is new: the rest of the file held, and, when the name now refers to
    /// another file (a rotation), that file from its start.
    fn look(&mut self) -> Result<Batch, Error> {
        let mut batch = Batch::default();
        if let Some((fd, _)) = &self.file {
            drain(fd, CURRENT, &mut self.lines, &mut batch)?;
        }
        let now = self
            .dir
            .file(CURRENT)
            .ok()
            .and_then(|p| p.meta().ok().flatten())
            .map(|m| m.id);
        // No file at the name: between a rotation's rename and its new file (or before the
        // first event): the one held is read on until one appears.
        if now.is_none() || now == self.file.as_ref().map(|(_, m)| m.id) {
            return Ok(batch);
        }
        if let Some((fd, _)) = self.file.take() {
            // Lines appended to it between our read and the rename.
            drain(&fd, CURRENT, &mut self.lines, &mut batch)?;
            self.lines.finish(&mut batch);
        }
        if let Some((fd, meta)) = open(&self.dir, CURRENT)? {
            drain(&fd, CURRENT, &mut self.lines, &mut batch)?;
            self.file = Some((fd, meta));
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
