//! The answer to each of the four questions, read as the real step would read it.

use crate::cli::{KindArg, WhyArgs};
use crate::exit::{self, Failure};
use crate::json;
use worklane_admission::{DrainState, Snapshot};
use worklane_budget::{CredentialKey, Ledger, Peek, WaitWhy};
use worklane_lease::rfc3339_ms;
use worklane_slotfile::SlotDir;

/// One question's answer.
pub(super) struct Answer {
    /// What was asked, e.g. "agent slot".
    pub(super) asked: String,
    /// `None` when the question was not asked (nothing to check it against).
    pub(super) blocks: Option<bool>,
    /// The answer in words.
    pub(super) why: String,
    /// The exit code this blocker stands for.
    pub(super) code: u8,
    /// A question worklane never answers (release authority).
    pub(super) outside: bool,
}

impl Answer {
    pub(super) fn not_asked(asked: &str, why: impl Into<String>) -> Answer {
        Answer {
            asked: asked.to_owned(),
            blocks: None,
            why: why.into(),
            code: 0,
            outside: false,
        }
    }

    pub(super) fn clear(asked: impl Into<String>, why: impl Into<String>) -> Answer {
        Answer {
            asked: asked.into(),
            blocks: Some(false),
            why: why.into(),
            code: 0,
            outside: false,
        }
    }

    pub(super) fn blocked(asked: impl Into<String>, why: impl Into<String>, code: u8) -> Answer {
        Answer {
            asked: asked.into(),
            blocks: Some(true),
            why: why.into(),
            code,
            outside: false,
        }
    }

    pub(super) fn outside(why: impl Into<String>) -> Answer {
        Answer {
            outside: true,
            ..Answer::not_asked("", why)
        }
    }

    pub(super) fn json(&self) -> json::Answer {
        json::Answer {
            asked: self.asked.clone(),
            blocks: self.blocks,
            decided_here: !self.outside,
            why: self.why.clone(),
        }
    }

    pub(super) fn word(&self) -> &'static str {
        match self.blocks {
            None if self.outside => "not worklane's to decide",
            None => "not asked",
            Some(false) => "clear",
            Some(true) => "BLOCKED",
        }
    }
}

/// Resource admission past this host (`--fleet`): when the host would admit, the fleet pool
/// is asked too, and blocks when it is full, has no cap or does not answer.
pub(super) fn with_fleet(host: Answer, args: &WhyArgs) -> Answer {
    if host.blocks == Some(true) {
        return host;
    }
    match crate::fleet::question(&args.fleet) {
        None => host,
        Some(q) if q.blocks => Answer::blocked(&host.asked, q.why, q.code),
        Some(q) => Answer::clear(host.asked, format!("{}; {}", host.why, q.why)),
    }
}

pub(super) fn admission(
    kind: KindArg,
    snapshot: &Snapshot,
    ask: &worklane_admission::Ask,
) -> Answer {
    let asked = match kind {
        KindArg::Agent => "an agent slot",
        KindArg::Test => "a test-run slot",
        KindArg::FullRun => "the full-run lock",
        KindArg::Job => "a build's job slot",
    };
    if let Some(stop) = &snapshot.stop {
        return Answer::blocked(
            asked,
            format!("{stop} (`worklane resume-all` lifts it)"),
            exit::UNAVAILABLE,
        );
    }
    if let DrainState::InForce(drain) = &snapshot.drain {
        return Answer::blocked(
            asked,
            format!("drain in force: {drain} (`worklane undrain` ends it)"),
            exit::UNAVAILABLE,
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
        KindArg::Agent => blocking("agent"),
        KindArg::Test => blocking("test-run"),
        KindArg::FullRun => blocking("full run"),
        KindArg::Job => blocking("job"),
    };
    if let Some(problem) = broken {
        return Answer::blocked(
            asked,
            format!("{}: {}; fix: {}", problem.name, problem.what, problem.fix),
            exit::OS_ERROR,
        );
    }
    // Every take of the CLI reads the config first (the full run's too), and is refused while
    // it cannot be used.
    let caps = match &snapshot.config {
        Ok(caps) => caps,
        Err(e) => {
            let problem = crate::shared::config_problem::Problem::of(e);
            return Answer::blocked(
                asked,
                format!(
                    "the config cannot be used, so every take is refused: {}; fix: {}",
                    problem.what, problem.fix
                ),
                exit::CONFIG,
            );
        }
    };
    let (label, cap) = match kind {
        KindArg::Agent => ("agent", caps.max_agents),
        KindArg::Test => ("test", caps.max_test_runs),
        KindArg::Job => ("job", caps.max_jobs),
        KindArg::FullRun => {
            return if held("full-run") > 0 {
                Answer::blocked(asked, "another full run holds it", exit::TEMP_FAIL)
            } else {
                Answer::clear(asked, "no full run is live")
            };
        }
    };
    let _ = held;
    let n = snapshot.held_units(label) as usize;
    let need = ask.weight() as usize;
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let line = in_line(snapshot, label);
    if kind == KindArg::Agent
        && let Some(used) = share_used(snapshot, caps, ask)
    {
        return Answer::blocked(asked, used, exit::TEMP_FAIL);
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
            exit::TEMP_FAIL,
        )
    } else if !line.is_empty() {
        // A slot is free but waiters stand in line: a new run takes its turn after them.
        Answer::blocked(
            asked,
            format!("{n} of {cap} held{line}: a new run waits its turn"),
            exit::TEMP_FAIL,
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

pub(super) fn quota(args: &WhyArgs, ledger: &Ledger) -> Answer {
    let github = args.provider == "github";
    let asked = if github {
        format!("{} calls", args.resource)
    } else {
        format!("{} calls", args.provider)
    };
    let var = crate::shared::budget::token_env(&args.provider, args.token_env.as_deref())
        .unwrap_or_default();
    let token = std::env::var(&var).unwrap_or_default();
    if token.is_empty() {
        return Answer::not_asked(
            &asked,
            format!("no API token in ${var} (name its variable with --token-env)"),
        );
    }
    let key = CredentialKey::of_token(&token);
    let peek = if github {
        ledger.peek(&key, &args.resource)
    } else {
        match crate::shared::budget::provider(&args.provider) {
            Ok(provider) => ledger.peek_model(&provider, &key, worklane_budget::Need::default()),
            Err(failure) => return Answer::not_asked(&asked, failure.message),
        }
    };
    let unit = if github { "" } else { " requests" };
    let paused = if github {
        "paused by a secondary limit"
    } else {
        "paused after the provider's 429 (or 529)"
    };
    match peek {
        Peek::Go { left: Some(left) } => {
            Answer::clear(asked, format!("{left}{unit} left in the window"))
        }
        Peek::Go { left: None } => Answer::clear(asked, "no window known: calls go"),
        // Not a blocker (the call would go), but never a silent "clear".
        Peek::Unaccounted(trouble) => Answer::clear(
            asked,
            format!("calls go, unaccounted: {}", crate::exit::chain(&trouble)),
        ),
        Peek::Wait {
            until,
            why: WaitWhy::Spent,
        } => Answer::blocked(
            asked,
            format!("no calls left until {} (rate_limited)", rfc3339_ms(until)),
            exit::TEMP_FAIL,
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
            exit::TEMP_FAIL,
        ),
    }
}

pub(super) fn ownership(
    args: &WhyArgs,
    snapshot: &Snapshot,
    dir: &SlotDir,
) -> Result<Answer, Failure> {
    let name = match (&args.role, &args.lock) {
        (Some(role), _) => format!("role-{role}.lease"),
        (None, Some(lock)) => lock.clone(),
        (None, None) => {
            return Ok(Answer::not_asked(
                "",
                "give --role ROLE or --lock NAME to ask who owns it",
            ));
        }
    };
    if let Err(e) = dir.file(&name) {
        return Err(Failure::new(
            exit::USAGE,
            format!("{name:?} cannot be a file of the slot directory: {e}"),
        ));
    }
    let Some(view) = snapshot.slots.iter().find(|s| s.name == name) else {
        // Not a lock file the snapshot lists (or absent): its guard may still be held, by a
        // holder between writing records or by a tool of its own. Probed only if it exists.
        let guard = worklane_guard::guard_path(dir.path(), &name);
        if guard.symlink_metadata().is_ok()
            && worklane_guard::is_held(dir, dir.path(), &name)
                .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?
        {
            return Ok(Answer::blocked(
                &name,
                "its guard is held (no record to name the holder)",
                exit::TEMP_FAIL,
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
        exit::TEMP_FAIL,
    ))
}
