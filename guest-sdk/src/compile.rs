//! Compiled functions, as `torch.compile`, and lazy mode, as torch-neuronx's XLA path.
//!
//! [`compile`] turns a function or closure into a [`Compiled`] one. Calling it with inputs of
//! a shape and dtype seen before runs the cached program without entering the function; a new
//! signature traces and compiles it again, and the host reports why (`recompile 2/8 of
//! 'step': input 0 'x' shape changed: expected [4, 64], got [5, 64]`). Reading a tensor's data
//! inside the function ([`Tensor::to_vec`], [`Tensor::item`], printing it) is a graph break.
//!
//! A closure may capture tensors made before it (parameters, an optimizer and its state): the
//! host reads them at every call, guarded by identity, shape, dtype and `requires_grad`, so a
//! training step that calls `backward` and `opt.step()` compiles once and updates the
//! parameters on every call. Guest-side effects of the closure (printing, Rust variables) run
//! only when it is traced.
//!
//! [`lazy`] records the ops of a closure and runs them as one graph at its end (and at each
//! [`sync`]), cached by graph hash.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;

use crate::attrs::Attrs;
use crate::error::{Error, ErrorKind, Result};
use crate::sys;
use crate::tensor::Tensor;

/// The body of a compiled function: tensors in, tensors out.
type Body<'f> = Box<dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>> + 'f>;

thread_local! {
    /// The error the last traced function returned, kept for its caller: the host only learns
    /// that the trampoline failed.
    static TRAMPOLINE_ERROR: RefCell<Option<Error>> = const { RefCell::new(None) };
    /// The bodies of live compiled functions, by the number the host passes back to the
    /// trampoline; a slot empties when its [`Compiled`] drops.
    static BODIES: RefCell<Vec<Option<Rc<RefCell<Body<'static>>>>>> = const { RefCell::new(Vec::new()) };
}

/// Options of [`compile_with`], named as in `torch.compile`.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    attrs: Attrs,
}

impl CompileOptions {
    /// The defaults: recompile limit 8, run eagerly past it, graph breaks allowed.
    pub fn new() -> CompileOptions {
        CompileOptions::default()
    }

    /// Recompiles allowed before calls run eagerly (default 8).
    pub fn recompile_limit(self, limit: i64) -> CompileOptions {
        CompileOptions {
            attrs: self.attrs.int("recompile_limit", limit),
        }
    }

    /// Past the limit, fail instead of running eagerly.
    pub fn fail_on_recompile(self) -> CompileOptions {
        CompileOptions {
            attrs: self.attrs.int("fail_on_recompile", 1),
        }
    }

    /// Make a graph break an error.
    pub fn fullgraph(self) -> CompileOptions {
        CompileOptions {
            attrs: self.attrs.int("fullgraph", 1),
        }
    }

    /// Names of the inputs, used in recompile reasons (`input 0 'x' shape changed`).
    pub fn input_names(self, names: &[&str]) -> CompileOptions {
        CompileOptions {
            attrs: self.attrs.str("input_names", &names.join(",")),
        }
    }
}

/// A compiled function. Calls with a known signature run the cached program. It borrows
/// what its closure captures for `'f`.
#[derive(Debug)]
pub struct Compiled<'f> {
    handle: i32,
    body: usize,
    captures: PhantomData<&'f mut ()>,
}

/// Compiles `f` under `name` with default options.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
///
/// fn mlp(x: &[Tensor]) -> neuronlab::Result<Vec<Tensor>> {
///     Ok(vec![x[0].matmul(&x[1])?.gelu()?])
/// }
///
/// let step = compile("mlp", mlp)?;
/// let y = step.call1(&[&randn(&[8, 64])?, &randn(&[64, 64])?])?;
/// ```
#[track_caller]
pub fn compile<'f>(
    name: &str,
    f: impl FnMut(&[Tensor]) -> Result<Vec<Tensor>> + 'f,
) -> Result<Compiled<'f>> {
    compile_with(name, f, CompileOptions::new())
}

/// Compiles `f` under `name` with `options`.
///
/// # Example
///
/// ```ignore
/// let w = randn(&[64, 64])?.requires_grad()?;
/// let mut opt = SGD::new(vec![&w], SGDConfig { lr: 0.1, ..Default::default() })?;
/// let step = compile_with("train_step", |x: &[Tensor]| {
///     let loss = x[0].matmul(&w)?.square()?.mean()?;
///     opt.zero_grad()?;
///     loss.backward()?;
///     opt.step()?;
///     Ok(vec![loss.detach()?])
/// }, CompileOptions::new().input_names(&["x"]))?;
/// ```
#[track_caller]
pub fn compile_with<'f>(
    name: &str,
    f: impl FnMut(&[Tensor]) -> Result<Vec<Tensor>> + 'f,
    options: CompileOptions,
) -> Result<Compiled<'f>> {
    let body: Body<'f> = Box::new(f);
    // SAFETY: the body is only called from the trampoline during a call of its `Compiled`,
    // which borrows the captures for 'f, and its slot is emptied when that `Compiled` drops.
    let body: Body<'static> = unsafe { std::mem::transmute::<Body<'f>, Body<'static>>(body) };
    let index = BODIES.with(|b| {
        let mut bodies = b.borrow_mut();
        bodies.push(Some(Rc::new(RefCell::new(body))));
        bodies.len() - 1
    });
    let mut compiled = Compiled {
        handle: 0,
        body: index,
        captures: PhantomData,
    };
    // On failure `compiled` drops here and empties the body's slot.
    compiled.handle = sys::compile_fn(index as i32, name, options.attrs.as_bytes())?;
    Ok(compiled)
}

impl Drop for Compiled<'_> {
    fn drop(&mut self) {
        BODIES.with(|b| {
            if let Some(slot) = b.borrow_mut().get_mut(self.body) {
                *slot = None;
            }
        });
    }
}

impl Compiled<'_> {
    /// Calls the function: from the cache when the signature is known, else by tracing it.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let outs = step.call(&[&x, &w])?;
    /// ```
    #[track_caller]
    pub fn call(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let handles: Vec<u32> = inputs.iter().map(|t| t.handle()).collect();
        let mut max_outputs = 16;
        loop {
            let mut outputs = vec![0u32; max_outputs];
            match sys::compile_call(self.handle, &handles, &mut outputs) {
                Ok(n) => {
                    return Ok(outputs[..n]
                        .iter()
                        .map(|&h| Tensor::from_handle(h))
                        .collect());
                }
                Err(e) if e.kind() == ErrorKind::TooSmall && max_outputs < 1 << 16 => {
                    max_outputs *= 16
                }
                Err(e) => {
                    return Err(TRAMPOLINE_ERROR
                        .with(|t| t.borrow_mut().take())
                        .unwrap_or(e))
                }
            }
        }
    }

    /// Calls a function that returns one tensor.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let y = step.call1(&[&x])?;
    /// ```
    #[track_caller]
    pub fn call1(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let mut outs = self.call(inputs)?;
        if outs.len() != 1 {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "call1 expects one output, the function returned {}",
                    outs.len()
                ),
            ));
        }
        Ok(outs.remove(0))
    }

    /// What the host compiled: versions with their guards, graphs before and after the
    /// passes, fused kernels, graph breaks with reasons.
    ///
    /// # Example
    ///
    /// ```ignore
    /// neuronlab::println!("{}", step.explain()?);
    /// ```
    #[track_caller]
    pub fn explain(&self) -> Result<String> {
        sys::compile_explain(self.handle)
    }

    /// What the function's calls did so far: calls, compiles (the first and every
    /// recompile), cache hits and eager calls past the recompile limit.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let before = step.stats()?.compiles;
    /// step.call1(&[&x])?;
    /// let compiled_now = step.stats()?.compiles > before;
    /// ```
    #[track_caller]
    pub fn stats(&self) -> Result<CompileStats> {
        let [calls, compiles, cache_hits, eager_calls] = sys::compile_stats(self.handle)?;
        Ok(CompileStats {
            calls: calls as u64,
            compiles: compiles as u64,
            cache_hits: cache_hits as u64,
            eager_calls: eager_calls as u64,
        })
    }
}

/// What a compiled function's calls did ([`Compiled::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompileStats {
    /// Calls so far.
    pub calls: u64,
    /// Calls that traced a new version: the first compile and every recompile.
    pub compiles: u64,
    /// Calls that ran a cached version without entering the guest.
    pub cache_hits: u64,
    /// Calls past the recompile limit, run eagerly.
    pub eager_calls: u64,
}

/// Runs `f` in lazy mode: its ops are recorded, then compiled (or found by graph hash) and run
/// as one graph when it returns, or at each [`sync`] inside it.
///
/// # Example
///
/// ```ignore
/// let y = lazy(|| {
///     let h = x.matmul(&w)?.relu()?;
///     h.softmax()
/// })?;
/// ```
#[track_caller]
pub fn lazy<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
    sys::lazy_begin()?;
    let result = f();
    let ended = sys::lazy_end();
    let value = result?;
    ended?;
    Ok(value)
}

/// Runs what lazy mode recorded so far, as `xm.mark_step()`; does nothing outside [`lazy`].
///
/// # Example
///
/// ```ignore
/// lazy(|| { for _ in 0..4 { x = step(&x)?; sync()?; } Ok(()) })?;
/// ```
#[track_caller]
pub fn sync() -> Result<()> {
    sys::lazy_sync()
}

/// The trampoline the host calls to run (and trace) a compiled function: `fn_index` is the
/// number [`compile_with`] gave the host.
#[unsafe(no_mangle)]
pub extern "C" fn neuronlab_trampoline(fn_index: i32, n_args: i32) -> i32 {
    let run = || -> Result<i32> {
        let args = (0..n_args)
            .map(|i| sys::compile_arg(i).map(Tensor::from_handle))
            .collect::<Result<Vec<_>>>()?;
        let body = BODIES
            .with(|b| b.borrow().get(fn_index as usize).cloned().flatten())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Invalid,
                    format!("compiled function body {fn_index} was dropped"),
                )
            })?;
        let results = {
            let mut body = body.try_borrow_mut().map_err(|_| {
                Error::new(
                    ErrorKind::Invalid,
                    "a compiled function called itself while it ran".to_string(),
                )
            })?;
            body(&args)?
        };
        for r in &results {
            sys::compile_result(r.handle())?;
        }
        Ok(results.len() as i32)
    };
    match run() {
        Ok(n) => n,
        Err(e) => {
            let code = e.code();
            TRAMPOLINE_ERROR.with(|t| *t.borrow_mut() = Some(e));
            code
        }
    }
}
