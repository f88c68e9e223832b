//! The dispatcher's private state directory: a database there is used only if it is the
//! dispatcher's own (its user's regular file, no one else may write it, one name), and a
//! database an older worklane kept in the slot directory is taken over only on the same proof.
//! Anything else is set aside and reported, never opened.
use super::service::{Bench, T0};
use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use worklane_dispatch::service::{Dispatcher, Settings};
use worklane_dispatch::state::Legacy;
use worklane_dispatch::store::{Aside, Attempt, Store};
use worklane_slotfile::PrivateDir;

/// What a case does to a file.
type Spoil = fn(&std::path::Path);

/// The test's private state directory, beside its slot directory.
fn state_of(site: &Site) -> PrivateDir {
    PrivateDir::open(&site.temp.path().join("state"), true).expect("state dir")
}

/// A fresh site at `T0`.
fn pool_of(site: &Site) -> Pool {
    site.pool.clone().with_clock(Arc::new(ManualClock::at(T0)))
}

fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Every database file of the state directory is the dispatcher's, 0600.
fn assert_private(state: &PrivateDir) {
    let me = rustix::process::geteuid().as_raw();
    for name in ["queue.db", "queue.db-wal", "queue.db-shm"] {
        if let Ok(meta) = std::fs::symlink_metadata(state.join(name)) {
            assert_eq!(
                (meta.uid(), meta.mode() & 0o7777, meta.file_type().is_file()),
                (me, 0o600, true),
                "{name}: a file of the dispatcher's user, mode 0600"
            );
        }
    }
}

/// A database the dispatcher of an older worklane kept in the slot directory (its own file,
/// mode 0644 as it made it) is taken over with its rows; the old files are renamed
/// `.migrated-<ms>`, and a second start has nothing left to take over.
#[test]
fn an_older_dispatcher_s_own_database_is_taken_over_with_its_rows() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let id = bench.enqueue("a", T0, 0);
    let Bench {
        site, dispatcher, ..
    } = bench;
    drop(dispatcher);
    let legacy = site.temp.path().join("queue.db");
    std::fs::set_permissions(&legacy, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let state = state_of(&site);
    let dispatcher = Dispatcher::open(pool_of(&site), &state, Settings::default()).expect("open");
    assert_eq!(dispatcher.recovery().legacy, Legacy::Adopted);
    assert_eq!(
        dispatcher
            .list()
            .expect("list")
            .iter()
            .map(|a| a.attempt.as_str())
            .collect::<Vec<_>>(),
        [id.as_str()],
        "the row came with it"
    );
    let names = names_in(site.temp.path());
    assert!(
        !names.iter().any(|n| n == "queue.db"),
        "gone from the slot directory: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("queue.db.migrated-")),
        "renamed for the operator: {names:?}"
    );
    assert_private(&state);
    drop(dispatcher);
    let again = Dispatcher::open(pool_of(&site), &state, Settings::default()).expect("again");
    assert_eq!(again.recovery().legacy, Legacy::None);
    assert_eq!(again.list().expect("list").len(), 1, "kept in the state");
}

/// A database in the slot directory that is not provably the dispatcher's own (another
/// user's, one its group may write, one with a second name) is never opened: set aside as
/// `.refused-<ms>`, reported, and the dispatcher starts with an empty queue.
#[test]
fn a_database_in_the_slot_directory_that_is_not_the_dispatcher_s_own_is_refused() {
    let _quiet = gate::quiet();
    let cases: [(&str, Spoil); 3] = [
        ("another user's", |p| {
            std::os::unix::fs::chown(p, Some(65_534), Some(65_534)).expect("chown");
        }),
        ("group-writable", |p| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o664)).expect("chmod");
        }),
        ("with a second name", |p| {
            std::fs::hard_link(p, p.with_file_name("twin")).expect("link");
        }),
    ];
    for (what, spoil) in cases {
        let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
        bench.enqueue("a", T0, 0);
        let Bench {
            site, dispatcher, ..
        } = bench;
        drop(dispatcher);
        spoil(&site.temp.path().join("queue.db"));
        let state = state_of(&site);
        let dispatcher =
            Dispatcher::open(pool_of(&site), &state, Settings::default()).expect("open");
        assert!(
            matches!(&dispatcher.recovery().legacy, Legacy::Refused { .. }),
            "{what}: {:?}",
            dispatcher.recovery().legacy
        );
        assert!(
            dispatcher.list().expect("list").is_empty(),
            "{what}: none of its rows read"
        );
        let names = names_in(site.temp.path());
        assert!(
            names.iter().any(|n| n.starts_with("queue.db.refused-")),
            "{what}: set aside: {names:?}"
        );
        assert_private(&state);
    }
}

/// With a database in the state directory already, one left in the slot directory is
/// ignored (never read) and left for the operator.
#[test]
fn a_database_in_the_state_directory_wins_over_one_left_in_the_slot_directory() {
    let _quiet = gate::quiet();
    let site = Site::new(r#"{"max_agents": 1}"#);
    let state = state_of(&site);
    drop(Dispatcher::open(pool_of(&site), &state, Settings::default()).expect("first"));
    std::fs::write(site.temp.path().join("queue.db"), b"not read").expect("plant");
    let dispatcher = Dispatcher::open(pool_of(&site), &state, Settings::default()).expect("second");
    assert_eq!(dispatcher.recovery().legacy, Legacy::Ignored);
    assert_eq!(
        std::fs::read(site.temp.path().join("queue.db")).expect("left"),
        b"not read"
    );
}

/// In the state directory itself, a database file that is not the dispatcher's own (another
/// user's, writable by others, a link, a FIFO) is never opened: the three files are set aside
/// as `.refused-<ms>`, the refusal reported as damage, and a new database made, 0600.
#[test]
fn a_state_file_that_is_not_the_dispatcher_s_own_is_set_aside_and_a_new_database_made() {
    let _quiet = gate::quiet();
    let cases: [(&str, &str, Spoil); 4] = [
        ("another user's database", "queue.db", |p| {
            std::os::unix::fs::chown(p, Some(65_534), Some(65_534)).expect("chown");
        }),
        ("a database others may write", "queue.db", |p| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        }),
        ("a link at the WAL", "queue.db-wal", |p| {
            let _ = std::fs::remove_file(p);
            let target = p.with_file_name("../target");
            std::os::unix::fs::symlink(target, p).expect("symlink");
        }),
        ("a FIFO at the shared memory", "queue.db-shm", |p| {
            let _ = std::fs::remove_file(p);
            let made = Command::new("mkfifo")
                .arg(p)
                .status_gated()
                .expect("mkfifo");
            assert!(made.success());
        }),
    ];
    for (what, name, spoil) in cases {
        let site = Site::new(r#"{"max_agents": 1}"#);
        let target = site.temp.path().join("target");
        std::fs::write(&target, b"mine").expect("a link's target");
        let state = state_of(&site);
        drop(Dispatcher::open(pool_of(&site), &state, Settings::default()).expect("first"));
        let path = state.join(name);
        if !path.exists() {
            std::fs::write(&path, b"").expect("make the file");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
        spoil(&path);
        let dispatcher =
            Dispatcher::open(pool_of(&site), &state, Settings::default()).expect("open");
        let damage = dispatcher
            .recovery()
            .damage
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: reported"));
        assert!(
            damage.why.contains("refused") && damage.why.contains(name),
            "{what}: says which file and why: {}",
            damage.why
        );
        let names = names_in(state.path());
        assert!(
            names
                .iter()
                .any(|n| n.starts_with(&format!("{name}.refused-"))),
            "{what}: set aside: {names:?}"
        );
        assert_private(&state);
        assert_eq!(
            std::fs::read(&target).expect("target"),
            b"mine",
            "{what}: nothing followed"
        );
    }
}

/// A status entry a member planted (at a lane with no row, naming another user's queued
/// attempt) ends nothing at the dispatcher's next start: the attempt stays queued, nothing is
/// said lost, and the entry is removed. One of the dispatcher's own naming a stored attempt
/// under another lane's name ends nothing either.
#[test]
fn a_planted_status_entry_never_ends_a_stored_attempt() {
    let _quiet = gate::quiet();
    let mut bench = Bench::new(r#"{"max_agents": 1}"#, Settings::default());
    let id = bench.enqueue("a", T0, 0);
    let dir = bench.site.temp.path().to_owned();
    let entry = |lane: &str| {
        serde_json::json!({
            "version": 1, "lane": lane, "attempt": id, "state": "queued",
            "args": ["x"], "dispatcher": {"pid": 1}
        })
        .to_string()
    };
    let planted = dir.join("queue-zzz.json");
    std::fs::write(&planted, entry("zzz")).expect("plant");
    std::os::unix::fs::chown(&planted, Some(65_534), Some(65_534)).expect("chown");
    let own = dir.join("queue-yyy.json");
    std::fs::write(&own, entry("yyy")).expect("an entry of root's");
    let Bench {
        site,
        clock,
        dispatcher,
    } = bench;
    let pool = dispatcher.pool().clone();
    drop(dispatcher);
    let store =
        worklane_dispatch::store::Store::open(&site.temp.path().join("queue.db")).expect("store");
    let dispatcher = Dispatcher::recover(pool, store, Settings::default()).expect("recover");
    let _ = clock;
    assert!(
        dispatcher.recovery().lost.is_empty(),
        "nothing said lost: {:?}",
        dispatcher.recovery().lost
    );
    let row = dispatcher.view(&id).expect("view").expect("the row stays");
    assert_eq!(row.state.as_str(), "queued", "{row:?}");
    assert!(!planted.exists() && !own.exists(), "both entries removed");
}

/// A legacy database that cannot be set aside (a directory stands at the name it would take)
/// is an error, the file left where it is: only a file that is not there is skipped.
#[test]
fn a_database_that_cannot_be_set_aside_is_an_error() {
    let _quiet = gate::quiet();
    let site = Site::new(r#"{"max_agents": 1}"#);
    let slots = site.temp.path();
    std::os::unix::fs::symlink("/nonexistent", slots.join("queue.db")).expect("symlink");
    let taken = slots.join(format!("queue.db.refused-{T0}"));
    std::fs::create_dir(&taken).expect("a directory at the new name");
    std::fs::write(taken.join("kept"), b"x").expect("not empty");
    let state = state_of(&site);
    let err = worklane_dispatch::state::adopt_legacy(site.pool.dir(), &state, T0)
        .expect_err("the rename fails");
    assert_ne!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    assert!(
        std::fs::symlink_metadata(slots.join("queue.db"))
            .expect("still there")
            .file_type()
            .is_symlink()
    );
}

/// A damaged database in the state directory is moved aside, and the one made in its place
/// (by SQLite, with SQLite's mode) is made 0600 with its log and shared memory.
#[test]
fn a_new_database_made_after_damage_is_private_too() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let state = state_of(&site);
    let path = state.join("queue.db");
    std::fs::write(&path, vec![0x5a; 8192]).expect("garbage");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (store, damage) = Store::open_private(&state, 12).expect("open");
    let damage = damage.expect("the damage");
    assert_eq!(damage.aside, Aside::Database);
    assert_eq!(damage.moved_to, state.join("queue.db.damaged-12"));
    assert!(state.join("queue.db-wal").exists(), "the new one in use");
    assert_private(&state);
    drop(store);
}

/// A database copied with its write-ahead log while in use, as a dispatcher killed mid-run
/// leaves it: its frames, the log's bytes, and the page size the log's header gives.
fn in_use_copy(state: &PrivateDir) -> (Vec<u8>, usize) {
    let source = tempfile::tempdir().expect("temp");
    let store = Store::open(&source.path().join("queue.db")).expect("store");
    for i in 0..3 {
        store
            .insert(&Attempt::queued(
                format!("a-{i}"),
                format!("l{i}"),
                T0,
                0,
                T0,
            ))
            .expect("insert");
    }
    for name in ["queue.db", "queue.db-wal"] {
        std::fs::copy(source.path().join(name), state.join(name)).expect("copy");
        std::fs::set_permissions(state.join(name), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
    }
    drop(store);
    let wal = std::fs::read(state.join("queue.db-wal")).expect("log");
    let page = u32::from_be_bytes(wal[8..12].try_into().expect("4 bytes")) as usize;
    assert!(wal.len() >= 32 + 3 * (24 + page), "three frames at least");
    (wal, page)
}

/// A write-ahead log damaged in its second frame: before SQLite replays what comes before
/// the damage (and loses the rest), a copy of the log as it was is kept, mode 0600, and the
/// damage reported; a sound log is replayed and nothing said.
#[test]
fn a_damaged_log_is_copied_before_it_is_replayed_and_a_sound_one_is_not() {
    let site = Site::new(r#"{"max_agents": 1}"#);
    let state = state_of(&site);
    let (wal, page) = in_use_copy(&state);
    let (store, damage) = Store::open_private(&state, 13).expect("open");
    assert_eq!(damage, None, "a sound log: nothing to say");
    assert_eq!(store.all().expect("all").len(), 3, "every row replayed");
    drop(store);
    assert!(!state.join("queue.db-wal.damaged-13").exists());
    let other = Site::new(r#"{"max_agents": 1}"#);
    let state = state_of(&other);
    let (mut wal_bytes, _) = in_use_copy(&state);
    assert_eq!(wal_bytes.len(), wal.len());
    let second = 32 + (24 + page) + 24 + 100;
    wal_bytes[second] ^= 0xff;
    std::fs::write(state.join("queue.db-wal"), &wal_bytes).expect("damage the second frame");
    let (store, damage) = Store::open_private(&state, 14).expect("open");
    let damage = damage.expect("the damage said");
    assert_eq!(damage.aside, Aside::WalCopy);
    assert_eq!(damage.moved_to, state.join("queue.db-wal.damaged-14"));
    assert_eq!(
        std::fs::read(&damage.moved_to).expect("the copy"),
        wal_bytes,
        "the log as it was"
    );
    assert_eq!(
        std::fs::metadata(&damage.moved_to)
            .expect("copy")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert!(
        store.all().expect("all").len() < 3,
        "what came after the damage is lost"
    );
}
