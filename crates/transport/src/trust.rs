//! Who may use a socket of the slot directory, and whom a client may believe serves one.
//!
//! The slot directory's group is who shares the machine's slots: root, the directory's owner
//! and the group's members may connect ([`Trust::admits`]). The other way round, a client
//! hands a server what is its to give (a held lane's descriptor, a command to run as itself),
//! and any member can put a socket of its own at the directory's socket name: so a client
//! believes only a server that runs as root, as the directory's owner, or as the client
//! itself ([`Trust::serves`]), as the kernel tells it (`SO_PEERCRED`), never as a file says.

use crate::message::Error;
use crate::peer::{Peer, groups_of, peer};
use rustix::fd::AsFd;

/// The slot directory's owner and group, as its descriptor says (`fstat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trust {
    /// The directory's owner.
    pub owner: u32,
    /// The directory's group.
    pub group: u32,
}

/// A peer that may use the socket: its credentials and supplementary groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// Its credentials.
    pub peer: Peer,
    /// Its supplementary groups.
    pub groups: Vec<u32>,
}

/// Why a peer may not use the socket.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// Its credentials could not be read: nobody is served who cannot be checked.
    #[error("cannot read a connection's peer credentials")]
    Credentials(#[source] Error),
    /// Neither root, the directory's owner nor a member of its group.
    #[error(
        "uid {uid} gid {gid} (pid {pid:?}) is neither root, the slot directory's owner (uid \
         {owner}) nor in its group (gid {group})"
    )]
    Stranger {
        /// Its uid.
        uid: u32,
        /// Its gid.
        gid: u32,
        /// Its pid, where known.
        pid: Option<u32>,
        /// The directory's owner.
        owner: u32,
        /// The directory's group.
        group: u32,
    },
}

impl Trust {
    /// The trust of the directory open at `dir`: its owner and group.
    pub fn of_dir(dir: impl AsFd) -> std::io::Result<Trust> {
        let stat = rustix::fs::fstat(dir)?;
        Ok(Trust {
            owner: stat.st_uid,
            group: stat.st_gid,
        })
    }

    /// Whether `peer`, in supplementary `groups`, may use the socket: root, the directory's
    /// owner, or a member of its group (primary or supplementary).
    #[must_use]
    pub fn admits(&self, peer: &Peer, groups: &[u32]) -> bool {
        peer.uid == 0
            || peer.uid == self.owner
            || peer.gid == self.group
            || groups.contains(&self.group)
    }

    /// The peer of `socket` with its groups if it may use the socket ([`Trust::admits`]),
    /// else why not.
    pub fn check(&self, socket: impl AsFd) -> Result<Admitted, Refused> {
        let peer = peer(&socket).map_err(Refused::Credentials)?;
        let groups = groups_of(&socket, &peer);
        if self.admits(&peer, &groups) {
            Ok(Admitted { peer, groups })
        } else {
            Err(Refused::Stranger {
                uid: peer.uid,
                gid: peer.gid,
                pid: peer.pid,
                owner: self.owner,
                group: self.group,
            })
        }
    }

    /// Whether a client running as `me` may believe a server running as `server`: root, the
    /// directory's owner, or `me` itself. Any other uid is a member of the group serving a
    /// socket of its own at the directory's name.
    #[must_use]
    pub fn serves(&self, server: u32, me: u32) -> bool {
        server == 0 || server == self.owner || server == me
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRUST: Trust = Trust {
        owner: 1000,
        group: 2000,
    };

    fn peer(uid: u32, gid: u32) -> Peer {
        Peer {
            pid: Some(5),
            uid,
            gid,
        }
    }

    #[test]
    fn root_the_owner_and_the_group_are_admitted_and_no_one_else() {
        assert!(TRUST.admits(&peer(0, 9), &[]), "root");
        assert!(TRUST.admits(&peer(1000, 9), &[]), "the owner");
        assert!(TRUST.admits(&peer(9, 2000), &[]), "the primary group");
        assert!(
            TRUST.admits(&peer(9, 9), &[7, 2000]),
            "a supplementary group"
        );
        assert!(
            !TRUST.admits(&peer(9, 9), &[7, 8]),
            "a stranger in other groups"
        );
        assert!(
            !TRUST.admits(&peer(1, 1), &[]),
            "uid and gid 1 are nobody special"
        );
    }

    #[test]
    fn a_client_believes_root_the_owner_and_itself_and_no_member() {
        assert!(TRUST.serves(0, 4000), "root");
        assert!(TRUST.serves(1000, 4000), "the directory's owner");
        assert!(TRUST.serves(4000, 4000), "the client itself");
        assert!(!TRUST.serves(3000, 4000), "another member of the group");
        assert!(!TRUST.serves(3000, 0), "not even for root");
    }

    #[test]
    fn a_pair_s_own_peer_is_checked_by_the_kernel_s_word() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let me = rustix::process::geteuid().as_raw();
        let mine = Trust {
            owner: me,
            group: u32::MAX,
        };
        let admitted = mine.check(&a).expect("the owner is admitted");
        assert_eq!(admitted.peer.uid, me);
        let theirs = Trust {
            owner: me.wrapping_add(1),
            group: u32::MAX,
        };
        if me != 0 {
            assert!(
                matches!(theirs.check(&a), Err(Refused::Stranger { .. })),
                "neither root, owner nor member"
            );
        }
    }
}
