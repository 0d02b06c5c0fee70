//! End-to-end tests for neuronlab live in `tests/tests/`; `src/bin/opcheck.rs` is the bridge
//! the numpy cross-check drives.
