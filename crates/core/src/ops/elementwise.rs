//! Elementwise ops with numpy broadcasting and PyTorch type promotion: unary math, binary
//! arithmetic, comparisons, logic, `where`, `clamp` and `cast`.
//!
//! Each op is a zero-sized type implementing one small trait; the generic kernels are
//! monomorphized per op so the inner loops inline the math. Every op also exposes its
//! per-element form ([`Pointwise`]) for fused kernels: the eager kernel and the block kernel
//! call the same element function, so fused chains are bitwise equal to eager ones.

use super::attrs::ResolvedAttrs;
use super::attrs::{AttrDefault, AttrKind, AttrSpec};
use super::common::{
    as_dtype, block1, block2, block3, cast_block, cast_buffer, map1, map2, map3, operand,
    streaming_cost, tile1, tile2, up_down, with_float, FloatElem, MathExt,
};
use smallvec::smallvec;

use super::registry::{
    no_f32_tile, Exec, F32Tile, InputSpec, KernelArgs, KernelResult, MetaArgs, OpDef, OpGroup,
    Pointwise, PointwiseArgs,
};
use crate::device::cost::{Engine, OpCost};
use crate::tensor::{broadcast_shapes, Buffer, DType, Element, TensorMeta};
use crate::with_dtype;

type KResult1 = Result<Buffer, String>;

static X: &[InputSpec] = &[InputSpec::tensor("x")];
static AB: &[InputSpec] = &[InputSpec::tensor("a"), InputSpec::tensor("b")];
static OUT: &[&str] = &["out"];

// ---------------------------------------------------------------------------------------------
// Unary ops that always compute in floating point (int inputs become the default float).

/// A float function of one value, computed in the compute type.
trait FloatFn {
    fn apply<F: MathExt>(x: F) -> F;
}

/// A unary op computed in floating point.
trait UnaryFloat: FloatFn {
    const NAME: &'static str;
    const DOC: &'static str;
    const ENGINE: Engine;
}

fn infer_unary_float(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let x = &a.inputs[0];
    Ok(vec![TensorMeta::new(x.shape.clone(), x.dtype.to_float())])
}

/// `O` on a float storage type: widened, computed, rounded once. It is a function item that
/// always inlines (a closure would not), so the vectorized loops of `map1` and `block1` inline
/// the math.
#[inline(always)]
fn lifted<T: FloatElem, O: FloatFn>(v: T) -> T {
    T::down(O::apply(v.up()))
}

fn float_map<T: FloatElem, O: FloatFn>(x: &crate::Tensor) -> Buffer {
    T::into_buffer(map1(x, lifted::<T, O>))
}

/// The block form of [`float_map`].
fn float_block<T: FloatElem, O: FloatFn>(a: &PointwiseArgs) -> Buffer {
    block1(a, lifted::<T, O>)
}

/// Operands of ops that convert their one input to the output dtype first.
fn operands_as_output(_: &MetaArgs, out: &TensorMeta) -> Vec<DType> {
    vec![out.dtype]
}

/// Operands of ops that take their inputs as they are.
fn operands_as_given(a: &MetaArgs, _: &TensorMeta) -> Vec<DType> {
    a.inputs.iter().map(|m| m.dtype).collect()
}

fn unary_float_kernel<O: UnaryFloat>(a: &KernelArgs) -> KernelResult {
    let out = a.outputs[0].dtype;
    let x = as_dtype(a.inputs[0], out);
    Ok(smallvec![with_float!(out, T => float_map::<T, O>(&x))])
}

fn unary_float_block<O: UnaryFloat>(a: &PointwiseArgs) -> KResult1 {
    Ok(with_float!(a.output, T => float_block::<T, O>(a)))
}

/// The f32 tile loop of a float function: [`lifted`] for f32, as the block kernel runs it.
fn float_tile<O: FloatFn>(x: &[f32], out: &mut [f32]) {
    tile1(x, out, lifted::<f32, O>)
}

fn float_f32_tile<O: FloatFn>(_: &ResolvedAttrs) -> Option<F32Tile> {
    Some(F32Tile::Unary(float_tile::<O>))
}

fn unary_cost<O: UnaryFloat>(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    streaming_cost(a, o, 1.0, O::ENGINE)
}

fn unary_float_def<O: UnaryFloat>() -> OpDef {
    OpDef {
        name: O::NAME,
        doc: O::DOC,
        group: OpGroup::Elementwise,
        inputs: X,
        attrs: &[],
        outputs: OUT,
        infer: infer_unary_float,
        exec: Exec::Compute(unary_float_kernel::<O>),
        cost: unary_cost::<O>,
        pointwise: Some(Pointwise {
            operands: operands_as_output,
            block: unary_float_block::<O>,
            f32_tile: float_f32_tile::<O>,
        }),
        rowwise: None,
    }
}

macro_rules! unary_float_ops {
    ($($ty:ident $name:literal $engine:ident $doc:literal |$x:ident| $body:expr;)*) => {
        $(
            struct $ty;
            impl FloatFn for $ty {
                #[inline(always)]
                fn apply<F: MathExt>($x: F) -> F {
                    $body
                }
            }
            impl UnaryFloat for $ty {
                const NAME: &'static str = $name;
                const DOC: &'static str = $doc;
                const ENGINE: Engine = Engine::$engine;
            }
        )*
        fn unary_float_defs() -> Vec<OpDef> {
            vec![$(unary_float_def::<$ty>()),*]
        }
    };
}

unary_float_ops! {
    Exp "exp" Scalar "e raised to each element" |x| x.vexp();
    Log "log" Scalar "natural logarithm of each element" |x| x.ln();
    Sqrt "sqrt" Scalar "square root of each element" |x| x.sqrt();
    Rsqrt "rsqrt" Scalar "reciprocal square root, 1/sqrt(x)" |x| x.sqrt().recip();
    Reciprocal "reciprocal" Vector "1/x for each element" |x| x.recip();
    Tanh "tanh" Scalar "hyperbolic tangent" |x| x.vtanh();
    Sigmoid "sigmoid" Scalar "logistic function 1/(1+exp(-x))" |x| F::one() / (F::one() + (-x).vexp());
    Silu "silu" Scalar "x * sigmoid(x) (SiLU / swish)" |x| x / (F::one() + (-x).vexp());
    Sin "sin" Scalar "sine (radians)" |x| x.sin();
    Cos "cos" Scalar "cosine (radians)" |x| x.cos();
    Erf "erf" Scalar "the error function" |x| x.erf();
}

// gelu has a mode attribute, so it is written out.
static GELU_ATTRS: &[AttrSpec] = &[AttrSpec::choice("approximate", "none", &["none", "tanh"])];

#[inline(always)]
fn gelu_erf<F: MathExt>(x: F) -> F {
    F::c(0.5) * x * (F::one() + (x * F::c(std::f64::consts::FRAC_1_SQRT_2)).erf())
}

#[inline(always)]
pub(super) fn gelu_tanh<F: MathExt>(x: F) -> F {
    // torch's approximate='tanh' is 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3).
    // Since 1 + tanh(u) = 2 sigmoid(2u), that is x / (1 + e^(-2u)), or x e / (1 + e) with
    // e = e^(2u): one exponential, no polynomial branch, and no cancellation where tanh(u)
    // nears -1 (x below about -3). e = e^(-2|u|) never overflows, so results too small for
    // 1 / e to be finite still come out as the tiny numbers they are.
    let two_u = F::c(1.595_769_121_605_730_8) * (x + F::c(0.044715) * x * x * x);
    let e = (-two_u.abs()).vexp();
    let scaled = if two_u < F::zero() { x * e } else { x };
    scaled / (F::one() + e)
}

/// gelu with approximate='none'.
struct GeluErf;
impl FloatFn for GeluErf {
    #[inline(always)]
    fn apply<F: MathExt>(x: F) -> F {
        gelu_erf(x)
    }
}

/// gelu with approximate='tanh'.
struct GeluTanh;
impl FloatFn for GeluTanh {
    #[inline(always)]
    fn apply<F: MathExt>(x: F) -> F {
        gelu_tanh(x)
    }
}

fn gelu_kernel(a: &KernelArgs) -> KernelResult {
    let out = a.outputs[0].dtype;
    let x = as_dtype(a.inputs[0], out);
    let tanh = a.attrs.str("approximate") == "tanh";
    Ok(smallvec![with_float!(out, T => if tanh {
        float_map::<T, GeluTanh>(&x)
    } else {
        float_map::<T, GeluErf>(&x)
    })])
}

fn gelu_f32_tile(attrs: &ResolvedAttrs) -> Option<F32Tile> {
    Some(F32Tile::Unary(if attrs.str("approximate") == "tanh" {
        float_tile::<GeluTanh>
    } else {
        float_tile::<GeluErf>
    }))
}

fn gelu_block(a: &PointwiseArgs) -> KResult1 {
    let tanh = a.attrs.str("approximate") == "tanh";
    Ok(with_float!(a.output, T => if tanh {
        float_block::<T, GeluTanh>(a)
    } else {
        float_block::<T, GeluErf>(a)
    }))
}

// gelu's backward as one kernel, as torch's gelu_backward: training then holds one gradient
// over the activation instead of the derivative formula's intermediates.
static GELU_BACKWARD_INPUTS: &[InputSpec] = &[InputSpec::tensor("grad"), InputSpec::tensor("x")];

/// d/dx gelu(x), exact: Phi(x) + x phi(x); at +-inf its limits, 1 and 0 (torch's formula
/// gives NaN there).
#[inline(always)]
fn gelu_erf_slope<F: MathExt>(x: F) -> F {
    let cdf = F::c(0.5) * (F::one() + (x * F::c(std::f64::consts::FRAC_1_SQRT_2)).erf());
    let pdf = (F::c(-0.5) * x * x).vexp() * F::c(0.398_942_280_401_432_7);
    // Where the density underflows, x phi(x) is 0 (its limit at +-inf, not inf * 0).
    let tail = if pdf == F::zero() { F::zero() } else { x * pdf };
    cdf + tail
}

/// d/dx gelu(x) with approximate='tanh': (1 + tanh u) / 2 + x / 2 (1 - tanh^2 u) u'.
#[inline(always)]
fn gelu_tanh_slope<F: MathExt>(x: F) -> F {
    // With e = e^(-2|u|), (1 + tanh u) / 2 = sigmoid(2u) and 1 - tanh^2 u = 4e / (1 + e)^2:
    // one exponential, which never overflows, and no cancellation where tanh u nears -1.
    let k = F::c(0.797_884_560_802_865_4);
    let x2 = x * x;
    let u = k * (x + F::c(0.044715) * x2 * x);
    let e = (F::c(-2.0) * u.abs()).vexp();
    let r = F::one() / (F::one() + e);
    let half_one_plus_t = if u < F::zero() { e * r } else { r };
    // Where e underflows, the second term is 0 (its limit), even once x^2 overflows.
    let tail = if e == F::zero() {
        F::zero()
    } else {
        let du = k * (F::one() + F::c(3.0 * 0.044715) * x2);
        F::c(2.0) * x * e * r * r * du
    };
    half_one_plus_t + tail
}

/// A float function of a gradient and the op's input: a backward kernel's element function.
trait BackwardFn {
    fn apply<F: MathExt>(grad: F, x: F) -> F;
}

struct GeluErfBackward;
impl BackwardFn for GeluErfBackward {
    #[inline(always)]
    fn apply<F: MathExt>(grad: F, x: F) -> F {
        grad * gelu_erf_slope(x)
    }
}

struct GeluTanhBackward;
impl BackwardFn for GeluTanhBackward {
    #[inline(always)]
    fn apply<F: MathExt>(grad: F, x: F) -> F {
        grad * gelu_tanh_slope(x)
    }
}

/// `O` on a float storage type: widened, computed, rounded once.
#[inline(always)]
fn lifted_backward<T: FloatElem, O: BackwardFn>(grad: T, x: T) -> T {
    T::down(O::apply(grad.up(), x.up()))
}

fn infer_gelu_backward(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let (g, x) = (&a.inputs[0], &a.inputs[1]);
    let shape = broadcast_shapes(&g.shape, &x.shape).map_err(|e| e.0)?;
    Ok(vec![TensorMeta::new(shape, promoted(g, x).to_float())])
}

fn gelu_backward_kernel(a: &KernelArgs) -> KernelResult {
    let out = &a.outputs[0];
    let g = as_dtype(a.inputs[0], out.dtype);
    let x = as_dtype(a.inputs[1], out.dtype);
    let tanh = a.attrs.str("approximate") == "tanh";
    Ok(smallvec![
        with_float!(out.dtype, T => T::into_buffer(if tanh {
            map2(&g, &x, &out.shape, lifted_backward::<T, GeluTanhBackward>)
        } else {
            map2(&g, &x, &out.shape, lifted_backward::<T, GeluErfBackward>)
        }))
    ])
}

fn gelu_backward_block(a: &PointwiseArgs) -> KResult1 {
    let tanh = a.attrs.str("approximate") == "tanh";
    Ok(with_float!(a.output, T => if tanh {
        block2(a, lifted_backward::<T, GeluTanhBackward>)
    } else {
        block2(a, lifted_backward::<T, GeluErfBackward>)
    }))
}

fn backward_tile<O: BackwardFn>(grad: &[f32], x: &[f32], out: &mut [f32]) {
    tile2(grad, x, out, lifted_backward::<f32, O>)
}

fn gelu_backward_f32_tile(attrs: &ResolvedAttrs) -> Option<F32Tile> {
    Some(F32Tile::Binary(if attrs.str("approximate") == "tanh" {
        backward_tile::<GeluTanhBackward>
    } else {
        backward_tile::<GeluErfBackward>
    }))
}

// ---------------------------------------------------------------------------------------------
// Unary ops that keep the dtype (ints included).

/// A unary op defined for floats and integers alike; [`FloatFn::apply`] is its float form.
trait UnaryNumeric: FloatFn {
    const NAME: &'static str;
    const DOC: &'static str;
    fn int(x: i64) -> i64;
}

fn infer_unary_numeric(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let x = &a.inputs[0];
    if x.dtype == DType::Bool {
        return Err("expected a numeric dtype, got bool".into());
    }
    Ok(vec![x.clone()])
}

#[inline(always)]
fn int_unary<O: UnaryNumeric, T: Element>(v: T) -> T {
    T::from_i64(O::int(v.to_i64()))
}

fn unary_numeric_kernel<O: UnaryNumeric>(a: &KernelArgs) -> KernelResult {
    let x = a.inputs[0];
    let out = x.dtype();
    if out.is_float() {
        return Ok(smallvec![with_float!(out, T => float_map::<T, O>(x))]);
    }
    Ok(smallvec![
        with_dtype!(out, T => T::into_buffer(map1(x, int_unary::<O, T>))),
    ])
}

fn unary_numeric_block<O: UnaryNumeric>(a: &PointwiseArgs) -> KResult1 {
    if a.output.is_float() {
        return Ok(with_float!(a.output, T => float_block::<T, O>(a)));
    }
    Ok(with_dtype!(a.output, T => block1(a, int_unary::<O, T>)))
}

fn unary_numeric_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    streaming_cost(a, o, 1.0, Engine::Vector)
}

macro_rules! unary_numeric_ops {
    ($($ty:ident $name:literal $doc:literal |$x:ident| $float:expr, |$i:ident| $int:expr;)*) => {
        $(
            struct $ty;
            impl FloatFn for $ty {
                #[inline(always)]
                fn apply<F: MathExt>($x: F) -> F {
                    $float
                }
            }
            impl UnaryNumeric for $ty {
                const NAME: &'static str = $name;
                const DOC: &'static str = $doc;
                #[inline(always)]
                fn int($i: i64) -> i64 {
                    $int
                }
            }
        )*
        fn unary_numeric_defs() -> Vec<OpDef> {
            vec![$(OpDef {
                name: $ty::NAME,
                doc: $ty::DOC,
                group: OpGroup::Elementwise,
                inputs: X,
                attrs: &[],
                outputs: OUT,
                infer: infer_unary_numeric,
                exec: Exec::Compute(unary_numeric_kernel::<$ty>),
                cost: unary_numeric_cost,
                pointwise: Some(Pointwise {
                    operands: operands_as_given,
                    block: unary_numeric_block::<$ty>,
                    f32_tile: float_f32_tile::<$ty>,
                }),
                rowwise: None,
            }),*]
        }
    };
}

unary_numeric_ops! {
    Neg "neg" "negation, -x" |x| -x, |i| i.wrapping_neg();
    Abs "abs" "absolute value" |x| x.abs(), |i| i.wrapping_abs();
    Relu "relu" "max(x, 0)" |x| if x > F::zero() || x.is_nan() { x } else { F::zero() }, |i| i.max(0);
    Square "square" "x * x" |x| x * x, |i| i.wrapping_mul(i);
}

// ---------------------------------------------------------------------------------------------
// Binary arithmetic with broadcasting and promotion.

/// A binary arithmetic op.
trait BinaryArith {
    const NAME: &'static str;
    const DOC: &'static str;
    /// True division: integer operands give the default float.
    const ALWAYS_FLOAT: bool = false;
    /// Defined on bools (as logical or/and for add/mul, as torch).
    const BOOL_OK: bool = true;
    fn float<F: MathExt>(a: F, b: F) -> F;
    fn int(a: i64, b: i64) -> i64;
    /// A check on the integer operand `b` before the loop (pow rejects negative exponents).
    fn check_int(_b: impl Iterator<Item = i64>) -> Result<(), String> {
        Ok(())
    }
}

fn promoted(a: &TensorMeta, b: &TensorMeta) -> DType {
    DType::result_type(&[(a.dtype, a.shape.is_empty()), (b.dtype, b.shape.is_empty())])
        .expect("two operands")
}

fn infer_arith<O: BinaryArith>(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let (x, y) = (&a.inputs[0], &a.inputs[1]);
    let shape = broadcast_shapes(&x.shape, &y.shape).map_err(|e| e.0)?;
    let mut dtype = promoted(x, y);
    if O::ALWAYS_FLOAT {
        dtype = dtype.to_float();
    }
    if dtype == DType::Bool && !O::BOOL_OK {
        return Err(format!(
            "{} is not defined for two bool tensors; use logical_xor or cast to an integer dtype",
            O::NAME
        ));
    }
    Ok(vec![TensorMeta::new(shape, dtype)])
}

#[inline(always)]
fn arith_float<O: BinaryArith, T: FloatElem>(p: T, q: T) -> T {
    T::down(O::float(p.up(), q.up()))
}

#[inline(always)]
fn arith_int<O: BinaryArith, T: Element>(p: T, q: T) -> T {
    T::from_i64(O::int(p.to_i64(), q.to_i64()))
}

fn arith_kernel<O: BinaryArith>(a: &KernelArgs) -> KernelResult {
    let out = &a.outputs[0];
    let x = as_dtype(a.inputs[0], out.dtype);
    let y = as_dtype(a.inputs[1], out.dtype);
    if out.dtype.is_float() {
        return Ok(smallvec![
            with_float!(out.dtype, T => T::into_buffer(map2(&x, &y, &out.shape, arith_float::<O, T>))),
        ]);
    }
    O::check_int(y.to_vec::<i64>().into_iter())?;
    Ok(smallvec![
        with_dtype!(out.dtype, T => T::into_buffer(map2(&x, &y, &out.shape, arith_int::<O, T>))),
    ])
}

fn arith_block<O: BinaryArith>(a: &PointwiseArgs) -> KResult1 {
    if a.output.is_float() {
        return Ok(with_float!(a.output, T => block2(a, arith_float::<O, T>)));
    }
    with_dtype!(a.output, T => {
        O::check_int(operand::<T>(a, 1).iter().map(|v| v.to_i64()))?;
        Ok(block2(a, arith_int::<O, T>))
    })
}

/// Arithmetic converts both operands to the output dtype.
fn operands_arith(_: &MetaArgs, out: &TensorMeta) -> Vec<DType> {
    vec![out.dtype; 2]
}

/// The f32 tile loop of an arithmetic op, as its block kernel runs it on f32.
fn arith_tile<O: BinaryArith>(a: &[f32], b: &[f32], out: &mut [f32]) {
    tile2(a, b, out, arith_float::<O, f32>)
}

fn arith_f32_tile<O: BinaryArith>(_: &ResolvedAttrs) -> Option<F32Tile> {
    Some(F32Tile::Binary(arith_tile::<O>))
}

const fn arith_pointwise<O: BinaryArith>() -> Option<Pointwise> {
    Some(Pointwise {
        operands: operands_arith,
        block: arith_block::<O>,
        f32_tile: arith_f32_tile::<O>,
    })
}

fn arith_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    streaming_cost(a, o, 1.0, Engine::Vector)
}

macro_rules! arith_ops {
    ($($ty:ident $name:literal $doc:literal [$($k:ident = $v:expr),*]
        |$a:ident, $b:ident| $float:expr, |$ia:ident, $ib:ident| $int:expr;)*) => {
        $(
            struct $ty;
            impl BinaryArith for $ty {
                const NAME: &'static str = $name;
                const DOC: &'static str = $doc;
                $(const $k: bool = $v;)*
                #[inline(always)]
                fn float<F: MathExt>($a: F, $b: F) -> F {
                    $float
                }
                #[inline(always)]
                fn int($ia: i64, $ib: i64) -> i64 {
                    $int
                }
            }
        )*
        fn arith_defs() -> Vec<OpDef> {
            vec![$(OpDef {
                name: $ty::NAME,
                doc: $ty::DOC,
                group: OpGroup::Elementwise,
                inputs: AB,
                attrs: &[],
                outputs: OUT,
                infer: infer_arith::<$ty>,
                exec: Exec::Compute(arith_kernel::<$ty>),
                cost: arith_cost,
                pointwise: arith_pointwise::<$ty>(),
                rowwise: None,
            }),*]
        }
    };
}

fn nan_max<F: MathExt>(a: F, b: F) -> F {
    if a.is_nan() || b.is_nan() {
        F::nan()
    } else if a > b {
        a
    } else {
        b
    }
}

fn nan_min<F: MathExt>(a: F, b: F) -> F {
    if a.is_nan() || b.is_nan() {
        F::nan()
    } else if a < b {
        a
    } else {
        b
    }
}

arith_ops! {
    Add "add" "a + b with broadcasting" [] |a, b| a + b, |a, b| a.wrapping_add(b);
    Sub "sub" "a - b with broadcasting" [BOOL_OK = false] |a, b| a - b, |a, b| a.wrapping_sub(b);
    Mul "mul" "a * b with broadcasting" [] |a, b| a * b, |a, b| a.wrapping_mul(b);
    Div "div" "true division a / b (integers give floats)" [ALWAYS_FLOAT = true] |a, b| a / b, |a, b| a / b;
    Maximum "maximum" "elementwise max; NaN propagates" [] |a, b| nan_max(a, b), |a, b| a.max(b);
    Minimum "minimum" "elementwise min; NaN propagates" [] |a, b| nan_min(a, b), |a, b| a.min(b);
}

struct Pow;
impl BinaryArith for Pow {
    const NAME: &'static str = "pow";
    const DOC: &'static str = "a raised to the power b with broadcasting";
    const BOOL_OK: bool = false;
    fn float<F: MathExt>(a: F, b: F) -> F {
        a.powf(b)
    }
    fn int(a: i64, b: i64) -> i64 {
        a.wrapping_pow(b.clamp(0, u32::MAX as i64) as u32)
    }
    fn check_int(mut b: impl Iterator<Item = i64>) -> Result<(), String> {
        if b.any(|e| e < 0) {
            return Err(
                "integers to negative integer powers are not allowed; cast to a float dtype".into(),
            );
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Comparisons and logic: bool outputs.

/// A comparison computed in the promoted dtype.
trait Compare {
    const NAME: &'static str;
    const DOC: &'static str;
    fn cmp<T: PartialOrd>(a: T, b: T) -> bool;
}

fn infer_bool_binary(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let shape = broadcast_shapes(&a.inputs[0].shape, &a.inputs[1].shape).map_err(|e| e.0)?;
    Ok(vec![TensorMeta::new(shape, DType::Bool)])
}

fn compare_kernel<O: Compare>(a: &KernelArgs) -> KernelResult {
    let dtype = promoted(&a.inputs[0].meta(), &a.inputs[1].meta());
    let x = as_dtype(a.inputs[0], dtype);
    let y = as_dtype(a.inputs[1], dtype);
    let shape = &a.outputs[0].shape;
    Ok(smallvec![
        with_dtype!(dtype, T => Buffer::Bool(map2(&x, &y, shape, O::cmp::<T>))),
    ])
}

/// Comparisons convert both operands to their promoted dtype.
fn operands_compare(a: &MetaArgs, _: &TensorMeta) -> Vec<DType> {
    vec![promoted(&a.inputs[0], &a.inputs[1]); 2]
}

fn compare_block<O: Compare>(a: &PointwiseArgs) -> KResult1 {
    Ok(with_dtype!(a.inputs[0].dtype(), T => block2(a, O::cmp::<T>)))
}

macro_rules! compare_ops {
    ($($ty:ident $name:literal $doc:literal |$a:ident, $b:ident| $body:expr;)*) => {
        $(
            struct $ty;
            impl Compare for $ty {
                const NAME: &'static str = $name;
                const DOC: &'static str = $doc;
                #[inline(always)]
                fn cmp<T: PartialOrd>($a: T, $b: T) -> bool {
                    $body
                }
            }
        )*
        fn compare_defs() -> Vec<OpDef> {
            vec![$(OpDef {
                name: $ty::NAME,
                doc: $ty::DOC,
                group: OpGroup::Comparison,
                inputs: AB,
                attrs: &[],
                outputs: OUT,
                infer: infer_bool_binary,
                exec: Exec::Compute(compare_kernel::<$ty>),
                cost: arith_cost,
                pointwise: Some(Pointwise {
                    operands: operands_compare,
                    block: compare_block::<$ty>,
                    f32_tile: no_f32_tile,
                }),
                rowwise: None,
            }),*]
        }
    };
}

compare_ops! {
    Eq "eq" "a == b (bool)" |a, b| a == b;
    Ne "ne" "a != b (bool; true where either is NaN)" |a, b| a != b;
    Lt "lt" "a < b (bool)" |a, b| a < b;
    Le "le" "a <= b (bool)" |a, b| a <= b;
    Gt "gt" "a > b (bool)" |a, b| a > b;
    Ge "ge" "a >= b (bool)" |a, b| a >= b;
}

fn logical_kernel(a: &KernelArgs, f: fn(bool, bool) -> bool) -> KernelResult {
    let x = as_dtype(a.inputs[0], DType::Bool);
    let y = as_dtype(a.inputs[1], DType::Bool);
    Ok(smallvec![Buffer::Bool(map2(
        &x,
        &y,
        &a.outputs[0].shape,
        f
    ))])
}

fn and(p: bool, q: bool) -> bool {
    p && q
}

fn or(p: bool, q: bool) -> bool {
    p || q
}

fn xor(p: bool, q: bool) -> bool {
    p != q
}

fn not(v: bool) -> bool {
    !v
}

/// Logic converts its operands to bool.
fn operands_bool(a: &MetaArgs, _: &TensorMeta) -> Vec<DType> {
    vec![DType::Bool; a.inputs.len()]
}

fn logical_defs() -> Vec<OpDef> {
    let def = |name, doc, exec, block| OpDef {
        name,
        doc,
        group: OpGroup::Comparison,
        inputs: AB,
        attrs: &[],
        outputs: OUT,
        infer: infer_bool_binary,
        exec: Exec::Compute(exec),
        cost: arith_cost,
        pointwise: Some(Pointwise {
            operands: operands_bool,
            block,
            f32_tile: no_f32_tile,
        }),
        rowwise: None,
    };
    vec![
        def(
            "logical_and",
            "a and b, each element tested for != 0",
            |a| logical_kernel(a, and),
            |a| Ok(block2(a, and)),
        ),
        def(
            "logical_or",
            "a or b, each element tested for != 0",
            |a| logical_kernel(a, or),
            |a| Ok(block2(a, or)),
        ),
        def(
            "logical_xor",
            "a xor b, each element tested for != 0",
            |a| logical_kernel(a, xor),
            |a| Ok(block2(a, xor)),
        ),
        OpDef {
            name: "logical_not",
            doc: "not x, each element tested for != 0",
            inputs: X,
            infer: |a| {
                Ok(vec![TensorMeta::new(
                    a.inputs[0].shape.clone(),
                    DType::Bool,
                )])
            },
            ..def(
                "",
                "",
                |a| {
                    let x = as_dtype(a.inputs[0], DType::Bool);
                    Ok(smallvec![Buffer::Bool(map1(&x, not))])
                },
                |a| Ok(block1(a, not)),
            )
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// where, clamp, cast.

static WHERE_INPUTS: &[InputSpec] = &[
    InputSpec::tensor("condition"),
    InputSpec::tensor("a"),
    InputSpec::tensor("b"),
];

fn infer_where(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let (c, x, y) = (&a.inputs[0], &a.inputs[1], &a.inputs[2]);
    if c.dtype != DType::Bool {
        return Err(format!(
            "condition must be bool, got {}; compare first (e.g. gt) or cast to bool",
            c.dtype
        ));
    }
    let shape = broadcast_shapes(&c.shape, &x.shape)
        .and_then(|s| broadcast_shapes(&s, &y.shape))
        .map_err(|e| e.0)?;
    Ok(vec![TensorMeta::new(shape, promoted(x, y))])
}

#[inline(always)]
fn select<T>(c: bool, p: T, q: T) -> T {
    if c {
        p
    } else {
        q
    }
}

fn where_kernel(a: &KernelArgs) -> KernelResult {
    let out = &a.outputs[0];
    let x = as_dtype(a.inputs[1], out.dtype);
    let y = as_dtype(a.inputs[2], out.dtype);
    Ok(smallvec![
        with_dtype!(out.dtype, T => T::into_buffer(map3(a.inputs[0], &x, &y, &out.shape, select::<T>))),
    ])
}

/// `where` takes its (bool) condition as it is and converts a and b to the output dtype.
fn operands_where(_: &MetaArgs, out: &TensorMeta) -> Vec<DType> {
    vec![DType::Bool, out.dtype, out.dtype]
}

fn where_block(a: &PointwiseArgs) -> KResult1 {
    Ok(with_dtype!(a.output, T => block3(a, select::<T>)))
}

static CLAMP_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("min", AttrKind::Float, AttrDefault::Optional),
    AttrSpec::new("max", AttrKind::Float, AttrDefault::Optional),
];

fn infer_clamp(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let (lo, hi) = (a.attrs.opt_float("min"), a.attrs.opt_float("max"));
    if lo.is_none() && hi.is_none() {
        return Err("give at least one of the attributes min and max".into());
    }
    infer_unary_numeric(a)
}

/// The bounds of `clamp`, infinite where not given.
fn clamp_bounds(attrs: &ResolvedAttrs) -> (f64, f64) {
    (
        attrs.opt_float("min").unwrap_or(f64::NEG_INFINITY),
        attrs.opt_float("max").unwrap_or(f64::INFINITY),
    )
}

/// `clamp` of a float in its compute type.
fn clamp_float<F: MathExt>(lo: f64, hi: f64) -> impl Fn(F) -> F {
    let (l, h) = (F::c(lo), F::c(hi));
    // As torch.clamp: min first, then max, so min > max gives max everywhere.
    move |v| if v.is_nan() { v } else { v.max(l).min(h) }
}

/// `clamp` of an integer.
fn clamp_int<T: Element>(lo: f64, hi: f64) -> impl Fn(T) -> T {
    move |v| T::from_f64(v.to_f64().max(lo).min(hi))
}

fn clamp_kernel(a: &KernelArgs) -> KernelResult {
    let x = a.inputs[0];
    let (lo, hi) = clamp_bounds(a.attrs);
    let dtype = x.dtype();
    if dtype.is_float() {
        return Ok(smallvec![
            with_float!(dtype, T => T::into_buffer(map1(x, up_down::<T>(clamp_float(lo, hi))))),
        ]);
    }
    Ok(smallvec![
        with_dtype!(dtype, T => T::into_buffer(map1(x, clamp_int::<T>(lo, hi)))),
    ])
}

fn clamp_block(a: &PointwiseArgs) -> KResult1 {
    let (lo, hi) = clamp_bounds(a.attrs);
    if a.output.is_float() {
        return Ok(with_float!(a.output, T => block1(a, up_down::<T>(clamp_float(lo, hi)))));
    }
    Ok(with_dtype!(a.output, T => block1(a, clamp_int::<T>(lo, hi))))
}

static CAST_ATTRS: &[AttrSpec] = &[AttrSpec::new(
    "dtype",
    AttrKind::DType,
    AttrDefault::Required,
)];

fn cast_kernel(a: &KernelArgs) -> KernelResult {
    Ok(smallvec![cast_buffer(a.inputs[0], a.outputs[0].dtype)])
}

fn cast_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    streaming_cost(a, o, 1.0, Engine::Vector)
}

/// The elementwise ops.
// A table of OpDefs, one per op, not logic.
pub fn defs() -> Vec<OpDef> {
    let mut defs = unary_float_defs();
    defs.push(OpDef {
        name: "gelu",
        doc: "GELU: x * Phi(x), exact (erf) or with approximate='tanh'",
        group: OpGroup::Elementwise,
        inputs: X,
        attrs: GELU_ATTRS,
        outputs: OUT,
        infer: infer_unary_float,
        exec: Exec::Compute(gelu_kernel),
        cost: |a, o| streaming_cost(a, o, 1.0, Engine::Scalar),
        pointwise: Some(Pointwise {
            operands: operands_as_output,
            block: gelu_block,
            f32_tile: gelu_f32_tile,
        }),
        rowwise: None,
    });
    defs.push(OpDef {
        name: "gelu_backward",
        doc: "gelu's backward: grad * d/dx gelu(x), exact or with approximate='tanh' (broadcast)",
        group: OpGroup::Elementwise,
        inputs: GELU_BACKWARD_INPUTS,
        attrs: GELU_ATTRS,
        outputs: OUT,
        infer: infer_gelu_backward,
        exec: Exec::Compute(gelu_backward_kernel),
        cost: |a, o| streaming_cost(a, o, 1.0, Engine::Scalar),
        pointwise: Some(Pointwise {
            operands: operands_arith,
            block: gelu_backward_block,
            f32_tile: gelu_backward_f32_tile,
        }),
        rowwise: None,
    });
    defs.extend(unary_numeric_defs());
    defs.extend(arith_defs());
    defs.push(OpDef {
        name: Pow::NAME,
        doc: Pow::DOC,
        group: OpGroup::Elementwise,
        inputs: AB,
        attrs: &[],
        outputs: OUT,
        infer: infer_arith::<Pow>,
        exec: Exec::Compute(arith_kernel::<Pow>),
        cost: |a, o| streaming_cost(a, o, 1.0, Engine::Scalar),
        pointwise: arith_pointwise::<Pow>(),
        rowwise: None,
    });
    defs.extend(compare_defs());
    defs.extend(logical_defs());
    defs.push(OpDef {
        name: "where",
        doc: "elements of a where condition is true, else of b (broadcast)",
        group: OpGroup::Comparison,
        inputs: WHERE_INPUTS,
        attrs: &[],
        outputs: OUT,
        infer: infer_where,
        exec: Exec::Compute(where_kernel),
        cost: arith_cost,
        pointwise: Some(Pointwise {
            operands: operands_where,
            block: where_block,
            f32_tile: no_f32_tile,
        }),
        rowwise: None,
    });
    defs.push(OpDef {
        name: "clamp",
        doc: "limits each element to [min, max] (either bound may be omitted)",
        group: OpGroup::Elementwise,
        inputs: X,
        attrs: CLAMP_ATTRS,
        outputs: OUT,
        infer: infer_clamp,
        exec: Exec::Compute(clamp_kernel),
        cost: arith_cost,
        pointwise: Some(Pointwise {
            operands: operands_as_given,
            block: clamp_block,
            f32_tile: no_f32_tile,
        }),
        rowwise: None,
    });
    defs.push(OpDef {
        name: "cast",
        doc: "converts to another dtype (floats to ints truncate; bf16/f16 round to nearest)",
        group: OpGroup::Cast,
        inputs: X,
        attrs: CAST_ATTRS,
        outputs: OUT,
        infer: |a| {
            let x = &a.inputs[0];
            let to = a.attrs.opt_dtype("dtype").expect("required attribute");
            Ok(vec![TensorMeta::new(x.shape.clone(), to)])
        },
        exec: Exec::Compute(cast_kernel),
        cost: cast_cost,
        pointwise: Some(Pointwise {
            operands: operands_as_given,
            block: |a| Ok(cast_block(a.inputs[0], a.output)),
            f32_tile: no_f32_tile,
        }),
        rowwise: None,
    });
    defs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::topology::Topology;
    use crate::ops::attrs::Attrs;
    use crate::ops::registry::Registry;
    use crate::ops::vmath::tests::ulps;
    use crate::runtime::{Runtime, RuntimeOptions};
    use crate::tensor::{Elements, Tensor};

    /// f32 gelu(tanh) against its f64 value on [-12, 12]: within 4 ulps per unit of |2u|, the
    /// exponent's size (e^(2u) turns the argument's own rounding into a relative error |2u|
    /// times as large), down to the smallest normal results. At x = -9 that is about 3e-5
    /// relative; 0.5 x (1 + tanh(u)) in f32 loses every digit there to cancellation.
    #[test]
    fn gelu_tanh_error_stays_within_its_conditioning() {
        for i in 0..200_001 {
            let x = -12.0 + 24.0 * i as f32 / 200_000.0;
            let want = gelu_tanh(x as f64);
            if want.abs() < f32::MIN_POSITIVE as f64 {
                continue;
            }
            let two_u = 1.595_769_121_605_730_8 * (x as f64 + 0.044715 * (x as f64).powi(3));
            let allowed = 4.0 * two_u.abs().max(1.0);
            let got = gelu_tanh(x);
            let error = ulps(got, want);
            assert!(
                error <= allowed,
                "gelu({x}) = {got:e}, want {want:e}: {error:.2} ulps, allowed {allowed:.0}"
            );
        }
    }

    /// Values with negatives, zeros, fractions and integers, as `dtype`.
    fn values(rt: &Runtime, dtype: DType, salt: usize) -> Tensor {
        let v: Vec<f64> = (0..16)
            .map(|i| ((i * 7 + salt * 5) % 16) as f64 * 0.75 - 4.0)
            .collect();
        let t = rt.tensor(Buffer::F64(v), &[16]).unwrap();
        rt.call1("cast", &[&t], &Attrs::new().with("dtype", dtype))
            .unwrap()
    }

    /// Equal elements, any NaN matching any NaN.
    fn same(a: &Buffer, b: &Buffer) -> bool {
        let (ta, tb) = (a.dtype(), b.dtype());
        if ta != tb || a.len() != b.len() {
            return false;
        }
        if !ta.is_float() {
            return a.to_le_bytes() == b.to_le_bytes();
        }
        let wide = |x: &Buffer| with_dtype!(x.dtype(), T => T::slice(x).unwrap().iter().map(|v| v.to_f64()).collect::<Vec<f64>>());
        wide(a)
            .iter()
            .zip(wide(b))
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    }

    #[test]
    fn every_block_form_matches_its_eager_kernel() {
        let rt = Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit: 1 << 30,
        });
        let mut checked = 0;
        for def in Registry::global().ops() {
            let Some(pointwise) = def.pointwise else {
                assert!(
                    !matches!(def.group, OpGroup::Elementwise | OpGroup::Comparison),
                    "{} is elementwise but has no block form",
                    def.name
                );
                continue;
            };
            let attr_sets: Vec<Attrs> = match def.name {
                "clamp" => vec![Attrs::new().with("min", -0.5).with("max", 1.5)],
                "gelu" => vec![Attrs::new(), Attrs::new().with("approximate", "tanh")],
                "cast" => DType::ALL
                    .iter()
                    .map(|&d| Attrs::new().with("dtype", d))
                    .collect(),
                _ => vec![Attrs::new()],
            };
            for attrs in &attr_sets {
                for &dtype in &DType::ALL {
                    for mixed in [None, Some(DType::F32), Some(DType::I32)] {
                        let inputs: Vec<Tensor> = (0..def.inputs.len())
                            .map(|i| {
                                let d = match (def.name, i) {
                                    ("where", 0) => DType::Bool,
                                    (_, 1) => mixed.unwrap_or(dtype),
                                    _ => dtype,
                                };
                                values(&rt, d, i)
                            })
                            .collect();
                        let refs: Vec<&Tensor> = inputs.iter().collect();
                        let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
                        let Ok(outs) = Runtime::infer(def, &metas, attrs) else {
                            continue;
                        };
                        let resolved = ResolvedAttrs::resolve(def.attrs, attrs).unwrap();
                        let operands = (pointwise.operands)(
                            &MetaArgs {
                                inputs: &metas,
                                attrs: &resolved,
                            },
                            &outs[0],
                        );
                        let converted: Vec<Buffer> = inputs
                            .iter()
                            .zip(&operands)
                            .map(|(t, &d)| cast_block(t.to_buffer().elements(), d))
                            .collect();
                        let blocks: Vec<Elements> =
                            converted.iter().map(Buffer::elements).collect();
                        let block = (pointwise.block)(&PointwiseArgs {
                            inputs: &blocks,
                            attrs: &resolved,
                            output: outs[0].dtype,
                        });
                        match (rt.call(def.name, &refs, attrs), block) {
                            (Ok(eager), Ok(block)) => assert!(
                                same(&eager[0].to_buffer(), &block),
                                "{} {metas:?} {attrs:?}",
                                def.name
                            ),
                            (Err(e), Err(b)) => assert!(e.to_string().ends_with(&b), "{e} vs {b}"),
                            (e, b) => {
                                panic!("{}: eager {:?} but block {:?}", def.name, e.err(), b.err())
                            }
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 500, "{checked} cases");
    }

    /// One-element operands take a shortcut through the maps (no chunks, no vector
    /// dispatch): every elementwise op, on every dtype, gives element k of its result on whole
    /// tensors when its operands are element k alone, as 0-d views and as [1] slices, at
    /// their offset k in the storage.
    #[test]
    fn one_element_operands_give_the_same_bits_as_whole_tensors() {
        let rt = Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit: 1 << 30,
        });
        let element = |t: &Tensor, k: i64, zero_d: bool| {
            let one = rt
                .call1(
                    "narrow",
                    &[t],
                    &Attrs::new()
                        .with("dim", 0)
                        .with("start", k)
                        .with("length", 1),
                )
                .unwrap();
            if zero_d {
                rt.call1("squeeze", &[&one], &Attrs::new()).unwrap()
            } else {
                one
            }
        };
        let mut checked = 0;
        for def in Registry::global().ops() {
            if !matches!(def.group, OpGroup::Elementwise | OpGroup::Comparison) {
                continue;
            }
            let attrs = match def.name {
                "clamp" => Attrs::new().with("min", -0.5).with("max", 1.5),
                "cast" => Attrs::new().with("dtype", DType::F32),
                _ => Attrs::new(),
            };
            for &dtype in &DType::ALL {
                let inputs: Vec<Tensor> = (0..def.inputs.len())
                    .map(|i| {
                        values(
                            &rt,
                            if (def.name, i) == ("where", 0) {
                                DType::Bool
                            } else {
                                dtype
                            },
                            i,
                        )
                    })
                    .collect();
                let refs: Vec<&Tensor> = inputs.iter().collect();
                let Ok(whole) = rt.call(def.name, &refs, &attrs) else {
                    continue;
                };
                let whole = whole[0].to_buffer();
                for k in [0, 5, 15] {
                    for zero_d in [true, false] {
                        let ones: Vec<Tensor> =
                            inputs.iter().map(|t| element(t, k, zero_d)).collect();
                        let refs: Vec<&Tensor> = ones.iter().collect();
                        let got = rt.call1(def.name, &refs, &attrs).unwrap();
                        assert_eq!(got.layout().offset, 0);
                        let want = with_dtype!(whole.dtype(), T => T::into_buffer(vec![T::slice(&whole).unwrap()[k as usize]]));
                        assert!(
                            same(&got.to_buffer(), &want),
                            "{} on {dtype} element {k} (0-d: {zero_d})",
                            def.name
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 300, "{checked} cases");
    }

    fn runtime() -> Runtime {
        Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit: 1 << 30,
        })
    }

    fn randn(rt: &Runtime, shape: &[i64], seed: i64, scale: f64) -> Tensor {
        let x = rt
            .call1(
                "randn",
                &[],
                &Attrs::new()
                    .with("shape", shape.to_vec())
                    .with("seed", seed),
            )
            .unwrap();
        let s = rt
            .call1(
                "full",
                &[],
                &Attrs::new()
                    .with("shape", Vec::<i64>::new())
                    .with("value", scale),
            )
            .unwrap();
        rt.call1("mul", &[&x, &s], &Attrs::new()).unwrap()
    }

    /// The element at `index` of a 2-D view, read through its layout (no kernel involved).
    fn at(t: &Tensor, index: [usize; 2]) -> f32 {
        let l = t.layout();
        let data = t.data::<f32>();
        // A broadcast dim of size 1 reads its one element.
        let i = |d: usize| {
            if l.shape[d] == 1 {
                0
            } else {
                index[d] * l.strides[d]
            }
        };
        data[l.offset + i(0) + i(1)]
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter()
            .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
            .collect()
    }

    #[test]
    fn vectorized_kernels_match_the_element_functions_on_tails_and_views() {
        let rt = runtime();
        type Case = (&'static str, Attrs, fn(f32) -> f32);
        let unary: [Case; 4] = [
            ("exp", Attrs::new(), super::super::vmath::exp_f32),
            ("tanh", Attrs::new(), super::super::vmath::tanh_f32),
            ("sigmoid", Attrs::new(), |x| {
                1.0 / (1.0 + super::super::vmath::exp_f32(-x))
            }),
            (
                "gelu",
                Attrs::new().with("approximate", "tanh"),
                gelu_tanh::<f32>,
            ),
        ];
        // Lengths around the vector widths and the parallel chunk size, as [rows, cols].
        let shapes: [[usize; 2]; 7] = [
            [1, 1],
            [1, 15],
            [3, 17],
            [5, 33],
            [31, 129],
            [97, 401],
            [130, 257],
        ];
        for (seed, &[r, c]) in shapes.iter().enumerate() {
            let x = randn(&rt, &[r as i64, c as i64], seed as i64, 6.0);
            let views = [
                x.clone(),
                rt.call1("transpose", &[&x], &Attrs::new()).unwrap(),
                rt.call1(
                    "slice",
                    &[&x],
                    &Attrs::new().with("dim", 1).with("start", 1).with("step", 3),
                )
                .unwrap(),
            ];
            for v in &views {
                let shape = [v.shape()[0], v.shape()[1]];
                let positions: Vec<[usize; 2]> = (0..shape[0])
                    .flat_map(|i| (0..shape[1]).map(move |j| [i, j]))
                    .collect();
                for (op, attrs, f) in &unary {
                    let got = rt.call1(op, &[v], attrs).unwrap().to_vec::<f32>();
                    let want: Vec<f32> = positions.iter().map(|&p| f(at(v, p))).collect();
                    assert_eq!(bits(&got), bits(&want), "{op} of {shape:?}");
                }
                let cast = rt
                    .call1("cast", &[v], &Attrs::new().with("dtype", DType::Bf16))
                    .unwrap()
                    .to_vec::<half::bf16>();
                let want: Vec<half::bf16> = positions
                    .iter()
                    .map(|&p| half::bf16::from_f32(at(v, p)))
                    .collect();
                assert_eq!(cast, want, "cast of {shape:?}");
                // Broadcast partners: a row, a column and a scalar.
                let row = randn(&rt, &[shape[1] as i64], 100, 1.0);
                let col = randn(&rt, &[shape[0] as i64, 1], 101, 1.0);
                let one = randn(&rt, &[], 102, 1.0);
                let row2 = rt
                    .call1(
                        "reshape",
                        &[&row],
                        &Attrs::new().with("shape", vec![1i64, -1]),
                    )
                    .unwrap();
                let one2 = rt
                    .call1(
                        "reshape",
                        &[&one],
                        &Attrs::new().with("shape", vec![1i64, 1]),
                    )
                    .unwrap();
                for (partner, as_2d) in [(&row, &row2), (&col, &col), (&one, &one2)] {
                    for (a, b, a2, b2) in [(v, partner, v, as_2d), (partner, v, as_2d, v)] {
                        let got = rt.call1("sub", &[a, b], &Attrs::new()).unwrap();
                        let want: Vec<f32> =
                            positions.iter().map(|&p| at(a2, p) - at(b2, p)).collect();
                        assert_eq!(bits(&got.to_vec::<f32>()), bits(&want), "sub {shape:?}");
                    }
                }
            }
        }
    }
}
