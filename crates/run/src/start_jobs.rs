//! Starting the jobserver of a build under supervision: on Linux the machine's job slots behind
//! a FIFO (`jobserver`, which needs inotify); elsewhere a refusal that says so.

use crate::jobs::Style;
use crate::supervise;

/// A jobserver for the build under supervision (Linux: inotify watches its FIFO).
#[cfg(target_os = "linux")]
pub(crate) fn start_jobserver(
    pool: &worklane_admission::Pool,
    request: &worklane_lease::Request,
    share: u32,
    style: Style,
) -> Result<crate::jobserver::Jobserver, supervise::Error> {
    crate::jobserver::Jobserver::start(pool, request, share, style)
}

/// No jobserver off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn start_jobserver(
    _pool: &worklane_admission::Pool,
    _request: &worklane_lease::Request,
    _share: u32,
    _style: Style,
) -> Result<NoJobserver, supervise::Error> {
    Err(supervise::Error::Jobserver {
        what: "a jobserver backed by the machine's job slots needs Linux (inotify)",
        source: std::io::Error::from(std::io::ErrorKind::Unsupported),
    })
}

/// What `start_jobserver` would give off Linux (it never does).
#[cfg(not(target_os = "linux"))]
pub(crate) struct NoJobserver;

#[cfg(not(target_os = "linux"))]
impl NoJobserver {
    pub(crate) fn env(&self) -> &[(&'static str, std::ffi::OsString)] {
        &[]
    }
    pub(crate) fn inherit(&mut self) -> Vec<std::os::fd::OwnedFd> {
        Vec::new()
    }
    pub(crate) fn end(self) {}
    pub(crate) fn add_shims(&mut self) -> Result<(), supervise::Error> {
        Ok(())
    }
}
