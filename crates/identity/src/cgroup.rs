//! Where a run's cgroup is and what runs in it (Linux, cgroup v2): the unified hierarchy's
//! mount, this process's own cgroup, the name a run's cgroup has, and what a cgroup holds
//! (its processes, its CPU time, its memory). Reading only: making, filling and killing a run's
//! cgroup is `worklane-run`'s.
//!
//! The parsers are plain functions, tested on every platform; the readers return `None`
//! where there is no cgroup v2 (macOS, a machine with only v1).

use std::path::{Path, PathBuf};

/// The directory under a base that holds the runs' cgroups, and the last but one component
/// of every run's cgroup path.
pub const RUNS_DIR: &str = "worklane";

/// The record field naming a run's cgroup: its path in the unified hierarchy, as
/// `/proc/<pid>/cgroup` shows it (`/worklane/agent-0-17`).
pub const RECORD_FIELD: &str = "cgroup";

/// The mount point of the cgroup v2 (unified) hierarchy in `/proc/self/mountinfo`'s text: the
/// one at `/sys/fs/cgroup` if that is v2, else the first v2 mount (`/sys/fs/cgroup/unified`
/// beside v1 controllers).
#[must_use]
pub fn parse_mountinfo(text: &str) -> Option<PathBuf> {
    let mut found: Option<PathBuf> = None;
    for line in text.lines() {
        // `36 35 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw`: the mount point is
        // the fifth field; the file system type follows the ` - ` separator.
        let Some((head, tail)) = line.split_once(" - ") else {
            continue;
        };
        if tail.split(' ').next() != Some("cgroup2") {
            continue;
        }
        let Some(point) = head.split(' ').nth(4) else {
            continue;
        };
        let point = PathBuf::from(unescape(point));
        if point == Path::new("/sys/fs/cgroup") {
            return Some(point);
        }
        found.get_or_insert(point);
    }
    found
}

/// mountinfo's octal escapes (`\040` for a space) undone: a backslash and three octal digits
/// of a byte (at most `\377`); anything else is kept as it stands.
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && (b'0'..=b'3').contains(&bytes[i + 1])
            && bytes[i + 2..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let n = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(n);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's cgroup v2 path from `/proc/self/cgroup`'s text (its `0::` line).
#[must_use]
pub fn parse_own(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_owned)
        .filter(|path| path.starts_with('/'))
}

/// The key of a slot directory in its runs' cgroup names: 12 hex digits of its device and
/// inode, so that two slot directories of one machine (a test's, another install's) never
/// name the same cgroup.
#[must_use]
pub fn dir_key(dev: u64, ino: u64) -> String {
    // FNV-1a over the two numbers' bytes.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in dev.to_le_bytes().into_iter().chain(ino.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:012x}", hash & 0xffff_ffff_ffff)
}

/// [`dir_key`] of the directory open at `dir`.
pub fn dir_key_of(dir: impl std::os::fd::AsFd) -> std::io::Result<String> {
    let stat = rustix::fs::fstat(dir)?;
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    Ok(dir_key(stat.st_dev as u64, stat.st_ino as u64))
}

/// The cgroup name of the run holding `resource` at `epoch` in the slot directory of key
/// `dir`: the key, the resource's name without its `.lock` or `.lease`, and the epoch
/// (`3f9a1c2b7d10-agent-0-17`).
#[must_use]
pub fn run_name(dir: &str, resource: &str, epoch: u64) -> String {
    let stem = resource
        .strip_suffix(".lock")
        .or_else(|| resource.strip_suffix(".lease"))
        .unwrap_or(resource);
    format!("{dir}-{stem}-{epoch}")
}

/// Whether `path` (a record's `cgroup`) can be the cgroup of the run holding `resource` at
/// `epoch` in the slot directory of key `dir`: an absolute path of plain components, whose
/// last is [`run_name`] and whose last but one is [`RUNS_DIR`]. A record may be written by any
/// member of the slot directory's group: this keeps it from naming another run's cgroup, or
/// any cgroup outside worklane's.
#[must_use]
pub fn names_run(path: &str, dir: &str, resource: &str, epoch: u64) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return false;
    }
    let n = parts.len();
    n >= 2 && parts[n - 1] == run_name(dir, resource, epoch) && parts[n - 2] == RUNS_DIR
}

/// The cgroup v2 mount point of this machine (`None` without one, or off Linux).
#[must_use]
pub fn unified() -> Option<PathBuf> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    parse_mountinfo(&worklane_stdx::read_small_text("/proc/self/mountinfo").ok()?)
}

/// This process's own cgroup v2 path (`None` without one, or off Linux).
#[must_use]
pub fn own() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    parse_own(&worklane_stdx::read_small_text("/proc/self/cgroup").ok()?)
}

/// What a cgroup holds now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Usage {
    /// Its processes (`cgroup.procs`).
    pub procs: Vec<u32>,
    /// The CPU time its processes used, µs (`cpu.stat`'s `usage_usec`).
    pub cpu_usec: Option<u64>,
    /// Its memory now, bytes (`memory.current`, where the memory controller is enabled).
    pub memory_current: Option<u64>,
    /// Its most memory at once, bytes (`memory.peak`, likewise).
    pub memory_peak: Option<u64>,
}

/// `usage_usec` of a `cpu.stat` text.
#[must_use]
pub fn parse_cpu_usec(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|n| n.trim().parse().ok())
}

/// The pids of a `cgroup.procs` text.
#[must_use]
pub fn parse_procs(text: &str) -> Vec<u32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// The directory of cgroup `path` under `mount`, if `path` is an absolute path of plain
/// components.
#[must_use]
pub fn dir_of(mount: &Path, path: &str) -> Option<PathBuf> {
    let rest = path.strip_prefix('/')?;
    if rest
        .split('/')
        .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return None;
    }
    Some(mount.join(rest))
}

/// What cgroup `path` holds now, `None` when it does not exist (or there is no cgroup v2).
#[must_use]
pub fn usage(path: &str) -> Option<Usage> {
    let dir = dir_of(&unified()?, path)?;
    let procs = parse_procs(&worklane_stdx::read_small_text(dir.join("cgroup.procs")).ok()?);
    let number = |name: &str| {
        worklane_stdx::read_small_text(dir.join(name))
            .ok()
            .and_then(|t| t.trim().parse().ok())
    };
    Some(Usage {
        procs,
        cpu_usec: worklane_stdx::read_small_text(dir.join("cpu.stat"))
            .ok()
            .and_then(|t| parse_cpu_usec(&t)),
        memory_current: number("memory.current"),
        memory_peak: number("memory.peak"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f` run on a thread of its own, failing if it has not ended within 5 s: a parser that
    /// loops for ever fails its test instead of hanging the suite.
    fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("the parser ended (within 5 s, without a panic)")
    }

    fn mountinfo(text: &'static str) -> Option<PathBuf> {
        within(move || parse_mountinfo(text))
    }

    fn unescaped(text: &'static str) -> String {
        within(move || unescape(text))
    }

    #[test]
    fn the_unified_mount_is_found_beside_v1_and_preferred_at_sys_fs_cgroup() {
        let hybrid = "25 24 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:5 - cgroup2 cgroup2 rw\n\
                      27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(
            mountinfo(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let unified = "30 24 0:26 / /run/other rw - cgroup2 cgroup2 rw\n\
                       31 24 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(mountinfo(unified), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(
            mountinfo("40 1 0:2 / /mnt/with\\040space rw - cgroup2 none rw\n"),
            Some(PathBuf::from("/mnt/with space"))
        );
        assert_eq!(mountinfo("27 25 0:24 / /x rw - cgroup cgroup rw\n"), None);
        assert_eq!(mountinfo("garbage\n\n"), None);
    }

    /// A cgroup made under the unified hierarchy's root for a test (as root), removed on drop.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn this_machine_s_unified_mount_and_own_cgroup_are_read_from_proc() {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let mount = within(unified).expect("cgroup v2 on this machine (as CI's)");
        assert_eq!(
            Some(mount.clone()),
            within(move || parse_mountinfo(&mountinfo))
        );
        assert!(
            mount.join("cgroup.controllers").is_file(),
            "{} is a cgroup v2 root",
            mount.display()
        );
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").expect("cgroup");
        let own = own().expect("this process's cgroup v2 path");
        assert_eq!(Some(own.clone()), parse_own(&cgroup));
        // The root cgroup ("/", a machine without systemd's slices) has no directory of its
        // own below the mount in `dir_of`'s terms; any other is one.
        assert!(
            own == "/" || dir_of(&mount, &own).is_some_and(|d| d.join("cgroup.procs").is_file()),
            "{own} is a cgroup under {}",
            mount.display()
        );
    }

    #[test]
    fn a_cgroup_s_usage_is_read_and_a_missing_one_is_none() {
        let mount = within(unified).expect("cgroup v2 on this machine");
        let name = format!("worklane-test-identity-{}", std::process::id());
        let scratch = Scratch(mount.join(&name));
        std::fs::create_dir(&scratch.0).expect("make a test cgroup (as root)");
        let path = format!("/{name}");
        let held = within(move || usage(&path)).expect("the cgroup exists");
        assert_eq!(held.procs, Vec::<u32>::new(), "nothing runs in it");
        assert_eq!(
            held.cpu_usec,
            Some(0),
            "cpu.stat is always there, and nothing ran"
        );
        drop(scratch);
        let path = format!("/{name}");
        assert_eq!(within(move || usage(&path)), None, "gone: no usage");
    }

    #[test]
    fn a_cgroup_s_directory_is_under_the_mount_and_of_plain_components_only() {
        let mount = Path::new("/sys/fs/cgroup");
        assert_eq!(
            dir_of(mount, "/a/b"),
            Some(PathBuf::from("/sys/fs/cgroup/a/b"))
        );
        for bad in ["a/b", "/a//b", "/a/./b", "/a/../b", "/..", "/", "/a/"] {
            assert_eq!(dir_of(mount, bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_directory_s_key_is_of_its_device_and_inode() {
        let dir = tempfile::tempdir().expect("temp dir");
        let meta = std::fs::metadata(dir.path()).expect("metadata");
        let open = std::fs::File::open(dir.path()).expect("open");
        use std::os::unix::fs::MetadataExt;
        let key = dir_key_of(&open).expect("fstat");
        assert_eq!(key, dir_key(meta.dev(), meta.ino()));
        assert_eq!(key.len(), 12, "{key}");
    }

    #[test]
    fn mountinfo_escapes_are_undone_and_what_is_no_escape_is_kept() {
        assert_eq!(unescaped("\\040"), " ", "an escape first");
        assert_eq!(unescaped("a\\134b\\011c"), "a\\b\tc", "backslash and tab");
        assert_eq!(
            unescaped("\\377"),
            "\u{FFFD}",
            "the largest byte (not UTF-8 alone)"
        );
        assert_eq!(unescaped("x\\0401"), "x 1", "three digits, no more");
        assert_eq!(unescaped("x\\04"), "x\\04", "too short at the end: kept");
        assert_eq!(unescaped("x\\477"), "x\\477", "not a byte: kept");
        assert_eq!(unescaped("x\\08y"), "x\\08y", "not octal: kept");
        assert_eq!(unescaped("plain"), "plain");
    }

    #[test]
    fn the_own_cgroup_is_the_v2_line() {
        assert_eq!(
            parse_own("4:memory:/a\n0::/user.slice/session-2.scope\n").as_deref(),
            Some("/user.slice/session-2.scope")
        );
        assert_eq!(parse_own("0::/\n").as_deref(), Some("/"));
        assert_eq!(parse_own("4:memory:/a\n"), None);
        assert_eq!(parse_own("0::relative\n"), None);
    }

    #[test]
    fn a_record_may_name_only_its_own_run_s_cgroup() {
        let key = dir_key(2049, 1234);
        assert_eq!(key.len(), 12);
        assert_ne!(key, dir_key(2049, 1235), "another directory, another key");
        assert_eq!(run_name("k", "agent-0.lock", 17), "k-agent-0-17");
        assert_eq!(run_name("k", "role-x.lease", 3), "k-role-x-3");
        assert!(names_run("/worklane/k-agent-0-17", "k", "agent-0.lock", 17));
        assert!(names_run(
            "/user.slice/user-1000.slice/u.scope/worklane/k-agent-0-17",
            "k",
            "agent-0.lock",
            17
        ));
        for bad in [
            "/worklane/k-agent-0-18",
            "/worklane/k-agent-1-17",
            "/worklane/j-agent-0-17",
            "/worklane/agent-0-17",
            "/other/k-agent-0-17",
            "worklane/k-agent-0-17",
            "/",
            "/worklane/../k-agent-0-17",
            "/a/../worklane/k-agent-0-17",
            "//worklane/k-agent-0-17",
            "/worklane//k-agent-0-17",
        ] {
            assert!(!names_run(bad, "k", "agent-0.lock", 17), "{bad}");
        }
    }

    #[test]
    fn cpu_and_procs_are_read_from_their_files_text() {
        assert_eq!(
            parse_cpu_usec("usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n"),
            Some(1234)
        );
        assert_eq!(parse_cpu_usec("user_usec 1\n"), None);
        assert_eq!(parse_procs("12\n345\n\n"), vec![12, 345]);
        assert_eq!(
            dir_of(Path::new("/sys/fs/cgroup"), "/worklane/a-1"),
            Some(PathBuf::from("/sys/fs/cgroup/worklane/a-1"))
        );
        assert_eq!(dir_of(Path::new("/m"), "/worklane/../x"), None);
        assert_eq!(dir_of(Path::new("/m"), "x"), None);
    }
}
