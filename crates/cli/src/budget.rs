//! `worklane budget show | take | observe`: the per-credential API budget from the command
//! line, so a harness in any language shares the machine's budget.

use crate::exit::{self, Failure};
use crate::json;
use crate::out::outln;
use std::process::ExitCode;
use worklane_budget::{CredentialKey, CredentialView, Ledger};
use worklane_lease::rfc3339_ms;

mod answer;
mod providers;
mod take;

pub(crate) use providers::{provider, release, token_env};
pub(crate) use take::{observe, take};

/// The ledger of the machine's slot directory. Only the directory is resolved: a cap the
/// config gets wrong is no reason to hold back an API call.
pub(super) fn ledger(owner: &str) -> Result<Ledger, Failure> {
    let dir = worklane_slotfile::SlotDir::resolve_dir()
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    Ok(Ledger::new(dir).owner(owner))
}

/// The credential named by the environment variable `var`; the token is hashed at once and
/// never printed.
pub(super) fn key_from_env(var: &str) -> Result<CredentialKey, Failure> {
    match std::env::var(var) {
        // Hashed exactly as given, as every other user of the credential hashes it.
        Ok(token) if !token.is_empty() => Ok(CredentialKey::of_token(&token)),
        _ => Err(Failure::new(
            exit::USAGE,
            format!(
                "no API token in ${var}: set it, or name the variable that holds the token \
                 with --token-env (the token is never passed on the command line)"
            ),
        )),
    }
}

/// At most `max` bytes of the file `path`, or of stdin for `-`: a saved response's headers or
/// body, which `budget observe` reads.
fn read_input(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut raw = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin().lock().take(max).read_to_end(&mut raw)?;
    } else {
        std::fs::File::open(path)?.take(max).read_to_end(&mut raw)?;
    }
    Ok(raw)
}

/// The health view as JSON: credentials numbered, never named by key.
pub(crate) fn views_json(views: &[CredentialView]) -> Vec<json::Budget> {
    views
        .iter()
        .map(|v| json::Budget {
            credential: v.number,
            key: v.key.clone(),
            provider: v.provider.clone(),
            updated: rfc3339_ms(v.updated_ms),
            paused_until: v.paused_until.map(rfc3339_ms),
            in_flight: v.in_flight,
            waiting: v.waiting,
            resources: v
                .resources
                .iter()
                .map(|r| json::BudgetResource {
                    name: r.name.clone(),
                    limit: r.limit,
                    remaining: r.remaining,
                    granted: r.granted,
                    left: r.left,
                    reset: rfc3339_ms(r.reset_at),
                    by_consumer: r.by_consumer.iter().cloned().collect(),
                    in_flight: r.in_flight,
                    assumed: r.assumed,
                })
                .collect(),
        })
        .collect()
}

/// The health view for people, one block per credential.
pub(crate) fn print_views(views: &[CredentialView]) -> Result<(), Failure> {
    if views.is_empty() {
        outln!("API budgets: none recorded")?;
        return Ok(());
    }
    for v in views {
        outln!(
            "API budget of credential #{} with {} (updated {})",
            v.number,
            v.provider,
            rfc3339_ms(v.updated_ms)
        )?;
        if let Some(until) = v.paused_until {
            let why = if v.provider == "github" {
                "secondary rate limit"
            } else {
                "the provider's 429"
            };
            outln!("  paused until {} ({why})", rfc3339_ms(until))?;
        }
        if v.in_flight > 0 || v.waiting > 0 {
            outln!(
                "  {} call(s) in flight, {} waiting in a proxy",
                v.in_flight,
                v.waiting
            )?;
        }
        for r in &v.resources {
            let limit = r.limit.map_or_else(String::new, |l| format!(" of {l}"));
            let consumers = r
                .by_consumer
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            let seen = if r.assumed {
                // Carried over: no response has reported this window yet.
                format!(
                    "assumed: the limit carried over, {} granted since",
                    r.granted
                )
            } else {
                format!(
                    "remaining {} when seen, {} granted since",
                    r.remaining, r.granted
                )
            };
            let in_flight = if r.in_flight > 0 {
                format!(", {} in flight", r.in_flight)
            } else {
                String::new()
            };
            outln!(
                "  {:<10} {} left{limit} ({seen}{in_flight}); resets {}{}",
                r.name,
                r.left,
                rfc3339_ms(r.reset_at),
                if consumers.is_empty() {
                    String::new()
                } else {
                    format!("; this window: {consumers}")
                }
            )?;
        }
    }
    Ok(())
}

/// The budget states the health view left out, as problems: the file, what is wrong and what
/// a take does with it, and the fix. A credential is never named by its key in the view, but
/// a file that must be fixed is named by its file name.
pub(crate) fn unshown_problems(
    dir: &std::path::Path,
    unshown: &[worklane_budget::UnshownState],
) -> Vec<json::Problem> {
    use worklane_budget::StateProblem;
    use worklane_slotfile::read::Error as R;
    unshown
        .iter()
        .map(|u| {
            let path = crate::config::shell_quote(&dir.join(&u.file).display().to_string());
            let dir = crate::config::shell_quote(&dir.display().to_string());
            let (effect, fix) = match &u.why {
                StateProblem::Unreadable(R::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::PermissionDenied =>
                {
                    (
                        "this user's takes of its credential go unaccounted and never replace it",
                        format!("chgrp --reference={dir} -- {path} && chmod 0660 -- {path}"),
                    )
                }
                StateProblem::Unreadable(R::Symlink { .. } | R::NotRegular { .. }) => (
                    "takes of its credential start afresh, and cannot record their counts while \
                     it stays",
                    format!("rm -r -- {path} (the next take starts its credential afresh)"),
                ),
                StateProblem::Unreadable(R::Io { .. }) => (
                    "takes of its credential go unaccounted",
                    format!("check {path} and its filesystem"),
                ),
                _ => (
                    "takes of its credential start afresh and replace it",
                    format!("rm -- {path} (or let the next take of its credential replace it)"),
                ),
            };
            json::Problem {
                name: u.file.clone(),
                what: format!(
                    "a budget state left out of the budgets ({}): {effect}",
                    exit::chain(&u.why)
                ),
                fix,
                blocks: None,
            }
        })
        .collect()
}

pub(crate) fn show(as_json: bool, fleet: &crate::cli::FleetAt) -> Result<ExitCode, Failure> {
    let health = if fleet.endpoints.is_empty() {
        let ledger = ledger("worklane")?;
        let dir = ledger.dir().path().to_owned();
        let health = ledger
            .health_report()
            .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
        let problems = unshown_problems(&dir, &health.unshown);
        (health.views, problems)
    } else {
        (crate::fleet::budget_views(fleet)?, Vec::new())
    };
    let (views, problems) = health;
    let config = crate::config::Problem::now();
    if as_json {
        outln!(
            "{}",
            json::pretty(&json::BudgetShow {
                version: json::VERSION,
                budgets: views_json(&views),
                problems,
                config_problem: config.as_ref().map(crate::config::Problem::json),
            })
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(problem) = &config {
        outln!("{}", problem.line())?;
    }
    print_views(&views)?;
    let lines = crate::json::problem_lines(&problems);
    if !lines.is_empty() {
        outln!("budget states left out ({}):", lines.len())?;
        for line in &lines {
            outln!("  {line}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
