//! What a view says of a broken file: a config that cannot be used (each kind of damage with
//! its own fix), a budget state left out, problems as lines, and the documents' text.

use super::support::*;
use worklane_slotfile::Config;
use worklane_view::config_problem::{Problem, describe_file};

/// The problem of the config at `config.json` of `site`, as `content` makes it (written as a
/// file, or made by `make`).
fn problem_of(site: &Site) -> Problem {
    let env = Environment::from_process().var("AGENT_SLOTS_DIR", site.temp.path());
    let path = site.temp.path().join("config.json");
    let e = Config::load_in(&env, &path).expect_err("a config that cannot be used");
    Problem::of(&e)
}

#[test]
fn each_kind_of_damaged_config_gets_its_own_fix() {
    let cases: [(&[u8], &str); 5] = [
        (b"{not json", "correct the JSON"),
        (
            br#"{"max_agents": 2, "max_agents": 3}"#,
            "keep one `max_agents`",
        ),
        (b"[2]", "write a JSON object"),
        (br#"{"max_agent": 2}"#, "worklane config unset max_agent"),
        (br#"{"max_agents": 0}"#, "worklane config set max_agents N"),
    ];
    for (content, fix) in cases {
        let site = Site::new("{}");
        site.set_config(std::str::from_utf8(content).expect("text"));
        let problem = problem_of(&site);
        assert!(problem.fix.contains(fix), "{fix}: {}", problem.fix);
        assert_eq!(problem.file, site.temp.path().join("config.json"));
        assert!(
            problem.line().starts_with("config problem: "),
            "{}",
            problem.line()
        );
        assert_eq!(problem.json().fix, problem.fix);
        assert_eq!(problem.json().what, problem.what);
    }
}

#[test]
fn a_link_a_directory_or_a_huge_file_at_the_config_s_name_gets_its_own_fix() {
    let site = Site::new("{}");
    let path = site.temp.path().join("config.json");
    std::fs::remove_file(&path).expect("rm");
    std::os::unix::fs::symlink(site.temp.path().join("elsewhere.json"), &path).expect("link");
    assert!(problem_of(&site).fix.contains("never follows a link"));
    std::fs::remove_file(&path).expect("rm");
    std::fs::create_dir(&path).expect("a directory");
    assert!(
        problem_of(&site)
            .fix
            .starts_with("look at it, then rm -r -- ")
    );
    std::fs::remove_dir(&path).expect("rmdir");
    std::fs::write(&path, vec![b' '; 2 * 1024 * 1024]).expect("huge");
    assert!(
        problem_of(&site)
            .fix
            .starts_with("look at it, then rm -r -- ")
    );
}

#[test]
fn the_pool_s_config_problem_is_the_view_s() {
    let site = Site::new("{}");
    assert!(Problem::of_pool(&site.pool).is_none(), "a good config");
    site.set_config(r#"{"max_test_runs": 9}"#);
    let problem = Problem::of_pool(&site.pool).expect("a problem");
    assert!(problem.fix.contains("max_test_runs"), "{}", problem.fix);
}

#[test]
fn the_config_file_is_described_with_whether_the_defaults_hold() {
    let path = std::path::Path::new("/etc/worklane/config.json");
    assert_eq!(
        describe_file(path, true),
        "config: /etc/worklane/config.json"
    );
    assert_eq!(
        describe_file(path, false),
        "config: /etc/worklane/config.json (absent: the defaults are in force)"
    );
}

#[test]
fn documents_print_on_one_line_or_indented_and_problems_as_lines() {
    use worklane_view::doc;
    let problem = doc::Problem {
        name: "x.lock".into(),
        what: "broken".into(),
        fix: "rm x.lock".into(),
        blocks: None,
    };
    assert_eq!(
        doc::line(&problem),
        r#"{"name":"x.lock","what":"broken","fix":"rm x.lock","blocks":null}"#
    );
    assert_eq!(
        doc::pretty(&problem),
        "{\n  \"name\": \"x.lock\",\n  \"what\": \"broken\",\n  \"fix\": \"rm x.lock\",\n  \"blocks\": null\n}"
    );
    assert_eq!(
        doc::problem_lines(&[problem.clone(), problem]),
        [
            "x.lock: broken; fix: rm x.lock",
            "x.lock: broken; fix: rm x.lock"
        ]
    );
}

#[test]
fn a_budget_is_shown_numbered_and_a_state_that_is_not_one_is_a_problem() {
    use worklane_budget::{CredentialKey, Ledger, Observation};
    let site = Site::new("{}");
    let ledger = Ledger::new(site.pool.dir().clone());
    let key = CredentialKey::of_token("ghp_words");
    let reset_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        + 3600;
    ledger.observe(
        &key,
        &Observation {
            status: 200,
            resource: Some("core".into()),
            window_seen: true,
            limit: Some(5000),
            remaining: Some(4000),
            reset_s: Some(reset_s),
            ..Observation::default()
        },
    );
    let health = ledger.health_report().expect("health");
    let shown = worklane_view::budget::views_json(&health.views);
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].credential, 1);
    assert_eq!(shown[0].provider, "github");
    let core = &shown[0].resources[0];
    assert_eq!(
        (core.name.as_str(), core.limit, core.remaining),
        ("core", Some(5000), 4000)
    );
    assert_eq!(core.reset, rfc3339_ms(reset_s * 1000));
    // A directory at another credential's state name: left out, and said with its fix.
    let other = CredentialKey::of_token("ghp_other");
    std::fs::create_dir(site.temp.path().join(other.state_name())).expect("a directory");
    let health = ledger.health_report().expect("health");
    let problems = worklane_view::budget::unshown_problems(site.temp.path(), &health.unshown);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].name, other.state_name());
    assert!(
        problems[0].fix.starts_with("rm -r -- "),
        "{}",
        problems[0].fix
    );
    assert!(
        problems[0].what.contains("start afresh"),
        "{}",
        problems[0].what
    );
}
