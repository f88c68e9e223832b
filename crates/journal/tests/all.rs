//! The journal with real files, processes and users: appends that never interleave, writers
//! SIGKILLed mid-loop, rotations under concurrent writers, a follower across them, a journal
//! that cannot be written (another user's, a full disk).

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use worklane_journal::{Batch, CURRENT, Entry, Event, Follow, Journal, PREVIOUS, read};
use worklane_slotfile::SlotDir;
use worklane_testkit::Gated;

/// A slot directory in a temp directory: mode 2770, group `GROUP`.
struct Site {
    _temp: tempfile::TempDir,
    path: PathBuf,
    dir: SlotDir,
}

const GROUP: u32 = 4242;
const MEMBER: u32 = 65_534;

fn root_only() {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests run as root (they give directories to other users)"
    );
}

impl Site {
    fn new() -> Site {
        root_only();
        let temp = tempfile::tempdir().expect("temp");
        std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let path = temp.path().join("slots");
        std::fs::create_dir(&path).expect("mkdir");
        std::os::unix::fs::chown(&path, Some(0), Some(GROUP)).expect("chown");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
        let dir = SlotDir::open(&path).expect("open");
        Site {
            _temp: temp,
            path,
            dir,
        }
    }

    fn writer(&self, tag: &str, count: u64, max: Option<u64>) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_journal-writer"));
        command
            .arg(&self.path)
            .arg(count.to_string())
            .args(max.map(|m| m.to_string()))
            .env("WRITER_TAG", tag)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    fn size(&self) -> u64 {
        [CURRENT, PREVIOUS]
            .iter()
            .filter_map(|n| std::fs::metadata(self.path.join(n)).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// The epochs of each writer's `slot-taken` lines, in the order read.
fn by_writer(entries: &[Entry]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for entry in entries {
        if let Event::SlotTaken { owner, epoch, .. } = &entry.event {
            out.entry(owner.clone()).or_default().push(*epoch);
        }
    }
    out
}

/// Whether `epochs` are `from..=to` in order, each once.
fn contiguous(epochs: &[u64]) -> bool {
    epochs.windows(2).all(|w| w[1] == w[0] + 1)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < give_up, "waited a minute for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn dropped_said(out: &std::process::Output) -> u64 {
    assert!(
        out.status.success(),
        "the writer ran: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the writer says how many it dropped")
}

mod append {
    use super::*;

    #[test]
    fn an_event_is_one_line_with_its_writer_and_time() {
        let site = Site::new();
        Journal::of(&site.dir).emit(Event::Stop {
            by: "alice@build1".to_owned(),
            reason: "maintenance".to_owned(),
        });
        let text = std::fs::read_to_string(site.path.join(CURRENT)).expect("the journal");
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.starts_with(r#"{"version":1,"at":""#) && text.ends_with("}\n"),
            "{text}"
        );
        let batch = read(&site.dir).expect("read");
        assert_eq!(batch.skipped, 0);
        let [entry] = batch.entries.as_slice() else {
            panic!("one entry: {batch:?}");
        };
        assert_eq!(entry.pid, std::process::id());
        assert_eq!(entry.dropped, 0);
        assert!(
            worklane_journal::ms_of_time(&entry.at).is_some(),
            "{}",
            entry.at
        );
        assert_eq!(
            entry.event,
            Event::Stop {
                by: "alice@build1".to_owned(),
                reason: "maintenance".to_owned()
            }
        );
    }

    #[test]
    fn the_journal_is_the_group_s_to_append_and_read() {
        let site = Site::new();
        Journal::of(&site.dir).emit(Event::Undrain);
        let meta = std::fs::metadata(site.path.join(CURRENT)).expect("the journal");
        assert_eq!(
            meta.mode() & 0o7777,
            0o660,
            "read and appended by the group"
        );
        assert_eq!(meta.gid(), GROUP, "the directory's group");
        // A member of the group, not root, appends.
        let member = Command::new("setpriv")
            .args([
                format!("--reuid={MEMBER}"),
                format!("--regid={MEMBER}"),
                format!("--groups={GROUP}"),
                "--".to_owned(),
            ])
            .arg(env!("CARGO_BIN_EXE_journal-writer"))
            .arg(&site.path)
            .arg("3")
            .env("WRITER_TAG", "member")
            .output_gated()
            .expect("setpriv");
        assert_eq!(dropped_said(&member), 0, "the member dropped nothing");
        let written = by_writer(&read(&site.dir).expect("read").entries);
        assert_eq!(written.get("member"), Some(&vec![0, 1, 2]), "{written:?}");
    }

    #[test]
    fn lines_of_threads_and_processes_never_interleave() {
        let site = Site::new();
        let mut children: Vec<_> = (0..4)
            .map(|i| {
                site.writer(&format!("p{i}"), 500, None)
                    .spawn_gated()
                    .expect("writer")
            })
            .collect();
        std::thread::scope(|s| {
            for t in 0..4 {
                let dir = site.dir.clone();
                s.spawn(move || {
                    let journal = Journal::of(&dir);
                    for epoch in 0..500 {
                        journal.emit(Event::SlotTaken {
                            slot: "agent-0.lock".to_owned(),
                            slot_kind: "agent".to_owned(),
                            owner: format!("t{t}"),
                            epoch,
                            waited_ms: 0,
                        });
                    }
                });
            }
        });
        for child in children.drain(..) {
            assert_eq!(dropped_said(&child.wait_with_output().expect("wait")), 0);
        }
        let batch = read(&site.dir).expect("read");
        assert_eq!(batch.skipped, 0, "no line torn or mixed");
        let written = by_writer(&batch.entries);
        assert_eq!(written.len(), 8, "{:?}", written.keys());
        for (writer, epochs) in &written {
            assert_eq!(epochs.len(), 500, "{writer}: every line");
            assert!(contiguous(epochs), "{writer}: in order, each once");
        }
    }

    /// A stray directory at the journal's name: every event is dropped and counted, nothing
    /// fails; once it is gone the next line says how many were dropped.
    #[test]
    fn what_cannot_be_appended_is_dropped_counted_and_said_later() {
        let site = Site::new();
        std::fs::create_dir(site.path.join(CURRENT)).expect("a stray directory");
        let journal = Journal::of(&site.dir);
        for _ in 0..3 {
            journal.emit(Event::Undrain);
        }
        assert_eq!(journal.dropped(), 3, "counted");
        std::fs::remove_dir(site.path.join(CURRENT)).expect("rmdir");
        journal.emit(Event::Undrain);
        assert_eq!(journal.dropped(), 0, "said");
        let batch = read(&site.dir).expect("read");
        let dropped: Vec<u64> = batch.entries.iter().map(|e| e.dropped).collect();
        assert_eq!(dropped, [3], "the next line carries the count");
    }

    /// A journal of root's that the group may only read: a member drops every event, counts
    /// them, and fails nothing; the journal is not touched.
    #[test]
    fn a_member_that_may_not_write_the_journal_drops_its_events() {
        let site = Site::new();
        Journal::of(&site.dir).emit(Event::Undrain);
        let journal = site.path.join(CURRENT);
        std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let before = std::fs::read(&journal).expect("read");
        let member = Command::new("setpriv")
            .args([
                format!("--reuid={MEMBER}"),
                format!("--regid={MEMBER}"),
                format!("--groups={GROUP}"),
                "--".to_owned(),
            ])
            .arg(env!("CARGO_BIN_EXE_journal-writer"))
            .arg(&site.path)
            .arg("5")
            .output_gated()
            .expect("setpriv");
        assert_eq!(dropped_said(&member), 5, "each counted");
        assert_eq!(std::fs::read(&journal).expect("read"), before, "untouched");
    }

    /// A small tmpfs mounted over the site's directory, unmounted when dropped.
    struct Tmpfs<'a>(&'a Path);

    impl Tmpfs<'_> {
        fn over(site: &Site) -> Tmpfs<'_> {
            let mount = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=256k,mode=2770", "tmpfs"])
                .arg(&site.path)
                .status_gated()
                .expect("mount");
            assert!(mount.success(), "mount a tmpfs");
            Tmpfs(&site.path)
        }

        /// Fills the disk: every page is taken, bar the room left in files' last pages.
        fn fill(&self) -> PathBuf {
            let fill = self.0.join("fill");
            let mut file = std::fs::File::create(&fill).expect("fill");
            let chunk = vec![0u8; 4096];
            while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
            fill
        }

        /// Removes the fill and waits (5 s at most) until the disk has its room back. The
        /// space comes back when the last descriptor of the file closes, which is not always
        /// at the unlink: a child another test forks meanwhile holds a copy of every
        /// descriptor until its `exec`.
        fn free(&self, fill: &Path) {
            std::fs::remove_file(fill).expect("free");
            let free = || rustix::fs::statvfs(self.0).expect("statvfs").f_bfree;
            let deadline = Instant::now() + Duration::from_secs(5);
            while free() < 32 {
                assert!(Instant::now() < deadline, "the fill's room came back");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    impl Drop for Tmpfs<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status_gated();
        }
    }

    /// A disk that fills: events are dropped and counted; once there is room the next line
    /// says how many.
    #[test]
    fn a_full_disk_drops_and_counts_and_the_next_line_says_so() {
        let site = Site::new();
        let tmpfs = Tmpfs::over(&site);
        let dir = SlotDir::open(&site.path).expect("open");
        let journal = Journal::of(&dir);
        journal.emit(Event::Undrain);
        // Fill the disk, the journal's last page too.
        let fill = tmpfs.fill();
        let mut i = 0;
        while journal.dropped() == 0 {
            journal.emit(Event::Undrain);
            i += 1;
            assert!(i < 10_000, "the disk fills");
        }
        let before = journal.dropped();
        journal.emit(Event::Undrain);
        assert_eq!(journal.dropped(), before + 1, "counted, not failed");
        tmpfs.free(&fill);
        journal.emit(Event::Stop {
            by: "x".to_owned(),
            reason: "y".to_owned(),
        });
        assert_eq!(journal.dropped(), 0);
        let batch = read(&dir).expect("read");
        let last = batch.entries.last().expect("a line");
        assert_eq!(last.event.kind(), "stop");
        assert_eq!(last.dropped, before + 1, "the next line says how many");
        // The write that met the full disk may have put part of its line in the last page:
        // a fragment, which readers skip and count.
        assert!(batch.skipped <= 1, "{}", batch.skipped);
    }

    /// A write the disk cuts short (room left for part of the line only, in the last page of
    /// the file written): the event is dropped and counted, not taken for written; the piece
    /// it left is skipped by readers, and the next line, which says how many were dropped,
    /// read. To the journal, or to the `test-seams` sink when `sink` is given its name.
    fn a_short_write(sink: Option<&str>) {
        let site = Site::new();
        let tmpfs = Tmpfs::over(&site);
        let dir = SlotDir::open(&site.path).expect("open");
        let journal = Journal::of(&dir);
        let written = site.path.join(sink.unwrap_or(CURRENT));
        if sink.is_some() {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&written)
                .expect("the sink");
            journal.sink(file.into());
        }
        let size = || std::fs::metadata(&written).expect("written").len();
        let long = Event::Stop {
            by: "x".repeat(3900),
            reason: "long".to_owned(),
        };
        // A tmpfs's block: its page.
        let page = std::fs::metadata(&site.path).expect("stat").blksize();
        // Lines until the long one (over 3,900 bytes) no longer fits in the file's last page,
        // which has room left.
        journal.emit(Event::Undrain);
        while page - size() % page >= 3900 {
            journal.emit(Event::Undrain);
        }
        assert_eq!(journal.dropped(), 0, "lines written whole are not dropped");
        let before = size();
        assert_ne!(before % page, 0);
        let fill = tmpfs.fill();
        journal.emit(long);
        assert_eq!(
            size(),
            before.next_multiple_of(page),
            "a part of the line went"
        );
        assert_eq!(journal.dropped(), 1, "cut short: dropped and counted");
        if sink.is_some() {
            assert!(!site.path.join(CURRENT).exists(), "all went to the sink");
            return;
        }
        tmpfs.free(&fill);
        journal.emit(Event::Stop {
            by: "x".to_owned(),
            reason: "after".to_owned(),
        });
        assert_eq!(journal.dropped(), 0);
        let batch = read(&dir).expect("read");
        assert_eq!(batch.skipped, 1, "the piece of the long line");
        let last = batch.entries.last().expect("a line");
        assert_eq!(
            (&last.event, last.dropped),
            (
                &Event::Stop {
                    by: "x".to_owned(),
                    reason: "after".to_owned()
                },
                1
            )
        );
    }

    #[test]
    fn a_write_cut_short_by_a_full_disk_is_dropped_and_counted() {
        a_short_write(None);
    }

    #[test]
    fn a_write_to_the_sink_cut_short_is_dropped_and_counted() {
        a_short_write(Some("sink"));
    }
}

mod rotation {
    use super::*;

    const CAP: u64 = 64 * 1024;

    /// Four writers at once, 2,000 lines each, with a cap of 64 KiB: about seventy rotations.
    /// The journal keeps rotating (it holds a small part of what was written), no line is
    /// torn, nothing is dropped, and each writer's newest lines are all there, in order.
    #[test]
    fn concurrent_writers_rotate_under_the_cap() {
        let site = Site::new();
        let children: Vec<_> = (0..4)
            .map(|i| {
                site.writer(&format!("w{i}"), 2000, Some(CAP))
                    .spawn_gated()
                    .expect("writer")
            })
            .collect();
        for child in children {
            assert_eq!(dropped_said(&child.wait_with_output().expect("wait")), 0);
        }
        // While one writer rotates, the others append to the file they find (PROTOCOL.md
        // 17.3, step 1): the cap is soft by as much as they write meanwhile. Mostly that is a
        // few lines, but a loaded machine stretches it: a rotating writer descheduled for some
        // 20 ms let the three others add 200 KB, in 2 runs of 20 of this test, so a bound of
        // the cap plus a few lines was a flake. What holds whatever the scheduling: the
        // journal rotated all along, and holds a small part of what was written.
        let line = std::fs::read_to_string(site.path.join(CURRENT))
            .expect("the journal")
            .lines()
            .last()
            .expect("a line")
            .len() as u64;
        let written = 4 * 2000 * line;
        assert!(
            site.size() <= written / 2,
            "{} bytes of {written} written",
            site.size()
        );
        // Each file was made by a rotation, and begins with its totals: no writer took the
        // name between the rotation's rename and its publish.
        for name in [PREVIOUS, CURRENT] {
            let text = std::fs::read_to_string(site.path.join(name)).expect("a journal file");
            assert!(
                text.starts_with(r#"{"version":1,"#)
                    && text.contains(r#""kind":"totals""#)
                    && text
                        .lines()
                        .next()
                        .is_some_and(|l| l.contains(r#""kind":"totals""#)),
                "{name} begins with a totals line: {}",
                &text[..text.len().min(200)]
            );
        }
        let batch = read(&site.dir).expect("read");
        // And the totals carried across the rotations count the lines written, rotated away
        // or not: all of them but the few of a writer that a rotation overtook between its
        // look and its write (its line tallied and written again, or written after the
        // tally to a file then dropped: one either way in a quarter of the runs). A totals
        // line lost would lose thousands.
        let waits = worklane_journal::tally::total(&batch.entries).queue_wait["agent"].count;
        assert!(
            waits.abs_diff(4 * 2000) <= 80,
            "{waits} slot-taken counted of 8000"
        );
        assert_eq!(batch.skipped, 0, "no line torn by a rotation");
        // The journal holds the newest lines only: each writer there has its own last ones,
        // in order (a writer that ended early may have rotated out entirely).
        let written = by_writer(&batch.entries);
        assert!(!written.is_empty(), "the newest lines are there");
        for (writer, epochs) in written {
            assert!(contiguous(&epochs), "{writer}: newest lines in order");
            assert_eq!(
                epochs.last(),
                Some(&1999),
                "{writer}: its last line is there"
            );
        }
    }

    /// A follower started before four writers (2,000 lines each, in rounds of 250 that
    /// start when the follower has read the last round; a cap of 1 MiB: about five
    /// rotations) sees every line of each, across the rotations.
    #[test]
    fn a_follower_sees_every_line_across_rotations() {
        let site = Site::new();
        let (mut follow, first) = Follow::start(&site.dir).expect("follow");
        assert_eq!(first, Batch::default(), "nothing yet");
        const ROUND: u64 = 250;
        let mut children: Vec<_> = (0..4)
            .map(|i| {
                site.writer(&format!("w{i}"), 2000, Some(1024 * 1024))
                    .env("WRITER_ROUND", ROUND.to_string())
                    .stdin(Stdio::piped())
                    .spawn_gated()
                    .expect("writer")
            })
            .collect();
        let mut seen = Batch::default();
        let mut rotations = 0;
        let mut last_previous = None;
        for round in 1..=2000 / ROUND {
            for child in &mut children {
                let stdin = child.stdin.as_mut().expect("stdin");
                std::io::Write::write_all(stdin, b"go\n").expect("go");
            }
            let done = |seen: &Batch| {
                let by = by_writer(&seen.entries);
                by.len() == 4 && by.values().all(|e| e.contains(&(round * ROUND - 1)))
            };
            let give_up = Instant::now() + Duration::from_secs(120);
            while !done(&seen) {
                assert!(
                    Instant::now() < give_up,
                    "round {round}: the follower saw every writer's lines: {:?}",
                    by_writer(&seen.entries)
                        .iter()
                        .map(|(w, e)| (w.clone(), e.len(), e.last().copied()))
                        .collect::<Vec<_>>()
                );
                seen.extend(follow.next(Some(Duration::from_secs(1))).expect("follow"));
            }
            let previous = std::fs::metadata(site.path.join(PREVIOUS))
                .ok()
                .map(|m| m.ino());
            if previous != last_previous {
                rotations += 1;
                last_previous = previous;
            }
        }
        for child in children {
            assert_eq!(dropped_said(&child.wait_with_output().expect("wait")), 0);
        }
        assert!(rotations >= 3, "it rotated, more than once: {rotations}");
        assert_eq!(seen.skipped, 0, "nothing torn");
        for (writer, mut epochs) in by_writer(&seen.entries) {
            epochs.sort_unstable();
            epochs.dedup();
            assert_eq!(
                epochs,
                (0..2000).collect::<Vec<_>>(),
                "{writer}: every line"
            );
        }
    }

    /// A rotation killed between its rename and the new file: the next append makes the file.
    #[test]
    fn a_rotation_cut_short_is_finished_by_the_next_append() {
        let site = Site::new();
        let journal = Journal::of(&site.dir);
        journal.emit(Event::Undrain);
        std::fs::rename(site.path.join(CURRENT), site.path.join(PREVIOUS)).expect("rename");
        journal.emit(Event::Stop {
            by: String::new(),
            reason: String::new(),
        });
        let kinds: Vec<&str> = read(&site.dir)
            .expect("read")
            .entries
            .iter()
            .map(|e| e.event.kind())
            .collect::<Vec<_>>()
            .into_iter()
            .collect();
        assert_eq!(kinds, ["undrain", "stop"]);
        let meta = std::fs::metadata(site.path.join(CURRENT)).expect("made again");
        assert_eq!(meta.mode() & 0o7777, 0o660);
    }
}

mod killed {
    use super::*;

    /// Twenty writers of 1,000 lines each, SIGKILLed one after another as the journal grows:
    /// every reader parses what they left, skipping (and counting) only torn pieces, and each
    /// writer's lines are the first ones it wrote, in order.
    #[test]
    fn writers_killed_mid_loop_leave_a_journal_every_reader_parses() {
        let site = Site::new();
        let (mut follow, _) = Follow::start(&site.dir).expect("follow");
        let mut children: Vec<_> = (0..20)
            .map(|i| {
                site.writer(&format!("k{i}"), 1000, None)
                    .spawn_gated()
                    .expect("writer")
            })
            .collect();
        for (i, child) in children.iter_mut().enumerate() {
            // Killed at different points: once the journal holds a few more lines.
            let lines = 1 + 60 * i as u64;
            wait_until("the journal to grow", || {
                site.size() >= lines * 250 || matches!(child.try_wait(), Ok(Some(_)))
            });
            let _ = child.kill();
            let _ = child.wait();
        }
        let batch = read(&site.dir).expect("every reader parses it");
        assert!(
            batch.skipped <= 20,
            "at most one torn piece per killed writer: {}",
            batch.skipped
        );
        let written = by_writer(&batch.entries);
        for (writer, epochs) in &written {
            assert!(
                epochs.first() == Some(&0) && contiguous(epochs),
                "{writer}: its first lines, in order"
            );
        }
        let mut followed = Batch::default();
        while followed.entries.len() < batch.entries.len() {
            let more = follow.next(Some(Duration::from_secs(5))).expect("follow");
            assert!(
                !more.entries.is_empty(),
                "the follower reads what the reader read"
            );
            followed.extend(more);
        }
        assert_eq!(by_writer(&followed.entries), written, "the same lines");
    }
}

mod follow {
    use super::*;

    /// `follow.next(None)` on a thread of its own, bounded: a follower that is never woken
    /// fails the test instead of hanging it.
    fn next_woken(follow: Follow) -> (Follow, Batch) {
        let (read, got) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut follow = follow;
            let batch = follow.next(None).expect("follow");
            let _ = read.send((follow, batch));
        });
        got.recv_timeout(Duration::from_secs(10))
            .expect("woken within 10 s")
    }

    #[test]
    fn a_follower_wakes_for_a_new_line_and_after_a_rotation() {
        let site = Site::new();
        let journal = Journal::of(&site.dir);
        journal.emit(Event::Undrain);
        let (follow, first) = Follow::start(&site.dir).expect("follow");
        assert_eq!(first.entries.len(), 1, "what is there");
        let writer = {
            let dir = site.dir.clone();
            std::thread::spawn(move || {
                let journal = Journal::of(&dir);
                journal.emit(Event::Stop {
                    by: "a".to_owned(),
                    reason: "b".to_owned(),
                });
            })
        };
        let (follow, next) = next_woken(follow);
        writer.join().expect("writer");
        assert_eq!(next.entries[0].event.kind(), "stop");
        // Rotated by hand (as a rotation does it), then a line in the new file.
        std::fs::rename(site.path.join(CURRENT), site.path.join(PREVIOUS)).expect("rename");
        journal.emit(Event::Undrain);
        let (mut follow, next) = next_woken(follow);
        let kinds: Vec<&str> = next.entries.iter().map(|e| e.event.kind()).collect();
        assert_eq!(kinds, ["undrain"], "the new file read from its start, once");
        assert_eq!(
            follow
                .next(Some(Duration::from_millis(50)))
                .expect("nothing")
                .entries
                .len(),
            0,
            "nothing more"
        );
    }
}
