//! The Python launcher and driver of examples/python, written from PROTOCOL.md with the
//! standard library alone, against a real dispatcher.
use super::*;

#[test]
fn a_python_launcher_and_driver_join_a_real_dispatcher() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python");
    let _dispatcher = super::dispatcher::start(&site, &[]);
    let slots = site.slots();
    let slots = slots.to_str().expect("utf-8");
    let out = site
        .command("python3")
        .arg(examples.join("launcher.py"))
        .args([slots, "py", "2", "python3"])
        .arg(examples.join("driver.py"))
        .args([
            slots,
            "sh",
            "-c",
            r#"echo "$WORKLANE_ATTEMPT" > "$LANE_T/ran"; sleep 0.2"#,
        ])
        .env("LANE_T", site.temp.path())
        .output_gated()
        .expect("python3 launcher.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(attempt.starts_with("a-"), "the attempt id: {attempt}");
    wait_until("the Python driver's command", || {
        std::fs::read_to_string(site.file("ran")).is_ok_and(|t| t.trim() == attempt)
    });
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        75,
        "the Python driver holds the one slot while its command runs"
    );
    wait_until("the lane to be free again", || {
        Command::new("flock")
            .arg("-n")
            .arg(site.slots().join(".lane-py.lock.flock"))
            .arg("true")
            .status_gated()
            .expect("flock")
            .success()
    });
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "and the slot"
    );
}
