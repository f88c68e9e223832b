//! Integration tests of the `worklane` binary: real processes in temp slot directories
//! (`AGENT_SLOTS_DIR`), real signals, real child commands that record what they saw.
//!
//! Every process is started through the fork gate and marked with its test's `Scope`, so that
//! whatever a test started, however it left its group or parent, is gone when the test ends,
//! passed or failed.

mod support;
use support::*;

mod cap;

mod exits;

/// The start of the command (a `clone(CLONE_VM | CLONE_VFORK)`: worklane waits, unable to stop,
/// until its child has exec'd) against signals that reach the child before its exec.
mod start;

mod output;

mod operator;

mod roles;

mod nesting;

mod terminal;

mod roles_and_stop;

mod slots_json;

mod queue;

mod budget;

/// The slot directory belongs to root and the caller (SPEC 3): anything else exits 78 naming
/// the owner, the mode and the fix; and a member of its group that cannot read a budget state
/// hears about it.
mod ownership;

/// A damaged file never silences STOP, resume, the drain or the views (issue 26): a config,
/// STOP, drain flag or budget state that is not JSON, out of range, a directory, a FIFO, a
/// link, over 64 KiB or unreadable by the caller, and a dispatcher that answers with garbage, a
/// refusal or nothing. Each is shown as a problem naming the file, what is wrong and the fix;
/// takes may still refuse (78 for the config). Every case runs as root and as an unprivileged
/// member of the slot directory's group (through `setpriv`): root reads what a member cannot.
mod damage;

/// What `stop-all` says it did, `-q`, and how `slots` names dispatched work (issue 26).
mod operator_output;

mod why;

mod supervisor_gone;

mod strays;

mod line;

mod dispatcher;

/// Whose rights a dispatched driver gets (issue: a member of the directory's group could run
/// commands as root): the enqueuer's, from the connection's peer credentials, never more.
/// Every test here runs its subjects as an unprivileged member of the directory's group.
mod queue_rights;

/// The dispatcher under hostile connections, a full disk and a damaged database: it serves
/// on, says what is wrong, and loses nothing.
mod queue_trouble;

/// How dispatched work ends, and what is kept of it: the attempt's log says its start, end and
/// status; running attempts are listed and cancelled; ended ones are in a bounded history
/// that `reconcile` and `queue ls --all` read, pruned after its retention.
mod queue_history;

/// Model providers' budgets from the command line: a take prints its reservation, the
/// response's headers (from stdin) and usage settle it, a 429 pauses every caller of the key,
/// and the key is never written or printed.
mod model_budgets;

mod python_examples;

/// The options a script replacing `flock -n F cmd` relies on: `--dir`, `-n`, `-w`, `-E`.
mod flock_like;

/// `worklane config`: the config file in force, read and written from the command line.
mod config;

/// `--status-fd N`: worklane's own events as JSON lines, apart from the command's output.
mod status_fd;

/// `lease run --wait/--timeout`, `budget take --wait-max` and `budget observe --headers-file`.
mod waits;

/// `worklane man`: one page per command, as `cargo xtask man` installs them.
mod man;

/// `run --jobs`: a build's jobserver backed by the machine's job slots.
mod jobs;

/// `run --weight` and the config's `shares`.
mod weights;

/// `protocol.json`: levels and extensions.
mod protocol;

/// A cgroup per run: containment and measure.
mod containment;

/// `worklane proxy`.
mod proxy;

/// What a member of the slot directory's group cannot do to a root dispatcher and its
/// clients (issue 32's reproductions).
mod trust;

/// The dispatcher's bounds: what a waiting row costs, and what one client can hold up (issue
/// 33).
mod bounds;

/// docs/json.md against the real output: each documented example has the same keys and value
/// types, recursively, as the document its command prints (values may differ), so a schema
/// that drifts from the code fails here.
mod json_docs;

/// `--fleet` against a real 3-member etcd cluster that each test starts on loopback and stops
/// (`cargo test -p worklane --features fleet`; CI runs it).
#[cfg(feature = "fleet")]
mod fleet;

mod logging;

mod journal;

/// `worklane top` (feature `top`) in a tmux session of 80x24: typed into with send-keys, read
/// with capture-pane.
#[cfg(feature = "top")]
mod top;
