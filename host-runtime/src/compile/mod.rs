//! Compile: graphs of registry ops, their optimization and execution, and the caches and
//! guards that decide when a graph compiles and when it is reused (DESIGN.md section 5).
//!
//! - [`graph`]: the IR and its structural hash.

pub mod graph;

pub use graph::{Graph, Node, Producer, ValueId};
