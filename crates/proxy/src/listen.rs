//! Where the proxy listens: a TCP address (loopback unless another one is given) or a Unix
//! socket's path.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// Where the proxy listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address. Every client that can reach it may spend the budget: keep it on
    /// loopback (`127.0.0.1`, `[::1]`) unless the network around it is trusted.
    Tcp(SocketAddr),
    /// A Unix stream socket at this path (created mode 0660); only root, the slot directory's
    /// owner and members of its group are served (their peer credentials are checked).
    Unix(PathBuf),
}

impl Listen {
    /// `127.0.0.1:port` (0: a port the system picks; [`crate::Proxy::local_addr`] tells which).
    #[must_use]
    pub fn loopback(port: u16) -> Listen {
        Listen::Tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    }

    /// Whether only this machine can connect: a loopback address or a Unix socket.
    #[must_use]
    pub fn is_local(&self) -> bool {
        match self {
            Listen::Tcp(addr) => addr.ip().is_loopback(),
            Listen::Unix(_) => true,
        }
    }
}

/// `127.0.0.1:PORT`, `[::1]:PORT` or `unix:PATH`, as [`Listen`]'s `FromStr` reads them.
impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// Reads `HOST:PORT` (an IP address and a port: `127.0.0.1:8480`, `[::1]:8480`),
/// `localhost:PORT`, a bare `PORT` (on `127.0.0.1`), or `unix:PATH`.
impl std::str::FromStr for Listen {
    type Err = Error;

    fn from_str(given: &str) -> Result<Listen, Error> {
        let invalid = || Error::Invalid {
            given: given.to_owned(),
        };
        if let Some(path) = given.strip_prefix("unix:") {
            if path.is_empty() || path.contains('\0') {
                return Err(invalid());
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        if !given.is_empty() && given.bytes().all(|b| b.is_ascii_digit()) {
            return given.parse().map(Listen::loopback).map_err(|_| invalid());
        }
        if let Some(port) = given.strip_prefix("localhost:") {
            return port.parse().map(Listen::loopback).map_err(|_| invalid());
        }
        given.parse().map(Listen::Tcp).map_err(|_| invalid())
    }
}

/// A listen address that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Neither an address with a port nor `unix:PATH`.
    #[error(
        "cannot read the listen address {given:?}: give IP:PORT (127.0.0.1:8480), PORT (on \
         127.0.0.1) or unix:PATH"
    )]
    Invalid {
        /// What was given.
        given: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_reads_and_writes_back() {
        for (text, listen) in [
            ("127.0.0.1:8480", Listen::loopback(8480)),
            ("8480", Listen::loopback(8480)),
            ("localhost:8480", Listen::loopback(8480)),
            (
                "[::1]:9",
                Listen::Tcp(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 9))),
            ),
            (
                "unix:/run/worklane/proxy.sock",
                Listen::Unix("/run/worklane/proxy.sock".into()),
            ),
        ] {
            assert_eq!(text.parse::<Listen>(), Ok(listen.clone()), "{text}");
            assert_eq!(
                listen.to_string().parse::<Listen>(),
                Ok(listen),
                "{text} written back reads the same"
            );
        }
        for bad in [
            "",
            "unix:",
            "example.com:80",
            "127.0.0.1",
            "99999",
            ":80",
            "localhost:x",
        ] {
            let err = bad.parse::<Listen>().expect_err(bad);
            assert!(err.to_string().contains("unix:PATH"), "{bad}: {err}");
        }
    }

    #[test]
    fn only_loopback_and_unix_sockets_are_local() {
        assert!(Listen::loopback(1).is_local());
        assert!(Listen::Unix("/x".into()).is_local());
        assert!(!"0.0.0.0:80".parse::<Listen>().expect("addr").is_local());
        assert!(!"192.0.2.1:80".parse::<Listen>().expect("addr").is_local());
    }
}
