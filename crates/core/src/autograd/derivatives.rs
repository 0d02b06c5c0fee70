//! The table of backward formulas: one row per registry op, as PyTorch's derivatives.yaml.
//!
//! A row is either a VJP, written as registry ops so that backward runs the same kernels,
//! costs and events as forward, or [`Derivative::NotDifferentiable`] (integer and bool
//! results, creation ops). A VJP returns one gradient per input (`None` where the input needs
//! none); the engine then sums a broadcast gradient back to its input's shape and casts it to
//! the input's dtype, so formulas may leave both to it.
//!
//! Each row also says what its formula reads ([`Saves`]): only those tensors stay alive, and
//! count as saved activations, until backward frees the node.
//!
//! The norms, softmaxes and losses compute their backward in f32 for bf16 and f16 inputs (as
//! torch's accumulate types), then the engine rounds the result to the input's dtype.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::rematerialize::{Packed, Slot};
use crate::device::topology::CoreId;
use crate::error::{Error, Result};
use crate::ops::attrs::{Attrs, ResolvedAttrs};
use crate::tensor::{normalize_dim, DType, Tensor, TensorMeta};

/// What a VJP reads besides the output gradients (the inputs' shapes and dtypes are always
/// kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Saves {
    /// The op's inputs.
    pub inputs: bool,
    /// The op's outputs.
    pub outputs: bool,
}

const NOTHING: Saves = Saves {
    inputs: false,
    outputs: false,
};
const INPUTS: Saves = Saves {
    inputs: true,
    outputs: false,
};
const OUTPUTS: Saves = Saves {
    inputs: false,
    outputs: true,
};
const BOTH: Saves = Saves {
    inputs: true,
    outputs: true,
};

/// One gradient per input of the op, `None` where none flows.
pub type Grads = Vec<Option<Tensor>>;

/// A vector-Jacobian product: the inputs' gradients from the outputs'.
pub type VjpFn = fn(&Vjp) -> Result<Grads>;

/// How an op's gradient is computed.
#[derive(Clone, Copy)]
pub enum Derivative {
    /// By this formula, which reads what `saves` says.
    Vjp {
        /// What the formula reads.
        saves: Saves,
        /// The formula.
        vjp: VjpFn,
    },
    /// No gradient flows through the op: its results are integers or bools, it has no tensor
    /// inputs, or it is an optimizer's update (which torch runs under `no_grad`).
    NotDifferentiable,
}

/// Runs registry ops for a VJP: the runtime, during backward.
pub trait OpCalls {
    /// Runs the single-output op `op` on `core` (where creation ops put their result).
    fn call_op(&self, op: &str, inputs: &[&Tensor], attrs: Attrs, core: CoreId) -> Result<Tensor>;
}

/// What one op application keeps for its backward: a recorded node's state, or the same
/// built from a traced graph's node.
pub struct OpBackward {
    /// The op's formula.
    pub vjp: VjpFn,
    /// The op's attributes, defaults filled in.
    pub attrs: ResolvedAttrs,
    /// Shapes and dtypes of the inputs.
    pub input_metas: Vec<TensorMeta>,
    /// Shapes and dtypes of the outputs.
    pub output_metas: Vec<TensorMeta>,
    /// The inputs the formula reads (per [`Saves`]), `None` for the others.
    pub inputs: Vec<Option<Tensor>>,
    /// The outputs the formula reads, `None` for the others.
    pub outputs: Vec<Option<Tensor>>,
    /// The saved inputs and outputs kept as recipes instead (their slots above are `None`):
    /// [`OpBackward::unpacked`] makes them again.
    pub packed: Vec<Packed>,
    /// Where creation ops of the formula put their results.
    pub core: CoreId,
}

impl OpBackward {
    /// This state with its packed saves made again, `None` when it has none: what the
    /// formula reads, for the one backward about to run (the copy, and with it the
    /// rematerialized tensors, is dropped after it).
    pub fn unpacked(&self, rt: &crate::runtime::Runtime) -> Result<Option<OpBackward>> {
        if self.packed.is_empty() {
            return Ok(None);
        }
        let (mut inputs, mut outputs) = (self.inputs.clone(), self.outputs.clone());
        for p in &self.packed {
            let t = p.unpack(rt)?;
            match p.slot() {
                Slot::Input(i) => inputs[i] = Some(t),
                Slot::Output(i) => outputs[i] = Some(t),
            }
        }
        Ok(Some(OpBackward {
            vjp: self.vjp,
            attrs: self.attrs.clone(),
            input_metas: self.input_metas.clone(),
            output_metas: self.output_metas.clone(),
            inputs,
            outputs,
            packed: Vec::new(),
            core: self.core,
        }))
    }
}

/// The gradients of one op application's inputs from its outputs' (`out_grads`, one per
/// output): the formula's results, each summed back over broadcast dims and cast to its
/// input's dtype, `None` where `needs` wants none. `ops` runs the formula's ops: the runtime
/// during backward, or a graph being traced. `name` names the op in errors.
pub fn input_grads(
    ops: &dyn OpCalls,
    name: &str,
    state: &OpBackward,
    out_grads: &[Tensor],
    needs: &[bool],
) -> Result<Grads> {
    let vjp = Vjp {
        ops,
        state,
        grads: out_grads,
        needs,
    };
    let grads = (state.vjp)(&vjp)?;
    if grads.len() != state.input_metas.len() {
        return Err(Error::Invalid(format!(
            "internal error: the backward of {name} gave {} gradients for {} inputs",
            grads.len(),
            state.input_metas.len()
        )));
    }
    grads
        .into_iter()
        .enumerate()
        .map(|(j, g)| match g {
            Some(g) if vjp.needs(j) => fit(&vjp, g, &state.input_metas[j], name, j).map(Some),
            _ => Ok(None),
        })
        .collect()
}

/// `g` summed back over broadcast dims and cast to the input's dtype; anything else that
/// does not match the input is a bug in the op's formula.
fn fit(v: &Vjp, g: Tensor, input: &TensorMeta, op: &str, j: usize) -> Result<Tensor> {
    let g = sum_to(v, &g, &input.shape)?;
    if g.shape() != input.shape.as_slice() {
        return Err(Error::Invalid(format!(
            "internal error: the backward of {op} gave input {j} a gradient {} for {input}",
            g.meta()
        )));
    }
    v.cast(&g, input.dtype)
}

/// What a VJP is handed: the saved tensors, the output gradients, which inputs need a
/// gradient, and ops to compute with.
pub struct Vjp<'a> {
    ops: &'a dyn OpCalls,
    state: &'a OpBackward,
    grads: &'a [Tensor],
    needs: &'a [bool],
}

/// The derivative of the op called `name`, `None` when the table has no row for it (a test
/// keeps every registry op in the table).
pub fn of(name: &str) -> Option<&'static Derivative> {
    static BY_NAME: OnceLock<HashMap<&'static str, Derivative>> = OnceLock::new();
    BY_NAME
        .get_or_init(|| TABLE.iter().copied().collect())
        .get(name)
}

/// The names of every op the table has a row for.
pub fn names() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|(name, _)| *name)
}

impl Vjp<'_> {
    /// Saved input `i`.
    pub fn x(&self, i: usize) -> Result<&Tensor> {
        self.state
            .inputs
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                Error::Invalid(format!(
                "internal error: a backward formula read input {i}, which its row does not save"
            ))
            })
    }

    /// Saved output `i`.
    pub fn y(&self, i: usize) -> Result<&Tensor> {
        self.state
            .outputs
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                Error::Invalid(format!(
                "internal error: a backward formula read output {i}, which its row does not save"
            ))
            })
    }

    /// The gradient of the (first) output.
    pub fn g(&self) -> &Tensor {
        &self.grads[0]
    }

    /// The op's attributes.
    pub fn attrs(&self) -> &ResolvedAttrs {
        &self.state.attrs
    }

    /// Shape and dtype of input `i`.
    pub fn input(&self, i: usize) -> &TensorMeta {
        &self.state.input_metas[i]
    }

    /// The number of inputs the op was called with.
    pub fn n_inputs(&self) -> usize {
        self.state.input_metas.len()
    }

    /// True when input `i` needs a gradient.
    pub fn needs(&self, i: usize) -> bool {
        self.needs.get(i).copied().unwrap_or(false)
    }

    /// `f()` for input `i` when it needs a gradient.
    fn when(&self, i: usize, f: impl FnOnce() -> Result<Tensor>) -> Result<Option<Tensor>> {
        if self.needs(i) {
            f().map(Some)
        } else {
            Ok(None)
        }
    }

    /// Runs a registry op.
    pub fn op(&self, name: &str, inputs: &[&Tensor], attrs: Attrs) -> Result<Tensor> {
        self.ops.call_op(name, inputs, attrs, self.state.core)
    }

    fn binary(&self, name: &str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.op(name, &[a, b], Attrs::new())
    }

    fn unary(&self, name: &str, a: &Tensor) -> Result<Tensor> {
        self.op(name, &[a], Attrs::new())
    }

    fn add(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.binary("add", a, b)
    }

    fn sub(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.binary("sub", a, b)
    }

    fn mul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.binary("mul", a, b)
    }

    fn div(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.binary("div", a, b)
    }

    fn neg(&self, a: &Tensor) -> Result<Tensor> {
        self.unary("neg", a)
    }

    /// A 0-d tensor holding `value` in `dtype` (0-d operands do not promote a tensor of
    /// their category, so `t * scalar` keeps `t`'s dtype).
    fn scalar(&self, value: f64, dtype: DType) -> Result<Tensor> {
        let attrs = Attrs::new()
            .with("shape", Vec::<i64>::new())
            .with("value", value)
            .with("dtype", dtype);
        self.op("full", &[], attrs)
    }

    /// `t * value`.
    fn scale(&self, t: &Tensor, value: f64) -> Result<Tensor> {
        self.mul(t, &self.scalar(value, t.dtype())?)
    }

    /// `t` in `dtype` (itself when it already is).
    pub(crate) fn cast(&self, t: &Tensor, dtype: DType) -> Result<Tensor> {
        if t.dtype() == dtype {
            return Ok(t.clone());
        }
        self.op("cast", &[t], Attrs::new().with("dtype", dtype))
    }

    /// `t` in f32 when it is bf16 or f16: the precision backward of the norms computes in.
    fn wide(&self, t: &Tensor) -> Result<Tensor> {
        match t.dtype() {
            DType::Bf16 | DType::F16 => self.cast(t, DType::F32),
            _ => Ok(t.clone()),
        }
    }

    /// `t` where `cond` holds, zero elsewhere.
    fn keep(&self, cond: &Tensor, t: &Tensor) -> Result<Tensor> {
        let zero = self.scalar(0.0, t.dtype())?;
        self.op("where", &[cond, t, &zero], Attrs::new())
    }

    /// `cond` as 0 and 1 of `dtype`.
    fn indicator(&self, cond: &Tensor, dtype: DType) -> Result<Tensor> {
        self.cast(cond, dtype)
    }

    fn compare(&self, name: &str, t: &Tensor, value: f64) -> Result<Tensor> {
        self.binary(name, t, &self.scalar(value, t.dtype())?)
    }

    fn zeros(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let attrs = Attrs::new().with("shape", shape).with("dtype", dtype);
        self.op("zeros", &[], attrs)
    }

    fn reshape(&self, t: &Tensor, shape: &[usize]) -> Result<Tensor> {
        if t.shape() == shape {
            return Ok(t.clone());
        }
        let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        self.op("reshape", &[t], Attrs::new().with("shape", shape))
    }

    fn expand(&self, t: &Tensor, shape: &[usize]) -> Result<Tensor> {
        if t.shape() == shape {
            return Ok(t.clone());
        }
        let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        self.op("expand", &[t], Attrs::new().with("shape", shape))
    }

    fn sum_dims(&self, t: &Tensor, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let attrs = Attrs::new()
            .with("dims", dims)
            .with("keepdim", keepdim as i64);
        self.op("sum", &[t], attrs)
    }

    fn mean_dims(&self, t: &Tensor, dims: &[usize]) -> Result<Tensor> {
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let attrs = Attrs::new().with("dims", dims).with("keepdim", 1i64);
        self.op("mean", &[t], attrs)
    }

    fn narrow(&self, t: &Tensor, dim: usize, start: usize, length: usize) -> Result<Tensor> {
        let attrs = Attrs::new()
            .with("dim", dim as i64)
            .with("start", start as i64)
            .with("length", length as i64);
        self.op("narrow", &[t], attrs)
    }

    /// `t` padded with zeros along `dim` only.
    fn pad_dim(&self, t: &Tensor, dim: usize, before: usize, after: usize) -> Result<Tensor> {
        if before == 0 && after == 0 {
            return Ok(t.clone());
        }
        let mut pad = vec![0i64; 2 * (t.rank() - dim)];
        let at = 2 * (t.rank() - 1 - dim);
        pad[at] = before as i64;
        pad[at + 1] = after as i64;
        self.op("pad", &[t], Attrs::new().with("pad", pad))
    }

    /// The dims a reduction reduced (`dims`, all when empty), normalized for `rank`.
    fn reduced_dims(&self, rank: usize) -> Result<Vec<usize>> {
        let dims = self.attrs().ints("dims");
        if dims.is_empty() {
            return Ok((0..rank).collect());
        }
        dims.iter()
            .map(|&d| normalize_dim(d, rank).map_err(|e| Error::Invalid(e.to_string())))
            .collect()
    }

    /// A reduction's output (or its gradient) broadcast back over input 0's shape.
    fn unreduce(&self, t: &Tensor) -> Result<Tensor> {
        let shape = self.input(0).shape.clone();
        let dims = self.reduced_dims(shape.len())?;
        let mut kept = shape.clone();
        for &d in &dims {
            kept[d] = 1;
        }
        let t = self.reshape(t, &kept)?;
        self.expand(&t, &shape)
    }

    /// Elements a reduction combined into each output.
    fn reduced_count(&self) -> Result<usize> {
        let shape = &self.input(0).shape;
        Ok(self
            .reduced_dims(shape.len())?
            .iter()
            .map(|&d| shape[d])
            .product())
    }

    /// A dim attribute normalized for input 0's rank.
    fn dim(&self, name: &str) -> Result<usize> {
        self.dim_for(name, self.input(0).shape.len())
    }

    fn dim_for(&self, name: &str, rank: usize) -> Result<usize> {
        normalize_dim(self.attrs().int(name), rank).map_err(|e| Error::Invalid(e.to_string()))
    }
}

/// `t` summed down to `shape`: over the leading dims `t` has beyond it, and over the dims
/// where `shape` has 1 and `t` more (the adjoint of broadcasting).
pub fn sum_to(v: &Vjp, t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if t.shape() == shape {
        return Ok(t.clone());
    }
    let lead = t.rank().saturating_sub(shape.len());
    let dims: Vec<usize> = (0..t.rank())
        .filter(|&k| k < lead || (shape[k - lead] == 1 && t.shape()[k] != 1))
        .collect();
    let summed = if dims.is_empty() {
        t.clone()
    } else {
        v.sum_dims(t, &dims, true)?
    };
    v.reshape(&summed, shape)
}

fn one(t: Result<Tensor>) -> Result<Grads> {
    Ok(vec![Some(t?)])
}

/// The `approximate` attribute of gelu or gelu_backward, for the ops its formulas call.
fn gelu_mode(v: &Vjp) -> Attrs {
    Attrs::new().with("approximate", v.attrs().str("approximate"))
}

/// gelu's backward is one registry op, so backward holds no full-size intermediates.
fn gelu(v: &Vjp) -> Result<Grads> {
    one(v.op("gelu_backward", &[v.g(), v.x(0)?], gelu_mode(v)))
}

/// gelu_backward(grad, x) = grad * gelu'(x): its gradients are gelu_backward of the incoming
/// gradient (for grad) and the incoming gradient times grad times gelu''(x) (for x).
fn gelu_backward(v: &Vjp) -> Result<Grads> {
    let (grad, x) = (v.x(0)?, v.x(1)?);
    let dgrad = v.when(0, || v.op("gelu_backward", &[v.g(), x], gelu_mode(v)))?;
    let dx = v.when(1, || {
        let dt = x.dtype();
        let x2 = v.mul(x, x)?;
        let curvature = if v.attrs().str("approximate") == "tanh" {
            // u = k (x + c x^3): gelu'' = (1 - t^2) (u' - x t u'^2 + x u'' / 2), t = tanh u.
            let k = (2.0 / std::f64::consts::PI).sqrt();
            let c = 0.044715;
            let one = v.scalar(1.0, dt)?;
            let u = v.scale(&v.add(x, &v.scale(&v.mul(&x2, x)?, c)?)?, k)?;
            let t = v.unary("tanh", &u)?;
            let du = v.scale(&v.add(&one, &v.scale(&x2, 3.0 * c)?)?, k)?;
            let sech2 = v.sub(&one, &v.mul(&t, &t)?)?;
            let bend = v.sub(
                &v.add(&du, &v.scale(&x2, 3.0 * k * c)?)?,
                &v.mul(&v.mul(x, &t)?, &v.mul(&du, &du)?)?,
            )?;
            v.mul(&sech2, &bend)?
        } else {
            // phi(x) (2 - x^2)
            let pdf = v.scale(
                &v.unary("exp", &v.scale(&x2, -0.5)?)?,
                1.0 / (2.0 * std::f64::consts::PI).sqrt(),
            )?;
            v.mul(&pdf, &v.sub(&v.scalar(2.0, dt)?, &x2)?)?
        };
        v.mul(&v.mul(v.g(), grad)?, &curvature)
    })?;
    Ok(vec![dgrad, dx])
}

/// torch's maximum/minimum: the gradient goes to the larger (smaller) operand, half to each
/// where they are equal.
fn extremum(v: &Vjp, wins: &str) -> Result<Grads> {
    let (a, b) = (v.x(0)?, v.x(1)?);
    let g = v.g();
    let tie = v.binary("eq", a, b)?;
    let half = v.scale(g, 0.5)?;
    let side = |winner: &Tensor, loser: &Tensor| -> Result<Tensor> {
        let won = v.binary(wins, winner, loser)?;
        let tied = v.keep(&tie, &half)?;
        v.op("where", &[&won, g, &tied], Attrs::new())
    };
    Ok(vec![v.when(0, || side(a, b))?, v.when(1, || side(b, a))?])
}

fn pow(v: &Vjp) -> Result<Grads> {
    let (a, b) = (v.x(0)?, v.x(1)?);
    let g = v.g();
    // torch: zero where the exponent is 0 (d/da a^0 = 0 even at a = 0) ...
    let da = v.when(0, || {
        let bm1 = v.sub(b, &v.scalar(1.0, b.dtype())?)?;
        let d = v.mul(&v.mul(g, b)?, &v.binary("pow", a, &bm1)?)?;
        let nonzero = v.compare("ne", b, 0.0)?;
        v.keep(&nonzero, &d)
    })?;
    // ... and zero where the base is 0 and the exponent >= 0 (log 0 would make it NaN).
    let db = v.when(1, || {
        // log in the result's precision: the base may be narrower than the exponent.
        let y = v.y(0)?;
        let d = v.mul(&v.mul(g, y)?, &v.unary("log", &v.cast(a, y.dtype())?)?)?;
        let zero_base = v.compare("eq", a, 0.0)?;
        let nonneg = v.compare("ge", b, 0.0)?;
        let masked = v.binary("logical_and", &zero_base, &nonneg)?;
        let kept = v.unary("logical_not", &masked)?;
        v.keep(&kept, &d)
    })?;
    Ok(vec![da, db])
}

fn clamp(v: &Vjp) -> Result<Grads> {
    let x = v.x(0)?;
    let mut g = v.g().clone();
    if let Some(min) = v.attrs().opt_float("min") {
        g = v.keep(&v.compare("ge", x, min)?, &g)?;
    }
    if let Some(max) = v.attrs().opt_float("max") {
        g = v.keep(&v.compare("le", x, max)?, &g)?;
    }
    one(Ok(g))
}

fn where_(v: &Vjp) -> Result<Grads> {
    let c = v.x(0)?;
    let g = v.g();
    let ga = v.when(1, || v.keep(c, g))?;
    let gb = v.when(2, || v.keep(&v.unary("logical_not", c)?, g))?;
    Ok(vec![None, ga, gb])
}

/// Back to input 0's shape (reshape, view, flatten, squeeze, unsqueeze).
fn reshape_back(v: &Vjp) -> Result<Grads> {
    one(v.reshape(v.g(), &v.input(0).shape.clone()))
}

fn permute(v: &Vjp) -> Result<Grads> {
    let rank = v.input(0).shape.len();
    let mut inverse = vec![0i64; rank];
    for (i, &d) in v.attrs().ints("dims").iter().enumerate() {
        let d = normalize_dim(d, rank).map_err(|e| Error::Invalid(e.to_string()))?;
        inverse[d] = i as i64;
    }
    one(v.op("permute", &[v.g()], Attrs::new().with("dims", inverse)))
}

fn transpose(v: &Vjp) -> Result<Grads> {
    one(v.op("transpose", &[v.g()], v.attrs().to_attrs()))
}

/// The adjoint of `x[start:end:step]` along `dim`: the gradient's rows spread `step` apart
/// from `start`, zeros elsewhere.
fn slice(v: &Vjp) -> Result<Grads> {
    let shape = v.input(0).shape.clone();
    let d = v.dim("dim")?;
    let len = shape[d];
    let clamp = |i: i64| -> usize {
        let i = if i < 0 {
            i.saturating_add(len as i64)
        } else {
            i
        };
        i.clamp(0, len as i64) as usize
    };
    let start = clamp(v.attrs().int("start"));
    let step = v.attrs().int("step").max(1) as usize;
    let g = v.g();
    let m = g.shape()[d];
    if m == 0 {
        return one(v.zeros(&shape, g.dtype()));
    }
    let spread = if step == 1 {
        g.clone()
    } else {
        let unsq = v.op("unsqueeze", &[g], Attrs::new().with("dim", d as i64 + 1))?;
        let padded = v.pad_dim(&unsq, d + 1, 0, step - 1)?;
        let mut merged = g.shape().to_vec();
        merged[d] = m * step;
        let merged_t = v.reshape(&padded, &merged)?;
        v.narrow(&merged_t, d, 0, (m * step).min(len - start))?
    };
    let after = len - start - spread.shape()[d];
    one(v.pad_dim(&spread, d, start, after))
}

fn narrow(v: &Vjp) -> Result<Grads> {
    let len = v.input(0).shape[v.dim("dim")?];
    let d = v.dim("dim")?;
    let start = v.attrs().int("start");
    let start = if start < 0 { start + len as i64 } else { start } as usize;
    let length = v.g().shape()[d];
    one(v.pad_dim(v.g(), d, start, len - start - length))
}

fn sum(v: &Vjp) -> Result<Grads> {
    one(v.unreduce(v.g()))
}

fn mean(v: &Vjp) -> Result<Grads> {
    let n = v.reduced_count()?;
    one(v.scale(&v.unreduce(v.g())?, 1.0 / n as f64))
}

fn prod(v: &Vjp) -> Result<Grads> {
    // d prod / d x_i = prod / x_i, for inputs without zeros.
    let grown = v.mul(&v.unreduce(v.g())?, &v.unreduce(v.y(0)?)?)?;
    one(v.div(&grown, v.x(0)?))
}

/// var and std: d var / d x = 2 (x - mean) / (N - correction).
fn variance(v: &Vjp, is_std: bool) -> Result<Grads> {
    let x = v.wide(v.x(0)?)?;
    let dims = v.reduced_dims(x.rank())?;
    let centered = v.sub(&x, &v.mean_dims(&x, &dims)?)?;
    let dof = v.reduced_count()? as f64 - v.attrs().int("correction") as f64;
    let g = v.unreduce(&v.wide(v.g())?)?;
    let d = if is_std {
        let y = v.unreduce(&v.wide(v.y(0)?)?)?;
        v.div(&v.scale(&centered, 1.0 / dof)?, &y)?
    } else {
        v.scale(&centered, 2.0 / dof)?
    };
    one(v.mul(&g, &d))
}

/// max and min over dims: the gradient split evenly among the elements equal to the result
/// (torch's amax/amin, and JAX's reductions).
fn reduce_extremum(v: &Vjp) -> Result<Grads> {
    let x = v.x(0)?;
    let dims = v.reduced_dims(x.rank())?;
    let hit = v.binary("eq", x, &v.unreduce(v.y(0)?)?)?;
    let mask = v.indicator(&hit, x.dtype())?;
    let count = v.sum_dims(&mask, &dims, true)?;
    let share = v.div(&mask, &count)?;
    one(v.mul(&v.unreduce(v.g())?, &share))
}

/// matmul with numpy's semantics: 1-D operands are promoted to matrices and back, and the
/// broadcast batch dims are summed away. A matrix `b` times a batched `a` (a linear layer's
/// weight) gets its gradient as one product over every row of the batch, as torch computes
/// it, rather than a product per batch entry summed afterwards.
fn matmul(v: &Vjp) -> Result<Grads> {
    let (a, b) = (v.x(0)?, v.x(1)?);
    let g = v.g();
    let a2 = if a.rank() == 1 {
        v.reshape(a, &[1, a.shape()[0]])?
    } else {
        a.clone()
    };
    let b2 = if b.rank() == 1 {
        v.reshape(b, &[b.shape()[0], 1])?
    } else {
        b.clone()
    };
    let mut g_shape = g.shape().to_vec();
    if a.rank() == 1 {
        let at = g_shape.len().saturating_sub(usize::from(b.rank() != 1));
        g_shape.insert(at, 1);
    }
    if b.rank() == 1 {
        g_shape.push(1);
    }
    let g2 = v.reshape(g, &g_shape)?;
    let t = |m: &Tensor| v.op("transpose", &[m], Attrs::new());
    let ga = v.when(0, || {
        let full = v.binary("matmul", &g2, &t(&b2)?)?;
        v.reshape(&sum_to(v, &full, a2.shape())?, a.shape())
    })?;
    let gb = v.when(1, || {
        if b2.rank() == 2 && a2.rank() > 2 {
            let rows = |m: &Tensor| {
                let cols = m.shape()[m.rank() - 1];
                v.reshape(
                    m,
                    &[m.shape().iter().product::<usize>() / cols.max(1), cols],
                )
            };
            let gb2 = v.binary("matmul", &t(&rows(&a2)?)?, &rows(&g2)?)?;
            return v.reshape(&gb2, b.shape());
        }
        let full = v.binary("matmul", &t(&a2)?, &g2)?;
        v.reshape(&sum_to(v, &full, b2.shape())?, b.shape())
    })?;
    Ok(vec![ga, gb])
}

fn softmax_dim(v: &Vjp) -> Result<usize> {
    v.dim("dim")
}

fn softmax(v: &Vjp) -> Result<Grads> {
    if v.input(0).shape.is_empty() {
        // Of a 0-d tensor (as torch allows): the constant 1.
        return one(v.scale(v.g(), 0.0));
    }
    let y = v.wide(v.y(0)?)?;
    let g = v.wide(v.g())?;
    let d = softmax_dim(v)?;
    let dot = v.sum_dims(&v.mul(&g, &y)?, &[d], true)?;
    one(v.mul(&y, &v.sub(&g, &dot)?))
}

fn log_softmax(v: &Vjp) -> Result<Grads> {
    if v.input(0).shape.is_empty() {
        // Of a 0-d tensor: the constant 0.
        return one(v.scale(v.g(), 0.0));
    }
    let y = v.wide(v.y(0)?)?;
    let g = v.wide(v.g())?;
    let d = softmax_dim(v)?;
    let total = v.sum_dims(&g, &[d], true)?;
    one(v.sub(&g, &v.mul(&v.unary("exp", &y)?, &total)?))
}

/// The trailing dims a norm normalizes (its `normalized_shape`, or the last dim).
fn norm_dims(v: &Vjp) -> Vec<usize> {
    let rank = v.input(0).shape.len();
    let k = v.attrs().ints("normalized_shape").len().max(1);
    (rank - k..rank).collect()
}

/// layer_norm and rms_norm: `gx = rstd (gxhat - [mean(gxhat)] - xhat mean(gxhat xhat))`.
fn norm(v: &Vjp, centered: bool) -> Result<Grads> {
    let x = v.wide(v.x(0)?)?;
    let g = v.wide(v.g())?;
    let dims = norm_dims(v);
    let eps = v.attrs().float("eps");
    let xc = if centered {
        v.sub(&x, &v.mean_dims(&x, &dims)?)?
    } else {
        x.clone()
    };
    let var = v.mean_dims(&v.mul(&xc, &xc)?, &dims)?;
    let rstd = v.unary("rsqrt", &v.add(&var, &v.scalar(eps, var.dtype())?)?)?;
    let xhat = v.mul(&xc, &rstd)?;
    let weight = match v.n_inputs() > 1 {
        true => Some(v.wide(v.x(1)?)?),
        false => None,
    };
    let gxhat = match &weight {
        Some(w) => v.mul(&g, w)?,
        None => g.clone(),
    };
    let gx = v.when(0, || {
        let mut inner = gxhat.clone();
        if centered {
            inner = v.sub(&inner, &v.mean_dims(&gxhat, &dims)?)?;
        }
        let proj = v.mean_dims(&v.mul(&gxhat, &xhat)?, &dims)?;
        inner = v.sub(&inner, &v.mul(&xhat, &proj)?)?;
        v.mul(&rstd, &inner)
    })?;
    let mut grads = vec![gx];
    if v.n_inputs() > 1 {
        let shape = v.input(1).shape.clone();
        grads.push(v.when(1, || sum_to(v, &v.mul(&g, &xhat)?, &shape))?);
    }
    if v.n_inputs() > 2 {
        let shape = v.input(2).shape.clone();
        grads.push(v.when(2, || sum_to(v, &g, &shape))?);
    }
    Ok(grads)
}

/// `zeros(x)` with `g` added at `index` along `dim`: the adjoint of gathering.
fn scatter_into(
    v: &Vjp,
    shape: &[usize],
    index: &Tensor,
    g: &Tensor,
    dim: usize,
) -> Result<Tensor> {
    let zeros = v.zeros(shape, g.dtype())?;
    v.op(
        "scatter_add",
        &[&zeros, index, g],
        Attrs::new().with("dim", dim as i64),
    )
}

fn embedding(v: &Vjp) -> Result<Grads> {
    let indices = v.x(0)?;
    let weight = v.input(1).shape.clone();
    let n = indices.numel();
    let width = weight[1];
    let g = v.reshape(v.g(), &[n, width])?;
    let flat = v.reshape(indices, &[n, 1])?;
    let index = v.expand(&flat, &[n, width])?;
    Ok(vec![
        None,
        v.when(1, || scatter_into(v, &weight, &index, &g, 0))?,
    ])
}

fn index_select(v: &Vjp) -> Result<Grads> {
    let shape = v.input(0).shape.clone();
    let d = v.dim("dim")?;
    let g = v.g();
    let mut at = vec![1; shape.len()];
    at[d] = g.shape()[d];
    let index = v.expand(&v.reshape(v.x(1)?, &at)?, g.shape())?;
    Ok(vec![
        v.when(0, || scatter_into(v, &shape, &index, g, d))?,
        None,
    ])
}

fn gather(v: &Vjp) -> Result<Grads> {
    let shape = v.input(0).shape.clone();
    let d = v.dim("dim")?;
    Ok(vec![
        v.when(0, || scatter_into(v, &shape, v.x(1)?, v.g(), d))?,
        None,
    ])
}

fn scatter_add(v: &Vjp) -> Result<Grads> {
    let g = v.g();
    let gsrc = v.when(2, || v.op("gather", &[g, v.x(1)?], v.attrs().to_attrs()))?;
    Ok(vec![v.when(0, || Ok(g.clone()))?, None, gsrc])
}

fn cat(v: &Vjp) -> Result<Grads> {
    let d = v.dim("dim")?;
    let mut start = 0;
    (0..v.n_inputs())
        .map(|i| {
            let len = v.input(i).shape[d];
            let part = v.when(i, || v.narrow(v.g(), d, start, len));
            start += len;
            part
        })
        .collect()
}

fn stack(v: &Vjp) -> Result<Grads> {
    let d = v.dim_for("dim", v.input(0).shape.len() + 1)?;
    (0..v.n_inputs())
        .map(|i| {
            v.when(i, || {
                let part = v.narrow(v.g(), d, i, 1)?;
                v.reshape(&part, &v.input(i).shape)
            })
        })
        .collect()
}

fn pad(v: &Vjp) -> Result<Grads> {
    let shape = v.input(0).shape.clone();
    let pads = v.attrs().ints("pad");
    let mut g = v.g().clone();
    for (k, pair) in pads.chunks(2).enumerate() {
        let d = shape.len() - 1 - k;
        g = v.narrow(&g, d, pair[0] as usize, shape[d])?;
    }
    one(Ok(g))
}

fn cross_entropy(v: &Vjp) -> Result<Grads> {
    let logits = v.wide(v.x(0)?)?;
    // In i64, so that ignore_index (-100 by default) compares with any index dtype.
    let target = &v.cast(v.x(1)?, DType::I64)?;
    let dt = logits.dtype();
    let classes = *logits.shape().last().unwrap_or(&0);
    let p = v.op("softmax", &[&logits], Attrs::new().with("dim", -1i64))?;
    let arange = Attrs::new()
        .with("end", classes as f64)
        .with("dtype", DType::I64);
    let ids = v.op("arange", &[], arange)?;
    let column = v.op("unsqueeze", &[target], Attrs::new().with("dim", -1i64))?;
    let onehot = v.indicator(&v.binary("eq", &column, &ids)?, dt)?;
    let ignore = v.attrs().int("ignore_index");
    let valid = v.binary("ne", target, &v.scalar(ignore as f64, target.dtype())?)?;
    let valid = v.indicator(&valid, dt)?;
    let g = v.wide(v.g())?;
    let mut weight = v.mul(&g, &valid)?;
    if v.attrs().str("reduction") == "mean" {
        let count = v.sum_dims(&valid, &(0..valid.rank()).collect::<Vec<_>>(), false)?;
        weight = v.div(&weight, &count)?;
    }
    let weight = v.op("unsqueeze", &[&weight], Attrs::new().with("dim", -1i64))?;
    Ok(vec![Some(v.mul(&v.sub(&p, &onehot)?, &weight)?), None])
}

/// Every registry op's derivative, by name. Grouped as the registry's families.
static TABLE: &[(&str, Derivative)] = &[
    // creation: no tensor inputs
    ("zeros", Derivative::NotDifferentiable),
    ("ones", Derivative::NotDifferentiable),
    ("full", Derivative::NotDifferentiable),
    ("arange", Derivative::NotDifferentiable),
    ("rand", Derivative::NotDifferentiable),
    ("randn", Derivative::NotDifferentiable),
    // shape
    (
        "reshape",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: reshape_back,
        },
    ),
    (
        "view",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: reshape_back,
        },
    ),
    (
        "flatten",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: reshape_back,
        },
    ),
    (
        "squeeze",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: reshape_back,
        },
    ),
    (
        "unsqueeze",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: reshape_back,
        },
    ),
    (
        "transpose",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: transpose,
        },
    ),
    (
        "permute",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: permute,
        },
    ),
    (
        "slice",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: slice,
        },
    ),
    (
        "narrow",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: narrow,
        },
    ),
    // The engine sums the gradient back over the broadcast dims.
    (
        "expand",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: |v| one(Ok(v.g().clone())),
        },
    ),
    (
        "contiguous",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: |v| one(Ok(v.g().clone())),
        },
    ),
    // unary float math
    (
        "exp",
        Derivative::Vjp {
            saves: OUTPUTS,
            vjp: |v| one(v.mul(v.g(), v.y(0)?)),
        },
    ),
    (
        "log",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| one(v.div(v.g(), v.x(0)?)),
        },
    ),
    (
        "sqrt",
        Derivative::Vjp {
            saves: OUTPUTS,
            vjp: |v| one(v.div(v.g(), &v.scale(v.y(0)?, 2.0)?)),
        },
    ),
    (
        "rsqrt",
        Derivative::Vjp {
            saves: OUTPUTS,
            vjp: |v| {
                let y = v.y(0)?;
                one(v.mul(v.g(), &v.scale(&v.mul(y, &v.mul(y, y)?)?, -0.5)?))
            },
        },
    ),
    (
        "reciprocal",
        Derivative::Vjp {
            saves: OUTPUTS,
            vjp: |v| one(v.neg(&v.mul(v.g(), &v.mul(v.y(0)?, v.y(0)?)?)?)),
        },
    ),
    (
        "tanh",
        Derivative::Vjp {
            saves: OUTPUTS,
            vjp: |v| {
                let y = v.y(0)?;
                let d = v.sub(&v.scalar(1.0, y.dtype())?, &v.mul(y, y)?)?;
                one(v.mul(v.g(), &d))
            },
        },
    ),
    (
        "sigmoid",
        Derivative::Vjp {
            saves: OUTPUTS,
            vjp: |v| {
                let y = v.y(0)?;
                let d = v.mul(y, &v.sub(&v.scalar(1.0, y.dtype())?, y)?)?;
                one(v.mul(v.g(), &d))
            },
        },
    ),
    (
        "silu",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| {
                // d/dx x s(x) = s (1 + x (1 - s))
                let x = v.x(0)?;
                let s = v.unary("sigmoid", x)?;
                let one_ = v.scalar(1.0, x.dtype())?;
                let d = v.mul(&s, &v.add(&one_, &v.mul(x, &v.sub(&one_, &s)?)?)?)?;
                one(v.mul(v.g(), &d))
            },
        },
    ),
    (
        "sin",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| one(v.mul(v.g(), &v.unary("cos", v.x(0)?)?)),
        },
    ),
    (
        "cos",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| one(v.neg(&v.mul(v.g(), &v.unary("sin", v.x(0)?)?)?)),
        },
    ),
    (
        "erf",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| {
                let x = v.x(0)?;
                let e = v.unary("exp", &v.neg(&v.mul(x, x)?)?)?;
                one(v.mul(v.g(), &v.scale(&e, std::f64::consts::FRAC_2_SQRT_PI)?))
            },
        },
    ),
    (
        "gelu",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: gelu,
        },
    ),
    (
        "gelu_backward",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: gelu_backward,
        },
    ),
    (
        "neg",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: |v| one(v.neg(v.g())),
        },
    ),
    (
        "abs",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| {
                // sign(x), 0 at 0 as torch.
                let x = v.x(0)?;
                let pos = v.indicator(&v.compare("gt", x, 0.0)?, x.dtype())?;
                let neg = v.indicator(&v.compare("lt", x, 0.0)?, x.dtype())?;
                one(v.mul(v.g(), &v.sub(&pos, &neg)?))
            },
        },
    ),
    (
        "relu",
        Derivative::Vjp {
            saves: OUTPUTS,
            vjp: |v| one(v.keep(&v.compare("gt", v.y(0)?, 0.0)?, v.g())),
        },
    ),
    (
        "square",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| one(v.mul(v.g(), &v.scale(v.x(0)?, 2.0)?)),
        },
    ),
    // binary arithmetic
    (
        "add",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: |v| Ok(vec![Some(v.g().clone()), Some(v.g().clone())]),
        },
    ),
    (
        "sub",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: |v| Ok(vec![Some(v.g().clone()), v.when(1, || v.neg(v.g()))?]),
        },
    ),
    (
        "mul",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| {
                let (a, b) = (v.x(0)?, v.x(1)?);
                Ok(vec![
                    v.when(0, || v.mul(v.g(), b))?,
                    v.when(1, || v.mul(v.g(), a))?,
                ])
            },
        },
    ),
    (
        "div",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| {
                let (a, b) = (v.x(0)?, v.x(1)?);
                let ga = v.when(0, || v.div(v.g(), b))?;
                let gb = v.when(1, || v.neg(&v.div(&v.mul(v.g(), a)?, &v.mul(b, b)?)?))?;
                Ok(vec![ga, gb])
            },
        },
    ),
    (
        "maximum",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| extremum(v, "gt"),
        },
    ),
    (
        "minimum",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| extremum(v, "lt"),
        },
    ),
    (
        "pow",
        Derivative::Vjp {
            saves: BOTH,
            vjp: pow,
        },
    ),
    (
        "clamp",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: clamp,
        },
    ),
    // comparisons and logic: bool results
    ("eq", Derivative::NotDifferentiable),
    ("ne", Derivative::NotDifferentiable),
    ("lt", Derivative::NotDifferentiable),
    ("le", Derivative::NotDifferentiable),
    ("gt", Derivative::NotDifferentiable),
    ("ge", Derivative::NotDifferentiable),
    ("logical_and", Derivative::NotDifferentiable),
    ("logical_or", Derivative::NotDifferentiable),
    ("logical_xor", Derivative::NotDifferentiable),
    ("logical_not", Derivative::NotDifferentiable),
    (
        "where",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: where_,
        },
    ),
    // reductions
    (
        "sum",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: sum,
        },
    ),
    (
        "mean",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: mean,
        },
    ),
    (
        "prod",
        Derivative::Vjp {
            saves: BOTH,
            vjp: prod,
        },
    ),
    (
        "var",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| variance(v, false),
        },
    ),
    (
        "std",
        Derivative::Vjp {
            saves: BOTH,
            vjp: |v| variance(v, true),
        },
    ),
    (
        "max",
        Derivative::Vjp {
            saves: BOTH,
            vjp: reduce_extremum,
        },
    ),
    (
        "min",
        Derivative::Vjp {
            saves: BOTH,
            vjp: reduce_extremum,
        },
    ),
    ("argmax", Derivative::NotDifferentiable),
    ("argmin", Derivative::NotDifferentiable),
    // matmul and nn
    (
        "matmul",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: matmul,
        },
    ),
    (
        "softmax",
        Derivative::Vjp {
            saves: OUTPUTS,
            vjp: softmax,
        },
    ),
    (
        "log_softmax",
        Derivative::Vjp {
            saves: OUTPUTS,
            vjp: log_softmax,
        },
    ),
    (
        "layer_norm",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| norm(v, true),
        },
    ),
    (
        "rms_norm",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: |v| norm(v, false),
        },
    ),
    // indexing
    (
        "embedding",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: embedding,
        },
    ),
    (
        "index_select",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: index_select,
        },
    ),
    (
        "gather",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: gather,
        },
    ),
    (
        "scatter_add",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: scatter_add,
        },
    ),
    (
        "cat",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: cat,
        },
    ),
    (
        "stack",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: stack,
        },
    ),
    (
        "pad",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: pad,
        },
    ),
    (
        "triu",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: |v| one(v.op("triu", &[v.g()], v.attrs().to_attrs())),
        },
    ),
    (
        "tril",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: |v| one(v.op("tril", &[v.g()], v.attrs().to_attrs())),
        },
    ),
    // The engine casts the gradient back to the input's dtype.
    (
        "cast",
        Derivative::Vjp {
            saves: NOTHING,
            vjp: |v| one(Ok(v.g().clone())),
        },
    ),
    (
        "cross_entropy",
        Derivative::Vjp {
            saves: INPUTS,
            vjp: cross_entropy,
        },
    ),
    ("adam_step", Derivative::NotDifferentiable),
    ("adamw_step", Derivative::NotDifferentiable),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Registry;

    #[test]
    fn every_registry_op_has_exactly_one_row() {
        let registry: Vec<&str> = Registry::global().ops().iter().map(|o| o.name).collect();
        let missing: Vec<&&str> = registry.iter().filter(|n| of(n).is_none()).collect();
        assert!(
            missing.is_empty(),
            "ops without a derivative row (add a VJP or mark them NotDifferentiable): {missing:?}"
        );
        let stale: Vec<&str> = names().filter(|n| !registry.contains(n)).collect();
        assert!(
            stale.is_empty(),
            "rows for ops the registry lacks: {stale:?}"
        );
        assert_eq!(names().count(), registry.len(), "an op has two rows");
    }
}
