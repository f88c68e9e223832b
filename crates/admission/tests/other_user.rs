//! As root, the test re-runs its own binary as user 65534 (nobody) under `setpriv`, with a
//! slot directory of nobody's that holds a guard only root can open. In that run the same
//! test is the subject: it takes a slot and releases one it cannot check, and prints what
//! happened; the parent checks it.
use super::*;
use std::os::unix::fs::PermissionsExt;

const DIR_VAR: &str = "WORKLANE_ADMISSION_TEST_SUBJECT_DIR";
const TEST_NAME: &str = "other_user::a_guard_this_user_cannot_open_is_skipped";
const NOBODY: u32 = 65_534;

#[test]
fn a_guard_this_user_cannot_open_is_skipped() {
    if let Some(dir) = std::env::var_os(DIR_VAR) {
        subject(std::path::Path::new(&dir));
        return;
    }
    assert!(
        rustix::process::geteuid().is_root(),
        "this test runs the subject as user {NOBODY} with setpriv and must start as root"
    );
    let temp = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod temp dir");
    let slots = temp.path().join("slots");
    std::fs::create_dir(&slots).expect("the slot directory");
    std::os::unix::fs::chown(&slots, Some(NOBODY), Some(NOBODY)).expect("chown");
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    // Root's guard of agent-0.lock, which only root can open.
    let guard = slots.join(".agent-0.lock.flock");
    std::fs::write(&guard, b"").expect("plant");
    std::fs::set_permissions(&guard, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    // And a slot with a record whose guard only root can open: it cannot be judged, so it
    // counts as held, and the count goes on (PROTOCOL.md section 3, "Errors"): it does not
    // fail every take of this user.
    let judged = slots.join(".agent-2.lock.flock");
    std::fs::write(&judged, b"").expect("plant");
    std::fs::set_permissions(&judged, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(
        slots.join("agent-2.lock"),
        br#"{"version":1,"pid":1,"owner":"root's"}"#,
    )
    .expect("a record");
    // Our own binary may sit under directories user 65534 cannot enter: run a copy.
    let exe = temp.path().join("admission-subject");
    // Copied with the gate quiet: a child started meanwhile would hold the descriptor the
    // copy is written through, and exec of a file open for writing fails (ETXTBSY).
    gate::quietly(|| std::fs::copy(std::env::current_exe().expect("the test binary"), &exe))
        .expect("copy the test binary");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let output = Command::new("setpriv")
        .args([
            format!("--reuid={NOBODY}"),
            format!("--regid={NOBODY}"),
            "--clear-groups".into(),
        ])
        .arg("--")
        .arg(&exe)
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(DIR_VAR, &slots)
        .output_gated()
        .expect("run setpriv");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = format!(
        "subject status {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "the subject must pass\n{report}");
    assert!(
        stdout.contains(&format!("SUBJECT euid={NOBODY}\n")),
        "the subject runs as nobody\n{report}"
    );
    assert!(
        stdout.contains("SUBJECT took agent-1.lock\n"),
        "a guard this user cannot open is skipped like any stray\n{report}"
    );
    assert!(
        stdout.contains("SUBJECT release failed\n"),
        "a release that cannot read its record says so\n{report}"
    );
}

/// Run as user 65534: takes a slot, then releases it with its record unreadable, and
/// reports each step on stdout.
fn subject(dir: &std::path::Path) {
    use std::io::Write;
    let report = |line: &str| {
        writeln!(std::io::stdout(), "SUBJECT {line}").expect("write to stdout");
    };
    report(&format!("euid={}", rustix::process::geteuid().as_raw()));
    let env = Environment::from_process().var("AGENT_SLOTS_DIR", dir);
    let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"));
    let slot = match pool.try_take(Kind::Agent, &Request::new("nobody")) {
        Ok(Take::Held(slot)) => slot,
        other => panic!("SUBJECT took nothing: {other:?}"),
    };
    report(&format!("took {}", slot.name()));
    // A record its releaser cannot read back cannot be checked before it is removed.
    std::fs::set_permissions(
        dir.join(slot.name()),
        std::fs::Permissions::from_mode(0o000),
    )
    .expect("chmod the record");
    match slot.release() {
        Ok(()) => report("release succeeded"),
        Err(e) => report(&format!("release failed\n{e}")),
    }
}
