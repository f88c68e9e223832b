//! What keeps a slot from being taken now, as typed data a caller can render.

use crate::stop::Stop;
use worklane_lease::Refusal;

/// What keeps a slot from being taken now.
#[derive(Debug, Clone, PartialEq)]
pub enum Blocker {
    /// An emergency STOP is in force.
    Stop(Stop),
    /// An update drain is in force.
    Drain(crate::drain::Drain),
    /// The kind's cap is reached: a take of weight 1 finds every unit held.
    AtCap {
        /// Units of the kind held (live slots, each counted for its weight).
        held: u32,
        /// The cap.
        cap: u32,
    },
    /// Another full run holds the full-run lock.
    FullRunHeld(Box<Refusal>),
    /// Another process has held `slots.lock` for over 2 s (counting takes milliseconds: it
    /// may be stopped, and the machine's pool with it, until it continues or dies).
    Counting,
    /// Waiters of the kind stand in line before this place (the line, `crate::line`).
    InLine {
        /// Live entries before it (the first proved live, the rest as listed).
        ahead: u32,
        /// Units of the kind's slots held (as listed, or as counted when the line was
        /// decided under `slots.lock`).
        held: u32,
        /// The kind's cap.
        cap: u32,
    },
    /// A take of weight above 1 finds fewer units free than its weight: "at cap: 7 of 8
    /// units held, you need 2". (A take of weight 1 is [`Blocker::AtCap`].)
    NoRoom {
        /// Units of the kind held.
        held: u32,
        /// The cap.
        cap: u32,
        /// The take's weight.
        need: u32,
    },
    /// The take's owner holds its whole share, or too much of it for the take's weight.
    Share(Box<ShareUsed>),
}

/// An owner's share used up: who, how much of how much, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareUsed {
    /// The owner, as records name it (`uid:1001`, `group:ci`, `owner:nightly`).
    pub owner: String,
    /// Units it holds.
    pub held: u32,
    /// Its share (the most units it may hold at once).
    pub share: u32,
    /// The take's weight.
    pub need: u32,
    /// What it holds: its live slots, by name.
    pub holdings: Vec<Holding>,
}

/// One live slot of an owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The slot's file name (`agent-3.lock`).
    pub slot: String,
    /// The units it counts for.
    pub units: u32,
    /// Its holder's pid, as its record names it.
    pub pid: Option<u32>,
    /// Its holder, in its own words (the record's `owner`: `worklane run --owner`, or the
    /// command's name).
    pub holder: Option<String>,
}

/// An owner as a person reads it: `uid 1001`, `group ci`, `owner nightly`.
#[must_use]
pub fn owner_words(owner: &str) -> String {
    owner.replacen(':', " ", 1)
}

impl Blocker {
    /// Whether this is a refusal by an operator (STOP or drain) rather than contention.
    #[must_use]
    pub fn is_operator_refusal(&self) -> bool {
        matches!(self, Blocker::Stop(_) | Blocker::Drain(_))
    }

    /// Its name, as the journal says it: `stop`, `drain`, `at-cap`, `full-run-held`,
    /// `counting`, `in-line`, `no-room` or `share`.
    #[must_use]
    pub fn label(&self) -> &'static str {
        match self {
            Blocker::Stop(_) => "stop",
            Blocker::Drain(_) => "drain",
            Blocker::AtCap { .. } => "at-cap",
            Blocker::FullRunHeld(_) => "full-run-held",
            Blocker::Counting => "counting",
            Blocker::InLine { .. } => "in-line",
            Blocker::NoRoom { .. } => "no-room",
            Blocker::Share(_) => "share",
        }
    }
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocker::Stop(stop) => write!(f, "{stop} (worklane resume-all lifts it)"),
            Blocker::Drain(drain) => write!(
                f,
                "an update is draining the machine: {drain} (worklane undrain ends it early)"
            ),
            Blocker::AtCap { held, cap } => write!(f, "at cap: {held} of {cap} held"),
            Blocker::FullRunHeld(refusal) => write!(f, "a full run is in progress: {refusal}"),
            Blocker::InLine { ahead, held, cap } => {
                write!(f, "{ahead} waiting in line before it, {held} of {cap} held")
            }
            Blocker::Counting => f.write_str(
                "slots.lock has been held for over 2 s (is its holder stopped? `worklane slots` \
                 names it)",
            ),
            Blocker::NoRoom { held, cap, need } => {
                write!(f, "at cap: {held} of {cap} units held, you need {need}")
            }
            Blocker::Share(used) => write!(f, "{used}"),
        }
    }
}

impl std::fmt::Display for ShareUsed {
    /// `your share (uid 1001: 4 of 4) is used`, with what it needs when that is more than
    /// what is left, and what the owner holds.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "your share ({}: {} of {}) is used",
            owner_words(&self.owner),
            self.held,
            self.share
        )?;
        if self.held < self.share {
            write!(f, ": you need {}", self.need)?;
        }
        let mut sep = " (held: ";
        for h in &self.holdings {
            write!(f, "{sep}{}", h.slot)?;
            if h.units != 1 {
                write!(f, " x{}", h.units)?;
            }
            if let Some(pid) = h.pid {
                write!(f, " pid {pid}")?;
            }
            sep = ", ";
        }
        if !self.holdings.is_empty() {
            f.write_str(")")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_units_and_the_share_are_said_as_the_issue_spells_them() {
        assert_eq!(
            Blocker::NoRoom {
                held: 7,
                cap: 8,
                need: 2
            }
            .to_string(),
            "at cap: 7 of 8 units held, you need 2"
        );
        let used = ShareUsed {
            owner: "uid:1001".into(),
            held: 4,
            share: 4,
            need: 1,
            holdings: Vec::new(),
        };
        assert_eq!(
            Blocker::Share(Box::new(used.clone())).to_string(),
            "your share (uid 1001: 4 of 4) is used"
        );
        let partly = ShareUsed {
            held: 3,
            need: 2,
            holdings: vec![
                Holding {
                    slot: "agent-0.lock".into(),
                    units: 2,
                    pid: Some(42),
                    holder: Some("build".into()),
                },
                Holding {
                    slot: "agent-3.lock".into(),
                    units: 1,
                    pid: None,
                    holder: None,
                },
            ],
            ..used
        };
        assert_eq!(
            partly.to_string(),
            "your share (uid 1001: 3 of 4) is used: you need 2 (held: agent-0.lock x2 pid 42, \
             agent-3.lock)"
        );
        assert_eq!(owner_words("group:ci"), "group ci");
        assert_eq!(owner_words("owner:a:b"), "owner a:b");
    }
}
