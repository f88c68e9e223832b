//! The official SDKs (`anthropic` and `openai` from PyPI) as the proxy's clients, driven by
//! `sdk_drive.py`: calls and streams come through whole, the SDK's own retry of a 429 works
//! through the pause, `max_retries=0` gets the SDK's rate-limit error, and eight SDK clients
//! at more than the window allows meet no 429 from the provider.
//!
//! `.ci/run` installs both SDKs in a virtual environment and names its python in
//! `WORKLANE_SDK_PYTHON` (with `WORKLANE_REQUIRE_SDKS=1`, so that CI fails rather than skips
//! when they are missing). Elsewhere, without `WORKLANE_SDK_PYTHON`, these tests say so on
//! stderr and check nothing.

use super::*;
use fake::as_it_is;
use worklane_testkit::Gated;

/// The python of a virtual environment with both SDKs, if this run has one.
fn sdk_python() -> Option<String> {
    match std::env::var("WORKLANE_SDK_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ => {
            assert!(
                std::env::var_os("WORKLANE_REQUIRE_SDKS").is_none(),
                "WORKLANE_REQUIRE_SDKS is set but WORKLANE_SDK_PYTHON names no python with \
                 the anthropic and openai SDKs (.ci/run makes one)"
            );
            eprintln!(
                "the SDK tests need WORKLANE_SDK_PYTHON (a python with `pip install anthropic \
                 openai`); not run"
            );
            None
        }
    }
}

fn flavor_name(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Anthropic => "anthropic",
        Flavor::Openai => "openai",
    }
}

/// Runs one scenario of `sdk_drive.py` (on a blocking thread: the proxy and the fake serve
/// on this runtime meanwhile); its JSON.
async fn drive(
    python: &str,
    flavor: Flavor,
    base: &str,
    key: &str,
    scenario: &[&str],
) -> serde_json::Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk_drive.py");
    let mut command = std::process::Command::new(python);
    command
        .arg(script)
        .args([flavor_name(flavor), base, key])
        .args(scenario)
        // Nothing of the machine's own setup: no other key, no proxy of its own.
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .env("NO_PROXY", "*");
    let out = within(
        "the SDK's scenario",
        tokio::task::spawn_blocking(move || command.output_gated()),
    )
    .await
    .expect("the blocking thread")
    .expect("the SDK's python runs");
    assert!(
        out.status.success(),
        "{scenario:?} with the {} SDK: {}",
        flavor_name(flavor),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{scenario:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn calls_retries_and_refusals(flavor: Flavor) {
    let Some(python) = sdk_python() else {
        return;
    };
    run(async {
        let key = format!("sk-sdk-{}-not-real", flavor_name(flavor));
        let fake = Fake::start(flavor, GENEROUS).await;
        let site = Site::new();
        let proxy = start(worklane_proxy::Config {
            max_wait: Duration::from_secs(10),
            ..config(&site, flavor, &fake)
        });
        let base = proxy.url();
        let calls = drive(&python, flavor, &base, &key, &["calls"]).await;
        assert_eq!(calls["create"]["text"], "hello", "{calls}");
        assert_eq!(
            calls["stream"]["text"], "word0 word1 word2 word3 word4 ",
            "the stream came whole: {calls}"
        );
        assert_eq!(calls["stream"]["output_tokens"], 5, "{calls}");
        assert_eq!(site.in_flight(flavor, &key), 0, "both settled");
        // The provider's 429 with retry-after 1 s: the SDK's own retry waits it out, and the
        // proxy held its retry until the pause ended rather than sending it early.
        fake.force_429(1);
        let retried = drive(&python, flavor, &base, &key, &["retry"]).await;
        assert_eq!(retried["create"]["text"], "hello", "{retried}");
        let (forced_at, after) = fake.counts(|c| {
            let forced = c.forced_at[0];
            let after = c
                .seen
                .iter()
                .map(|s| s.at_ms)
                .filter(|&at| at > forced)
                .min();
            (forced, after)
        });
        let after = after.expect("the retry reached the provider");
        assert!(
            after >= forced_at + 1_000,
            "the retry went after the pause: {} ms",
            after - forced_at
        );
        // With max_retries=0 the SDK raises its own rate-limit error, the provider's 429.
        fake.force_429(1);
        let refused = drive(&python, flavor, &base, &key, &["refused"]).await;
        assert_eq!(refused["refused"], 429, "{refused}");
        assert_eq!(fake.counts(|c| c.too_many), 0);
        proxy.stop().await;
    });
}

#[test]
fn anthropic_sdk_calls_streams_retries_and_refusals_through_the_proxy() {
    calls_retries_and_refusals(Flavor::Anthropic);
}

#[test]
fn openai_sdk_calls_streams_retries_and_refusals_through_the_proxy() {
    calls_retries_and_refusals(Flavor::Openai);
}

/// Eight SDK clients with `max_retries=0`, two calls each, at four a window the provider
/// keeps as it does (whole-second or rounded resets): every call succeeds, and the provider
/// refuses none.
fn eight_sdk_clients(flavor: Flavor) {
    let Some(python) = sdk_python() else {
        return;
    };
    run(async {
        let key = format!("sk-sdk-herd-{}-not-real", flavor_name(flavor));
        let limits = Limits {
            window_ms: 2_000,
            requests: 4,
            tokens: 1_000_000,
        };
        let fake = Fake::start_as(flavor, limits, as_it_is(flavor)).await;
        let site = Site::new();
        let proxy = start(worklane_proxy::Config {
            max_wait: Duration::from_secs(60),
            ..config(&site, flavor, &fake)
        });
        let base = proxy.url();
        // A fleet that has run before: the window is known.
        let warm = drive(&python, flavor, &base, &key, &["herd", "1", "1"]).await;
        assert_eq!(warm["statuses"], serde_json::json!([200]), "{warm}");
        let herd = drive(&python, flavor, &base, &key, &["herd", "8", "2"]).await;
        let statuses = herd["statuses"].as_array().expect("statuses");
        assert_eq!(statuses.len(), 16, "{herd}");
        assert!(
            statuses.iter().all(|s| *s == 200),
            "every call succeeded with max_retries=0: {herd}"
        );
        assert_eq!(
            fake.counts(|c| (c.served, c.too_many)),
            (17, 0),
            "no upstream 429"
        );
        proxy.stop().await;
    });
}

#[test]
fn anthropic_eight_sdk_clients_meet_no_upstream_429() {
    eight_sdk_clients(Flavor::Anthropic);
}

#[test]
fn openai_eight_sdk_clients_meet_no_upstream_429() {
    eight_sdk_clients(Flavor::Openai);
}
