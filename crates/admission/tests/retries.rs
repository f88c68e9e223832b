//! A busy guard is tried again before a take gives up on it: `slots.lock` while another
//! counter finishes, a slot's guard while a probe looks at it. Each try opens the guard,
//! so the tries are counted with inotify (counts of attempts, never durations).
use super::*;

fn hold(dir: &SlotDir, name: &str) -> QuietDrop<worklane_lease::Lease> {
    match worklane_lease::acquire(
        dir,
        name,
        &Request::new("another counter"),
        &worklane_lease::Options::process(),
    )
    .expect("acquire")
    {
        worklane_lease::Acquired::Held(lease) => QuietDrop::new(lease),
        worklane_lease::Acquired::Refused(r) => panic!("free: {r}"),
    }
}

#[test]
fn a_blocking_take_tries_a_busy_slots_lock_again_before_it_reports_counting() {
    let site = Site::new("{}");
    let dir = SlotDir::open(site.temp.path()).expect("open");
    let guard = ".slots.lock.flock";
    let mut counter = Some(hold(&dir, worklane_admission::SLOTS_LOCK));
    let watch = watch(site.temp.path());
    let mut tries = None;
    let got = site
        .pool
        .take(
            Kind::Agent,
            &Request::new("waiter"),
            Wait {
                // A watchdog only: the counter finishes at the first report, which comes
                // after the take's 2,000 tries of slots.lock (2 s, and 5 s on this 2-core
                // machine under load). Short of the 23 s cargo-mutants gives the suite, so a
                // take that never reports, or never takes once the counter is done, fails.
                timeout: Some(Duration::from_secs(15)),
                priority: 0,
                on_wait: &mut |waiting| {
                    let blocker = waiting.blocker;
                    // Checked here, so that a take that would wait on fails at once.
                    assert!(
                        *blocker == Blocker::Counting && tries.is_none(),
                        "one report, of the counter (tried {tries:?} times before): \
                             {blocker}"
                    );
                    tries = Some(opens(&watch, guard));
                    counter
                        .take()
                        .expect("the counter is held until the first report")
                        .end(worklane_lease::Lease::release)
                        .expect("the counter finishes");
                },
            },
        )
        .expect("take");
    let got = match got {
        Take::Held(slot) => {
            let name = slot.name().to_owned();
            gate::quietly(|| drop(slot));
            name
        }
        Take::Blocked(b) => panic!("the take must get its slot once the counter is done: {b}"),
    };
    assert_eq!(got, "agent-0.lock", "the take got its slot");
    let tries = tries.expect("the busy counter was reported");
    // Two looks before the report (the first try, then the first in line), each trying
    // again and again until its deadline: a look that tried once would make it 2.
    assert!(
        tries > 2,
        "slots.lock is tried again inside the deadline before the take reports it busy \
             (tried {tries} times)"
    );
}

#[test]
fn a_guard_held_without_a_record_is_tried_again_before_a_refusal() {
    let site = Site::new("{}");
    // A guard held with no record: a reader's probe, a leftover of a run.
    let left = leave_running(site.take(Kind::FullRun));
    let watch = watch(site.temp.path());
    let blocker = site.blocked(Kind::FullRun);
    assert!(
        matches!(&blocker, Blocker::FullRunHeld(r) if r.why == LiveWhy::GuardHeld && r.holder.is_none()),
        "{blocker:?}"
    );
    let tries = opens(&watch, ".full-run.lock.flock");
    assert!(
        tries > 1,
        "a guard held with no record may be a momentary probe: it is tried again before \
             the take is refused (tried {tries} times)"
    );
    drop(left);
}

#[test]
fn a_holder_with_a_record_is_refused_at_the_first_try() {
    let site = Site::new("{}");
    let run = site.take(Kind::FullRun);
    let watch = watch(site.temp.path());
    let blocker = site.blocked(Kind::FullRun);
    assert!(
        matches!(&blocker, Blocker::FullRunHeld(r) if r.why == LiveWhy::GuardHeld && r.holder.is_some()),
        "{blocker:?}"
    );
    assert_eq!(
        opens(&watch, ".full-run.lock.flock"),
        1,
        "a holder that wrote its record is no probe: refused without trying again"
    );
    drop(run);
}

#[test]
fn a_guard_held_without_a_record_is_probed_three_times_before_it_counts_as_held() {
    let site = Site::new("{}");
    // What a finished run left running: the guard held, the record gone.
    let left = leave_running(site.take(Kind::Agent));
    let watch = watch(site.temp.path());
    assert!(
        !gate::quietly(|| site.pool.may_fit(Kind::Agent, 4)).expect("may_fit"),
        "it counts as held"
    );
    assert_eq!(
        opens(&watch, ".agent-0.lock.flock"),
        3,
        "a reader's probe lasts microseconds: the guard is probed three times, a \
         millisecond apart, before it counts as held"
    );
    drop(left);
}
