//! Distributed building blocks on the host side: process groups, the device mesh and the ring
//! cost model of collectives (DESIGN.md section 6).
//!
//! Rank `r` runs on `neuron:r` of the [`Topology`](crate::device::Topology), so which chip a
//! rank is on, and therefore whether a collective's traffic crosses NeuronLink, comes from the
//! topology.
//!
//! - [`group`]: [`ProcessGroup`], a validated, ordered set of ranks.
//! - [`mesh`]: [`DeviceMesh`], an n-dimensional named layout of ranks, sliced by dimension name.
//! - [`cost`]: [`collective_cost`], the modeled time of a collective on a group.

pub mod cost;
pub mod group;
pub mod mesh;

pub use cost::{collective_cost, Collective, CollectiveCost, STEP_LATENCY_S};
pub use group::ProcessGroup;
pub use mesh::DeviceMesh;
