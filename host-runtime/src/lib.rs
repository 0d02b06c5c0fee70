//! `neuronlab-runtime`: everything the neuronlab host does.
//!
//! - [`tensor`]: dtypes, strided tensors with views, storage, numpy-style formatting.
//! - [`ops`]: the op registry (the single source of truth for an op) and the CPU kernels.
//! - [`device`]: the simulated Neuron topology, HBM accounting and the roofline cost model.
//! - [`events`]: the typed event stream, its bus, summaries and Chrome trace export.
//! - [`runtime`]: the eager runtime that ties them together: dispatch, timing, events.
//! - [`compile`]: traced graphs, guards, passes and the program caches.
//! - [`sandbox`]: WebAssembly guests and the host side of the guest ABI.
//! - [`dist`]: process groups, the device mesh, collectives between ranks, distributed
//!   tensors and the ring cost model.
//! - [`spmd`]: the launcher that runs one module as N ranks.
//! - [`session`]: the session engine behind the REPL and the Jupyter kernel: cells, magics,
//!   variables, completion.
//! - [`plot`]: plots guests ask for: the checked spec, drawn as SVG and as text.
//! - [`vars`]: session variables, the tensors and values cells leave for later cells.

pub mod cancel;
pub mod compile;
pub mod device;
pub mod dist;
pub mod error;
pub mod events;
pub mod ops;
pub mod plot;
pub mod runtime;
pub mod sandbox;
pub mod session;
pub mod spmd;
pub mod tensor;
pub mod toolchain;
pub mod vars;

pub use error::{Error, Result};
pub use runtime::Runtime;
pub use tensor::{DType, Tensor};
