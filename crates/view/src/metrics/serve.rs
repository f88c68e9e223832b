//! Where the exposition goes besides stdout: a file replaced atomically for node_exporter's
//! textfile collector, or a small HTTP server (one request per connection, `GET /metrics`
//! only, loopback unless told otherwise) that serves each connection on a thread of its own,
//! at most [`MAX_CONNECTIONS`] at once, each given [`HEAD_DEADLINE`] to send its request: an
//! idle or slow client never holds up a scrape.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Connections served at once; one more is answered 503 at once and closed.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a connection has to send its whole request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);

/// Why the exposition could not be written or served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The textfile's path names no file.
    #[error("{path} names no file: give the textfile a file name")]
    NoFileName {
        /// The path given.
        path: std::path::PathBuf,
    },
    /// A step of writing the textfile failed.
    #[error("cannot {step} for {path}")]
    Textfile {
        /// The textfile.
        path: std::path::PathBuf,
        /// The step.
        step: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The address cannot be listened on.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Writes `text` to `path` as node_exporter's textfile collector needs it: never seen half
/// written. A temp file in the same directory (created new, never through a link), written,
/// flushed to disk, mode 0644, then renamed over `path`; removed again if anything fails.
pub fn write_textfile(path: &Path, text: &str) -> Result<(), Error> {
    let failed = |step: &'static str, source: std::io::Error| Error::Textfile {
        path: path.to_owned(),
        step,
        source,
    };
    let name = path.file_name().ok_or_else(|| Error::NoFileName {
        path: path.to_owned(),
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => std::path::PathBuf::from("."),
    };
    // node_exporter reads only `*.prom`: the temp name does not end so.
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&temp)
            .map_err(|e| failed("create a temp file beside it", e))?;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| failed("set the temp file's mode", e))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| failed("write the temp file", e))?;
        std::fs::rename(&temp, path).map_err(|e| failed("rename the temp file over it", e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// An address to listen on as `--listen` takes it: HOST:PORT, or a PORT alone on the
/// loopback address.
pub fn address(addr: &str) -> String {
    if !addr.is_empty() && addr.bytes().all(|b| b.is_ascii_digit()) {
        format!("127.0.0.1:{addr}")
    } else {
        addr.to_owned()
    }
}

/// Listens on `addr` (as [`address`] reads it).
pub fn bind(addr: &str) -> Result<TcpListener, Error> {
    let addr = address(addr);
    TcpListener::bind(&addr).map_err(|source| Error::Listen { addr, source })
}

/// Serves `GET /metrics` on `listener` for ever, one request per connection, each answered
/// with a fresh exposition (an `Err` is answered 500 with its text), each connection on a
/// thread of its own.
pub fn serve(listener: &TcpListener, exposition: &(dyn Fn() -> Result<String, String> + Sync)) {
    let busy = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        // A connection that fails is that client's trouble; the others are served.
        for stream in listener.incoming().flatten() {
            if busy.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                let _ = too_busy(stream);
                continue;
            }
            busy.fetch_add(1, Ordering::SeqCst);
            let busy = &busy;
            let served = std::thread::Builder::new()
                .name("metrics-connection".into())
                .spawn_scoped(scope, move || {
                    let _ = answer(stream, exposition);
                    busy.fetch_sub(1, Ordering::SeqCst);
                });
            if served.is_err() {
                busy.fetch_sub(1, Ordering::SeqCst);
            }
        }
    });
}

/// Answers a connection past [`MAX_CONNECTIONS`]: 503, try again in a second.
fn too_busy(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    let body = "too many connections at once; try again\n";
    stream.write_all(
        format!(
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain; \
             charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )?;
    // Closing a socket with the request unread makes the kernel reset the connection, and a
    // client may then lose the answer it was sent: the write side is closed first, then what
    // has come of the request is read away, without waiting (this runs on the accept loop).
    stream.shutdown(std::net::Shutdown::Write)?;
    stream.set_nonblocking(true)?;
    let mut buf = [0u8; 4096];
    for _ in 0..16 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    Ok(())
}

/// Reads one request's head (at most 8 KiB, all of it within [`HEAD_DEADLINE`]) and answers
/// it.
fn answer(
    mut stream: TcpStream,
    exposition: &(dyn Fn() -> Result<String, String> + Sync),
) -> std::io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        // The whole head by the deadline, however slowly it trickles in.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let request = String::from_utf8_lossy(&head);
    let mut first = request.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, kind, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => match exposition() {
            Ok(text) => (
                "200 OK",
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                text,
            ),
            Err(message) => (
                "500 Internal Server Error",
                "text/plain; charset=utf-8",
                format!("{message}\n"),
            ),
        },
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "only /metrics is served here\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET /metrics is served here\n".to_owned(),
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        response.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&response)?;
    stream.flush()
}
