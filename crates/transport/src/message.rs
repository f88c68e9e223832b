//! Messages on a Unix stream socket, one request and one reply per connection, each
//! one line of JSON (UTF-8, at most [`MAX_MESSAGE`] bytes, ended by `\n`), sent whole by one
//! `sendmsg`; descriptors travel as `SCM_RIGHTS` on the `sendmsg` of the line (at most
//! [`MAX_FDS`]). Every descriptor received is close-on-exec, and closes itself when dropped:
//! a refusal that drops what it received closes every descriptor.

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;

/// A peer gone is an error of the send, never a SIGPIPE (on Apple systems the socket option
/// `SO_NOSIGPIPE`, set by [`send`], does this).
#[cfg(not(target_vendor = "apple"))]
const NO_SIGPIPE: SendFlags = SendFlags::NOSIGNAL;
#[cfg(target_vendor = "apple")]
const NO_SIGPIPE: SendFlags = SendFlags::empty();

/// The longest message, with its newline.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// The most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// Why a message could not be sent or received.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The socket failed.
    #[error("the dispatcher socket failed while {op}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// The peer closed the connection before a whole line.
    #[error("the peer closed the connection before a whole message ({got} bytes)")]
    Closed {
        /// Bytes received.
        got: usize,
    },
    /// More than [`MAX_MESSAGE`] bytes without a newline.
    #[error("a message longer than {MAX_MESSAGE} bytes")]
    TooLong,
    /// More descriptors than [`MAX_FDS`], or the kernel cut them short (the receiver had no
    /// descriptor left to take them in).
    #[error(
        "a message with more than {MAX_FDS} descriptors, or more than the receiver could take \
         in (it has no descriptor left: raise its limit of open files); all were closed"
    )]
    TooManyFds,
}

fn io(op: &'static str) -> impl FnOnce(Errno) -> Error {
    move |e| Error::Io {
        op,
        source: e.into(),
    }
}

/// Sends `line` (a newline is added) with `fds` attached.
pub fn send(socket: impl AsFd, line: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), Error> {
    let mut message = Vec::with_capacity(line.len() + 1);
    message.extend_from_slice(line);
    message.push(b'\n');
    if message.len() > MAX_MESSAGE {
        return Err(Error::TooLong);
    }
    if fds.len() > MAX_FDS {
        return Err(Error::TooManyFds);
    }
    // Where a send cannot say "no SIGPIPE", the socket says it (a peer gone is an error).
    #[cfg(target_vendor = "apple")]
    rustix::net::sockopt::set_socket_nosigpipe(&socket, true)
        .map_err(io("setting SO_NOSIGPIPE"))?;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        control.push(SendAncillaryMessage::ScmRights(fds));
    }
    let mut sent = loop {
        match sendmsg(&socket, &[IoSlice::new(&message)], &mut control, NO_SIGPIPE) {
            Err(Errno::INTR) => continue,
            other => break other.map_err(io("sending"))?,
        }
    };
    // The descriptors went with the first bytes; the rest of a long line follows plainly.
    while sent < message.len() {
        let mut none = SendAncillaryBuffer::new(&mut []);
        match sendmsg(
            &socket,
            &[IoSlice::new(&message[sent..])],
            &mut none,
            NO_SIGPIPE,
        ) {
            Ok(n) => sent += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(io("sending")(e)),
        }
    }
    Ok(())
}

/// Receives one line (without its newline) and the descriptors that came with it, each
/// close-on-exec. On any error every descriptor received is closed. Blocks (within the
/// socket's receive timeout, if it has one: a timeout is an `Io` error).
pub fn recv(socket: impl AsFd) -> Result<(Vec<u8>, Vec<OwnedFd>), Error> {
    let mut reader = Reader::default();
    match reader.read(&socket)? {
        Some(got) => Ok(got),
        None => Err(Error::Io {
            op: "receiving",
            source: std::io::Error::from(std::io::ErrorKind::TimedOut),
        }),
    }
}

/// A whole message: its line (without the newline) and the descriptors that came with it.
pub type Message = (Vec<u8>, Vec<OwnedFd>);

/// A message being received bit by bit on a nonblocking socket: [`Reader::read`] takes what
/// has arrived and says when the line is whole.
#[derive(Debug, Default)]
pub struct Reader {
    line: Vec<u8>,
    fds: Vec<OwnedFd>,
}

impl Reader {
    /// Reads what the socket has: the whole line (without its newline) and the descriptors
    /// that came with it once the newline arrived, `None` while the socket has nothing more
    /// for now (`EAGAIN`). On any error every descriptor received is closed.
    pub fn read(&mut self, socket: impl AsFd) -> Result<Option<Message>, Error> {
        let mut buf = [0u8; 8192];
        loop {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let got = loop {
                match recvmsg(
                    &socket,
                    &mut [IoSliceMut::new(&mut buf)],
                    &mut control,
                    cloexec_flags(),
                ) {
                    Err(Errno::INTR) => continue,
                    Err(Errno::AGAIN) => return Ok(None),
                    other => break other.map_err(io("receiving"))?,
                }
            };
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(received) = message {
                    for fd in received {
                        set_cloexec(&fd);
                        self.fds.push(fd);
                    }
                }
            }
            if got.flags.contains(ReturnFlags::CTRUNC) || self.fds.len() > MAX_FDS {
                self.fds.clear();
                return Err(Error::TooManyFds);
            }
            if got.bytes == 0 {
                self.fds.clear();
                return Err(Error::Closed {
                    got: self.line.len(),
                });
            }
            let chunk = &buf[..got.bytes];
            if let Some(end) = chunk.iter().position(|&b| b == b'\n') {
                self.line.extend_from_slice(&chunk[..end]);
                return Ok(Some((
                    std::mem::take(&mut self.line),
                    std::mem::take(&mut self.fds),
                )));
            }
            self.line.extend_from_slice(chunk);
            if self.line.len() >= MAX_MESSAGE {
                self.fds.clear();
                return Err(Error::TooLong);
            }
        }
    }

    /// How many bytes of the line have arrived so far.
    #[must_use]
    pub fn received(&self) -> usize {
        self.line.len()
    }
}

/// A message being sent bit by bit on a nonblocking socket: the descriptors go with its first
/// bytes, the rest follows as the peer reads.
#[derive(Debug)]
pub struct Sender {
    message: Vec<u8>,
    sent: usize,
}

impl Sender {
    /// A sender of `line` (a newline is added).
    pub fn new(line: &[u8]) -> Result<Sender, Error> {
        let mut message = Vec::with_capacity(line.len() + 1);
        message.extend_from_slice(line);
        message.push(b'\n');
        if message.len() > MAX_MESSAGE {
            return Err(Error::TooLong);
        }
        Ok(Sender { message, sent: 0 })
    }

    /// Sends what the socket takes now, `fds` with the first bytes: `true` once all is sent,
    /// `false` when the socket is full for now (`EAGAIN`; call again when it is writable).
    pub fn send(&mut self, socket: impl AsFd, fds: &[BorrowedFd<'_>]) -> Result<bool, Error> {
        if fds.len() > MAX_FDS {
            return Err(Error::TooManyFds);
        }
        #[cfg(target_vendor = "apple")]
        rustix::net::sockopt::set_socket_nosigpipe(&socket, true)
            .map_err(io("setting SO_NOSIGPIPE"))?;
        while self.sent < self.message.len() {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if self.sent == 0 && !fds.is_empty() {
                control.push(SendAncillaryMessage::ScmRights(fds));
            }
            match sendmsg(
                &socket,
                &[IoSlice::new(&self.message[self.sent..])],
                &mut control,
                NO_SIGPIPE,
            ) {
                Ok(n) => self.sent += n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return Ok(false),
                Err(e) => return Err(io("sending")(e)),
            }
        }
        Ok(true)
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn cloexec_flags() -> RecvFlags {
    RecvFlags::CMSG_CLOEXEC
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn cloexec_flags() -> RecvFlags {
    RecvFlags::empty()
}

/// Makes sure a received descriptor is close-on-exec (Linux sets it at receipt with
/// `MSG_CMSG_CLOEXEC`; elsewhere it is set here, a moment later).
fn set_cloexec(fd: &OwnedFd) {
    if let Ok(flags) = rustix::io::fcntl_getfd(fd)
        && !flags.contains(rustix::io::FdFlags::CLOEXEC)
    {
        let _ = rustix::io::fcntl_setfd(fd, flags | rustix::io::FdFlags::CLOEXEC);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};

    fn pair() -> (OwnedFd, OwnedFd) {
        socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair")
    }

    #[test]
    fn a_line_and_its_descriptors_arrive_together_close_on_exec() {
        let (a, b) = pair();
        let file = tempfile::tempfile().expect("file");
        let dup = rustix::io::dup(&file).expect("dup: not close-on-exec");
        send(&a, br#"{"op":"x"}"#, &[dup.as_fd()]).expect("send");
        let (line, fds) = recv(&b).expect("recv");
        assert_eq!(line, br#"{"op":"x"}"#);
        assert_eq!(fds.len(), 1);
        let flags = rustix::io::fcntl_getfd(&fds[0]).expect("flags");
        assert!(
            flags.contains(rustix::io::FdFlags::CLOEXEC),
            "received close-on-exec"
        );
        let same = |x: &OwnedFd, y: &std::fs::File| {
            let (sx, sy) = (
                rustix::fs::fstat(x).expect("fstat"),
                rustix::fs::fstat(y).expect("fstat"),
            );
            (sx.st_dev, sx.st_ino) == (sy.st_dev, sy.st_ino)
        };
        assert!(same(&fds[0], &file), "the same open file");
    }

    #[test]
    fn long_lines_and_bad_endings() {
        let (a, b) = pair();
        let long = vec![b'x'; 20_000];
        send(&a, &long, &[]).expect("send");
        assert_eq!(
            recv(&b).expect("recv").0,
            long,
            "a line longer than one read"
        );
        assert!(matches!(
            send(&a, &vec![b'x'; MAX_MESSAGE], &[]),
            Err(Error::TooLong)
        ));
        drop(a);
        assert!(
            matches!(recv(&b), Err(Error::Closed { got: 0 })),
            "closed before a line"
        );
        let (a, b) = pair();
        let file = tempfile::tempfile().expect("file");
        let many = [file.as_fd(); MAX_FDS + 1];
        assert!(matches!(send(&a, b"{}", &many), Err(Error::TooManyFds)));
        drop(b);
    }

    /// Sends `bytes` as they are (no newline added, no limit) with `fds`, as a peer that
    /// does not follow the framing would.
    fn raw(socket: &OwnedFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(fds)), "room");
        let sent = sendmsg(
            socket,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        )
        .expect("sendmsg");
        assert_eq!(sent, bytes.len());
    }

    #[test]
    fn the_limits_are_exact() {
        let (a, b) = pair();
        // A line whose message (with its newline) is exactly the limit goes; a byte more does not.
        let longest = vec![b'x'; MAX_MESSAGE - 1];
        let reader = std::thread::spawn(move || recv(&b).map(|(line, _)| line.len()));
        send(&a, &longest, &[]).expect("the longest message");
        assert_eq!(
            reader.join().expect("reader").expect("recv"),
            MAX_MESSAGE - 1
        );
        assert!(matches!(
            send(&a, &vec![b'x'; MAX_MESSAGE], &[]),
            Err(Error::TooLong)
        ));
        // Exactly MAX_FDS descriptors go and arrive.
        let (a, b) = pair();
        let file = tempfile::tempfile().expect("file");
        send(&a, b"{}", &[file.as_fd(); MAX_FDS]).expect("MAX_FDS descriptors");
        assert_eq!(recv(&b).expect("recv").1.len(), MAX_FDS);
        // A receiver refuses a line that runs to the limit without a newline.
        let (a, b) = pair();
        let writer = std::thread::spawn(move || {
            let _ = rustix::io::write(&a, &vec![b'x'; MAX_MESSAGE]);
            a
        });
        assert!(
            matches!(recv(&b), Err(Error::TooLong)),
            "no newline within the limit"
        );
        drop(writer.join().expect("writer"));
    }

    #[test]
    fn more_descriptors_than_allowed_are_refused_in_one_message_or_across_several() {
        let file = tempfile::tempfile().expect("file");
        let (a, b) = pair();
        raw(&a, b"{}\n", &[file.as_fd(); MAX_FDS + 1]);
        assert!(
            matches!(recv(&b), Err(Error::TooManyFds)),
            "cut short by the kernel"
        );
        let (a, b) = pair();
        raw(&a, b"{", &[file.as_fd(); 3]);
        raw(&a, b"}\n", &[file.as_fd(); 3]);
        assert!(
            matches!(recv(&b), Err(Error::TooManyFds)),
            "six across two reads"
        );
        let (a, b) = pair();
        raw(&a, b"{", &[file.as_fd(); 2]);
        raw(&a, b"}\n", &[file.as_fd(); 2]);
        let (line, fds) = recv(&b).expect("four across two reads are allowed");
        assert_eq!((line.as_slice(), fds.len()), (&b"{}"[..], 4));
    }

    #[test]
    fn a_message_larger_than_the_socket_buffer_is_sent_whole() {
        let (a, b) = pair();
        rustix::net::sockopt::set_socket_send_buffer_size(&a, 4096).expect("SO_SNDBUF");
        let file = tempfile::tempfile().expect("file");
        let line = vec![b'y'; 60_000];
        let expected = line.clone();
        let reader = std::thread::spawn(move || recv(&b));
        send(&a, &line, &[file.as_fd()]).expect("send in parts");
        let (got, fds) = reader.join().expect("reader").expect("recv");
        assert!(
            got == expected,
            "all {} bytes arrive in order",
            expected.len()
        );
        assert_eq!(fds.len(), 1, "with the descriptor");
    }

    #[test]
    fn set_cloexec_sets_the_flag_and_keeps_the_others() {
        let file = tempfile::tempfile().expect("file");
        let fd = rustix::io::dup(&file).expect("dup: not close-on-exec");
        assert!(
            !rustix::io::fcntl_getfd(&fd)
                .expect("flags")
                .contains(rustix::io::FdFlags::CLOEXEC)
        );
        set_cloexec(&fd);
        assert!(
            rustix::io::fcntl_getfd(&fd)
                .expect("flags")
                .contains(rustix::io::FdFlags::CLOEXEC)
        );
        set_cloexec(&fd);
        assert!(
            rustix::io::fcntl_getfd(&fd)
                .expect("flags")
                .contains(rustix::io::FdFlags::CLOEXEC),
            "idempotent"
        );
    }
}
