//! The small helpers every crate of worklane shares, written once at the bottom of its graph
//! (no dependency of its own), as rust-analyzer's `stdx` is.
//!
//! - [`chain`]: an error with its chain of causes, `outer: inner: innermost`, as every
//!   worklane message shows one; [`assert_no_part_repeats`] checks, in a test, that no part of
//!   a chain would be shown twice.
//! - [`shell_quote`]: a path or key quoted for a shell when it needs it, as every fix a
//!   message gives shows one.
//! - [`read_small`]: a small file (`/proc`, `/sys`, a cgroup's) read whole in one `read`.
//!
//! Each library error of worklane says only what its own layer was doing and leaves its cause
//! to `source()`, so every part is shown as it is, once, and nothing is deduplicated by
//! searching the text.
//!
//! # Example
//!
//! ```
//! let error = std::io::Error::new(std::io::ErrorKind::Other, "disk full");
//! assert_eq!(worklane_stdx::chain(&error), "disk full");
//! ```

/// Reads a small file whole, as the files of `/proc`, `/sys` and a cgroup are read: one
/// `read` of up to 4 KiB, then one more to see its end (a longer file is read on in steps).
/// `std::fs::read` first asks the file's size, which such a file gives as 0, and then reads
/// it in growing steps from 32 bytes: `/proc/<pid>/stat` took eight system calls that way,
/// four this way, and a process table is read once per process.
///
/// # Errors
///
/// Opening or reading the file failed.
pub fn read_small(path: impl AsRef<std::path::Path>) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut bytes = Vec::with_capacity(4096);
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read_small`] as text (the bytes that are not UTF-8 replaced).
///
/// # Errors
///
/// Opening or reading the file failed.
pub fn read_small_text(path: impl AsRef<std::path::Path>) -> std::io::Result<String> {
    read_small(path).map(|bytes| match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// Renders `error` and each of its sources in turn, joined by `": "`.
#[must_use]
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `text` quoted for a shell, when it needs it (a path or key shown in a fix): as it is when
/// it is only letters, digits and `/._-+:,=@%`, else in single quotes.
///
/// ```
/// assert_eq!(worklane_stdx::shell_quote("/tmp/slots/STOP"), "/tmp/slots/STOP");
/// assert_eq!(worklane_stdx::shell_quote("it's here"), r"'it'\''s here'");
/// ```
#[must_use]
pub fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:,=@%".contains(&b));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Panics when a message of `error`'s chain holds its cause's text, which [`chain`] would
/// show twice: for tests of error types.
///
/// # Panics
///
/// When a part of the chain repeats its cause.
pub fn assert_no_part_repeats(error: &dyn std::error::Error) {
    let mut current = error;
    while let Some(cause) = current.source() {
        let (outer, inner) = (current.to_string(), cause.to_string());
        assert!(
            !outer.contains(&inner),
            "{outer:?} repeats its cause {inner:?}, shown as {:?}",
            chain(error)
        );
        current = cause;
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_small_file_is_read_whole_and_a_longer_one_too() {
        let temp = std::env::temp_dir().join(format!("stdx-read-small-{}", std::process::id()));
        let long: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&temp, &long).expect("write");
        assert_eq!(super::read_small(&temp).expect("read"), long);
        std::fs::write(&temp, b"caf\xc3\xa9 \xff").expect("write");
        assert_eq!(
            super::read_small_text(&temp).expect("read"),
            "caf\u{e9} \u{fffd}"
        );
        std::fs::remove_file(&temp).expect("remove");
        assert!(super::read_small(&temp).is_err(), "gone");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_proc_file_that_says_it_is_empty_is_read_whole() {
        let stat = super::read_small_text("/proc/self/stat").expect("read");
        assert!(
            stat.starts_with(&format!("{} (", std::process::id())),
            "{stat}"
        );
        assert!(stat.ends_with('\n'), "whole: {stat}");
    }
    use super::{assert_no_part_repeats, chain};

    /// A step of some layer, with the step below it as its source.
    #[derive(Debug)]
    struct Step(&'static str, Option<Box<Step>>);

    impl std::fmt::Display for Step {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Step {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|s| s as _)
        }
    }

    #[test]
    fn every_part_is_shown_once_outermost_first() {
        let error = Step(
            "cannot take slot agent-0.lock",
            Some(Box::new(Step(
                "cannot read its record",
                Some(Box::new(Step("permission denied", None))),
            ))),
        );
        assert_eq!(
            chain(&error),
            "cannot take slot agent-0.lock: cannot read its record: permission denied"
        );
        assert_eq!(chain(&Step("alone", None)), "alone", "no cause, no colon");
        assert_no_part_repeats(&error);
    }

    #[test]
    #[should_panic(expected = "repeats its cause")]
    fn a_message_holding_its_cause_is_caught() {
        assert_no_part_repeats(&Step(
            "cannot read: permission denied",
            Some(Box::new(Step("permission denied", None))),
        ));
    }
}
