//! Random tokens for temp names.

use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

/// A random 64-bit token as 16 lowercase hex digits, for temp file names.
///
/// Each call keys SipHash with fresh per-process randomness from the operating system (through
/// `RandomState`) and mixes in a counter and the time, so two processes, or two calls, never
/// agree except by chance. Temp names are never derived from the pid alone: a crashed process
/// can leave a read-only temp under a pid that is later reused.
#[must_use]
pub fn random_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(now.as_nanos());
    }
    format!("{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_hex_and_distinct() {
        let a = super::random_token();
        let b = super::random_token();
        assert_eq!(a.len(), crate::name::TOKEN_LEN, "token length");
        assert!(
            a.bytes().all(|b| b.is_ascii_hexdigit()),
            "token is hex: {a}"
        );
        assert_ne!(a, b, "two tokens in a row must differ");
    }
}
