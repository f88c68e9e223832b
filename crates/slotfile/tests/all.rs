//! Integration tests of `worklane-slotfile`: real directories, real descriptors, real
//! processes. One binary, a module per operation.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use worklane_slotfile::{Environment, Publish, RECORD_MODE, Removal, SlotDir, SlotPath};
use worklane_testkit::Gated;

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temp dir")
}

fn slots(t: &tempfile::TempDir) -> SlotDir {
    SlotDir::open(t.path()).expect("open the temp dir as a slot directory")
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    names.sort();
    names
}

fn writer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_slot-writer"))
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

mod names {
    use super::*;

    const GUARDS: &[&str] = &[
        ".agent-0.lock.flock",
        ".agent-0.lock.flock.tmp-0123456789abcdef",
        ".AGENT-0.LOCK.FLOCK",
        "\u{FF0E}agent-0.lock\u{FF0E}flock",
        ".agent-0.lock.f\u{200B}lock",
        "agent-0.lock.flock",
        "x.FLOCK\u{FEFF}",
    ];

    #[test]
    fn guard_names_never_become_slot_paths() {
        let t = temp();
        let dir = slots(&t);
        for name in GUARDS {
            let err = dir.file(name).expect_err("a guard name must be refused");
            let msg = err.to_string();
            assert!(
                msg.contains("guard"),
                "{name:?}: the refusal says why: {msg}"
            );
            assert!(
                msg.contains(path_str(t.path())),
                "names the directory: {msg}"
            );
        }
        assert!(names_in(t.path()).is_empty(), "nothing was written");
    }

    #[test]
    fn every_mutating_call_is_unreachable_for_guard_names() {
        // Every write, publish and removal goes through a SlotPath, and no SlotPath can name a
        // guard: so the guard of a real lock survives every mutating call on every spelling.
        let t = temp();
        let dir = slots(&t);
        let lock = dir.file("agent-0.lock").expect("valid");
        let guard = lock.try_guard().expect("guard").expect("free");
        let guard_path = t.path().join(".agent-0.lock.flock");
        let ino = std::fs::metadata(&guard_path).expect("guard exists").ino();
        type Mutation = fn(&SlotPath) -> bool;
        let mutations: [(&str, Mutation); 4] = [
            ("replace", |p| p.replace(b"x", RECORD_MODE).is_ok()),
            ("publish", |p| p.publish(b"x", RECORD_MODE).is_ok()),
            ("remove", |p| p.remove().is_ok()),
            ("remove_if_unchanged", |p| {
                p.remove_if_unchanged(b"").is_ok()
            }),
        ];
        for name in GUARDS {
            for (what, _) in &mutations {
                assert!(
                    dir.file(name).is_err(),
                    "{what} on {name:?} must be refused before it is reached"
                );
            }
        }
        for (what, mutate) in &mutations {
            assert!(mutate(&lock), "{what} on an ordinary name works");
        }
        assert_eq!(
            std::fs::metadata(&guard_path)
                .expect("guard still there")
                .ino(),
            ino,
            "the guard inode is untouched"
        );
        drop(guard);
    }

    #[test]
    fn other_bad_names_are_refused() {
        let t = temp();
        let dir = slots(&t);
        for name in ["", ".", "..", "a/b", "a\0b", ".hidden"] {
            assert!(dir.file(name).is_err(), "{name:?} must be refused");
        }
        assert!(
            dir.file(&"a".repeat(300)).is_err(),
            "an over-long name is refused"
        );
    }

    #[test]
    fn listing_skips_guards_and_temps() {
        let t = temp();
        let dir = slots(&t);
        for n in ["agent-1.lock", "agent-0.lock", "STOP"] {
            dir.file(n)
                .expect("valid")
                .replace(b"{}", RECORD_MODE)
                .expect("write");
        }
        let _held = dir.file("agent-0.lock").expect("valid").try_guard();
        std::fs::write(t.path().join(".agent-0.lock.tmp-0011223344556677"), b"x").expect("temp");
        let listed: Vec<String> = dir
            .list()
            .expect("list")
            .iter()
            .map(|p| p.name().to_owned())
            .collect();
        assert_eq!(
            listed,
            ["STOP", "agent-0.lock", "agent-1.lock"],
            "sorted, no guards or temps"
        );
        let (files, hidden) = dir.list_with_hidden().expect("list both");
        let files: Vec<&str> = files
            .iter()
            .map(worklane_slotfile::SlotPath::name)
            .collect();
        assert_eq!(
            files, listed,
            "the same ordinary names from the one reading"
        );
        assert_eq!(
            hidden,
            [".agent-0.lock.flock", ".agent-0.lock.tmp-0011223344556677"],
            "and the hidden ones, sorted: the guard a probe made and the temp file"
        );
    }

    #[test]
    fn slot_paths_are_equal_by_directory_and_name_and_show_both() {
        let t = temp();
        let u = temp();
        let dir = slots(&t);
        let stop = dir.file("STOP").expect("valid");
        assert_eq!(
            stop,
            dir.file("STOP").expect("valid"),
            "same directory, same name"
        );
        assert_ne!(
            stop,
            dir.file("agent-0.lock").expect("valid"),
            "same directory, another name"
        );
        assert_ne!(
            stop,
            slots(&u).file("STOP").expect("valid"),
            "same name, another directory"
        );
        assert_eq!(stop.name(), "STOP", "its name");
        assert_eq!(stop.dir().path(), t.path(), "its directory");
        let shown = format!("{stop:?}");
        assert!(
            shown.contains("SlotPath")
                && shown.contains("\"STOP\"")
                && shown.contains(path_str(t.path())),
            "the debug form names the type, the file and its directory: {shown}"
        );
        let shown = format!("{dir:?}");
        assert!(
            shown.contains("SlotDir") && shown.contains(path_str(t.path())),
            "the debug form of a directory names its path: {shown}"
        );
    }
}

mod read {
    use super::*;
    use worklane_slotfile::read::Error;

    /// Appending opens the file at the name itself, never a link, a FIFO, or a file that has
    /// another name elsewhere (a member's hard link to a file it may not write): what is
    /// appended lands in the slot directory's own file or nowhere.
    #[test]
    fn appending_refuses_links_fifos_and_files_with_another_name() {
        let t = temp();
        let dir = slots(&t);
        let journal = dir.file("journal.jsonl").expect("valid");
        assert!(
            journal.open_append().expect("absent").is_none(),
            "never created"
        );
        std::fs::write(t.path().join("journal.jsonl"), b"a\n").expect("write");
        let (fd, meta) = journal.open_append().expect("open").expect("there");
        assert_eq!(meta.size, 2);
        rustix::io::write(&fd, b"b\n").expect("append");
        assert_eq!(
            std::fs::read(t.path().join("journal.jsonl")).expect("read"),
            b"a\nb\n"
        );
        let elsewhere = t.path().join("elsewhere");
        std::fs::write(&elsewhere, b"theirs\n").expect("write");
        std::fs::remove_file(t.path().join("journal.jsonl")).expect("remove");
        std::fs::hard_link(&elsewhere, t.path().join("journal.jsonl")).expect("hard link");
        let err = journal.open_append().expect_err("a second name");
        assert!(err.to_string().contains("journal.jsonl"), "{err}");
        assert!(
            std::error::Error::source(&err).is_some_and(|e| e.to_string().contains("2 names")),
            "says why: {err:?}"
        );
        // One the directory's group may write anyway (as a file being published is, for a
        // moment, under its temp name and its name) lends nothing: appended to.
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o660))
            .expect("chmod");
        assert!(
            journal.open_append().expect("the group's file").is_some(),
            "a second name of a file the group writes"
        );
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        std::fs::remove_file(t.path().join("journal.jsonl")).expect("remove");
        std::os::unix::fs::symlink(&elsewhere, t.path().join("journal.jsonl")).expect("symlink");
        assert!(journal.open_append().is_err(), "a link is not followed");
        std::fs::remove_file(t.path().join("journal.jsonl")).expect("remove");
        assert!(
            Command::new("mkfifo")
                .arg(t.path().join("journal.jsonl"))
                .status_gated()
                .expect("mkfifo")
                .success()
        );
        assert!(
            journal.open_append().is_err(),
            "a FIFO is not a file to append to"
        );
        assert_eq!(
            std::fs::read(&elsewhere).expect("read"),
            b"theirs\n",
            "untouched"
        );
    }

    #[test]
    fn absent_is_none_and_present_is_bytes() {
        let t = temp();
        let p = slots(&t).file("STOP").expect("valid");
        assert_eq!(p.read().expect("read"), None, "absent file");
        std::fs::write(t.path().join("STOP"), b"{}").expect("write");
        assert_eq!(p.read().expect("read").as_deref(), Some(&b"{}"[..]));
    }

    #[test]
    fn symlinks_are_refused_and_not_followed() {
        let t = temp();
        let secret = t.path().join("secret");
        std::fs::write(&secret, b"secret").expect("write");
        std::os::unix::fs::symlink(&secret, t.path().join("STOP")).expect("symlink");
        let err = slots(&t)
            .file("STOP")
            .expect("valid")
            .read()
            .expect_err("refused");
        assert!(matches!(err, Error::Symlink { .. }), "got {err:?}");
        assert!(err.to_string().contains("STOP"), "names the file: {err}");
    }

    #[test]
    fn fifos_are_refused_without_blocking() {
        let t = temp();
        let fifo = t.path().join("STOP");
        assert!(
            Command::new("mkfifo")
                .arg(&fifo)
                .status_gated()
                .expect("mkfifo")
                .success(),
            "mkfifo"
        );
        let dir = slots(&t);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(dir.file("STOP").expect("valid").read().map(|_| ()));
        });
        // A watchdog, not a timing assertion: a blocking open of a FIFO never returns.
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("read of a FIFO must return instead of blocking");
        let err = got.expect_err("a FIFO must be refused");
        assert!(
            matches!(err, Error::NotRegular { kind: "FIFO", .. }),
            "got {err:?}"
        );
    }

    #[test]
    fn files_over_64_kib_are_refused() {
        let t = temp();
        let dir = slots(&t);
        std::fs::write(t.path().join("exact"), vec![b'x'; 64 * 1024]).expect("write");
        let exact = dir
            .file("exact")
            .expect("valid")
            .read()
            .expect("64 KiB is accepted");
        assert_eq!(exact.map(|b| b.len()), Some(64 * 1024));
        std::fs::write(t.path().join("big"), vec![b'x'; 64 * 1024 + 1]).expect("write");
        let err = dir.file("big").expect("valid").read().expect_err("refused");
        assert!(
            matches!(err, Error::TooLarge { size: 65537, .. }),
            "a distinct error: {err:?}"
        );
    }

    #[test]
    fn directories_are_refused() {
        let t = temp();
        std::fs::create_dir(t.path().join("sub")).expect("mkdir");
        let err = slots(&t)
            .file("sub")
            .expect("valid")
            .read()
            .expect_err("refused");
        assert!(
            matches!(
                err,
                Error::NotRegular {
                    kind: "directory",
                    ..
                }
            ),
            "got {err:?}"
        );
    }

    #[test]
    fn read_with_owner_says_who_may_have_written_the_bytes() {
        use worklane_slotfile::Written;
        let t = temp();
        let p = slots(&t).file("STOP").expect("valid");
        assert_eq!(p.read_with_owner().expect("read"), None, "absent file");
        p.replace(b"{}", 0o644).expect("write");
        let (bytes, written) = p.read_with_owner().expect("read").expect("present");
        assert_eq!(bytes, b"{}", "the bytes of the file");
        let me = rustix::process::geteuid().as_raw();
        assert_eq!(
            written,
            Written {
                uid: me,
                mode: 0o644,
                links: 1
            },
            "owner, permission bits and links of the file read"
        );
        assert!(
            written.only_by_owner(),
            "0644 with one name: only its owner"
        );

        let stop = t.path().join("STOP");
        for mode in [0o664, 0o646, 0o666, 0o620] {
            std::fs::set_permissions(&stop, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let (_, written) = p.read_with_owner().expect("read").expect("present");
            assert_eq!(written.mode, mode, "the mode as fstat says it");
            assert!(
                !written.only_by_owner(),
                "{mode:o}: a group or other write bit lets others write it"
            );
        }
        std::fs::set_permissions(&stop, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        let (_, written) = p.read_with_owner().expect("read").expect("present");
        assert_eq!(written.mode, 0o4755, "the special bits are kept");
        assert!(written.only_by_owner(), "setuid is no write bit");

        std::fs::hard_link(&stop, t.path().join("other")).expect("link");
        let (_, written) = p.read_with_owner().expect("read").expect("present");
        assert_eq!(written.links, 2, "two names");
        assert!(
            !written.only_by_owner(),
            "a file with two names may have been written through the other"
        );
    }

    /// Starts `sleep` with exactly the environment `vars`, so its `/proc/<pid>/environ` holds
    /// known bytes: a regular file whose `fstat` size (0) says nothing about its length.
    fn sleeper_with_env(vars: &[(&str, &str)]) -> worklane_testkit::Child {
        let mut sleep = Command::new("/bin/sleep");
        sleep.arg("3600").env_clear();
        for (name, value) in vars {
            sleep.env(name, value);
        }
        let child = sleep
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn_gated()
            .expect("spawn sleep");
        // The start returns once exec has closed the child's close-on-exec descriptors, a
        // moment before the new program's environment is in place (until then `environ`
        // reads empty): wait for it.
        let environ = format!("/proc/{}/environ", child.id());
        for _ in 0..2000 {
            if std::fs::read(&environ).is_ok_and(|bytes| !bytes.is_empty()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child
    }

    #[test]
    fn a_file_longer_than_its_size_is_read_to_its_end_within_the_bound() {
        let t = temp();
        let env = Environment::from_process().var("WORKLANE_TEST_ROOT", t.path());
        let small = sleeper_with_env(&[("A", "b"), ("CC", "dd")]);
        let big_value = "x".repeat(70_000);
        let big = sleeper_with_env(&[("BIG", &big_value)]);
        for (name, child) in [("small", &small), ("big", &big)] {
            std::os::unix::fs::symlink(format!("/proc/{}", child.id()), t.path().join(name))
                .expect("symlink to the child's /proc entry");
        }
        let environ = t.path().join("small/environ");
        assert_eq!(
            std::fs::metadata(&environ).expect("stat environ").len(),
            0,
            "procfs reports no size: the read cannot trust fstat"
        );
        let got = worklane_slotfile::read::read_path_in(&env, &environ)
            .expect("read a growing file")
            .expect("present");
        assert_eq!(
            got, b"A=b\0CC=dd\0",
            "read on past the reported size, to the end"
        );
        let err = worklane_slotfile::read::read_path_in(&env, &t.path().join("big/environ"))
            .expect_err("70 000 bytes are over the bound");
        assert!(
            matches!(err, Error::TooLarge { size, .. } if size > worklane_slotfile::MAX_READ),
            "a file that turns out larger than 64 KiB is refused, not cut: {err:?}"
        );
    }
}

mod modified {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};
    use worklane_slotfile::read::Error;

    #[test]
    fn the_mtime_is_read_to_the_millisecond_without_following_links() {
        let t = temp();
        let dir = slots(&t);
        let p = dir.file("budget.json").expect("valid");
        assert_eq!(p.modified_ms().expect("stat"), None, "absent file");
        p.replace(b"{}", RECORD_MODE).expect("replace");
        let at = UNIX_EPOCH + Duration::from_millis(1_764_480_000_123);
        std::fs::File::options()
            .write(true)
            .open(t.path().join("budget.json"))
            .expect("open")
            .set_modified(at)
            .expect("set mtime");
        assert_eq!(p.modified_ms().expect("stat"), Some(1_764_480_000_123));
        p.replace(b"{\"n\":1}", RECORD_MODE).expect("replace again");
        let now = p.modified_ms().expect("stat").expect("present");
        assert!(now > 1_764_480_000_123, "a replace gives a new mtime");

        std::os::unix::fs::symlink(t.path().join("budget.json"), t.path().join("link"))
            .expect("symlink");
        let err = dir
            .file("link")
            .expect("valid")
            .modified_ms()
            .expect_err("a symlink is refused");
        assert!(matches!(err, Error::Symlink { .. }), "got {err:?}");
        std::fs::create_dir(t.path().join("sub")).expect("mkdir");
        let err = dir
            .file("sub")
            .expect("valid")
            .modified_ms()
            .expect_err("a directory is refused");
        assert!(
            matches!(
                err,
                Error::NotRegular {
                    kind: "directory",
                    ..
                }
            ),
            "got {err:?}"
        );
    }
}

mod write {
    use super::*;

    #[test]
    fn a_log_is_created_new_for_appending_with_its_mode_and_never_inherited() {
        use std::io::{Seek, Write};
        use std::os::unix::fs::PermissionsExt;
        let t = temp();
        let dir = slots(&t);
        let log = dir.file("queue-a-1.log").expect("valid");
        let fd = log.create_log(0o640).expect("create the log");
        let flags = rustix::io::fcntl_getfd(&fd).expect("fd flags");
        assert!(
            flags.contains(rustix::io::FdFlags::CLOEXEC),
            "close-on-exec"
        );
        let mut file = std::fs::File::from(fd);
        file.write_all(b"one\n").expect("write");
        file.rewind().expect("seek to the start");
        file.write_all(b"two\n").expect("write again");
        drop(file);
        let path = t.path().join("queue-a-1.log");
        assert_eq!(
            std::fs::read(&path).expect("read"),
            b"one\ntwo\n",
            "appended, not overwritten"
        );
        let meta = std::fs::metadata(&path).expect("stat");
        assert_eq!(
            meta.permissions().mode() & 0o7777,
            0o640,
            "its mode exactly"
        );
        let again = log
            .create_log(0o640)
            .expect_err("an existing log is not reused");
        assert!(again.to_string().contains("queue-a-1.log"), "{again}");
        std::os::unix::fs::symlink(t.path().join("target"), t.path().join("queue-a-2.log"))
            .expect("symlink");
        dir.file("queue-a-2.log")
            .expect("valid")
            .create_log(0o640)
            .expect_err("never through a link");
        assert!(
            !t.path().join("target").exists(),
            "nothing made at the link's target"
        );
    }

    #[test]
    fn replace_writes_whole_files_with_exact_modes() {
        let t = temp();
        let p = slots(&t).file("config.json").expect("valid");
        p.replace(b"one", 0o660).expect("replace");
        p.replace(b"two", 0o640).expect("replace again");
        assert_eq!(
            std::fs::read(t.path().join("config.json")).expect("read"),
            b"two"
        );
        let mode = std::fs::metadata(t.path().join("config.json"))
            .expect("stat")
            .mode();
        assert_eq!(mode & 0o7777, 0o640, "the last replace's mode");
        assert_eq!(names_in(t.path()), ["config.json"], "no temp left behind");
    }

    /// `rewrite` (lock records): as `replace` for every reader, whether it exchanges the new
    /// file with the old one (Linux) or renames over it; a reader that opened the old file
    /// keeps reading the old bytes, and nothing is left under a temp name.
    #[test]
    fn rewrite_replaces_whole_records_creates_missing_ones_and_leaves_no_temp() {
        let t = temp();
        let p = slots(&t).file("agent-0.lock").expect("valid");
        p.rewrite(b"first\n", RECORD_MODE)
            .expect("a missing file is written (nothing to exchange with)");
        let old = std::fs::File::open(t.path().join("agent-0.lock")).expect("open the old");
        p.rewrite(b"second\n", 0o640).expect("rewrite");
        assert_eq!(p.read().expect("read").as_deref(), Some(&b"second\n"[..]));
        let meta = std::fs::metadata(t.path().join("agent-0.lock")).expect("stat");
        assert_eq!(meta.mode() & 0o7777, 0o640, "the rewrite's mode");
        assert_eq!(meta.nlink(), 1, "one name");
        assert_eq!(
            std::io::read_to_string(old).expect("read the old"),
            "first\n",
            "the old file is whole"
        );
        assert_eq!(
            names_in(t.path()),
            ["agent-0.lock"],
            "the old bytes went with the temp name"
        );
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"precious").expect("write");
        std::os::unix::fs::symlink(&victim, t.path().join("STOP")).expect("symlink");
        let link = slots(&t).file("STOP").expect("valid");
        link.rewrite(b"x", RECORD_MODE).expect("rewrite a link");
        assert_eq!(std::fs::read(&victim).expect("read"), b"precious");
        assert!(
            std::fs::symlink_metadata(t.path().join("STOP"))
                .expect("stat")
                .is_file(),
            "the name now holds a regular file"
        );
        assert_eq!(names_in(t.path()), ["STOP", "agent-0.lock", "victim"]);
    }

    /// What `rewrite` is for: on ext4, a rename over a file that holds data starts writing the
    /// new data back at once (`auto_da_alloc`: its blocks are allocated), which the release's
    /// unlink then waits for; a record rewritten by exchange stays in delayed allocation.
    /// `filefrag -v` shows which. Checked where the temp directory (`TMPDIR`) is on ext4 and
    /// `filefrag` (e2fsprogs) is installed; `replace` is the control that the check can see a flush.
    #[test]
    fn a_rewritten_record_is_not_written_back_at_once_on_ext4() {
        let t = temp();
        let on_ext4 = rustix::fs::statfs(t.path()).is_ok_and(|s| s.f_type == 0xEF53);
        let delalloc = |name: &str| -> Option<bool> {
            let out = std::process::Command::new("filefrag")
                .arg("-v")
                .arg(t.path().join(name))
                .output_gated()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).contains("delalloc"))
        };
        let dir = slots(&t);
        let replaced = dir.file("config.json").expect("valid");
        assert_eq!(
            replaced.publish(b"{}\n", RECORD_MODE).expect("publish"),
            Publish::Published
        );
        replaced
            .replace(b"{\"a\":1}\n", RECORD_MODE)
            .expect("replace");
        let Some(replace_delalloc) = delalloc("config.json").filter(|_| on_ext4) else {
            eprintln!(
                "skipped: {} is not on ext4, or filefrag is missing",
                t.path().display()
            );
            return;
        };
        assert!(
            !replace_delalloc,
            "the control: ext4 allocated a renamed-over file's blocks"
        );
        let record = dir.file("agent-0.lock").expect("valid");
        assert_eq!(
            record.publish(b"first\n", RECORD_MODE).expect("publish"),
            Publish::Published
        );
        record.rewrite(b"second\n", RECORD_MODE).expect("rewrite");
        assert_eq!(
            delalloc("agent-0.lock"),
            Some(true),
            "a rewritten record is not written back at the rewrite"
        );
        assert_eq!(
            record.read().expect("read").as_deref(),
            Some(&b"second\n"[..])
        );
    }

    /// A directory under a record's name: `rewrite` fails as `replace` does (a rename over a
    /// directory is refused), whether the directory was there before or took the name at the
    /// moment of the exchange (which, unlike a rename, swaps a file with a directory), and it
    /// stays under its name with what it holds; nothing is left under a temp name, where no
    /// sweep would ever remove a directory.
    #[test]
    fn rewrite_over_a_directory_fails_as_replace_does_and_leaves_it_in_place() {
        let t = temp();
        let dir = slots(&t);
        let record = t.path().join("agent-0.lock");
        std::fs::create_dir(&record).expect("mkdir");
        std::fs::write(record.join("inside"), b"kept").expect("write");
        let p = dir.file("agent-0.lock").expect("valid");
        let replaced = p.replace(b"x", RECORD_MODE).expect_err("replace refuses");
        let rewritten = p.rewrite(b"x", RECORD_MODE).expect_err("rewrite refuses");
        assert_eq!(
            rewritten.source.raw_os_error(),
            replaced.source.raw_os_error(),
            "the same failure: {rewritten:?} / {replaced:?}"
        );
        assert!(record.is_dir(), "the directory keeps its name");
        assert_eq!(std::fs::read(record.join("inside")).expect("read"), b"kept");
        assert_eq!(names_in(t.path()), ["agent-0.lock"], "no temp left");

        let q = dir.file("agent-1.lock").expect("valid");
        q.rewrite(b"first\n", RECORD_MODE).expect("a record");
        let other = t.path().join("agent-1.lock");
        let err = q
            .rewrite_observed(b"second\n", RECORD_MODE, &mut |step| {
                if step == worklane_slotfile::Step::TempWritten {
                    std::fs::remove_file(&other).expect("remove the record");
                    std::fs::create_dir(&other).expect("a directory in its place");
                }
            })
            .expect_err("a directory at the exchange is refused");
        assert_eq!(err.source.raw_os_error(), replaced.source.raw_os_error());
        assert!(other.is_dir(), "the directory keeps its name");
        assert_eq!(
            names_in(t.path()),
            ["agent-0.lock", "agent-1.lock"],
            "no temp left"
        );
    }

    #[test]
    fn replace_over_a_read_only_file_works() {
        let t = temp();
        let p = slots(&t).file("STOP").expect("valid");
        p.replace(b"old", 0o444).expect("replace");
        p.replace(b"new", 0o444)
            .expect("a 0444 file is replaced by rename");
        assert_eq!(p.read().expect("read").as_deref(), Some(&b"new"[..]));
    }

    #[test]
    fn replace_through_a_symlink_replaces_the_link_not_its_target() {
        let t = temp();
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"precious").expect("write");
        std::os::unix::fs::symlink(&victim, t.path().join("STOP")).expect("symlink");
        slots(&t)
            .file("STOP")
            .expect("valid")
            .replace(b"x", 0o644)
            .expect("replace");
        assert_eq!(
            std::fs::read(&victim).expect("read"),
            b"precious",
            "target untouched"
        );
        assert!(
            std::fs::symlink_metadata(t.path().join("STOP"))
                .expect("stat")
                .is_file(),
            "the name now holds a regular file"
        );
    }

    #[test]
    fn publish_is_exclusive_and_leaves_no_temp() {
        let t = temp();
        let p = slots(&t).file("agent-0.lock").expect("valid");
        assert_eq!(
            p.publish(b"first", RECORD_MODE).expect("publish"),
            Publish::Published
        );
        assert_eq!(
            p.publish(b"second", RECORD_MODE).expect("publish"),
            Publish::AlreadyExists
        );
        assert_eq!(
            p.read().expect("read").as_deref(),
            Some(&b"first"[..]),
            "kept"
        );
        assert_eq!(names_in(t.path()), ["agent-0.lock"], "no temp left behind");
    }

    #[test]
    fn a_stale_read_only_temp_never_blocks_a_write() {
        let t = temp();
        let p = slots(&t).file("STOP").expect("valid");
        let stale = t.path().join(".STOP.tmp-0000000000000000");
        std::fs::write(&stale, b"stale").expect("plant");
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        p.replace(b"x", 0o644)
            .expect("replace despite the stale temp");
        assert_eq!(
            p.publish(b"y", 0o644).expect("publish"),
            Publish::AlreadyExists
        );
        assert_eq!(p.read().expect("read").as_deref(), Some(&b"x"[..]));
    }

    fn mode_under_umask(umask: &str, op: &str, want: &str) -> u32 {
        let t = temp();
        let script = format!("umask {umask}; exec \"$0\" \"$@\"");
        let mut child = Command::new("sh")
            .args(["-c", &script, env!("CARGO_BIN_EXE_slot-writer")])
            .args([op, path_str(t.path()), "f", "x", want])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn_gated()
            .expect("spawn");
        drop(child.stdin.take());
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{op} under umask {umask} must succeed"
        );
        std::fs::metadata(t.path().join("f"))
            .expect("written")
            .mode()
            & 0o7777
    }

    #[test]
    fn modes_are_exact_under_any_umask() {
        for umask in ["077", "022", "000", "777"] {
            for (op, want) in [("replace", 0o660), ("publish", 0o644), ("replace", 0o444)] {
                let got = mode_under_umask(umask, op, &format!("{want:o}"));
                assert_eq!(got, want, "{op} under umask {umask}: {got:o} != {want:o}");
            }
        }
    }

    /// A private directory is made 0700 whatever the umask, even one that takes the owner's
    /// own bits (`mkdir`'s mode is masked; the mode is set again through the descriptor).
    #[test]
    fn a_private_directory_is_made_0700_under_any_umask() {
        for umask in ["077", "022", "000", "277"] {
            let t = temp();
            let dir = t.path().join("state");
            let script = format!("umask {umask}; exec \"$0\" \"$@\"");
            let out = Command::new("sh")
                .args(["-c", &script, env!("CARGO_BIN_EXE_slot-writer")])
                .args(["private", path_str(&dir)])
                .output_gated()
                .expect("run the writer");
            let said = String::from_utf8_lossy(&out.stdout);
            assert_eq!(said.trim(), "ok", "umask {umask}");
            let mode = std::fs::metadata(&dir).expect("made").mode() & 0o7777;
            assert_eq!(mode, 0o700, "umask {umask}: {mode:o}");
        }
    }

    /// Runs the writer under `ulimit -f 0` with SIGXFSZ ignored, so its temp file is created
    /// but every byte written to it fails with EFBIG; returns what the writer printed.
    fn writer_that_cannot_write(op: &str, dir: &Path, name: &str) -> String {
        let script = "trap '' XFSZ; ulimit -f 0; exec \"$0\" \"$@\"";
        let out = Command::new("sh")
            .args(["-c", script, env!("CARGO_BIN_EXE_slot-writer")])
            .args([op, path_str(dir), name, "new", "644"])
            .stdin(Stdio::null())
            .output_gated()
            .expect("run the writer");
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_owned()
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temp() {
        let t = temp();
        let dir = slots(&t);
        dir.file("STOP")
            .expect("valid")
            .replace(b"old", 0o644)
            .expect("seed");
        for (op, name) in [("replace", "STOP"), ("publish", "agent-0.lock")] {
            let out = writer_that_cannot_write(op, t.path(), name);
            assert!(
                out.starts_with("error: cannot write a temp file for"),
                "{op} must fail at the write and say so: {out}"
            );
            assert!(
                out.contains(path_str(&t.path().join(name))),
                "{op}: the error names the file: {out}"
            );
        }
        assert_eq!(
            dir.file("STOP")
                .expect("valid")
                .read()
                .expect("read")
                .as_deref(),
            Some(&b"old"[..]),
            "a failed replace keeps the old contents"
        );
        assert_eq!(
            names_in(t.path()),
            ["STOP"],
            "a failed write removes its temp file and publishes nothing"
        );
    }

    #[test]
    fn a_writer_killed_between_write_and_rename_leaves_the_old_contents() {
        let t = temp();
        let p = slots(&t).file("STOP").expect("valid");
        p.replace(b"old", 0o644).expect("seed");
        let mut child = writer()
            .args(["replace-hang", path_str(t.path()), "STOP", "new"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn_gated()
            .expect("spawn");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("stdout"))
            .read_line(&mut line)
            .expect("read");
        assert_eq!(
            line.trim(),
            "written",
            "the child reached the step before rename"
        );
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        assert_eq!(
            p.read().expect("read").as_deref(),
            Some(&b"old"[..]),
            "old contents"
        );
        let temps: Vec<String> = names_in(t.path())
            .into_iter()
            .filter(|n| n.starts_with(".STOP.tmp-"))
            .collect();
        assert_eq!(temps.len(), 1, "the crash left exactly one temp: {temps:?}");
        let leftover = t.path().join(&temps[0]);
        assert_eq!(
            std::fs::read(&leftover).expect("temp"),
            b"new",
            "complete temp"
        );
        p.replace(b"after", 0o644)
            .expect("a later write is not blocked");
        assert_eq!(p.read().expect("read").as_deref(), Some(&b"after"[..]));
    }

    /// What the descriptors of a child started now point at: `ls -l` of its own fd directory.
    fn descriptors_of_a_child() -> String {
        let out = Command::new("ls")
            .args(["-l", "/proc/self/fd/"])
            .output_gated()
            .expect("run ls");
        assert!(out.status.success(), "ls lists its descriptors");
        String::from_utf8(out.stdout).expect("utf-8 paths")
    }

    #[test]
    fn a_child_started_during_a_write_inherits_neither_the_temp_file_nor_the_directory() {
        let t = temp();
        let dir = slots(&t);
        for op in ["replace", "publish"] {
            let p = dir.file(&format!("{op}.lock")).expect("valid");
            let mut seen = None;
            let mut at = |step| {
                if step == worklane_slotfile::Step::TempWritten {
                    seen = Some(descriptors_of_a_child());
                }
            };
            match op {
                "replace" => p
                    .replace_observed(b"x", RECORD_MODE, &mut at)
                    .expect("replace"),
                _ => {
                    let published = p
                        .publish_observed(b"x", RECORD_MODE, &mut at)
                        .expect("publish");
                    assert_eq!(published, Publish::Published, "a new name");
                }
            }
            let seen = seen.expect("the temp file was written");
            assert!(
                seen.lines().any(|l| l.ends_with(" -> /dev/null")),
                "{op}: the listing works (the child's stdin is /dev/null): {seen}"
            );
            assert!(
                !seen.contains(path_str(t.path())),
                "{op}: a child holds no descriptor of the slot directory or its temp file (which \
                 would keep the temp's lock after the writer ended): {seen}"
            );
        }
    }

    #[test]
    fn publish_is_exclusive_under_a_race_of_12_processes() {
        let t = temp();
        let mut children: Vec<_> = (0..12)
            .map(|i| {
                writer()
                    .args([
                        "publish",
                        path_str(t.path()),
                        "agent-0.lock",
                        &format!("w{i}"),
                        "644",
                    ])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn_gated()
                    .expect("spawn")
            })
            .collect();
        // Start barrier: every child is running and waiting on its stdin.
        for c in &mut children {
            c.stdin
                .as_mut()
                .expect("stdin")
                .write_all(b"go\n")
                .expect("go");
        }
        let outs: Vec<String> = children
            .into_iter()
            .map(|c| {
                let out = c.wait_with_output().expect("wait");
                assert!(out.status.success(), "writer must succeed");
                String::from_utf8(out.stdout)
                    .expect("utf-8")
                    .trim()
                    .to_owned()
            })
            .collect();
        let winners: Vec<usize> = (0..outs.len())
            .filter(|&i| outs[i] == "published")
            .collect();
        assert_eq!(winners.len(), 1, "exactly one winner: {outs:?}");
        assert_eq!(
            outs.iter().filter(|o| *o == "exists").count(),
            11,
            "every other writer saw AlreadyExists: {outs:?}"
        );
        let content = std::fs::read(t.path().join("agent-0.lock")).expect("lock");
        assert_eq!(
            content,
            format!("w{}", winners[0]).as_bytes(),
            "the winner's bytes"
        );
        assert_eq!(
            names_in(t.path()),
            ["agent-0.lock"],
            "no temp left by any writer"
        );
    }
}

mod remove {
    use super::*;

    #[test]
    fn rename_moves_within_the_directory_and_refuses_guard_names() {
        let t = temp();
        let dir = slots(&t);
        let marker = dir.file("a.lock.epoch.1").expect("valid");
        assert_eq!(
            marker.publish(b"", 0o660).expect("publish"),
            Publish::Published
        );
        let moved = marker.rename("a.lock.epoch.2").expect("rename");
        assert_eq!(moved.name(), "a.lock.epoch.2");
        assert_eq!(
            names_in(t.path()),
            ["a.lock.epoch.2"],
            "one rename, no copy"
        );
        for bad in [".a.lock.flock", "a.FLOCK", "../x", ""] {
            assert!(moved.rename(bad).is_err(), "{bad:?} must be refused");
        }
        assert_eq!(
            names_in(t.path()),
            ["a.lock.epoch.2"],
            "refusals change nothing"
        );
    }

    #[test]
    fn remove_if_unchanged_keeps_a_changed_file() {
        let t = temp();
        let p = slots(&t).file("agent-0.lock").expect("valid");
        assert_eq!(
            p.remove_if_unchanged(b"mine").expect("remove"),
            Removal::Absent
        );
        p.replace(b"theirs", RECORD_MODE).expect("write");
        assert_eq!(
            p.remove_if_unchanged(b"mine").expect("remove"),
            Removal::Changed
        );
        assert_eq!(
            p.read().expect("read").as_deref(),
            Some(&b"theirs"[..]),
            "kept"
        );
        assert_eq!(
            p.remove_if_unchanged(b"their").expect("remove"),
            Removal::Changed,
            "prefix"
        );
        assert_eq!(
            p.remove_if_unchanged(b"theirs").expect("remove"),
            Removal::Removed
        );
        assert_eq!(p.read().expect("read"), None, "gone");
    }

    #[test]
    fn remove_if_unchanged_never_follows_a_link_nor_blocks_on_a_fifo() {
        let t = temp();
        let dir = slots(&t);
        let mine = br#"{"pid":1}"#;
        // A link whose target holds exactly the expected bytes, a FIFO nobody writes to, and a
        // directory: none of them is the record, so each is kept.
        std::fs::write(t.path().join("target"), mine).expect("write the link target");
        std::os::unix::fs::symlink(t.path().join("target"), t.path().join("agent-0.lock"))
            .expect("symlink");
        assert!(
            Command::new("mkfifo")
                .arg(t.path().join("agent-1.lock"))
                .status_gated()
                .expect("mkfifo")
                .success(),
            "mkfifo"
        );
        std::fs::create_dir(t.path().join("agent-2.lock")).expect("mkdir");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for name in ["agent-0.lock", "agent-1.lock", "agent-2.lock"] {
                let got = dir
                    .file(name)
                    .expect("valid")
                    .remove_if_unchanged(mine)
                    .map_err(|e| e.to_string());
                let _ = tx.send((name, got));
            }
        });
        for _ in 0..3 {
            // A watchdog, not a timing assertion: a blocking open of a FIFO never returns.
            let (name, got) = rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("remove_if_unchanged must return instead of blocking");
            assert_eq!(
                got,
                Ok(Removal::Changed),
                "{name} is not a regular file holding our bytes and must be kept"
            );
        }
        assert_eq!(
            names_in(t.path()),
            ["agent-0.lock", "agent-1.lock", "agent-2.lock", "target"],
            "the link, the FIFO, the directory and the link's target are all kept"
        );
        assert_eq!(
            std::fs::read(t.path().join("target")).expect("read target"),
            mine,
            "the link's target is untouched"
        );
    }

    #[test]
    fn remove_reports_whether_there_was_a_file() {
        let t = temp();
        let p = slots(&t).file("STOP").expect("valid");
        assert!(!p.remove().expect("remove"), "nothing to remove");
        p.replace(b"{}", 0o644).expect("write");
        assert!(p.remove().expect("remove"), "removed");
        assert!(names_in(t.path()).is_empty());
    }

    #[test]
    fn remove_entry_removes_any_file_and_an_empty_directory_but_not_a_full_one() {
        let t = temp();
        let dir = slots(&t);
        let p = dir.file("STOP").expect("valid");
        assert!(!p.remove_entry().expect("remove"), "nothing to remove");
        std::fs::create_dir(t.path().join("STOP")).expect("mkdir");
        assert!(
            p.remove().is_err(),
            "remove never takes a directory: it is an unlink"
        );
        assert!(p.remove_entry().expect("an empty directory"), "removed");
        assert!(names_in(t.path()).is_empty());
        std::os::unix::fs::symlink(t.path().join("elsewhere"), t.path().join("STOP"))
            .expect("symlink");
        assert!(p.remove_entry().expect("a link"), "the link is removed");
        std::fs::create_dir(t.path().join("STOP")).expect("mkdir");
        std::fs::write(t.path().join("STOP/kept"), b"x").expect("write");
        let err = p
            .remove_entry()
            .expect_err("a directory with a file in it stays");
        assert!(
            err.to_string().contains("STOP"),
            "the error names the file: {err}"
        );
        assert!(
            t.path().join("STOP/kept").exists(),
            "nothing inside is removed"
        );
    }
}

/// What ordinary listings skip: guards, temp files, the hidden names a tool reports, and the
/// sweep that removes what killed writers left.
mod inspect {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};
    use worklane_slotfile::{Hidden, TEMP_MIN_AGE_MS};
    use worklane_testkit::gate;

    /// A whole second since the epoch: mtimes are compared in whole seconds.
    const T: u64 = 1_764_480_000;

    fn set_mtime(path: &Path, secs: u64) {
        std::fs::File::open(path)
            .expect("open to set the mtime")
            .set_modified(UNIX_EPOCH + Duration::from_secs(secs))
            .expect("set mtime");
    }

    fn mkfifo(path: &Path) {
        assert!(
            Command::new("mkfifo")
                .arg(path)
                .status_gated()
                .expect("mkfifo")
                .success(),
            "mkfifo {}",
            path.display()
        );
    }

    #[test]
    fn hidden_names_are_listed_with_kind_size_age_and_mode() {
        let t = temp();
        let dir = slots(&t);
        let _guard = dir
            .file("agent-0.lock")
            .expect("valid")
            .try_guard()
            .expect("guard")
            .expect("free");
        dir.file("STOP")
            .expect("valid")
            .replace(b"{}", RECORD_MODE)
            .expect("an ordinary file");
        let temp_file = t.path().join(".STOP.tmp-0123456789abcdef");
        std::fs::write(&temp_file, b"12345").expect("write");
        std::fs::set_permissions(&temp_file, std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        set_mtime(&temp_file, T);
        let stray = t.path().join(".stray");
        std::fs::create_dir(&stray).expect("mkdir");
        std::fs::set_permissions(&stray, std::fs::Permissions::from_mode(0o750)).expect("chmod");

        let names = [
            ".STOP.tmp-0123456789abcdef",
            ".agent-0.lock.flock",
            ".stray",
        ];
        assert_eq!(
            dir.hidden_names().expect("hidden names"),
            names,
            "every name with a leading dot, sorted, without `.` and `..`"
        );
        let hidden = dir.hidden().expect("hidden");
        assert_eq!(
            hidden.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
            names,
            "the same names"
        );
        assert_eq!(
            hidden[0],
            Hidden {
                name: names[0].to_owned(),
                kind: "regular file",
                size: 5,
                modified_ms: T * 1000,
                mode: 0o600,
            },
            "a temp file as lstat shows it"
        );
        assert!(hidden[0].is_regular(), "a temp file is a regular file");
        assert_eq!(
            (hidden[1].kind, hidden[1].size, hidden[1].mode),
            ("regular file", 0, worklane_guard::GUARD_MODE),
            "the guard: empty, read-only"
        );
        assert_eq!(hidden[2].kind, "directory", "the stray directory");
        assert_eq!(hidden[2].mode, 0o750, "its permission bits alone");
        assert!(!hidden[2].is_regular(), "a directory is not a regular file");
    }

    #[test]
    fn guard_id_names_the_guard_inode_without_taking_it() {
        let t = temp();
        let dir = slots(&t);
        let lock = dir.file("agent-0.lock").expect("valid");
        assert_eq!(lock.guard_id(), None, "no guard yet");
        let guard = lock.try_guard().expect("guard").expect("free");
        let meta = std::fs::symlink_metadata(t.path().join(".agent-0.lock.flock")).expect("stat");
        let id = worklane_guard::FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        assert_eq!(lock.guard_id(), Some(id), "device and inode of the guard");
        assert_eq!(guard.file_id(), id, "the inode the guard holds");
        assert!(
            lock.try_guard().expect("guard").is_none(),
            "still held: guard_id neither took nor released it"
        );
        std::fs::create_dir(t.path().join(".agent-1.lock.flock")).expect("mkdir");
        assert_eq!(
            dir.file("agent-1.lock").expect("valid").guard_id(),
            None,
            "a directory at the guard's name is no guard"
        );
        gate::quietly(|| drop(guard));
    }

    #[test]
    fn sweep_removes_old_temps_nobody_holds_and_nothing_else() {
        let t = temp();
        let dir = slots(&t);
        let at = |name: &str| t.path().join(name);
        let guard = dir
            .file("agent-0.lock")
            .expect("valid")
            .try_guard()
            .expect("guard")
            .expect("free");
        dir.file("STOP")
            .expect("valid")
            .replace(b"{}", RECORD_MODE)
            .expect("an ordinary file");
        let old = ".STOP.tmp-0000000000000001";
        let young = ".STOP.tmp-0000000000000002";
        let held = ".STOP.tmp-0000000000000003";
        let link = ".STOP.tmp-0000000000000004";
        let fifo = ".STOP.tmp-0000000000000005";
        let subdir = ".STOP.tmp-0000000000000006";
        let alias = ".agent-1.lock.flock.tmp-0000000000000007";
        let odd = ".STOP.tmp-000000000000000g";
        for name in [old, young, held, alias, odd] {
            std::fs::write(at(name), b"x").expect("write");
            set_mtime(&at(name), T);
        }
        set_mtime(&at(young), T + 1);
        // A writer still at work holds its temp file's lock.
        let writer = std::fs::File::open(at(held)).expect("open");
        #[allow(
            clippy::disallowed_methods,
            reason = "plays slotfile's own writer, which locks its temp file"
        )]
        rustix::fs::flock(
            &writer,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        )
        .expect("lock");
        // A link named as a temp, to the held file: never followed.
        std::os::unix::fs::symlink(at(held), at(link)).expect("symlink");
        mkfifo(&at(fifo));
        std::fs::create_dir(at(subdir)).expect("mkdir");
        let everything = names_in(t.path());

        let swept = dir
            .sweep_temps(T * 1000 + TEMP_MIN_AGE_MS - 1, TEMP_MIN_AGE_MS)
            .expect("sweep");
        assert_eq!(
            (swept.removed.len(), swept.kept.len()),
            (0, 0),
            "a millisecond short of a minute, nothing is old: {swept:?}"
        );
        assert_eq!(names_in(t.path()), everything, "nothing removed");

        // On a thread, with a watchdog: an open that blocks on the FIFO never returns.
        let (tx, rx) = std::sync::mpsc::channel();
        let sweeper = dir.clone();
        std::thread::spawn(move || {
            let _ = tx.send(sweeper.sweep_temps(T * 1000 + TEMP_MIN_AGE_MS, TEMP_MIN_AGE_MS));
        });
        let swept = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a sweep must return instead of blocking on a FIFO")
            .expect("sweep");
        assert_eq!(
            swept.removed,
            [old, alias],
            "exactly a minute old and unheld: the temp file and the guard's temp alias"
        );
        assert_eq!(
            swept.kept,
            [(held.to_owned(), "its writer still holds it".to_owned())],
            "the held temp is kept and said so; the link, FIFO and directory are not temp files"
        );
        let mut left = everything.clone();
        left.retain(|n| n != old && n != alias);
        assert_eq!(names_in(t.path()), left, "nothing else removed");

        gate::quietly(|| drop(writer));
        let swept = dir
            .sweep_temps(T * 1000 + 2 * TEMP_MIN_AGE_MS, TEMP_MIN_AGE_MS)
            .expect("sweep");
        assert_eq!(
            (swept.removed, swept.kept),
            (vec![young.to_owned(), held.to_owned()], vec![]),
            "once old and released, both go"
        );
        assert!(at(link).symlink_metadata().is_ok(), "the link is kept");
        assert!(at(odd).exists(), "a name that is not a temp name is kept");
        assert!(at(".agent-0.lock.flock").exists(), "the guard is kept");
        assert!(at("STOP").exists(), "the ordinary file is kept");
        gate::quietly(|| drop(guard));
    }

    /// `rewrite` beside a sweeper: the exchange leaves the old record, unlocked and with its
    /// old mtime, under the temp name until the writer removes it, and the sweeper may take
    /// it for a dead writer's and remove it first. Every rewrite still succeeds, a reader
    /// always finds one whole record, the writer's own temp files (young, locked) are never
    /// taken, and nothing is left under a temp name.
    #[test]
    fn rewrite_beside_a_sweeper_loses_nothing_and_leaves_no_temp() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let t = temp();
        let dir = slots(&t);
        let record = t.path().join("agent-0.lock");
        let p = dir.file("agent-0.lock").expect("valid");
        p.rewrite(b"record 0\n", RECORD_MODE).expect("first");
        let now_ms = || {
            u64::try_from(
                std::time::SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .expect("after 1970")
                    .as_millis(),
            )
            .expect("ms")
        };
        let done = Arc::new(AtomicBool::new(false));
        let sweeper = {
            let (dir, done) = (dir.clone(), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut removed = 0;
                while !done.load(Ordering::SeqCst) {
                    let swept = dir.sweep_temps(now_ms(), TEMP_MIN_AGE_MS).expect("sweep");
                    removed += swept.removed.len();
                }
                removed
            })
        };
        let reader = {
            let (p, done) = (p.clone(), Arc::clone(&done));
            std::thread::spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    let bytes = p.read().expect("read").expect("never absent");
                    let text = String::from_utf8(bytes).expect("utf-8");
                    assert!(
                        text.starts_with("record ") && text.ends_with('\n'),
                        "a whole record: {text:?}"
                    );
                }
            })
        };
        for i in 1..=2000 {
            // The record about to be exchanged away is a day old: once under the temp name it
            // is a dead writer's leftover to the sweeper.
            set_mtime(&record, T);
            p.rewrite(format!("record {i}\n").as_bytes(), RECORD_MODE)
                .expect("rewrite");
        }
        done.store(true, Ordering::SeqCst);
        reader.join().expect("the reader");
        let removed = sweeper.join().expect("the sweeper");
        assert_eq!(
            p.read().expect("read").as_deref(),
            Some(&b"record 2000\n"[..])
        );
        assert_eq!(
            names_in(t.path()),
            ["agent-0.lock"],
            "no temp left ({removed} old records removed by the sweeper)"
        );
    }
}

mod stream {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;
    use worklane_slotfile::read::Error;

    fn id_of(path: &Path) -> (u64, u64) {
        let meta = std::fs::symlink_metadata(path).expect("stat");
        (meta.dev(), meta.ino())
    }

    #[test]
    fn meta_is_a_regular_file_s_inode_and_size_never_a_link_s() {
        let t = temp();
        let dir = slots(&t);
        let p = dir.file("journal.jsonl").expect("name");
        assert_eq!(p.meta().expect("meta"), None, "none there");
        std::fs::write(t.path().join("journal.jsonl"), b"12345").expect("write");
        let meta = p.meta().expect("meta").expect("there");
        assert_eq!(meta.size, 5);
        assert_eq!(
            (meta.id.dev, meta.id.ino),
            id_of(&t.path().join("journal.jsonl"))
        );
        std::fs::remove_file(t.path().join("journal.jsonl")).expect("rm");
        symlink("/etc/passwd", t.path().join("journal.jsonl")).expect("symlink");
        assert!(matches!(p.meta(), Err(Error::Symlink { .. })), "a link");
        std::fs::remove_file(t.path().join("journal.jsonl")).expect("rm");
        std::fs::create_dir(t.path().join("journal.jsonl")).expect("mkdir");
        assert!(
            matches!(p.meta(), Err(Error::NotRegular { .. })),
            "a directory"
        );
    }

    #[test]
    fn a_stream_is_opened_with_its_meta_from_the_same_descriptor() {
        let t = temp();
        let dir = slots(&t);
        let p = dir.file("journal.jsonl").expect("name");
        assert!(p.open_stream().expect("open").is_none(), "none there");
        let body = vec![b'x'; 100_000];
        std::fs::write(t.path().join("journal.jsonl"), &body).expect("write");
        let (fd, meta) = p.open_stream().expect("open").expect("there");
        assert_eq!(meta.size, 100_000, "larger than a record read allows");
        assert_eq!(
            (meta.id.dev, meta.id.ino),
            id_of(&t.path().join("journal.jsonl"))
        );
        assert_eq!(worklane_slotfile::meta_of_fd(&fd).expect("fstat"), meta);
        let mut read = Vec::new();
        std::fs::File::from(fd)
            .read_to_end(&mut read)
            .expect("read");
        assert_eq!(read, body);
        std::fs::remove_file(t.path().join("journal.jsonl")).expect("rm");
        symlink("/etc/passwd", t.path().join("journal.jsonl")).expect("symlink");
        assert!(
            matches!(p.open_stream(), Err(Error::Symlink { .. })),
            "a link is not followed"
        );
        std::fs::remove_file(t.path().join("journal.jsonl")).expect("rm");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            t.path().join("journal.jsonl"),
            rustix::fs::Mode::from_bits_truncate(0o600),
        )
        .expect("fifo");
        assert!(
            matches!(p.open_stream(), Err(Error::NotRegular { .. })),
            "a FIFO is refused without blocking"
        );
    }
}

mod resolution {
    use super::*;
    use worklane_slotfile::{Layout, resolve};

    /// An injected root standing for `/`, inside a temp dir, marked as this test's root.
    fn root() -> (tempfile::TempDir, PathBuf) {
        let t = temp();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("var/tmp")).expect("mkdir");
        (t, root)
    }

    fn env(root: &Path) -> Environment {
        Environment::with_root(root).var("WORKLANE_TEST_ROOT", root)
    }

    #[test]
    fn the_default_is_var_tmp_with_config_inside() {
        let (_t, root) = root();
        let l = env(&root).locate().expect("locate");
        assert_eq!(l.slot_dir, root.join("var/tmp/agent-slots"));
        assert_eq!(l.config, root.join("var/tmp/agent-slots/config.json"));
        assert_eq!(l.drain_dir, l.slot_dir, "drain flag lives in the slot dir");
        assert_eq!(l.layout, Layout::Default);
    }

    #[test]
    fn the_system_directory_wins_when_it_exists() {
        let (_t, root) = root();
        std::fs::create_dir_all(root.join("var/lib/worklane/agent-slots")).expect("mkdir");
        let l = env(&root).locate().expect("locate");
        assert_eq!(l.slot_dir, root.join("var/lib/worklane/agent-slots"));
        assert_eq!(l.layout, Layout::System);
        assert_eq!(
            l.config,
            root.join("var/lib/worklane/agent-slots/config.json"),
            "without /etc/worklane/slots.json the config is in the slot dir"
        );
        assert_eq!(
            l.drain_dir,
            root.join("var/lib/worklane"),
            "root-owned drain flag"
        );
        std::fs::create_dir_all(root.join("etc/worklane")).expect("mkdir");
        std::fs::write(root.join("etc/worklane/slots.json"), b"{}").expect("write");
        let l = env(&root).locate().expect("locate");
        assert_eq!(
            l.config,
            root.join("etc/worklane/slots.json"),
            "system config"
        );
    }

    #[test]
    fn the_system_config_is_ignored_without_the_system_directory() {
        let (_t, root) = root();
        std::fs::create_dir_all(root.join("etc/worklane")).expect("mkdir");
        std::fs::write(root.join("etc/worklane/slots.json"), b"{}").expect("write");
        let l = env(&root).locate().expect("locate");
        assert_eq!(l.config, root.join("var/tmp/agent-slots/config.json"));
    }

    #[test]
    fn variables_win_over_everything() {
        let (_t, root) = root();
        std::fs::create_dir_all(root.join("var/lib/worklane/agent-slots")).expect("mkdir");
        std::fs::create_dir_all(root.join("etc/worklane")).expect("mkdir");
        std::fs::write(root.join("etc/worklane/slots.json"), b"{}").expect("write");
        let l = env(&root)
            .var("AGENT_SLOTS_DIR", root.join("mine"))
            .locate()
            .expect("locate");
        assert_eq!(l.slot_dir, root.join("mine"));
        assert_eq!(l.layout, Layout::FromEnv);
        assert_eq!(
            l.config,
            root.join("mine/config.json"),
            "the env dir's own config"
        );
        let l = env(&root)
            .var("AGENT_SLOTS_DIR", root.join("mine"))
            .var("AGENT_SLOTS_CONFIG", root.join("caps.json"))
            .locate()
            .expect("locate");
        assert_eq!(l.config, root.join("caps.json"));
        let l = env(&root)
            .var("AGENT_SLOTS_CONFIG", root.join("caps.json"))
            .locate()
            .expect("locate");
        assert_eq!(l.slot_dir, root.join("var/lib/worklane/agent-slots"));
        assert_eq!(
            l.config,
            root.join("caps.json"),
            "config variable beats /etc"
        );
    }

    #[test]
    fn relative_variables_are_refused() {
        let (_t, root) = root();
        let err = env(&root)
            .var("AGENT_SLOTS_DIR", "slots")
            .locate()
            .expect_err("relative");
        assert!(matches!(
            err,
            resolve::Error::NotAbsolute {
                var: "AGENT_SLOTS_DIR",
                ..
            }
        ));
        assert!(err.to_string().contains("AGENT_SLOTS_DIR"), "{err}");
    }

    #[test]
    fn resolve_creates_the_directory_and_loads_the_config() {
        let (_t, root) = root();
        let r = SlotDir::resolve_in(&env(&root)).expect("resolve");
        assert_eq!(r.dir.path(), root.join("var/tmp/agent-slots"));
        let meta = std::fs::metadata(root.join("var/tmp/agent-slots")).expect("created");
        assert_eq!(
            meta.mode() & 0o7777,
            0o2770,
            "created 2770 (setgid) whatever the umask"
        );
        assert_eq!(r.config.max_agents, 2, "default cap");
        assert_eq!(r.config.max_test_runs, 2, "default test-run cap");
        std::fs::write(
            root.join("var/tmp/agent-slots/config.json"),
            br#"{"max_agents": 5}"#,
        )
        .expect("write");
        let r = SlotDir::resolve_in(&env(&root)).expect("resolve");
        assert_eq!(r.config.max_agents, 5, "the config file is read");
    }

    #[test]
    fn resolve_dir_finds_and_creates_the_directory_whatever_the_config_says() {
        let (_t, root) = root();
        let caps = root.join("caps.json");
        std::fs::write(&caps, br#"{"max_test_runs": 9}"#).expect("write");
        let e = env(&root).var("AGENT_SLOTS_CONFIG", &caps);
        assert!(SlotDir::resolve_in(&e).is_err(), "the caps are refused");
        let dir = SlotDir::resolve_dir_in(&e).expect("the directory alone resolves");
        assert_eq!(dir.path(), root.join("var/tmp/agent-slots"));
        let meta = std::fs::metadata(root.join("var/tmp/agent-slots")).expect("created");
        assert_eq!(meta.mode() & 0o7777, 0o2770);
        let elsewhere = root.join("mine");
        std::fs::create_dir(&elsewhere).expect("mkdir");
        let dir = SlotDir::resolve_dir_in(&e.clone().var("AGENT_SLOTS_DIR", &elsewhere))
            .expect("AGENT_SLOTS_DIR wins");
        assert_eq!(dir.path(), elsewhere);
    }

    #[test]
    fn a_malformed_config_is_an_error_naming_file_and_field() {
        let (_t, root) = root();
        let caps = root.join("caps.json");
        let e = env(&root).var("AGENT_SLOTS_CONFIG", &caps);
        for (text, field) in [
            (r#"{"max_agents": 0}"#, Some("max_agents")),
            (r#"{"max_test_runs": 9}"#, Some("max_test_runs")),
            (r#"{"max_test_runs": 0}"#, Some("max_test_runs")),
            (r#"{"max_agents": "two"}"#, Some("max_agents")),
            (
                r#"{"max_agents": 1000000000000}"#,
                Some("from 1 to 4294967295"),
            ),
            (
                r#"{"max_test_runs": 1, "max_agents": 2, "max_test_runs": 8}"#,
                Some("`max_test_runs` appears more than once"),
            ),
            ("{", None),
        ] {
            std::fs::write(&caps, text).expect("write");
            let err = SlotDir::resolve_in(&e).expect_err(text).to_string();
            assert!(
                err.contains(path_str(&caps)),
                "{text}: names the file: {err}"
            );
            if let Some(field) = field {
                assert!(err.contains(field), "{text}: names the field: {err}");
            }
        }
    }

    #[test]
    fn a_file_at_the_slot_directory_path_is_refused_with_what_to_do() {
        let (_t, root) = root();
        let file = root.join("slots");
        std::fs::write(&file, b"").expect("write a file");
        let err = SlotDir::open_in(&env(&root), &file).expect_err("refused");
        let msg = err.to_string();
        assert!(
            matches!(err, worklane_slotfile::open::Error::NotADirectory { .. }),
            "got {err:?}"
        );
        assert!(msg.contains(path_str(&file)), "names the path: {msg}");
        assert!(msg.contains("AGENT_SLOTS_DIR"), "says what to do: {msg}");
    }

    #[test]
    fn a_symlinked_slot_directory_is_refused() {
        let (_t, root) = root();
        let real = root.join("real");
        std::fs::create_dir(&real).expect("mkdir");
        std::os::unix::fs::symlink(&real, root.join("link")).expect("symlink");
        let err = SlotDir::open_in(&env(&root), &root.join("link")).expect_err("refused");
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }
}

mod isolation {
    use super::*;
    use worklane_slotfile::{TestSignal, resolve};

    fn refused(err: &resolve::Error) -> bool {
        matches!(err, resolve::Error::TestIsolation { .. })
    }

    #[test]
    fn this_test_process_cannot_resolve_the_machine_directory() {
        let env = Environment::from_process()
            .without("AGENT_SLOTS_DIR")
            .without("AGENT_SLOTS_CONFIG");
        assert!(
            env.test_run().is_some(),
            "an integration test is a test run"
        );
        let err = env
            .locate()
            .expect_err("the machine directory must be refused");
        assert!(refused(&err), "got {err:?}");
        assert!(
            err.to_string().contains("/var/lib/worklane/agent-slots"),
            "refused at the first candidate, before it is looked at: {err}"
        );
        let err = SlotDir::open(Path::new("/var/tmp/agent-slots")).expect_err("refused");
        assert!(err.to_string().contains("test run"), "{err}");
    }

    #[test]
    fn only_paths_inside_the_test_root_pass() {
        let t = temp();
        let root = t.path().to_owned();
        let env = Environment::with_root("/").var("WORKLANE_TEST_ROOT", &root);
        for bad in [
            PathBuf::from("/var/tmp/agent-slots"),
            PathBuf::from("/var/lib/worklane/agent-slots"),
            PathBuf::from("/srv/slots"),
            root.join("../escape"),
            root.clone(),
        ] {
            let err = env
                .clone()
                .var("AGENT_SLOTS_DIR", &bad)
                .locate()
                .expect_err("outside the test root");
            assert!(refused(&err), "{bad:?}: got {err:?}");
        }
        let err = env
            .clone()
            .var("AGENT_SLOTS_DIR", root.join("slots"))
            .var("AGENT_SLOTS_CONFIG", "/etc/worklane/slots.json")
            .locate()
            .expect_err("the machine config");
        assert!(refused(&err), "config outside the root: {err:?}");
        env.var("AGENT_SLOTS_DIR", root.join("slots"))
            .locate()
            .expect("inside the test root");
    }

    #[test]
    fn the_machine_paths_are_refused_even_inside_a_wide_test_root() {
        let env = Environment::with_root("/").var("WORKLANE_TEST_ROOT", "/var/tmp");
        let err = env
            .var("AGENT_SLOTS_DIR", "/var/tmp/agent-slots")
            .locate()
            .expect_err("machine path");
        assert!(refused(&err), "got {err:?}");
    }

    #[test]
    fn every_test_signal_is_recognized() {
        let t = temp();
        let plain = Environment::with_root("/").temp_dir(t.path());
        assert_eq!(plain.test_run(), None, "no signal: not a test run");
        let cases = [
            (
                plain.clone().var("WORKLANE_TEST_ROOT", t.path()),
                TestSignal::Marker,
            ),
            (plain.clone().var("NEXTEST", "1"), TestSignal::Nextest),
            (
                plain.clone().var("CARGO_BIN_EXE_worklane", "/x"),
                TestSignal::CargoTest,
            ),
            (
                plain
                    .clone()
                    .exe("/w/target/debug/deps/all-00112233aabbccdd"),
                TestSignal::TestHarness,
            ),
        ];
        for (env, signal) in cases {
            let run = env.test_run().expect("a test run");
            assert_eq!(run.signal, signal);
            assert_eq!(run.root, t.path(), "the temp dir is the root");
            let err = env.locate().expect_err("the machine directory is refused");
            assert!(refused(&err), "{signal:?}: got {err:?}");
        }
        let outside = plain
            .clone()
            .exe("/usr/local/bin/worklane")
            .var("CARGO_PKG_NAME", "x");
        assert_eq!(
            outside.test_run(),
            None,
            "cargo run's environment is not a test run"
        );
    }

    #[test]
    fn a_refusal_says_what_made_this_a_test_run() {
        let t = temp();
        let plain = Environment::with_root("/").temp_dir(t.path());
        for (env, signal, says) in [
            (
                plain.clone().var("WORKLANE_TEST_ROOT", t.path()),
                TestSignal::Marker,
                "WORKLANE_TEST_ROOT is set",
            ),
            (
                plain.clone().var("NEXTEST", "1"),
                TestSignal::Nextest,
                "NEXTEST is set",
            ),
            (
                plain.clone().var("CARGO_BIN_EXE_worklane", "/x"),
                TestSignal::CargoTest,
                "a CARGO_BIN_EXE_* variable from cargo test is set",
            ),
            (
                plain
                    .clone()
                    .exe("/w/target/debug/deps/all-00112233aabbccdd"),
                TestSignal::TestHarness,
                "this executable is a cargo test harness",
            ),
        ] {
            assert_eq!(signal.to_string(), says, "{signal:?} in words");
            let err = env
                .var("AGENT_SLOTS_DIR", "/srv/slots")
                .locate()
                .expect_err("outside the test root");
            assert!(
                err.to_string().contains(&format!("in a test run ({says})")),
                "the refusal says why this is a test run: {err}"
            );
        }
    }

    #[test]
    fn an_injected_environment_cannot_lift_the_process_confinement() {
        // No test signal in the injected environment: the real process's test run still holds.
        let env = Environment::with_root("/");
        assert_eq!(
            env.test_run(),
            None,
            "the injected environment has no signal"
        );
        let err = env
            .locate()
            .expect_err("the machine directory stays refused");
        assert!(refused(&err), "got {err:?}");
        let err = SlotDir::open_in(&env, Path::new("/var/tmp/agent-slots")).expect_err("refused");
        assert!(err.to_string().contains("test run"), "{err}");
    }

    #[test]
    fn reading_a_path_outside_the_test_root_is_refused_before_opening() {
        for path in [
            "/etc/worklane/slots.json",
            "/var/lib/worklane/update-drain.json",
        ] {
            let err = worklane_slotfile::read::read_path(Path::new(path)).expect_err(path);
            assert!(
                matches!(err, worklane_slotfile::read::Error::Isolation(_)),
                "{path}: {err:?}"
            );
            let err = worklane_slotfile::Config::load(Path::new(path)).expect_err(path);
            assert!(err.to_string().contains(path), "names the file: {err}");
        }
    }

    fn resolve_in_child(cmd: &mut Command) -> String {
        let out = cmd.arg("resolve").output_gated().expect("run the child");
        assert!(out.status.success(), "child exits cleanly");
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_owned()
    }

    #[test]
    fn a_child_started_by_a_test_is_refused_too() {
        let out = resolve_in_child(
            writer()
                .env_remove("AGENT_SLOTS_DIR")
                .env_remove("AGENT_SLOTS_CONFIG"),
        );
        assert!(
            out.starts_with("error:") && out.contains("test run"),
            "a child with the test's environment is a test run: {out}"
        );

        let t = temp();
        let out = resolve_in_child(
            writer()
                .env_clear()
                .env("WORKLANE_TEST_ROOT", t.path())
                .env("AGENT_SLOTS_DIR", "/var/tmp/agent-slots"),
        );
        assert!(
            out.starts_with("error:"),
            "the marker alone confines a child: {out}"
        );

        let out = resolve_in_child(writer().env("AGENT_SLOTS_DIR", t.path().join("slots")));
        assert_eq!(
            out,
            format!("ok {}", t.path().join("slots").display()),
            "a temp directory is allowed in a child"
        );
    }
}

/// The slot directory belongs to root and the caller: ownership and modes of the directory and
/// of every directory and link on the way to it, checked as root here (the next module runs
/// the same rules as an unprivileged user).
mod ownership {
    use super::*;
    use std::os::unix::fs::{chown, lchown, symlink};
    use worklane_slotfile::open::{Error, Problem};

    /// A user that is neither root nor the unprivileged subjects below.
    pub(super) const OTHER: u32 = 1000;
    /// A group no test user has as its primary group.
    pub(super) const SHARED: u32 = 23_456;

    pub(super) fn root_only() {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test gives files to other users (chown), so it runs as root"
        );
    }

    /// Makes `t/name` owned by `uid:gid` with exactly `mode`.
    pub(super) fn dir_in(t: &Path, name: &str, uid: u32, gid: u32, mode: u32) -> PathBuf {
        let dir = t.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        chown(&dir, Some(uid), Some(gid)).expect("chown");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
        dir
    }

    fn opened(path: &Path) -> Result<SlotDir, Error> {
        SlotDir::open(path)
    }

    fn problem(err: &Error) -> Option<Problem> {
        match err {
            Error::Unsafe { problem, .. } => Some(*problem),
            _ => None,
        }
    }

    fn env_for(t: &Path, dir: &Path) -> Environment {
        Environment::from_process()
            .var("WORKLANE_TEST_ROOT", t)
            .var("AGENT_SLOTS_DIR", dir)
            .without("AGENT_SLOTS_CONFIG")
    }

    #[test]
    fn a_directory_of_another_user_is_refused_naming_owner_mode_and_fix() {
        root_only();
        let t = temp();
        let squatted = dir_in(t.path(), "agent-slots", OTHER, OTHER, 0o777);
        let err = opened(&squatted).expect_err("another user's directory");
        assert!(
            matches!(
                err,
                Error::Unsafe {
                    problem: Problem::Owner,
                    owner: OTHER,
                    mode: 0o777,
                    caller: 0,
                    ..
                }
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        for part in ["uid 1000", "0777", "rm -r", path_str(&squatted)] {
            assert!(msg.contains(part), "the refusal names {part:?}: {msg}");
        }
        std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let err = opened(&squatted).expect_err("private to its owner, still not ours");
        assert_eq!(problem(&err), Some(Problem::Owner), "{err:?}");

        // The default layout: another user created /var/tmp/agent-slots first, 0777.
        let root = t.path().join("root");
        dir_in(&root, "var/tmp", 0, 0, 0o1777);
        let squatted = dir_in(&root, "var/tmp/agent-slots", OTHER, OTHER, 0o777);
        let env = Environment::with_root(&root).var("WORKLANE_TEST_ROOT", &root);
        let err = SlotDir::resolve_in(&env).expect_err("resolve refuses the squatted default");
        assert!(err.to_string().contains("uid 1000"), "{err}");
        assert!(
            names_in(&squatted).is_empty(),
            "nothing was written into the squatted directory"
        );
    }

    #[test]
    fn a_directory_writable_by_others_is_refused_even_when_sticky() {
        root_only();
        let t = temp();
        for mode in [0o777, 0o1777, 0o2777, 0o3777, 0o702] {
            let dir = dir_in(t.path(), &format!("w{mode:o}"), 0, 0, mode);
            let err = opened(&dir).expect_err("writable by others");
            assert_eq!(problem(&err), Some(Problem::Writable), "{mode:o}: {err:?}");
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("{mode:04o}")) && msg.contains("chmod o-w"),
                "names the mode and the fix: {msg}"
            );
        }
        for mode in [0o700, 0o750, 0o755, 0o770, 0o2770, 0o3770] {
            let dir = dir_in(t.path(), &format!("ok{mode:o}"), 0, SHARED, mode);
            opened(&dir).unwrap_or_else(|e| panic!("{mode:o} is fine: {e}"));
        }
    }

    #[test]
    fn a_symbolic_link_is_refused_in_every_spelling() {
        let t = temp();
        let real = t.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        symlink(&real, t.path().join("link")).expect("symlink");
        let link = path_str(&t.path().join("link")).to_owned();
        for spelling in [
            link.clone(),
            format!("{link}/"),
            format!("{link}/."),
            format!("{link}/./"),
            format!("{link}//.//"),
        ] {
            let err = opened(Path::new(&spelling)).expect_err(&spelling);
            assert!(matches!(err, Error::Symlink { .. }), "{spelling}: {err:?}");
            assert!(err.to_string().contains("symbolic link"), "{err}");
            // Resolution, which may create the directory, refuses it too and creates nothing.
            let err = SlotDir::resolve_dir_in(&env_for(t.path(), Path::new(&spelling)))
                .expect_err(&spelling);
            assert!(matches!(err, Error::Symlink { .. }), "{spelling}: {err:?}");
        }
        // A dangling link is not a missing directory to create through it.
        symlink(t.path().join("target"), t.path().join("dangling")).expect("symlink");
        let dangling = format!("{}/.", path_str(&t.path().join("dangling")));
        let err = SlotDir::resolve_dir_in(&env_for(t.path(), Path::new(&dangling)))
            .expect_err("dangling link");
        assert!(matches!(err, Error::Symlink { .. }), "{err:?}");
        assert!(
            !t.path().join("target").exists(),
            "nothing was created at the link's target"
        );
        assert!(
            names_in(&real).is_empty(),
            "the real directory is untouched"
        );
    }

    #[test]
    fn a_link_on_the_way_is_followed_only_when_root_or_the_caller_owns_it() {
        root_only();
        let t = temp();
        std::fs::create_dir_all(t.path().join("real/slots")).expect("mkdir");
        symlink(t.path().join("real"), t.path().join("mid")).expect("symlink");
        let dir = opened(&t.path().join("mid/slots")).expect("a link owned by root is followed");
        dir.file("STOP")
            .expect("valid")
            .replace(b"x", 0o644)
            .expect("write");
        assert_eq!(
            names_in(&t.path().join("real/slots")),
            ["STOP"],
            "the link's target was opened"
        );

        // A relative target with `..` is walked as the kernel would, from the link's directory.
        std::fs::create_dir(t.path().join("a")).expect("mkdir");
        symlink("../real", t.path().join("a/up")).expect("symlink");
        let dir = opened(&t.path().join("a/up/slots")).expect("a relative target");
        assert_eq!(
            dir.file("STOP").expect("valid").read().expect("read"),
            Some(b"x".to_vec()),
            "the same directory"
        );
        // More `..` than there are directories stop at `/`, as for the kernel.
        let from_root = t.path().strip_prefix("/").expect("absolute").join("real");
        symlink(
            Path::new(&"../".repeat(40)).join(from_root),
            t.path().join("a/far"),
        )
        .expect("symlink");
        let dir = opened(&t.path().join("a/far/slots")).expect("`..` past `/`");
        assert_eq!(
            dir.file("STOP").expect("valid").read().expect("read"),
            Some(b"x".to_vec()),
            "the same directory again"
        );

        lchown(t.path().join("mid"), Some(OTHER), Some(OTHER)).expect("lchown");
        let err = opened(&t.path().join("mid/slots")).expect_err("another user's link");
        assert!(
            matches!(&err, Error::UntrustedLink { link, owner: OTHER, .. } if link == &t.path().join("mid")),
            "{err:?}"
        );
        assert!(err.to_string().contains("uid 1000"), "{err}");

        // Nor does root create a directory through another user's link.
        std::fs::create_dir(t.path().join("elsewhere")).expect("mkdir");
        symlink(t.path().join("elsewhere"), t.path().join("redirect")).expect("symlink");
        lchown(t.path().join("redirect"), Some(OTHER), Some(OTHER)).expect("lchown");
        let err = SlotDir::resolve_dir_in(&env_for(t.path(), &t.path().join("redirect/slots")))
            .expect_err("another user's link");
        assert!(matches!(err, Error::UntrustedLink { .. }), "{err:?}");
        assert!(
            names_in(&t.path().join("elsewhere")).is_empty(),
            "nothing was created where the link points"
        );
    }

    #[test]
    fn forty_links_are_followed_and_the_forty_first_is_refused() {
        let t = temp();
        std::fs::create_dir_all(t.path().join("real/slots")).expect("mkdir");
        // `{prefix}0` -> `{prefix}1` -> ... -> `{prefix}{n-1}` -> real: n links on the way.
        let chain = |prefix: &str, n: usize| {
            for i in 0..n {
                let target = if i + 1 == n {
                    t.path().join("real")
                } else {
                    t.path().join(format!("{prefix}{}", i + 1))
                };
                symlink(target, t.path().join(format!("{prefix}{i}"))).expect("symlink");
            }
            t.path().join(format!("{prefix}0/slots"))
        };
        let forty = chain("a", worklane_slotfile::MAX_LINKS);
        opened(&forty).expect("40 links, as many as the kernel follows");
        let err = opened(&chain("b", worklane_slotfile::MAX_LINKS + 1)).expect_err("41 links");
        assert!(matches!(err, Error::TooManyLinks { .. }), "{err:?}");
        assert!(err.to_string().contains("more than 40"), "{err}");
    }

    #[test]
    fn a_missing_directory_is_named_as_missing_and_not_created_by_open() {
        let t = temp();
        let missing = t.path().join("slots");
        let err = opened(&missing).expect_err("missing");
        assert!(matches!(err, Error::Missing { .. }), "{err:?}");
        assert!(
            err.to_string().contains("does not exist"),
            "says what is wrong: {err}"
        );
        assert!(!missing.exists(), "open creates nothing");
    }

    #[test]
    fn a_loop_of_links_is_refused() {
        let t = temp();
        symlink(t.path().join("l2"), t.path().join("l1")).expect("symlink");
        symlink(t.path().join("l1"), t.path().join("l2")).expect("symlink");
        // On a thread given 10 s: a walk that did not count its links would follow the loop
        // forever, and the test must fail rather than hang.
        let path = t.path().join("l1/slots");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(opened(&path).map(drop));
        });
        let err = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the walk ends within 10 s")
            .expect_err("loop");
        assert!(matches!(err, Error::TooManyLinks { .. }), "{err:?}");
    }

    #[test]
    fn every_directory_on_the_way_belongs_to_root_or_the_caller() {
        root_only();
        let t = temp();
        let refused = |parent: &Path| {
            std::fs::create_dir(parent.join("slots")).expect("mkdir");
            opened(&parent.join("slots")).expect_err("an unsafe parent")
        };
        let theirs = dir_in(t.path(), "theirs", OTHER, OTHER, 0o755);
        let err = refused(&theirs);
        assert!(
            matches!(&err, Error::Unsafe { problem: Problem::ParentOwner, at, owner: OTHER, .. } if at == &theirs),
            "{err:?}"
        );
        let open = dir_in(t.path(), "open", 0, 0, 0o777);
        let err = refused(&open);
        assert_eq!(problem(&err), Some(Problem::ParentWritable), "{err:?}");
        assert!(err.to_string().contains("chmod o-w"), "{err}");
        let sticky = dir_in(t.path(), "sticky", 0, 0, 0o1777);
        std::fs::create_dir(sticky.join("slots")).expect("mkdir");
        opened(&sticky.join("slots")).expect("a sticky parent, as /tmp is, is fine");
        let sticky = dir_in(t.path(), "sticky-group", 0, SHARED, 0o1775);
        dir_in(&sticky, "slots", 0, 0, 0o770);
        opened(&sticky.join("slots")).expect("a sticky parent of another group is fine");

        // Group-writable: only by the slot directory's own group.
        let group = dir_in(t.path(), "group", 0, SHARED, 0o775);
        let slots = dir_in(&group, "slots", 0, 0, 0o770);
        let err = opened(&slots).expect_err("another group may write the parent");
        assert_eq!(
            problem(&err),
            Some(Problem::ParentGroupWritable { dir_group: 0 }),
            "{err:?}"
        );
        assert!(
            matches!(&err, Error::Unsafe { at, owner: 0, group: SHARED, mode: 0o775, .. } if at == &group),
            "names the parent with its owner, group and permission bits: {err:?}"
        );
        assert!(err.to_string().contains("chmod g-w"), "{err}");
        chown(&slots, None, Some(SHARED)).expect("chgrp");
        opened(&slots).expect("the slot directory's own group may write its parent");

        // A directory created in such a parent is refused, and removed again.
        let created = group.join("new");
        let err = SlotDir::resolve_dir_in(&env_for(t.path(), &created)).expect_err("refused");
        assert!(
            matches!(
                err,
                Error::Unsafe {
                    problem: Problem::ParentGroupWritable { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!created.exists(), "the refused new directory is removed");

        let err = SlotDir::resolve_dir_in(&env_for(t.path(), &t.path().join("none/slots")))
            .expect_err("a missing parent is not created");
        assert!(matches!(err, Error::MissingParent { .. }), "{err:?}");
        std::fs::write(t.path().join("file"), b"").expect("write");
        let err = opened(&t.path().join("file/slots")).expect_err("a file on the way");
        assert!(matches!(err, Error::ParentNotADirectory { .. }), "{err:?}");
    }

    #[test]
    fn a_new_directory_is_setgid_2770_under_any_umask() {
        let t = temp();
        for umask in ["000", "022", "077", "777"] {
            let dir = t.path().join(format!("slots-{umask}"));
            let script = format!("umask {umask}; exec \"$0\" resolve");
            let out = Command::new("sh")
                .args(["-c", &script, env!("CARGO_BIN_EXE_slot-writer")])
                .env("WORKLANE_TEST_ROOT", t.path())
                .env("AGENT_SLOTS_DIR", &dir)
                .env_remove("AGENT_SLOTS_CONFIG")
                .output_gated()
                .expect("run the writer");
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(said.starts_with("ok "), "umask {umask}: {said}");
            let mode = std::fs::metadata(&dir).expect("created").mode() & 0o7777;
            assert_eq!(mode, 0o2770, "umask {umask}: {mode:o}");
        }
    }

    #[test]
    fn every_file_written_gets_the_directorys_group() {
        root_only();
        let t = temp();
        // As `install -d -m 0770 -g agents` makes it: the group's, but not setgid.
        let shared = dir_in(t.path(), "shared", 0, SHARED, 0o770);
        let dir = opened(&shared).expect("open");
        dir.file("STOP")
            .expect("valid")
            .replace(b"x", 0o660)
            .expect("replace");
        assert_eq!(
            dir.file("agent-0.lock")
                .expect("valid")
                .publish(b"y", RECORD_MODE)
                .expect("publish"),
            Publish::Published
        );
        for name in ["STOP", "agent-0.lock"] {
            let meta = std::fs::metadata(shared.join(name)).expect("written");
            assert_eq!(meta.gid(), SHARED, "{name} has the directory's group");
        }
        let mode = std::fs::metadata(shared.join("STOP")).expect("stat").mode() & 0o7777;
        assert_eq!(mode, 0o660, "the mode is still exact");
    }

    /// `open_log` (a queued run's output, written by its driver as root for the row's user):
    /// made with its exact mode and the directory's group, given to its owner; reopened and
    /// appended to only when it is a regular file of one link, this process's or the owner's.
    #[test]
    fn a_log_is_opened_for_its_owner_and_reopened_only_when_it_is_theirs_or_ours() {
        use std::io::{Seek, Write};
        root_only();
        let t = temp();
        let shared = dir_in(t.path(), "shared", 0, SHARED, 0o770);
        let dir = opened(&shared).expect("open");
        let log = |name: &str| dir.file(name).expect("valid");
        let append = |fd: rustix::fd::OwnedFd, bytes: &[u8]| {
            let mut file = std::fs::File::from(fd);
            file.rewind().expect("seek to the start");
            file.write_all(bytes).expect("write");
        };

        // Made new, for this process: its mode exactly, the directory's group, close-on-exec.
        let fd = log("mine.log").open_log(0o640, None).expect("made");
        assert!(
            rustix::io::fcntl_getfd(&fd)
                .expect("fd flags")
                .contains(rustix::io::FdFlags::CLOEXEC),
            "close-on-exec"
        );
        append(fd, b"one\n");
        let fd = log("mine.log")
            .open_log(0o640, None)
            .expect("ours, reopened");
        append(fd, b"two\n");
        let meta = std::fs::metadata(shared.join("mine.log")).expect("stat");
        assert_eq!(
            std::fs::read(shared.join("mine.log")).expect("read"),
            b"one\ntwo\n",
            "appended, never overwritten"
        );
        assert_eq!((meta.uid(), meta.gid()), (0, SHARED));
        assert_eq!(meta.mode() & 0o7777, 0o640);

        // Made for another user: theirs, with the directory's group; reopened for them.
        let fd = log("theirs.log")
            .open_log(0o600, Some(OTHER))
            .expect("made");
        append(fd, b"a\n");
        let meta = std::fs::metadata(shared.join("theirs.log")).expect("stat");
        assert_eq!(
            (meta.uid(), meta.gid()),
            (OTHER, SHARED),
            "given to its owner"
        );
        assert_eq!(meta.mode() & 0o7777, 0o600);
        let fd = log("theirs.log")
            .open_log(0o600, Some(OTHER))
            .expect("the owner's, reopened for them");
        append(fd, b"b\n");
        assert_eq!(
            std::fs::read(shared.join("theirs.log")).expect("read"),
            b"a\nb\n"
        );
        let refused = log("theirs.log")
            .open_log(0o600, None)
            .expect_err("another user's file, for nobody in particular");
        assert!(
            refused.source.to_string().contains("move it aside"),
            "{refused:?}"
        );
        let refused = log("theirs.log")
            .open_log(0o600, Some(SHARED))
            .expect_err("another user's file, for a third");
        assert!(
            refused.source.to_string().contains("uid 1000"),
            "{refused:?}"
        );

        // A second name (a hard link to a file elsewhere) and a FIFO are never written.
        std::fs::write(shared.join("elsewhere"), b"keep").expect("write");
        std::fs::hard_link(shared.join("elsewhere"), shared.join("linked.log")).expect("link");
        let refused = log("linked.log")
            .open_log(0o640, None)
            .expect_err("a file with two names");
        assert!(
            refused.source.to_string().contains("2 link(s)"),
            "{refused:?}"
        );
        assert_eq!(
            std::fs::read(shared.join("elsewhere")).expect("read"),
            b"keep"
        );
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            shared.join("fifo.log"),
            rustix::fs::Mode::from_bits_truncate(0o600),
        )
        .expect("fifo");
        let (tx, rx) = std::sync::mpsc::channel();
        let fifo = log("fifo.log");
        std::thread::spawn(move || {
            let _ = tx.send(fifo.open_log(0o640, None).map(drop));
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("a FIFO without a reader never blocks the open")
            .expect_err("a FIFO is not a log");
        std::os::unix::fs::symlink(shared.join("target"), shared.join("link.log")).expect("link");
        log("link.log")
            .open_log(0o640, None)
            .expect_err("never through a link");
        assert!(
            !shared.join("target").exists(),
            "nothing made at its target"
        );
    }
}

/// The same rules with the subject running as an unprivileged user (`setpriv`): root bypasses
/// permissions, so what a user other than root can read, write and is refused is only seen so.
mod unprivileged {
    use super::ownership::{OTHER, SHARED, dir_in, root_only};
    use super::*;

    const NOBODY: u32 = 65_534;
    const MEMBER: u32 = 65_533;

    /// A copy of the writer that any user may run, in a directory any user may enter.
    struct Subject {
        temp: tempfile::TempDir,
        exe: PathBuf,
    }

    impl Subject {
        fn new() -> Subject {
            root_only();
            let temp = temp();
            std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
            let exe = temp.path().join("slot-writer");
            // Copied quietly: a child another test thread forks meanwhile would hold the copy's
            // write descriptor until it execs, and executing a file open for writing fails
            // with "Text file busy".
            worklane_testkit::gate::quietly(|| {
                std::fs::copy(env!("CARGO_BIN_EXE_slot-writer"), &exe).expect("copy the writer")
            });
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            Subject { temp, exe }
        }

        fn path(&self) -> &Path {
            self.temp.path()
        }

        /// Runs the writer as `uid`, primary group `gid`, supplementary `groups`; returns what
        /// it printed.
        fn run(&self, (uid, gid, groups): (u32, u32, &[u32]), args: &[&str]) -> String {
            let groups = match groups {
                [] => "--clear-groups".to_owned(),
                g => format!(
                    "--groups={}",
                    g.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                ),
            };
            let out = Command::new("setpriv")
                .args([format!("--reuid={uid}"), format!("--regid={gid}"), groups])
                .arg("--")
                .arg(&self.exe)
                .args(args)
                .env("WORKLANE_TEST_ROOT", self.path())
                .env_remove("AGENT_SLOTS_CONFIG")
                .stdin(Stdio::null())
                .output_gated()
                .expect("run setpriv");
            let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            assert!(
                !said.is_empty(),
                "the writer said nothing: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            said
        }
    }

    const AS_NOBODY: (u32, u32, &[u32]) = (NOBODY, NOBODY, &[]);

    #[test]
    fn only_directories_of_root_or_the_caller_are_used() {
        let s = Subject::new();
        let of_root = dir_in(s.path(), "of-root", 0, 0, 0o755);
        let theirs = dir_in(s.path(), "theirs", OTHER, OTHER, 0o755);
        let mine = dir_in(s.path(), "mine", NOBODY, NOBODY, 0o700);
        assert_eq!(s.run(AS_NOBODY, &["open", path_str(&of_root)]), "ok");
        assert_eq!(s.run(AS_NOBODY, &["open", path_str(&mine)]), "ok");
        let said = s.run(AS_NOBODY, &["open", path_str(&theirs)]);
        assert!(
            said.starts_with("error:") && said.contains("uid 1000") && said.contains("uid 65534"),
            "another user's directory is refused, naming both: {said}"
        );
        // What nobody made first, root refuses.
        let err = SlotDir::open(&mine).expect_err("root refuses nobody's directory");
        assert!(err.to_string().contains("uid 65534"), "{err}");

        // A link on the way: the caller's own is followed, another user's is not.
        std::os::unix::fs::symlink(&of_root, s.path().join("link")).expect("symlink");
        std::os::unix::fs::lchown(s.path().join("link"), Some(NOBODY), Some(NOBODY))
            .expect("lchown");
        std::fs::create_dir(of_root.join("slots")).expect("mkdir");
        let through = s.path().join("link/slots");
        assert_eq!(s.run(AS_NOBODY, &["open", path_str(&through)]), "ok");
        let err = SlotDir::open(&through).expect_err("root refuses nobody's link");
        assert!(
            matches!(err, worklane_slotfile::open::Error::UntrustedLink { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn a_directory_the_user_cannot_search_is_named_at_the_step_that_failed() {
        let s = Subject::new();
        let locked = dir_in(s.path(), "locked", 0, 0, 0o700);
        dir_in(&locked, "slots", 0, 0, 0o755);
        dir_in(&locked, "sub/slots", 0, 0, 0o755);
        let slots = locked.join("slots");
        let said = s.run(AS_NOBODY, &["open", path_str(&slots)]);
        assert!(
            said.starts_with(&format!(
                "error: cannot open slot directory {}:",
                slots.display()
            )) && said.contains("Permission denied"),
            "the slot directory itself could not be opened: {said}"
        );
        let sub = locked.join("sub");
        let said = s.run(AS_NOBODY, &["open", path_str(&sub.join("slots"))]);
        assert!(
            said.starts_with(&format!(
                "error: cannot open {}, on the way to",
                sub.display()
            )) && said.contains("Permission denied"),
            "a directory on the way could not be opened: {said}"
        );
    }

    #[test]
    fn a_user_creates_the_directory_setgid_2770_in_a_sticky_parent() {
        let s = Subject::new();
        // As /var/tmp is.
        let tmp = dir_in(s.path(), "var-tmp", 0, 0, 0o1777);
        let slots = tmp.join("agent-slots");
        let said = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
            ])
            .arg("umask 077; exec \"$0\" resolve")
            .arg(&s.exe)
            .env("WORKLANE_TEST_ROOT", s.path())
            .env("AGENT_SLOTS_DIR", &slots)
            .env_remove("AGENT_SLOTS_CONFIG")
            .output_gated()
            .expect("run setpriv");
        let out = String::from_utf8_lossy(&said.stdout);
        assert!(out.starts_with("ok "), "{out}");
        let meta = std::fs::metadata(&slots).expect("created");
        assert_eq!(meta.mode() & 0o7777, 0o2770, "setgid 2770 under umask 077");
        assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY), "the creator's");
        assert_eq!(s.run(AS_NOBODY, &["open", path_str(&slots)]), "ok");
    }

    /// `rewrite` as a user the directory refuses fails as `replace` does and changes nothing:
    /// a directory the user cannot write (no temp file), and a sticky shared directory where
    /// the record is another member's (the exchange, as a rename, may not move it); no temp
    /// file is left in either.
    #[test]
    fn a_rewrite_the_directory_refuses_fails_as_replace_does_and_leaves_nothing() {
        let s = Subject::new();
        let read_only = dir_in(s.path(), "read-only", 0, 0, 0o755);
        std::fs::write(read_only.join("agent-0.lock"), b"root's\n").expect("write");
        let dir = path_str(&read_only);
        let replaced = s.run(AS_NOBODY, &["replace", dir, "agent-0.lock", "x", "644"]);
        let rewritten = s.run(AS_NOBODY, &["rewrite", dir, "agent-0.lock", "x", "644"]);
        assert!(
            rewritten.starts_with("error: cannot create a temp file for")
                && rewritten.contains("Permission denied"),
            "{rewritten}"
        );
        assert_eq!(rewritten, replaced, "as replace fails");
        assert_eq!(
            std::fs::read(read_only.join("agent-0.lock")).expect("read"),
            b"root's\n"
        );
        assert_eq!(names_in(&read_only), ["agent-0.lock"]);

        let sticky = dir_in(s.path(), "sticky", 0, SHARED, 0o3770);
        let dir = path_str(&sticky);
        let first = (NOBODY, 12_345, &[SHARED][..]);
        let second = (MEMBER, 12_346, &[SHARED][..]);
        assert_eq!(
            s.run(first, &["rewrite", dir, "agent-0.lock", "first", "644"]),
            "ok"
        );
        let replaced = s.run(second, &["replace", dir, "agent-0.lock", "x", "644"]);
        let rewritten = s.run(second, &["rewrite", dir, "agent-0.lock", "x", "644"]);
        assert!(
            rewritten.starts_with("error: cannot exchange a temp file with")
                && rewritten.contains("Operation not permitted"),
            "{rewritten}"
        );
        assert!(
            replaced.contains("Operation not permitted"),
            "as replace fails: {replaced}"
        );
        assert_eq!(
            std::fs::read(sticky.join("agent-0.lock")).expect("read"),
            b"first"
        );
        assert_eq!(names_in(&sticky), ["agent-0.lock"], "no temp left");
        assert_eq!(
            s.run(first, &["rewrite", dir, "agent-0.lock", "again", "644"]),
            "ok",
            "its owner still rewrites it"
        );
        assert_eq!(names_in(&sticky), ["agent-0.lock"], "no temp left");
    }

    #[test]
    fn a_file_written_by_a_member_gets_the_directorys_group_and_other_members_replace_it() {
        let s = Subject::new();
        // As `install -d -m 0770 -g agents` makes it: not setgid, so the kernel gives each new
        // file its creator's primary group.
        let shared = dir_in(s.path(), "shared", 0, SHARED, 0o770);
        let first = (NOBODY, 12_345, &[SHARED][..]);
        let second = (MEMBER, 12_346, &[SHARED][..]);
        let dir = path_str(&shared);
        assert_eq!(
            s.run(first, &["replace", dir, "STOP", "first", "660"]),
            "ok"
        );
        let meta = std::fs::metadata(shared.join("STOP")).expect("written");
        assert_eq!(
            meta.gid(),
            SHARED,
            "the directory's group, not the writer's"
        );
        assert_eq!(meta.mode() & 0o7777, 0o660);
        assert_eq!(
            s.run(second, &["read", dir, "STOP"]),
            "ok first",
            "another member reads it"
        );
        assert_eq!(
            s.run(second, &["replace", dir, "STOP", "second", "660"]),
            "ok"
        );
        assert_eq!(s.run(first, &["read", dir, "STOP"]), "ok second");

        // A writer outside the group (the directory's owner here) cannot give its file the
        // group: the write still happens, with the writer's group.
        let owned = dir_in(s.path(), "owned", NOBODY, SHARED, 0o770);
        let outsider = (NOBODY, 12_345, &[][..]);
        assert_eq!(
            s.run(outsider, &["replace", path_str(&owned), "STOP", "x", "660"]),
            "ok"
        );
        let meta = std::fs::metadata(owned.join("STOP")).expect("written");
        assert_eq!(meta.gid(), 12_345, "best effort: the writer's own group");
    }
}
