//! The JSON lock record.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use worklane_identity::Recorded;

/// Record fields the lease core writes itself; a [`Request`](crate::Request) may not set them.
pub const RESERVED_FIELDS: &[&str] = &[
    "version",
    "pid",
    "place",
    "identity",
    "owner",
    "acquiredAt",
    "epoch",
    "lastPulse",
    "ttlMs",
    "startedAt",
    "holdsGuard",
    "pulseBoot",
];

/// A lock (or lease, or claim) record as read from or written to its file.
///
/// Readers accept unknown fields (kept in [`Record::extra`]); a record missing `place` or
/// `identity` is legacy and its holder is never judged gone by process liveness.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Record {
    /// The record format's version, 1: written in every record (first); a record without one
    /// is read as version 1 (older writers), and a record of any other version does not parse
    /// (a malformed, busy record: a reader never judges what it cannot read).
    #[serde(
        default,
        deserialize_with = "version_one",
        serialize_with = "write_version"
    )]
    pub version: Version,
    /// `pid`, `place` and `identity` of the holder, read tolerantly.
    #[serde(flatten)]
    pub holder: Recorded,
    /// Who holds it, in the holder's words (a harness name, a user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When it was acquired, RFC 3339 UTC.
    #[serde(
        rename = "acquiredAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub acquired_at: Option<String>,
    /// The fencing epoch of this acquisition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// TTL leases: when the holder last proved it is alive, milliseconds since the epoch.
    #[serde(rename = "lastPulse", default, skip_serializing_if = "Option::is_none")]
    pub last_pulse: Option<u64>,
    /// TTL leases: how long after `lastPulse` the lease stays held, in milliseconds.
    #[serde(rename = "ttlMs", default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// TTL leases: when the holder started, RFC 3339 UTC (kept for diagnostics).
    #[serde(rename = "startedAt", default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Process liveness: `true` declares that the holder keeps the resource's guard locked for
    /// as long as this record exists, so a reader that holds the guard knows the holder is
    /// gone, whatever host, boot or namespace the record names. Any other value, or none, is
    /// no declaration.
    #[serde(
        rename = "holdsGuard",
        default,
        deserialize_with = "declaration",
        skip_serializing_if = "Option::is_none"
    )]
    pub holds_guard: Option<bool>,
    /// TTL leases: the boot clock at the last pulse, with its boot and time namespace, so a
    /// contender on the same boot judges the age by a clock that is never stepped. A value of
    /// another shape reads as absent (the wall clock decides).
    #[serde(
        rename = "pulseBoot",
        default,
        deserialize_with = "boot_time",
        skip_serializing_if = "Option::is_none"
    )]
    pub pulse_boot: Option<crate::clock::BootTime>,
    /// Every other field: `role`, `profile`, `agentIdentity`, `limit_ms`, and unknown ones.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Record {
    /// Parses a record. Anything that is not a JSON object with well-typed core fields is an
    /// error (the caller treats it as a malformed, busy record).
    pub fn parse(bytes: &[u8]) -> Result<Record, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The record as the bytes written to its file (compact JSON and a newline).
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// The holder's pid, when the record names one.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.holder.pid.present().copied()
    }

    /// Whether the record declares that its holder keeps the guard for the record's life.
    #[must_use]
    pub fn declares_guard_held(&self) -> bool {
        self.holds_guard == Some(true)
    }

    /// A string field of [`Record::extra`] (`role`, `profile`, `agentIdentity`).
    #[must_use]
    pub fn extra_str(&self, name: &str) -> Option<&str> {
        self.extra.get(name).and_then(Value::as_str)
    }
}

/// The version of the record format this crate reads and writes.
pub const RECORD_VERSION: u64 = 1;

/// The record format's version: always [`RECORD_VERSION`] in a parsed or built record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Version;

fn version_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Version, D::Error> {
    let v = u64::deserialize(d)?;
    if v == RECORD_VERSION {
        Ok(Version)
    } else {
        Err(serde::de::Error::custom(format!(
            "record version {v} is not known here (this reader reads version {RECORD_VERSION})"
        )))
    }
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's serialize_with passes the field by reference"
)]
fn write_version<S: serde::Serializer>(_: &Version, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(RECORD_VERSION)
}

/// `holdsGuard`: only JSON `true` is the declaration; any other value (a string, a number,
/// `null`) is kept as "not declared" rather than making the whole record malformed, since a
/// malformed record is busy and this field only ever frees a record.
fn declaration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    Ok(Some(Value::deserialize(d)? == Value::Bool(true)))
}

/// `pulseBoot`: a well-formed boot reading, or none (never a malformed record: the field
/// only ever lets a contender judge by a better clock).
fn boot_time<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<crate::clock::BootTime>, D::Error> {
    Ok(serde_json::from_value(Value::deserialize(d)?).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use worklane_identity::Field;

    #[test]
    fn every_record_says_version_1_and_other_versions_are_malformed() {
        let written = Record::default().to_bytes();
        assert!(
            written.starts_with(br#"{"version":1"#),
            "written first: {}",
            String::from_utf8_lossy(&written)
        );
        assert!(
            Record::parse(br#"{"pid":7}"#).is_ok(),
            "none: version 1 (older writers)"
        );
        assert!(Record::parse(br#"{"version":1,"pid":7}"#).is_ok());
        let err = Record::parse(br#"{"version":2,"pid":7}"#).expect_err("version 2");
        assert!(err.to_string().contains("version 2"), "{err}");
        assert!(
            Record::parse(br#"{"version":"1","pid":7}"#).is_err(),
            "not a number"
        );
    }

    #[test]
    fn core_fields_and_extras_round_trip() {
        let text = r#"{"pid":7,"owner":"ci","acquiredAt":"2026-11-30T00:00:00.000Z","epoch":3,"lastPulse":10,"ttlMs":60000,"role":"container-plane","limit_ms":5}"#;
        let r = Record::parse(text.as_bytes()).expect("parse");
        assert_eq!(r.pid(), Some(7));
        assert_eq!(r.holder.place, Field::Missing, "legacy: no place");
        assert_eq!(r.owner.as_deref(), Some("ci"));
        assert_eq!(r.epoch, Some(3));
        assert_eq!(r.last_pulse, Some(10));
        assert_eq!(r.ttl_ms, Some(60_000));
        assert_eq!(r.extra_str("role"), Some("container-plane"));
        assert_eq!(r.extra.get("limit_ms"), Some(&Value::from(5)));
        assert!(!r.extra.contains_key("pid"), "core fields are not extras");
        let again = Record::parse(&r.to_bytes()).expect("reparse");
        assert_eq!(again, r, "round trip");
    }

    #[test]
    fn malformed_records_are_errors() {
        for text in ["", "[]", "{", r#"{"owner": 5}"#, r#"{"lastPulse": "soon"}"#] {
            assert!(
                Record::parse(text.as_bytes()).is_err(),
                "{text:?} must not parse"
            );
        }
        let odd = Record::parse(br#"{"pid":"x"}"#).expect("a bad pid is kept as malformed");
        assert!(matches!(odd.holder.pid, Field::Malformed { .. }));
    }
}
