//! Model providers: which response headers carry which limit, in which time format, and which
//! statuses pause every caller of a credential. Built in: `github` (the REST/GraphQL ledger of
//! [`crate::Observation`], unchanged), `anthropic` and `openai`; any other is a [`Profile`]
//! given by the caller (the slot directory's config names them, [`Provider::resolve`]).
//!
//! A provider's budget has *dimensions*, each a window of its own: `requests`, `tokens`,
//! `input-tokens`, `output-tokens`. A take reserves one request and an estimate of tokens; the
//! response's headers (and its `usage`) say what is really left. Every parser here is a plain
//! function: a header that is missing, negative, not a number, huge, or a reset far in the
//! future is "not known", never guessed.
//!
//! - `profile`: what a provider's responses say, and how ([`Profile`], [`Dimension`],
//!   [`ResetFormat`], and a profile read from the config, [`Profile::from_json`]).
//! - `observation`: what one response's headers say ([`ProviderObservation`]).
//! - `usage`: what a response says it used, from its JSON body or its stream of server-sent
//!   events ([`Usage`], [`StreamUsage`]).
//! - `resolve`: which provider a name means, built in or described by the config.

pub mod profile;
pub mod resolve;

mod observation;
mod usage;

pub use observation::{ProviderObservation, SeenWindow};
pub use profile::{Dimension, DimensionHeaders, Profile, ResetFormat, duration_ms};
pub use usage::{NotAResponse, StreamUsage, Usage};

/// A provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    /// GitHub's REST and GraphQL limits: the ledger of [`crate::Observation`], its files
    /// `github-budget-<key>.*`.
    Github,
    /// Anthropic's API.
    Anthropic,
    /// OpenAI's API.
    Openai,
    /// Another provider, by its name (which names its files) and profile.
    Generic {
        /// Its name: 1 to 32 lowercase ASCII letters, digits or `-`, not one of the above.
        name: String,
        /// What its responses say.
        profile: Profile,
    },
}

/// Whether `name` may name a generic provider (and its files): 1 to 32 lowercase ASCII
/// letters, digits or `-`, starting with a letter, none of the built-in names.
#[must_use]
pub fn is_provider_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !matches!(name, "github" | "anthropic" | "openai")
}

impl Provider {
    /// The built-in provider of `name`: `github`, `anthropic`, `openai`.
    #[must_use]
    pub fn builtin(name: &str) -> Option<Provider> {
        match name {
            "github" => Some(Provider::Github),
            "anthropic" => Some(Provider::Anthropic),
            "openai" => Some(Provider::Openai),
            _ => None,
        }
    }

    /// Its name, which starts its file names (`<name>-budget-<key>.json`).
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            Provider::Github => "github",
            Provider::Anthropic => "anthropic",
            Provider::Openai => "openai",
            Provider::Generic { name, .. } => name,
        }
    }

    /// What its responses say; `None` for GitHub, whose responses [`crate::Observation`]
    /// reads.
    #[must_use]
    pub fn profile(&self) -> Option<Profile> {
        match self {
            Provider::Github => None,
            Provider::Anthropic => Some(profile::anthropic()),
            Provider::Openai => Some(profile::openai()),
            Provider::Generic { profile, .. } => Some(profile.clone()),
        }
    }

    /// The dimensions a take of this provider reserves.
    #[must_use]
    pub fn dimensions(&self) -> Vec<Dimension> {
        self.profile()
            .map(|p| p.dimensions.iter().map(|d| d.dimension).collect())
            .unwrap_or_default()
    }
}

/// The environment variable a built-in provider's key is usually read from
/// (`GITHUB_TOKEN`, `ANTHROPIC_API_KEY`, `OPENAI_API_KEY`); `None` for any other name, whose
/// caller must name the variable.
#[must_use]
pub fn default_token_env(name: &str) -> Option<&'static str> {
    match name {
        "github" => Some("GITHUB_TOKEN"),
        "anthropic" => Some("ANTHROPIC_API_KEY"),
        "openai" => Some("OPENAI_API_KEY"),
        _ => None,
    }
}

/// The paths of the calls a model provider's generation limits count, as each path's last
/// segments: Anthropic's Messages, OpenAI's chat and text completions, Responses and
/// embeddings. Anything else (`/v1/messages/count_tokens`, `/v1/models`, a batch, a file, a
/// response fetched or cancelled by id) is counted apart by the provider, or not at all.
pub const GENERATION_PATHS: [&str; 5] = [
    "/messages",
    "/chat/completions",
    "/completions",
    "/responses",
    "/embeddings",
];

/// Whether a call of `method` to `path` (without its query) is one a model provider's
/// generation limits count, and so takes from the budget: a `POST` to a path that ends with one
/// of [`GENERATION_PATHS`] (after any prefix, such as `/v1`). Every other call is forwarded
/// without a take.
#[must_use]
pub fn is_generation(method: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    method.eq_ignore_ascii_case("POST") && GENERATION_PATHS.iter().any(|end| path.ends_with(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_generation_calls_take_from_the_budget() {
        for (method, path) in [
            ("POST", "/v1/messages"),
            ("POST", "/v1/chat/completions"),
            ("post", "/v1/responses/"),
            ("POST", "/v1/completions"),
            ("POST", "/v1/embeddings"),
            ("POST", "/openai/v1/chat/completions"),
        ] {
            assert!(is_generation(method, path), "{method} {path}");
        }
        for (method, path) in [
            ("POST", "/v1/messages/count_tokens"),
            ("GET", "/v1/models"),
            ("GET", "/v1/messages"),
            ("POST", "/v1/messages/batches"),
            ("GET", "/v1/responses/resp_123"),
            ("POST", "/v1/responses/resp_123/cancel"),
            ("HEAD", "/"),
            ("POST", "/v1/files"),
        ] {
            assert!(!is_generation(method, path), "{method} {path}");
        }
    }

    #[test]
    fn names_of_providers_and_dimensions() {
        for name in ["github", "anthropic", "openai"] {
            assert_eq!(
                Provider::builtin(name).map(|p| p.name().to_owned()),
                Some(name.into())
            );
            assert!(!is_provider_name(name), "{name} is built in");
        }
        assert_eq!(default_token_env("github"), Some("GITHUB_TOKEN"));
        assert_eq!(default_token_env("anthropic"), Some("ANTHROPIC_API_KEY"));
        assert_eq!(default_token_env("openai"), Some("OPENAI_API_KEY"));
        assert_eq!(default_token_env("mistral-eu"), None, "the config names it");
        assert!(is_provider_name("mistral-eu"));
        for bad in ["", "Mistral", "-x", "a/b", "x.y", &"a".repeat(33)] {
            assert!(!is_provider_name(bad), "{bad:?}");
        }
        for d in Dimension::ALL {
            assert_eq!(Dimension::parse(d.name()), Some(d));
        }
        assert_eq!(Provider::Github.profile(), None);
        assert_eq!(
            Provider::Openai.dimensions(),
            [Dimension::Requests, Dimension::Tokens]
        );
    }
}
