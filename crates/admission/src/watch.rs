//! Waking a waiter as soon as the slot directory changes in a way that may let it on: a
//! record removed (a slot released, a place in line left), STOP or the config changed. On
//! Linux through inotify; where inotify is missing or refused, and on other platforms, the
//! wait is a plain sleep (the polling fallback: macOS's kqueue would need `unsafe` through
//! rustix, which this crate does not use). A waiter always looks again after its
//! fallback interval too: a SIGKILLed holder or waiter removes no file, and only its freed
//! guard tells.

use std::time::Duration;
use worklane_slotfile::SlotDir;

/// The inotify instances of one pool, kept between takes: closing an instance that has
/// watched makes the kernel wait for a grace period (about 8 to 16 ms here), which a waiter
/// would otherwise pay between the release it was woken by and its command's start. A watch
/// only removes its mark when done (microseconds); the instance is closed with the pool.
#[derive(Default)]
pub struct Watches {
    #[cfg(target_os = "linux")]
    idle: std::sync::Mutex<Vec<rustix::fd::OwnedFd>>,
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watches").finish_non_exhaustive()
    }
}

impl Watches {
    /// Watches `dir` (best effort: without inotify, [`Watch::wait`] only sleeps).
    pub fn watch(&self, dir: &SlotDir) -> Watch<'_> {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
            let reused = self
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop();
            let fd =
                reused.or_else(|| inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok());
            let flags = WatchFlags::DELETE
                | WatchFlags::MOVED_FROM
                | WatchFlags::MOVED_TO
                | WatchFlags::CREATE
                | WatchFlags::ONLYDIR;
            let watched = fd.and_then(|fd| match inotify::add_watch(&fd, dir.path(), flags) {
                Ok(wd) => Some((fd, wd)),
                Err(_) => {
                    self.keep(fd);
                    None
                }
            });
            Watch {
                watched,
                home: self,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = dir;
            Watch { home: self }
        }
    }

    #[cfg(target_os = "linux")]
    fn keep(&self, fd: rustix::fd::OwnedFd) {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(fd);
    }
}

/// A watch on one slot directory, for one take; dropping it removes its mark.
pub struct Watch<'a> {
    #[cfg(target_os = "linux")]
    watched: Option<(rustix::fd::OwnedFd, i32)>,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    home: &'a Watches,
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some((fd, wd)) = self.watched.take() {
            let _ = rustix::fs::inotify::remove_watch(&fd, wd);
            self.home.keep(fd);
        }
    }
}

impl Watch<'_> {
    /// Whether changes wake it (else it only sleeps).
    #[cfg(test)]
    pub(crate) fn is_watching(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.watched.is_some();
        #[cfg(not(target_os = "linux"))]
        return false;
    }

    /// The descriptor that becomes readable when a change is seen, for a caller that waits on
    /// other descriptors too (the dispatcher's `poll`); `None` without inotify.
    pub fn fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        #[cfg(target_os = "linux")]
        return self
            .watched
            .as_ref()
            .map(|(fd, _)| rustix::fd::AsFd::as_fd(fd));
        #[cfg(not(target_os = "linux"))]
        return None;
    }

    /// Reads every change seen so far without waiting: `true` if one was wanted.
    pub fn drain(&mut self, wanted: &dyn Fn(&str) -> bool) -> bool {
        #[cfg(target_os = "linux")]
        if let Some((fd, _)) = &self.watched {
            return read_events(fd, wanted);
        }
        let _ = wanted;
        false
    }

    /// Waits at most `timeout`, returning early when a file whose name `wanted` accepts is
    /// created, removed or renamed in the directory (or the kernel dropped events: then
    /// anything may have happened). `true` when such a change ended the wait. Changes from
    /// before this watch (a reused instance's leftovers) may end a wait early: the caller
    /// looks again, no harm done.
    pub fn wait(&mut self, timeout: Duration, wanted: &dyn Fn(&str) -> bool) -> bool {
        #[cfg(target_os = "linux")]
        if let Some((fd, _)) = &self.watched {
            return wait_inotify(fd, timeout, wanted);
        }
        let _ = wanted;
        std::thread::sleep(timeout);
        false
    }
}

#[cfg(target_os = "linux")]
fn wait_inotify(
    fd: &rustix::fd::OwnedFd,
    timeout: Duration,
    wanted: &dyn Fn(&str) -> bool,
) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use std::time::Instant;
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        let spec = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        match poll(&mut fds, Some(&spec)) {
            Ok(0) => return false,
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            // The watch is broken: sleep out the rest instead of spinning.
            Err(_) => {
                std::thread::sleep(left);
                return false;
            }
        }
        if read_events(fd, wanted) {
            return true;
        }
    }
}

/// Reads the events queued on `fd` (nonblocking) until none is left: `true` if one names a
/// file `wanted` accepts, or the kernel dropped some.
#[cfg(target_os = "linux")]
fn read_events(fd: &rustix::fd::OwnedFd, wanted: &dyn Fn(&str) -> bool) -> bool {
    use rustix::fs::inotify::{ReadFlags, Reader};
    use std::mem::MaybeUninit;
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    let mut reader = Reader::new(fd, &mut buf);
    let mut woken = false;
    loop {
        match reader.next() {
            Ok(event) => {
                if event.events().contains(ReadFlags::QUEUE_OVERFLOW)
                    || event
                        .file_name()
                        .and_then(|n| n.to_str().ok())
                        .is_some_and(wanted)
                {
                    woken = true;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            // Drained (AGAIN), or broken: either way, stop reading.
            Err(_) => return woken,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use worklane_slotfile::{Environment, RECORD_MODE};

    /// How long a wait is given for a change already made or about to be: far more than it
    /// takes, and far less than the 23 s cargo-mutants gives the crate's tests, so a mutant
    /// that misses the change fails the test rather than timing out.
    const BOUND: Duration = Duration::from_secs(5);

    fn slot_dir(temp: &tempfile::TempDir) -> SlotDir {
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
        worklane_slotfile::SlotDir::resolve_in(&env)
            .expect("resolve")
            .dir
    }

    /// Runs `body` on a thread of its own, joined within twice the bound: a wait or a read
    /// that blocks inside the watch (one that never returns) fails the test instead of
    /// hanging it.
    fn bounded(body: fn()) {
        let (done, ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(std::panic::catch_unwind(body));
        });
        match ended.recv_timeout(BOUND * 2) {
            Ok(Ok(())) => {}
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => panic!("the watch's waits did not end within {:?}", BOUND * 2),
        }
    }

    #[test]
    fn a_wanted_change_wakes_it_and_others_do_not() {
        bounded(wakes_on_wanted_changes_only);
    }

    fn wakes_on_wanted_changes_only() {
        let temp = tempfile::tempdir().expect("temp");
        let dir = slot_dir(&temp);
        let watches = Watches::default();
        let mut watch = watches.watch(&dir);
        assert!(watch.is_watching(), "inotify is there on Linux");
        let fd = watch.fd().expect("a descriptor");
        assert!(
            rustix::fs::fcntl_getfl(fd)
                .expect("its flags")
                .contains(rustix::fs::OFlags::NONBLOCK),
            "read without blocking: a read past the last event returns at once"
        );
        assert!(
            rustix::io::fcntl_getfd(fd)
                .expect("its descriptor flags")
                .contains(rustix::io::FdFlags::CLOEXEC),
            "closed on exec: no command a take starts inherits it"
        );
        let file = dir.file("agent-0.lock").expect("name");
        file.replace(b"{}", RECORD_MODE).expect("write");
        let other = dir.file("slots.lock").expect("name");
        other.replace(b"{}", RECORD_MODE).expect("write");
        // Leftover events of the writes above: drained by a wait that wants nothing.
        assert!(
            !watch.wait(Duration::from_millis(20), &|_| false),
            "nothing wanted"
        );
        let started = Instant::now();
        let remover = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.remove().expect("remove slots.lock");
            std::thread::sleep(Duration::from_millis(50));
            file.remove().expect("remove agent-0.lock");
        });
        let woken = watch.wait(BOUND, &|name| name == "agent-0.lock");
        let waited = started.elapsed();
        assert!(woken, "a wanted change ended the wait");
        remover.join().expect("remover");
        assert!(
            waited >= Duration::from_millis(100),
            "slots.lock's removal did not wake it: {waited:?}"
        );
        assert!(waited < BOUND, "agent-0.lock's removal woke it: {waited:?}");
        // A file replaced whole (renamed over its name) and one published (linked at its
        // name) wake it too; the changes are already queued, so each wait ends at once.
        let config = dir.file("config.json").expect("name");
        config.replace(b"{}", RECORD_MODE).expect("replace");
        assert!(
            watch.wait(BOUND, &|name| name == "config.json"),
            "a rename onto a wanted name"
        );
        let stop = dir.file("STOP").expect("name");
        assert_eq!(
            stop.publish(b"{}", RECORD_MODE).expect("publish"),
            worklane_slotfile::Publish::Published
        );
        assert!(
            watch.wait(BOUND, &|name| name == "STOP"),
            "a link at a wanted name"
        );
        stop.rename("STOP.old").expect("rename away");
        assert!(
            watch.drain(&|name| name == "STOP"),
            "a rename away from a wanted name, read without waiting"
        );
        assert!(!watch.drain(&|_| true), "nothing left to read");
        assert!(format!("{watches:?}").starts_with("Watches"));
    }

    #[test]
    fn a_watch_done_leaves_its_instance_to_the_next() {
        bounded(leaves_its_instance_to_the_next);
    }

    fn leaves_its_instance_to_the_next() {
        let temp = tempfile::tempdir().expect("temp");
        let dir = slot_dir(&temp);
        let watches = Watches::default();
        let first = watches.watch(&dir);
        let fd = first.fd().expect("a descriptor");
        assert!(
            rustix::fs::fcntl_getfl(fd)
                .expect("its flags")
                .contains(rustix::fs::OFlags::NONBLOCK),
            "a drain must not block"
        );
        dir.file("agent-0.lock")
            .expect("name")
            .replace(b"{}", RECORD_MODE)
            .expect("write");
        drop(first);
        // The same instance, kept open (closing one costs a grace period): what it saw
        // before is still queued there.
        let mut next = watches.watch(&dir);
        assert!(
            next.drain(&|name| name == "agent-0.lock"),
            "the next watch reads what the first one saw: its instance was kept"
        );
    }
}
