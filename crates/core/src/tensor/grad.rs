//! What a tensor knows of autograd: whether it requires a gradient, and where its gradient
//! flows (a leaf's accumulator, or one output of a recorded node).
//!
//! The graph's shape lives here; what a node computes backward is the `autograd` module's,
//! held as an opaque payload, so tensors depend on no op.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::Tensor;
use crate::device::role::Role;

/// Where a tensor's gradient goes.
#[derive(Clone)]
pub enum GradEdge {
    /// A leaf (a tensor marked `requires_grad` by the user): gradients accumulate in it.
    Leaf(Arc<Leaf>),
    /// Output `output` of a recorded op: gradients flow into that node's backward.
    Node {
        /// The recorded op.
        node: Arc<Node>,
        /// Which of its outputs this tensor is.
        output: usize,
    },
}

impl GradEdge {
    /// An identity for the gradient slot: equal for two tensors whose gradients add up in
    /// the same place.
    pub fn key(&self) -> (usize, usize) {
        match self {
            GradEdge::Leaf(leaf) => (Arc::as_ptr(leaf) as usize, usize::MAX),
            GradEdge::Node { node, output } => (Arc::as_ptr(node) as usize, *output),
        }
    }
}

/// Bytes autograd holds on one core: activations saved for backward, and leaves' gradients.
///
/// A storage saved by several nodes (an activation read by two ops) counts once, for as long
/// as any of them holds it.
#[derive(Debug, Default)]
pub struct AutogradBytes {
    saved_storages: Mutex<HashMap<usize, (usize, u64)>>,
    saved: AtomicU64,
    saved_peak: AtomicU64,
    grads: AtomicU64,
}

/// A snapshot of [`AutogradBytes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutogradUse {
    /// Bytes of tensors recorded nodes hold for their backward.
    pub saved: u64,
    /// The most `saved` has been.
    pub saved_peak: u64,
    /// How many distinct storages `saved` counts (a storage several nodes save counts once).
    pub saved_storages: usize,
    /// Bytes of the gradients leaves hold.
    pub grads: u64,
}

impl AutogradBytes {
    /// The current figures.
    pub fn snapshot(&self) -> AutogradUse {
        // Saved bytes change under this lock, so they agree with the count of storages.
        let held = lock(&self.saved_storages);
        AutogradUse {
            saved_storages: held.len(),
            saved: self.saved.load(Ordering::Relaxed),
            saved_peak: self.saved_peak.load(Ordering::Relaxed),
            grads: self.grads.load(Ordering::Relaxed),
        }
    }

    /// Starts the peak of saved bytes again from what is saved now.
    pub fn reset_peak(&self) {
        self.saved_peak
            .store(self.saved.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn add_saved(&self, storages: &[SavedStorage]) {
        let mut held = lock(&self.saved_storages);
        for s in storages {
            let entry = held.entry(s.id).or_insert((0, s.bytes));
            entry.0 += 1;
            if entry.0 == 1 {
                let now = self.saved.fetch_add(s.bytes, Ordering::Relaxed) + s.bytes;
                self.saved_peak.fetch_max(now, Ordering::Relaxed);
            }
        }
    }

    fn sub_saved(&self, storages: &[SavedStorage]) {
        let mut held = lock(&self.saved_storages);
        for s in storages {
            if let Some(entry) = held.get_mut(&s.id) {
                entry.0 -= 1;
                if entry.0 == 0 {
                    held.remove(&s.id);
                    self.saved.fetch_sub(s.bytes, Ordering::Relaxed);
                }
            }
        }
    }
}

/// One storage a node keeps alive for its backward: its identity (stable while held) and
/// size.
#[derive(Clone, Copy, Debug)]
pub struct SavedStorage {
    /// [`Tensor::storage_id`].
    pub id: usize,
    /// Bytes of the whole storage.
    pub bytes: u64,
}

impl SavedStorage {
    /// The storage behind `t`.
    pub fn of(t: &Tensor) -> SavedStorage {
        SavedStorage {
            id: t.storage_id(),
            bytes: (t.storage_buffer().len() * t.dtype().size()) as u64,
        }
    }
}

/// A tensor the user marked as requiring a gradient: its accumulated `.grad` and its version
/// (how many times an optimizer replaced its data).
pub struct Leaf {
    grad: Mutex<Option<Tensor>>,
    version: AtomicU64,
    bytes: Arc<AutogradBytes>,
}

impl Leaf {
    /// A leaf with no gradient yet, accounted in `bytes` (its core's).
    pub fn new(bytes: Arc<AutogradBytes>) -> Leaf {
        Leaf {
            grad: Mutex::new(None),
            version: AtomicU64::new(0),
            bytes,
        }
    }

    /// The accumulated gradient, if any backward has reached this leaf since it was last
    /// cleared.
    pub fn grad(&self) -> Option<Tensor> {
        lock(&self.grad).clone()
    }

    /// Replaces the gradient (`None` clears it, as `zero_grad` does).
    pub fn set_grad(&self, grad: Option<Tensor>) {
        let mut slot = lock(&self.grad);
        let old = slot.as_ref().map_or(0, |g| g.nbytes() as u64);
        let new = grad.as_ref().map_or(0, |g| g.nbytes() as u64);
        if let Some(g) = &grad {
            g.set_memory_role(Role::Gradient);
        }
        self.bytes.grads.fetch_add(new, Ordering::Relaxed);
        self.bytes.grads.fetch_sub(old, Ordering::Relaxed);
        *slot = grad;
    }

    /// How many times the leaf's data was replaced in place.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    /// Counts one in-place replacement of the data.
    pub fn bump_version(&self) {
        self.version.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Leaf {
    fn drop(&mut self) {
        self.set_grad(None);
    }
}

/// One recorded op: where the gradients of its inputs go, and the state its backward needs,
/// until backward frees it.
pub struct Node {
    /// Creation order: a node's inputs were all recorded before it, so walking nodes by
    /// descending `seq` is a topological order of the backward graph.
    pub seq: u64,
    /// The op's name, for errors and listings.
    pub name: &'static str,
    /// Per input, where its gradient goes (`None`: it does not require one).
    pub next: Vec<Option<GradEdge>>,
    state: Mutex<Option<Box<dyn Any + Send>>>,
    saved: Vec<SavedStorage>,
    bytes: Arc<AutogradBytes>,
}

impl Node {
    /// A node whose backward state is `state`, which holds the storages `saved` on the core
    /// that `bytes` accounts.
    pub fn new(
        name: &'static str,
        next: Vec<Option<GradEdge>>,
        state: Box<dyn Any + Send>,
        saved: Vec<SavedStorage>,
        bytes: Arc<AutogradBytes>,
    ) -> Node {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        bytes.add_saved(&saved);
        Node {
            seq: SEQ.fetch_add(1, Ordering::Relaxed),
            name,
            next,
            state: Mutex::new(Some(state)),
            saved,
            bytes,
        }
    }

    /// The backward state, `None` once freed.
    pub fn state(&self) -> MutexGuard<'_, Option<Box<dyn Any + Send>>> {
        lock(&self.state)
    }

    /// Frees the backward state (what a backward without `retain_graph` does).
    pub fn free(&self) {
        if lock(&self.state).take().is_some() {
            self.bytes.sub_saved(&self.saved);
        }
    }
}

impl Drop for Node {
    /// Frees the state, then takes apart the chain of nodes only this one held with a loop,
    /// not recursion, so dropping a graph of a million ops cannot overflow the stack.
    fn drop(&mut self) {
        self.free();
        let mut orphans: Vec<Arc<Node>> = node_edges(&mut self.next);
        while let Some(node) = orphans.pop() {
            if let Some(mut node) = Arc::into_inner(node) {
                orphans.extend(node_edges(&mut node.next));
            }
        }
    }
}

fn node_edges(next: &mut Vec<Option<GradEdge>>) -> Vec<Arc<Node>> {
    next.drain(..)
        .filter_map(|e| match e {
            Some(GradEdge::Node { node, .. }) => Some(node),
            _ => None,
        })
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data behind these locks stays consistent even if a holder panicked.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
