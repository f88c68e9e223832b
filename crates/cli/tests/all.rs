//! CLI integration tests.
