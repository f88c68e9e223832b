//! The config's `shares`: owners' ceilings of agent units, e.g.
//! `{"uid:1001": 4, "group:ci": 2, "owner:nightly": 1, "*": 2}`.
//!
//! An owner is named by its uid (`uid:<number>`), a group (`group:<name>` or `group:<gid>`),
//! the tag a run gives (`owner:<tag>`), or `*` (every owner not otherwise named, each alone).
//! Which one a take counts against, and what the line does with them, is
//! `worklane-admission`'s; this module only reads and checks them.

use super::Error;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The longest group name or owner tag a share may name, in bytes (a tag is written into
/// every record and line entry of its owner).
pub const MAX_OWNER_NAME: usize = 128;

/// An owner a share names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ShareKey {
    /// `uid:<number>`: the processes of one effective uid.
    Uid(u32),
    /// `group:<name or gid>`: the processes of one group (effective or supplementary). A name
    /// made of digits only is a gid.
    Group(String),
    /// `owner:<tag>`: the runs that give this tag (`worklane run --owner TAG`).
    Tag(String),
    /// `*`: every owner that no other key names, each with a ceiling of its own.
    Anyone,
}

impl ShareKey {
    /// Reads an owner as the config and records spell it; `None` for any other text.
    ///
    /// `uid:` takes a plain decimal number (no sign, no leading zero) up to 4294967295;
    /// `group:` and `owner:` a non-empty name of at most [`MAX_OWNER_NAME`] bytes without
    /// control characters or white space.
    #[must_use]
    pub fn parse(text: &str) -> Option<ShareKey> {
        if text == "*" {
            return Some(ShareKey::Anyone);
        }
        let (form, name) = text.split_once(':')?;
        let plain_name = !name.is_empty()
            && name.len() <= MAX_OWNER_NAME
            && !name.chars().any(|c| c.is_control() || c.is_whitespace());
        match form {
            "uid" => {
                let plain = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_digit())
                    && (name == "0" || !name.starts_with('0'));
                plain.then(|| name.parse().ok().map(ShareKey::Uid))?
            }
            // All digits is a gid, spelt as `uid:` is (no leading zero, within u32): any other
            // spelling would name the group one way in the config and another in records.
            "group" if plain_name && name.bytes().all(|b| b.is_ascii_digit()) => {
                let plain = name == "0" || !name.starts_with('0');
                plain
                    .then(|| name.parse::<u32>().ok())?
                    .map(|_| ShareKey::Group(name.to_owned()))
            }
            "group" if plain_name => Some(ShareKey::Group(name.to_owned())),
            "owner" if plain_name => Some(ShareKey::Tag(name.to_owned())),
            _ => None,
        }
    }

    /// The gid a `group:` key names by number (`group:1001`), if it does.
    #[must_use]
    pub fn gid(&self) -> Option<u32> {
        match self {
            ShareKey::Group(name) if name.bytes().all(|b| b.is_ascii_digit()) => name.parse().ok(),
            _ => None,
        }
    }
}

impl std::fmt::Display for ShareKey {
    /// As the config and records spell it: `uid:1001`, `group:ci`, `owner:nightly`, `*`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShareKey::Uid(uid) => write!(f, "uid:{uid}"),
            ShareKey::Group(name) => write!(f, "group:{name}"),
            ShareKey::Tag(tag) => write!(f, "owner:{tag}"),
            ShareKey::Anyone => f.write_str("*"),
        }
    }
}

/// The owners' shares of `max_agents`: each a ceiling of agent units its owner may hold at
/// once. Empty when the config has none (then no owner has a ceiling but the cap, and the line
/// goes by priority and arrival alone).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shares(BTreeMap<ShareKey, u32>);

impl Shares {
    /// Whether the config gives no shares.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The share `key` names, exactly (no `*`).
    #[must_use]
    pub fn named(&self, key: &ShareKey) -> Option<u32> {
        self.0.get(key).copied()
    }

    /// The ceiling of the owner `key`: its own share, else the share of `*`, else none.
    #[must_use]
    pub fn ceiling(&self, key: &ShareKey) -> Option<u32> {
        self.named(key).or_else(|| self.named(&ShareKey::Anyone))
    }

    /// Every share, in key order (uids, groups, tags, `*`).
    pub fn iter(&self) -> impl Iterator<Item = (&ShareKey, u32)> {
        self.0.iter().map(|(k, v)| (k, *v))
    }

    /// Shares from pairs (for tests and tools; the config's own are checked by
    /// [`Config::parse`](super::Config::parse)).
    #[must_use]
    pub fn of(pairs: impl IntoIterator<Item = (ShareKey, u32)>) -> Shares {
        Shares(pairs.into_iter().collect())
    }

    /// Reads the value of the config's `shares` key, checked against the cap `max_agents`.
    pub(super) fn parse(value: &Value, path: &Path, max_agents: u32) -> Result<Shares, Error> {
        let Value::Object(map) = value else {
            return Err(Error::Field {
                path: path.to_owned(),
                field: "shares",
                value: value.to_string(),
                expected: "an object of owners and whole numbers, like {\"uid:1001\": 4, \
                           \"group:ci\": 2, \"*\": 2}",
            });
        };
        let mut shares = BTreeMap::new();
        for (text, share) in map {
            let key = ShareKey::parse(text).ok_or_else(|| Error::ShareOwner {
                path: path.to_owned(),
                key: text.clone(),
            })?;
            let n = share
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| (1..=max_agents).contains(n))
                .ok_or_else(|| Error::Share {
                    path: path.to_owned(),
                    key: text.clone(),
                    value: share.to_string(),
                    max_agents,
                })?;
            // Each owner has one spelling (no leading zeros, no case folding), and a key written
            // twice is refused before (`DuplicateKey`): no two texts make one key.
            shares.insert(key, n);
        }
        Ok(Shares(shares))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_read_in_their_four_forms_and_nothing_else() {
        for (text, key) in [
            ("uid:1001", ShareKey::Uid(1001)),
            ("uid:0", ShareKey::Uid(0)),
            ("uid:4294967295", ShareKey::Uid(u32::MAX)),
            ("group:ci", ShareKey::Group("ci".into())),
            ("group:1001", ShareKey::Group("1001".into())),
            ("group:0", ShareKey::Group("0".into())),
            ("group:4294967295", ShareKey::Group("4294967295".into())),
            ("group:ci2", ShareKey::Group("ci2".into())),
            ("owner:nightly", ShareKey::Tag("nightly".into())),
            ("owner:a:b", ShareKey::Tag("a:b".into())),
            ("*", ShareKey::Anyone),
        ] {
            assert_eq!(ShareKey::parse(text).as_ref(), Some(&key), "{text}");
            assert_eq!(key.to_string(), text, "spelt back as read");
        }
        let long = format!("owner:{}", "t".repeat(MAX_OWNER_NAME + 1));
        for not in [
            "",
            "uid",
            "uid:",
            "uid:-1",
            "uid:+1",
            "uid:01",
            "uid:4294967296",
            "uid:alice",
            "group:",
            "group:01001",
            "group:4294967296",
            "owner:",
            "user:alice",
            "ci",
            "**",
            "owner:a b",
            "group:\tci",
            "Uid:1",
            "gid:3",
            &long,
        ] {
            assert_eq!(ShareKey::parse(not), None, "{not:?}");
        }
        assert_eq!(ShareKey::Group("1001".into()).gid(), Some(1001));
        assert_eq!(ShareKey::Group("ci".into()).gid(), None);
        // A number by its digits alone: Rust's parse would take a leading `+`.
        assert_eq!(ShareKey::Group("+5".into()).gid(), None);
        assert_eq!(ShareKey::Uid(3).gid(), None);
    }

    #[test]
    fn an_owner_without_a_share_of_its_own_gets_the_share_of_anyone() {
        let shares = Shares::of([(ShareKey::Uid(1), 4), (ShareKey::Anyone, 2)]);
        assert_eq!(shares.ceiling(&ShareKey::Uid(1)), Some(4));
        assert_eq!(shares.ceiling(&ShareKey::Uid(2)), Some(2));
        assert_eq!(shares.named(&ShareKey::Uid(2)), None);
        let none = Shares::of([(ShareKey::Uid(1), 4)]);
        assert_eq!(none.ceiling(&ShareKey::Uid(2)), None, "no `*`: no ceiling");
        assert!(Shares::default().is_empty());
        assert!(!shares.is_empty());
        let every: Vec<(String, u32)> = Shares::of([
            (ShareKey::Anyone, 2),
            (ShareKey::Tag("n".into()), 1),
            (ShareKey::Group("ci".into()), 3),
            (ShareKey::Uid(7), 4),
        ])
        .iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(
            every,
            [
                ("uid:7".to_owned(), 4),
                ("group:ci".to_owned(), 3),
                ("owner:n".to_owned(), 1),
                ("*".to_owned(), 2)
            ],
            "every share, in key order"
        );
    }
}
