//! The roofline cost model: what an op would take on one logical NeuronCore.
//!
//! `total = launch + max(compute, memory)`: the engine and the HBM traffic overlap, the launch
//! does not. Compute time is the op's FLOPs over the engine's peak for its dtype; memory time is
//! the bytes it reads and writes over the core's HBM bandwidth. Every figure comes from
//! [`Topology`] (and so from [`super::figures`]); the result is always *modeled* time, never a
//! measurement.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::figures::LAUNCH_OVERHEAD_S;
use super::topology::Topology;
use crate::tensor::DType;

/// The side of the TensorEngine's systolic array: matmul tiles are 128 x 128.
pub const SYSTOLIC_DIM: u64 = 128;

/// The NeuronCore engine an op runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// The systolic array: matmul.
    Tensor,
    /// Elementwise arithmetic and reductions.
    Vector,
    /// Transcendental activations (exp, tanh, gelu, ...).
    Scalar,
    /// No device work: views and metadata ops. Costs nothing, not even a launch.
    None,
}

/// The shape of a (batched) matmul `[batch, m, k] @ [batch, k, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatmulDims {
    /// Independent matmuls.
    pub batch: u64,
    /// Rows of the output (the stationary operand's free dimension).
    pub m: u64,
    /// Columns of the output (the moving operand's free dimension).
    pub n: u64,
    /// The contraction dimension.
    pub k: u64,
}

impl MatmulDims {
    /// The FLOPs the TensorEngine actually spends: `2 * batch * pad(m) * n * pad(k)`.
    ///
    /// The 128 x 128 systolic array holds a K x M tile of the stationary operand, so K and M
    /// are padded up to multiples of 128; the moving operand streams N columns through it,
    /// so N is not padded. An `m = 1` matmul costs as much as `m = 128`.
    pub fn padded_flops(&self) -> f64 {
        // In f64: traced shapes carry no data, so they need not fit in memory or in u64 math.
        let tile = SYSTOLIC_DIM as f64;
        let pad = |d: u64| (d as f64 / tile).ceil() * tile;
        2.0 * self.batch as f64 * pad(self.m) * self.n as f64 * pad(self.k)
    }
}

/// The work an op does, from which its time is modeled.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpCost {
    /// Useful floating-point operations (for a matmul, `2 * batch * m * n * k`).
    pub flops: f64,
    /// Bytes read from HBM.
    pub bytes_read: f64,
    /// Bytes written to HBM.
    pub bytes_written: f64,
    /// The engine it runs on.
    pub engine: Engine,
    /// The dtype it computes in (selects the engine's rate).
    pub dtype: DType,
    /// The matmul shape, for TensorEngine ops (enables tile padding).
    pub matmul: Option<MatmulDims>,
}

impl OpCost {
    /// A view or metadata op: no work, no launch.
    pub fn free() -> OpCost {
        OpCost {
            flops: 0.0,
            bytes_read: 0.0,
            bytes_written: 0.0,
            engine: Engine::None,
            dtype: DType::DEFAULT_FLOAT,
            matmul: None,
        }
    }

    /// A VectorEngine elementwise op over `elements` outputs with `inputs` operands of the
    /// same size: one FLOP per output, every operand read once, the output written once.
    /// Set `flops` afterwards for ops that do more per element.
    pub fn elementwise(dtype: DType, elements: u64, inputs: u64) -> OpCost {
        let size = dtype.size() as f64;
        OpCost {
            flops: elements as f64,
            bytes_read: inputs as f64 * elements as f64 * size,
            bytes_written: elements as f64 * size,
            engine: Engine::Vector,
            dtype,
            matmul: None,
        }
    }

    /// A ScalarEngine activation (exp, tanh, gelu, ...) over `elements`: one pass per
    /// element, read once and written once.
    pub fn activation(dtype: DType, elements: u64) -> OpCost {
        OpCost {
            engine: Engine::Scalar,
            ..OpCost::elementwise(dtype, elements, 1)
        }
    }

    /// A VectorEngine reduction of `input_elements` into `output_elements`: one FLOP per
    /// input element.
    pub fn reduction(dtype: DType, input_elements: u64, output_elements: u64) -> OpCost {
        let size = dtype.size() as f64;
        OpCost {
            flops: input_elements as f64,
            bytes_read: input_elements as f64 * size,
            bytes_written: output_elements as f64 * size,
            engine: Engine::Vector,
            dtype,
            matmul: None,
        }
    }

    /// A TensorEngine matmul: both operands read once, the output written once.
    pub fn matmul(dtype: DType, dims: MatmulDims) -> OpCost {
        let size = dtype.size() as f64;
        let MatmulDims { batch, m, n, k } = dims;
        let (batch, m, n, k) = (batch as f64, m as f64, n as f64, k as f64);
        OpCost {
            flops: 2.0 * batch * m * n * k,
            bytes_read: batch * (m * k + k * n) * size,
            bytes_written: batch * m * n * size,
            engine: Engine::Tensor,
            dtype,
            matmul: Some(dims),
        }
    }

    /// Bytes moved to and from HBM.
    pub fn bytes(&self) -> f64 {
        self.bytes_read + self.bytes_written
    }
}

/// Which term of the roofline dominates an op's modeled time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// The engine's arithmetic.
    Compute,
    /// HBM traffic.
    Memory,
    /// The fixed launch cost: the op is too small to fill the core.
    Launch,
    /// No device work at all (a view).
    None,
}

impl ModeledTime {
    /// Combines an op's compute and memory time into the roofline: the fixed launch cost plus
    /// the larger of the two (the engines and the HBM traffic overlap), with what bounds it.
    pub fn roofline(compute_s: f64, memory_s: f64) -> ModeledTime {
        let launch_s = LAUNCH_OVERHEAD_S;
        let busy_s = compute_s.max(memory_s);
        let bound = if launch_s >= busy_s {
            Bound::Launch
        } else if compute_s >= memory_s {
            Bound::Compute
        } else {
            Bound::Memory
        };
        ModeledTime {
            compute_s,
            memory_s,
            launch_s,
            total_s: launch_s + busy_s,
            bound,
        }
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Bound::Compute => "compute-bound",
            Bound::Memory => "memory-bound",
            Bound::Launch => "launch-bound",
            Bound::None => "free",
        })
    }
}

/// The modeled device time of one op, in seconds, with its parts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeledTime {
    /// FLOPs over the engine's peak (padded FLOPs for a matmul).
    pub compute_s: f64,
    /// HBM bytes over the core's bandwidth.
    pub memory_s: f64,
    /// The fixed launch cost (a model assumption).
    pub launch_s: f64,
    /// `launch_s + max(compute_s, memory_s)`.
    pub total_s: f64,
    /// The largest term.
    pub bound: Bound,
}

/// Models op times on one logical core of a topology.
#[derive(Clone, Debug)]
pub struct CostModel {
    topology: Topology,
}

impl CostModel {
    /// A model for the cores of `topology` (all cores of an instance are alike).
    pub fn new(topology: &Topology) -> CostModel {
        CostModel {
            topology: topology.clone(),
        }
    }

    /// The topology the figures come from.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The peak rate of `engine` for `dtype` on one logical core, FLOP/s (zero for
    /// [`Engine::None`]).
    pub fn peak_flops(&self, engine: Engine, dtype: DType) -> f64 {
        match engine {
            Engine::Tensor => self.topology.tensor_flops(dtype),
            Engine::Vector => self.topology.vector_flops(dtype),
            Engine::Scalar => self.topology.scalar_flops(dtype),
            Engine::None => 0.0,
        }
    }

    /// The modeled time of `cost` on one logical core.
    pub fn modeled(&self, cost: &OpCost) -> ModeledTime {
        if cost.engine == Engine::None {
            return ModeledTime {
                compute_s: 0.0,
                memory_s: 0.0,
                launch_s: 0.0,
                total_s: 0.0,
                bound: Bound::None,
            };
        }
        let flops = match (cost.engine, cost.matmul) {
            (Engine::Tensor, Some(dims)) => dims.padded_flops(),
            _ => cost.flops,
        };
        let compute_s = flops / self.peak_flops(cost.engine, cost.dtype);
        let memory_s = cost.bytes() / self.topology.hbm_bandwidth();
        ModeledTime::roofline(compute_s, memory_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(instance: &str) -> CostModel {
        CostModel::new(&Topology::preset(instance, None).unwrap())
    }

    fn assert_us(actual_s: f64, expected_us: f64) {
        let actual_us = actual_s * 1e6;
        assert!(
            (actual_us - expected_us).abs() <= 1e-9 * expected_us.abs().max(1.0),
            "{actual_us} µs != {expected_us} µs"
        );
    }

    fn square(n: u64) -> MatmulDims {
        MatmulDims {
            batch: 1,
            m: n,
            n,
            k: n,
        }
    }

    #[test]
    fn bf16_matmul_on_trn2_is_compute_bound() {
        // 2 * 1024^3 FLOP at 667/4 TFLOPS; 6 MiB (two 2 MiB inputs, one output) at 2.9/4 TB/s.
        let t = model("trn2.48xlarge").modeled(&OpCost::matmul(DType::Bf16, square(1024)));
        assert_us(t.compute_s, 2.0 * 1024f64.powi(3) / 166.75e12 * 1e6); // 12.878 µs
        assert_us(t.memory_s, 6291456.0 / 725e9 * 1e6); // 8.678 µs
        assert_us(t.launch_s, 10.0);
        assert_us(t.total_s, 22.878462656671665);
        assert_eq!(t.bound, Bound::Compute);
    }

    #[test]
    fn a_single_row_matmul_pays_for_a_full_tile() {
        let dims = MatmulDims {
            batch: 1,
            m: 1,
            n: 1024,
            k: 1024,
        };
        let cost = OpCost::matmul(DType::Bf16, dims);
        assert_eq!(cost.flops, 2.0 * 1024.0 * 1024.0);
        let t = model("trn2.48xlarge").modeled(&cost);
        // M pads from 1 to 128: 128x the useful FLOPs, 1.610 µs instead of 12.6 ns.
        assert_us(t.compute_s, 1.609807832083958);
        assert_us(t.memory_s, 2.898273103448276);
        assert_eq!(t.bound, Bound::Launch);
        // K pads too, N does not.
        assert_eq!(
            MatmulDims {
                batch: 2,
                m: 128,
                n: 1,
                k: 129
            }
            .padded_flops(),
            2.0 * 2.0 * 128.0 * 256.0
        );
    }

    #[test]
    fn a_large_f32_add_is_memory_bound() {
        // 4Mi elements, 3 x 16 MiB of traffic at 725 GB/s; 4Mi FLOP at 2 TFLOPS.
        let t = model("trn2.48xlarge").modeled(&OpCost::elementwise(DType::F32, 4 << 20, 2));
        assert_us(t.memory_s, 69.42296275862068);
        assert_us(t.compute_s, 2.097152);
        assert_us(t.total_s, 79.42296275862068);
        assert_eq!(t.bound, Bound::Memory);
    }

    #[test]
    fn a_full_sum_reads_everything_once() {
        // sum of a 4096 x 4096 f32 tensor: 64 MiB in, 4 bytes out.
        let t = model("trn2.48xlarge").modeled(&OpCost::reduction(DType::F32, 4096 * 4096, 1));
        assert_us(t.memory_s, 92.56395586206897);
        assert_us(t.compute_s, 8.388608);
        assert_eq!(t.bound, Bound::Memory);
    }

    #[test]
    fn trn1_cores_are_slower() {
        // 190/2 TFLOPS BF16 and 820/2 GB/s per NeuronCore-v2.
        let m = model("trn1.32xlarge");
        let t = m.modeled(&OpCost::matmul(DType::Bf16, square(1024)));
        assert_us(t.compute_s, 22.605091031578947);
        assert_us(t.memory_s, 15.345014634146342);
        assert_us(t.total_s, 32.605091031578944);
        assert_eq!(t.bound, Bound::Compute);
        // f32 runs at 47.5/2 TFLOPS.
        let t = m.modeled(&OpCost::matmul(DType::F32, square(1024)));
        assert_us(t.compute_s, 90.42036412631579);
    }

    #[test]
    fn tiny_ops_are_launch_bound_and_views_are_free() {
        let m = model("trn2.48xlarge");
        let t = m.modeled(&OpCost::activation(DType::F32, 1000));
        assert_eq!(t.bound, Bound::Launch);
        assert_us(t.compute_s, 1000.0 / 2.4e12 * 1e6);
        let t = m.modeled(&OpCost::free());
        assert_eq!((t.total_s, t.bound), (0.0, Bound::None));
    }
}
