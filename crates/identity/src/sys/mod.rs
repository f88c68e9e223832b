//! Platform shims: what one platform tells of a process and of where it runs, with the same
//! signatures on every platform (`read_place`, `snapshot`), chosen by `cfg`. The parsing they
//! call is plain code of the crate, tested on every platform.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::*;

#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
pub(crate) use macos::*;

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
mod other;
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub(crate) use other::*;
