//! The drain flag: how far ahead it holds, where it lives, and undrain.
use super::*;
use worklane_admission::MAX_DRAIN_AHEAD_MS;
use worklane_admission::drain::Ignored;

const NOW: u64 = 1_796_012_839_000;
const HOUR: u64 = 3_600_000;

fn drain_until(pool: &Pool, until: u64) {
    pool.write_drain(&Drain {
        since: rfc3339_ms(NOW),
        until: rfc3339_ms(until),
        to: None,
    })
    .expect("write drain");
}

#[test]
fn a_drain_holds_for_at_most_four_hours_ahead() {
    assert_eq!(MAX_DRAIN_AHEAD_MS, 4 * HOUR, "the documented limit");
    let site = Site::new("{}");
    let pool = site.pool.clone().with_clock(Arc::new(ManualClock::at(NOW)));
    for (until, in_force) in [(NOW + 3 * HOUR, true), (NOW + 4 * HOUR, true)] {
        drain_until(&pool, until);
        assert_eq!(
            matches!(pool.drain().expect("drain"), DrainState::InForce(_)),
            in_force,
            "{} h ahead",
            (until - NOW) / HOUR
        );
    }
    drain_until(&pool, NOW + 4 * HOUR + 1);
    assert!(
        matches!(
            pool.drain().expect("drain"),
            DrainState::Ignored(Ignored::TooFarAhead { .. })
        ),
        "more than 4 h ahead is a mistake, not a drain"
    );
}

#[test]
fn undrain_says_whether_there_was_a_flag() {
    let site = Site::new("{}");
    assert!(
        !site.pool.remove_drain().expect("remove"),
        "no flag to remove"
    );
    drain_until(&site.pool, NOW + HOUR);
    assert!(site.pool.remove_drain().expect("remove"), "a flag removed");
    assert!(!site.pool.remove_drain().expect("remove"), "and it is gone");
}

#[test]
fn with_the_system_layout_the_flag_lives_in_the_state_directory() {
    let temp = tempfile::tempdir().expect("temp dir");
    let state = temp.path().join(worklane_slotfile::SYSTEM_STATE_DIR);
    let slots = temp.path().join(worklane_slotfile::SYSTEM_SLOTS_DIR);
    std::fs::create_dir_all(&slots).expect("the system slot directory");
    let env = Environment::with_root(temp.path());
    let pool = Pool::new(SlotDir::resolve_in(&env).expect("resolve"))
        .with_clock(Arc::new(ManualClock::at(NOW)));
    assert_ne!(
        pool.locations().drain_dir,
        pool.locations().slot_dir,
        "the system layout keeps the flag apart"
    );
    drain_until(&pool, NOW + HOUR);
    assert!(
        state.join("update-drain.json").exists(),
        "the flag is in {}",
        state.display()
    );
    assert!(
        !slots.join("update-drain.json").exists(),
        "not in the slot directory"
    );
    assert!(
        matches!(pool.drain().expect("drain"), DrainState::InForce(_)),
        "and read from there"
    );
    assert!(pool.remove_drain().expect("undrain"), "removed from there");
    assert!(!state.join("update-drain.json").exists(), "gone");
}
