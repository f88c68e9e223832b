//! Claude Code (`@anthropic-ai/claude-code` from npm) through the proxy: `claude -p` with its
//! home in a temporary directory and its nonessential traffic off, its API pointed at the
//! proxy by `ANTHROPIC_BASE_URL`. Its answer is the fake provider's stream, whole; every call
//! it made to generate took from the budget and was settled.
//!
//! `.ci/run` installs it where `npm` is present and names it in `WORKLANE_CLAUDE`; there, with
//! `npm` on the machine, a missing `WORKLANE_CLAUDE` fails the test. Elsewhere the test says
//! it was not run.

use super::*;
use worklane_testkit::Gated;

/// The `claude` to run, if this run has one.
fn claude() -> Option<String> {
    match std::env::var("WORKLANE_CLAUDE") {
        Ok(claude) if !claude.is_empty() => Some(claude),
        _ => {
            let npm = std::process::Command::new("npm")
                .arg("--version")
                .output_gated()
                .is_ok_and(|o| o.status.success());
            assert!(
                !(npm && std::env::var_os("WORKLANE_REQUIRE_SDKS").is_some()),
                "npm is here and WORKLANE_REQUIRE_SDKS is set, but WORKLANE_CLAUDE names no \
                 Claude Code (.ci/run installs one)"
            );
            eprintln!("the Claude Code test needs WORKLANE_CLAUDE (npm's claude); not run");
            None
        }
    }
}

#[test]
fn claude_code_answers_through_the_proxy() {
    let Some(claude) = claude() else {
        return;
    };
    run(async {
        let flavor = Flavor::Anthropic;
        let key = "sk-ant-claude-code-not-real";
        let fake = Fake::start(flavor, GENEROUS).await;
        let site = Site::new();
        let proxy = start(config(&site, flavor, &fake));
        let home = tempfile::tempdir().expect("a home");
        let mut command = std::process::Command::new(&claude);
        command
            .args(["-p", "Say hello.", "--output-format", "text"])
            .current_dir(home.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("ANTHROPIC_BASE_URL", proxy.url())
            .env("ANTHROPIC_API_KEY", key)
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("NO_PROXY", "*");
        let out = within(
            "claude -p",
            tokio::task::spawn_blocking(move || command.output_gated()),
        )
        .await
        .expect("the blocking thread")
        .expect("claude runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let seen: Vec<String> = fake.counts(|c| {
            c.seen
                .iter()
                .map(|s| format!("{} {}", s.method, s.uri))
                .collect()
        });
        assert!(
            out.status.success(),
            "claude -p: {stdout} {stderr}; the provider saw {seen:?}"
        );
        assert!(
            stdout.contains("word0 word1 word2 word3 word4"),
            "the fake's stream, whole: {stdout} {stderr}; the provider saw {seen:?}"
        );
        eprintln!("claude said {stdout:?}; the provider saw {seen:?}");
        let generated = fake.counts(|c| c.served);
        assert!(generated >= 1, "{seen:?}");
        eventually("every reservation settled", || {
            site.in_flight(flavor, key) == 0
        })
        .await;
        let state = site.state(flavor, key).expect("its budget");
        assert!(
            state["resources"]["requests"]["remaining"].is_u64(),
            "the provider's windows were recorded: {state}"
        );
        proxy.stop().await;
    });
}
