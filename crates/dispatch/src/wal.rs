//! Reading a SQLite write-ahead log before SQLite does, to learn whether it lost frames.
//!
//! SQLite replays a WAL's frames in order and stops at the first one whose salts or
//! checksum do not match ([the file format](https://www.sqlite.org/fileformat.html#the_write_ahead_log)):
//! every transaction from that frame on is silently dropped, and its frames are overwritten by
//! the next writes. A crash mid-write leaves only a torn *last* frame, which is normal; a bad
//! frame with frames of the same generation (the header's salts) after it means committed
//! transactions were lost. [`check`] tells the two apart, so that the dispatcher can keep a
//! copy of such a log before SQLite opens the database (`crate::store::Store::open_private`).

use std::io::Read;

/// The header's size, and a frame header's.
const WAL_HEADER: usize = 32;
const FRAME_HEADER: usize = 24;

/// What [`check`] found in a write-ahead log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Whole frames in the file.
    pub frames: u64,
    /// Frames SQLite replays: those before the first whose salts or checksum do not match.
    pub valid: u64,
    /// Frames of the header's generation (its salts) after the first invalid one: written
    /// once, never replayed. Not zero means committed transactions may be lost.
    pub lost: u64,
    /// The file's header is itself damaged (bad magic, version or checksum): SQLite ignores
    /// every frame.
    pub bad_header: bool,
}

impl Verdict {
    /// Whether the log lost frames it had written (a torn last frame is not a loss).
    #[must_use]
    pub fn damaged(&self) -> bool {
        self.lost > 0 || (self.bad_header && self.frames > 0)
    }

    /// The damage in words, for the dispatcher's log.
    #[must_use]
    pub fn describe(&self) -> String {
        if self.bad_header {
            format!(
                "the write-ahead log's header is damaged, so SQLite ignores all {} of its frames",
                self.frames
            )
        } else {
            format!(
                "frame {} of the write-ahead log's {} is damaged, so SQLite drops it and {} \
                 later frames of committed transactions",
                self.valid + 1,
                self.frames,
                self.lost
            )
        }
    }
}

/// SQLite's WAL checksum of `data` (a multiple of 8 bytes), continuing from `(s0, s1)`, its
/// 32-bit words read big-endian when `big` is set, else little-endian.
fn checksum(big: bool, data: &[u8], (mut s0, mut s1): (u32, u32)) -> (u32, u32) {
    let word = |b: &[u8]| {
        let b = [b[0], b[1], b[2], b[3]];
        if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    for pair in data.chunks_exact(8) {
        s0 = s0.wrapping_add(word(&pair[..4])).wrapping_add(s1);
        s1 = s1.wrapping_add(word(&pair[4..])).wrapping_add(s0);
    }
    (s0, s1)
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads the write-ahead log `wal` from its start and judges its frames. `None` when it holds
/// less than a header (an empty log: nothing to replay).
pub fn check(mut wal: impl Read) -> std::io::Result<Option<Verdict>> {
    let mut header = [0u8; WAL_HEADER];
    if !read_full(&mut wal, &mut header)? {
        return Ok(None);
    }
    let magic = be32(&header, 0);
    let big = magic == 0x377f_0683;
    let page = be32(&header, 8);
    let page_ok = (512..=65_536).contains(&page) && page.is_power_of_two();
    let header_ok = (magic == 0x377f_0682 || big)
        && be32(&header, 4) == 3_007_000
        && page_ok
        && checksum(big, &header[..24], (0, 0)) == (be32(&header, 24), be32(&header, 28));
    // A page size that cannot be trusted gives no frame boundaries: count in the smallest.
    let size = if page_ok { page as usize } else { 512 };
    let mut frame = vec![0u8; FRAME_HEADER + size];
    let mut verdict = Verdict {
        frames: 0,
        valid: 0,
        lost: 0,
        bad_header: !header_ok,
    };
    let salts = &header[16..24];
    let mut sum = (be32(&header, 24), be32(&header, 28));
    let mut broken = !header_ok;
    while read_full(&mut wal, &mut frame)? {
        verdict.frames += 1;
        if !header_ok {
            continue;
        }
        let same_generation = &frame[8..16] == salts;
        if broken {
            if same_generation {
                verdict.lost += 1;
            }
            continue;
        }
        let next = checksum(big, &frame[FRAME_HEADER..], checksum(big, &frame[..8], sum));
        if same_generation && next == (be32(&frame, 16), be32(&frame, 20)) {
            verdict.valid += 1;
            sum = next;
        } else {
            broken = true;
        }
    }
    Ok(Some(verdict))
}

/// Fills `buf` from `r`: `false` when the input ended first (a torn tail is not an error).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(all(test, feature = "server"))]
mod tests {
    use super::*;
    use rusqlite::Connection;

    /// A real WAL of SQLite's: a database in WAL mode that never checkpoints, with `commits`
    /// transactions of a row each; returns the log's bytes while the writer is still open.
    fn real_wal(commits: usize) -> Vec<u8> {
        let dir = tempfile::tempdir().expect("temp");
        let path = dir.path().join("db");
        let conn = Connection::open(&path).expect("open");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .expect("no checkpoints");
        conn.execute("CREATE TABLE t (x TEXT)", []).expect("table");
        for i in 0..commits {
            conn.execute("INSERT INTO t VALUES (?1)", [format!("row {i}")])
                .expect("insert");
        }
        std::fs::read(dir.path().join("db-wal")).expect("the WAL")
    }

    fn page_of(wal: &[u8]) -> usize {
        be32(wal, 8) as usize
    }

    /// [`check`] of `bytes` on a thread given 5 s: a reading loop that never
    /// ends fails the test instead of hanging it.
    fn checked(bytes: &[u8]) -> std::io::Result<Option<Verdict>> {
        checked_from(std::io::Cursor::new(bytes.to_vec()))
    }

    /// [`checked`] of any reader.
    fn checked_from(bytes: impl Read + Send + 'static) -> std::io::Result<Option<Verdict>> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(check(bytes));
        });
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("the check ends within 5 s")
    }

    /// Bytes read with an error first: `Interrupted` (retried) or another (returned).
    struct Failing {
        first: Option<std::io::ErrorKind>,
        rest: std::io::Cursor<Vec<u8>>,
    }

    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.first.take() {
                Some(kind) => Err(std::io::Error::from(kind)),
                None => self.rest.read(buf),
            }
        }
    }

    #[test]
    fn an_interrupted_read_is_made_again_and_any_other_error_is_returned() {
        let wal = real_wal(3);
        let whole = checked(&wal).expect("read");
        let interrupted = Failing {
            first: Some(std::io::ErrorKind::Interrupted),
            rest: std::io::Cursor::new(wal.clone()),
        };
        assert_eq!(checked_from(interrupted).expect("read"), whole);
        let failing = Failing {
            first: Some(std::io::ErrorKind::PermissionDenied),
            rest: std::io::Cursor::new(wal),
        };
        assert_eq!(
            checked_from(failing).expect_err("an error").kind(),
            std::io::ErrorKind::PermissionDenied
        );
    }

    #[test]
    fn a_page_size_in_range_but_no_power_of_two_is_a_bad_header() {
        let mut wal = real_wal(2);
        wal[8..12].copy_from_slice(&1000u32.to_be_bytes());
        // The header's own checksum made right again, so the page size alone is wrong.
        let big = be32(&wal, 0) == 0x377f_0683;
        let (s0, s1) = checksum(big, &wal[..24], (0, 0));
        wal[24..28].copy_from_slice(&s0.to_be_bytes());
        wal[28..32].copy_from_slice(&s1.to_be_bytes());
        let v = checked(&wal).expect("read").expect("a log");
        assert!(v.bad_header, "{v:?}");
    }

    #[test]
    fn a_whole_log_of_sqlite_s_is_every_frame_valid() {
        let wal = real_wal(5);
        let v = checked(wal.as_slice()).expect("read").expect("a log");
        assert!(v.frames >= 6, "a frame per commit at least: {v:?}");
        assert_eq!((v.valid, v.lost, v.bad_header), (v.frames, 0, false));
        assert!(!v.damaged());
        assert_eq!(checked(&wal[..10]).expect("read"), None, "no header");
    }

    #[test]
    fn a_torn_last_frame_is_no_loss() {
        let wal = real_wal(4);
        let page = page_of(&wal);
        let whole = checked(wal.as_slice()).expect("read").expect("a log");
        // Cut inside the last frame: it is not even counted.
        let cut = &wal[..wal.len() - page / 2];
        let v = checked(cut).expect("read").expect("a log");
        assert_eq!(
            (v.frames, v.valid, v.lost),
            (whole.frames - 1, whole.frames - 1, 0)
        );
        // The last frame whole but its page half written: invalid, and nothing after it.
        let mut torn = wal.clone();
        let len = torn.len();
        torn[len - 10] ^= 0xff;
        let v = checked(torn.as_slice()).expect("read").expect("a log");
        assert_eq!((v.valid, v.lost), (whole.frames - 1, 0), "{v:?}");
        assert!(!v.damaged(), "a crash's torn tail");
    }

    #[test]
    fn a_damaged_frame_before_others_is_a_loss() {
        let mut wal = real_wal(6);
        let page = page_of(&wal);
        let frames = checked(wal.as_slice())
            .expect("read")
            .expect("a log")
            .frames;
        // A byte of frame 2's page.
        wal[WAL_HEADER + 2 * (FRAME_HEADER + page) + FRAME_HEADER + 100] ^= 0x01;
        let v = checked(wal.as_slice()).expect("read").expect("a log");
        assert_eq!((v.valid, v.lost), (2, frames - 3), "{v:?}");
        assert!(v.damaged());
        assert!(v.describe().contains("frame 3"), "{}", v.describe());
    }

    #[test]
    fn a_damaged_header_loses_every_frame() {
        let mut wal = real_wal(2);
        wal[20] ^= 0x01;
        let v = checked(wal.as_slice()).expect("read").expect("a log");
        assert!(v.bad_header && v.damaged(), "{v:?}");
        assert!(v.describe().contains("header"));
        let mut empty = real_wal(1);
        empty.truncate(WAL_HEADER);
        empty[20] ^= 0x01;
        let v = checked(empty.as_slice()).expect("read").expect("a log");
        assert!(
            !v.damaged(),
            "a bad header with no frame loses nothing: {v:?}"
        );
    }

    #[test]
    fn the_checksum_is_sqlite_s_in_both_byte_orders() {
        // Two words: s0 = a + 0, s1 = b + s0.
        let data = [0, 0, 0, 1, 0, 0, 0, 2];
        assert_eq!(checksum(true, &data, (0, 0)), (1, 3));
        assert_eq!(
            checksum(false, &data, (0, 0)),
            (1 << 24, (2 << 24) + (1 << 24))
        );
        assert_eq!(
            checksum(true, &data, (u32::MAX, 0)),
            (0, 2),
            "wrapping: s0 = MAX + 1 + 0, s1 = 0 + 2 + 0"
        );
    }
}
