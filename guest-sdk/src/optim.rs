//! Optimizers with torch's update rules and names ([`SGD`], [`Adam`], [`AdamW`]),
//! [`clip_grad_norm_`], and the learning-rate schedules of Hugging Face transformers
//! ([`LrScheduler`] with [`cosine_schedule_with_warmup`] or [`linear_schedule_with_warmup`]).
//!
//! An optimizer borrows its parameters (leaves made with [`Tensor::requires_grad`]) and
//! updates them in place with [`Tensor::set_data`], so the caller's tensors see each step.
//! Its state (momentum buffers, Adam's moments) are tensors on the parameters' core, made
//! when the optimizer is. Updates run under [`no_grad`] as torch's single-tensor loops do: each
//! of torch's ops computes in f32 for bf16 and f16 parameters and rounds once to the
//! parameter's dtype.
//!
//! Each parameter's step count (torch's per-parameter `state["step"]`: a parameter without a
//! gradient in a step is skipped, its count too) and the learning rate are f64 0-d tensors,
//! and the numbers derived from them (bias corrections, step size) are computed by tensor
//! ops: a compiled training step reads them from the optimizer's state on every call instead
//! of baking one step's values into its graph (torch's `capturable`), and in f64 they equal
//! the Python floats torch uses.
//!
//! # Example
//!
//! ```ignore
//! let w = randn(&[4, 2])?.requires_grad()?;
//! let mut opt = AdamW::new(vec![&w], AdamWConfig { lr: 1e-2, ..Default::default() })?;
//! for _ in 0..10 {
//!     let loss = w.square()?.sum()?;
//!     opt.zero_grad()?;
//!     loss.backward()?;
//!     opt.step()?;
//! }
//! ```

use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::memory::MemoryRole;
use crate::ops::{full_with, stack, zeros_with, FullOptions, ZerosOptions};
use crate::tensor::Tensor;

/// What every optimizer does, for code (schedulers, training loops) that takes any of them.
pub trait Optimizer {
    /// Applies one update to every parameter that has a gradient.
    fn step(&mut self) -> Result<()>;
    /// Clears every parameter's gradient (sets it to `None`, torch's default).
    fn zero_grad(&mut self) -> Result<()>;
    /// The current learning rate.
    fn lr(&self) -> f64;
    /// Sets the learning rate (what a scheduler does).
    fn set_lr(&mut self, lr: f64) -> Result<()>;
    /// The optimizer's state, named as torch's `Optimizer.state_dict()` flattens it for one
    /// parameter group: for the i-th parameter `state.{i}.step` and its buffers
    /// (`state.{i}.exp_avg` and `state.{i}.exp_avg_sq` for Adam, `state.{i}.momentum_buffer`
    /// for SGD with momentum), then `param_groups.0.lr`. The tensors are the state's own
    /// handles: save them as they are (under FSDP they are this rank's shards' state).
    fn named_state(&self) -> Vec<(String, &Tensor)>;
    /// Restores the state [`named_state`](Optimizer::named_state) gave, as torch's
    /// `load_state_dict`: every name must be there with the same shape and dtype, and a name
    /// the optimizer does not have is an error too; nothing changes unless all of it fits.
    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()>;
    /// Bytes of the optimizer's state on this rank: moments or momentum buffers, step counts
    /// and the learning rate (under FSDP, the state of this rank's shards).
    fn state_bytes(&self) -> i64 {
        self.named_state().iter().map(|(_, t)| t.nbytes()).sum()
    }
}

/// Counts the optimizer's state as such in its core's memory (its updates keep the role).
#[track_caller]
fn mark_state(opt: &dyn Optimizer) -> Result<()> {
    opt.named_state()
        .iter()
        .try_for_each(|(_, t)| t.set_memory_role(MemoryRole::OptimizerState))
}

/// Checks `state` against the optimizer's `named` state (each name once, same shapes and
/// dtypes, nothing missing or extra), then copies it in.
#[track_caller]
fn load_named(named: Vec<(String, &Tensor)>, state: &[(String, Tensor)]) -> Result<()> {
    let invalid = |message: String| Err(Error::new(ErrorKind::Invalid, message));
    for (name, _) in state {
        if !named.iter().any(|(n, _)| n == name) {
            return invalid(format!(
                "load_state_dict: unexpected key {name:?}: this optimizer has {} state \
                 tensors, for {} parameters; was the state saved from another model?",
                named.len(),
                named.iter().filter(|(n, _)| n.ends_with(".step")).count()
            ));
        }
    }
    let mut pairs = Vec::with_capacity(named.len());
    for (name, mine) in &named {
        let Some((_, saved)) = state.iter().find(|(n, _)| n == name) else {
            return invalid(format!("load_state_dict: missing key {name:?}"));
        };
        if saved.shape() != mine.shape() || saved.dtype() != mine.dtype() {
            return invalid(format!(
                "load_state_dict: {name:?} is {}{:?} in the saved state and {}{:?} here",
                saved.dtype().name(),
                saved.shape(),
                mine.dtype().name(),
                mine.shape()
            ));
        }
        pairs.push((*mine, saved));
    }
    no_grad(|| {
        pairs
            .iter()
            .try_for_each(|(mine, saved)| mine.set_data(saved))
    })
}

/// A 0-d tensor of `value` in `dtype` (0-d operands keep a tensor's dtype).
#[track_caller]
fn constant(value: f64, dtype: DType) -> Result<Tensor> {
    full_with(&[], value, FullOptions::new().dtype(dtype))
}

/// A 0-d tensor of `value` in `like`'s dtype.
#[track_caller]
fn scalar(value: f64, like: &Tensor) -> Result<Tensor> {
    constant(value, like.dtype())
}

/// The dtype torch computes an op on `dtype` in: f32 for the half types.
fn opmath_dtype(dtype: DType) -> DType {
    match dtype {
        DType::Bf16 | DType::F16 => DType::F32,
        other => other,
    }
}

/// `t` in the dtype its ops compute in.
#[track_caller]
fn widen(t: &Tensor) -> Result<Tensor> {
    let wide = opmath_dtype(t.dtype());
    if wide == t.dtype() {
        t.try_clone()
    } else {
        t.cast(wide)
    }
}

/// `t` rounded to `dtype` (itself when it already is).
#[track_caller]
fn narrow(t: Tensor, dtype: DType) -> Result<Tensor> {
    if t.dtype() == dtype {
        Ok(t)
    } else {
        t.cast(dtype)
    }
}

/// `t * value` as one of torch's ops: computed in the opmath dtype, rounded to `t`'s.
#[track_caller]
fn scale(t: &Tensor, value: f64) -> Result<Tensor> {
    let w = widen(t)?;
    narrow(w.mul(&scalar(value, &w)?)?, t.dtype())
}

/// `a + alpha * b` as one of torch's ops (`add(b, alpha=...)`).
#[track_caller]
fn add_scaled(a: &Tensor, b: &Tensor, alpha: f64) -> Result<Tensor> {
    let (wa, wb) = (widen(a)?, widen(b)?);
    narrow(wa.add(&wb.mul(&scalar(alpha, &wb)?)?)?, a.dtype())
}

/// Checks that the parameters are leaves on one core.
#[track_caller]
fn check_params(params: &[&Tensor], who: &str) -> Result<()> {
    let Some(first) = params.first() else {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!("{who} got an empty parameter list"),
        ));
    };
    for (i, p) in params.iter().enumerate() {
        if p.device() != first.device() {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "{who}: parameters must be on one core, but parameter 0 is on neuron:{} and \
                     parameter {i} on neuron:{}; make one optimizer per core",
                    first.device(),
                    p.device()
                ),
            ));
        }
        if !p.is_grad_required() {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!("{who}: parameter {i} does not require a gradient; mark it with requires_grad()"),
            ));
        }
    }
    Ok(())
}

#[track_caller]
fn zero_all(params: &[&Tensor]) -> Result<()> {
    params.iter().try_for_each(|p| p.zero_grad())
}

/// Zeros shaped as `p`, in its dtype: a state tensor.
#[track_caller]
fn zeros_like(p: &Tensor) -> Result<Tensor> {
    zeros_with(&p.shape(), ZerosOptions::new().dtype(p.dtype()))
}

/// The learning rate of an optimizer and its parameters' step counts, as f64 0-d tensors.
struct Schedule {
    /// The learning rate (mirrored in `lr_value` for [`Optimizer::lr`]).
    lr: Tensor,
    lr_value: f64,
    /// Steps each parameter took, counted by tensor ops.
    counts: Vec<Tensor>,
    /// The 0-d f64 `1` each step adds to a count, made once rather than by a `full` op per
    /// parameter per step (a host dispatch and an event each, on every rank).
    one: Tensor,
    /// Calls of `step`, on the guest's side, for [`Adam::steps`].
    steps: u64,
}

impl Schedule {
    /// The named state (see [`Optimizer::named_state`]): each parameter's step count and the
    /// `buffers` of parameter i, then the learning rate.
    fn named<'t>(
        &'t self,
        buffers: impl Fn(usize) -> Vec<(&'static str, &'t Tensor)>,
    ) -> Vec<(String, &'t Tensor)> {
        let mut named = Vec::new();
        for (i, count) in self.counts.iter().enumerate() {
            named.push((format!("state.{i}.step"), count));
            for (buffer, t) in buffers(i) {
                named.push((format!("state.{i}.{buffer}"), t));
            }
        }
        named.push(("param_groups.0.lr".to_string(), &self.lr));
        named
    }

    /// Reads back what the guest mirrors of loaded state: the learning rate and the step
    /// count (the most steps any parameter took).
    #[track_caller]
    fn resync(&mut self) -> Result<()> {
        self.lr_value = self.lr.item::<f64>()?;
        let mut steps = 0.0f64;
        for count in &self.counts {
            steps = steps.max(count.item::<f64>()?);
        }
        self.steps = steps as u64;
        Ok(())
    }

    #[track_caller]
    fn new(lr: f64, params: usize) -> Result<Schedule> {
        Ok(Schedule {
            lr: constant(lr, DType::F64)?,
            lr_value: lr,
            counts: (0..params)
                .map(|_| constant(0.0, DType::F64))
                .collect::<Result<_>>()?,
            one: constant(1.0, DType::F64)?,
            steps: 0,
        })
    }

    #[track_caller]
    fn set_lr(&mut self, lr: f64) -> Result<()> {
        self.lr.set_data(&constant(lr, DType::F64)?)?;
        self.lr_value = lr;
        Ok(())
    }

    /// Counts one more step for parameter `i` and returns its new count (a 0-d f64 tensor).
    #[track_caller]
    fn advance(&mut self, i: usize) -> Result<Tensor> {
        let next = self.counts[i].add(&self.one)?;
        self.counts[i].set_data(&next)?;
        Ok(next)
    }
}

/// Settings of [`SGD`], torch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SGDConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0: none).
    pub momentum: f64,
    /// Dampening of the momentum.
    pub dampening: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
}

impl Default for SGDConfig {
    fn default() -> SGDConfig {
        SGDConfig {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }
}

/// Stochastic gradient descent, as `torch.optim.SGD`.
#[allow(clippy::upper_case_acronyms)]
pub struct SGD<'a> {
    params: Vec<&'a Tensor>,
    config: SGDConfig,
    schedule: Schedule,
    /// Momentum buffers, when there is momentum.
    momentum: Vec<Tensor>,
}

impl<'a> SGD<'a> {
    /// An optimizer over `params` (leaves on one core).
    #[track_caller]
    pub fn new(params: Vec<&'a Tensor>, config: SGDConfig) -> Result<SGD<'a>> {
        check_params(&params, "SGD")?;
        if config.nesterov && (config.momentum <= 0.0 || config.dampening != 0.0) {
            return Err(Error::new(
                ErrorKind::Invalid,
                "SGD: nesterov needs a momentum > 0 and zero dampening".to_string(),
            ));
        }
        let momentum = if config.momentum != 0.0 {
            no_grad(|| params.iter().map(|p| zeros_like(p)).collect::<Result<_>>())?
        } else {
            Vec::new()
        };
        let sgd = SGD {
            schedule: Schedule::new(config.lr, params.len())?,
            params,
            config,
            momentum,
        };
        mark_state(&sgd)?;
        Ok(sgd)
    }
}

impl Optimizer for SGD<'_> {
    #[track_caller]
    fn step(&mut self) -> Result<()> {
        let c = self.config;
        self.schedule.steps += 1;
        no_grad(|| {
            let neg_lr = self.schedule.lr.neg()?;
            for (i, p) in self.params.iter().enumerate() {
                let Some(mut d) = p.grad()? else { continue };
                let step = self.schedule.advance(i)?;
                if c.weight_decay != 0.0 {
                    d = add_scaled(&d, p, c.weight_decay)?;
                }
                if c.momentum != 0.0 {
                    let buf = &self.momentum[i];
                    // torch: buf.mul_(momentum).add_(d, alpha=1 - dampening); on the
                    // parameter's first step buf = d, which a zero buffer gives only without
                    // dampening.
                    let mut b = add_scaled(&scale(buf, c.momentum)?, &d, 1.0 - c.dampening)?;
                    if c.dampening != 0.0 {
                        let first = step.eq(&constant(1.0, DType::F64)?)?;
                        b = first.where_(&d, &b)?;
                    }
                    buf.set_data(&b)?;
                    d = if c.nesterov {
                        add_scaled(&d, &b, c.momentum)?
                    } else {
                        b
                    };
                }
                // torch: param.add_(d, alpha=-lr)
                let (wp, wd) = (widen(p)?, widen(&d)?);
                let update = wd.mul(&neg_lr.cast(wd.dtype())?)?;
                p.set_data(&narrow(wp.add(&update)?, p.dtype())?)?;
            }
            Ok(())
        })
    }

    #[track_caller]
    fn zero_grad(&mut self) -> Result<()> {
        zero_all(&self.params)
    }

    fn lr(&self) -> f64 {
        self.schedule.lr_value
    }

    #[track_caller]
    fn set_lr(&mut self, lr: f64) -> Result<()> {
        self.schedule.set_lr(lr)
    }

    fn named_state(&self) -> Vec<(String, &Tensor)> {
        self.schedule.named(|i| {
            self.momentum
                .get(i)
                .map(|b| ("momentum_buffer", b))
                .into_iter()
                .collect()
        })
    }

    #[track_caller]
    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        load_named(self.named_state(), state)?;
        self.schedule.resync()
    }
}

/// Settings of [`Adam`] and [`AdamW`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moments.
    pub betas: (f64, f64),
    /// Added to the denominator, after the square root (as torch).
    pub eps: f64,
    /// Adam: L2 penalty added to the gradient. AdamW: decoupled weight decay.
    pub weight_decay: f64,
}

impl Default for AdamConfig {
    /// torch's `Adam` defaults (weight decay 0).
    fn default() -> AdamConfig {
        AdamConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// The settings of [`AdamW`]: [`AdamConfig`] with torch's `AdamW` default weight decay.
pub type AdamWConfig = AdamConfig;

/// Adam's update, shared by [`Adam`] (L2 in the gradient) and [`AdamW`] (decoupled decay).
struct AdamState<'a> {
    params: Vec<&'a Tensor>,
    config: AdamConfig,
    decoupled: bool,
    schedule: Schedule,
    /// First and second moments, per parameter.
    moments: Vec<(Tensor, Tensor)>,
}

impl<'a> AdamState<'a> {
    #[track_caller]
    fn new(
        params: Vec<&'a Tensor>,
        config: AdamConfig,
        decoupled: bool,
        who: &str,
    ) -> Result<Self> {
        check_params(&params, who)?;
        let moments = no_grad(|| {
            params
                .iter()
                .map(|p| Ok((zeros_like(p)?, zeros_like(p)?)))
                .collect::<Result<_>>()
        })?;
        Ok(AdamState {
            schedule: Schedule::new(config.lr, params.len())?,
            params,
            config,
            decoupled,
            moments,
        })
    }

    /// One update per parameter by the host's fused op (`adam_step` or `adamw_step`, as
    /// torch's `fused=True`), which rounds where torch's single-tensor loop rounds.
    #[track_caller]
    fn step(&mut self) -> Result<()> {
        let c = self.config;
        let (b1, b2) = c.betas;
        self.schedule.steps += 1;
        no_grad(|| {
            for (i, (p, (m, v))) in self.params.iter().zip(&self.moments).enumerate() {
                let Some(g) = p.grad()? else { continue };
                let step = self.schedule.advance(i)?;
                let lr = &self.schedule.lr;
                let [param, m_new, v_new] = if self.decoupled {
                    p.adamw_step(&g, m, v, lr, &step, b1, b2, c.eps, c.weight_decay)?
                } else {
                    p.adam_step(&g, m, v, lr, &step, b1, b2, c.eps, c.weight_decay)?
                };
                p.set_data(&param)?;
                m.set_data(&m_new)?;
                v.set_data(&v_new)?;
            }
            Ok(())
        })
    }
}

macro_rules! adam_optimizer {
    ($name:ident, $decoupled:expr, $torch:literal) => {
        #[doc = concat!("As `torch.optim.", $torch, "`: bias-corrected moments, `eps` added after the square root.")]
        pub struct $name<'a>(AdamState<'a>);

        impl<'a> $name<'a> {
            /// An optimizer over `params` (leaves on one core).
            #[track_caller]
            pub fn new(params: Vec<&'a Tensor>, config: AdamConfig) -> Result<$name<'a>> {
                let opt = AdamState::new(params, config, $decoupled, $torch).map($name)?;
                mark_state(&opt)?;
                Ok(opt)
            }

            /// The number of steps taken.
            pub fn steps(&self) -> u64 {
                self.0.schedule.steps
            }
        }

        impl Optimizer for $name<'_> {
            #[track_caller]
            fn step(&mut self) -> Result<()> {
                self.0.step()
            }

            #[track_caller]
            fn zero_grad(&mut self) -> Result<()> {
                zero_all(&self.0.params)
            }

            fn lr(&self) -> f64 {
                self.0.schedule.lr_value
            }

            #[track_caller]
            fn set_lr(&mut self, lr: f64) -> Result<()> {
                self.0.schedule.set_lr(lr)
            }

            fn named_state(&self) -> Vec<(String, &Tensor)> {
                let moments = &self.0.moments;
                self.0
                    .schedule
                    .named(|i| vec![("exp_avg", &moments[i].0), ("exp_avg_sq", &moments[i].1)])
            }

            #[track_caller]
            fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
                load_named(self.named_state(), state)?;
                self.0.schedule.resync()
            }
        }
    };
}

adam_optimizer!(Adam, false, "Adam");
adam_optimizer!(AdamW, true, "AdamW");

/// torch's `AdamW` defaults: Adam's, with weight decay 0.01.
pub fn adamw_defaults() -> AdamWConfig {
    AdamConfig {
        weight_decay: 0.01,
        ..AdamConfig::default()
    }
}

/// Scales the parameters' gradients so that their total 2-norm is at most `max_norm`, as
/// `torch.nn.utils.clip_grad_norm_`; returns the total norm before clipping, as a tensor.
#[track_caller]
pub fn clip_grad_norm_(params: &[&Tensor], max_norm: f64) -> Result<Tensor> {
    no_grad(|| {
        let grads: Vec<(&Tensor, Tensor)> = params
            .iter()
            .filter_map(|p| p.grad().transpose().map(|g| g.map(|g| (*p, g))))
            .collect::<Result<_>>()?;
        let norms: Vec<Tensor> = grads
            .iter()
            .map(|(_, g)| g.mul(g)?.sum()?.sqrt())
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = norms.iter().collect();
        let stacked = stack(&refs)?;
        let total = stacked.mul(&stacked)?.sum()?.sqrt()?;
        // clip_coef = max_norm / (total + 1e-6), clamped to at most 1.
        let coef = scalar(max_norm, &total)?
            .div(&total.add(&scalar(1e-6, &total)?)?)?
            .clamp_with(crate::ops::ClampOptions::new().max(1.0))?;
        for (p, g) in &grads {
            let clipped = g.mul(&coef.cast(g.dtype())?)?;
            p.set_grad(Some(&clipped))?;
        }
        Ok(total)
    })
}

/// A learning-rate schedule as Hugging Face transformers' `LambdaLR` ones: the optimizer's
/// learning rate is `base_lr * factor(step)`, set at creation (step 0) and after each
/// [`step`](LrScheduler::step).
pub struct LrScheduler<F: Fn(u64) -> f64> {
    base_lr: f64,
    factor: F,
    steps: u64,
}

impl<F: Fn(u64) -> f64> LrScheduler<F> {
    /// A schedule for `optimizer`, whose current learning rate is the base.
    #[track_caller]
    pub fn new(optimizer: &mut dyn Optimizer, factor: F) -> Result<LrScheduler<F>> {
        let base_lr = optimizer.lr();
        optimizer.set_lr(base_lr * factor(0))?;
        Ok(LrScheduler {
            base_lr,
            factor,
            steps: 0,
        })
    }

    /// Advances one step and sets the optimizer's learning rate for the next.
    #[track_caller]
    pub fn step(&mut self, optimizer: &mut dyn Optimizer) -> Result<()> {
        self.steps += 1;
        optimizer.set_lr(self.base_lr * (self.factor)(self.steps))
    }

    /// The learning rate the schedule gives now.
    pub fn lr(&self) -> f64 {
        self.base_lr * (self.factor)(self.steps)
    }
}

/// transformers' `get_cosine_schedule_with_warmup` (half a cosine cycle): linear warmup from
/// 0 over `warmup` steps, then a cosine decay to 0 at `total`.
pub fn cosine_schedule_with_warmup(warmup: u64, total: u64) -> impl Fn(u64) -> f64 {
    move |step| {
        if step < warmup {
            return step as f64 / warmup.max(1) as f64;
        }
        let progress = (step - warmup) as f64 / total.saturating_sub(warmup).max(1) as f64;
        (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0)
    }
}

/// transformers' `get_linear_schedule_with_warmup`: linear warmup from 0 over `warmup`
/// steps, then linear decay to 0 at `total`.
pub fn linear_schedule_with_warmup(warmup: u64, total: u64) -> impl Fn(u64) -> f64 {
    move |step| {
        if step < warmup {
            return step as f64 / warmup.max(1) as f64;
        }
        (total.saturating_sub(step) as f64 / total.saturating_sub(warmup).max(1) as f64).max(0.0)
    }
}
