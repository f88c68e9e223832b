//! Why the pool's directory could not be looked at: the steps every operation of the pool
//! shares (naming one of its files, listing the directory, probing a slot's guard and reading
//! its record to judge its holder). A leaf: each operation's own error embeds this one.

use std::path::PathBuf;

/// Why the slot directory could not be looked at. It is what the views return
/// ([`Pool::snapshot`](crate::Pool::snapshot), [`Pool::idle`](crate::Pool::idle),
/// [`Pool::recorded_commands`](crate::Pool::recorded_commands),
/// [`Pool::line_views`](crate::Pool::line_views), [`Pool::line`](crate::Pool::line),
/// [`Pool::standing`](crate::Pool::standing), [`Pool::held_by_owner`](crate::Pool::held_by_owner))
/// and what reading STOP and the drain flag returns ([`Pool::stop`](crate::Pool::stop),
/// [`Pool::drain`](crate::Pool::drain), [`stop::read`](crate::stop::read)); the error of
/// every other operation but leaving the line embeds it as its variant `Look`, shown as it is.
/// Each variant names the step that failed and what it was done on; the cause is its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
}
