//! Running ops: [`call`] by name, and the per-op handles the generated methods use.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::attrs::Attrs;
use crate::error::{Error, ErrorKind, Result};
use crate::sys;
use crate::tensor::Tensor;

/// Runs any op of the host's registry by name and returns its outputs.
///
/// The name is looked up once (`op_lookup`) and its id cached for later calls. Inputs are in
/// the op's schema order (`neuronlab ops NAME` shows it); optional trailing inputs may be left
/// out. The generated methods ([`Tensor::softmax`] and the rest) do the same with typed
/// arguments, so this is for ops chosen at run time.
///
/// # Errors
///
/// [`ErrorKind::UnknownOp`] for a name that is not an op (the message suggests close names),
/// and whatever the op reports, such as [`ErrorKind::Op`] for operands it rejects.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
///
/// let x = randn(&[2, 5])?;
/// let out = neuronlab::call("softmax", &[&x], &Attrs::new().int("dim", 0))?;
/// assert_eq!(out.len(), 1);
/// ```
#[track_caller]
pub fn call(op: &str, inputs: &[&Tensor], attrs: &Attrs) -> Result<Vec<Tensor>> {
    thread_local! {
        static IDS: RefCell<BTreeMap<String, i32>> = const { RefCell::new(BTreeMap::new()) };
    }
    let id = match IDS.with(|ids| ids.borrow().get(op).copied()) {
        Some(id) => id,
        None => {
            let id = sys::op_lookup(op)?;
            IDS.with(|ids| ids.borrow_mut().insert(op.to_string(), id));
            id
        }
    };
    // The ABI has no query for an op's output count, and a call with too small a buffer
    // fails before the op runs; so start with room for every op today and grow on
    // ERR_TOO_SMALL.
    let mut max_outputs = 4;
    loop {
        match run(id, inputs, attrs, max_outputs) {
            Err(e) if e.kind() == ErrorKind::TooSmall && max_outputs < 1 << 16 => {
                max_outputs *= 16;
            }
            result => return result,
        }
    }
}

/// Calls op `id` with room for `max_outputs` output handles.
#[track_caller]
fn run(id: i32, inputs: &[&Tensor], attrs: &Attrs, max_outputs: usize) -> Result<Vec<Tensor>> {
    let handles: Vec<u32> = inputs.iter().map(|t| t.handle()).collect();
    let mut outputs = vec![0u32; max_outputs];
    let n = sys::op_call(id, &handles, attrs.as_bytes(), &mut outputs)?;
    Ok(outputs[..n]
        .iter()
        .map(|&h| Tensor::from_handle(h))
        .collect())
}

/// One op of the registry, looked up on first use. Each generated method owns a `static Op`.
pub(crate) struct Op {
    name: &'static str,
    /// The op's id, or -1 before the first lookup.
    id: AtomicI32,
}

impl Op {
    /// The op called `name`, not looked up yet.
    pub(crate) const fn new(name: &'static str) -> Op {
        Op {
            name,
            id: AtomicI32::new(-1),
        }
    }

    #[track_caller]
    fn id(&self) -> Result<i32> {
        let id = self.id.load(Ordering::Relaxed);
        if id >= 0 {
            return Ok(id);
        }
        let id = sys::op_lookup(self.name)?;
        self.id.store(id, Ordering::Relaxed);
        Ok(id)
    }

    /// Runs the op and returns its outputs as `O`: one [`Tensor`], or an array of them.
    #[track_caller]
    pub(crate) fn call<O: Outputs>(&self, inputs: &[&Tensor], attrs: Attrs) -> Result<O> {
        let outputs = run(self.id()?, inputs, &attrs, O::COUNT)?;
        if outputs.len() != O::COUNT {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "{} returned {} outputs but its schema in this SDK has {}; rebuild the \
                     guest against an SDK generated from this host's registry",
                    self.name,
                    outputs.len(),
                    O::COUNT
                ),
            ));
        }
        Ok(O::from_tensors(outputs))
    }
}

/// What a generated method returns: one tensor, or an array for an op with several outputs.
pub(crate) trait Outputs: Sized {
    /// How many outputs.
    const COUNT: usize;
    /// Builds the value from exactly `COUNT` tensors.
    fn from_tensors(outputs: Vec<Tensor>) -> Self;
}

impl Outputs for Tensor {
    const COUNT: usize = 1;

    fn from_tensors(outputs: Vec<Tensor>) -> Tensor {
        outputs.into_iter().next().expect("one output")
    }
}

impl<const N: usize> Outputs for [Tensor; N] {
    const COUNT: usize = N;

    fn from_tensors(outputs: Vec<Tensor>) -> [Tensor; N] {
        match outputs.try_into() {
            Ok(array) => array,
            Err(_) => unreachable!("the output count was checked"),
        }
    }
}

/// The inputs of an op with optional trailing inputs: the required ones, then the given
/// optional ones, which must form a prefix of `optional` (the ABI lets only trailing inputs
/// be left out).
#[track_caller]
pub(crate) fn with_optional<'a>(
    op: &str,
    required: &[&'a Tensor],
    optional: &[(&str, Option<&'a Tensor>)],
) -> Result<Vec<&'a Tensor>> {
    let mut inputs = required.to_vec();
    let mut missing = None;
    for &(name, tensor) in optional {
        match (tensor, missing) {
            (Some(t), None) => inputs.push(t),
            (Some(_), Some(absent)) => {
                return Err(Error::new(
                    ErrorKind::Invalid,
                    format!(
                        "{op}: '{name}' is given but '{absent}' is not; only trailing \
                         optional inputs can be left out"
                    ),
                ))
            }
            (None, _) => missing = missing.or(Some(name)),
        }
    }
    Ok(inputs)
}
