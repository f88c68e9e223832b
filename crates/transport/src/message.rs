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

    /// How long a test waits for anything: a receive that gets nothing, a send that does not
    /// end, fail the test within it rather than hang it.
    const BOUND: std::time::Duration = std::time::Duration::from_secs(3);

    /// A connected pair whose receives give up after [`BOUND`].
    fn pair() -> (OwnedFd, OwnedFd) {
        let (a, b) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair");
        for end in [&a, &b] {
            rustix::net::sockopt::set_socket_timeout(
                end,
                rustix::net::sockopt::Timeout::Recv,
                Some(BOUND),
            )
            .expect("SO_RCVTIMEO");
        }
        (a, b)
    }

    /// `f`'s result, run on a thread of its own: the test fails if it has not returned
    /// within [`BOUND`].
    fn within_bound<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(BOUND)
            .expect("returned within the bound (or panicked)")
    }

    /// [`super::send`] within [`BOUND`] (see [`within_bound`]), given duplicates of the socket
    /// and of the descriptors (the same socket, the same open files), closed before it returns.
    fn send(socket: &OwnedFd, line: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), Error> {
        let socket = rustix::io::dup(socket).expect("dup");
        let fds: Vec<OwnedFd> = fds
            .iter()
            .map(|fd| rustix::io::dup(fd).expect("dup"))
            .collect();
        let line = line.to_vec();
        within_bound(move || {
            let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
            super::send(&socket, &line, &borrowed)
        })
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

    #[test]
    fn a_send_returns_once_its_line_is_sent() {
        let (a, b) = pair();
        send(&a, br#"{"op":"y"}"#, &[]).expect("send");
        assert_eq!(recv(&b).expect("the line").0, br#"{"op":"y"}"#);
        drop(a);
        assert!(
            matches!(recv(&b), Err(Error::Closed { got: 0 })),
            "one line, nothing after it"
        );
    }

    /// Whether `socket` would take more now.
    fn writable(socket: &OwnedFd) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(socket, PollFlags::OUT)];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&now)).expect("poll");
        fds[0].revents().contains(PollFlags::OUT)
    }

    /// Signals the handler of SIGUSR1 below has taken.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    static SIGNALLED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// Waits (within [`BOUND`]) until `done` holds.
    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + BOUND;
        while !done() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// A blocking `sendmsg` a signal cuts short after some bytes returns their count: `send`
    /// goes on with the rest, from where it was, however often it is cut. Here twice, so
    /// that the line goes in three parts: a handler of SIGUSR1 that counts is installed for
    /// it (no other test of this binary uses the signal), and the writer is signalled while
    /// its sendmsg waits for room, with part of the line sent in that very call.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    #[allow(
        unsafe_code,
        reason = "a signal handler of the test's own, and pthread_kill"
    )]
    fn a_send_cut_short_by_a_signal_goes_on_with_the_rest() {
        use std::os::unix::thread::JoinHandleExt;
        use std::sync::atomic::Ordering;
        extern "C" fn count(_: libc::c_int) {
            SIGNALLED.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: `action` is a zeroed sigaction (a valid one: no flags, no mask) given a
        // handler that only adds to an atomic, which is async-signal-safe; the old action is
        // not asked for.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = count as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            assert_eq!(
                libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
                0
            );
        }
        let (a, b) = pair();
        rustix::net::sockopt::set_socket_send_buffer_size(&a, 4096).expect("SO_SNDBUF");
        let probe = rustix::io::dup(&a).expect("dup");
        let line: Vec<u8> = (0..60_000u32)
            .map(|i| b'a' + u8::try_from(i % 26).expect("a letter"))
            .collect();
        let expected = line.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            let sent = super::send(&a, &line, &[]);
            drop(a);
            let _ = tx.send(sent);
        });
        let cut = |n: usize| {
            // SAFETY: the writer's thread is live (its send cannot end before the line is
            // read), and SIGUSR1 has a handler that only counts.
            let signalled = unsafe {
                libc::pthread_kill(writer.as_pthread_t() as libc::pthread_t, libc::SIGUSR1)
            };
            assert_eq!(signalled, 0, "pthread_kill");
            // The handler runs once the sendmsg it cut short has returned.
            wait_until("the handler ran", || SIGNALLED.load(Ordering::SeqCst) >= n);
        };
        let queued = || rustix::io::ioctl_fionread(&b).expect("FIONREAD");
        let before = SIGNALLED.load(Ordering::SeqCst);
        // Nobody reads yet: once the socket takes no more, the first sendmsg waits for room.
        wait_until("the line filled the socket", || !writable(&probe));
        cut(before + 1);
        // The next sendmsg has no room either: what is queued is all the first one sent.
        let first = usize::try_from(queued()).expect("a size");
        assert!(
            first > 0 && first < expected.len(),
            "{first} bytes in the first part"
        );
        let mut got = vec![0u8; first];
        let mut at = 0;
        while at < first {
            at += rustix::io::read(&b, &mut got[at..]).expect("read");
        }
        // Room made: the second sendmsg sends some of the rest, and waits again.
        wait_until("the second part began", || queued() > 0);
        cut(before + 2);
        drop(probe);
        let (rest, _) = recv(&b).expect("the rest of the line, sent after the signals");
        got.extend_from_slice(&rest);
        assert!(
            got == expected,
            "every byte once, in order ({} bytes)",
            got.len()
        );
        rx.recv_timeout(BOUND)
            .expect("send returned")
            .expect("send succeeded");
        writer.join().expect("writer");
    }

    #[test]
    fn a_reader_says_how_much_of_a_line_has_come() {
        let (a, b) = pair();
        rustix::io::ioctl_fionbio(&b, true).expect("nonblocking");
        let mut reader = Reader::default();
        assert!(reader.read(&b).expect("nothing yet").is_none());
        assert_eq!(reader.received(), 0);
        rustix::io::write(&a, b"{\"op\"").expect("write");
        assert!(reader.read(&b).expect("a part").is_none());
        assert_eq!(reader.received(), 5);
        rustix::io::write(&a, b":1}\n").expect("write");
        let (line, fds) = reader.read(&b).expect("read").expect("the whole line");
        assert_eq!((line.as_slice(), fds.len()), (&br#"{"op":1}"#[..], 0));
        assert_eq!(reader.received(), 0, "a new line begins");
    }

    #[test]
    fn a_sender_sends_up_to_max_fds_descriptors_with_its_line() {
        let file = tempfile::tempfile().expect("file");
        for n in [0, 1, MAX_FDS] {
            let (a, b) = pair();
            let fds: Vec<OwnedFd> = (0..n)
                .map(|_| rustix::io::dup(&file).expect("dup"))
                .collect();
            let done = within_bound(move || {
                let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
                Sender::new(b"{}")
                    .expect("sender")
                    .send(&a, &borrowed)
                    .map(|done| (done, a))
            });
            let (done, _a) = done.expect("send");
            assert!(done, "{n} descriptors: all sent at once");
            let (line, got) = recv(&b).expect("recv");
            assert_eq!((line.as_slice(), got.len()), (&b"{}"[..], n));
        }
        let (a, _b) = pair();
        let mut sender = Sender::new(b"{}").expect("sender");
        assert!(matches!(
            sender.send(&a, &[file.as_fd(); MAX_FDS + 1]),
            Err(Error::TooManyFds)
        ));
        assert!(matches!(
            Sender::new(&vec![b'x'; MAX_MESSAGE]),
            Err(Error::TooLong)
        ));
    }

    /// A line far longer than a nonblocking socket takes at once, sent as the peer reads: the
    /// descriptor goes once, with the first bytes, and every byte arrives once, in order.
    #[test]
    fn a_sender_sends_a_long_line_in_parts_as_the_peer_reads_its_descriptor_once() {
        let (a, b) = pair();
        rustix::net::sockopt::set_socket_send_buffer_size(&a, 4096).expect("SO_SNDBUF");
        for end in [&a, &b] {
            rustix::io::ioctl_fionbio(end, true).expect("nonblocking");
        }
        let file = tempfile::tempfile().expect("file");
        let line: Vec<u8> = (0..60_000u32)
            .map(|i| b'a' + u8::try_from(i % 26).expect("a letter"))
            .collect();
        let expected = line.clone();
        let (parts, got) = within_bound(move || {
            let mut sender = Sender::new(&line).expect("sender");
            let mut reader = Reader::default();
            let mut parts = 0;
            let mut sent = false;
            let mut got = None;
            // Each round sends what the socket takes and reads what came; a round that moves
            // nothing would be a sender or reader that lost its place.
            for _ in 0..10_000 {
                if !sent {
                    sent = sender.send(&a, &[file.as_fd()]).expect("send");
                    parts += 1;
                }
                if got.is_none() {
                    got = reader.read(&b).expect("read");
                }
                if sent && got.is_some() {
                    break;
                }
            }
            (parts, got)
        });
        let (line, fds) = got.expect("the whole line within 10 000 rounds");
        assert!(
            parts > 1,
            "sent in {parts} parts: the socket took it at once"
        );
        assert!(line == expected, "every byte once, in order");
        assert_eq!(fds.len(), 1, "the descriptor once");
    }
}
