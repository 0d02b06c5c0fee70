//! What a compiled function reads and writes besides its arguments' values: the tensors it
//! captured from the guest, their gradients, and the updates it makes to them.
//!
//! As Dynamo does, a tensor the guest held before the call (a parameter, an optimizer's
//! moment, a step count) is not baked into the graph: it is a graph input, read again at
//! every call, and guarded by identity (the guest's handle), shape, dtype and
//! `requires_grad`. A gradient the trace read is guarded the same way, and so is its absence.
//! The updates a trace makes (an optimizer's `set_data`, the gradients backward leaves) are
//! extra outputs of the program, which the caller writes back after each run, as AOTAutograd
//! does for the inputs a graph mutates.

use std::fmt;

use neuronlab_core::tensor::{Tensor, TensorMeta};

/// A tensor a compiled function reaches: one of its arguments, or one the guest held before
/// the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// Argument `i`.
    Arg(usize),
    /// The tensor behind guest handle `h` when the function was called.
    Held(u32),
}

/// What of a tensor is read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Its value (for [`Slot::Held`]; arguments are the signature's).
    Data(Slot),
    /// Its gradient.
    Grad(Slot),
}

/// What a guard sees of a tensor: its shape and dtype, and whether it requires a gradient.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorState {
    /// Shape and dtype.
    pub meta: TensorMeta,
    /// Whether it requires a gradient.
    pub requires_grad: bool,
}

impl TensorState {
    /// The state of `t`.
    pub fn of(t: &Tensor) -> TensorState {
        TensorState {
            meta: t.meta(),
            requires_grad: t.requires_grad(),
        }
    }
}

impl fmt::Display for TensorState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.requires_grad {
            write!(f, "{} requires_grad", self.meta)
        } else {
            write!(f, "{}", self.meta)
        }
    }
}

/// A graph input after the arguments.
#[derive(Clone, Debug)]
pub enum Captured {
    /// A tensor made while tracing (from guest data): its value is fixed.
    Fixed(Tensor),
    /// Read at every call.
    Read(Access),
}

/// One thing a version of a function found when it was traced, and needs again to be reused.
#[derive(Clone, Debug, PartialEq)]
pub struct Guard {
    /// What was read.
    pub access: Access,
    /// What it was: `None` for a gradient that did not exist (or a handle since freed).
    pub expect: Option<TensorState>,
}

/// An update a program's run makes: its output `output` (after the function's results)
/// becomes `access`, or for `None` the gradient is cleared.
#[derive(Clone, Debug, PartialEq)]
pub struct Effect {
    /// What is written: [`Access::Data`] of a held tensor, or a gradient.
    pub access: Access,
    /// Which extra output holds the new value.
    pub output: Option<usize>,
}

/// Names for the slots of one version in messages: `input 1 'w'`, `captured tensor 0`.
pub(crate) fn slot_label(slot: Slot, held: &[u32], names: &[String]) -> String {
    match slot {
        Slot::Arg(i) => super::guards::input_label(i, names),
        Slot::Held(h) => match held.iter().position(|&x| x == h) {
            Some(k) => format!("captured tensor {k}"),
            None => "a captured tensor".to_string(),
        },
    }
}

/// `captured tensor 0` or `the gradient of input 1 'w'`.
pub(crate) fn access_label(access: Access, held: &[u32], names: &[String]) -> String {
    match access {
        Access::Data(slot) => slot_label(slot, held, names),
        Access::Grad(slot) => format!("the gradient of {}", slot_label(slot, held, names)),
    }
}

/// The guards of one version that `observe` now fails, as readable lines.
pub(crate) fn guard_failures(
    guards: &[Guard],
    observe: &dyn Fn(&Access) -> Option<TensorState>,
    held: &[u32],
    names: &[String],
) -> Vec<String> {
    let mut out = Vec::new();
    for g in guards {
        let now = observe(&g.access);
        if now == g.expect {
            continue;
        }
        let label = access_label(g.access, held, names);
        out.push(match (&g.expect, &now) {
            (Some(e), Some(n)) => {
                let mut parts = Vec::new();
                if e.meta != n.meta {
                    parts.push(format!("changed: expected {}, got {}", e.meta, n.meta));
                }
                if e.requires_grad != n.requires_grad {
                    parts.push(format!(
                        "requires_grad changed: expected {}, got {}",
                        e.requires_grad, n.requires_grad
                    ));
                }
                format!("{label} {}", parts.join("; "))
            }
            (Some(e), None) => match g.access {
                Access::Grad(_) => format!("{label} was {e} and is now None"),
                Access::Data(_) => format!("{label} ({e}) was freed"),
            },
            (None, Some(n)) => format!("{label} was None and is now {n}"),
            (None, None) => unreachable!("equal states pass"),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuronlab_core::tensor::DType;

    fn state(shape: &[usize], requires_grad: bool) -> Option<TensorState> {
        Some(TensorState {
            meta: TensorMeta::new(shape.to_vec(), DType::F32),
            requires_grad,
        })
    }

    #[test]
    fn failed_guards_name_the_tensor_and_the_change() {
        let guards = vec![
            Guard {
                access: Access::Data(Slot::Held(7)),
                expect: state(&[4, 8], true),
            },
            Guard {
                access: Access::Grad(Slot::Arg(1)),
                expect: None,
            },
        ];
        let names = vec!["x".to_string(), "w".to_string()];
        let observe = |a: &Access| match a {
            Access::Data(_) => state(&[4, 8], false),
            Access::Grad(_) => state(&[8], false),
        };
        assert_eq!(
            guard_failures(&guards, &observe, &[7], &names),
            vec![
                "captured tensor 0 requires_grad changed: expected true, got false".to_string(),
                "the gradient of input 1 'w' was None and is now f32[8]".to_string(),
            ]
        );
        let freed = |_: &Access| None;
        assert_eq!(
            guard_failures(&guards[..1], &freed, &[7], &names),
            vec!["captured tensor 0 (f32[4, 8] requires_grad) was freed".to_string()]
        );
    }
}
