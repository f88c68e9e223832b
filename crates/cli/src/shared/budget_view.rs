//! The budgets' health view, as `budget show` and `slots` print it: JSON (`views_json`), for
//! people (`print_views`), and the states it left out as problems (`unshown_problems`).

use crate::exit::{self, Failure};
use crate::json;
use crate::out::outln;
use worklane_budget::CredentialView;
use worklane_lease::rfc3339_ms;

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
            let path = worklane_stdx::shell_quote(&dir.join(&u.file).display().to_string());
            let dir = worklane_stdx::shell_quote(&dir.display().to_string());
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
