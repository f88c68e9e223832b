//! `worklane slots`: what is held, by whom, and what is in force.

use crate::exit::Failure;
use crate::json;
use crate::out::outln;
use serde_json::Value;
use std::process::ExitCode;
use worklane_admission::{DrainState, SlotState, SlotView, Snapshot, drain::Ignored};
use worklane_budget::{CredentialView, Ledger};
use worklane_lease::{LiveWhy, rfc3339_ms};

/// The `state` word of a slot in both outputs.
pub(crate) fn state_word(state: &SlotState) -> &'static str {
    match state {
        SlotState::GuardHeld => "held",
        SlotState::Live(LiveWhy::Alive) => "alive",
        SlotState::Live(LiveWhy::Fresh { .. }) => "fresh",
        SlotState::Live(LiveWhy::Unknown(_)) => "unknown",
        SlotState::Live(LiveWhy::Malformed { .. }) => "malformed",
        SlotState::Live(_) => "busy",
        SlotState::Dead(_) => "dead",
    }
}

fn reason(state: &SlotState) -> String {
    match state {
        SlotState::GuardHeld => "a live process holds its kernel guard".to_owned(),
        SlotState::Live(why) => why.to_string(),
        SlotState::Dead(why) => format!("free to take over: {why}"),
    }
}

fn slot_json(view: &SlotView) -> json::Slot {
    let r = view.record.as_ref();
    json::Slot {
        name: view.name.clone(),
        kind: view.kind,
        pid: r.and_then(|r| r.pid()),
        owner: r.and_then(|r| r.owner.clone()),
        since: r.and_then(|r| r.acquired_at.clone()),
        role: r.and_then(|r| r.extra_str("role")).map(str::to_owned),
        command: r
            .and_then(|r| r.extra_str("command").or_else(|| r.extra_str("entrypoint")))
            .map(str::to_owned),
        epoch: r.and_then(|r| r.epoch),
        limit_ms: r.and_then(|r| r.extra.get("limit_ms").and_then(Value::as_u64)),
        last_pulse: r.and_then(|r| r.last_pulse).map(rfc3339_ms),
        state: state_word(&view.state),
        counts: view.state.is_held(),
        reason: reason(&view.state),
    }
}

fn drain_json(drain: &DrainState) -> json::Drain {
    let flag = |d: &worklane_admission::Drain| json::DrainFlag {
        since: d.since.clone(),
        until: d.until.clone(),
        to: d.to.clone(),
    };
    match drain {
        DrainState::None => json::Drain::None,
        DrainState::InForce(d) => json::Drain::InForce(flag(d)),
        DrainState::Ignored(Ignored::Expired { drain: d }) => json::Drain::Expired(flag(d)),
        DrainState::Ignored(Ignored::TooFarAhead { drain: d }) => json::Drain::TooFarAhead(flag(d)),
        DrainState::Ignored(Ignored::Unreadable { detail }) => json::Drain::Unreadable {
            detail: detail.clone(),
        },
    }
}

fn count(snapshot: &Snapshot, kind: &str) -> usize {
    snapshot
        .slots
        .iter()
        .filter(|s| s.kind == kind && s.state.is_held())
        .count()
}

/// The dispatcher's queue as the slot directory shows it: the dispatcher (its lock's record
/// and whether its guard is held) and the status entries `queue-<lane>.json` it keeps.
pub(crate) struct QueueView {
    /// The dispatcher's pid, from `dispatcher.lock`, if there is a record.
    pub(crate) pid: Option<u32>,
    /// Whether a dispatcher holds `dispatcher.lock` now.
    pub(crate) alive: bool,
    /// The status entries (JSON objects).
    pub(crate) attempts: Vec<Value>,
}

pub(crate) fn queue_view(dir: &worklane_slotfile::SlotDir) -> QueueView {
    let lock = dir.file("dispatcher.lock").ok();
    let pid = lock
        .as_ref()
        .and_then(|l| l.read().ok().flatten())
        .and_then(|raw| worklane_lease::Record::parse(&raw).ok())
        .and_then(|r| r.pid());
    // A held guard is a live dispatcher (it holds it for life); probing a free one takes it
    // for a moment, as `slots` does for every lock.
    let alive = lock.is_some_and(|l| matches!(l.try_guard(), Ok(None)));
    let attempts = dir
        .list_prefixed("queue-")
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.name().ends_with(".json"))
        .filter_map(|p| p.read().ok().flatten())
        .filter_map(|raw| serde_json::from_slice::<Value>(&raw).ok())
        .collect();
    QueueView {
        pid,
        alive,
        attempts,
    }
}

/// The waiting lines: each live entry with its place in its kind's line (dead ones, waiting
/// to be retired by the next waiter, are listed with `"live": false` and no position).
pub(crate) fn line_json(snapshot: &Snapshot) -> Vec<json::LineEntry> {
    let mut positions: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    snapshot
        .line
        .iter()
        .map(|v| {
            let position = v.live.then(|| {
                let n = positions.entry(v.entry.kind.as_str()).or_insert(0);
                *n += 1;
                *n
            });
            let r = v.record.as_ref();
            json::LineEntry {
                kind: v.entry.kind.clone(),
                position,
                priority: v.entry.priority,
                start: rfc3339_ms(v.entry.start_ms),
                pid: r.and_then(|r| r.pid()),
                owner: r.and_then(|r| r.owner.clone()),
                command: r.and_then(|r| r.extra_str("command")).map(str::to_owned),
                log: r.and_then(|r| r.extra_str("log")).map(str::to_owned),
                live: v.live,
                name: v.entry.name(),
            }
        })
        .collect()
}

/// The config file in force and whether it exists (when not, the defaults hold).
pub(crate) struct ConfigFile {
    pub(crate) path: std::path::PathBuf,
    pub(crate) exists: bool,
}

impl ConfigFile {
    fn of(pool: &worklane_admission::Pool) -> ConfigFile {
        let path = pool.locations().config.clone();
        // It was just read to load the caps; read again only to tell a file from the defaults.
        let exists = matches!(worklane_slotfile::read::read_path(&path), Ok(Some(_)));
        ConfigFile { path, exists }
    }
}

/// The document of `slots --json` (schema in docs/json.md).
pub(crate) fn to_json(
    snapshot: &Snapshot,
    config: &ConfigFile,
    budgets: &[CredentialView],
    queue: QueueView,
) -> json::Slots {
    json::Slots {
        version: json::VERSION,
        dir: snapshot.dir.display().to_string(),
        config: json::ConfigFile {
            path: config.path.display().to_string(),
            exists: config.exists,
        },
        max_agents: snapshot.config.max_agents,
        max_test_runs: snapshot.config.max_test_runs,
        agents_held: count(snapshot, "agent"),
        test_runs_held: count(snapshot, "test"),
        full_run_held: count(snapshot, "full-run") > 0,
        stop: snapshot.stop.as_ref().map(|s| json::Stop {
            by: s.by.clone(),
            at: s.at.clone(),
            reason: s.reason.clone(),
        }),
        drain: drain_json(&snapshot.drain),
        slots: snapshot.slots.iter().map(slot_json).collect(),
        problems: problems_json(snapshot),
        queue: json::Queue {
            dispatcher: json::Dispatcher {
                pid: queue.pid,
                alive: queue.alive,
            },
            attempts: queue.attempts,
        },
        line: line_json(snapshot),
        budgets: crate::budget::views_json(budgets),
        fleet: None,
    }
}

/// Stray and broken files, as `slots --json` and `why --json` list them.
pub(crate) fn problems_json(snapshot: &Snapshot) -> Vec<json::Problem> {
    snapshot
        .problems
        .iter()
        .map(|p| json::Problem {
            name: p.name.clone(),
            what: p.what.clone(),
            fix: p.fix.clone(),
            blocks: p.blocks,
        })
        .collect()
}

/// Stray and broken files as lines for a person: `NAME: WHAT; fix: FIX`.
pub(crate) fn problem_lines(snapshot: &Snapshot) -> Vec<String> {
    snapshot
        .problems
        .iter()
        .map(|p| format!("{}: {}; fix: {}", p.name, p.what, p.fix))
        .collect()
}

pub(crate) fn show(as_json: bool, fleet: &crate::cli::FleetArgs) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let fleet = crate::fleet::slots_section(fleet);
    let snapshot = pool.snapshot()?;
    // The budgets are a view, never a reason to fail: an unlistable directory shows none.
    let budgets = Ledger::new(pool.dir().clone()).health().unwrap_or_default();
    let queue = queue_view(pool.dir());
    let config = ConfigFile::of(&pool);
    if as_json {
        outln!(
            "{}",
            json::pretty(&json::Slots {
                fleet,
                ..to_json(&snapshot, &config, &budgets, queue)
            })
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("slot directory: {}", snapshot.dir.display())?;
    outln!(
        "{}",
        crate::config::describe_file(&config.path, config.exists)
    )?;
    outln!(
        "agents: {} of {} held; test runs: {} of {}; full run: {}",
        count(&snapshot, "agent"),
        snapshot.config.max_agents,
        count(&snapshot, "test"),
        snapshot.config.max_test_runs,
        if count(&snapshot, "full-run") > 0 {
            "running"
        } else {
            "none"
        },
    )?;
    match &snapshot.stop {
        Some(stop) => outln!("STOP in force: {stop}")?,
        None => outln!("STOP: none")?,
    }
    match &snapshot.drain {
        DrainState::None => outln!("drain: none")?,
        DrainState::InForce(d) => outln!("drain in force: {d}")?,
        DrainState::Ignored(Ignored::Expired { drain }) => {
            outln!("drain: ignored (expired: {drain})")?
        }
        DrainState::Ignored(Ignored::TooFarAhead { drain }) => {
            outln!("drain: ignored (more than 4 h ahead: {drain})")?
        }
        DrainState::Ignored(Ignored::Unreadable { detail }) => {
            outln!("drain: ignored (unreadable: {detail})")?
        }
    }
    crate::budget::print_views(&budgets)?;
    if queue.pid.is_some() || !queue.attempts.is_empty() {
        outln!(
            "dispatcher: {}; {} attempt(s) queued or starting",
            match (queue.pid, queue.alive) {
                (Some(pid), true) => format!("pid {pid}, serving"),
                (Some(pid), false) => format!("not running (last pid {pid})"),
                (None, _) => "not running".to_owned(),
            },
            queue.attempts.len()
        )?;
        for a in &queue.attempts {
            let field = |k: &str| a[k].as_str().unwrap_or("-").to_owned();
            outln!(
                "  {} lane {} {} priority {} since {}",
                field("attempt"),
                field("lane"),
                field("state"),
                a["priority"],
                field("since")
            )?;
        }
    }
    let waiting = line_json(&snapshot);
    if !waiting.is_empty() {
        outln!(
            "waiting in line ({}):",
            waiting.iter().filter(|w| w.live).count()
        )?;
        for w in &waiting {
            outln!(
                "  {} {:<8} priority {} pid {} owner {} since {}{}",
                w.position.map_or("-".to_owned(), |p| format!("{p}.")),
                w.kind,
                w.priority,
                w.pid.map_or("-".to_owned(), |p| p.to_string()),
                w.owner.as_deref().unwrap_or("-"),
                w.start,
                if w.live {
                    ""
                } else {
                    " (dead: removed by the next waiter)"
                },
            )?;
        }
    }
    let problems = problem_lines(&snapshot);
    if !problems.is_empty() {
        outln!("stray or broken files ({}):", problems.len())?;
        for line in &problems {
            outln!("  {line}")?;
        }
    }
    if snapshot.slots.is_empty() {
        outln!("nothing held")?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!()?;
    outln!(
        "{:<28} {:<9} {:>8} {:<20} {:<26} {:<9} reason",
        "name",
        "kind",
        "pid",
        "owner",
        "since",
        "state"
    )?;
    for view in &snapshot.slots {
        let r = view.record.as_ref();
        outln!(
            "{:<28} {:<9} {:>8} {:<20} {:<26} {:<9} {}",
            view.name,
            view.kind,
            r.and_then(|r| r.pid())
                .map_or("-".to_owned(), |p| p.to_string()),
            r.and_then(|r| r.owner.clone())
                .unwrap_or_else(|| "-".to_owned()),
            r.and_then(|r| r.acquired_at.clone())
                .unwrap_or_else(|| "-".to_owned()),
            state_word(&view.state),
            reason(&view.state),
        )?;
    }
    if let Some(section) = &fleet {
        crate::fleet::print_section(section)?;
    }
    Ok(ExitCode::SUCCESS)
}
