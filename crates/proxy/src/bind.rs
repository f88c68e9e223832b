//! Making a proxy: its configuration checked, its ledger opened, its upstream client made,
//! its address bound (nothing is served until [`Proxy::serve`]).

use crate::lanes::Lanes;
use crate::peer::Trust;
use crate::{Config, Listen, Upstream};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use worklane_budget::{Ledger, Profile, Provider};
use worklane_slotfile::SlotDir;

/// The upstream client: HTTP/1.1 over TLS (rustls, ring, Mozilla's roots) or plain HTTP,
/// connections kept alive and reused.
pub(crate) type UpstreamClient =
    Client<hyper_rustls::HttpsConnector<HttpConnector>, crate::forward::Outgoing>;

/// What every connection of a proxy shares.
pub(crate) struct Shared {
    pub(crate) provider: Provider,
    pub(crate) profile: Profile,
    pub(crate) upstream: Upstream,
    pub(crate) client: UpstreamClient,
    pub(crate) lanes: Lanes,
    pub(crate) max_wait: Duration,
}

/// A bound proxy, not yet serving.
pub struct Proxy {
    pub(crate) shared: Arc<Shared>,
    pub(crate) listener: Listener,
    pub(crate) local: Listen,
    pub(crate) drain: Duration,
    pub(crate) trust: Trust,
    pub(crate) stop: Arc<watch::Sender<bool>>,
}

/// The bound socket.
pub(crate) enum Listener {
    Tcp(std::net::TcpListener),
    Unix {
        listener: std::os::unix::net::UnixListener,
        /// Its path, removed when the proxy stops (if it is still this socket).
        path: PathBuf,
        /// Its device and inode.
        id: (u64, u64),
    },
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("provider", &self.shared.provider.name())
            .field("upstream", &self.shared.upstream.to_string())
            .field("listen", &self.local.to_string())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Checks `config`, opens the slot directory's ledger and binds the listen address.
    /// A Unix socket is made mode 0660; a stale one (nobody serves it) is replaced.
    pub fn bind(config: Config) -> Result<Proxy, Error> {
        let Some(profile) = config.provider.profile() else {
            return Err(Error::Github);
        };
        let dir = match config.dir {
            Some(dir) => dir,
            None => SlotDir::resolve_dir().map_err(|source| Error::SlotDir { source })?,
        };
        let stat = rustix::fs::fstat(&dir).map_err(|source| Error::DirOwner {
            path: dir.path().to_owned(),
            source,
        })?;
        let trust = Trust {
            owner: stat.st_uid,
            group: stat.st_gid,
        };
        // Without TCP_NODELAY a request's body, written after its head, waits for the
        // upstream's delayed ACK of the head: 40 ms added to a call.
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|source| Error::Tls { source })?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let (listener, local) = listen(&config.listen)?;
        if !config.listen.is_local() {
            log::warn!(
                "the proxy listens on {local}, which is not loopback: whoever reaches it spends \
                 this machine's {} budget with their own key",
                config.provider.name()
            );
        }
        let ledger = Ledger::new(dir).owner("worklane proxy");
        let shared = Shared {
            profile,
            upstream: config.upstream,
            client,
            lanes: Lanes::new(ledger, config.provider.clone(), config.consumer),
            max_wait: config.max_wait,
            provider: config.provider,
        };
        Ok(Proxy {
            shared: Arc::new(shared),
            listener,
            local,
            drain: config.drain,
            trust,
            stop: Arc::new(watch::channel(false).0),
        })
    }

    /// Where it listens (with the port the system picked, when 0 was asked).
    #[must_use]
    pub fn local_addr(&self) -> &Listen {
        &self.local
    }
}

fn listen(listen: &Listen) -> Result<(Listener, Listen), Error> {
    match listen {
        Listen::Tcp(addr) => {
            let io = |source| Error::Tcp {
                addr: *addr,
                source,
            };
            let listener = std::net::TcpListener::bind(addr).map_err(io)?;
            listener.set_nonblocking(true).map_err(io)?;
            let local = listener.local_addr().map_err(io)?;
            Ok((Listener::Tcp(listener), Listen::Tcp(local)))
        }
        Listen::Unix(path) => {
            let (listener, id) = listen_unix(path)?;
            Ok((
                Listener::Unix {
                    listener,
                    path: path.clone(),
                    id,
                },
                Listen::Unix(path.clone()),
            ))
        }
    }
}

fn listen_unix(path: &Path) -> Result<(std::os::unix::net::UnixListener, (u64, u64)), Error> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let io = |source| Error::Unix {
        path: path.to_owned(),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(Error::NotASocket {
                path: path.to_owned(),
            });
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(Error::InUse {
                path: path.to_owned(),
            });
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(io)?;
    listener.set_nonblocking(true).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(io)?;
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    Ok((listener, (meta.dev(), meta.ino())))
}

/// Why a proxy could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// GitHub has no model budget to proxy.
    #[error(
        "the proxy serves model providers (anthropic, openai, or one the config describes \
         under `budget_providers`); GitHub's budget is taken call by call with `worklane \
         budget take`"
    )]
    Github,
    /// The machine's slot directory could not be opened.
    #[error("cannot open the slot directory whose budget files the proxy shares")]
    SlotDir {
        /// Why.
        #[source]
        source: worklane_slotfile::open::Error,
    },
    /// The slot directory's owner could not be read.
    #[error("cannot read the owner and group of the slot directory {}", path.display())]
    DirOwner {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustix::io::Errno,
    },
    /// TLS could not be set up for the upstream.
    #[error("cannot set up TLS for the upstream")]
    Tls {
        /// Why.
        #[source]
        source: rustls::Error,
    },
    /// The TCP address could not be bound.
    #[error("cannot listen on {addr}: choose a free port (or 0 for any)")]
    Tcp {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The Unix socket could not be made.
    #[error("cannot listen on unix:{}", path.display())]
    Unix {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Something that is not a socket is at the path.
    #[error(
        "{} exists and is not a socket: move it aside or choose another unix:PATH",
        path.display()
    )]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// Another process serves the socket.
    #[error(
        "another process already serves unix:{}: stop it or choose another path",
        path.display()
    )]
    InUse {
        /// The path.
        path: PathBuf,
    },
}
