//! The `dist` group of imports (ABI.md "dist"): ranks, process groups, the device mesh,
//! collectives and distributed tensors, served by the guest's [`RankComm`].
//!
//! Groups, meshes and distributed tensors live in the guest's handle table beside tensors, as
//! [`DistValue`]s; group handle 0 is the world group.

use std::sync::Arc;

use super::compile::before_data_read;
use super::context::{insert, read, read_str, status, value, write_capped, Ctx};
use super::table::{imports, Import};
use crate::attr_codec;
use crate::collective_grad;
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::{DistValue, GuestValue};
use neuronlab_core::ops::attrs::{AttrDefault, AttrKind, AttrSpec, ResolvedAttrs};
use neuronlab_core::tensor::Tensor;
use neuronlab_dist::{DTensor, DeviceMesh, Placement, ProcessGroup, RankComm, ReduceOp};

/// The dist group, in ABI.md's order.
pub(crate) const DIST: &[Import] = imports! { Dist;
    fn dist_rank(c) -> i32 {
        c.data().comm.rank() as i32
    }
    fn dist_world_size(c) -> i32 {
        c.data().comm.world_size() as i32
    }
    fn dist_new_group(c, ptr: i32, n: i32) -> i32 {
        let r = (|| {
            let world = comm(&mut c).world_size();
            if n < 0 || n as u32 > world {
                return Err(Fail(
                    ErrorCode::Invalid,
                    format!("a group of {n} ranks cannot exist in a world of {world}"),
                ));
            }
            let ranks = read(&mut c, ptr, n * 4)?
                .chunks_exact(4)
                .map(|r| u32::from_le_bytes(r.try_into().expect("4 bytes")))
                .collect();
            let g = comm(&mut c)
                .new_group(ranks)
                .map_err(|e| Fail(ErrorCode::Invalid, e.to_string()))?;
            insert_dist(&mut c, DistValue::Group(Arc::new(g)))
        })();
        status(&mut c, r)
    }
    fn dist_group_size(c, g: i32) -> i32 {
        let r = group(&mut c, g).map(|g| g.size() as i32);
        status(&mut c, r)
    }
    fn dist_group_rank(c, g: i32) -> i32 {
        let r = group(&mut c, g).and_then(|g| {
            g.rank_in_group(comm(&mut c).rank())
                .map(|p| p as i32)
                .map_err(|e| Fail(ErrorCode::Invalid, e))
        });
        status(&mut c, r)
    }
    fn dist_collective(c, op_ptr: i32, op_len: i32, g: i32, h: i32, attrs_ptr: i32, attrs_len: i32) -> i32 {
        let r = (|| {
            let op = read_str(&mut c, op_ptr, op_len, "the collective's name")?;
            let attrs = read(&mut c, attrs_ptr, attrs_len)?;
            collective(&mut c, &op, g, h, attrs)
        })();
        status(&mut c, r)
    }
    fn dist_barrier(c, g: i32) -> i32 {
        let r = (|| {
            let group = group(&mut c, g)?;
            let comm = comm(&mut c);
            comm.barrier(&group)?;
            Ok(0)
        })();
        status(&mut c, r)
    }
    fn dist_mesh_new(c, shape_ptr: i32, ndim: i32, names_ptr: i32, names_len: i32) -> i32 {
        let r = mesh_new(&mut c, shape_ptr, ndim, names_ptr, names_len);
        status(&mut c, r)
    }
    fn dist_mesh_group(c, m: i32, name_ptr: i32, name_len: i32) -> i32 {
        let r = (|| {
            let mesh = mesh(&mut c, m)?;
            let name = read_str(&mut c, name_ptr, name_len, "the mesh dim name")?;
            let g = mesh
                .group_for(comm(&mut c).rank(), &name)
                .map_err(|e| Fail(ErrorCode::Invalid, e))?;
            insert_dist(&mut c, DistValue::Group(Arc::new(g)))
        })();
        status(&mut c, r)
    }
    fn dist_mesh_coord(c, m: i32, name_ptr: i32, name_len: i32) -> i32 {
        let r = (|| {
            let mesh = mesh(&mut c, m)?;
            let name = read_str(&mut c, name_ptr, name_len, "the mesh dim name")?;
            let d = mesh.dim(&name).map_err(|e| Fail(ErrorCode::Invalid, e))?;
            let coords = mesh
                .coordinates(comm(&mut c).rank())
                .map_err(|e| Fail(ErrorCode::Invalid, e))?;
            Ok(coords[d] as i32)
        })();
        status(&mut c, r)
    }
    fn dist_distribute(c, m: i32, h: i32, p_ptr: i32, p_len: i32) -> i32 {
        let r = (|| {
            let mesh = mesh(&mut c, m)?;
            let placements = placements(&mut c, p_ptr, p_len)?;
            let t = input(&mut c, h, "distribute")?;
            let comm = comm(&mut c);
            let dt = DTensor::distribute(comm, mesh, &t, &placements)?;
            insert_dist(&mut c, DistValue::DTensor(Arc::new(dt)))
        })();
        status(&mut c, r)
    }
    fn dist_from_local(c, m: i32, h: i32, p_ptr: i32, p_len: i32) -> i32 {
        let r = (|| {
            let mesh = mesh(&mut c, m)?;
            let placements = placements(&mut c, p_ptr, p_len)?;
            let t = input(&mut c, h, "from_local")?;
            let dt = DTensor::from_local(comm(&mut c), mesh, t, &placements)?;
            insert_dist(&mut c, DistValue::DTensor(Arc::new(dt)))
        })();
        status(&mut c, r)
    }
    fn dist_redistribute(c, h: i32, p_ptr: i32, p_len: i32) -> i32 {
        let r = (|| {
            let dt = dtensor(&mut c, h)?;
            let placements = placements(&mut c, p_ptr, p_len)?;
            let comm = comm(&mut c);
            let out = dt.redistribute(comm, &placements)?;
            insert_dist(&mut c, DistValue::DTensor(Arc::new(out)))
        })();
        status(&mut c, r)
    }
    fn dist_full_tensor(c, h: i32) -> i32 {
        let r = (|| {
            let dt = dtensor(&mut c, h)?;
            let comm = comm(&mut c);
            let t = dt.full_tensor(comm)?;
            insert(&mut c, t)
        })();
        status(&mut c, r)
    }
    fn dist_to_local(c, h: i32) -> i32 {
        let r = dtensor(&mut c, h).and_then(|dt| insert(&mut c, dt.to_local().clone()));
        status(&mut c, r)
    }
    fn dist_describe(c, h: i32, ptr: i32, cap: i32) -> i32 {
        let r = describe(&mut c, h)
            .and_then(|text| write_capped(&mut c, ptr, cap, text.as_bytes()));
        status(&mut c, r)
    }
};

/// The reduce ops' names, as the `op` attribute takes them.
const REDUCE_OPS: &[&str] = &["sum", "avg", "product", "min", "max"];

/// What every collective takes beside its own attributes: the dtype it moves (FSDP's
/// `param_dtype`), and how its gradient flows and in which dtype it is reduced (FSDP's
/// `reduce_dtype`) ([`collective_grad`]).
macro_rules! with_backward {
    ($($spec:expr),* $(,)?) => {
        &[
            $($spec,)*
            AttrSpec::new("dtype", AttrKind::DType, AttrDefault::Optional),
            AttrSpec::choice("backward", "adjoint", collective_grad::BACKWARDS),
            AttrSpec::choice("backward_op", "sum", REDUCE_OPS),
            AttrSpec::new("backward_dtype", AttrKind::DType, AttrDefault::Optional),
        ]
    };
}

const ALL_REDUCE: &[AttrSpec] = with_backward![AttrSpec::choice("op", "sum", REDUCE_OPS)];
const ALL_GATHER: &[AttrSpec] = with_backward![
    AttrSpec::new("dim", AttrKind::Int, AttrDefault::Int(0)),
    AttrSpec::new("reshard_after_forward", AttrKind::Int, AttrDefault::Int(0)),
];
const REDUCE_SCATTER: &[AttrSpec] = with_backward![
    AttrSpec::choice("op", "sum", REDUCE_OPS),
    AttrSpec::new("dim", AttrKind::Int, AttrDefault::Int(0)),
];
const ALL_TO_ALL: &[AttrSpec] = with_backward![
    AttrSpec::new("split_dim", AttrKind::Int, AttrDefault::Int(0)),
    AttrSpec::new("concat_dim", AttrKind::Int, AttrDefault::Int(0)),
];
const BROADCAST: &[AttrSpec] =
    with_backward![AttrSpec::new("src", AttrKind::Int, AttrDefault::Optional)];
const IDENTITY: &[AttrSpec] = with_backward![];
const SPLIT: &[AttrSpec] = with_backward![AttrSpec::new("dim", AttrKind::Int, AttrDefault::Int(0))];

/// The collectives `dist_collective` knows, with their attributes. `identity` and `split`
/// move no data forward; they exist for their backward (Megatron-LM's mappings).
const COLLECTIVES: &[(&str, &[AttrSpec])] = &[
    ("all_reduce", ALL_REDUCE),
    ("all_gather", ALL_GATHER),
    ("reduce_scatter", REDUCE_SCATTER),
    ("all_to_all", ALL_TO_ALL),
    ("broadcast", BROADCAST),
    ("identity", IDENTITY),
    ("split", SPLIT),
];

fn comm<'a>(c: &'a mut Ctx) -> &'a mut RankComm {
    &mut c.data_mut().comm
}

/// The group behind handle `g` (0: the world).
fn group(c: &mut Ctx, g: i32) -> HostResult<Arc<ProcessGroup>> {
    if g == 0 {
        return Ok(Arc::new(comm(c).world().world_group()));
    }
    match value(c, g)? {
        GuestValue::Dist(DistValue::Group(group)) => Ok(group),
        other => Err(wrong_kind(&other, "a process group")),
    }
}

fn mesh(c: &mut Ctx, m: i32) -> HostResult<Arc<DeviceMesh>> {
    match value(c, m)? {
        GuestValue::Dist(DistValue::Mesh(mesh)) => Ok(mesh),
        other => Err(wrong_kind(&other, "a device mesh")),
    }
}

fn dtensor(c: &mut Ctx, h: i32) -> HostResult<Arc<DTensor>> {
    match value(c, h)? {
        GuestValue::Dist(DistValue::DTensor(dt)) => Ok(dt),
        other => Err(wrong_kind(&other, "a distributed tensor")),
    }
}

fn wrong_kind(v: &GuestValue, expected: &str) -> Fail {
    let actual = match v {
        GuestValue::Dist(d) => d.kind(),
        GuestValue::Eager(_) | GuestValue::Traced(_) => "a tensor",
        GuestValue::Tokenizer(_) => "a tokenizer",
        GuestValue::Gone(why) => return Fail(ErrorCode::Handle, why.clone()),
    };
    Fail(
        ErrorCode::Handle,
        format!("the handle is {actual}, but {expected} is expected here"),
    )
}

fn insert_dist(c: &mut Ctx, v: DistValue) -> HostResult<i32> {
    Ok(c.data_mut().handles.insert(GuestValue::Dist(v))? as i32)
}

/// A real tensor for a collective: a traced one is made real first (a graph break).
fn input(c: &mut Ctx, h: i32, op: &str) -> HostResult<Tensor> {
    before_data_read(c, h, &format!("{op} (a collective)"))
}

/// Normalizes a possibly negative `dim` of a tensor with `rank` dims.
fn dim(op: &str, name: &str, d: i64, t: &Tensor) -> HostResult<usize> {
    let rank = t.shape().len() as i64;
    let fixed = if d < 0 { d + rank } else { d };
    if (0..rank).contains(&fixed) {
        Ok(fixed as usize)
    } else {
        Err(Fail(
            ErrorCode::Invalid,
            format!(
                "{op}: {name} {d} is out of range for a tensor of {rank} dim(s) ({}{:?}); \
                 expected -{rank}..{rank}",
                t.dtype(),
                t.shape()
            ),
        ))
    }
}

fn reduce_op(attrs: &ResolvedAttrs) -> HostResult<ReduceOp> {
    ReduceOp::parse(attrs.str("op")).map_err(|e| Fail(ErrorCode::Invalid, e))
}

fn collective(c: &mut Ctx, op: &str, g: i32, h: i32, encoded_attrs: Vec<u8>) -> HostResult<i32> {
    let specs = COLLECTIVES
        .iter()
        .find(|(name, _)| *name == op)
        .map(|(_, specs)| *specs)
        .ok_or_else(|| {
            let known: Vec<&str> = COLLECTIVES.iter().map(|(n, _)| *n).collect();
            Fail(
                ErrorCode::Invalid,
                format!(
                    "'{op}' is not a collective; dist_collective takes {} (and dist_barrier)",
                    known.join(", ")
                ),
            )
        })?;
    let attrs = attr_codec::decode(&encoded_attrs)
        .map_err(|e| Fail(ErrorCode::Invalid, format!("{op}: {e}")))?;
    let attrs = ResolvedAttrs::resolve(specs, &attrs)
        .map_err(|e| Fail(ErrorCode::Invalid, format!("{op}: {e}")))?;
    let group = group(c, g)?;
    let t = input(c, h, op)?;
    let declared = |name: &str| specs.iter().any(|s| s.name == name);
    let int_dim = |name: &str| -> HostResult<usize> {
        if declared(name) {
            dim(op, name, attrs.int(name), &t)
        } else {
            Ok(0)
        }
    };
    let reduce = if declared("op") {
        reduce_op(&attrs)?
    } else {
        ReduceOp::Sum
    };
    let src = match declared("src").then(|| attrs.opt_int("src")).flatten() {
        Some(src) => u32::try_from(src).map_err(|_| {
            Fail(
                ErrorCode::Invalid,
                format!("broadcast: src {src} is not a rank"),
            )
        })?,
        None => group.ranks()[0],
    };
    let call = collective_grad::Call {
        op,
        reduce,
        dim: int_dim("dim")?,
        split_dim: int_dim("split_dim")?,
        concat_dim: int_dim("concat_dim")?,
        src,
        backward: attrs.str("backward"),
        backward_reduce: ReduceOp::parse(attrs.str("backward_op"))
            .map_err(|e| Fail(ErrorCode::Invalid, e))?,
        backward_dtype: attrs.opt_dtype("backward_dtype"),
    };
    let runtime = c.data().runtime.clone();
    let moved = collective_grad::cast_to(&runtime, &t, attrs.opt_dtype("dtype"))?;
    let comm = comm(c);
    let out = match op {
        "all_reduce" => comm.all_reduce(&group, &moved, reduce)?,
        "all_gather" => comm.all_gather(&group, &moved, call.dim)?,
        "reduce_scatter" => comm.reduce_scatter(&group, &moved, reduce, call.dim)?,
        "all_to_all" => comm.all_to_all(&group, &moved, call.split_dim, call.concat_dim)?,
        "broadcast" => comm.broadcast(&group, &moved, src)?,
        "identity" => moved,
        "split" => collective_grad::own_chunk(&runtime, comm, &group, &moved, call.dim)?,
        _ => unreachable!("looked up in COLLECTIVES"),
    };
    if declared("reshard_after_forward") && attrs.int("reshard_after_forward") != 0 {
        collective_grad::regather_for_backward(
            comm,
            &group,
            &call,
            &t,
            attrs.opt_dtype("dtype"),
            &out,
        );
    }
    let out = collective_grad::record(&runtime, comm, &group, &call, &t, out)?;
    insert(c, out)
}

fn placements(c: &mut Ctx, ptr: i32, len: i32) -> HostResult<Vec<Placement>> {
    let text = read_str(c, ptr, len, "the placements")?;
    Placement::parse_list(&text).map_err(|e| Fail(ErrorCode::Invalid, e))
}

fn mesh_new(
    c: &mut Ctx,
    shape_ptr: i32,
    ndim: i32,
    names_ptr: i32,
    names_len: i32,
) -> HostResult<i32> {
    if !(1..=16).contains(&ndim) {
        return Err(Fail(
            ErrorCode::Invalid,
            format!("a device mesh has 1 to 16 dims, not {ndim}"),
        ));
    }
    let shape = read(c, shape_ptr, ndim * 8)?
        .chunks_exact(8)
        .map(|d| {
            let d = i64::from_le_bytes(d.try_into().expect("8 bytes"));
            usize::try_from(d).map_err(|_| {
                Fail(
                    ErrorCode::Invalid,
                    format!("device mesh dim {d} is negative"),
                )
            })
        })
        .collect::<HostResult<Vec<usize>>>()?;
    let names = read_str(c, names_ptr, names_len, "the mesh dim names")?;
    let names: Vec<&str> = names.split(',').map(str::trim).collect();
    let world = comm(c).world_size();
    let mesh = DeviceMesh::new(world, &shape, &names).map_err(|e| {
        Fail(
            ErrorCode::Invalid,
            format!("{e} (this launch has {world} rank(s): --nproc sets it)"),
        )
    })?;
    insert_dist(c, DistValue::Mesh(Arc::new(mesh)))
}

fn describe(c: &mut Ctx, h: i32) -> HostResult<String> {
    if h == 0 {
        return Ok(format!("world {}", comm(c).world().world_group()));
    }
    Ok(match value(c, h)? {
        GuestValue::Dist(DistValue::Group(g)) => format!("group {g}"),
        GuestValue::Dist(DistValue::Mesh(m)) => m.to_string(),
        GuestValue::Dist(DistValue::DTensor(dt)) => dt.to_string(),
        other => return Err(wrong_kind(&other, "a group, mesh or distributed tensor")),
    })
}
