//! Waking a waiter as soon as the slot directory changes in a way that may let it on: a
//! record removed (a slot released, a place in line left), STOP or the config changed. On
//! Linux through inotify; where inotify is missing or refused, and on other platforms, the
//! wait is a plain sleep (the polling fallback: macOS's kqueue would need `unsafe` through
//! rustix, which this crate does not use). A waiter always looks again after its
//! fallback interval too: a SIGKILLed holder or waiter removes no file, and only its freed
//! guard tells.

use std::time::Duration;
use worklane_slotfile::SlotDir;

/// A watch on one slot directory.
pub(crate) struct Watch {
    #[cfg(target_os = "linux")]
    fd: Option<rustix::fd::OwnedFd>,
}

impl Watch {
    /// Watches `dir` (best effort: without inotify, [`Watch::wait`] only sleeps).
    pub(crate) fn new(dir: &SlotDir) -> Watch {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
            let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
                .ok()
                .filter(|fd| {
                    let flags = WatchFlags::DELETE
                        | WatchFlags::MOVED_FROM
                        | WatchFlags::MOVED_TO
                        | WatchFlags::CREATE
                        | WatchFlags::ONLYDIR;
                    inotify::add_watch(fd, dir.path(), flags).is_ok()
                });
            Watch { fd }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = dir;
            Watch {}
        }
    }

    /// Whether changes wake it (else it only sleeps).
    #[cfg(test)]
    pub(crate) fn is_watching(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.fd.is_some();
        #[cfg(not(target_os = "linux"))]
        return false;
    }

    /// Waits at most `timeout`, returning early when a file whose name `wanted` accepts is
    /// created, removed or renamed in the directory (or the kernel dropped events: then
    /// anything may have happened).
    pub(crate) fn wait(&mut self, timeout: Duration, wanted: &dyn Fn(&str) -> bool) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            wait_inotify(fd, timeout, wanted);
            return;
        }
        let _ = wanted;
        std::thread::sleep(timeout);
    }
}

#[cfg(target_os = "linux")]
fn wait_inotify(fd: &rustix::fd::OwnedFd, timeout: Duration, wanted: &dyn Fn(&str) -> bool) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::fs::inotify::{ReadFlags, Reader};
    use std::mem::MaybeUninit;
    use std::time::Instant;
    let deadline = Instant::now() + timeout;
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        let spec = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        match poll(&mut fds, Some(&spec)) {
            Ok(0) => return,
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            // The watch is broken: sleep out the rest instead of spinning.
            Err(_) => {
                std::thread::sleep(left);
                return;
            }
        }
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
                Err(_) => break,
            }
        }
        if woken {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use worklane_slotfile::{Environment, RECORD_MODE};

    #[test]
    fn a_wanted_change_wakes_it_and_others_do_not() {
        let temp = tempfile::tempdir().expect("temp");
        let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
        let dir = worklane_slotfile::SlotDir::resolve_in(&env)
            .expect("resolve")
            .dir;
        let mut watch = Watch::new(&dir);
        assert!(watch.is_watching(), "inotify is there on Linux");
        let file = dir.file("agent-0.lock").expect("name");
        file.replace(b"{}", RECORD_MODE).expect("write");
        let other = dir.file("slots.lock").expect("name");
        other.replace(b"{}", RECORD_MODE).expect("write");
        // Leftover events of the writes above: drained by a wait that wants nothing.
        watch.wait(Duration::from_millis(20), &|_| false);
        let started = Instant::now();
        let remover = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.remove().expect("remove slots.lock");
            std::thread::sleep(Duration::from_millis(50));
            file.remove().expect("remove agent-0.lock");
        });
        watch.wait(Duration::from_secs(20), &|name| name == "agent-0.lock");
        let waited = started.elapsed();
        remover.join().expect("remover");
        assert!(
            waited >= Duration::from_millis(100),
            "slots.lock's removal did not wake it: {waited:?}"
        );
        assert!(
            waited < Duration::from_secs(20),
            "agent-0.lock's removal woke it: {waited:?}"
        );
    }
}
