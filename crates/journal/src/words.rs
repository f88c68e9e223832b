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
    }
}
