//! The calls on a socket that rustix does not offer: the peer's supplementary groups
//! (`SO_PEERGROUPS`) and a pidfd of the peer (`SO_PEERPIDFD`), through `libc` in this module
//! alone.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `getsockopt(SOL_SOCKET, SO_PEERGROUPS)` on `socket`: the supplementary groups of the peer
/// as they were when it connected ([socket(7)]). A buffer too small (`ERANGE`) is grown to the
/// size the kernel says and the call made again.
///
/// [socket(7)]: https://man7.org/linux/man-pages/man7/socket.7.html
pub(crate) fn peer_groups(socket: BorrowedFd<'_>) -> std::io::Result<Vec<u32>> {
    let size = std::mem::size_of::<libc::gid_t>();
    let mut groups: Vec<libc::gid_t> = vec![0; 32];
    for _ in 0..4 {
        let mut len = libc::socklen_t::try_from(groups.len() * size)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: `groups` is a live, writable buffer of `len` bytes (its length times the
        // size of a gid_t), and `len` is a valid socklen_t the kernel updates to the bytes
        // written (or, with ERANGE, needed); `socket` is an open descriptor borrowed for the
        // call.
        let done = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let len = usize::try_from(len).unwrap_or(0) / size;
        if done == 0 {
            groups.truncate(len.min(groups.len()));
            return Ok(groups);
        }
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ERANGE) {
            return Err(error);
        }
        groups.resize(len.max(groups.len() * 2), 0);
    }
    Err(std::io::Error::from_raw_os_error(libc::ERANGE))
}

/// `SO_PEERPIDFD` (Linux 6.5): the same number on every architecture but MIPS, SPARC and
/// PA-RISC, where worklane is not built.
const SO_PEERPIDFD: libc::c_int = 77;

/// `getsockopt(SOL_SOCKET, SO_PEERPIDFD)` on `socket`: a pidfd of the process that connected
/// (or made the pair), which names that process and no other for as long as it is held, even
/// after it exits and its pid is used again ([socket(7)]). Linux 6.5 and later; older
/// kernels say `ENOPROTOOPT`.
///
/// [socket(7)]: https://man7.org/linux/man-pages/man7/socket.7.html
pub(crate) fn peer_pidfd(socket: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is a live, writable c_int and `len` its size, which the kernel updates;
    // `socket` is an open descriptor borrowed for the call.
    let done = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            std::ptr::from_mut(&mut fd).cast(),
            &mut len,
        )
    };
    if done != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if fd < 0 {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidData));
    }
    // SAFETY: the kernel has just made `fd`, a new descriptor (close-on-exec) that nothing
    // else owns; it is owned here from now on and closed on drop.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn the_peer_s_groups_are_this_process_s() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let mut got = peer_groups(a.as_fd()).expect("SO_PEERGROUPS");
        got.sort_unstable();
        let mut ours: Vec<u32> = rustix::process::getgroups()
            .expect("getgroups")
            .into_iter()
            .map(rustix::process::Gid::as_raw)
            .collect();
        ours.sort_unstable();
        assert_eq!(got, ours, "a socket pair's peer is this process");
    }

    #[test]
    fn the_peer_s_pidfd_names_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let pidfd = peer_pidfd(a.as_fd()).expect("SO_PEERPIDFD (Linux 6.5 and later)");
        let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))
            .expect("fdinfo");
        let pid = fdinfo
            .lines()
            .find_map(|l| l.strip_prefix("Pid:"))
            .map(str::trim)
            .expect("a pidfd's fdinfo names its Pid");
        assert_eq!(pid, std::process::id().to_string(), "{fdinfo}");
    }

    /// A socket pair made by a thread whose supplementary groups are `groups` (set for that
    /// thread alone, as root may): its peer's groups are those.
    pub(crate) fn pair_in_groups(
        groups: &[u32],
    ) -> (
        std::os::unix::net::UnixStream,
        std::os::unix::net::UnixStream,
    ) {
        let groups: Vec<rustix::thread::Gid> = groups
            .iter()
            .map(|g| rustix::thread::Gid::from_raw(*g))
            .collect();
        std::thread::spawn(move || {
            rustix::thread::set_thread_groups(&groups)
                .expect("set this thread's groups (the tests run as root)");
            std::os::unix::net::UnixStream::pair().expect("pair")
        })
        .join()
        .expect("the thread")
    }

    #[test]
    fn a_peer_s_groups_are_read_however_many_it_has() {
        // 32 fit the first buffer; more are read again with the size the kernel says.
        for n in [1, 32, 33, 100] {
            let groups: Vec<u32> = (0..n).map(|i| 5000 + i).collect();
            let (a, _b) = pair_in_groups(&groups);
            let mut got = peer_groups(a.as_fd()).expect("SO_PEERGROUPS");
            got.sort_unstable();
            assert_eq!(got, groups, "{n} groups");
        }
    }

    /// Where the parent test tells its subject to act.
    const SUBJECT: &str = "WORKLANE_TRANSPORT_TEST_PIDFD_SUBJECT";
    const TEST_NAME: &str = "sys::tests::a_pidfd_numbered_0_is_a_pidfd";

    /// A process that closed its standard input gets a pidfd numbered 0, a pidfd like any
    /// other. The test runs its own binary again, running only itself, as the subject: it
    /// closes its fd 0 (no other test runs there to take the number) and asks for a pidfd.
    #[test]
    fn a_pidfd_numbered_0_is_a_pidfd() {
        if std::env::var_os(SUBJECT).is_some() {
            let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
            // SAFETY: fd 0 is the subject's standard input (/dev/null, given by the parent),
            // which nothing in it reads or holds as an owned descriptor.
            assert_eq!(unsafe { libc::close(0) }, 0, "close fd 0");
            let pidfd = peer_pidfd(a.as_fd()).expect("a pidfd numbered 0");
            assert_eq!(pidfd.as_raw_fd(), 0, "the lowest number free");
            return;
        }
        worklane_testkit::subject::run_again_as_subject(TEST_NAME, |subject| {
            subject.env(SUBJECT, "1");
        });
    }
}
