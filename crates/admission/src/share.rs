//! Owners and shares (PROTOCOL.md 12.10): whose share a take's units count against, and the
//! order in which the line serves owners when the config gives shares.
//!
//! An [`Owner`] is what a taker says about itself: its uid, its groups and, optionally, a tag
//! (`worklane run --owner TAG`). [`resolve`] picks the share it counts against, most specific
//! first:
//!
//! 1. `owner:<tag>`, when the take has a tag and the config names it;
//! 2. `uid:<uid>`, when the config names the take's uid;
//! 3. `group:<name or gid>`, when the config names one of the take's groups (its effective
//!    group or a supplementary one); of several, the smallest share (then the first key);
//! 4. otherwise the take is its uid's (`uid:<uid>`) with the share of `*` as its ceiling, or
//!    none when the config has no `*`.
//!
//! The result's owner (`uid:1001`, `group:ci`, `owner:nightly`) is written into the slot's
//! record and the waiter's line entry as `shareOwner`, so that every reader sums an owner's
//! units without knowing who is in which group.
//!
//! Shares are fairness among cooperating processes, not a security boundary: anyone who may
//! write the slot directory can write any record, as with every rule of the pool.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use worklane_slotfile::{ShareKey, Shares};

/// Who a take is for: its uid, its groups and an optional tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    uid: u32,
    gids: Vec<u32>,
    tag: Option<String>,
}

impl Owner {
    /// This process: its effective uid, its effective gid and its supplementary groups, no tag.
    #[must_use]
    pub fn of_process() -> Owner {
        let mut gids = vec![rustix::process::getegid().as_raw()];
        for gid in rustix::process::getgroups().unwrap_or_default() {
            if !gids.contains(&gid.as_raw()) {
                gids.push(gid.as_raw());
            }
        }
        Owner {
            uid: rustix::process::geteuid().as_raw(),
            gids,
            tag: None,
        }
    }

    /// The processes of `uid`, in no group, without a tag (a caller that knows whom it acts
    /// for, such as the dispatcher for its rows; tests).
    #[must_use]
    pub fn of_uid(uid: u32) -> Owner {
        Owner {
            uid,
            gids: Vec::new(),
            tag: None,
        }
    }

    /// The same owner in the groups `gids` (replacing the groups it had).
    #[must_use]
    pub fn with_groups(mut self, gids: impl IntoIterator<Item = u32>) -> Owner {
        self.gids = gids.into_iter().collect();
        self
    }

    /// The same owner with the tag `tag` (`worklane run --owner TAG`).
    #[must_use]
    pub fn with_tag(mut self, tag: impl Into<String>) -> Owner {
        self.tag = Some(tag.into());
        self
    }

    /// Its uid.
    #[must_use]
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Its groups.
    #[must_use]
    pub fn groups(&self) -> &[u32] {
        &self.gids
    }

    /// Its tag.
    #[must_use]
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }
}

/// What a take asks for besides its kind: its weight (units of the kind's cap, taken all at
/// once or not at all) and its owner. The default is a weight of 1 for this process
/// ([`Owner::of_process`]): what [`Pool::take`](crate::Pool::take) and
/// [`Pool::try_take`](crate::Pool::try_take) ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    weight: u32,
    owner: Owner,
}

impl Default for Ask {
    fn default() -> Self {
        Ask {
            weight: 1,
            owner: Owner::of_process(),
        }
    }
}

impl Ask {
    /// Weight 1, for this process.
    #[must_use]
    pub fn new() -> Ask {
        Ask::default()
    }

    /// The same ask with weight `weight` (checked at the take: 1 to the cap, else
    /// [`take::Error::Weight`](crate::take::Error::Weight)).
    #[must_use]
    pub fn with_weight(mut self, weight: u32) -> Ask {
        self.weight = weight;
        self
    }

    /// The same ask for `owner`.
    #[must_use]
    pub fn with_owner(mut self, owner: Owner) -> Ask {
        self.owner = owner;
        self
    }

    /// Its weight.
    #[must_use]
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Its owner.
    #[must_use]
    pub fn owner(&self) -> &Owner {
        &self.owner
    }
}

/// The share a take counts against: its owner as records name it, and its ceiling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareOf {
    /// The owner its units count against (`uid:1001`, `group:ci`, `owner:nightly`): the
    /// record's `shareOwner`.
    pub owner: ShareKey,
    /// The most units that owner may hold at once; `None`: only the cap.
    pub ceiling: Option<u32>,
}

/// The share `owner` counts against under `shares` (the precedence of the module
/// documentation), with group names looked up in `/etc/group` (only when the config names a
/// group by name).
#[must_use]
pub fn resolve(shares: &Shares, owner: &Owner) -> ShareOf {
    resolve_with(shares, owner, &system_gid)
}

/// [`resolve`] with group names looked up by `gid_of`.
#[must_use]
pub fn resolve_with(
    shares: &Shares,
    owner: &Owner,
    gid_of: &dyn Fn(&str) -> Option<u32>,
) -> ShareOf {
    if let Some(tag) = &owner.tag {
        let key = ShareKey::Tag(tag.clone());
        if let Some(n) = shares.named(&key) {
            return ShareOf {
                owner: key,
                ceiling: Some(n),
            };
        }
    }
    let uid = ShareKey::Uid(owner.uid);
    if let Some(n) = shares.named(&uid) {
        return ShareOf {
            owner: uid,
            ceiling: Some(n),
        };
    }
    let group = shares
        .iter()
        .filter(|(key, _)| match key {
            ShareKey::Group(name) => key
                .gid()
                .or_else(|| gid_of(name))
                .is_some_and(|gid| owner.gids.contains(&gid)),
            _ => false,
        })
        .min_by(|(ka, a), (kb, b)| a.cmp(b).then_with(|| ka.cmp(kb)));
    if let Some((key, n)) = group {
        return ShareOf {
            owner: key.clone(),
            ceiling: Some(n),
        };
    }
    ShareOf {
        owner: uid,
        ceiling: shares.named(&ShareKey::Anyone),
    }
}

/// The gid of the group `name` as `/etc/group` lists it (groups only a network directory
/// knows are not found: name them by gid, `group:<gid>`).
fn system_gid(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    gid_in_group_file(&text, name)
}

/// The gid of the group `name` in the text of a group file (`name:password:gid:members`).
#[must_use]
pub fn gid_in_group_file(text: &str, name: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let (group, _, gid) = (fields.next()?, fields.next()?, fields.next()?);
        (group == name).then(|| gid.parse().ok()).flatten()
    })
}

/// A place in a line as the fair order sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// Higher goes first.
    pub priority: i64,
    /// When it started waiting, ms.
    pub start_ms: u64,
    /// Its entry's token (empty for a take with no entry).
    pub token: String,
    /// The owner its units count against (`shareOwner`); `None` for an entry written without
    /// one (an older harness).
    pub owner: Option<String>,
    /// Its weight, at least 1.
    pub weight: u32,
    /// Whether it is the take being decided.
    pub me: bool,
}

/// What the owners hold now and may hold: the input of the fair order.
pub struct Use<'a> {
    /// Units held now by each owner (`shareOwner` of the live slots).
    pub held: &'a HashMap<String, u32>,
    /// The config's shares.
    pub shares: &'a Shares,
    /// The cap: the share of an owner that has none.
    pub cap: u32,
}

impl Use<'_> {
    /// Units `owner` holds now.
    pub fn held(&self, owner: &str) -> u32 {
        self.held.get(owner).copied().unwrap_or(0)
    }

    /// The ceiling of `owner` (its share, else that of `*`), if any.
    pub fn ceiling(&self, owner: &str) -> Option<u32> {
        ShareKey::parse(owner).and_then(|key| self.shares.ceiling(&key))
    }

    /// Whether `owner` may take `weight` more units under its ceiling.
    pub fn fits(&self, owner: &str, weight: u32) -> bool {
        self.ceiling(owner)
            .is_none_or(|c| u64::from(self.held(owner)) + u64::from(weight) <= u64::from(c))
    }

    /// The use of `owner`'s share, as the fraction (held, share).
    fn ratio(&self, owner: &str) -> (u64, u64) {
        let share = self.ceiling(owner).unwrap_or(self.cap).max(1);
        (u64::from(self.held(owner)), u64::from(share))
    }

    /// The fair order: higher priority first; within a priority, the owner with the smallest
    /// use of its share (held / share) first, entries without an owner last; then earlier
    /// start; then an entry before a take that has none; then smaller token.
    pub fn order(&self, a: &Waiter, b: &Waiter) -> Ordering {
        b.priority
            .cmp(&a.priority)
            .then_with(|| match (&a.owner, &b.owner) {
                (Some(x), Some(y)) => {
                    let ((hx, sx), (hy, sy)) = (self.ratio(x), self.ratio(y));
                    (u128::from(hx) * u128::from(sy)).cmp(&(u128::from(hy) * u128::from(sx)))
                }
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            })
            .then(a.start_ms.cmp(&b.start_ms))
            .then(a.me.cmp(&b.me))
            .then_with(|| a.token.cmp(&b.token))
    }
}

/// Where the take `me` stands in a fair line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Nobody live stands before it: its turn (if the cap has room).
    Go,
    /// Live places stand before it: `ahead` (the first proved live, the rest as listed), or
    /// an earlier place of its own owner waits for room in their share.
    Behind {
        /// How many.
        ahead: u32,
    },
    /// Its own owner's share has no room for its weight.
    ShareUsed,
}

/// The turn of the waiter marked `me` among `waiters` (which it must be in), in the fair order
/// of `use_`. Places before it are probed with `live` from the front (a dead one is skipped;
/// `live` retires it) until one stands in its way: a live place whose owner's share has room
/// for it (a place whose share has no room stands in nobody's way but its own owner's later
/// ones: an owner's places are served in their order, so a heavy one is never passed by its
/// owner's lighter ones).
pub(crate) fn turn<E>(
    waiters: &mut [Waiter],
    use_: &Use<'_>,
    live: &mut dyn FnMut(&Waiter) -> Result<bool, E>,
) -> Result<Turn, E> {
    waiters.sort_by(|a, b| use_.order(a, b));
    let Some(at) = waiters.iter().position(|w| w.me) else {
        return Ok(Turn::Go);
    };
    let me = &waiters[at];
    if let Some(owner) = &me.owner
        && !use_.fits(owner, me.weight)
    {
        return Ok(Turn::ShareUsed);
    }
    let mut blocked: HashSet<&str> = HashSet::new();
    let before = &waiters[..at];
    for (i, waiter) in before.iter().enumerate() {
        if !live(waiter)? {
            continue;
        }
        let stands = match waiter.owner.as_deref() {
            None => true,
            Some(owner) => {
                let fits = !blocked.contains(owner) && use_.fits(owner, waiter.weight);
                if !fits {
                    blocked.insert(owner);
                }
                fits || me.owner.as_deref() == Some(owner)
            }
        };
        if stands {
            // The rest are counted as listed: each stands unless its owner is out of room.
            let rest = before[i + 1..]
                .iter()
                .filter(|w| match w.owner.as_deref() {
                    None => true,
                    Some(owner) => {
                        (!blocked.contains(owner) && use_.fits(owner, w.weight))
                            || me.owner.as_deref() == Some(owner)
                    }
                })
                .count();
            let ahead = u32::try_from(rest + 1).unwrap_or(u32::MAX);
            return Ok(Turn::Behind { ahead });
        }
    }
    Ok(Turn::Go)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(pairs: &[(&str, u32)]) -> Shares {
        Shares::of(
            pairs
                .iter()
                .map(|(k, n)| (ShareKey::parse(k).expect("an owner"), *n)),
        )
    }

    fn no_groups(_: &str) -> Option<u32> {
        None
    }

    #[test]
    fn the_most_specific_named_owner_wins() {
        let all = shares(&[
            ("owner:nightly", 1),
            ("uid:1001", 4),
            ("group:ci", 3),
            ("group:5000", 2),
            ("*", 2),
        ]);
        let ci = |name: &str| (name == "ci").then_some(4000);
        let resolve = |owner: &Owner| {
            let s = resolve_with(&all, owner, &ci);
            (s.owner.to_string(), s.ceiling)
        };
        let user = Owner::of_uid(1001).with_groups([4000]);
        assert_eq!(
            resolve(&user.clone().with_tag("nightly")),
            ("owner:nightly".into(), Some(1)),
            "a named tag first"
        );
        assert_eq!(
            resolve(&user.clone().with_tag("adhoc")),
            ("uid:1001".into(), Some(4)),
            "a tag the config does not name changes nothing"
        );
        assert_eq!(
            resolve(&user),
            ("uid:1001".into(), Some(4)),
            "the uid before a group"
        );
        assert_eq!(
            resolve(&Owner::of_uid(1002).with_groups([4000])),
            ("group:ci".into(), Some(3)),
            "a group by name"
        );
        assert_eq!(
            resolve(&Owner::of_uid(1002).with_groups([4000, 5000])),
            ("group:5000".into(), Some(2)),
            "of two groups, the smaller share"
        );
        assert_eq!(
            resolve(&Owner::of_uid(1003).with_groups([9])),
            ("uid:1003".into(), Some(2)),
            "anyone else: its uid, with the share of `*`"
        );
        let no_default = shares(&[("uid:1", 1)]);
        let s = resolve_with(&no_default, &Owner::of_uid(2), &no_groups);
        assert_eq!(
            (s.owner, s.ceiling),
            (ShareKey::Uid(2), None),
            "no `*`: no ceiling"
        );
        let s = resolve_with(
            &Shares::default(),
            &Owner::of_uid(2).with_tag("t"),
            &no_groups,
        );
        assert_eq!((s.owner, s.ceiling), (ShareKey::Uid(2), None), "no shares");
    }

    #[test]
    fn an_owner_is_its_uid_groups_and_tag() {
        let owner = Owner::of_uid(1001).with_groups([4000, 5000]).with_tag("t");
        assert_eq!(
            (owner.uid(), owner.groups(), owner.tag()),
            (1001, &[4000, 5000][..], Some("t"))
        );
        let plain = Owner::of_uid(7);
        assert_eq!((plain.groups(), plain.tag()), (&[][..], None));
    }

    #[test]
    fn this_process_is_its_effective_ids_and_each_of_its_groups_once() {
        // On a thread of its own, in supplementary groups of its own (set for that thread
        // alone, as root may): its effective gid among them, to be named once.
        let egid = rustix::process::getegid().as_raw();
        let groups = [4000, egid, 5000];
        let owner = std::thread::spawn(move || {
            let gids: Vec<rustix::thread::Gid> = groups
                .iter()
                .map(|g| rustix::thread::Gid::from_raw(*g))
                .collect();
            rustix::thread::set_thread_groups(&gids)
                .expect("set this thread's groups (the tests run as root)");
            Owner::of_process()
        })
        .join()
        .expect("the thread");
        assert_eq!(owner.uid(), rustix::process::geteuid().as_raw());
        assert_eq!(
            owner.groups(),
            [egid, 4000, 5000],
            "the effective gid first, then each supplementary group once"
        );
        assert_eq!(owner.tag(), None);
    }

    #[test]
    fn a_group_named_in_the_shares_is_looked_up_in_the_system_s_group_file() {
        // A group of this system whose gid is neither 0 nor 1, as /etc/group lists it.
        let text = std::fs::read_to_string("/etc/group").expect("/etc/group");
        let (name, gid) = text
            .lines()
            .find_map(|line| {
                let mut fields = line.split(':');
                let (name, _, gid) = (fields.next()?, fields.next()?, fields.next()?);
                let gid: u32 = gid.parse().ok()?;
                (gid > 1 && !name.is_empty()).then(|| (name.to_owned(), gid))
            })
            .expect("a group of gid 2 or more in /etc/group");
        let named = shares(&[(&format!("group:{name}"), 2)]);
        let of = resolve(&named, &Owner::of_uid(1001).with_groups([gid]));
        assert_eq!(
            (of.owner.to_string(), of.ceiling),
            (format!("group:{name}"), Some(2)),
            "a member of {name} (gid {gid})"
        );
        let unknown = shares(&[("group:no-such-group-here", 2)]);
        let of = resolve(&unknown, &Owner::of_uid(1001).with_groups([0, 1, gid]));
        assert_eq!(
            (of.owner.to_string(), of.ceiling),
            ("uid:1001".to_owned(), None),
            "a group the system does not list has no members"
        );
    }

    #[test]
    fn an_owner_fits_while_its_units_and_the_weight_are_within_its_share() {
        let held: HashMap<String, u32> = [("uid:1".to_owned(), 1)].into();
        let s = shares(&[("uid:1", 2)]);
        let use_ = Use {
            held: &held,
            shares: &s,
            cap: 4,
        };
        assert!(use_.fits("uid:1", 1), "1 held + 1 of 2");
        assert!(!use_.fits("uid:1", 2), "1 held + 2 is over 2");
        assert!(
            use_.fits("uid:2", 4),
            "no share named, no `*`: only the cap"
        );
    }

    #[test]
    fn an_owner_out_of_room_stands_in_nobody_else_s_way_nor_do_its_later_places() {
        let s = shares(&[("uid:1", 3), ("*", 4)]);
        let at = |priority: i64, owner: &str, weight: u32| Waiter {
            priority,
            ..waiter(Some(owner), 10, weight)
        };
        let me = Waiter {
            me: true,
            ..waiter(Some("uid:2"), 30, 1)
        };
        // uid:1 holds 2 of 3: its place of 2 does not fit, and its later place of 1 waits
        // behind it (an owner's places go in their order): neither stands before uid:2.
        let mut line = vec![at(9, "uid:1", 2), at(8, "uid:1", 1), me.clone()];
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 2)], &s, 8, &[]),
            Turn::Go,
            "{line:?}"
        );
        // Behind uid:3, which fits: uid:1's later place, counted as listed, does not either.
        let mut line = vec![at(9, "uid:1", 2), at(8, "uid:3", 1), at(7, "uid:1", 1), me];
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 2)], &s, 8, &[]),
            Turn::Behind { ahead: 1 },
            "{line:?}"
        );
    }

    #[test]
    fn group_files_are_read_by_name() {
        let text = "root:x:0:\n# comment\nci:x:4000:alice,bob\nbroken\nodd:x:notanumber:\n";
        assert_eq!(gid_in_group_file(text, "ci"), Some(4000));
        assert_eq!(gid_in_group_file(text, "root"), Some(0));
        assert_eq!(gid_in_group_file(text, "odd"), None);
        assert_eq!(gid_in_group_file(text, "nobody"), None);
        assert_eq!(gid_in_group_file(text, "broken"), None);
    }

    fn waiter(owner: Option<&str>, start_ms: u64, weight: u32) -> Waiter {
        Waiter {
            priority: 0,
            start_ms,
            token: format!("{start_ms:016x}"),
            owner: owner.map(str::to_owned),
            weight,
            me: false,
        }
    }

    fn turn_of(
        waiters: &mut [Waiter],
        held: &[(&str, u32)],
        shares: &Shares,
        cap: u32,
        dead: &[u64],
    ) -> Turn {
        let held: HashMap<String, u32> = held.iter().map(|(k, n)| ((*k).into(), *n)).collect();
        let use_ = Use {
            held: &held,
            shares,
            cap,
        };
        turn(waiters, &use_, &mut |w: &Waiter| {
            Ok::<_, ()>(!dead.contains(&w.start_ms))
        })
        .expect("no probe fails")
    }

    #[test]
    fn the_owner_with_the_smallest_use_of_its_share_goes_first() {
        let equal = shares(&[("*", 2)]);
        // uid:1 holds 1 of 2, uid:2 nothing: uid:2's later place goes first.
        let mut line = vec![waiter(Some("uid:1"), 10, 1), waiter(Some("uid:2"), 20, 1)];
        line[1].me = true;
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 1)], &equal, 2, &[]),
            Turn::Go
        );
        line.iter_mut().for_each(|w| w.me = w.start_ms == 10);
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 1)], &equal, 2, &[]),
            Turn::Behind { ahead: 1 }
        );
        // Equal use: by start.
        line.iter_mut().for_each(|w| w.me = w.start_ms == 20);
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 1), ("uid:2", 1)], &equal, 2, &[]),
            Turn::Behind { ahead: 1 }
        );
        // Weighted fair share: 1 of 4 is less used than 1 of 2, whatever the starts.
        let weighted = shares(&[("uid:1", 4), ("uid:2", 2)]);
        let mut line = vec![
            Waiter {
                me: true,
                ..waiter(Some("uid:1"), 10, 1)
            },
            waiter(Some("uid:2"), 5, 1),
        ];
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 1), ("uid:2", 1)], &weighted, 8, &[]),
            Turn::Go,
            "uid:1 uses a quarter of its share, uid:2 half"
        );
        line.iter_mut().for_each(|w| w.me = w.start_ms == 5);
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 1), ("uid:2", 1)], &weighted, 8, &[]),
            Turn::Behind { ahead: 1 }
        );
    }

    #[test]
    fn priority_comes_before_the_share_and_unknown_owners_go_last() {
        let equal = shares(&[("*", 4)]);
        let mut line = vec![
            waiter(Some("uid:1"), 10, 1),
            Waiter {
                priority: 5,
                ..waiter(Some("uid:1"), 30, 1)
            },
            waiter(None, 5, 1),
            Waiter {
                me: true,
                ..waiter(Some("uid:2"), 40, 1)
            },
        ];
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 3)], &equal, 4, &[]),
            Turn::Behind { ahead: 1 },
            "the higher priority stands first, whatever its owner uses; the entry without an \
             owner stands last"
        );
        let order: Vec<u64> = line.iter().map(|w| w.start_ms).collect();
        assert_eq!(order, [30, 40, 10, 5]);
    }

    #[test]
    fn a_place_out_of_room_stands_in_nobody_elses_way_but_holds_its_owners_later_ones() {
        let s = shares(&[("uid:1", 3), ("*", 4)]);
        // uid:1 holds 2 of 3; its first place weighs 2: it does not fit.
        let mut line = vec![
            waiter(Some("uid:1"), 10, 2),
            waiter(Some("uid:1"), 20, 1),
            Waiter {
                me: true,
                ..waiter(Some("uid:2"), 30, 1)
            },
        ];
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 2)], &s, 8, &[]),
            Turn::Go,
            "neither of uid:1's places stands before uid:2"
        );
        line.iter_mut().for_each(|w| w.me = w.start_ms == 20);
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 2)], &s, 8, &[]),
            Turn::Behind { ahead: 2 },
            "uid:1's light place waits behind its heavy one (and behind uid:2, which uses less \
             of its share)"
        );
        line.iter_mut().for_each(|w| w.me = w.start_ms == 10);
        assert_eq!(
            turn_of(&mut line, &[("uid:1", 2)], &s, 8, &[]),
            Turn::ShareUsed
        );
    }

    #[test]
    fn dead_places_stand_in_nobodys_way() {
        let s = shares(&[("*", 4)]);
        let mut line = vec![
            waiter(Some("uid:1"), 10, 1),
            waiter(None, 20, 1),
            Waiter {
                me: true,
                ..waiter(Some("uid:2"), 30, 1)
            },
        ];
        assert_eq!(turn_of(&mut line, &[], &s, 4, &[10]), Turn::Go);
        assert_eq!(
            turn_of(&mut line, &[], &s, 4, &[]),
            Turn::Behind { ahead: 1 },
            "uid:1 first; the place without an owner stands after uid:2"
        );
    }

    #[test]
    fn an_entry_stands_before_a_take_of_the_same_start() {
        let s = shares(&[("*", 4)]);
        let mut line = vec![
            waiter(Some("uid:1"), 10, 1),
            Waiter {
                me: true,
                token: String::new(),
                ..waiter(Some("uid:1"), 10, 1)
            },
        ];
        assert_eq!(
            turn_of(&mut line, &[], &s, 4, &[]),
            Turn::Behind { ahead: 1 }
        );
    }
}
