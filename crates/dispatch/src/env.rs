//! The environment a queued attempt keeps: only what its driver needs, never a secret by name.
//!
//! A row outlives the launcher that enqueued it, and the dispatcher that holds it is a
//! long-lived process, so the queue stores a minimized environment: names with an allowed
//! prefix, not shaped like a secret, with values shorter than 4,096 characters. This filters
//! names and lengths only; a credential hidden in an innocently named value needs another
//! control (pass credentials to drivers through their own path, not the queue).

use std::collections::BTreeMap;
use std::ffi::OsString;

/// Name prefixes kept by default.
pub const DEFAULT_PREFIXES: &[&str] = &["WORKLANE_", "LANE_", "GIT_AUTHOR_", "GIT_COMMITTER_"];

/// Words that make a name secret-shaped (compared case-insensitively, anywhere in the name
/// after its allowed prefix).
pub const DEFAULT_SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "KEY",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "CERT",
];

/// The longest value kept, in characters: 4,095 kept, 4,096 dropped.
pub const MAX_VALUE_CHARS: usize = 4_095;

/// Why a variable was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Its name has none of the allowed prefixes.
    Unrelated,
    /// Its name looks like a secret's.
    SecretShaped,
    /// Its value has 4,096 characters or more.
    TooLong,
}

/// Which variables a queued attempt keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvFilter {
    prefixes: Vec<String>,
    secret_words: Vec<String>,
}

impl Default for EnvFilter {
    fn default() -> Self {
        EnvFilter::new(
            DEFAULT_PREFIXES.iter().map(|p| (*p).to_owned()),
            DEFAULT_SECRET_WORDS.iter().map(|w| (*w).to_owned()),
        )
    }
}

impl EnvFilter {
    /// A filter keeping names with one of `prefixes` that contain none of `secret_words` nor
    /// any of [`DEFAULT_SECRET_WORDS`]: the default words are a floor no setting removes.
    pub fn new(
        prefixes: impl IntoIterator<Item = String>,
        secret_words: impl IntoIterator<Item = String>,
    ) -> EnvFilter {
        let mut words: Vec<String> = DEFAULT_SECRET_WORDS
            .iter()
            .map(|w| (*w).to_owned())
            .collect();
        for word in secret_words {
            let word = word.to_ascii_uppercase();
            if !word.is_empty() && !words.contains(&word) {
                words.push(word);
            }
        }
        EnvFilter {
            prefixes: prefixes.into_iter().collect(),
            secret_words: words,
        }
    }

    /// Whether the variable `name=value` is kept, and if not, why. The secret words are looked
    /// for in what follows the allowed prefix (`GIT_AUTHOR_NAME` is not an `AUTH`, but
    /// `GIT_AUTHOR_PASSWORD` is a `PASSWORD`).
    pub fn judge(&self, name: &str, value: &str) -> Result<(), Dropped> {
        let Some(rest) = self
            .prefixes
            .iter()
            .filter_map(|p| name.strip_prefix(p.as_str()))
            .min_by_key(|rest| rest.len())
        else {
            return Err(Dropped::Unrelated);
        };
        let upper = rest.to_ascii_uppercase();
        if self.secret_words.iter().any(|w| upper.contains(w.as_str())) {
            return Err(Dropped::SecretShaped);
        }
        if value.chars().count() > MAX_VALUE_CHARS {
            return Err(Dropped::TooLong);
        }
        Ok(())
    }

    /// The variables of `vars` that are kept, by name (a name or value that is not UTF-8 is
    /// dropped too).
    pub fn keep(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> BTreeMap<String, String> {
        let mut kept = BTreeMap::new();
        for (name, value) in vars {
            let (Ok(name), Ok(value)) = (name.into_string(), value.into_string()) else {
                continue;
            };
            if self.judge(&name, &value).is_ok() {
                kept.insert(name, value);
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)))
            .collect()
    }

    #[test]
    fn the_seeds_cases() {
        let f = EnvFilter::default();
        let kept = f.keep(os(&[
            ("LANE_NAME", "docs"),
            ("GIT_AUTHOR_NAME", "A"),
            ("GIT_COMMITTER_EMAIL", "a@b"),
            ("WORKLANE_STAGE", "build"),
            ("HOME", "/root"),
            ("PATH", "/bin"),
            ("WORKLANE_TOKEN", "t"),
            ("LANE_API_KEY", "k"),
            ("LANE_session_id", "s"),
            ("GIT_AUTHOR_PASSWORD", "p"),
            ("LANE_LONG_OK", &"x".repeat(4_095)),
            ("LANE_TOO_LONG", &"x".repeat(4_096)),
        ]));
        let names: Vec<&str> = kept.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "GIT_AUTHOR_NAME",
                "GIT_COMMITTER_EMAIL",
                "LANE_LONG_OK",
                "LANE_NAME",
                "WORKLANE_STAGE"
            ],
            "kept: allowed prefixes, no secret word, under 4,096 characters"
        );
        assert_eq!(f.judge("HOME", "/"), Err(Dropped::Unrelated));
        assert_eq!(f.judge("WORKLANE_TOKEN", ""), Err(Dropped::SecretShaped));
        assert_eq!(
            f.judge("LANE_auth_header", ""),
            Err(Dropped::SecretShaped),
            "any case"
        );
        assert_eq!(
            f.judge("LANE_X", &"é".repeat(4_095)),
            Ok(()),
            "characters, not bytes"
        );
        assert_eq!(f.judge("LANE_X", &"é".repeat(4_096)), Err(Dropped::TooLong));
        assert_eq!(
            f.judge("lane_x", "v"),
            Err(Dropped::Unrelated),
            "prefixes are exact"
        );
    }

    #[test]
    fn given_prefixes_replace_the_defaults_and_given_words_add_to_them() {
        let f = EnvFilter::new(["CI_".to_owned()], ["pin".to_owned()]);
        assert_eq!(f.judge("CI_JOB", "1"), Ok(()));
        assert_eq!(f.judge("CI_PIN", "1"), Err(Dropped::SecretShaped));
        assert_eq!(
            f.judge("CI_TOKEN", "1"),
            Err(Dropped::SecretShaped),
            "the default words are a floor"
        );
        assert_eq!(f.judge("LANE_X", "1"), Err(Dropped::Unrelated));
        let all = EnvFilter::new(
            ('A'..='Z').map(String::from),
            ["@@@@".to_owned(), String::new()],
        );
        assert_eq!(
            all.judge("AWS_SECRET_ACCESS_KEY", "x"),
            Err(Dropped::SecretShaped),
            "no word list removes SECRET"
        );
        assert_eq!(all.judge("GITHUB_TOKEN", "x"), Err(Dropped::SecretShaped));
        assert_eq!(all.judge("HOME", "/root"), Ok(()));
    }

    #[cfg(unix)]
    #[test]
    fn names_or_values_that_are_not_utf8_are_dropped() {
        use std::os::unix::ffi::OsStringExt;
        let f = EnvFilter::default();
        let kept = f.keep([(OsString::from("LANE_X"), OsString::from_vec(vec![0xff]))]);
        assert!(kept.is_empty(), "{kept:?}");
    }
}
