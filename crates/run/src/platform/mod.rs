//! What this crate reads of the machine's processes (the process table, how one process
//! looks, who holds a guard's descriptor, the subreaper setting), with the same signatures on
//! every platform, chosen by `cfg`: `linux.rs` reads `/proc`; `other.rs` sees nothing. Safe
//! code: the crate's `unsafe` is in `sys` alone.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::*;

#[cfg(not(target_os = "linux"))]
mod other;
#[cfg(not(target_os = "linux"))]
pub(crate) use other::*;
