//! Shapes, strides and the view arithmetic behind reshape, transpose, permute, narrow, expand,
//! squeeze and unsqueeze. Views never copy: they return a new [`Layout`] over the same storage.

use std::fmt;

/// A tensor's shape, in elements per dimension.
pub type Shape = Vec<usize>;

/// Where a tensor's elements sit in its storage: `element[i0, i1, ..] = storage[offset + sum(ik * strides[k])]`.
///
/// Strides are in elements and never negative. A stride of 0 is a broadcast (expanded) dim.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Elements per dimension.
    pub shape: Shape,
    /// Step in storage elements per dimension.
    pub strides: Vec<usize>,
    /// Index of element `[0, 0, ..]` in the storage.
    pub offset: usize,
}

/// A view request that makes no sense for the tensor it is applied to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutError(pub String);

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type LResult<T> = Result<T, LayoutError>;

fn err<T>(msg: impl Into<String>) -> LResult<T> {
    Err(LayoutError(msg.into()))
}

/// Formats a shape as `[2, 3]`.
pub fn shape_str(shape: &[usize]) -> String {
    format!("{shape:?}")
}

/// Number of elements, or `None` when the product overflows `usize`.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Row-major strides for `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        // Saturating: only a shape with a zero dim gets this far with huge dims, and its
        // strides are never used to reach an element.
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1].max(1));
    }
    strides
}

/// Whether `strides` lay `shape` out row-major with no gaps (size-1 dims may have any stride).
pub fn is_row_major(shape: &[usize], strides: &[usize]) -> bool {
    // An empty tensor is dense whatever its strides: there is no element to be out of place.
    if shape.contains(&0) {
        return true;
    }
    let mut expected: usize = 1;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}

/// Whether two shapes are equal, for the per-op paths. Not `==`: slice equality calls memcmp,
/// and glibc's AVX-512 memcmp reads an empty slice's dangling pointer (a scalar's shape) with
/// a masked load that costs a microcode assist (a fifth of a scalar op's time in `perf`).
pub fn same_shape(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Resolves a possibly negative dim against `rank` (`-1` is the last dim).
pub fn normalize_dim(dim: i64, rank: usize) -> LResult<usize> {
    let r = rank as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return err(format!(
            "dim {dim} is out of range for a tensor of rank {rank} (expected {} to {})",
            -r,
            r - 1
        ));
    }
    Ok(d as usize)
}

/// Like [`normalize_dim`] but for an insertion point, which may equal `rank`.
fn normalize_insert_dim(dim: i64, rank: usize) -> LResult<usize> {
    normalize_dim(dim, rank + 1)
}

/// numpy broadcasting of two shapes, right-aligned.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> LResult<Shape> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (x, y) => {
                return err(format!(
                    "shapes {} and {} cannot be broadcast: dim {} is {x} vs {y} (each must be equal or 1)",
                    shape_str(a),
                    shape_str(b),
                    i as i64 - rank as i64
                ))
            }
        };
    }
    Ok(out)
}

impl Layout {
    /// A row-major layout for `shape` starting at offset 0.
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the elements are row-major and dense (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        is_row_major(&self.shape, &self.strides)
    }

    /// One past the largest storage index this layout touches (0 when empty).
    pub fn storage_extent(&self) -> usize {
        if self.shape.contains(&0) {
            return 0;
        }
        self.offset
            + self
                .shape
                .iter()
                .zip(&self.strides)
                .map(|(&d, &s)| (d - 1) * s)
                .sum::<usize>()
            + 1
    }

    /// The storage index of a multi-index.
    pub fn offset_of(&self, index: &[usize]) -> usize {
        self.offset
            + index
                .iter()
                .zip(&self.strides)
                .map(|(i, s)| i * s)
                .sum::<usize>()
    }

    /// Swaps two dims.
    pub fn transpose(&self, d0: i64, d1: i64) -> LResult<Layout> {
        let (a, b) = (
            normalize_dim(d0, self.rank())?,
            normalize_dim(d1, self.rank())?,
        );
        let mut l = self.clone();
        l.shape.swap(a, b);
        l.strides.swap(a, b);
        Ok(l)
    }

    /// Reorders dims: output dim `i` is input dim `perm[i]`.
    pub fn permute(&self, perm: &[i64]) -> LResult<Layout> {
        if perm.len() != self.rank() {
            return err(format!(
                "permutation {perm:?} has {} dims, expected {} (one per dim of shape {})",
                perm.len(),
                self.rank(),
                shape_str(&self.shape)
            ));
        }
        let mut seen = vec![false; self.rank()];
        let mut l = Layout {
            shape: Vec::with_capacity(perm.len()),
            strides: Vec::with_capacity(perm.len()),
            offset: self.offset,
        };
        for &p in perm {
            let d = normalize_dim(p, self.rank())?;
            if std::mem::replace(&mut seen[d], true) {
                return err(format!("permutation {perm:?} repeats dim {d}"));
            }
            l.shape.push(self.shape[d]);
            l.strides.push(self.strides[d]);
        }
        Ok(l)
    }

    /// `narrow` with a step: elements `start, start+step, ..` below `end` along `dim`.
    /// `start` and `end` may be negative (counted from the end) and are clamped as in Python slicing.
    pub fn slice(&self, dim: i64, start: i64, end: i64, step: i64) -> LResult<Layout> {
        let d = normalize_dim(dim, self.rank())?;
        if step <= 0 {
            return err(format!("slice step must be positive, got {step}"));
        }
        let size = self.shape[d] as i64;
        let clamp = |v: i64| {
            if v < 0 {
                (v + size).max(0)
            } else {
                v.min(size)
            }
        };
        let (s, e) = (clamp(start), clamp(end));
        // Written so that no step, up to i64::MAX, overflows.
        let len = if e > s { 1 + (e - s - 1) / step } else { 0 };
        let mut l = self.clone();
        if len > 0 {
            l.offset += s as usize * self.strides[d];
        }
        l.shape[d] = len as usize;
        // With two or more elements the step is below the dim's size, so the stride stays
        // within the storage; with fewer it is never used.
        if len > 1 {
            l.strides[d] *= step as usize;
        }
        Ok(l)
    }

    /// Broadcasts size-1 dims (and new leading dims) to `shape` with stride 0.
    /// `-1` in `shape` keeps the existing size.
    pub fn expand(&self, shape: &[i64]) -> LResult<Layout> {
        if shape.len() < self.rank() {
            return err(format!(
                "cannot expand shape {} to {shape:?}: the target has fewer dims",
                shape_str(&self.shape)
            ));
        }
        let lead = shape.len() - self.rank();
        let mut l = Layout {
            shape: Vec::with_capacity(shape.len()),
            strides: Vec::with_capacity(shape.len()),
            offset: self.offset,
        };
        for (i, &want) in shape.iter().enumerate() {
            if want < -1 {
                return err(format!(
                    "cannot expand shape {} to {shape:?}: dim {i} has a negative size {want}",
                    shape_str(&self.shape)
                ));
            }
            if i < lead {
                if want < 0 {
                    return err(format!(
                        "cannot expand shape {} to {shape:?}: -1 keeps an existing dim, and dim \
                         {i} is a new leading dim; give its size",
                        shape_str(&self.shape)
                    ));
                }
                l.shape.push(want as usize);
                l.strides.push(0);
                continue;
            }
            let (have, stride) = (self.shape[i - lead], self.strides[i - lead]);
            if want == -1 || want as usize == have {
                l.shape.push(have);
                l.strides.push(stride);
            } else if have == 1 && want >= 0 {
                l.shape.push(want as usize);
                l.strides.push(0);
            } else {
                return err(format!(
                    "cannot expand shape {} to {shape:?}: dim {i} has size {have}, only size-1 dims expand",
                    shape_str(&self.shape)
                ));
            }
        }
        Ok(l)
    }

    /// Removes size-1 dims: all of them, or only those in `dims`.
    pub fn squeeze(&self, dims: &[i64]) -> LResult<Layout> {
        let mut keep = vec![true; self.rank()];
        if dims.is_empty() {
            for (k, &d) in keep.iter_mut().zip(&self.shape) {
                *k = d != 1;
            }
        } else {
            for &dim in dims {
                let d = normalize_dim(dim, self.rank())?;
                // As torch: squeezing a dim that is not 1 leaves it alone.
                keep[d] = self.shape[d] != 1;
            }
        }
        let mut l = Layout {
            shape: vec![],
            strides: vec![],
            offset: self.offset,
        };
        for (i, _) in keep.iter().enumerate().filter(|(_, &k)| k) {
            l.shape.push(self.shape[i]);
            l.strides.push(self.strides[i]);
        }
        Ok(l)
    }

    /// Inserts a size-1 dim at `dim`.
    pub fn unsqueeze(&self, dim: i64) -> LResult<Layout> {
        let d = normalize_insert_dim(dim, self.rank())?;
        let mut l = self.clone();
        let stride = if d < self.rank() {
            self.strides[d] * self.shape[d]
        } else {
            1
        };
        l.shape.insert(d, 1);
        l.strides.insert(d, stride);
        Ok(l)
    }

    /// Resolves a requested shape with at most one `-1` against this tensor's element count.
    pub fn infer_shape(&self, requested: &[i64]) -> LResult<Shape> {
        let numel = self.numel();
        let mut infer_at = None;
        let mut known: usize = 1;
        for (i, &d) in requested.iter().enumerate() {
            match d {
                -1 if infer_at.is_none() => infer_at = Some(i),
                -1 => return err(format!("shape {requested:?} has more than one -1")),
                d if d < 0 => return err(format!("shape {requested:?} has a negative size {d}")),
                d => {
                    known = known.checked_mul(d as usize).ok_or_else(|| {
                        LayoutError(format!("shape {requested:?} overflows the element count"))
                    })?
                }
            }
        }
        let mut shape: Shape = requested.iter().map(|&d| d.max(0) as usize).collect();
        match infer_at {
            Some(i) if known != 0 && numel.is_multiple_of(known) => shape[i] = numel / known,
            None if known == numel => {}
            _ => {
                return err(format!(
                    "shape {requested:?} is invalid for {numel} elements (input shape {})",
                    shape_str(&self.shape)
                ))
            }
        }
        Ok(shape)
    }

    /// The strides that view this layout as `shape` without copying, if any exist
    /// (the same rule as `torch.Tensor.view`).
    pub fn view_as(&self, shape: &[usize]) -> Option<Layout> {
        if self.is_contiguous() {
            return Some(Layout {
                shape: shape.to_vec(),
                strides: contiguous_strides(shape),
                offset: self.offset,
            });
        }
        // Walk chunks of old dims that are mutually contiguous and map new dims onto them.
        let mut new_strides = vec![0; shape.len()];
        let (old_shape, old_strides) = (&self.shape, &self.strides);
        let mut view_d = shape.len() as isize - 1;
        let mut chunk_base_stride = *old_strides.last()?;
        let mut tensor_numel = 1usize;
        let mut view_numel = 1usize;
        for tensor_d in (0..old_shape.len()).rev() {
            tensor_numel *= old_shape[tensor_d];
            let chunk_ends = tensor_d == 0
                || (old_shape[tensor_d - 1] != 1
                    && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
            if chunk_ends {
                while view_d >= 0 && (view_numel < tensor_numel || shape[view_d as usize] == 1) {
                    new_strides[view_d as usize] = view_numel * chunk_base_stride;
                    view_numel *= shape[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base_stride = old_strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        Some(Layout {
            shape: shape.to_vec(),
            strides: new_strides,
            offset: self.offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_is_numpy_right_aligned() {
        assert_eq!(
            broadcast_shapes(&[3, 1, 5], &[4, 1]).unwrap(),
            vec![3, 4, 5]
        );
        assert_eq!(broadcast_shapes(&[], &[2]).unwrap(), vec![2]);
        let e = broadcast_shapes(&[3, 4], &[5]).unwrap_err().0;
        assert!(e.contains("[3, 4] and [5]") && e.contains("4 vs 5"), "{e}");
    }

    #[test]
    fn transpose_then_view_needs_a_copy() {
        let l = Layout::contiguous(&[2, 3]).transpose(0, 1).unwrap();
        assert!(!l.is_contiguous());
        assert!(l.view_as(&[6]).is_none());
        // Splitting a dim of a transposed tensor is still a view.
        let t = Layout::contiguous(&[4, 6]).transpose(0, 1).unwrap();
        let v = t.view_as(&[2, 3, 4]).unwrap();
        assert_eq!(v.strides, vec![3, 1, 6]);
    }

    #[test]
    fn slice_clamps_like_python() {
        let l = Layout::contiguous(&[10, 4]);
        let s = l.slice(0, 2, 100, 3).unwrap();
        assert_eq!(
            (s.shape.clone(), s.strides.clone(), s.offset),
            (vec![3, 4], vec![12, 1], 8)
        );
        assert_eq!(l.slice(0, -3, 10, 1).unwrap().shape, vec![3, 4]);
        assert_eq!(l.slice(0, 7, 2, 1).unwrap().shape, vec![0, 4]);
        assert!(l.slice(2, 0, 1, 1).is_err());
    }

    #[test]
    fn expand_and_squeeze() {
        let l = Layout::contiguous(&[3, 1]);
        let e = l.expand(&[2, 3, 4]).unwrap();
        assert_eq!(
            (e.shape.clone(), e.strides.clone()),
            (vec![2, 3, 4], vec![0, 1, 0])
        );
        assert!(l.expand(&[3, 4, 2]).is_err());
        assert_eq!(l.squeeze(&[]).unwrap().shape, vec![3]);
        assert_eq!(l.unsqueeze(0).unwrap().shape, vec![1, 3, 1]);
        assert_eq!(l.unsqueeze(-1).unwrap().shape, vec![3, 1, 1]);
    }

    #[test]
    fn infer_shape_resolves_minus_one() {
        let l = Layout::contiguous(&[4, 6]);
        assert_eq!(l.infer_shape(&[-1, 8]).unwrap(), vec![3, 8]);
        assert!(l.infer_shape(&[-1, 5]).is_err());
        assert!(l.infer_shape(&[-1, -1]).is_err());
    }

    #[test]
    fn bad_dims_name_the_range() {
        let e = normalize_dim(3, 2).unwrap_err().0;
        assert!(e.contains("-2 to 1"), "{e}");
    }
}
