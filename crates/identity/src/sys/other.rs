//! Every other platform: where a process runs and who it is cannot be read, so both fail with
//! `Unsupported` at run time. Same signatures as the `linux` and `macos` modules.
//!
//! A probe on such a platform is therefore always `Unknown` (this process's place is
//! unavailable): nothing is ever judged gone, and a lease that needs proof of death never takes
//! a record over. The crate compiles, so the layers above it build and their pure parts run.

use crate::place::{self, Place};
use crate::process::{self, Snapshot};

/// Refuses: no way to read the boot id and namespaces here is known.
pub(crate) fn read_place() -> Result<Place, place::Error> {
    Err(place::Error::Unsupported {
        os: std::env::consts::OS,
    })
}

/// Refuses: no way to read a process's start identity here is known.
pub(crate) fn snapshot(pid: u32) -> Result<Snapshot, process::Error> {
    Err(process::Error::Unsupported {
        pid,
        os: std::env::consts::OS,
    })
}
