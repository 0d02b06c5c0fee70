//! Every op of the host's registry, as typed Rust.
//!
//! This file is generated from the registry by `cargo run -p neuronlab-tests --bin
//! sdk_codegen` in the host workspace; do not edit it. Change the op's `OpDef` and regenerate.
//! The test `tests/tests/sdk_codegen.rs` fails while this file is out of date.
//!
//! How an op becomes Rust:
//!
//! - An op whose first input is a tensor is a method on it: `x.softmax()`, `a.add(&b)`,
//!   `condition.where_(&a, &b)`. Its other tensor inputs are `&Tensor`; optional inputs are
//!   `Option<&Tensor>`, and only trailing ones may be `None`.
//! - An op with no tensor input (creation) or with a list of them is a free function:
//!   `zeros(&[2, 3])`, `cat(&[&a, &b])`.
//! - Required attributes are positional parameters, typed by kind: `int` is `i64`, `float`
//!   is `f64`, `int[]` is `&[i64]`, `str` is `&str` and `dtype` is `DType`.
//! - Attributes with a default are set through the op's options type and its `_with` form:
//!   `x.sum_with(SumOptions::new().dims(&[1]).keepdim(1))`. An option left unset takes the
//!   host's default, which each setter's documentation shows.
//! - A name that is a Rust keyword gets a trailing underscore: `where_`.
//! - An op returns `Result<Tensor>`, or an array of tensors when it has several outputs. An
//!   error carries the host's message, such as why two shapes do not broadcast.

use crate::attrs::Attrs;
use crate::dtype::DType;
use crate::error::Result;
use crate::op::{with_optional, Op};
use crate::tensor::Tensor;

/// a tensor of zeros.
///
/// Attributes with defaults keep them; [`zeros_with`] sets them.
///
/// Op `zeros` (creation): `zeros(; shape: int[], dtype: dtype = 'f32') -> out`
///
/// # Example
///
/// ```ignore
/// let out = zeros(shape)?;
/// ```
#[track_caller]
pub fn zeros(shape: &[i64]) -> Result<Tensor> {
    zeros_with(shape, ZerosOptions::new())
}

/// a tensor of zeros.
///
/// Sets the attributes that have defaults through [`ZerosOptions`].
///
/// Op `zeros` (creation): `zeros(; shape: int[], dtype: dtype = 'f32') -> out`
///
/// # Example
///
/// ```ignore
/// let options = ZerosOptions::new().dtype(dtype);
/// let out = zeros_with(shape, options)?;
/// ```
#[track_caller]
pub fn zeros_with(shape: &[i64], options: ZerosOptions) -> Result<Tensor> {
    static OP: Op = Op::new("zeros");
    OP.call(&[], options.attrs().ints("shape", shape))
}

/// Options of [`zeros_with`]: the attributes of `zeros` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = ZerosOptions::new().dtype(dtype);
/// let out = zeros_with(shape, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZerosOptions {
    dtype: Option<DType>,
}

impl ZerosOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> ZerosOptions {
        ZerosOptions::default()
    }

    /// Sets `dtype`: `dtype: dtype = 'f32'`.
    #[must_use]
    pub fn dtype(mut self, dtype: DType) -> ZerosOptions {
        self.dtype = Some(dtype);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dtype {
            attrs = attrs.dtype("dtype", *value);
        }
        attrs
    }
}

/// a tensor of ones.
///
/// Attributes with defaults keep them; [`ones_with`] sets them.
///
/// Op `ones` (creation): `ones(; shape: int[], dtype: dtype = 'f32') -> out`
///
/// # Example
///
/// ```ignore
/// let out = ones(shape)?;
/// ```
#[track_caller]
pub fn ones(shape: &[i64]) -> Result<Tensor> {
    ones_with(shape, OnesOptions::new())
}

/// a tensor of ones.
///
/// Sets the attributes that have defaults through [`OnesOptions`].
///
/// Op `ones` (creation): `ones(; shape: int[], dtype: dtype = 'f32') -> out`
///
/// # Example
///
/// ```ignore
/// let options = OnesOptions::new().dtype(dtype);
/// let out = ones_with(shape, options)?;
/// ```
#[track_caller]
pub fn ones_with(shape: &[i64], options: OnesOptions) -> Result<Tensor> {
    static OP: Op = Op::new("ones");
    OP.call(&[], options.attrs().ints("shape", shape))
}

/// Options of [`ones_with`]: the attributes of `ones` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = OnesOptions::new().dtype(dtype);
/// let out = ones_with(shape, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OnesOptions {
    dtype: Option<DType>,
}

impl OnesOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> OnesOptions {
        OnesOptions::default()
    }

    /// Sets `dtype`: `dtype: dtype = 'f32'`.
    #[must_use]
    pub fn dtype(mut self, dtype: DType) -> OnesOptions {
        self.dtype = Some(dtype);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dtype {
            attrs = attrs.dtype("dtype", *value);
        }
        attrs
    }
}

/// a tensor filled with value.
///
/// Attributes with defaults keep them; [`full_with`] sets them.
///
/// Op `full` (creation): `full(; shape: int[], value: float, dtype: dtype = 'f32') -> out`
///
/// # Example
///
/// ```ignore
/// let out = full(shape, value)?;
/// ```
#[track_caller]
pub fn full(shape: &[i64], value: f64) -> Result<Tensor> {
    full_with(shape, value, FullOptions::new())
}

/// a tensor filled with value.
///
/// Sets the attributes that have defaults through [`FullOptions`].
///
/// Op `full` (creation): `full(; shape: int[], value: float, dtype: dtype = 'f32') -> out`
///
/// # Example
///
/// ```ignore
/// let options = FullOptions::new().dtype(dtype);
/// let out = full_with(shape, value, options)?;
/// ```
#[track_caller]
pub fn full_with(shape: &[i64], value: f64, options: FullOptions) -> Result<Tensor> {
    static OP: Op = Op::new("full");
    OP.call(
        &[],
        options.attrs().ints("shape", shape).float("value", value),
    )
}

/// Options of [`full_with`]: the attributes of `full` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = FullOptions::new().dtype(dtype);
/// let out = full_with(shape, value, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FullOptions {
    dtype: Option<DType>,
}

impl FullOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> FullOptions {
        FullOptions::default()
    }

    /// Sets `dtype`: `dtype: dtype = 'f32'`.
    #[must_use]
    pub fn dtype(mut self, dtype: DType) -> FullOptions {
        self.dtype = Some(dtype);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dtype {
            attrs = attrs.dtype("dtype", *value);
        }
        attrs
    }
}

/// start, start+step, ... below end (i64 when all three are integral).
///
/// Attributes with defaults keep them; [`arange_with`] sets them.
///
/// Op `arange` (creation): `arange(; start: float = 0.0, end: float, step: float = 1.0, dtype: dtype = None) -> out`
///
/// # Example
///
/// ```ignore
/// let out = arange(end)?;
/// ```
#[track_caller]
pub fn arange(end: f64) -> Result<Tensor> {
    arange_with(end, ArangeOptions::new())
}

/// start, start+step, ... below end (i64 when all three are integral).
///
/// Sets the attributes that have defaults through [`ArangeOptions`].
///
/// Op `arange` (creation): `arange(; start: float = 0.0, end: float, step: float = 1.0, dtype: dtype = None) -> out`
///
/// # Example
///
/// ```ignore
/// let options = ArangeOptions::new().start(start);
/// let out = arange_with(end, options)?;
/// ```
#[track_caller]
pub fn arange_with(end: f64, options: ArangeOptions) -> Result<Tensor> {
    static OP: Op = Op::new("arange");
    OP.call(&[], options.attrs().float("end", end))
}

/// Options of [`arange_with`]: the attributes of `arange` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = ArangeOptions::new().start(start);
/// let out = arange_with(end, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ArangeOptions {
    start: Option<f64>,
    step: Option<f64>,
    dtype: Option<DType>,
}

impl ArangeOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> ArangeOptions {
        ArangeOptions::default()
    }

    /// Sets `start`: `start: float = 0.0`.
    #[must_use]
    pub fn start(mut self, start: f64) -> ArangeOptions {
        self.start = Some(start);
        self
    }

    /// Sets `step`: `step: float = 1.0`.
    #[must_use]
    pub fn step(mut self, step: f64) -> ArangeOptions {
        self.step = Some(step);
        self
    }

    /// Sets `dtype`: `dtype: dtype = None`.
    #[must_use]
    pub fn dtype(mut self, dtype: DType) -> ArangeOptions {
        self.dtype = Some(dtype);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.start {
            attrs = attrs.float("start", *value);
        }
        if let Some(value) = &self.step {
            attrs = attrs.float("step", *value);
        }
        if let Some(value) = &self.dtype {
            attrs = attrs.dtype("dtype", *value);
        }
        attrs
    }
}

/// uniform random values in \[0, 1), counter-based from seed.
///
/// Attributes with defaults keep them; [`rand_with`] sets them.
///
/// Op `rand` (creation): `rand(; shape: int[], seed: int = 0, dtype: dtype = 'f32') -> out`
///
/// # Example
///
/// ```ignore
/// let out = rand(shape)?;
/// ```
#[track_caller]
pub fn rand(shape: &[i64]) -> Result<Tensor> {
    rand_with(shape, RandOptions::new())
}

/// uniform random values in \[0, 1), counter-based from seed.
///
/// Sets the attributes that have defaults through [`RandOptions`].
///
/// Op `rand` (creation): `rand(; shape: int[], seed: int = 0, dtype: dtype = 'f32') -> out`
///
/// # Example
///
/// ```ignore
/// let options = RandOptions::new().seed(seed);
/// let out = rand_with(shape, options)?;
/// ```
#[track_caller]
pub fn rand_with(shape: &[i64], options: RandOptions) -> Result<Tensor> {
    static OP: Op = Op::new("rand");
    OP.call(&[], options.attrs().ints("shape", shape))
}

/// Options of [`rand_with`]: the attributes of `rand` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = RandOptions::new().seed(seed);
/// let out = rand_with(shape, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RandOptions {
    seed: Option<i64>,
    dtype: Option<DType>,
}

impl RandOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> RandOptions {
        RandOptions::default()
    }

    /// Sets `seed`: `seed: int = 0`.
    #[must_use]
    pub fn seed(mut self, seed: i64) -> RandOptions {
        self.seed = Some(seed);
        self
    }

    /// Sets `dtype`: `dtype: dtype = 'f32'`.
    #[must_use]
    pub fn dtype(mut self, dtype: DType) -> RandOptions {
        self.dtype = Some(dtype);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.seed {
            attrs = attrs.int("seed", *value);
        }
        if let Some(value) = &self.dtype {
            attrs = attrs.dtype("dtype", *value);
        }
        attrs
    }
}

/// standard normal random values, counter-based from seed.
///
/// Attributes with defaults keep them; [`randn_with`] sets them.
///
/// Op `randn` (creation): `randn(; shape: int[], seed: int = 0, dtype: dtype = 'f32') -> out`
///
/// # Example
///
/// ```ignore
/// let out = randn(shape)?;
/// ```
#[track_caller]
pub fn randn(shape: &[i64]) -> Result<Tensor> {
    randn_with(shape, RandnOptions::new())
}

/// standard normal random values, counter-based from seed.
///
/// Sets the attributes that have defaults through [`RandnOptions`].
///
/// Op `randn` (creation): `randn(; shape: int[], seed: int = 0, dtype: dtype = 'f32') -> out`
///
/// # Example
///
/// ```ignore
/// let options = RandnOptions::new().seed(seed);
/// let out = randn_with(shape, options)?;
/// ```
#[track_caller]
pub fn randn_with(shape: &[i64], options: RandnOptions) -> Result<Tensor> {
    static OP: Op = Op::new("randn");
    OP.call(&[], options.attrs().ints("shape", shape))
}

/// Options of [`randn_with`]: the attributes of `randn` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = RandnOptions::new().seed(seed);
/// let out = randn_with(shape, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RandnOptions {
    seed: Option<i64>,
    dtype: Option<DType>,
}

impl RandnOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> RandnOptions {
        RandnOptions::default()
    }

    /// Sets `seed`: `seed: int = 0`.
    #[must_use]
    pub fn seed(mut self, seed: i64) -> RandnOptions {
        self.seed = Some(seed);
        self
    }

    /// Sets `dtype`: `dtype: dtype = 'f32'`.
    #[must_use]
    pub fn dtype(mut self, dtype: DType) -> RandnOptions {
        self.dtype = Some(dtype);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.seed {
            attrs = attrs.int("seed", *value);
        }
        if let Some(value) = &self.dtype {
            attrs = attrs.dtype("dtype", *value);
        }
        attrs
    }
}

impl Tensor {
    /// same elements in a new shape (one -1 is inferred); copies only when it must.
    ///
    /// Op `reshape` (shape): `reshape(x; shape: int[]) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.reshape(shape)?;
    /// ```
    #[track_caller]
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        static OP: Op = Op::new("reshape");
        OP.call(&[self], Attrs::new().ints("shape", shape))
    }
}

impl Tensor {
    /// same storage in a new shape; an error when the strides do not allow it.
    ///
    /// Op `view` (shape): `view(x; shape: int[]) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.view(shape)?;
    /// ```
    #[track_caller]
    pub fn view(&self, shape: &[i64]) -> Result<Tensor> {
        static OP: Op = Op::new("view");
        OP.call(&[self], Attrs::new().ints("shape", shape))
    }
}

impl Tensor {
    /// merges dims start\_dim..=end\_dim into one.
    ///
    /// Attributes with defaults keep them; [`Tensor::flatten_with`] sets them.
    ///
    /// Op `flatten` (shape): `flatten(x; start_dim: int = 0, end_dim: int = -1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.flatten()?;
    /// ```
    #[track_caller]
    pub fn flatten(&self) -> Result<Tensor> {
        self.flatten_with(FlattenOptions::new())
    }

    /// merges dims start\_dim..=end\_dim into one.
    ///
    /// Sets the attributes that have defaults through [`FlattenOptions`].
    ///
    /// Op `flatten` (shape): `flatten(x; start_dim: int = 0, end_dim: int = -1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = FlattenOptions::new().start_dim(start_dim);
    /// let out = x.flatten_with(options)?;
    /// ```
    #[track_caller]
    pub fn flatten_with(&self, options: FlattenOptions) -> Result<Tensor> {
        static OP: Op = Op::new("flatten");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::flatten_with`]: the attributes of `flatten` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = FlattenOptions::new().start_dim(start_dim);
/// let out = x.flatten_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlattenOptions {
    start_dim: Option<i64>,
    end_dim: Option<i64>,
}

impl FlattenOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> FlattenOptions {
        FlattenOptions::default()
    }

    /// Sets `start_dim`: `start_dim: int = 0`.
    #[must_use]
    pub fn start_dim(mut self, start_dim: i64) -> FlattenOptions {
        self.start_dim = Some(start_dim);
        self
    }

    /// Sets `end_dim`: `end_dim: int = -1`.
    #[must_use]
    pub fn end_dim(mut self, end_dim: i64) -> FlattenOptions {
        self.end_dim = Some(end_dim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.start_dim {
            attrs = attrs.int("start_dim", *value);
        }
        if let Some(value) = &self.end_dim {
            attrs = attrs.int("end_dim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// swaps two dims.
    ///
    /// Attributes with defaults keep them; [`Tensor::transpose_with`] sets them.
    ///
    /// Op `transpose` (shape): `transpose(x; dim0: int = -2, dim1: int = -1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.transpose()?;
    /// ```
    #[track_caller]
    pub fn transpose(&self) -> Result<Tensor> {
        self.transpose_with(TransposeOptions::new())
    }

    /// swaps two dims.
    ///
    /// Sets the attributes that have defaults through [`TransposeOptions`].
    ///
    /// Op `transpose` (shape): `transpose(x; dim0: int = -2, dim1: int = -1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = TransposeOptions::new().dim0(dim0);
    /// let out = x.transpose_with(options)?;
    /// ```
    #[track_caller]
    pub fn transpose_with(&self, options: TransposeOptions) -> Result<Tensor> {
        static OP: Op = Op::new("transpose");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::transpose_with`]: the attributes of `transpose` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = TransposeOptions::new().dim0(dim0);
/// let out = x.transpose_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TransposeOptions {
    dim0: Option<i64>,
    dim1: Option<i64>,
}

impl TransposeOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> TransposeOptions {
        TransposeOptions::default()
    }

    /// Sets `dim0`: `dim0: int = -2`.
    #[must_use]
    pub fn dim0(mut self, dim0: i64) -> TransposeOptions {
        self.dim0 = Some(dim0);
        self
    }

    /// Sets `dim1`: `dim1: int = -1`.
    #[must_use]
    pub fn dim1(mut self, dim1: i64) -> TransposeOptions {
        self.dim1 = Some(dim1);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim0 {
            attrs = attrs.int("dim0", *value);
        }
        if let Some(value) = &self.dim1 {
            attrs = attrs.int("dim1", *value);
        }
        attrs
    }
}

impl Tensor {
    /// reorders dims: output dim i is input dim dims\[i\].
    ///
    /// Op `permute` (shape): `permute(x; dims: int[]) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.permute(dims)?;
    /// ```
    #[track_caller]
    pub fn permute(&self, dims: &[i64]) -> Result<Tensor> {
        static OP: Op = Op::new("permute");
        OP.call(&[self], Attrs::new().ints("dims", dims))
    }
}

impl Tensor {
    /// x\[start:end:step\] along dim, clamped as in Python.
    ///
    /// Attributes with defaults keep them; [`Tensor::slice_with`] sets them.
    ///
    /// Op `slice` (shape): `slice(x; dim: int = 0, start: int = 0, end: int = 9223372036854775807, step: int = 1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.slice()?;
    /// ```
    #[track_caller]
    pub fn slice(&self) -> Result<Tensor> {
        self.slice_with(SliceOptions::new())
    }

    /// x\[start:end:step\] along dim, clamped as in Python.
    ///
    /// Sets the attributes that have defaults through [`SliceOptions`].
    ///
    /// Op `slice` (shape): `slice(x; dim: int = 0, start: int = 0, end: int = 9223372036854775807, step: int = 1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = SliceOptions::new().dim(dim);
    /// let out = x.slice_with(options)?;
    /// ```
    #[track_caller]
    pub fn slice_with(&self, options: SliceOptions) -> Result<Tensor> {
        static OP: Op = Op::new("slice");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::slice_with`]: the attributes of `slice` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = SliceOptions::new().dim(dim);
/// let out = x.slice_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SliceOptions {
    dim: Option<i64>,
    start: Option<i64>,
    end: Option<i64>,
    step: Option<i64>,
}

impl SliceOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> SliceOptions {
        SliceOptions::default()
    }

    /// Sets `dim`: `dim: int = 0`.
    #[must_use]
    pub fn dim(mut self, dim: i64) -> SliceOptions {
        self.dim = Some(dim);
        self
    }

    /// Sets `start`: `start: int = 0`.
    #[must_use]
    pub fn start(mut self, start: i64) -> SliceOptions {
        self.start = Some(start);
        self
    }

    /// Sets `end`: `end: int = 9223372036854775807`.
    #[must_use]
    pub fn end(mut self, end: i64) -> SliceOptions {
        self.end = Some(end);
        self
    }

    /// Sets `step`: `step: int = 1`.
    #[must_use]
    pub fn step(mut self, step: i64) -> SliceOptions {
        self.step = Some(step);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim {
            attrs = attrs.int("dim", *value);
        }
        if let Some(value) = &self.start {
            attrs = attrs.int("start", *value);
        }
        if let Some(value) = &self.end {
            attrs = attrs.int("end", *value);
        }
        if let Some(value) = &self.step {
            attrs = attrs.int("step", *value);
        }
        attrs
    }
}

impl Tensor {
    /// length elements from start along dim (must fit).
    ///
    /// Op `narrow` (shape): `narrow(x; dim: int, start: int, length: int) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.narrow(dim, start, length)?;
    /// ```
    #[track_caller]
    pub fn narrow(&self, dim: i64, start: i64, length: i64) -> Result<Tensor> {
        static OP: Op = Op::new("narrow");
        OP.call(
            &[self],
            Attrs::new()
                .int("dim", dim)
                .int("start", start)
                .int("length", length),
        )
    }
}

impl Tensor {
    /// broadcasts size-1 dims to shape without copying (-1 keeps a dim).
    ///
    /// Op `expand` (shape): `expand(x; shape: int[]) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.expand(shape)?;
    /// ```
    #[track_caller]
    pub fn expand(&self, shape: &[i64]) -> Result<Tensor> {
        static OP: Op = Op::new("expand");
        OP.call(&[self], Attrs::new().ints("shape", shape))
    }
}

impl Tensor {
    /// removes size-1 dims (all, or those listed in dims).
    ///
    /// Attributes with defaults keep them; [`Tensor::squeeze_with`] sets them.
    ///
    /// Op `squeeze` (shape): `squeeze(x; dims: int[] = []) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.squeeze()?;
    /// ```
    #[track_caller]
    pub fn squeeze(&self) -> Result<Tensor> {
        self.squeeze_with(SqueezeOptions::new())
    }

    /// removes size-1 dims (all, or those listed in dims).
    ///
    /// Sets the attributes that have defaults through [`SqueezeOptions`].
    ///
    /// Op `squeeze` (shape): `squeeze(x; dims: int[] = []) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = SqueezeOptions::new().dims(dims);
    /// let out = x.squeeze_with(options)?;
    /// ```
    #[track_caller]
    pub fn squeeze_with(&self, options: SqueezeOptions) -> Result<Tensor> {
        static OP: Op = Op::new("squeeze");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::squeeze_with`]: the attributes of `squeeze` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = SqueezeOptions::new().dims(dims);
/// let out = x.squeeze_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SqueezeOptions {
    dims: Option<Vec<i64>>,
}

impl SqueezeOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> SqueezeOptions {
        SqueezeOptions::default()
    }

    /// Sets `dims`: `dims: int[] = []`.
    #[must_use]
    pub fn dims(mut self, dims: &[i64]) -> SqueezeOptions {
        self.dims = Some(dims.to_vec());
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dims {
            attrs = attrs.ints("dims", value);
        }
        attrs
    }
}

impl Tensor {
    /// inserts a size-1 dim at dim.
    ///
    /// Op `unsqueeze` (shape): `unsqueeze(x; dim: int) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.unsqueeze(dim)?;
    /// ```
    #[track_caller]
    pub fn unsqueeze(&self, dim: i64) -> Result<Tensor> {
        static OP: Op = Op::new("unsqueeze");
        OP.call(&[self], Attrs::new().int("dim", dim))
    }
}

impl Tensor {
    /// a dense row-major copy, or the tensor itself when already dense.
    ///
    /// Op `contiguous` (shape): `contiguous(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.contiguous()?;
    /// ```
    #[track_caller]
    pub fn contiguous(&self) -> Result<Tensor> {
        static OP: Op = Op::new("contiguous");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// e raised to each element.
    ///
    /// Op `exp` (elementwise): `exp(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.exp()?;
    /// ```
    #[track_caller]
    pub fn exp(&self) -> Result<Tensor> {
        static OP: Op = Op::new("exp");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// natural logarithm of each element.
    ///
    /// Op `log` (elementwise): `log(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.log()?;
    /// ```
    #[track_caller]
    pub fn log(&self) -> Result<Tensor> {
        static OP: Op = Op::new("log");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// square root of each element.
    ///
    /// Op `sqrt` (elementwise): `sqrt(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.sqrt()?;
    /// ```
    #[track_caller]
    pub fn sqrt(&self) -> Result<Tensor> {
        static OP: Op = Op::new("sqrt");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// reciprocal square root, 1/sqrt(x).
    ///
    /// Op `rsqrt` (elementwise): `rsqrt(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.rsqrt()?;
    /// ```
    #[track_caller]
    pub fn rsqrt(&self) -> Result<Tensor> {
        static OP: Op = Op::new("rsqrt");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// 1/x for each element.
    ///
    /// Op `reciprocal` (elementwise): `reciprocal(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.reciprocal()?;
    /// ```
    #[track_caller]
    pub fn reciprocal(&self) -> Result<Tensor> {
        static OP: Op = Op::new("reciprocal");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// hyperbolic tangent.
    ///
    /// Op `tanh` (elementwise): `tanh(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.tanh()?;
    /// ```
    #[track_caller]
    pub fn tanh(&self) -> Result<Tensor> {
        static OP: Op = Op::new("tanh");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// logistic function 1/(1+exp(-x)).
    ///
    /// Op `sigmoid` (elementwise): `sigmoid(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.sigmoid()?;
    /// ```
    #[track_caller]
    pub fn sigmoid(&self) -> Result<Tensor> {
        static OP: Op = Op::new("sigmoid");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// x \* sigmoid(x) (SiLU / swish).
    ///
    /// Op `silu` (elementwise): `silu(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.silu()?;
    /// ```
    #[track_caller]
    pub fn silu(&self) -> Result<Tensor> {
        static OP: Op = Op::new("silu");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// sine (radians).
    ///
    /// Op `sin` (elementwise): `sin(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.sin()?;
    /// ```
    #[track_caller]
    pub fn sin(&self) -> Result<Tensor> {
        static OP: Op = Op::new("sin");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// cosine (radians).
    ///
    /// Op `cos` (elementwise): `cos(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.cos()?;
    /// ```
    #[track_caller]
    pub fn cos(&self) -> Result<Tensor> {
        static OP: Op = Op::new("cos");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// the error function.
    ///
    /// Op `erf` (elementwise): `erf(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.erf()?;
    /// ```
    #[track_caller]
    pub fn erf(&self) -> Result<Tensor> {
        static OP: Op = Op::new("erf");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// GELU: x \* Phi(x), exact (erf) or with approximate='tanh'.
    ///
    /// Attributes with defaults keep them; [`Tensor::gelu_with`] sets them.
    ///
    /// Op `gelu` (elementwise): `gelu(x; approximate: str = 'none') -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.gelu()?;
    /// ```
    #[track_caller]
    pub fn gelu(&self) -> Result<Tensor> {
        self.gelu_with(GeluOptions::new())
    }

    /// GELU: x \* Phi(x), exact (erf) or with approximate='tanh'.
    ///
    /// Sets the attributes that have defaults through [`GeluOptions`].
    ///
    /// Op `gelu` (elementwise): `gelu(x; approximate: str = 'none') -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = GeluOptions::new().approximate(approximate);
    /// let out = x.gelu_with(options)?;
    /// ```
    #[track_caller]
    pub fn gelu_with(&self, options: GeluOptions) -> Result<Tensor> {
        static OP: Op = Op::new("gelu");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::gelu_with`]: the attributes of `gelu` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = GeluOptions::new().approximate(approximate);
/// let out = x.gelu_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GeluOptions {
    approximate: Option<String>,
}

impl GeluOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> GeluOptions {
        GeluOptions::default()
    }

    /// Sets `approximate`: `approximate: str = 'none'`, one of `none`, `tanh`.
    #[must_use]
    pub fn approximate(mut self, approximate: &str) -> GeluOptions {
        self.approximate = Some(approximate.to_string());
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.approximate {
            attrs = attrs.str("approximate", value);
        }
        attrs
    }
}

impl Tensor {
    /// gelu's backward: grad \* d/dx gelu(x), exact or with approximate='tanh' (broadcast).
    ///
    /// Attributes with defaults keep them; [`Tensor::gelu_backward_with`] sets them.
    ///
    /// Op `gelu_backward` (elementwise): `gelu_backward(grad, x; approximate: str = 'none') -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = grad.gelu_backward(&x)?;
    /// ```
    #[track_caller]
    pub fn gelu_backward(&self, x: &Tensor) -> Result<Tensor> {
        self.gelu_backward_with(x, GeluBackwardOptions::new())
    }

    /// gelu's backward: grad \* d/dx gelu(x), exact or with approximate='tanh' (broadcast).
    ///
    /// Sets the attributes that have defaults through [`GeluBackwardOptions`].
    ///
    /// Op `gelu_backward` (elementwise): `gelu_backward(grad, x; approximate: str = 'none') -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = GeluBackwardOptions::new().approximate(approximate);
    /// let out = grad.gelu_backward_with(&x, options)?;
    /// ```
    #[track_caller]
    pub fn gelu_backward_with(&self, x: &Tensor, options: GeluBackwardOptions) -> Result<Tensor> {
        static OP: Op = Op::new("gelu_backward");
        OP.call(&[self, x], options.attrs())
    }
}

/// Options of [`Tensor::gelu_backward_with`]: the attributes of `gelu_backward` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = GeluBackwardOptions::new().approximate(approximate);
/// let out = grad.gelu_backward_with(&x, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GeluBackwardOptions {
    approximate: Option<String>,
}

impl GeluBackwardOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> GeluBackwardOptions {
        GeluBackwardOptions::default()
    }

    /// Sets `approximate`: `approximate: str = 'none'`, one of `none`, `tanh`.
    #[must_use]
    pub fn approximate(mut self, approximate: &str) -> GeluBackwardOptions {
        self.approximate = Some(approximate.to_string());
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.approximate {
            attrs = attrs.str("approximate", value);
        }
        attrs
    }
}

impl Tensor {
    /// negation, -x.
    ///
    /// Op `neg` (elementwise): `neg(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.neg()?;
    /// ```
    #[track_caller]
    pub fn neg(&self) -> Result<Tensor> {
        static OP: Op = Op::new("neg");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// absolute value.
    ///
    /// Op `abs` (elementwise): `abs(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.abs()?;
    /// ```
    #[track_caller]
    pub fn abs(&self) -> Result<Tensor> {
        static OP: Op = Op::new("abs");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// max(x, 0).
    ///
    /// Op `relu` (elementwise): `relu(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.relu()?;
    /// ```
    #[track_caller]
    pub fn relu(&self) -> Result<Tensor> {
        static OP: Op = Op::new("relu");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// x \* x.
    ///
    /// Op `square` (elementwise): `square(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.square()?;
    /// ```
    #[track_caller]
    pub fn square(&self) -> Result<Tensor> {
        static OP: Op = Op::new("square");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// a + b with broadcasting.
    ///
    /// Op `add` (elementwise): `add(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.add(&b)?;
    /// ```
    #[track_caller]
    pub fn add(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("add");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a - b with broadcasting.
    ///
    /// Op `sub` (elementwise): `sub(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.sub(&b)?;
    /// ```
    #[track_caller]
    pub fn sub(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("sub");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a \* b with broadcasting.
    ///
    /// Op `mul` (elementwise): `mul(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.mul(&b)?;
    /// ```
    #[track_caller]
    pub fn mul(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("mul");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// true division a / b (integers give floats).
    ///
    /// Op `div` (elementwise): `div(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.div(&b)?;
    /// ```
    #[track_caller]
    pub fn div(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("div");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// elementwise max; NaN propagates.
    ///
    /// Op `maximum` (elementwise): `maximum(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.maximum(&b)?;
    /// ```
    #[track_caller]
    pub fn maximum(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("maximum");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// elementwise min; NaN propagates.
    ///
    /// Op `minimum` (elementwise): `minimum(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.minimum(&b)?;
    /// ```
    #[track_caller]
    pub fn minimum(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("minimum");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a raised to the power b with broadcasting.
    ///
    /// Op `pow` (elementwise): `pow(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.pow(&b)?;
    /// ```
    #[track_caller]
    pub fn pow(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("pow");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a == b (bool).
    ///
    /// Op `eq` (comparison): `eq(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.eq(&b)?;
    /// ```
    #[track_caller]
    pub fn eq(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("eq");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a != b (bool; true where either is NaN).
    ///
    /// Op `ne` (comparison): `ne(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.ne(&b)?;
    /// ```
    #[track_caller]
    pub fn ne(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("ne");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a \< b (bool).
    ///
    /// Op `lt` (comparison): `lt(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.lt(&b)?;
    /// ```
    #[track_caller]
    pub fn lt(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("lt");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a \<= b (bool).
    ///
    /// Op `le` (comparison): `le(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.le(&b)?;
    /// ```
    #[track_caller]
    pub fn le(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("le");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a \> b (bool).
    ///
    /// Op `gt` (comparison): `gt(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.gt(&b)?;
    /// ```
    #[track_caller]
    pub fn gt(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("gt");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a \>= b (bool).
    ///
    /// Op `ge` (comparison): `ge(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.ge(&b)?;
    /// ```
    #[track_caller]
    pub fn ge(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("ge");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a and b, each element tested for != 0.
    ///
    /// Op `logical_and` (comparison): `logical_and(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.logical_and(&b)?;
    /// ```
    #[track_caller]
    pub fn logical_and(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("logical_and");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a or b, each element tested for != 0.
    ///
    /// Op `logical_or` (comparison): `logical_or(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.logical_or(&b)?;
    /// ```
    #[track_caller]
    pub fn logical_or(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("logical_or");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// a xor b, each element tested for != 0.
    ///
    /// Op `logical_xor` (comparison): `logical_xor(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.logical_xor(&b)?;
    /// ```
    #[track_caller]
    pub fn logical_xor(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("logical_xor");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// not x, each element tested for != 0.
    ///
    /// Op `logical_not` (comparison): `logical_not(x) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.logical_not()?;
    /// ```
    #[track_caller]
    pub fn logical_not(&self) -> Result<Tensor> {
        static OP: Op = Op::new("logical_not");
        OP.call(&[self], Attrs::new())
    }
}

impl Tensor {
    /// elements of a where condition is true, else of b (broadcast).
    ///
    /// Op `where` (comparison): `where(condition, a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = condition.where_(&a, &b)?;
    /// ```
    #[track_caller]
    pub fn where_(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("where");
        OP.call(&[self, a, b], Attrs::new())
    }
}

impl Tensor {
    /// limits each element to \[min, max\] (either bound may be omitted).
    ///
    /// Attributes with defaults keep them; [`Tensor::clamp_with`] sets them.
    ///
    /// Op `clamp` (elementwise): `clamp(x; min: float = None, max: float = None) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.clamp()?;
    /// ```
    #[track_caller]
    pub fn clamp(&self) -> Result<Tensor> {
        self.clamp_with(ClampOptions::new())
    }

    /// limits each element to \[min, max\] (either bound may be omitted).
    ///
    /// Sets the attributes that have defaults through [`ClampOptions`].
    ///
    /// Op `clamp` (elementwise): `clamp(x; min: float = None, max: float = None) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = ClampOptions::new().min(min);
    /// let out = x.clamp_with(options)?;
    /// ```
    #[track_caller]
    pub fn clamp_with(&self, options: ClampOptions) -> Result<Tensor> {
        static OP: Op = Op::new("clamp");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::clamp_with`]: the attributes of `clamp` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = ClampOptions::new().min(min);
/// let out = x.clamp_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClampOptions {
    min: Option<f64>,
    max: Option<f64>,
}

impl ClampOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> ClampOptions {
        ClampOptions::default()
    }

    /// Sets `min`: `min: float = None`.
    #[must_use]
    pub fn min(mut self, min: f64) -> ClampOptions {
        self.min = Some(min);
        self
    }

    /// Sets `max`: `max: float = None`.
    #[must_use]
    pub fn max(mut self, max: f64) -> ClampOptions {
        self.max = Some(max);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.min {
            attrs = attrs.float("min", *value);
        }
        if let Some(value) = &self.max {
            attrs = attrs.float("max", *value);
        }
        attrs
    }
}

impl Tensor {
    /// converts to another dtype (floats to ints truncate; bf16/f16 round to nearest).
    ///
    /// Op `cast` (cast): `cast(x; dtype: dtype) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.cast(dtype)?;
    /// ```
    #[track_caller]
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        static OP: Op = Op::new("cast");
        OP.call(&[self], Attrs::new().dtype("dtype", dtype))
    }
}

impl Tensor {
    /// sum over dims (all when empty); ints give i64.
    ///
    /// Attributes with defaults keep them; [`Tensor::sum_with`] sets them.
    ///
    /// Op `sum` (reduction): `sum(x; dims: int[] = [], keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.sum()?;
    /// ```
    #[track_caller]
    pub fn sum(&self) -> Result<Tensor> {
        self.sum_with(SumOptions::new())
    }

    /// sum over dims (all when empty); ints give i64.
    ///
    /// Sets the attributes that have defaults through [`SumOptions`].
    ///
    /// Op `sum` (reduction): `sum(x; dims: int[] = [], keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = SumOptions::new().dims(dims);
    /// let out = x.sum_with(options)?;
    /// ```
    #[track_caller]
    pub fn sum_with(&self, options: SumOptions) -> Result<Tensor> {
        static OP: Op = Op::new("sum");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::sum_with`]: the attributes of `sum` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = SumOptions::new().dims(dims);
/// let out = x.sum_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SumOptions {
    dims: Option<Vec<i64>>,
    keepdim: Option<i64>,
}

impl SumOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> SumOptions {
        SumOptions::default()
    }

    /// Sets `dims`: `dims: int[] = []`.
    #[must_use]
    pub fn dims(mut self, dims: &[i64]) -> SumOptions {
        self.dims = Some(dims.to_vec());
        self
    }

    /// Sets `keepdim`: `keepdim: int = 0`.
    #[must_use]
    pub fn keepdim(mut self, keepdim: i64) -> SumOptions {
        self.keepdim = Some(keepdim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dims {
            attrs = attrs.ints("dims", value);
        }
        if let Some(value) = &self.keepdim {
            attrs = attrs.int("keepdim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// product over dims (all when empty); ints give i64.
    ///
    /// Attributes with defaults keep them; [`Tensor::prod_with`] sets them.
    ///
    /// Op `prod` (reduction): `prod(x; dims: int[] = [], keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.prod()?;
    /// ```
    #[track_caller]
    pub fn prod(&self) -> Result<Tensor> {
        self.prod_with(ProdOptions::new())
    }

    /// product over dims (all when empty); ints give i64.
    ///
    /// Sets the attributes that have defaults through [`ProdOptions`].
    ///
    /// Op `prod` (reduction): `prod(x; dims: int[] = [], keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = ProdOptions::new().dims(dims);
    /// let out = x.prod_with(options)?;
    /// ```
    #[track_caller]
    pub fn prod_with(&self, options: ProdOptions) -> Result<Tensor> {
        static OP: Op = Op::new("prod");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::prod_with`]: the attributes of `prod` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = ProdOptions::new().dims(dims);
/// let out = x.prod_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProdOptions {
    dims: Option<Vec<i64>>,
    keepdim: Option<i64>,
}

impl ProdOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> ProdOptions {
        ProdOptions::default()
    }

    /// Sets `dims`: `dims: int[] = []`.
    #[must_use]
    pub fn dims(mut self, dims: &[i64]) -> ProdOptions {
        self.dims = Some(dims.to_vec());
        self
    }

    /// Sets `keepdim`: `keepdim: int = 0`.
    #[must_use]
    pub fn keepdim(mut self, keepdim: i64) -> ProdOptions {
        self.keepdim = Some(keepdim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dims {
            attrs = attrs.ints("dims", value);
        }
        if let Some(value) = &self.keepdim {
            attrs = attrs.int("keepdim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// arithmetic mean over dims (floats only).
    ///
    /// Attributes with defaults keep them; [`Tensor::mean_with`] sets them.
    ///
    /// Op `mean` (reduction): `mean(x; dims: int[] = [], keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.mean()?;
    /// ```
    #[track_caller]
    pub fn mean(&self) -> Result<Tensor> {
        self.mean_with(MeanOptions::new())
    }

    /// arithmetic mean over dims (floats only).
    ///
    /// Sets the attributes that have defaults through [`MeanOptions`].
    ///
    /// Op `mean` (reduction): `mean(x; dims: int[] = [], keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = MeanOptions::new().dims(dims);
    /// let out = x.mean_with(options)?;
    /// ```
    #[track_caller]
    pub fn mean_with(&self, options: MeanOptions) -> Result<Tensor> {
        static OP: Op = Op::new("mean");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::mean_with`]: the attributes of `mean` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = MeanOptions::new().dims(dims);
/// let out = x.mean_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MeanOptions {
    dims: Option<Vec<i64>>,
    keepdim: Option<i64>,
}

impl MeanOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> MeanOptions {
        MeanOptions::default()
    }

    /// Sets `dims`: `dims: int[] = []`.
    #[must_use]
    pub fn dims(mut self, dims: &[i64]) -> MeanOptions {
        self.dims = Some(dims.to_vec());
        self
    }

    /// Sets `keepdim`: `keepdim: int = 0`.
    #[must_use]
    pub fn keepdim(mut self, keepdim: i64) -> MeanOptions {
        self.keepdim = Some(keepdim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dims {
            attrs = attrs.ints("dims", value);
        }
        if let Some(value) = &self.keepdim {
            attrs = attrs.int("keepdim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// variance over dims with Bessel's correction by default.
    ///
    /// Attributes with defaults keep them; [`Tensor::var_with`] sets them.
    ///
    /// Op `var` (reduction): `var(x; dims: int[] = [], keepdim: int = 0, correction: int = 1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.var()?;
    /// ```
    #[track_caller]
    pub fn var(&self) -> Result<Tensor> {
        self.var_with(VarOptions::new())
    }

    /// variance over dims with Bessel's correction by default.
    ///
    /// Sets the attributes that have defaults through [`VarOptions`].
    ///
    /// Op `var` (reduction): `var(x; dims: int[] = [], keepdim: int = 0, correction: int = 1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = VarOptions::new().dims(dims);
    /// let out = x.var_with(options)?;
    /// ```
    #[track_caller]
    pub fn var_with(&self, options: VarOptions) -> Result<Tensor> {
        static OP: Op = Op::new("var");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::var_with`]: the attributes of `var` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = VarOptions::new().dims(dims);
/// let out = x.var_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VarOptions {
    dims: Option<Vec<i64>>,
    keepdim: Option<i64>,
    correction: Option<i64>,
}

impl VarOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> VarOptions {
        VarOptions::default()
    }

    /// Sets `dims`: `dims: int[] = []`.
    #[must_use]
    pub fn dims(mut self, dims: &[i64]) -> VarOptions {
        self.dims = Some(dims.to_vec());
        self
    }

    /// Sets `keepdim`: `keepdim: int = 0`.
    #[must_use]
    pub fn keepdim(mut self, keepdim: i64) -> VarOptions {
        self.keepdim = Some(keepdim);
        self
    }

    /// Sets `correction`: `correction: int = 1`.
    #[must_use]
    pub fn correction(mut self, correction: i64) -> VarOptions {
        self.correction = Some(correction);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dims {
            attrs = attrs.ints("dims", value);
        }
        if let Some(value) = &self.keepdim {
            attrs = attrs.int("keepdim", *value);
        }
        if let Some(value) = &self.correction {
            attrs = attrs.int("correction", *value);
        }
        attrs
    }
}

impl Tensor {
    /// standard deviation over dims (correction as var).
    ///
    /// Attributes with defaults keep them; [`Tensor::std_with`] sets them.
    ///
    /// Op `std` (reduction): `std(x; dims: int[] = [], keepdim: int = 0, correction: int = 1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.std()?;
    /// ```
    #[track_caller]
    pub fn std(&self) -> Result<Tensor> {
        self.std_with(StdOptions::new())
    }

    /// standard deviation over dims (correction as var).
    ///
    /// Sets the attributes that have defaults through [`StdOptions`].
    ///
    /// Op `std` (reduction): `std(x; dims: int[] = [], keepdim: int = 0, correction: int = 1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = StdOptions::new().dims(dims);
    /// let out = x.std_with(options)?;
    /// ```
    #[track_caller]
    pub fn std_with(&self, options: StdOptions) -> Result<Tensor> {
        static OP: Op = Op::new("std");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::std_with`]: the attributes of `std` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = StdOptions::new().dims(dims);
/// let out = x.std_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StdOptions {
    dims: Option<Vec<i64>>,
    keepdim: Option<i64>,
    correction: Option<i64>,
}

impl StdOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> StdOptions {
        StdOptions::default()
    }

    /// Sets `dims`: `dims: int[] = []`.
    #[must_use]
    pub fn dims(mut self, dims: &[i64]) -> StdOptions {
        self.dims = Some(dims.to_vec());
        self
    }

    /// Sets `keepdim`: `keepdim: int = 0`.
    #[must_use]
    pub fn keepdim(mut self, keepdim: i64) -> StdOptions {
        self.keepdim = Some(keepdim);
        self
    }

    /// Sets `correction`: `correction: int = 1`.
    #[must_use]
    pub fn correction(mut self, correction: i64) -> StdOptions {
        self.correction = Some(correction);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dims {
            attrs = attrs.ints("dims", value);
        }
        if let Some(value) = &self.keepdim {
            attrs = attrs.int("keepdim", *value);
        }
        if let Some(value) = &self.correction {
            attrs = attrs.int("correction", *value);
        }
        attrs
    }
}

impl Tensor {
    /// largest value over dims; NaN propagates.
    ///
    /// Attributes with defaults keep them; [`Tensor::max_with`] sets them.
    ///
    /// Op `max` (reduction): `max(x; dims: int[] = [], keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.max()?;
    /// ```
    #[track_caller]
    pub fn max(&self) -> Result<Tensor> {
        self.max_with(MaxOptions::new())
    }

    /// largest value over dims; NaN propagates.
    ///
    /// Sets the attributes that have defaults through [`MaxOptions`].
    ///
    /// Op `max` (reduction): `max(x; dims: int[] = [], keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = MaxOptions::new().dims(dims);
    /// let out = x.max_with(options)?;
    /// ```
    #[track_caller]
    pub fn max_with(&self, options: MaxOptions) -> Result<Tensor> {
        static OP: Op = Op::new("max");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::max_with`]: the attributes of `max` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = MaxOptions::new().dims(dims);
/// let out = x.max_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MaxOptions {
    dims: Option<Vec<i64>>,
    keepdim: Option<i64>,
}

impl MaxOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> MaxOptions {
        MaxOptions::default()
    }

    /// Sets `dims`: `dims: int[] = []`.
    #[must_use]
    pub fn dims(mut self, dims: &[i64]) -> MaxOptions {
        self.dims = Some(dims.to_vec());
        self
    }

    /// Sets `keepdim`: `keepdim: int = 0`.
    #[must_use]
    pub fn keepdim(mut self, keepdim: i64) -> MaxOptions {
        self.keepdim = Some(keepdim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dims {
            attrs = attrs.ints("dims", value);
        }
        if let Some(value) = &self.keepdim {
            attrs = attrs.int("keepdim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// smallest value over dims; NaN propagates.
    ///
    /// Attributes with defaults keep them; [`Tensor::min_with`] sets them.
    ///
    /// Op `min` (reduction): `min(x; dims: int[] = [], keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.min()?;
    /// ```
    #[track_caller]
    pub fn min(&self) -> Result<Tensor> {
        self.min_with(MinOptions::new())
    }

    /// smallest value over dims; NaN propagates.
    ///
    /// Sets the attributes that have defaults through [`MinOptions`].
    ///
    /// Op `min` (reduction): `min(x; dims: int[] = [], keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = MinOptions::new().dims(dims);
    /// let out = x.min_with(options)?;
    /// ```
    #[track_caller]
    pub fn min_with(&self, options: MinOptions) -> Result<Tensor> {
        static OP: Op = Op::new("min");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::min_with`]: the attributes of `min` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = MinOptions::new().dims(dims);
/// let out = x.min_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MinOptions {
    dims: Option<Vec<i64>>,
    keepdim: Option<i64>,
}

impl MinOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> MinOptions {
        MinOptions::default()
    }

    /// Sets `dims`: `dims: int[] = []`.
    #[must_use]
    pub fn dims(mut self, dims: &[i64]) -> MinOptions {
        self.dims = Some(dims.to_vec());
        self
    }

    /// Sets `keepdim`: `keepdim: int = 0`.
    #[must_use]
    pub fn keepdim(mut self, keepdim: i64) -> MinOptions {
        self.keepdim = Some(keepdim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dims {
            attrs = attrs.ints("dims", value);
        }
        if let Some(value) = &self.keepdim {
            attrs = attrs.int("keepdim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// index of the first largest value along dim (flattened when no dim).
    ///
    /// Attributes with defaults keep them; [`Tensor::argmax_with`] sets them.
    ///
    /// Op `argmax` (reduction): `argmax(x; dim: int = None, keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.argmax()?;
    /// ```
    #[track_caller]
    pub fn argmax(&self) -> Result<Tensor> {
        self.argmax_with(ArgmaxOptions::new())
    }

    /// index of the first largest value along dim (flattened when no dim).
    ///
    /// Sets the attributes that have defaults through [`ArgmaxOptions`].
    ///
    /// Op `argmax` (reduction): `argmax(x; dim: int = None, keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = ArgmaxOptions::new().dim(dim);
    /// let out = x.argmax_with(options)?;
    /// ```
    #[track_caller]
    pub fn argmax_with(&self, options: ArgmaxOptions) -> Result<Tensor> {
        static OP: Op = Op::new("argmax");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::argmax_with`]: the attributes of `argmax` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = ArgmaxOptions::new().dim(dim);
/// let out = x.argmax_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ArgmaxOptions {
    dim: Option<i64>,
    keepdim: Option<i64>,
}

impl ArgmaxOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> ArgmaxOptions {
        ArgmaxOptions::default()
    }

    /// Sets `dim`: `dim: int = None`.
    #[must_use]
    pub fn dim(mut self, dim: i64) -> ArgmaxOptions {
        self.dim = Some(dim);
        self
    }

    /// Sets `keepdim`: `keepdim: int = 0`.
    #[must_use]
    pub fn keepdim(mut self, keepdim: i64) -> ArgmaxOptions {
        self.keepdim = Some(keepdim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim {
            attrs = attrs.int("dim", *value);
        }
        if let Some(value) = &self.keepdim {
            attrs = attrs.int("keepdim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// index of the first smallest value along dim (flattened when no dim).
    ///
    /// Attributes with defaults keep them; [`Tensor::argmin_with`] sets them.
    ///
    /// Op `argmin` (reduction): `argmin(x; dim: int = None, keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.argmin()?;
    /// ```
    #[track_caller]
    pub fn argmin(&self) -> Result<Tensor> {
        self.argmin_with(ArgminOptions::new())
    }

    /// index of the first smallest value along dim (flattened when no dim).
    ///
    /// Sets the attributes that have defaults through [`ArgminOptions`].
    ///
    /// Op `argmin` (reduction): `argmin(x; dim: int = None, keepdim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = ArgminOptions::new().dim(dim);
    /// let out = x.argmin_with(options)?;
    /// ```
    #[track_caller]
    pub fn argmin_with(&self, options: ArgminOptions) -> Result<Tensor> {
        static OP: Op = Op::new("argmin");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::argmin_with`]: the attributes of `argmin` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = ArgminOptions::new().dim(dim);
/// let out = x.argmin_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ArgminOptions {
    dim: Option<i64>,
    keepdim: Option<i64>,
}

impl ArgminOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> ArgminOptions {
        ArgminOptions::default()
    }

    /// Sets `dim`: `dim: int = None`.
    #[must_use]
    pub fn dim(mut self, dim: i64) -> ArgminOptions {
        self.dim = Some(dim);
        self
    }

    /// Sets `keepdim`: `keepdim: int = 0`.
    #[must_use]
    pub fn keepdim(mut self, keepdim: i64) -> ArgminOptions {
        self.keepdim = Some(keepdim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim {
            attrs = attrs.int("dim", *value);
        }
        if let Some(value) = &self.keepdim {
            attrs = attrs.int("keepdim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// matrix product with numpy semantics (1-D promotion, broadcast batch dims).
    ///
    /// Op `matmul` (matmul): `matmul(a, b) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = a.matmul(&b)?;
    /// ```
    #[track_caller]
    pub fn matmul(&self, b: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("matmul");
        OP.call(&[self, b], Attrs::new())
    }
}

impl Tensor {
    /// exp(x) / sum(exp(x)) along dim, computed stably.
    ///
    /// Attributes with defaults keep them; [`Tensor::softmax_with`] sets them.
    ///
    /// Op `softmax` (nn): `softmax(x; dim: int = -1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.softmax()?;
    /// ```
    #[track_caller]
    pub fn softmax(&self) -> Result<Tensor> {
        self.softmax_with(SoftmaxOptions::new())
    }

    /// exp(x) / sum(exp(x)) along dim, computed stably.
    ///
    /// Sets the attributes that have defaults through [`SoftmaxOptions`].
    ///
    /// Op `softmax` (nn): `softmax(x; dim: int = -1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = SoftmaxOptions::new().dim(dim);
    /// let out = x.softmax_with(options)?;
    /// ```
    #[track_caller]
    pub fn softmax_with(&self, options: SoftmaxOptions) -> Result<Tensor> {
        static OP: Op = Op::new("softmax");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::softmax_with`]: the attributes of `softmax` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = SoftmaxOptions::new().dim(dim);
/// let out = x.softmax_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SoftmaxOptions {
    dim: Option<i64>,
}

impl SoftmaxOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> SoftmaxOptions {
        SoftmaxOptions::default()
    }

    /// Sets `dim`: `dim: int = -1`.
    #[must_use]
    pub fn dim(mut self, dim: i64) -> SoftmaxOptions {
        self.dim = Some(dim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim {
            attrs = attrs.int("dim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// x - logsumexp(x) along dim, computed stably.
    ///
    /// Attributes with defaults keep them; [`Tensor::log_softmax_with`] sets them.
    ///
    /// Op `log_softmax` (nn): `log_softmax(x; dim: int = -1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.log_softmax()?;
    /// ```
    #[track_caller]
    pub fn log_softmax(&self) -> Result<Tensor> {
        self.log_softmax_with(LogSoftmaxOptions::new())
    }

    /// x - logsumexp(x) along dim, computed stably.
    ///
    /// Sets the attributes that have defaults through [`LogSoftmaxOptions`].
    ///
    /// Op `log_softmax` (nn): `log_softmax(x; dim: int = -1) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = LogSoftmaxOptions::new().dim(dim);
    /// let out = x.log_softmax_with(options)?;
    /// ```
    #[track_caller]
    pub fn log_softmax_with(&self, options: LogSoftmaxOptions) -> Result<Tensor> {
        static OP: Op = Op::new("log_softmax");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::log_softmax_with`]: the attributes of `log_softmax` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = LogSoftmaxOptions::new().dim(dim);
/// let out = x.log_softmax_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogSoftmaxOptions {
    dim: Option<i64>,
}

impl LogSoftmaxOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> LogSoftmaxOptions {
        LogSoftmaxOptions::default()
    }

    /// Sets `dim`: `dim: int = -1`.
    #[must_use]
    pub fn dim(mut self, dim: i64) -> LogSoftmaxOptions {
        self.dim = Some(dim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim {
            attrs = attrs.int("dim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// (x - mean) / sqrt(var + eps) over the trailing dims, then \* weight + bias.
    ///
    /// Attributes with defaults keep them; [`Tensor::layer_norm_with`] sets them.
    ///
    /// Op `layer_norm` (nn): `layer_norm(x, weight?, bias?; normalized_shape: int[] = [], eps: float = 1e-5) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.layer_norm(Some(&weight), Some(&bias))?;
    /// ```
    #[track_caller]
    pub fn layer_norm(&self, weight: Option<&Tensor>, bias: Option<&Tensor>) -> Result<Tensor> {
        self.layer_norm_with(weight, bias, LayerNormOptions::new())
    }

    /// (x - mean) / sqrt(var + eps) over the trailing dims, then \* weight + bias.
    ///
    /// Sets the attributes that have defaults through [`LayerNormOptions`].
    ///
    /// Op `layer_norm` (nn): `layer_norm(x, weight?, bias?; normalized_shape: int[] = [], eps: float = 1e-5) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = LayerNormOptions::new().normalized_shape(normalized_shape);
    /// let out = x.layer_norm_with(Some(&weight), Some(&bias), options)?;
    /// ```
    #[track_caller]
    pub fn layer_norm_with(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        options: LayerNormOptions,
    ) -> Result<Tensor> {
        static OP: Op = Op::new("layer_norm");
        let inputs = with_optional("layer_norm", &[self], &[("weight", weight), ("bias", bias)])?;
        OP.call(&inputs, options.attrs())
    }
}

/// Options of [`Tensor::layer_norm_with`]: the attributes of `layer_norm` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = LayerNormOptions::new().normalized_shape(normalized_shape);
/// let out = x.layer_norm_with(Some(&weight), Some(&bias), options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LayerNormOptions {
    normalized_shape: Option<Vec<i64>>,
    eps: Option<f64>,
}

impl LayerNormOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> LayerNormOptions {
        LayerNormOptions::default()
    }

    /// Sets `normalized_shape`: `normalized_shape: int[] = []`.
    #[must_use]
    pub fn normalized_shape(mut self, normalized_shape: &[i64]) -> LayerNormOptions {
        self.normalized_shape = Some(normalized_shape.to_vec());
        self
    }

    /// Sets `eps`: `eps: float = 1e-5`.
    #[must_use]
    pub fn eps(mut self, eps: f64) -> LayerNormOptions {
        self.eps = Some(eps);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.normalized_shape {
            attrs = attrs.ints("normalized_shape", value);
        }
        if let Some(value) = &self.eps {
            attrs = attrs.float("eps", *value);
        }
        attrs
    }
}

impl Tensor {
    /// x / sqrt(mean(x^2) + eps) over the trailing dims, then \* weight.
    ///
    /// Attributes with defaults keep them; [`Tensor::rms_norm_with`] sets them.
    ///
    /// Op `rms_norm` (nn): `rms_norm(x, weight?; normalized_shape: int[] = [], eps: float = 1e-6) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.rms_norm(Some(&weight))?;
    /// ```
    #[track_caller]
    pub fn rms_norm(&self, weight: Option<&Tensor>) -> Result<Tensor> {
        self.rms_norm_with(weight, RmsNormOptions::new())
    }

    /// x / sqrt(mean(x^2) + eps) over the trailing dims, then \* weight.
    ///
    /// Sets the attributes that have defaults through [`RmsNormOptions`].
    ///
    /// Op `rms_norm` (nn): `rms_norm(x, weight?; normalized_shape: int[] = [], eps: float = 1e-6) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = RmsNormOptions::new().normalized_shape(normalized_shape);
    /// let out = x.rms_norm_with(Some(&weight), options)?;
    /// ```
    #[track_caller]
    pub fn rms_norm_with(
        &self,
        weight: Option<&Tensor>,
        options: RmsNormOptions,
    ) -> Result<Tensor> {
        static OP: Op = Op::new("rms_norm");
        let inputs = with_optional("rms_norm", &[self], &[("weight", weight)])?;
        OP.call(&inputs, options.attrs())
    }
}

/// Options of [`Tensor::rms_norm_with`]: the attributes of `rms_norm` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = RmsNormOptions::new().normalized_shape(normalized_shape);
/// let out = x.rms_norm_with(Some(&weight), options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RmsNormOptions {
    normalized_shape: Option<Vec<i64>>,
    eps: Option<f64>,
}

impl RmsNormOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> RmsNormOptions {
        RmsNormOptions::default()
    }

    /// Sets `normalized_shape`: `normalized_shape: int[] = []`.
    #[must_use]
    pub fn normalized_shape(mut self, normalized_shape: &[i64]) -> RmsNormOptions {
        self.normalized_shape = Some(normalized_shape.to_vec());
        self
    }

    /// Sets `eps`: `eps: float = 1e-6`.
    #[must_use]
    pub fn eps(mut self, eps: f64) -> RmsNormOptions {
        self.eps = Some(eps);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.normalized_shape {
            attrs = attrs.ints("normalized_shape", value);
        }
        if let Some(value) = &self.eps {
            attrs = attrs.float("eps", *value);
        }
        attrs
    }
}

impl Tensor {
    /// softmax cross-entropy of logits \[N, C\] against class indices \[N\].
    ///
    /// Attributes with defaults keep them; [`Tensor::cross_entropy_with`] sets them.
    ///
    /// Op `cross_entropy` (loss): `cross_entropy(logits, target; reduction: str = 'mean', ignore_index: int = -100) -> loss`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = logits.cross_entropy(&target)?;
    /// ```
    #[track_caller]
    pub fn cross_entropy(&self, target: &Tensor) -> Result<Tensor> {
        self.cross_entropy_with(target, CrossEntropyOptions::new())
    }

    /// softmax cross-entropy of logits \[N, C\] against class indices \[N\].
    ///
    /// Sets the attributes that have defaults through [`CrossEntropyOptions`].
    ///
    /// Op `cross_entropy` (loss): `cross_entropy(logits, target; reduction: str = 'mean', ignore_index: int = -100) -> loss`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = CrossEntropyOptions::new().reduction(reduction);
    /// let out = logits.cross_entropy_with(&target, options)?;
    /// ```
    #[track_caller]
    pub fn cross_entropy_with(
        &self,
        target: &Tensor,
        options: CrossEntropyOptions,
    ) -> Result<Tensor> {
        static OP: Op = Op::new("cross_entropy");
        OP.call(&[self, target], options.attrs())
    }
}

/// Options of [`Tensor::cross_entropy_with`]: the attributes of `cross_entropy` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = CrossEntropyOptions::new().reduction(reduction);
/// let out = logits.cross_entropy_with(&target, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CrossEntropyOptions {
    reduction: Option<String>,
    ignore_index: Option<i64>,
}

impl CrossEntropyOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> CrossEntropyOptions {
        CrossEntropyOptions::default()
    }

    /// Sets `reduction`: `reduction: str = 'mean'`, one of `mean`, `sum`, `none`.
    #[must_use]
    pub fn reduction(mut self, reduction: &str) -> CrossEntropyOptions {
        self.reduction = Some(reduction.to_string());
        self
    }

    /// Sets `ignore_index`: `ignore_index: int = -100`.
    #[must_use]
    pub fn ignore_index(mut self, ignore_index: i64) -> CrossEntropyOptions {
        self.ignore_index = Some(ignore_index);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.reduction {
            attrs = attrs.str("reduction", value);
        }
        if let Some(value) = &self.ignore_index {
            attrs = attrs.int("ignore_index", *value);
        }
        attrs
    }
}

impl Tensor {
    /// rows of weight picked by integer indices: out\[..., :\] = weight\[indices\[...\], :\].
    ///
    /// Op `embedding` (indexing): `embedding(indices, weight) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = indices.embedding(&weight)?;
    /// ```
    #[track_caller]
    pub fn embedding(&self, weight: &Tensor) -> Result<Tensor> {
        static OP: Op = Op::new("embedding");
        OP.call(&[self, weight], Attrs::new())
    }
}

impl Tensor {
    /// the entries of x at the 1-D index along dim.
    ///
    /// Attributes with defaults keep them; [`Tensor::index_select_with`] sets them.
    ///
    /// Op `index_select` (indexing): `index_select(x, index; dim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.index_select(&index)?;
    /// ```
    #[track_caller]
    pub fn index_select(&self, index: &Tensor) -> Result<Tensor> {
        self.index_select_with(index, IndexSelectOptions::new())
    }

    /// the entries of x at the 1-D index along dim.
    ///
    /// Sets the attributes that have defaults through [`IndexSelectOptions`].
    ///
    /// Op `index_select` (indexing): `index_select(x, index; dim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = IndexSelectOptions::new().dim(dim);
    /// let out = x.index_select_with(&index, options)?;
    /// ```
    #[track_caller]
    pub fn index_select_with(&self, index: &Tensor, options: IndexSelectOptions) -> Result<Tensor> {
        static OP: Op = Op::new("index_select");
        OP.call(&[self, index], options.attrs())
    }
}

/// Options of [`Tensor::index_select_with`]: the attributes of `index_select` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = IndexSelectOptions::new().dim(dim);
/// let out = x.index_select_with(&index, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IndexSelectOptions {
    dim: Option<i64>,
}

impl IndexSelectOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> IndexSelectOptions {
        IndexSelectOptions::default()
    }

    /// Sets `dim`: `dim: int = 0`.
    #[must_use]
    pub fn dim(mut self, dim: i64) -> IndexSelectOptions {
        self.dim = Some(dim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim {
            attrs = attrs.int("dim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// out\[i\]\[j\] = x\[i\]\[index\[i\]\[j\]\] along dim (torch.gather).
    ///
    /// Attributes with defaults keep them; [`Tensor::gather_with`] sets them.
    ///
    /// Op `gather` (indexing): `gather(x, index; dim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.gather(&index)?;
    /// ```
    #[track_caller]
    pub fn gather(&self, index: &Tensor) -> Result<Tensor> {
        self.gather_with(index, GatherOptions::new())
    }

    /// out\[i\]\[j\] = x\[i\]\[index\[i\]\[j\]\] along dim (torch.gather).
    ///
    /// Sets the attributes that have defaults through [`GatherOptions`].
    ///
    /// Op `gather` (indexing): `gather(x, index; dim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = GatherOptions::new().dim(dim);
    /// let out = x.gather_with(&index, options)?;
    /// ```
    #[track_caller]
    pub fn gather_with(&self, index: &Tensor, options: GatherOptions) -> Result<Tensor> {
        static OP: Op = Op::new("gather");
        OP.call(&[self, index], options.attrs())
    }
}

/// Options of [`Tensor::gather_with`]: the attributes of `gather` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = GatherOptions::new().dim(dim);
/// let out = x.gather_with(&index, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GatherOptions {
    dim: Option<i64>,
}

impl GatherOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> GatherOptions {
        GatherOptions::default()
    }

    /// Sets `dim`: `dim: int = 0`.
    #[must_use]
    pub fn dim(mut self, dim: i64) -> GatherOptions {
        self.dim = Some(dim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim {
            attrs = attrs.int("dim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// x with src added at index along dim: out\[i\]\[index\[i\]\[j\]\] += src\[i\]\[j\] (torch.scatter\_add).
    ///
    /// Attributes with defaults keep them; [`Tensor::scatter_add_with`] sets them.
    ///
    /// Op `scatter_add` (indexing): `scatter_add(x, index, src; dim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.scatter_add(&index, &src)?;
    /// ```
    #[track_caller]
    pub fn scatter_add(&self, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        self.scatter_add_with(index, src, ScatterAddOptions::new())
    }

    /// x with src added at index along dim: out\[i\]\[index\[i\]\[j\]\] += src\[i\]\[j\] (torch.scatter\_add).
    ///
    /// Sets the attributes that have defaults through [`ScatterAddOptions`].
    ///
    /// Op `scatter_add` (indexing): `scatter_add(x, index, src; dim: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = ScatterAddOptions::new().dim(dim);
    /// let out = x.scatter_add_with(&index, &src, options)?;
    /// ```
    #[track_caller]
    pub fn scatter_add_with(
        &self,
        index: &Tensor,
        src: &Tensor,
        options: ScatterAddOptions,
    ) -> Result<Tensor> {
        static OP: Op = Op::new("scatter_add");
        OP.call(&[self, index, src], options.attrs())
    }
}

/// Options of [`Tensor::scatter_add_with`]: the attributes of `scatter_add` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = ScatterAddOptions::new().dim(dim);
/// let out = x.scatter_add_with(&index, &src, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScatterAddOptions {
    dim: Option<i64>,
}

impl ScatterAddOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> ScatterAddOptions {
        ScatterAddOptions::default()
    }

    /// Sets `dim`: `dim: int = 0`.
    #[must_use]
    pub fn dim(mut self, dim: i64) -> ScatterAddOptions {
        self.dim = Some(dim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim {
            attrs = attrs.int("dim", *value);
        }
        attrs
    }
}

/// concatenates tensors along an existing dim.
///
/// Attributes with defaults keep them; [`cat_with`] sets them.
///
/// Op `cat` (indexing): `cat(tensors[]; dim: int = 0) -> out`
///
/// # Example
///
/// ```ignore
/// let out = cat(&[&a, &b])?;
/// ```
#[track_caller]
pub fn cat(tensors: &[&Tensor]) -> Result<Tensor> {
    cat_with(tensors, CatOptions::new())
}

/// concatenates tensors along an existing dim.
///
/// Sets the attributes that have defaults through [`CatOptions`].
///
/// Op `cat` (indexing): `cat(tensors[]; dim: int = 0) -> out`
///
/// # Example
///
/// ```ignore
/// let options = CatOptions::new().dim(dim);
/// let out = cat_with(&[&a, &b], options)?;
/// ```
#[track_caller]
pub fn cat_with(tensors: &[&Tensor], options: CatOptions) -> Result<Tensor> {
    static OP: Op = Op::new("cat");
    OP.call(tensors, options.attrs())
}

/// Options of [`cat_with`]: the attributes of `cat` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = CatOptions::new().dim(dim);
/// let out = cat_with(&[&a, &b], options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CatOptions {
    dim: Option<i64>,
}

impl CatOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> CatOptions {
        CatOptions::default()
    }

    /// Sets `dim`: `dim: int = 0`.
    #[must_use]
    pub fn dim(mut self, dim: i64) -> CatOptions {
        self.dim = Some(dim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim {
            attrs = attrs.int("dim", *value);
        }
        attrs
    }
}

/// joins equal-shaped tensors along a new dim.
///
/// Attributes with defaults keep them; [`stack_with`] sets them.
///
/// Op `stack` (indexing): `stack(tensors[]; dim: int = 0) -> out`
///
/// # Example
///
/// ```ignore
/// let out = stack(&[&a, &b])?;
/// ```
#[track_caller]
pub fn stack(tensors: &[&Tensor]) -> Result<Tensor> {
    stack_with(tensors, StackOptions::new())
}

/// joins equal-shaped tensors along a new dim.
///
/// Sets the attributes that have defaults through [`StackOptions`].
///
/// Op `stack` (indexing): `stack(tensors[]; dim: int = 0) -> out`
///
/// # Example
///
/// ```ignore
/// let options = StackOptions::new().dim(dim);
/// let out = stack_with(&[&a, &b], options)?;
/// ```
#[track_caller]
pub fn stack_with(tensors: &[&Tensor], options: StackOptions) -> Result<Tensor> {
    static OP: Op = Op::new("stack");
    OP.call(tensors, options.attrs())
}

/// Options of [`stack_with`]: the attributes of `stack` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = StackOptions::new().dim(dim);
/// let out = stack_with(&[&a, &b], options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StackOptions {
    dim: Option<i64>,
}

impl StackOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> StackOptions {
        StackOptions::default()
    }

    /// Sets `dim`: `dim: int = 0`.
    #[must_use]
    pub fn dim(mut self, dim: i64) -> StackOptions {
        self.dim = Some(dim);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.dim {
            attrs = attrs.int("dim", *value);
        }
        attrs
    }
}

impl Tensor {
    /// constant padding; pad lists (before, after) pairs from the last dim back.
    ///
    /// Attributes with defaults keep them; [`Tensor::pad_with`] sets them.
    ///
    /// Op `pad` (indexing): `pad(x; pad: int[], value: float = 0.0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.pad(pad)?;
    /// ```
    #[track_caller]
    pub fn pad(&self, pad: &[i64]) -> Result<Tensor> {
        self.pad_with(pad, PadOptions::new())
    }

    /// constant padding; pad lists (before, after) pairs from the last dim back.
    ///
    /// Sets the attributes that have defaults through [`PadOptions`].
    ///
    /// Op `pad` (indexing): `pad(x; pad: int[], value: float = 0.0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = PadOptions::new().value(value);
    /// let out = x.pad_with(pad, options)?;
    /// ```
    #[track_caller]
    pub fn pad_with(&self, pad: &[i64], options: PadOptions) -> Result<Tensor> {
        static OP: Op = Op::new("pad");
        OP.call(&[self], options.attrs().ints("pad", pad))
    }
}

/// Options of [`Tensor::pad_with`]: the attributes of `pad` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = PadOptions::new().value(value);
/// let out = x.pad_with(pad, options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PadOptions {
    value: Option<f64>,
}

impl PadOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> PadOptions {
        PadOptions::default()
    }

    /// Sets `value`: `value: float = 0.0`.
    #[must_use]
    pub fn value(mut self, value: f64) -> PadOptions {
        self.value = Some(value);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.value {
            attrs = attrs.float("value", *value);
        }
        attrs
    }
}

impl Tensor {
    /// keeps elements on and above the diagonal of the last two dims, zeroes the rest.
    ///
    /// Attributes with defaults keep them; [`Tensor::triu_with`] sets them.
    ///
    /// Op `triu` (indexing): `triu(x; diagonal: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.triu()?;
    /// ```
    #[track_caller]
    pub fn triu(&self) -> Result<Tensor> {
        self.triu_with(TriuOptions::new())
    }

    /// keeps elements on and above the diagonal of the last two dims, zeroes the rest.
    ///
    /// Sets the attributes that have defaults through [`TriuOptions`].
    ///
    /// Op `triu` (indexing): `triu(x; diagonal: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = TriuOptions::new().diagonal(diagonal);
    /// let out = x.triu_with(options)?;
    /// ```
    #[track_caller]
    pub fn triu_with(&self, options: TriuOptions) -> Result<Tensor> {
        static OP: Op = Op::new("triu");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::triu_with`]: the attributes of `triu` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = TriuOptions::new().diagonal(diagonal);
/// let out = x.triu_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TriuOptions {
    diagonal: Option<i64>,
}

impl TriuOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> TriuOptions {
        TriuOptions::default()
    }

    /// Sets `diagonal`: `diagonal: int = 0`.
    #[must_use]
    pub fn diagonal(mut self, diagonal: i64) -> TriuOptions {
        self.diagonal = Some(diagonal);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.diagonal {
            attrs = attrs.int("diagonal", *value);
        }
        attrs
    }
}

impl Tensor {
    /// keeps elements on and below the diagonal of the last two dims, zeroes the rest.
    ///
    /// Attributes with defaults keep them; [`Tensor::tril_with`] sets them.
    ///
    /// Op `tril` (indexing): `tril(x; diagonal: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = x.tril()?;
    /// ```
    #[track_caller]
    pub fn tril(&self) -> Result<Tensor> {
        self.tril_with(TrilOptions::new())
    }

    /// keeps elements on and below the diagonal of the last two dims, zeroes the rest.
    ///
    /// Sets the attributes that have defaults through [`TrilOptions`].
    ///
    /// Op `tril` (indexing): `tril(x; diagonal: int = 0) -> out`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let options = TrilOptions::new().diagonal(diagonal);
    /// let out = x.tril_with(options)?;
    /// ```
    #[track_caller]
    pub fn tril_with(&self, options: TrilOptions) -> Result<Tensor> {
        static OP: Op = Op::new("tril");
        OP.call(&[self], options.attrs())
    }
}

/// Options of [`Tensor::tril_with`]: the attributes of `tril` that have defaults.
///
/// An option left unset takes the host's default.
///
/// # Example
///
/// ```ignore
/// let options = TrilOptions::new().diagonal(diagonal);
/// let out = x.tril_with(options)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrilOptions {
    diagonal: Option<i64>,
}

impl TrilOptions {
    /// No options set: every attribute takes its default.
    pub fn new() -> TrilOptions {
        TrilOptions::default()
    }

    /// Sets `diagonal`: `diagonal: int = 0`.
    #[must_use]
    pub fn diagonal(mut self, diagonal: i64) -> TrilOptions {
        self.diagonal = Some(diagonal);
        self
    }

    fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::new();
        if let Some(value) = &self.diagonal {
            attrs = attrs.int("diagonal", *value);
        }
        attrs
    }
}

impl Tensor {
    /// one torch.optim.Adam update (L2 weight decay): new param, exp\_avg, exp\_avg\_sq.
    ///
    /// Op `adam_step` (optimizer): `adam_step(param, grad, exp_avg, exp_avg_sq, lr, step; beta1: float, beta2: float, eps: float, weight_decay: float) -> param, exp_avg, exp_avg_sq`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = param.adam_step(&grad, &exp_avg, &exp_avg_sq, &lr, &step, beta1, beta2, eps, weight_decay)?;
    /// ```
    #[track_caller]
    pub fn adam_step(
        &self,
        grad: &Tensor,
        exp_avg: &Tensor,
        exp_avg_sq: &Tensor,
        lr: &Tensor,
        step: &Tensor,
        beta1: f64,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    ) -> Result<[Tensor; 3]> {
        static OP: Op = Op::new("adam_step");
        OP.call(
            &[self, grad, exp_avg, exp_avg_sq, lr, step],
            Attrs::new()
                .float("beta1", beta1)
                .float("beta2", beta2)
                .float("eps", eps)
                .float("weight_decay", weight_decay),
        )
    }
}

impl Tensor {
    /// one torch.optim.AdamW update (decoupled weight decay): new param and moments.
    ///
    /// Op `adamw_step` (optimizer): `adamw_step(param, grad, exp_avg, exp_avg_sq, lr, step; beta1: float, beta2: float, eps: float, weight_decay: float) -> param, exp_avg, exp_avg_sq`
    ///
    /// # Example
    ///
    /// ```ignore
    /// let out = param.adamw_step(&grad, &exp_avg, &exp_avg_sq, &lr, &step, beta1, beta2, eps, weight_decay)?;
    /// ```
    #[track_caller]
    pub fn adamw_step(
        &self,
        grad: &Tensor,
        exp_avg: &Tensor,
        exp_avg_sq: &Tensor,
        lr: &Tensor,
        step: &Tensor,
        beta1: f64,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    ) -> Result<[Tensor; 3]> {
        static OP: Op = Op::new("adamw_step");
        OP.call(
            &[self, grad, exp_avg, exp_avg_sq, lr, step],
            Attrs::new()
                .float("beta1", beta1)
                .float("beta2", beta2)
                .float("eps", eps)
                .float("weight_decay", weight_decay),
        )
    }
}
