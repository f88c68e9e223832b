//! `worklane proxy`: the CLI's wiring of `worklane-proxy` (its behaviour is tested in
//! `crates/proxy/tests`): without the `proxy` feature it says so and exits 69; with it, it
//! listens where it is told, says where, and drains and exits 0 on SIGTERM.

use super::*;

#[cfg(not(feature = "proxy"))]
#[test]
fn without_the_feature_the_proxy_says_how_to_get_it_and_exits_69() {
    let site = Site::new(None);
    let out = site.output(&["proxy", "--provider", "anthropic"]);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--features proxy"),
        "{out:?}"
    );
}

#[cfg(feature = "proxy")]
#[test]
fn the_proxy_listens_on_loopback_and_stops_on_sigterm() {
    let site = Site::new(None);
    let mut proxy = Running::new(
        site.worklane()
            .args(["proxy", "--provider", "anthropic", "--listen", "0"])
            .args(["--upstream", "http://127.0.0.1:9"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("spawn worklane proxy"),
    );
    let mut line = String::new();
    std::io::BufReader::new(proxy.stderr.as_mut().expect("stderr"))
        .read_line(&mut line)
        .expect("its first line");
    assert!(
        line.contains("listening on 127.0.0.1:"),
        "loopback, with the port it bound: {line}"
    );
    let pid = rustix::process::Pid::from_raw(i32::try_from(proxy.id()).expect("pid")).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let status = wait_exit(&mut proxy, "the proxy after SIGTERM");
    assert!(status.success(), "a drain, then exit 0: {status:?}");
}

#[cfg(feature = "proxy")]
#[test]
fn a_provider_nothing_describes_is_a_usage_error_and_github_is_refused_first() {
    let site = Site::new(None);
    let out = site.output(&["proxy", "--provider", "nosuch"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(64),
        "an undescribed provider: {err}"
    );
    assert!(err.contains("--provider nosuch"), "names the value: {err}");
    // GitHub is refused for what it is, not for a missing --upstream.
    let out = site.output(&["proxy", "--provider", "github"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "github: {err}");
    assert!(
        err.contains("GitHub") && !err.contains("--upstream"),
        "says GitHub is not served, without asking for an upstream: {err}"
    );
    // A provider the config describes wrongly is the machine's mistake.
    let bad = Site::new(Some(
        r#"{"budget_providers": {"mistral": {"dimensions": {"requests": {"format": "unix"}}}}}"#,
    ));
    let out = bad.output(&["proxy", "--provider", "mistral"]);
    assert_eq!(
        out.status.code(),
        Some(78),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
