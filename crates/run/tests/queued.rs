//! Queued full runs as `queue ls` and `queue cancel` see them: runners (`run-holder queue`)
//! waiting in the full-run line behind a `full-run.lock` this test holds, listed in line
//! order, cancelled by SIGTERM only when their record proves the process is the runner.

use super::*;
use worklane_run::queued::{Cancelled, State, cancel, list};

/// Holds `full-run.lock` (as another full run would) until dropped.
fn hold_full_run(site: &Site) -> gate::QuietDrop<worklane_admission::Slot> {
    match gate::quietly(|| site.pool.try_take(Kind::FullRun, &Request::new("test"))) {
        Ok(Take::Held(slot)) => gate::QuietDrop::new(slot),
        other => panic!("full-run.lock: {other:?}"),
    }
}

/// A runner, once it waits behind the full run the test holds.
fn waiting_runner(site: &Site, priority: i64) -> Holder {
    let mut runner = site.runner(priority, None);
    assert_eq!(runner.line(), "queued");
    assert_eq!(
        runner.line(),
        "waiting another full run holds full-run.lock"
    );
    runner
}

/// `(pid, state, priority)` of each queued full run listed.
fn listed(site: &Site) -> Vec<(u32, State, i64)> {
    list(&site.pool)
        .expect("list")
        .into_iter()
        .map(|q| (q.pid, q.state, q.priority))
        .collect()
}

fn waiting(position: u32) -> State {
    State::Waiting { position }
}

#[test]
fn runners_are_listed_in_line_order_and_the_one_running_last() {
    let site = Site::new();
    let full = hold_full_run(&site);
    // Others in line: an agent's waiter, and a full run that is not a queued one, before them.
    let agent = gate::QuietDrop::new(
        site.pool
            .join_line(Kind::Agent, 9, &Request::new("an agent"))
            .expect("join the agent line"),
    );
    let other = gate::QuietDrop::new(
        site.pool
            .join_line(
                Kind::FullRun,
                5,
                &Request::new("worklane run --kind full-run"),
            )
            .expect("join the full-run line"),
    );
    let mut first = waiting_runner(&site, 0);
    let mut second = waiting_runner(&site, 0);
    assert_eq!(
        listed(&site),
        [(first.pid(), waiting(2), 0), (second.pid(), waiting(3), 0)],
        "places count every live full-run waiter, queued or not; another kind's none"
    );
    let one = list(&site.pool).expect("list").remove(0);
    assert_eq!(
        (one.command.as_deref(), one.log.as_deref()),
        (
            Some("queued by run-holder"),
            Some("/nowhere/run-holder.log")
        )
    );
    assert!(one.since.ends_with('Z'), "when it joined: {}", one.since);
    assert_eq!(
        cancel(&site.pool, second.pid()).expect("cancel"),
        Cancelled::Left {
            log: Some("/nowhere/run-holder.log".into())
        }
    );
    assert_eq!(second.line(), "cancelled");
    assert_eq!(second.end().code(), Some(143));
    assert_eq!(listed(&site), [(first.pid(), waiting(2), 0)]);
    drop(full);
    assert_eq!(
        first.line(),
        "waiting 1 waiter(s) before it in the full-run line"
    );
    drop(other);
    drop(agent);
    assert_eq!(first.line(), "held full-run.lock");
    let running = list(&site.pool).expect("list");
    assert_eq!(
        running
            .iter()
            .map(|q| (q.pid, q.state, q.priority))
            .collect::<Vec<_>>(),
        [(first.pid(), State::Running, 0)]
    );
    assert!(running[0].since.ends_with('Z'), "{}", running[0].since);
    assert_eq!(
        cancel(&site.pool, first.pid()).expect("cancel"),
        Cancelled::Running {
            since: running[0].since.clone()
        },
        "a cancel of a waiting run does not end a running one"
    );
    assert_eq!(cancel(&site.pool, 1).expect("cancel"), Cancelled::NotQueued);
    first.close();
    assert!(first.end().success());
    assert_eq!(listed(&site), [], "nothing queued any more");
}

/// The record of `runner`'s place in line, rewritten by `change` (as any member of the
/// directory's group could), mode `mode`.
fn rewrite(
    site: &Site,
    runner: &Holder,
    mode: u32,
    change: impl FnOnce(&mut worklane_lease::Record),
) {
    let view = site
        .pool
        .line_views()
        .expect("line")
        .into_iter()
        .find(|v| v.record.as_ref().and_then(worklane_lease::Record::pid) == Some(runner.pid()))
        .expect("the runner's place");
    let mut record = view.record.expect("its record");
    change(&mut record);
    site.pool
        .dir()
        .file(&view.entry.name())
        .expect("name")
        .replace(&record.to_bytes(), mode)
        .expect("rewrite the record");
}

fn unproven(site: &Site, pid: u32) -> String {
    match cancel(&site.pool, pid).expect("cancel") {
        Cancelled::Unproven { why } => why,
        other => panic!("nothing proves pid {pid} is the runner: {other:?}"),
    }
}

#[test]
fn a_runner_is_signalled_only_when_its_record_proves_the_process_is_it() {
    let site = Site::new();
    let _full = hold_full_run(&site);
    let mut runner = waiting_runner(&site, 0);
    let pid = runner.pid();
    let original = site
        .pool
        .line_views()
        .expect("line")
        .into_iter()
        .find_map(|v| v.record)
        .expect("the runner's record");
    rewrite(&site, &runner, 0o664, |_| {});
    assert_eq!(
        unproven(&site, pid),
        "its record (mode 664, 1 name(s)) may have been written by others than its owner (uid 0)"
    );
    let elsewhere = "its record names another host, boot or pid namespace";
    for change in [
        (|p: &mut worklane_identity::Place| p.host.push('x')) as fn(&mut worklane_identity::Place),
        |p| p.boot.push('x'),
        |p| p.pidns = Some(p.pidns.unwrap_or(0) + 1),
    ] {
        rewrite(&site, &runner, 0o644, |r| {
            *r = original.clone();
            if let worklane_identity::Field::Present(place) = &mut r.holder.place {
                change(place);
            }
        });
        assert_eq!(unproven(&site, pid), elsewhere);
    }
    rewrite(&site, &runner, 0o644, |r| {
        *r = original.clone();
        r.holder.identity = worklane_identity::Field::Missing;
    });
    assert_eq!(unproven(&site, pid), "its record names no place or start");
    let start = match &original.holder.identity {
        worklane_identity::Field::Present(identity) => identity.start,
        other => panic!("{other:?}"),
    };
    rewrite(&site, &runner, 0o644, |r| {
        *r = original.clone();
        if let worklane_identity::Field::Present(identity) = &mut r.holder.identity {
            identity.start += 1;
        }
    });
    assert_eq!(
        unproven(&site, pid),
        format!(
            "pid {pid} started at {start}, not at the {} its record names: another process has \
             that pid",
            start + 1
        )
    );
    rewrite(&site, &runner, 0o644, |r| *r = original.clone());
    let entry = site
        .pool
        .line_views()
        .expect("line")
        .into_iter()
        .find(|v| v.record.is_some())
        .expect("the place")
        .entry
        .name();
    std::os::unix::fs::chown(site.pool.dir().path().join(&entry), Some(1000), None).expect("chown");
    assert_eq!(
        unproven(&site, pid),
        format!("pid {pid} belongs to uid 0, but its record is uid 1000's")
    );
    std::os::unix::fs::chown(site.pool.dir().path().join(&entry), Some(0), None).expect("chown");
    assert!(alive(pid), "nothing signalled it");
    assert_eq!(
        cancel(&site.pool, pid).expect("cancel"),
        Cancelled::Left {
            log: Some("/nowhere/run-holder.log".into())
        },
        "proven again"
    );
    assert_eq!(runner.line(), "cancelled");
}

#[test]
fn a_record_naming_a_process_gone_is_unproven() {
    let site = Site::new();
    let _full = hold_full_run(&site);
    let runner = waiting_runner(&site, 0);
    let mut gone = Command::new("true").spawn_gated().expect("start");
    let gone_pid = gone.id();
    gone.wait().expect("reap");
    rewrite(&site, &runner, 0o644, |r| {
        r.holder.pid = worklane_identity::Field::Present(gone_pid);
    });
    assert_eq!(
        unproven(&site, gone_pid),
        format!("pid {gone_pid} cannot be seen")
    );
}

#[test]
fn a_runner_that_does_not_leave_in_time_is_said_to_be_there_still() {
    let site = Site::new();
    let _full = hold_full_run(&site);
    let mut runner = waiting_runner(&site, 0);
    // Stopped, it cannot act on the SIGTERM until it is continued.
    runner.signal(rustix::process::Signal::STOP);
    assert!(
        eventually(
            || std::fs::read_to_string(format!("/proc/{}/stat", runner.pid())).is_ok_and(|s| s
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('T')))
        ),
        "the runner stopped"
    );
    let started = Instant::now();
    assert_eq!(
        cancel(&site.pool, runner.pid()).expect("cancel"),
        Cancelled::StillThere
    );
    assert!(
        started.elapsed() >= worklane_run::queued::CANCEL_PATIENCE,
        "it waited its patience"
    );
    runner.signal(rustix::process::Signal::CONT);
    assert_eq!(
        runner.line(),
        "cancelled",
        "continued, it acts on the SIGTERM"
    );
}

#[test]
fn a_runner_waits_for_stop_and_its_idle_probe_then_runs() {
    let site = Site::new();
    site.write_stop();
    let mut busy = site.runner(0, Some("false"));
    assert_eq!(busy.line(), "queued");
    let said = busy.line();
    assert!(
        said.starts_with("waiting STOP") && said.contains("halt everything"),
        "{said}"
    );
    worklane_admission::stop::remove(site.pool.dir()).expect("resume");
    assert_eq!(busy.line(), "waiting idle probe `false` says busy");
    let probe = site.path("idle");
    let mut idle = site.runner(1, Some(&format!("test -e {}", probe.display())));
    assert_eq!(idle.line(), "queued");
    assert_eq!(
        idle.line(),
        format!("waiting idle probe `test -e {}` says busy", probe.display())
    );
    std::fs::write(&probe, "").expect("idle now");
    assert_eq!(idle.line(), "held full-run.lock", "the probe passes");
    idle.close();
    assert!(idle.end().success());
    busy.signal(rustix::process::Signal::TERM);
    // Meanwhile it said the runner before it, then its full run.
    let mut said: Vec<String> = Vec::new();
    while said.len() < 20
        && said
            .last()
            .is_none_or(|l| l != "cancelled" && !l.is_empty())
    {
        said.push(busy.line());
    }
    assert_eq!(
        said.last().map(String::as_str),
        Some("cancelled"),
        "{said:?}"
    );
}
