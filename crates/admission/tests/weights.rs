//! Weights and shares (PROTOCOL.md 12.10): a take of weight N holds N units at once, counting
//! sums the units of live records (old ones count 1, hostile ones as documented), a share is
//! a ceiling per owner, and the line serves the owner with the smallest use of its share first
//! and keeps freed units for a heavy head.
//!
//! The owner of a take is given through `Owner::of_uid` (the library's seam): the tests play
//! several uids without changing their own. The process tests run `slot-taker` (this crate's
//! helper program) as real processes, ordered in line by the start they are given (their
//! pool's clock), never by when they were started.

use super::*;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use worklane_admission::{Ask, Holding, Owner, ShareUsed, Weight};

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn ask(weight: u32) -> Ask {
    Ask::new().with_weight(weight)
}

fn try_take(site: &Site, ask: &Ask) -> Result<Take, worklane_admission::take::Error> {
    gate::quietly(|| {
        let now = site.pool.clock().now_ms();
        site.pool
            .try_take_for(Kind::Agent, &Request::new("test"), ask, 0, now)
    })
}

fn held(site: &Site, ask: &Ask) -> QuietDrop<Slot> {
    match try_take(site, ask).expect("take") {
        Take::Held(slot) => QuietDrop::new(slot),
        Take::Blocked(b) => panic!("weight {} must be admitted: {b}", ask.weight()),
    }
}

fn blocked(site: &Site, ask: &Ask) -> Blocker {
    match try_take(site, ask).expect("take") {
        Take::Held(slot) => {
            let name = slot.name().to_owned();
            gate::quietly(|| drop(slot));
            panic!("weight {} must be blocked, got {name}", ask.weight())
        }
        Take::Blocked(b) => b,
    }
}

fn record_of(site: &Site, name: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(site.temp.path().join(name)).expect("record"))
        .expect("JSON")
}

/// A record of this (live) process, without `holdsGuard`: judged alive by its identity, so its
/// weight counts.
fn live_record(weight: Option<serde_json::Value>) -> Record {
    let mut record = Record {
        holder: Recorded::new(
            ProcessIdentity::of_self().expect("identity"),
            Place::current().expect("place").clone(),
        ),
        owner: Some("live".into()),
        ..Record::default()
    };
    if let Some(weight) = weight {
        record.extra.insert("weight".into(), weight);
    }
    record
}

mod takes {
    use super::*;

    #[test]
    fn a_take_of_weight_n_holds_n_units_at_once_with_one_record() {
        let site = Site::new(r#"{"max_agents": 4}"#);
        let three = held(&site, &ask(3));
        assert_eq!((three.name(), three.weight()), ("agent-0.lock", 3));
        let record = record_of(&site, "agent-0.lock");
        assert_eq!(record["weight"], 3, "the record says its weight: {record}");
        assert_eq!(
            record["shareOwner"],
            format!("uid:{}", me()),
            "and whose share it counts against"
        );
        assert_eq!(
            blocked(&site, &ask(2)),
            Blocker::NoRoom {
                held: 3,
                cap: 4,
                need: 2
            },
            "two units asked, one free: nothing is held in part"
        );
        assert!(
            !site.temp.path().join("agent-1.lock").exists(),
            "a refused heavy take leaves no record"
        );
        let one = held(&site, &ask(1));
        assert_eq!(one.name(), "agent-1.lock");
        assert_eq!(
            blocked(&site, &ask(1)),
            Blocker::AtCap { held: 4, cap: 4 },
            "a take of weight 1 says the cap as before, in units"
        );
        let snapshot = site.snapshot();
        assert_eq!(snapshot.held_units("agent"), 4);
        let units: Vec<(String, u32, Weight)> = snapshot
            .slots
            .iter()
            .filter(|s| s.kind == "agent")
            .map(|s| (s.name.clone(), s.units, s.weight.clone()))
            .collect();
        assert_eq!(
            units,
            [
                ("agent-0.lock".into(), 3, Weight::Units(3)),
                ("agent-1.lock".into(), 1, Weight::Units(1))
            ]
        );
        drop(three);
        assert_eq!(held(&site, &ask(3)).name(), "agent-0.lock", "freed whole");
        drop(one);
    }

    #[test]
    fn a_weight_outside_one_to_the_cap_is_an_error_naming_the_value_and_the_cap() {
        let site = Site::new(r#"{"max_agents": 4, "max_test_runs": 2}"#);
        for weight in [0, 5, u32::MAX] {
            let err = try_take(&site, &ask(weight)).expect_err("never admitted");
            assert!(
                matches!(
                    err,
                    worklane_admission::take::Error::Weight { kind: "agent", weight: w, cap: 4 }
                        if w == weight
                ),
                "{weight}: {err:?}"
            );
            let text = err.to_string();
            assert!(
                text.contains(&format!("weight {weight}")) && text.contains("4 units"),
                "says the weight and the cap: {text}"
            );
        }
        let test = gate::quietly(|| {
            site.pool.try_take_for(
                Kind::Test { limit_ms: None },
                &Request::new("t"),
                &ask(3),
                0,
                0,
            )
        });
        assert!(
            matches!(
                test,
                Err(worklane_admission::take::Error::Weight {
                    kind: "test",
                    weight: 3,
                    cap: 2
                })
            ),
            "test runs have their own cap: {test:?}"
        );
        let full = gate::quietly(|| {
            site.pool
                .try_take_for(Kind::FullRun, &Request::new("t"), &ask(2), 0, 0)
        });
        assert!(
            matches!(
                full,
                Err(worklane_admission::take::Error::Weight { cap: 1, .. })
            ),
            "the full run is one lock: {full:?}"
        );
        // A waiting take is refused at once, never left waiting for what cannot come.
        let waited = site.pool.take_for(
            Kind::Agent,
            &Request::new("t"),
            &ask(5),
            Wait {
                timeout: None,
                priority: 0,
                on_wait: &mut |w| panic!("must not wait: {}", w.blocker),
            },
        );
        assert!(
            matches!(waited, Err(worklane_admission::take::Error::Weight { .. })),
            "{waited:?}"
        );
        assert!(
            std::fs::read_dir(site.temp.path())
                .expect("list")
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().contains("line-")),
            "and it left no place in line"
        );
    }

    #[test]
    fn test_runs_are_weighted_against_their_own_cap() {
        let site = Site::new(r#"{"max_agents": 1, "max_test_runs": 3}"#);
        let test = Kind::Test { limit_ms: None };
        let two = match gate::quietly(|| {
            site.pool
                .try_take_for(test, &Request::new("t"), &ask(2), 0, 0)
        })
        .expect("take")
        {
            Take::Held(slot) => QuietDrop::new(slot),
            Take::Blocked(b) => panic!("free: {b}"),
        };
        assert_eq!(two.weight(), 2);
        let more = gate::quietly(|| {
            site.pool
                .try_take_for(test, &Request::new("t"), &ask(2), 0, 0)
        })
        .expect("take");
        assert!(
            matches!(
                more,
                Take::Blocked(Blocker::NoRoom {
                    held: 2,
                    cap: 3,
                    need: 2
                })
            ),
            "{more:?}"
        );
        let agent = held(&site, &ask(1));
        assert_eq!(agent.name(), "agent-0.lock", "agents are counted apart");
    }

    #[test]
    fn lowering_the_cap_keeps_a_heavy_holder_and_admits_nobody_until_its_units_fit() {
        let site = Site::new(r#"{"max_agents": 4}"#);
        let heavy = held(&site, &ask(3));
        let light = held(&site, &ask(1));
        site.set_config(r#"{"max_agents": 2}"#);
        assert_eq!(
            blocked(&site, &ask(1)),
            Blocker::AtCap { held: 3, cap: 2 },
            "the heavy holder counts the whole new cap, the light one its own unit"
        );
        assert!(
            heavy.lease().guard().is_some(),
            "a lower cap touches no running holder"
        );
        assert_eq!(
            record_of(&site, "agent-0.lock")["weight"],
            3,
            "nor its record"
        );
        drop(light);
        assert_eq!(blocked(&site, &ask(1)), Blocker::AtCap { held: 2, cap: 2 });
        let problem = site
            .snapshot()
            .problems
            .into_iter()
            .find(|p| p.name == "agent-0.lock")
            .expect("a weight above the cap is reported");
        assert!(
            problem.what.contains("above the cap of 2") && problem.fix.contains("max_agents"),
            "{problem:?}"
        );
        drop(heavy);
        assert_eq!(held(&site, &ask(2)).name(), "agent-0.lock");
    }

    #[test]
    fn a_handed_over_slot_keeps_its_weight_and_owner_and_no_annotation_changes_them() {
        let site = Site::new(r#"{"max_agents": 4}"#);
        let owner = Owner::of_uid(4242);
        let mut slot = held(&site, &ask(2).with_owner(owner));
        let mut fields = serde_json::Map::new();
        fields.insert("weight".into(), 1.into());
        let refused = slot.annotate(fields);
        assert!(
            matches!(&refused, Err(worklane_admission::slot::Error::PoolField { field, .. }) if field == "weight"),
            "{refused:?}"
        );
        let name = slot.name().to_owned();
        let guard = slot.end(Slot::hand_over).expect("a held guard");
        // What the receiver gets: another descriptor of the same open file description.
        let fd = rustix::io::fcntl_dupfd_cloexec(&guard, 3).expect("dup");
        gate::quietly(|| drop(guard));
        let adopted = gate::quietly(|| {
            site.pool.adopt(
                &name,
                fd,
                &Request::new("driver")
                    .field("weight", 1)
                    .field("shareOwner", "uid:1"),
            )
        })
        .expect("adopt");
        let adopted = QuietDrop::new(adopted);
        assert_eq!(
            (adopted.weight(), adopted.share_owner()),
            (2, Some("uid:4242"))
        );
        let record = record_of(&site, &name);
        assert_eq!(
            (&record["weight"], &record["shareOwner"], &record["owner"]),
            (
                &serde_json::json!(2),
                &serde_json::json!("uid:4242"),
                &serde_json::json!("driver")
            ),
            "the adopter's record names it, and counts what the slot counted: {record}"
        );
    }

    #[test]
    fn an_ask_is_checked_against_the_cap_and_the_share_without_a_take() {
        let site = Site::new(r#"{"max_agents": 4, "shares": {"uid:1": 2}}"#);
        let check = |ask: &Ask| site.pool.check_ask(Kind::Agent, ask);
        assert!(check(&ask(4)).is_ok(), "the whole cap");
        assert!(
            matches!(
                check(&ask(5)),
                Err(worklane_admission::take::Error::Weight { cap: 4, .. })
            ),
            "above the cap"
        );
        assert!(
            matches!(
                check(&ask(3).with_owner(Owner::of_uid(1))),
                Err(worklane_admission::take::Error::WeightOverShare { share: 2, .. })
            ),
            "above its owner's share"
        );
    }

    #[test]
    fn a_handed_over_full_run_counts_one_whatever_its_record_says() {
        let site = Site::new("{}");
        let run = site.take(Kind::FullRun);
        let name = run.name().to_owned();
        let guard = run.end(Slot::hand_over).expect("a held guard");
        let fd = rustix::io::fcntl_dupfd_cloexec(&guard, 3).expect("dup");
        gate::quietly(|| drop(guard));
        // Its record given a weight meanwhile (another writer's): the full run is one unit.
        let mut record = record_of(&site, &name);
        record["weight"] = serde_json::json!(3);
        let record = Record::parse(&serde_json::to_vec(&record).expect("JSON")).expect("a record");
        site.write_record(&name, &record);
        let adopted =
            gate::quietly(|| site.pool.adopt(&name, fd, &Request::new("driver"))).expect("adopt");
        let adopted = QuietDrop::new(adopted);
        assert_eq!(adopted.weight(), 1, "the full run is one slot of one unit");
    }

    #[test]
    fn a_place_in_line_says_its_weight_and_owner() {
        let site = Site::new(r#"{"max_agents": 4, "shares": {"*": 4}}"#);
        let place = gate::quietly(|| {
            site.pool.join_line_for(
                Kind::Agent,
                0,
                1000,
                &Request::new("waiter"),
                &ask(3).with_owner(Owner::of_uid(7)),
            )
        })
        .expect("join");
        let view = site
            .snapshot()
            .line
            .into_iter()
            .find(|v| v.entry == *place.entry())
            .expect("shown");
        assert_eq!(
            (view.weight, view.share_owner.as_deref()),
            (3, Some("uid:7"))
        );
        assert!(view.live);
        gate::quietly(|| place.leave()).expect("leave");
    }
    #[test]
    fn an_unusable_config_keeps_a_place_of_weight_one_and_refuses_a_heavier_one() {
        let site = Site::new("{}");
        // A share that is no whole number: every take is refused until the config is fixed.
        site.set_config(r#"{"max_agents": 4, "shares": {"uid:1": 1.5}}"#);
        let join = |weight| {
            gate::quietly(|| {
                site.pool
                    .join_line_for(Kind::Agent, 0, 1000, &Request::new("waiter"), &ask(weight))
            })
        };
        let place = join(1).expect("a waiter of weight 1 waits for the config to be fixed");
        let record = record_of(&site, &place.entry().name());
        assert_eq!(
            (&record["weight"], &record["shareOwner"]),
            (&serde_json::Value::Null, &serde_json::Value::Null),
            "it stands without a weight or an owner, as an older harness's place: {record}"
        );
        let err = join(2).expect_err("a heavier place cannot be judged without the config");
        assert!(
            matches!(err, worklane_admission::take::Error::Config { .. }),
            "{err:?}"
        );
        gate::quietly(|| place.leave()).expect("leave");
    }
}

mod records {
    //! Records of other writers: without a weight, with a hostile one, unjudgeable.
    use super::*;

    /// A slot held by its guard whose record says weight 3, written where `protocol.json`
    /// does not name `weights` (a writer that broke PROTOCOL.md section 0: weights are
    /// declared before they are used): a take of weight 1 counts it one unit, without reading
    /// it, until the extension is declared; then its weight counts.
    #[test]
    fn without_the_weights_extension_a_held_slot_counts_one_unit_whatever_its_record_says() {
        let site = Site::new(r#"{"max_agents": 2}"#);
        let first = held(&site, &ask(1));
        assert_eq!(first.name(), "agent-0.lock");
        let mut record = record_of(&site, "agent-0.lock");
        record["weight"] = serde_json::json!(3);
        std::fs::write(
            site.temp.path().join("agent-0.lock"),
            serde_json::to_vec(&record).expect("JSON"),
        )
        .expect("rewrite the record");
        let second = held(&site, &ask(1));
        assert_eq!(
            second.name(),
            "agent-1.lock",
            "counted one unit: 1 + 1 <= 2"
        );
        drop(second);
        assert!(
            site.pool
                .declare_extension(worklane_admission::protocol::WEIGHTS)
                .expect("declare")
        );
        assert!(
            !site
                .pool
                .declare_extension(worklane_admission::protocol::WEIGHTS)
                .expect("declare again"),
            "declared once: a second declaration changes nothing"
        );
        assert_eq!(
            blocked(&site, &ask(1)),
            Blocker::AtCap { held: 2, cap: 2 },
            "declared: its record is read and its weight (at most the cap) counts"
        );
        drop(first);
    }

    #[test]
    fn a_record_without_a_weight_counts_one() {
        let site = Site::new(r#"{"max_agents": 2}"#);
        site.write_record("agent-0.lock", &live_record(None));
        let one = held(&site, &ask(1));
        assert_eq!(one.name(), "agent-1.lock");
        assert_eq!(blocked(&site, &ask(1)), Blocker::AtCap { held: 2, cap: 2 });
        drop(one);
        assert_eq!(
            blocked(&site, &ask(2)),
            Blocker::NoRoom {
                held: 1,
                cap: 2,
                need: 2
            }
        );
    }

    #[test]
    fn a_hostile_weight_counts_one_and_is_reported() {
        use serde_json::json;
        for hostile in [
            json!(0),
            json!(-1),
            json!(1e30),
            json!(2.5),
            json!("2"),
            json!(null),
            json!([3]),
            json!({"units": 3}),
        ] {
            let site = Site::new(r#"{"max_agents": 2}"#);
            site.write_record("agent-0.lock", &live_record(Some(hostile.clone())));
            assert_eq!(
                blocked(&site, &ask(2)),
                Blocker::NoRoom {
                    held: 1,
                    cap: 2,
                    need: 2
                },
                "{hostile} counts as 1"
            );
            let snapshot = site.snapshot();
            let view = snapshot
                .slots
                .iter()
                .find(|s| s.name == "agent-0.lock")
                .expect("shown");
            assert_eq!(view.weight, Weight::Bad(hostile.to_string()));
            assert_eq!(view.units, 1);
            let problem = snapshot
                .problems
                .iter()
                .find(|p| p.name == "agent-0.lock")
                .unwrap_or_else(|| panic!("{hostile} is reported: {:?}", snapshot.problems));
            assert!(
                problem.what.contains("counts as 1 unit") && problem.blocks.is_none(),
                "{problem:?}"
            );
            let one = held(&site, &ask(1));
            assert_eq!(one.name(), "agent-1.lock", "{hostile} blocks nobody else");
        }
    }

    #[test]
    fn a_weight_above_the_cap_counts_the_cap_only_while_its_holder_lives() {
        let site = Site::new(r#"{"max_agents": 3}"#);
        site.write_record("agent-0.lock", &live_record(Some(99.into())));
        assert_eq!(blocked(&site, &ask(1)), Blocker::AtCap { held: 3, cap: 3 });
        // The same record of a process that is gone: taken over, nothing counted.
        let mut dead = dead_record();
        dead.extra.insert("weight".into(), 99.into());
        site.write_record("agent-0.lock", &dead);
        let taken = held(&site, &ask(3));
        assert_eq!(
            taken.name(),
            "agent-0.lock",
            "the dead holder's index, taken over"
        );
    }

    #[test]
    fn an_unjudgeable_record_counts_one_whatever_its_weight() {
        let site = Site::new(r#"{"max_agents": 3}"#);
        // Legacy: no place, no identity. Never taken over automatically, so its weight would
        // hold the cap until an operator removed it.
        let mut legacy = Record {
            owner: Some("old harness".into()),
            ..Record::default()
        };
        // Above the cap even: it counts 1 all the same.
        legacy.extra.insert("weight".into(), 5.into());
        site.write_record("agent-0.lock", &legacy);
        let two = held(&site, &ask(2));
        assert_eq!(two.name(), "agent-1.lock");
        let snapshot = site.snapshot();
        assert_eq!(snapshot.held_units("agent"), 3);
        let problem = snapshot
            .problems
            .iter()
            .find(|p| p.name == "agent-0.lock")
            .expect("reported");
        assert!(problem.what.contains("not counted"), "{problem:?}");
        assert_eq!(
            problem.fix,
            format!(
                "have the harness that wrote it write a whole-number weight; once its holder \
                 has ended (and only then), rm -- '{}'",
                site.temp.path().join("agent-0.lock").display()
            ),
            "no cap to raise: it counts 1 already"
        );
    }

    #[test]
    fn only_a_weight_that_does_not_count_as_written_is_a_problem() {
        let site = Site::new(r#"{"max_agents": 3, "max_test_runs": 2}"#);
        let problem_of = |name: &str| {
            site.snapshot()
                .problems
                .into_iter()
                .find(|p| p.name == name)
        };
        site.write_record("agent-0.lock", &live_record(Some(3.into())));
        assert_eq!(
            problem_of("agent-0.lock"),
            None,
            "the whole cap counts as written"
        );
        let pid = std::process::id();
        for (name, cap, key) in [
            ("agent-0.lock", 3, "max_agents"),
            ("test-0.lock", 2, "max_test_runs"),
        ] {
            site.write_record(name, &live_record(Some(5.into())));
            let problem = problem_of(name).expect("a weight above the cap");
            assert!(
                problem
                    .what
                    .contains(&format!("above the cap of {cap}: it counts as {cap} units")),
                "{problem:?}"
            );
            assert_eq!(
                problem.fix,
                format!(
                    "let its holder, pid {pid} end, or raise the cap to 5 (`worklane config set \
                     {key} 5`)"
                )
            );
        }
        // A dead holder's record counts nothing, whatever its weight says.
        let mut dead = dead_record();
        dead.extra.insert("weight".into(), "x".into());
        site.write_record("agent-0.lock", &dead);
        assert_eq!(
            problem_of("agent-0.lock"),
            None,
            "a dead holder's weight counts nothing"
        );
    }
}

mod shares {
    use super::*;

    #[test]
    fn a_share_is_a_ceiling_per_owner_and_the_blocker_says_whose_holdings() {
        let site = Site::new(r#"{"max_agents": 4, "shares": {"uid:1001": 2, "*": 1}}"#);
        let alice = || ask(1).with_owner(Owner::of_uid(1001));
        let bob = || ask(1).with_owner(Owner::of_uid(1002));
        let two = held(&site, &alice().with_weight(2));
        assert_eq!(two.share_owner(), Some("uid:1001"));
        let Blocker::Share(used) = blocked(&site, &alice()) else {
            panic!("alice's share is used")
        };
        assert_eq!(
            *used,
            ShareUsed {
                owner: "uid:1001".into(),
                held: 2,
                share: 2,
                need: 1,
                holdings: vec![Holding {
                    slot: "agent-0.lock".into(),
                    units: 2,
                    pid: Some(std::process::id()),
                    holder: Some("test".into()),
                }],
            }
        );
        assert!(
            used.to_string()
                .starts_with("your share (uid 1001: 2 of 2) is used"),
            "{used}"
        );
        let b = held(&site, &bob());
        assert_eq!(
            b.share_owner(),
            Some("uid:1002"),
            "anyone else: its uid under `*`"
        );
        assert!(matches!(blocked(&site, &bob()), Blocker::Share(u) if u.share == 1 && u.held == 1));
        let Blocker::Share(used) = blocked(&site, &alice()) else {
            panic!("alice's share is used")
        };
        assert_eq!(
            used.holdings
                .iter()
                .map(|h| h.slot.as_str())
                .collect::<Vec<_>>(),
            ["agent-0.lock"],
            "alice's holdings only, not bob's"
        );
        let tagged = held(
            &site,
            &ask(1).with_owner(Owner::of_uid(1003).with_tag("adhoc")),
        );
        assert_eq!(
            tagged.share_owner(),
            Some("uid:1003"),
            "a tag the config does not name changes nothing"
        );
        let err = try_take(&site, &bob().with_weight(2)).expect_err("above its share");
        assert!(
            matches!(
                &err,
                worklane_admission::take::Error::WeightOverShare { owner, weight: 2, share: 1 }
                    if owner == "uid:1002"
            ),
            "{err:?}"
        );
        let uses: HashMap<String, (u32, Option<u32>)> = site
            .snapshot()
            .share_uses()
            .into_iter()
            .map(|u| (u.owner, (u.held, u.share)))
            .collect();
        assert_eq!(uses["uid:1001"], (2, Some(2)));
        assert_eq!(uses["uid:1002"], (1, Some(1)));
        assert_eq!(uses["uid:1003"], (1, Some(1)));
    }

    #[test]
    fn the_share_uses_are_the_owners_the_config_names_and_those_holding_live_agent_units() {
        let site = Site::new(
            r#"{"max_agents": 4, "max_test_runs": 2, "shares": {"uid:1001": 2, "group:4000": 3, "*": 1}}"#,
        );
        // A dead agent's record and a live test run's, each naming an owner: neither holds
        // agent units.
        let mut dead = dead_record();
        dead.extra.insert("shareOwner".into(), "uid:2000".into());
        site.write_record("agent-0.lock", &dead);
        let mut test_run = live_record(Some(1.into()));
        test_run
            .extra
            .insert("shareOwner".into(), "uid:3000".into());
        site.write_record("test-0.lock", &test_run);
        let snapshot = site.snapshot();
        let uses: Vec<(String, u32, Option<u32>)> = snapshot
            .share_uses()
            .into_iter()
            .map(|u| (u.owner, u.held, u.share))
            .collect();
        assert_eq!(
            uses,
            [
                ("group:4000".to_owned(), 0, Some(3)),
                ("uid:1001".to_owned(), 0, Some(2))
            ],
            "the owners the config names (`*` is no owner), holding nothing"
        );
        for owner in ["uid:2000", "uid:3000"] {
            assert_eq!(
                snapshot.holdings(owner),
                [],
                "{owner}: a dead holder's slot and a test run's hold no agent units"
            );
        }
    }

    #[test]
    fn with_shares_a_place_whose_entry_is_gone_still_stands_behind_those_before_it() {
        // Held throughout: no child of another test may inherit a place's guard.
        let _quiet = gate::quiet();
        let site = Site::new(r#"{"max_agents": 1, "shares": {"*": 1}}"#);
        let join = |start| {
            gate::quietly(|| {
                site.pool
                    .join_line_at(Kind::Agent, 0, start, &Request::new("waiter"))
            })
            .expect("join")
        };
        let before = join(100);
        let mine = join(200);
        // Its record removed under it (an operator's rm): the listing no longer has it.
        std::fs::remove_file(site.temp.path().join(mine.entry().name())).expect("rm");
        let got = gate::quietly(|| {
            site.pool
                .try_take_as(Kind::Agent, &Request::new("waiter"), mine.entry())
        })
        .expect("take");
        assert!(
            matches!(got, Take::Blocked(Blocker::InLine { ahead: 1, .. })),
            "its place is where its entry says, behind the one before it: {got:?}"
        );
        gate::quietly(|| {
            drop(mine);
            drop(before);
        });
    }

    #[test]
    fn a_take_that_fills_its_owner_s_share_exactly_is_admitted() {
        let site = Site::new(r#"{"max_agents": 8, "shares": {"uid:1001": 5}}"#);
        let alice = |weight| ask(weight).with_owner(Owner::of_uid(1001));
        let two = held(&site, &alice(2));
        let three = held(&site, &alice(3));
        assert_eq!(
            (two.weight(), three.weight()),
            (2, 3),
            "2 held + 3 asked = its share of 5"
        );
        // A dead holder's record naming the same owner counts nothing, and is none of its
        // holdings.
        let mut dead = dead_record();
        dead.extra.insert("shareOwner".into(), "uid:1001".into());
        site.write_record("agent-5.lock", &dead);
        let Blocker::Share(used) = blocked(&site, &alice(1)) else {
            panic!("and then it is full")
        };
        assert_eq!(
            (
                used.held,
                used.share,
                used.holdings
                    .iter()
                    .map(|h| h.slot.as_str())
                    .collect::<Vec<_>>()
            ),
            (5, 5, vec!["agent-0.lock", "agent-1.lock"]),
            "its live holdings only"
        );
    }

    #[test]
    fn a_named_tag_or_group_goes_before_the_uid() {
        let site = Site::new(
            r#"{"max_agents": 4, "shares": {"owner:nightly": 1, "group:4000": 3, "uid:1001": 2}}"#,
        );
        let tagged = held(
            &site,
            &ask(1).with_owner(Owner::of_uid(1001).with_tag("nightly")),
        );
        assert_eq!(tagged.share_owner(), Some("owner:nightly"));
        let in_group = held(
            &site,
            &ask(1).with_owner(Owner::of_uid(1002).with_groups([4000])),
        );
        assert_eq!(in_group.share_owner(), Some("group:4000"));
        let named = held(
            &site,
            &ask(1).with_owner(Owner::of_uid(1001).with_groups([4000])),
        );
        assert_eq!(
            named.share_owner(),
            Some("uid:1001"),
            "a uid before its group"
        );
    }

    #[test]
    fn a_share_that_is_no_whole_number_or_names_no_owner_refuses_every_agent_take() {
        for (config, says) in [
            (r#"{"max_agents": 4, "shares": {"uid:1": 1.5}}"#, "1.5"),
            (
                r#"{"max_agents": 4, "shares": {"uid:1": 5}}"#,
                "max_agents (4)",
            ),
            (
                r#"{"max_agents": 4, "shares": {"user:alice": 1}}"#,
                "`user:alice`",
            ),
        ] {
            let site = Site::new("{}");
            site.set_config(config);
            let err = try_take(&site, &ask(1)).expect_err(config);
            let worklane_admission::take::Error::Config { source } = &err else {
                panic!("{config}: {err:?}")
            };
            let text = source.to_string();
            assert!(
                text.contains(&site.temp.path().join("config.json").display().to_string())
                    && text.contains(says),
                "{config}: names the file and the value: {text}"
            );
            assert!(site.pool.stop().is_ok(), "STOP still reads");
        }
    }

    #[test]
    fn with_shares_a_waiter_counts_itself_and_the_places_before_it_in_line() {
        let site = Site::new(r#"{"max_agents": 1, "shares": {"*": 1}}"#);
        // The unit is free, but the place before it (the same owner, earlier) goes first.
        let before = gate::quietly(|| {
            site.pool
                .join_line_at(Kind::Agent, 0, 100, &Request::new("before"))
        })
        .expect("join");
        // Called off at its first look: what that look said is all the test needs.
        let cancelled = std::sync::atomic::AtomicBool::new(false);
        let mut seen = Vec::new();
        let got = gate::quietly(|| {
            site.pool.take_unless(
                Kind::Agent,
                &Request::new("waiter"),
                Wait {
                    // A watchdog only: the wait ends at the look after its first.
                    timeout: Some(PROMPT),
                    priority: 0,
                    on_wait: &mut |w| {
                        seen.push((w.position, w.in_line));
                        cancelled.store(true, std::sync::atomic::Ordering::SeqCst);
                    },
                },
                &cancelled,
            )
        })
        .expect("take");
        assert!(matches!(got, Take::Blocked(_)), "called off: {got:?}");
        assert_eq!(
            seen.first(),
            Some(&(2, 2)),
            "second in line: the place before it and its own ({seen:?})"
        );
        gate::quietly(|| before.leave()).expect("leave");
    }

    #[test]
    fn without_shares_the_line_goes_by_arrival_whoever_holds_what() {
        let site = Site::new(r#"{"max_agents": 2}"#);
        let a = held(&site, &ask(1).with_owner(Owner::of_uid(1001)));
        let place = gate::quietly(|| {
            site.pool.join_line_for(
                Kind::Agent,
                0,
                1000,
                &Request::new("alice's next"),
                &ask(1).with_owner(Owner::of_uid(1001)),
            )
        })
        .expect("join");
        let bob = ask(1).with_owner(Owner::of_uid(1002));
        let got = gate::quietly(|| {
            site.pool
                .try_take_for(Kind::Agent, &Request::new("bob"), &bob, 0, 2000)
        })
        .expect("take");
        assert!(
            matches!(got, Take::Blocked(Blocker::InLine { ahead: 1, .. })),
            "{got:?}"
        );
        site.set_config(r#"{"max_agents": 2, "shares": {"*": 2}}"#);
        let got = gate::quietly(|| {
            site.pool
                .try_take_for(Kind::Agent, &Request::new("bob"), &bob, 0, 2000)
        })
        .expect("take");
        let Take::Held(b) = got else {
            panic!("with shares, bob (0 of 2) goes before alice (1 of 2): {got:?}")
        };
        let b = QuietDrop::new(b);
        gate::quietly(|| place.leave()).expect("leave");
        drop((a, b));
    }
}

/// A `slot-taker` process, its input (closed to release its slot) and its label.
struct Taker {
    label: String,
    child: worklane_testkit::Child,
    stdin: Option<std::process::ChildStdin>,
}

impl Taker {
    /// Starts `slot-taker DIR ARGS...`; every line it prints goes to `lines` with `label`.
    fn start(
        site: &Site,
        label: &str,
        args: &[String],
        lines: &mpsc::Sender<(String, String)>,
    ) -> Taker {
        let mut child = Command::new(env!("CARGO_BIN_EXE_slot-taker"))
            .arg(site.temp.path())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn_gated()
            .expect("start slot-taker");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, name) = (lines.clone(), label.to_owned());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((name.clone(), line)).is_err() {
                    return;
                }
            }
        });
        Taker {
            label: label.to_owned(),
            child,
            stdin,
        }
    }

    /// Lets it release its slot (closes its input).
    fn release(&mut self) {
        self.stdin = None;
    }

    /// Waits for it to end (within [`BOUND`]); it must end well.
    fn finish(mut self) {
        self.stdin = None;
        let status = wait_within(&mut self.child, &format!("{} ending", self.label));
        assert!(status.success(), "{} ended with {status}", self.label);
    }
}

/// The next line of `lines` that is not `skip`, each within [`BOUND`] (a waiter looks again
/// at least every 250 ms, so a line that does not come by then never will).
fn next_line(lines: &mpsc::Receiver<(String, String)>, skip: &[&str]) -> (String, String) {
    loop {
        let (label, line) = recv_within(lines, "a taker's next line");
        assert!(
            !line.starts_with("error") && !line.starts_with("timeout"),
            "{label}: {line}"
        );
        if !skip.iter().any(|s| line.starts_with(s)) {
            return (label, line);
        }
    }
}

/// Waits until each of `labels` has said a line starting with `word` (each line within
/// [`BOUND`]); other lines are kept in `seen`.
fn await_all(
    lines: &mpsc::Receiver<(String, String)>,
    labels: &[String],
    word: &str,
    seen: &mut Vec<(String, String)>,
) {
    let mut missing: Vec<&String> = labels.iter().collect();
    while !missing.is_empty() {
        let (label, line) = recv_within(
            lines,
            &format!("the next line of {missing:?}, still to say {word:?}"),
        );
        assert!(
            !line.starts_with("error") && !line.starts_with("timeout"),
            "{label}: {line}"
        );
        if line.starts_with(word) {
            missing.retain(|l| **l != label);
        }
        seen.push((label, line));
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

mod processes {
    use super::*;

    /// A small deterministic generator: the mix is random, and reproducible from its seed.
    struct XorShift(u64);

    impl XorShift {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// One line of a taker of the random mix: a weight it held, or its release.
    fn hear(
        label: String,
        line: &str,
        seed: u64,
        held: &mut HashMap<String, u64>,
        released: &mut usize,
    ) {
        assert!(
            !line.starts_with("error") && !line.starts_with("timeout"),
            "{label}: {line} (seed {seed})"
        );
        if let Some(rest) = line.strip_prefix("held ") {
            let weight: u64 = rest
                .split(' ')
                .nth(1)
                .and_then(|w| w.parse().ok())
                .expect("held NAME WEIGHT");
            held.insert(label, weight);
        } else if line.starts_with("released") {
            *released += 1;
        }
    }

    #[test]
    fn at_cap_4_a_random_mix_of_weights_never_holds_more_than_4_units_and_all_finish() {
        let site = Site::new(r#"{"max_agents": 4}"#);
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_nanos() as u64
            | 1;
        let mut rng = XorShift(seed);
        let (tx, lines) = mpsc::channel();
        let mut takers = Vec::new();
        let mut asked = HashMap::new();
        for i in 0..24 {
            let weight = 1 + rng.below(3);
            let hold = 5 + rng.below(40);
            let label = format!("t{i}-w{weight}");
            asked.insert(label.clone(), weight);
            takers.push(Taker::start(
                &site,
                &label,
                &[
                    format!("weight={weight}"),
                    format!("hold={hold}"),
                    "timeout=120000".into(),
                ],
                &tx,
            ));
        }
        drop(tx);
        // Up to 1,000 samples, each under `slots.lock`: no take happens while one is counted,
        // and releases only lower the count, so each sample is at most what was held at once.
        // Sampling ends when every taker has released (nothing is held after), and fails when
        // the takers go a bound without a word (a take that never comes).
        let dir = SlotDir::open(site.temp.path()).expect("open");
        let mut most = 0;
        let mut held = HashMap::new();
        let mut released = 0;
        let mut heard = std::time::Instant::now();
        for sample in 0..1000 {
            if released == 24 {
                break;
            }
            let units = gate::quietly(|| {
                let give_up = std::time::Instant::now() + BOUND;
                let counting = loop {
                    match worklane_lease::acquire(
                        &dir,
                        worklane_admission::SLOTS_LOCK,
                        &Request::new("sampler"),
                        &worklane_lease::Options::process(),
                    )
                    .expect("acquire slots.lock")
                    {
                        worklane_lease::Acquired::Held(lease) => break lease,
                        worklane_lease::Acquired::Refused(_) => {
                            assert!(
                                std::time::Instant::now() < give_up,
                                "sample {sample}: slots.lock not free within {BOUND:?} (seed {seed})"
                            );
                            std::thread::yield_now();
                        }
                    }
                };
                let units = site.pool.snapshot().expect("snapshot").held_units("agent");
                counting.release().expect("release slots.lock");
                units
            });
            assert!(
                units <= 4,
                "sample {sample}: {units} units held at cap 4 (seed {seed})"
            );
            most = most.max(units);
            while let Ok((label, line)) = lines.try_recv() {
                heard = std::time::Instant::now();
                hear(label, &line, seed, &mut held, &mut released);
            }
            assert!(
                heard.elapsed() < BOUND,
                "no taker said a word for {BOUND:?}, {released} of 24 released (seed {seed})"
            );
        }
        // The rest of each taker's lines, to its `released` (each line within the bound: a
        // taker waiting for ever, or one that never ends, fails the test at once).
        while released < 24 {
            let (label, line) = recv_within(
                &lines,
                &format!("a taker's next line, {released} of 24 released (seed {seed})"),
            );
            hear(label, &line, seed, &mut held, &mut released);
        }
        for taker in takers {
            taker.finish();
        }
        assert_eq!(released, 24, "every run finished (seed {seed})");
        assert_eq!(held, asked, "each held its own weight (seed {seed})");
        assert!(most <= 4, "at most {most} units at once");
    }

    #[test]
    fn a_heavy_waiter_at_the_head_keeps_the_freed_units_however_many_light_ones_arrive() {
        let site = Site::new(r#"{"max_agents": 4}"#);
        let (tx, lines) = mpsc::channel();
        let mut seen = Vec::new();
        // Four light holders fill the cap.
        let mut holders: Vec<Taker> = (0..4)
            .map(|i| Taker::start(&site, &format!("h{i}"), &args(&["start=100"]), &tx))
            .collect();
        let labels: Vec<String> = (0..4).map(|i| format!("h{i}")).collect();
        await_all(&lines, &labels, "held", &mut seen);
        // The heavy one waits at the head, then light ones arrive behind it.
        let heavy = Taker::start(&site, "heavy", &args(&["weight=3", "start=1000"]), &tx);
        await_all(&lines, &["heavy".to_owned()], "waiting", &mut seen);
        let mut light: Vec<Taker> = Vec::new();
        let arrive = |light: &mut Vec<Taker>, from: usize, n: usize| {
            let labels: Vec<String> = (from..from + n).map(|i| format!("l{i}")).collect();
            for (i, label) in labels.iter().enumerate() {
                let start = format!("start={}", 2000 + from + i);
                light.push(Taker::start(&site, label, &args(&[&start]), &tx));
            }
            labels
        };
        let first = arrive(&mut light, 0, 6);
        await_all(&lines, &first, "waiting", &mut seen);
        assert!(
            seen.iter()
                .all(|(l, line)| !(l.starts_with('l') && line.starts_with("held"))),
            "nobody passed the heavy waiter: {seen:?}"
        );
        // Three releases free its three units; light ones keep arriving meanwhile, and one
        // that does not wait is refused while the heavy one stands at the head.
        let mut events = Vec::new();
        for (round, holder) in holders.iter_mut().take(3).enumerate() {
            holder.release();
            let more = arrive(&mut light, 6 + 2 * round, 2);
            await_all(&lines, &more, "waiting", &mut events);
            let label = format!("n{round}");
            let nowait = Taker::start(
                &site,
                &label,
                // Behind the heavy head only (the light ones came later).
                &args(&["nowait", &format!("start={}", 1500 + round)]),
                &tx,
            );
            await_all(&lines, std::slice::from_ref(&label), "", &mut events);
            let said = events
                .iter()
                .rev()
                .find(|(l, _)| *l == label)
                .map(|(_, line)| line.clone())
                .unwrap_or_default();
            assert!(
                said.starts_with("blocked"),
                "{label}, behind the heavy head, takes nothing: {said}"
            );
            nowait.finish();
        }
        // Three units are free since the third release: the heavy one is admitted, if it was
        // not already.
        if !events
            .iter()
            .any(|(l, line)| l == "heavy" && line.starts_with("held"))
        {
            await_all(&lines, &["heavy".to_owned()], "held", &mut events);
        }
        let admitted: Vec<&(String, String)> = events
            .iter()
            .filter(|(_, l)| l.starts_with("held"))
            .collect();
        assert_eq!(
            admitted.first().map(|(l, _)| l.as_str()),
            Some("heavy"),
            "the first admitted after three units are free is the heavy head: {events:?}"
        );
        assert_eq!(
            admitted.len(),
            1,
            "and nobody else was admitted before it: {events:?}"
        );
        // Everyone else gets its turn.
        let last = holders.pop().expect("the fourth");
        last.finish();
        heavy.finish();
        for l in &mut light {
            l.release();
        }
        for l in light {
            l.finish();
        }
        for h in holders {
            h.finish();
        }
    }

    #[test]
    fn two_owners_are_served_by_their_use_of_equal_shares_not_by_who_queued_first() {
        let site = Site::new(r#"{"max_agents": 2, "shares": {"*": 2}}"#);
        let (tx, lines) = mpsc::channel();
        let mut seen = Vec::new();
        // uid 1001 holds the whole cap, then queues 20 more; uid 1002 queues 2 after them.
        let mut holders: std::collections::VecDeque<Taker> = (0..2)
            .map(|i| {
                Taker::start(
                    &site,
                    &format!("a-held{i}"),
                    &args(&["uid=1001", &format!("start={}", 100 + i)]),
                    &tx,
                )
            })
            .collect();
        await_all(
            &lines,
            &["a-held0".to_owned(), "a-held1".to_owned()],
            "held",
            &mut seen,
        );
        let mut waiting: HashMap<String, Taker> = HashMap::new();
        let mut labels = Vec::new();
        for i in 0..20 {
            let label = format!("a{i:02}");
            let start = format!("start={}", 1000 + i);
            waiting.insert(
                label.clone(),
                Taker::start(&site, &label, &args(&["uid=1001", &start]), &tx),
            );
            labels.push(label);
        }
        for i in 0..2 {
            let label = format!("b{i}");
            let start = format!("start={}", 5000 + i);
            waiting.insert(
                label.clone(),
                Taker::start(&site, &label, &args(&["uid=1002", &start]), &tx),
            );
            labels.push(label);
        }
        await_all(&lines, &labels, "waiting", &mut seen);
        // One release at a time, the oldest holder first; each frees one unit, and the next
        // admission says who got it.
        let mut order = Vec::new();
        while !waiting.is_empty() {
            let mut oldest = holders.pop_front().expect("a holder");
            oldest.release();
            let (label, line) = next_line(&lines, &["waiting", "released"]);
            assert!(line.starts_with("held"), "{label}: {line}");
            order.push(label.clone());
            holders.push_back(waiting.remove(&label).expect("a waiter"));
            oldest.finish();
        }
        let at = |label: &str| order.iter().position(|l| l == label).expect("admitted") + 1;
        assert_eq!(
            at("b0"),
            1,
            "uid 1002 (0 of 2) before uid 1001 (1 of 2): {order:?}"
        );
        assert!(
            at("b1") <= at("b0") + 2,
            "its second within two releases of its first: {order:?}"
        );
        let a: Vec<&String> = order.iter().filter(|l| l.starts_with('a')).collect();
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(a, sorted, "each owner's own in the order they queued");
        for holder in holders {
            holder.finish();
        }
    }
}
