//! The limits a guest runs under. Each has a safe default and can be changed per run.

use std::time::Duration;

/// Resource limits for one guest instance.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Wall-clock time one call into the guest may take before it is stopped.
    pub deadline: Duration,
    /// The largest linear memory the guest may grow to, in bytes.
    pub memory_bytes: usize,
    /// The largest table the guest may have, in elements.
    pub table_elements: usize,
    /// The wasm call stack, in bytes: deeper recursion traps with a stack overflow.
    pub wasm_stack_bytes: usize,
    /// The native stack of the thread the guest runs on. Larger than `wasm_stack_bytes` plus
    /// the host's own frames, so a deep guest recursion traps instead of aborting the process.
    pub host_stack_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(60),
            memory_bytes: 1 << 30,
            table_elements: 100_000,
            wasm_stack_bytes: 1 << 20,
            host_stack_bytes: 16 << 20,
        }
    }
}
