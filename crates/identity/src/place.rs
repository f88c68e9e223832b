//! Where a process runs: host, boot, pid namespace and time namespace.

use std::io;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// Where a process runs, as a lock record's `place` field: `{host, boot, pidns, timens}`.
///
/// Two records can be compared by pid and start identity only when their places are equal:
/// a pid means nothing on another host, after a reboot, or in another pid namespace, and a Linux
/// start time reads differently from another time namespace.
///
/// In JSON, `pidns` and `timens` are integers (the namespace's inode number) or `null`;
/// a missing one reads as `null`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Place {
    /// The host name (`uname` nodename).
    pub host: String,
    /// The boot id: Linux `/proc/sys/kernel/random/boot_id`, Darwin `kern.bootsessionuuid`.
    /// It changes at every boot, so a record with another boot id on the same host is from
    /// before a reboot.
    pub boot: String,
    /// The inode of `/proc/self/ns/pid` on Linux; `None` on Darwin, which has one host pid
    /// space.
    #[serde(default)]
    pub pidns: Option<u64>,
    /// The inode of `/proc/self/ns/time` on Linux 5.6 and later; `None` on older kernels
    /// and on Darwin.
    #[serde(default)]
    pub timens: Option<u64>,
}

static CURRENT: OnceLock<Place> = OnceLock::new();

impl Place {
    /// The place of the current process, read on first use and cached for the life of the
    /// process (a process cannot leave its host, boot or namespaces).
    ///
    /// A failed read is not cached: the next call tries again.
    ///
    /// # Errors
    ///
    /// The boot id cannot be read or is not a UUID, a namespace link cannot be read, or the
    /// platform is neither Linux nor macOS ([`Error::Unsupported`]).
    pub fn current() -> Result<&'static Place, Error> {
        if let Some(place) = CURRENT.get() {
            return Ok(place);
        }
        let place = crate::sys::read_place()?;
        Ok(CURRENT.get_or_init(|| place))
    }
}

impl Place {
    /// Milliseconds on this boot's clock: it starts at boot, counts time asleep, and is never
    /// stepped (Linux `CLOCK_BOOTTIME`, as seen from this process's time namespace; Darwin
    /// `CLOCK_MONOTONIC`, which counts sleep too). Two readings are comparable only between
    /// processes of the same [`Place::boot`] and [`Place::timens`].
    #[must_use]
    pub fn boot_clock_ms() -> u64 {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let id = rustix::time::ClockId::Boottime;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let id = rustix::time::ClockId::Monotonic;
        let t = rustix::time::clock_gettime(id);
        let ms = i128::from(t.tv_sec) * 1000 + i128::from(t.tv_nsec) / 1_000_000;
        u64::try_from(ms).unwrap_or(0)
    }
}

/// The host name of this machine, from `uname`; bytes that are not UTF-8 are replaced.
#[cfg_attr(
    not(any(target_os = "linux", target_os = "macos")),
    allow(dead_code, reason = "read by the linux and macos modules only")
)]
pub(crate) fn hostname() -> String {
    String::from_utf8_lossy(rustix::system::uname().nodename().to_bytes()).into_owned()
}

/// Why the place of the current process could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file of `/proc` could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The boot id did not have the shape of a UUID.
    #[error("the boot id read from {from} is malformed")]
    MalformedBootId {
        /// The file or command it came from.
        from: &'static str,
        /// Which part was wrong.
        #[source]
        source: crate::parse::Malformed,
    },
    /// A helper program (Darwin `sysctl`) could not be run.
    #[error("cannot run {program}")]
    Spawn {
        /// The program.
        program: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A helper program (Darwin `sysctl`) ran and failed.
    #[error("{command} failed ({status})")]
    Failed {
        /// The command line.
        command: &'static str,
        /// Its exit status.
        status: std::process::ExitStatus,
    },
    /// This platform is neither Linux nor macOS: where a process runs cannot be read.
    #[error("cannot read where this process runs on {os}: worklane supports Linux and macOS")]
    Unsupported {
        /// The platform (`std::env::consts::OS`).
        os: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_exactly_the_record_field_names() {
        let place = Place {
            host: "build-7".into(),
            boot: "0f2c6a55-8e1b-4b7e-9d3c-2a1f00c0ffee".into(),
            pidns: Some(4_026_531_836),
            timens: None,
        };
        let json = serde_json::to_value(&place).expect("a place serializes");
        assert_eq!(
            json,
            serde_json::json!({
                "host": "build-7",
                "boot": "0f2c6a55-8e1b-4b7e-9d3c-2a1f00c0ffee",
                "pidns": 4_026_531_836_u64,
                "timens": null,
            }),
            "place JSON field names and types"
        );
        let back: Place = serde_json::from_value(json).expect("a place deserializes");
        assert_eq!(back, place, "a place round-trips through JSON");
    }

    #[test]
    fn missing_namespaces_and_unknown_fields_are_accepted() {
        let place: Place = serde_json::from_str(r#"{"host":"mac","boot":"B","extra":[1]}"#)
            .expect("missing pidns/timens and an unknown field are accepted");
        assert_eq!(place.pidns, None, "a missing pidns is None");
        assert_eq!(place.timens, None, "a missing timens is None");
    }
}
