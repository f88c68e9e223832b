//! Integration tests of `worklane-guard`: real files, real descriptors, real `flock`, real
//! processes. One binary, a module per operation.
//!
//! Tests run on several threads, and a child being started by one holds copies of every
//! descriptor of the process until it execs. So every process is started through the fork
//! gate, and every guard this process releases while something later needs it free is
//! released with the gate quiet (`QuietDrop`, `gate::quietly`): a released guard is then free
//! at once, for this process and for every other.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use worklane_guard::{Guard, acquire, guard_path};
use worklane_testkit::gate::{self, QuietDrop};
use worklane_testkit::{Child, Gated};

const RES: &str = "agent-0.lock";

struct Site {
    dir: tempfile::TempDir,
    fd: File,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().expect("create a temp dir");
        let fd = File::open(dir.path()).expect("open the temp dir");
        Site { dir, fd }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn guard(&self) -> PathBuf {
        guard_path(self.path(), RES)
    }

    /// Tries to acquire the guard; what it returns is released with the gate quiet, and so is
    /// a descriptor the attempt itself locked and closed again.
    fn try_acquire(&self) -> Result<Option<QuietDrop<Guard>>, acquire::Error> {
        gate::quietly(|| Guard::try_acquire(&self.fd, self.path(), RES))
            .map(|got| got.map(QuietDrop::new))
    }

    /// Acquires the guard, which must be free.
    fn held(&self) -> QuietDrop<Guard> {
        self.try_acquire()
            .expect("acquire must not fail")
            .expect("guard must be free")
    }

    fn assert_busy(&self, why: &str) {
        let got = self.try_acquire().expect("acquire must not fail");
        assert!(got.is_none(), "guard must be busy: {why}");
    }

    fn assert_free(&self, why: &str) {
        let got = self.try_acquire().expect("acquire must not fail");
        assert!(got.is_some(), "guard must be free: {why}");
    }
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list the directory")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    names.sort();
    names
}

fn holder(mode: &str, site: &Site) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_guard-holder"));
    cmd.args([mode, site.path().to_str().expect("utf-8 temp path"), RES]);
    cmd
}

/// Runs the holder through `sh -c` with a prefix (a umask, a closed stream) and returns its
/// single line of output.
fn holder_via_shell(prefix: &str, mode: &str, site: &Site) -> String {
    let script = format!(
        "{prefix} exec \"$0\" {mode} \"$1\" {RES}",
        prefix = prefix,
        mode = mode
    );
    let out = Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_guard-holder")])
        .arg(site.path())
        .output_gated()
        .expect("run the holder through sh");
    String::from_utf8(out.stdout)
        .expect("utf-8 output")
        .trim()
        .to_owned()
}

/// Starts a holder in `hold` mode and waits until it reports the guard held.
fn spawn_holding(site: &Site) -> Child {
    let mut child = holder("hold", site)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn_gated()
        .expect("spawn the holder");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("holder stdout"))
        .read_line(&mut line)
        .expect("read the holder's report");
    assert_eq!(line.trim(), "held", "the holder must report the guard held");
    child
}

fn util_linux_flock(path: &Path) -> bool {
    Command::new("flock")
        .args(["-n"])
        .arg(path)
        .arg("true")
        .status_gated()
        .expect("run util-linux flock")
        .success()
}

mod exclusion {
    use super::*;

    #[test]
    fn a_second_open_in_the_same_process_is_busy() {
        let site = Site::new();
        let held = site.held();
        site.assert_busy("a second open file description in this process");
        drop(held);
        site.assert_free("after release");
    }

    #[test]
    fn another_process_sees_busy_and_we_see_its_hold() {
        let site = Site::new();
        let held = site.held();
        let out = holder("try", &site).output_gated().expect("run the holder");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "busy",
            "another process must see our guard busy"
        );
        drop(held);

        let mut child = spawn_holding(&site);
        site.assert_busy("another process holds the guard");
        drop(child.stdin.take());
        let status = child.wait().expect("wait for the holder");
        assert!(status.success(), "holder must exit cleanly: {status}");
        site.assert_free("after the other process released");
    }

    #[test]
    fn util_linux_flock_agrees_in_both_directions() {
        let site = Site::new();
        let held = site.held();
        assert!(
            !util_linux_flock(&site.guard()),
            "flock -n must fail while we hold the guard"
        );
        drop(held);
        assert!(
            util_linux_flock(&site.guard()),
            "flock -n must succeed after release"
        );

        // flock(1) holds it while `cat` waits for our pipe to close.
        let mut child = Command::new("flock")
            .arg(site.guard())
            .args(["sh", "-c", "echo held; exec cat >/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn_gated()
            .expect("spawn flock");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("flock stdout"))
            .read_line(&mut line)
            .expect("read flock's report");
        assert_eq!(line.trim(), "held", "flock must report it holds the lock");
        site.assert_busy("util-linux flock holds the guard");
        drop(child.stdin.take());
        child.wait().expect("wait for flock");
        site.assert_free("after util-linux flock exited");
    }

    #[test]
    fn a_sigkilled_holder_frees_the_guard() {
        let site = Site::new();
        let mut child = spawn_holding(&site);
        site.assert_busy("the holder is alive");
        child.kill().expect("SIGKILL the holder");
        child.wait().expect("reap the holder");
        site.assert_free("the kernel closed the killed holder's descriptor");
    }
}

mod duplicates {
    use super::*;

    #[test]
    fn a_dup_keeps_the_lock_until_the_last_copy_closes() {
        let site = Site::new();
        let held = site.held();
        let dup = rustix::io::fcntl_dupfd_cloexec(&*held, 3).expect("dup the guard");
        drop(held);
        site.assert_busy("the duplicate still holds the open file description");
        gate::quietly(|| drop(dup));
        site.assert_free("the last copy closed");
    }

    #[test]
    fn a_child_that_inherited_the_descriptor_keeps_the_lock() {
        let site = Site::new();
        // The inheriting child reads the holder's standard input: if this test fails before it
        // kills that child, dropping our end of the pipe ends it.
        let mut child = holder("hold-inherit", &site)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn_gated()
            .expect("spawn the holder");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("holder stdout"))
            .read_line(&mut line)
            .expect("read the holder's report");
        let pid: i32 = line
            .trim()
            .strip_prefix("child ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("holder must report its child's pid, said {line:?}"));
        site.assert_busy("the grandchild inherited the descriptor");
        let pid = rustix::process::Pid::from_raw(pid).expect("valid pid");
        rustix::process::kill_process(pid, rustix::process::Signal::KILL)
            .expect("SIGKILL the inheriting child");
        // The holder waits for its child, so once it exits the child's descriptors are closed.
        child.wait().expect("wait for the holder");
        site.assert_free("the inheriting child is dead");
    }
}

mod inheritance {
    use super::*;

    /// What the descriptors of a freshly executed `ls` refer to, one per line.
    fn descriptors_of_an_executed_child() -> String {
        let out = Command::new("ls")
            .args(["-l", "/proc/self/fd/"])
            .output_gated()
            .expect("run ls");
        assert!(out.status.success(), "ls of /proc/self/fd must run");
        String::from_utf8(out.stdout).expect("utf-8 listing")
    }

    #[test]
    fn a_program_executed_while_the_guard_is_held_does_not_inherit_it() {
        let site = Site::new();
        // The kernel shows a descriptor's file by its canonical path.
        let guard = std::fs::canonicalize(site.path())
            .expect("canonical temp dir")
            .join(".agent-0.lock.flock");
        let guard = guard.to_str().expect("utf-8 path");
        let held = site.held();

        // The check sees an inherited descriptor: a duplicate without close-on-exec is listed.
        // Quiet: no other test's child may be started while an inheritable copy exists.
        let listing = gate::quietly(|| {
            let inheritable = rustix::io::dup(&*held).expect("dup the guard without close-on-exec");
            let listing = descriptors_of_an_executed_child();
            drop(inheritable);
            listing
        });
        assert!(
            listing.contains(guard),
            "a descriptor without close-on-exec must show in the child's listing: {listing}"
        );

        // The guard's own descriptor is close-on-exec: a program this holder executes (a
        // command it runs) never holds the guard, whatever it does and however long it lives.
        let listing = descriptors_of_an_executed_child();
        assert!(
            !listing.contains(guard),
            "the guard's descriptor must not be inherited across exec: {listing}"
        );
        drop(held);
    }
}

mod release {
    use super::*;

    #[test]
    fn release_never_unlinks_the_guard_inode() {
        let site = Site::new();
        let held = site.held();
        let before = std::fs::metadata(site.guard()).expect("guard exists while held");
        assert_eq!(
            held.file_id().ino,
            before.ino(),
            "file_id names the guard inode"
        );
        held.end(Guard::release);
        let after = std::fs::metadata(site.guard()).expect("guard exists after release");
        assert_eq!(before.ino(), after.ino(), "same inode after release");
        assert_eq!(before.dev(), after.dev(), "same device after release");
        let again = site.held();
        assert_eq!(
            again.file_id().ino,
            before.ino(),
            "reacquired on the same inode"
        );
    }
}

mod refusals {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_symlink_at_the_guard_name_is_refused_and_its_target_untouched() {
        let site = Site::new();
        let victim = site.path().join("victim");
        std::fs::write(&victim, b"precious").expect("write victim");
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o640))
            .expect("chmod victim");
        std::os::unix::fs::symlink(&victim, site.guard()).expect("plant symlink");

        let err = site
            .try_acquire()
            .expect_err("a symlinked guard must be refused");
        assert!(matches!(err, acquire::Error::Symlink { .. }), "got {err:?}");
        assert!(
            err.to_string().contains(".agent-0.lock.flock"),
            "names the path: {err}"
        );
        assert_eq!(std::fs::read(&victim).expect("read victim"), b"precious");
        let mode = std::fs::metadata(&victim).expect("stat victim").mode() & 0o7777;
        assert_eq!(mode, 0o640, "victim's mode unchanged");
        assert!(
            std::fs::symlink_metadata(site.guard())
                .expect("link still there")
                .file_type()
                .is_symlink(),
            "the link is left for an operator"
        );
    }

    #[test]
    fn a_dangling_symlink_is_refused_and_creates_nothing() {
        let site = Site::new();
        let target = site.path().join("nowhere");
        std::os::unix::fs::symlink(&target, site.guard()).expect("plant symlink");
        let err = site
            .try_acquire()
            .expect_err("a dangling symlink must be refused");
        assert!(matches!(err, acquire::Error::Symlink { .. }), "got {err:?}");
        assert!(!target.exists(), "nothing created through the link");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let site = Site::new();
        let status = Command::new("mkfifo")
            .arg(site.guard())
            .status_gated()
            .expect("run mkfifo");
        assert!(status.success(), "mkfifo must succeed");
        let (tx, rx) = mpsc::channel();
        let path = site.path().to_owned();
        std::thread::spawn(move || {
            let fd = File::open(&path).expect("open dir");
            let _ = tx.send(
                Guard::try_acquire(&fd, &path, RES)
                    .map(|g| g.is_some())
                    .map_err(|e| e.to_string()),
            );
        });
        // A watchdog, not a timing assertion: opening a FIFO without O_NONBLOCK hangs forever.
        let got = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("acquire on a FIFO must return instead of blocking");
        let err = got.expect_err("a FIFO must be refused");
        assert!(
            err.contains("FIFO"),
            "the refusal says what it found: {err}"
        );
    }

    #[test]
    fn a_non_empty_guard_is_refused() {
        let site = Site::new();
        std::fs::write(site.guard(), b"x").expect("write a non-empty guard");
        let err = site.try_acquire().expect_err("non-empty must be refused");
        assert!(
            matches!(err, acquire::Error::NotEmpty { size: 1, .. }),
            "got {err:?}"
        );
    }

    #[test]
    fn a_directory_at_the_guard_name_is_refused() {
        let site = Site::new();
        std::fs::create_dir(site.guard()).expect("plant a directory");
        let err = site.try_acquire().expect_err("a directory must be refused");
        assert!(
            matches!(
                err,
                acquire::Error::NotRegular {
                    kind: "directory",
                    ..
                }
            ),
            "got {err:?}"
        );
    }

    #[test]
    fn bad_resource_names_are_refused() {
        let site = Site::new();
        for name in ["", "a/b", "..", ".hidden", "x.flock", "x\u{200B}.FLOCK"] {
            let err = Guard::try_acquire(&site.fd, site.path(), name)
                .expect_err("a bad resource name must be refused");
            assert!(
                matches!(err, acquire::Error::InvalidName { .. }),
                "{name:?}: got {err:?}"
            );
        }
        let entries = std::fs::read_dir(site.path()).expect("list").count();
        assert_eq!(entries, 0, "nothing was created for refused names");
    }

    #[test]
    fn an_acquisition_with_stdin_closed_fails_cleanly() {
        let site = Site::new();
        let out = Command::new(env!("CARGO_BIN_EXE_guard-holder"))
            .args(["try", site.path().to_str().expect("utf-8 path"), RES])
            .env("GUARD_HOLDER_CLOSE_STDIN", "1")
            .output_gated()
            .expect("run the holder");
        let out = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            out.starts_with("error:") && out.contains("descriptor 0"),
            "acquisition on fd 0 must fail naming the descriptor, got {out:?}"
        );
        assert!(
            out.contains("closed standard stream"),
            "explains why: {out}"
        );
        assert!(
            out.ends_with("fd 0 closed"),
            "the refused descriptor must be closed again, not kept on fd 0: {out:?}"
        );
        site.assert_free("the refused descriptor was closed with the process");
    }
}

mod publication {
    use super::*;

    fn mode_under_umask(umask: &str) -> u32 {
        let site = Site::new();
        let out = holder_via_shell(&format!("umask {umask};"), "try", &site);
        assert_eq!(out, "held", "the holder must acquire under umask {umask}");
        std::fs::metadata(site.guard())
            .expect("guard published")
            .mode()
            & 0o7777
    }

    #[test]
    fn the_guard_is_0444_under_any_umask() {
        assert_eq!(mode_under_umask("077"), 0o444, "mode under umask 077");
        assert_eq!(mode_under_umask("022"), 0o444, "mode under umask 022");
        assert_eq!(mode_under_umask("000"), 0o444, "mode under umask 000");
    }

    #[test]
    fn publication_leaves_only_the_guard() {
        let site = Site::new();
        let held = site.held();
        let names: Vec<String> = std::fs::read_dir(site.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect();
        assert_eq!(
            names,
            vec![".agent-0.lock.flock".to_owned()],
            "no temp alias left"
        );
        drop(held);
    }

    #[test]
    fn a_0660_guard_is_still_usable() {
        let site = Site::new();
        site.held().end(Guard::release);
        std::fs::set_permissions(site.guard(), std::fs::Permissions::from_mode(0o660))
            .expect("privacy tidy");
        let held = site.held();
        site.assert_busy("a 0660 guard still excludes");
        drop(held);
    }

    #[test]
    fn a_rival_that_publishes_first_is_used_not_an_error() {
        let site = Site::new();
        let mut rival = None;
        // The rival publishes (and holds) the guard after our temp alias is complete and before
        // we link it, so our link finds the name taken.
        let ours = Guard::try_acquire_observed(&site.fd, site.path(), RES, &mut || {
            rival = Some(site.held());
        })
        .expect("a guard a rival published first must be used, not reported as an error");
        let rival = rival.expect("the rival published during our publication");
        assert!(
            ours.is_none(),
            "the rival holds the guard it published, so ours must be busy"
        );
        assert_eq!(
            std::fs::metadata(site.guard()).expect("guard").ino(),
            rival.file_id().ino,
            "the rival's inode is the guard; ours was never linked"
        );
        let names: Vec<String> = std::fs::read_dir(site.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect();
        assert_eq!(
            names,
            vec![".agent-0.lock.flock".to_owned()],
            "our unlinked temp alias is removed"
        );
    }

    /// The temp aliases among `names` (anything but the guard).
    fn temp_aliases(names: Vec<String>) -> Vec<String> {
        names
            .into_iter()
            .filter(|n| n != ".agent-0.lock.flock")
            .collect()
    }

    #[test]
    fn a_publisher_whose_temp_alias_was_swept_starts_over() {
        let site = Site::new();
        // The slot directory's temp sweep removes an alias a minute old: here, the first one,
        // between its creation and its link.
        let mut aliases = Vec::new();
        let ours = Guard::try_acquire_observed(&site.fd, site.path(), RES, &mut || {
            let now = temp_aliases(names_in(site.path()));
            assert_eq!(
                now.len(),
                1,
                "one complete temp alias before the link: {now:?}"
            );
            if aliases.is_empty() {
                std::fs::remove_file(site.path().join(&now[0])).expect("sweep the temp alias");
            }
            aliases.extend(now);
        })
        .expect("a publisher whose temp alias vanished must start over, not fail")
        .expect("nobody else holds the guard");
        assert_eq!(
            aliases.len(),
            2,
            "published on the second attempt, through a second alias: {aliases:?}"
        );
        assert_ne!(
            aliases[0], aliases[1],
            "the second attempt draws a new alias"
        );
        for alias in &aliases {
            let token = alias
                .strip_prefix(".agent-0.lock.flock.tmp-")
                .unwrap_or_else(|| panic!("the alias is `.F.flock.tmp-<token>`: {alias}"));
            assert!(
                token.len() == 16 && token.bytes().all(|b| b.is_ascii_hexdigit()),
                "the token is 16 hex digits: {alias}"
            );
            assert_eq!(
                token,
                token.to_lowercase(),
                "the token is lowercase: {alias}"
            );
        }
        assert_eq!(
            names_in(site.path()),
            vec![".agent-0.lock.flock".to_owned()],
            "the guard is published and no temp alias is left"
        );
        assert_eq!(
            std::fs::metadata(site.guard()).expect("guard").ino(),
            ours.file_id().ino,
            "we hold the published guard"
        );
    }

    #[test]
    fn a_link_that_fails_for_another_reason_is_reported_at_once() {
        let site = Site::new();
        // A directory in place of the alias: linking it fails with EPERM, which no new attempt
        // would change, so it is reported without another alias being made.
        let mut attempts = 0;
        let err = Guard::try_acquire_observed(&site.fd, site.path(), RES, &mut || {
            attempts += 1;
            let now = temp_aliases(names_in(site.path()));
            let alias = site.path().join(now.last().expect("a temp alias"));
            std::fs::remove_file(&alias).expect("remove the temp alias");
            std::fs::create_dir(&alias).expect("a directory in its place");
        })
        .expect_err("linking a directory must fail");
        assert_eq!(
            attempts, 1,
            "a failure other than a vanished alias is not retried"
        );
        let acquire::Error::Io { op, path, source } = &err else {
            panic!("a failed link is an I/O error, got {err:?}");
        };
        assert_eq!(
            *op, "publish (link) the temp alias of",
            "names the step: {err}"
        );
        assert_eq!(path, &site.guard(), "names the guard: {err}");
        assert_eq!(
            source.raw_os_error(),
            Some(rustix::io::Errno::PERM.raw_os_error()),
            "carries the link's error: {source}"
        );
        assert!(!site.guard().exists(), "no guard is published");
    }

    #[test]
    fn a_guard_unlinked_between_open_and_lock_is_reopened_by_name() {
        let site = Site::new();
        drop(site.held());
        // A maintenance reclaim unlinks the idle guard after we opened it, before we lock it.
        let mut unlinked = false;
        let ours = Guard::try_acquire_seams(&site.fd, site.path(), RES, &mut || {}, &mut || {
            if !unlinked {
                std::fs::remove_file(site.guard()).expect("unlink the guard");
                unlinked = true;
            }
        })
        .expect("acquire")
        .expect("the guard is free");
        assert!(unlinked);
        // (The new guard may reuse the old inode's number once the old one is closed.)
        let named = std::fs::metadata(site.guard())
            .expect("a new guard was published")
            .ino();
        assert_eq!(
            ours.file_id().ino,
            named,
            "we hold the guard others can reach by name, not the unlinked inode"
        );
        site.assert_busy("and it excludes them");
    }

    #[test]
    fn a_guard_replaced_between_open_and_lock_is_never_held_twice() {
        let site = Site::new();
        drop(site.held());
        // After we opened the old inode, it is unlinked and a rival publishes and holds a new
        // guard. Locking the old inode would succeed: the acquisition must see the name moved.
        let mut rival = None;
        let ours = Guard::try_acquire_seams(&site.fd, site.path(), RES, &mut || {}, &mut || {
            if rival.is_none() {
                std::fs::remove_file(site.guard()).expect("unlink the guard");
                rival = Some(site.held());
            }
        })
        .expect("acquire");
        let rival = rival.expect("the rival holds the new guard");
        assert!(
            ours.is_none(),
            "busy: the rival holds the guard by its name"
        );
        assert_eq!(
            std::fs::metadata(site.guard()).expect("guard").ino(),
            rival.file_id().ino
        );
    }

    #[test]
    fn a_leftover_temp_alias_from_a_crash_blocks_nothing() {
        // Crash before the link: an orphan read-only temp file.
        let site = Site::new();
        let orphan = site.path().join(".agent-0.lock.flock.tmp-0123456789abcdef");
        std::fs::write(&orphan, b"").expect("plant orphan temp");
        std::fs::set_permissions(&orphan, std::fs::Permissions::from_mode(0o444))
            .expect("chmod orphan");
        let held = site.held();
        assert_ne!(
            held.file_id().ino,
            std::fs::metadata(&orphan).expect("orphan").ino(),
            "the orphan temp is not the guard"
        );
        drop(held);

        // Crash after the link, before unlinking the temp: a second name of the guard inode.
        let site = Site::new();
        site.held().end(Guard::release);
        let alias = site.path().join(".agent-0.lock.flock.tmp-fedcba9876543210");
        std::fs::hard_link(site.guard(), &alias).expect("plant linked alias");
        let held = site.held();
        site.assert_busy("the guard works with a leftover alias");
        assert_eq!(
            held.file_id().ino,
            std::fs::metadata(&alias).expect("alias").ino(),
            "the alias names the same inode"
        );
    }
}

mod tokens {
    use super::*;

    #[test]
    fn a_child_forked_without_exec_draws_other_tokens_than_its_parent() {
        // The child shares the parent's seed and counter: only the pid tells them apart.
        let out = Command::new(env!("CARGO_BIN_EXE_guard-holder"))
            .arg("fork-tokens")
            .output_gated()
            .expect("run the holder");
        assert!(out.status.success(), "the holder must fork: {}", out.status);
        let out = String::from_utf8(out.stdout).expect("utf-8 output");
        let lines: Vec<&str> = out.lines().collect();
        let [child, parent] = lines.as_slice() else {
            panic!("the holder prints the child's token and its own: {out:?}");
        };
        let child = child.strip_prefix("child ").expect("the child's token");
        let parent = parent.strip_prefix("parent ").expect("the parent's token");
        for token in [child, parent] {
            assert!(
                token.len() == 16 && token.bytes().all(|b| b.is_ascii_hexdigit()),
                "a token is 16 hex digits: {out:?}"
            );
        }
        assert_ne!(
            child, parent,
            "the same draw in a forked child and its parent must differ"
        );
    }
}

mod probe {
    use super::*;
    use worklane_guard::is_held;

    #[test]
    fn is_held_tells_a_held_guard_from_a_free_one() {
        let site = Site::new();
        assert!(
            !is_held(&site.fd, site.path(), RES).expect("probe a guard nobody holds"),
            "a guard nobody holds is not held"
        );
        assert!(
            site.guard().exists(),
            "the probe published the guard it took and released"
        );
        let held = site.held();
        assert!(
            is_held(&site.fd, site.path(), RES).expect("probe a held guard"),
            "a guard another open file description holds is held"
        );
        drop(held);
        site.assert_free("the probes released what they took");
    }
}

mod received {
    use super::*;

    #[test]
    fn a_duplicate_of_the_held_descriptor_rebuilds_the_guard() {
        let site = Site::new();
        let held = site.held();
        let sent = rustix::io::fcntl_dupfd_cloexec(&*held, 3).expect("dup as if sent");
        drop(held);
        let rebuilt = Guard::from_received(sent, &site.fd, site.path(), RES)
            .map(QuietDrop::new)
            .expect("the same open file description must be accepted");
        site.assert_busy("the rebuilt guard holds the lock");
        drop(rebuilt);
        site.assert_free("after the rebuilt guard is dropped");
    }

    #[test]
    fn a_descriptor_of_another_file_is_refused() {
        let site = Site::new();
        let other = Guard::try_acquire(&site.fd, site.path(), "other.lock")
            .expect("acquire")
            .expect("free");
        let sent = rustix::io::fcntl_dupfd_cloexec(&other, 3).expect("dup");
        site.held().end(Guard::release);
        let err = Guard::from_received(sent, &site.fd, site.path(), RES)
            .expect_err("another guard's descriptor must be refused");
        assert!(
            matches!(err, acquire::Error::NotTheGuard { .. }),
            "got {err:?}"
        );
        assert!(err.to_string().contains("inode"), "names the inodes: {err}");
    }

    #[test]
    fn a_descriptor_that_never_held_the_lock_is_refused() {
        let site = Site::new();
        let held = site.held();
        let unlocked: std::os::fd::OwnedFd = File::open(site.guard()).expect("open").into();
        let err = Guard::from_received(unlocked, &site.fd, site.path(), RES)
            .expect_err("a description that does not hold the lock must be refused");
        assert!(matches!(err, acquire::Error::NotHeld { .. }), "got {err:?}");
        drop(held);
    }
}

mod received_reclaimed {
    use super::*;

    #[test]
    fn a_received_descriptor_of_a_guard_reclaimed_before_the_lock_is_refused() {
        let site = Site::new();
        drop(site.held());
        // A descriptor of the free guard (its sender's lock ended), compared with the name,
        // then the guard is reclaimed before the receiver re-asserts the lock.
        let sent: std::os::fd::OwnedFd = File::open(site.guard()).expect("open").into();
        let err = Guard::from_received_seams(sent, &site.fd, site.path(), RES, &mut || {
            std::fs::remove_file(site.guard()).expect("reclaim");
        })
        .expect_err("a ghost inode must not be held");
        assert!(
            matches!(err, acquire::Error::NotTheGuard { .. }),
            "got {err:?}"
        );
        assert!(
            site.try_acquire().expect("acquire").is_some(),
            "the resource's real guard is free for others"
        );
    }
}

mod filesystem {
    use worklane_guard::filesystem;
    use worklane_testkit::Gated;

    #[test]
    fn the_real_check_accepts_the_test_temp_dir() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fd = std::fs::File::open(dir.path()).expect("open");
        let verdict = filesystem::of(&fd).expect("fstatfs");
        let accepted = verdict.expect("the test temp dir is on a local filesystem");
        assert!(
            ["ext2/3/4", "xfs", "btrfs", "tmpfs"].contains(&accepted.name),
            "accepted as {}",
            accepted.name
        );
    }

    /// Runs `script` through `sh` in a mount namespace of its own, so what it mounts is seen by
    /// nobody else and vanishes with it; `$0` is the holder and `$1` is `dir`.
    fn in_private_mounts(script: &str, dir: &std::path::Path) -> String {
        let mut cmd = std::process::Command::new("unshare");
        if !rustix::process::geteuid().is_root() {
            cmd.arg("--map-root-user");
        }
        let out = cmd
            .args(["--mount", "--propagation", "private", "sh", "-c", script])
            .arg(env!("CARGO_BIN_EXE_guard-holder"))
            .arg(dir)
            .output_gated()
            .expect("run unshare (util-linux)");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the script in a private mount namespace must run: {}\n{stderr}",
            out.status
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    #[test]
    fn a_guard_on_a_refused_filesystem_is_refused_and_none_is_created() {
        let site = super::Site::new();
        let dir = site.path().join("ramfs");
        std::fs::create_dir(&dir).expect("make a mount point");
        // ramfs is local but not on the accepted list: the real fstatfs check must refuse it,
        // both before publishing a new guard and on a guard that is already there.
        let out = in_private_mounts(
            r#"set -e
            mount -t ramfs ramfs "$1"
            "$0" try "$1" agent-0.lock || true
            echo "entries:$(ls -A "$1")"
            : > "$1/.agent-0.lock.flock"
            "$0" try "$1" agent-0.lock || true"#,
            &dir,
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "two attempts and a listing: {out}");
        for line in [lines[0], lines[2]] {
            assert!(
                line.starts_with("error: guard ") && line.contains(".agent-0.lock.flock"),
                "the refusal names the guard: {line}"
            );
            assert!(
                line.contains("unknown (f_type 0x858458f6) filesystem"),
                "the refusal names the filesystem: {line}"
            );
            assert!(
                line.contains("keep the slot directory on a local"),
                "the refusal says what to do: {line}"
            );
        }
        assert_eq!(
            lines[1], "entries:",
            "nothing is created on a refused filesystem"
        );
    }

    #[test]
    fn the_real_check_refuses_procfs() {
        let fd = std::fs::File::open("/proc/self").expect("open /proc/self");
        let refused = filesystem::of(&fd)
            .expect("fstatfs")
            .expect_err("procfs must be refused");
        assert_eq!(refused.name, "proc", "refused by name");
    }
}

mod reclaim {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};
    use worklane_guard::reclaim::{self, Entry, Removal};

    /// `reclaim::remove_guard` with the gate quiet: it takes the guard and releases it again,
    /// and the next step needs it free.
    fn remove_guard(site: &Site, needed: impl FnOnce() -> bool) -> Removal {
        gate::quietly(|| reclaim::remove_guard(&site.fd, site.path(), RES, needed))
            .expect("reclaim")
    }

    fn now_ms() -> u64 {
        u64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("clock")
                .as_millis(),
        )
        .expect("ms")
    }

    #[test]
    fn a_guard_is_removed_only_while_held_and_unneeded() {
        let site = Site::new();
        let held = site.held();
        assert_eq!(
            remove_guard(&site, || true),
            Removal::Busy,
            "a held guard is left alone"
        );
        let inode = held.file_id().ino;
        drop(held);
        assert_eq!(std::fs::metadata(site.guard()).expect("kept").ino(), inode);
        assert_eq!(
            remove_guard(&site, || false),
            Removal::Needed,
            "a guard its resource still needs is kept"
        );
        assert!(site.guard().exists());
        let mut asked_while_held = false;
        let removal = remove_guard(&site, || {
            asked_while_held = Guard::try_acquire(&site.fd, site.path(), RES)
                .expect("probe")
                .is_none();
            true
        });
        assert_eq!(removal, Removal::Removed);
        assert!(
            asked_while_held,
            "the question is asked while the guard is held"
        );
        assert!(!site.guard().exists(), "unlinked");
        assert!(
            site.try_acquire().expect("acquire").is_some(),
            "a new one is published"
        );
    }

    #[test]
    fn a_guard_is_unlinked_before_it_is_released() {
        // An acquirer arriving after the unlink finds no guard, publishes a new one and holds
        // it; had the old guard been released first, it could have locked the old inode
        // just before the unlink and held a guard nobody else can reach.
        let site = Site::new();
        drop(site.held());
        let mut arrived = None;
        let removal = reclaim::remove_guard_seams(&site.fd, site.path(), RES, || true, &mut || {
            arrived = Some(site.try_acquire().expect("acquire"));
        })
        .expect("reclaim");
        assert_eq!(removal, Removal::Removed);
        let arrived = arrived
            .expect("the acquirer ran")
            .expect("it got a guard: the old one was still held, so it made a new one");
        assert_eq!(
            std::fs::metadata(site.guard())
                .expect("the guard by its name")
                .ino(),
            arrived.file_id().ino,
            "the acquirer holds the guard everyone else reaches by name"
        );
        site.assert_busy("and so excludes them");
    }

    #[test]
    fn scan_lists_guards_and_temp_aliases_only() {
        let site = Site::new();
        drop(site.held());
        let alias = format!(".{RES}.flock.tmp-0123456789abcdef");
        std::fs::write(site.path().join(&alias), b"").expect("alias");
        std::fs::write(site.path().join(RES), b"{}").expect("record");
        std::fs::write(site.path().join(".other.tmp-0123456789abcdef"), b"").expect("temp");
        let mut found = reclaim::scan(&site.fd, site.path()).expect("scan");
        found.sort_by_key(|e| format!("{e:?}"));
        assert_eq!(
            found,
            vec![
                Entry::Guard {
                    resource: RES.to_owned()
                },
                Entry::TempAlias { name: alias },
            ]
        );
    }

    #[test]
    fn only_an_old_regular_temp_alias_is_removed() {
        let site = Site::new();
        let alias = format!(".{RES}.flock.tmp-0123456789abcdef");
        let path = site.path().join(&alias);
        std::fs::write(&path, b"").expect("alias");
        let written = std::fs::metadata(&path)
            .expect("alias")
            .modified()
            .expect("mtime")
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
            * 1000;
        let remove = |now| {
            reclaim::remove_temp_alias(&site.fd, site.path(), &alias, now, 60_000).expect("rm")
        };
        assert!(!remove(written + 59_999), "younger than a minute: kept");
        assert!(path.exists());
        assert!(remove(written + 60_000), "a minute old: a crash's leftover");
        assert!(!path.exists());
        std::fs::create_dir(&path).expect("a directory by that name");
        assert!(!remove(now_ms() + 3_600_000), "not a regular file: kept");
        assert!(
            !reclaim::remove_temp_alias(&site.fd, site.path(), RES, now_ms(), 0).expect("rm"),
            "not a temp alias name: never touched"
        );
    }
}
