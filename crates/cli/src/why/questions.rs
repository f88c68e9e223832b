//! The questions as the command line asks them (`worklane_view::why` answers them), and each
//! answer's exit code and JSON.

use crate::cli::{KindArg, WhyArgs};
use crate::exit::{self, Failure};
use crate::json;
use worklane_admission::Snapshot;
use worklane_budget::{CredentialKey, Ledger};
use worklane_slotfile::SlotDir;
use worklane_view::why::{self, Answer, Blocker, Calls, State};

/// The exit code an answer stands for (0 when it does not block).
pub(super) fn code(answer: &Answer) -> u8 {
    match answer.state {
        State::Blocked(Blocker::Stopped | Blocker::Unavailable) => exit::UNAVAILABLE,
        State::Blocked(Blocker::Broken) => exit::OS_ERROR,
        State::Blocked(Blocker::Busy) => exit::TEMP_FAIL,
        State::Blocked(Blocker::Config) => exit::CONFIG,
        State::Blocked(_) => exit::USAGE,
        State::NotAsked | State::Outside | State::Clear => 0,
    }
}

pub(super) fn answer_json(answer: &Answer) -> json::Answer {
    json::Answer {
        asked: answer.asked.clone(),
        blocks: answer.blocks(),
        decided_here: answer.state != State::Outside,
        why: answer.why.clone(),
    }
}

/// The blocker an exit code of the fleet's stands for.
fn blocker(code: u8) -> Blocker {
    match code {
        exit::TEMP_FAIL => Blocker::Busy,
        exit::USAGE => Blocker::BadQuestion,
        exit::CONFIG => Blocker::Config,
        _ => Blocker::Unavailable,
    }
}

/// Resource admission past this host (`--fleet`): when the host would admit, the fleet pool
/// is asked too, and blocks when it is full, has no cap or does not answer.
pub(super) fn with_fleet(host: Answer, args: &WhyArgs) -> Answer {
    if host.blocks() == Some(true) {
        return host;
    }
    match crate::fleet::question(&args.fleet) {
        None => host,
        Some(q) if q.blocks => Answer::blocked(&host.asked, q.why, blocker(q.code)),
        Some(q) => Answer::clear(host.asked, format!("{}; {}", host.why, q.why)),
    }
}

pub(super) fn admission(
    kind: KindArg,
    snapshot: &Snapshot,
    ask: &worklane_admission::Ask,
) -> Answer {
    let kind = match kind {
        KindArg::Agent => why::Kind::Agent,
        KindArg::Test => why::Kind::Test,
        KindArg::FullRun => why::Kind::FullRun,
        KindArg::Job => why::Kind::Job,
    };
    why::admission(kind, snapshot, ask)
}

pub(super) fn quota(args: &WhyArgs, ledger: &Ledger) -> Answer {
    let github = args.provider == "github";
    let asked = if github {
        format!("{} calls", args.resource)
    } else {
        format!("{} calls", args.provider)
    };
    let var = crate::shared::budget::token_env(&args.provider, args.token_env.as_deref())
        .unwrap_or_default();
    let token = std::env::var(&var).unwrap_or_default();
    if token.is_empty() {
        return Answer::not_asked(
            &asked,
            format!("no API token in ${var} (name its variable with --token-env)"),
        );
    }
    let key = CredentialKey::of_token(&token);
    if github {
        return why::quota(
            ledger,
            Calls::GitHub {
                resource: &args.resource,
            },
            &key,
            asked,
        );
    }
    match crate::shared::budget::provider(&args.provider) {
        Ok(provider) => why::quota(
            ledger,
            Calls::Model {
                provider: &provider,
            },
            &key,
            asked,
        ),
        Err(failure) => Answer::not_asked(&asked, failure.message),
    }
}

pub(super) fn ownership(
    args: &WhyArgs,
    snapshot: &Snapshot,
    dir: &SlotDir,
) -> Result<Answer, Failure> {
    let name = match (&args.role, &args.lock) {
        (Some(role), _) => format!("role-{role}.lease"),
        (None, Some(lock)) => lock.clone(),
        (None, None) => {
            return Ok(Answer::not_asked(
                "",
                "give --role ROLE or --lock NAME to ask who owns it",
            ));
        }
    };
    why::ownership(snapshot, dir, &name).map_err(|e| {
        let code = match e {
            why::Error::Name { .. } => exit::USAGE,
            _ => exit::OS_ERROR,
        };
        Failure::new(code, exit::chain(&e))
    })
}
