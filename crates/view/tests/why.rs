//! `why`'s answers against a real pool: each blocker named as the take would meet it.

use super::support::*;
use worklane_admission::{Ask, Stop};
use worklane_budget::{CredentialKey, Ledger, Observation};
use worklane_view::why::{self, Answer, Blocker, Calls, State};

fn admission(site: &Site, kind: why::Kind, weight: u32) -> Answer {
    why::admission(kind, &site.snapshot(), &Ask::new().with_weight(weight))
}

#[test]
fn a_free_slot_is_clear_and_a_full_cap_is_busy_with_the_count() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let clear = admission(&site, why::Kind::Agent, 1);
    assert_eq!(clear.state, State::Clear, "{clear:?}");
    assert_eq!(clear.blocks(), Some(false));
    assert_eq!(clear.why, "0 of 2 held");
    assert_eq!(clear.asked, "an agent slot");
    let _one = site.take(Kind::Agent);
    let heavy = admission(&site, why::Kind::Agent, 2);
    assert_eq!(heavy.state, State::Blocked(Blocker::Busy), "{heavy:?}");
    assert!(
        heavy
            .why
            .starts_with("at cap: 1 of 2 units held, you need 2"),
        "{}",
        heavy.why
    );
    assert_eq!(admission(&site, why::Kind::Agent, 1).state, State::Clear);
    let _two = site.take(Kind::Agent);
    let full = admission(&site, why::Kind::Agent, 1);
    assert_eq!(full.state, State::Blocked(Blocker::Busy));
    assert!(full.why.starts_with("at cap: 2 of 2 held"), "{}", full.why);
    assert_eq!(full.word(), "BLOCKED");
    let test = admission(&site, why::Kind::Test, 1);
    assert_eq!(test.state, State::Clear, "another kind's cap: {test:?}");
    assert_eq!(test.asked, "a test-run slot");
}

#[test]
fn the_full_run_is_busy_while_another_holds_it() {
    let site = Site::new("{}");
    let _agent = site.take(Kind::Agent);
    let free = admission(&site, why::Kind::FullRun, 1);
    assert_eq!(
        free.state,
        State::Clear,
        "an agent slot is not the full run"
    );
    assert_eq!(free.asked, "the full-run lock");
    let _held = site.take(Kind::FullRun);
    let held = admission(&site, why::Kind::FullRun, 1);
    assert_eq!(held.state, State::Blocked(Blocker::Busy));
    assert_eq!(held.why, "another full run holds it");
}

#[test]
fn stop_and_a_drain_come_before_the_cap() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    site.pool
        .write_drain(&worklane_admission::Drain {
            since: rfc3339_ms(now_ms()),
            until: rfc3339_ms(now_ms() + 3_600_000),
            to: None,
        })
        .expect("drain");
    let drained = admission(&site, why::Kind::Agent, 1);
    assert_eq!(drained.state, State::Blocked(Blocker::Stopped));
    assert!(drained.why.starts_with("drain in force"), "{}", drained.why);
    worklane_admission::stop::write(
        site.pool.dir(),
        &Stop {
            by: "op@host".into(),
            at: rfc3339_ms(now_ms()),
            reason: "incident".into(),
        },
    )
    .expect("stop");
    let stopped = admission(&site, why::Kind::Job, 1);
    assert_eq!(stopped.state, State::Blocked(Blocker::Stopped));
    assert!(stopped.why.contains("incident"), "{}", stopped.why);
    assert!(stopped.why.contains("resume-all"), "{}", stopped.why);
}

#[test]
fn a_config_that_cannot_be_used_blocks_every_kind_with_its_fix() {
    let site = Site::new("{}");
    site.set_config(r#"{"max_agents": 0}"#);
    for kind in [why::Kind::Agent, why::Kind::Test, why::Kind::Job] {
        let answer = admission(&site, kind, 1);
        assert_eq!(answer.state, State::Blocked(Blocker::Config), "{answer:?}");
        assert!(answer.why.contains("fix: "), "{}", answer.why);
    }
}

#[test]
fn a_stray_directory_at_a_guard_every_take_needs_is_broken() {
    let site = Site::new("{}");
    std::fs::create_dir(site.temp.path().join(".full-run.lock.flock")).expect("stray");
    let answer = admission(&site, why::Kind::FullRun, 1);
    assert_eq!(answer.state, State::Blocked(Blocker::Broken), "{answer:?}");
    assert!(answer.why.contains("fix: "), "{}", answer.why);
}

#[test]
fn ownership_names_the_holder_and_a_name_that_cannot_be_a_file_is_an_error() {
    let site = Site::new("{}");
    let dir = site.pool.dir();
    let free = why::ownership(&site.snapshot(), dir, "agent-0.lock").expect("answer");
    assert_eq!(free.state, State::Clear);
    assert_eq!(free.why, "nobody holds it");
    let _held = site.take(Kind::Agent);
    let held = why::ownership(&site.snapshot(), dir, "agent-0.lock").expect("answer");
    assert_eq!(held.state, State::Blocked(Blocker::Busy));
    assert_eq!(
        held.why,
        format!("held by pid {} (view-test)", std::process::id())
    );
    assert!(matches!(
        why::ownership(&site.snapshot(), dir, "../escape.lock"),
        Err(why::Error::Name { .. })
    ));
}

#[test]
fn a_guard_held_without_a_record_is_busy_with_nobody_named() {
    let site = Site::new("{}");
    let dir = site.pool.dir();
    let guard = worklane_guard::Guard::try_acquire(dir, dir.path(), "custom.lock")
        .expect("acquire")
        .expect("free");
    let answer = why::ownership(&site.snapshot(), dir, "custom.lock").expect("answer");
    assert_eq!(answer.state, State::Blocked(Blocker::Busy), "{answer:?}");
    assert!(answer.why.contains("no record"), "{}", answer.why);
    drop(guard);
    let answer = why::ownership(&site.snapshot(), dir, "custom.lock").expect("answer");
    assert_eq!(answer.state, State::Clear, "{answer:?}");
}

#[test]
fn quota_is_clear_with_what_is_left_and_busy_until_a_spent_window_resets() {
    let site = Site::new("{}");
    let ledger = Ledger::new(site.pool.dir().clone());
    let key = CredentialKey::of_token("ghp_view_test");
    let calls = Calls::GitHub { resource: "core" };
    let unknown = why::quota(&ledger, calls, &key, "core calls".into());
    assert_eq!(unknown.state, State::Clear);
    assert_eq!(unknown.why, "no window known: calls go");
    let reset_s = now_ms() / 1000 + 3600;
    let seen = |remaining: u64| Observation {
        status: 200,
        resource: Some("core".into()),
        window_seen: true,
        limit: Some(5000),
        remaining: Some(remaining),
        reset_s: Some(reset_s),
        ..Observation::default()
    };
    ledger.observe(&key, &seen(42));
    let left = why::quota(&ledger, calls, &key, "core calls".into());
    assert_eq!(left.state, State::Clear);
    assert_eq!(left.why, "42 left in the window");
    ledger.observe(&key, &seen(0));
    let spent = why::quota(&ledger, calls, &key, "core calls".into());
    assert_eq!(spent.state, State::Blocked(Blocker::Busy), "{spent:?}");
    assert_eq!(
        spent.why,
        format!(
            "no calls left until {} (rate_limited)",
            rfc3339_ms(reset_s * 1000)
        )
    );
}

#[test]
fn release_authority_is_never_decided_here() {
    let answer = Answer::outside("ask your release process");
    assert_eq!(answer.blocks(), None);
    assert_eq!(answer.word(), "not worklane's to decide");
    assert_eq!(Answer::not_asked("x", "y").word(), "not asked");
    assert_eq!(Answer::clear("x", "y").word(), "clear");
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("fits")
}

#[test]
fn a_used_share_blocks_with_its_holdings_and_another_owner_s_share_does_not() {
    use worklane_admission::Owner;
    let site = Site::new(r#"{"max_agents": 4, "shares": {"uid:1001": 1, "*": 4}}"#);
    let take_as = |uid: u32| {
        let ask = Ask::new().with_owner(Owner::of_uid(uid));
        let now = site.pool.clock().now_ms();
        match site
            .pool
            .try_take_for(Kind::Agent, &Request::new("view-test"), &ask, 0, now)
            .expect("take")
        {
            Take::Held(slot) => slot,
            Take::Blocked(b) => panic!("free: {b}"),
        }
    };
    let _held = take_as(1001);
    let ask = |uid: u32| Ask::new().with_owner(Owner::of_uid(uid));
    let used = why::admission(why::Kind::Agent, &site.snapshot(), &ask(1001));
    assert_eq!(used.state, State::Blocked(Blocker::Busy), "{used:?}");
    assert!(
        used.why
            .starts_with("your share (uid 1001: 1 of 1) is used; held: agent-0.lock (1 unit, pid "),
        "{}",
        used.why
    );
    let other = why::admission(why::Kind::Agent, &site.snapshot(), &ask(1002));
    assert_eq!(
        other.state,
        State::Clear,
        "another owner's share: {other:?}"
    );
    let test = why::admission(why::Kind::Test, &site.snapshot(), &ask(1001));
    assert_eq!(
        test.state,
        State::Clear,
        "shares bound agents only: {test:?}"
    );
}

#[test]
fn waiters_in_line_block_a_new_run_of_their_kind_even_below_the_cap() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let _waiter = site
        .pool
        .join_line(Kind::Agent, 3, &Request::new("waiter"))
        .expect("join");
    let answer = admission(&site, why::Kind::Agent, 1);
    assert_eq!(answer.state, State::Blocked(Blocker::Busy), "{answer:?}");
    assert!(
        answer.why.starts_with(&format!(
            "0 of 2 held; 1 waiting in line, first pid {} (waiter) at priority 3 since ",
            std::process::id()
        )),
        "{}",
        answer.why
    );
    assert!(
        answer.why.ends_with(": a new run waits its turn"),
        "{}",
        answer.why
    );
    let test = admission(&site, why::Kind::Test, 1);
    assert_eq!(test.state, State::Clear, "another kind's line: {test:?}");
}
