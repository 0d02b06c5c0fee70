//! Compile: graphs of registry ops, their optimization and execution, and the caches and
//! guards that decide when a graph compiles and when it is reused (docs/compile.md).
//!
//! - [`graph`]: the IR and its structural hash.
//! - [`recorder`]: recording ops into a pending graph and flushing it (lazy mode, graph
//!   breaks, tracing), and the session's program cache by graph hash.
//! - [`disk`]: the on-disk program cache under that, and the compiler version that keys it;
//!   `serial` is the entries' serialized form.
//! - [`guards`]: call signatures, guards and readable recompile reasons.
//! - [`function`]: compiled functions: their versions, recompile limit, breaks, `explain`.
//! - [`captures`]: what a function reads and writes besides its arguments (parameters,
//!   optimizer state, gradients), guarded at each call and written back after each run.
//! - [`autodiff`]: gradients inside a trace: backward appended to the traced graph.
//! - [`passes`]: the optimization passes, from dead code to fusion and buffer reuse.
//! - [`program`]: `optimize`, and the program it makes: kernels run on a core, `explain`.

#![deny(missing_docs)]

pub mod autodiff;
pub mod captures;
pub mod disk;
pub mod function;
mod fused;
pub mod graph;
pub mod guards;
pub mod passes;
pub mod program;
pub mod recorder;
mod serial;

pub use graph::{Graph, Node, Part, Producer, ValueId};
