//! `worklane enqueue`: a launcher takes its lane and hands it, held, to the dispatcher.

use super::*;

/// Command-line arguments as the queue stores them (UTF-8 only).
fn utf8(args: &[OsString]) -> Result<Vec<String>, Failure> {
    args.iter()
        .map(|a| {
            a.clone().into_string().map_err(|a| {
                Failure::new(
                    exit::USAGE,
                    format!("{a:?}: queued commands must be UTF-8 to be stored"),
                )
            })
        })
        .collect()
}

pub(crate) fn enqueue(args: &EnqueueArgs) -> Result<ExitCode, Failure> {
    let lane = args.lane.clone().unwrap_or_else(own_lane);
    if args.lane.is_some() && is_own_lane(&lane) {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--lane {lane}: names of `q-` and 16 hex digits are reserved for lanes of their \
                 own (enqueue without --lane), which are removed when their attempt ends; choose \
                 another name"
            ),
        ));
    }
    if !valid_lane(&lane) {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--lane {lane:?}: 1 to 64 letters, digits, `-`, `_` or `.`, not starting with `.`"
            ),
        ));
    }
    let command = utf8(&args.command)?;
    let driver = if args.driver {
        command
    } else {
        let me = std::env::current_exe()
            .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot find this worklane: {e}")))?;
        let mut driver = vec![me.to_string_lossy().into_owned(), "claim".to_owned()];
        if let Some(n) = args.jobs {
            driver.push(format!("--jobs={n}"));
        }
        driver.push("--".to_owned());
        driver.extend(command);
        driver
    };
    let pool = crate::pool()?;
    let lock = lane_lock(&lane);
    let lease = match acquire(
        pool.dir(),
        &lock,
        &Request::new("worklane enqueue").field("lane", lane.clone()),
        &Options::process(),
    )? {
        Acquired::Held(lease) => lease,
        Acquired::Refused(refusal) => {
            return Err(Failure::new(
                exit::TEMP_FAIL,
                format!("lane {lane} is taken: {refusal}"),
            ));
        }
    };
    let socket = socket_path(&pool, args.socket.as_deref());
    let entry = Enqueue {
        lane: lane.clone(),
        start_ms: Some(SystemClock.now_ms()),
        priority: Some(args.priority),
        placement: args.placement.clone(),
        stage: args.stage.clone(),
        args: driver,
        env: dispatcher_config(&pool)?.1.keep(std::env::vars_os()),
        own_lane: args.lane.is_none(),
        weight: (args.weight != 1).then_some(args.weight),
        owner: args.owner.clone(),
    };
    let guard = lease
        .guard()
        .ok_or_else(|| Failure::new(exit::SOFTWARE, "a lane lease without its guard"))?;
    let (reply, _) = ask(&socket, &Wire::Enqueue(entry), &[guard.as_fd()]).map_err(|f| {
        if f.code == exit::OS_ERROR {
            Failure::new(
                exit::OS_ERROR,
                format!(
                    "{}; the dispatcher may have queued it before it failed: `worklane queue \
                     ls` lists lane {lane} if so (do not enqueue it again before you look)",
                    f.message
                ),
            )
        } else {
            f
        }
    })?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    // The dispatcher's copy holds the lane now; ours closes without removing the record.
    drop(lease.hand_over());
    let attempt = reply.attempt.unwrap_or_default();
    if args.json {
        outln!(
            "{}",
            json::line(&json::Enqueued {
                version: json::VERSION,
                attempt: &attempt,
                lane: &lane,
            })
        )?;
    } else {
        outln!("{attempt}")?;
    }
    Ok(ExitCode::SUCCESS)
}
