//! The budgets of model providers from the command line: `budget take|observe|release
//! --provider anthropic|openai|NAME`. A take prints its reservation, which the response's
//! `observe --reservation` (or `release`, for a call that ended without one) settles. Which
//! provider a name means, its key's usual variable, and what a response says it used, are
//! `worklane-budget`'s (`Provider::resolve`, `default_token_env`, `Usage::of_saved`): the
//! proxy reads them the same way. What is left here is the command line: the files read, the
//! exit codes and the messages.

use super::answer::{granted, refusal};
use crate::cli::{BudgetObserveArgs, BudgetReleaseArgs, BudgetTakeArgs};
use crate::exit::{self, Failure};
use crate::out::errln;
use crate::shared::budget::{key_from_env, ledger, provider, token_env};
use std::process::ExitCode;
use worklane_budget::dump::lookup;
use worklane_budget::{Need, Observed, Profile, ProviderObservation, Usage};
use worklane_lease::{Clock, SystemClock};

/// `budget take --provider P`: one request and the tokens estimated, reserved; prints the
/// reservation (or, with `--json`, the document with it).
pub(crate) fn take(args: &BudgetTakeArgs) -> Result<ExitCode, Failure> {
    let provider = provider(&args.provider)?;
    let key = key_from_env(&token_env(&args.provider, args.token_env.as_deref())?)?;
    if !args.fleet.endpoints.is_empty() {
        return Err(Failure::new(
            exit::USAGE,
            "--fleet shares GitHub's budget only; a model provider's budget is this host's",
        ));
    }
    let need = Need {
        input_tokens: args.input_tokens,
        output_tokens: args.output_tokens,
    };
    // The ledger never holds a call back for its own trouble: the call goes, unaccounted.
    let ledger = match ledger(&args.consumer) {
        Ok(ledger) => ledger,
        Err(failure) => {
            let why = format!("no budget ledger: {}", failure.message);
            return granted(args.json, false, None, Some(why), None);
        }
    };
    let wait_max = u64::try_from(args.wait_max.as_millis()).unwrap_or(u64::MAX);
    match ledger.take_model_within(&provider, &key, need, &args.consumer, wait_max) {
        Ok(grant) => granted(
            args.json,
            grant.counted,
            grant.left,
            grant.unaccounted.as_ref().map(|why| exit::chain(why)),
            grant.reservation,
        ),
        Err(refused) => refusal(args.json, &refused),
    }
}

/// `budget observe --provider P`: what the response said, settling its reservation.
pub(crate) fn observe(
    args: &BudgetObserveArgs,
    status: u16,
    headers: &[(String, String)],
) -> Result<ExitCode, Failure> {
    let provider = provider(&args.provider)?;
    let key = key_from_env(&token_env(&args.provider, args.token_env.as_deref())?)?;
    let profile = provider.profile().unwrap_or_else(|| Profile {
        dimensions: Vec::new(),
        retry_after: Vec::new(),
        pause_statuses: Vec::new(),
        overload_statuses: Vec::new(),
    });
    let usage = match &args.usage_json {
        Some(path) => usage_of(path)?,
        None => None,
    };
    let observation =
        ProviderObservation::from_headers(&profile, status, SystemClock.now_ms(), |name| {
            lookup(headers, name)
        })
        .with_usage(usage);
    let ledger = match ledger("worklane") {
        Ok(ledger) => ledger,
        Err(failure) => {
            errln!("worklane: response not recorded: {}", failure.message);
            return Ok(ExitCode::SUCCESS);
        }
    };
    if let Observed::Skipped(why) =
        ledger.observe_model(&provider, &key, args.reservation.as_deref(), &observation)
    {
        errln!("worklane: response not recorded: {}", exit::chain(&why));
    }
    Ok(ExitCode::SUCCESS)
}

/// `budget release --provider P --reservation ID`.
pub(crate) fn release(args: &BudgetReleaseArgs) -> Result<ExitCode, Failure> {
    let provider = provider(&args.provider)?;
    let key = key_from_env(&token_env(&args.provider, args.token_env.as_deref())?)?;
    let ledger = ledger("worklane")?;
    if let Observed::Skipped(why) = ledger.release(&provider, &key, &args.reservation) {
        errln!("worklane: reservation not released: {}", exit::chain(&why));
    }
    Ok(ExitCode::SUCCESS)
}

/// The `usage` of a response body (or of its final stream event) in `path` (`-`: stdin), read
/// as the proxy reads it (`Usage::of_saved`): none when it has none, a usage error when the
/// file cannot be read or is neither a body nor a stream.
fn usage_of(path: &std::path::Path) -> Result<Option<Usage>, Failure> {
    let fail = |e: &dyn std::fmt::Display| {
        Failure::new(exit::USAGE, format!("--usage-json {}: {e}", path.display()))
    };
    let raw = super::read_input(path, 1 << 22).map_err(|e| fail(&e))?;
    Usage::of_saved(&raw).map_err(|e| fail(&e))
}
