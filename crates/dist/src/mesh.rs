//! The device mesh: ranks laid out on an n-dimensional grid with named dimensions, as
//! PyTorch's `DeviceMesh`.
//!
//! Layout, exactly as `torch.arange(world).reshape(shape)`: rank `r` sits at the row-major
//! coordinates of `r`, the last dimension varying fastest. The group of dimension `d` for a
//! rank is the ranks along `d` with every other coordinate fixed, in increasing coordinate
//! order.
//!
//! So on `shape [4, 8]`, names `["tp", "fsdp"]`, the `fsdp` groups are 8 consecutive ranks
//! (`[8..16)` for rank 9) and the `tp` groups are strided by 8 (`[1, 9, 17, 25]` for rank 9).
//! To keep a dimension's groups on consecutive ranks (on one chip: `neuron:0-3` share a
//! Trainium2 chip at LNC=2), make it the last dimension, e.g. `[8, 4]` with `["fsdp", "tp"]`.

use super::group::ProcessGroup;

/// Ranks `0..world_size` arranged row-major on a grid with one name per dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceMesh {
    world_size: u32,
    shape: Vec<usize>,
    names: Vec<String>,
}

impl DeviceMesh {
    /// A mesh of `shape` over a world of `world_size` ranks, dimension `i` named `names[i]`.
    ///
    /// Fails if the shape is empty or has a zero dimension, if there is not exactly one
    /// name per dimension, if a name is empty or repeated, or if the product of the shape is
    /// not `world_size`.
    pub fn new(world_size: u32, shape: &[usize], names: &[&str]) -> Result<DeviceMesh, String> {
        if shape.is_empty() {
            return Err("a device mesh needs at least one dimension".to_string());
        }
        if let Some(d) = shape.iter().position(|&s| s == 0) {
            return Err(format!(
                "device mesh shape {shape:?} has size 0 in dimension {d}: every dimension \
                 needs at least one rank"
            ));
        }
        if names.len() != shape.len() {
            return Err(format!(
                "device mesh shape {shape:?} has {} dimension(s) but {} name(s) {names:?}: \
                 give one name per dimension",
                shape.len(),
                names.len()
            ));
        }
        if names.iter().any(|n| n.is_empty()) {
            return Err(format!(
                "device mesh dimension names {names:?} include an empty name"
            ));
        }
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(format!(
                    "device mesh dimension name '{name}' is used twice in {names:?}"
                ));
            }
        }
        let size = shape.iter().try_fold(1usize, |acc, &s| acc.checked_mul(s));
        if size != Some(world_size as usize) {
            let size = size.map_or("more than usize::MAX".to_string(), |s| s.to_string());
            return Err(format!(
                "device mesh shape {shape:?} holds {size} rank(s) but the world has \
                 {world_size}: the product of the shape must equal the world size"
            ));
        }
        Ok(DeviceMesh {
            world_size,
            shape: shape.to_vec(),
            names: names.iter().map(|n| n.to_string()).collect(),
        })
    }

    /// Number of ranks in the mesh: the product of its shape.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// The size of each dimension.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The name of each dimension.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The index of the dimension called `name`, or an error listing the names.
    pub fn dim(&self, name: &str) -> Result<usize, String> {
        self.names.iter().position(|n| n == name).ok_or_else(|| {
            format!(
                "device mesh {:?} has no dimension '{name}': its dimensions are {:?}",
                self.shape, self.names
            )
        })
    }

    /// The row-major coordinates of `rank` on the mesh, one per dimension.
    pub fn coordinates(&self, rank: u32) -> Result<Vec<usize>, String> {
        if rank >= self.world_size {
            return Err(format!(
                "rank {rank} is not on device mesh {:?}: it holds ranks 0 to {}",
                self.shape,
                self.world_size - 1
            ));
        }
        let mut rest = rank as usize;
        let mut coords = vec![0; self.shape.len()];
        for (c, &s) in coords.iter_mut().zip(&self.shape).rev() {
            *c = rest % s;
            rest /= s;
        }
        Ok(coords)
    }

    /// The group of dimension `dim_name` that `rank` belongs to: the ranks that share every
    /// other coordinate with it, in increasing order along the dimension. The group is named
    /// after the dimension.
    pub fn group_for(&self, rank: u32, dim_name: &str) -> Result<ProcessGroup, String> {
        let d = self.dim(dim_name)?;
        let coords = self.coordinates(rank)?;
        let stride: usize = self.shape[d + 1..].iter().product();
        let first = rank as usize - coords[d] * stride;
        let ranks = (0..self.shape[d])
            .map(|i| (first + i * stride) as u32)
            .collect();
        ProcessGroup::new(ranks, self.world_size, Some(dim_name.to_string()))
    }

    /// All groups of dimension `dim_name`, ordered by their first rank (row-major over the
    /// other coordinates). Every rank is in exactly one of them.
    pub fn groups(&self, dim_name: &str) -> Result<Vec<ProcessGroup>, String> {
        let d = self.dim(dim_name)?;
        let mut groups = Vec::new();
        for rank in 0..self.world_size {
            if self.coordinates(rank)?[d] == 0 {
                groups.push(self.group_for(rank, dim_name)?);
            }
        }
        Ok(groups)
    }
}

impl std::fmt::Display for DeviceMesh {
    /// `mesh (fsdp=8, tp=4)`: each dim's name and size, in order.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self
            .names
            .iter()
            .zip(&self.shape)
            .map(|(n, s)| format!("{n}={s}"))
            .collect();
        write!(f, "mesh ({})", dims.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh_4x8() -> DeviceMesh {
        DeviceMesh::new(32, &[4, 8], &["tp", "fsdp"]).unwrap()
    }

    #[test]
    fn mesh_4x8_slices_like_torch() {
        let mesh = mesh_4x8();
        assert_eq!(mesh.dim("tp").unwrap(), 0);
        assert_eq!(mesh.dim("fsdp").unwrap(), 1);
        assert_eq!(mesh.coordinates(9).unwrap(), [1, 1]);
        assert_eq!(mesh.coordinates(31).unwrap(), [3, 7]);
        let tp = mesh.group_for(9, "tp").unwrap();
        assert_eq!(tp.ranks(), [1, 9, 17, 25]);
        assert_eq!(tp.name(), Some("tp"));
        assert_eq!(tp.rank_in_group(9).unwrap(), 1);
        let fsdp = mesh.group_for(9, "fsdp").unwrap();
        assert_eq!(fsdp.ranks(), [8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!(fsdp.rank_in_group(9).unwrap(), 1);
    }

    #[test]
    fn mesh_groups_partition_the_world() {
        let mesh = mesh_4x8();
        let tp = mesh.groups("tp").unwrap();
        assert_eq!(tp.len(), 8);
        assert_eq!(tp[0].ranks(), [0, 8, 16, 24]);
        assert_eq!(tp[7].ranks(), [7, 15, 23, 31]);
        let fsdp = mesh.groups("fsdp").unwrap();
        assert_eq!(fsdp.len(), 4);
        assert_eq!(fsdp[3].ranks(), [24, 25, 26, 27, 28, 29, 30, 31]);
        for dim in ["tp", "fsdp"] {
            let mut all: Vec<u32> = mesh
                .groups(dim)
                .unwrap()
                .iter()
                .flat_map(|g| g.ranks().to_vec())
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..32).collect::<Vec<u32>>());
        }
    }

    #[test]
    fn mesh_3d_and_1d() {
        // torch.arange(24).reshape(2, 3, 4)
        let mesh = DeviceMesh::new(24, &[2, 3, 4], &["pp", "dp", "tp"]).unwrap();
        assert_eq!(mesh.coordinates(17).unwrap(), [1, 1, 1]);
        assert_eq!(mesh.group_for(17, "pp").unwrap().ranks(), [5, 17]);
        assert_eq!(mesh.group_for(17, "dp").unwrap().ranks(), [13, 17, 21]);
        assert_eq!(mesh.group_for(17, "tp").unwrap().ranks(), [16, 17, 18, 19]);
        let dp: Vec<Vec<u32>> = mesh
            .groups("dp")
            .unwrap()
            .iter()
            .map(|g| g.ranks().to_vec())
            .collect();
        assert_eq!(dp.len(), 8);
        assert_eq!(dp[1], [1, 5, 9]);
        assert_eq!(dp[4], [12, 16, 20]);

        let world = DeviceMesh::new(3, &[3], &["world"]).unwrap();
        assert_eq!(world.group_for(2, "world").unwrap().ranks(), [0, 1, 2]);
        assert_eq!(world.shape(), [3]);
        assert_eq!(world.names(), ["world"]);
        assert_eq!(world.world_size(), 3);
    }

    #[test]
    fn bad_meshes_say_what_is_wrong() {
        let err = |world, shape: &[usize], names: &[&str]| {
            DeviceMesh::new(world, shape, names).unwrap_err()
        };
        assert_eq!(
            err(16, &[4, 8], &["tp", "fsdp"]),
            "device mesh shape [4, 8] holds 32 rank(s) but the world has 16: the product of \
             the shape must equal the world size"
        );
        assert_eq!(
            err(32, &[4, 8], &["tp"]),
            "device mesh shape [4, 8] has 2 dimension(s) but 1 name(s) [\"tp\"]: give one name \
             per dimension"
        );
        assert_eq!(
            err(16, &[4, 4], &["tp", "tp"]),
            "device mesh dimension name 'tp' is used twice in [\"tp\", \"tp\"]"
        );
        assert!(err(0, &[], &[]).contains("at least one dimension"));
        assert!(err(0, &[4, 0], &["a", "b"]).contains("size 0 in dimension 1"));
        assert!(err(4, &[4], &[""]).contains("empty name"));
        assert!(err(1, &[usize::MAX, 2], &["a", "b"]).contains("more than usize::MAX"));

        let mesh = mesh_4x8();
        assert_eq!(
            mesh.group_for(0, "dp").unwrap_err(),
            "device mesh [4, 8] has no dimension 'dp': its dimensions are [\"tp\", \"fsdp\"]"
        );
        assert_eq!(
            mesh.group_for(32, "tp").unwrap_err(),
            "rank 32 is not on device mesh [4, 8]: it holds ranks 0 to 31"
        );
        assert!(mesh.groups("pp").is_err());
    }
}
