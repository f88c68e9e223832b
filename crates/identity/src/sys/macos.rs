//! Darwin: the place from `sysctl` and `uname`, a process's identity from `ps`.
//!
//! Same signatures as the `linux` module; parsing lives in `ps` and `uuid`, and so does the `ps`
//! command line, so that every platform tests it. Both helpers run with an empty environment
//! but `LC_ALL=C` (and `TZ=UTC` for `ps`), so their output does not depend on the caller's
//! locale or zone. Reading `kern.bootsessionuuid` through `sysctlbyname`
//! would need `unsafe`; the helper keeps this crate free of it.

use std::process::{Command, Stdio};

use crate::place::{self, Place};
use crate::process::{self, Snapshot};
use crate::{ps, uuid};

/// Prints the boot session UUID, see [sysctl(8)].
///
/// [sysctl(8)]: https://keith.github.io/xcode-man-pages/sysctl.8.html
const SYSCTL: &str = "/usr/sbin/sysctl";
const SYSCTL_COMMAND: &str = "/usr/sbin/sysctl -n kern.bootsessionuuid";

/// Reads the place of the current process. Darwin has one host pid space and no time
/// namespaces.
pub(crate) fn read_place() -> Result<Place, place::Error> {
    #[allow(
        clippy::disallowed_methods,
        reason = "product code; a multithreaded caller minds the fork window (guard's Limitations)"
    )]
    let output = Command::new(SYSCTL)
        .args(["-n", "kern.bootsessionuuid"])
        .env_clear()
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|source| place::Error::Spawn {
            program: SYSCTL,
            source,
        })?;
    if !output.status.success() {
        return Err(place::Error::Failed {
            command: SYSCTL_COMMAND,
            status: output.status,
        });
    }
    let boot =
        uuid::parse_boot_id(&output.stdout).map_err(|source| place::Error::MalformedBootId {
            from: SYSCTL_COMMAND,
            source,
        })?;
    Ok(Place {
        host: place::hostname(),
        boot,
        pidns: None,
        timens: None,
    })
}

/// Reads the start and state of `pid` from one run of `ps`.
pub(crate) fn snapshot(pid: u32) -> Result<Snapshot, process::Error> {
    #[allow(
        clippy::disallowed_methods,
        reason = "product code; a multithreaded caller minds the fork window (guard's Limitations)"
    )]
    let output = ps::command(pid)
        .output()
        .map_err(|source| process::Error::Spawn {
            pid,
            program: ps::PS,
            source,
        })?;
    // `ps` exits 1 when no process matched; what it printed decides, not its status.
    match ps::parse(&output.stdout) {
        Ok(Some(line)) => Ok(Snapshot {
            start: line.start,
            exited: line.zombie,
        }),
        Ok(None) => Err(process::Error::NotFound { pid }),
        Err(source) => Err(process::Error::Malformed {
            pid,
            from: ps::PS.into(),
            source,
        }),
    }
}
