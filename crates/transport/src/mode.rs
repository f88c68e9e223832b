//! Narrowing the mode of a listening socket's name without trusting the name: another user
//! who may write the directory can rename the socket away and put a link, or another file, at
//! its name between any look and any `chmod` by that name.
//!
//! [`narrow`] opens the name once without following a link (`O_PATH | O_NOFOLLOW`, Linux: a
//! link at the name is opened as itself),
//! judges what it opened by `fstat` (a socket of the caller's, with one name), and changes the
//! mode of exactly that inode through the descriptor (`/proc/self/fd/N`, which names the
//! opened inode whatever has happened to the name since). It only ever takes bits away.

use std::path::Path;

/// What [`narrow`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Narrowed {
    /// The mode gave nothing to others: unchanged.
    Already {
        /// Its mode.
        mode: u32,
    },
    /// The bits for others were taken away.
    Done {
        /// Its mode before.
        from: u32,
        /// Its mode now.
        to: u32,
    },
    /// The name is not a socket of the caller's with one name (it was replaced, or is shared
    /// by a hard link), or this platform cannot change it by descriptor: left alone. The peer
    /// check at each connection is what keeps strangers out.
    Refused {
        /// Why, in words.
        why: String,
    },
}

/// Takes the bits for others (`0o007`) away from the socket at `path`, judged and changed
/// through one descriptor opened without following a link.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn narrow(path: &Path) -> std::io::Result<Narrowed> {
    use rustix::fd::AsRawFd;
    use rustix::fs::{FileType, Mode, OFlags};
    use std::os::unix::fs::PermissionsExt;
    let fd = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let stat = rustix::fs::fstat(&fd)?;
    let mode = stat.st_mode & 0o7777;
    let me = rustix::process::geteuid().as_raw();
    let kind = FileType::from_raw_mode(stat.st_mode);
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    let links = stat.st_nlink as u64;
    if kind != FileType::Socket {
        return Ok(Narrowed::Refused {
            why: format!("{} is not a socket now", path.display()),
        });
    }
    if stat.st_uid != me {
        return Ok(Narrowed::Refused {
            why: format!(
                "{} is owned by uid {}, not by this process's uid {me}",
                path.display(),
                stat.st_uid
            ),
        });
    }
    if links != 1 {
        return Ok(Narrowed::Refused {
            why: format!("{} has {links} names (hard links)", path.display()),
        });
    }
    if mode & 0o007 == 0 {
        return Ok(Narrowed::Already { mode });
    }
    let to = mode & !0o007;
    // The magic link names the inode opened above, not whatever the name is now.
    let by_fd = format!("/proc/self/fd/{}", fd.as_raw_fd());
    std::fs::set_permissions(&by_fd, std::fs::Permissions::from_mode(to))?;
    Ok(Narrowed::Done { from: mode, to })
}

/// Elsewhere a socket's mode cannot be changed through a descriptor: left alone.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn narrow(path: &Path) -> std::io::Result<Narrowed> {
    Ok(Narrowed::Refused {
        why: format!(
            "{}: this platform cannot change a socket's mode through a descriptor",
            path.display()
        ),
    })
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .expect("stat")
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn a_socket_loses_the_bits_of_others_and_a_link_or_a_file_at_its_name_is_left_alone() {
        let temp = tempfile::tempdir().expect("temp");
        let sock = temp.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        assert_eq!(
            narrow(&sock).expect("narrow"),
            Narrowed::Done {
                from: 0o666,
                to: 0o660
            }
        );
        assert_eq!(mode(&sock), 0o660);
        assert_eq!(
            narrow(&sock).expect("again"),
            Narrowed::Already { mode: 0o660 }
        );
        // A victim: a private file, and a link to it where the socket was.
        let victim = temp.path().join("victim");
        std::fs::write(&victim, b"secret").expect("write");
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o607)).expect("chmod");
        let link = temp.path().join("link.sock");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        assert!(
            matches!(
                narrow(&link).expect("the link itself"),
                Narrowed::Refused { .. }
            ),
            "O_PATH | O_NOFOLLOW opens the link itself, which is no socket"
        );
        assert!(matches!(
            narrow(&victim).expect("a file"),
            Narrowed::Refused { .. }
        ));
        assert_eq!(mode(&victim), 0o607, "the victim's mode untouched");
        // A second name of the socket: refused.
        let twin = temp.path().join("twin.sock");
        std::fs::hard_link(&sock, &twin).expect("hard link");
        assert!(matches!(
            narrow(&twin).expect("twin"),
            Narrowed::Refused { .. }
        ));
    }

    #[test]
    fn a_link_at_the_name_to_a_socket_of_the_caller_s_is_not_followed() {
        let temp = tempfile::tempdir().expect("temp");
        let sock = temp.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        // Another user swapped a link in at the name, to a socket the caller owns elsewhere.
        let link = temp.path().join("link.sock");
        std::os::unix::fs::symlink(&sock, &link).expect("symlink");
        let refused = narrow(&link).expect("the link itself");
        assert!(
            matches!(&refused, Narrowed::Refused { why } if why.ends_with("is not a socket now")),
            "{refused:?}"
        );
        assert_eq!(mode(&sock), 0o666, "the socket behind the link untouched");
    }
}
