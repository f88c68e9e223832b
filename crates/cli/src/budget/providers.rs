//! The budgets of model providers from the command line: `budget take|observe|release
//! --provider anthropic|openai|NAME`. A take prints its reservation, which the response's
//! `observe --reservation` (or `release`, for a call that ended without one) settles. Which
//! provider a name means, and what a response says it used, are `worklane-budget`'s
//! (`Provider::resolve`, `Usage::of_body`, `Usage::of_stream`): the proxy reads them the same
//! way.

use super::answer::{granted, refusal};
use super::{key_from_env, ledger};
use crate::cli::{BudgetObserveArgs, BudgetReleaseArgs, BudgetTakeArgs};
use crate::exit::{self, Failure};
use crate::out::errln;
use std::process::ExitCode;
use worklane_budget::{Need, Observed, Profile, Provider, ProviderObservation, Usage};
use worklane_lease::{Clock, SystemClock};

/// The environment variable a provider's key is read from by default.
pub(crate) fn default_token_env(provider: &str) -> Option<&'static str> {
    match provider {
        "github" => Some("GITHUB_TOKEN"),
        "anthropic" => Some("ANTHROPIC_API_KEY"),
        "openai" => Some("OPENAI_API_KEY"),
        _ => None,
    }
}

/// The variable `--token-env` names, or the provider's usual one.
pub(crate) fn token_env(provider: &str, given: Option<&str>) -> Result<String, Failure> {
    given
        .map(str::to_owned)
        .or_else(|| default_token_env(provider).map(str::to_owned))
        .ok_or_else(|| {
            Failure::new(
                exit::USAGE,
                format!(
                    "--provider {provider}: name the variable holding its key with --token-env"
                ),
            )
        })
}

/// The provider `name`: a built-in one, or one the config's `budget_providers` describes
/// (`Provider::resolve`); every failure is a config error (exit 78).
pub(crate) fn provider(name: &str) -> Result<Provider, Failure> {
    use worklane_budget::provider::resolve::Error as E;
    Provider::resolve(name).map_err(|e| {
        // A name nothing describes is the caller's mistake (64); a config that cannot be read
        // or describes the provider wrongly is the machine's (78).
        let (code, message) = match &e {
            E::Locate { source } => (exit::CONFIG, exit::chain(source)),
            E::Read { source, .. } => (exit::CONFIG, exit::chain(source)),
            E::Unknown { path, .. } => (
                exit::USAGE,
                format!(
                    "--provider {name}: not github, anthropic or openai, and the config {} \
                     describes no provider of that name under `budget_providers` \
                     (PROTOCOL.md 13.1)",
                    path.display()
                ),
            ),
            E::Profile { path, source, .. } => (
                exit::CONFIG,
                format!(
                    "config {}: `budget_providers.{name}` {source}",
                    path.display()
                ),
            ),
            _ => (exit::CONFIG, exit::chain(&e)),
        };
        Failure::new(code, message)
    })
}

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
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
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

/// The `usage` of a response body (or of its final stream event) in `path` (`-`: stdin):
/// none when it has none, a usage error when the file cannot be read or is not JSON.
fn usage_of(path: &std::path::Path) -> Result<Option<Usage>, Failure> {
    use std::io::Read;
    let mut raw = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().lock().take(1 << 22).read_to_end(&mut raw)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(1 << 22).read_to_end(&mut raw))
    };
    read.map_err(|e| Failure::new(exit::USAGE, format!("--usage-json {}: {e}", path.display())))?;
    // A body, or a stream's events (Anthropic's `message_start` and `message_delta`, OpenAI's
    // last chat chunk, the Responses API's `response.completed`), read as the proxy reads them.
    let text = String::from_utf8_lossy(&raw);
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
        return Ok(Usage::of_body(&value));
    }
    let usage = Usage::of_stream(&raw);
    if usage.is_none() && !text.lines().any(|l| l.starts_with("data:")) {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--usage-json {}: neither a JSON body nor a stream of `data:` events",
                path.display()
            ),
        ));
    }
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::usage_of;
    use worklane_budget::Usage;

    fn usage_in(text: &str) -> Result<Option<Usage>, String> {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("body");
        std::fs::write(&path, text).expect("write");
        usage_of(&path).map_err(|failure| failure.message)
    }

    #[test]
    fn usage_json_reads_a_body_or_any_provider_s_stream() {
        let usage = |input_tokens, output_tokens| {
            Ok(Some(Usage {
                input_tokens,
                output_tokens,
            }))
        };
        assert_eq!(
            usage_in(
                r#"{"id":"msg_01","type":"message","usage":{"input_tokens":9,"output_tokens":2}}"#
            ),
            usage(9, 2),
            "a JSON body"
        );
        assert_eq!(
            usage_in(
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":1}}}\n\n\
                 event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":120}}\n\n"
            ),
            usage(900, 120),
            "Anthropic's stream"
        );
        assert_eq!(
            usage_in(
                "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\",\"usage\":null}}\n\n\
                 event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":37,\"output_tokens\":11,\"total_tokens\":48}}}\n\n"
            ),
            usage(37, 11),
            "OpenAI's Responses stream: response.completed's response.usage"
        );
        assert_eq!(
            usage_in("data: {\"choices\":[],\"usage\":null}\n\ndata: [DONE]\n\n"),
            Ok(None),
            "a stream that says no usage"
        );
        let refused = usage_in("<html>502 Bad Gateway</html>").expect_err("neither");
        assert!(
            refused.contains("neither a JSON body nor a stream"),
            "{refused}"
        );
    }
}
