//! A take refused because its pool's config cannot be used: 78, with the fix
//! (`worklane_view::config_problem` says what is wrong and how to fix it).

use crate::exit::Failure;
use worklane_view::config_problem::fix;

/// A take refused because its pool's config cannot be used: 78, with the fix.
pub(crate) fn take_refused(e: worklane_admission::take::Error) -> Failure {
    let fix = match &e {
        worklane_admission::take::Error::Config { source } => Some(fix(source.path(), source)),
        _ => None,
    };
    let failure = Failure::from(e);
    match fix {
        Some(fix) => Failure::new(failure.code, format!("{}; fix: {fix}", failure.message)),
        None => failure,
    }
}
