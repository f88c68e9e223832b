//! What several commands share, so that no command imports another's helpers: who this
//! process is (`who`), what a take asks (`ask`), the budget ledger and providers as the
//! command line names them (`budget`) and their health view (`budget_view`), a config that
//! cannot be used as every view shows it and a take refuses with it (`config_problem`), the
//! `slots` document of a snapshot (`slots_json`), and what a view shows besides the snapshot
//! (`views`: `Around`, the queue, the line).

pub(crate) mod budget;
pub(crate) mod budget_view;
pub(crate) mod config_problem;
pub(crate) mod slots_json;
pub(crate) mod views;

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
