//! Role leases (PROTOCOL.md section 10): one holder of a named role on the host, under TTL
//! liveness (held while its pulse is within its TTL, whatever its pid looks like), in the
//! file `role-<ROLE>.lease`. An emergency STOP refuses a new holder, as it refuses a slot (and
//! halts the holders there are: [`crate::stop`]); a drain does not.
//!
//! [`Pool::try_take_role`] is one nonblocking try; a caller that waits tries again (the
//! holder's release, or its lease lapsing one TTL after its last pulse, is seen at the next
//! try) and pulses what it holds (`worklane_run::Supervisor::role`); [`RoleWait`] is that
//! wait, bounded. [`check_role`] is the name rule, [`Holder`] the holder as its record names
//! it and [`advice`] what a refused caller can do.

mod holder;
mod wait;

pub use holder::{Holder, advice};
pub use wait::RoleWait;

use crate::Pool;
use crate::stop::Stop;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use worklane_lease::{Acquired, Lease, Options, Refusal, Request, TtlLiveness};

/// Whether `role` can name a role: a non-empty name of ASCII letters, digits, `-`, `_` and
/// `.`, not starting with `.` (it names the file `role-<ROLE>.lease`).
#[must_use]
pub fn valid_role(role: &str) -> bool {
    !role.is_empty()
        && !role.starts_with('.')
        && role
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A name that cannot name a role ([`check_role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "a role is a non-empty name of letters, digits, `-`, `_` and `.` (not starting with `.`); \
     it names the file role-<ROLE>.lease"
)]
pub struct InvalidRole;

/// [`valid_role`], as a result that says the rule.
pub fn check_role(role: &str) -> Result<(), InvalidRole> {
    if valid_role(role) {
        Ok(())
    } else {
        Err(InvalidRole)
    }
}

/// The file of role `role`'s lease.
#[must_use]
pub fn lease_name(role: &str) -> String {
    format!("role-{role}.lease")
}

/// Who asks for a role, as its lease record names them (PROTOCOL.md section 10's fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRequest {
    /// The role ([`valid_role`]).
    pub role: String,
    /// Who holds it: the record's owner and `agentIdentity` (`USER@HOST` by default).
    pub identity: String,
    /// The holder's profile (the record's `profile`).
    pub profile: String,
    /// The holder's command line, as a person reads it.
    pub entrypoint: String,
    /// The lease's TTL.
    pub ttl: Duration,
}

/// What a try for a role gave.
#[derive(Debug)]
pub enum RoleTake {
    /// Held: the lease, for the caller to pulse and release.
    Held(Lease),
    /// Someone else holds it (or a record at its name counts as held): who, and why.
    Refused(Refusal),
    /// An emergency STOP is in force: no new holder.
    Stopped(Stop),
}

/// Why a try for a role failed ([`Pool::try_take_role`]; being refused is not an error: it is
/// [`RoleTake::Refused`] or [`RoleTake::Stopped`]). Each variant names the step that failed and
/// what it was done on; the cause is its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The directory's protocol (`protocol.json`) asks what this worklane cannot keep.
    #[error("cannot act in the slot directory {}", dir.display())]
    Protocol {
        /// The slot directory.
        dir: PathBuf,
        /// Why.
        #[source]
        why: crate::protocol::Unsupported,
    },
    /// STOP could not be looked for (its file's name refused).
    #[error(transparent)]
    Look(#[from] crate::look::Error),
    /// A role's lease could not be tried (not held by another: broken).
    #[error("cannot take the lease of role {role}")]
    Role {
        /// The role.
        role: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::acquire::Error>,
    },
}

impl Pool {
    /// One nonblocking try for the role `request` names: STOP first, then the lease under TTL
    /// liveness, journaled as the pool's takes are. `retry` marks a waiter's later tries, whose
    /// refusals are its wait, not news (a `role-refused` event is written for the first only).
    pub fn try_take_role(&self, request: &RoleRequest, retry: bool) -> Result<RoleTake, Error> {
        crate::protocol::check_dir(self.dir()).map_err(|why| Error::Protocol {
            dir: self.dir().path().to_owned(),
            why,
        })?;
        if let Some(stop) = self.stop()? {
            return Ok(RoleTake::Stopped(stop));
        }
        let name = lease_name(&request.role);
        let lease_request = Request::new(request.identity.clone())
            .field("role", request.role.clone())
            .field("profile", request.profile.clone())
            .field("agentIdentity", request.identity.clone())
            .field("entrypoint", request.entrypoint.clone());
        let mut options = Options::with_liveness(Arc::new(TtlLiveness::new(request.ttl)))
            .journal(self.journal().clone())
            .role(request.role.clone());
        if retry {
            options = options.unjournaled_refusals();
        }
        match worklane_lease::acquire(self.dir(), &name, &lease_request, &options) {
            Ok(Acquired::Held(lease)) => Ok(RoleTake::Held(lease)),
            Ok(Acquired::Refused(refusal)) => Ok(RoleTake::Refused(refusal)),
            Err(source) => Err(Error::Role {
                role: request.role.clone(),
                source: Box::new(source),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_is_a_plain_name_and_its_lease_a_file_of_its_own() {
        for good in ["release", "ci-1", "a.b_c"] {
            assert!(valid_role(good), "{good}");
        }
        for bad in ["", ".hidden", "a/b", "a b", "é"] {
            assert!(!valid_role(bad), "{bad:?}");
        }
        assert_eq!(lease_name("release"), "role-release.lease");
        assert_eq!(check_role("release"), Ok(()));
        let refused = check_role("a/b").expect_err("not a plain name");
        assert!(
            refused.to_string().contains("role-<ROLE>.lease"),
            "the rule, and the file it names: {refused}"
        );
    }
}
