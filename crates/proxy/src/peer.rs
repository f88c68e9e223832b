//! Who may use the proxy's Unix socket: root, the slot directory's owner, or a member of its
//! group, the dispatcher's rule (`worklane_transport::Trust`, with the credentials read by
//! the same calls, `SO_PEERCRED` and `SO_PEERGROUPS`).

pub(crate) use worklane_transport::Trust;

/// Whether the peer of `socket` may connect; a refusal is logged with why (a peer whose
/// credentials cannot be read may not connect).
pub(crate) fn admits_peer(trust: Trust, socket: impl std::os::fd::AsFd) -> bool {
    match trust.check(socket) {
        Ok(_) => true,
        Err(refused) => {
            log::warn!(
                "a connection to the proxy's socket is refused: {}",
                crate::lanes::chain(&refused)
            );
            false
        }
    }
}
