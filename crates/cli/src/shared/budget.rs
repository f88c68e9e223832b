//! The budget ledger, a credential and a model provider as the command line names them, for
//! `budget`, `why --provider` and `proxy`: which ledger (`ledger`), which key (`key_from_env`,
//! never printed), which variable holds it (`token_env`) and which provider a name means
//! (`provider`), each failure with its exit code.

use crate::exit::{self, Failure};
use worklane_budget::{CredentialKey, Ledger, Provider};

/// The ledger of the machine's slot directory. Only the directory is resolved: a cap the
/// config gets wrong is no reason to hold back an API call.
pub(crate) fn ledger(owner: &str) -> Result<Ledger, Failure> {
    let dir = worklane_slotfile::SlotDir::resolve_dir()
        .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
    Ok(Ledger::new(dir).owner(owner))
}

/// The credential named by the environment variable `var`; the token is hashed at once and
/// never printed.
pub(crate) fn key_from_env(var: &str) -> Result<CredentialKey, Failure> {
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

/// The variable `--token-env` names, or the provider's usual one.
pub(crate) fn token_env(provider: &str, given: Option<&str>) -> Result<String, Failure> {
    given
        .map(str::to_owned)
        .or_else(|| worklane_budget::default_token_env(provider).map(str::to_owned))
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
