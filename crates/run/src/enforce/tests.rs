use super::*;
use worklane_identity::{ProcessIdentity, Recorded};
use worklane_lease::Record;
use worklane_slotfile::Written;

fn command(place: &Place, uid: u32, mode: u32) -> RecordedCommand {
    RecordedCommand {
        resource: "agent-0.lock".into(),
        record: Record {
            holder: Recorded::new(ProcessIdentity { pid: 100, start: 5 }, place.clone()),
            ..Record::default()
        },
        pid: 200,
        start: Some(7),
        group: true,
        writer: Written {
            uid,
            mode,
            links: 1,
        },
        guard: None,
    }
}

fn here() -> Place {
    Place {
        host: "h".into(),
        boot: "b".into(),
        pidns: Some(1),
        timens: None,
    }
}

const ROOT: Me = Me {
    uid: 0,
    pid: 50,
    pgid: 50,
    sid: 40,
};

fn proc(state: u8, pgid: u32, start: u64, uid: u32) -> Seen {
    Seen {
        state,
        pgid,
        sid: 1,
        start,
        uid,
    }
}

fn table(rows: &[(u32, Seen)]) -> impl Fn(u32) -> Option<Seen> + '_ {
    move |pid| rows.iter().find(|(p, _)| *p == pid).map(|(_, s)| *s)
}

fn group(pid: u32, start: u64) -> Target {
    Target {
        pid,
        start,
        group: true,
    }
}

#[test]
fn only_the_recorded_process_of_the_records_writer_is_signalled() {
    let here = here();
    let c = command(&here, 1000, 0o644);
    let judge_with = |rows: &[(u32, Seen)]| judge(&c, &here, &ROOT, &table(rows), &[]);
    assert_eq!(judge_with(&[]), Judged::Gone, "gone");
    assert_eq!(
        judge_with(&[(200, proc(b'S', 200, 8, 1000))]),
        Judged::Gone,
        "another start: the pid was reused"
    );
    assert_eq!(
        judge_with(&[(200, proc(b'Z', 200, 7, 1000))]),
        Judged::Gone,
        "a zombie has exited"
    );
    assert!(
        matches!(
            judge_with(&[(200, proc(b'S', 200, 7, 0))]),
            Judged::Untouchable(_)
        ),
        "never a process of another user than the record's writer"
    );
    assert_eq!(
        judge_with(&[(200, proc(b'S', 200, 7, 1000))]),
        Judged::Running {
            supervised: false,
            targets: vec![group(200, 7)]
        }
    );
    let mut other = here.clone();
    other.pidns = Some(2);
    assert!(matches!(
        judge(
            &command(&other, 1000, 0o644),
            &here,
            &ROOT,
            &table(&[]),
            &[]
        ),
        Judged::Untouchable(_)
    ));
    let mut elsewhere = here.clone();
    elsewhere.host = "other".into();
    assert!(matches!(
        judge(
            &command(&elsewhere, 1000, 0o644),
            &here,
            &ROOT,
            &table(&[]),
            &[]
        ),
        Judged::Untouchable(_)
    ));
}

#[test]
fn a_record_others_could_have_written_proves_nothing() {
    let here = here();
    let rows = [(200, proc(b'S', 200, 7, 0))];
    for mode in [0o660, 0o664, 0o646, 0o666] {
        let c = command(&here, 0, mode);
        assert!(
            matches!(
                judge(&c, &here, &ROOT, &table(&rows), &[]),
                Judged::Untouchable(_)
            ),
            "mode {mode:o}"
        );
    }
    let mut linked = command(&here, 0, 0o644);
    linked.writer.links = 2;
    assert!(matches!(
        judge(&linked, &here, &ROOT, &table(&rows), &[]),
        Judged::Untouchable(_)
    ));
}

#[test]
fn pid_1_ourselves_our_group_and_session_are_spared() {
    let here = here();
    let mut init = command(&here, 0, 0o644);
    init.pid = 1;
    assert_eq!(
        judge(
            &init,
            &here,
            &ROOT,
            &table(&[(1, proc(b'S', 1, 7, 0))]),
            &[]
        ),
        Judged::Gone,
        "pid 1 is never signalled (kill(-1) would be everyone)"
    );
    let mut ours = command(&here, 0, 0o644);
    ours.pid = ROOT.pgid;
    let rows = [(ROOT.pgid, proc(b'S', ROOT.pgid, 7, 0))];
    assert_eq!(
        judge(&ours, &here, &ROOT, &table(&rows), &[]),
        Judged::Gone,
        "our own pid"
    );
    let mut session = command(&here, 0, 0o644);
    session.pid = ROOT.sid;
    let rows = [(ROOT.sid, proc(b'S', ROOT.sid, 7, 0))];
    assert_eq!(
        judge(&session, &here, &ROOT, &table(&rows), &[]),
        Judged::Running {
            supervised: false,
            targets: vec![Target {
                pid: ROOT.sid,
                start: 7,
                group: false
            }]
        },
        "the leader of our session alone, never its group"
    );
}

#[test]
fn the_guards_holders_are_the_run_even_without_its_leader() {
    let here = here();
    let c = command(&here, 1000, 0o644);
    let rows = [
        (300, proc(b'S', 200, 30, 1000)),
        (301, proc(b'S', 200, 31, 0)),
        (100, proc(b'S', 100, 5, 1000)),
    ];
    assert_eq!(
        judge(&c, &here, &ROOT, &table(&rows), &[300, 301, 100]),
        Judged::Running {
            supervised: true,
            targets: vec![Target {
                pid: 300,
                start: 30,
                group: false
            }]
        },
        "the leader is gone: the guard's other holders of the writer's uid, not the \
         supervisor (pid 100)"
    );
}

#[test]
fn a_supervisor_counts_only_while_it_can_act() {
    let here = here();
    let c = command(&here, 1000, 0o644);
    let running = |sup: Option<Seen>| {
        let mut rows = vec![(200, proc(b'S', 200, 7, 1000))];
        if let Some(s) = sup {
            rows.push((100, s));
        }
        match judge(&c, &here, &ROOT, &table(&rows), &[]) {
            Judged::Running { supervised, .. } => supervised,
            other => panic!("{other:?}"),
        }
    };
    assert!(running(Some(proc(b'S', 100, 5, 1000))));
    for (state, start) in [(b'T', 5), (b't', 5), (b'Z', 5), (b'S', 6)] {
        assert!(
            !running(Some(proc(state, 100, start, 1000))),
            "supervisor {} start {start}",
            state as char
        );
    }
    assert!(!running(None), "a supervisor that is gone");
}

#[test]
fn a_user_other_than_root_signals_only_the_runs_of_its_own_records() {
    let here = here();
    let user = Me {
        uid: 1000,
        pid: 50,
        pgid: 50,
        sid: 40,
    };
    let own = command(&here, 1000, 0o644);
    assert_eq!(
        judge(
            &own,
            &here,
            &user,
            &table(&[(200, proc(b'S', 200, 7, 1000))]),
            &[]
        ),
        Judged::Running {
            supervised: false,
            targets: vec![group(200, 7)]
        },
        "its own record, its own process"
    );
    let others = command(&here, 2000, 0o644);
    match judge(
        &others,
        &here,
        &user,
        &table(&[(200, proc(b'S', 200, 7, 2000))]),
        &[],
    ) {
        Judged::Untouchable(why) => assert_eq!(
            why, "its record is uid 2000's; run stop-all as that user or as root",
            "says whose it is and who may halt it"
        ),
        other => panic!("another user's run is not this user's to signal: {other:?}"),
    }
    let roots = command(&here, 0, 0o644);
    assert!(
        matches!(
            judge(
                &roots,
                &here,
                &user,
                &table(&[(200, proc(b'S', 200, 7, 0))]),
                &[]
            ),
            Judged::Untouchable(_)
        ),
        "nor root's"
    );
    assert_eq!(
        judge(
            &others,
            &here,
            &user,
            &table(&[(200, proc(b'S', 200, 7, 2000))]),
            &[300]
        ),
        Judged::Untouchable(
            "its record is uid 2000's; run stop-all as that user or as root".to_owned()
        ),
        "nor the holders of its guard"
    );
}

#[test]
fn a_process_of_another_user_is_named_as_such_and_its_zombie_is_gone() {
    let here = here();
    let c = command(&here, 1000, 0o644);
    assert_eq!(
        judge(
            &c,
            &here,
            &ROOT,
            &table(&[(200, proc(b'S', 200, 7, 33))]),
            &[]
        ),
        Judged::Untouchable("pid 200 belongs to uid 33, but its record is uid 1000's".to_owned())
    );
    assert_eq!(
        judge(
            &c,
            &here,
            &ROOT,
            &table(&[(200, proc(b'Z', 200, 7, 33))]),
            &[]
        ),
        Judged::Gone,
        "an exited process of another user is nothing to refuse"
    );
}

#[test]
fn the_group_is_signalled_only_while_the_command_leads_it_and_is_not_ours() {
    let here = here();
    let single = |pid| Target {
        pid,
        start: 7,
        group: false,
    };
    let only = |c: &RecordedCommand, me: &Me, leader_pgid: u32| match judge(
        c,
        &here,
        me,
        &table(&[(c.pid, proc(b'S', leader_pgid, 7, 1000))]),
        &[],
    ) {
        Judged::Running { targets, .. } => targets,
        other => panic!("{other:?}"),
    };
    let c = command(&here, 1000, 0o644);
    assert_eq!(
        only(&c, &ROOT, 200),
        vec![group(200, 7)],
        "it leads its group"
    );
    assert_eq!(
        only(&c, &ROOT, 199),
        vec![single(200)],
        "it moved to another group: itself alone"
    );
    let mut interactive = command(&here, 1000, 0o644);
    interactive.group = false;
    assert_eq!(
        only(&interactive, &ROOT, 200),
        vec![single(200)],
        "a command started in the terminal's group leads none of its own"
    );
    let in_our_group = Me {
        uid: 0,
        pid: 50,
        pgid: 200,
        sid: 40,
    };
    assert_eq!(
        only(&c, &in_our_group, 200),
        vec![single(200)],
        "never the group enforcement itself runs in"
    );
}

#[test]
fn the_guards_other_holders_are_added_beside_a_live_leader_once() {
    let here = here();
    let c = command(&here, 1000, 0o644);
    let rows = [
        (200, proc(b'S', 200, 7, 1000)),
        (100, proc(b'S', 100, 5, 1000)),
        (300, proc(b'S', 300, 30, 1000)),
        (301, proc(b'S', 301, 31, 0)),
        (302, proc(b'Z', 302, 32, 1000)),
    ];
    assert_eq!(
        judge(
            &c,
            &here,
            &ROOT,
            &table(&rows),
            &[200, 100, 300, 301, 302, 303]
        ),
        Judged::Running {
            supervised: true,
            targets: vec![
                group(200, 7),
                Target {
                    pid: 300,
                    start: 30,
                    group: false
                }
            ]
        },
        "the leader's group once, the writer's other live holder alone; not the supervisor, \
         another user's process, a zombie or a process gone"
    );
}

#[test]
fn a_run_is_shown_with_its_command_when_recorded() {
    let mut run = Run {
        resource: "agent-0.lock".into(),
        pid: 7,
        command: Some("make -j8".into()),
    };
    assert_eq!(run.to_string(), "agent-0.lock (pid 7, `make -j8`)");
    run.command = None;
    assert_eq!(run.to_string(), "agent-0.lock (pid 7)");
}

#[test]
fn one_record_per_command_is_the_one_that_is_not_the_job_slots() {
    let here = here();
    let mut job = command(&here, 1000, 0o644);
    job.resource = "job-3.lock".into();
    let agent = command(&here, 1000, 0o644);
    let mut other = command(&here, 1000, 0o644);
    other.resource = "agent-1.lock".into();
    other.pid = 201;
    let kept: Vec<String> = one_per_command(vec![job, agent, other])
        .into_iter()
        .map(|c| c.resource)
        .collect();
    assert_eq!(kept, ["agent-0.lock", "agent-1.lock"]);
}

#[test]
fn me_is_this_process() {
    let me = me();
    assert_eq!(me.pid, std::process::id());
    assert_eq!(me.uid, rustix::process::geteuid().as_raw());
    // The group as /proc/self/status names it in this pid namespace (its last column). Not
    // getpgrp: where the group's leader is outside this namespace (CI's), the kernel says 0
    // and rustix's getpgrp cannot hold a zero pid.
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let pgid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpgid:"))
        .and_then(|v| v.split_whitespace().last())
        .map(|v| v.parse::<u32>().expect("a number"));
    if let Some(pgid) = pgid {
        assert_eq!(me.pgid, pgid);
    }
}

mod live;
