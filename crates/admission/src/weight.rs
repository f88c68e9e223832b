//! Weights: how many units of its kind's cap a slot holds (PROTOCOL.md 12.10).
//!
//! A take of weight N holds N units with one slot file, all at once or not at all; its record
//! says so in `weight` (absent: 1, so records of older writers count 1). Counting sums the
//! units of the live slots of a kind. What a record's weight counts for is decided here, so
//! that one stray file can never make every take wait for ever:
//!
//! - a whole number from 1 to 4294967295 counts as itself, at most the cap in force (a record
//!   written under a higher cap, or one claiming more than the machine, holds the whole cap
//!   and no more);
//! - anything else (0, a negative number, a fraction, `1e30`, a string, `null`) counts as 1,
//!   and is reported ([`Weight::Bad`]);
//! - a weight counts only when its holder is proved live: its guard held, or its process
//!   alive by its identity. A record that counts live only because it cannot be judged
//!   (another host or namespace, hidden, legacy, malformed) counts as 1 whatever it says, as
//!   every record did before weights: such a record is never taken over automatically, and
//!   its weight could otherwise hold the whole cap until an operator removes it.

use crate::SlotState;
use serde_json::Value;
use worklane_lease::{LiveWhy, Record};

/// The record field that says how many units a slot (or a place in line) holds.
pub const WEIGHT_FIELD: &str = "weight";

/// The record field that names the owner whose share a slot's units count against
/// (`uid:1001`, `group:ci`, `owner:nightly`).
pub const SHARE_OWNER_FIELD: &str = "shareOwner";

/// A record's `weight`, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Weight {
    /// No `weight` field (an older writer): 1 unit.
    Absent,
    /// A whole number from 1 to 4294967295.
    Units(u32),
    /// Anything else, as JSON text: counted as 1 unit, and reported.
    Bad(String),
}

impl Weight {
    /// The `weight` of `record`.
    #[must_use]
    pub fn of(record: &Record) -> Weight {
        Weight::of_value(record.extra.get(WEIGHT_FIELD))
    }

    /// A `weight` field's value (`None`: no field).
    #[must_use]
    pub fn of_value(value: Option<&Value>) -> Weight {
        let Some(value) = value else {
            return Weight::Absent;
        };
        match value
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n >= 1)
        {
            Some(n) => Weight::Units(n),
            None => Weight::Bad(value.to_string()),
        }
    }

    /// The units it counts for under `cap` when its holder is proved live: itself, at most
    /// `cap`; 1 when absent or bad.
    #[must_use]
    pub fn units(&self, cap: u32) -> u32 {
        match self {
            Weight::Units(n) => (*n).min(cap.max(1)),
            Weight::Absent | Weight::Bad(_) => 1,
        }
    }
}

/// The units a slot in `state` with `weight` counts for under `cap`: none when its holder is
/// gone; its weight when its holder is proved live (guard held, or alive by its identity); 1
/// when it counts live only because it cannot be judged.
#[must_use]
pub fn counted(state: &SlotState, weight: &Weight, cap: u32) -> u32 {
    match state {
        SlotState::Dead(_) => 0,
        SlotState::GuardHeld | SlotState::Live(LiveWhy::Alive | LiveWhy::GuardHeld) => {
            weight.units(cap)
        }
        SlotState::Live(_) => 1,
    }
}

/// The owner a record's `shareOwner` names, if it is a string.
#[must_use]
pub fn share_owner(record: &Record) -> Option<&str> {
    record.extra.get(SHARE_OWNER_FIELD).and_then(Value::as_str)
}

/// The weight and owner of a record's raw bytes, read without the rest of the record (the
/// count reads every held slot's record at every take): `None` when the bytes are no JSON
/// object.
pub(crate) fn peek(raw: &[u8]) -> Option<(Weight, Option<String>)> {
    /// A field that is there, `null` included (`Option<Value>` alone reads `null` as absent).
    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
        serde::Deserialize::deserialize(d).map(Some)
    }
    #[derive(serde::Deserialize)]
    struct Fields {
        #[serde(default, deserialize_with = "present")]
        weight: Option<Value>,
        #[serde(default, rename = "shareOwner")]
        share_owner: Option<Value>,
    }
    // A record is an object; serde would read a struct from an array too.
    if raw.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let fields: Fields = serde_json::from_slice(raw).ok()?;
    // `"weight": null` is a bad weight, not an absent one.
    let weight = Weight::of_value(fields.weight.as_ref());
    let owner = fields
        .share_owner
        .and_then(|v| v.as_str().map(str::to_owned));
    Some((weight, owner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use worklane_lease::DeadWhy;

    #[test]
    fn a_weight_is_a_whole_number_from_one_and_anything_else_is_bad() {
        assert_eq!(Weight::of_value(None), Weight::Absent);
        for (value, weight) in [
            (json!(1), Weight::Units(1)),
            (json!(3), Weight::Units(3)),
            (json!(4_294_967_295_u64), Weight::Units(u32::MAX)),
            (json!(0), Weight::Bad("0".into())),
            (json!(-2), Weight::Bad("-2".into())),
            (json!(2.5), Weight::Bad("2.5".into())),
            (json!(2.0), Weight::Bad("2.0".into())),
            (json!(1e30), Weight::Bad("1e+30".into())),
            (json!(4_294_967_296_u64), Weight::Bad("4294967296".into())),
            (json!("2"), Weight::Bad("\"2\"".into())),
            (json!(null), Weight::Bad("null".into())),
            (json!([2]), Weight::Bad("[2]".into())),
        ] {
            assert_eq!(Weight::of_value(Some(&value)), weight, "{value}");
        }
    }

    #[test]
    fn a_weight_counts_at_most_the_cap_and_a_bad_or_absent_one_counts_one() {
        assert_eq!(Weight::Units(3).units(8), 3);
        assert_eq!(Weight::Units(30).units(8), 8, "clamped to the cap");
        assert_eq!(Weight::Units(u32::MAX).units(1), 1);
        assert_eq!(Weight::Absent.units(8), 1);
        assert_eq!(Weight::Bad("\"x\"".into()).units(8), 1);
    }

    #[test]
    fn only_a_holder_proved_live_counts_its_weight() {
        let heavy = Weight::Units(5);
        assert_eq!(counted(&SlotState::GuardHeld, &heavy, 8), 5);
        assert_eq!(counted(&SlotState::Live(LiveWhy::Alive), &heavy, 8), 5);
        assert_eq!(counted(&SlotState::Live(LiveWhy::GuardHeld), &heavy, 8), 5);
        for unjudged in [
            LiveWhy::Unknown(worklane_identity::UnknownReason::Legacy { missing: "place" }),
            LiveWhy::Malformed { detail: "x".into() },
            LiveWhy::Other("its guard is broken".into()),
        ] {
            assert_eq!(
                counted(&SlotState::Live(unjudged.clone()), &heavy, 8),
                1,
                "{unjudged:?} counts as every record did before weights"
            );
        }
        assert_eq!(
            counted(&SlotState::Dead(DeadWhy::Other("gone".into())), &heavy, 8),
            0
        );
    }

    #[test]
    fn a_peek_reads_weight_and_owner_alone() {
        assert_eq!(
            peek(br#"{"pid":1,"weight":2,"shareOwner":"uid:7","x":{"y":[1]}}"#),
            Some((Weight::Units(2), Some("uid:7".into())))
        );
        assert_eq!(peek(br#"{"pid":1}"#), Some((Weight::Absent, None)));
        assert_eq!(
            peek(br#"{"weight":null,"shareOwner":3}"#),
            Some((Weight::Bad("null".into()), None))
        );
        assert_eq!(peek(b"not json"), None);
        assert_eq!(peek(b"[1]"), None);
    }
}
