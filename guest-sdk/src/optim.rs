//! Optimizers with torch's update rules and names ([`SGD`], [`Adam`], [`AdamW`]),
//! [`clip_grad_norm_`], and the learning-rate schedules of Hugging Face transformers
//! ([`LrScheduler`] with [`cosine_schedule_with_warmup`] or [`linear_schedule_with_warmup`]).
//!
//! An optimizer borrows its parameters (leaves made with [`Tensor::requires_grad`]) and
//! updates them in place with [`Tensor::set_data`], so the caller's tensors see each step.
//! Its state (momentum buffers, Adam's moments) are tensors on the parameters' core. Updates
//! run under [`no_grad`], in the parameter's dtype, as torch's single-tensor loops do.
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
use crate::error::{Error, ErrorKind, Result};
use crate::ops::{full_with, stack, FullOptions};
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
    fn set_lr(&mut self, lr: f64);
}

/// A 0-d tensor of `value` in `like`'s dtype (0-d operands keep a tensor's dtype).
fn scalar(value: f64, like: &Tensor) -> Result<Tensor> {
    full_with(&[], value, FullOptions::new().dtype(like.dtype()))
}

/// `t * value`.
fn scale(t: &Tensor, value: f64) -> Result<Tensor> {
    t.mul(&scalar(value, t)?)
}

/// Checks that the parameters are leaves on one core.
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

fn zero_all(params: &[&Tensor]) -> Result<()> {
    params.iter().try_for_each(|p| p.zero_grad())
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
    momentum: Vec<Option<Tensor>>,
}

impl<'a> SGD<'a> {
    /// An optimizer over `params` (leaves on one core).
    pub fn new(params: Vec<&'a Tensor>, config: SGDConfig) -> Result<SGD<'a>> {
        check_params(&params, "SGD")?;
        if config.nesterov && (config.momentum <= 0.0 || config.dampening != 0.0) {
            return Err(Error::new(
                ErrorKind::Invalid,
                "SGD: nesterov needs a momentum > 0 and zero dampening".to_string(),
            ));
        }
        let momentum = params.iter().map(|_| None).collect();
        Ok(SGD {
            params,
            config,
            momentum,
        })
    }
}

impl Optimizer for SGD<'_> {
    fn step(&mut self) -> Result<()> {
        let c = self.config;
        no_grad(|| {
            for (p, buf) in self.params.iter().zip(&mut self.momentum) {
                let Some(mut d) = p.grad()? else { continue };
                if c.weight_decay != 0.0 {
                    d = d.add(&scale(p, c.weight_decay)?)?;
                }
                if c.momentum != 0.0 {
                    let b = match buf.take() {
                        None => d.contiguous()?,
                        Some(b) => scale(&b, c.momentum)?.add(&scale(&d, 1.0 - c.dampening)?)?,
                    };
                    d = if c.nesterov {
                        d.add(&scale(&b, c.momentum)?)?
                    } else {
                        b.try_clone()?
                    };
                    *buf = Some(b);
                }
                p.set_data(&p.sub(&scale(&d, c.lr)?)?)?;
            }
            Ok(())
        })
    }

    fn zero_grad(&mut self) -> Result<()> {
        zero_all(&self.params)
    }

    fn lr(&self) -> f64 {
        self.config.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.config.lr = lr;
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
    steps: u64,
    moments: Vec<Option<(Tensor, Tensor)>>,
}

impl<'a> AdamState<'a> {
    fn new(params: Vec<&'a Tensor>, config: AdamConfig, decoupled: bool, who: &str) -> Result<Self> {
        check_params(&params, who)?;
        let moments = params.iter().map(|_| None).collect();
        Ok(AdamState {
            params,
            config,
            decoupled,
            steps: 0,
            moments,
        })
    }

    fn step(&mut self) -> Result<()> {
        let c = self.config;
        self.steps += 1;
        let t = self.steps as i32;
        let (b1, b2) = c.betas;
        let bias1 = 1.0 - b1.powi(t);
        let bias2_sqrt = (1.0 - b2.powi(t)).sqrt();
        let step_size = c.lr / bias1;
        no_grad(|| {
            for (p, state) in self.params.iter().zip(&mut self.moments) {
                let Some(mut g) = p.grad()? else { continue };
                let mut param = p.try_clone()?;
                if self.decoupled {
                    param = scale(&param, 1.0 - c.lr * c.weight_decay)?;
                } else if c.weight_decay != 0.0 {
                    g = g.add(&scale(&param, c.weight_decay)?)?;
                }
                let (m, v) = match state.take() {
                    Some(mv) => mv,
                    None => (scale(&g, 0.0)?, scale(&g, 0.0)?),
                };
                // torch: exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
                let m = m.add(&scale(&g.sub(&m)?, 1.0 - b1)?)?;
                let v = scale(&v, b2)?.add(&scale(&g.mul(&g)?, 1.0 - b2)?)?;
                let denom = scale(&v.sqrt()?, 1.0 / bias2_sqrt)?.add(&scalar(c.eps, &v)?)?;
                let update = scale(&m, step_size)?.div(&denom)?;
                p.set_data(&param.sub(&update)?)?;
                *state = Some((m, v));
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
            pub fn new(params: Vec<&'a Tensor>, config: AdamConfig) -> Result<$name<'a>> {
                AdamState::new(params, config, $decoupled, $torch).map($name)
            }

            /// The number of steps taken.
            pub fn steps(&self) -> u64 {
                self.0.steps
            }
        }

        impl Optimizer for $name<'_> {
            fn step(&mut self) -> Result<()> {
                self.0.step()
            }

            fn zero_grad(&mut self) -> Result<()> {
                zero_all(&self.0.params)
            }

            fn lr(&self) -> f64 {
                self.0.config.lr
            }

            fn set_lr(&mut self, lr: f64) {
                self.0.config.lr = lr;
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
    pub fn new(optimizer: &mut dyn Optimizer, factor: F) -> LrScheduler<F> {
        let base_lr = optimizer.lr();
        optimizer.set_lr(base_lr * factor(0));
        LrScheduler {
            base_lr,
            factor,
            steps: 0,
        }
    }

    /// Advances one step and sets the optimizer's learning rate for the next.
    pub fn step(&mut self, optimizer: &mut dyn Optimizer) {
        self.steps += 1;
        optimizer.set_lr(self.base_lr * (self.factor)(self.steps));
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
