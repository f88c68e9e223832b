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
    use super::CredentialKey;

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
    fn only_16_lowercase_hex_digits_parse() {
        assert!(CredentialKey::parse("ba7816bf8f01cfea").is_some());
        assert!(CredentialKey::parse("BA7816BF8F01CFEA").is_none());
        assert!(CredentialKey::parse("ba7816bf8f01cfe").is_none());
        assert!(CredentialKey::parse("ba7816bf8f01cfeaa").is_none());
        assert!(CredentialKey::parse("ba7816bf8f01cfeg").is_none());
    }
}
