//! The credential key: which budget a token draws from, without ever keeping the token.

use sha2::{Digest, Sha256};

/// The key of one credential's budget: the first 16 hex digits of the token's SHA-256. The
/// token itself is never stored, printed or kept in memory by this value.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CredentialKey(String);

impl CredentialKey {
    /// The key of `token` (the bearer token exactly as sent, without `Bearer `).
    #[must_use]
    pub fn of_token(token: &str) -> CredentialKey {
        let digest = Sha256::digest(token.as_bytes());
        let mut hex = String::with_capacity(16);
        for byte in &digest[..8] {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        CredentialKey(hex)
    }

    /// A key read back from a file name: exactly 16 lowercase hex digits.
    #[must_use]
    pub fn parse(text: &str) -> Option<CredentialKey> {
        (text.len() == 16 && text.bytes().all(|b| HEX.contains(&b)))
            .then(|| CredentialKey(text.to_owned()))
    }

    /// The 16 hex digits.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The budget's state file, `github-budget-<key>.json`.
    #[must_use]
    pub fn state_name(&self) -> String {
        format!("{STATE_PREFIX}{}{STATE_SUFFIX}", self.0)
    }

    /// The budget's lock, `github-budget-<key>.lock`.
    #[must_use]
    pub fn lock_name(&self) -> String {
        format!("{STATE_PREFIX}{}.lock", self.0)
    }

    /// The state file of this credential's budget with `provider` (its name):
    /// `<provider>-budget-<key>.json` (`github`'s is [`CredentialKey::state_name`]).
    #[must_use]
    pub fn state_name_of(&self, provider: &str) -> String {
        format!("{provider}-budget-{}{STATE_SUFFIX}", self.0)
    }

    /// The lock of this credential's budget with `provider`: `<provider>-budget-<key>.lock`.
    #[must_use]
    pub fn lock_name_of(&self, provider: &str) -> String {
        format!("{provider}-budget-{}.lock", self.0)
    }
}

/// The provider and key a budget state file's name says: `github-budget-<key>.json` is
/// GitHub's, `<provider>-budget-<key>.json` another's (the provider a plain name: 1 to 32
/// lowercase ASCII letters, digits or `-`). `None` for any other name.
#[must_use]
pub fn parse_state_name(name: &str) -> Option<(String, CredentialKey)> {
    let stem = name.strip_suffix(STATE_SUFFIX)?;
    let (provider, key) = stem.rsplit_once("-budget-")?;
    let plain = !provider.is_empty()
        && provider.len() <= 32
        && provider
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    plain.then_some(())?;
    Some((provider.to_owned(), CredentialKey::parse(key)?))
}

/// Shows the key only (never anything of the token).
impl std::fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CredentialKey({})", self.0)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Every budget file name starts with this.
pub const STATE_PREFIX: &str = "github-budget-";
/// A budget's state file name ends with this.
pub const STATE_SUFFIX: &str = ".json";

#[cfg(test)]
mod tests {
    use super::{CredentialKey, parse_state_name};

    #[test]
    fn the_key_is_the_first_16_hex_of_the_sha256() {
        let key = CredentialKey::of_token("abc");
        assert_eq!(
            key.as_str(),
            "ba7816bf8f01cfea",
            "sha256(\"abc\") starts ba7816bf8f01cfea"
        );
        assert_eq!(key.state_name(), "github-budget-ba7816bf8f01cfea.json");
        assert_eq!(key.lock_name(), "github-budget-ba7816bf8f01cfea.lock");
        assert_eq!(
            format!("{key:?}"),
            "CredentialKey(ba7816bf8f01cfea)",
            "Debug shows the key and never the token"
        );
    }

    #[test]
    fn state_names_say_their_provider_and_key() {
        let key = CredentialKey::of_token("t");
        assert_eq!(
            parse_state_name(&key.state_name()),
            Some(("github".to_owned(), key.clone()))
        );
        assert_eq!(
            parse_state_name(&key.state_name_of("anthropic")),
            Some(("anthropic".to_owned(), key.clone()))
        );
        assert_eq!(
            parse_state_name(&key.state_name_of("mistral-eu2")),
            Some(("mistral-eu2".to_owned(), key.clone())),
            "a configured provider's name: lowercase letters, digits and hyphens"
        );
        assert_eq!(
            key.lock_name_of("openai"),
            format!("openai-budget-{}.lock", key.as_str())
        );
        for bad in [
            "anthropic-budget-xyz.json".to_owned(),
            format!("Anthropic-budget-{}.json", key.as_str()),
            format!("-budget-{}.json", key.as_str()),
            format!("anthropic-budget-{}.lock", key.as_str()),
        ] {
            assert_eq!(parse_state_name(&bad), None, "{bad}");
        }
    }

    #[test]
    fn only_16_lowercase_hex_digits_parse() {
        assert!(CredentialKey::parse("ba7816bf8f01cfea").is_some());
        assert!(CredentialKey::parse("BA7816BF8F01CFEA").is_none());
        assert!(CredentialKey::parse("ba7816bf8f01cfe").is_none());
        assert!(CredentialKey::parse("ba7816bf8f01cfeaa").is_none());
        assert!(CredentialKey::parse("ba7816bf8f01cfeg").is_none());
    }
}
