//! Operator commands: stop-all, resume-all, drain, undrain, idle,
//! completions, man.

use crate::exit::{self, Failure};
use crate::out::outln;
use std::process::ExitCode;
use worklane_admission::{Drain, MAX_DRAIN_AHEAD_MS, Stop, stop};
use worklane_lease::{Clock, SystemClock, parse_rfc3339_ms, rfc3339_ms};

/// `USER@HOST` of this process (`uid N@HOST` without `USER`), for STOP and role leases.
pub(crate) fn who() -> String {
    let user = std::env::var("USER")
        .unwrap_or_else(|_| format!("uid {}", rustix::process::getuid().as_raw()));
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    format!("{user}@{host}")
}

pub(crate) fn stop_all(reason: &str) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let record = Stop {
        by: who(),
        at: rfc3339_ms(SystemClock.now_ms()),
        reason: reason.to_owned(),
    };
    stop::write(pool.dir(), &record)?;
    outln!(
        "STOP written in {}: every `worklane run` halts its command within about 5 s and no new \
         slot is taken until `worklane resume-all`",
        pool.dir().path().display()
    )?;
    let report = crate::enforce::enforce_stop(&pool);
    for command in &report.signalled {
        outln!("halted {command} myself: its supervisor could not (gone or stopped)")?;
    }
    if report.left.is_empty() {
        outln!(
            "{} running command(s) halted in {} s",
            report.running,
            crate::supervise::seconds(report.took)
        )?;
    } else {
        outln!(
            "still running after {} s (STOP stays in force):",
            crate::supervise::seconds(report.took)
        )?;
        for command in &report.left {
            outln!("  {command}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn resume_all() -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    if stop::remove(pool.dir())? {
        outln!("STOP removed: new slots may be taken again")?;
    } else {
        outln!("no STOP was in force")?;
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

pub(crate) fn drain(until: &str, to: Option<String>) -> Result<ExitCode, Failure> {
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
    pool.write_drain(&flag)?;
    outln!(
        "{flag}: no new slot of any kind until then (flag in {})",
        pool.locations().drain_dir.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn undrain() -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    if pool.remove_drain()? {
        outln!("drain removed")?;
    } else {
        outln!("no drain flag was set")?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn idle() -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    if pool.idle()? {
        Ok(ExitCode::SUCCESS)
    } else {
        outln!("a full run is live")?;
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

pub(crate) fn man() -> Result<ExitCode, Failure> {
    use clap::CommandFactory;
    let cmd = crate::cli::Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut page)
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot render the man page: {e}")))?;
    crate::out::bytes(&page)?;
    Ok(ExitCode::SUCCESS)
}
