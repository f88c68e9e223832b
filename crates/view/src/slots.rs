//! The document of `slots --json` built from a snapshot and what is around it: printed by
//! `slots`, served by `metrics` and shown by `top`; and the words of a slot both outputs of
//! `slots` share (its reason, its holder's name, the counts held).

use crate::context::{Around, QueueView, line_json};
use crate::doc;
use serde_json::Value;
use worklane_admission::{DrainState, SlotState, SlotView, Snapshot, drain::Ignored};
use worklane_lease::{Record, rfc3339_ms};

/// A slot's verdict in words.
pub fn reason(state: &SlotState) -> String {
    match state {
        SlotState::GuardHeld => "a live process holds its kernel guard".to_owned(),
        SlotState::Live(why) => why.to_string(),
        SlotState::Dead(why) => format!("free to take over: {why}"),
    }
}

/// The owners worklane's dispatcher commands record (`claim` and the records it adopts,
/// `enqueue`'s lane, the dispatcher's own rows): not a name a person knows the work by.
const CLAIM_OWNER: &str = "worklane claim";

const QUEUE_OWNERS: [&str; 2] = ["worklane enqueue", "worklane dispatcher"];

/// The attempt the record of file `file` belongs to: its `attempt` field, or, for a lane
/// handed to the dispatcher (its record names no attempt), the attempt of that lane's status
/// entry; the lane is the one the file names (`lane-<lane>.lock`), so a lane another
/// implementation handed over without a `lane` field is found too (PROTOCOL.md 14.3).
fn attempt_of(file: &str, record: &Record, queue: &QueueView) -> Option<String> {
    if let Some(attempt) = record.extra_str("attempt") {
        return Some(attempt.to_owned());
    }
    let lane = file
        .strip_prefix("lane-")
        .and_then(|l| l.strip_suffix(".lock"))
        .or_else(|| record.extra_str("lane"))?;
    queue
        .attempts
        .iter()
        .find(|a| a["lane"].as_str() == Some(lane))
        .and_then(|a| a["attempt"].as_str())
        .map(str::to_owned)
}

/// Who holds a slot or lane, as `slots` names it: the recorded owner, except for dispatched
/// work, named by its command once a driver claimed it (`worklane claim` holds it for the
/// command), and by its lane and attempt while it is queued or starting (the dispatcher holds
/// it).
pub fn holder_name(file: &str, record: &Record, queue: &QueueView) -> Option<String> {
    let owner = record.owner.as_deref();
    if owner == Some(CLAIM_OWNER)
        && let Some(command) = record.extra_str("command")
    {
        return Some(command.to_owned());
    }
    if owner.is_some_and(|o| QUEUE_OWNERS.contains(&o)) {
        let lane = record.extra_str("lane");
        let attempt = attempt_of(file, record, queue);
        match (lane, attempt) {
            (Some(lane), Some(attempt)) => return Some(format!("lane {lane}, attempt {attempt}")),
            (Some(lane), None) => return Some(format!("lane {lane}")),
            (None, Some(attempt)) => return Some(format!("attempt {attempt}")),
            (None, None) => {}
        }
    }
    record.owner.clone()
}

fn slot_json(view: &SlotView, queue: &QueueView, dir_key: Option<&str>) -> doc::Slot {
    let r = view.record.as_ref();
    doc::Slot {
        name: view.name.clone(),
        kind: view.kind,
        pid: r.and_then(|r| r.pid()),
        owner: r.and_then(|r| r.owner.clone()),
        attempt: r.and_then(|r| attempt_of(&view.name, r, queue)),
        since: r.and_then(|r| r.acquired_at.clone()),
        role: r.and_then(|r| r.extra_str("role")).map(str::to_owned),
        command: r
            .and_then(|r| r.extra_str("command").or_else(|| r.extra_str("entrypoint")))
            .map(str::to_owned),
        epoch: r.and_then(|r| r.epoch),
        limit_ms: r.and_then(|r| r.extra.get("limit_ms").and_then(Value::as_u64)),
        last_pulse: r.and_then(|r| r.last_pulse).map(rfc3339_ms),
        weight: match &view.weight {
            worklane_admission::Weight::Units(n) => *n,
            _ => 1,
        },
        units: view.units,
        share_owner: view.share_owner.clone(),
        state: view.state.word(),
        counts: view.state.is_held(),
        reason: reason(&view.state),
        cgroup: r.and_then(|r| cgroup_json(dir_key, &view.name, r)),
    }
}

/// The key of the slot directory at `dir` in its runs' cgroup names.
pub fn dir_key(dir: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).ok()?;
    Some(worklane_identity::cgroup::dir_key(meta.dev(), meta.ino()))
}

/// The cgroup the record of `resource` names (`cgroup`) and what it holds now, if it exists
/// and is that run's own (as admission judges it: a record any member may write must not
/// show another cgroup's processes as the slot's).
pub fn cgroup_json(
    dir_key: Option<&str>,
    resource: &str,
    record: &Record,
) -> Option<doc::SlotCgroup> {
    use worklane_identity::cgroup;
    let path = record.extra_str(cgroup::RECORD_FIELD)?;
    if !cgroup::names_run(path, dir_key?, resource, record.epoch?) {
        return None;
    }
    let usage = cgroup::usage(path)?;
    Some(doc::SlotCgroup {
        path: path.to_owned(),
        procs: usage.procs,
        cpu_usec: usage.cpu_usec,
        memory_current: usage.memory_current,
        memory_peak: usage.memory_peak,
    })
}

/// Whether runs get a cgroup each here, and why not.
pub fn containment_json() -> doc::Containment {
    match worklane_run::cgroup::probe() {
        Ok(cgroups) => doc::Containment {
            on: true,
            cgroups: Some(cgroups),
            why: None,
        },
        Err(off) => doc::Containment {
            on: false,
            cgroups: None,
            why: Some(off.to_string()),
        },
    }
}

fn drain_json(drain: &DrainState) -> doc::Drain {
    let flag = |d: &worklane_admission::Drain| doc::DrainFlag {
        since: d.since.clone(),
        until: d.until.clone(),
        to: d.to.clone(),
    };
    match drain {
        DrainState::None => doc::Drain::None,
        DrainState::InForce(d) => doc::Drain::InForce(flag(d)),
        DrainState::Ignored(Ignored::Expired { drain: d }) => doc::Drain::Expired(flag(d)),
        DrainState::Ignored(Ignored::TooFarAhead { drain: d }) => doc::Drain::TooFarAhead(flag(d)),
        DrainState::Ignored(Ignored::Unreadable { detail }) => doc::Drain::Unreadable {
            detail: detail.clone(),
        },
    }
}

/// The entries of `kind` that count as held.
pub fn count(snapshot: &Snapshot, kind: &str) -> usize {
    snapshot
        .slots
        .iter()
        .filter(|s| s.kind == kind && s.state.is_held())
        .count()
}

/// The document of `slots --json` (schema in docs/json.md).
pub fn to_json(snapshot: &Snapshot, around: &Around) -> doc::Slots {
    let key = dir_key(&snapshot.dir);
    let caps = snapshot.config.as_ref().ok();
    doc::Slots {
        version: doc::VERSION,
        dir: snapshot.dir.display().to_string(),
        config: doc::ConfigFile {
            path: around.config.path.display().to_string(),
            exists: around.config.exists,
        },
        // No take is admitted while the config cannot be used: the caps in force are 0.
        max_agents: caps.map_or(0, |c| c.max_agents),
        max_test_runs: caps.map_or(0, |c| c.max_test_runs),
        max_jobs: caps.map_or(0, |c| c.max_jobs),
        agents_held: count(snapshot, "agent"),
        test_runs_held: count(snapshot, "test"),
        agent_units_held: snapshot.held_units("agent"),
        test_run_units_held: snapshot.held_units("test"),
        shares: snapshot
            .share_uses()
            .into_iter()
            .map(|u| doc::ShareUse {
                owner: u.owner,
                held: u.held,
                share: u.share,
            })
            .collect(),
        jobs_held: count(snapshot, "job"),
        full_run_held: count(snapshot, "full-run") > 0,
        stop: snapshot.stop.as_ref().map(|s| doc::Stop {
            by: s.by.clone(),
            at: s.at.clone(),
            reason: s.reason.clone(),
        }),
        drain: drain_json(&snapshot.drain),
        slots: snapshot
            .slots
            .iter()
            .map(|v| slot_json(v, &around.queue, key.as_deref()))
            .collect(),
        problems: around.problems(snapshot),
        queue: doc::Queue {
            dispatcher: doc::Dispatcher {
                pid: around.queue.pid,
                alive: around.queue.alive,
            },
            attempts: around.queue.attempts.clone(),
        },
        line: line_json(snapshot),
        budgets: crate::budget::views_json(&around.budgets.views),
        containment: containment_json(),
        config_problem: around.config.problem.as_ref().map(|p| p.json()),
        fleet: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_shows_only_its_own_run_s_cgroup() {
        let mut record = Record {
            epoch: Some(1),
            ..Record::default()
        };
        // Another cgroup that exists (worklane's runs' directory, where runs were made): a
        // forged record must not show its processes as the slot's.
        record.extra.insert("cgroup".into(), "/worklane".into());
        assert!(cgroup_json(Some("k"), "agent-0.lock", &record).is_none());
        record
            .extra
            .insert("cgroup".into(), "/worklane/j-agent-0-1".into());
        assert!(cgroup_json(Some("k"), "agent-0.lock", &record).is_none());
    }

    /// A cgroup made under the unified hierarchy's root for a test (as root, as run's tests
    /// make theirs), with worklane's runs' directory in it; removed, with it, at the end.
    struct Scratch(std::path::PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            if let Ok(runs) = std::fs::read_dir(self.0.join("worklane")) {
                for run in runs.flatten() {
                    let _ = std::fs::remove_dir(run.path());
                }
            }
            let _ = std::fs::remove_dir(self.0.join("worklane"));
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn a_record_s_own_run_s_cgroup_is_shown_with_what_it_holds() {
        let mount = worklane_identity::cgroup::unified().expect("cgroup v2 on this machine");
        let top = format!("worklane-test-view-{}", std::process::id());
        let scratch = Scratch(mount.join(&top));
        let run = worklane_identity::cgroup::run_name("0123456789ab", "agent-0.lock", 7);
        std::fs::create_dir_all(scratch.0.join("worklane").join(&run))
            .expect("make a test cgroup (as root)");
        let path = format!("/{top}/worklane/{run}");
        let mut record = Record {
            epoch: Some(7),
            ..Record::default()
        };
        record.extra.insert("cgroup".into(), path.clone().into());
        let shown = cgroup_json(Some("0123456789ab"), "agent-0.lock", &record)
            .expect("the run's own cgroup, which exists");
        assert_eq!(shown.path, path);
        assert!(
            shown.procs.is_empty(),
            "nothing runs in it: {:?}",
            shown.procs
        );
        assert_eq!(shown.cpu_usec, Some(0), "cpu.stat's usage_usec");
        assert!(
            cgroup_json(Some("0123456789ab"), "agent-1.lock", &record).is_none(),
            "another slot's run"
        );
        assert!(
            cgroup_json(None, "agent-0.lock", &record).is_none(),
            "no key"
        );
        record.epoch = Some(8);
        assert!(
            cgroup_json(Some("0123456789ab"), "agent-0.lock", &record).is_none(),
            "another epoch's run"
        );
    }

    #[test]
    fn a_directory_s_key_is_its_device_and_inode_s_as_runs_name_their_cgroups() {
        let temp = tempfile::tempdir().expect("temp dir");
        let open = std::fs::File::open(temp.path()).expect("open");
        let key = worklane_identity::cgroup::dir_key_of(&open).expect("fstat");
        assert_eq!(dir_key(temp.path()), Some(key.clone()));
        assert_eq!(key.len(), 12, "{key}");
        let other = tempfile::tempdir().expect("temp dir");
        assert_ne!(
            dir_key(other.path()),
            Some(key),
            "another directory, another key"
        );
        assert_eq!(dir_key(&temp.path().join("absent")), None);
    }

    #[test]
    fn a_handed_over_lane_s_attempt_is_found_by_its_file_name_without_a_lane_field() {
        let queue = QueueView {
            pid: None,
            alive: true,
            attempts: vec![serde_json::json!({"attempt": "a-1", "lane": "build"})],
            problems: Vec::new(),
        };
        let bare = Record {
            owner: Some("another harness".into()),
            ..Record::default()
        };
        assert_eq!(
            attempt_of("lane-build.lock", &bare, &queue).as_deref(),
            Some("a-1")
        );
        assert_eq!(attempt_of("lane-other.lock", &bare, &queue), None);
        assert_eq!(attempt_of("agent-0.lock", &bare, &queue), None);
        let mut named = bare.clone();
        named
            .extra
            .insert("attempt".into(), serde_json::json!("a-9"));
        assert_eq!(
            attempt_of("lane-build.lock", &named, &queue).as_deref(),
            Some("a-9"),
            "the record's own attempt first"
        );
    }
}
