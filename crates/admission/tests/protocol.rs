//! `protocol.json` (PROTOCOL.md section 0): a take in a directory whose level is above this
//! implementation's, or that names an extension it does not know, is refused before anything
//! is taken; the views still work and say why; `weights` is declared by the first take that
//! uses a weight or a share, and dropped only when nothing uses it.

use super::*;
use worklane_admission::protocol::{self, Unsupported};
use worklane_admission::{Ask, Dropped};

fn protocol_file(site: &Site) -> std::path::PathBuf {
    site.temp.path().join(protocol::PROTOCOL_FILE)
}

fn declared(site: &Site) -> Vec<String> {
    std::fs::read(protocol_file(site))
        .ok()
        .map(|raw| {
            let doc: serde_json::Value = serde_json::from_slice(&raw).expect("JSON");
            doc["extensions"]
                .as_array()
                .expect("a list")
                .iter()
                .map(|e| e.as_str().expect("a name").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn try_take(site: &Site, ask: &Ask) -> Result<Take, worklane_admission::take::Error> {
    gate::quietly(|| {
        let now = site.pool.clock().now_ms();
        site.pool
            .try_take_for(Kind::Agent, &Request::new("test"), ask, 0, now)
    })
}

#[test]
fn an_unknown_extension_or_a_higher_level_refuses_every_take_and_the_views_say_so() {
    for (written, expected) in [
        (
            r#"{"version": 1, "level": 1, "extensions": ["weights", "freezer"]}"#,
            Unsupported::Extension {
                name: "freezer".into(),
            },
        ),
        (
            r#"{"version": 1, "level": 2, "extensions": []}"#,
            Unsupported::Level { level: 2 },
        ),
    ] {
        let site = Site::new(r#"{"max_agents": 2}"#);
        std::fs::write(protocol_file(&site), written).expect("protocol.json");
        let refused = try_take(&site, &Ask::new()).expect_err("refused");
        assert!(
            matches!(&refused, worklane_admission::take::Error::Protocol { why, .. } if *why == expected),
            "{refused:?}"
        );
        let listed: Vec<_> = std::fs::read_dir(site.temp.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !listed.iter().any(|n| n.starts_with("agent-")),
            "nothing taken: {listed:?}"
        );
        let snapshot = site
            .pool
            .snapshot()
            .expect("the views still read the directory");
        let problem = snapshot
            .problems
            .iter()
            .find(|p| p.name == "protocol.json")
            .expect("named as a problem");
        assert!(problem.what.contains(&expected.to_string()), "{problem:?}");
        assert_eq!(problem.blocks, Some("every take"));
        assert_eq!(
            problem.fix, "upgrade worklane on this machine (see PROTOCOL.md's changelog)",
            "what it asks is known, and beyond this worklane"
        );
    }
}

#[test]
fn an_unreadable_protocol_file_refuses_takes_and_no_file_is_level_one() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    assert_eq!(
        protocol::check_dir(site.pool.dir()),
        Ok(protocol::Protocol::default())
    );
    std::fs::write(protocol_file(&site), b"{not json").expect("garbage");
    let refused = try_take(&site, &Ask::new()).expect_err("refused");
    assert!(
        matches!(
            &refused,
            worklane_admission::take::Error::Protocol {
                why: Unsupported::Unreadable { .. },
                ..
            }
        ),
        "{refused:?}"
    );
    let snapshot = site.snapshot();
    let problem = snapshot
        .problems
        .iter()
        .find(|p| p.name == "protocol.json")
        .expect("named as a problem");
    assert_eq!(
        (problem.fix.as_str(), problem.blocks),
        (
            format!(
                "repair or remove '{}' (see PROTOCOL.md section 0)",
                protocol_file(&site).display()
            )
            .as_str(),
            Some("every take")
        ),
        "what it asks cannot be known: the file is what to fix"
    );
}

#[test]
fn a_take_declares_weights_beside_another_extension_and_only_once() {
    use std::os::unix::fs::MetadataExt;
    let site = Site::new(r#"{"max_agents": 4}"#);
    std::fs::write(
        protocol_file(&site),
        r#"{"version": 1, "level": 1, "extensions": ["cgroups"]}"#,
    )
    .expect("protocol.json naming cgroups");
    let heavy = |site: &Site| match try_take(site, &Ask::new().with_weight(2)).expect("take") {
        Take::Held(slot) => QuietDrop::new(slot),
        Take::Blocked(b) => panic!("{b}"),
    };
    let first = heavy(&site);
    assert_eq!(
        declared(&site),
        ["cgroups", "weights"],
        "weights added to what was declared"
    );
    let written = std::fs::metadata(protocol_file(&site)).expect("stat").ino();
    let second = heavy(&site);
    assert_eq!(
        std::fs::metadata(protocol_file(&site)).expect("stat").ino(),
        written,
        "declared already: protocol.json is not written again"
    );
    drop((first, second));
}

#[test]
fn weights_are_declared_by_their_first_use_and_dropped_only_when_unused() {
    let site = Site::new(r#"{"max_agents": 4}"#);
    let plain = match try_take(&site, &Ask::new()).expect("take") {
        Take::Held(slot) => QuietDrop::new(slot),
        Take::Blocked(b) => panic!("{b}"),
    };
    assert!(
        !protocol_file(&site).exists(),
        "a take of weight 1 with no shares uses no extension"
    );
    let heavy = match try_take(&site, &Ask::new().with_weight(2)).expect("take") {
        Take::Held(slot) => QuietDrop::new(slot),
        Take::Blocked(b) => panic!("{b}"),
    };
    assert_eq!(declared(&site), vec!["weights".to_owned()]);
    let in_use = gate::quietly(|| site.pool.drop_extension("weights")).expect("checked");
    let Dropped::InUse(users) = in_use else {
        panic!("dropped while used: {in_use:?}")
    };
    assert!(
        users.iter().any(|u| u.contains("holds 2 units")),
        "{users:?}"
    );
    assert_eq!(declared(&site), vec!["weights".to_owned()], "kept");
    drop(heavy);
    assert_eq!(
        gate::quietly(|| site.pool.drop_extension("weights")).expect("dropped"),
        Dropped::Dropped
    );
    assert!(declared(&site).is_empty());
    assert_eq!(
        gate::quietly(|| site.pool.drop_extension("weights")).expect("not named"),
        Dropped::NotNamed
    );
    assert!(
        gate::quietly(|| site.pool.drop_extension("freezer")).is_err(),
        "an extension this worklane does not know cannot be checked, so is not dropped"
    );
    drop(plain);
}

#[test]
fn cgroups_is_dropped_while_no_held_slot_names_one_and_weights_kept_while_the_config_has_shares() {
    let site = Site::new(r#"{"max_agents": 4, "shares": {"*": 2}}"#);
    std::fs::write(
        protocol_file(&site),
        r#"{"version": 1, "level": 1, "extensions": ["cgroups"]}"#,
    )
    .expect("protocol.json naming cgroups");
    let slot = match try_take(&site, &Ask::new()).expect("take") {
        Take::Held(slot) => QuietDrop::new(slot),
        Take::Blocked(b) => panic!("{b}"),
    };
    assert_eq!(
        site.pool.protocol().expect("protocol").extensions,
        ["cgroups", "weights"],
        "the shares declared weights beside cgroups"
    );
    assert_eq!(
        gate::quietly(|| site.pool.drop_extension("cgroups")).expect("checked"),
        Dropped::Dropped,
        "a held slot whose record names no cgroup does not use cgroups, nor do the shares"
    );
    drop(slot);
    assert_eq!(
        gate::quietly(|| site.pool.drop_extension("weights")).expect("checked"),
        Dropped::InUse(vec!["the config's shares".to_owned()]),
        "nothing held, but the config counts shares"
    );
    assert!(
        gate::quietly(|| site.pool.declare_extension("cgroups")).expect("declare"),
        "declared again beside weights"
    );
    assert_eq!(declared(&site), ["cgroups", "weights"]);
}

/// A run that names its cgroup declares `cgroups` and writes the record under one hold of
/// `slots.lock` (`using_extension`): an operator's drop that comes meanwhile waits for it and
/// then sees the record, so the extension stays; a drop that came first is undone by the
/// declaration. (Declared, then named, with the lock taken twice, a drop between the two left
/// a record naming a cgroup in a directory that no longer said what it obliges.)
#[test]
fn an_extension_is_declared_and_used_under_one_hold_so_a_drop_cannot_come_between() {
    let site = Site::new(r#"{"max_agents": 4}"#);
    let mut slot = match try_take(&site, &Ask::new()).expect("take") {
        Take::Held(slot) => QuietDrop::new(slot),
        Take::Blocked(b) => panic!("{b}"),
    };
    assert!(declared(&site).is_empty(), "nothing declared yet");
    // A drop before the use: the use declares it again.
    std::fs::write(
        protocol_file(&site),
        r#"{"version": 1, "level": 1, "extensions": ["cgroups"]}"#,
    )
    .expect("protocol.json naming cgroups");
    assert_eq!(
        gate::quietly(|| site.pool.drop_extension("cgroups")).expect("checked"),
        Dropped::Dropped
    );
    // A drop that tries while the use is under way (the extension named already, the case
    // where declaring alone would not take the lock).
    let (inside, told) = std::sync::mpsc::channel();
    let dropper = {
        let pool = site.pool.clone();
        std::thread::spawn(move || {
            told.recv().expect("the use is under way");
            pool.drop_extension("cgroups")
        })
    };
    let named = site
        .pool
        .using_extension("cgroups", || {
            assert_eq!(declared(&site), ["cgroups"], "declared before the use");
            inside.send(()).expect("tell the dropper");
            // The drop's chance to come between, were the lock not held (it retries every
            // ms for 2 s): the assertions below hold whether it took it or not.
            std::thread::sleep(Duration::from_millis(300));
            let mut fields = serde_json::Map::new();
            fields.insert(
                "cgroup".to_owned(),
                "/worklane/000000000000-agent-1-1".into(),
            );
            slot.annotate(fields)
        })
        .expect("declared");
    named.expect("the record names the cgroup");
    let dropped = dropper.join().expect("the dropper").expect("checked");
    assert!(
        matches!(&dropped, Dropped::InUse(users) if users.len() == 1 && users[0].contains("cgroup")),
        "the drop came after the use and saw it: {dropped:?}"
    );
    assert_eq!(declared(&site), ["cgroups"]);
}

#[test]
fn shares_in_the_config_declare_weights_at_the_first_take() {
    let site = Site::new(r#"{"max_agents": 4, "shares": {"*": 2}}"#);
    let slot = match try_take(&site, &Ask::new()).expect("take") {
        Take::Held(slot) => QuietDrop::new(slot),
        Take::Blocked(b) => panic!("{b}"),
    };
    assert_eq!(declared(&site), vec!["weights".to_owned()]);
    let mut other = serde_json::from_slice::<serde_json::Value>(
        &std::fs::read(protocol_file(&site)).expect("read"),
    )
    .expect("JSON");
    assert_eq!(
        (other["version"].take(), other["level"].take()),
        (1.into(), 1.into())
    );
    drop(slot);
}
