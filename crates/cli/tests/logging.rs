use super::*;
use std::os::unix::process::ExitStatusExt;

/// A slot whose supervisor was SIGKILLed: its record stays, its guard is free.
fn leave_a_dead_holder(site: &Site) {
    let out = site.output(&["run", "--", "sh", "-c", "kill -9 $PPID"]);
    assert_eq!(out.status.signal(), Some(9), "the supervisor died: {out:?}");
    // Its command (which held the guard's copy) has exited too: output() waits for every
    // holder of the output pipe.
    assert!(
        site.slots().join("agent-0.lock").exists(),
        "the record is left behind"
    );
}

#[test]
fn a_takeover_is_logged_with_v_and_not_without() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    leave_a_dead_holder(&site);
    let quiet = site.output(&["run", "-n", "--", "true"]);
    assert!(quiet.status.success(), "{quiet:?}");
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains("taking over"),
        "nothing logged without -v: {quiet:?}"
    );
    leave_a_dead_holder(&site);
    let loud = site.output(&["-v", "run", "-n", "--", "true"]);
    assert!(loud.status.success(), "{loud:?}");
    let err = String::from_utf8_lossy(&loud.stderr);
    assert!(
        err.contains("worklane: info worklane_lease") && err.contains("taking over agent-0.lock"),
        "the takeover, at info: {err}"
    );
    leave_a_dead_holder(&site);
    let env = site
        .worklane()
        .env("WORKLANE_LOG", "info")
        .args(["run", "-n", "--", "true"])
        .output_gated()
        .expect("run");
    assert!(
        String::from_utf8_lossy(&env.stderr).contains("taking over agent-0.lock"),
        "WORKLANE_LOG=info too: {env:?}"
    );
    let bad = site
        .worklane()
        .env("WORKLANE_LOG", "loud")
        .args(["slots"])
        .output_gated()
        .expect("slots");
    assert_eq!(bad.status.code(), Some(64), "{bad:?}");
}
