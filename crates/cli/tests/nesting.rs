use super::*;

/// Runs `worklane run --kind KIND -- sh -c SCRIPT` to its end; `$W` in the script is the
/// worklane binary.
fn outer(site: &Site, kind: &str, script: &str) -> Output {
    site.worklane()
        .args(["run", "--kind", kind, "--", "sh", "-c", script])
        .env("W", worklane_bin())
        .output_gated()
        .expect("outer run")
}

fn read(site: &Site, name: &str) -> String {
    std::fs::read_to_string(site.file(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .trim()
        .to_owned()
}

#[test]
fn a_run_inside_a_run_of_the_same_kind_is_refused_at_once() {
    let site = Site::new(Some(r#"{"max_agents": 1, "max_test_runs": 1}"#));
    // --timeout: were the nesting missed, the inner run would wait for its parent's slot
    // and exit 75 after it, instead of hanging the test.
    let inner =
        r#""$W" run --kind KIND --timeout 20s -- true 2> "$T/err.KIND"; echo $? > "$T/code.KIND""#;
    for kind in ["agent", "test", "full-run"] {
        let out = outer(&site, kind, &inner.replace("KIND", kind));
        assert!(
            out.status.success(),
            "{kind}: the outer run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let err = read(&site, &format!("err.{kind}"));
        assert_eq!(
            read(&site, &format!("code.{kind}")),
            "64",
            "{kind}: refused at once as a usage error: {err}"
        );
        assert!(
            err.contains("already runs inside") && err.contains("unset"),
            "{kind}: says why and how to proceed: {err}"
        );
    }
}

#[test]
fn the_command_learns_its_slot_and_other_kinds_nest_freely() {
    let site = Site::new(Some(r#"{"max_agents": 1, "max_test_runs": 1}"#));
    let script = r#"echo "$WORKLANE_AGENT_SLOT" > "$T/var"
"$W" run --kind test --no-wait -- sh -c 'echo "$WORKLANE_TEST_SLOT" > "$T/test.var"'; echo $? > "$T/test"
"$W" run --kind full-run --no-wait -- true; echo $? > "$T/full"
"$W" lease run --role nested -- true; echo $? > "$T/role""#;
    let out = outer(&site, "agent", script);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        read(&site, "var"),
        site.slots().join("agent-0.lock").display().to_string(),
        "WORKLANE_AGENT_SLOT names the slot's lock file"
    );
    assert_eq!(
        read(&site, "test.var"),
        site.slots().join("test-0.lock").display().to_string(),
        "WORKLANE_TEST_SLOT in a test run"
    );
    assert_eq!(read(&site, "test"), "0", "a test run inside an agent");
    assert_eq!(read(&site, "full"), "0", "a full run inside an agent");
    assert_eq!(read(&site, "role"), "0", "a role lease inside an agent");
}

#[test]
fn unsetting_the_variable_or_another_directory_takes_a_slot_of_its_own() {
    let site = Site::new(Some(r#"{"max_agents": 2}"#));
    let other = site.file("other");
    std::fs::create_dir(&other).expect("other slot dir");
    let script = r#"env -u WORKLANE_AGENT_SLOT "$W" run --no-wait -- true; echo $? > "$T/unset"
AGENT_SLOTS_DIR="$T/other" "$W" run --no-wait -- true; echo $? > "$T/other.code""#;
    let out = outer(&site, "agent", script);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        read(&site, "unset"),
        "0",
        "unset: a second slot beside the parent's"
    );
    assert_eq!(
        read(&site, "other.code"),
        "0",
        "another slot directory is another pool"
    );
}
