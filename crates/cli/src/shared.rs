//! What several commands share, so that no command imports another's helpers: who this
//! process is (`who`), what a take asks (`ask`), the budget ledger and providers as the
//! command line names them (`budget`) and their health view for people (`budget_text`), and a
//! take refused for a config that cannot be used (`take_refused`). What the views show (the
//! slots document, the queue, the line, the budgets, a config's problem) is `worklane_view`.

pub(crate) mod budget;
pub(crate) mod budget_text;
pub(crate) mod take_refused;

/// `USER@HOST` of this process (`uid N@HOST` without `USER`), for STOP and role leases.
pub(crate) fn who() -> String {
    let user = std::env::var("USER")
        .unwrap_or_else(|_| format!("uid {}", rustix::process::getuid().as_raw()));
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    format!("{user}@{host}")
}

/// What a take asks of the pool: `weight` units, for the caller's uid and groups, and the
/// `--owner` tag when one is given (a share the config names for `owner:TAG` wins, PROTOCOL.md
/// 12.10).
pub(crate) fn ask(weight: u32, tag: Option<&str>) -> worklane_admission::Ask {
    let owner = worklane_admission::Owner::of_process();
    let owner = match tag {
        Some(tag) => owner.with_tag(tag),
        None => owner,
    };
    worklane_admission::Ask::new()
        .with_weight(weight)
        .with_owner(owner)
}
