//! The guest's handle table: `u32` handles, never 0, with generation tags so that a freed,
//! stale, forged or foreign handle is an error and never someone else's tensor.
//!
//! Layout (see guest-sdk/ABI.md): bits 0..20 hold the slot (never 0), bits 20..31 a tag, the
//! slot's generation plus a per-table salt. Bit 31 stays 0 so a handle is a positive `i32`,
//! never mistaken for an error status.
//!
//! A slot is retired after its last generation, before its tag could repeat, so a handle is
//! never issued twice in one table: a table issues at most [`MAX_HANDLES`] times 2048 handles.

const SLOT_BITS: u32 = 20;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
const TAG_MASK: u32 = (1 << 11) - 1;

/// The most live handles one table holds.
pub const MAX_HANDLES: usize = SLOT_MASK as usize;

/// Generations per slot: one per tag value.
const GENERATIONS: u32 = TAG_MASK + 1;

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Why a handle was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleError {
    /// Zero is never a handle.
    Null,
    /// The slot was never issued in this instance.
    Unknown(u32),
    /// The slot exists but the tag does not match: freed, stale, or from another instance.
    Stale(u32),
    /// The table holds [`MAX_HANDLES`] live values.
    Full,
    /// Every slot has issued all its handles: the instance has made too many tensors over
    /// its life.
    Exhausted,
}

impl std::fmt::Display for HandleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandleError::Null => write!(f, "handle 0 is never issued: no call returns it"),
            HandleError::Unknown(h) => write!(f, "handle {h:#x} was never issued by this instance"),
            HandleError::Stale(h) => write!(
                f,
                "handle {h:#x} is not live: it was freed, or it belongs to another instance"
            ),
            HandleError::Full => write!(
                f,
                "too many live handles ({MAX_HANDLES}); drop tensors you no longer need"
            ),
            HandleError::Exhausted => write!(
                f,
                "this instance has issued every handle it can ({MAX_HANDLES} slots x \
                 {GENERATIONS}); run the work in a new instance (a new cell or run)"
            ),
        }
    }
}

/// Values (tensors, traced tensors) the guest holds, by handle.
pub struct HandleTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    salt: u32,
    live: usize,
}

impl<T> HandleTable<T> {
    /// An empty table. `salt` distinguishes instances; any value works.
    pub fn new(salt: u32) -> HandleTable<T> {
        HandleTable {
            // Slot 0 is a sentinel so no handle is ever 0.
            slots: vec![Slot {
                generation: 0,
                value: None,
            }],
            free: Vec::new(),
            salt: salt & TAG_MASK,
            live: 0,
        }
    }

    fn tag(&self, generation: u32) -> u32 {
        generation.wrapping_add(self.salt) & TAG_MASK
    }

    /// Stores a value and returns its new handle.
    pub fn insert(&mut self, value: T) -> Result<u32, HandleError> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None if self.slots.len() <= MAX_HANDLES => {
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                (self.slots.len() - 1) as u32
            }
            None if self.live == MAX_HANDLES => return Err(HandleError::Full),
            None => return Err(HandleError::Exhausted),
        };
        let entry = &mut self.slots[slot as usize];
        entry.value = Some(value);
        let generation = entry.generation;
        self.live += 1;
        Ok((self.tag(generation) << SLOT_BITS) | slot)
    }

    fn resolve(&self, handle: u32) -> Result<usize, HandleError> {
        if handle == 0 {
            return Err(HandleError::Null);
        }
        let slot = (handle & SLOT_MASK) as usize;
        let entry = self
            .slots
            .get(slot)
            .filter(|_| slot != 0)
            .ok_or(HandleError::Unknown(handle))?;
        if entry.value.is_none() || self.tag(entry.generation) != handle >> SLOT_BITS {
            return Err(HandleError::Stale(handle));
        }
        Ok(slot)
    }

    /// The value behind a live handle.
    pub fn get(&self, handle: u32) -> Result<&T, HandleError> {
        let slot = self.resolve(handle)?;
        Ok(self.slots[slot]
            .value
            .as_ref()
            .expect("resolve checks liveness"))
    }

    /// The value behind a live handle, to replace in place.
    pub fn get_mut(&mut self, handle: u32) -> Result<&mut T, HandleError> {
        let slot = self.resolve(handle)?;
        Ok(self.slots[slot]
            .value
            .as_mut()
            .expect("resolve checks liveness"))
    }

    /// Every live value.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.value.as_ref())
    }

    /// Every live handle and its value.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots.iter().enumerate().filter_map(|(slot, s)| {
            let handle = (self.tag(s.generation) << SLOT_BITS) | slot as u32;
            s.value.as_ref().map(|v| (handle, v))
        })
    }

    /// Every live value, mutably.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|s| s.value.as_mut())
    }

    /// Frees a handle; its slot's next handle gets a new tag, or the slot retires when
    /// every tag has been used.
    pub fn remove(&mut self, handle: u32) -> Result<T, HandleError> {
        let slot = self.resolve(handle)?;
        let entry = &mut self.slots[slot];
        entry.generation += 1;
        if entry.generation < GENERATIONS {
            self.free.push(slot as u32);
        }
        self.live -= 1;
        Ok(entry.value.take().expect("resolve checks liveness"))
    }

    /// Number of live handles.
    pub fn len(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_retires_before_its_tag_repeats_so_no_stale_handle_resolves() {
        let mut table = HandleTable::new(0x123);
        let first = table.insert(0u32).unwrap();
        table.remove(first).unwrap();
        // The same slot, reused for every generation it has, then a new slot: exactly the
        // 2048th reuse is where an 11-bit tag would come back round to `first`.
        let mut issued = vec![first];
        for i in 1..=2 * GENERATIONS {
            let h = table.insert(i).unwrap();
            assert_eq!(
                table.get(first).err(),
                Some(HandleError::Stale(first)),
                "cycle {i}"
            );
            assert!(
                !issued.contains(&h),
                "handle {h:#x} issued twice, at cycle {i}"
            );
            issued.push(h);
            table.remove(h).unwrap();
        }
        let slots: std::collections::BTreeSet<u32> = issued.iter().map(|h| h & SLOT_MASK).collect();
        assert_eq!(slots.len(), 3, "one slot per 2048 handles");
    }

    #[test]
    fn handles_are_positive_i32s_for_every_salt() {
        for salt in [0, 0x7ff, 0x800, u32::MAX] {
            let mut table = HandleTable::new(salt);
            for i in 0..3000u32 {
                let h = table.insert(i).unwrap();
                assert!((h as i32) > 0, "handle {h:#x} with salt {salt:#x}");
                table.remove(h).unwrap();
                assert_eq!(table.get(h).err(), Some(HandleError::Stale(h)));
            }
        }
    }

    #[test]
    fn iteration_yields_the_handles_that_resolve() {
        let mut table = HandleTable::new(0x123);
        let a = table.insert("a").unwrap();
        let b = table.insert("b").unwrap();
        table.remove(a).unwrap();
        let c = table.insert("c").unwrap();
        let mut seen: Vec<(u32, &str)> = table.iter().map(|(h, v)| (h, *v)).collect();
        seen.sort();
        let mut want = vec![(b, "b"), (c, "c")];
        want.sort();
        assert_eq!(seen, want);
        assert!(seen.iter().all(|(h, v)| table.get(*h).ok() == Some(v)));
    }
}
