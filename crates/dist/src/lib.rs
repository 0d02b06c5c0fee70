//! Distributed building blocks on the host side: process groups, the device mesh and the ring
//! cost model of collectives (DESIGN.md section 6).
//!
//! Rank `r` runs on `neuron:r` of the [`Topology`](neuronlab_core::device::Topology), so which chip a
//! rank is on, and therefore whether a collective's traffic crosses NeuronLink, comes from the
//! topology.
//!
//! - [`group`]: [`ProcessGroup`], a validated, ordered set of ranks.
//! - [`mesh`]: [`DeviceMesh`], an n-dimensional named layout of ranks, sliced by dimension name.
//! - [`cost`]: [`collective_cost`], the modeled time of a collective on a group.

#![deny(missing_docs)]

pub mod comm;
pub mod cost;
pub mod dtensor;
pub mod group;
pub mod kernels;
pub mod mesh;
pub mod placement;

pub use comm::{RankComm, World, WorldOptions, DEFAULT_COLLECTIVE_TIMEOUT};
pub use cost::{collective_cost, Collective, CollectiveCost, STEP_LATENCY_S};
pub use dtensor::{plan_redistribute, shard_layout, DTensor, RedistributeStep};
pub use group::ProcessGroup;
pub use kernels::ReduceOp;
pub use mesh::DeviceMesh;
pub use placement::{format_placements, Placement};
