//! The view crate's tests: a real slot pool in a temp directory, real guards and records.

mod metrics;
mod serve;
mod slots;
mod support;
mod why;
mod words;
