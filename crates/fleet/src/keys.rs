//! The key layout in etcd (PROTOCOL.md section 15), as plain functions.
//!
//! Every key starts with [`PREFIX`]. A pool's cap, its holders, a role and a credential's budget
//! each have one place; names are checked before they become part of a key, so that no name
//! can reach into another's keys.

/// The prefix of every key worklane writes in etcd (the `v1` is the layout's version).
pub const PREFIX: &str = "/worklane/v1/";

/// Why a name cannot be part of a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} {name:?} is not a plain name: use 1 to 64 letters, digits, `-`, `_` and `.`, not \
     starting with `.`"
)]
pub struct NameError {
    /// What the name names (`pool`, `role`).
    pub what: &'static str,
    /// The name given.
    pub name: String,
}

/// Checks a pool or role name: 1 to 64 of `[A-Za-z0-9._-]`, not starting with `.`.
pub fn check_name(what: &'static str, name: &str) -> Result<(), NameError> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > 64 || name.starts_with('.') || !name.chars().all(plain) {
        return Err(NameError {
            what,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// `/worklane/v1/pool/<pool>/`: the prefix of all of a pool's keys (its cap and holders).
#[must_use]
pub fn pool_root(pool: &str) -> String {
    format!("{PREFIX}pool/{pool}/")
}

/// `/worklane/v1/pool/<pool>/cap`: the pool's cap, a decimal whole number.
#[must_use]
pub fn pool_cap(pool: &str) -> String {
    format!("{}cap", pool_root(pool))
}

/// `/worklane/v1/pool/<pool>/holder/`: the prefix of the pool's holders' keys.
#[must_use]
pub fn pool_holders(pool: &str) -> String {
    format!("{}holder/", pool_root(pool))
}

/// `/worklane/v1/pool/<pool>/holder/<token>`: one holder's (or waiter's) key.
#[must_use]
pub fn pool_holder(pool: &str, token: &str) -> String {
    format!("{}{token}", pool_holders(pool))
}

/// `/worklane/v1/role/<role>`: the role's one holder.
#[must_use]
pub fn role(role: &str) -> String {
    format!("{PREFIX}role/{role}")
}

/// `/worklane/v1/budget/<key>`: a credential's budget state; `<key>` is the local ledger's key
/// (a hash of the token: the token itself never leaves the host).
#[must_use]
pub fn budget(key: &str) -> String {
    format!("{PREFIX}budget/{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_and_bounded() {
        for good in ["agents", "a", "ci-runners_2.x", &"a".repeat(64)] {
            assert!(check_name("pool", good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            ".hidden",
            "a/b",
            "a b",
            "ü",
            &"a".repeat(65),
            "..",
            "a\n",
        ] {
            let err = check_name("pool", bad).expect_err(bad);
            assert_eq!(err.name, bad, "names the value");
            assert!(err.to_string().starts_with("pool "), "{err}");
        }
    }

    #[test]
    fn keys_sit_under_the_prefix() {
        assert_eq!(pool_cap("agents"), "/worklane/v1/pool/agents/cap");
        assert_eq!(
            pool_holder("agents", "00ff"),
            "/worklane/v1/pool/agents/holder/00ff"
        );
        assert!(pool_holder("agents", "x").starts_with(&pool_holders("agents")));
        assert_eq!(role("coordinator"), "/worklane/v1/role/coordinator");
        assert_eq!(budget("abc"), "/worklane/v1/budget/abc");
    }
}
