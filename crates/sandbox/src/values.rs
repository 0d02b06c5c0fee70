//! What a guest handle holds: a real tensor, a value being traced, a distributed object or a
//! tokenizer.

use std::sync::Arc;

use crate::status::{ErrorCode, Fail, HostResult};
use neuronlab_compile::graph::ValueId;
use neuronlab_core::tensor::Tensor;
use neuronlab_dist::{DTensor, DeviceMesh, ProcessGroup};

/// What a guest handle holds.
#[derive(Clone, Debug)]
pub enum GuestValue {
    /// A real tensor.
    Eager(Tensor),
    /// A value of the active recording.
    Traced(ValueId),
    /// A traced value whose recording ended without it; the message says why.
    Gone(String),
    /// A process group, device mesh or distributed tensor.
    Dist(DistValue),
    /// A Hugging Face tokenizer (the tok group).
    Tokenizer(Arc<tokenizers::Tokenizer>),
}

impl GuestValue {
    /// The real tensor, or why this value is not one.
    pub(crate) fn as_eager(&self) -> HostResult<&Tensor> {
        match self {
            GuestValue::Eager(t) => Ok(t),
            GuestValue::Gone(why) => Err(Fail(ErrorCode::Handle, why.clone())),
            GuestValue::Dist(d) => Err(d.not_a_tensor()),
            GuestValue::Tokenizer(_) => Err(tokenizer_not_a_tensor()),
            GuestValue::Traced(_) => Err(Fail(
                ErrorCode::Handle,
                "a traced tensor was used outside its recording".into(),
            )),
        }
    }
}

/// The failure of using a tokenizer where a tensor is expected.
pub(crate) fn tokenizer_not_a_tensor() -> Fail {
    Fail(
        ErrorCode::Handle,
        "the handle is a tokenizer, not a tensor; tok_encode turns text into ids".into(),
    )
}

/// A distributed object behind a guest handle.
#[derive(Clone, Debug)]
pub enum DistValue {
    /// A process group.
    Group(Arc<ProcessGroup>),
    /// A device mesh.
    Mesh(Arc<DeviceMesh>),
    /// A distributed tensor.
    DTensor(Arc<DTensor>),
}

impl DistValue {
    /// What it is, for messages: `a process group`.
    pub fn kind(&self) -> &'static str {
        match self {
            DistValue::Group(_) => "a process group",
            DistValue::Mesh(_) => "a device mesh",
            DistValue::DTensor(_) => "a distributed tensor",
        }
    }

    /// The failure of using it where a tensor is expected.
    pub(crate) fn not_a_tensor(&self) -> Fail {
        let hint = match self {
            DistValue::DTensor(_) => {
                "; take its local shard with dist_to_local or the whole tensor with \
                 dist_full_tensor"
            }
            _ => "",
        };
        Fail(
            ErrorCode::Handle,
            format!("the handle is {}, not a tensor{hint}", self.kind()),
        )
    }
}
