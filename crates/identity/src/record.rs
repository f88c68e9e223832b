//! What a lock record says about its holder: the `pid`, `place` and `identity` fields.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::{Place, ProcessIdentity};

/// The holder fields of a lock record: `pid`, `place` and `identity`.
///
/// It deserializes from any JSON object and never fails on these fields: unknown fields are
/// ignored (a lease record embeds it with `#[serde(flatten)]` beside its own fields), an absent
/// or `null` field is [`Field::Missing`] (a legacy record), and a field of the wrong shape is
/// [`Field::Malformed`]. Each of those makes [`probe`](crate::probe()) answer
/// [`Unknown`](crate::Verdict::Unknown); only a complete record can prove its holder gone.
///
/// ```
/// use worklane_identity::{Field, Recorded};
///
/// let legacy: Recorded = serde_json::from_str(r#"{"pid": 42, "owner": "ci"}"#)?;
/// assert_eq!(legacy.pid, Field::Present(42));
/// assert_eq!(legacy.place, Field::Missing);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Recorded {
    /// The holder's process id.
    #[serde(default, with = "field", skip_serializing_if = "Field::is_missing")]
    pub pid: Field<u32>,
    /// Where the holder ran.
    #[serde(default, with = "field", skip_serializing_if = "Field::is_missing")]
    pub place: Field<Place>,
    /// The holder's boot and start identity.
    #[serde(default, with = "field", skip_serializing_if = "Field::is_missing")]
    pub identity: Field<RecordIdentity>,
}

impl Recorded {
    /// The complete record of a process running at `place`, as its holder writes it.
    ///
    /// ```
    /// use worklane_identity::{Place, ProcessIdentity, Recorded};
    ///
    /// let me = Recorded::new(ProcessIdentity::of_self()?, Place::current()?.clone());
    /// let json = serde_json::to_value(&me)?;
    /// assert_eq!(json["identity"]["boot"], json["place"]["boot"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn new(process: ProcessIdentity, place: Place) -> Self {
        Self {
            pid: Field::Present(process.pid),
            identity: Field::Present(RecordIdentity {
                boot: place.boot.clone(),
                start: process.start,
            }),
            place: Field::Present(place),
        }
    }
}

/// A lock record's `identity` field: `{boot, start}`.
///
/// `boot` repeats the place's boot id (a record whose two disagree is malformed); `start` is the
/// [`ProcessIdentity::start`] of the holder, a JSON integer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RecordIdentity {
    /// The boot id the start was read in.
    pub boot: String,
    /// The start identity: clock ticks since boot (Linux) or seconds since the epoch (Darwin).
    pub start: u64,
}

/// One field of a record as read: absent, present with the wrong shape, or present.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Field<T> {
    /// The field is absent or `null`: a legacy record, written before the field existed.
    #[default]
    Missing,
    /// The field is there but is not a `T`. The JSON is kept, so the record serializes back
    /// unchanged.
    Malformed {
        /// The field's JSON as read.
        raw: Value,
        /// Why it is not a `T`.
        error: String,
    },
    /// The field, read.
    Present(T),
}

impl<T> Field<T> {
    /// Whether the field is [`Field::Missing`].
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::Missing)
    }

    /// The value, if present and well-formed.
    pub fn present(&self) -> Option<&T> {
        match self {
            Self::Present(value) => Some(value),
            Self::Missing | Self::Malformed { .. } => None,
        }
    }
}

/// `serde(with)` for [`Field`]: never fails, whatever the JSON holds.
mod field {
    use super::*;

    pub(super) fn serialize<T: Serialize, S: Serializer>(
        field: &Field<T>,
        out: S,
    ) -> Result<S::Ok, S::Error> {
        match field {
            Field::Missing => out.serialize_none(),
            Field::Malformed { raw, .. } => raw.serialize(out),
            Field::Present(value) => value.serialize(out),
        }
    }

    pub(super) fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        input: D,
    ) -> Result<Field<T>, D::Error> {
        Ok(match Option::<Value>::deserialize(input)? {
            None | Some(Value::Null) => Field::Missing,
            Some(raw) => match T::deserialize(&raw) {
                Ok(value) => Field::Present(value),
                Err(error) => Field::Malformed {
                    raw,
                    error: error.to_string(),
                },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn place() -> Place {
        Place {
            host: "h".into(),
            boot: "b".into(),
            pidns: Some(1),
            timens: Some(2),
        }
    }

    #[test]
    fn new_record_serializes_to_the_protocol_shape() {
        let record = Recorded::new(
            ProcessIdentity {
                pid: 42,
                start: 777,
            },
            place(),
        );
        let json = serde_json::to_value(&record).expect("a record serializes");
        assert_eq!(
            json,
            json!({
                "pid": 42,
                "place": {"host": "h", "boot": "b", "pidns": 1, "timens": 2},
                "identity": {"boot": "b", "start": 777},
            }),
            "record JSON shape"
        );
        let back: Recorded = serde_json::from_value(json).expect("a record deserializes");
        assert_eq!(back, record, "a record round-trips");
    }

    #[test]
    fn legacy_record_has_missing_fields_and_keeps_its_pid() {
        let record: Recorded = serde_json::from_value(
            json!({"pid": 9, "owner": "x", "acquiredAt": "2026-01-01T00:00:00Z"}),
        )
        .expect("a legacy record deserializes");
        assert_eq!(record.pid, Field::Present(9), "pid of a legacy record");
        assert!(record.place.is_missing(), "legacy place is missing");
        assert!(record.identity.is_missing(), "legacy identity is missing");
        let null: Recorded =
            serde_json::from_value(json!({"pid": 9, "place": null})).expect("null place reads");
        assert!(null.place.is_missing(), "a null place is missing");
    }

    #[test]
    fn malformed_fields_are_kept_not_fatal() {
        let input = json!({
            "pid": "nine",
            "place": {"host": "h"},
            "identity": {"boot": "b", "start": -1},
        });
        let record: Recorded =
            serde_json::from_value(input.clone()).expect("malformed fields do not fail");
        for (name, malformed) in [
            ("pid", matches!(record.pid, Field::Malformed { .. })),
            ("place", matches!(record.place, Field::Malformed { .. })),
            (
                "identity",
                matches!(record.identity, Field::Malformed { .. }),
            ),
        ] {
            assert!(malformed, "{name} must read as malformed: {record:?}");
        }
        assert_eq!(record.pid.present(), None, "a malformed pid is not present");
        assert_eq!(
            Field::Present(9).present(),
            Some(&9),
            "a present field is its value"
        );
        assert_eq!(
            Field::<u32>::Missing.present(),
            None,
            "a missing field is not present"
        );
        let back = serde_json::to_value(&record).expect("a malformed record serializes");
        assert_eq!(back, input, "malformed fields serialize back unchanged");
    }

    #[test]
    fn flattens_into_a_lease_record() {
        #[derive(Deserialize)]
        struct Lease {
            owner: String,
            #[serde(flatten)]
            holder: Recorded,
        }
        let lease: Lease = serde_json::from_value(json!({
            "owner": "agent-1",
            "pid": 5,
            "place": [1, 2],
            "limit_ms": 10,
        }))
        .expect("a flattened record deserializes");
        assert_eq!(lease.owner, "agent-1", "the lease's own field");
        assert_eq!(lease.holder.pid, Field::Present(5), "pid through flatten");
        assert!(
            matches!(lease.holder.place, Field::Malformed { .. }),
            "malformed place through flatten"
        );
        assert!(
            lease.holder.identity.is_missing(),
            "absent identity through flatten"
        );
    }
}
