//! Distributed experiments, as `torch.distributed`: ranks, process groups, collectives, a
//! [`DeviceMesh`] and distributed tensors ([`DTensor`]) (ABI.md, "dist").
//!
//! A guest always runs as one rank of a world. `neuronlab run exp.wasm --nproc N` starts N
//! instances of the module, one per rank, each on `neuron:<rank>`; they meet in the
//! collectives. A plain run is a world of one rank, where every collective is a copy.
//!
//! - [`rank`] and [`world_size`] say where this instance runs.
//! - [`Group`] is a process group: [`Group::world`], [`Group::new`] or a mesh dim's group
//!   ([`DeviceMesh::group`]).
//! - The collectives are free functions that take the group last: [`all_reduce`],
//!   [`all_gather`], [`reduce_scatter`], [`all_to_all`], [`broadcast`] and [`barrier`].
//!   Every rank of the group must call the same collectives on it in the same order, with the
//!   same arguments and tensors of the same dtype and shape (except where a function says
//!   otherwise); ranks that disagree all get an [`ErrorKind::Collective`] error naming what
//!   each rank passed.
//! - [`DeviceMesh`] lays the world's ranks out on a named grid, as torch's `init_device_mesh`.
//! - [`DTensor`] is a tensor distributed over a mesh with one [`Placement`] per mesh dim;
//!   [`DTensor::redistribute`] moves it with the collectives.
//!
//! Results are exact: every rank of a group receives bit-identical data, and reductions fold
//! the ranks' tensors in group order.
//!
//! [`ErrorKind::Collective`]: crate::ErrorKind::Collective
//!
//! # Example
//!
//! ```ignore
//! use neuronlab::prelude::*;
//! use neuronlab::println;
//!
//! fn run() -> neuronlab::Result<()> {
//!     let x = full(&[2, 2], f64::from(dist::rank()))?;
//!     let total = dist::all_reduce(&x, ReduceOp::Sum, &Group::world())?;
//!     println!("rank {} of {}: {total}", dist::rank(), dist::world_size());
//!     Ok(())
//! }
//!
//! neuronlab::main!(run);
//! ```

use std::fmt;

use crate::attrs::Attrs;
use crate::error::{Error, ErrorKind, Result};
use crate::sys;
use crate::tensor::Tensor;

/// This instance's rank in the world: `0..world_size()`.
///
/// # Panics
///
/// If the host cannot answer, which a host that runs the module never does.
///
/// # Example
///
/// ```ignore
/// if neuronlab::dist::rank() == 0 {
///     neuronlab::println!("only rank 0 says this");
/// }
/// ```
#[track_caller]
pub fn rank() -> u32 {
    match sys::dist_rank() {
        Ok(rank) => rank,
        Err(e) => panic!("dist_rank failed: {e}"),
    }
}

/// The number of ranks in the world: the `--nproc` of the run, 1 for a plain run.
///
/// # Panics
///
/// If the host cannot answer, which a host that runs the module never does.
///
/// # Example
///
/// ```ignore
/// neuronlab::println!("{} ranks", neuronlab::dist::world_size());
/// ```
#[track_caller]
pub fn world_size() -> u32 {
    match sys::dist_world_size() {
        Ok(size) => size,
        Err(e) => panic!("dist_world_size failed: {e}"),
    }
}

/// How a reduction combines the ranks' tensors, as torch's `ReduceOp`.
///
/// `Avg` is defined for float dtypes only (the sum divided by the group size). Integer sums
/// and products wrap; bf16 and f16 fold in f32 and round after each step. On bool, `Sum` and
/// `Max` are logical or, `Product` and `Min` logical and.
///
/// It displays as its name in the ABI, lowercase: `sum`, `avg`, `product`, `min`, `max`.
///
/// # Example
///
/// ```ignore
/// use neuronlab::ReduceOp;
///
/// assert_eq!(ReduceOp::Product.to_string(), "product");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The elementwise sum (the default).
    #[default]
    Sum,
    /// The elementwise mean: the sum divided by the group size (float dtypes only).
    Avg,
    /// The elementwise product.
    Product,
    /// The elementwise minimum.
    Min,
    /// The elementwise maximum.
    Max,
}

impl ReduceOp {
    /// The name the ABI uses, in the `op` attribute and in `Partial(op)`: `"sum"`, `"avg"`,
    /// `"product"`, `"min"` or `"max"`.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::ReduceOp::Avg.name(), "avg");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Product => "product",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A process group: the ranks a collective runs over, in ring order, held as a handle.
///
/// [`Group::world`] is every rank in rank order; [`Group::new`] makes a group of chosen ranks
/// and [`DeviceMesh::group`] this rank's group along a mesh dim. Dropping a group frees its
/// handle (the world group has none to free).
///
/// `Display` shows the host's one-line description, such as `tp [4, 5, 6, 7]`.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
///
/// let pair = Group::new(&[0, 1])?;
/// neuronlab::println!("{pair}: I am {} of {}", pair.rank()?, pair.size());
/// ```
pub struct Group {
    handle: u32,
}

impl Group {
    /// The world group: every rank, in rank order (handle 0).
    ///
    /// # Example
    ///
    /// ```ignore
    /// neuronlab::dist::barrier(&neuronlab::Group::world())?;
    /// ```
    pub fn world() -> Group {
        Group { handle: 0 }
    }

    /// A group of the given global ranks, in this (ring) order.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] for an empty list, a rank listed twice or a rank outside the
    /// world.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let evens = neuronlab::Group::new(&[0, 2, 4, 6])?;
    /// ```
    #[track_caller]
    pub fn new(ranks: &[u32]) -> Result<Group> {
        sys::dist_new_group(ranks).map(|handle| Group { handle })
    }

    /// The number of ranks in the group.
    ///
    /// # Panics
    ///
    /// If the host rejects the handle, which a live `Group` never is.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::Group::world().size(), neuronlab::dist::world_size() as usize);
    /// ```
    #[track_caller]
    pub fn size(&self) -> usize {
        match sys::dist_group_size(self.handle) {
            Ok(size) => size,
            Err(e) => panic!("a live group's size query failed: {e}"),
        }
    }

    /// This rank's position in the group: its rank in the group, `0..size()`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] when this rank is not a member of the group.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let me = tp.rank()?;
    /// ```
    #[track_caller]
    pub fn rank(&self) -> Result<usize> {
        sys::dist_group_rank(self.handle)
    }

    /// Whether this is the world group.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert!(neuronlab::Group::world().is_world());
    /// ```
    pub fn is_world(&self) -> bool {
        self.handle == 0
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.handle != 0 {
            // A live handle is always dropped successfully; there is nothing to do on error.
            let _ = sys::tensor_drop(self.handle);
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        describe(f, "group", self.handle)
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("handle", &format_args!("{:#x}", self.handle))
            .finish()
    }
}

/// Writes the host's description of a dist handle, or a note naming the error.
fn describe(f: &mut fmt::Formatter<'_>, kind: &str, handle: u32) -> fmt::Result {
    match sys::dist_describe(handle) {
        Ok(text) => f.write_str(&text),
        Err(e) => write!(f, "<{kind} {handle:#x}: {e}>"),
    }
}

/// Runs the collective `op` on `x` over `group`.
#[track_caller]
fn collective(op: &str, x: &Tensor, attrs: Attrs, group: &Group) -> Result<Tensor> {
    sys::dist_collective(op, group.handle, x.handle(), attrs.as_bytes()).map(Tensor::from_handle)
}

/// Collectives with a chosen backward. Megatron-LM's mappings for tensor parallelism are
/// collectives whose backward is chosen for
/// a loss computed on every rank of the group from replicated values, so each rank's
/// gradient of a replicated tensor is already the whole gradient. The plain collectives
/// ([`all_reduce`] and the rest) differentiate with their adjoint instead (an all-gather's
/// backward is a reduce-scatter of the sum), which is right when each rank's gradient is its
/// own part of one sum, as in data parallelism and FSDP.
pub mod region {
    use super::{collective, dim_attr, Group};
    use crate::attrs::Attrs;
    use crate::dtype::DType;
    use crate::error::Result;
    use crate::tensor::Tensor;

    /// `x` unchanged forward; backward all-reduces the gradient (the input of a
    /// column-parallel layer, Megatron's `copy_to_tensor_model_parallel_region`).
    #[track_caller]
    pub fn copy_to(x: &Tensor, group: &Group) -> Result<Tensor> {
        collective(
            "identity",
            x,
            Attrs::new().str("backward", "all_reduce"),
            group,
        )
    }

    /// The sum over the group forward; the gradient passes unchanged (the output of a
    /// row-parallel layer, `reduce_from_tensor_model_parallel_region`).
    #[track_caller]
    pub fn reduce_from(x: &Tensor, group: &Group) -> Result<Tensor> {
        let attrs = Attrs::new().str("op", "sum").str("backward", "identity");
        collective("all_reduce", x, attrs, group)
    }

    /// Every rank's `x` concatenated along `dim` forward; backward keeps this rank's chunk of
    /// the gradient (`gather_from_tensor_model_parallel_region`).
    #[track_caller]
    pub fn gather_from(x: &Tensor, dim: usize, group: &Group) -> Result<Tensor> {
        let attrs = Attrs::new()
            .int("dim", dim_attr(dim))
            .str("backward", "split");
        collective("all_gather", x, attrs, group)
    }

    /// Every rank's sequence shard concatenated along `dim` forward; backward reduce-scatters
    /// the gradient with sum (Megatron's sequence parallelism, before a column-parallel layer:
    /// `gather_from_sequence_parallel_region`).
    #[track_caller]
    pub fn gather_sequence(x: &Tensor, dim: usize, group: &Group) -> Result<Tensor> {
        let attrs = Attrs::new()
            .int("dim", dim_attr(dim))
            .str("backward", "reduce_scatter")
            .str("backward_op", "sum");
        collective("all_gather", x, attrs, group)
    }

    /// The sum over the group, this rank keeping its `torch.chunk` chunk along `dim` forward;
    /// backward all-gathers the gradient (sequence parallelism, after a row-parallel layer:
    /// `reduce_scatter_to_sequence_parallel_region`).
    #[track_caller]
    pub fn reduce_scatter_sequence(x: &Tensor, dim: usize, group: &Group) -> Result<Tensor> {
        let attrs = Attrs::new()
            .str("op", "sum")
            .int("dim", dim_attr(dim))
            .str("backward", "all_gather");
        collective("reduce_scatter", x, attrs, group)
    }

    /// Every rank's shard concatenated along `dim` forward; backward reduce-scatters the
    /// gradient with avg, so each rank's shard gets the mean over the group of the whole
    /// gradient (FSDP's unsharding of a parameter, each rank on its own data).
    #[track_caller]
    pub fn unshard(x: &Tensor, dim: usize, group: &Group) -> Result<Tensor> {
        unshard_as(x, dim, group, None, None, false)
    }

    /// [`unshard`] under a mixed-precision policy (FSDP2's `MixedPrecisionPolicy`): the shard
    /// is cast to `param_dtype` and gathered in it, and the gradient is reduce-scattered in
    /// `reduce_dtype` (default: the gradient's own, `param_dtype`), then cast to the shard's
    /// dtype, so an f32 shard gets an f32 gradient. With `reshard_after_forward` (FSDP2's,
    /// ABI 1.10) the ops that save the result for backward keep a recipe instead, and
    /// backward all-gathers it again: the whole parameter lives only while forward uses it.
    #[track_caller]
    pub fn unshard_as(
        x: &Tensor,
        dim: usize,
        group: &Group,
        param_dtype: Option<DType>,
        reduce_dtype: Option<DType>,
        reshard_after_forward: bool,
    ) -> Result<Tensor> {
        let mut attrs = Attrs::new()
            .int("dim", dim_attr(dim))
            .str("backward", "reduce_scatter")
            .str("backward_op", "avg")
            .int("reshard_after_forward", i64::from(reshard_after_forward));
        if let Some(d) = param_dtype {
            attrs = attrs.dtype("dtype", d);
        }
        if let Some(d) = reduce_dtype {
            attrs = attrs.dtype("backward_dtype", d);
        }
        collective("all_gather", x, attrs, group)
    }

    /// This rank's `torch.chunk` chunk of `x` along `dim` forward; backward all-gathers the
    /// gradient (`scatter_to_tensor_model_parallel_region`).
    #[track_caller]
    pub fn scatter_to(x: &Tensor, dim: usize, group: &Group) -> Result<Tensor> {
        let attrs = Attrs::new()
            .int("dim", dim_attr(dim))
            .str("backward", "all_gather");
        collective("split", x, attrs, group)
    }
}

/// A dim as the ABI's int attribute.
fn dim_attr(dim: usize) -> i64 {
    // A wasm32 usize always fits an i64.
    dim as i64
}

/// The reduction with `op` of every rank's `x` over `group`, on every rank (torch's
/// `all_reduce`). Differentiable for sum and avg: the gradient is all-reduced the same way
/// (see [`region`] for tensor parallelism's conjugates).
///
/// # Errors
///
/// [`ErrorKind::Collective`] when the ranks disagree (another op, dtype or shape) or one never
/// arrives; [`ErrorKind::Invalid`] when this rank is not in the group.
///
/// # Example
///
/// ```ignore
/// let grad = dist::all_reduce(&grad, ReduceOp::Avg, &Group::world())?;
/// ```
#[track_caller]
pub fn all_reduce(x: &Tensor, op: ReduceOp, group: &Group) -> Result<Tensor> {
    collective("all_reduce", x, Attrs::new().str("op", op.name()), group)
}

/// Every rank's `x` concatenated along `dim`, in group order, on every rank (torch's
/// `all_gather_into_tensor`). The tensors may differ in size along `dim` only. Its gradient is
/// the reduce-scatter (sum) of the output's gradient, which needs equal sizes.
///
/// # Errors
///
/// As [`all_reduce`]; [`ErrorKind::Collective`] also for tensors that differ in another dim.
///
/// # Example
///
/// ```ignore
/// let full = dist::all_gather(&shard, 0, &fsdp)?; // [rows * fsdp.size(), cols]
/// ```
#[track_caller]
pub fn all_gather(x: &Tensor, dim: usize, group: &Group) -> Result<Tensor> {
    collective(
        "all_gather",
        x,
        Attrs::new().int("dim", dim_attr(dim)),
        group,
    )
}

/// This rank's chunk along `dim` of the reduction with `op` of every rank's `x` (torch's
/// `reduce_scatter_tensor`). Chunks follow `torch.chunk`, so they may be uneven or empty.
/// With sum, its gradient is the all-gather of the output's gradient.
///
/// # Errors
///
/// As [`all_reduce`].
///
/// # Example
///
/// ```ignore
/// let my_rows = dist::reduce_scatter(&grad, ReduceOp::Sum, 0, &fsdp)?;
/// ```
#[track_caller]
pub fn reduce_scatter(x: &Tensor, op: ReduceOp, dim: usize, group: &Group) -> Result<Tensor> {
    let attrs = Attrs::new().str("op", op.name()).int("dim", dim_attr(dim));
    collective("reduce_scatter", x, attrs, group)
}

/// Cuts each rank's `x` along `split_dim` into group-size chunks (`torch.chunk`); rank `i`
/// receives chunk `i` of every rank, concatenated along `concat_dim` in group order (torch's
/// `all_to_all_single`). The tensors may differ in size along `concat_dim` only.
///
/// # Errors
///
/// As [`all_reduce`].
///
/// # Example
///
/// ```ignore
/// // Sequence-sharded [s/k, h, d] to head-sharded [s, h/k, d] (Ulysses attention).
/// let heads = dist::all_to_all(&x, 1, 0, &sp)?;
/// ```
#[track_caller]
pub fn all_to_all(
    x: &Tensor,
    split_dim: usize,
    concat_dim: usize,
    group: &Group,
) -> Result<Tensor> {
    let attrs = Attrs::new()
        .int("split_dim", dim_attr(split_dim))
        .int("concat_dim", dim_attr(concat_dim));
    collective("all_to_all", x, attrs, group)
}

/// The tensor of global rank `src`, on every rank of the group (torch's `broadcast`). Every
/// rank passes a tensor of the same dtype and shape; only `src`'s data is used.
///
/// # Errors
///
/// As [`all_reduce`]; [`ErrorKind::Invalid`] also when `src` is not in the group.
///
/// # Example
///
/// ```ignore
/// let weights = dist::broadcast(&weights, 0, &Group::world())?;
/// ```
#[track_caller]
pub fn broadcast(x: &Tensor, src: u32, group: &Group) -> Result<Tensor> {
    collective(
        "broadcast",
        x,
        Attrs::new().int("src", i64::from(src)),
        group,
    )
}

/// Returns once every rank of the group has reached the barrier.
///
/// # Errors
///
/// [`ErrorKind::Collective`] when a rank never arrives; [`ErrorKind::Invalid`] when this rank
/// is not in the group.
///
/// # Example
///
/// ```ignore
/// dist::barrier(&Group::world())?;
/// ```
#[track_caller]
pub fn barrier(group: &Group) -> Result<()> {
    sys::dist_barrier(group.handle)
}

/// The world's ranks laid out on an n-dimensional grid with one name per dim, as torch's
/// `init_device_mesh`: the ranks are `arange(world_size).reshape(shape)`, the last dim
/// varying fastest.
///
/// A mesh dim's group for this rank ([`DeviceMesh::group`]) is the ranks whose other
/// coordinates equal this rank's. So with shape `[8, 4]` and names `["fsdp", "tp"]`, the `tp`
/// groups are 4 consecutive ranks (`[4, 5, 6, 7]` for rank 5) and the `fsdp` groups are
/// strided by 4 (`[1, 5, 9, ..., 29]` for rank 5).
///
/// Dropping a mesh frees its handle. `Display` shows the host's one-line description.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
///
/// let mesh = DeviceMesh::new(&[8, 4], &["fsdp", "tp"])?;
/// let tp = mesh.group("tp")?;
/// neuronlab::println!("{mesh}: tp coordinate {}, group {tp}", mesh.coordinate("tp")?);
/// ```
pub struct DeviceMesh {
    handle: u32,
    shape: Vec<usize>,
    names: Vec<String>,
}

impl DeviceMesh {
    /// A mesh of `shape` whose dim `i` is named `names[i]`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] when the shape's product is not the world size, or a name is
    /// empty, repeated or contains a comma, or there is not one name per dim.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let mesh = neuronlab::DeviceMesh::new(&[neuronlab::dist::world_size() as usize], &["tp"])?;
    /// ```
    #[track_caller]
    pub fn new(shape: &[usize], names: &[&str]) -> Result<DeviceMesh> {
        if let Some(name) = names.iter().find(|n| n.contains(',')) {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!("mesh dim name '{name}' contains a comma, which separates the names"),
            ));
        }
        let dims: Vec<i64> = shape.iter().map(|&d| dim_attr(d)).collect();
        let handle = sys::dist_mesh_new(&dims, &names.join(","))?;
        Ok(DeviceMesh {
            handle,
            shape: shape.to_vec(),
            names: names.iter().map(|n| n.to_string()).collect(),
        })
    }

    /// The size of each mesh dim, as given to [`DeviceMesh::new`].
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(mesh.shape(), [8, 4]);
    /// ```
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The name of each mesh dim, as given to [`DeviceMesh::new`].
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(mesh.names(), ["fsdp", "tp"]);
    /// ```
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// This rank's group along the mesh dim `name`: the ranks whose other coordinates equal
    /// this rank's, in increasing coordinate order.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] when the mesh has no dim of that name.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let tp = mesh.group("tp")?;
    /// let y = dist::all_reduce(&y_partial, ReduceOp::Sum, &tp)?;
    /// ```
    #[track_caller]
    pub fn group(&self, name: &str) -> Result<Group> {
        sys::dist_mesh_group(self.handle, name).map(|handle| Group { handle })
    }

    /// This rank's coordinate along the mesh dim `name`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] when the mesh has no dim of that name.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let chip = mesh.coordinate("fsdp")?;
    /// ```
    #[track_caller]
    pub fn coordinate(&self, name: &str) -> Result<usize> {
        sys::dist_mesh_coord(self.handle, name)
    }
}

impl Drop for DeviceMesh {
    fn drop(&mut self) {
        // A live handle is always dropped successfully; there is nothing to do on error.
        let _ = sys::tensor_drop(self.handle);
    }
}

impl fmt::Display for DeviceMesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        describe(f, "mesh", self.handle)
    }
}

impl fmt::Debug for DeviceMesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceMesh")
            .field("shape", &self.shape)
            .field("names", &self.names)
            .field("handle", &format_args!("{:#x}", self.handle))
            .finish()
    }
}

/// How a [`DTensor`] lies along one mesh dim, as torch's DTensor placements.
///
/// It displays as torch prints it and as the ABI reads it: `Shard(1)`, `Replicate()`,
/// `Partial(sum)`.
///
/// # Example
///
/// ```ignore
/// use neuronlab::{Placement, ReduceOp};
///
/// let placements = [Placement::Shard(0), Placement::Replicate];
/// assert_eq!(Placement::join(&placements), "Shard(0),Replicate()");
/// assert_eq!(Placement::Partial(ReduceOp::Sum).to_string(), "Partial(sum)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Split along this tensor dim over the mesh dim's ranks, in `torch.chunk` chunks
    /// (`ceil(n / k)` each and a smaller last one; ranks past the last chunk hold empty
    /// shards).
    Shard(usize),
    /// The whole tensor on every rank of the mesh dim.
    Replicate,
    /// A pending reduction: the tensor is the reduction with this op of the ranks' values.
    Partial(ReduceOp),
}

impl Placement {
    /// The placements, one per mesh dim, as the comma-separated string the ABI takes:
    /// `"Shard(0),Replicate()"`.
    ///
    /// # Example
    ///
    /// ```ignore
    /// use neuronlab::Placement;
    ///
    /// assert_eq!(Placement::join(&[Placement::Replicate]), "Replicate()");
    /// ```
    pub fn join(placements: &[Placement]) -> String {
        placements
            .iter()
            .map(Placement::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Shard(dim) => write!(f, "Shard({dim})"),
            Placement::Replicate => f.write_str("Replicate()"),
            Placement::Partial(op) => write!(f, "Partial({op})"),
        }
    }
}

/// A tensor distributed over a [`DeviceMesh`], with one [`Placement`] per mesh dim, held as a
/// handle (torch's `DTensor`).
///
/// [`DTensor::distribute`] splits a whole tensor; [`DTensor::from_local`] wraps each rank's
/// local piece without communication. [`DTensor::redistribute`] changes the placements with
/// the collectives (per mesh dim: `Partial` to `Replicate` is an [`all_reduce`], `Partial` to
/// `Shard` a [`reduce_scatter`], `Shard` to `Replicate` an [`all_gather`], `Shard(i)` to
/// `Shard(j)` an [`all_to_all`]). Every rank of the mesh must make the same calls.
///
/// Dropping a `DTensor` frees its handle. `Display` shows the host's one-line description.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
///
/// let mesh = DeviceMesh::new(&[dist::world_size() as usize], &["tp"])?;
/// let w = randn_with(&[16, 64], RandnOptions::new().seed(1))?;
/// let w = DTensor::distribute(&w, &mesh, &[Placement::Shard(1)])?;
/// neuronlab::println!("{w}: local {:?}", w.to_local()?.shape());
/// let whole = w.full_tensor()?;
/// ```
pub struct DTensor {
    handle: u32,
}

impl DTensor {
    /// Distributes `x` over `mesh` with `placements`, as torch's `distribute_tensor` with
    /// `src_data_rank=0`: every rank passes the whole tensor, the mesh's first rank's data is
    /// broadcast along each mesh dim, and each rank keeps its shard.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] for placements that do not fit the mesh or the tensor, and the
    /// collectives' errors.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let p = DTensor::distribute(&p, &mesh, &[Placement::Shard(0), Placement::Replicate])?;
    /// ```
    #[track_caller]
    pub fn distribute(x: &Tensor, mesh: &DeviceMesh, placements: &[Placement]) -> Result<DTensor> {
        sys::dist_distribute(mesh.handle, x.handle(), &Placement::join(placements))
            .map(|handle| DTensor { handle })
    }

    /// Wraps this rank's local tensor `x` as its piece of a distributed tensor over `mesh`,
    /// without communication, as torch's `DTensor.from_local`: a `Shard(d)` dim's global size
    /// is the local size times the mesh dim's size.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] for placements that do not fit the mesh or the tensor.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let y = DTensor::from_local(&y_partial, &mesh, &[Placement::Partial(ReduceOp::Sum)])?;
    /// ```
    #[track_caller]
    pub fn from_local(x: &Tensor, mesh: &DeviceMesh, placements: &[Placement]) -> Result<DTensor> {
        sys::dist_from_local(mesh.handle, x.handle(), &Placement::join(placements))
            .map(|handle| DTensor { handle })
    }

    /// A new distributed tensor with the target `placements`, moved by the collectives over
    /// each mesh dim's group.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] for placements that do not fit, and the collectives' errors.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let y = y.redistribute(&[Placement::Replicate])?; // an all_reduce of the partial sums
    /// ```
    #[track_caller]
    pub fn redistribute(&self, placements: &[Placement]) -> Result<DTensor> {
        sys::dist_redistribute(self.handle, &Placement::join(placements))
            .map(|handle| DTensor { handle })
    }

    /// The whole tensor on every rank, gathered (and reduced) as needed.
    ///
    /// # Errors
    ///
    /// The collectives' errors.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let p = p_sharded.full_tensor()?;
    /// ```
    #[track_caller]
    pub fn full_tensor(&self) -> Result<Tensor> {
        sys::dist_full_tensor(self.handle).map(Tensor::from_handle)
    }

    /// This rank's local shard, without communication.
    ///
    /// # Errors
    ///
    /// The host's error, such as a full handle table.
    ///
    /// # Example
    ///
    /// ```ignore
    /// neuronlab::println!("local shard {:?}", w.to_local()?.shape());
    /// ```
    #[track_caller]
    pub fn to_local(&self) -> Result<Tensor> {
        sys::dist_to_local(self.handle).map(Tensor::from_handle)
    }
}

impl Drop for DTensor {
    fn drop(&mut self) {
        // A live handle is always dropped successfully; there is nothing to do on error.
        let _ = sys::tensor_drop(self.handle);
    }
}

impl fmt::Display for DTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        describe(f, "dtensor", self.handle)
    }
}

impl fmt::Debug for DTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DTensor")
            .field("handle", &format_args!("{:#x}", self.handle))
            .finish()
    }
}
