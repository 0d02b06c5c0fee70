//! The op registry: one [`OpDef`] per op, the single source of truth for its name, schema, doc,
//! shape inference, kernel and cost. Listing, documentation, completion, dispatch (host and
//! guest) and the cost model all read it from here.

use std::collections::HashMap;

use smallvec::SmallVec;

use super::attrs::{AttrSpec, ResolvedAttrs};
use crate::device::cost::OpCost;
use crate::tensor::{Buffer, DType, Elements, Layout, Tensor, TensorMeta};

/// What an op's kernel is handed.
pub struct KernelArgs<'a> {
    /// The input tensors, in schema order.
    pub inputs: &'a [&'a Tensor],
    /// Resolved attributes.
    pub attrs: &'a ResolvedAttrs,
    /// The outputs' shapes and dtypes, from the op's inference.
    pub outputs: &'a [TensorMeta],
}

/// What an op's shape inference and cost function are handed.
pub struct MetaArgs<'a> {
    /// The inputs' shapes and dtypes, in schema order.
    pub inputs: &'a [TensorMeta],
    /// Resolved attributes.
    pub attrs: &'a ResolvedAttrs,
}

/// The result of a view op: a new layout over the same storage, or (for `reshape` of a layout
/// that cannot be viewed) a request to copy into this shape.
pub enum ViewResult {
    /// Share storage with this layout.
    View(Layout),
    /// Materialize the input contiguously with this shape.
    Copy(Vec<usize>),
}

/// A compute kernel's output buffers, one per output. Inline for the usual single output, so
/// a tiny op allocates nothing for the list.
pub type OutputBuffers = SmallVec<[Buffer; 1]>;

/// What a compute kernel returns: its outputs, or why the inputs cannot be computed.
pub type KernelResult = Result<OutputBuffers, String>;

/// How an op runs.
#[derive(Clone, Copy)]
pub enum Exec {
    /// Computes dense row-major output buffers, one per output.
    Compute(fn(&KernelArgs) -> KernelResult),
    /// Re-describes its single input's storage (no data moves).
    View(fn(&Tensor, &ResolvedAttrs) -> Result<ViewResult, String>),
}

/// What an elementwise op's block kernel is handed.
pub struct PointwiseArgs<'a> {
    /// Dense operand blocks of one length, already converted to the dtypes that
    /// [`Pointwise::operands`] gave (borrowed, so that a dense input is read in place).
    pub inputs: &'a [Elements<'a>],
    /// Resolved attributes.
    pub attrs: &'a ResolvedAttrs,
    /// The output dtype.
    pub output: DType,
}

/// The per-element form of an elementwise op, which fused kernels use to run chains of ops on
/// small blocks instead of full-size intermediates.
///
/// Applied to blocks of operands converted to [`Pointwise::operands`], `block` gives bitwise
/// what the op's eager kernel gives at the same positions: both call the same element
/// function, and both round once per op.
#[derive(Clone, Copy)]
pub struct Pointwise {
    /// The dtype each input is converted to before the math, from the inputs' metas, the
    /// attributes and the output's meta (the eager kernel converts the same way).
    pub operands: fn(&MetaArgs, &TensorMeta) -> Vec<DType>,
    /// Element `i` of the result from element `i` of each operand.
    pub block: fn(&PointwiseArgs) -> Result<Buffer, String>,
    /// The op's f32 loop for these attributes, when all its operands and its result are f32:
    /// bitwise what `block` gives there. Fused chains whose every value is f32 run it over
    /// L1-sized tiles with no per-call dispatch. `None` for ops without one.
    pub f32_tile: fn(&ResolvedAttrs) -> Option<F32Tile>,
}

/// An op's f32 loop over a tile, `out[i] = f(a[i], ...)`, compiled for the CPU's widest
/// vectors; the slices have one length.
#[derive(Clone, Copy, Debug)]
pub enum F32Tile {
    /// One operand.
    Unary(fn(&[f32], &mut [f32])),
    /// Two operands.
    Binary(fn(&[f32], &[f32], &mut [f32])),
}

impl F32Tile {
    /// Operands the loop reads.
    pub fn arity(self) -> usize {
        match self {
            F32Tile::Unary(_) => 1,
            F32Tile::Binary(_) => 2,
        }
    }
}

/// [`Pointwise::f32_tile`] of ops without an f32 loop.
pub fn no_f32_tile(_: &ResolvedAttrs) -> Option<F32Tile> {
    None
}

/// What [`Rowwise::prepare`] is handed.
pub struct RowArgs<'a> {
    /// The op's inputs after the first (a norm's weight and bias), whole.
    pub params: &'a [&'a Tensor],
    /// Resolved attributes.
    pub attrs: &'a ResolvedAttrs,
    /// The dtype of the first input's rows.
    pub input: DType,
    /// Elements per input row, as [`Rowwise::rows`] gave.
    pub row: usize,
}

/// Maps a dense block of whole input rows to the matching block of output rows.
pub type RowFn = Box<dyn Fn(Elements) -> Buffer + Send + Sync>;

/// The per-row form of an op that maps each row of its first input's trailing dims to one row
/// of its output (softmax, the norms, reductions over trailing dims). Fused kernels use it to
/// run an elementwise prologue and epilogue row by row, without full-size intermediates.
///
/// The row function is the one the eager kernel applies, so results are bitwise the same.
#[derive(Clone, Copy)]
pub struct Rowwise {
    /// `(input row length, output row length)` when this application works on whole rows of
    /// the first input's trailing dims (`None` otherwise, e.g. softmax over dim 0).
    pub rows: fn(&MetaArgs) -> Option<(usize, usize)>,
    /// The row function for these parameters, attributes and dtype.
    pub prepare: fn(&RowArgs) -> Result<RowFn, String>,
}

/// How many tensors an input slot takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// Exactly one tensor.
    Tensor,
    /// Zero or one tensor; only trailing inputs may be optional.
    Optional,
    /// One or more tensors; only as the sole input.
    List,
}

/// One input slot of an op.
#[derive(Clone, Copy, Debug)]
pub struct InputSpec {
    /// Its name, as in the schema and in error messages.
    pub name: &'static str,
    /// How many tensors it takes.
    pub kind: InputKind,
}

impl InputSpec {
    /// A required tensor input.
    pub const fn tensor(name: &'static str) -> InputSpec {
        InputSpec {
            name,
            kind: InputKind::Tensor,
        }
    }
    /// An optional trailing tensor input.
    pub const fn optional(name: &'static str) -> InputSpec {
        InputSpec {
            name,
            kind: InputKind::Optional,
        }
    }
    /// A list of tensors (the op's only input).
    pub const fn list(name: &'static str) -> InputSpec {
        InputSpec {
            name,
            kind: InputKind::List,
        }
    }
}

/// A family of ops, for listings and for the cost model's engine choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpGroup {
    /// Tensors from attributes alone (zeros, arange, randn).
    Creation,
    /// Views and layout (reshape, transpose, contiguous).
    Shape,
    /// Elementwise math with broadcasting.
    Elementwise,
    /// Comparisons, logic and `where`.
    Comparison,
    /// Reductions over dims.
    Reduction,
    /// Matrix products.
    Matmul,
    /// Activations and normalizations over a dim (softmax, layer_norm).
    Nn,
    /// Gathers, concatenation, padding and masks.
    Indexing,
    /// Dtype conversion.
    Cast,
    /// Loss functions.
    Loss,
    /// Optimizer updates (fused, as torch's `_fused_adamw_`).
    Optimizer,
}

impl OpGroup {
    /// The group's name in listings.
    pub fn name(self) -> &'static str {
        match self {
            OpGroup::Creation => "creation",
            OpGroup::Shape => "shape",
            OpGroup::Elementwise => "elementwise",
            OpGroup::Comparison => "comparison",
            OpGroup::Reduction => "reduction",
            OpGroup::Matmul => "matmul",
            OpGroup::Nn => "nn",
            OpGroup::Indexing => "indexing",
            OpGroup::Cast => "cast",
            OpGroup::Loss => "loss",
            OpGroup::Optimizer => "optimizer",
        }
    }
}

/// Everything about one op.
#[derive(Clone, Copy)]
pub struct OpDef {
    /// Its name, as the guest looks it up.
    pub name: &'static str,
    /// One line saying what it computes.
    pub doc: &'static str,
    /// Its family.
    pub group: OpGroup,
    /// Input slots.
    pub inputs: &'static [InputSpec],
    /// Attributes.
    pub attrs: &'static [AttrSpec],
    /// Output names (one per output).
    pub outputs: &'static [&'static str],
    /// Output shapes and dtypes from input shapes, dtypes and attributes. Errors name what was
    /// expected; the runtime adds the op name and the operands.
    pub infer: fn(&MetaArgs) -> Result<Vec<TensorMeta>, String>,
    /// The CPU kernel.
    pub exec: Exec,
    /// Flops, bytes and engine for the cost model.
    pub cost: fn(&MetaArgs, &[TensorMeta]) -> OpCost,
    /// The per-element form, for elementwise ops that fused kernels may include.
    pub pointwise: Option<Pointwise>,
    /// The per-row form, for row ops that fused kernels may include.
    pub rowwise: Option<Rowwise>,
}

impl OpDef {
    /// The schema line: `layer_norm(x, weight?, bias?; normalized_shape: int[] = [], eps: float = 1e-05) -> out`.
    pub fn schema(&self) -> String {
        let inputs: Vec<String> = self
            .inputs
            .iter()
            .map(|i| match i.kind {
                InputKind::Tensor => i.name.to_string(),
                InputKind::Optional => format!("{}?", i.name),
                InputKind::List => format!("{}[]", i.name),
            })
            .collect();
        let attrs: Vec<String> = self.attrs.iter().map(|a| a.signature()).collect();
        let args = match (inputs.is_empty(), attrs.is_empty()) {
            (_, true) => inputs.join(", "),
            (true, false) => format!("; {}", attrs.join(", ")),
            (false, false) => format!("{}; {}", inputs.join(", "), attrs.join(", ")),
        };
        format!("{}({args}) -> {}", self.name, self.outputs.join(", "))
    }

    /// The allowed number of input tensors, as `(min, max)`; `max` is `None` for lists.
    pub fn input_count(&self) -> (usize, Option<usize>) {
        let mut min = 0;
        let mut max = Some(0usize);
        for i in self.inputs {
            match i.kind {
                InputKind::Tensor => {
                    min += 1;
                    max = max.map(|m| m + 1);
                }
                InputKind::Optional => max = max.map(|m| m + 1),
                InputKind::List => {
                    min += 1;
                    max = None;
                }
            }
        }
        (min, max)
    }

    /// The schema name of input `i` (list elements are `tensors[2]`).
    pub fn input_name(&self, i: usize) -> String {
        match self.inputs.first() {
            Some(spec) if spec.kind == InputKind::List => format!("{}[{i}]", spec.name),
            _ => self
                .inputs
                .get(i)
                .map_or_else(|| format!("input {i}"), |s| s.name.to_string()),
        }
    }
}

/// A stable index into the registry, what `op_lookup` hands the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(pub u32);

/// All ops, by name and by id.
pub struct Registry {
    ops: Vec<OpDef>,
    by_name: HashMap<&'static str, OpId>,
}

impl Registry {
    /// A registry of `ops`, in that order. The process-wide one, [`Registry::global`], is
    /// collected from the op families in `ops/mod.rs`, so this file depends on none of them.
    pub(crate) fn new(ops: Vec<OpDef>) -> Registry {
        let mut by_name = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            let previous = by_name.insert(op.name, OpId(i as u32));
            assert!(previous.is_none(), "op '{}' is registered twice", op.name);
        }
        Registry { ops, by_name }
    }

    /// Every op, in registration order.
    pub fn ops(&self) -> &[OpDef] {
        &self.ops
    }

    /// An op's id by name.
    pub fn id(&self, name: &str) -> Option<OpId> {
        self.by_name.get(name).copied()
    }

    /// An op by id.
    pub fn get(&self, id: OpId) -> Option<&OpDef> {
        self.ops.get(id.0 as usize)
    }

    /// An op by name, or an error that suggests the closest names.
    pub fn lookup(&self, name: &str) -> Result<(OpId, &OpDef), String> {
        match self.id(name) {
            Some(id) => Ok((id, &self.ops[id.0 as usize])),
            None => {
                let mut near: Vec<(usize, &str)> = self
                    .ops
                    .iter()
                    .map(|o| (edit_distance(name, o.name), o.name))
                    .filter(|(d, _)| *d <= 2)
                    .collect();
                near.sort();
                let hint = if near.is_empty() {
                    "; `neuronlab ops` lists every op".to_string()
                } else {
                    let names: Vec<&str> = near.iter().take(3).map(|(_, n)| *n).collect();
                    format!("; did you mean {}?", names.join(", "))
                };
                Err(format!("unknown op '{name}'{hint}"))
            }
        }
    }
}

impl Registry {
    /// Every op, grouped by family: one `schema` line and its doc per op.
    pub fn listing(&self) -> String {
        let mut groups: Vec<OpGroup> = self.ops.iter().map(|o| o.group).collect();
        groups.sort();
        groups.dedup();
        let mut out = String::new();
        for g in groups {
            out.push_str(&format!("{}:\n", g.name()));
            for op in self.ops.iter().filter(|o| o.group == g) {
                out.push_str(&format!("  {}\n      {}\n", op.schema(), op.doc));
            }
        }
        out
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + (ca != cb) as usize)
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_is_documented_with_a_schema() {
        let r = Registry::global();
        assert!(r.ops().len() > 60, "{} ops", r.ops().len());
        for op in r.ops() {
            assert!(!op.doc.is_empty() && op.doc.len() < 120, "{}: doc", op.name);
            assert!(op.schema().starts_with(op.name));
            assert!(!op.outputs.is_empty(), "{}", op.name);
            let optional_then_required = op
                .inputs
                .windows(2)
                .any(|w| w[0].kind == InputKind::Optional && w[1].kind != InputKind::Optional);
            assert!(
                !optional_then_required,
                "{}: optional inputs must trail",
                op.name
            );
        }
    }

    #[test]
    fn unknown_names_get_suggestions() {
        let Err(e) = Registry::global().lookup("softmx") else {
            panic!("softmx resolved");
        };
        assert!(e.contains("did you mean softmax"), "{e}");
    }
}
