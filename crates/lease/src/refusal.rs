//! A refused acquisition: who holds the resource and why that counts as held.

use crate::clock::rfc3339_ms;
use crate::liveness::LiveWhy;
use crate::record::Record;

/// A refused acquisition: who holds the resource and why that counts as held.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The resource's file name.
    pub resource: String,
    /// The holder's record, when it could be read and parsed.
    pub holder: Option<Record>,
    /// Why the holder counts as live.
    pub why: LiveWhy,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is held", self.resource)?;
        if let Some(h) = &self.holder {
            if let Some(pid) = h.pid() {
                write!(f, " by pid {pid}")?;
            }
            if let Some(owner) = &h.owner {
                write!(f, " ({owner})")?;
            }
            for key in ["role", "profile", "agentIdentity"] {
                if let Some(v) = h.extra_str(key) {
                    write!(f, ", {key} {v}")?;
                }
            }
            if let Some(at) = &h.acquired_at {
                write!(f, ", since {at}")?;
            }
            if let Some(pulse) = h.last_pulse {
                write!(f, ", last pulse {}", rfc3339_ms(pulse))?;
            }
        }
        write!(f, ": {}", self.why)
    }
}
