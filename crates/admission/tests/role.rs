//! Role leases: one holder of a role, a refusal naming it, and no new holder under STOP.
use super::*;
use worklane_admission::role::{RoleRequest, RoleTake, RoleWait};

fn request(role: &str, who: &str) -> RoleRequest {
    RoleRequest {
        role: role.to_owned(),
        identity: who.to_owned(),
        profile: "default".to_owned(),
        entrypoint: "agent --run".to_owned(),
        ttl: Duration::from_secs(60),
    }
}

#[test]
fn a_role_has_one_holder_named_in_the_refusal_and_none_new_under_stop() {
    let _quiet = gate::quiet();
    let site = Site::new(r#"{"max_agents": 1}"#);
    let held = match site
        .pool
        .try_take_role(&request("release", "ann@host"), false)
        .expect("try")
    {
        RoleTake::Held(lease) => lease,
        other => panic!("free: {other:?}"),
    };
    let record = std::fs::read_to_string(site.temp.path().join("role-release.lease"))
        .expect("the role's record");
    for field in [
        r#""role":"release""#,
        r#""agentIdentity":"ann@host""#,
        r#""profile":"default""#,
        r#""entrypoint":"agent --run""#,
    ] {
        assert!(record.contains(field), "{field} in {record}");
    }
    match site
        .pool
        .try_take_role(&request("release", "bob@host"), true)
        .expect("try")
    {
        RoleTake::Refused(refusal) => assert_eq!(
            refusal
                .holder
                .as_ref()
                .and_then(|h| h.extra_str("agentIdentity")),
            Some("ann@host"),
            "names the holder"
        ),
        other => panic!("held by ann: {other:?}"),
    }
    assert!(
        matches!(
            site.pool
                .try_take_role(&request("other", "bob@host"), false)
                .expect("try"),
            RoleTake::Held(_)
        ),
        "another role is apart"
    );
    held.release().expect("release");
    worklane_admission::stop::write(
        site.pool.dir(),
        &Stop {
            by: "ops".into(),
            at: "2026-12-06T00:00:00.000Z".into(),
            reason: "hold".into(),
        },
    )
    .expect("STOP");
    assert!(
        matches!(
            site.pool
                .try_take_role(&request("release", "bob@host"), false)
                .expect("try"),
            RoleTake::Stopped(stop) if stop.reason == "hold"
        ),
        "no new holder under STOP"
    );
}

/// `who` takes `role`, which must be free.
fn hold(site: &Site, role: &str, who: &str) -> worklane_lease::Lease {
    match site
        .pool
        .try_take_role(&request(role, who), false)
        .expect("try")
    {
        RoleTake::Held(lease) => lease,
        other => panic!("{role} is free: {other:?}"),
    }
}

/// Who holds the role, as a refusal names them.
fn holder_of(refusal: &worklane_lease::Refusal) -> Option<String> {
    refusal
        .holder
        .as_ref()
        .and_then(|h| h.extra_str("agentIdentity"))
        .map(str::to_owned)
}

fn role_refusals(site: &Site) -> usize {
    worklane_journal::read(site.pool.dir())
        .expect("read the journal")
        .entries
        .iter()
        .filter(|e| e.event.kind() == "role-refused")
        .count()
}

#[test]
fn a_role_wait_that_does_not_wait_tries_once() {
    let _quiet = gate::quiet();
    let site = Site::new("{}");
    let _held = hold(&site, "release", "ann@host");
    let pool = site.pool.clone();
    let (got, told) = spawn_bounded(move || {
        let mut told = 0;
        let got = RoleWait::new(false, None, Duration::from_millis(1)).take(
            &pool,
            &request("release", "bob@host"),
            |_, _| told += 1,
        );
        (got.map(|take| format!("{take:?}")), told)
    })
    .join("a wait that does not wait, refused at its first try");
    let got = got.expect("try");
    assert!(got.starts_with("Refused"), "refused: {got}");
    assert_eq!(told, 0, "no refusal is waited out");
}

#[test]
fn a_role_wait_tries_again_until_the_holder_lets_go_and_journals_its_first_refusal_only() {
    let _quiet = gate::quiet();
    let site = Site::new("{}");
    let held = hold(&site, "release", "ann@host");
    let pool = site.pool.clone();
    let (got, refused) = spawn_bounded(move || {
        let mut held = Some(held);
        let mut refused = Vec::new();
        let got = RoleWait::new(true, None, Duration::from_millis(1)).take(
            &pool,
            &request("release", "bob@host"),
            |refusal, _| {
                refused.push(holder_of(refusal));
                // Three refusals waited out, then the holder lets go.
                if refused.len() == 3 {
                    held.take()
                        .expect("held until now")
                        .release()
                        .expect("release");
                }
            },
        );
        let got = match got.expect("try") {
            RoleTake::Held(lease) => lease.record().extra_str("agentIdentity").map(str::to_owned),
            other => panic!("held once its holder let go: {other:?}"),
        };
        (got, refused)
    })
    .join("a waiter taking the role its holder let go");
    assert_eq!(got.as_deref(), Some("bob@host"), "the waiter holds it");
    assert!(
        refused.len() >= 3
            && refused[..3]
                .iter()
                .all(|h| h.as_deref() == Some("ann@host")),
        "each refusal names the holder: {refused:?}"
    );
    assert_eq!(
        role_refusals(&site),
        1,
        "a waiter's later refusals are its wait, not news"
    );
}

#[test]
fn a_role_wait_looks_every_pause_and_gives_up_at_its_timeout() {
    let _quiet = gate::quiet();
    let site = Site::new("{}");
    let _held = hold(&site, "release", "ann@host");
    let pool = site.pool.clone();
    let timeout = Duration::from_millis(100);
    let (got, told, waited) = spawn_bounded(move || {
        let mut told = Vec::new();
        let mut wait = RoleWait::new(true, Some(timeout), Duration::from_millis(40));
        let got = wait.take(&pool, &request("release", "bob@host"), |refusal, waited| {
            told.push((holder_of(refusal), waited));
        });
        (got.map(|take| format!("{take:?}")), told, wait.waited())
    })
    .join("a wait of 100 ms giving up");
    let got = got.expect("try");
    assert!(got.starts_with("Refused"), "refused at its timeout: {got}");
    assert!(waited >= timeout, "not before its timeout: {waited:?}");
    // Each pause is at least 40 ms, or what is left of the timeout, after which none is.
    assert!(
        (1..=3).contains(&told.len()),
        "one look every 40 ms: {told:?}"
    );
    assert!(
        told.iter().all(|(h, _)| h.as_deref() == Some("ann@host")),
        "{told:?}"
    );
    assert!(
        told.windows(2)
            .all(|w| w[1].1 >= w[0].1 + Duration::from_millis(40)),
        "told the time waited, a pause apart: {told:?}"
    );
}
