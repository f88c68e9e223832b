//! Why the pool could not do what was asked: one enum for every operation, each variant the
//! step that failed, with what it was done on, and its cause as the source.

use std::path::PathBuf;

/// Why the pool could not do what was asked (being blocked is not an error: it is
/// [`Take::Blocked`](crate::Take::Blocked)). Each variant names the step that failed and what it was done on; the
/// cause is its source.
///
/// One enum for every operation: taking, waiting, the snapshot, the idle probe and the
/// dispatcher all go through the same steps (reading the config, STOP and the drain flag,
/// counting under `slots.lock`, standing in line), so a caller maps each step once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config could not be read for the caps, or is invalid.
    #[error("cannot load the pool's caps")]
    Config {
        /// Why (it names the file).
        #[source]
        source: worklane_slotfile::config::Error,
    },
    /// The name of a file of the pool was refused.
    #[error("cannot name the pool's file {name:?}")]
    Name {
        /// The name.
        name: String,
        /// Why.
        #[source]
        source: worklane_slotfile::name::Error,
    },
    /// The slot directory could not be listed.
    #[error("cannot list the pool's files in {}", dir.display())]
    List {
        /// The slot directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: worklane_slotfile::open::Error,
    },
    /// A slot's guard could not be probed to judge its holder.
    #[error("cannot probe the guard of {slot} to judge its holder")]
    Probe {
        /// The slot's file name.
        slot: String,
        /// Why.
        #[source]
        source: worklane_guard::acquire::Error,
    },
    /// A slot's record could not be read to judge its holder.
    #[error("cannot read the record of {slot} to judge its holder")]
    Judge {
        /// The slot's file name.
        slot: String,
        /// Why.
        #[source]
        source: worklane_slotfile::read::Error,
    },
    /// `slots.lock` could not be taken to count slots.
    #[error("cannot take slots.lock to count {kind} slots")]
    Count {
        /// The kind counted ([`Kind::label`](crate::Kind::label)).
        kind: &'static str,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::acquire::Error>,
    },
    /// `slots.lock` could not be released after counting.
    #[error("cannot release slots.lock after counting {kind} slots")]
    Counted {
        /// The kind counted ([`Kind::label`](crate::Kind::label)).
        kind: &'static str,
        /// Why.
        #[source]
        source: worklane_lease::held::Error,
    },
    /// A slot could not be taken (not busy: broken).
    #[error("cannot take a slot of kind {kind}")]
    Take {
        /// The kind ([`Kind::label`](crate::Kind::label)).
        kind: &'static str,
        /// Why; it names the slot (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::acquire::Error>,
    },
    /// The directory's protocol (`protocol.json`) asks what this worklane cannot keep.
    #[error("cannot act in the slot directory {}", dir.display())]
    Protocol {
        /// The slot directory.
        dir: PathBuf,
        /// Why.
        #[source]
        why: crate::protocol::Unsupported,
    },
    /// Every slot index of a kind up to the largest is held, broken or spent (PROTOCOL.md
    /// 12.2 step 6): none can be taken.
    #[error(
        "no {kind} slot index is left to take: every one up to 4294967295 is held, broken or spent"
    )]
    NoFreeIndex {
        /// The kind.
        kind: &'static str,
    },
    /// `slots.lock` stayed held by another process for about 2 s.
    #[error(
        "slots.lock in {} stayed held for 2 s: is its holder stopped? (`worklane slots` names it)",
        dir.display()
    )]
    SlotsLockBusy {
        /// The slot directory.
        dir: PathBuf,
    },
    /// `protocol.json` could not be written.
    #[error("cannot write protocol.json in {}", dir.display())]
    WriteProtocol {
        /// The slot directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: worklane_slotfile::write::Error,
    },
    /// STOP could not be written.
    #[error("cannot write STOP in {}", dir.display())]
    WriteStop {
        /// The slot directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: worklane_slotfile::write::Error,
    },
    /// STOP could not be removed.
    #[error("cannot remove STOP from {}", dir.display())]
    RemoveStop {
        /// The slot directory.
        dir: PathBuf,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_slotfile::remove::Error>,
    },
    /// The drain flag's directory could not be opened.
    #[error("cannot open the drain flag's directory {}", dir.display())]
    DrainDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: worklane_slotfile::open::Error,
    },
    /// The drain flag could not be written.
    #[error("cannot write the drain flag in {}", dir.display())]
    WriteDrain {
        /// The drain flag's directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: worklane_slotfile::write::Error,
    },
    /// The drain flag could not be removed.
    #[error("cannot remove the drain flag from {}", dir.display())]
    RemoveDrain {
        /// The drain flag's directory.
        dir: PathBuf,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_slotfile::remove::Error>,
    },
    /// A role's lease could not be tried (not held by another: broken).
    #[error("cannot take the lease of role {role}")]
    Role {
        /// The role.
        role: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::acquire::Error>,
    },
    /// No place in the line could be taken (not busy: broken).
    #[error("cannot join the line for a slot of kind {kind}")]
    JoinLine {
        /// The kind waited for ([`Kind::label`](crate::Kind::label)).
        kind: &'static str,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::acquire::Error>,
    },
    /// No place in line could be taken: every random entry name tried was taken already.
    #[error(
        "cannot take a place in the waiting line: 4 random entry names were taken (a writer \
         outside the protocol is making line-* files?)"
    )]
    LineFull,
    /// A place in line could not be left: its entry's record could not be released.
    #[error("cannot leave the line: the record of entry {entry} cannot be released")]
    LeaveLine {
        /// The entry's file name.
        entry: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::held::Error>,
    },
    /// A line entry (a place left, or a dead waiter's) could not be retired.
    #[error("cannot retire line entry {entry}")]
    Retire {
        /// The entry's file name.
        entry: String,
        /// Why.
        #[source]
        source: worklane_guard::reclaim::Error,
    },
    /// A name handed over as a slot is none (`agent-<i>.lock`, `test-<i>.lock`,
    /// `full-run.lock`).
    #[error("{name:?} is not a slot's name (agent-<i>.lock, test-<i>.lock or full-run.lock)")]
    NotASlot {
        /// The name given.
        name: String,
    },
    /// The descriptor handed over as a slot's guard is not that guard, or not held.
    #[error("cannot check the descriptor handed over as the guard of slot {slot}")]
    AdoptGuard {
        /// The slot's file name.
        slot: String,
        /// Why.
        #[source]
        source: worklane_guard::acquire::Error,
    },
    /// A handed-over slot's lease could not be adopted.
    #[error("cannot take over slot {slot}")]
    Adopt {
        /// The slot's file name.
        slot: String,
        /// Why.
        #[source]
        source: worklane_lease::adopt::Error,
    },
    /// Fields could not be added to a held slot's record.
    #[error("cannot annotate the record of slot {slot}")]
    Annotate {
        /// The slot's file name.
        slot: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::held::Error>,
    },
    /// A take's weight is 0 or above its kind's cap (1 for the full run): it could never be
    /// admitted.
    #[error(
        "a take of weight {weight} cannot be admitted: the weight of a take of kind {kind} is \
         from 1 to its cap, {cap} units"
    )]
    Weight {
        /// The kind taken ([`Kind::label`](crate::Kind::label)).
        kind: &'static str,
        /// The weight asked.
        weight: u32,
        /// The kind's cap in force.
        cap: u32,
    },
    /// A take's weight is above its owner's share: it could never be admitted.
    #[error(
        "a take of weight {weight} cannot be admitted: the share of {owner} is {share} units \
         (the config's `shares`)"
    )]
    WeightOverShare {
        /// The owner it counts against (`uid:1001`, `group:ci`, `owner:nightly`).
        owner: String,
        /// The weight asked.
        weight: u32,
        /// The owner's share.
        share: u32,
    },
    /// A field the pool writes itself (`weight`, `shareOwner`) was to be changed on a held
    /// slot's record.
    #[error("cannot annotate slot {slot} with `{field}`: the pool sets it when it takes the slot")]
    PoolField {
        /// The slot's file name.
        slot: String,
        /// The field.
        field: String,
    },
    /// A held slot could not be released cleanly.
    #[error("cannot release slot {slot}")]
    Release {
        /// The slot's file name.
        slot: String,
        /// Why (boxed: a large cause).
        #[source]
        source: Box<worklane_lease::held::Error>,
    },
}
