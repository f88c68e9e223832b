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
        env: offered_env(),
        own_lane: args.lane.is_none(),
        weight: (args.weight != 1).then_some(args.weight),
        owner: args.owner.clone(),
    };
    let guard = lease
        .guard()
        .ok_or_else(|| Failure::new(exit::SOFTWARE, "a lane lease without its guard"))?;
    let asked = ask(&pool, &socket, &Wire::Enqueue(entry), &[guard.as_fd()])
        .map_err(|f| {
            if f.code == exit::OS_ERROR {
                Failure::new(
                    exit::OS_ERROR,
                    format!(
                        "{}; the dispatcher may have queued it before it failed: `worklane \
                         queue ls` lists lane {lane} if so (do not enqueue it again before you \
                         look)",
                        f.message
                    ),
                )
            } else {
                f
            }
        })
        .and_then(|(reply, _)| match reply.ok {
            true => Ok(reply),
            false => Err(refused(&reply)),
        });
    let reply = match asked {
        Ok(reply) => reply,
        Err(failure) => {
            // A lane of its own is never used again: released, its files go too (PROTOCOL.md
            // 14.3 step 1). A dispatcher that kept a copy of its guard keeps it busy, and the
            // files stay for it.
            if args.lane.is_none() {
                let released = lease.release();
                if released.is_ok()
                    && let Err(e) = retire_own_lane(pool.dir(), &lane)
                {
                    errln!(
                        "worklane: removing the files of {lock}: {}",
                        exit::chain(&e)
                    );
                }
            }
            return Err(failure);
        }
    };
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

/// The variables an enqueue offers the dispatcher: every one that is not secret-shaped by the
/// default words (after the longest default prefix it has) (which no setting removes) and fits, at most [`OFFERED_ENV_BYTES`] in all (in
/// name order; the rest are left out, with a warning). The dispatcher keeps only those its
/// own `--env-allow-prefix` allows; which those are is its setting, not the client's.
fn offered_env() -> std::collections::BTreeMap<String, String> {
    // Any name, judged for secret words after the longest default prefix it has (so
    // GIT_AUTHOR_NAME is no AUTH), else whole.
    let prefixes = worklane_dispatch::env::DEFAULT_PREFIXES
        .iter()
        .map(|p| (*p).to_owned())
        .chain([String::new()]);
    let all = EnvFilter::new(prefixes, []).keep(std::env::vars_os());
    let mut offered = std::collections::BTreeMap::new();
    let mut bytes = 0usize;
    let mut left_out = 0usize;
    for (name, value) in all {
        let cost = name.len() + value.len() + 8;
        if bytes + cost > OFFERED_ENV_BYTES {
            left_out += 1;
            continue;
        }
        bytes += cost;
        offered.insert(name, value);
    }
    if left_out > 0 {
        errln!(
            "worklane: {left_out} environment variable(s) left out of the enqueue: the \
             environment is larger than {} KiB (a driver gets only what the dispatcher's \
             --env-allow-prefix keeps anyway)",
            OFFERED_ENV_BYTES / 1024
        );
    }
    offered
}

/// The most bytes of environment an enqueue offers: well within a message's 64 KiB.
const OFFERED_ENV_BYTES: usize = 48 * 1024;
