//! The one error every parser here returns: which part of the input was wrong.
//!
//! Each parser lives in its own module ([`proc_stat`](crate::proc_stat), [`ps`](crate::ps),
//! [`uuid`](crate::uuid)); they are pure, compiled on every platform and unit-tested on every
//! platform, whichever one actually runs them.

use std::fmt;

/// Input that does not have the expected shape; the text names the part that was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}
