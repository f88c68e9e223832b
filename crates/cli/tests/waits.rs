use super::*;

const TOKEN: &str = "ghp_cli_wait_token_not_real";

fn events(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|e| e["event"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// `worklane lease run --wait ... --status-fd 3 -- true`, its events in `$T/<name>`.
fn waiter(site: &Site, name: &str, extra: &[&str]) -> Running {
    Running::new(
        site.command("sh")
            .args(["-c", r#"exec "$0" "$@" 3>"$T/$N""#])
            .arg(worklane_bin())
            .args(["lease", "run", "--role", "r", "--status-fd", "3"])
            .args(extra)
            .args(["--", "true"])
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env("T", site.temp.path())
            .env("N", name)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn"),
    )
}

#[test]
fn lease_run_waits_for_a_held_role_until_it_is_free_or_the_timeout() {
    let site = Site::new(None);
    let mut holder = site.spawn(&["lease", "run", "--role", "r"], HOLD, "0");
    wait_until("the role holder", || site.file("up.0").exists());
    assert_eq!(
        site.code(&["lease", "run", "--role", "r", "--", "true"]),
        75,
        "without --wait a held role refuses at once, as before"
    );
    assert_eq!(
        site.code(&[
            "lease",
            "run",
            "--role",
            "r",
            "--timeout",
            "0",
            "--",
            "true"
        ]),
        75,
        "a timeout of 0 tries once"
    );
    let mut timed = waiter(&site, "timed", &["-w", "300ms"]);
    let status = wait_exit(&mut timed, "the timed-out waiter");
    assert_eq!(status.code(), Some(75), "gave up after its timeout");
    assert_eq!(events(&site.file("timed")), ["waiting", "refused"]);

    let mut patient = waiter(&site, "patient", &["--wait"]);
    wait_until("the waiter to wait", || {
        events(&site.file("patient")) == ["waiting"]
    });
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
    let status = wait_exit(&mut patient, "the waiter");
    assert!(status.success(), "took the role once it was free: {status}");
    assert_eq!(
        events(&site.file("patient")),
        ["waiting", "taken", "end"],
        "waited, then held it"
    );
}

#[test]
fn a_stop_refuses_a_waiting_lease_run_with_69() {
    let site = Site::new(None);
    let _holder = site.spawn(&["lease", "run", "--role", "r"], HOLD, "0");
    wait_until("the role holder", || site.file("up.0").exists());
    let mut waiting = waiter(&site, "w", &["--wait"]);
    wait_until("the waiter to wait", || {
        events(&site.file("w")) == ["waiting"]
    });
    assert_eq!(site.code(&["stop-all", "test"]), 0);
    let status = wait_exit(&mut waiting, "the waiter");
    assert_eq!(status.code(), Some(69), "STOP refuses a waiter too");
    assert_eq!(events(&site.file("w")), ["waiting", "refused"]);
}

fn budget(site: &Site, args: &[&str]) -> Output {
    site.worklane()
        .arg("budget")
        .args(args)
        .env("GITHUB_TOKEN", TOKEN)
        .output_gated()
        .expect("run worklane budget")
}

fn observe_dump(site: &Site, dump: &str) -> Output {
    let path = site.file("headers");
    std::fs::write(&path, dump).expect("dump");
    budget(
        site,
        &["observe", "--headers-file", path.to_str().expect("utf-8")],
    )
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

#[test]
fn take_with_wait_max_0_refuses_at_once_with_retry_at() {
    let site = Site::new(None);
    // A 429 with Retry-After, as curl -D writes it (CRLF), after a redirect.
    let out = observe_dump(
        &site,
        "HTTP/1.1 302 Found\r\nLocation: /x\r\n\r\nHTTP/2 429 \r\nretry-after: 600\r\n\r\n",
    );
    assert!(out.status.success(), "{out:?}");
    let out = budget(
        &site,
        &["take", "--consumer", "c", "--wait-max", "0", "--json"],
    );
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(said["kind"], "secondary_rate_limited", "{said}");
    let slots: serde_json::Value =
        serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("slots");
    assert_eq!(
        said["retry_at"], slots["budgets"][0]["paused_until"],
        "retry when the pause ends: {said}"
    );
    assert!(
        said["retry_at"].as_str().is_some_and(|t| t.ends_with('Z')),
        "RFC 3339: {said}"
    );
}

#[test]
fn a_header_dump_is_observed_from_a_file_or_stdin() {
    let site = Site::new(None);
    let reset = now_s() + 600;
    let dump = format!(
        "HTTP/1.1 200 OK\nX-RateLimit-Limit: 5000\nX-RateLimit-Remaining: 1\nX-RateLimit-Reset: {reset}\n\n"
    );
    let mut child = site
        .worklane()
        .args(["budget", "observe", "--headers-file", "-"])
        .env("GITHUB_TOKEN", TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_gated()
        .expect("spawn");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), dump.as_bytes())
        .expect("write the dump");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{out:?}");
    let out = budget(&site, &["take", "--consumer", "c", "--json"]);
    let took: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(took["left"], 0, "the window the dump said: {took}");
    let out = budget(
        &site,
        &["take", "--consumer", "c", "--wait-max", "0", "--json"],
    );
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(said["kind"], "rate_limited", "{said}");
    let slots: serde_json::Value =
        serde_json::from_slice(&site.output(&["slots", "--json"]).stdout).expect("slots");
    assert_eq!(
        said["retry_at"], slots["budgets"][0]["resources"][0]["reset"],
        "retry at the window's reset: {said}"
    );
    // Bad input is a usage error.
    let out = observe_dump(&site, "X-RateLimit-Remaining: 3\n");
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no status line"));
    assert_eq!(
        budget(
            &site,
            &[
                "observe",
                "--status",
                "200",
                "--header",
                "X-RateLimit-Remaining: 1",
                "--headers-file",
                "-"
            ]
        )
        .status
        .code(),
        Some(64),
        "one source of headers"
    );
    assert_eq!(
        budget(&site, &["observe"]).status.code(),
        Some(64),
        "a status is needed"
    );
}
