//! Linux: the place from `/proc` and `uname`, a process's identity from `/proc/<pid>/stat`.
//!
//! Same signatures as the `macos` module; parsing lives in `proc_stat` and `uuid`.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use rustix::io::Errno;

use crate::place::{self, Place};
use crate::process::{self, Snapshot};
use crate::{proc_stat, uuid};

/// The boot id, a UUID that changes at every boot, see [proc_sys_kernel(5)].
///
/// [proc_sys_kernel(5)]: https://man7.org/linux/man-pages/man5/proc_sys_kernel.5.html
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// This process's pid namespace, see [namespaces(7)].
///
/// [namespaces(7)]: https://man7.org/linux/man-pages/man7/namespaces.7.html
const PID_NS: &str = "/proc/self/ns/pid";
/// This process's time namespace (Linux 5.6 and later), see [time_namespaces(7)].
///
/// [time_namespaces(7)]: https://man7.org/linux/man-pages/man7/time_namespaces.7.html
const TIME_NS: &str = "/proc/self/ns/time";

/// Reads the place of the current process.
pub(crate) fn read_place() -> Result<Place, place::Error> {
    let raw = worklane_stdx::read_small(BOOT_ID).map_err(|source| place::Error::Read {
        path: BOOT_ID,
        source,
    })?;
    let boot = uuid::parse_boot_id(&raw).map_err(|source| place::Error::MalformedBootId {
        from: BOOT_ID,
        source,
    })?;
    let pidns = namespace(PID_NS)?.ok_or_else(|| place::Error::Read {
        path: PID_NS,
        source: io::Error::from(io::ErrorKind::NotFound),
    })?;
    Ok(Place {
        host: place::hostname(),
        boot,
        pidns: Some(pidns),
        timens: namespace(TIME_NS)?,
    })
}

/// The inode of a namespace link (the link is followed to the nsfs inode); `None` when the
/// kernel has no such namespace kind.
fn namespace(path: &'static str) -> Result<Option<u64>, place::Error> {
    match fs::metadata(path) {
        Ok(metadata) => Ok(Some(metadata.ino())),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(place::Error::Read { path, source }),
    }
}

/// Reads the start and state of `pid` from one read of `/proc/<pid>/stat`.
pub(crate) fn snapshot(pid: u32) -> Result<Snapshot, process::Error> {
    let path = PathBuf::from(format!("/proc/{pid}/stat"));
    let bytes = match worklane_stdx::read_small(&path) {
        Ok(bytes) => bytes,
        // ESRCH: the process was reaped between the open and the read.
        Err(error)
            if error.kind() == io::ErrorKind::NotFound
                || Errno::from_io_error(&error) == Some(Errno::SRCH) =>
        {
            return Err(process::Error::NotFound { pid });
        }
        Err(source) => return Err(process::Error::Read { pid, path, source }),
    };
    proc_stat::snapshot(pid, &bytes, &path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_its_inode_and_a_missing_kind_is_none() {
        let inode = fs::metadata(PID_NS).expect("stat the pid namespace").ino();
        assert_eq!(
            namespace(PID_NS).ok(),
            Some(Some(inode)),
            "the inode of the pid namespace"
        );
        assert_eq!(
            namespace("/proc/self/ns/no-such-kind").ok(),
            Some(None),
            "a kind of namespace this kernel lacks is none"
        );
        let error = namespace("/proc/self/ns/pid/below")
            .expect_err("a path through a namespace is no namespace");
        assert!(
            matches!(
                error,
                place::Error::Read {
                    path: "/proc/self/ns/pid/below",
                    ..
                }
            ),
            "any other failure is an error naming the path, got {error:?}"
        );
    }
}
