//! Distributed tensors: one rank's shard of a tensor laid out over a [`DeviceMesh`] with one
//! [`Placement`] per mesh dimension, as torch's DTensor (guest-sdk/ABI.md, "dist").
//!
//! **Layout.** Shards nest left to right over the mesh dimensions: mesh dimension 0 cuts the
//! global tensor into `torch.chunk` pieces, mesh dimension 1 cuts each of those, and so on
//! ([`shard_layout`]). Ranks past the last chunk hold empty shards. `Partial(op)` means the
//! tensor is the `op`-reduction of the ranks' values along that mesh dimension, folded in group
//! order.
//!
//! **Redistribution.** Each mesh dimension whose placement changes is moved by one collective
//! over that dimension's group ([`DeviceMesh::group_for`]), per the ABI table:
//!
//! | from | to | collective |
//! |---|---|---|
//! | `Partial(op)` | `Replicate()` | `all_reduce(op)` |
//! | `Partial(op)` | `Shard(d)` | `reduce_scatter(op, d)` |
//! | `Shard(d)` | `Replicate()` | `all_gather(d)` |
//! | `Shard(i)` | `Shard(j)` | `all_to_all(split j, concat i)` |
//! | `Replicate()` | `Shard(d)` | none: each rank keeps its chunk |
//! | `Replicate()` | `Partial(op)` | none: the first rank keeps the value, the others hold `op`'s identity (avg, min, max: every rank keeps it) |
//!
//! `Shard` to `Partial` goes through `Replicate()`; `Partial(a)` to `Partial(b)` with `a != b`
//! is an error. The plan ([`plan_redistribute`]) first undoes shards from the last mesh
//! dimension to the first, then shards and reduces from the first to the last, so every
//! intermediate state is itself a valid nested layout. When two mesh dimensions shard the same
//! tensor dimension (before or after), every shard that is not already in its final place is
//! gathered to `Replicate()` (last mesh dimension first) and then sharded as asked. A shard
//! that is the same in the source and target, and whose outer (earlier) shards of that tensor
//! dimension are the same too, stays where it is.

use std::fmt;
use std::sync::Arc;

use super::combine::{chunk_sizes, ReduceOp};
use super::mesh::DeviceMesh;
use super::placement::{format_placements, Placement};
use super::ProcessGroup;
use crate::RankComm;
use neuronlab_core::error::{Error, Result};
use neuronlab_core::ops::{Attrs, Registry};
use neuronlab_core::tensor::Tensor;

/// One rank's part of a tensor distributed over a device mesh.
///
/// Immutable and cheap to clone (the local shard is a [`Tensor`]).
#[derive(Clone, Debug)]
pub struct DTensor {
    local: Tensor,
    mesh: Arc<DeviceMesh>,
    placements: Vec<Placement>,
    shape: Vec<usize>,
}

/// The local shape and the offsets into the global tensor of the shard held by the rank at
/// mesh coordinates `coords`.
///
/// Shards nest left to right over the mesh dimensions, each a `torch.chunk` of what the
/// previous ones left (ranks past the last chunk get size 0, at the offset of the end).
/// `Replicate()` and `Partial` leave the shape alone.
///
/// Expects one placement and one coordinate per mesh dimension and shard dims below
/// `global.len()` (what [`DTensor`]'s constructors check); extra entries are ignored and
/// out-of-range shard dims are skipped.
pub fn shard_layout(
    global: &[usize],
    mesh: &DeviceMesh,
    placements: &[Placement],
    coords: &[usize],
) -> (Vec<usize>, Vec<usize>) {
    let mut shape = global.to_vec();
    let mut offsets = vec![0; global.len()];
    for ((placement, &n), &c) in placements.iter().zip(mesh.shape()).zip(coords) {
        if let Placement::Shard(d) = *placement {
            if d >= shape.len() {
                continue;
            }
            let sizes = chunk_sizes(shape[d], n);
            offsets[d] += sizes[..c.min(n)].iter().sum::<usize>();
            shape[d] = sizes.get(c).copied().unwrap_or(0);
        }
    }
    (shape, offsets)
}

/// One step of a redistribution: mesh dimension `mesh_dim` goes from one placement to another
/// with the collective of the ABI table (or none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedistributeStep {
    /// The mesh dimension whose placement changes.
    pub mesh_dim: usize,
    /// Its placement before the step.
    pub from: Placement,
    /// Its placement after the step.
    pub to: Placement,
}

impl fmt::Display for RedistributeStep {
    /// `mesh dim 1: Shard(0) -> Replicate()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mesh dim {}: {} -> {}",
            self.mesh_dim, self.from, self.to
        )
    }
}

/// The mesh dims before `mesh_dim` that shard tensor dim `dim`.
fn outer_shards(placements: &[Placement], mesh_dim: usize, dim: usize) -> Vec<usize> {
    (0..mesh_dim)
        .filter(|&e| placements[e].is_shard_of(dim))
        .collect()
}

/// Whether a mesh dim after `mesh_dim` shards tensor dim `dim`.
fn inner_shard(placements: &[Placement], mesh_dim: usize, dim: usize) -> bool {
    placements[mesh_dim + 1..]
        .iter()
        .any(|p| p.is_shard_of(dim))
}

/// Whether two mesh dims shard the same tensor dim.
fn nested(placements: &[Placement]) -> bool {
    placements.iter().enumerate().any(|(i, p)| match p {
        Placement::Shard(d) => inner_shard(placements, i, *d),
        _ => false,
    })
}

/// The steps that move a tensor from placements `src` to `dst` on one mesh (see the module
/// documentation), in order. Each step changes one mesh dimension and is one row of the ABI
/// table; `Shard` to `Partial` is two steps through `Replicate()`.
///
/// Fails, naming the mesh dimension, if the lists differ in length or a mesh dimension goes
/// from `Partial(a)` to `Partial(b)` with `a != b`.
pub fn plan_redistribute(
    src: &[Placement],
    dst: &[Placement],
) -> Result<Vec<RedistributeStep>, String> {
    if src.len() != dst.len() {
        return Err(format!(
            "cannot redistribute from {} placement(s) {} to {} placement(s) {}: give one per \
             mesh dimension",
            src.len(),
            format_placements(src),
            dst.len(),
            format_placements(dst)
        ));
    }
    for (d, (s, t)) in src.iter().zip(dst).enumerate() {
        if let (Placement::Partial(a), Placement::Partial(b)) = (s, t) {
            if a != b {
                return Err(format!(
                    "cannot redistribute {s} to {t} on mesh dim {d}: a partial value only \
                     means something under its own reduce op; redistribute to Replicate() \
                     first, then to {t}"
                ));
            }
        }
    }
    let fallback = nested(src) || nested(dst);
    let mut cur = src.to_vec();
    let mut steps = Vec::new();
    let mut step = |cur: &mut Vec<Placement>, mesh_dim: usize, to: Placement| {
        steps.push(RedistributeStep {
            mesh_dim,
            from: cur[mesh_dim],
            to,
        });
        cur[mesh_dim] = to;
    };
    // Undo shards, innermost mesh dim first.
    for m in (0..cur.len()).rev() {
        let Placement::Shard(k) = cur[m] else {
            continue;
        };
        if cur[m] == dst[m] && outer_shards(&cur, m, k) == outer_shards(dst, m, k) {
            continue;
        }
        let to = match dst[m] {
            Placement::Shard(j)
                if !fallback
                    && j != k
                    && outer_shards(&cur, m, j) == outer_shards(dst, m, j)
                    && !inner_shard(&cur, m, j) =>
            {
                Placement::Shard(j)
            }
            _ => Placement::Replicate,
        };
        if inner_shard(&cur, m, k) {
            return Err(internal(src, dst, m));
        }
        step(&mut cur, m, to);
    }
    // Shard and reduce, outermost mesh dim first.
    for m in 0..cur.len() {
        if cur[m] == dst[m] {
            continue;
        }
        if matches!(cur[m], Placement::Shard(_)) {
            return Err(internal(src, dst, m));
        }
        if let Placement::Shard(j) = dst[m] {
            if inner_shard(&cur, m, j) {
                return Err(internal(src, dst, m));
            }
        }
        step(&mut cur, m, dst[m]);
    }
    Ok(steps)
}

fn internal(src: &[Placement], dst: &[Placement], m: usize) -> String {
    format!(
        "internal error planning the redistribution from {} to {} at mesh dim {m}; please \
         report this",
        format_placements(src),
        format_placements(dst)
    )
}

/// `(fsdp=8, tp=4)`.
fn describe_mesh(mesh: &DeviceMesh) -> String {
    let dims: Vec<String> = mesh
        .names()
        .iter()
        .zip(mesh.shape())
        .map(|(name, size)| format!("{name}={size}"))
        .collect();
    format!("({})", dims.join(", "))
}

/// Checks placements against a mesh, a tensor and this rank's world.
fn check(
    what: &str,
    comm: &RankComm,
    mesh: &DeviceMesh,
    t: &Tensor,
    placements: &[Placement],
) -> Result<()> {
    let mesh_text = describe_mesh(mesh);
    if mesh.world_size() != comm.world_size() {
        return Err(Error::Invalid(format!(
            "{what}: mesh {mesh_text} holds {} rank(s) but this rank's world has {}: build the \
             mesh over the world's ranks",
            mesh.world_size(),
            comm.world_size()
        )));
    }
    if placements.len() != mesh.shape().len() {
        return Err(Error::Invalid(format!(
            "{what}: {} placement(s) {} for mesh {mesh_text} with {} dimension(s): give one \
             placement per mesh dimension",
            placements.len(),
            format_placements(placements),
            mesh.shape().len()
        )));
    }
    for (p, name) in placements.iter().zip(mesh.names()) {
        match *p {
            Placement::Shard(d) if d >= t.rank() => {
                return Err(Error::Invalid(format!(
                    "{what}: placement {p} on mesh dim '{name}' is out of range for a tensor of \
                     {} dim(s) ({}{:?}){}",
                    t.rank(),
                    t.dtype(),
                    t.shape(),
                    if t.rank() == 0 {
                        ": a zero-dim tensor can only be Replicate() or Partial".to_string()
                    } else {
                        format!(": shard a dim from 0 to {}", t.rank() - 1)
                    }
                )));
            }
            Placement::Partial(op) => op.supports(t.dtype()).map_err(|e| {
                Error::Invalid(format!(
                    "{what}: placement {p} on mesh dim '{name}' does not fit a {} tensor: {e}",
                    t.dtype()
                ))
            })?,
            _ => {}
        }
    }
    Ok(())
}

/// This rank's group and coordinate along mesh dim `m`.
fn group_along(comm: &RankComm, mesh: &DeviceMesh, m: usize) -> Result<(ProcessGroup, usize)> {
    let group = mesh
        .group_for(comm.rank(), &mesh.names()[m])
        .map_err(Error::Invalid)?;
    let coord = group.rank_in_group(comm.rank()).map_err(Error::Invalid)?;
    Ok((group, coord))
}

/// Chunk `index` of `n` (`torch.chunk`) of `t` along `dim`, as a tensor that owns its bytes
/// (so a shard does not keep the whole tensor's HBM alive, as torch clones it).
fn chunk(comm: &RankComm, t: &Tensor, dim: usize, n: usize, index: usize) -> Result<Tensor> {
    let sizes = chunk_sizes(t.shape()[dim], n);
    let start: usize = sizes[..index].iter().sum();
    let rt = comm.runtime();
    let attrs = Attrs::new()
        .with("dim", dim as i64)
        .with("start", start as i64)
        .with("length", sizes[index] as i64);
    let view = rt.call1("narrow", &[t], &attrs)?;
    let dense = rt.call1("contiguous", &[&view], &Attrs::new())?;
    if dense.numel() < dense.storage_buffer().len() {
        // `contiguous` keeps a dense view of a larger storage as it is: copy out the shard.
        rt.tensor_on(dense.device(), dense.to_buffer(), dense.shape())
    } else {
        Ok(dense)
    }
}

/// The value a rank at `coord` holds after `Replicate()` becomes `Partial(op)`: the first rank
/// keeps `t`; the others hold the identity of sum (zeros) and product (ones); for avg, min and
/// max everyone keeps `t`.
fn partial_share(comm: &RankComm, t: &Tensor, op: ReduceOp, coord: usize) -> Result<Tensor> {
    let creation = match op {
        ReduceOp::Sum => "zeros",
        ReduceOp::Product => "ones",
        ReduceOp::Avg | ReduceOp::Min | ReduceOp::Max => return Ok(t.clone()),
    };
    if coord == 0 {
        return Ok(t.clone());
    }
    let (_, def) = Registry::global()
        .lookup(creation)
        .map_err(Error::UnknownOp)?;
    let shape: Vec<i64> = t.shape().iter().map(|&s| s as i64).collect();
    let attrs = Attrs::new().with("shape", shape).with("dtype", t.dtype());
    let mut out = comm.runtime().call_on(def, &[], &attrs, comm.core())?;
    Ok(out.swap_remove(0))
}

/// Moves `t` (this rank's local tensor) from `from` to `to` along mesh dim `m`.
fn apply_step(
    comm: &mut RankComm,
    mesh: &DeviceMesh,
    t: &Tensor,
    step: RedistributeStep,
) -> Result<Tensor> {
    let (group, coord) = group_along(comm, mesh, step.mesh_dim)?;
    use Placement::*;
    match (step.from, step.to) {
        (Partial(op), Replicate) => comm.all_reduce(&group, t, op),
        (Partial(op), Shard(d)) => comm.reduce_scatter(&group, t, op, d),
        (Shard(d), Replicate) => comm.all_gather(&group, t, d),
        (Shard(i), Shard(j)) => comm.all_to_all(&group, t, j, i),
        (Replicate, Shard(d)) => chunk(comm, t, d, group.size(), coord),
        (Replicate, Partial(op)) => partial_share(comm, t, op, coord),
        (from, to) => Err(Error::Invalid(format!(
            "internal error: no direct redistribution from {from} to {to} on mesh dim {}; \
             please report this",
            step.mesh_dim
        ))),
    }
}

impl DTensor {
    /// Distributes `full` (which every rank passes) over `mesh` with one placement per mesh
    /// dimension, as torch's `distribute_tensor` with `src_data_rank=0`: along each mesh
    /// dimension in turn, the group's first rank broadcasts its data, and each rank keeps its
    /// part (its chunk for `Shard`, the value or the op's identity for `Partial`, see the
    /// module documentation). So the mesh's first rank's data wins. The local shard lives on
    /// this rank's core and owns its bytes.
    ///
    /// Fails (before any communication) if the mesh is not over this rank's world, the number
    /// of placements is not the mesh's number of dimensions, a shard dim is out of range for
    /// the tensor, or a `Partial` op does not support its dtype; and with
    /// [`Error::Collective`] if the ranks pass tensors of different dtypes or shapes.
    pub fn distribute(
        comm: &mut RankComm,
        mesh: Arc<DeviceMesh>,
        full: &Tensor,
        placements: &[Placement],
    ) -> Result<DTensor> {
        check("distribute", comm, &mesh, full, placements)?;
        let mut local = full.clone();
        for (m, &placement) in placements.iter().enumerate() {
            let (group, _) = group_along(comm, &mesh, m)?;
            local = comm.broadcast(&group, &local, group.ranks()[0])?;
            if placement != Placement::Replicate {
                let step = RedistributeStep {
                    mesh_dim: m,
                    from: Placement::Replicate,
                    to: placement,
                };
                local = apply_step(comm, &mesh, &local, step)?;
            }
        }
        Ok(DTensor {
            local,
            shape: full.shape().to_vec(),
            mesh,
            placements: placements.to_vec(),
        })
    }

    /// Wraps this rank's `local` tensor without communication, as torch's
    /// `DTensor.from_local`: the global size of a dim sharded by `Shard(d)` is its local size
    /// times the size of each mesh dimension that shards it (which assumes even shards, as
    /// torch does by default). A tensor on another core is copied to this rank's core first.
    ///
    /// Fails as [`DTensor::distribute`] does for bad placements, or if a global size
    /// overflows.
    pub fn from_local(
        comm: &RankComm,
        mesh: Arc<DeviceMesh>,
        local: Tensor,
        placements: &[Placement],
    ) -> Result<DTensor> {
        check("from_local", comm, &mesh, &local, placements)?;
        let mut shape = local.shape().to_vec();
        for (p, &n) in placements.iter().zip(mesh.shape()) {
            if let Placement::Shard(d) = *p {
                shape[d] = shape[d].checked_mul(n).ok_or_else(|| {
                    Error::Invalid(format!(
                        "from_local: the global size of dim {d} of a local {}{:?} with \
                         placements {} overflows",
                        local.dtype(),
                        local.shape(),
                        format_placements(placements)
                    ))
                })?;
            }
        }
        let local = if local.device() == comm.core() {
            local
        } else {
            comm.runtime()
                .tensor_on(comm.core(), local.to_buffer(), local.shape())?
        };
        Ok(DTensor {
            local,
            mesh,
            placements: placements.to_vec(),
            shape,
        })
    }

    /// The same tensor with `target` placements, moved by one collective per changed mesh
    /// dimension over that dimension's group (see the module documentation and
    /// [`plan_redistribute`]). Every rank of the mesh must call it with the same target.
    ///
    /// Fails before any communication if `target` does not fit the mesh or the tensor (as
    /// [`DTensor::distribute`]), or asks `Partial(a)` to become `Partial(b)` with `a != b`.
    pub fn redistribute(&self, comm: &mut RankComm, target: &[Placement]) -> Result<DTensor> {
        check("redistribute", comm, &self.mesh, &self.local, target)?;
        let steps = plan_redistribute(&self.placements, target).map_err(|e| {
            Error::Invalid(format!("redistribute of {}: {e}", self.describe_short()))
        })?;
        let mut local = self.local.clone();
        for step in steps {
            local = apply_step(comm, &self.mesh, &local, step)?;
        }
        debug_assert_eq!(
            local.shape(),
            shard_layout(
                &self.shape,
                &self.mesh,
                target,
                &self.mesh.coordinates(comm.rank()).unwrap_or_default()
            )
            .0
            .as_slice(),
            "redistribute {} -> {}",
            format_placements(&self.placements),
            format_placements(target)
        );
        Ok(DTensor {
            local,
            mesh: self.mesh.clone(),
            placements: target.to_vec(),
            shape: self.shape.clone(),
        })
    }

    /// The whole tensor on this rank's core: the tensor redistributed to `Replicate()` on
    /// every mesh dimension, unwrapped. Every rank of the mesh must call it.
    pub fn full_tensor(&self, comm: &mut RankComm) -> Result<Tensor> {
        let replicate = vec![Placement::Replicate; self.placements.len()];
        Ok(self.redistribute(comm, &replicate)?.local)
    }

    /// This rank's local shard, without communication.
    pub fn to_local(&self) -> &Tensor {
        &self.local
    }

    /// The device mesh.
    pub fn mesh(&self) -> &Arc<DeviceMesh> {
        &self.mesh
    }

    /// One placement per mesh dimension.
    pub fn placements(&self) -> &[Placement] {
        &self.placements
    }

    /// The global shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> neuronlab_core::DType {
        self.local.dtype()
    }

    /// `f32[8, 16] (Shard(0), Replicate())`, for error messages.
    fn describe_short(&self) -> String {
        format!(
            "a {}{:?} distributed as {}",
            self.dtype(),
            self.shape,
            format_placements(&self.placements)
        )
    }
}

impl fmt::Display for DTensor {
    /// `DTensor(global [8, 16] f32, mesh (fsdp=8, tp=4), placements (Shard(0), Replicate()),
    /// local [1, 16] on neuron:3)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DTensor(global {:?} {}, mesh {}, placements {}, local {:?} on {})",
            self.shape,
            self.dtype(),
            describe_mesh(&self.mesh),
            format_placements(&self.placements),
            self.local.shape(),
            self.local.device()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Placement::*;

    fn mesh(shape: &[usize], names: &[&str]) -> DeviceMesh {
        DeviceMesh::new(shape.iter().product::<usize>() as u32, shape, names).unwrap()
    }

    #[test]
    fn uneven_shards_follow_torch_chunk() {
        let m = mesh(&[4], &["dp"]);
        let layouts: Vec<_> = (0..4)
            .map(|c| shard_layout(&[5, 3], &m, &[Shard(0)], &[c]))
            .collect();
        assert_eq!(
            layouts,
            [
                (vec![2, 3], vec![0, 0]),
                (vec![2, 3], vec![2, 0]),
                (vec![1, 3], vec![4, 0]),
                (vec![0, 3], vec![5, 0]),
            ]
        );
        let layouts: Vec<_> = (0..4)
            .map(|c| shard_layout(&[3, 10], &m, &[Shard(1)], &[c]).0[1])
            .collect();
        assert_eq!(layouts, [3, 3, 3, 1]);
        // Replicate and Partial keep the whole shape.
        for p in [Replicate, Partial(ReduceOp::Max)] {
            assert_eq!(
                shard_layout(&[5, 3], &m, &[p], &[2]),
                (vec![5, 3], vec![0, 0])
            );
        }
    }

    #[test]
    fn nested_shards_go_left_to_right() {
        let m = mesh(&[2, 2], &["a", "b"]);
        // 7 -> [4, 3], then 4 -> [2, 2] and 3 -> [2, 1].
        let got: Vec<_> = [[0, 0], [0, 1], [1, 0], [1, 1]]
            .iter()
            .map(|c| shard_layout(&[7, 2], &m, &[Shard(0), Shard(0)], c))
            .collect();
        assert_eq!(
            got,
            [
                (vec![2, 2], vec![0, 0]),
                (vec![2, 2], vec![2, 0]),
                (vec![2, 2], vec![4, 0]),
                (vec![1, 2], vec![6, 0]),
            ]
        );
        // Different tensor dims shard independently.
        assert_eq!(
            shard_layout(&[5, 3], &m, &[Shard(1), Shard(0)], &[1, 0]),
            (vec![3, 1], vec![0, 2])
        );
        // Empty shards past the end sit at the end.
        let m = mesh(&[2, 4], &["a", "b"]);
        assert_eq!(
            shard_layout(&[3, 1], &m, &[Shard(0), Shard(0)], &[1, 3]),
            (vec![0, 1], vec![3, 0])
        );
    }

    fn plan(src: &[Placement], dst: &[Placement]) -> Vec<String> {
        plan_redistribute(src, dst)
            .unwrap()
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn plans_follow_the_abi_table() {
        let sum = Partial(ReduceOp::Sum);
        assert_eq!(
            plan(&[sum], &[Replicate]),
            ["mesh dim 0: Partial(sum) -> Replicate()"]
        );
        assert_eq!(
            plan(&[sum], &[Shard(1)]),
            ["mesh dim 0: Partial(sum) -> Shard(1)"]
        );
        assert_eq!(
            plan(&[Shard(0)], &[Replicate]),
            ["mesh dim 0: Shard(0) -> Replicate()"]
        );
        assert_eq!(
            plan(&[Shard(0)], &[Shard(1)]),
            ["mesh dim 0: Shard(0) -> Shard(1)"]
        );
        assert_eq!(
            plan(&[Replicate], &[Shard(1)]),
            ["mesh dim 0: Replicate() -> Shard(1)"]
        );
        assert_eq!(
            plan(&[Replicate], &[sum]),
            ["mesh dim 0: Replicate() -> Partial(sum)"]
        );
        assert_eq!(
            plan(&[Shard(0)], &[sum]),
            [
                "mesh dim 0: Shard(0) -> Replicate()",
                "mesh dim 0: Replicate() -> Partial(sum)"
            ]
        );
        assert!(plan(&[sum, Shard(0)], &[sum, Shard(0)]).is_empty());
        let e = plan_redistribute(&[sum], &[Partial(ReduceOp::Max)]).unwrap_err();
        assert!(
            e.starts_with("cannot redistribute Partial(sum) to Partial(max) on mesh dim 0"),
            "{e}"
        );
        assert!(plan_redistribute(&[sum], &[sum, sum]).is_err());
    }

    #[test]
    fn nested_shards_are_gathered_last_mesh_dim_first() {
        assert_eq!(
            plan(&[Shard(0), Shard(0)], &[Shard(1), Replicate]),
            [
                "mesh dim 1: Shard(0) -> Replicate()",
                "mesh dim 0: Shard(0) -> Replicate()",
                "mesh dim 0: Replicate() -> Shard(1)"
            ]
        );
        assert_eq!(
            plan(&[Replicate, Shard(0)], &[Shard(0), Shard(0)]),
            [
                "mesh dim 1: Shard(0) -> Replicate()",
                "mesh dim 0: Replicate() -> Shard(0)",
                "mesh dim 1: Replicate() -> Shard(0)"
            ]
        );
        // An outer shard already in place stays.
        assert_eq!(
            plan(&[Shard(0), Shard(0)], &[Shard(0), Replicate]),
            ["mesh dim 1: Shard(0) -> Replicate()"]
        );
        // Swapping shards between mesh dims keeps every state a valid nesting.
        assert_eq!(
            plan(&[Shard(1), Shard(0)], &[Shard(0), Shard(1)]),
            [
                "mesh dim 1: Shard(0) -> Replicate()",
                "mesh dim 0: Shard(1) -> Shard(0)",
                "mesh dim 1: Replicate() -> Shard(1)"
            ]
        );
    }

    #[test]
    fn every_plan_on_three_mesh_dims_is_valid() {
        // The planner checks its own invariants (each collective's tensor dim is not sharded
        // by an inner mesh dim) and reports a violation as an internal error.
        let choices = [
            Shard(0),
            Shard(1),
            Replicate,
            Partial(ReduceOp::Sum),
            Partial(ReduceOp::Max),
        ];
        let all: Vec<Vec<Placement>> = (0..125)
            .map(|i| vec![choices[i / 25], choices[i / 5 % 5], choices[i % 5]])
            .collect();
        for src in &all {
            for dst in &all {
                match plan_redistribute(src, dst) {
                    Ok(steps) => {
                        let mut cur = src.clone();
                        for s in steps {
                            assert_eq!(cur[s.mesh_dim], s.from);
                            cur[s.mesh_dim] = s.to;
                        }
                        assert_eq!(&cur, dst);
                    }
                    Err(e) => assert!(e.contains("cannot redistribute Partial"), "{e}"),
                }
            }
        }
    }
}
