//! Where a user other than root gets its runs' cgroups: `run-holder cgroups` run as nobody
//! (setpriv) inside a cgroup the test makes for it, root's (not delegated) or nobody's own (a
//! delegated subtree, as `systemd-run --user --scope` gives).

use super::*;
use worklane_identity::cgroup::unified;

/// A cgroup directly under the unified hierarchy's root, removed (with what it holds) at the
/// end.
struct Scratch {
    path: String,
    dir: PathBuf,
}

impl Scratch {
    fn new(what: &str) -> Scratch {
        let mount = unified().expect("cgroup v2 on this machine");
        let path = format!("/worklane-test-{what}-{}", std::process::id());
        let dir = mount.join(&path[1..]);
        std::fs::create_dir(&dir).expect("make a test cgroup");
        Scratch { path, dir }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(self.dir.join("worklane"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// What `run-holder cgroups` prints when run as nobody inside `cgroup`.
fn as_nobody_in(cgroup: &Scratch) -> (String, String) {
    let out = Command::new("sh")
        .args([
            "-c",
            r#"echo $$ > "$1/cgroup.procs" && exec setpriv --reuid=65534 --regid=65534 --clear-groups "$2" cgroups"#,
            "sh",
        ])
        .arg(&cgroup.dir)
        .arg(env!("CARGO_BIN_EXE_run-holder"))
        .output_gated()
        .expect("run run-holder");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut lines = text.lines().map(str::to_owned);
    (
        lines.next().expect("the probe"),
        lines.next().expect("the containment"),
    )
}

#[test]
fn a_user_in_a_cgroup_it_does_not_own_has_no_containment() {
    let root_s = Scratch::new("root");
    let refused = format!(
        r#"Err(NotDelegated {{ uid: 65534, path: "{}" }})"#,
        root_s.path
    );
    assert_eq!(
        as_nobody_in(&root_s),
        (format!("probe {refused}"), format!("containment {refused}"))
    );
    assert!(!root_s.dir.join("worklane").exists(), "nothing made");
}

#[test]
fn a_user_in_a_delegated_subtree_runs_its_cgroups_there() {
    let delegated = Scratch::new("delegated");
    std::os::unix::fs::chown(&delegated.dir, Some(65534), Some(65534)).expect("delegate");
    let runs = format!("{}/worklane", delegated.path);
    assert_eq!(
        as_nobody_in(&delegated),
        (
            format!("probe Ok({runs:?})"),
            format!("containment Ok({runs:?})")
        )
    );
    let made = std::fs::metadata(delegated.dir.join("worklane")).expect("made");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&made),
        65534,
        "the user's own"
    );
    assert_eq!(
        as_nobody_in(&delegated).1,
        format!("containment Ok({runs:?})"),
        "made already: used again"
    );
}

#[test]
fn a_runs_directory_of_root_is_used_and_another_users_refused() {
    let delegated = Scratch::new("planted");
    std::os::unix::fs::chown(&delegated.dir, Some(65534), Some(65534)).expect("delegate");
    let runs_dir = delegated.dir.join("worklane");
    std::fs::create_dir(&runs_dir).expect("mkdir");
    let runs = format!("{}/worklane", delegated.path);
    assert_eq!(
        as_nobody_in(&delegated).1,
        format!("containment Ok({runs:?})"),
        "root's"
    );
    std::os::unix::fs::chown(&runs_dir, Some(1000), None).expect("chown");
    assert_eq!(
        as_nobody_in(&delegated).1,
        format!(
            "containment Err(Dir {{ dir: {runs_dir:?}, why: \"not a directory of this user or \
             root (owner 1000)\" }})"
        ),
        "another user's is refused"
    );
}
