//! Tensors: dtypes, strided layouts and views, storage, and numpy-style formatting.
//!
//! A [`Tensor`] is a strided view over shared, memory-accounted storage on one simulated core.

mod element;
mod format;
pub mod grad;
mod layout;
mod storage;
pub mod strided;

use std::fmt;
use std::sync::Arc;

pub use crate::dtype::{Category, DType, UnknownDType};
pub use element::{Buffer, Element, Elements};
pub use format::{element_texts, shown};
pub use format::{format_tensor, FormatOptions};
pub use layout::{
    broadcast_shapes, checked_numel, contiguous_strides, normalize_dim, shape_str, Layout,
    LayoutError, Shape,
};
pub use layout::{is_row_major, same_shape};
pub use storage::Storage;

use crate::autograd::rematerialize::Rematerialize;
use crate::device::role::Role;
use crate::device::topology::CoreId;
use crate::with_dtype;
use grad::{GradEdge, Leaf};

/// A tensor: shape, strides and offset over shared [`Storage`] on a simulated NeuronCore.
///
/// Cloning is cheap (the storage is shared); views (reshape, transpose, slice, expand, ...)
/// share storage too. Tensors are immutable: ops produce new tensors.
#[derive(Clone)]
pub struct Tensor {
    storage: Arc<Storage>,
    layout: Layout,
    device: CoreId,
    grad: Option<GradEdge>,
}

/// Shape and dtype: what shape inference, guards and events see of a tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    /// Elements per dim.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

impl TensorMeta {
    /// A meta from a shape and dtype.
    pub fn new(shape: Vec<usize>, dtype: DType) -> TensorMeta {
        TensorMeta { shape, dtype }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Size of a dense buffer with these elements.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }
}

impl fmt::Display for TensorMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

impl Tensor {
    /// Builds a tensor over `storage`. The layout must stay inside the buffer.
    pub fn from_storage(storage: Arc<Storage>, layout: Layout, device: CoreId) -> Tensor {
        debug_assert!(layout.storage_extent() <= storage.buffer().len());
        Tensor {
            storage,
            layout,
            device,
            grad: None,
        }
    }

    /// A stand-in with `meta`'s shape and dtype on `device`, backed by one zero element that
    /// every index reads (all strides 0), with a storage of its own: what backward formulas
    /// run on when they are traced into a graph rather than run (as torch's fake tensors).
    /// Its [`storage_id`](Tensor::storage_id) names it while it lives.
    pub fn stand_in(meta: &TensorMeta, device: CoreId) -> Tensor {
        let zero = Buffer::from_le_bytes(meta.dtype, &vec![0u8; meta.dtype.size()])
            .expect("one element's bytes make a buffer");
        let layout = Layout {
            shape: meta.shape.clone(),
            strides: vec![0; meta.shape.len()],
            offset: 0,
        };
        Tensor::from_storage(Arc::new(Storage::new(zero, None)), layout, device)
    }

    /// A view of the same storage with another layout (checked to stay inside the buffer).
    pub(crate) fn view(&self, layout: Layout) -> Tensor {
        assert!(
            layout.storage_extent() <= self.storage.buffer().len(),
            "view layout escapes its storage: a bug in the view arithmetic"
        );
        Tensor {
            storage: self.storage.clone(),
            layout,
            device: self.device,
            grad: None,
        }
    }

    /// Lets autograd make this tensor's storage again for backward instead of keeping it
    /// alive ([`Rematerialize`]): a node that saves a view of it keeps `recipe` and the
    /// view's layout. Set once; later calls keep the first recipe.
    pub fn set_rematerialize(&self, recipe: Arc<dyn Rematerialize>) {
        self.storage.set_rematerialize(recipe);
    }

    /// The recipe that makes this tensor's storage again, if one was set.
    pub fn rematerializer(&self) -> Option<Arc<dyn Rematerialize>> {
        self.storage.rematerializer()
    }

    /// True when gradients flow through this tensor (a leaf marked by the user, or the
    /// output of an op recorded on such tensors).
    pub fn requires_grad(&self) -> bool {
        self.grad.is_some()
    }

    /// Where this tensor's gradient goes, when it requires one.
    pub fn grad_edge(&self) -> Option<&GradEdge> {
        self.grad.as_ref()
    }

    /// This tensor's data with gradients going to `edge` (`None`: a tensor that requires
    /// no gradient).
    pub fn with_grad_edge(mut self, edge: Option<GradEdge>) -> Tensor {
        self.grad = edge;
        self
    }

    /// The same data, outside the graph: no gradient flows through the result.
    pub fn detach(&self) -> Tensor {
        self.clone().with_grad_edge(None)
    }

    /// The leaf behind this tensor, when it is one.
    pub fn leaf(&self) -> Option<&Arc<Leaf>> {
        match &self.grad {
            Some(GradEdge::Leaf(leaf)) => Some(leaf),
            _ => None,
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.storage.buffer().dtype()
    }

    /// Elements per dim.
    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }

    /// Strides in elements.
    pub fn strides(&self) -> &[usize] {
        &self.layout.strides
    }

    /// Shape, strides and offset.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }

    /// Bytes of the logical elements (a view reports its own size, not its storage's).
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype().size()
    }

    /// The simulated core this tensor lives on.
    pub fn device(&self) -> CoreId {
        self.device
    }

    /// Shape and dtype.
    pub fn meta(&self) -> TensorMeta {
        TensorMeta::new(self.layout.shape.clone(), self.dtype())
    }

    /// True when the elements are dense and row-major.
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// The whole storage buffer (use with [`Tensor::layout`]).
    pub fn storage_buffer(&self) -> &Buffer {
        self.storage.buffer()
    }

    /// An identity for the storage (equal for tensors that share it, while either lives).
    pub fn storage_id(&self) -> usize {
        Arc::as_ptr(&self.storage) as usize
    }

    /// When this tensor's elements are ready on its core's modeled device clock (a
    /// collective's output arrives later than it is issued), microseconds; 0 for at once.
    pub fn ready_us(&self) -> f64 {
        self.storage.ready_us()
    }

    /// Marks this tensor's storage ready at `us` on the modeled device clock.
    pub fn set_ready_us(&self, us: f64) {
        self.storage.set_ready_us(us);
    }

    /// When the last of `inputs` is ready on the modeled device clock: what an op reading
    /// them waits for.
    pub fn ready_after(inputs: &[&Tensor]) -> f64 {
        inputs.iter().map(|t| t.ready_us()).fold(0.0, f64::max)
    }

    /// What this tensor's storage holds, in the per-role memory breakdown.
    pub fn memory_role(&self) -> Role {
        self.storage.role()
    }

    /// Counts this tensor's storage as `role` (the whole storage: views share it).
    pub fn set_memory_role(&self, role: Role) {
        self.storage.set_role(role);
    }

    /// Counts this tensor's storage as `role` unless something already claimed it: an
    /// activation that is a parameter stays a parameter.
    pub fn claim_memory_role(&self, role: Role) {
        if self.storage.role() == Role::Other {
            self.storage.set_role(role);
        }
    }

    /// True when both tensors share the same storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// The storage elements as `T`. Panics on a dtype mismatch: callers dispatch on dtype first.
    pub fn data<T: Element>(&self) -> &[T] {
        T::slice(self.storage.buffer()).expect("kernel dispatched on the wrong dtype")
    }

    /// The contiguous row-major slice of this tensor's elements, when it is contiguous.
    pub fn contiguous_data<T: Element>(&self) -> Option<&[T]> {
        self.is_contiguous()
            .then(|| &self.data::<T>()[self.layout.offset..self.layout.offset + self.numel()])
    }

    /// The elements in row-major order, converted to `T` with PyTorch's cast rules.
    pub fn to_vec<T: Element>(&self) -> Vec<T> {
        with_dtype!(self.dtype(), S => {
            let data = self.data::<S>();
            strided::map(&self.layout.shape, [&self.layout.strides], [self.layout.offset], |[o]| {
                T::cast_from(data[o])
            })
        })
    }

    /// The elements in row-major order as a dense buffer of this tensor's dtype.
    pub fn to_buffer(&self) -> Buffer {
        with_dtype!(self.dtype(), S => {
            if let Some(slice) = self.contiguous_data::<S>() {
                return S::into_buffer(slice.to_vec());
            }
            S::into_buffer(self.to_vec::<S>())
        })
    }

    /// The element at a multi-index as f64, or `None` when the index is out of range.
    pub fn get_f64(&self, index: &[usize]) -> Option<f64> {
        if index.len() != self.rank() || index.iter().zip(self.shape()).any(|(i, d)| i >= d) {
            return None;
        }
        let o = self.layout.offset_of(index);
        Some(with_dtype!(self.dtype(), S => self.data::<S>()[o].to_f64()))
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor({}, strides={:?}, offset={}, {})",
            self.meta(),
            self.layout.strides,
            self.layout.offset,
            self.device
        )
    }
}
