//! `worklane slots`: what is held, by whom, and what is in force.

use crate::exit::Failure;
use crate::json;
use crate::out::outln;
use crate::views::{Around, QueueView, line_json};
use serde_json::Value;
use std::process::ExitCode;
use worklane_admission::{DrainState, SlotState, SlotView, Snapshot, drain::Ignored};
use worklane_lease::{Record, rfc3339_ms};

fn reason(state: &SlotState) -> String {
    match state {
        SlotState::GuardHeld => "a live process holds its kernel guard".to_owned(),
        SlotState::Live(why) => why.to_string(),
        SlotState::Dead(why) => format!("free to take over: {why}"),
    }
}

/// The owners worklane's dispatcher commands record (`claim` and the records it adopts,
/// `enqueue`'s lane, the dispatcher's own rows): not a name a person knows the work by.
const CLAIM_OWNER: &str = "worklane claim";

const QUEUE_OWNERS: [&str; 2] = ["worklane enqueue", "worklane dispatcher"];

/// The attempt the record of file `file` belongs to: its `attempt` field, or, for a lane
/// handed to the dispatcher (its record names no attempt), the attempt of that lane's status
/// entry; the lane is the one the file names (`lane-<lane>.lock`), so a lane another
/// implementation handed over without a `lane` field is found too (PROTOCOL.md 14.3).
fn attempt_of(file: &str, record: &Record, queue: &QueueView) -> Option<String> {
    if let Some(attempt) = record.extra_str("attempt") {
        return Some(attempt.to_owned());
    }
    let lane = file
        .strip_prefix("lane-")
        .and_then(|l| l.strip_suffix(".lock"))
        .or_else(|| record.extra_str("lane"))?;
    queue
        .attempts
        .iter()
        .find(|a| a["lane"].as_str() == Some(lane))
        .and_then(|a| a["attempt"].as_str())
        .map(str::to_owned)
}

/// Who holds a slot or lane, as `slots` names it: the recorded owner, except for dispatched
/// work, named by its command once a driver claimed it (`worklane claim` holds it for the
/// command), and by its lane and attempt while it is queued or starting (the dispatcher holds
/// it).
pub(crate) fn holder_name(file: &str, record: &Record, queue: &QueueView) -> Option<String> {
    let owner = record.owner.as_deref();
    if owner == Some(CLAIM_OWNER)
        && let Some(command) = record.extra_str("command")
    {
        return Some(command.to_owned());
    }
    if owner.is_some_and(|o| QUEUE_OWNERS.contains(&o)) {
        let lane = record.extra_str("lane");
        let attempt = attempt_of(file, record, queue);
        match (lane, attempt) {
            (Some(lane), Some(attempt)) => return Some(format!("lane {lane}, attempt {attempt}")),
            (Some(lane), None) => return Some(format!("lane {lane}")),
            (None, Some(attempt)) => return Some(format!("attempt {attempt}")),
            (None, None) => {}
        }
    }
    record.owner.clone()
}

fn slot_json(view: &SlotView, queue: &QueueView) -> json::Slot {
    let r = view.record.as_ref();
    json::Slot {
        name: view.name.clone(),
        kind: view.kind,
        pid: r.and_then(|r| r.pid()),
        owner: r.and_then(|r| r.owner.clone()),
        attempt: r.and_then(|r| attempt_of(&view.name, r, queue)),
        since: r.and_then(|r| r.acquired_at.clone()),
        role: r.and_then(|r| r.extra_str("role")).map(str::to_owned),
        command: r
            .and_then(|r| r.extra_str("command").or_else(|| r.extra_str("entrypoint")))
            .map(str::to_owned),
        epoch: r.and_then(|r| r.epoch),
        limit_ms: r.and_then(|r| r.extra.get("limit_ms").and_then(Value::as_u64)),
        last_pulse: r.and_then(|r| r.last_pulse).map(rfc3339_ms),
        weight: match &view.weight {
            worklane_admission::Weight::Units(n) => *n,
            _ => 1,
        },
        units: view.units,
        share_owner: view.share_owner.clone(),
        state: view.state.word(),
        counts: view.state.is_held(),
        reason: reason(&view.state),
        cgroup: r.and_then(cgroup_json),
    }
}

/// The cgroup a record names (`cgroup`) and what it holds now, if it exists.
fn cgroup_json(record: &Record) -> Option<json::SlotCgroup> {
    let path = record.extra_str(worklane_identity::cgroup::RECORD_FIELD)?;
    let usage = worklane_identity::cgroup::usage(path)?;
    Some(json::SlotCgroup {
        path: path.to_owned(),
        procs: usage.procs,
        cpu_usec: usage.cpu_usec,
        memory_current: usage.memory_current,
        memory_peak: usage.memory_peak,
    })
}

/// Whether runs get a cgroup each here, and why not.
pub(crate) fn containment_json() -> json::Containment {
    match worklane_run::cgroup::probe() {
        Ok(cgroups) => json::Containment {
            on: true,
            cgroups: Some(cgroups),
            why: None,
        },
        Err(off) => json::Containment {
            on: false,
            cgroups: None,
            why: Some(off.to_string()),
        },
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

/// The document of `slots --json` (schema in docs/json.md).
pub(crate) fn to_json(snapshot: &Snapshot, around: &Around) -> json::Slots {
    let caps = snapshot.config.as_ref().ok();
    json::Slots {
        version: json::VERSION,
        dir: snapshot.dir.display().to_string(),
        config: json::ConfigFile {
            path: around.config.path.display().to_string(),
            exists: around.config.exists,
        },
        // No take is admitted while the config cannot be used: the caps in force are 0.
        max_agents: caps.map_or(0, |c| c.max_agents),
        max_test_runs: caps.map_or(0, |c| c.max_test_runs),
        max_jobs: caps.map_or(0, |c| c.max_jobs),
        agents_held: count(snapshot, "agent"),
        test_runs_held: count(snapshot, "test"),
        agent_units_held: snapshot.held_units("agent"),
        test_run_units_held: snapshot.held_units("test"),
        shares: snapshot
            .share_uses()
            .into_iter()
            .map(|u| json::ShareUse {
                owner: u.owner,
                held: u.held,
                share: u.share,
            })
            .collect(),
        jobs_held: count(snapshot, "job"),
        full_run_held: count(snapshot, "full-run") > 0,
        stop: snapshot.stop.as_ref().map(|s| json::Stop {
            by: s.by.clone(),
            at: s.at.clone(),
            reason: s.reason.clone(),
        }),
        drain: drain_json(&snapshot.drain),
        slots: snapshot
            .slots
            .iter()
            .map(|v| slot_json(v, &around.queue))
            .collect(),
        problems: around.problems(snapshot),
        queue: json::Queue {
            dispatcher: json::Dispatcher {
                pid: around.queue.pid,
                alive: around.queue.alive,
            },
            attempts: around.queue.attempts.clone(),
        },
        line: line_json(snapshot),
        budgets: crate::budget::views_json(&around.budgets.views),
        containment: containment_json(),
        config_problem: around.config.problem.as_ref().map(|p| p.json()),
        fleet: None,
    }
}

pub(crate) fn show(as_json: bool, fleet: &crate::cli::FleetArgs) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let fleet = crate::fleet::slots_section(fleet);
    let snapshot = pool.snapshot_retiring()?;
    let around = Around::of(&pool, &snapshot);
    if as_json {
        outln!(
            "{}",
            json::pretty(&json::Slots {
                fleet,
                ..to_json(&snapshot, &around)
            })
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let config = &around.config;
    let queue = &around.queue;
    outln!("slot directory: {}", snapshot.dir.display())?;
    outln!(
        "{}",
        crate::config::describe_file(&config.path, config.exists)
    )?;
    if let Some(problem) = &config.problem {
        outln!("{}", problem.line())?;
    }
    let full_run = if count(&snapshot, "full-run") > 0 {
        "running"
    } else {
        "none"
    };
    match &snapshot.config {
        Ok(caps) => outln!(
            "agents: {} of {} held; test runs: {} of {}; full run: {full_run}; build jobs: {} \
             of {}",
            snapshot.held_units("agent"),
            caps.max_agents,
            snapshot.held_units("test"),
            caps.max_test_runs,
            count(&snapshot, "job"),
            caps.max_jobs,
        )?,
        Err(_) => outln!(
            "agents: {} held; test runs: {}; full run: {full_run}; caps: none in force (the \
             config cannot be used: no take is admitted)",
            count(&snapshot, "agent"),
            count(&snapshot, "test"),
        )?,
    }
    let uses = snapshot.share_uses();
    if !uses.is_empty() {
        let words: Vec<String> = uses
            .iter()
            .map(|u| {
                let share = u.share.map_or("the cap".to_owned(), |s| s.to_string());
                format!(
                    "{} {} of {share}",
                    worklane_admission::owner_words(&u.owner),
                    u.held
                )
            })
            .collect();
        outln!("shares (units held of each owner's): {}", words.join("; "))?;
    }
    let containment = containment_json();
    match (&containment.cgroups, &containment.why) {
        (Some(cgroups), _) => outln!("containment: a cgroup per run, under {cgroups}")?,
        (None, Some(why)) => outln!(
            "containment: off ({why}); STOP reaches a run's process group and what holds its \
             slot"
        )?,
        (None, None) => {}
    }
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
    crate::budget::print_views(&around.budgets.views)?;
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
        for (w, view) in waiting.iter().zip(&snapshot.line) {
            let holder = view
                .record
                .as_ref()
                .and_then(|r| holder_name("", r, queue))
                .unwrap_or_else(|| "-".to_owned());
            outln!(
                "  {} {:<8} priority {} pid {} owner {} since {}{}",
                w.position.map_or("-".to_owned(), |p| format!("{p}.")),
                w.kind,
                w.priority,
                w.pid.map_or("-".to_owned(), |p| p.to_string()),
                holder,
                w.start,
                if w.live {
                    ""
                } else {
                    " (dead: removed by the next waiter)"
                },
            )?;
        }
    }
    let problems = json::problem_lines(&around.problems(&snapshot));
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
            r.and_then(|r| holder_name(&view.name, r, queue))
                .unwrap_or_else(|| "-".to_owned()),
            r.and_then(|r| r.acquired_at.clone())
                .unwrap_or_else(|| "-".to_owned()),
            view.state.word(),
            reason(&view.state),
        )?;
        if let Some(cgroup) = r.and_then(cgroup_json)
            && !cgroup.procs.is_empty()
        {
            let cpu = cgroup.cpu_usec.map_or_else(String::new, |us| {
                format!(", {:.1} s of CPU", us as f64 / 1e6)
            });
            outln!(
                "{:<28} cgroup {}: {} process(es) ({}){cpu}",
                "",
                cgroup.path,
                cgroup.procs.len(),
                cgroup
                    .procs
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            )?;
        }
    }
    if let Some(section) = &fleet {
        crate::fleet::print_section(section)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handed_over_lane_s_attempt_is_found_by_its_file_name_without_a_lane_field() {
        let queue = QueueView {
            pid: None,
            alive: true,
            attempts: vec![serde_json::json!({"attempt": "a-1", "lane": "build"})],
            problems: Vec::new(),
        };
        let bare = Record {
            owner: Some("another harness".into()),
            ..Record::default()
        };
        assert_eq!(
            attempt_of("lane-build.lock", &bare, &queue).as_deref(),
            Some("a-1")
        );
        assert_eq!(attempt_of("lane-other.lock", &bare, &queue), None);
        assert_eq!(attempt_of("agent-0.lock", &bare, &queue), None);
        let mut named = bare.clone();
        named
            .extra
            .insert("attempt".into(), serde_json::json!("a-9"));
        assert_eq!(
            attempt_of("lane-build.lock", &named, &queue).as_deref(),
            Some("a-9"),
            "the record's own attempt first"
        );
    }
}
