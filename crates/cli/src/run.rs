//! `worklane run`: hold a slot of the machine's pool while a command runs, supervised by
//! [`worklane_run::Supervisor`] (STOP, signals, the guard inherited), and exit with its status.

use crate::cli::{KindArg, RunArgs};
use crate::exit::{self, Failure};
use crate::out::errln;
use crate::progress::{Progress, waiting_line};
use crate::status::{HaltedBy, Status};
use crate::watch::{CliWatch, Taken, with_fleet};
use std::process::ExitCode;
use worklane_admission::{Kind, Take, Wait};
use worklane_lease::Request;
use worklane_run::{Supervisor, describe};

fn basename(command: &[std::ffi::OsString]) -> String {
    command
        .first()
        .map(|p| {
            std::path::Path::new(p)
                .file_name()
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default()
}

pub(crate) fn run(args: RunArgs) -> Result<ExitCode, Failure> {
    // Claimed before anything opens a descriptor, so N can only be the caller's.
    let mut status = Status::claim(args.status_fd)?;
    let result = run_holding(args, &mut status);
    if let Err(failure) = &result {
        status.failed(failure);
    }
    result
}

/// The `kind` word of `--status-fd` and messages.
fn kind_word(kind: KindArg) -> &'static str {
    match kind {
        KindArg::Agent => "agent",
        KindArg::Test => "test",
        KindArg::FullRun => "full-run",
        KindArg::Job => "job",
    }
}

fn run_holding(args: RunArgs, status: &mut Status) -> Result<ExitCode, Failure> {
    let started = std::time::Instant::now();
    let limit_ms = args
        .limit
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let (kind, what) = match args.kind {
        KindArg::Agent => (Kind::Agent, "an agent slot"),
        KindArg::Test => (Kind::Test { limit_ms }, "a test-run slot"),
        KindArg::FullRun => (Kind::FullRun, "the full-run lock"),
        KindArg::Job => (Kind::Job, "a job slot"),
    };
    if limit_ms.is_some() && args.kind != KindArg::Test {
        return Err(Failure::new(
            exit::USAGE,
            "--limit applies only to --kind test",
        ));
    }
    // Usage is checked before the configuration, so a usage error is never hidden by a 78.
    let pool = crate::taking_pool()?;
    let nested = std::env::var_os(worklane_run::nesting::var(&args.kind.kind()));
    worklane_run::nesting::refuse_nested(&args.kind.kind(), pool.dir().path(), nested)
        .map_err(|e| Failure::new(exit::USAGE, e.to_string()))?;
    let owner = args
        .owner
        .clone()
        .unwrap_or_else(|| basename(&args.command));
    let request = Request::new(owner).field("command", describe(&args.command));
    let ask = crate::shared::ask(args.weight, args.owner.as_deref());
    let mut progress = Progress::new(what);
    let taken = if args.no_wait {
        let now = pool.clock().now_ms();
        pool.try_take_for(kind, &request, &ask, args.priority, now)
            .map_err(crate::shared::take_refused::take_refused)?
    } else {
        pool.take_for(
            kind,
            &request,
            &ask,
            Wait {
                timeout: args.timeout,
                priority: args.priority,
                on_wait: &mut |waiting| {
                    progress.update(waiting);
                    status.waiting(kind_word(args.kind), &waiting_line(waiting));
                },
            },
        )
        // A config broken while it waited: 78, naming the fix, as at the start.
        .map_err(crate::shared::take_refused::take_refused)?
    };
    progress.clear();
    let slot = match taken {
        Take::Held(slot) => slot,
        Take::Blocked(blocker) if blocker.is_operator_refusal() => {
            let failure = Failure::new(exit::UNAVAILABLE, format!("refused {what}: {blocker}"));
            status.refused(&failure);
            return Err(failure);
        }
        Take::Blocked(blocker) => {
            let why = if args.no_wait {
                "not waiting"
            } else {
                "timed out"
            };
            let failure = Failure::new(
                args.conflict_exit_code,
                format!(
                    "cannot take {what} ({why}): {blocker}; try again later (`worklane slots` \
                     shows who holds what)"
                ),
            );
            status.refused(&failure);
            return Err(failure);
        }
    };
    // Past this host: a place in the fleet pool too, taken after the slot (so a host at its
    // cap never holds a fleet place it cannot use), within what is left of --timeout.
    let left = args.timeout.map(|t| t.saturating_sub(started.elapsed()));
    let mut slot = slot;
    let fleet = crate::fleet::take(
        &args.fleet,
        &request.owner,
        &describe(&args.command),
        args.no_wait,
        left,
        args.conflict_exit_code,
    );
    let mut fleet = match fleet {
        Ok(fleet) => fleet,
        Err(failure) => {
            if let Err(e) = slot.release() {
                errln!("worklane: releasing {what}: {}", exit::chain(&e));
            }
            if failure.code == exit::UNAVAILABLE || failure.code == args.conflict_exit_code {
                status.refused(&failure);
            }
            return Err(failure);
        }
    };
    let taken = Taken {
        status: &mut *status,
        kind: kind_word(args.kind),
        slot: slot.name().to_owned(),
        epoch: fleet
            .as_ref()
            .map_or(slot.lease().epoch(), |f| f.epoch().unsigned_abs()),
    };
    let host_epoch = slot.lease().epoch();
    let nesting = worklane_run::nesting::env(&args.kind.kind(), pool.dir().path(), slot.name());
    let mut watch = CliWatch {
        fleet: fleet.as_mut(),
        taken: Some(taken),
        ..CliWatch::default()
    };
    let jobs = args.jobs();
    let outcome = Supervisor::new(&pool, &mut slot)
        .map(|s| {
            let s = with_fleet(
                s.env(nesting.0, nesting.1)
                    .kill_tree_on_exit(args.kill_tree_on_exit)
                    .limits(run_limits(&pool, &args)),
                watch.fleet.as_deref(),
                host_epoch,
            );
            match jobs {
                Some(jobs) => s.jobs(jobs),
                None => s,
            }
        })
        .and_then(|s| s.watch(&mut watch).run(&args.command));
    let lost = watch.lost;
    if let Some(place) = fleet
        && let Err(e) = place.release()
    {
        errln!("worklane: releasing the fleet place: {e}");
    }
    let released = match outcome.as_ref().map(|o| o.left_running.len()) {
        Ok(left @ 1..) => {
            // What the command left running in the run's cgroup keeps the slot, its record
            // naming the cgroup, so that `slots` shows it and `stop-all` reaches it.
            errln!(
                "worklane: {left} process(es) the command started still run in its cgroup; {} \
                 stays held until they end (`worklane stop-all` ends them)",
                slot.name()
            );
            drop(slot.hand_over());
            Ok(())
        }
        _ => slot.release(),
    };
    let outcome = outcome?;
    crate::watch::released(what, released);
    let halt = if lost {
        HaltedBy::LeaseLost
    } else {
        HaltedBy::Stop
    };
    status.end(outcome.code, crate::status::halted_by(&outcome, halt));
    if let Some(signal) = outcome.signal {
        worklane_run::process::die_by(signal);
    }
    Ok(ExitCode::from(outcome.code))
}

/// The run's cgroup limits: `--memory-max` and `--cpu-max`, else the config's `max_memory`
/// and `max_cpu` for its kind.
fn run_limits(pool: &worklane_admission::Pool, args: &RunArgs) -> worklane_run::Limits {
    let config = pool.config().ok();
    let kind = kind_word(args.kind);
    worklane_run::Limits {
        memory: args
            .memory_max
            .or_else(|| config.as_ref()?.max_memory.get(kind).copied()),
        cpus: args.cpu_max.or_else(|| {
            config
                .as_ref()?
                .max_cpu_milli
                .get(kind)
                .map(|milli| *milli as f64 / 1000.0)
        }),
    }
}
