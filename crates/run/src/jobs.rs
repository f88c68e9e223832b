//! The jobserver's plain parts, the same on every platform: what a build asks ([`Jobs`],
//! [`Style`]), make's `-j` options ([`make_jobs`]), `MAKEFLAGS` ([`makeflags`]), and the rule
//! that judges a token lost ([`lost_tokens`]). The running jobserver is `jobserver.rs`
//! (Linux).

use std::ffi::{OsStr, OsString};
use std::path::Path;

/// How the build is told where its jobserver is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// `--jobserver-auth=R,W`: two descriptors the command inherits (every GNU make since
    /// 3.78 reads them; cargo, rustc and ninja too).
    #[default]
    Fds,
    /// `--jobserver-auth=fifo:PATH` (GNU make 4.4 and newer clients): nothing inherited.
    Fifo,
}

/// A build's jobserver, as [`crate::Supervisor::jobs`] takes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Jobs {
    /// The most jobs this tree runs at once, its implicit one included (`None`: as many as
    /// the machine gives; a make's own `-jN` lowers it).
    pub share: Option<u32>,
    /// How the build is told.
    pub style: Style,
    /// Put `make` and `ninja` shims first on the command's `PATH` that take out any `-jN`
    /// before running the real ones, so that a make or ninja started through a shell reads
    /// the jobserver instead of running its own `-jN` past `max_jobs`.
    pub shim: bool,
}

/// `make`'s `-j` options taken out of `args` (the command's arguments after its program), for
/// a program named `make`, `gmake` or `gnumake`: `-jN`, `-j N`, `-j`, `--jobs=N`, `--jobs N`,
/// `--jobs`, and a `j` in a cluster of short options (`-kj8`). Returns the arguments left and
/// the share asked: `None` when no `-j` was given or the program is no make, `Some(None)` for
/// a `-j` without a number (no limit), `Some(Some(n))`. Arguments after `--` are left alone.
#[must_use]
pub fn make_jobs(program: &OsStr, args: &[OsString]) -> (Vec<OsString>, Option<Option<u32>>) {
    let name = Path::new(program)
        .file_name()
        .and_then(OsStr::to_str)
        .unwrap_or("");
    if !matches!(name, "make" | "gmake" | "gnumake") {
        return (args.to_vec(), None);
    }
    let number = |s: &str| s.parse::<u32>().ok().filter(|n| *n > 0);
    let mut kept = Vec::with_capacity(args.len());
    let mut asked: Option<Option<u32>> = None;
    let mut rest = args.iter().peekable();
    while let Some(arg) = rest.next() {
        let Some(text) = arg.to_str() else {
            kept.push(arg.clone());
            continue;
        };
        if text == "--" {
            kept.push(arg.clone());
            kept.extend(rest.cloned());
            break;
        }
        // `-j`/`--jobs` take their number from the next argument only when it is one.
        let next_number = |rest: &mut std::iter::Peekable<std::slice::Iter<'_, OsString>>| {
            let n = rest.peek().and_then(|a| a.to_str()).and_then(number)?;
            rest.next();
            Some(n)
        };
        if text == "--jobs" || text == "-j" {
            asked = Some(next_number(&mut rest));
        } else if let Some(n) = text.strip_prefix("--jobs=") {
            asked = Some(number(n));
        } else if let Some(cluster) = text.strip_prefix('-').filter(|c| {
            // `j` before any letter that takes an argument (`-C dir`, `-f file`, ...): after
            // one of those the rest of the cluster is its argument.
            !c.starts_with('-')
                && c.bytes().all(|b| b.is_ascii_alphanumeric())
                && c.find(|l: char| "jCfIloWOE".contains(l))
                    .is_some_and(|at| c.as_bytes()[at] == b'j')
        }) {
            // A cluster of short options: the flags before `j` stay; what follows `j` is its
            // number (make's `-j` takes the rest of the cluster as its argument).
            let at = cluster.find('j').unwrap_or(0);
            let (flags, tail) = (&cluster[..at], &cluster[at + 1..]);
            if !flags.is_empty() {
                kept.push(OsString::from(format!("-{flags}")));
            }
            asked = Some(if tail.is_empty() {
                next_number(&mut rest)
            } else {
                number(tail)
            });
        } else {
            kept.push(arg.clone());
        }
    }
    (kept, asked)
}

/// `MAKEFLAGS` for the build: the caller's own flags (`existing`) without their `-j` and
/// jobserver parts, then `-jN` (`-j` with no share) and `--jobserver-auth=AUTH`.
#[must_use]
pub fn makeflags(existing: Option<&str>, share: Option<u32>, auth: &str) -> String {
    let mut words: Vec<&str> = existing
        .unwrap_or("")
        .split_ascii_whitespace()
        .filter(|w| {
            // `--jobs`, `--jobs=N` and every `--jobserver-*` (`-auth`, `-fds`, `-style`) share
            // the one prefix.
            !(w.starts_with("--jobs")
                || *w == "-j"
                || w.strip_prefix("-j")
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        })
        .collect();
    // A first word of single-letter flags (make writes `k` or `ks`) stays first.
    let jobs = share.map_or("-j".to_owned(), |n| format!("-j{n}"));
    let auth = format!("--jobserver-auth={auth}");
    words.push(&jobs);
    words.push(&auth);
    words.join(" ")
}

/// What a look for lost tokens remembers for the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remember {
    /// Nothing: no shortfall now.
    Clear,
    /// The shortfall seen before, from when it was first seen.
    Keep,
    /// This shortfall, seen now.
    Set(u64),
}

/// Whether a shortfall of the tree (`short` tokens out that it cannot be holding now) is a
/// loss: only if a look at least `every` before saw one too (`before`: how long ago, how
/// many), and then no more than either saw. A client reads its token a moment before it starts
/// its job, and a job ends a moment before its token is written back: a shortfall that does
/// not last from one look to the next is one of those moments.
#[must_use]
pub fn judge_loss(
    before: Option<(std::time::Duration, u64)>,
    short: u64,
    every: std::time::Duration,
) -> (u64, Remember) {
    match before {
        _ if short == 0 => (0, Remember::Clear),
        Some((ago, seen)) if ago >= every => (short.min(seen), Remember::Clear),
        Some(_) => (0, Remember::Keep),
        None => (0, Remember::Set(short)),
    }
}

/// How many tokens are lost, from what the tree looks like: all of them when no process of
/// the tree has the jobserver open; else those beyond the tree's live threads less one.
#[must_use]
pub fn lost_tokens(out: u64, threads: u32, holders: u32) -> u64 {
    if holders == 0 {
        return out;
    }
    out.saturating_sub(u64::from(threads.saturating_sub(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn makes_j_options_become_the_share_and_leave_its_arguments() {
        let make = OsStr::new("/usr/bin/make");
        for (args, kept, asked) in [
            (&["-j32", "all"][..], &["all"][..], Some(Some(32))),
            (&["-j", "8", "all"], &["all"], Some(Some(8))),
            (&["-j", "all"], &["all"], Some(None)),
            (&["--jobs=4"], &[], Some(Some(4))),
            (&["--jobs", "6", "x"], &["x"], Some(Some(6))),
            (&["--jobs"], &[], Some(None)),
            (&["-kj8", "all"], &["-k", "all"], Some(Some(8))),
            (&["-kj", "3"], &["-k"], Some(Some(3))),
            (&["-k", "all"], &["-k", "all"], None),
            (&["--", "-j9"], &["--", "-j9"], None),
            (&["-C", "dir", "-j2"], &["-C", "dir"], Some(Some(2))),
            (&["-Cjdir"], &["-Cjdir"], None),
            (&["-kfj.mk"], &["-kfj.mk"], None),
            (&["-j0", "all"], &["all"], Some(None)),
            (&["--jobs=0"], &[], Some(None)),
        ] {
            assert_eq!(
                make_jobs(make, &os(args)),
                (os(kept), asked),
                "make {args:?}"
            );
        }
        assert_eq!(
            make_jobs(OsStr::new("cargo"), &os(&["build", "-j64"])),
            (os(&["build", "-j64"]), None),
            "only make's arguments are touched"
        );
    }

    #[test]
    fn makeflags_keep_the_callers_flags_and_replace_the_jobserver() {
        assert_eq!(makeflags(None, Some(4), "3,4"), "-j4 --jobserver-auth=3,4");
        assert_eq!(
            makeflags(
                Some("k -j8 --jobserver-auth=5,6 --no-print-directory"),
                None,
                "fifo:/x"
            ),
            "k --no-print-directory -j --jobserver-auth=fifo:/x"
        );
        assert_eq!(
            makeflags(
                Some(" --jobserver-fds=1,2 -j --jobserver-style=pipe"),
                Some(2),
                "7,8"
            ),
            "-j2 --jobserver-auth=7,8"
        );
        assert_eq!(
            makeflags(
                Some("ks --jobs=3 -j12 -jx --jobserver-auth=fifo:/old"),
                Some(2),
                "7,8"
            ),
            "ks -jx -j2 --jobserver-auth=7,8",
            "every -j and jobserver word goes, a -j followed by a letter stays"
        );
    }

    #[test]
    fn a_token_is_lost_only_when_the_tree_cannot_be_holding_it() {
        assert_eq!(lost_tokens(3, 9, 0), 3, "nobody holds the jobserver");
        assert_eq!(lost_tokens(3, 4, 1), 0, "three jobs and their coordinator");
        assert_eq!(lost_tokens(3, 3, 1), 1, "one thread too few");
        assert_eq!(lost_tokens(2, 0, 1), 2);
        assert_eq!(lost_tokens(0, 0, 0), 0);
    }

    #[test]
    fn a_shortfall_is_a_loss_only_when_it_lasts_a_whole_look() {
        use std::time::Duration;
        let every = Duration::from_millis(250);
        assert_eq!(judge_loss(None, 0, every), (0, Remember::Clear));
        assert_eq!(
            judge_loss(None, 2, every),
            (0, Remember::Set(2)),
            "first seen"
        );
        assert_eq!(
            judge_loss(Some((Duration::from_millis(249), 2)), 2, every),
            (0, Remember::Keep),
            "not a whole look later"
        );
        assert_eq!(
            judge_loss(Some((every, 2)), 3, every),
            (2, Remember::Clear),
            "a look later: no more than either look saw"
        );
        assert_eq!(
            judge_loss(Some((Duration::from_secs(9), 3)), 1, every),
            (1, Remember::Clear)
        );
        assert_eq!(
            judge_loss(Some((Duration::from_secs(9), 3)), 0, every),
            (0, Remember::Clear),
            "gone meanwhile: it was one of those moments"
        );
    }

    proptest::proptest! {
        #[test]
        fn no_make_command_line_panics_or_keeps_a_j(args in proptest::collection::vec("-?-?[a-z0-9=]{0,6}", 0..8)) {
            let args = os(&args.iter().map(String::as_str).collect::<Vec<_>>());
            let (kept, _) = make_jobs(OsStr::new("make"), &args);
            let dashdash = kept.iter().position(|a| a == "--").unwrap_or(kept.len());
            for arg in &kept[..dashdash] {
                let text = arg.to_str().unwrap_or("");
                proptest::prop_assert!(!text.starts_with("--jobs"), "{text}");
                let cluster = text.strip_prefix('-').filter(|c| !c.starts_with('-'));
                let j_first = cluster.and_then(|c| c.find(|l: char| "jCfIloWOE".contains(l)))
                    .is_some_and(|at| text.as_bytes()[at + 1] == b'j');
                proptest::prop_assert!(
                    !(j_first && text[1..].bytes().all(|b| b.is_ascii_alphanumeric())),
                    "{text}"
                );
            }
        }
    }
}
