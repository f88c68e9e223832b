//! Role leases: one holder of a role, a refusal naming it, and no new holder under STOP.
use super::*;
use worklane_admission::role::{RoleRequest, RoleTake};

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
