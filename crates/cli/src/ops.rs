//! Operator commands: stop-all, resume-all, drain, undrain, idle, completions (the man pages
//! are `man.rs`).

use crate::exit::{self, Failure};
use crate::json;
use crate::out::{outln, sayln};
use std::process::ExitCode;
use worklane_admission::drain::DRAIN_FILE;
use worklane_admission::{Drain, DrainState, MAX_DRAIN_AHEAD_MS, Stop, stop};
use worklane_lease::{Clock, SystemClock, parse_rfc3339_ms, rfc3339_ms};

pub(crate) fn stop_all(reason: &str, as_json: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let record = Stop {
        by: crate::shared::who(),
        at: rfc3339_ms(SystemClock.now_ms()),
        reason: reason.to_owned(),
    };
    let mut problems = Vec::new();
    // A STOP that cannot be replaced (a directory with files in it) is in force all the
    // same: say so, and halt what runs as after any STOP. Only when no STOP is in force at
    // all is a failed write an error.
    let (stop, written) = match stop::write(pool.dir(), &record) {
        Ok(()) => (record, true),
        Err(e) => match pool.stop() {
            Ok(Some(in_force)) => {
                let problem = worklane_admission::stop_not_replaced(pool.dir(), &e);
                problems.push(json::Problem::from(problem));
                (in_force, false)
            }
            _ => return Err(Failure::from(e)),
        },
    };
    if !as_json {
        if written {
            sayln!(
                "STOP written in {}: every `worklane run` halts its command within about 5 s \
                 and no new slot is taken until `worklane resume-all`",
                pool.dir().path().display()
            )?;
        } else {
            for problem in &problems {
                sayln!(
                    "STOP was already in force in {} ({stop}): {}; fix: {}",
                    pool.dir().path().display(),
                    problem.what,
                    problem.fix
                )?;
            }
        }
    }
    let report = worklane_run::enforce::enforce_stop(&pool);
    if as_json {
        outln!(
            "{}",
            json::line(&json::StopAll {
                version: json::VERSION,
                dir: pool.dir().path().display().to_string(),
                stop: json::Stop {
                    by: stop.by.clone(),
                    at: stop.at.clone(),
                    reason: stop.reason.clone(),
                },
                written,
                halted: report
                    .halted
                    .iter()
                    .map(|h| json::HaltedRun {
                        resource: h.run.resource.clone(),
                        pid: h.run.pid,
                        command: h.run.command.clone(),
                        by: if h.by_worklane {
                            "worklane"
                        } else {
                            "supervisor"
                        },
                    })
                    .collect(),
                still_running: report
                    .left
                    .iter()
                    .map(|l| json::RunningRun {
                        resource: l.run.resource.clone(),
                        pid: l.run.pid,
                        command: l.run.command.clone(),
                        why: l.why.clone(),
                    })
                    .collect(),
                took_ms: u64::try_from(report.took.as_millis()).unwrap_or(u64::MAX),
                problems,
            })
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let took = crate::out::seconds(report.took);
    for halted in &report.halted {
        if halted.by_worklane {
            sayln!(
                "halted {} myself: its supervisor could not (gone, stopped, or past its grace)",
                halted.run
            )?;
        } else {
            sayln!("halted {} (by its supervisor)", halted.run)?;
        }
    }
    if report.left.is_empty() {
        if report.halted.is_empty() {
            sayln!("nothing was running")?;
        } else {
            sayln!(
                "{} running command(s) halted in {took} s",
                report.halted.len()
            )?;
        }
    } else {
        // What still runs is not a success line: it is printed under -q too.
        outln!("still running after {took} s (STOP stays in force):")?;
        for left in &report.left {
            match &left.why {
                Some(why) => outln!("  {}: {why}", left.run)?,
                None => outln!("  {}", left.run)?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn resume_all(as_json: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let was = pool.stop()?;
    let removed = stop::remove(pool.dir()).map_err(|e| {
        let failure = Failure::from(e);
        let stays = worklane_admission::stop_not_removed(pool.dir());
        Failure::new(failure.code, format!("{}; {stays}", failure.message))
    })?;
    if as_json {
        outln!(
            "{}",
            json::line(&json::ResumeAll {
                version: json::VERSION,
                dir: pool.dir().path().display().to_string(),
                removed,
                stop: was.filter(|_| removed).map(|s| json::Stop {
                    by: s.by,
                    at: s.at,
                    reason: s.reason,
                }),
            })
        )?;
    } else if removed {
        sayln!("STOP removed: new slots may be taken again")?;
    } else {
        sayln!("no STOP was in force")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `until` as milliseconds: an RFC 3339 time, or a duration from now.
fn until_ms(until: &str, now: u64) -> Result<u64, Failure> {
    if let Some(ms) = parse_rfc3339_ms(until) {
        return Ok(ms);
    }
    let ahead = crate::cli::parse_duration(until).map_err(|_| {
        Failure::new(
            exit::USAGE,
            format!("--until {until:?}: give an RFC 3339 time (2026-11-30T06:00:00Z) or a duration (30m)"),
        )
    })?;
    Ok(now.saturating_add(u64::try_from(ahead.as_millis()).unwrap_or(u64::MAX)))
}

pub(crate) fn drain(until: &str, to: Option<String>, as_json: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let now = SystemClock.now_ms();
    let until = until_ms(until, now)?;
    if until <= now {
        return Err(Failure::new(
            exit::USAGE,
            "--until is in the past: nothing to drain",
        ));
    }
    if until - now > MAX_DRAIN_AHEAD_MS {
        return Err(Failure::new(
            exit::USAGE,
            "--until is more than 4 h ahead, and every harness ignores such a drain; choose a \
             time within 4 h (and drain again if the update takes longer)",
        ));
    }
    let flag = Drain {
        since: rfc3339_ms(now),
        until: rfc3339_ms(until),
        to,
    };
    let file = pool.locations().drain_dir.join(DRAIN_FILE);
    pool.write_drain(&flag).map_err(|e| {
        let failure = Failure::from(e);
        let stays = worklane_admission::drain_not_written(&pool.locations().drain_dir);
        Failure::new(failure.code, format!("{}; {stays}", failure.message))
    })?;
    if as_json {
        outln!(
            "{}",
            json::line(&json::Drained {
                version: json::VERSION,
                file: file.display().to_string(),
                drain: json::DrainFlag {
                    since: flag.since.clone(),
                    until: flag.until.clone(),
                    to: flag.to.clone(),
                },
            })
        )?;
    } else {
        sayln!(
            "{flag}: no new slot of any kind until then (flag in {})",
            pool.locations().drain_dir.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn undrain(as_json: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let file = pool.locations().drain_dir.join(DRAIN_FILE);
    let mut problems = Vec::new();
    let removed = match pool.remove_drain() {
        Ok(removed) => removed,
        // What cannot be removed (a directory with files in it) is no drain flag: every
        // harness ignores it, so no drain is in force, which is what undrain is for.
        Err(e) if !matches!(pool.drain(), Ok(DrainState::InForce(_))) => {
            let problem = worklane_admission::drain_not_removed(&pool.locations().drain_dir, &e);
            problems.push(json::Problem::from(problem));
            false
        }
        Err(e) => return Err(Failure::from(e)),
    };
    if as_json {
        outln!(
            "{}",
            json::line(&json::Undrained {
                version: json::VERSION,
                file: file.display().to_string(),
                removed,
                problems,
            })
        )?;
    } else if removed {
        sayln!("drain removed")?;
    } else {
        sayln!("no drain flag was set")?;
        for p in &problems {
            sayln!("{}: {}; fix: {}", p.name, p.what, p.fix)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn idle() -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    if pool.idle()? {
        Ok(ExitCode::SUCCESS)
    } else {
        sayln!("a full run is live")?;
        Ok(ExitCode::from(exit::TEMP_FAIL))
    }
}

pub(crate) fn completions(shell: clap_complete::Shell) -> Result<ExitCode, Failure> {
    use clap::CommandFactory;
    let mut cmd = crate::cli::Cli::command();
    // Generated into memory (clap_complete panics on a failed write), then written whole.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "worklane", &mut script);
    crate::out::bytes(&script)?;
    Ok(ExitCode::SUCCESS)
}
