//! Who may use the proxy's Unix socket: root, the slot directory's owner, or a member of its
//! group, the dispatcher's rule (`worklane_admission::dispatch::server::Trust`, which sits
//! behind the dispatcher's SQLite feature; the credentials are read by the same calls,
//! `SO_PEERCRED` and `SO_PEERGROUPS`).

use std::os::fd::AsFd;
use worklane_admission::dispatch::transport;

/// The slot directory's owner and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trust {
    pub(crate) owner: u32,
    pub(crate) group: u32,
}

impl Trust {
    /// Whether a peer of `uid` and `gid`, in supplementary `groups`, may connect.
    pub(crate) fn admits(self, uid: u32, gid: u32, groups: &[u32]) -> bool {
        uid == 0 || uid == self.owner || gid == self.group || groups.contains(&self.group)
    }

    /// Whether the peer of `socket` may connect; a peer whose credentials cannot be read may
    /// not.
    pub(crate) fn admits_peer(self, socket: impl AsFd) -> bool {
        let peer = match transport::peer(socket.as_fd()) {
            Ok(peer) => peer,
            Err(e) => {
                log::warn!(
                    "a connection to the proxy's socket is refused: cannot read its peer's \
                     credentials: {}",
                    crate::lanes::chain(&e)
                );
                return false;
            }
        };
        let groups = transport::peer_groups(socket.as_fd()).unwrap_or_default();
        let admitted = self.admits(peer.uid, peer.gid, &groups);
        if !admitted {
            log::warn!(
                "a connection to the proxy's socket is refused: uid {} gid {} is neither root, \
                 the slot directory's owner ({}) nor in its group ({})",
                peer.uid,
                peer.gid,
                self.owner,
                self.group
            );
        }
        admitted
    }
}

#[cfg(test)]
mod tests {
    use super::Trust;

    #[test]
    fn root_the_owner_and_the_group_are_admitted_and_no_one_else() {
        let trust = Trust {
            owner: 1000,
            group: 4343,
        };
        assert!(trust.admits(0, 0, &[]), "root");
        assert!(trust.admits(1000, 1000, &[]), "the owner");
        assert!(trust.admits(2000, 4343, &[]), "the group, primary");
        assert!(
            trust.admits(2000, 2000, &[17, 4343]),
            "the group, supplementary"
        );
        assert!(!trust.admits(2000, 2000, &[17]), "a stranger");
        assert!(!trust.admits(65_534, 65_534, &[]), "nobody");
    }
}
