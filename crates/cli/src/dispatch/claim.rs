//! `worklane claim`: the driver the dispatcher starts claims its attempt and runs the command
//! holding the lane and the slot, halting it on STOP or on its cancel marker.

use super::*;

fn var(name: &str) -> Result<String, Failure> {
    std::env::var(name).ok().filter(|v| !v.is_empty()).ok_or_else(|| {
        Failure::new(
            exit::USAGE,
            format!(
                "{name} is not set (or empty): `worklane claim` is the driver the dispatcher starts for an \
                 admitted attempt, with WORKLANE_ATTEMPT, WORKLANE_TOKEN and WORKLANE_SOCKET"
            ),
        )
    })
}

pub(crate) fn claim(args: &ClaimArgs) -> Result<ExitCode, Failure> {
    let attempt = var("WORKLANE_ATTEMPT")?;
    let token = var("WORKLANE_TOKEN")?;
    let socket = PathBuf::from(var("WORKLANE_SOCKET")?);
    let pool = crate::pool()?;
    let stream = connect(&pool, &socket)?;
    // Who serves the socket (checked by `connect`): a cancel marker counts only if that user
    // (or root) wrote it.
    let server = worklane_transport::peer(&stream)
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?
        .uid;
    let (reply, mut fds) = ask_on(
        &stream,
        &Wire::Claim {
            attempt: attempt.clone(),
            token,
        },
        &[],
    )?;
    if !reply.ok {
        return Err(refused(&reply));
    }
    let (Some(lane), Some(slot_name), 2) = (reply.lane.clone(), reply.slot.clone(), fds.len())
    else {
        return Err(Failure::new(
            exit::OS_ERROR,
            format!(
                "the dispatcher's claim reply carries {} descriptors, not the lane's and the slot's",
                fds.len()
            ),
        ));
    };
    let slot_fd = fds.pop().expect("two descriptors");
    let lane_fd = fds.pop().expect("two descriptors");
    let request = Request::new("worklane claim")
        .field("attempt", attempt.clone())
        .field("command", describe(&args.command));
    let dir = pool.dir();
    let lane_guard = worklane_guard::Guard::from_received(lane_fd, dir, dir.path(), &lane)
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    let lane_lease = worklane_lease::adopt(dir, &lane, lane_guard, &request, &Options::process())?;
    let mut slot = pool.adopt(&slot_name, slot_fd, &request)?;
    if args.json {
        errln!(
            "{}",
            json::line(&json::Claimed {
                version: json::VERSION,
                attempt: &attempt,
                lane: &lane,
                slot: &slot_name,
                lane_epoch: lane_lease.epoch(),
                slot_epoch: slot.lease().epoch(),
            })
        );
    }
    let began = std::time::Instant::now();
    errln!(
        "worklane: {} attempt {attempt} claimed (lane {lane}, slot {slot_name}): running `{}`",
        rfc3339_ms(SystemClock.now_ms()),
        describe(&args.command)
    );
    let marker = dir.file(&cancel_marker(&attempt)).ok();
    let mut watch = CliWatch {
        marker: marker.map(|path| crate::watch::Marker {
            path,
            attempt: attempt.clone(),
            writer: server,
            ignored: false,
        }),
        ..CliWatch::default()
    };
    // The command runs in an agent slot as `run`'s does: a `worklane run` inside it is refused
    // at once rather than waiting for a second slot (for ever at a cap of 1).
    let nesting =
        worklane_run::nesting::env(&worklane_admission::Kind::Agent, dir.path(), &slot_name);
    let outcome = Supervisor::new(&pool, &mut slot)
        .map(|s| s.env(nesting.0, nesting.1))
        .and_then(|s| match lane_lease.guard() {
            // The command keeps the lane too, as it keeps the slot.
            Some(guard) => s.inherit(guard),
            None => Ok(s),
        })
        .map(
            |s| match crate::cli::jobs(args.jobs, args.jobs_style, false) {
                Some(jobs) => s.jobs(jobs),
                None => s,
            },
        )
        .and_then(|s| s.watch(&mut watch).run(&args.command));
    let released = slot.release();
    if lane_lease.release().is_ok()
        && let Some(name) = lane
            .strip_prefix("lane-")
            .and_then(|l| l.strip_suffix(".lock"))
        && let Err(e) = retire_own_lane(dir, name)
    {
        errln!(
            "worklane: removing the files of {lane}: {}",
            exit::chain(&e)
        );
    }
    let outcome = outcome?;
    if let Err(e) = released {
        errln!("worklane: releasing {slot_name}: {}", exit::chain(&e));
    }
    let how = match (&outcome.halted, outcome.signal) {
        (Some(why), _) => format!("halted ({why}), exit status {}", outcome.code),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => format!("exit status {}", outcome.code),
    };
    errln!(
        "worklane: {} attempt {attempt} ended after {:.1} s: {how}",
        rfc3339_ms(SystemClock.now_ms()),
        began.elapsed().as_secs_f64()
    );
    Ok(ExitCode::from(outcome.code))
}
