//! `worklane why`: which of the four permission questions blocks work now.
//!
//! The four stay separate: resource admission (slots, STOP, drain), provider quota (the API
//! budget), task ownership (locks and role leases) and release authority, which worklane never
//! decides. Nothing is taken, waited for or written: every answer is read as the real step
//! would read it (like `worklane slots`, it probes a free guard by taking it for a moment).

use crate::cli::{KindArg, WhyArgs};
use crate::exit::Failure;
use crate::json;
use crate::out::outln;
use serde_json::Value;
use std::process::ExitCode;
use worklane_admission::Snapshot;
use worklane_budget::Ledger;

mod questions;

use questions::{admission, answer_json, code, ownership, quota, with_fleet};
use worklane_view::why::Answer;

pub(crate) fn why(args: &WhyArgs) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let snapshot = pool.snapshot_retiring()?;
    let ledger = Ledger::new(pool.dir().clone());
    let answers = [
        (
            "resource_admission",
            with_fleet(
                admission(
                    args.kind,
                    &snapshot,
                    &crate::shared::ask(args.weight, args.owner.as_deref()),
                ),
                args,
            ),
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
    let first = answers.iter().find(|(_, a)| a.blocks() == Some(true));
    let around = worklane_view::context::Around::of(&pool, &snapshot);
    let problems = around.problems(&snapshot);
    let queued = queued_attempts(&pool, &around.queue, &snapshot);
    if args.json {
        let [admission, quota, ownership, release] = &answers;
        outln!(
            "{}",
            json::line(&json::Why {
                version: json::VERSION,
                resource_admission: answer_json(&admission.1),
                provider_quota: answer_json(&quota.1),
                task_ownership: answer_json(&ownership.1),
                release_authority: answer_json(&release.1),
                blocked_by: first.map(|(key, _)| *key),
                problems,
                queued: queued.iter().map(Queued::json).collect(),
                config_problem: around.config.problem.as_ref().map(|p| p.json()),
                containment: worklane_view::slots::containment_json(),
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
        if let Some(off) = worklane_view::slots::containment_json().why {
            outln!(
                "containment: off ({off}): a run's processes are followed by their group and \
                 by what holds its slot, not by a cgroup"
            )?;
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
    Ok(ExitCode::from(first.map_or(0, |(_, a)| code(a))))
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
    queue: &worklane_view::context::QueueView,
    snapshot: &Snapshot,
) -> Vec<Queued> {
    let now = worklane_lease::Clock::now_ms(&worklane_lease::SystemClock);
    let admission = admission(
        KindArg::Agent,
        snapshot,
        &worklane_admission::Ask::default(),
    );
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
            } else if admission.blocks() == Some(true) {
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
