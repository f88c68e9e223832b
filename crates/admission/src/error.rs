//! Why an operation of the pool failed, one enum per operation whose code is the pool's own
//! (`pool/`): taking a slot ([`take::Error`]), handling a held or handed-over slot
//! ([`slot::Error`]) and the operator's changes to STOP and the drain flag
//! ([`operator::Error`]). The crate root re-exports each module. The public modules have
//! their own: `look::Error` (the steps every operation shares, embedded as `Look` in each
//! error but `line::Error`), `protocol::Error`, `role::Error` and `line::Error`.
//!
//! Each variant names the step that failed and what it was done on; the cause is its source,
//! never repeated in its message.

/// Why a take failed.
pub mod take {
    use std::path::PathBuf;

    /// Why a take could not be made (being blocked is not an error: it is
    /// [`Take::Blocked`](crate::Take::Blocked)): [`Pool::try_take`](crate::Pool::try_take) and
    /// its kin (`try_take_at`, `try_take_for`, `try_take_as`, `try_take_as_for`), the
    /// dispatcher's [`Pool::admit`](crate::Pool::admit), the waiting
    /// [`Pool::take`](crate::Pool::take) (`take_unless`, `take_for`, `take_for_unless`), a place
    /// in its line ([`Pool::join_line`](crate::Pool::join_line), `join_line_at`,
    /// `join_line_for`), and the looks that read the caps as a take does
    /// ([`Pool::config`](crate::Pool::config), [`Pool::check_ask`](crate::Pool::check_ask),
    /// [`Pool::may_fit`](crate::Pool::may_fit)).
    ///
    /// They go through the same steps (the config, `protocol.json`, STOP and the drain flag,
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
        /// The directory could not be looked at (a file's name, the listing, a slot's guard or
        /// record).
        #[error(transparent)]
        Look(#[from] crate::look::Error),
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
        /// `protocol.json` could not be written to declare the extension a take uses.
        #[error("cannot write protocol.json in {}", dir.display())]
        WriteProtocol {
            /// The slot directory.
            dir: PathBuf,
            /// Why.
            #[source]
            source: worklane_slotfile::write::Error,
        },
        /// Every slot index of a kind up to the largest is held, broken or spent (PROTOCOL.md
        /// 12.2 step 6): none can be taken.
        #[error(
            "no {kind} slot index is left to take: every one up to 4294967295 is held, broken \
             or spent"
        )]
        NoFreeIndex {
            /// The kind.
            kind: &'static str,
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
            "cannot take a place in the waiting line: 4 random entry names were taken (a \
             writer outside the protocol is making line-* files?)"
        )]
        LineFull,
        /// A take's weight is 0 or above its kind's cap (1 for the full run): it could never
        /// be admitted.
        #[error(
            "a take of weight {weight} cannot be admitted: the weight of a take of kind {kind} \
             is from 1 to its cap, {cap} units"
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
            "a take of weight {weight} cannot be admitted: the share of {owner} is {share} \
             units (the config's `shares`)"
        )]
        WeightOverShare {
            /// The owner it counts against (`uid:1001`, `group:ci`, `owner:nightly`).
            owner: String,
            /// The weight asked.
            weight: u32,
            /// The owner's share.
            share: u32,
        },
    }
}

/// Why a held or handed-over slot could not be handled.
pub mod slot {
    /// Why a slot could not be taken over ([`Pool::adopt`](crate::Pool::adopt)), annotated
    /// ([`Slot::annotate`](crate::Slot::annotate)) or released
    /// ([`Slot::release`](crate::Slot::release)).
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// A name handed over as a slot is none (`agent-<i>.lock`, `test-<i>.lock`,
        /// `job-<i>.lock`, `full-run.lock`).
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
        /// The handed-over slot's file could not be named to read its record.
        #[error(transparent)]
        Look(#[from] crate::look::Error),
        /// A handed-over slot's lease could not be adopted.
        #[error("cannot take over slot {slot}")]
        Adopt {
            /// The slot's file name.
            slot: String,
            /// Why.
            #[source]
            source: worklane_lease::adopt::Error,
        },
        /// A field the pool writes itself (`weight`, `shareOwner`) was to be changed on a held
        /// slot's record.
        #[error(
            "cannot annotate slot {slot} with `{field}`: the pool sets it when it takes the slot"
        )]
        PoolField {
            /// The slot's file name.
            slot: String,
            /// The field.
            field: String,
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
}

/// Why an operator's change did not go through.
pub mod operator {
    use std::path::PathBuf;

    /// Why STOP or the drain flag could not be written or removed
    /// ([`stop::write`](crate::stop::write), [`stop::remove`](crate::stop::remove),
    /// [`Pool::write_drain`](crate::Pool::write_drain),
    /// [`Pool::remove_drain`](crate::Pool::remove_drain)).
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// The file's name was refused.
        #[error(transparent)]
        Look(#[from] crate::look::Error),
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
    }
}
