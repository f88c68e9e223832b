//! Integration tests of `worklane-dispatch`: real slot directories in temp dirs, real guards
//! handed over as descriptors, real SQLite, a real Unix socket. One binary, a module per
//! operation.
//!
//! Tests run on several threads, and a child being started by one holds copies of every
//! descriptor of the process until it execs, a guard's included. So processes are started
//! through the fork gate, and every call that takes and releases guards runs with the gate
//! quiet.

mod support;

mod journal;
mod lanes;
mod runs;
mod server;
mod service;
mod state;
mod ticks;

use support::*;
