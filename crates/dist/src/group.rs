//! Process groups: the ranks a collective runs over.

use std::fmt;

/// An ordered set of distinct ranks of a world, optionally named (a mesh dimension's groups
/// carry the dimension's name).
///
/// The order is the ring order of the collectives run on the group, and a rank's position in
/// it is its rank in the group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessGroup {
    ranks: Vec<u32>,
    name: Option<String>,
}

impl ProcessGroup {
    /// A group of `ranks` (in this order) of a world of `world_size` ranks.
    ///
    /// Fails if `ranks` is empty, lists a rank twice, or names a rank `>= world_size`; the
    /// error names the offending rank and the world size.
    pub fn new(
        ranks: Vec<u32>,
        world_size: u32,
        name: Option<String>,
    ) -> Result<ProcessGroup, String> {
        let label = name.as_deref().map_or(String::new(), |n| format!(" '{n}'"));
        if ranks.is_empty() {
            return Err(format!(
                "process group{label} has no ranks: it needs at least one"
            ));
        }
        if let Some(&rank) = ranks.iter().find(|&&r| r >= world_size) {
            return Err(format!(
                "rank {rank} in process group{label} {ranks:?} is outside the world of \
                 {world_size} rank(s), 0 to {}",
                world_size.saturating_sub(1)
            ));
        }
        for (i, rank) in ranks.iter().enumerate() {
            if ranks[..i].contains(rank) {
                return Err(format!(
                    "rank {rank} is listed twice in process group{label} {ranks:?} \
                     (world of {world_size} rank(s))"
                ));
            }
        }
        Ok(ProcessGroup { ranks, name })
    }

    /// The ranks, in group order.
    pub fn ranks(&self) -> &[u32] {
        &self.ranks
    }

    /// The group's name, if it has one (a mesh dimension's name for mesh groups).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Number of ranks in the group (never zero).
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// The position of global `rank` in the group, or an error naming the group if the rank
    /// is not in it.
    pub fn rank_in_group(&self, rank: u32) -> Result<usize, String> {
        self.ranks
            .iter()
            .position(|&r| r == rank)
            .ok_or_else(|| format!("rank {rank} is not in process group {self}"))
    }
}

impl fmt::Display for ProcessGroup {
    /// `tp [0, 8, 16, 24]` for a named group, `[0, 1]` for an unnamed one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.name {
            write!(f, "{name} ")?;
        }
        write!(f, "{:?}", self.ranks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_ranks_keep_their_order() {
        let g = ProcessGroup::new(vec![3, 1, 2], 4, Some("tp".into())).unwrap();
        assert_eq!(g.size(), 3);
        assert_eq!(g.ranks(), [3, 1, 2]);
        assert_eq!(g.name(), Some("tp"));
        assert_eq!(g.rank_in_group(3).unwrap(), 0);
        assert_eq!(g.rank_in_group(2).unwrap(), 2);
        assert_eq!(g.to_string(), "tp [3, 1, 2]");
        let unnamed = ProcessGroup::new(vec![0], 1, None).unwrap();
        assert_eq!(unnamed.to_string(), "[0]");
    }

    #[test]
    fn bad_groups_name_the_rank_and_the_world() {
        assert_eq!(
            ProcessGroup::new(vec![], 4, None).unwrap_err(),
            "process group has no ranks: it needs at least one"
        );
        assert_eq!(
            ProcessGroup::new(vec![0, 4], 4, Some("dp".into())).unwrap_err(),
            "rank 4 in process group 'dp' [0, 4] is outside the world of 4 rank(s), 0 to 3"
        );
        assert_eq!(
            ProcessGroup::new(vec![1, 2, 1], 4, None).unwrap_err(),
            "rank 1 is listed twice in process group [1, 2, 1] (world of 4 rank(s))"
        );
        let g = ProcessGroup::new(vec![0, 8], 16, Some("tp".into())).unwrap();
        assert_eq!(
            g.rank_in_group(5).unwrap_err(),
            "rank 5 is not in process group tp [0, 8]"
        );
    }
}
