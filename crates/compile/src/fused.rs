//! Fused kernels: their executable form, lowered from the fusion passes' groups, and the
//! executor that runs them.
//!
//! A fused kernel works on *units* (output positions for an elementwise loop, rows for a row op
//! or a matmul) a block at a time. Blocks are sized so that their working set, every operand
//! and intermediate of the block, fits in about half a core's L2 ([`BLOCK_BYTES`]), and they
//! run in parallel. Within a block, each elementwise op of a [`Chain`] is one call of the op's
//! registry block kernel on small dense buffers of the op's own dtype, so every intermediate
//! is rounded exactly as eager rounds it and no intermediate ever has the full size. External
//! operands are gathered for the block through their (broadcast) strides.
//!
//! A chain whose every value is f32, and whose every op has an f32 tile loop in the registry
//! ([`F32Tile`]), runs as an [`F32Chain`] instead: all its steps over a tile of positions that
//! fits in L1, then the next tile, through reused tile buffers, calling each op's loop directly
//! (no dtype dispatch, no allocation per step). The loops run the same element functions as
//! the block kernels, so the results are the same to the bit.

use std::borrow::Cow;

use rayon::prelude::*;
use smallvec::SmallVec;

use super::graph::{Graph, ValueId};
use super::passes::{def_of, Group, KernelPlan, Users};
use neuronlab_core::cancel::Token;
use neuronlab_core::device::cost::{CostModel, Engine, OpCost};
use neuronlab_core::device::{CoreId, ModeledTime};
use neuronlab_core::ops::attrs::ResolvedAttrs;
use neuronlab_core::ops::registry::{
    F32Tile, MetaArgs, OpDef, OutputBuffers, PointwiseArgs, RowArgs, RowFn,
};
use neuronlab_core::ops::{broadcast_strides, cast_block, RowBands};
use neuronlab_core::runtime::{op_error, Compute, Placement, Work, WorkCost};
use neuronlab_core::tensor::strided::{self, PARALLEL_THRESHOLD};
use neuronlab_core::tensor::{Buffer, DType, Element, Elements, Tensor, TensorMeta};
use neuronlab_core::{with_dtype, Result, Runtime};

/// The bytes of block-local buffers a block aims to stay within: half a core's L2 (2 MiB on
/// the AVX-512 machines this runs on), so a chain's operands and intermediates stay in cache
/// from one op to the next. A quarter of that measured 10-20% slower on the 8-op chain (more
/// blocks, each paying its steps' calls and buffers); a twentieth, slower still.
const BLOCK_BYTES: usize = 1 << 20;
/// The fewest positions per elementwise block, so per-block overheads stay small.
const MIN_BLOCK: usize = 1 << 10;
/// The most positions per elementwise block.
const MAX_BLOCK: usize = 1 << 15;
/// The fewest rows per matmul band: `gemm` packs the right operand once per call.
const MIN_BAND_ROWS: usize = 64;
/// The fewest rows per band when the right operand outgrows the L2 cache: packing it again
/// for every band of 64 rows cost about as much as the band's multiply (on [4096, 4096] by
/// [4096, 1024] operands), so bands grow until packing is a small part of their work.
const MIN_BAND_ROWS_LARGE_B: usize = 512;
/// Right operands above this many bytes count as large.
const LARGE_B_BYTES: usize = 4 << 20;

/// Positions per block for a working set of `bytes_per_position`.
fn block_positions(bytes_per_position: usize) -> usize {
    (BLOCK_BYTES / bytes_per_position.max(1)).clamp(MIN_BLOCK, MAX_BLOCK)
}

/// Where a chain step's operand comes from.
#[derive(Clone, Copy, Debug)]
enum Operand {
    /// A chain source (an index into [`Chain::sources`]).
    Source(usize),
    /// The block the enclosing kernel hands in (a matmul band, a row op's output rows).
    Block,
    /// An earlier step.
    Step(usize),
}

/// One elementwise op of a chain.
#[derive(Clone)]
struct Step {
    def: &'static OpDef,
    attrs: ResolvedAttrs,
    block: fn(&PointwiseArgs) -> std::result::Result<Buffer, String>,
    /// Each operand, and the dtype it is converted to first when that differs from its own.
    args: Vec<(Operand, Option<DType>)>,
    output: DType,
    /// The node's operand metas, for errors that read as eager's.
    metas: Vec<TensorMeta>,
}

/// Elementwise ops evaluated together over one shape, a block of positions at a time.
#[derive(Clone)]
struct Chain {
    /// The loop's shape.
    shape: Vec<usize>,
    /// The kernel inputs the chain reads, by index into the kernel's inputs.
    sources: Vec<usize>,
    steps: Vec<Step>,
    /// The steps whose values the kernel needs, in order (distinct).
    results: Vec<usize>,
    /// For each step, the earlier steps whose values are dropped once it has run: nothing later
    /// reads them and they are not results. A block's buffers are then reused while they are
    /// still in cache.
    released: Vec<Vec<usize>>,
    /// Bytes of one position across sources and steps: the block's working set per position.
    bytes_per_position: usize,
    /// The chain as f32 tile loops, when every value in it is f32 and every op has one.
    f32: Option<F32Chain>,
}

/// The bytes of an f32 chain's tile buffers and the tile's source reads: two thirds of a
/// core's L1 data cache (48 KiB on the AVX-512 machines this runs on), so the steps hand their
/// values to each other in L1.
const TILE_BYTES: usize = 32 << 10;
/// The fewest positions per tile, so each step's call stays small next to its loop.
const MIN_TILE: usize = 256;
/// The most positions per tile.
const MAX_TILE: usize = 4096;

/// Where an f32 step's operand is for a tile.
#[derive(Clone, Copy, Debug)]
enum TileArg {
    /// Chain source `i`.
    Source(usize),
    /// The enclosing kernel's block.
    Block,
    /// Tile buffer `k`.
    Slot(usize),
}

/// One op of an [`F32Chain`].
#[derive(Clone, Debug)]
struct F32Step {
    kernel: F32Tile,
    args: SmallVec<[TileArg; 2]>,
    /// The tile buffer it writes.
    slot: usize,
}

/// A chain whose every value is f32, run as the ops' own f32 tile loops ([`F32Tile`]): every
/// step over a tile of positions, then the next tile, each value in a tile buffer that stays
/// in L1. A buffer is reused once nothing later reads its value. Bitwise the same as the block
/// kernels, which run the same element functions.
#[derive(Clone, Debug)]
struct F32Chain {
    steps: Vec<F32Step>,
    /// Tile buffers.
    slots: usize,
    /// The tile buffer of each of the chain's results, in [`Chain::results`] order.
    results: Vec<usize>,
    /// Positions per tile.
    tile: usize,
}

impl F32Chain {
    /// The f32 form of `steps`, or `None` unless every operand and value is f32 (with no
    /// conversion) and every op has an f32 loop. `source_dtypes` are the chain sources'
    /// dtypes, `block` the enclosing kernel's block dtype.
    fn lower(
        steps: &[Step],
        results: &[usize],
        released: &[Vec<usize>],
        source_dtypes: &[DType],
        block: Option<DType>,
    ) -> Option<F32Chain> {
        let mut slot_of: Vec<usize> = Vec::with_capacity(steps.len());
        let (mut slots, mut free) = (0, Vec::new());
        let mut lowered = Vec::with_capacity(steps.len());
        for (i, step) in steps.iter().enumerate() {
            let kernel = (step.def.pointwise?.f32_tile)(&step.attrs)?;
            if step.output != DType::F32 || kernel.arity() != step.args.len() {
                return None;
            }
            let mut args = SmallVec::new();
            for &(operand, convert) in &step.args {
                let (arg, dtype) = match operand {
                    Operand::Source(s) => (TileArg::Source(s), source_dtypes[s]),
                    Operand::Block => (TileArg::Block, block?),
                    Operand::Step(j) => (TileArg::Slot(slot_of[j]), DType::F32),
                };
                if convert.is_some() || dtype != DType::F32 {
                    return None;
                }
                args.push(arg);
            }
            // Taken before the operands' buffers are freed: a loop never writes its input.
            let slot = free.pop().unwrap_or_else(|| {
                slots += 1;
                slots - 1
            });
            slot_of.push(slot);
            lowered.push(F32Step { kernel, args, slot });
            free.extend(released[i].iter().map(|&j| slot_of[j]));
        }
        let bytes_per_position = 4 * (slots + source_dtypes.len() + usize::from(block.is_some()));
        Some(F32Chain {
            steps: lowered,
            slots,
            results: results.iter().map(|&j| slot_of[j]).collect(),
            tile: (TILE_BYTES / bytes_per_position).clamp(MIN_TILE, MAX_TILE) / 64 * 64,
        })
    }

    /// Runs the chain on positions `start..start + len` and hands each result's values to
    /// `put(result, values)`, a tile at a time, in order.
    fn eval(
        &self,
        sources: &[Source],
        block: Option<Elements>,
        start: usize,
        len: usize,
        put: &mut dyn FnMut(usize, Elements),
    ) {
        let room = self.tile.min(len);
        let mut slots: SmallVec<[Vec<f32>; 8]> = (0..self.slots).map(|_| vec![0.0; room]).collect();
        let mut tile_sources: SmallVec<[TileSource; 4]> =
            sources.iter().map(|s| TileSource::new(s, room)).collect();
        let block = block.map(|b| f32::of(b).expect("f32 chains have an f32 block"));
        let mut at = 0;
        while at < len {
            let n = room.min(len - at);
            for (source, tile) in sources.iter().zip(&mut tile_sources) {
                if let TileSource::Gathered(values) = tile {
                    values.clear();
                    source.gather_onto(start + at, n, values);
                }
            }
            for step in &self.steps {
                let mut out = std::mem::take(&mut slots[step.slot]);
                let arg = |a: TileArg| -> &[f32] {
                    match a {
                        TileArg::Source(i) => match &tile_sources[i] {
                            TileSource::Dense(values) => &values[start + at..start + at + n],
                            TileSource::Broadcast(values) => &values[..n],
                            TileSource::Gathered(values) => values,
                        },
                        TileArg::Block => {
                            &block.expect("kernels with a block operand pass it")[at..at + n]
                        }
                        TileArg::Slot(k) => &slots[k][..n],
                    }
                };
                match step.kernel {
                    F32Tile::Unary(f) => f(arg(step.args[0]), &mut out[..n]),
                    F32Tile::Binary(f) => f(arg(step.args[0]), arg(step.args[1]), &mut out[..n]),
                }
                slots[step.slot] = out;
            }
            for (r, &k) in self.results.iter().enumerate() {
                put(r, Elements::F32(&slots[k][..n]));
            }
            at += n;
        }
    }
}

/// An f32 chain source's values for the current tile.
enum TileSource<'t> {
    /// One contiguous run, read in place from position 0 of the loop.
    Dense(&'t [f32]),
    /// The one value it broadcasts to every position, filled once.
    Broadcast(Vec<f32>),
    /// Gathered through its strides, a tile at a time.
    Gathered(Vec<f32>),
}

impl<'t> TileSource<'t> {
    /// The tile form of `source`, for tiles of at most `room` positions.
    fn new(source: &Source<'t>, room: usize) -> TileSource<'t> {
        let data = &source.tensor.data::<f32>()[source.tensor.layout().offset..];
        if source.dense {
            TileSource::Dense(data)
        } else if source.strides[0].iter().all(|&s| s == 0) {
            TileSource::Broadcast(vec![data[0]; room])
        } else {
            TileSource::Gathered(Vec::with_capacity(room))
        }
    }
}

/// A kernel input read for blocks of a chain's positions.
struct Source<'t> {
    tensor: &'t Tensor,
    /// The loop shape and the tensor's strides over it, with contiguous dims merged.
    shape: Vec<usize>,
    strides: [Vec<usize>; 1],
    /// The reads are one contiguous run: a block is borrowed in place.
    dense: bool,
}

/// A block of operand values: borrowed from a tensor or an earlier value, or owned when it
/// had to be gathered or converted.
enum Block<'a> {
    Borrowed(Elements<'a>),
    Owned(Buffer),
}

impl Block<'_> {
    fn elements(&self) -> Elements<'_> {
        match self {
            Block::Borrowed(e) => *e,
            Block::Owned(b) => b.elements(),
        }
    }
}

impl<'t> Source<'t> {
    fn new(tensor: &'t Tensor, loop_shape: &[usize]) -> Source<'t> {
        let strides = broadcast_strides(tensor.layout(), loop_shape);
        let (shape, strides) = strided::coalesce(loop_shape, [&strides]);
        let dense = shape.is_empty() || (shape.len() == 1 && strides[0][0] == 1);
        Source {
            tensor,
            shape,
            strides,
            dense,
        }
    }

    /// Positions `start..start + len` of the loop, as a dense block of the tensor's dtype.
    fn gather(&self, start: usize, len: usize) -> Block<'t> {
        let offset = self.tensor.layout().offset;
        with_dtype!(self.tensor.dtype(), T => {
            let data = self.tensor.data::<T>();
            if self.dense {
                Block::Borrowed(T::elements(&data[offset + start..offset + start + len]))
            } else {
                let mut out = Vec::with_capacity(len);
                self.gather_onto(start, len, &mut out);
                Block::Owned(T::into_buffer(out))
            }
        })
    }

    /// Appends positions `start..start + len` of the loop to `out` (of the tensor's dtype),
    /// read through the source's strides.
    fn gather_onto<T: Element>(&self, start: usize, len: usize, out: &mut Vec<T>) {
        let data = self.tensor.data::<T>();
        let [step] = strided::inner_strides(&self.strides);
        strided::visit_runs(
            &self.shape,
            &self.strides,
            [self.tensor.layout().offset],
            start,
            start + len,
            |_, run, [o]| match step {
                0 => out.extend(std::iter::repeat_n(data[o], run)),
                1 => out.extend_from_slice(&data[o..o + run]),
                s => out.extend((0..run).map(|i| data[o + i * s])),
            },
        );
    }
}

impl Chain {
    /// The chain's sources for one run.
    fn prepare<'t>(&self, inputs: &[&'t Tensor]) -> Vec<Source<'t>> {
        self.sources
            .iter()
            .map(|&i| Source::new(inputs[i], &self.shape))
            .collect()
    }

    /// Runs the chain on positions `start..start + len`; `block` is the enclosing kernel's
    /// block for those positions. Hands the values of [`Chain::results`] to
    /// `put(result, values)`, in order: a tile at a time for an f32 chain, else whole.
    fn eval_into(
        &self,
        sources: &[Source],
        block: Option<Elements>,
        start: usize,
        len: usize,
        put: &mut dyn FnMut(usize, Elements),
    ) -> Result<()> {
        if let Some(f32_chain) = &self.f32 {
            f32_chain.eval(sources, block, start, len, put);
            return Ok(());
        }
        for (j, value) in self
            .eval_blocks(sources, block, start, len)?
            .iter()
            .enumerate()
        {
            put(j, value.elements());
        }
        Ok(())
    }

    /// [`Chain::eval_into`], returning the results' values as whole blocks.
    fn eval_buffers(
        &self,
        sources: &[Source],
        block: Option<Elements>,
        start: usize,
        len: usize,
    ) -> Result<Vec<Buffer>> {
        let Some(f32_chain) = &self.f32 else {
            return self.eval_blocks(sources, block, start, len);
        };
        let mut values: Vec<Vec<f32>> = self
            .results
            .iter()
            .map(|_| Vec::with_capacity(len))
            .collect();
        f32_chain.eval(sources, block, start, len, &mut |j, tile| {
            values[j].extend_from_slice(f32::of(tile).expect("f32 chains give f32 values"))
        });
        Ok(values.into_iter().map(Buffer::F32).collect())
    }

    /// Runs the chain on positions `start..start + len` a block kernel call per step, in
    /// blocks of each step's own dtype. Returns the values of [`Chain::results`], in order.
    fn eval_blocks(
        &self,
        sources: &[Source],
        block: Option<Elements>,
        start: usize,
        len: usize,
    ) -> Result<Vec<Buffer>> {
        // Small vectors stay on the stack: on small tensors a fused kernel runs one block, and
        // a heap allocation per step would cost more than the step.
        let gathered: SmallVec<[Block; 4]> = sources.iter().map(|s| s.gather(start, len)).collect();
        let mut values: SmallVec<[Option<Buffer>; 16]> = SmallVec::with_capacity(self.steps.len());
        for (i, step) in self.steps.iter().enumerate() {
            let out = {
                let converted: SmallVec<[Block; 4]> = step
                    .args
                    .iter()
                    .map(|&(operand, to)| {
                        let value = match operand {
                            Operand::Source(i) => gathered[i].elements(),
                            Operand::Block => block.expect("kernels with a block operand pass it"),
                            Operand::Step(j) => values[j]
                                .as_ref()
                                .expect("a value is released only after its last reader")
                                .elements(),
                        };
                        match to {
                            Some(dtype) => Block::Owned(cast_block(value, dtype)),
                            None => Block::Borrowed(value),
                        }
                    })
                    .collect();
                let refs: SmallVec<[Elements; 4]> = converted.iter().map(Block::elements).collect();
                (step.block)(&PointwiseArgs {
                    inputs: &refs,
                    attrs: &step.attrs,
                    output: step.output,
                })
                .map_err(|message| op_error(step.def, &step.metas, message))?
            };
            values.push(Some(out));
            for &j in &self.released[i] {
                values[j] = None;
            }
        }
        Ok(self
            .results
            .iter()
            .map(|&j| values[j].take().expect("results are distinct"))
            .collect())
    }
}

/// How a row kernel gets its input rows.
#[derive(Clone)]
enum RowInput {
    /// From its prologue chain, as the chain's first result.
    Prologue(Chain),
    /// From kernel input `index`, of this shape.
    Input { index: usize, shape: Vec<usize> },
}

/// A row kernel's input rows for one run.
enum RowsIn<'c, 't> {
    /// Computed by the prologue chain from these sources.
    Chain(&'c Chain, Vec<Source<'t>>),
    /// Read from a kernel input.
    Source(Source<'t>),
}

/// Where a row kernel's output comes from.
#[derive(Clone, Copy)]
enum Tap {
    /// The prologue's result (input-row sized).
    Prologue(usize),
    /// The row op's output.
    Row,
    /// The epilogue's result.
    Epilogue(usize),
}

/// What a fused kernel computes.
// One per fused kernel, built when the graph compiles and never moved on a hot path, so the
// size of its largest variant costs nothing worth an indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Body {
    /// Elementwise ops in one loop; the outputs are the chain's results.
    Elementwise(Chain),
    /// A matmul of kernel inputs `a` and `b` with an epilogue whose results are the outputs.
    Matmul {
        a: usize,
        b: usize,
        def: &'static OpDef,
        metas: Vec<TensorMeta>,
        out: DType,
        epilogue: Chain,
    },
    /// A row op between an optional prologue and epilogue.
    Rows {
        input: RowInput,
        def: &'static OpDef,
        prepare: fn(&RowArgs) -> std::result::Result<RowFn, String>,
        attrs: ResolvedAttrs,
        metas: Vec<TensorMeta>,
        /// Kernel inputs of the row op's other operands (weight, bias).
        params: Vec<usize>,
        /// Elements per input row and per output row.
        row: (usize, usize),
        epilogue: Option<Chain>,
        taps: Vec<Tap>,
    },
}

/// Work of a fused kernel, for the cost model.
#[derive(Clone, Debug)]
struct Cost {
    /// The members' costs; elementwise flops scaled to the positions the loop computes.
    parts: Vec<OpCost>,
    /// Bytes of the kernel's inputs, each read once.
    bytes_read: f64,
    /// Bytes of its outputs, each written once.
    bytes_written: f64,
}

impl Cost {
    /// One launch, the engines overlapped (each busy for its own members' flops), and the
    /// kernel's real HBM traffic: only its inputs and outputs, no intermediates.
    fn modeled(&self, model: &CostModel) -> ModeledTime {
        let engines = [Engine::Tensor, Engine::Vector, Engine::Scalar];
        let mut busy = [0.0f64; 3];
        for part in &self.parts {
            if let Some(e) = engines.iter().position(|&e| e == part.engine) {
                let flops = match part.matmul {
                    Some(dims) => dims.padded_flops(),
                    None => part.flops,
                };
                busy[e] += flops / model.peak_flops(part.engine, part.dtype);
            }
        }
        let compute_s = busy.into_iter().fold(0.0, f64::max);
        let memory_s = (self.bytes_read + self.bytes_written) / model.topology().hbm_bandwidth();
        ModeledTime::roofline(compute_s, memory_s)
    }
}

/// A fused kernel: several graph nodes run as one loop nest.
#[derive(Clone)]
pub(crate) struct Fused {
    /// Its description: `fused[` and the member ops in order, e.g. `fused[mul,add,gelu]`.
    pub name: String,
    /// The graph nodes it runs, in graph order.
    pub nodes: Vec<usize>,
    /// The values it reads.
    pub inputs: Vec<ValueId>,
    /// The values it writes.
    pub outputs: Vec<ValueId>,
    input_metas: Vec<TensorMeta>,
    output_metas: Vec<TensorMeta>,
    body: Body,
    cost: Cost,
}

/// Collects a kernel's inputs while its chains are lowered.
struct Lowering<'g> {
    graph: &'g Graph,
    users: &'g Users,
    /// Which nodes the kernel runs.
    inside: Vec<bool>,
    inputs: Vec<ValueId>,
    parts: Vec<OpCost>,
}

impl Lowering<'_> {
    /// The kernel input index of `v`, added on first use.
    fn input(&mut self, v: ValueId) -> usize {
        match self.inputs.iter().position(|&x| x == v) {
            Some(i) => i,
            None => {
                self.inputs.push(v);
                self.inputs.len() - 1
            }
        }
    }

    /// True when `v` is needed after the kernel: a graph output or read by another kernel.
    fn escapes(&self, v: ValueId) -> bool {
        self.users.is_output[v.0 as usize]
            || self.users.of[v.0 as usize].iter().any(|&u| !self.inside[u])
    }

    fn metas_of(&self, values: &[ValueId]) -> Vec<TensorMeta> {
        values.iter().map(|&v| self.graph.meta(v).clone()).collect()
    }

    /// A node's registry cost.
    fn cost_of(&self, n: usize) -> (OpCost, &'static OpDef, ResolvedAttrs, Vec<TensorMeta>) {
        let node = &self.graph.nodes[n];
        let def = def_of(node);
        let attrs = ResolvedAttrs::resolve(def.attrs, &node.attrs)
            .expect("graph attributes were resolved when the node was added");
        let metas = self.metas_of(&node.inputs);
        let outputs = self.metas_of(&node.outputs);
        let cost = (def.cost)(
            &MetaArgs {
                inputs: &metas,
                attrs: &attrs,
            },
            &outputs,
        );
        (cost, def, attrs, metas)
    }

    /// Lowers `group` to a chain. `block` is the value the enclosing kernel hands in as a
    /// block; `needed` are values the kernel uses itself. The chain's results are `needed`,
    /// then the group's values that escape the kernel; the escaping ones are returned.
    // One walk over the chain's nodes that assigns every value a slot and a step; its cases
    // share the maps it fills.
    fn chain(
        &mut self,
        group: &Group,
        block: Option<ValueId>,
        needed: &[ValueId],
    ) -> (Chain, Vec<ValueId>) {
        let g = self.graph;
        let numel: usize = group.shape.iter().product();
        let mut sources: Vec<usize> = Vec::new();
        let mut steps: Vec<Step> = Vec::new();
        let mut step_of: Vec<(ValueId, usize)> = Vec::new();
        let mut bytes_per_position = 0;
        for &n in &group.nodes {
            let node = &g.nodes[n];
            let (mut cost, def, attrs, metas) = self.cost_of(n);
            let out = g.meta(node.outputs[0]).clone();
            // A member smaller than the loop is recomputed at every position it broadcasts to.
            cost.flops *= numel as f64 / out.numel().max(1) as f64;
            self.parts.push(cost);
            let pointwise = def
                .pointwise
                .expect("elementwise groups hold pointwise ops only");
            let dtypes = (pointwise.operands)(
                &MetaArgs {
                    inputs: &metas,
                    attrs: &attrs,
                },
                &out,
            );
            let mut args = Vec::with_capacity(node.inputs.len());
            for (&v, &to) in node.inputs.iter().zip(&dtypes) {
                let operand = if Some(v) == block {
                    Operand::Block
                } else if let Some(&(_, j)) = step_of.iter().find(|(x, _)| *x == v) {
                    Operand::Step(j)
                } else {
                    let input = self.input(v);
                    let i = match sources.iter().position(|&s| s == input) {
                        Some(i) => i,
                        None => {
                            sources.push(input);
                            bytes_per_position += g.meta(v).dtype.size();
                            sources.len() - 1
                        }
                    };
                    Operand::Source(i)
                };
                let from = g.meta(v).dtype;
                if from != to {
                    bytes_per_position += to.size();
                }
                args.push((operand, (from != to).then_some(to)));
            }
            bytes_per_position += out.dtype.size();
            step_of.push((node.outputs[0], steps.len()));
            steps.push(Step {
                def,
                attrs,
                block: pointwise.block,
                args,
                output: out.dtype,
                metas,
            });
        }
        let escaping: Vec<ValueId> = step_of
            .iter()
            .map(|&(v, _)| v)
            .filter(|&v| self.escapes(v) && !needed.contains(&v))
            .collect();
        let results: Vec<usize> = needed
            .iter()
            .chain(&escaping)
            .map(|v| {
                step_of
                    .iter()
                    .find(|(x, _)| x == v)
                    .map(|&(_, j)| j)
                    .expect("results are group values")
            })
            .collect();
        let released = released_after(&steps, &results);
        let source_dtypes: Vec<DType> = sources
            .iter()
            .map(|&i| g.meta(self.inputs[i]).dtype)
            .collect();
        let f32 = F32Chain::lower(
            &steps,
            &results,
            &released,
            &source_dtypes,
            block.map(|v| g.meta(v).dtype),
        );
        let chain = Chain {
            shape: group.shape.clone(),
            sources,
            steps,
            results,
            released,
            bytes_per_position,
            f32,
        };
        (chain, escaping)
    }
}

/// [`Chain::released`]: each step's value is dropped after the last step that reads it, unless
/// it is a result.
fn released_after(steps: &[Step], results: &[usize]) -> Vec<Vec<usize>> {
    let mut last_read: Vec<Option<usize>> = vec![None; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        for &(operand, _) in &step.args {
            if let Operand::Step(j) = operand {
                last_read[j] = Some(i);
            }
        }
    }
    let mut released = vec![Vec::new(); steps.len()];
    for (j, last) in last_read.into_iter().enumerate() {
        if let (Some(i), false) = (last, results.contains(&j)) {
            released[i].push(j);
        }
    }
    released
}

impl Fused {
    /// The fused kernel of `plan`, or `None` for a plain op.
    // One arm per plan kind, each building its body from the plan in one pass over its nodes;
    // split, the arms would pass most of the lowering state back and forth.
    pub(crate) fn lower(g: &Graph, users: &Users, plan: &KernelPlan) -> Option<Fused> {
        let mut inside = vec![false; g.nodes.len()];
        for n in plan.nodes() {
            inside[n] = true;
        }
        let mut low = Lowering {
            graph: g,
            users,
            inside,
            inputs: Vec::new(),
            parts: Vec::new(),
        };
        let mut names: Vec<&'static str> = Vec::new();
        let group_names = |group: &Group| -> Vec<&'static str> {
            group.nodes.iter().map(|&n| g.nodes[n].name()).collect()
        };
        let (body, outputs) = match plan {
            KernelPlan::Op(_) => return None,
            KernelPlan::Elementwise(group) => {
                names.extend(group_names(group));
                let (chain, outputs) = low.chain(group, None, &[]);
                (Body::Elementwise(chain), outputs)
            }
            KernelPlan::Matmul { node, epilogue } => {
                let mm = &g.nodes[*node];
                let (cost, def, _, metas) = low.cost_of(*node);
                low.parts.push(cost);
                let (a, b) = (low.input(mm.inputs[0]), low.input(mm.inputs[1]));
                names.push(def.name);
                names.extend(group_names(epilogue));
                let (chain, outputs) = low.chain(epilogue, Some(mm.outputs[0]), &[]);
                let body = Body::Matmul {
                    a,
                    b,
                    def,
                    metas,
                    out: g.meta(mm.outputs[0]).dtype,
                    epilogue: chain,
                };
                (body, outputs)
            }
            KernelPlan::Rows {
                node,
                prologue,
                epilogue,
            } => {
                let rn = &g.nodes[*node];
                let (x, y) = (rn.inputs[0], rn.outputs[0]);
                let mut outputs = Vec::new();
                let mut taps = Vec::new();
                let input = match prologue {
                    Some(group) => {
                        names.extend(group_names(group));
                        let (chain, escaping) = low.chain(group, None, &[x]);
                        let x_escapes = low.escapes(x);
                        if x_escapes {
                            outputs.push(x);
                            taps.push(Tap::Prologue(0));
                        }
                        for (i, v) in escaping.into_iter().enumerate() {
                            outputs.push(v);
                            taps.push(Tap::Prologue(i + 1));
                        }
                        RowInput::Prologue(chain)
                    }
                    None => RowInput::Input {
                        index: low.input(x),
                        shape: g.meta(x).shape.clone(),
                    },
                };
                let (cost, def, attrs, metas) = low.cost_of(*node);
                low.parts.push(cost);
                names.push(def.name);
                let params = rn.inputs[1..].iter().map(|&v| low.input(v)).collect();
                let rowwise = def.rowwise.expect("the reduction pass fuses row ops only");
                let rows = (rowwise.rows)(&MetaArgs {
                    inputs: &metas,
                    attrs: &attrs,
                })
                .expect("the reduction pass fuses whole-row applications only");
                if epilogue.is_none() || low.escapes(y) {
                    outputs.push(y);
                    taps.push(Tap::Row);
                }
                let epilogue = epilogue.as_ref().map(|group| {
                    names.extend(group_names(group));
                    let (chain, escaping) = low.chain(group, Some(y), &[]);
                    for (i, v) in escaping.into_iter().enumerate() {
                        outputs.push(v);
                        taps.push(Tap::Epilogue(i));
                    }
                    chain
                });
                let body = Body::Rows {
                    input,
                    def,
                    prepare: rowwise.prepare,
                    attrs,
                    metas,
                    params,
                    row: rows,
                    epilogue,
                    taps,
                };
                (body, outputs)
            }
        };
        let input_metas = low.metas_of(&low.inputs);
        let output_metas = low.metas_of(&outputs);
        let bytes = |ms: &[TensorMeta]| ms.iter().map(|m| m.nbytes() as f64).sum();
        Some(Fused {
            name: format!("fused[{}]", names.join(",")),
            nodes: plan.nodes(),
            cost: Cost {
                parts: low.parts,
                bytes_read: bytes(&input_metas),
                bytes_written: bytes(&output_metas),
            },
            inputs: low.inputs,
            outputs,
            input_metas,
            output_metas,
            body,
        })
    }

    /// Runs the kernel on `inputs` (its [`Fused::inputs`], on `core`) through the runtime's one
    /// dispatch path, which reserves its outputs in the core's HBM first and publishes one op
    /// event named after the kernel.
    pub(crate) fn run(
        &self,
        rt: &Runtime,
        core: CoreId,
        inputs: &[&Tensor],
    ) -> Result<Vec<Tensor>> {
        let kernel =
            |_: &[TensorMeta], _: &[TensorMeta]| self.compute(inputs).map(OutputBuffers::from_vec);
        rt.dispatch(Work {
            name: Cow::Owned(self.name.clone()),
            operands: &|_| self.operands(),
            inputs: self.input_metas.clone(),
            outputs: self.output_metas.clone(),
            placement: Placement::Core(core),
            cost: WorkCost {
                flops: self.cost.parts.iter().map(|p| p.flops).sum(),
                bytes: self.cost.bytes_read + self.cost.bytes_written,
                modeled: self.cost.modeled(rt.cost_model()),
            },
            ready_us: Tensor::ready_after(inputs),
            compute: Compute::Buffers(&kernel),
        })
    }

    /// The operands as errors list them: `%3: f32[8, 128], %5: f32[128]`.
    fn operands(&self) -> String {
        self.inputs
            .iter()
            .zip(&self.input_metas)
            .map(|(v, m)| format!("{v}: {m}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    // One arm per kernel body; each arm sets up its sources once and hands run_blocks the
    // per-block loop, which must capture them directly to stay allocation-free.
    fn compute(&self, inputs: &[&Tensor]) -> Result<Vec<Buffer>> {
        let specs = |per_unit: &dyn Fn(usize) -> usize| -> Vec<(DType, usize)> {
            self.output_metas
                .iter()
                .enumerate()
                .map(|(j, m)| (m.dtype, per_unit(j)))
                .collect()
        };
        match &self.body {
            Body::Elementwise(chain) => {
                let sources = chain.prepare(inputs);
                let units: usize = chain.shape.iter().product();
                let block = block_positions(chain.bytes_per_position);
                run_blocks(units, block, units, &specs(&|_| 1), |u0, u1, out| {
                    chain.eval_into(&sources, None, u0, u1 - u0, &mut |j, values| {
                        out.put(j, values)
                    })
                })
            }
            Body::Matmul {
                a,
                b,
                def,
                metas,
                out,
                epilogue,
            } => {
                let bands = RowBands::new(inputs[*a], inputs[*b], *out)
                    .map_err(|message| op_error(def, metas, message))?;
                let sources = epilogue.prepare(inputs);
                let (rows, n) = (bands.rows(), bands.row_len());
                let min_rows = if bands.depth() * n * 4 > LARGE_B_BYTES {
                    MIN_BAND_ROWS_LARGE_B
                } else {
                    MIN_BAND_ROWS
                };
                let band = (block_positions(epilogue.bytes_per_position) / n.max(1)).max(min_rows);
                // Bands run in parallel; a single band lets the matmul kernel use the threads instead.
                let single = rows <= band;
                run_blocks(rows, band, rows * n, &specs(&|_| n), |r0, r1, out| {
                    let y = bands
                        .compute(r0, r1, single)
                        .map_err(|message| op_error(def, metas, message))?;
                    epilogue.eval_into(
                        &sources,
                        Some(y.elements()),
                        r0 * n,
                        (r1 - r0) * n,
                        &mut |j, values| out.put(j, values),
                    )
                })
            }
            Body::Rows {
                input,
                def,
                prepare,
                attrs,
                metas,
                params,
                row: (n_in, n_out),
                epilogue,
                taps,
            } => {
                let (n_in, n_out) = (*n_in, *n_out);
                let param_tensors: Vec<&Tensor> = params.iter().map(|&i| inputs[i]).collect();
                let row_fn = prepare(&RowArgs {
                    params: &param_tensors,
                    attrs,
                    input: metas[0].dtype,
                    row: n_in,
                })
                .map_err(|message| op_error(def, metas, message))?;
                let rows_in = match input {
                    RowInput::Prologue(chain) => RowsIn::Chain(chain, chain.prepare(inputs)),
                    RowInput::Input { index, shape } => {
                        RowsIn::Source(Source::new(inputs[*index], shape))
                    }
                };
                let epilogue = epilogue.as_ref().map(|c| (c, c.prepare(inputs)));
                let units = metas[0].numel() / n_in;
                let prologue_bytes = match &rows_in {
                    RowsIn::Chain(chain, ..) => chain.bytes_per_position,
                    RowsIn::Source(_) => 0,
                };
                let bytes_per_row = n_in * (metas[0].dtype.size() + prologue_bytes)
                    + n_out * epilogue.as_ref().map_or(1, |(c, _)| c.bytes_per_position);
                let block = (BLOCK_BYTES / bytes_per_row.max(1)).max(1);
                let per_unit = |j: usize| match taps[j] {
                    Tap::Prologue(_) => n_in,
                    Tap::Row | Tap::Epilogue(_) => n_out,
                };
                run_blocks(
                    units,
                    block,
                    units * n_in,
                    &specs(&per_unit),
                    |r0, r1, out| {
                        let rows = r1 - r0;
                        // The row op's input rows come first: the prologue's first result
                        // (its results are tapped too), or the input's rows.
                        let (pro, y) = match &rows_in {
                            RowsIn::Chain(chain, sources) => {
                                let pro =
                                    chain.eval_buffers(sources, None, r0 * n_in, rows * n_in)?;
                                let y = row_fn(pro[0].elements());
                                (pro, y)
                            }
                            RowsIn::Source(source) => {
                                let rows_in = source.gather(r0 * n_in, rows * n_in);
                                (Vec::new(), row_fn(rows_in.elements()))
                            }
                        };
                        let epi = match &epilogue {
                            Some((chain, sources)) => chain.eval_buffers(
                                sources,
                                Some(y.elements()),
                                r0 * n_out,
                                rows * n_out,
                            )?,
                            None => Vec::new(),
                        };
                        for (j, tap) in taps.iter().enumerate() {
                            out.put(
                                j,
                                match *tap {
                                    Tap::Prologue(i) => &pro[i],
                                    Tap::Row => &y,
                                    Tap::Epilogue(i) => &epi[i],
                                }
                                .elements(),
                            );
                        }
                        Ok(())
                    },
                )
            }
        }
    }
}

/// A raw output pointer that blocks on several threads write disjoint ranges through.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: `run_blocks` hands each block a distinct range of units, so no two threads write the
// same bytes, and nothing reads them until every block has finished.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

/// Runs `$body` with `$v` bound to the vector inside a buffer, whatever its dtype.
macro_rules! with_vec {
    ($buffer:expr, $v:ident => $body:expr) => {
        match $buffer {
            Buffer::F32($v) => $body,
            Buffer::Bf16($v) => $body,
            Buffer::F16($v) => $body,
            Buffer::F64($v) => $body,
            Buffer::I64($v) => $body,
            Buffer::I32($v) => $body,
            Buffer::U8($v) => $body,
            Buffer::Bool($v) => $body,
        }
    };
}

/// Full-size kernel outputs, filled block by block.
struct Outputs {
    buffers: Vec<Buffer>,
    ptrs: SmallVec<[SendPtr; 4]>,
    dtypes: SmallVec<[DType; 4]>,
    per_unit: SmallVec<[usize; 4]>,
    units: usize,
}

impl Outputs {
    fn new(specs: &[(DType, usize)], units: usize) -> Outputs {
        let mut buffers: Vec<Buffer> = specs
            .iter()
            .map(|&(dtype, per_unit)| {
                with_dtype!(dtype, T => T::into_buffer(Vec::with_capacity(units * per_unit)))
            })
            .collect();
        let ptrs = buffers
            .iter_mut()
            .map(|b| with_vec!(b, v => SendPtr(v.as_mut_ptr().cast::<u8>())))
            .collect();
        Outputs {
            buffers,
            ptrs,
            dtypes: specs.iter().map(|s| s.0).collect(),
            per_unit: specs.iter().map(|s| s.1).collect(),
            units,
        }
    }

    /// The buffers, once every unit of every output has been written.
    fn finish(mut self) -> Vec<Buffer> {
        for (b, &per_unit) in self.buffers.iter_mut().zip(&self.per_unit) {
            // SAFETY: every block wrote all of its units of every output (`run_blocks` checks
            // this), the blocks cover `0..units`, and the capacity is `units * per_unit`.
            with_vec!(b, v => unsafe { v.set_len(self.units * per_unit) });
        }
        self.buffers
    }
}

/// What a block may write: its own units of each output, front to back.
struct BlockWriter<'a> {
    outputs: &'a Outputs,
    units: std::ops::Range<usize>,
    /// Elements of each output the block has written so far.
    written: SmallVec<[usize; 4]>,
}

impl BlockWriter<'_> {
    /// Appends `values` to the block's part of output `j`, after what was put there before.
    fn put(&mut self, j: usize, values: Elements) {
        let o = self.outputs;
        let at = self.written[j];
        let len = values.len();
        let room = self.units.len() * o.per_unit[j];
        assert!(
            values.dtype() == o.dtypes[j] && at + len <= room,
            "a fused block put {len} {} values at {at} of {room} {} slots",
            values.dtype(),
            o.dtypes[j]
        );
        let size = o.dtypes[j].size();
        let src = with_dtype!(values.dtype(), T => T::of(values)
            .expect("dispatched on the elements' own dtype")
            .as_ptr()
            .cast::<u8>());
        // SAFETY: the destination, `len` elements from element `at` of the block's part, lies
        // within that part (checked above), which lies within the capacity (units end at most
        // at `o.units`) and belongs to this block alone; it has the source's element type
        // (checked above), and bytes of that type copied from a valid slice are valid values.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src,
                o.ptrs[j]
                    .0
                    .add((self.units.start * o.per_unit[j] + at) * size),
                len * size,
            );
        }
        self.written[j] = at + len;
    }

    /// True once every output's part is written in full.
    fn complete(&self) -> bool {
        let o = self.outputs;
        (0..o.per_unit.len()).all(|j| self.written[j] == self.units.len() * o.per_unit[j])
    }
}

/// Runs `f` on blocks of `block` units out of `units`, in parallel when the kernel touches at
/// least [`PARALLEL_THRESHOLD`] elements (`work`), and returns the outputs `specs` describes
/// (dtype, elements per unit). Each block checks the calling thread's cancel token first.
fn run_blocks(
    units: usize,
    block: usize,
    work: usize,
    specs: &[(DType, usize)],
    f: impl Fn(usize, usize, &mut BlockWriter) -> Result<()> + Sync,
) -> Result<Vec<Buffer>> {
    let outputs = Outputs::new(specs, units);
    let token = Token::current();
    let block = block.max(1);
    let run = |b: usize| -> Result<()> {
        token.check();
        let u0 = b * block;
        let u1 = (u0 + block).min(units);
        let mut writer = BlockWriter {
            outputs: &outputs,
            units: u0..u1,
            written: SmallVec::from_elem(0, specs.len()),
        };
        f(u0, u1, &mut writer)?;
        assert!(writer.complete(), "a fused block left an output unwritten");
        Ok(())
    };
    let blocks = units.div_ceil(block);
    if work < PARALLEL_THRESHOLD || blocks < 2 {
        (0..blocks).try_for_each(run)?;
    } else {
        (0..blocks).into_par_iter().try_for_each(run)?;
    }
    Ok(outputs.finish())
}
