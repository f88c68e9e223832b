//! Which provider a name means: a built-in one (`github`, `anthropic`, `openai`), or one the
//! slot directory's config describes under `budget_providers.<name>` (PROTOCOL.md 13.1), read
//! with its profile. `worklane budget --provider`, `worklane why --provider` and `worklane
//! proxy --provider` all resolve their name here.

use super::{Profile, Provider, profile};
use std::path::PathBuf;
use worklane_slotfile::Environment;

/// Why a provider's name could not be resolved ([`Provider::resolve`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config's place could not be decided.
    #[error("cannot locate the config that describes the model providers")]
    Locate {
        /// Why.
        #[source]
        source: worklane_slotfile::resolve::Error,
    },
    /// The config could not be read.
    #[error("cannot read the config {}", path.display())]
    Read {
        /// The config file.
        path: PathBuf,
        /// Why.
        #[source]
        source: worklane_slotfile::read::Error,
    },
    /// The name is not built in, and the config (absent, not JSON, or without it) describes no
    /// provider of that name.
    #[error(
        "provider {name}: not github, anthropic or openai, and the config {} describes no \
         provider of that name under `budget_providers` (PROTOCOL.md 13.1)",
        path.display()
    )]
    Unknown {
        /// The name asked for.
        name: String,
        /// The config file.
        path: PathBuf,
    },
    /// The config describes the provider, but not as a profile.
    #[error("config {}: `budget_providers.{name}` is not a provider profile", path.display())]
    Profile {
        /// The name asked for.
        name: String,
        /// The config file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: profile::Error,
    },
}

impl Provider {
    /// The provider `name` means: a built-in one, else the one the config of this process's
    /// slot directory describes ([`Provider::resolve_in`] with
    /// [`Environment::from_process`]).
    pub fn resolve(name: &str) -> Result<Provider, Error> {
        match Provider::builtin(name) {
            Some(builtin) => Ok(builtin),
            None => Provider::resolve_in(&Environment::from_process(), name),
        }
    }

    /// The provider `name` means: a built-in one (the config is not read), else the one the
    /// config `env` locates describes under `budget_providers` ([`Provider::from_config`]).
    /// A config that is absent or not JSON describes none.
    pub fn resolve_in(env: &Environment, name: &str) -> Result<Provider, Error> {
        if let Some(builtin) = Provider::builtin(name) {
            return Ok(builtin);
        }
        let path = env
            .locate()
            .map_err(|source| Error::Locate { source })?
            .config;
        let raw =
            worklane_slotfile::read::read_path_in(env, &path).map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?;
        let config: serde_json::Value = raw
            .and_then(|raw| serde_json::from_slice(&raw).ok())
            .unwrap_or_default();
        match Provider::from_config(name, &config) {
            Ok(Some(provider)) => Ok(provider),
            Ok(None) => Err(Error::Unknown {
                name: name.to_owned(),
                path,
            }),
            Err(source) => Err(Error::Profile {
                name: name.to_owned(),
                path,
                source,
            }),
        }
    }

    /// The provider `name` means in the config document `config`: a built-in one, else
    /// `budget_providers.<name>` read as a [`Profile`] ([`Profile::from_json`]). `Ok(None)`:
    /// the config describes no provider of that name.
    pub fn from_config(
        name: &str,
        config: &serde_json::Value,
    ) -> Result<Option<Provider>, profile::Error> {
        if let Some(builtin) = Provider::builtin(name) {
            return Ok(Some(builtin));
        }
        let Some(value) = config.get("budget_providers").and_then(|p| p.get(name)) else {
            return Ok(None);
        };
        Ok(Some(Provider::Generic {
            name: name.to_owned(),
            profile: Profile::from_json(value)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Dimension;

    fn mistral() -> serde_json::Value {
        serde_json::json!({"budget_providers": {"mistral": {"dimensions": {"requests": {
            "limit": "x-ratelimit-limit-req", "remaining": "x-ratelimit-remaining-req",
            "reset": "x-ratelimit-reset-req", "format": "duration"}}}}})
    }

    #[test]
    fn a_name_is_built_in_or_described_by_the_config() {
        let config = mistral();
        for name in ["github", "anthropic", "openai"] {
            assert_eq!(
                Provider::from_config(name, &serde_json::Value::Null),
                Ok(Provider::builtin(name)),
                "{name} needs no config"
            );
        }
        let described = Provider::from_config("mistral", &config)
            .expect("a profile")
            .expect("described");
        assert_eq!(described.name(), "mistral");
        assert_eq!(described.dimensions(), [Dimension::Requests]);
        assert_eq!(
            Provider::from_config("cohere", &config),
            Ok(None),
            "not described"
        );
        let broken = serde_json::json!({"budget_providers": {"mistral": {"dimensions": {}}}});
        assert_eq!(
            Provider::from_config("mistral", &broken),
            Err(profile::Error::NoDimensions),
            "described, but not as a profile"
        );
    }

    #[test]
    fn a_name_is_resolved_against_the_config_the_environment_locates() {
        let temp = tempfile::tempdir().expect("a temp dir");
        let config = temp.path().join("config.json");
        let env = Environment::from_process()
            .var(worklane_slotfile::SLOTS_DIR_VAR, temp.path())
            .without(worklane_slotfile::SLOTS_CONFIG_VAR);
        assert_eq!(
            Provider::resolve_in(&env, "anthropic").ok(),
            Some(Provider::Anthropic),
            "built in"
        );
        let unknown = Provider::resolve_in(&env, "mistral").expect_err("no config yet");
        assert!(
            matches!(&unknown, Error::Unknown { name, path } if name == "mistral" && *path == config),
            "{unknown:?}"
        );
        std::fs::write(&config, "{not json").expect("write");
        assert!(
            matches!(
                Provider::resolve_in(&env, "mistral"),
                Err(Error::Unknown { .. })
            ),
            "a config that is not JSON describes nothing"
        );
        std::fs::write(&config, mistral().to_string()).expect("write");
        assert_eq!(
            Provider::resolve_in(&env, "mistral")
                .expect("described")
                .name(),
            "mistral"
        );
        std::fs::write(
            &config,
            r#"{"budget_providers": {"mistral": {"dimensions": {"requests": {"format": "unix"}}}}}"#,
        )
        .expect("write");
        let refused = Provider::resolve_in(&env, "mistral").expect_err("not a profile");
        assert!(
            matches!(
                &refused,
                Error::Profile {
                    source: profile::Error::Format { .. },
                    ..
                }
            ),
            "{refused:?}"
        );
        assert!(
            refused.to_string().contains("budget_providers.mistral"),
            "the message names the key: {refused}"
        );
    }
}
