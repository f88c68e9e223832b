//! A model-based property test of the slot pool: random takes, releases, kills (a holder
//! gone without releasing: its record stays, its guard is closed), cap changes and STOP,
//! against a reference model. The live count at each admission never exceeds the cap, the
//! first index not live is the one taken, and a killed holder's slot is free at once.
use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Op {
    Take,
    Release(usize),
    Kill(usize),
    SetCap(u32),
    Stop,
    Resume,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            5 => Just(Op::Take),
            2 => (0usize..6).prop_map(Op::Release),
            2 => (0usize..6).prop_map(Op::Kill),
            1 => (1u32..5).prop_map(Op::SetCap),
            1 => Just(Op::Stop),
            1 => Just(Op::Resume),
        ],
        1..40,
    )
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    // Releases here must be seen at once by the next acquisition: no other test thread
    // may be between fork and exec meanwhile (see worklane-testkit's gate).
    let _quiet = worklane_testkit::gate::quiet();
    let site = Site::new(r#"{"max_agents": 2}"#);
    let dir = site.temp.path();
    // Held slots by index, in the harness and in the model.
    let mut held: BTreeMap<u32, worklane_admission::Slot> = BTreeMap::new();
    let mut cap = 2u32;
    let mut stopped = false;
    for op in ops {
        match op {
            Op::Take => {
                let got = site
                    .pool
                    .try_take(Kind::Agent, &Request::new("model"))
                    .expect("take");
                let live = u32::try_from(held.len()).expect("few");
                match got {
                    Take::Held(slot) => {
                        prop_assert!(!stopped, "admitted under STOP");
                        prop_assert!(live < cap, "admitted at {live} of {cap}: over the cap");
                        let first_free = (0..).find(|i| !held.contains_key(i)).expect("an index");
                        prop_assert_eq!(slot.name(), format!("agent-{first_free}.lock"));
                        held.insert(first_free, slot);
                    }
                    Take::Blocked(Blocker::Stop(_)) => prop_assert!(stopped),
                    Take::Blocked(Blocker::AtCap { held: n, cap: c }) => {
                        prop_assert!(!stopped);
                        prop_assert_eq!((n, c), (live, cap), "the count is the model's");
                    }
                    Take::Blocked(other) => {
                        return Err(TestCaseError::fail(format!("unexpected blocker {other}")));
                    }
                }
            }
            Op::Release(i) => {
                let Some(&index) = held.keys().nth(*i % held.len().max(1)) else {
                    continue;
                };
                let slot = held.remove(&index).expect("held");
                slot.release().expect("release");
            }
            Op::Kill(i) => {
                let Some(&index) = held.keys().nth(*i % held.len().max(1)) else {
                    continue;
                };
                let slot = held.remove(&index).expect("held");
                // What a SIGKILL leaves: the record as it was, and the guard closed.
                let name = dir.join(slot.name());
                let bytes = std::fs::read(&name).expect("its record");
                slot.release().expect("release");
                std::fs::write(&name, bytes).expect("the record stays");
            }
            Op::SetCap(n) => {
                cap = *n;
                site.set_config(&format!(r#"{{"max_agents": {n}}}"#));
            }
            Op::Stop => {
                stopped = true;
                std::fs::write(dir.join("STOP"), br#"{"by":"m","at":"x","reason":"model"}"#)
                    .expect("STOP");
            }
            Op::Resume => {
                stopped = false;
                let _ = std::fs::remove_file(dir.join("STOP"));
            }
        }
        let snapshot = site.pool.snapshot().expect("snapshot");
        let counted = snapshot
            .slots
            .iter()
            .filter(|s| s.kind == "agent" && s.state.is_held())
            .count();
        prop_assert_eq!(
            counted,
            held.len(),
            "slots counts what is held, after {:?}",
            op
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_pool_follows_the_model(ops in ops()) {
        run(&ops)?;
    }
}
