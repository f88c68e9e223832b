//! Publishing a guard: an empty file made under a temp alias, given its mode, and linked into
//! place.

#![allow(
    clippy::disallowed_methods,
    reason = "this module publishes a guard (link, temp alias unlinked)"
)]

use crate::GUARD_MODE;
use crate::acquire::Error;
use crate::check::{Shown, check_filesystem, io};
use crate::mode::from_bits;
use crate::name::guard_temp_name;
use crate::token::random_token;
use rustix::fd::BorrowedFd;
use rustix::fs::{AtFlags, OFlags};
use rustix::io::Errno;

/// How a guard's temp alias is created: read-only (a guard is never written, and should this
/// descriptor land on a closed standard stream for a moment, a stray print to it fails instead
/// of filling the guard with bytes; `fchmod` needs no write access), only if the name is new
/// (`O_EXCL`, which also never follows a symlink; `O_NOFOLLOW` says so again), and not inherited
/// by programs this process executes.
const CREATE_TEMP_ALIAS: OFlags = OFlags::RDONLY
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Publishes the guard `name`: an empty file created exclusively under a random temp alias,
/// given mode 0444 through its own descriptor (so no umask can change it), then hard-linked to
/// `name` (already there: someone else published first, theirs is used), then the temp alias
/// is unlinked. A crash before the link leaves no guard; after it, a complete guard.
///
/// The directory's filesystem is checked first, so nothing is created where no guard could be
/// used (the guard's own descriptor is checked again after opening).
pub(crate) fn publish(
    dir: BorrowedFd<'_>,
    shown: Shown<'_>,
    before_link: &mut dyn FnMut(),
) -> Result<(), Error> {
    check_filesystem(dir, shown)?;
    // A temp alias a minute old is removed by ordinary operation (the slot directory's temp
    // sweep); a publisher stopped that long between creating and linking its alias finds it
    // gone (ENOENT) and starts again with a new one.
    for _ in 0..3 {
        match publish_once(dir, shown, before_link) {
            Err(Error::Io { source, .. })
                if source.raw_os_error() == Some(Errno::NOENT.raw_os_error()) =>
            {
                continue;
            }
            other => return other,
        }
    }
    publish_once(dir, shown, before_link)
}

fn publish_once(
    dir: BorrowedFd<'_>,
    shown: Shown<'_>,
    before_link: &mut dyn FnMut(),
) -> Result<(), Error> {
    let name = shown.name;
    let resource = &name[1..name.len() - crate::name::GUARD_SUFFIX.len()];
    let temp = loop {
        let temp = guard_temp_name(resource, &random_token());
        match rustix::fs::openat(dir, temp.as_str(), CREATE_TEMP_ALIAS, from_bits(0o400)) {
            Ok(fd) => {
                let chmod = rustix::fs::fchmod(&fd, from_bits(GUARD_MODE));
                drop(fd);
                if let Err(e) = chmod {
                    let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
                    let temp_shown = Shown {
                        dir: shown.dir,
                        name: &temp,
                    };
                    return Err(io("set the mode of the temp alias of", temp_shown)(e));
                }
                break temp;
            }
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(io("create a temp alias for", shown)(e)),
        }
    };
    before_link();
    let linked = rustix::fs::linkat(dir, temp.as_str(), dir, name, AtFlags::empty());
    // The temp alias goes in every path; if removing it fails, it is a harmless extra link.
    let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
    match linked {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(io("publish (link) the temp alias of", shown)(e)),
    }
}
