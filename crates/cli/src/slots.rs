//! `worklane slots`: what is held, by whom, and what is in force.

use crate::exit::Failure;
use crate::json;
use crate::out::outln;
use std::process::ExitCode;
use worklane_admission::{DrainState, drain::Ignored};
use worklane_view::context::{Around, line_json};
use worklane_view::slots::{
    cgroup_json, containment_json, count, dir_key, holder_name, reason, to_json,
};

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
        worklane_view::config_problem::describe_file(&config.path, config.exists)
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
    crate::shared::budget_text::print_views(&around.budgets.views)?;
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
    let key = dir_key(&snapshot.dir);
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
        if let Some(cgroup) = r.and_then(|r| cgroup_json(key.as_deref(), &view.name, r))
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
