//! What the fleet shares besides pools: a fleet-wide role (`lease run --fleet`) and a
//! credential's budget (`budget take|observe|show --fleet`).

use super::{Place, connect_to, failure};
use crate::cli::{FleetAt, FleetRoleArgs};
use crate::exit::{self, Failure};
use std::time::Duration;
use worklane_fleet::{Holder, Taken, Wait};
use worklane_lease::{Clock, SystemClock, rfc3339_ms};

/// Claims `role` across the fleet of `args` (none without `--fleet`): refused at once unless
/// `wait`, then waiting at most `timeout` (`None`: for ever). Held by another: 75; an etcd
/// that does not answer: 69.
pub(crate) fn claim_role(
    args: &FleetRoleArgs,
    role: &str,
    owner: &str,
    command: &str,
    wait: bool,
    timeout: Option<Duration>,
) -> Result<Option<Place>, Failure> {
    if args.endpoints.is_empty() {
        return Ok(None);
    }
    let fleet = connect_to(&args.endpoints, args.fleet_ttl)?;
    let mut me = Holder::this_process(owner, rfc3339_ms(SystemClock.now_ms()));
    me.command = Some(command.to_owned());
    let timeout = if wait { timeout } else { Some(Duration::ZERO) };
    let claimed = fleet
        .claim_role(
            role,
            &me,
            Wait {
                timeout,
                on_wait: &mut |_| {},
            },
        )
        .map_err(|e| failure(&e))?;
    match claimed {
        Taken::Held(hold) => Ok(Some(Place {
            hold,
            pool: format!("role {role:?}"),
        })),
        Taken::Refused(why) => Err(Failure::new(
            exit::TEMP_FAIL,
            format!(
                "cannot claim role {role} across the fleet ({}): {why}",
                if wait { "timed out" } else { "not waiting" }
            ),
        )),
    }
}

/// `budget take --fleet`: a call of `resource` from the fleet's budget of `key`, waiting at
/// most `wait_max`; `Err(Refused)` inside when the call must not go. An etcd that does not
/// answer: 69 (nothing is admitted under --fleet while etcd does not answer).
pub(crate) fn budget_take(
    at: &FleetAt,
    key: &worklane_budget::CredentialKey,
    resource: &str,
    consumer: &str,
    wait_max: Duration,
) -> Result<Result<(bool, Option<u64>), worklane_budget::Refused>, Failure> {
    use worklane_fleet::budget::BudgetTake;
    let fleet = connect_to(&at.endpoints, Duration::from_secs(15))?;
    let now = || SystemClock.now_ms();
    let started = std::time::Instant::now();
    let taken = fleet
        .budget_take(key, resource, consumer, wait_max, &now)
        .map_err(|e| failure(&e))?;
    let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(match taken {
        BudgetTake::Go { counted, left } => Ok((counted, left)),
        BudgetTake::Refused {
            until,
            why: worklane_budget::WaitWhy::Paused,
        } => Err(worklane_budget::Refused::SecondaryRateLimited { until, waited_ms }),
        BudgetTake::Refused {
            until,
            why: worklane_budget::WaitWhy::Spent,
        } => Err(worklane_budget::Refused::RateLimited {
            resource: resource.to_owned(),
            reset_at: until,
            waited_ms,
        }),
    })
}

/// `budget observe --fleet`: records `observation` in the fleet's budget of `key`.
pub(crate) fn budget_observe(
    at: &FleetAt,
    key: &worklane_budget::CredentialKey,
    observation: &worklane_budget::Observation,
) -> Result<(), Failure> {
    let fleet = connect_to(&at.endpoints, Duration::from_secs(15))?;
    let now = || SystemClock.now_ms();
    fleet
        .budget_observe(key, observation, &now)
        .map_err(|e| failure(&e))
}

/// `budget show --fleet`: the fleet's budgets as the host's health view shows its own
/// (numbered, never named; `updated` is when a window was last seen).
pub(crate) fn budget_views(at: &FleetAt) -> Result<Vec<worklane_budget::CredentialView>, Failure> {
    use worklane_budget::ledger::ResourceView;
    let fleet = connect_to(&at.endpoints, Duration::from_secs(15))?;
    let now = SystemClock.now_ms();
    let states = fleet.budgets().map_err(|e| failure(&e))?;
    Ok(states
        .into_iter()
        .enumerate()
        .map(|(i, state)| worklane_budget::CredentialView {
            provider: "github".to_owned(),
            number: i + 1,
            key: String::new(),
            updated_ms: state
                .resources
                .values()
                .map(|w| w.seen_at)
                .max()
                .unwrap_or(0),
            paused_until: state.pause(now),
            // The fleet's budgets are GitHub's: nothing is reserved or waits in a proxy.
            in_flight: 0,
            waiting: 0,
            resources: state
                .resources
                .iter()
                .filter(|(name, _)| state.window(name, now).is_some())
                .map(|(name, w)| ResourceView {
                    in_flight: 0,
                    assumed: w.assumed,
                    left: w.left(),
                    name: name.clone(),
                    limit: w.limit,
                    remaining: w.remaining,
                    reset_at: w.reset_at,
                    granted: w.granted,
                    by_consumer: w.by_consumer.clone().into_iter().collect(),
                })
                .collect(),
        })
        .collect())
}
