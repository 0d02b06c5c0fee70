//! The ring cost model of collectives: what each would take on the device (docs/cost-model.md).
//!
//! For a group of `n` ranks, a message of `S` bytes and a ring whose slowest link has
//! bandwidth `B`, the modeled time is `transfer + steps * STEP_LATENCY_S` with:
//!
//! | op             | transfer              | steps      |
//! |----------------|-----------------------|------------|
//! | all_reduce     | `2(n-1)/n * S/B`      | `2(n-1)`   |
//! | all_gather     | `(n-1)/n * S/B`       | `n-1`      |
//! | reduce_scatter | `(n-1)/n * S/B`       | `n-1`      |
//! | all_to_all     | `(n-1)/n * S/B`       | `n-1`      |
//! | broadcast      | `S/B`                 | `n-1`      |
//!
//! `S` is as nccl-tests counts it: the buffer on each rank for all_reduce and broadcast, the
//! gathered output for all_gather, the input that is scattered for reduce_scatter, and each
//! rank's whole send buffer for all_to_all.
//!
//! - all_reduce is a reduce-scatter then an all-gather around the ring, each `n-1` steps in
//!   which every rank sends `S/n` bytes to its neighbour.
//! - all_to_all is modeled as `n-1` pairwise-exchange steps in which every rank sends its
//!   `S/n` block for one peer; this assumes each pair gets bandwidth `B` (the bound a
//!   full-bandwidth fabric reaches), not the extra hops a strict ring would need.
//! - broadcast is a pipelined ring: the message is cut into many chunks that flow from the
//!   root around the ring. Every byte must leave the root over its one outgoing link, so the
//!   transfer is `S/B` (nccl-tests' bus bandwidth factor 1), not `(n-1)/n * S/B`, which
//!   would beat that bound; filling the pipeline costs the `n-1` step latencies.
//!
//! `B` comes from the topology: rank `r` runs on `CoreId(r)`; if every rank of the group is on
//! one chip, the ring stays on the chip and `B` is
//! [`Topology::intra_chip_bandwidth`]; otherwise some ring link crosses NeuronLink and `B` is
//! [`Topology::chip_to_chip_bandwidth`] (the slowest link of the ring, taken over the ring's
//! consecutive pairs in group order with [`Topology::link_bandwidth`]). A group of one rank
//! moves nothing and costs 0.

use std::fmt;

use super::group::ProcessGroup;
use neuronlab_core::device::{CoreId, Topology};

/// **Model assumption**: the fixed latency of one step of a collective, seconds.
///
/// Not published. Each step of a ring collective is one DMA transfer between neighbours plus
/// a semaphore handshake telling the receiver its chunk has landed. NCCL's tuning model puts a
/// ring hop over NVLink at a few microseconds; a Neuron step also goes through DMA descriptor
/// setup and a cross-core semaphore, comparable work, so we assume 2 µs per step whether the
/// step stays on a chip or crosses NeuronLink. It is what makes many small collectives slower
/// than one large one, as on hardware.
pub const STEP_LATENCY_S: f64 = 2e-6;

/// A collective operation the cost model knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank ends with the reduction of all ranks' buffers.
    AllReduce,
    /// Every rank ends with the concatenation of all ranks' shards.
    AllGather,
    /// Every rank ends with its shard of the reduction of all ranks' buffers.
    ReduceScatter,
    /// Every rank sends a distinct block to each other rank.
    AllToAll,
    /// Every rank ends with the root's buffer.
    Broadcast,
}

impl Collective {
    /// The fraction of `S/B` the transfer takes on `n` ranks (0 when `n <= 1`).
    fn transfer_factor(self, n: usize) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let share = (n - 1) as f64 / n as f64;
        match self {
            Collective::AllReduce => 2.0 * share,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => share,
            Collective::Broadcast => 1.0,
        }
    }

    /// The number of latency-bound steps on `n` ranks.
    fn steps(self, n: usize) -> u32 {
        let hops = n.saturating_sub(1) as u32;
        match self {
            Collective::AllReduce => 2 * hops,
            _ => hops,
        }
    }
}

impl fmt::Display for Collective {
    /// The PyTorch name: `all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`,
    /// `broadcast`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllToAll => "all_to_all",
            Collective::Broadcast => "broadcast",
        })
    }
}

/// The modeled cost of one collective on one group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CollectiveCost {
    /// The operation.
    pub op: Collective,
    /// Ranks in the group.
    pub group_size: usize,
    /// The message size `S`, bytes (see the module docs for what it counts per op).
    pub bytes: u64,
    /// Latency-bound steps: `2(n-1)` for all_reduce, `n-1` for the others.
    pub steps: u32,
    /// The bandwidth `B` of the ring's slowest link, bytes/s; 0 for a group of one rank,
    /// which uses no link.
    pub bandwidth: f64,
    /// Whether the ring crosses chips (NeuronLink) rather than staying on one chip.
    pub crosses_chips: bool,
    /// `steps * STEP_LATENCY_S`, seconds.
    pub latency_s: f64,
    /// The bandwidth term, seconds.
    pub transfer_s: f64,
    /// `latency_s + transfer_s`, seconds.
    pub total_s: f64,
}

/// The modeled cost of `op` moving `bytes` on `group`, whose rank `r` runs on `CoreId(r)` of
/// `topology`.
///
/// Fails, naming the group, if a rank has no visible core in the topology.
pub fn collective_cost(
    op: Collective,
    group: &ProcessGroup,
    bytes: u64,
    topology: &Topology,
) -> Result<CollectiveCost, String> {
    let ranks = group.ranks();
    let n = ranks.len();
    let mut bandwidth = f64::INFINITY;
    let mut crosses_chips = false;
    for (i, &a) in ranks.iter().enumerate() {
        let b = ranks[(i + 1) % n];
        let in_group = |e| format!("{op} on process group {group}: {e}");
        let (a, b) = (CoreId(a), CoreId(b));
        let link = topology.link_bandwidth(a, b).map_err(in_group)?;
        crosses_chips |= !topology.same_chip(a, b).map_err(in_group)?;
        if n > 1 {
            bandwidth = bandwidth.min(link);
        }
    }
    let (bandwidth, transfer_s) = if n > 1 {
        (bandwidth, op.transfer_factor(n) * bytes as f64 / bandwidth)
    } else {
        (0.0, 0.0)
    };
    let steps = op.steps(n);
    let latency_s = f64::from(steps) * STEP_LATENCY_S;
    Ok(CollectiveCost {
        op,
        group_size: n,
        bytes,
        steps,
        bandwidth,
        crosses_chips,
        latency_s,
        transfer_s,
        total_s: latency_s + transfer_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn group(ranks: impl IntoIterator<Item = u32>, world: u32) -> ProcessGroup {
        ProcessGroup::new(ranks.into_iter().collect(), world, None).unwrap()
    }

    fn close(actual: f64, expected: f64) {
        assert!(
            (actual - expected).abs() <= 1e-12 * expected.abs(),
            "{actual} != {expected}"
        );
    }

    #[test]
    fn cost_all_reduce_on_one_trn2_chip() {
        // trn2.48xlarge, LNC=2: neuron:0-3 are chip 0; on-chip B = 3.5 TB/s / 4 = 875 GB/s.
        let t = Topology::preset("trn2.48xlarge", None).unwrap();
        let c = collective_cost(Collective::AllReduce, &group(0..4, 64), 4 * MIB, &t).unwrap();
        assert_eq!((c.group_size, c.bytes, c.steps), (4, 4 * MIB, 6));
        assert_eq!(c.bandwidth, 875e9);
        assert!(!c.crosses_chips);
        // 2 * 3/4 * 4194304 B / 875e9 B/s = 6291456 / 875e9 s
        close(c.transfer_s, 7.190_235_428_571_429e-6);
        close(c.latency_s, 12e-6);
        close(c.total_s, 19.190_235_428_571_429e-6);
    }

    #[test]
    fn cost_32_ranks_across_8_trn2_chips() {
        // 32 ranks at LNC=2 span chips 0-7; NeuronLink B = 1.28 TB/s / 4 = 320 GB/s.
        let t = Topology::preset("trn2.48xlarge", Some(2)).unwrap();
        let g = group(0..32, 32);
        let c = collective_cost(Collective::AllGather, &g, 64 * MIB, &t).unwrap();
        assert_eq!((c.steps, c.bandwidth, c.crosses_chips), (31, 320e9, true));
        // 31/32 * 67108864 / 320e9 = 65011712 / 320e9 = 203.1616 µs; 31 * 2 µs = 62 µs.
        close(c.transfer_s, 203.1616e-6);
        close(c.latency_s, 62e-6);
        close(c.total_s, 265.1616e-6);

        let c = collective_cost(Collective::AllReduce, &g, 1_000_000, &t).unwrap();
        // 2 * 31/32 * 1e6 / 320e9 = 6.0546875 µs; 62 steps = 124 µs.
        assert_eq!(c.steps, 62);
        close(c.transfer_s, 6.054_687_5e-6);
        close(c.total_s, 130.054_687_5e-6);

        // 8 ranks on chips 0-1: 7/8 * 8e6 / 320e9 = 21.875 µs.
        let c = collective_cost(Collective::AllToAll, &group(0..8, 32), 8_000_000, &t).unwrap();
        assert_eq!((c.steps, c.crosses_chips), (7, true));
        close(c.transfer_s, 21.875e-6);
    }

    #[test]
    fn cost_trn1_on_and_across_chips() {
        // trn1.32xlarge: 2 cores per chip; on-chip B = 1 TB/s / 2, NeuronLink 384 GB/s / 2.
        let t = Topology::preset("trn1.32xlarge", None).unwrap();
        let c = collective_cost(Collective::AllReduce, &group([0, 1], 32), 1_000_000, &t);
        let c = c.unwrap();
        assert_eq!((c.bandwidth, c.crosses_chips, c.steps), (500e9, false, 2));
        close(c.transfer_s, 2e-6); // 2 * 1/2 * 1e6 / 500e9
        close(c.total_s, 6e-6);

        let c = collective_cost(Collective::ReduceScatter, &group([0, 2], 32), 1_000_000, &t);
        let c = c.unwrap();
        assert_eq!((c.bandwidth, c.crosses_chips, c.steps), (192e9, true, 1));
        close(c.transfer_s, 0.5e6 / 192e9);
        close(c.total_s, 0.5e6 / 192e9 + 2e-6);
    }

    #[test]
    fn cost_broadcast_is_a_pipelined_ring() {
        let t = Topology::preset("trn2.48xlarge", None).unwrap();
        let c = collective_cost(Collective::Broadcast, &group(0..4, 4), 875_000_000, &t);
        let c = c.unwrap();
        assert_eq!(c.steps, 3);
        close(c.transfer_s, 1e-3); // S/B = 875e6 / 875e9
        close(c.total_s, 1e-3 + 6e-6);
    }

    #[test]
    fn cost_of_one_rank_is_zero() {
        let t = Topology::preset("trn2.48xlarge", None).unwrap();
        for op in [
            Collective::AllReduce,
            Collective::AllGather,
            Collective::ReduceScatter,
            Collective::AllToAll,
            Collective::Broadcast,
        ] {
            let c = collective_cost(op, &group([5], 8), 64 * MIB, &t).unwrap();
            assert_eq!((c.steps, c.bandwidth, c.crosses_chips), (0, 0.0, false));
            assert_eq!((c.latency_s, c.transfer_s, c.total_s), (0.0, 0.0, 0.0));
        }
    }

    #[test]
    fn cost_of_mesh_4x8_tp_group_crosses_chips() {
        // With torch's layout the tp groups of a [4, 8] mesh are strided by 8, so they span
        // 4 chips at LNC=2; on a [8, 4] mesh they are one chip each.
        use super::super::mesh::DeviceMesh;
        let t = Topology::preset("trn2.48xlarge", None).unwrap();
        let strided = DeviceMesh::new(32, &[4, 8], &["tp", "fsdp"]).unwrap();
        let g = strided.group_for(9, "tp").unwrap();
        let c = collective_cost(Collective::AllReduce, &g, MIB, &t).unwrap();
        assert_eq!((c.bandwidth, c.crosses_chips), (320e9, true));
        let local = DeviceMesh::new(32, &[8, 4], &["fsdp", "tp"]).unwrap();
        let g = local.group_for(9, "tp").unwrap();
        assert_eq!(g.ranks(), [8, 9, 10, 11]);
        let c = collective_cost(Collective::AllReduce, &g, MIB, &t).unwrap();
        assert_eq!((c.bandwidth, c.crosses_chips), (875e9, false));
    }

    #[test]
    fn cost_names_the_group_when_a_rank_has_no_core() {
        // trn2.3xlarge has 4 cores: rank 4 has none.
        let t = Topology::preset("trn2.3xlarge", None).unwrap();
        let g = ProcessGroup::new(vec![0, 4], 8, Some("dp".into())).unwrap();
        let err = collective_cost(Collective::AllGather, &g, MIB, &t).unwrap_err();
        assert!(
            err.starts_with(
                "all_gather on process group dp [0, 4]: neuron:4 does not exist: this process \
                 sees 4 NeuronCore(s)"
            ),
            "{err}"
        );
        assert_eq!(Collective::ReduceScatter.to_string(), "reduce_scatter");
    }
}
