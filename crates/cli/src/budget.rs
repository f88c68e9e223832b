//! `worklane budget show | take | observe`: the per-credential API budget from the command
//! line, so a harness in any language shares the machine's budget.

use crate::cli::{BudgetObserveArgs, BudgetTakeArgs};
use crate::exit::{self, Failure};
use crate::out::{errln, outln};
use serde_json::{Value, json};
use std::process::ExitCode;
use worklane_budget::{CredentialKey, CredentialView, Ledger, Observation, Observed};
use worklane_lease::rfc3339_ms;

/// The ledger of the machine's slot directory. Only the directory is resolved: a cap the
/// config gets wrong is no reason to hold back an API call.
fn ledger(owner: &str) -> Result<Ledger, Failure> {
    let dir = worklane_slotfile::SlotDir::resolve_dir()
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    Ok(Ledger::new(dir).owner(owner))
}

/// The credential named by the environment variable `var`; the token is hashed at once and
/// never printed.
fn key_from_env(var: &str) -> Result<CredentialKey, Failure> {
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

/// The health view as JSON: credentials numbered, never named by key.
pub(crate) fn views_json(views: &[CredentialView]) -> Value {
    Value::Array(
        views
            .iter()
            .map(|v| {
                json!({
                    "credential": v.number,
                    "updated": rfc3339_ms(v.updated_ms),
                    "paused_until": v.paused_until.map(rfc3339_ms),
                    "resources": v.resources.iter().map(|r| json!({
                        "name": r.name,
                        "limit": r.limit,
                        "remaining": r.remaining,
                        "granted": r.granted,
                        "left": r.left,
                        "reset": rfc3339_ms(r.reset_at),
                        "by_consumer": r.by_consumer.iter()
                            .map(|(name, n)| (name.clone(), Value::from(*n)))
                            .collect::<serde_json::Map<_, _>>(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// The health view for people, one block per credential.
pub(crate) fn print_views(views: &[CredentialView]) -> Result<(), Failure> {
    if views.is_empty() {
        outln!("API budgets: none recorded")?;
        return Ok(());
    }
    for v in views {
        outln!(
            "API budget of credential #{} (updated {})",
            v.number,
            rfc3339_ms(v.updated_ms)
        )?;
        if let Some(until) = v.paused_until {
            outln!(
                "  paused until {} (secondary rate limit)",
                rfc3339_ms(until)
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
            outln!(
                "  {:<10} {} left{limit} (remaining {} when seen, {} granted since); resets {}{}",
                r.name,
                r.left,
                r.remaining,
                r.granted,
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

pub(crate) fn show(as_json: bool) -> Result<ExitCode, Failure> {
    let views = ledger("worklane")?
        .health()
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    if as_json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&views_json(&views)).unwrap_or_default()
        )?;
    } else {
        print_views(&views)?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn take(args: &BudgetTakeArgs) -> Result<ExitCode, Failure> {
    let key = key_from_env(&args.token_env)?;
    // The ledger never holds a call back for its own trouble, a slot directory it cannot
    // reach included: the call goes, unaccounted, and stderr says why.
    let ledger = match ledger(&args.consumer) {
        Ok(ledger) => ledger,
        Err(failure) => {
            let why = format!("no budget ledger: {}", failure.message);
            if args.json {
                outln!(
                    "{}",
                    json!({"go": true, "counted": false, "left": null, "unaccounted": why})
                )?;
            }
            errln!("worklane: the call may go, unaccounted: {why}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    match ledger.take(&key, &args.resource, &args.consumer) {
        Ok(grant) => {
            let unaccounted = grant.unaccounted.as_ref().map(ToString::to_string);
            if args.json {
                outln!(
                    "{}",
                    json!({
                        "go": true,
                        "counted": grant.counted,
                        "left": grant.left,
                        "unaccounted": unaccounted,
                    })
                )?;
            }
            // Loud in both forms: a call that goes unaccounted is a person's to notice.
            if let Some(why) = &unaccounted {
                errln!("worklane: the call may go, unaccounted: {why}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(refused) => {
            if args.json {
                outln!(
                    "{}",
                    json!({
                        "go": false,
                        "kind": refused.kind(),
                        "status": refused.status(),
                        "message": refused.to_string(),
                    })
                )?;
            }
            Err(Failure::new(exit::TEMP_FAIL, refused.to_string()))
        }
    }
}

pub(crate) fn observe(args: &BudgetObserveArgs) -> Result<ExitCode, Failure> {
    let key = key_from_env(&args.token_env)?;
    let mut headers = Vec::with_capacity(args.header.len());
    for h in &args.header {
        let Some((name, value)) = h.split_once(':') else {
            return Err(Failure::new(
                exit::USAGE,
                format!("--header {h:?}: give it as \"Name: value\""),
            ));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let observation = Observation::from_headers(args.status, |name| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    })
    .with_secondary_limit(args.secondary_limit);
    let ledger = match ledger("worklane") {
        Ok(ledger) => ledger,
        Err(failure) => {
            errln!("worklane: response not recorded: {}", failure.message);
            return Ok(ExitCode::SUCCESS);
        }
    };
    match ledger.observe(&key, &observation) {
        Observed::Recorded => {}
        // Recording is best effort by design: the response was already received.
        Observed::Skipped(why) => errln!("worklane: response not recorded: {why}"),
    }
    Ok(ExitCode::SUCCESS)
}
