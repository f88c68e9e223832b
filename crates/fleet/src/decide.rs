//! The fleet's decisions as pure functions: who holds a pool's places, and when a holder that
//! cannot confirm its etcd lease must halt.

use crate::value::Holder;
use std::time::Duration;

/// One key under a pool's holders, as a range read returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The key.
    pub key: String,
    /// The revision that created it: the holder's fencing epoch, and its place in line.
    pub create_revision: i64,
    /// Its value, if readable.
    pub holder: Option<Holder>,
}

/// Where one key stands among a pool's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Among the first `cap` by create revision: it holds a place.
    Holds,
    /// Behind the first `cap`: `ahead` keys were created before it.
    Waits {
        /// Keys created before it.
        ahead: usize,
    },
    /// Not listed: its lease expired (or it was removed).
    Gone,
}

/// Where `mine` stands among `listed` (any order) at a cap of `cap`: the keys in order of
/// creation, the first `cap` hold. Keys are only ever added with higher revisions, so a key
/// that holds keeps holding until it is removed: at most `cap` hold at any revision.
#[must_use]
pub fn standing(listed: &[Listed], mine: &str, cap: u32) -> Standing {
    let Some(me) = listed.iter().find(|l| l.key == mine) else {
        return Standing::Gone;
    };
    let ahead = listed
        .iter()
        .filter(|l| (l.create_revision, &l.key) < (me.create_revision, &me.key))
        .count();
    if ahead < cap as usize {
        Standing::Holds
    } else {
        Standing::Waits { ahead }
    }
}

/// The keys that hold places, in order of creation.
#[must_use]
pub fn holders(listed: &[Listed], cap: u32) -> Vec<&Listed> {
    let mut sorted: Vec<&Listed> = listed.iter().collect();
    sorted.sort_by(|a, b| (a.create_revision, &a.key).cmp(&(b.create_revision, &b.key)));
    sorted.truncate(cap as usize);
    sorted
}

/// How often a holder confirms its etcd lease: a sixth of the TTL, at least 250 ms.
#[must_use]
pub fn pulse_every(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_millis(250))
}

/// Whether a holder whose lease was last confirmed by a keepalive *sent* `since` ago must
/// halt: at half the TTL. etcd counts the TTL from when it received that keepalive, later than
/// it was sent, so the lease lives at least until TTL after the send; halting at TTL/2 with a
/// kill grace of at most TTL/4 leaves the command gone before a successor can be admitted.
#[must_use]
pub fn must_halt(since: Duration, ttl: Duration) -> bool {
    since >= ttl / 2
}

/// The SIGTERM-to-SIGKILL grace of a fleet holder's command: at most a quarter of the TTL.
#[must_use]
pub fn halt_grace(ttl: Duration, usual: Duration) -> Duration {
    usual.min(ttl / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, rev: i64) -> Listed {
        Listed {
            key: name.to_owned(),
            create_revision: rev,
            holder: None,
        }
    }

    #[test]
    fn the_first_cap_keys_by_creation_hold() {
        let listed = [key("c", 30), key("a", 10), key("b", 20), key("d", 40)];
        assert_eq!(standing(&listed, "a", 2), Standing::Holds);
        assert_eq!(standing(&listed, "b", 2), Standing::Holds);
        assert_eq!(standing(&listed, "c", 2), Standing::Waits { ahead: 2 });
        assert_eq!(standing(&listed, "d", 2), Standing::Waits { ahead: 3 });
        assert_eq!(standing(&listed, "zz", 2), Standing::Gone);
        assert_eq!(
            standing(&listed, "a", 0),
            Standing::Waits { ahead: 0 },
            "cap 0"
        );
        let held: Vec<&str> = holders(&listed, 2).iter().map(|l| l.key.as_str()).collect();
        assert_eq!(held, ["a", "b"]);
        assert_eq!(holders(&listed, 9).len(), 4);
    }

    #[test]
    fn a_removed_key_moves_the_next_one_up() {
        let listed = [key("b", 20), key("c", 30)];
        assert_eq!(standing(&listed, "c", 2), Standing::Holds);
        assert_eq!(standing(&listed, "c", 1), Standing::Waits { ahead: 1 });
    }

    #[test]
    fn a_holder_halts_at_exactly_half_its_ttl_unconfirmed() {
        let ttl = Duration::from_secs(15);
        assert!(!must_halt(Duration::from_millis(7_499), ttl));
        assert!(must_halt(Duration::from_millis(7_500), ttl));
        assert_eq!(pulse_every(ttl), Duration::from_millis(2_500));
        assert_eq!(
            pulse_every(Duration::from_secs(1)),
            Duration::from_millis(250)
        );
        assert_eq!(
            halt_grace(Duration::from_secs(4), Duration::from_secs(3)),
            Duration::from_secs(1)
        );
        assert_eq!(
            halt_grace(ttl, Duration::from_secs(3)),
            Duration::from_secs(3)
        );
    }
}
