//! Integration tests of `worklane-admission`: real slot directories in temp dirs, real
//! guards, real dead processes. One binary, a module per behaviour.
//!
//! Tests run on several threads, and a child being started by one holds copies of every
//! descriptor of the process until it execs, a guard's included. So processes are started
//! through the fork gate, and every pool call that takes and releases guards (`slots.lock`
//! on every take, a slot's guard on a refusal or a probe) runs with the gate quiet, as does
//! the release of a slot, when a later step needs those guards free.

mod support;
use support::*;

mod agents;

mod operator;

mod runs;

mod waiting;

mod model;

mod texts;

mod handles;

mod leftovers;

mod strays;

mod problems;

mod protocol;

mod line;

mod sweep;

mod commands;

mod kinds;

mod drains;

mod retries;
mod role;

mod other_user;

mod weights;

mod journal;
