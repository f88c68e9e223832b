//! The worklane config file as an operator changes it, for the CLI's `config get`/`set`/
//! `unset` and any Rust program that sets the caps itself:
//!
//! - [`Key`] (`key.rs`): each key `config get`/`set` knows, with its name in the file, its
//!   default and its value parsed from text (feature `clap`: a `clap::ValueEnum`).
//! - [`file`](mod@file): the config in force read as its readers read it ([`file::in_force`]), and
//!   changed as a whole ([`file::edit`]): checked as every reader will check it (the caps and
//!   unknown keys as `worklane_slotfile::Config` does, the dispatcher's keys as the dispatcher
//!   does), replaced atomically, every other key kept.
//!
//! What the keys mean, and the file's format, are in worklane's `PROTOCOL.md` (section 1) and
//! `docs/cli.md` (`worklane config`).

pub mod file;
mod key;

pub use key::Key;
