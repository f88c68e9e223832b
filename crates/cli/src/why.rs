//! `worklane why`: which of the four permission questions blocks work now.
//!
//! The four stay separate: resource admission (slots, STOP, drain), provider quota (the API
//! budget), task ownership (locks and role leases) and release authority, which worklane never
//! decides. Nothing is taken, waited for or written: every answer is read as the real step
//! would read it (like `worklane slots`, it probes a free guard by taking it for a moment).

use crate::cli::{KindArg, WhyArgs};
use crate::exit::{self, Failure};
use crate::json;
use crate::out::outln;
use serde_json::Value;
use std::process::ExitCode;
use worklane_admission::{DrainState, Snapshot};
use worklane_budget::{CredentialKey, Ledger, Peek, WaitWhy};
use worklane_lease::rfc3339_ms;
use worklane_slotfile::SlotDir;

/// One question's answer.
struct Answer {
    /// What was asked, e.g. "agent slot".
    asked: String,
    /// `None` when the question was not asked (nothing to check it against).
    blocks: Option<bool>,
    /// The answer in words.
    why: String,
    /// The exit code this blocker stands for.
    code: u8,
    /// A question worklane never answers (release authority).
    outside: bool,
}

impl Answer {
    fn not_asked(asked: &str, why: impl Into<String>) -> Answer {
        Answer {
            asked: asked.to_owned(),
            blocks: None,
            why: why.into(),
            code: 0,
            outside: false,
        }
    }

    fn clear(asked: impl Into<String>, why: impl Into<String>) -> Answer {
        Answer {
            asked: asked.into(),
            blocks: Some(false),
            why: why.into(),
            code: 0,
            outside: false,
        }
    }

    fn blocked(asked: impl Into<String>, why: impl Into<String>, code: u8) -> Answer {
        Answer {
            asked: asked.into(),
            blocks: Some(true),
            why: why.into(),
            code,
            outside: false,
        }
    }

    fn outside(why: impl Into<String>) -> Answer {
        Answer {
            outside: true,
            ..Answer::not_asked("", why)
        }
    }

    fn json(&self) -> json::Answer {
        json::Answer {
            asked: self.asked.clone(),
            blocks: self.blocks,
            decided_here: !self.outside,
            why: self.why.clone(),
        }
    }

    fn word(&self) -> &'static str {
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
fn with_fleet(host: Answer, args: &WhyArgs) -> Answer {
    if host.blocks == Some(true) {
        return host;
    }
    match crate::fleet::question(&args.fleet) {
        None => host,
        Some(q) if q.blocks => Answer::blocked(&host.asked, q.why, q.code),
        Some(q) => Answer::clear(host.asked, format!("{}; {}", host.why, q.why)),
    }
}

fn admission(kind: KindArg, snapshot: &Snapshot) -> Answer {
    let asked = match kind {
        KindArg::Agent => "an agent slot",
        KindArg::Test => "a test-run slot",
        KindArg::FullRun => "the full-run lock",
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
            let problem = crate::config::Problem::of(e);
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
        KindArg::FullRun => {
            return if held("full-run") > 0 {
                Answer::blocked(asked, "another full run holds it", exit::TEMP_FAIL)
            } else {
                Answer::clear(asked, "no full run is live")
            };
        }
    };
    let n = held(label);
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let line = in_line(snapshot, label);
    if n >= cap {
        Answer::blocked(
            asked,
            format!("at cap: {n} of {cap} held{line} (`worklane slots` shows who)"),
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

fn quota(args: &WhyArgs, ledger: &Ledger) -> Answer {
    let asked = format!("{} calls", args.resource);
    let token = std::env::var(&args.token_env).unwrap_or_default();
    if token.is_empty() {
        return Answer::not_asked(
            &asked,
            format!(
                "no API token in ${} (name its variable with --token-env)",
                args.token_env
            ),
        );
    }
    let key = CredentialKey::of_token(&token);
    match ledger.peek(&key, &args.resource) {
        Peek::Go { left: Some(left) } => Answer::clear(asked, format!("{left} left in the window")),
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
                "paused by a secondary limit until {} (secondary_rate_limited)",
                rfc3339_ms(until)
            ),
            exit::TEMP_FAIL,
        ),
    }
}

fn ownership(args: &WhyArgs, snapshot: &Snapshot, dir: &SlotDir) -> Result<Answer, Failure> {
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

pub(crate) fn why(args: &WhyArgs) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let snapshot = pool.snapshot()?;
    let ledger = Ledger::new(pool.dir().clone());
    let answers = [
        (
            "resource_admission",
            with_fleet(admission(args.kind, &snapshot), args),
        ),
        ("provider_quota", quota(args, &ledger)),
        ("task_ownership", ownership(args, &snapshot, pool.dir())?),
        (
            "release_authority",
            Answer::outside(
                "no slot, lease or budget implies the right to merge, deploy or publish: ask \
                 your release process",
            ),
        ),
    ];
    let first = answers.iter().find(|(_, a)| a.blocks == Some(true));
    let around = crate::slots::Around::of(&pool, &snapshot);
    let problems = around.problems(&snapshot);
    let queued = queued_attempts(&pool, &around.queue, &snapshot);
    if args.json {
        let [admission, quota, ownership, release] = &answers;
        outln!(
            "{}",
            json::line(&json::Why {
                version: json::VERSION,
                resource_admission: admission.1.json(),
                provider_quota: quota.1.json(),
                task_ownership: ownership.1.json(),
                release_authority: release.1.json(),
                blocked_by: first.map(|(key, _)| *key),
                problems,
                queued: queued.iter().map(Queued::json).collect(),
                config_problem: around.config.problem.as_ref().map(|p| p.json()),
            })
        )?;
    } else {
        for (question, answer) in &answers {
            let asked = if answer.asked.is_empty() {
                String::new()
            } else {
                format!(" ({})", answer.asked)
            };
            let question = question.replace('_', " ");
            outln!("{question}{asked}: {}: {}", answer.word(), answer.why)?;
        }
        if let Some(problem) = &around.config.problem {
            outln!("{}", problem.line())?;
        }
        let problems = crate::json::problem_lines(&problems);
        if !problems.is_empty() {
            outln!("stray or broken files in {}:", snapshot.dir.display())?;
            for line in &problems {
                outln!("  {line}")?;
            }
        }
        if !queued.is_empty() {
            outln!("queued with the dispatcher:")?;
            for q in &queued {
                outln!(
                    "  {} (lane {}): {}; waited {} s",
                    q.attempt,
                    q.lane,
                    q.held_by,
                    q.waited_ms / 1000
                )?;
            }
        }
    }
    Ok(ExitCode::from(first.map_or(0, |(_, a)| a.code)))
}

/// A queued attempt and what holds it.
struct Queued {
    attempt: String,
    lane: String,
    state: String,
    waited_ms: u64,
    held_by: String,
}

impl Queued {
    fn json(&self) -> json::QueuedAttempt {
        json::QueuedAttempt {
            attempt: self.attempt.clone(),
            lane: self.lane.clone(),
            state: self.state.clone(),
            waited_ms: self.waited_ms,
            held_by: self.held_by.clone(),
        }
    }
}

/// What holds each attempt the dispatcher keeps (its status entries): a starting one waits for
/// its driver's claim; a queued one for the resource-admission question of an agent slot
/// (STOP, a drain, the cap) and for the attempts ahead of it, by priority then start.
fn queued_attempts(
    pool: &worklane_admission::Pool,
    queue: &crate::slots::QueueView,
    snapshot: &Snapshot,
) -> Vec<Queued> {
    let now = worklane_lease::Clock::now_ms(&worklane_lease::SystemClock);
    let admission = admission(KindArg::Agent, snapshot);
    let mut entries: Vec<&Value> = queue.attempts.iter().collect();
    let key = |e: &&Value| {
        (
            std::cmp::Reverse(e["priority"].as_i64().unwrap_or(0)),
            e["start"]
                .as_str()
                .and_then(worklane_lease::parse_rfc3339_ms)
                .unwrap_or(0),
        )
    };
    entries.sort_by_key(key);
    let mut ahead = 0;
    let trouble = if queue.alive {
        crate::dispatch::trouble(pool)
    } else {
        None
    };
    entries
        .into_iter()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or("-").to_owned();
            let state = text("state");
            let start = e["start"]
                .as_str()
                .and_then(worklane_lease::parse_rfc3339_ms)
                .unwrap_or(now);
            let failures = e["failures"].as_u64().unwrap_or(0);
            let last_error = text("last_error");
            let held_by = if state == "starting" {
                "admitted: waiting for its driver's claim".to_owned()
            } else if state == "failed" {
                format!(
                    "parked as failed after {failures} failed start(s) of its driver ({last_error}): \
                     `worklane queue retry {}` queues it again, `worklane queue cancel` drops it",
                    text("attempt")
                )
            } else if let Some(at) = e["retry_at"].as_str() {
                format!(
                    "its driver failed to start {failures} time(s) ({last_error}); it is started \
                     again at {at}"
                )
            } else if let Some(trouble) = &trouble {
                format!("the dispatcher cannot admit work now: {trouble}")
            } else if admission.blocks == Some(true) {
                format!("resource admission: {}", admission.why)
            } else if ahead > 0 {
                format!("{ahead} attempt(s) ahead of it in the queue")
            } else if !queue.alive {
                "no dispatcher serves the queue (`worklane dispatcher` starts one)".to_owned()
            } else {
                "next to be admitted".to_owned()
            };
            if state == "queued" {
                ahead += 1;
            }
            Queued {
                attempt: text("attempt"),
                lane: text("lane"),
                state,
                waited_ms: now.saturating_sub(start),
                held_by,
            }
        })
        .collect()
}
