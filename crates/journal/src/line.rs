//! How a line is made from an [`Entry`] (at most [`MAX_LINE`] bytes, long texts cut) and found
//! again in bytes that a killed writer may have torn.

use crate::event::{Entry, MARKER, MAX_LINE};

/// The longest a free-text field is kept when a line would pass [`MAX_LINE`].
const SHORT_TEXT: usize = 256;

/// `entry` as one line (newline included), at most [`MAX_LINE`] bytes: when it would be
/// longer, every string longer than 256 bytes is cut (on a character boundary, `…` added);
/// `None` if it is still too long (it is then dropped and counted).
pub(crate) fn encode(entry: &Entry) -> Option<Vec<u8>> {
    let mut line = serde_json::to_vec(entry).ok()?;
    if line.len() < MAX_LINE {
        line.push(b'\n');
        return Some(line);
    }
    let mut value = serde_json::to_value(entry).ok()?;
    shorten(&mut value);
    // Back through the type, which writes its fields in their order (`version` first).
    let shortened: Entry = serde_json::from_value(value).ok()?;
    let mut line = serde_json::to_vec(&shortened).ok()?;
    (line.len() < MAX_LINE && line.starts_with(MARKER)).then(|| {
        line.push(b'\n');
        line
    })
}

fn shorten(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) if text.len() > SHORT_TEXT => {
            let mut cut = SHORT_TEXT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        serde_json::Value::Object(map) => map.values_mut().for_each(shorten),
        serde_json::Value::Array(items) => items.iter_mut().for_each(shorten),
        _ => {}
    }
}

/// What one line's bytes (without its newline) hold: the entry, and how many torn fragments
/// before it were skipped; `None` with the count when no entry could be read.
pub(crate) fn decode(line: &[u8]) -> Decoded {
    if line.is_empty() {
        return Decoded::default();
    }
    if let Some(decoded) = whole(line) {
        return decoded;
    }
    // A writer killed mid-line left a fragment that the next line was appended to: each
    // marker after the first byte starts another event; the last one may be whole.
    let starts: Vec<usize> = (1..line.len())
        .filter(|&i| line[i..].starts_with(MARKER))
        .collect();
    let torn = starts.len() as u64;
    match starts.last().and_then(|&last| whole(&line[last..])) {
        Some(mut decoded) => {
            decoded.torn += torn;
            decoded
        }
        None => Decoded {
            torn: torn.max(1) + u64::from(!starts.is_empty()),
            ..Decoded::default()
        },
    }
}

/// What one line held: its entry, the torn pieces skipped, and whether it was a whole line
/// with a field of the wrong type.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub(crate) entry: Option<Entry>,
    pub(crate) torn: u64,
    pub(crate) mistyped: u64,
}

/// `bytes` as one whole line, if it is one: an entry (a field written `null`, as every field
/// not known is, taken as not given: its default), or a whole line whose fields do not fit
/// its kind (mistyped). `None` when it is not a whole JSON object beginning as lines do (torn).
fn whole(bytes: &[u8]) -> Option<Decoded> {
    if let Ok(entry) = serde_json::from_slice::<Entry>(bytes) {
        return Some(Decoded {
            entry: Some(entry),
            ..Decoded::default()
        });
    }
    if !bytes.starts_with(MARKER) {
        return None;
    }
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_slice(bytes) else {
        return None;
    };
    fields.retain(|_, value| !value.is_null());
    Some(
        match serde_json::from_value::<Entry>(serde_json::Value::Object(fields)) {
            Ok(entry) => Decoded {
                entry: Some(entry),
                ..Decoded::default()
            },
            Err(_) => Decoded {
                mistyped: 1,
                ..Decoded::default()
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, KINDS, VERSION};

    /// A line's entry and torn pieces, none of it mistyped.
    fn decode(line: &[u8]) -> (Option<Entry>, u64) {
        let decoded = super::decode(line);
        assert_eq!(decoded.mistyped, 0, "{}", String::from_utf8_lossy(line));
        (decoded.entry, decoded.torn)
    }

    #[test]
    fn a_field_not_known_may_be_null_and_a_wrong_type_is_mistyped_not_torn() {
        // Another implementation's slot-waiting that did not know its place in line.
        let line = br#"{"version":1,"at":"2026-11-30T04:55:19.924Z","pid":7,"dropped":0,"kind":"slot-waiting","slot_kind":"agent","owner":"x","position":null,"in_line":null,"why":null}"#;
        let (read, torn) = decode(line);
        assert_eq!(torn, 0);
        assert_eq!(
            read.map(|e| e.event),
            Some(Event::SlotWaiting {
                slot_kind: "agent".to_owned(),
                owner: "x".to_owned(),
                position: 0,
                in_line: 0,
                why: String::new(),
            }),
            "null read as not given"
        );
        // A field of the wrong type: a whole line, skipped apart from torn ones.
        let wrong = br#"{"version":1,"at":"2026-11-30T04:55:19.924Z","pid":7,"dropped":0,"kind":"slot-waiting","slot_kind":"agent","owner":"x","position":"first","in_line":2,"why":""}"#;
        let decoded = super::decode(wrong);
        assert_eq!(
            (decoded.entry.is_none(), decoded.torn, decoded.mistyped),
            (true, 0, 1)
        );
        // A torn piece before a mistyped line: one of each.
        let mut both = br#"{"version":1,"at":"2026-11-3"#.to_vec();
        both.extend_from_slice(wrong);
        let decoded = super::decode(&both);
        assert_eq!((decoded.torn, decoded.mistyped), (1, 1));
        // `at` is never null: without it a line is mistyped.
        let timeless = br#"{"version":1,"at":null,"pid":7,"dropped":0,"kind":"undrain"}"#;
        assert_eq!(super::decode(timeless).mistyped, 1);
    }

    fn entry(event: Event) -> Entry {
        Entry {
            version: VERSION,
            at: "2026-11-30T04:55:19.924Z".to_owned(),
            pid: 42,
            dropped: 0,
            event,
        }
    }

    #[test]
    fn a_line_starts_with_the_marker_and_reads_back() {
        let e = entry(Event::SlotTaken {
            slot: "agent-0.lock".to_owned(),
            slot_kind: "agent".to_owned(),
            owner: "a \"quoted\" {\"version\": owner".to_owned(),
            epoch: 3,
            waited_ms: 0,
        });
        let line = encode(&e).expect("short");
        assert!(
            line.starts_with(MARKER),
            "{}",
            String::from_utf8_lossy(&line)
        );
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(
            line.windows(MARKER.len()).filter(|w| *w == MARKER).count(),
            1,
            "the marker appears once, even with it quoted in a field"
        );
        assert_eq!(decode(&line[..line.len() - 1]), (Some(e), 0));
    }

    #[test]
    fn every_kind_is_named_as_written() {
        let gone = Event::HolderGone {
            slot: "agent-1.lock".to_owned(),
            slot_kind: "agent".to_owned(),
            stale_pid: None,
            stale_owner: None,
            stale_since: None,
            proof: "no such process".to_owned(),
        };
        assert_eq!(gone.kind(), "holder-gone");
        let line = encode(&entry(gone.clone())).expect("short");
        assert_eq!(decode(&line[..line.len() - 1]), (Some(entry(gone)), 0));
        let undrain = serde_json::to_value(entry(Event::Undrain)).expect("json");
        assert_eq!(undrain["kind"], "undrain");
        assert_eq!(Event::Undrain.kind(), "undrain");
        assert!(
            KINDS.contains(&"broken-file")
                && KINDS.contains(&"role-released")
                && KINDS.contains(&"holder-gone")
                && KINDS.len() == 27
        );
        let unknown: Entry = serde_json::from_str(
            r#"{"version":1,"at":"x","pid":1,"dropped":0,"kind":"from-the-future","n":1}"#,
        )
        .expect("an unknown kind reads");
        assert_eq!(unknown.event, Event::Unknown);
    }

    #[test]
    fn a_long_line_is_cut_to_fit() {
        let e = entry(Event::BrokenFile {
            name: "x".repeat(5000),
            what: "é".repeat(3000),
            fix: "rm".to_owned(),
            fixed: false,
        });
        let line = encode(&e).expect("cut to fit");
        assert!(line.len() <= MAX_LINE, "{}", line.len());
        let (read, skipped) = decode(&line[..line.len() - 1]);
        let Some(Entry {
            event: Event::BrokenFile { name, what, .. },
            ..
        }) = read
        else {
            panic!("reads back");
        };
        assert_eq!(skipped, 0);
        assert!(name.ends_with('…') && name.len() < 300, "{}", name.len());
        assert!(what.ends_with('…'));
    }

    /// The length of `entry`'s JSON, newline not included.
    fn json_len(entry: &Entry) -> usize {
        serde_json::to_vec(entry).expect("json").len()
    }

    /// The entry `make(n)` whose JSON is exactly `len` bytes (`make` grows by one byte a step).
    fn sized(len: usize, make: impl Fn(usize) -> Entry) -> Entry {
        let sized = make(len - json_len(&make(0)));
        assert_eq!(json_len(&sized), len);
        sized
    }

    /// A `totals` line whose bulk is a map's key: shortening cuts string values, never keys.
    fn uncuttable(pad: usize) -> Entry {
        let mut totals = crate::tally::Tally::default();
        totals.halts.insert("k".repeat(pad), 1);
        entry(Event::Totals { totals })
    }

    /// A `broken-file` line whose bulk is strings over 256 bytes, which shortening cuts.
    fn cuttable(pad: usize) -> Entry {
        entry(Event::BrokenFile {
            name: "n".repeat(300 + pad),
            what: "w".repeat(3000),
            fix: "rm".to_owned(),
            fixed: false,
        })
    }

    #[test]
    fn a_line_of_max_line_bytes_is_kept_and_one_byte_more_is_cut_or_dropped() {
        // MAX_LINE - 1 bytes and the newline: the longest line, kept as it is, long strings
        // and all.
        for make in [uncuttable, cuttable] {
            let e = sized(MAX_LINE - 1, make);
            let mut whole = serde_json::to_vec(&e).expect("json");
            whole.push(b'\n');
            assert_eq!(encode(&e), Some(whole), "kept whole at MAX_LINE bytes");
        }
        // One byte more: its long strings are cut...
        let line = encode(&sized(MAX_LINE, cuttable)).expect("cut to fit");
        assert!(line.len() < MAX_LINE, "{}", line.len());
        let (read, _) = decode(&line[..line.len() - 1]);
        let Some(Entry {
            event: Event::BrokenFile { name, what, .. },
            ..
        }) = read
        else {
            panic!("reads back");
        };
        assert_eq!((name.len(), what.len()), (259, 259), "256 bytes and `…`");
        // ... and with nothing to cut it is dropped, never written past MAX_LINE.
        assert_eq!(encode(&sized(MAX_LINE, uncuttable)), None);
        assert_eq!(encode(&sized(MAX_LINE + 1, uncuttable)), None);
    }

    /// `value` shortened, on a thread of its own: a cut that never finds its character
    /// boundary fails the test instead of hanging it.
    fn shortened(mut value: serde_json::Value) -> serde_json::Value {
        crate::testing::within("shorten", move || {
            shorten(&mut value);
            value
        })
    }

    #[test]
    fn a_string_of_256_bytes_is_kept_and_of_257_cut_on_a_character() {
        let cut = |text: &str| {
            shortened(serde_json::Value::String(text.to_owned()))
                .as_str()
                .expect("a string")
                .to_owned()
        };
        let kept = "a".repeat(256);
        assert_eq!(cut(&kept), kept);
        assert_eq!(cut(&"a".repeat(257)), format!("{kept}…"));
        // Byte 256 inside a two-byte character: cut before it, at 255.
        let odd = format!("x{}", "é".repeat(200));
        assert!(!odd.is_char_boundary(256));
        assert_eq!(cut(&odd), format!("x{}…", "é".repeat(127)));
        // In objects and arrays too, keys left alone.
        let value = serde_json::json!({ ("k".repeat(300)): ["b".repeat(257), "c"] });
        assert_eq!(
            shortened(value),
            serde_json::json!({ ("k".repeat(300)): [format!("{}…", "b".repeat(256)), "c"] })
        );
    }

    #[test]
    fn torn_fragments_without_a_whole_event_after_them_are_each_counted() {
        let whole = encode(&entry(Event::Undrain)).expect("line");
        let whole = &whole[..whole.len() - 1];
        // Two fragments, the second begun with the marker: two pieces skipped.
        let mut two = whole[..17].to_vec();
        two.extend_from_slice(&whole[..30]);
        assert_eq!(decode(&two), (None, 2));
        let mut three = two.clone();
        three.extend_from_slice(&whole[..25]);
        assert_eq!(decode(&three), (None, 3));
    }

    #[test]
    fn a_torn_fragment_is_skipped_and_the_event_after_it_kept() {
        let whole = encode(&entry(Event::Undrain)).expect("line");
        let whole = &whole[..whole.len() - 1];
        let mut torn = whole[..17].to_vec();
        torn.extend_from_slice(&whole[..12]);
        torn.extend_from_slice(whole);
        assert_eq!(decode(&torn), (Some(entry(Event::Undrain)), 2));
        assert_eq!(decode(&whole[..20]), (None, 1), "a fragment alone");
        assert_eq!(decode(b"garbage"), (None, 1));
        assert_eq!(decode(b""), (None, 0), "an empty line is nothing");
    }
}
