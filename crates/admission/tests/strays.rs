//! A stray file where a free index's guard belongs is skipped, never counted, and never
//! stops the pool.
use super::*;

pub(super) fn fifo(path: &std::path::Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}

#[test]
fn broken_guards_at_free_indexes_are_skipped_and_not_counted() {
    let site = Site::new(r#"{"max_agents": 2}"#);
    let dir = site.temp.path();
    std::fs::create_dir(dir.join(".agent-0.lock.flock")).expect("a directory");
    fifo(&dir.join(".agent-1.lock.flock"));
    std::os::unix::fs::symlink("/etc/passwd", dir.join(".agent-2.lock.flock")).expect("a symlink");
    std::fs::write(dir.join(".agent-3.lock.flock"), b"x").expect("a non-empty file");
    let first = site.take(Kind::Agent);
    assert_eq!(
        first.name(),
        "agent-4.lock",
        "the directory, FIFO, symlink and non-empty file are skipped"
    );
    let second = site.take(Kind::Agent);
    assert_eq!(second.name(), "agent-5.lock", "and skipped again");
    assert_eq!(
        site.blocked(Kind::Agent),
        Blocker::AtCap { held: 2, cap: 2 },
        "the strays are not counted, the two holders are"
    );
}

#[test]
fn an_index_whose_epoch_is_exhausted_is_skipped() {
    let site = Site::new("{}");
    let marker = format!("agent-0.lock.epoch.{}", u64::MAX);
    std::fs::write(site.temp.path().join(marker), b"").expect("plant");
    assert_eq!(
        site.take(Kind::Agent).name(),
        "agent-1.lock",
        "an index that can never get a larger epoch is never taken again"
    );
}
