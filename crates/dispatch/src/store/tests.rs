use super::*;
use std::collections::BTreeMap;

/// `look` on `store`, on a thread of its own given 10 s: a look that passes a damaged row
/// over parks it and looks again, so a store that did not park it would look forever; the
/// test fails instead of hanging (the thread is left to the end of the test process).
fn within<T: Send + 'static>(
    store: Store,
    look: impl FnOnce(&Store) -> T + Send + 'static,
) -> (T, Store) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let seen = look(&store);
        let _ = tx.send((seen, store));
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the look ends within 10 s, not a loop over a damaged row")
}

fn attempt(id: &str, lane: &str, priority: i64, queued_at_ms: u64) -> Attempt {
    Attempt {
        placement: "wt".into(),
        args: vec!["worklane".into(), "claim".into()],
        stage: "build".into(),
        env: BTreeMap::from([("LANE_X".to_owned(), "1".to_owned())]),
        lane_epoch: Some(1),
        enqueuer: Some(Enqueuer {
            uid: 1001,
            gid: 1002,
            groups: vec![4, 27],
        }),
        ..Attempt::queued(id.into(), lane.into(), queued_at_ms, priority, queued_at_ms)
    }
}

#[test]
fn rows_round_trip_and_come_out_by_priority_then_start() {
    let dir = tempfile::tempdir().expect("temp");
    let store = Store::open(&dir.path().join("queue.db")).expect("open");
    store.insert(&attempt("a-3", "c", 0, 30)).expect("insert");
    store.insert(&attempt("a-1", "a", 0, 10)).expect("insert");
    store.insert(&attempt("a-2", "b", 5, 20)).expect("insert");
    assert_eq!(
        store.next_queued(0).expect("next").expect("one").id,
        "a-2",
        "priority first"
    );
    assert!(
        store
            .set_state("a-2", State::Starting, Some("t"), 40)
            .expect("set")
    );
    assert_eq!(
        store.next_queued(0).expect("next").expect("one").id,
        "a-1",
        "then the oldest start"
    );
    let back = store.get("a-2").expect("get").expect("stored");
    assert_eq!(
        (back.state, back.token.as_deref(), back.state_at_ms),
        (State::Starting, Some("t"), 40)
    );
    assert_eq!(back.queued_at_ms, 20, "the original start is kept");
    assert_eq!(back.env.get("LANE_X").map(String::as_str), Some("1"));
    assert!(store.remove("a-1").expect("remove"));
    assert!(!store.remove("a-1").expect("remove"), "gone");
    let ids: Vec<String> = store
        .all()
        .expect("all")
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(
        ids,
        ["a-2", "a-3"],
        "starting first, then the queue's order"
    );
}

#[test]
fn weight_and_owner_round_trip_and_each_owner_has_one_head() {
    let dir = tempfile::tempdir().expect("temp");
    let store = Store::open(&dir.path().join("queue.db")).expect("open");
    let of = |id: &str, uid: u32, owner: Option<&str>, priority: i64, start: u64| Attempt {
        weight: 3,
        owner: owner.map(str::to_owned),
        enqueuer: Some(Enqueuer {
            uid,
            gid: uid,
            groups: vec![],
        }),
        ..attempt(id, id, priority, start)
    };
    store.insert(&of("a-1", 1001, None, 0, 10)).expect("insert");
    store.insert(&of("a-2", 1001, None, 0, 5)).expect("insert");
    store
        .insert(&of("a-3", 1001, Some("nightly"), 0, 1))
        .expect("insert");
    store.insert(&of("a-4", 1002, None, 1, 50)).expect("insert");
    store
        .insert(&attempt("a-5", "e", 0, 20))
        .expect("a row of weight 1, of uid 1001 untagged too");
    let back = store.get("a-3").expect("get").expect("stored");
    assert_eq!((back.weight, back.owner.as_deref()), (3, Some("nightly")));
    assert_eq!(store.get("a-5").expect("get").expect("row").weight, 1);
    let heads: Vec<String> = store
        .queued_heads(0)
        .expect("heads")
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(
        heads,
        ["a-4", "a-3", "a-2"],
        "one head per enqueuer and tag (uid 1001 untagged: a-2, its earliest start), in \
         admission order"
    );
    store
        .set_state("a-2", State::Starting, Some("t"), 30)
        .expect("admitted");
    let heads: Vec<String> = store
        .queued_heads(0)
        .expect("heads")
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(heads, ["a-4", "a-3", "a-1"], "queued rows only");
    let ask = back.ask().expect("an enqueuer");
    assert_eq!(
        (ask.weight(), ask.owner().uid(), ask.owner().tag()),
        (3, 1001, Some("nightly"))
    );
    assert_eq!(ask.owner().groups(), [1001], "its gid, then its groups");
}

#[test]
fn a_row_of_weight_zero_is_damaged_and_never_started() {
    let dir = tempfile::tempdir().expect("temp");
    let store = Store::open(&dir.path().join("queue.db")).expect("open");
    store.insert(&attempt("a-1", "a", 0, 10)).expect("insert");
    store.insert(&attempt("a-2", "b", 0, 20)).expect("insert");
    store
        .conn
        .execute("UPDATE attempts SET weight = 0 WHERE id = 'a-1'", [])
        .expect("damage");
    let row = store.get("a-1").expect("get").expect("kept");
    assert!(row.damaged && row.state == State::Failed, "{row:?}");
    assert!(
        row.last_error
            .as_deref()
            .is_some_and(|e| e.contains("weight is 0")),
        "{row:?}"
    );
    let (next, _store) = within(store, |store| store.next_queued(0).expect("next"));
    assert_eq!(
        next.expect("one").id,
        "a-2",
        "the damaged row does not hold the next"
    );
}

#[test]
fn state_changes_and_removals_say_whether_a_row_was_there() {
    let dir = tempfile::tempdir().expect("temp");
    let store = Store::open(&dir.path().join("q.db")).expect("open");
    store.insert(&attempt("a-1", "l", 0, 5)).expect("insert");
    assert!(
        store
            .set_state("a-1", State::Starting, Some("t"), 9)
            .expect("update")
    );
    assert!(
        !store
            .set_state("a-2", State::Starting, Some("t"), 9)
            .expect("update"),
        "no row"
    );
    let row = store.get("a-1").expect("get").expect("row");
    assert_eq!(
        (row.state, row.token.as_deref(), row.state_at_ms),
        (State::Starting, Some("t"), 9)
    );
    assert!(store.remove("a-1").expect("remove"));
    assert!(!store.remove("a-1").expect("remove"), "gone already");
}

#[test]
fn starting_rows_and_queued_lanes_are_looked_up_alone() {
    let dir = tempfile::tempdir().expect("temp");
    let store = Store::open(&dir.path().join("queue.db")).expect("open");
    for (id, lane, priority, start) in
        [("a-1", "x", 0, 10), ("a-2", "y", 3, 20), ("a-3", "z", 0, 5)]
    {
        store
            .insert(&attempt(id, lane, priority, start))
            .expect("insert");
    }
    assert!(store.starting().expect("starting").is_empty(), "none yet");
    for id in ["a-1", "a-2"] {
        assert!(
            store
                .set_state(id, State::Starting, Some("t"), 40)
                .expect("set")
        );
    }
    let ids: Vec<String> = store
        .starting()
        .expect("starting")
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(ids, ["a-2", "a-1"], "only the starting ones, in order");
    assert!(
        store.lane_queued("z").expect("lookup"),
        "a queued row's lane"
    );
    assert!(
        store.lane_queued("x").expect("lookup"),
        "a starting row's lane"
    );
    assert!(!store.lane_queued("w").expect("lookup"), "no row");
    assert!(store.remove("a-3").expect("remove"));
    assert!(!store.lane_queued("z").expect("lookup"), "its row gone");
}

#[test]
fn one_attempt_per_lane() {
    let dir = tempfile::tempdir().expect("temp");
    let store = Store::open(&dir.path().join("queue.db")).expect("open");
    store
        .insert(&attempt("a-1", "docs", 0, 10))
        .expect("insert");
    assert!(
        store.insert(&attempt("a-2", "docs", 0, 11)).is_err(),
        "a lane is one attempt"
    );
}

#[test]
fn the_schema_is_versioned_and_a_newer_one_is_refused() {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("queue.db");
    drop(Store::open(&path).expect("create"));
    let reopened = Store::open(&path).expect("reopen at the same version");
    drop(reopened);
    let conn = Connection::open(&path).expect("raw");
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .expect("bump");
    drop(conn);
    let err = Store::open(&path).expect_err("newer");
    assert!(err.to_string().contains("newer"), "{err}");
}

#[test]
fn a_damaged_row_is_named_with_its_column_and_the_parsers_cause() {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("queue.db");
    let store = Store::open(&path).expect("open");
    store
        .insert(&Attempt {
            owner: Some("nightly".to_owned()),
            ..attempt("a-1", "docs", 0, 10)
        })
        .expect("insert");
    store
        .insert(&attempt("a-2", "next", 0, 20))
        .expect("insert");
    store
        .conn
        .execute("UPDATE attempts SET args = 'not json' WHERE id = 'a-1'", [])
        .expect("damage the arguments");
    let raw = store
        .conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM attempts WHERE id = 'a-1'"),
            [],
            Raw::from_row,
        )
        .expect("raw");
    let err = raw.parse(&path).expect_err("damaged");
    let Error::BadColumn {
        id, column, source, ..
    } = &err
    else {
        panic!("a damaged column: {err:?}")
    };
    assert_eq!((id.as_str(), *column), ("a-1", "arguments"), "{err}");
    assert!(source.is_syntax(), "the parser's own error: {source:?}");
    assert!(
        !err.to_string().contains(&source.to_string()),
        "the cause is not repeated in the message: {err}"
    );
    // Read, it is failed and damaged, never started, with its damage as its error.
    let row = store.get("a-1").expect("get").expect("listed");
    assert!(row.damaged && row.state == State::Failed, "{row:?}");
    assert_eq!(
        row.owner.as_deref(),
        Some("nightly"),
        "whose share it was, kept"
    );
    assert!(
        row.last_error
            .as_deref()
            .is_some_and(|e| e.contains("arguments") && e.contains("queue cancel a-1")),
        "{row:?}"
    );
    assert_eq!(row.enqueuer.map(|e| e.uid), Some(1001), "whose it is, kept");
    let (next, store) = within(store, |store| store.next_queued(100).expect("next"));
    assert_eq!(
        next.map(|a| a.id),
        Some("a-2".to_owned()),
        "the damaged row does not hold the next"
    );
    let parked: String = store
        .conn
        .query_row("SELECT state FROM attempts WHERE id = 'a-1'", [], |r| {
            r.get(0)
        })
        .expect("state");
    assert_eq!(parked, "failed", "parked on the way");
    // The schema's CHECK keeps a state out; a damaged file is not held to it.
    store
        .conn
        .pragma_update(None, "ignore_check_constraints", true)
        .expect("pragma");
    store
        .conn
        .execute("UPDATE attempts SET state = 'gone' WHERE id = 'a-2'", [])
        .expect("damage the state");
    let all = store.all().expect("listed, damage and all");
    let gone = all.iter().find(|a| a.id == "a-2").expect("a-2");
    assert!(
        gone.damaged
            && gone
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("\"gone\"")),
        "{gone:?}"
    );
}

#[test]
fn a_version_1_queue_is_migrated_with_its_rows() {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("queue.db");
    let conn = Connection::open(&path).expect("raw");
    conn.execute_batch(MIGRATIONS[0]).expect("version 1 schema");
    conn.pragma_update(None, "user_version", 1)
        .expect("version");
    conn.execute(
        "INSERT INTO attempts (id, lane, state, token, queued_at_ms, priority, placement, \
         args, stage, env, state_at_ms) VALUES ('a-1', 'l', 'queued', NULL, 7, 2, '', \
         '[\"true\"]', '', '{}', 7)",
        [],
    )
    .expect("a version 1 row");
    drop(conn);
    let store = Store::open(&path).expect("migrate");
    let version: i64 = store
        .conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("version");
    assert_eq!(version, SCHEMA_VERSION);
    let row = store.get("a-1").expect("get").expect("kept");
    assert_eq!(
        (row.queued_at_ms, row.priority, row.lane_epoch),
        (7, 2, None)
    );
    assert_eq!(
        (row.weight, row.owner),
        (1, None),
        "a row queued before weights takes one unit"
    );
    store.insert(&attempt("a-2", "m", 0, 9)).expect("a new row");
    assert_eq!(
        store.get("a-2").expect("get").expect("row").lane_epoch,
        Some(1)
    );
}

#[test]
fn admission_order_comes_from_the_index() {
    let dir = tempfile::tempdir().expect("temp");
    let store = Store::open(&dir.path().join("queue.db")).expect("open");
    let plan: String = store
        .conn
        .query_row(
            "EXPLAIN QUERY PLAN SELECT id FROM attempts INDEXED BY attempts_order \
             WHERE state = 'queued' ORDER BY priority DESC, queued_at_ms, id LIMIT 1",
            [],
            |row| row.get(3),
        )
        .expect("plan");
    assert!(
        plan.contains("attempts_order"),
        "an index search, not a scan: {plan}"
    );
    assert!(!plan.contains("TEMP B-TREE"), "no sort step: {plan}");
}

fn ended(id: &str, at: u64, uid: Option<u32>) -> Ended {
    Ended {
        id: id.to_owned(),
        lane: "l".into(),
        args: vec!["true".into()],
        uid,
        queued_at_ms: 1,
        started_at_ms: Some(2),
        ended_at_ms: at,
        outcome: Outcome::Exited,
        status: Some(3),
        signal: None,
        detail: "d".into(),
        log: Some(log_name(id)),
    }
}

#[test]
fn a_row_waiting_out_its_backoff_is_passed_over_until_its_end() {
    let dir = tempfile::tempdir().expect("temp");
    let store = Store::open(&dir.path().join("queue.db")).expect("open");
    store.insert(&attempt("a-1", "a", 0, 10)).expect("insert");
    store.insert(&attempt("a-2", "b", 0, 20)).expect("insert");
    assert!(
        store
            .start_failed("a-1", State::Queued, 1, "no driver", 500, 100)
            .expect("failed")
    );
    assert_eq!(
        store.next_queued(499).expect("next").expect("one").id,
        "a-2"
    );
    assert_eq!(
        store.next_queued(500).expect("next").expect("one").id,
        "a-1",
        "at its end"
    );
    assert_eq!(store.next_retry(100).expect("retry"), Some(500));
    assert_eq!(store.next_retry(500).expect("retry"), None, "none ahead");
    let row = store.get("a-1").expect("get").expect("row");
    assert_eq!(
        (
            row.failures,
            row.last_error.as_deref(),
            row.retry_at_ms,
            row.state_at_ms
        ),
        (1, Some("no driver"), 500, 100)
    );
    assert!(
        store
            .start_failed("a-2", State::Failed, 5, "gone", 0, 101)
            .expect("park")
    );
    assert!(
        store
            .next_queued(1_000)
            .expect("next")
            .is_some_and(|a| a.id == "a-1")
    );
    assert!(store.retry("a-2", None, 102).expect("retry"));
    let row = store.get("a-2").expect("get").expect("row");
    assert_eq!(
        (row.state, row.failures, row.retry_at_ms),
        (State::Queued, 0, 0)
    );
    assert!(store.started("a-2", 77).expect("started"));
    assert!(store.started("a-2", 78).expect("started"));
    let row = store.get("a-2").expect("get").expect("row");
    assert_eq!((row.driver_pid, row.starts), (Some(78), 2));
    assert!(store.running("a-2", Some(79), 103).expect("running"));
    assert!(
        store
            .cancel_asked("a-2", Cancel { at_ms: 104, by: 5 })
            .expect("cancel")
    );
    let row = store.get("a-2").expect("get").expect("row");
    assert_eq!(
        (row.state, row.driver_pid, row.cancel),
        (State::Running, Some(79), Some(Cancel { at_ms: 104, by: 5 }))
    );
    assert_eq!(
        store.in_state(State::Running).expect("running").len(),
        1,
        "found by its state"
    );
}

#[test]
fn the_history_keeps_the_newest_and_prunes_by_age_and_owner() {
    let dir = tempfile::tempdir().expect("temp");
    let mut store = Store::open(&dir.path().join("queue.db")).expect("open");
    store.insert(&attempt("a-x", "x", 0, 1)).expect("insert");
    store.end(&ended("a-x", 5, Some(1001))).expect("end");
    assert!(store.get("a-x").expect("get").is_none(), "its row is gone");
    assert!(
        !store.lane_queued("x").expect("lane"),
        "its lane free for a new row"
    );
    let kept = store.ended("a-x").expect("ended").expect("kept");
    assert_eq!(kept, ended("a-x", 5, Some(1001)), "kept whole");
    for i in 0..MAX_ENDED + 5 {
        store
            .end(&ended(&format!("a-{i:05}"), 10 + u64::from(i), Some(1002)))
            .expect("end");
    }
    let history = store.history(u32::MAX).expect("history");
    assert_eq!(history.len(), MAX_ENDED as usize, "cut to its bound");
    assert_eq!(
        history[0].id,
        format!("a-{:05}", MAX_ENDED + 4),
        "newest first"
    );
    assert!(
        store.ended("a-x").expect("ended").is_none(),
        "the oldest went first"
    );
    let pruned = store.prune(20, Some(1001)).expect("prune");
    assert!(pruned.is_empty(), "another owner's are kept");
    let pruned = store.prune(20, Some(1002)).expect("prune");
    assert_eq!(
        pruned.iter().map(|e| e.ended_at_ms).collect::<Vec<_>>(),
        (15..20).collect::<Vec<_>>(),
        "only those that ended before the time"
    );
    let all = store.prune(u64::MAX, None).expect("prune all");
    assert_eq!(all.len(), MAX_ENDED as usize - 5);
    assert!(store.history(10).expect("history").is_empty());
}

#[test]
fn a_sound_database_opens_checked_and_a_damaged_one_is_moved_aside() {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("queue.db");
    let (store, damage) = Store::open_checked(&path, 7).expect("new");
    assert_eq!(damage, None, "a new one is sound");
    store.insert(&attempt("a-1", "l", 0, 5)).expect("insert");
    drop(store);
    let (store, damage) = Store::open_checked(&path, 8).expect("again");
    assert_eq!(damage, None);
    assert!(store.get("a-1").expect("get").is_some(), "its rows kept");
    drop(store);
    std::fs::write(&path, vec![0x5a; 8192]).expect("garbage");
    let (store, damage) = Store::open_checked(&path, 9).expect("moved aside");
    let damage = damage.expect("damage found");
    assert_eq!(damage.moved_to, dir.path().join("queue.db.damaged-9"));
    assert_eq!(
        std::fs::read(&damage.moved_to).expect("kept").len(),
        8192,
        "moved, never deleted"
    );
    assert!(
        damage.why.contains("file is not a database"),
        "SQLite's words: {damage:?}"
    );
    assert!(store.all().expect("all").is_empty(), "a new, empty queue");
    drop(store);
    std::fs::write(&path, vec![0x5a; 8192]).expect("garbage again");
    let (_, damage) = Store::open_checked(&path, 9).expect("moved aside again");
    assert_eq!(
        damage.expect("damage").moved_to,
        dir.path().join("queue.db.damaged-9-1"),
        "a name of its own when the first is taken"
    );
}

#[test]
fn a_version_2_queue_is_migrated_with_its_lanes_of_their_own() {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("queue.db");
    let conn = Connection::open(&path).expect("raw");
    conn.execute_batch(MIGRATIONS[0]).expect("version 1");
    conn.execute_batch(MIGRATIONS[1]).expect("version 2");
    conn.pragma_update(None, "user_version", 2)
        .expect("version");
    for (id, lane) in [
        ("a-1", "q-0123456789abcdef"),
        ("a-2", "docs"),
        ("a-3", "q-0123"),
    ] {
        conn.execute(
            "INSERT INTO attempts (id, lane, state, token, queued_at_ms, priority, placement, \
             args, stage, env, state_at_ms, lane_epoch) VALUES (?1, ?2, 'starting', 't', 7, \
             0, '', '[\"true\"]', '', '{}', 7, 3)",
            params![id, lane],
        )
        .expect("a version 2 row");
    }
    drop(conn);
    let store = Store::open(&path).expect("migrate");
    let own: Vec<(String, bool)> = ["a-1", "a-2", "a-3"]
        .iter()
        .map(|id| {
            let row = store.get(id).expect("get").expect("kept");
            (row.id, row.own_lane)
        })
        .collect();
    assert_eq!(
        own,
        [
            ("a-1".into(), true),
            ("a-2".into(), false),
            ("a-3".into(), false)
        ],
        "a lane of the reserved shape was one of its own"
    );
    let row = store.get("a-1").expect("get").expect("row");
    assert_eq!(
        (
            row.state,
            row.token.as_deref(),
            row.lane_epoch,
            row.enqueuer
        ),
        (State::Starting, Some("t"), Some(3), None),
        "kept, with no enqueuer recorded"
    );
    assert!(
        store
            .set_state("a-1", State::Failed, None, 9)
            .expect("the new states")
    );
}

/// [`attempt`] enqueued by uid 2002 (another owner than the 1001 of `attempt`).
fn of_user_2002(id: &str, lane: &str, queued_at_ms: u64) -> Attempt {
    Attempt {
        enqueuer: Some(Enqueuer {
            uid: 2002,
            gid: 2002,
            groups: vec![],
        }),
        ..attempt(id, lane, 0, queued_at_ms)
    }
}

/// A damaged head of an owner's line is parked as failed, and that owner's next row heads
/// instead, within a bound: a store that only said it parked the row would find it again at
/// every look, forever.
#[test]
fn a_damaged_head_is_parked_and_its_owner_s_next_row_heads_instead() {
    let dir = tempfile::tempdir().expect("temp");
    let store = Store::open(&dir.path().join("queue.db")).expect("open");
    store.insert(&attempt("a-1", "a", 0, 10)).expect("insert");
    store.insert(&attempt("a-2", "b", 0, 20)).expect("insert");
    store.insert(&of_user_2002("a-3", "c", 15)).expect("insert");
    store
        .conn
        .execute("UPDATE attempts SET weight = 0 WHERE id = 'a-1'", [])
        .expect("damage");
    let (heads, store) = within(store, |store| store.queued_heads(0).expect("heads"));
    let mut ids: Vec<&str> = heads.iter().map(|a| a.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["a-2", "a-3"], "the owner's next row heads its line");
    let parked = store.get("a-1").expect("get").expect("kept");
    assert_eq!(parked.state, State::Failed, "{parked:?}");
    assert!(
        parked
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("weight is 0")),
        "its damage is its error: {parked:?}"
    );
}

/// A user's waiting attempts are their rows not yet running, whatever their state; a row is
/// found by its lane, and a lane without one has none.
#[test]
fn a_user_s_waiting_rows_and_a_lane_s_row_are_counted_and_found() {
    let dir = tempfile::tempdir().expect("temp");
    let store = Store::open(&dir.path().join("queue.db")).expect("open");
    for (id, lane, start) in [("a-1", "a", 10), ("a-2", "b", 20), ("a-4", "d", 30)] {
        store.insert(&attempt(id, lane, 0, start)).expect("insert");
    }
    store.insert(&of_user_2002("a-3", "c", 15)).expect("insert");
    assert!(
        store
            .set_state("a-4", State::Running, Some("t"), 40)
            .expect("set")
    );
    assert!(
        store
            .set_state("a-2", State::Starting, Some("u"), 40)
            .expect("set")
    );
    assert_eq!(
        store.waiting_of(1001).expect("count"),
        2,
        "queued and starting"
    );
    assert_eq!(store.waiting_of(2002).expect("count"), 1);
    assert_eq!(store.waiting_of(3003).expect("count"), 0, "none");
    assert_eq!(
        store.lane_row("b").expect("look").map(|a| a.id),
        Some("a-2".to_owned())
    );
    assert!(store.lane_row("zz").expect("look").is_none(), "no row");
}

/// A database from a newer worklane is an error, never damage: it is not moved aside.
#[test]
fn a_database_of_a_newer_schema_is_an_error_and_stays_where_it_is() {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("queue.db");
    drop(Store::open(&path).expect("new"));
    let conn = Connection::open(&path).expect("raw");
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .expect("a newer version");
    drop(conn);
    let err = Store::open_checked(&path, 9).expect_err("too new");
    assert!(matches!(err, Error::TooNew { .. }), "{err:?}");
    assert!(path.exists(), "left where it is");
    assert!(
        !dir.path().join("queue.db.damaged-9").exists(),
        "never moved aside"
    );
}

/// A database with its rows' pages overwritten: SQLite still opens it, and `PRAGMA
/// quick_check` finds the damage, so it is moved aside with what the check said.
#[test]
fn damage_only_the_check_finds_moves_the_database_aside() {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("queue.db");
    let store = Store::open(&path).expect("new");
    for i in 0..200 {
        store
            .insert(&attempt(&format!("a-{i}"), &format!("l{i}"), 0, i))
            .expect("insert");
    }
    drop(store);
    let mut bytes = std::fs::read(&path).expect("read");
    let page = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    assert!(bytes.len() > 4 * page, "rows over several pages");
    // The third page on, garbage of a fixed pattern; the header and schema page left whole.
    for (i, b) in bytes[2 * page..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(&path, &bytes).expect("damage");
    let (store, damage) = Store::open_checked(&path, 11).expect("moved aside");
    let damage = damage.expect("the check finds it");
    assert_eq!(damage.moved_to, dir.path().join("queue.db.damaged-11"));
    assert_eq!(damage.aside, Aside::Database);
    assert!(!damage.why.is_empty(), "{damage:?}");
    assert!(store.all().expect("all").is_empty(), "a new queue");
}

/// What a damage says, for the dispatcher's log and `list`: what was wrong and where it went.
#[test]
fn a_damage_says_what_was_wrong_and_where_it_went() {
    let moved = Damage {
        moved_to: PathBuf::from("/s/queue.db.damaged-9"),
        why: "file is not a database".to_owned(),
        aside: Aside::Database,
    };
    assert_eq!(
        moved.sentence(),
        "the queue database was damaged (file is not a database); it was moved to \
         /s/queue.db.damaged-9 and a new one made"
    );
    let copied = Damage {
        moved_to: PathBuf::from("/s/queue.db-wal.damaged-9"),
        why: "frame 2 of 3 fails its checksum".to_owned(),
        aside: Aside::WalCopy,
    };
    assert_eq!(
        copied.sentence(),
        "the queue database's write-ahead log was damaged (frame 2 of 3 fails its checksum); \
         the transactions before the damage were kept, and a copy of the log as it was is at \
         /s/queue.db-wal.damaged-9"
    );
}

/// The disk's trouble (full, failing, locked, read-only, out of memory) is told from the
/// database's damage: only the first is retried later.
#[test]
fn the_disk_s_trouble_is_told_from_damage() {
    let sqlite = |code| {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some("x".to_owned()))
    };
    let open = |code| Error::Open {
        path: PathBuf::from("/s/queue.db"),
        source: sqlite(code),
    };
    for code in [
        rusqlite::ffi::SQLITE_FULL,
        rusqlite::ffi::SQLITE_IOERR,
        rusqlite::ffi::SQLITE_CANTOPEN,
        rusqlite::ffi::SQLITE_BUSY,
        rusqlite::ffi::SQLITE_LOCKED,
        rusqlite::ffi::SQLITE_NOMEM,
        rusqlite::ffi::SQLITE_READONLY,
    ] {
        assert!(open(code).is_disk_trouble(), "{code}");
    }
    for code in [rusqlite::ffi::SQLITE_NOTADB, rusqlite::ffi::SQLITE_CORRUPT] {
        assert!(!open(code).is_disk_trouble(), "{code}: damage");
    }
    let query = Error::Query {
        path: PathBuf::from("/s/queue.db"),
        op: "read",
        source: sqlite(rusqlite::ffi::SQLITE_FULL),
    };
    assert!(query.is_disk_trouble(), "a query's too");
    let too_new = Error::TooNew {
        path: PathBuf::from("/s/queue.db"),
        found: 9,
        supported: 8,
    };
    assert!(!too_new.is_disk_trouble());
}

/// A database whose schema SQLite cannot read (a table's statement garbled): the check
/// itself fails with SQLite's "malformed" error, which is damage too: moved aside, with
/// SQLite's words.
#[test]
fn a_garbled_schema_is_damage_the_check_fails_on() {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("queue.db");
    drop(Store::open(&path).expect("new"));
    let mut bytes = std::fs::read(&path).expect("read");
    let at = bytes
        .windows(b"CREATE TABLE".len())
        .position(|w| w == b"CREATE TABLE")
        .expect("a table's statement");
    bytes[at..at + 6].copy_from_slice(b"CRXATE");
    std::fs::write(&path, &bytes).expect("garble");
    let (store, damage) = Store::open_checked(&path, 15).expect("moved aside");
    let damage = damage.expect("damage");
    assert_eq!(damage.moved_to, dir.path().join("queue.db.damaged-15"));
    assert!(damage.why.contains("malformed"), "{damage:?}");
    assert!(store.all().expect("all").is_empty(), "a new queue");
}
