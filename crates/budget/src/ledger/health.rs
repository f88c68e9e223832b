//! The health view: the newest readable budget states, read without any lock, credentials
//! numbered and never named by their key, and the state files it could not show, with why.

use super::{HEALTH_SHOWN, HEALTH_TRIED, Ledger};
use crate::state::State;
use worklane_slotfile::SlotPath;

impl Ledger {
    /// The health view: without taking any lock, the newest [`HEALTH_SHOWN`] readable state
    /// files (at most [`HEALTH_TRIED`] tried), numbered from 1, newest first. Credentials are
    /// never named by their key here. Each shows what a take would count now: the pause only
    /// while in force, and only windows that have not ended (within the bounds of a read).
    pub fn health(&self) -> Result<Vec<CredentialView>, worklane_slotfile::open::Error> {
        Ok(self.health_report()?.views)
    }

    /// [`Ledger::health`], with the state files it could not show and why (a directory, FIFO
    /// or link at a state's name, a file this user cannot read, one over 64 KiB, one that is
    /// not a state): at most [`HEALTH_TRIED`] of them. None of them stops a take (PROTOCOL.md
    /// section 13), but a view that left them out without a word would hide a budget.
    pub fn health_report(&self) -> Result<Health, worklane_slotfile::open::Error> {
        let now = self.clock.now_ms();
        let mut unshown = Vec::new();
        let mut files: Vec<(u64, SlotPath)> = Vec::new();
        for path in self.dir.list()? {
            if crate::key::parse_state_name(path.name()).is_none() {
                continue;
            }
            match path.modified_ms() {
                Ok(Some(at)) => files.push((at, path)),
                // Removed since the listing.
                Ok(None) => {}
                Err(source) => unshown.push(UnshownState {
                    file: path.name().to_owned(),
                    why: StateProblem::Unreadable(source),
                }),
            }
        }
        files.sort_by_key(|f| std::cmp::Reverse(f.0));
        let mut states = Vec::new();
        for (updated_ms, path) in files.into_iter().take(HEALTH_TRIED) {
            if states.len() == HEALTH_SHOWN {
                break;
            }
            match path.read() {
                Ok(Some(bytes)) => match State::parse(&bytes) {
                    Ok(state) => states.push((
                        updated_ms,
                        crate::key::parse_state_name(path.name()).map_or_else(
                            || ("github".to_owned(), String::new()),
                            |(p, k)| (p, k.as_str().to_owned()),
                        ),
                        state,
                    )),
                    Err(source) => unshown.push(UnshownState {
                        file: path.name().to_owned(),
                        why: StateProblem::NotAState(source),
                    }),
                },
                Ok(None) => {}
                Err(source) => unshown.push(UnshownState {
                    file: path.name().to_owned(),
                    why: StateProblem::Unreadable(source),
                }),
            }
        }
        unshown.truncate(HEALTH_TRIED);
        let views = states
            .into_iter()
            .enumerate()
            .map(|(i, (updated_ms, (provider, key), mut state))| {
                if provider != "github" {
                    // As the next take will see it: a model provider's ended window carried
                    // over.
                    state.carry(now);
                }
                (i, updated_ms, provider, key, state)
            })
            .map(|(i, updated_ms, provider, key, state)| CredentialView {
                number: i + 1,
                key,
                provider,
                updated_ms,
                paused_until: state.pause(now),
                in_flight: state.in_flight.len(),
                waiting: state.waiting_at(now),
                resources: state
                    .resources
                    .clone()
                    .into_iter()
                    .filter(|(name, _)| state.window(name, now).is_some())
                    .map(|(name, w)| ResourceView {
                        in_flight: state.in_flight_units(&name),
                        assumed: w.assumed,
                        left: w.left(),
                        name,
                        limit: w.limit,
                        remaining: w.remaining,
                        reset_at: w.reset_at,
                        granted: w.granted,
                        by_consumer: w.by_consumer.into_iter().collect(),
                    })
                    .collect(),
            })
            .collect();
        Ok(Health { views, unshown })
    }
}

/// The health view and the state files it could not show ([`Ledger::health_report`]).
#[derive(Debug)]
pub struct Health {
    /// The credentials shown, newest first.
    pub views: Vec<CredentialView>,
    /// The state files left out, and why.
    pub unshown: Vec<UnshownState>,
}

/// A budget state file the health view could not show.
#[derive(Debug)]
pub struct UnshownState {
    /// Its file name in the slot directory (`github-budget-<key>.json`).
    pub file: String,
    /// Why it was left out.
    pub why: StateProblem,
}

/// Why a budget state file was left out of the health view. A take treats the second kind
/// (and the first, but for a file this user may not read) as no state: it starts afresh and
/// replaces it; a state this user cannot read it neither counts against nor replaces.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateProblem {
    /// It cannot be read as a state file: not a regular file (a directory, FIFO or link),
    /// not readable by this user, or over 64 KiB.
    #[error("cannot read the budget state")]
    Unreadable(#[source] worklane_slotfile::read::Error),
    /// It was read but is not a budget state.
    #[error("the file is not a budget state")]
    NotAState(#[source] crate::state::Unreadable),
}

/// One credential in the health view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialView {
    /// Its number in this view (1 is the most recently updated).
    pub number: usize,
    /// Its key: 16 hex digits, the hash its budget files and journal events are named by
    /// (never anything of the token); empty when the view does not know it (a fleet's).
    pub key: String,
    /// The provider whose budget it is (`github`, `anthropic`, `openai`, or a configured
    /// name).
    pub provider: String,
    /// When its state file last changed (ms).
    pub updated_ms: u64,
    /// The pause in force, if any (ms).
    pub paused_until: Option<u64>,
    /// A model provider's calls in flight: taken, their responses not yet recorded.
    pub in_flight: usize,
    /// Calls waiting for this budget in a proxy (as its proxies last said, within 5 s).
    pub waiting: u64,
    /// Its resources' windows that have not ended.
    pub resources: Vec<ResourceView>,
}

/// One resource's window in the health view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceView {
    /// The resource (`core`, `graphql`, ...).
    pub name: String,
    /// `X-RateLimit-Limit`, if seen.
    pub limit: Option<u64>,
    /// The remaining seen.
    pub remaining: u64,
    /// Calls left: remaining less those granted since.
    pub left: u64,
    /// When the window resets (ms).
    pub reset_at: u64,
    /// Calls granted since the window was seen.
    pub granted: u64,
    /// Calls granted in the window, by consumer (unusual names as `(other)`).
    pub by_consumer: Vec<(String, u64)>,
    /// A model provider's: the units the calls in flight hold of this dimension.
    pub in_flight: u64,
    /// Not seen: carried over from the window before, which ended (PROTOCOL.md 13.1).
    pub assumed: bool,
}
