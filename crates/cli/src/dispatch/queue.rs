//! The dispatcher's part of `queue ls`, and `queue cancel`, `queue retry`, `queue prune`.

use super::*;

/// The dispatcher's part of `queue ls` (with `all`, its history too). A dispatcher that does
/// not answer (none started) has no attempts, and says so; one that answers and refuses is an
/// error.
pub(crate) fn listing(pool: &Pool, all: bool) -> Result<crate::queue_say::Listing, Failure> {
    let path = socket_path(pool, None);
    let stream = match connect(pool, &path) {
        Ok(stream) => stream,
        Err(failure) => {
            return Ok(crate::queue_say::Listing {
                json: json::DispatcherList::none(failure.message.clone()),
                lines: vec![format!("attempts: none ({})", failure.message)],
            });
        }
    };
    let (reply, _) = ask_on(&stream, &Wire::List { all }, &[])?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    let attempts = reply.attempts.unwrap_or_default();
    let logs: Vec<String> = attempts
        .iter()
        .map(|a| pool.dir().path().join(&a.log).display().to_string())
        .collect();
    let mut lines = vec![format!(
        "dispatcher pid {}: {} attempt(s)",
        reply.pid.unwrap_or(0),
        attempts.len()
    )];
    if let Some(damage) = &reply.damage {
        lines.push(format!("DAMAGED QUEUE: {damage}"));
    }
    if let Some(trouble) = &reply.trouble {
        lines.push(format!("TROUBLE: {trouble}"));
    }
    for (a, log) in attempts.iter().zip(&logs) {
        let mut line = format!(
            "{}  lane {}  {}  priority {}  queued {}  stage {:?}  slot {}",
            a.attempt,
            a.lane,
            a.state,
            a.priority,
            rfc3339_ms(a.start_ms),
            a.stage,
            a.slot.as_deref().unwrap_or("-"),
        );
        if a.state == "running" || a.state == "starting" {
            line.push_str(&format!(
                "  driver pid {}  since {}",
                a.driver_pid.map_or("?".to_owned(), |p| p.to_string()),
                rfc3339_ms(a.state_at_ms)
            ));
        }
        if let Some(uid) = a.uid {
            line.push_str(&format!("  uid {uid}"));
        }
        if a.cancel_at_ms.is_some() {
            line.push_str("  (cancelled: being halted)");
        }
        if a.failures > 0 || a.state == "failed" {
            line.push_str(&format!(
                "  {} failed start(s){}: {}",
                a.failures,
                a.retry_at_ms
                    .map(|at| format!(", next at {}", rfc3339_ms(at)))
                    .unwrap_or_default(),
                a.last_error.as_deref().unwrap_or("?")
            ));
        }
        line.push_str(&format!("  log {log}"));
        lines.push(line);
    }
    if let Some(history) = &reply.history {
        lines.push(format!("ended: {}", history.len()));
        for e in history {
            lines.push(format!(
                "{}  lane {}  ended {} {}  log {}",
                e.attempt,
                e.lane,
                rfc3339_ms(e.ended_at_ms),
                ended_words(e),
                e.log
                    .as_deref()
                    .map(|l| pool.dir().path().join(l).display().to_string())
                    .unwrap_or_else(|| "-".to_owned())
            ));
        }
    }
    let json = json::DispatcherList {
        dispatcher_pid: reply.pid,
        attempts,
        logs,
        dispatcher: None,
        history: reply.history,
        trouble: reply.trouble,
        damage: reply.damage,
    };
    Ok(crate::queue_say::Listing { json, lines })
}

/// The dispatcher's own trouble, as it says it (for `why`); `None` when it has none or does
/// not answer within a second.
pub(crate) fn trouble(pool: &Pool) -> Option<String> {
    let stream = connect(pool, &socket_path(pool, None)).ok()?;
    let limit = Some(std::time::Duration::from_secs(1));
    stream.set_read_timeout(limit).ok()?;
    stream.set_write_timeout(limit).ok()?;
    let (reply, _) = ask_on(&stream, &Wire::List { all: false }, &[]).ok()?;
    reply.trouble
}

pub(crate) fn cancel(attempt: &str, as_json: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let (reply, _) = ask(
        &pool,
        &socket_path(&pool, None),
        &Wire::Cancel {
            attempt: attempt.to_owned(),
        },
        &[],
    )?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    match &reply.message {
        Some(halting) => crate::queue_say::halting(attempt, halting, as_json)?,
        None => crate::queue_say::cancelled(attempt, "attempt", None, as_json)?,
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn retry(attempt: &str) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let (reply, _) = ask(
        &pool,
        &socket_path(&pool, None),
        &Wire::Retry {
            attempt: attempt.to_owned(),
        },
        &[],
    )?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    outln!("{attempt} queued again, its failed starts forgotten")?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn prune(older_than: Option<std::time::Duration>) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let (reply, _) = ask(
        &pool,
        &socket_path(&pool, None),
        &Wire::Prune {
            older_than_ms: older_than.map(millis),
        },
        &[],
    )?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    let pruned = reply.history.unwrap_or_default();
    outln!(
        "forgot {} ended attempt(s) and removed their logs",
        pruned.len()
    )?;
    Ok(ExitCode::SUCCESS)
}
