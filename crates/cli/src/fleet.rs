//! `--fleet` and `worklane fleet`: a place in a fleet pool on etcd, held beside this host's
//! slot (`worklane-fleet`, PROTOCOL.md section 15).

use crate::cli::FleetArgs;
use crate::exit::{self, Failure};
use crate::json;
use crate::out::{outln, sayln};
use std::process::ExitCode;
use std::time::Duration;
use worklane_fleet::{Fleet, Hold, Holder, Refusal, Taken, Wait};
use worklane_lease::{Clock, SystemClock, rfc3339_ms};

mod shared;

pub(crate) use shared::{budget_observe, budget_take, budget_views, claim_role};

/// A place held in a fleet pool, or a fleet-wide role, while the command runs.
pub(crate) struct Place {
    hold: Box<Hold>,
    /// What it is, for messages: `pool "agents"`, `role "coordinator"`.
    pool: String,
}

pub(super) fn connect(args: &FleetArgs) -> Result<Fleet, Failure> {
    connect_to(&args.lease.endpoints, args.lease.fleet_ttl)
}

pub(super) fn connect_to(endpoints: &[String], ttl: Duration) -> Result<Fleet, Failure> {
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

pub(super) fn failure(e: &worklane_fleet::Error) -> Failure {
    let code = match e {
        worklane_fleet::Error::Name(_) => exit::USAGE,
        // Other hosts' writes won every race: etcd answers, and a try later may go through.
        worklane_fleet::Error::Contended { .. } => exit::TEMP_FAIL,
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

pub(super) fn needs_endpoints(args: &FleetArgs) -> Result<(), Failure> {
    if args.lease.endpoints.is_empty() {
        return Err(Failure::new(
            exit::USAGE,
            "name the fleet's etcd with --fleet URL[,URL...] (or WORKLANE_FLEET)",
        ));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_other_hosts_kept_changing_is_a_temporary_failure_and_a_bad_name_a_usage_error() {
        let contended = worklane_fleet::Error::Contended {
            key: "/worklane/v1/budget/0123456789abcdef".to_owned(),
            lost: 256,
        };
        let said = failure(&contended);
        assert_eq!(said.code, exit::TEMP_FAIL);
        assert!(said.message.contains("try again"), "{}", said.message);
        let name = worklane_fleet::keys::check_name("pool", "a/b").expect_err("a bad name");
        assert_eq!(failure(&name.into()).code, exit::USAGE);
    }
}
