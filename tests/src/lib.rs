//! End-to-end tests for neuronlab live in `tests/tests/` and `tests/python/`. The binaries in
//! `src/bin/` serve them: `opcheck` is the bridge the numpy cross-check drives, and
//! `sdk_codegen` writes the guest SDK's op methods (`guest-sdk/src/ops.rs`) from the registry.
