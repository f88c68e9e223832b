//! The answers of `worklane why`: which of the four permission questions blocks work now.
//!
//! The four stay separate: resource admission (slots, STOP, drain: [`admission`]), provider
//! quota (the API budget: [`quota`]), task ownership (locks and role leases: [`ownership`])
//! and release authority, which worklane never decides ([`Answer::outside`]). Nothing is
//! taken, waited for or written: every answer is read as the real step would read it.

use worklane_admission::{DrainState, Snapshot};
use worklane_budget::{CredentialKey, Ledger, Peek, WaitWhy};
use worklane_lease::rfc3339_ms;
use worklane_slotfile::SlotDir;

/// What is asked of resource admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An agent slot.
    Agent,
    /// A test-run slot.
    Test,
    /// The full-run lock.
    FullRun,
    /// A build's job slot.
    Job,
}

/// What blocks: the kinds of refusal a take would meet, each with its exit code in the CLI
/// (PROTOCOL.md's table of exit codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Blocker {
    /// STOP or a drain is in force (69).
    Stopped,
    /// What must answer does not, or cannot admit anything (69): an etcd that does not
    /// answer, a fleet pool without a cap.
    Unavailable,
    /// A file that fails every take of the kind (71).
    Broken,
    /// Held, at the cap, a share used, waiters ahead, no calls left (75).
    Busy,
    /// The config in force cannot be used (78).
    Config,
    /// The question names something that cannot be asked about (64).
    BadQuestion,
}

/// One question's answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// What was asked, e.g. "an agent slot".
    pub asked: String,
    /// Whether it blocks, and how.
    pub state: State,
    /// The answer in words.
    pub why: String,
}

/// Where a question stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not asked: nothing to check it against.
    NotAsked,
    /// A question worklane never answers (release authority).
    Outside,
    /// Nothing blocks.
    Clear,
    /// Blocked.
    Blocked(Blocker),
}

impl Answer {
    /// A question not asked, and why.
    pub fn not_asked(asked: &str, why: impl Into<String>) -> Answer {
        Answer {
            asked: asked.to_owned(),
            state: State::NotAsked,
            why: why.into(),
        }
    }

    /// Nothing blocks.
    pub fn clear(asked: impl Into<String>, why: impl Into<String>) -> Answer {
        Answer {
            asked: asked.into(),
            state: State::Clear,
            why: why.into(),
        }
    }

    /// `by` blocks.
    pub fn blocked(asked: impl Into<String>, why: impl Into<String>, by: Blocker) -> Answer {
        Answer {
            asked: asked.into(),
            state: State::Blocked(by),
            why: why.into(),
        }
    }

    /// A question worklane never answers.
    pub fn outside(why: impl Into<String>) -> Answer {
        Answer {
            state: State::Outside,
            ..Answer::not_asked("", why)
        }
    }

    /// Whether it blocks (`None` when it was not asked or is not worklane's to decide).
    pub fn blocks(&self) -> Option<bool> {
        match self.state {
            State::NotAsked | State::Outside => None,
            State::Clear => Some(false),
            State::Blocked(_) => Some(true),
        }
    }

    /// Its state in a word, as `worklane why` prints it.
    pub fn word(&self) -> &'static str {
        match self.state {
            State::Outside => "not worklane's to decide",
            State::NotAsked => "not asked",
            State::Clear => "clear",
            State::Blocked(_) => "BLOCKED",
        }
    }
}

/// Why an ownership question could not be answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The name cannot be a file of the slot directory.
    #[error("{name:?} cannot be a file of the slot directory")]
    Name {
        /// The name asked about.
        name: String,
        /// Why.
        #[source]
        source: worklane_slotfile::name::Error,
    },
    /// Its guard could not be probed.
    #[error("cannot probe the guard of {name}")]
    Probe {
        /// The lock file's name.
        name: String,
        /// Why.
        #[source]
        source: worklane_guard::acquire::Error,
    },
}

/// Resource admission: would a take of `kind` for `ask` start now, as the take would read
/// `snapshot` (STOP, a drain, a file that fails every take of the kind, the config, the
/// owner's share, the cap, and the line of waiters ahead).
pub fn admission(kind: Kind, snapshot: &Snapshot, ask: &worklane_admission::Ask) -> Answer {
    let asked = match kind {
        Kind::Agent => "an agent slot",
        Kind::Test => "a test-run slot",
        Kind::FullRun => "the full-run lock",
        Kind::Job => "a build's job slot",
    };
    if let Some(stop) = &snapshot.stop {
        return Answer::blocked(
            asked,
            format!("{stop} (`worklane resume-all` lifts it)"),
            Blocker::Stopped,
        );
    }
    if let DrainState::InForce(drain) = &snapshot.drain {
        return Answer::blocked(
            asked,
            format!("drain in force: {drain} (`worklane undrain` ends it)"),
            Blocker::Stopped,
        );
    }
    let held = |k: &str| {
        snapshot
            .slots
            .iter()
            .filter(|s| s.kind == k && s.state.is_held())
            .count()
    };
    // A stray file where the guard of slots.lock or full-run.lock belongs fails every take
    // of that kind until it is removed.
    let blocking = |what: &str| {
        snapshot
            .problems
            .iter()
            .find(|p| p.blocks.is_some_and(|b| b.contains(what)))
    };
    let broken = match kind {
        Kind::Agent => blocking("agent"),
        Kind::Test => blocking("test-run"),
        Kind::FullRun => blocking("full run"),
        Kind::Job => blocking("job"),
    };
    if let Some(problem) = broken {
        return Answer::blocked(
            asked,
            format!("{}: {}; fix: {}", problem.name, problem.what, problem.fix),
            Blocker::Broken,
        );
    }
    // Every take of the CLI reads the config first (the full run's too), and is refused while
    // it cannot be used.
    let caps = match &snapshot.config {
        Ok(caps) => caps,
        Err(e) => {
            let problem = crate::config_problem::Problem::of(e);
            return Answer::blocked(
                asked,
                format!(
                    "the config cannot be used, so every take is refused: {}; fix: {}",
                    problem.what, problem.fix
                ),
                Blocker::Config,
            );
        }
    };
    let (label, cap) = match kind {
        Kind::Agent => ("agent", caps.max_agents),
        Kind::Test => ("test", caps.max_test_runs),
        Kind::Job => ("job", caps.max_jobs),
        Kind::FullRun => {
            return if held("full-run") > 0 {
                Answer::blocked(asked, "another full run holds it", Blocker::Busy)
            } else {
                Answer::clear(asked, "no full run is live")
            };
        }
    };
    let n = snapshot.held_units(label) as usize;
    let need = ask.weight() as usize;
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let line = in_line(snapshot, label);
    if kind == Kind::Agent
        && let Some(used) = share_used(snapshot, caps, ask)
    {
        return Answer::blocked(asked, used, Blocker::Busy);
    }
    if n + need > cap {
        let what = if need == 1 {
            format!("at cap: {n} of {cap} held")
        } else {
            format!("at cap: {n} of {cap} units held, you need {need}")
        };
        Answer::blocked(
            asked,
            format!("{what}{line} (`worklane slots` shows who)"),
            Blocker::Busy,
        )
    } else if !line.is_empty() {
        // A slot is free but waiters stand in line: a new run takes its turn after them.
        Answer::blocked(
            asked,
            format!("{n} of {cap} held{line}: a new run waits its turn"),
            Blocker::Busy,
        )
    } else {
        Answer::clear(asked, format!("{n} of {cap} held"))
    }
}

/// "your share (uid 1001: 4 of 4) is used" with the owner's holdings, when the share the
/// asker counts against has no room for its weight.
fn share_used(
    snapshot: &Snapshot,
    caps: &worklane_slotfile::Config,
    ask: &worklane_admission::Ask,
) -> Option<String> {
    let share = worklane_admission::share::resolve(&caps.shares, ask.owner());
    let ceiling = share.ceiling?;
    let owner = share.owner.to_string();
    let holdings = snapshot.holdings(&owner);
    let mine: u32 = holdings.iter().map(|h| h.units).sum();
    if mine.saturating_add(ask.weight()) <= ceiling {
        return None;
    }
    let held: Vec<String> = holdings
        .iter()
        .map(|h| {
            format!(
                "{} ({} unit{}, pid {}, {})",
                h.slot,
                h.units,
                if h.units == 1 { "" } else { "s" },
                h.pid.map_or("-".to_owned(), |p| p.to_string()),
                h.holder.as_deref().unwrap_or("-")
            )
        })
        .collect();
    let need = if ask.weight() == 1 {
        String::new()
    } else {
        format!(", you need {}", ask.weight())
    };
    Some(format!(
        "your share ({}: {mine} of {ceiling}) is used{need}; held: {}",
        worklane_admission::owner_words(&owner),
        if held.is_empty() {
            "nothing live".to_owned()
        } else {
            held.join(", ")
        }
    ))
}

/// `; 3 waiting in line, first pid 42 (owner) since T` for the live line of `label`, or "".
fn in_line(snapshot: &Snapshot, label: &str) -> String {
    let live: Vec<_> = snapshot
        .line
        .iter()
        .filter(|v| v.live && v.entry.kind == label)
        .collect();
    let Some(first) = live.first() else {
        return String::new();
    };
    let r = first.record.as_ref();
    format!(
        "; {} waiting in line, first pid {} ({}) at priority {} since {}",
        live.len(),
        r.and_then(|r| r.pid())
            .map_or("-".to_owned(), |p| p.to_string()),
        r.and_then(|r| r.owner.clone())
            .unwrap_or_else(|| "-".to_owned()),
        first.entry.priority,
        rfc3339_ms(first.entry.start_ms)
    )
}

/// What provider quota is asked about: GitHub's `resource`, or a model provider's requests.
#[derive(Debug, Clone, Copy)]
pub enum Calls<'a> {
    /// A GitHub API resource (`core`, `graphql`, `search`...).
    GitHub {
        /// The resource.
        resource: &'a str,
    },
    /// A model provider's requests.
    Model {
        /// The provider, as resolved from its name and the config.
        provider: &'a worklane_budget::Provider,
    },
}

/// Provider quota: would a call of `calls` with the credential `key` go now, as a take would
/// read its budget in `ledger` (taking nothing). `asked` names the calls in the answer.
pub fn quota(ledger: &Ledger, calls: Calls<'_>, key: &CredentialKey, asked: String) -> Answer {
    let (peek, unit, paused) = match calls {
        Calls::GitHub { resource } => (
            ledger.peek(key, resource),
            "",
            "paused by a secondary limit",
        ),
        Calls::Model { provider } => (
            ledger.peek_model(provider, key, worklane_budget::Need::default()),
            " requests",
            "paused after the provider's 429 (or 529)",
        ),
    };
    match peek {
        Peek::Go { left: Some(left) } => {
            Answer::clear(asked, format!("{left}{unit} left in the window"))
        }
        Peek::Go { left: None } => Answer::clear(asked, "no window known: calls go"),
        // Not a blocker (the call would go), but never a silent "clear".
        Peek::Unaccounted(trouble) => Answer::clear(
            asked,
            format!("calls go, unaccounted: {}", worklane_stdx::chain(&trouble)),
        ),
        Peek::Wait {
            until,
            why: WaitWhy::Spent,
        } => Answer::blocked(
            asked,
            format!("no calls left until {} (rate_limited)", rfc3339_ms(until)),
            Blocker::Busy,
        ),
        Peek::Wait {
            until,
            why: WaitWhy::Paused,
        } => Answer::blocked(
            asked,
            format!(
                "{paused} until {} (secondary_rate_limited)",
                rfc3339_ms(until)
            ),
            Blocker::Busy,
        ),
    }
}

/// Task ownership: who holds the lock file `name` (`role-<role>.lease` for a role) of `dir`,
/// as `snapshot` judged it, or whether its guard is held with no record to name the holder.
pub fn ownership(snapshot: &Snapshot, dir: &SlotDir, name: &str) -> Result<Answer, Error> {
    let name = name.to_owned();
    if let Err(source) = dir.file(&name) {
        return Err(Error::Name { name, source });
    }
    let Some(view) = snapshot.slots.iter().find(|s| s.name == name) else {
        // Not a lock file the snapshot lists (or absent): its guard may still be held, by a
        // holder between writing records or by a tool of its own. Probed only if it exists.
        let guard = worklane_guard::guard_path(dir.path(), &name);
        if guard.symlink_metadata().is_ok()
            && worklane_guard::is_held(dir, dir.path(), &name).map_err(|source| Error::Probe {
                name: name.clone(),
                source,
            })?
        {
            return Ok(Answer::blocked(
                &name,
                "its guard is held (no record to name the holder)",
                Blocker::Busy,
            ));
        }
        return Ok(Answer::clear(name, "nobody holds it"));
    };
    if !view.state.is_held() {
        return Ok(Answer::clear(name, "its last holder is gone: free to take"));
    }
    let r = view.record.as_ref();
    let pid = r
        .and_then(|r| r.pid())
        .map_or_else(|| "an unknown pid".to_owned(), |p| format!("pid {p}"));
    let owner = r
        .and_then(|r| r.owner.clone())
        .unwrap_or_else(|| "an unknown owner".to_owned());
    Ok(Answer::blocked(
        &name,
        format!("held by {pid} ({owner})"),
        Blocker::Busy,
    ))
}
