//! `--fleet` and `worklane fleet`: a place in a fleet pool on etcd, held beside this host's
//! slot (`worklane-fleet`, PROTOCOL.md section 15).

use crate::cli::{FleetArgs, FleetAt, FleetRoleArgs};
use crate::exit::{self, Failure};
use crate::json;
use crate::out::{outln, sayln};
use std::process::ExitCode;
use std::time::Duration;
use worklane_fleet::{Fleet, Hold, Holder, Refusal, Taken, Wait};
use worklane_lease::{Clock, SystemClock, rfc3339_ms};

/// A place held in a fleet pool, or a fleet-wide role, while the command runs.
pub(crate) struct Place {
    hold: Box<Hold>,
    /// What it is, for messages: `pool "agents"`, `role "coordinator"`.
    pool: String,
}

fn connect(args: &FleetArgs) -> Result<Fleet, Failure> {
    connect_to(&args.lease.endpoints, args.lease.fleet_ttl)
}

fn connect_to(endpoints: &[String], ttl: Duration) -> Result<Fleet, Failure> {
    Fleet::connect(endpoints, ttl).map_err(|e| {
        Failure::new(
            exit::UNAVAILABLE,
            format!(
                "{}; nothing is admitted under --fleet while etcd does not answer",
                exit::chain(&e)
            ),
        )
    })
}

fn failure(e: &worklane_fleet::Error) -> Failure {
    let code = match e {
        worklane_fleet::Error::Name(_) => exit::USAGE,
        _ => exit::UNAVAILABLE,
    };
    Failure::new(code, exit::chain(e))
}

/// Takes a place in the fleet pool of `args` (none without `--fleet`): at once or not at all
/// with `no_wait`, else waiting at most `timeout` (`None`: for ever). A full pool is refused
/// with `conflict`; a pool without a cap, or an etcd that does not answer, with 69.
pub(crate) fn take(
    args: &FleetArgs,
    owner: &str,
    command: &str,
    no_wait: bool,
    timeout: Option<Duration>,
    conflict: u8,
) -> Result<Option<Place>, Failure> {
    if args.lease.endpoints.is_empty() {
        return Ok(None);
    }
    let fleet = connect(args)?;
    let mut me = Holder::this_process(owner, rfc3339_ms(SystemClock.now_ms()));
    me.command = Some(command.to_owned());
    let timeout = if no_wait {
        Some(Duration::ZERO)
    } else {
        timeout
    };
    let taken = fleet
        .take(
            &args.pool,
            &me,
            Wait {
                timeout,
                on_wait: &mut |_| {},
            },
        )
        .map_err(|e| failure(&e))?;
    match taken {
        Taken::Held(hold) => Ok(Some(Place {
            hold,
            pool: format!("pool {:?}", args.pool),
        })),
        Taken::Refused(why @ Refusal::NoCap { .. }) => {
            Err(Failure::new(exit::UNAVAILABLE, format!("refused: {why}")))
        }
        Taken::Refused(why) => Err(Failure::new(
            conflict,
            format!(
                "cannot take a place in the fleet ({}): {why}",
                if no_wait { "not waiting" } else { "timed out" }
            ),
        )),
    }
}

impl Place {
    /// The fencing epoch: the place's key's create revision in etcd.
    pub(crate) fn epoch(&self) -> i64 {
        self.hold.epoch()
    }

    /// The place's key.
    pub(crate) fn key(&self) -> &str {
        self.hold.key()
    }

    /// The etcd lease's TTL.
    pub(crate) fn ttl(&self) -> Duration {
        self.hold.ttl()
    }

    /// Keeps the place alive; a reason to halt the command once it is lost (or may be).
    pub(crate) fn check(&mut self) -> Option<String> {
        self.hold
            .pulse()
            .err()
            .map(|lost| format!("fleet pool {:?}: {lost}", self.pool))
    }

    /// Gives the place up (its lease revoked); a message if etcd did not answer (the lease
    /// then lapses at its TTL).
    pub(crate) fn release(self) -> Result<(), String> {
        let Place { hold, .. } = self;
        hold.release().map_err(|e| exit::chain(&e))
    }
}

/// `worklane fleet set-cap`.
pub(crate) fn set_cap(args: &FleetArgs, cap: u32) -> Result<ExitCode, Failure> {
    needs_endpoints(args)?;
    let fleet = connect(args)?;
    fleet.set_cap(&args.pool, cap).map_err(|e| failure(&e))?;
    sayln!("fleet pool {:?}: cap {cap}", args.pool)?;
    Ok(ExitCode::SUCCESS)
}

/// `worklane fleet status`.
/// The fleet pool of `args` as `fleet status --json` shows it.
fn document(args: &FleetArgs) -> Result<json::FleetStatus, Failure> {
    let fleet = connect(args)?;
    let status = fleet.status(&args.pool).map_err(|e| failure(&e))?;
    let holding = status.cap.unwrap_or(0) as usize;
    let keys: Vec<json::FleetKey> = status
        .keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let h = k.holder.as_ref();
            json::FleetKey {
                key: k.key.clone(),
                epoch: k.create_revision,
                holds: i < holding,
                host: h.map(|h| h.host.clone()),
                pid: h.map(|h| h.pid),
                owner: h.map(|h| h.owner.clone()),
                since: h.map(|h| h.since.clone()),
                command: h.and_then(|h| h.command.clone()),
            }
        })
        .collect();
    Ok(json::FleetStatus {
        version: json::VERSION,
        endpoints: fleet.endpoints().to_owned(),
        pool: status.pool.clone(),
        cap: status.cap,
        held: keys.iter().filter(|k| k.holds).count(),
        keys,
    })
}

/// The pool for a person: its cap, then each key.
fn print(doc: &json::FleetStatus) -> Result<(), Failure> {
    match doc.cap {
        Some(cap) => outln!(
            "fleet pool {:?} at {}: {} of {cap} held, {} waiting",
            doc.pool,
            doc.endpoints,
            doc.held,
            doc.keys.len() - doc.held
        )?,
        None => outln!(
            "fleet pool {:?} at {}: no cap set, so it admits nobody (`worklane fleet set-cap \
             --pool {} N`)",
            doc.pool,
            doc.endpoints,
            doc.pool
        )?,
    }
    for k in &doc.keys {
        outln!(
            "  {} epoch {} pid {} on {} owner {} since {}",
            if k.holds { "holds" } else { "waits" },
            k.epoch,
            k.pid.map_or("null".to_owned(), |p| p.to_string()),
            k.host.as_deref().unwrap_or("?"),
            k.owner.as_deref().unwrap_or("?"),
            k.since.as_deref().unwrap_or("?")
        )?;
    }
    Ok(())
}

/// `worklane fleet status`.
pub(crate) fn status(args: &FleetArgs, as_json: bool) -> Result<ExitCode, Failure> {
    needs_endpoints(args)?;
    let doc = document(args)?;
    if as_json {
        outln!("{}", json::line(&doc))?;
    } else {
        print(&doc)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `slots --fleet`: the fleet pool beside the host's slots (none without `--fleet`). The
/// fleet never fails `slots`: an etcd that does not answer is shown as such.
pub(crate) fn slots_section(args: &FleetArgs) -> Option<json::SlotsFleet> {
    if args.lease.endpoints.is_empty() {
        return None;
    }
    Some(match document(args) {
        Ok(doc) => json::SlotsFleet {
            status: Some(doc),
            error: None,
        },
        Err(failure) => json::SlotsFleet {
            status: None,
            error: Some(failure.message),
        },
    })
}

/// `slots --fleet` for a person.
pub(crate) fn print_section(section: &json::SlotsFleet) -> Result<(), Failure> {
    match (&section.status, &section.error) {
        (Some(doc), _) => print(doc),
        (None, Some(error)) => {
            outln!("fleet: {error}")?;
            Ok(())
        }
        (None, None) => Ok(()),
    }
}

fn needs_endpoints(args: &FleetArgs) -> Result<(), Failure> {
    if args.lease.endpoints.is_empty() {
        return Err(Failure::new(
            exit::USAGE,
            "name the fleet's etcd with --fleet URL[,URL...] (or WORKLANE_FLEET)",
        ));
    }
    Ok(())
}

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
            number: i + 1,
            updated_ms: state
                .resources
                .values()
                .map(|w| w.seen_at)
                .max()
                .unwrap_or(0),
            paused_until: state.pause(now),
            resources: state
                .resources
                .iter()
                .filter(|(name, _)| state.window(name, now).is_some())
                .map(|(name, w)| ResourceView {
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

/// What the fleet says to `worklane why`: whether its pool blocks a new place, why, and the
/// exit code that stands for it.
pub(crate) struct Question {
    pub(crate) blocks: bool,
    pub(crate) why: String,
    pub(crate) code: u8,
}

/// `why --fleet`: the fleet pool's answer (none without `--fleet`). Takes nothing.
pub(crate) fn question(args: &FleetArgs) -> Option<Question> {
    if args.lease.endpoints.is_empty() {
        return None;
    }
    let blocked = |why: String, code: u8| Question {
        blocks: true,
        why,
        code,
    };
    let fleet = match connect(args) {
        Ok(fleet) => fleet,
        Err(failure) => return Some(blocked(failure.message, failure.code)),
    };
    let status = match fleet.status(&args.pool) {
        Ok(status) => status,
        Err(e) => {
            let failure = failure(&e);
            return Some(blocked(failure.message, failure.code));
        }
    };
    let Some(cap) = status.cap else {
        return Some(blocked(
            format!(
                "{}",
                Refusal::NoCap {
                    pool: args.pool.clone()
                }
            ),
            exit::UNAVAILABLE,
        ));
    };
    let holders: Vec<Holder> = worklane_fleet::decide::holders(&status.keys, cap)
        .into_iter()
        .filter_map(|l| l.holder.clone())
        .collect();
    let taken = status.keys.len();
    Some(if taken >= cap as usize {
        blocked(
            format!(
                "{}{}",
                Refusal::Full {
                    pool: args.pool.clone(),
                    cap,
                    holders,
                },
                if taken > cap as usize {
                    format!(", {} waiting", taken - cap as usize)
                } else {
                    String::new()
                }
            ),
            exit::TEMP_FAIL,
        )
    } else {
        Question {
            blocks: false,
            why: format!("fleet pool {:?}: {taken} of {cap} held", args.pool),
            code: 0,
        }
    })
}
