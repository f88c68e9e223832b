//! What a holder's key holds: who holds, from where, since when (PROTOCOL.md section 15.2).

use serde::{Deserialize, Serialize};

/// A holder's value, JSON: the same for a pool's holder and a role's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The layout's version: 1. A reader that meets another treats the value as unreadable
    /// (it still counts: the key exists).
    pub version: u32,
    /// The holder's host name.
    pub host: String,
    /// The holder's pid on its host.
    pub pid: u32,
    /// Who holds, as the holder names itself (a command's name, an agent's identity).
    pub owner: String,
    /// When it started to hold or wait, RFC 3339 UTC with milliseconds.
    pub since: String,
    /// The role held (role keys only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The command it runs, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// The version this crate writes.
pub const VERSION: u32 = 1;

impl Holder {
    /// This process as a holder named `owner`, since `since` (RFC 3339).
    #[must_use]
    pub fn this_process(owner: &str, since: String) -> Holder {
        Holder {
            version: VERSION,
            host: host_name(),
            pid: std::process::id(),
            owner: owner.to_owned(),
            since,
            role: None,
            command: None,
        }
    }

    /// Reads a value; `None` if it is not a holder of a version this crate knows.
    #[must_use]
    pub fn parse(bytes: &[u8]) -> Option<Holder> {
        serde_json::from_slice::<Holder>(bytes)
            .ok()
            .filter(|h| h.version == VERSION)
    }

    /// The value's bytes.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pid {} on {}", self.owner, self.pid, self.host)?;
        if let Some(role) = &self.role {
            write!(f, ", role {role}")?;
        }
        write!(f, ", since {})", self.since)
    }
}

/// This machine's host name (`uname -n`).
#[must_use]
pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_host_is_this_machines_node_name() {
        let node = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
        assert_eq!(host_name(), node.trim(), "uname -n, as the kernel has it");
        assert!(!host_name().is_empty());
    }

    #[test]
    fn a_holder_round_trips_and_other_versions_are_unreadable() {
        let mut h = Holder::this_process("agent", "2026-12-01T00:00:00.000Z".into());
        h.role = Some("coordinator".into());
        let back = Holder::parse(&h.to_bytes()).expect("parses");
        assert_eq!(back, h);
        let shown = h.to_string();
        assert!(
            shown.contains("coordinator") && shown.contains(&h.pid.to_string()),
            "{shown}"
        );
        let mut v2 = serde_json::to_value(&h).expect("json");
        v2["version"] = 2.into();
        assert_eq!(Holder::parse(v2.to_string().as_bytes()), None, "version 2");
        assert_eq!(Holder::parse(b"{"), None, "not JSON");
    }
}
