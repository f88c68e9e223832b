//! Host admission for worklane: may this process start work now?
//!
//! The slot pool of one machine (PROTOCOL.md section 12):
//!
//! - [`Pool::try_take`] / [`Pool::take`] take an agent slot (`agent-<i>.lock`, at most
//!   `max_agents` live), a test-run slot (`test-<i>.lock`, at most `max_test_runs`), or the one
//!   full-run lock, refusing while an emergency [`Stop`] or an update [`Drain`] is in force.
//!   Agents and test runs are counted under `slots.lock`; the first free index is taken, and
//!   files may be numbered past the cap, so lowering the cap never strands a running agent.
//! - A slot whose guard is held is live; with its guard free, its record decides by process
//!   identity: provably gone is free (and taken over), anything else counts as held.
//! - Weights and shares ([`weight`], [`share`]): [`Pool::take_for`] / [`Pool::try_take_for`]
//!   take `N` units of the cap at once with one slot file whose record says `weight`
//!   (counting sums the units of the live slots; a record without a weight counts 1), counted
//!   against the share of an [`Owner`] (its uid, groups or tag) when the config gives
//!   `shares`; the line then serves, within a priority, the owner with the smallest use of
//!   its share first, and its head keeps the units freed until its weight fits.
//! - [`Pool::snapshot`] is what `worklane slots` shows; [`Pool::idle`] is the idle probe;
//!   [`stop_problem`] and [`drain_problem`] say what is wrong with a STOP or drain flag that is
//!   not one; [`stop_not_replaced`], [`stop_not_removed`], [`drain_not_written`] and
//!   [`drain_not_removed`] what stays, and its fix, when `stop-all`, `resume-all`, `drain` or
//!   `undrain` could not change the file.
//! - [`role`]: role leases, one holder of a named role under TTL liveness, refused under STOP
//!   ([`Pool::try_take_role`]; `role::RoleWait`, a bounded wait for one; `role::Holder`, the
//!   holder as its record names it, and `role::advice`, what a refused caller can do).
//!
//! Every lock here is a `worklane-lease` lease with process liveness; the files are written
//! only through `worklane-slotfile`.
//!
//! # Limitations
//!
//! - Shares are fairness among cooperating harnesses, not a security boundary: a take says
//!   its own owner ([`Owner::of_process`] is what the kernel says of this process), and
//!   anyone who may write the slot directory may write any record. A harness that knows
//!   nothing of weights counts every record as 1 unit and ignores shares.
//! - STOP and drain are observed, not enforced by the kernel: a holder must poll
//!   [`Pool::stop`] (the `worklane run` supervisor does, every 250 ms) and halt its agent.
//! - A slot belongs to the open file description of its guard: every process holding a copy of
//!   the guard descriptor ([`Slot::lease`]) keeps it held. Give the agent a copy (as
//!   `worklane run` does) so that a killed supervisor cannot free a slot its agent still uses.
//!   [`Pool::recorded_commands`] lists the commands records name, for STOP's enforcement.
//!
//! # Example
//!
//! ```
//! use worklane_admission::{Kind, Pool, Take};
//! use worklane_lease::Request;
//! use worklane_slotfile::{Environment, SlotDir};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let temp = tempfile::tempdir()?;
//! let env = Environment::from_process().var("AGENT_SLOTS_DIR", temp.path());
//! let pool = Pool::new(SlotDir::resolve_in(&env)?);
//! let Take::Held(first) = pool.try_take(Kind::Agent, &Request::new("harness"))? else { panic!() };
//! let Take::Held(second) = pool.try_take(Kind::Agent, &Request::new("harness"))? else { panic!() };
//! // The embedded default cap is 2.
//! assert!(matches!(pool.try_take(Kind::Agent, &Request::new("harness"))?, Take::Blocked(_)));
//! assert_eq!((first.name(), second.name()), ("agent-0.lock", "agent-1.lock"));
//! # Ok(()) }
//! ```
//!
//! # Design
//!
//! (How this crate is built, for contributors; the workspace map is ARCHITECTURE.md.)
//!
//! Owns the machine's slot pool in one slot directory (seed 001 rules 3 and 4).
//! `Pool::new(Resolved)` wraps the resolved directory, its `Locations` and its `Environment`
//! (for the config and drain re-reads); `Pool::open(Located)` does the same without a config
//! ever loaded: the pool never keeps the caps, every agent or test-run take reads them
//! (`Pool::config`, `take::Error::Config` while the file is broken), and STOP, the drain, the
//! idle probe and the snapshot work whatever it holds; `with_clock` injects the `Clock` used for
//! drain decisions and record times.
//!
//! - `try_take(Kind, &Request) -> Result<Take, take::Error>` never waits. `Kind` is `Agent`,
//!   `Test { limit_ms }` or `FullRun`; `Take` is `Held(Slot)` or `Blocked(Blocker)`. It checks STOP,
//!   then the drain; for agents and test runs it reads the cap from the config, holds `slots.lock`
//!   (tried at least once, then every millisecond for about 2 s, else `Blocker::Counting`), checks
//!   STOP and drain again, counts the live `<prefix>-<i>.lock` files, and below the cap acquires
//!   the first index not live, publishing a new record or taking over a dead one; then releases
//!   `slots.lock`. The full run acquires `full-run.lock` directly.
//! - `try_take` takes its turn in the waiting line (`line.rs`): while a live entry of its kind
//!   stands before the place it would take (`try_take_at(.., priority, start_ms)`; `try_take` is
//!   priority 0, now) it is `Blocker::InLine`. The dispatcher admits each row with its own
//!   priority and original start, and stands in the line with the entry of its first queued
//!   row (`Dispatcher::stand`, after every tick, admission, cancel and recovery).
//! - `take(Kind, &Request, Wait)` joins the line (`join_line`: an entry
//!   `line-<kind>.<priority>.<start>.<token>`, a process-liveness lease of this process), and at
//!   each look asks `standing` (the entries before it, probed from the front, dead ones retired);
//!   only at the head does it call the counting take. It sleeps in `watch.rs` (inotify on the
//!   slot directory, woken by a slot record of its kind, an entry of its line, STOP, the drain flag
//!   or the config; else a sleep), doubling up to `LOOK_AGAIN_AT_MOST` between looks
//!   when nothing wakes it. `Wait::on_wait` gets a `Waiting` (blocker, time waited, position,
//!   line length); STOP and drain end the wait at once, other blockers only at `Wait::timeout`,
//!   whose deadline also cuts short the `slots.lock` wait. Every way out leaves the line
//!   (`Place::leave`: release, then `worklane_lease::retire` removes the entry's epoch and guard).
//! - Counting (`state_of`): a held guard is live (`SlotState::GuardHeld`); with the guard free,
//!   no record is dead, an unparsable record live (`Malformed`), and otherwise the liveness
//!   judges it. `slot_index` parses `<prefix>-<i>.lock` (plain decimal, no leading zeros).
//! - `Blocker` (`pool/blocker.rs`): `Stop`, `Drain`, `AtCap {held, cap}` (a take of weight
//!   1), `NoRoom {held, cap, need}` (a heavier one), `Share(ShareUsed {owner, held, share,
//!   need, holdings})`, `FullRunHeld(Refusal)`, `Counting`, `InLine {ahead, held, cap}`;
//!   `held` is in units. `is_operator_refusal()` for STOP and drain. A `Slot` is `#[must_use]`,
//!   released on drop or by `release()`; it knows its `weight()` and `share_owner()`.
//! - Weights (`weight.rs`): `Weight::of(record)` reads `weight` (absent, whole 1..=u32::MAX, or
//!   bad); `weight::counted(state, weight, cap)` is what a slot counts for: its weight cut to
//!   the cap when its holder is proved live (guard held, or alive by identity), 1 when it
//!   counts live only because it cannot be judged, 0 when gone. `pool/count.rs` keeps, for
//!   each slot, its verdict, weight and `shareOwner` (`Counted`), reading a held guard's
//!   record once (`recordless_held` skips the indexes the listing showed a record for).
//! - Shares (`share.rs`): `Ask {weight, owner}` (default: 1, `Owner::of_process()`),
//!   `resolve(shares, owner) -> ShareOf {owner: ShareKey, ceiling}` (tag, then uid, then group by
//!   smallest share, then the uid under `*`); `take.rs`'s `asked` checks the weight against the cap
//!   and the ceiling (`take::Error::Weight`, `take::Error::WeightOverShare`) and the take writes
//!   `weight` and `shareOwner` into its record and its line entry. Under `slots.lock` the take
//!   checks its owner's share, then its turn, then the cap (`pool/turn.rs`). With shares (agents),
//!   the turn is `share::turn` over the line's entries (their records' weight and owner) in the
//!   fair order `Use::order` (priority, then held/share of the owner, entries without an owner
//!   last, then start, then token); every look of a waiting take is decided under `slots.lock`, so
//!   all waiters see one order. Without shares the line is the name order (priority, start, token)
//!   as before. The dispatcher chooses among its rows' owners the same way (`Store::queued_heads`,
//!   one head per enqueuer uid and tag), stands for that row's weight and owner, and parks a row
//!   whose weight the cap or its share can never admit (`worklane-dispatch`'s
//!   `service/weights.rs`).
//! - After counting, an agent or test-run take skips an index whose guard is a stray (directory,
//!   FIFO, link, non-empty file: `broken_guard`) and, before releasing `slots.lock`, sweeps the
//!   temp files killed writers left (`SlotDir::sweep_temps`, older than a minute and unlocked).
//! - `problems.rs`: `Problem {name, what, fix, blocks}`, every stray or broken file (a guard that
//!   is not an empty regular file, a garbage claim, an old temp file) with what it does and the
//!   command that fixes it; in `Snapshot::problems`. Also the STOP and drain flag's
//!   diagnoses, for the views and for the operator commands that could not change them.
//! - `recorded_commands()`: every record's `commandProcess` with the record file's owner uid (read
//!   from the same open file), the input of `stop-all`'s enforcement.
//! - `snapshot() -> Snapshot {dir, config, stop, drain, slots: Vec<SlotView>, problems, line}`
//!   (each `SlotView` with its `weight`, `units` and `share_owner`; `held_units(kind)`,
//!   `share_uses()` and `holdings(owner)` sum them; a weight that does not count as written
//!   is a `Problem`) (its
//!   `config` a `Result`: the caps, or the typed `config::Error` that keeps them from use) is what
//!   `worklane slots` shows; each `SlotView` has `name`, `kind` (`agent`, `test`, `full-run`,
//!   `role`, `lease`, `lock`), the parsed `record` and a `SlotState`. `idle()` is the idle probe: no live
//!   `full-run.lock`.
//! - `protocol` module: `protocol.json` (`Protocol {version, level, extensions}`), `LEVEL` 1 and
//!   the `KNOWN` extensions (`weights`); every take (`try_take_until`) checks it first and
//!   refuses with `take::Error::Protocol` (a higher level, an unknown extension, an
//!   unreadable file); a take of weight above 1, or under `shares`, declares `weights` under
//!   `slots.lock` (`Pool::declare_held`; an operator's change, `Pool::declare_extension`; a
//!   use written under the same hold, such as a run naming its cgroup, `Pool::using_extension`);
//!   `Pool::drop_extension` removes one when nothing uses it.
//! - `stop` module: `Stop {by, at, reason}`, `read` (an unreadable STOP is still a STOP),
//!   `write` (replace, `SHARED_MODE` 0660; an empty directory at the name is removed first,
//!   `replace_over_empty_dir`), `remove` (`remove_entry`). `drain` module: `Drain {since, until, to}` (`to`
//!   always serialized, `null` when not given)
//!   and the pure `DrainState::decide(raw, now_ms)` (`None`, `InForce`, `Ignored(Expired |
//!   TooFarAhead | Unreadable)`; in force while `now < until` and `until - now <=
//!   MAX_DRAIN_AHEAD_MS`). `Pool::drain`, `write_drain` (mode 0644, over an empty directory too)
//!   and `remove_drain` (`remove_entry`) use `Locations::drain_dir`.
//! - Errors: one enum per operation, as in `worklane-lease`. Each variant names its step and
//!   subject and carries the typed cause (slotfile's, guard's or lease's error) as its source,
//!   never repeated in its message; the CLI maps each cause's kind to an exit code. The pool's
//!   own operations have theirs in `error.rs` (modules `take`, `slot`, `operator`, re-exported
//!   at the root); each public module has its own.
//!   - `look::Error` (`look.rs`, a leaf): the steps every operation shares, `Name`, `List`,
//!     `Probe`, `Judge`. The views return it (`snapshot`, `snapshot_retiring`, `idle`,
//!     `recorded_commands`, `line_views`, `line`, `standing`, `held_by_owner`), and so does
//!     reading STOP and the drain flag (`stop`, `drain`, `operator_blocker`, `stop::read`);
//!     every other enum embeds it as `Look` (transparent, `From`), shown as it is.
//!   - `take::Error`: the take (`try_take` and kin, `admit`, `take` and kin, `join_line` and
//!     kin, `check_ask`, `may_fit`, `config`): `Config`, `Look`, `Count`/`Counted`
//!     (`slots.lock` for a kind), `Take {kind}`, `Protocol`, `WriteProtocol` (declaring
//!     `weights`), `NoFreeIndex`, `JoinLine {kind}`, `LineFull`, `Weight`, `WeightOverShare`.
//!   - `slot::Error`: a held or handed-over slot (`Pool::adopt`, `Slot::annotate`,
//!     `Slot::release`): `NotASlot`, `AdoptGuard`, `Look`, `Adopt`, `PoolField`, `Annotate`,
//!     `Release`.
//!   - `operator::Error`: STOP and the drain flag written or removed (`stop::write`,
//!     `stop::remove`, `write_drain`, `remove_drain`): `Look`, `WriteStop`, `RemoveStop`,
//!     `DrainDir`, `WriteDrain`, `RemoveDrain`.
//!   - `protocol::Error` (`protocol.rs`): `protocol.json` changed (`declare_extension`,
//!     `drop_extension`) or not kept (`Pool::protocol`): `Protocol`, `Look`, `SlotsLockBusy`,
//!     `Count`/`Counted`, `WriteProtocol`.
//!   - `role::Error` (`role.rs`): `try_take_role`: `Protocol`, `Look`, `Role`. `role/holder.rs`
//!     and `role/wait.rs`: the holder and advice of a refusal, and the wait.
//!   - `line::Error` (`line.rs`): `Place::leave`: `LeaveLine`, `Retire`.
//!
//!   A step two operations share (`Protocol`, `Count`, `Counted`, `WriteProtocol`) is a
//!   variant of each, with the same message. The declaration of an extension that a take and
//!   `declare_extension` share (`declare_held`) fails with the private `Undeclared`, which
//!   each turns into its own.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod drain;
mod error;
pub mod line;
pub mod look;
mod names;
mod pool;
mod problems;
pub mod protocol;
pub mod role;
pub mod share;
pub mod stop;
pub mod watch;
pub mod weight;

pub use drain::{Drain, DrainState, MAX_DRAIN_AHEAD_MS};
pub use error::{operator, slot, take};
pub use pool::{
    Blocker, Dropped, FULL_RUN_LOCK, Holding, Kind, LOOK_AGAIN_AT_MOST, Pool, RecordedCommand,
    SLOTS_LOCK, SWEEP_EVERY_MS, ShareUse, ShareUsed, Slot, SlotState, SlotView, Snapshot, Take,
    Wait, Waiting, owner_words, slot_index,
};
pub use problems::{
    Problem, drain_not_removed, drain_not_written, drain_problem, stop_not_removed,
    stop_not_replaced, stop_problem,
};
pub use share::{Ask, Owner, ShareOf};
pub use stop::{STOP_FILE, Stop};
pub use weight::Weight;
