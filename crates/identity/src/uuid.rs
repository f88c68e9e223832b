//! Parser of a boot id: Linux `/proc/sys/kernel/random/boot_id` (lowercase) and Darwin
//! `sysctl -n kern.bootsessionuuid` (uppercase) both print one UUID and a newline.
// Unused where neither is read (the `other` platform module), but tested everywhere.
#![cfg_attr(not(any(target_os = "linux", target_os = "macos")), allow(dead_code))]

use crate::parse::Malformed;

/// Hex digits in each dash-separated group of a UUID.
const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];

/// Returns the UUID of a boot-id file or command output, surrounding whitespace removed.
///
/// The case is kept as the system printed it: records are compared byte for byte, and another
/// harness joining the protocol writes what it read.
pub(crate) fn parse_boot_id(bytes: &[u8]) -> Result<String, Malformed> {
    let text = std::str::from_utf8(bytes).map_err(|_| Malformed("the boot id is not UTF-8"))?;
    let text = text.trim_ascii();
    if text.is_empty() {
        return Err(Malformed("the boot id is empty"));
    }
    let mut groups = text.split('-');
    for len in GROUPS {
        let group = groups
            .next()
            .ok_or(Malformed("the boot id has fewer than 5 groups"))?;
        if group.len() != len || !group.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Malformed(
                "the boot id is not a UUID (8-4-4-4-12 hex digits)",
            ));
        }
    }
    if groups.next().is_some() {
        return Err(Malformed("the boot id has more than 5 groups"));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_boot_id_file_keeps_its_lowercase() {
        let id = parse_boot_id(b"0f2c6a55-8e1b-4b7e-9d3c-2a1f00c0ffee\n");
        assert_eq!(
            id.as_deref(),
            Ok("0f2c6a55-8e1b-4b7e-9d3c-2a1f00c0ffee"),
            "the newline goes, the text stays"
        );
    }

    #[test]
    fn darwin_sysctl_value_keeps_its_uppercase() {
        let id = parse_boot_id(b"  6B1B5A4E-3F0D-4C39-A9B0-6E9E2D0C7F11 \n");
        assert_eq!(
            id.as_deref(),
            Ok("6B1B5A4E-3F0D-4C39-A9B0-6E9E2D0C7F11"),
            "sysctl output is trimmed and kept as printed"
        );
    }

    #[test]
    fn rejects_values_that_are_not_one_uuid() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "empty"),
            (b" \n", "blank"),
            (
                b"kern.bootsessionuuid: 6B1B5A4E-3F0D-4C39-A9B0-6E9E2D0C7F11\n",
                "name printed",
            ),
            (b"6B1B5A4E-3F0D-4C39-A9B0\n", "too few groups"),
            (
                b"6B1B5A4E-3F0D-4C39-A9B0-6E9E2D0C7F11-00\n",
                "too many groups",
            ),
            (b"6B1B5A4E-3F0D-4C39-A9B0-6E9E2D0C7F1G\n", "not hex"),
            (
                b"6B1B5A4E3F0D-4C39-A9B0-6E9E2D0C7F11-\n",
                "wrong group lengths",
            ),
            (
                b"6b1b5a4e-3f0d-4c39-a9b0-6e9e2d0c7f11\n6b1b5a4e-3f0d-4c39-a9b0-6e9e2d0c7f11\n",
                "two",
            ),
            (b"\xff\xfe", "not UTF-8"),
        ];
        for (input, why) in cases {
            assert!(
                parse_boot_id(input).is_err(),
                "{why}: {:?} must not parse",
                String::from_utf8_lossy(input)
            );
        }
    }
}
