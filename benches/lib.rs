//! Benchmarks only: see `benches/` and `BENCHMARKS.md`.
