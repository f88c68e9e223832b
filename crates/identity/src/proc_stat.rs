//! Parser of Linux `/proc/<pid>/stat`, see [proc_pid_stat(5)].
//!
//! The line is `pid (comm) state ppid ...`. `comm` is whatever the process named itself: it can
//! hold spaces, parentheses, newlines and bytes that are not UTF-8. Every field after it is a
//! number or the one-letter state, so the comm ends at the *last* `)` of the file.
//!
//! [proc_pid_stat(5)]: https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use crate::parse::Malformed;
use crate::process::{self, Snapshot};
use std::path::Path;

/// The fields of `/proc/<pid>/stat` worklane reads, all from one read: identity (the start),
/// the process tree (the parent), enforcement (the group and session) and the jobserver (the
/// threads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 1: the process id.
    pub pid: u32,
    /// Field 3: the state letter (`R`, `S`, `D`, `T`, `Z`, `X`, ...).
    pub state: u8,
    /// Field 4: the parent's process id (0 for a process whose parent is in another pid
    /// namespace).
    pub ppid: u32,
    /// Field 5: the process group.
    pub pgid: u32,
    /// Field 6: the session.
    pub sid: u32,
    /// Field 20: the number of threads.
    pub threads: u32,
    /// Field 22: the start time, in clock ticks since boot.
    pub start: u64,
}

impl Stat {
    /// Whether the state proves the process has exited: `Z` (zombie) or `X` (dead).
    #[must_use]
    pub fn exited(&self) -> bool {
        matches!(self.state, b'Z' | b'X')
    }
}

/// Parses the whole contents of a `/proc/<pid>/stat` file. The command name (field 2) may
/// hold spaces, parentheses and any byte: the fields after it are counted from its last `)`.
pub fn parse(bytes: &[u8]) -> Result<Stat, Malformed> {
    let open = bytes
        .iter()
        .position(|&b| b == b'(')
        .ok_or(Malformed("no '(' opens the command name"))?;
    let close = bytes
        .iter()
        .rposition(|&b| b == b')')
        .ok_or(Malformed("no ')' closes the command name"))?;
    if close < open {
        return Err(Malformed("the last ')' comes before the first '('"));
    }

    let pid = bytes[..open]
        .strip_suffix(b" ")
        .ok_or(Malformed("no space between the pid and the command name"))?;
    let pid = parse_decimal(pid)
        .and_then(|pid| u32::try_from(pid).ok())
        .filter(|&pid| pid != 0)
        .ok_or(Malformed("field 1 (pid) is not a process id"))?;

    let rest = bytes[close + 1..]
        .strip_prefix(b" ")
        .ok_or(Malformed("no space after the command name"))?;
    // Field 3 is the first after the command name: field n is at n - 3.
    let fields: Vec<&[u8]> = rest
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty())
        .take(20)
        .collect();
    let state = match fields.first() {
        Some(&[state]) if state.is_ascii_alphabetic() => *state,
        _ => return Err(Malformed("field 3 (state) is not one letter")),
    };
    // Each field named by what a line that lacks it, or holds no number there, is refused for.
    let number = |n: usize, ends: &'static str, nan: &'static str| {
        let field = fields.get(n - 3).copied().ok_or(Malformed(ends))?;
        parse_decimal(field).ok_or(Malformed(nan))
    };
    let small = |n: usize, ends: &'static str, nan: &'static str| {
        number(n, ends, nan).and_then(|v| u32::try_from(v).map_err(|_| Malformed(nan)))
    };
    // The start first: the one field every reader needs (the process's identity).
    let start = number(
        22,
        "the line ends before field 22 (start time)",
        "field 22 (start time) is not a number",
    )?;
    Ok(Stat {
        pid,
        state,
        ppid: small(
            4,
            "the line ends before field 4 (parent pid)",
            "field 4 (parent pid) is not a number",
        )?,
        pgid: small(
            5,
            "the line ends before field 5 (process group)",
            "field 5 (process group) is not a number",
        )?,
        sid: small(
            6,
            "the line ends before field 6 (session)",
            "field 6 (session) is not a number",
        )?,
        threads: small(
            20,
            "the line ends before field 20 (threads)",
            "field 20 (threads) is not a number",
        )?,
        start,
    })
}

/// What one read of `/proc/<pid>/stat` (its contents `bytes`, read from `path`) shows of
/// `pid`: its start and whether it has exited. A file that names another process than the one
/// asked for is malformed, never taken for it.
pub(crate) fn snapshot(pid: u32, bytes: &[u8], path: &Path) -> Result<Snapshot, process::Error> {
    let stat = parse(bytes).map_err(|source| process::Error::Malformed {
        pid,
        from: path.to_owned(),
        source,
    })?;
    if stat.pid != pid {
        return Err(process::Error::OtherProcess {
            pid,
            path: path.to_owned(),
            named: stat.pid,
        });
    }
    Ok(Snapshot {
        start: Some(stat.start),
        exited: stat.exited(),
    })
}

/// An unsigned decimal of ASCII digits only: no sign, no spaces, no empty string.
fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &digit| {
        if !digit.is_ascii_digit() {
            return None;
        }
        value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A stat line as the kernel writes it, with `comm`, `state` and `start` chosen by the test.
    fn line(pid: u32, comm: &[u8], state: u8, start: u64) -> Vec<u8> {
        let mut out = format!("{pid} (").into_bytes();
        out.extend_from_slice(comm);
        out.extend_from_slice(b") ");
        out.push(state);
        // Fields 4 to 21, then 22 (start), then the rest of a real line.
        out.extend_from_slice(
            format!(
                " 1 {pid} {pid} 34816 {pid} 4194560 110 0 0 0 0 0 0 0 20 0 1 0 {start} \
                 8478720 256 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
            )
            .as_bytes(),
        );
        out
    }

    #[test]
    fn reads_pid_state_and_start_of_a_plain_line() {
        let stat = parse(&line(4242, b"sleep", b'S', 123_456)).expect("a plain line parses");
        assert_eq!(
            stat,
            Stat {
                pid: 4242,
                state: b'S',
                ppid: 1,
                pgid: 4242,
                sid: 4242,
                threads: 1,
                start: 123_456
            },
            "fields of a plain line"
        );
        assert!(!stat.exited(), "state S is not exited");
    }

    #[test]
    fn the_tree_s_enforcement_s_and_jobserver_s_fields_are_each_their_own() {
        // Distinct values in fields 4 (ppid), 5 (pgrp), 6 (session), 20 (threads), 22 (start).
        let line = b"42 (a) b) S 7 40 39 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 5 0 98765 1000 10";
        let stat = parse(line).expect("parses");
        assert_eq!(
            (
                stat.state,
                stat.ppid,
                stat.pgid,
                stat.sid,
                stat.threads,
                stat.start
            ),
            (b'S', 7, 40, 39, 5, 98_765)
        );
        assert_eq!(
            parse(b"42 (a) S 1 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 x 0 9"),
            Err(Malformed("field 20 (threads) is not a number"))
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_s_own_line_names_it_its_parent_and_its_threads() {
        let stat = parse(&std::fs::read("/proc/self/stat").expect("read")).expect("parses");
        assert_eq!(stat.pid, std::process::id());
        let parent =
            rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get().unsigned_abs());
        assert_eq!(stat.ppid, parent, "its parent");
        assert!(stat.threads >= 1, "at least this thread: {stat:?}");
        // The session as /proc/self/status names it (its last column is
        // this namespace's view). Not getsid: where the session leader is
        // outside this pid namespace (a container's CI) the kernel says 0,
        // and rustix's getsid panics on a zero pid.
        let status = std::fs::read_to_string("/proc/self/status").expect("read status");
        let sid = status
            .lines()
            .find_map(|l| l.strip_prefix("NSsid:"))
            .and_then(|v| v.split_whitespace().last())
            .map(|v| v.parse::<u32>().expect("NSsid is a number"));
        if let Some(sid) = sid {
            assert_eq!(stat.sid, sid, "its session");
        }
    }

    #[test]
    fn uses_the_last_parenthesis_for_the_end_of_the_command_name() {
        let comm = b") 1 2 (x) Z 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 (";
        let stat = parse(&line(7, comm, b'R', 99)).expect("a tricky comm parses");
        assert_eq!(
            stat.start, 99,
            "start must come after the last ')' not the first"
        );
        assert_eq!(stat.state, b'R', "state must come after the last ')'");
    }

    #[test]
    fn accepts_newlines_spaces_and_non_utf8_in_the_command_name() {
        let stat = parse(&line(1, b"a b\n)c\xff\xfe(", b'D', 5)).expect("odd bytes in comm parse");
        assert_eq!(
            stat,
            Stat {
                pid: 1,
                state: b'D',
                ppid: 1,
                pgid: 1,
                sid: 1,
                threads: 1,
                start: 5
            },
            "fields around odd bytes"
        );
    }

    #[test]
    fn zombie_and_dead_states_are_exited() {
        let zombie = parse(&line(3, b"z", b'Z', 1)).expect("zombie line parses");
        let dead = parse(&line(3, b"x", b'X', 1)).expect("dead line parses");
        assert!(zombie.exited(), "state Z proves exit");
        assert!(dead.exited(), "state X proves exit");
    }

    #[test]
    fn rejects_lines_of_the_wrong_shape() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "empty"),
            (b"12 sleep S 1 2 3", "no parentheses"),
            (b"12 (sleep S 1", "no closing parenthesis"),
            (b"12 )sleep( S 1", "closing before opening"),
            (b"12(sleep) S 1", "no space after the pid"),
            (b"x (sleep) S", "pid not a number"),
            (b"0 (sleep) S", "pid zero"),
            (b"-1 (sleep) S", "negative pid"),
            (b"99999999999 (sleep) S", "pid too large"),
            (b"12 (sleep)S 1", "no space after comm"),
            (b"12 (sleep) SS 1", "state of two letters"),
            (b"12 (sleep) 5 1", "state a digit"),
            (b"12 (sleep) S 1 2 3", "too few fields"),
        ];
        for (input, why) in cases {
            assert!(
                parse(input).is_err(),
                "{why}: {:?} must not parse",
                String::from_utf8_lossy(input)
            );
        }
        let mut bad_start = line(12, b"sleep", b'S', 0);
        let at = bad_start
            .windows(3)
            .position(|w| w == b" 0 ")
            .expect("fixture has a ' 0 '");
        bad_start.truncate(at);
        assert!(
            parse(&bad_start).is_err(),
            "a line cut before field 22 must not parse"
        );
        let not_number = b"12 (sleep) S 1 12 12 34816 12 4194560 110 0 0 0 0 0 0 0 20 0 1 0 12x3 0";
        assert!(
            parse(not_number).is_err(),
            "a start time with a letter must not parse"
        );
    }

    #[test]
    fn each_wrong_shape_is_named_by_the_part_that_is_wrong() {
        let digit_state = line(12, b"sleep", b'5', 1);
        let not_number = b"12 (sleep) S 1 12 12 34816 12 4194560 110 0 0 0 0 0 0 0 20 0 1 0 12x3 0";
        let cases: &[(&[u8], &str)] = &[
            (b"", "no '(' opens the command name"),
            (b"12 (sleep S 1", "no ')' closes the command name"),
            (b"12 )sleep( S 1", "the last ')' comes before the first '('"),
            (
                b"12(sleep) S 1",
                "no space between the pid and the command name",
            ),
            (b"0 (sleep) S", "field 1 (pid) is not a process id"),
            (b"12 (sleep)S 1", "no space after the command name"),
            (&digit_state, "field 3 (state) is not one letter"),
            (
                b"12 (sleep) S 1 2 3",
                "the line ends before field 22 (start time)",
            ),
            (not_number, "field 22 (start time) is not a number"),
        ];
        for (input, why) in cases {
            assert_eq!(
                parse(input),
                Err(Malformed(why)),
                "{:?} is refused for what is wrong with it",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn a_snapshot_is_of_the_process_asked_for() {
        let path = Path::new("/proc/12/stat");
        let running = snapshot(12, &line(12, b"sleep", b'S', 77), path);
        assert_eq!(
            running.ok(),
            Some(Snapshot {
                start: Some(77),
                exited: false
            }),
            "a sleeping process: its start, not exited"
        );
        let zombie = snapshot(12, &line(12, b"sleep", b'Z', 77), path);
        assert_eq!(
            zombie.ok().map(|s| s.exited),
            Some(true),
            "a zombie has exited"
        );
        let other = snapshot(12, &line(13, b"sleep", b'S', 77), path)
            .expect_err("a stat file of process 13 must not be taken for process 12");
        assert!(
            matches!(
                &other,
                process::Error::OtherProcess {
                    pid: 12,
                    named: 13,
                    ..
                }
            ),
            "names both processes, got {other:?}"
        );
        assert_eq!(
            other.to_string(),
            "/proc/12/stat names process 13, not 12",
            "said with both"
        );
        let garbled = snapshot(12, b"12 (sleep", path).expect_err("a cut line is malformed");
        let process::Error::Malformed { from, source, .. } = &garbled else {
            panic!("a cut line is malformed, got {garbled:?}")
        };
        assert_eq!(
            (from.as_path(), source.part()),
            (path, "no ')' closes the command name"),
            "names the file, and what is wrong as its cause"
        );
        assert_eq!(
            garbled.to_string(),
            "the identity of process 12 read from /proc/12/stat is malformed",
            "the cause is not repeated in the message"
        );
    }

    proptest! {
        #[test]
        fn any_command_name_round_trips(
            pid in 1u32..=4_194_304,
            comm in proptest::collection::vec(
                prop_oneof![
                    Just(b' '), Just(b'('), Just(b')'), Just(b'\n'), Just(b'\t'),
                    any::<u8>(),
                ],
                0..=64,
            ),
            state in proptest::sample::select(b"RSDZTtXxKWPI".to_vec()),
            start in any::<u64>(),
        ) {
            let stat = parse(&line(pid, &comm, state, start));
            prop_assert_eq!(
                stat,
                Ok(Stat { pid, state, ppid: 1, pgid: pid, sid: pid, threads: 1, start }),
                "comm {:?} must not change the fields", String::from_utf8_lossy(&comm)
            );
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..=400)) {
            let _ = parse(&bytes);
        }
    }
}
