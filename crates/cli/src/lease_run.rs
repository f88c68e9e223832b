//! `worklane lease run`: hold a role's TTL lease while a command runs, pulsed by
//! [`worklane_run::Supervisor::role`]; a refusal names the holder (`role.rs`).

use crate::cli::LeaseRunArgs;
use crate::exit::{self, Failure};
use crate::out::errln;
use crate::progress::Progress;
use crate::role::Refused;
use crate::status::{HaltedBy, Status};
use crate::watch::{CliWatch, Taken, with_fleet};
use std::process::ExitCode;
use worklane_admission::role::{self, RoleRequest, RoleTake, RoleWait};
use worklane_run::{CHECK_EVERY, MIN_TTL, Supervisor, describe};

pub(crate) fn lease_run(args: LeaseRunArgs) -> Result<ExitCode, Failure> {
    // Claimed before anything opens a descriptor, so N can only be the caller's.
    let mut status = Status::claim(args.status_fd)?;
    let result = lease_run_holding(args, &mut status);
    if let Err(failure) = &result {
        status.failed(failure);
    }
    result
}

fn lease_run_holding(args: LeaseRunArgs, status: &mut Status) -> Result<ExitCode, Failure> {
    if let Err(rule) = role::check_role(&args.role) {
        let role = &args.role;
        return Err(Failure::new(
            exit::USAGE,
            format!("--role {role:?}: {rule}"),
        ));
    }
    if args.ttl < MIN_TTL {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--ttl {} ms is too short: worklane pulses once every {} ms at best and must be \
                 able to halt the command before its lease lapses; use at least {} s",
                args.ttl.as_millis(),
                CHECK_EVERY.as_millis(),
                MIN_TTL.as_secs()
            ),
        ));
    }
    let pool = crate::taking_pool()?;
    let name = role::lease_name(&args.role);
    let ours = describe(&args.command);
    let identity = args
        .agent_identity
        .clone()
        .unwrap_or_else(crate::shared::who);
    let request = RoleRequest {
        role: args.role.clone(),
        identity: identity.clone(),
        profile: args.profile.clone(),
        entrypoint: ours.clone(),
        ttl: args.ttl,
    };
    let mut wait = RoleWait::new(
        args.wait || args.timeout.is_some(),
        args.timeout,
        CHECK_EVERY,
    );
    let mut progress = Progress::new("the role");
    // The host's role lease, then the role across the fleet (`--fleet`), tried at once: while
    // the fleet's role is held elsewhere, the host's lease is given back before waiting, so a
    // waiter never holds a TTL lease it does not pulse.
    let owner = identity;
    let (mut lease, mut fleet) = loop {
        // An emergency STOP halts role holders too, so it refuses a new one up front rather
        // than start the command only to halt it a moment later; a waiter is refused as soon
        // as one is written.
        let taken = wait.take(&pool, &request, |refusal, waited| {
            let why = format!("held: {}", refusal.why);
            progress.show(&why, waited);
            status.waiting("role", &why);
        })?;
        let lease = match taken {
            RoleTake::Held(lease) => lease,
            RoleTake::Stopped(stop) => {
                progress.clear();
                let failure = Refused::stop(&args.role, &name, &ours, &stop).fail(args.json);
                status.refused(&failure);
                return Err(failure);
            }
            RoleTake::Refused(refusal) => {
                progress.clear();
                let refused = Refused::held(&args.role, pool.dir().path(), &refusal, &ours);
                let failure = refused.fail(args.json);
                status.refused(&failure);
                return Err(failure);
            }
        };
        match crate::fleet::claim_role(&args.fleet, &args.role, &owner, &ours, false, None) {
            Ok(fleet) => break (lease, fleet),
            Err(failure) if failure.code == exit::TEMP_FAIL && wait.goes_on() => {
                let _ = lease.release();
                progress.show(&failure.message, wait.waited());
                status.waiting("role", &failure.message);
                wait.nap();
            }
            Err(failure) => {
                progress.clear();
                let _ = lease.release();
                status.refused(&failure);
                return Err(failure);
            }
        }
    };
    progress.clear();
    let taken = Taken {
        status: &mut *status,
        kind: "role",
        slot: lease.resource().to_owned(),
        epoch: fleet
            .as_ref()
            .map_or(lease.epoch(), |f| f.epoch().unsigned_abs()),
    };
    let host_epoch = lease.epoch();
    let mut watch = CliWatch {
        fleet: fleet.as_mut(),
        taken: Some(taken),
        ..CliWatch::default()
    };
    let supervisor = Supervisor::role(&pool, &mut lease, args.ttl);
    let outcome = with_fleet(supervisor, watch.fleet.as_deref(), host_epoch)
        .watch(&mut watch)
        .run(&args.command);
    let fleet_lost = watch.lost;
    let outcome = outcome?;
    let lost = fleet_lost || outcome.lease_lost;
    if let Some(place) = fleet
        && let Err(e) = place.release()
    {
        errln!("worklane: releasing the fleet role: {e}");
    }
    let _ = lease.release();
    if lost {
        status.end(exit::UNAVAILABLE, Some(HaltedBy::LeaseLost));
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "role {} lease lost while the command ran ({}); it was halted",
                args.role,
                outcome.halted.unwrap_or_default()
            ),
        ));
    }
    status.end(
        outcome.code,
        crate::status::halted_by(&outcome, HaltedBy::Stop),
    );
    if let Some(signal) = outcome.signal {
        worklane_run::process::die_by(signal);
    }
    Ok(ExitCode::from(outcome.code))
}
