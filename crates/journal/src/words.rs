//! One event as a line for a person: its time, its kind, what happened, and who wrote it
//! ([`Entry::describe`], [`Event::what`]), as `worklane events` and `worklane top` show it.

use crate::event::{Entry, Event};

fn or_dash(text: Option<&str>) -> &str {
    text.filter(|t| !t.is_empty()).unwrap_or("-")
}

impl Event {
    /// What happened, in words.
    #[must_use]
    pub fn what(&self) -> String {
        what(self)
    }
}

impl Entry {
    /// The line of this entry for a person: `TIME  KIND  WHAT  [pid N]`, and the events its
    /// writer had to drop.
    #[must_use]
    pub fn describe(&self) -> String {
        describe(self)
    }
}

fn what(event: &Event) -> String {
    match event {
        Event::SlotTaken {
            slot,
            owner,
            epoch,
            waited_ms,
            ..
        } => match waited_ms {
            0 => format!("{slot} taken by {owner} (epoch {epoch})"),
            w => format!("{slot} taken by {owner} (epoch {epoch}) after waiting {w} ms"),
        },
        Event::SlotReleased {
            slot,
            owner,
            held_ms,
            cpu_usec,
            ..
        } => match cpu_usec {
            Some(us) => format!(
                "{slot} released by {owner} after {held_ms} ms, {:.1} s of CPU",
                *us as f64 / 1e6
            ),
            None => format!("{slot} released by {owner} after {held_ms} ms"),
        },
        Event::SlotRefused {
            slot_kind,
            owner,
            why,
            ..
        } => format!("{slot_kind} slot refused to {owner}: {why}"),
        Event::SlotWaiting {
            slot_kind,
            owner,
            position,
            in_line,
            why,
        } => {
            format!("{owner} waits for a {slot_kind} slot, {position} of {in_line} in line: {why}")
        }
        Event::HolderGone {
            slot,
            stale_pid,
            stale_owner,
            proof,
            ..
        } => format!(
            "{slot} freed: its holder, pid {} ({}), is gone and nobody took it over: {proof}",
            stale_pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
            or_dash(stale_owner.as_deref())
        ),
        Event::Takeover {
            resource,
            owner,
            stale_pid,
            stale_owner,
            proof,
            ..
        } => format!(
            "{resource} taken over by {owner} from pid {} ({}): {proof}",
            stale_pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
            or_dash(stale_owner.as_deref())
        ),
        Event::Halt {
            resource,
            command_pid,
            by,
            signal,
            status,
            took_ms,
            ..
        } => {
            let end = match (signal, status) {
                (Some(signal), _) => format!("ended by {signal}"),
                (None, Some(status)) => format!("exited {status}"),
                (None, None) => "ended".to_owned(),
            };
            format!("STOP halted pid {command_pid} of {resource} ({by}): {end} after {took_ms} ms")
        }
        Event::Stop { by, reason } => format!("STOP written by {by}: {reason}"),
        Event::Resume { by, reason } => {
            format!("STOP lifted (written by {}: {reason})", or_dash(Some(by)))
        }
        Event::Drain { until, to } => match to {
            Some(to) => format!("drain until {until} (installing {to})"),
            None => format!("drain until {until}"),
        },
        Event::Undrain => "drain ended".to_owned(),
        Event::RoleTaken { role, owner, .. } => format!("role {role} taken by {owner}"),
        Event::RoleRefused {
            role,
            owner,
            holder_pid,
            why,
            ..
        } => format!(
            "role {role} refused to {owner}: held by pid {}: {why}",
            holder_pid.map_or_else(|| "?".to_owned(), |p| p.to_string())
        ),
        Event::RoleLost { role, why, .. } => format!("role {role} lost: {why}"),
        Event::RoleReleased { role, owner, .. } => format!("role {role} released by {owner}"),
        Event::DispatchEnqueued {
            attempt,
            lane,
            priority,
            uid,
        } => format!("{attempt} queued on lane {lane} (priority {priority}, uid {uid})"),
        Event::DispatchAdmitted {
            attempt,
            slot,
            waited_ms,
            ..
        } => format!("{attempt} admitted to {slot} after waiting {waited_ms} ms"),
        Event::DispatchClaimed {
            attempt,
            admitted_ms,
            ..
        } => format!("{attempt} claimed {admitted_ms} ms after its admission"),
        Event::DispatchExpired {
            attempt,
            starting_ms,
            ..
        } => format!("{attempt} not claimed in {starting_ms} ms: queued again"),
        Event::DispatchRecovered {
            attempt, kept, why, ..
        } => format!(
            "{attempt} {} at the dispatcher's start: {why}",
            if *kept { "kept" } else { "dropped" }
        ),
        Event::DispatchCancelled {
            attempt,
            state,
            uid,
            ..
        } => format!("{attempt} cancelled while {state} by uid {uid}"),
        Event::BudgetPaused {
            provider, until, ..
        } => format!("{provider} budget paused until {until}"),
        Event::BudgetRefused {
            provider,
            resource,
            refusal,
            consumer,
            ..
        } => format!("{provider} {resource} call refused to {consumer}: {refusal}"),
        Event::BrokenFile {
            name,
            what,
            fix,
            fixed,
        } => match fixed {
            true => format!("{name}: {what}: {fix}"),
            false => format!("{name}: {what}; fix: {fix}"),
        },
        Event::SlotLeft {
            slot_kind,
            owner,
            waiter_pid,
            waited_ms,
        } => format!(
            "{slot_kind} waiter {owner} (pid {}) gone from the line after {waited_ms} ms (killed)",
            waiter_pid.map_or_else(|| "?".to_owned(), |p| p.to_string())
        ),
        Event::JobsEscaped {
            command,
            processes,
            tokens,
        } => format!(
            "the build `{command}` ran {processes} processes at once on {tokens} job token(s): \
             a part of it escaped max_jobs with its own -jN"
        ),
        Event::Totals { totals } => format!(
            "totals carried over the rotation: {} takeover(s), {} run(s), {} wait(s), {} \
             dropped",
            totals.takeovers,
            totals.run.values().map(|h| h.count).sum::<u64>(),
            totals.queue_wait.values().map(|h| h.count).sum::<u64>(),
            totals.dropped
        ),
        _ => "(a kind this worklane does not know)".to_owned(),
    }
}

fn describe(entry: &Entry) -> String {
    let mut line = format!(
        "{}  {:<18} {}  [pid {}]",
        entry.at,
        entry.event.kind(),
        what(&entry.event),
        entry.pid
    );
    if entry.dropped > 0 {
        line.push_str(&format!(
            " ({} earlier event(s) of this writer dropped)",
            entry.dropped
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_time_kind_what_and_writer() {
        let entry: Entry = serde_json::from_str(
            r#"{"version":1,"at":"2026-11-30T00:00:00.000Z","pid":7,"dropped":2,"kind":"undrain"}"#,
        )
        .expect("an entry");
        let line = entry.describe();
        assert!(
            line.starts_with("2026-11-30T00:00:00.000Z  undrain"),
            "{line}"
        );
        assert!(
            line.ends_with("[pid 7] (2 earlier event(s) of this writer dropped)"),
            "{line}"
        );
        assert_eq!(entry.event.what(), what(&entry.event));
        let quiet: Entry = serde_json::from_str(
            r#"{"version":1,"at":"2026-11-30T00:00:00.000Z","pid":8,"dropped":0,"kind":"undrain"}"#,
        )
        .expect("an entry");
        assert_eq!(
            quiet.describe(),
            "2026-11-30T00:00:00.000Z  undrain            drain ended  [pid 8]",
            "nothing said of dropped events when there were none"
        );
    }

    /// What an event of `kind` with `fields` (a JSON object's members) says.
    fn said(kind: &str, fields: &str) -> String {
        let comma = if fields.is_empty() { "" } else { "," };
        let line = format!(
            r#"{{"version":1,"at":"2026-11-30T00:00:00.000Z","pid":1,"dropped":0,"kind":"{kind}"{comma}{fields}}}"#
        );
        let entry: Entry = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        entry.event.what()
    }

    /// Every kind in its own words, each way its words can go (as `worklane events` and
    /// `worklane top` show them).
    #[test]
    fn every_kind_says_what_happened() {
        let cases = [
            (
                "slot-taken",
                r#""slot":"agent-0.lock","slot_kind":"agent","owner":"a@h","epoch":3,"waited_ms":0"#,
                "agent-0.lock taken by a@h (epoch 3)",
            ),
            (
                "slot-taken",
                r#""slot":"agent-0.lock","owner":"a@h","epoch":4,"waited_ms":250"#,
                "agent-0.lock taken by a@h (epoch 4) after waiting 250 ms",
            ),
            (
                "slot-released",
                r#""slot":"job-1.lock","owner":"b","held_ms":900,"cpu_usec":2500000"#,
                "job-1.lock released by b after 900 ms, 2.5 s of CPU",
            ),
            (
                "slot-released",
                r#""slot":"job-1.lock","owner":"b","held_ms":900,"cpu_usec":null"#,
                "job-1.lock released by b after 900 ms",
            ),
            (
                "slot-refused",
                r#""slot_kind":"test","owner":"c","blocker":"stop","why":"STOP is set""#,
                "test slot refused to c: STOP is set",
            ),
            (
                "slot-waiting",
                r#""slot_kind":"agent","owner":"d","position":2,"in_line":5,"why":"at cap""#,
                "d waits for a agent slot, 2 of 5 in line: at cap",
            ),
            (
                "slot-left",
                r#""slot_kind":"agent","owner":"e","waiter_pid":77,"waited_ms":12"#,
                "agent waiter e (pid 77) gone from the line after 12 ms (killed)",
            ),
            (
                "slot-left",
                r#""slot_kind":"agent","owner":"e","waiter_pid":null,"waited_ms":12"#,
                "agent waiter e (pid ?) gone from the line after 12 ms (killed)",
            ),
            (
                "holder-gone",
                r#""slot":"agent-2.lock","stale_pid":41,"stale_owner":"f","proof":"no such process""#,
                "agent-2.lock freed: its holder, pid 41 (f), is gone and nobody took it over: no such process",
            ),
            (
                "holder-gone",
                r#""slot":"agent-2.lock","stale_pid":null,"stale_owner":"","proof":"p""#,
                "agent-2.lock freed: its holder, pid ? (-), is gone and nobody took it over: p",
            ),
            (
                "takeover",
                r#""resource":"agent-3.lock","owner":"g","stale_pid":9,"stale_owner":"h","proof":"reused pid""#,
                "agent-3.lock taken over by g from pid 9 (h): reused pid",
            ),
            (
                "takeover",
                r#""resource":"agent-3.lock","owner":"g","stale_pid":null,"stale_owner":null,"proof":"p""#,
                "agent-3.lock taken over by g from pid ? (-): p",
            ),
            (
                "halt",
                r#""resource":"agent-0.lock","command_pid":100,"by":"supervisor","signal":"SIGTERM","status":1,"took_ms":30"#,
                "STOP halted pid 100 of agent-0.lock (supervisor): ended by SIGTERM after 30 ms",
            ),
            (
                "halt",
                r#""resource":"agent-0.lock","command_pid":100,"by":"worklane","signal":null,"status":3,"took_ms":30"#,
                "STOP halted pid 100 of agent-0.lock (worklane): exited 3 after 30 ms",
            ),
            (
                "halt",
                r#""resource":"agent-0.lock","command_pid":100,"by":"other","signal":null,"status":null,"took_ms":30"#,
                "STOP halted pid 100 of agent-0.lock (other): ended after 30 ms",
            ),
            (
                "stop",
                r#""by":"alice","reason":"maintenance""#,
                "STOP written by alice: maintenance",
            ),
            (
                "resume",
                r#""by":"alice","reason":"done""#,
                "STOP lifted (written by alice: done)",
            ),
            (
                "resume",
                r#""by":"","reason":"done""#,
                "STOP lifted (written by -: done)",
            ),
            (
                "drain",
                r#""until":"2026-12-01T00:00:00Z","to":"v2""#,
                "drain until 2026-12-01T00:00:00Z (installing v2)",
            ),
            (
                "drain",
                r#""until":"2026-12-01T00:00:00Z","to":null"#,
                "drain until 2026-12-01T00:00:00Z",
            ),
            ("undrain", "", "drain ended"),
            (
                "role-taken",
                r#""role":"leader","resource":"r","owner":"i","ttl_ms":null,"epoch":1"#,
                "role leader taken by i",
            ),
            (
                "role-refused",
                r#""role":"leader","owner":"j","holder_pid":5,"why":"held""#,
                "role leader refused to j: held by pid 5: held",
            ),
            (
                "role-refused",
                r#""role":"leader","owner":"j","holder_pid":null,"why":"held""#,
                "role leader refused to j: held by pid ?: held",
            ),
            (
                "role-lost",
                r#""role":"leader","resource":"r","why":"expired""#,
                "role leader lost: expired",
            ),
            (
                "role-released",
                r#""role":"leader","resource":"r","owner":"k""#,
                "role leader released by k",
            ),
            (
                "dispatch-enqueued",
                r#""attempt":"a1","lane":"ci","priority":-2,"uid":1000"#,
                "a1 queued on lane ci (priority -2, uid 1000)",
            ),
            (
                "dispatch-admitted",
                r#""attempt":"a1","lane":"ci","slot":"agent-0.lock","waited_ms":40"#,
                "a1 admitted to agent-0.lock after waiting 40 ms",
            ),
            (
                "dispatch-claimed",
                r#""attempt":"a1","lane":"ci","slot":"agent-0.lock","admitted_ms":15"#,
                "a1 claimed 15 ms after its admission",
            ),
            (
                "dispatch-expired",
                r#""attempt":"a1","lane":"ci","starting_ms":60000"#,
                "a1 not claimed in 60000 ms: queued again",
            ),
            (
                "dispatch-recovered",
                r#""attempt":"a1","lane":"ci","kept":true,"why":"its driver lives""#,
                "a1 kept at the dispatcher's start: its driver lives",
            ),
            (
                "dispatch-recovered",
                r#""attempt":"a1","lane":"ci","kept":false,"why":"gone""#,
                "a1 dropped at the dispatcher's start: gone",
            ),
            (
                "dispatch-cancelled",
                r#""attempt":"a1","lane":"ci","state":"queued","uid":0"#,
                "a1 cancelled while queued by uid 0",
            ),
            (
                "budget-paused",
                r#""provider":"anthropic","credential":"0123456789abcdef","until":"12:00""#,
                "anthropic budget paused until 12:00",
            ),
            (
                "budget-refused",
                r#""provider":"openai","resource":"tokens","refusal":"spent","consumer":"l""#,
                "openai tokens call refused to l: spent",
            ),
            (
                "broken-file",
                r#""name":"agent-0.lock","what":"not JSON","fix":"removed","fixed":true"#,
                "agent-0.lock: not JSON: removed",
            ),
            (
                "broken-file",
                r#""name":"agent-0.lock","what":"not JSON","fix":"rm it","fixed":false"#,
                "agent-0.lock: not JSON; fix: rm it",
            ),
            (
                "jobs-escaped",
                r#""command":"make","processes":9,"tokens":4"#,
                "the build `make` ran 9 processes at once on 4 job token(s): a part of it \
                 escaped max_jobs with its own -jN",
            ),
            (
                "totals",
                r#""totals":{"takeovers":2,"dropped":5,"run":{"agent":{"count":3},"job":{"count":4}},"queue_wait":{"agent":{"count":6}}}"#,
                "totals carried over the rotation: 2 takeover(s), 7 run(s), 6 wait(s), 5 dropped",
            ),
            (
                "from-the-future",
                r#""n":1"#,
                "(a kind this worklane does not know)",
            ),
        ];
        let mut kinds: Vec<&str> = cases.iter().map(|(kind, _, _)| *kind).collect();
        for (kind, fields, words) in cases {
            assert_eq!(said(kind, fields), words, "{kind} {fields}");
        }
        kinds.dedup();
        for kind in crate::KINDS {
            assert!(kinds.contains(&kind), "{kind} has words of its own here");
        }
    }
}
