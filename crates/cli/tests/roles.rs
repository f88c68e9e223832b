use super::*;

#[test]
fn a_role_refuses_a_second_holder_and_admits_another_role() {
    let site = Site::new(None);
    let mut holder = site.spawn(
        &[
            "lease",
            "run",
            "--role",
            "builder",
            "--agent-identity",
            "holder-id",
            "--profile",
            "nightly",
        ],
        HOLD,
        "0",
    );
    wait_until("the role holder", || site.file("up.0").exists());
    let out = site.output(&["lease", "run", "--role", "builder", "--", "true", "second"]);
    assert_eq!(out.status.code(), Some(75), "the same role is refused");
    let err = String::from_utf8_lossy(&out.stderr);
    for (part, what) in [
        (format!("pid {}", holder.id()), "the holder's pid"),
        ("role builder".to_owned(), "the role"),
        (
            "agentIdentity holder-id".to_owned(),
            "the holder's agentIdentity",
        ),
        ("profile nightly".to_owned(), "the holder's profile"),
        ("entrypoint `sh -c".to_owned(), "the holder's entrypoint"),
        ("refused `true second`".to_owned(), "our own entrypoint"),
        (
            "lapses by itself 60 s".to_owned(),
            "when a dead holder's lease lapses",
        ),
    ] {
        assert!(err.contains(&part), "names {what} ({part:?}): {err}");
    }
    assert!(out.stdout.is_empty(), "nothing on stdout without --json");
    assert_eq!(
        site.code(&["lease", "run", "--role", "reviewer", "--", "true"]),
        0,
        "a different role coexists"
    );
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(site.slots().join("role-builder.lease")).expect("lease record"),
    )
    .expect("json");
    assert_eq!(record["role"], "builder");
    assert_eq!(record["ttlMs"], 60_000);
    assert!(record["lastPulse"].as_u64().is_some(), "{record}");
    assert!(record["agentIdentity"].as_str().is_some(), "{record}");
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the role holder").success());
    assert!(
        !site.slots().join("role-builder.lease").exists(),
        "released on exit"
    );
}

/// `lease run --json ARGS`: its exit code, the JSON object on stdout and stderr.
fn refused_json(site: &Site, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = site
        .worklane()
        .args(["lease", "run", "--json"])
        .args(args)
        .output_gated()
        .expect("lease run --json");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        text.lines().count(),
        1,
        "one JSON object on one line: {text}{err}"
    );
    let doc = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}{err}"));
    (out.status.code(), doc, err)
}

#[test]
fn lease_run_json_prints_the_refusal_structured() {
    let site = Site::new(None);
    let holder = site.spawn(
        &[
            "lease",
            "run",
            "--role",
            "builder",
            "--agent-identity",
            "holder-id",
            "--profile",
            "nightly",
        ],
        HOLD,
        "0",
    );
    wait_until("the role holder", || site.file("up.0").exists());
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(site.slots().join("role-builder.lease")).expect("lease record"),
    )
    .expect("json");
    let (code, doc, err) = refused_json(&site, &["--role", "builder", "--", "true", "second"]);
    assert_eq!(code, Some(75), "refused: {doc}");
    assert_eq!(doc["version"], 1, "{doc}");
    assert_eq!(doc["refused"], "held", "{doc}");
    assert_eq!(doc["role"], "builder", "{doc}");
    assert_eq!(doc["resource"], "role-builder.lease", "{doc}");
    assert_eq!(
        doc["entrypoint"], "true second",
        "our own entrypoint: {doc}"
    );
    assert_eq!(doc["state"], "fresh", "{doc}");
    assert!(
        doc["why"]
            .as_str()
            .is_some_and(|w| w.contains("within its TTL")),
        "{doc}"
    );
    assert_eq!(
        doc["message"].as_str().map(|m| format!("worklane: {m}\n")),
        Some(err.clone()),
        "the message is the one on stderr"
    );
    let h = &doc["holder"];
    assert_eq!(h["pid"], holder.id(), "the holder's pid: {doc}");
    assert_eq!(h["role"], "builder", "{doc}");
    assert_eq!(h["agentIdentity"], "holder-id", "{doc}");
    assert_eq!(h["profile"], "nightly", "{doc}");
    assert!(
        h["entrypoint"]
            .as_str()
            .is_some_and(|e| e.starts_with("sh -c")),
        "the holder's entrypoint: {doc}"
    );
    for field in ["owner", "acquiredAt", "startedAt", "ttlMs", "epoch"] {
        assert_eq!(h[field], record[field], "{field} as in the record: {doc}");
    }
    assert!(h["lastPulse"].as_u64().is_some(), "lastPulse in ms: {doc}");
    std::fs::write(site.file("release.0"), b"").expect("release");
    drop(holder);

    assert_eq!(site.code(&["stop-all", "maintenance"]), 0);
    let (code, doc, _) = refused_json(&site, &["--role", "other", "--", "true"]);
    assert_eq!(code, Some(69), "STOP refuses: {doc}");
    assert_eq!(doc["refused"], "stop", "{doc}");
    assert!(doc["holder"].is_null(), "{doc}");
    assert!(
        doc["why"]
            .as_str()
            .is_some_and(|w| w.contains("maintenance")),
        "{doc}"
    );
}

#[test]
fn a_role_record_that_cannot_lapse_says_so_and_odd_files_are_busy() {
    let site = Site::new(None);
    let lease = site.slots().join("role-odd.lease");
    let shown = lease.display().to_string();
    let big = vec![b' '; 70 * 1024];
    type Plant = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Plant, &str, &str)> = vec![
        (
            "no pulse",
            Box::new(|p| std::fs::write(p, br#"{"pid": 1}"#).expect("write")),
            "busy",
            "without a pulse never lapses by itself",
        ),
        (
            "garbage",
            Box::new(|p| std::fs::write(p, b"garbage").expect("write")),
            "malformed",
            "not a lease never lapses by itself",
        ),
        (
            "a directory",
            Box::new(|p| std::fs::create_dir(p).expect("mkdir")),
            "malformed",
            "is a directory",
        ),
        (
            "over 64 KiB",
            Box::new(move |p| std::fs::write(p, &big).expect("write")),
            "malformed",
            "larger than 64 KiB",
        ),
        (
            "a symbolic link",
            Box::new(|p| std::os::unix::fs::symlink("/etc/hostname", p).expect("symlink")),
            "malformed",
            "symbolic link",
        ),
    ];
    for (what, plant, state, says) in cases {
        plant(&lease);
        let (code, doc, err) = refused_json(&site, &["--role", "odd", "--", "true"]);
        assert_eq!(code, Some(75), "{what}: busy, not an error: {err}");
        assert_eq!(doc["state"], state, "{what}: {doc}");
        assert!(err.contains(says), "{what}: says {says:?}: {err}");
        assert!(
            err.contains("never lapses by itself") && err.contains(&shown),
            "{what}: says it never lapses and where it is: {err}"
        );
        assert!(
            !err.contains("lapses by itself 60 s") && !err.contains("TTL after its last"),
            "{what}: no lapse promised: {err}"
        );
        assert!(
            lease.symlink_metadata().is_ok(),
            "{what}: the file is left alone"
        );
        match std::fs::symlink_metadata(&lease).expect("stat").is_dir() {
            true => std::fs::remove_dir(&lease).expect("rmdir"),
            false => std::fs::remove_file(&lease).expect("rm"),
        }
    }
    assert_eq!(
        site.code(&["lease", "run", "--role", "odd", "--", "true"]),
        0,
        "free once removed"
    );
}
