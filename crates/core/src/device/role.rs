//! [`Role`]: what a core's bytes hold (parameters, gradients, optimizer state, activations,
//! collective buffers), and [`RoleBytes`], bytes counted per role.
//!
//! Every reservation starts as [`Role::Other`] (an op's output, an input the user made) and
//! is given a role by whoever learns what it is: autograd for leaves, their gradients and
//! what a node saves for backward, the collectives for their outputs, the guest for its
//! optimizer's state. A role sticks to a variable: data that replaces a tensor's in place
//! takes the role the old data had.

use std::fmt;
use std::ops::{Index, IndexMut};

use serde::{Deserialize, Serialize};

/// What an allocation holds. The discriminants are the ABI's role codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum Role {
    /// Leaves that require a gradient: a model's parameters (under FSDP, this rank's shards).
    Parameter = 0,
    /// The gradients leaves hold.
    Gradient = 1,
    /// An optimizer's state (moments, momentum buffers, step counts), as the guest marks it.
    OptimizerState = 2,
    /// Tensors recorded nodes keep for backward.
    Activation = 3,
    /// The outputs of collectives: gathered parameters, reduced gradients, exchanged blocks.
    CollectiveBuffer = 4,
    /// Everything else: op outputs and inputs nothing has claimed.
    Other = 5,
}

impl Role {
    /// Every role, in the order tables show them.
    pub const ALL: [Role; 6] = [
        Role::Parameter,
        Role::Gradient,
        Role::OptimizerState,
        Role::Activation,
        Role::CollectiveBuffer,
        Role::Other,
    ];

    /// The role's name in tables: what the bytes are.
    pub fn name(self) -> &'static str {
        match self {
            Role::Parameter => "parameters",
            Role::Gradient => "gradients",
            Role::OptimizerState => "optimizer state",
            Role::Activation => "activations",
            Role::CollectiveBuffer => "collective buffers",
            Role::Other => "other",
        }
    }

    /// The role with ABI code `code`.
    pub fn from_code(code: u8) -> Option<Role> {
        Role::ALL.get(usize::from(code)).copied()
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Bytes per [`Role`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleBytes([u64; 6]);

impl RoleBytes {
    /// Each role with its bytes, in [`Role::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (Role, u64)> + '_ {
        Role::ALL.iter().map(|&r| (r, self[r]))
    }

    /// The sum over every role.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl Index<Role> for RoleBytes {
    type Output = u64;
    fn index(&self, role: Role) -> &u64 {
        &self.0[role as usize]
    }
}

impl IndexMut<Role> for RoleBytes {
    fn index_mut(&mut self, role: Role) -> &mut u64 {
        &mut self.0[role as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_none() {
        for role in Role::ALL {
            assert_eq!(Role::from_code(role as u8), Some(role));
        }
        assert_eq!(Role::from_code(6), None);
    }
}
