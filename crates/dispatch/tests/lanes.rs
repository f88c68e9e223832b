//! Lanes of their own: their reserved names, and their files removed when they end.
use super::*;
use worklane_dispatch::lane::{is_own_lane, own_lane, retire_own_lane};
use worklane_guard::reclaim::Removal;
use worklane_lease::{Acquired, Options};

#[test]
fn own_lane_names_are_q_and_16_lowercase_hex() {
    let made = own_lane();
    assert!(is_own_lane(&made), "{made}");
    assert_ne!(own_lane(), made, "random");
    assert!(is_own_lane("q-0123456789abcdef"));
    for not in [
        "q-0123456789abcde",
        "q-0123456789abcdef0",
        "q-0123456789ABCDEF",
        "q-0123456789abcdeg",
        "Q-0123456789abcdef",
        "r-0123456789abcdef",
        "build",
    ] {
        assert!(!is_own_lane(not), "{not}");
    }
}

fn names(site: &Site) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(site.temp.path())
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("lane-"))
        .collect();
    names.sort();
    names
}

#[test]
fn retiring_removes_an_own_lanes_files_unless_someone_holds_it() {
    // No child of another test may be forked while this one's descriptors exist: it would
    // hold the lane's lock for as long as it lives.
    let _quiet = gate::quiet();
    let site = Site::new("{}");
    let dir = site.pool.dir();
    let lane = "q-00112233445566ff";
    let lock = format!("lane-{lane}.lock");
    let lease = match gate::quietly(|| {
        worklane_lease::acquire(dir, &lock, &Request::new("driver"), &Options::process())
    })
    .expect("acquire")
    {
        Acquired::Held(lease) => lease,
        Acquired::Refused(r) => panic!("free: {r}"),
    };
    // A claim a killed taker left, beside the record and epoch.
    std::fs::write(
        site.temp
            .path()
            .join(format!("{lock}.0123456789abcdef.claim")),
        b"{}",
    )
    .expect("claim");
    // What the command left running still holds the lane: nothing is removed.
    // Close-on-exec: a child another test starts meanwhile must not inherit the lock.
    let leftover = rustix::io::fcntl_dupfd_cloexec(lease.guard().expect("held"), 0).expect("dup");
    gate::quietly(|| lease.release()).expect("release");
    let before = names(&site);
    assert_eq!(
        retire_own_lane(dir, lane).expect("retire"),
        Some(Removal::Busy)
    );
    assert_eq!(names(&site), before, "a held lane keeps its files");
    drop(leftover);
    assert_eq!(
        retire_own_lane(dir, lane).expect("retire"),
        Some(Removal::Removed)
    );
    assert_eq!(
        names(&site),
        Vec::<String>::new(),
        "record, epoch, claim and guard gone"
    );
    // A lane with a name of the launcher's choosing is never touched.
    let named = match gate::quietly(|| {
        worklane_lease::acquire(
            dir,
            "lane-build.lock",
            &Request::new("d"),
            &Options::process(),
        )
    })
    .expect("acquire")
    {
        Acquired::Held(lease) => lease,
        Acquired::Refused(r) => panic!("free: {r}"),
    };
    gate::quietly(|| named.release()).expect("release");
    let before = names(&site);
    assert!(!before.is_empty());
    assert_eq!(retire_own_lane(dir, "build").expect("retire"), None);
    assert_eq!(names(&site), before);
}

/// Whether a lane's work is over is one probe of its guard: held by someone, it is not (and
/// nothing is taken); free, it is, and the probe hands the guard over held.
#[test]
fn a_lane_is_free_only_when_nobody_holds_its_guard() {
    use worklane_dispatch::lane::{is_held, lane_lock, take_if_free};
    let _quiet = gate::quiet();
    let site = Site::new(r#"{"max_agents": 1}"#);
    let dir = site.pool.dir();
    assert!(!is_held(dir, "docs"), "a lane never taken");
    let lease = match worklane_lease::acquire(
        dir,
        &lane_lock("docs"),
        &Request::new("launcher"),
        &Options::process(),
    )
    .expect("acquire")
    {
        Acquired::Held(lease) => lease,
        Acquired::Refused(r) => panic!("free: {r}"),
    };
    assert!(is_held(dir, "docs"), "held by the launcher");
    assert!(take_if_free(dir, "docs").is_none(), "not free while held");
    drop(lease);
    assert!(!is_held(dir, "docs"), "free once released");
    let guard = take_if_free(dir, "docs").expect("free: taken");
    assert!(
        is_held(dir, "docs"),
        "held by the probe's guard while it lives"
    );
    drop(guard);
    assert!(!is_held(dir, "docs"));
    assert!(
        !is_held(dir, "../x") && take_if_free(dir, "../x").is_none(),
        "no valid name"
    );
}
