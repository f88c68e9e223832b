//! The one error every parser here returns: which part of the input was wrong.
//!
//! Each parser lives in its own module ([`proc_stat`](crate::proc_stat), [`ps`](crate::ps),
//! [`uuid`](crate::uuid)); they are pure, compiled on every platform and unit-tested on every
//! platform, whichever one actually runs them.

use std::fmt;

/// Input that does not have the expected shape: which part was wrong (`field 3 (state) is
/// not one letter`). The cause of [`process::Error::Malformed`](crate::process::Error::Malformed)
/// and [`place::Error::MalformedBootId`](crate::place::Error::MalformedBootId).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub(crate) &'static str);

impl Malformed {
    /// The part of the input that was wrong, in words.
    #[must_use]
    pub fn part(&self) -> &'static str {
        self.0
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Malformed {}

#[cfg(test)]
mod tests {
    #[test]
    fn a_malformed_input_says_which_part_was_wrong() {
        let wrong = super::Malformed("field 1 (pid) is not a process id");
        assert_eq!(wrong.to_string(), "field 1 (pid) is not a process id");
        assert_eq!(wrong.part(), "field 1 (pid) is not a process id");
    }
}
