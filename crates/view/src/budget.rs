//! The budgets' health view, as `budget show` and `slots` print it: JSON (`views_json`) and the
//! states it left out as problems (`unshown_problems`); the CLI prints it for people.

use crate::doc;
use worklane_budget::CredentialView;
use worklane_lease::rfc3339_ms;

/// The health view as JSON: credentials numbered, never named by key.
pub fn views_json(views: &[CredentialView]) -> Vec<doc::Budget> {
    views
        .iter()
        .map(|v| doc::Budget {
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
                .map(|r| doc::BudgetResource {
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

/// The budget states the health view left out, as problems: the file, what is wrong and what
/// a take does with it, and the fix. A credential is never named by its key in the view, but
/// a file that must be fixed is named by its file name.
pub fn unshown_problems(
    dir: &std::path::Path,
    unshown: &[worklane_budget::UnshownState],
) -> Vec<doc::Problem> {
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
            doc::Problem {
                name: u.file.clone(),
                what: format!(
                    "a budget state left out of the budgets ({}): {effect}",
                    worklane_stdx::chain(&u.why)
                ),
                fix,
                blocks: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::unshown_problems;
    use worklane_budget::{StateProblem, UnshownState};
    use worklane_slotfile::read::Error as R;

    /// A state that the read failed on with `error` (made here: the tests run as root, whom
    /// no permission refuses, and EIO cannot be made on demand).
    fn failed_with(error: std::io::Error) -> UnshownState {
        UnshownState {
            file: "github-budget-0123456789abcdef.json".into(),
            why: StateProblem::Unreadable(R::Io {
                path: "/slots/github-budget-0123456789abcdef.json".into(),
                source: error,
            }),
        }
    }

    #[test]
    fn a_state_this_user_may_not_read_is_given_to_the_group_and_another_io_error_is_checked() {
        let dir = std::path::Path::new("/slots");
        let denied = unshown_problems(
            dir,
            &[failed_with(std::io::ErrorKind::PermissionDenied.into())],
        );
        assert_eq!(
            denied[0].fix,
            "chgrp --reference=/slots -- /slots/github-budget-0123456789abcdef.json && chmod \
             0660 -- /slots/github-budget-0123456789abcdef.json"
        );
        assert!(
            denied[0].what.ends_with(
                ": this user's takes of its credential go unaccounted and never replace it"
            ),
            "{}",
            denied[0].what
        );
        let eio = unshown_problems(dir, &[failed_with(std::io::Error::from_raw_os_error(5))]);
        assert_eq!(
            eio[0].fix,
            "check /slots/github-budget-0123456789abcdef.json and its filesystem"
        );
        assert!(
            eio[0]
                .what
                .ends_with(": takes of its credential go unaccounted"),
            "{}",
            eio[0].what
        );
        assert_eq!(eio[0].name, "github-budget-0123456789abcdef.json");
        assert!(eio[0].blocks.is_none());
    }
}
