//! What a take answers, for GitHub's budget and the model providers' alike: its JSON with
//! `--json`, a model provider's reservation on stdout, why a call goes unaccounted on stderr,
//! and a refusal's exit 75.

use crate::exit::{self, Failure};
use crate::json;
use crate::out::{errln, outln};
use std::process::ExitCode;
use worklane_budget::Refused;
use worklane_lease::rfc3339_ms;

/// A take that lets the call go (exit 0): its JSON with `--json`; without, a model provider's
/// reservation alone on stdout (GitHub's take prints nothing); and, in both forms, why it goes
/// unaccounted if it does, on stderr (a call that goes unaccounted is a person's to notice).
pub(super) fn granted(
    as_json: bool,
    counted: bool,
    left: Option<u64>,
    unaccounted: Option<String>,
    reservation: Option<String>,
) -> Result<ExitCode, Failure> {
    if as_json {
        outln!(
            "{}",
            json::line(&json::Take {
                version: json::VERSION,
                answer: json::TakeAnswer::Go {
                    go: json::True,
                    counted,
                    left,
                    unaccounted: unaccounted.clone(),
                    reservation,
                },
            })
        )?;
    } else if let Some(reservation) = &reservation {
        outln!("{reservation}")?;
    }
    if let Some(why) = &unaccounted {
        errln!("worklane: the call may go, unaccounted: {why}");
    }
    Ok(ExitCode::SUCCESS)
}

/// A refused take: its JSON (with `--json`) and exit 75.
pub(super) fn refusal(as_json: bool, refused: &Refused) -> Result<ExitCode, Failure> {
    if as_json {
        outln!(
            "{}",
            json::line(&json::Take {
                version: json::VERSION,
                answer: json::TakeAnswer::Refused {
                    go: json::False,
                    kind: refused.kind(),
                    status: refused.status(),
                    retry_at: retry_at(refused).map(rfc3339_ms),
                    message: refused.to_string(),
                },
            })
        )?;
    }
    Err(Failure::new(exit::TEMP_FAIL, refused.to_string()))
}

/// When a refused call may be tried again: the window's reset or the pause's end (ms since
/// the Unix epoch), if the refusal says.
fn retry_at(refused: &Refused) -> Option<u64> {
    match refused {
        Refused::RateLimited { reset_at, .. } => Some(*reset_at),
        Refused::SecondaryRateLimited { until, .. } => Some(*until),
        _ => None,
    }
}
