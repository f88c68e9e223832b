//! A command under a TTL role lease (`run-holder role`): pulsed while it runs, halted when the
//! lease cannot be confirmed for TTL/2, well before it could lapse.

use super::*;

#[test]
fn a_confirmed_role_lease_lets_its_command_run_to_its_end() {
    let site = Site::new();
    let mut holder = site.holder(
        &["role", "merger", "2000"],
        &["sh", "-c", "sleep 1; exit 5"],
    );
    assert_eq!(holder.line(), "held role-merger.lease");
    assert_eq!(
        holder.line(),
        "outcome 5 - - false",
        "pulsed at every check for a second, never halted"
    );
}

#[test]
fn a_role_lease_that_cannot_be_confirmed_for_half_its_ttl_halts_the_command() {
    let site = Site::new();
    let ready = site.path("ready");
    let script = format!("touch {}; exec sleep 60", ready.display());
    let mut holder = site.holder(&["role", "merger", "2000"], &["sh", "-c", &script]);
    assert_eq!(holder.line(), "held role-merger.lease");
    assert!(eventually(|| ready.exists()), "the command runs");
    // Another process holds the lease's guard: every pulse finds it busy, none is lost.
    let guard = site
        .temp
        .path()
        .join("slots")
        .join(worklane_guard::guard_name("role-merger.lease"));
    let mut busy = Command::new("flock")
        .arg(&guard)
        .arg("-c")
        .arg(format!(
            "touch '{}'; exec sleep 60",
            site.path("locked").display()
        ))
        .stdin(Stdio::null())
        .spawn_gated()
        .expect("flock");
    assert!(
        eventually(|| site.path("locked").exists()),
        "the guard is held"
    );
    let locked = Instant::now();
    let outcome = holder.line();
    let after = locked.elapsed();
    assert!(
        outcome.starts_with("outcome 143 cannot_verify_the_role_lease_for_over_TTL/2:")
            && outcome.ends_with(" - true"),
        "halted for the lease, and said so: {outcome}"
    );
    assert!(
        after >= Duration::from_millis(700),
        "not at the first busy pulse: the lease was confirmed under a check before the guard \
         was taken, and is given TTL/2 ({after:?})"
    );
    assert!(
        after < Duration::from_secs(3),
        "halted by TTL/2, a check and the grace, with room for a loaded machine, not later \
         ({after:?})"
    );
    let lost: Vec<_> = worklane_journal::read(site.pool.dir())
        .expect("journal")
        .entries
        .into_iter()
        .filter(|e| e.event.kind() == "role-lost")
        .collect();
    assert_eq!(
        lost.len(),
        1,
        "the supervisor journals the loss it saw: {lost:?}"
    );
    let _ = busy.kill();
}
