//! The hardware figures the simulator is built from, in one table.
//!
//! Every number here is either quoted from the AWS Neuron SDK documentation (the page is named
//! next to it: `trainium2.rst`, `neuron-core-v3.rst`, `trn2-arch.rst`,
//! `logical-neuroncore-config.rst`, `trainium.rst`, `neuron-core-v2.rst`, `trn1-arch.rst`), or
//! it is a **model assumption**, labelled as such with its reasoning. Per-core figures are derived
//! from these by [`super::Topology`]; the only other hardware figure, the per-step latency of a
//! collective (`neuronlab_dist::ring_cost`), is a labelled model assumption too.
//!
//! Derivation rule: the figures are published per chip, while the simulator schedules work per
//! *logical* NeuronCore. A logical core gets the chip figure divided by the logical cores per
//! chip (so at LNC=2 on Trainium2, a quarter of the chip). This matches how the Neuron runtime
//! partitions a chip's HBM and engines between its logical cores, and keeps the sum over a
//! chip's cores equal to the published chip figure.
//!
//! Model assumptions (not published; each is documented where it is defined):
//! - [`LAUNCH_OVERHEAD_S`], the fixed cost of one op launch;
//! - [`WIDE_TYPE_SLOWDOWN`], the rate of 64-bit types, and which figure other types use;
//! - core-to-core bandwidth inside one chip is the chip's DMA bandwidth shared by its
//!   logical cores (see [`super::Topology::intra_chip_bandwidth`]).

use std::fmt;

use serde::{Deserialize, Serialize};

const TERA: f64 = 1e12;
const GIGA: f64 = 1e9;
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// A Trainium chip generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Generation {
    /// Trainium (Trn1), NeuronCore-v2.
    Trainium1,
    /// Trainium2 (Trn2), NeuronCore-v3.
    Trainium2,
}

impl Generation {
    /// The published figures of this chip.
    pub fn figures(self) -> &'static ChipFigures {
        match self {
            Generation::Trainium1 => &TRAINIUM1,
            Generation::Trainium2 => &TRAINIUM2,
        }
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Generation::Trainium1 => "Trainium1",
            Generation::Trainium2 => "Trainium2",
        })
    }
}

/// The published figures of one Trainium chip.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChipFigures {
    /// Which chip this is.
    pub generation: Generation,
    /// The name of its NeuronCore generation, for display.
    pub core_name: &'static str,
    /// Physical NeuronCores on one chip.
    pub physical_cores: u32,
    /// Valid logical NeuronCore configurations: physical cores fused into one logical core.
    pub lnc_values: &'static [u32],
    /// The configuration the Neuron runtime uses when `NEURON_LOGICAL_NC_CONFIG` is unset.
    pub default_lnc: u32,
    /// Dense BF16/FP16 TensorEngine throughput of the whole chip, FLOP/s.
    pub tensor_bf16_flops: f64,
    /// Dense FP32 TensorEngine throughput of the whole chip, FLOP/s.
    pub tensor_fp32_flops: f64,
    /// FP32 VectorEngine throughput of one *physical* core, FLOP/s.
    pub vector_flops_per_core: f64,
    /// FP32 ScalarEngine throughput of one *physical* core, FLOP/s.
    pub scalar_flops_per_core: f64,
    /// HBM capacity of the chip, bytes.
    pub hbm_bytes: u64,
    /// HBM bandwidth of the chip, bytes/s.
    pub hbm_bandwidth: f64,
    /// DMA bandwidth of the chip, bytes/s (moves data between cores on the chip).
    pub dma_bandwidth: f64,
    /// On-chip state buffer (SBUF) of one physical core, bytes.
    pub sbuf_bytes_per_core: u64,
    /// On-chip partial-sum buffer (PSUM) of one physical core, bytes.
    pub psum_bytes_per_core: u64,
    /// The chip-to-chip interconnect.
    pub link_name: &'static str,
    /// Chip-to-chip bandwidth of one chip, bytes/s.
    pub link_bandwidth: f64,
}

/// Trainium2, eight NeuronCore-v3.
pub const TRAINIUM2: ChipFigures = ChipFigures {
    generation: Generation::Trainium2,
    core_name: "NeuronCore-v3",
    // trainium2.rst: "Every Trainium2 chip contains eight NeuronCore-V3 cores".
    physical_cores: 8,
    // logical-neuroncore-config.rst: LNC=1 or LNC=2, and 2 is the default on Trn2.
    lnc_values: &[1, 2],
    default_lnc: 2,
    // trainium2.rst: "667 BF16/FP16/TF32 TFLOPS" (dense) per chip.
    tensor_bf16_flops: 667.0 * TERA,
    // trainium2.rst: "181 FP32 TFLOPS" per chip.
    tensor_fp32_flops: 181.0 * TERA,
    // neuron-core-v3.rst: "Vector Engines ... deliver a total of 1 TFLOPS of FP32".
    vector_flops_per_core: 1.0 * TERA,
    // neuron-core-v3.rst: "Scalar Engines ... deliver a total of 1.2 TFLOPS of FP32".
    scalar_flops_per_core: 1.2 * TERA,
    // trainium2.rst: "96 GiB of device memory with 2.9 TB/sec of bandwidth".
    hbm_bytes: 96 * GIB,
    hbm_bandwidth: 2.9 * TERA,
    // trainium2.rst: "3.5 TB/sec of DMA bandwidth".
    dma_bandwidth: 3.5 * TERA,
    // neuron-core-v3.rst: 28 MB on-chip SRAM; NKI Trainium2 guide: 128 partitions x 224 KiB.
    // PSUM: 2 MiB is a model assumption, the Trainium1 figure kept: the pages cited here give
    // no PSUM size for NeuronCore-v3.
    sbuf_bytes_per_core: 28 * MIB,
    psum_bytes_per_core: 2 * MIB,
    // trainium2.rst: "NeuronLink-v3 ... provides 1.28 TB/sec bandwidth per chip".
    link_name: "NeuronLink-v3",
    link_bandwidth: 1.28 * TERA,
};

/// Trainium (first generation), two NeuronCore-v2.
pub const TRAINIUM1: ChipFigures = ChipFigures {
    generation: Generation::Trainium1,
    core_name: "NeuronCore-v2",
    // trainium.rst: "each Trainium include 2 x NeuronCore-v2".
    physical_cores: 2,
    // logical-neuroncore-config.rst: LNC is a Trainium2 feature; Trn1 only has LNC=1.
    lnc_values: &[1],
    default_lnc: 1,
    // trainium.rst: "190 FP16/BF16/cFP8/TF32 TFLOPS, and 47.5 FP32 TFLOP" per chip.
    tensor_bf16_flops: 190.0 * TERA,
    tensor_fp32_flops: 47.5 * TERA,
    // neuron-core-v2.rst: the VectorEngine "delivers 2.3 TFLOPS of FP32 computations".
    vector_flops_per_core: 2.3 * TERA,
    // neuron-core-v2.rst: the ScalarEngine "delivers 2.9 TFLOPS of FP32 computations".
    scalar_flops_per_core: 2.9 * TERA,
    // trainium.rst: 32 GiB of device memory with 820 GB/s (older pages say GB/s, newer
    // GiB/s; we take the smaller, decimal reading).
    hbm_bytes: 32 * GIB,
    hbm_bandwidth: 820.0 * GIGA,
    // trainium.rst: "1 TB/sec of DMA bandwidth".
    dma_bandwidth: 1.0 * TERA,
    // NKI Trainium/Inferentia2 architecture guide: SBUF 24 MiB (128 partitions x 192 KiB),
    // PSUM 2 MiB per core.
    sbuf_bytes_per_core: 24 * MIB,
    psum_bytes_per_core: 2 * MIB,
    // A model assumption: 384 GB/s per chip; trainium.rst and trn1-arch.rst name NeuronLink-v2
    // but give no bandwidth.
    link_name: "NeuronLink-v2",
    link_bandwidth: 384.0 * GIGA,
};

/// One EC2 instance type: how many chips of which generation, and how they are wired.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InstanceFigures {
    /// The EC2 name, e.g. `trn2.48xlarge`.
    pub name: &'static str,
    /// The chips it carries.
    pub chip: &'static ChipFigures,
    /// Number of chips.
    pub chips: u32,
    /// How the chips are connected, for display.
    pub interconnect: &'static str,
}

/// The instance presets, in the order error messages list them. The first is the default.
pub const INSTANCES: [InstanceFigures; 4] = [
    // trn2-arch.rst: 16 Trainium2 chips in a 4x4 2D torus of NeuronLink-v3.
    InstanceFigures {
        name: "trn2.48xlarge",
        chip: &TRAINIUM2,
        chips: 16,
        interconnect: "4x4 2D torus",
    },
    // trn2-arch.rst: a single Trainium2 chip.
    InstanceFigures {
        name: "trn2.3xlarge",
        chip: &TRAINIUM2,
        chips: 1,
        interconnect: "single chip",
    },
    // trn1-arch.rst: 16 Trainium chips in a 4D hypercube of NeuronLink-v2.
    InstanceFigures {
        name: "trn1.32xlarge",
        chip: &TRAINIUM1,
        chips: 16,
        interconnect: "4D hypercube",
    },
    // trn1-arch.rst: a single Trainium chip.
    InstanceFigures {
        name: "trn1.2xlarge",
        chip: &TRAINIUM1,
        chips: 1,
        interconnect: "single chip",
    },
];

/// **Model assumption**: the fixed cost of launching one op on a core, seconds.
///
/// Not published. An eager op is a separate runtime execution: the host hands a kernel to
/// the device, the device signals completion. GPU kernel launches measure about 5 µs; a
/// Neuron execution also goes through the runtime's queue and semaphores, so we assume twice
/// that. It is what makes many tiny eager ops slower than one fused kernel, as on hardware.
pub const LAUNCH_OVERHEAD_S: f64 = 10e-6;

/// **Model assumption**: how much slower 64-bit types (`f64`, `i64`) run than FP32.
///
/// The engines publish no 64-bit figure: they have no 64-bit datapath, so 64-bit arithmetic
/// would be emulated from 32-bit operations. A factor of 4 is a conservative guess for that
/// emulation. Types of 8 and 16 bits (`bf16`, `f16`, `u8`, `bool`) use the BF16 TensorEngine
/// figure and 32-bit types (`f32`, `i32`) the FP32 one; the Vector and Scalar engines publish
/// FP32 only, which we use for every type up to 32 bits.
pub const WIDE_TYPE_SLOWDOWN: f64 = 4.0;
