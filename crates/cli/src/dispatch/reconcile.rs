//! `worklane reconcile`: who holds an attempt now, from observations.

use super::*;

pub(crate) fn reconcile(attempt: &str, as_json: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    // 1. The dispatcher's rows and history (if one answers).
    let answered = ask(
        &pool,
        &socket_path(&pool, None),
        &Wire::List { all: true },
        &[],
    )
    .ok();
    if let Some((reply, _)) = &answered {
        if let Some(row) = reply
            .attempts
            .iter()
            .flatten()
            .find(|a| a.attempt == attempt)
        {
            let lane_held = worklane_dispatch::lane::is_held(pool.dir(), &row.lane);
            if row.state == "running" && !lane_held {
                // Ended a moment ago: the dispatcher records how at its next look.
                let text = format!(
                    "{attempt}: nobody holds it: its driver left {} free (how it ended is \
                     in `worklane queue ls --all` in a moment)",
                    lane_lock(&row.lane)
                );
                return say(
                    as_json,
                    attempt,
                    json::Holder::FreeLane {
                        holder: json::Nobody,
                        lane: lane_lock(&row.lane),
                    },
                    &text,
                );
            }
            if row.state == "running" {
                let text = format!(
                    "{attempt}: a driver holds it (pid {}), running on lane {} since {}",
                    row.driver_pid.map_or("?".to_owned(), |p| p.to_string()),
                    row.lane,
                    rfc3339_ms(row.state_at_ms)
                );
                return say(
                    as_json,
                    attempt,
                    json::Holder::driver(lane_lock(&row.lane), row.driver_pid),
                    &text,
                );
            }
            let text = format!(
                "{attempt}: the dispatcher (pid {}) holds it, {} on lane {}",
                reply.pid.unwrap_or(0),
                row.state,
                row.lane
            );
            return say(
                as_json,
                attempt,
                json::Holder::dispatcher(row.state.clone(), row.lane.clone(), reply.pid),
                &text,
            );
        }
        if let Some(ended) = reply
            .history
            .iter()
            .flatten()
            .find(|e| e.attempt == attempt)
        {
            let text = format!(
                "{attempt}: nobody holds it: it ended at {} {}",
                rfc3339_ms(ended.ended_at_ms),
                ended_words(ended)
            );
            return say(
                as_json,
                attempt,
                json::Holder::Ended {
                    holder: json::Nobody,
                    ended: ended.clone(),
                },
                &text,
            );
        }
    }
    // 2. A lane whose record names the attempt: held by its driver, or free.
    let lanes = pool
        .dir()
        .list_prefixed("lane-")
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    for path in lanes {
        let Some(record) = worklane_lease::read_record(&path).ok().flatten() else {
            continue;
        };
        if record.extra_str("attempt") != Some(attempt) {
            continue;
        }
        let held = matches!(path.try_guard(), Ok(None));
        let pid = record.pid();
        return if held {
            say(
                as_json,
                attempt,
                json::Holder::driver(path.name().to_owned(), pid),
                &format!(
                    "{attempt}: a driver holds {} (pid {})",
                    path.name(),
                    pid.map_or("?".to_owned(), |p| p.to_string())
                ),
            )
        } else {
            say(
                as_json,
                attempt,
                json::Holder::FreeLane {
                    holder: json::Nobody,
                    lane: path.name().to_owned(),
                },
                &format!(
                    "{attempt}: nobody holds it (its driver left {} free)",
                    path.name()
                ),
            )
        };
    }
    // 3. Nothing names it: an id the dispatcher never had (or forgot, past its retention).
    let why = match &answered {
        Some(_) => {
            "the dispatcher has no such attempt, queued, running or ended (ended ones are \
                    kept for its retention period, 7 days by default), and no lane names it"
        }
        None => "no dispatcher answers to say whether it had it, and no lane names it",
    };
    if as_json {
        say(
            true,
            attempt,
            json::Holder::Nowhere {
                holder: json::Nobody,
            },
            "",
        )?;
    }
    Err(Failure::new(
        exit::USAGE,
        format!("{attempt}: unknown: {why}"),
    ))
}

fn say(
    as_json: bool,
    attempt: &str,
    holder: json::Holder,
    text: &str,
) -> Result<ExitCode, Failure> {
    if as_json {
        outln!(
            "{}",
            json::line(&json::Reconciled {
                version: json::VERSION,
                attempt,
                holder,
            })
        )?;
    } else {
        outln!("{text}")?;
    }
    Ok(ExitCode::SUCCESS)
}
