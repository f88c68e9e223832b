//! Who is at the other end of a connection: the kernel's word for it (`SO_PEERCRED` and
//! `SO_PEERGROUPS` on Linux, `getpeereid` on macOS), never the message's.

use crate::message::Error;
use rustix::fd::AsFd;

#[cfg(any(target_os = "linux", target_os = "android"))]
fn io(op: &'static str) -> impl FnOnce(rustix::io::Errno) -> Error {
    move |e| Error::Io {
        op,
        source: e.into(),
    }
}

/// Who is at the other end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its process id, where the platform tells (Linux).
    pub pid: Option<u32>,
    /// Its effective uid.
    pub uid: u32,
    /// Its effective gid.
    pub gid: u32,
}

/// The supplementary groups of the peer of `socket` as they were when it connected
/// (`SO_PEERGROUPS`, Linux 4.13 and later).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_groups(socket: impl AsFd) -> Result<Vec<u32>, Error> {
    crate::sys::peer_groups(socket.as_fd()).map_err(|source| Error::Io {
        op: "reading the peer's groups",
        source,
    })
}

/// Elsewhere the peer's supplementary groups are not told: none.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn peer_groups(_socket: impl AsFd) -> Result<Vec<u32>, Error> {
    Ok(Vec::new())
}

/// The credentials of the peer of `socket` (`SO_PEERCRED`).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer(socket: impl AsFd) -> Result<Peer, Error> {
    let cred = rustix::net::sockopt::socket_peercred(&socket)
        .map_err(io("reading the peer's credentials"))?;
    Ok(Peer {
        pid: u32::try_from(cred.pid.as_raw_nonzero().get()).ok(),
        uid: cred.uid.as_raw(),
        gid: cred.gid.as_raw(),
    })
}

/// The credentials of the peer of `socket` (`getpeereid`; macOS does not tell the pid).
#[cfg(target_os = "macos")]
pub fn peer(socket: impl AsFd) -> Result<Peer, Error> {
    let (uid, gid) = nix::unistd::getpeereid(socket.as_fd()).map_err(|e| Error::Io {
        op: "reading the peer's credentials",
        source: std::io::Error::from_raw_os_error(e as i32),
    })?;
    Ok(Peer {
        pid: None,
        uid: uid.as_raw(),
        gid: gid.as_raw(),
    })
}

/// Elsewhere the peer cannot be known, so every peer is refused (the dispatcher serves nobody
/// it cannot check).
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "macos")))]
pub fn peer(_socket: impl AsFd) -> Result<Peer, Error> {
    Err(Error::Io {
        op: "reading the peer's credentials",
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this platform has no peer credentials worklane can read (Linux and macOS do)",
        ),
    })
}

/// The supplementary groups of the peer of `socket`: [`peer_groups`] (as they were when it
/// connected), else the `Groups:` line of `/proc/<pid>/status` (a kernel older than 4.13),
/// else none.
pub fn groups_of(socket: impl AsFd, peer: &Peer) -> Vec<u32> {
    if let Ok(groups) = peer_groups(&socket) {
        return groups;
    }
    peer.pid
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .map(|status| parse_groups(&status))
        .unwrap_or_default()
}

/// The numbers of the `Groups:` line of a `/proc/<pid>/status` text, none without one.
fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|groups| {
            groups
                .split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A pidfd of the peer of `socket` (`SO_PEERPIDFD`, Linux 6.5 and later): it names the
/// process that connected and no other, even once that process has exited and its pid is
/// used again, so a signal sent through it (`pidfd_send_signal`) cannot reach a stranger.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_pidfd(socket: impl AsFd) -> Result<rustix::fd::OwnedFd, Error> {
    crate::sys::peer_pidfd(socket.as_fd()).map_err(|source| Error::Io {
        op: "reading a pidfd of the peer",
        source,
    })
}

/// Elsewhere there are no pidfds.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn peer_pidfd(_socket: impl AsFd) -> Result<rustix::fd::OwnedFd, Error> {
    Err(Error::Io {
        op: "reading a pidfd of the peer",
        source: std::io::Error::from(std::io::ErrorKind::Unsupported),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::OwnedFd;
    use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};

    fn pair() -> (OwnedFd, OwnedFd) {
        socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair")
    }

    #[test]
    fn the_peer_is_known() {
        let (a, _b) = pair();
        let peer = peer(&a).expect("peer");
        assert_eq!(peer.uid, rustix::process::geteuid().as_raw());
        assert_eq!(peer.pid, Some(std::process::id()));
    }

    #[test]
    fn the_groups_line_is_read_from_a_status_text() {
        let status = "Name:\tsh\nUid:\t0\t0\t0\t0\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_groups(status), vec![4, 24, 27]);
        assert_eq!(
            parse_groups("Groups:\t\n"),
            Vec::<u32>::new(),
            "in no group"
        );
        assert_eq!(parse_groups("Name:\tsh\n"), Vec::<u32>::new(), "no line");
        assert_eq!(
            parse_groups("Groups: 5 x 6\n"),
            vec![5, 6],
            "garbage is skipped"
        );
    }

    #[test]
    fn the_groups_of_a_pair_s_peer_are_this_process_s() {
        let (a, _b) = pair();
        let peer = peer(&a).expect("peer");
        let mut got = groups_of(&a, &peer);
        got.sort_unstable();
        let mut ours: Vec<u32> = rustix::process::getgroups()
            .expect("getgroups")
            .into_iter()
            .map(rustix::process::Gid::as_raw)
            .collect();
        ours.sort_unstable();
        assert_eq!(got, ours);
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn the_groups_of_a_peer_in_other_groups_are_its_own() {
        let groups = [4001, 4002, 4003];
        let (a, _b) = crate::sys::tests::pair_in_groups(&groups);
        let mut told = peer_groups(&a).expect("SO_PEERGROUPS");
        told.sort_unstable();
        assert_eq!(told, groups);
        let peer = peer(&a).expect("peer");
        let mut got = groups_of(&a, &peer);
        got.sort_unstable();
        assert_eq!(got, groups);
    }
}
