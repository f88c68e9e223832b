//! STOP's enforcement: after writing STOP, `stop-all` halts the commands that records name
//! (`commandProcess`) when their supervisor cannot: one that was SIGKILLed (its command runs
//! on, holding the slot) or stopped (SIGSTOP), or one that has not halted its command within
//! its own grace.
//!
//! A record is written by anyone who may write in the slot directory, so a command is
//! signalled only when it is provably the process the record names (same host, boot and pid
//! namespace; the same start identity) and, when `stop-all` runs as root, that process belongs
//! to the user who wrote the record: a record can never make root signal someone else's
//! process. The decisions are plain functions ([`parse_stat`], [`judge`]); only [`observe`]
//! reads the platform (Linux `/proc`; elsewhere nothing is observed and supervisors alone halt
//! their commands).

use crate::supervise::{CHECK_EVERY, GRACE};
use rustix::process::{Pid, Signal};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use worklane_admission::{Pool, RecordedCommand};
use worklane_identity::{Field, Place};

/// A process as `/proc` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The one-letter state (`R`, `S`, `T`, `Z`...).
    pub(crate) state: u8,
    /// Its start identity (field 22 of `/proc/<pid>/stat`).
    pub(crate) start: u64,
    /// The owner of `/proc/<pid>` (its effective uid).
    pub(crate) uid: u32,
}

/// State and start (field 22) from `/proc/<pid>/stat`, counted from the last `)`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn parse_stat(bytes: &[u8]) -> Option<(u8, u64)> {
    let close = bytes.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&bytes[close + 1..]).ok()?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let state = match fields.first()?.as_bytes() {
        [one] => *one,
        _ => return None,
    };
    // Field 3 is the state, so field 22 is the 20th after the parenthesis.
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

/// How a process looks now, `None` when it is gone or cannot be seen.
#[cfg(target_os = "linux")]
pub(crate) fn observe(pid: u32) -> Option<Seen> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let (state, start) = parse_stat(&stat)?;
    let uid = rustix::fs::stat(format!("/proc/{pid}").as_str())
        .ok()?
        .st_uid;
    Some(Seen { state, start, uid })
}

/// Nothing is observed off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn observe(_pid: u32) -> Option<Seen> {
    None
}

/// What to do about one recorded command now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Judged {
    /// Nothing: it is gone (or was never provably the recorded process).
    Gone,
    /// It cannot be signalled safely; the reason says why (shown to the operator).
    Untouchable(String),
    /// It runs; `supervised` tells whether its supervisor can still act.
    Running { supervised: bool },
}

/// Decides about `command`, given this process's place and uid, how the command looks now
/// and how its supervisor (the record's holder) looks.
pub(crate) fn judge(
    command: &RecordedCommand,
    here: &Place,
    my_uid: u32,
    seen: Option<Seen>,
    supervisor: Option<Seen>,
) -> Judged {
    let Field::Present(place) = &command.record.holder.place else {
        return Judged::Untouchable("its record names no place".to_owned());
    };
    if place.host != here.host || place.boot != here.boot || place.pidns != here.pidns {
        return Judged::Untouchable(
            "it runs on another host, boot or pid namespace; its own supervisor halts it"
                .to_owned(),
        );
    }
    let Some(seen) = seen else {
        return Judged::Gone;
    };
    if command.start != Some(seen.start) || matches!(seen.state, b'Z' | b'X') {
        // Exited, or the pid now names another process.
        return Judged::Gone;
    }
    if my_uid == 0 && seen.uid != command.writer_uid {
        return Judged::Untouchable(format!(
            "pid {} belongs to uid {}, but its record was written by uid {}",
            command.pid, seen.uid, command.writer_uid
        ));
    }
    let identity_start = command.record.holder.identity.present().map(|i| i.start);
    let supervised = supervisor.is_some_and(|s| {
        Some(s.start) == identity_start && !matches!(s.state, b'Z' | b'X' | b'T' | b't')
    });
    Judged::Running { supervised }
}

fn send(command: &RecordedCommand, signal: Signal) {
    let Some(pid) = i32::try_from(command.pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    let _ = if command.group {
        rustix::process::kill_process_group(pid, signal)
    } else {
        rustix::process::kill_process(pid, signal)
    };
}

/// What enforcement did.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Commands that were running when STOP was written.
    pub(crate) running: usize,
    /// Commands worklane signalled itself (their supervisor could not).
    pub(crate) signalled: Vec<String>,
    /// Commands still running when enforcement gave up, with why.
    pub(crate) left: Vec<String>,
    /// How long it took.
    pub(crate) took: Duration,
}

/// After STOP is written: waits until every command named by a record has ended, signalling
/// those whose supervisor cannot (SIGCONT and SIGTERM at once when the supervisor is gone or
/// stopped, SIGKILL a grace later; SIGKILL when a live supervisor has not halted its command
/// within a check and its grace), for at most about 5 s.
pub(crate) fn enforce_stop(pool: &Pool) -> Report {
    let started = Instant::now();
    let give_up = CHECK_EVERY + GRACE + Duration::from_millis(1500);
    let Ok(here) = Place::current() else {
        return Report::default();
    };
    let my_uid = rustix::process::geteuid().as_raw();
    // When each command (by resource, pid and start) was sent SIGTERM by us.
    let mut termed: BTreeMap<(String, u32, Option<u64>), Instant> = BTreeMap::new();
    let mut killed: Vec<(String, u32, Option<u64>)> = Vec::new();
    let mut report = Report::default();
    let mut first = true;
    loop {
        let commands = pool.recorded_commands().unwrap_or_default();
        let mut live = Vec::new();
        for command in &commands {
            let supervisor = command.record.pid().and_then(observe);
            match judge(command, here, my_uid, observe(command.pid), supervisor) {
                Judged::Gone => {}
                Judged::Untouchable(why) => {
                    live.push(format!("{} (pid {}): {why}", command.resource, command.pid));
                }
                Judged::Running { supervised } => {
                    let key = (command.resource.clone(), command.pid, command.start);
                    let now = Instant::now();
                    if !supervised && !termed.contains_key(&key) {
                        send(command, Signal::CONT);
                        send(command, Signal::TERM);
                        termed.insert(key.clone(), now);
                        report
                            .signalled
                            .push(format!("{} (pid {})", command.resource, command.pid));
                    }
                    let kill_at = match termed.get(&key) {
                        Some(at) => *at + GRACE,
                        // A supervisor that acts sends SIGKILL a check and its grace after STOP.
                        None => started + CHECK_EVERY + GRACE + Duration::from_millis(500),
                    };
                    if now >= kill_at && !killed.contains(&key) {
                        send(command, Signal::CONT);
                        send(command, Signal::KILL);
                        killed.push(key);
                    }
                    live.push(format!("{} (pid {})", command.resource, command.pid));
                }
            }
        }
        if first {
            report.running = live.len();
            first = false;
        }
        if live.is_empty() || started.elapsed() >= give_up {
            report.left = live;
            report.took = started.elapsed();
            return report;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use worklane_identity::{ProcessIdentity, Recorded};
    use worklane_lease::Record;

    fn command(place: &Place, writer_uid: u32) -> RecordedCommand {
        RecordedCommand {
            resource: "agent-0.lock".into(),
            record: Record {
                holder: Recorded::new(ProcessIdentity { pid: 100, start: 5 }, place.clone()),
                ..Record::default()
            },
            pid: 200,
            start: Some(7),
            group: true,
            writer_uid,
        }
    }

    fn seen(state: u8, start: u64, uid: u32) -> Option<Seen> {
        Some(Seen { state, start, uid })
    }

    fn here() -> Place {
        Place {
            host: "h".into(),
            boot: "b".into(),
            pidns: Some(1),
            timens: None,
        }
    }

    #[test]
    fn only_the_recorded_process_of_the_records_writer_is_signalled() {
        let here = here();
        let c = command(&here, 1000);
        assert_eq!(judge(&c, &here, 0, None, None), Judged::Gone, "gone");
        assert_eq!(
            judge(&c, &here, 0, seen(b'S', 8, 1000), None),
            Judged::Gone,
            "another start: the pid was reused"
        );
        assert_eq!(
            judge(&c, &here, 0, seen(b'Z', 7, 1000), None),
            Judged::Gone,
            "a zombie has exited"
        );
        assert!(
            matches!(
                judge(&c, &here, 0, seen(b'S', 7, 0), None),
                Judged::Untouchable(_)
            ),
            "root never signals a process of another user than the record's writer"
        );
        assert_eq!(
            judge(&c, &here, 1000, seen(b'S', 7, 0), None),
            Judged::Running { supervised: false },
            "an ordinary user may try: the kernel decides"
        );
        let mut other = here.clone();
        other.pidns = Some(2);
        assert!(matches!(
            judge(&command(&other, 1000), &here, 0, seen(b'S', 7, 1000), None),
            Judged::Untouchable(_)
        ));
        let mut elsewhere = here.clone();
        elsewhere.host = "other".into();
        assert!(matches!(
            judge(
                &command(&elsewhere, 1000),
                &here,
                0,
                seen(b'S', 7, 1000),
                None
            ),
            Judged::Untouchable(_)
        ));
    }

    #[test]
    fn a_supervisor_counts_only_while_it_can_act() {
        let here = here();
        let c = command(&here, 1000);
        let cmd = seen(b'S', 7, 1000);
        assert_eq!(
            judge(&c, &here, 0, cmd, seen(b'S', 5, 1000)),
            Judged::Running { supervised: true }
        );
        for (state, start) in [(b'T', 5), (b't', 5), (b'Z', 5), (b'S', 6)] {
            assert_eq!(
                judge(&c, &here, 0, cmd, seen(state, start, 1000)),
                Judged::Running { supervised: false },
                "supervisor {} start {start}",
                state as char
            );
        }
        assert_eq!(
            judge(&c, &here, 0, cmd, None),
            Judged::Running { supervised: false },
            "a supervisor that is gone"
        );
    }

    #[test]
    fn start_is_field_22() {
        let line = b"42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_stat(line), Some((b'S', 98765)));
        assert_eq!(parse_stat(b"42 (a) S 1"), None);
    }
}
