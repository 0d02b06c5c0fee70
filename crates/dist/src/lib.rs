//! `neuronlab-dist`: ranks that meet in collectives, on the host. Its job is the semantics of
//! torch.distributed over simulated NeuronCores: process groups, the device mesh, collectives
//! that move real data between the ranks of one process, distributed tensors, and the ring
//! cost model of what each collective would take on the device (docs/collectives.md).
//!
//! Rank `r` runs on `neuron:r` of the [`Topology`](neuronlab_core::device::Topology), so which
//! chip a rank is on, and therefore whether a collective's traffic crosses NeuronLink, comes
//! from the topology.
//!
//! - [`group`]: [`ProcessGroup`], a validated, ordered set of ranks.
//! - [`mesh`]: [`DeviceMesh`], an n-dimensional named layout of ranks, sliced by dimension name.
//! - [`comm`]: [`World`] and [`RankComm`]: the ranks of one launch and where they meet.
//! - [`combine`]: the data of collectives: reduce ops and their in-order fold, `torch.chunk`
//!   sizes, concatenation and splits.
//! - [`placement`] and [`dtensor`]: placements and distributed tensors.
//! - [`ring_cost`]: [`collective_cost`], the modeled time of a collective on a group.

#![deny(missing_docs)]

pub mod combine;
pub mod comm;
pub mod dtensor;
pub mod group;
pub mod mesh;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod peers;
pub mod placement;
pub mod ring_cost;

pub use combine::{chunk_sizes, ReduceOp};
pub use comm::{RankComm, World, WorldOptions, DEFAULT_COLLECTIVE_TIMEOUT};
pub use dtensor::{plan_redistribute, shard_layout, DTensor, RedistributeStep};
pub use group::ProcessGroup;
pub use mesh::DeviceMesh;
pub use placement::{format_placements, Placement};
pub use ring_cost::{collective_cost, Collective, CollectiveCost, STEP_LATENCY_S};
