//! Random tokens for temp names.

use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// A random 64-bit token as [`TOKEN_LEN`](crate::TOKEN_LEN) lowercase hex digits, for temp
/// file names.
///
/// It is the token of a guard's temp alias ([`guard_temp_name`](crate::guard_temp_name)),
/// which [`reclaim`](crate::reclaim) recognizes by its form. Other writers in a slot directory
/// draw their temp names from it too (`worklane-slotfile`'s `.{name}.tmp-{token}`), so every
/// temp name there has one form.
///
/// A process draws one seed from the operating system's randomness (through `RandomState`,
/// mixed with the time), and each call mixes in the current pid (a forked child shares the
/// seed) and a counter (splitmix64), so two calls never agree and two processes agree only by
/// chance; a collision is harmless anyway, as temp files are created exclusively. Temp names
/// are never derived from the pid alone: a crashed process can leave a read-only temp under a
/// pid that is later reused.
#[must_use]
pub fn random_token() -> String {
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // One SipHash keyed by the OS per process; after that, splitmix64 of seed + counter: every
    // call differs from every other in this process, and the seed from every other process.
    let seed = *SEED.get_or_init(|| {
        let mut hasher = RandomState::new().build_hasher();
        if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            hasher.write_u128(now.as_nanos());
        }
        hasher.finish()
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let seed = seed ^ (u64::from(std::process::id()) << 32);
    let mut z = seed.wrapping_add(n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    let value = z ^ (z >> 31);
    let hex = b"0123456789abcdef";
    (0..16)
        .rev()
        .map(|i| char::from(hex[usize::try_from((value >> (i * 4)) & 0xF).unwrap_or(0)]))
        .collect()
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

    #[test]
    fn a_hundred_thousand_tokens_of_one_process_all_differ() {
        // splitmix64 of distinct counters is a bijection: no two calls of one process agree.
        // A mix that lost bits (a digit taken from the wrong place, a mixing step that is not
        // invertible) repeats itself within this many tokens.
        let mut seen = std::collections::HashSet::new();
        for i in 0..100_000 {
            let token = super::random_token();
            assert_eq!(token.len(), crate::name::TOKEN_LEN, "token {i}: {token}");
            assert!(
                token
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "token {i} is lowercase hex: {token}"
            );
            assert!(
                seen.insert(token.clone()),
                "token {i} repeats an earlier one: {token}"
            );
        }
    }
}
