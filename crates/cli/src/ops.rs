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

/// Every man page: worklane's own, then one per command that is not hidden, nested ones
/// named by their path (`worklane-lease-run.1`), each as (file name, roff).
pub(crate) fn man_pages() -> Result<Vec<(String, Vec<u8>)>, Failure> {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, pages: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        // Rendered into memory (clap_mangen fails mid-write on a failed write).
        let man = clap_mangen::Man::new(cmd.clone());
        let mut page = Vec::new();
        man.render(&mut page)?;
        pages.push((man.get_filename(), page));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, pages)?;
        }
        Ok(())
    }
    // Built whole first, so that each command knows its path: its page is titled
    // `worklane-lease-run` and its synopsis says `worklane lease run`.
    let mut cmd = crate::cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    walk(&cmd, &mut pages)
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot render a man page: {e}")))?;
    Ok(pages)
}

/// `man [COMMAND...]` prints one page; `man --all DIR` writes every page into DIR.
pub(crate) fn man(command: &[String], all: Option<&std::path::Path>) -> Result<ExitCode, Failure> {
    let pages = man_pages()?;
    if let Some(dir) = all {
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::new(
                exit::IO_ERROR,
                format!("man --all: cannot create {}: {e}", dir.display()),
            )
        })?;
        for (name, page) in &pages {
            let path = dir.join(name);
            std::fs::write(&path, page).map_err(|e| {
                Failure::new(
                    exit::IO_ERROR,
                    format!("man --all: cannot write {}: {e}", path.display()),
                )
            })?;
            outln!("{}", path.display())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let name = std::iter::once("worklane")
        .chain(command.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("-");
    let file = format!("{name}.1");
    let Some((_, page)) = pages.iter().find(|(n, _)| *n == file) else {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "man {}: no such command (`worklane --help` lists them)",
                command.join(" ")
            ),
        ));
    };
    crate::out::bytes(page)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every command that is not hidden, as its path (`["lease", "run"]`).
    fn paths(cmd: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let mut path = prefix.to_vec();
            path.push(sub.get_name().to_owned());
            out.push(path.clone());
            paths(sub, &path, out);
        }
    }

    #[test]
    fn every_command_gets_a_man_page_named_by_its_path() {
        let pages = super::man_pages().expect("pages");
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        let mut commands = Vec::new();
        paths(&crate::cli::Cli::command(), &[], &mut commands);
        assert!(
            commands.len() > 20 && commands.contains(&vec!["lease".into(), "run".into()]),
            "the walk sees nested commands: {commands:?}"
        );
        let mut want = vec!["worklane.1".to_owned()];
        want.extend(
            commands
                .iter()
                .map(|p| format!("worklane-{}.1", p.join("-"))),
        );
        for name in &want {
            assert!(names.contains(&name.as_str()), "a page {name}: {names:?}");
        }
        assert_eq!(names.len(), want.len(), "one page each, no more: {names:?}");
        for (name, page) in &pages {
            let text = String::from_utf8_lossy(page);
            let title = name.trim_end_matches(".1");
            assert!(
                text.contains(&format!("\n.TH {title} 1 ")),
                "{name} is a roff page titled {title}: {}",
                &text[..text.len().min(80)]
            );
        }
        assert!(
            !names
                .iter()
                .any(|n| n.contains("queued-full-run") || n.contains("help")),
            "no page for hidden commands or help: {names:?}"
        );
        let lease_run = &pages
            .iter()
            .find(|(n, _)| n == "worklane-lease-run.1")
            .expect("lease run")
            .1;
        assert!(
            String::from_utf8_lossy(lease_run).contains("worklane lease run"),
            "the synopsis names the whole command"
        );
    }
}
