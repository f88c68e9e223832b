use super::*;

fn slots_dir_of(out: &Output) -> String {
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "slots --json prints JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    doc["dir"].as_str().expect("dir").to_owned()
}

#[test]
fn dir_names_the_slot_directory_and_its_config_for_every_subcommand() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let other = site.file("other");
    std::fs::create_dir(&other).expect("other dir");
    // The option wins over the variable, before or after the subcommand.
    for args in [
        vec![
            "--dir",
            site.slots().to_str().expect("utf-8"),
            "slots",
            "--json",
        ],
        vec![
            "slots",
            "--json",
            "--dir",
            site.slots().to_str().expect("utf-8"),
        ],
    ] {
        let out = site
            .worklane()
            .env("AGENT_SLOTS_DIR", &other)
            .args(&args)
            .output_gated()
            .expect("slots");
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert_eq!(
            slots_dir_of(&out),
            site.slots().display().to_string(),
            "{args:?}: --dir names the directory"
        );
    }
    // A relative path is taken from the current directory; its config.json is the cap.
    let mut holder = Running::new(
        site.worklane()
            .env_remove("AGENT_SLOTS_DIR")
            .current_dir(site.temp.path())
            .args(["--dir", "slots", "run", "--", "sh", "-c", HOLD])
            .env("K", "0")
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn"),
    );
    wait_until("the holder", || site.file("up.0").exists());
    let out = site
        .worklane()
        .env_remove("AGENT_SLOTS_DIR")
        .args(["run", "-n", "--dir"])
        .arg(site.slots())
        .args(["--", "true"])
        .output_gated()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(75),
        "the cap of 1 from <dir>/config.json is reached: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The command of a run finds the directory too (it is passed on as AGENT_SLOTS_DIR).
    let out = site
        .worklane()
        .env_remove("AGENT_SLOTS_DIR")
        .arg("--dir")
        .arg(site.slots())
        .args(["run", "--kind", "test", "--", "sh", "-c"])
        .arg(r#"printf %s "$AGENT_SLOTS_DIR""#)
        .output_gated()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        site.slots().display().to_string(),
        "the command sees the directory worklane used"
    );
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
}

#[test]
fn short_options_and_the_conflict_exit_code_keep_a_flock_scripts_contract() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut holder = site.spawn(&["run"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    assert_eq!(
        site.code(&["run", "-n", "--", "true"]),
        75,
        "-n is --no-wait"
    );
    assert_eq!(
        site.code(&["run", "-n", "-E", "1", "--", "true"]),
        1,
        "-E sets the busy code, as flock -n -E 1"
    );
    assert_eq!(
        site.code(&["run", "--conflict-exit-code", "3", "-w", "0", "--", "true"]),
        3,
        "-w is --timeout, and a timed-out wait exits with -E's code"
    );
    assert_eq!(
        site.code(&["run", "-E", "300", "-n", "--", "true"]),
        64,
        "an exit code is 0 to 255"
    );
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    assert_eq!(
        site.code(&["run", "-n", "-E", "1", "--", "sh", "-c", "exit 7"]),
        7,
        "a run that is not refused exits with its command's status"
    );
    site.code(&["stop-all", "test"]);
    assert_eq!(
        site.code(&["run", "-n", "-E", "1", "--", "true"]),
        69,
        "a STOP is no conflict: still 69"
    );
}
