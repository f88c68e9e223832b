//! Temp files killed writers leave are removed by ordinary takes.
use super::*;

#[test]
fn a_take_removes_old_temp_files_nobody_holds_and_keeps_the_rest() {
    let site = Site::new("{}");
    let dir = site.temp.path();
    let old_temp = dir.join(".agent-0.lock.tmp-0123456789abcdef");
    let young_temp = dir.join(".slots.lock.tmp-0123456789abcdee");
    let held_temp = dir.join(".STOP.tmp-0123456789abcded");
    let old_alias = dir.join(".agent-0.lock.flock.tmp-0123456789abcdec");
    for path in [&old_temp, &young_temp, &held_temp, &old_alias] {
        std::fs::write(path, b"").expect("plant");
    }
    for path in [&old_temp, &held_temp, &old_alias] {
        age(path, 120);
    }
    // A writer stopped mid-write still holds its temp file's lock.
    let writer = std::fs::File::open(&held_temp).expect("open");
    writer.try_lock().expect("lock the held temp file");
    let slot = site.take(Kind::Agent);
    assert!(
        !old_temp.exists(),
        "an old temp file nobody holds is removed"
    );
    assert!(!old_alias.exists(), "an old guard temp alias is removed");
    assert!(
        young_temp.exists(),
        "a young temp file may be a writer at work"
    );
    assert!(
        held_temp.exists(),
        "a held temp file belongs to a live writer"
    );
    drop(slot);
    drop(writer);
}

#[test]
fn one_pool_sweeps_at_most_once_per_interval_of_its_clock() {
    use worklane_admission::SWEEP_EVERY_MS;
    assert_eq!(
        SWEEP_EVERY_MS, 10_000,
        "a sixth of the temp files' minimum age"
    );
    let site = Site::new(r#"{"max_agents": 4}"#);
    let dir = site.temp.path();
    let now_ms = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_millis(),
    )
    .expect("ms");
    let clock = ManualClock::at(now_ms);
    let pool = site.pool.clone().with_clock(Arc::new(clock.clone()));
    let take = |pool: &Pool| match gate::quietly(|| pool.try_take(Kind::Agent, &Request::new("t")))
        .expect("take")
    {
        Take::Held(slot) => QuietDrop::new(slot),
        Take::Blocked(b) => panic!("free: {b}"),
    };
    let plant = |name: &str| {
        let path = dir.join(name);
        std::fs::write(&path, b"").expect("plant");
        age(&path, 120);
        path
    };
    let first = plant(".agent-0.lock.tmp-0123456789abcdef");
    let a = take(&pool);
    assert!(!first.exists(), "a pool's first take sweeps");
    let second = plant(".agent-1.lock.tmp-0123456789abcdee");
    clock.advance(SWEEP_EVERY_MS - 1);
    let b = take(&pool);
    assert!(
        second.exists(),
        "within the interval the take does not list for temps"
    );
    clock.advance(1);
    let c = take(&pool);
    assert!(!second.exists(), "at the interval it sweeps again");
    let third = plant(".agent-2.lock.tmp-0123456789abcded");
    clock.set(now_ms - 1);
    let d = take(&pool);
    assert!(!third.exists(), "a clock that went back sweeps at once");
    drop((a, b, c, d));
}
