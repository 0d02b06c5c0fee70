//! The simulated Neuron device: which cores exist, how much memory each has, and what an op
//! would cost on them.
//!
//! - [`topology`]: instance presets, logical NeuronCores, the process's visible cores.
//! - [`figures`]: the one table of published hardware figures (and labelled model assumptions).
//! - [`memory`]: per-core HBM quotas and the real host-memory cap.
//! - [`role`]: what a core's bytes hold, for the per-role breakdown.
//! - [`host`]: the host-memory limit from the environment and `/proc/meminfo`.
//! - [`cost`]: the roofline cost model that turns an op's work into modeled device time.

pub mod cost;
pub mod figures;
pub mod host;
pub mod memory;
pub mod role;
pub mod topology;

pub use cost::{Bound, CostModel, Engine, MatmulDims, ModeledTime, OpCost, SYSTOLIC_DIM};
pub use figures::{ChipFigures, Generation, InstanceFigures};
pub use host::{host_limit_from_env, parse_byte_size, HostLimitError, HOST_MEM_LIMIT_VAR};
pub use memory::{Allocation, DeviceMemory, MemStats, MemoryError};
pub use role::{Role, RoleBytes};
pub use topology::{
    parse_core_list, CoreId, Topology, TopologyError, INSTANCE_VAR, LNC_VAR, VISIBLE_CORES_VAR,
};
